/* Options: the core's table (name, default, range, description) and the one each layer of the
   cache runtime registers (hooks.h), read once at process start from
   CHROMALLOC_OPTIONS="key=value,key=value".  An unknown key or a bad value prints one warning
   naming it and keeps the default; a key of the cache runtime given to the allocator alone
   says which library has it.  Nothing here allocates (env.c's copy and a hand-written parser).
   docs/options.md is generated from the tables by `chromalloc options`. */
#include "internal.h"
#include <limits.h>
#include <stdlib.h>

static const char* const layout_words[] = { "aware", "ciu", NULL };
const char* const _ca_bool_words[]      = { "0", "1", NULL };
#define bool_words _ca_bool_words

static const ca_option_desc_t table[CA_OPT_COUNT] = {
  [CA_OPT_LAYOUT]        = { "layout", CA_LAYOUT_AWARE, 0, 1, layout_words,
                             "block placement: aware = index-aware size classes, span colours and "
                             "large-object offsets (paper 001); ciu = flat arrays, no colours" },
  [CA_OPT_COLOUR]        = { "colour", 1, 0, 1, bool_words,
                             "colour spans (random per-process start offsets, continued across "
                             "spans of big classes) and start large objects at a random line" },
  [CA_OPT_PURGE_DELAY]   = { "purge_delay", 10, -1, 3600000, NULL,
                             "ms free memory waits before it is returned to the OS, doubled while it keeps being "
                             "reused, up to 64x (0 at once, -1 never)" },
  [CA_OPT_SEGMENT_CACHE] = { "segment_cache", 128, 0, 65536, NULL,
                             "free segments kept mapped for reuse (beyond that they are unmapped), besides the two each thread "
                             "keeps; 0 keeps none" },
  [CA_OPT_THP]           = { "thp", 0, 0, 1, bool_words,
                             "ask for transparent huge pages on segments (MADV_HUGEPAGE)" },
  [CA_OPT_SEED]          = { "seed", 0, 0, LONG_MAX, NULL,
                             "seed of the span colour generator (0: random per process)" },
  [CA_OPT_VERBOSE]       = { "verbose", 0, 0, 2, NULL,
                             "print the options in force at start-up (1) and statistics at exit (2)" },
};

/* the options of the cache runtime's layers begin so: given to the allocator alone, they are
   named as the runtime's, not as unknown */
static const char* const runtime_prefixes[] = { "colours", "colour_", "nightwatch", "hot", NULL };

long _ca_options[CA_OPT_COUNT];

static bool word_eq(const char* a, size_t alen, const char* b) {
  return strlen(b) == alen && memcmp(a, b, alen) == 0;
}

static bool parse_long(const char* s, size_t len, long* out) {
  bool neg = false;
  size_t i = 0;
  if (i < len && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  if (i == len) return false;
  unsigned long v = 0;
  for (; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    if (v > (ULONG_MAX - 9) / 10) return false;
    v = v * 10 + (unsigned long)(s[i] - '0');
  }
  if (v > (unsigned long)LONG_MAX) return false;
  *out = neg ? -(long)v : (long)v;
  return true;
}

static bool parse_value(const ca_option_desc_t* d, const char* v, size_t len, long* out) {
  if (d->words == bool_words) {
    if (word_eq(v, len, "1") || word_eq(v, len, "true") || word_eq(v, len, "on") || word_eq(v, len, "yes")) { *out = 1; return true; }
    if (word_eq(v, len, "0") || word_eq(v, len, "false") || word_eq(v, len, "off") || word_eq(v, len, "no")) { *out = 0; return true; }
    return false;
  }
  if (d->words != NULL) {
    for (long i = 0; d->words[i] != NULL; i++)
      if (word_eq(v, len, d->words[i])) { *out = i; return true; }
    return false;
  }
  return parse_long(v, len, out) && *out >= d->min && *out <= d->max;
}

static void value_text(ca_buf_t* b, const ca_option_desc_t* d, long v) {
  if (d->words != NULL && d->words != bool_words) ca_buf_str(b, d->words[v]);
  else ca_buf_i64(b, v);
}

static void values_text(ca_buf_t* b, const ca_option_desc_t* d) {
  if (d->words == bool_words) { ca_buf_str(b, "0/1, on/off, true/false or yes/no"); return; }
  if (d->words != NULL) {
    for (int i = 0; d->words[i] != NULL; i++) { if (i) ca_buf_char(b, '/'); ca_buf_str(b, d->words[i]); }
    return;
  }
  ca_buf_str(b, "an integer from ");
  ca_buf_i64(b, d->min);
  ca_buf_str(b, " to ");
  ca_buf_i64(b, d->max);
}

/* one table of options and where its values go: the core's, then each layer's */
typedef struct { const ca_option_desc_t* desc; long* values; uint32_t n; const char* layer; } options_t;

static uint32_t tables(options_t* t) {
  uint32_t n = 0;
  t[n++] = (options_t){ table, _ca_options, CA_OPT_COUNT, NULL };
  for (const ca_layer_t* const* l = _ca_layers; *l != NULL && n < 16; l++)
    if ((*l)->noptions) t[n++] = (options_t){ (*l)->options, (*l)->values, (*l)->noptions, (*l)->name };
  return n;
}

static bool runtime_option(const char* key, size_t len) {
  for (const char* const* p = runtime_prefixes; *p != NULL; p++)
    if (len >= strlen(*p) && memcmp(key, *p, strlen(*p)) == 0) return true;
  return false;
}

/* the same key earlier in the string (one warning each) */
static bool seen_before(const char* env, const char* item, size_t klen) {
  for (const char* p = env; p < item;) {
    const char* k = p;
    while (*p && *p != ',') p++;
    while (k < p && *k == ' ') k++;
    size_t n = 0;
    while (k + n < p && k[n] != '=') n++;
    if (n == klen && memcmp(k, item, klen) == 0) return true;
    if (*p == ',') p++;
  }
  return false;
}

void _ca_options_init(void) {
  options_t t[16];
  uint32_t nt = tables(t);
  for (uint32_t k = 0; k < nt; k++)
    for (uint32_t i = 0; i < t[k].n; i++) t[k].values[i] = t[k].desc[i].def;
  const char* env = _ca_env(CA_ENV_OPTIONS);
  if (env == NULL) return;
  char line[320];
  for (const char* p = env; *p;) {
    const char* item = p;
    while (*p && *p != ',') p++;
    size_t len = (size_t)(p - item);
    if (*p == ',') p++;
    while (len > 0 && *item == ' ') { item++; len--; }
    if (len == 0) continue;
    const char* eq = memchr(item, '=', len);
    size_t klen = eq ? (size_t)(eq - item) : len;
    const options_t* o = NULL;
    uint32_t oi = 0;
    for (uint32_t k = 0; k < nt && o == NULL; k++)
      for (uint32_t i = 0; i < t[k].n; i++) if (word_eq(item, klen, t[k].desc[i].name)) { o = &t[k]; oi = i; break; }
    bool warn = !seen_before(env, item, klen);
    ca_buf_t b = ca_buf(line, sizeof line);
    if (o == NULL) {
      if (!warn) continue;
      bool runtime = runtime_option(item, klen);
      ca_buf_str(&b, runtime ? "option '" : "unknown option '");
      ca_buf_mem(&b, item, klen < 64 ? klen : 64);
      ca_buf_str(&b, runtime ? "' is the cache runtime's (libchromalloc-colour.so, or chromalloc run --colour): "
                               "ignored by the allocator alone" : "' ignored");
      _ca_warn(line);
      continue;
    }
    const ca_option_desc_t* d = &o->desc[oi];
    const char* val = eq ? eq + 1 : "1";               /* a bare key means key=1 */
    size_t vlen = eq ? len - klen - 1 : 1;
    long v = 0;
    if (parse_value(d, val, vlen, &v)) { o->values[oi] = v; continue; }
    if (!warn) continue;
    ca_buf_str(&b, "option ");
    ca_buf_str(&b, d->name);
    ca_buf_str(&b, ": bad value '");
    ca_buf_mem(&b, val, vlen < 64 ? vlen : 64);
    ca_buf_str(&b, "' (expected ");
    values_text(&b, d);
    ca_buf_str(&b, "), using the default ");
    value_text(&b, d, d->def);
    _ca_warn(line);
  }
  if (_ca_options[CA_OPT_VERBOSE] > 0) {
    char buf[1024];
    ca_buf_t b = ca_buf(buf, sizeof buf);
    ca_buf_str(&b, "options ");
    _ca_options_json(&b);
    _ca_warn(buf);
  }
}

long _ca_option_by_name(const char* name, bool* found) {
  options_t t[16];
  uint32_t nt = tables(t);
  for (uint32_t k = 0; k < nt && name != NULL; k++)
    for (uint32_t i = 0; i < t[k].n; i++)
      if (strcmp(name, t[k].desc[i].name) == 0) { *found = true; return t[k].values[i]; }
  *found = false;
  return -1;
}

/* {"layout":"aware","purge_delay":10,...} */
void _ca_options_json(ca_buf_t* b) {
  options_t t[16];
  uint32_t nt = tables(t);
  ca_buf_char(b, '{');
  bool first = true;
  for (uint32_t k = 0; k < nt; k++)
    for (uint32_t i = 0; i < t[k].n; i++) {
      const ca_option_desc_t* d = &t[k].desc[i];
      if (!first) ca_buf_char(b, ',');
      first = false;
      ca_buf_char(b, '"');
      ca_buf_str(b, d->name);
      ca_buf_str(b, "\":");
      bool quoted = d->words != NULL && d->words != bool_words;
      if (quoted) ca_buf_char(b, '"');
      value_text(b, d, t[k].values[i]);
      if (quoted) ca_buf_char(b, '"');
    }
  ca_buf_char(b, '}');
}

/* The tables as tab-separated lines "name, default, values, description, layer" (chromalloc
   options; the layer is empty for the core's). */
void _ca_options_describe(ca_buf_t* b) {
  options_t t[16];
  uint32_t nt = tables(t);
  for (uint32_t k = 0; k < nt; k++)
    for (uint32_t i = 0; i < t[k].n; i++) {
      const ca_option_desc_t* d = &t[k].desc[i];
      ca_buf_str(b, d->name);
      ca_buf_char(b, '\t');
      value_text(b, d, d->def);
      ca_buf_char(b, '\t');
      values_text(b, d);
      ca_buf_char(b, '\t');
      ca_buf_str(b, d->desc);
      ca_buf_char(b, '\t');
      if (t[k].layer) ca_buf_str(b, t[k].layer);
      ca_buf_char(b, '\n');
    }
}
