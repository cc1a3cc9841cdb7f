/* Options: one table (name, default, range, description), read once at process start from
   CHROMALLOC_OPTIONS="key=value,key=value".  An unknown key or a bad value prints one warning
   naming it and keeps the default; nothing here allocates (getenv and a hand-written parser).
   docs/options.md is generated from this table by `chromalloc options`. */
#include "../core/internal.h"
#include "../core/buf.h"
#include <limits.h>
#include <stdlib.h>

typedef struct ca_option_desc_s {
  const char*        name;
  long               def, min, max;
  const char* const* words;        /* enumerated values (index = value), or NULL for integers */
  const char*        desc;
} ca_option_desc_t;

static const char* const layout_words[] = { "aware", "ciu", NULL };
static const char* const bool_words[]   = { "0", "1", NULL };

static const ca_option_desc_t table[CA_OPT_COUNT] = {
  [CA_OPT_LAYOUT]        = { "layout", CA_LAYOUT_AWARE, 0, 1, layout_words,
                             "block placement: aware = index-aware size classes, span colours and "
                             "large-object offsets (paper 001); ciu = flat arrays, no colours" },
  [CA_OPT_COLOUR]        = { "colour", 1, 0, 1, bool_words,
                             "colour spans (random per-process start offsets, continued across "
                             "spans of big classes) and start large objects at a random line" },
  [CA_OPT_COLOURS]       = { "colours", 1, 0, 1, bool_words,
                             "the colour layer: memory of chosen L2 page colours (chromalloc_colours); "
                             "0: coloured requests get ordinary memory" },
  [CA_OPT_COLOUR_POOL]   = { "colour_pool", 4, 1, 1024, NULL,
                             "MiB of classified pages kept in stock per colour set (grows to the biggest "
                             "coloured request seen, up to 64 MiB)" },
  [CA_OPT_COLOUR_RESERVE] = { "colour_reserve", 1, 0, 1, bool_words,
                             "the program's first coloured allocation from a slice of at most 1/4 at "
                             "either end of the L2 reserves that slice as a pollute buffer "
                             "(chromalloc_colours_reserve): ordinary memory recorded since start-up is "
                             "moved out of its colours; 0: only an explicit call reserves" },
  [CA_OPT_COLOUR_WORKER] = { "colour_worker", 100, 1, 100, NULL,
                             "percent of one CPU the colour layer's worker may take on average once the "
                             "layer is ready (after one second's allowance; not while "
                             "chromalloc_colours_prepare waits): less CPU, slower stocking; 100: no limit" },
  [CA_OPT_COLOUR_AUDIT]  = { "colour_audit", 0, 0, 1, bool_words,
                             "1: a small slice's pool (1/4 of the colours or less) is audited by what its pages do "
                             "to one another in the L2, and pages for the other colours against it (3-5 times the "
                             "worker's CPU, no purer pools measured on the Zen 4 host); 0: the eviction sets' word "
                             "alone (docs/colours.md, \"The slice audit\")" },
  [CA_OPT_PURGE_DELAY]   = { "purge_delay", 10, -1, 3600000, NULL,
                             "ms before free memory is returned to the OS (0 at once, -1 never)" },
  [CA_OPT_SEGMENT_CACHE] = { "segment_cache", 32, 0, 65536, NULL,
                             "free segments kept mapped for reuse (beyond that they are unmapped)" },
  [CA_OPT_THP]           = { "thp", 0, 0, 1, bool_words,
                             "ask for transparent huge pages on segments (MADV_HUGEPAGE)" },
  [CA_OPT_SEED]          = { "seed", 0, 0, LONG_MAX, NULL,
                             "seed of the span colour generator (0: random per process)" },
  [CA_OPT_VERBOSE]       = { "verbose", 0, 0, 2, NULL,
                             "print the options in force at start-up (1) and statistics at exit (2)" },
  [CA_OPT_NIGHTWATCH]    = { "nightwatch", 1, 0, 1, bool_words,
                             "NightWatch: learn which allocation contexts pollute the cache and give their new chunks pages of 1/8 of the L2 colours (the colour "
                             "layer); 0 turns it off (see docs/nightwatch.md)" },
  [CA_OPT_NIGHTWATCH_MONITOR] = { "nightwatch_monitor", 0, 0, 1, bool_words,
                             "NightWatch monitors every chunk instead of adaptive sampling (to check "
                             "predictions; slow)" },
  [CA_OPT_NIGHTWATCH_BUDGET] = { "nightwatch_budget", 5, 0, 1000, NULL,
                             "NightWatch's monitoring (page protection, faults, chunks placed apart) may "
                             "take at most this per mille of the run time (5 = 0.5%; a context's second verdict, "
                             "after a first that found a polluter, four times that; its first chunk of the L2's "
                             "size or more twice that)" },
  [CA_OPT_NIGHTWATCH_PROTECT] = { "nightwatch_protect", 1, 0, 1, bool_words,
                             "once NightWatch confines a polluter, move the pages of open memory (spans and "
                             "objects up to the L2's size, 4 times the L2 in all, oldest first) that lie in "
                             "the polluter's colours to the other 7/8" },
  [CA_OPT_NIGHTWATCH_SMALL] = { "nightwatch_small", 1, 0, 1, bool_words,
                             "NightWatch judges chunks below the L2 too, sampled by bytes (one per L2/8 "
                             "bytes of a context's allocations, each on pages of its own, judged together "
                             "per context), and serves a span size class (up to 64 KiB) from restrictive "
                             "spans while its sampled contexts are polluters; with 0, span-class chunks "
                             "of a page or more are named one by one" },
  [CA_OPT_NIGHTWATCH_DELAY] = { "nightwatch_delay", 1000, 0, 3600000, NULL,
                             "NightWatch starts the colour layer (seconds of one CPU's time to find the "
                             "colours) only once the process has run this many ms: a shorter program never "
                             "pays for it, and its restrictive chunks until then are ordinary memory" },
};

long _ca_options[CA_OPT_COUNT];

const char* _ca_option_name(ca_option_t o) { return table[o].name; }

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

void _ca_options_init(void) {
  for (int i = 0; i < CA_OPT_COUNT; i++) _ca_options[i] = table[i].def;
  const char* env = getenv("CHROMALLOC_OPTIONS");
  if (env == NULL) return;
  uint32_t warned = 0;                                 /* one warning per option */
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
    int o = -1;
    for (int i = 0; i < CA_OPT_COUNT; i++) if (word_eq(item, klen, table[i].name)) o = i;
    ca_buf_t b = ca_buf(line, sizeof line);
    if (o < 0) {
      ca_buf_str(&b, "unknown option '");
      ca_buf_mem(&b, item, klen < 64 ? klen : 64);
      ca_buf_str(&b, "' ignored");
      _ca_warn(line);
      continue;
    }
    const char* val = eq ? eq + 1 : "1";               /* a bare key means key=1 */
    size_t vlen = eq ? len - klen - 1 : 1;
    long v = 0;
    if (parse_value(&table[o], val, vlen, &v)) { _ca_options[o] = v; continue; }
    if (warned & (1u << o)) continue;
    warned |= 1u << o;
    ca_buf_str(&b, "option ");
    ca_buf_str(&b, table[o].name);
    ca_buf_str(&b, ": bad value '");
    ca_buf_mem(&b, val, vlen < 64 ? vlen : 64);
    ca_buf_str(&b, "' (expected ");
    values_text(&b, &table[o]);
    ca_buf_str(&b, "), using the default ");
    value_text(&b, &table[o], table[o].def);
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
  for (int i = 0; i < CA_OPT_COUNT; i++)
    if (name != NULL && strcmp(name, table[i].name) == 0) { *found = true; return _ca_options[i]; }
  *found = false;
  return -1;
}

/* {"layout":"aware","span_colours":16,...} */
void _ca_options_json(ca_buf_t* b) {
  ca_buf_char(b, '{');
  for (int i = 0; i < CA_OPT_COUNT; i++) {
    if (i) ca_buf_char(b, ',');
    ca_buf_char(b, '"');
    ca_buf_str(b, table[i].name);
    ca_buf_str(b, "\":");
    bool quoted = table[i].words != NULL && table[i].words != bool_words;
    if (quoted) ca_buf_char(b, '"');
    value_text(b, &table[i], _ca_options[i]);
    if (quoted) ca_buf_char(b, '"');
  }
  ca_buf_char(b, '}');
}

/* The table as tab-separated lines "name, default, values, description" (chromalloc options). */
void _ca_options_describe(ca_buf_t* b) {
  for (int i = 0; i < CA_OPT_COUNT; i++) {
    const ca_option_desc_t* d = &table[i];
    ca_buf_str(b, d->name);
    ca_buf_char(b, '\t');
    value_text(b, d, d->def);
    ca_buf_char(b, '\t');
    values_text(b, d);
    ca_buf_char(b, '\t');
    ca_buf_str(b, d->desc);
    ca_buf_char(b, '\n');
  }
}
