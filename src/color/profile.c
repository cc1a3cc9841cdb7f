/* The machine profile: what a calibration found, as JSON, written by `chromalloc calibrate` and
   read back by the library so that it need not rediscover the number of colours, the ways and
   the method in every process.  It outlives a reboot; the eviction sets do not (they are
   frames), and go to the set file instead (setfile.c).

   Path: $CHROMALLOC_PROFILE, else $XDG_CACHE_HOME/chromalloc/profile.json, else
   $HOME/.cache/chromalloc/profile.json.  A profile made on another machine (_ca_machine_key) is
   ignored. */
#include "colour.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char* method_name(ca_colour_method_t m) {
  switch (m) {
    case CA_METHOD_ADDRESS_BITS: return "address-bits";
    case CA_METHOD_PAGEMAP: return "pagemap";
    case CA_METHOD_TIMING: return "timing";
    default: return "none";
  }
}

static void fixed2(ca_buf_t* b, double v) { ca_buf_fixed(b, (int64_t)(v * 100 + (v >= 0 ? 0.5 : -0.5)), 2); }
static void key(ca_buf_t* b, const char* k) { ca_buf_str(b, ",\""); ca_buf_str(b, k); ca_buf_str(b, "\":"); }
static void kv_u(ca_buf_t* b, const char* k, uint64_t v) { key(b, k); ca_buf_u64(b, v); }
static void kv_f(ca_buf_t* b, const char* k, double v) { key(b, k); fixed2(b, v); }
static void kv_b(ca_buf_t* b, const char* k, bool v) { key(b, k); ca_buf_str(b, v ? "true" : "false"); }
static void kv_s(ca_buf_t* b, const char* k, const char* v) { key(b, k); ca_buf_char(b, '"'); ca_buf_str(b, v); ca_buf_char(b, '"'); }

void _ca_calibration_json(const ca_calibration_t* c, ca_buf_t* b) {
  ca_buf_str(b, "{\"profile_version\":1");
  kv_s(b, "cpu", c->cpu);
  kv_b(b, "usable", c->usable);
  kv_s(b, "reason", c->reason);
  kv_u(b, "level", c->level);
  kv_s(b, "method", method_name(c->method));
  kv_u(b, "colours", c->colours);
  kv_u(b, "ways", c->ways);
  kv_u(b, "line", c->line);
  kv_u(b, "measured_size", c->measured_size);
  kv_u(b, "sysfs_size", c->sysfs_size);
  kv_u(b, "sysfs_ways", c->sysfs_ways);
  kv_u(b, "expected_colours", c->expected_colours);
  kv_u(b, "hit_ticks", c->hit_ticks);
  kv_u(b, "miss_ticks", c->miss_ticks);
  kv_u(b, "threshold_ticks", c->threshold);
  kv_u(b, "ratio_pct", c->ratio_pct);
  kv_u(b, "set_ratio_pct", c->set_ratio_pct);
  kv_u(b, "passes", c->passes);
  kv_f(b, "ticks_per_us", c->ticks_per_us);
  kv_b(b, "thp_backed", c->thp_backed);
  kv_b(b, "address_bits_valid", c->address_bits_valid);
  kv_b(b, "pagemap_readable", c->pagemap_readable);
  kv_b(b, "pagemap_valid", c->pagemap_valid);
  kv_u(b, "set_builds", c->discovery.set_builds);
  kv_u(b, "set_failures", c->discovery.set_failures);
  kv_u(b, "duplicate_sets", c->discovery.duplicates);
  kv_f(b, "set_build_ms", c->discovery.set_builds ? (double)c->discovery.set_build_ns / 1e6 / (double)c->discovery.set_builds : 0);
  kv_f(b, "discover_s", (double)c->discovery.discover_ns / 1e9);
  kv_f(b, "classify_restricted_us", c->classify_restricted_us);
  kv_f(b, "classify_all_us", c->classify_all_us);
  kv_f(b, "pool_4mib_s", c->pool_4mib_s);
  kv_f(b, "agreement", c->agreement);
  kv_u(b, "agreement_pages", c->agreement_pages);
  kv_f(b, "unclassified", c->unclassified);
  kv_f(b, "seconds", c->seconds);
  ca_buf_str(b, "}\n");
}

/* ---- reading: our own flat format, no general JSON --------------------------------------- */

static const char* find(const char* json, const char* k) {
  char pat[64];
  ca_buf_t b = ca_buf(pat, sizeof pat);
  ca_buf_char(&b, '"'); ca_buf_str(&b, k); ca_buf_str(&b, "\":");
  const char* at = strstr(json, pat);
  return at ? at + b.len : NULL;
}
static uint64_t get_u(const char* json, const char* k) {
  const char* v = find(json, k);
  uint64_t x = 0;
  if (v) while (*v >= '0' && *v <= '9') x = x * 10 + (uint64_t)(*v++ - '0');
  return x;
}
static double get_f(const char* json, const char* k) {
  const char* v = find(json, k);
  if (!v) return 0;
  double sign = 1, x = 0, scale = 0;
  if (*v == '-') { sign = -1; v++; }
  for (; (*v >= '0' && *v <= '9') || *v == '.'; v++) {
    if (*v == '.') { scale = 1; continue; }
    x = x * 10 + (*v - '0');
    if (scale > 0) scale *= 10;
  }
  return sign * (scale > 0 ? x / scale : x);
}
static bool get_b(const char* json, const char* k) { const char* v = find(json, k); return v && *v == 't'; }
static void get_s(const char* json, const char* k, char* out, size_t len) {
  const char* v = find(json, k);
  size_t n = 0;
  if (v && *v == '"') for (v++; *v && *v != '"' && n + 1 < len; v++) out[n++] = *v;
  out[n] = 0;
}

bool _ca_calibration_parse(ca_calibration_t* c, const char* json) {
  memset(c, 0, sizeof *c);
  if (get_u(json, "profile_version") != 1) return false;
  get_s(json, "cpu", c->cpu, sizeof c->cpu);
  get_s(json, "reason", c->reason, sizeof c->reason);
  char m[32];
  get_s(json, "method", m, sizeof m);
  c->method = strcmp(m, "timing") == 0 ? CA_METHOD_TIMING : strcmp(m, "pagemap") == 0 ? CA_METHOD_PAGEMAP
            : strcmp(m, "address-bits") == 0 ? CA_METHOD_ADDRESS_BITS : CA_METHOD_NONE;
  c->usable = get_b(json, "usable");
  c->level = (uint32_t)get_u(json, "level");
  c->colours = (uint32_t)get_u(json, "colours");
  c->ways = (uint32_t)get_u(json, "ways");
  c->line = (uint32_t)get_u(json, "line");
  c->measured_size = get_u(json, "measured_size");
  c->sysfs_size = (uint32_t)get_u(json, "sysfs_size");
  c->sysfs_ways = (uint32_t)get_u(json, "sysfs_ways");
  c->expected_colours = (uint32_t)get_u(json, "expected_colours");
  c->hit_ticks = (uint32_t)get_u(json, "hit_ticks");
  c->miss_ticks = (uint32_t)get_u(json, "miss_ticks");
  c->threshold = (uint32_t)get_u(json, "threshold_ticks");
  c->ratio_pct = (uint32_t)get_u(json, "ratio_pct");
  c->set_ratio_pct = (uint32_t)get_u(json, "set_ratio_pct");
  c->passes = (uint32_t)get_u(json, "passes");
  c->ticks_per_us = get_f(json, "ticks_per_us");
  c->agreement = get_f(json, "agreement");
  c->classify_restricted_us = get_f(json, "classify_restricted_us");
  return c->colours <= CA_COLOURS_MAX && c->ways <= CA_WAYS_MAX;
}

/* ---- paths ---------------------------------------------------------------------------------- */

/* The profile path into out; false when there is no home to put it in. */
bool _ca_profile_path(char* out, size_t len) {
  ca_buf_t b = ca_buf(out, len);
  const char* env = _ca_env(CA_ENV_PROFILE);
  if (env && env[0]) { ca_buf_str(&b, env); return b.len < len; }
  const char* xdg = _ca_env(CA_ENV_XDG_CACHE_HOME);
  const char* home = _ca_env(CA_ENV_HOME);
  if (xdg && xdg[0]) ca_buf_str(&b, xdg);
  else if (home && home[0]) { ca_buf_str(&b, home); ca_buf_str(&b, "/.cache"); }
  else return false;
  ca_buf_str(&b, "/chromalloc/profile.json");
  return b.len < len;
}

bool _ca_profile_save(const ca_calibration_t* c, const char* path) {
  char dir[512];
  size_t n = strlen(path);
  if (n >= sizeof dir) return false;
  memcpy(dir, path, n + 1);
  for (char* s = dir + 1; *s; s++)                       /* mkdir -p the parent */
    if (*s == '/') { *s = 0; mkdir(dir, 0755); *s = '/'; }
  char text[4096];
  ca_buf_t b = ca_buf(text, sizeof text);
  _ca_calibration_json(c, &b);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write(fd, text, b.len) == (ssize_t)b.len;
  close(fd);
  return ok;
}

/* The saved profile for this CPU, if any. */
bool _ca_profile_load(ca_calibration_t* c) {
  char path[512], text[4096], cpu[sizeof c->cpu];
  if (!_ca_profile_path(path, sizeof path)) return false;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = 0;
  if (!_ca_calibration_parse(c, text)) return false;
  _ca_machine_key(cpu, sizeof cpu);
  return strcmp(cpu, c->cpu) == 0;
}

/* ---- the readable summary ------------------------------------------------------------------ */

static void human_bytes(ca_buf_t* b, uint64_t v) {
  if (v >= (1u << 20)) { fixed2(b, (double)v / (1 << 20)); ca_buf_str(b, " MiB"); }
  else { ca_buf_u64(b, v >> 10); ca_buf_str(b, " KiB"); }
}

void _ca_calibration_summary(const ca_calibration_t* c, ca_buf_t* b) {
  ca_buf_str(b, "chromalloc calibrate: ");
  ca_buf_str(b, c->cpu);
  ca_buf_str(b, "\n  level: L"); ca_buf_u64(b, c->level);
  ca_buf_str(b, ", sysfs/cpuid say "); human_bytes(b, c->sysfs_size);
  ca_buf_str(b, ", "); ca_buf_u64(b, c->sysfs_ways); ca_buf_str(b, " ways, ");
  ca_buf_u64(b, c->line); ca_buf_str(b, " B lines: ");
  ca_buf_u64(b, c->expected_colours); ca_buf_str(b, " page colours expected");
  ca_buf_str(b, "\n  probe: 64-line chase of a reference page: ");
  ca_buf_u64(b, c->hit_ticks); ca_buf_str(b, " ticks in the level, ");
  ca_buf_u64(b, c->miss_ticks); ca_buf_str(b, " after an eviction set (");
  fixed2(b, c->ticks_per_us); ca_buf_str(b, " ticks/us)");
  ca_buf_str(b, "\n  rule: evicted when the chase takes more than "); ca_buf_u64(b, c->ratio_pct);
  ca_buf_str(b, "% of a quiet chase measured alongside (eviction sets measure ");
  ca_buf_u64(b, c->set_ratio_pct); ca_buf_str(b, "% read ");
  ca_buf_u64(b, c->passes); ca_buf_str(b, " times a test; the core clock drifts, ticks do not)");
  ca_buf_str(b, "\n  address bits in huge pages: ");
  ca_buf_str(b, !c->thp_backed ? "no huge pages given" : c->address_bits_valid ? "valid" : "huge pages given, but not physically contiguous for the cache (rejected by timing)");
  ca_buf_str(b, "\n  pagemap frame numbers: ");
  ca_buf_str(b, !c->pagemap_readable ? "not readable" : c->pagemap_valid ? "valid" : "readable, but do not predict the colour (rejected by timing)");
  ca_buf_str(b, "\n  method: "); ca_buf_str(b, method_name(c->method));
  if (c->colours) {
    ca_buf_str(b, "\n  colours: "); ca_buf_u64(b, c->colours); ca_buf_str(b, " found, ");
    ca_buf_u64(b, c->ways); ca_buf_str(b, " ways: the level measures "); human_bytes(b, c->measured_size);
    ca_buf_str(b, " ("); ca_buf_u64(b, c->discovery.set_builds); ca_buf_str(b, " eviction sets built, ");
    ca_buf_u64(b, c->discovery.set_failures); ca_buf_str(b, " failed, ");
    ca_buf_u64(b, c->discovery.duplicates); ca_buf_str(b, " dropped as duplicates or spanning colours; ");
    fixed2(b, c->discovery.set_builds ? (double)c->discovery.set_build_ns / 1e6 / (double)c->discovery.set_builds : 0);
    ca_buf_str(b, " ms per set; discovery "); fixed2(b, (double)c->discovery.discover_ns / 1e9); ca_buf_str(b, " s)");
    ca_buf_str(b, "\n  classify a page: "); fixed2(b, c->classify_restricted_us);
    ca_buf_str(b, " us against 1/8 of the colours, "); fixed2(b, c->classify_all_us);
    ca_buf_str(b, " us against all; unclassified "); fixed2(b, c->unclassified * 100); ca_buf_str(b, "%");
    if (c->pool_4mib_s != 0) {
      ca_buf_str(b, "\n  4 MiB pool of 1/8-of-level pages: ");
      if (c->pool_4mib_s > 0) { fixed2(b, c->pool_4mib_s); ca_buf_str(b, " s"); } else ca_buf_str(b, "not reached");
    }
    if (c->agreement_pages) {
      ca_buf_str(b, "\n  two independent calibrations agree on "); fixed2(b, c->agreement * 100);
      ca_buf_str(b, "% of "); ca_buf_u64(b, c->agreement_pages); ca_buf_str(b, " pages classified by both");
    }
  }
  if (c->sets_written) {
    char path[512];
    ca_buf_str(b, "\n  eviction sets of every colour shared with this user's processes: ");
    ca_buf_str(b, _ca_setfile_path(path, sizeof path) ? path : "?");
  }
  ca_buf_str(b, "\n  verdict: ");
  if (c->usable) ca_buf_str(b, "colours of this level can be controlled here");
  else { ca_buf_str(b, "colours cannot be controlled here: "); ca_buf_str(b, c->reason); }
  ca_buf_str(b, "\n  took "); fixed2(b, c->seconds); ca_buf_str(b, " s\n");
}
