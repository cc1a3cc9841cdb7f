/* Statistics: every counter of the core lives in `_ca_stats` (declared in internal.h); this
   file settles the per-heap counters and writes the one JSON document (CHROMALLOC_STATS=path at
   exit, chromalloc_stats_json/chromalloc_stats_write on demand), with a section for each layer
   of the cache runtime that has one (hooks.h).

   Per-class counts cost nothing on the fast paths: a span remembers how many blocks its `free`
   list held when it was installed (`installed`) and its `used` count when last accounted
   (`used_seen`); each refill or retire settles the difference into the heap, and a heap flushes
   to the global atomics once a class has moved by 64 blocks, and at thread exit.  Allocation
   totals are therefore exact; `live` is exact for the reporting thread and flushed heaps, and
   `peak` is the highest flushed `live`, i.e. exact to within 64 blocks per thread and class. */
#include "internal.h"
#include "../../include/chromalloc.h"
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

ca_stats_t _ca_stats;

#define CA_FLUSH_BLOCKS 64

static void flush_class(ca_heap_t* h, uint32_t c) {
  ca_class_count_t* k = &h->counts[c];
  if (k->allocs) _ca_stat_inc(&_ca_stats.allocs[c], k->allocs);
  if (k->live_delta) _ca_stat_add(&_ca_stats.live[c], k->live_delta, &_ca_stats.peak[c]);
  k->allocs = 0;
  k->live_delta = 0;
}

void _ca_stats_span_settle(ca_heap_t* h, ca_span_t* s, uint32_t remaining) {
  ca_class_count_t* k = &h->counts[s->sclass];
  uint32_t handed = s->installed - remaining;
  k->allocs += handed;
  if (h->flavour != 0 && handed != 0) {          /* how much of a flavour is ordinary memory */
    _ca_stat_inc(&_ca_stats.flavour_blocks, handed);
    if (s->flavour == 0) _ca_stat_inc(&_ca_stats.flavour_blocks_ordinary, handed);
  }
  s->installed = (uint16_t)remaining;
  k->live_delta += (int64_t)s->used - (int64_t)s->used_seen;
  s->used_seen = (uint16_t)s->used;
  if (k->live_delta >= CA_FLUSH_BLOCKS || k->live_delta <= -CA_FLUSH_BLOCKS) flush_class(h, s->sclass);
}

void _ca_stats_heap_flush(ca_heap_t* h) {
  for (uint32_t c = 0; c < CA_CLASS_MAX; c++) flush_class(h, c);
}

/* ---- the JSON document -------------------------------------------------------------------- */

static void key(ca_buf_t* b, const char* k) { ca_buf_char(b, '"'); ca_buf_str(b, k); ca_buf_str(b, "\":"); }
static void kv_i(ca_buf_t* b, const char* k, int64_t v, bool comma) { key(b, k); ca_buf_i64(b, v); if (comma) ca_buf_char(b, ','); }
static void kv_s(ca_buf_t* b, const char* k, const char* v, bool comma) {
  key(b, k); ca_buf_char(b, '"'); ca_buf_str(b, v); ca_buf_char(b, '"'); if (comma) ca_buf_char(b, ',');
}
static int64_t ld(_Atomic(int64_t)* v) { return atomic_load_explicit(v, ca_relaxed); }
static uint64_t ldu(_Atomic(uint64_t)* v) { return atomic_load_explicit(v, ca_relaxed); }

static uint32_t list_length(const ca_block_t* b) {
  uint32_t n = 0;
  for (; b != NULL; b = b->next) n++;
  return n;
}

/* Per-class totals: flushed globals + unflushed heap counters + the calling thread's spans. */
static void class_totals(uint64_t* allocs, int64_t* live, int64_t* peak) {
  for (uint32_t c = 0; c < CA_CLASS_MAX; c++) {
    allocs[c] = ldu(&_ca_stats.allocs[c]);
    live[c] = ld(&_ca_stats.live[c]);
    peak[c] = ld(&_ca_stats.peak[c]);
  }
  for (ca_heap_t* h = _ca_heap_first(); h != NULL; h = h->next_heap) {
    if (!h->in_use) continue;
    for (uint32_t c = 0; c < CA_CLASS_MAX; c++) {
      allocs[c] += h->counts[c].allocs;
      live[c] += h->counts[c].live_delta;
    }
  }
  ca_heap_t* self = _ca_heap;
  if (self != &_ca_heap_empty) {
    for (uint32_t q = 0; q <= CA_CLASS_FULL; q++)
      for (ca_span_t* s = self->queues[q].first; s != NULL; s = s->next) {
        allocs[s->sclass] += s->installed - list_length(s->free);
        live[s->sclass] += (int64_t)s->used - (int64_t)s->used_seen;
      }
  }
  for (uint32_t c = 0; c < CA_CLASS_MAX; c++) if (live[c] > peak[c]) peak[c] = live[c];
}

void _ca_stats_json(ca_buf_t* b) {
  static uint64_t allocs[CA_CLASS_MAX];
  static int64_t live[CA_CLASS_MAX], peak[CA_CLASS_MAX];
  class_totals(allocs, live, peak);
  ca_buf_str(b, "{\"chromalloc\":{");
  kv_s(b, "version", CHROMALLOC_VERSION, true);
  kv_i(b, "pid", getpid(), false);
  ca_buf_str(b, "},\"options\":");
  _ca_options_json(b);
  ca_buf_str(b, ",\"machine\":{");
  kv_s(b, "source", _ca_machine.source ? _ca_machine.source : "none", true);
  key(b, "caches");
  ca_buf_char(b, '[');
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) {
    const ca_cache_level_t* l = &_ca_machine.levels[i];
    if (i) ca_buf_char(b, ',');
    ca_buf_char(b, '{');
    kv_i(b, "level", l->level, true);
    kv_i(b, "size", l->size, true);
    kv_i(b, "ways", l->ways, true);
    kv_i(b, "line", l->line, true);
    kv_i(b, "sets", l->sets, true);
    kv_i(b, "shared_cpus", l->shared_cpus, false);
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "],\"l1d_sets_used_for_layout\":");
  ca_buf_u64(b, _ca_machine.l1d.sets);
  ca_buf_str(b, "},\"size_classes\":[");
  uint64_t total_allocs = 0;
  int64_t total_live_bytes = 0;
  bool first = true;
  for (uint32_t c = 0; c < _ca_class_count; c++) {
    total_allocs += allocs[c];
    total_live_bytes += live[c] * (int64_t)_ca_class_size[c];
    if (allocs[c] == 0 && live[c] == 0) continue;
    if (!first) ca_buf_char(b, ',');
    first = false;
    ca_buf_char(b, '{');
    kv_i(b, "class", c, true);
    kv_i(b, "block_size", _ca_class_size[c], true);
    kv_i(b, "allocations", (int64_t)allocs[c], true);
    kv_i(b, "live", live[c], true);
    kv_i(b, "peak", peak[c], false);
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "],\"totals\":{");
  kv_i(b, "small_allocations", (int64_t)total_allocs, true);
  kv_i(b, "small_live_bytes", total_live_bytes, true);
  kv_i(b, "large_allocations", (int64_t)ldu(&_ca_stats.large_allocs), true);
  kv_i(b, "flavour_blocks", (int64_t)ldu(&_ca_stats.flavour_blocks), true);
  kv_i(b, "flavour_blocks_ordinary", (int64_t)ldu(&_ca_stats.flavour_blocks_ordinary), false);
  ca_buf_str(b, "},\"large\":{");
  kv_i(b, "allocations", (int64_t)ldu(&_ca_stats.large_allocs), true);
  kv_i(b, "live", ld(&_ca_stats.large_live), true);
  kv_i(b, "live_bytes", ld(&_ca_stats.large_live_bytes), true);
  kv_i(b, "peak_bytes", ld(&_ca_stats.large_peak_bytes), true);
  kv_i(b, "cache_reuse", (int64_t)ldu(&_ca_stats.large_cached_reuse), true);
  kv_i(b, "kept_reuse", (int64_t)ldu(&_ca_stats.large_kept_reuse), false);
  ca_buf_str(b, "},\"segments\":{");
  kv_i(b, "current", ld(&_ca_stats.segments), true);
  kv_i(b, "peak", ld(&_ca_stats.segments_peak), true);
  kv_i(b, "mapped_total", (int64_t)ldu(&_ca_stats.segments_mapped), true);
  kv_i(b, "reservations", (int64_t)ldu(&_ca_stats.reservations), true);
  kv_i(b, "abandoned", (int64_t)ldu(&_ca_stats.segments_abandoned), true);
  kv_i(b, "reclaimed", (int64_t)ldu(&_ca_stats.segments_reclaimed), true);
  kv_i(b, "slot_reuse", (int64_t)ldu(&_ca_stats.slot_reuse), false);
  ca_buf_str(b, "},\"memory\":{");
  kv_i(b, "mapped_bytes", ld(&_ca_stats.mapped_bytes), true);
  kv_i(b, "mapped_peak_bytes", ld(&_ca_stats.mapped_peak), true);
  kv_i(b, "purges", (int64_t)ldu(&_ca_stats.purges), true);
  kv_i(b, "purged_bytes", (int64_t)ldu(&_ca_stats.purged_bytes), true);
  kv_i(b, "cache_purge_pace", (int64_t)_ca_segment_cache_pace(), true);
  kv_i(b, "rss_bytes", (int64_t)_ca_os_rss_now(), true);
  kv_i(b, "rss_peak_bytes", (int64_t)_ca_os_rss_peak(), false);
  ca_buf_str(b, "},\"threads\":{");
  kv_i(b, "heaps_started", (int64_t)ldu(&_ca_stats.threads), true);
  kv_i(b, "heaps_reused", (int64_t)ldu(&_ca_stats.heaps_reused), false);
  ca_buf_str(b, "}");
  for (const ca_layer_t* const* l = _ca_layers; *l != NULL; l++) {   /* the cache runtime's sections */
    if ((*l)->stats == NULL) continue;
    ca_buf_str(b, ",\"");
    ca_buf_str(b, (*l)->name);
    ca_buf_str(b, "\":");
    (*l)->stats(b);
  }
  ca_buf_str(b, ",\"checks\":{");
  kv_i(b, "double_free_confirmations", (int64_t)ldu(&_ca_stats.double_frees_checked), false);
  ca_buf_str(b, "}}\n");
}

__attribute__((visibility("default"))) size_t chromalloc_stats_json(char* buf, size_t size) {
  _ca_ensure_init();
  ca_buf_t b = ca_buf(buf, size);
  _ca_stats_json(&b);
  return b.len;
}

static char      report[1 << 18];
static ca_lock_t report_lock;

__attribute__((visibility("default"))) int chromalloc_stats_write(const char* path) {
  _ca_ensure_init();
  char name[512];
  ca_buf_t pb = ca_buf(name, sizeof name);
  for (const char* p = path; *p; p++) {
    if (p[0] == '%' && p[1] == 'p') { ca_buf_u64(&pb, (uint64_t)getpid()); p++; }
    else ca_buf_char(&pb, *p);
  }
  if (pb.len >= sizeof name) { errno = ENAMETOOLONG; return -1; }
  _ca_lock(&report_lock);
  ca_buf_t b = ca_buf(report, sizeof report);
  _ca_stats_json(&b);
  int fd = _ca_os_open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = -1;
  if (fd < 0) errno = -fd;
  else {
    size_t n = b.len < sizeof report ? b.len : sizeof report - 1, off = 0;
    while (off < n) {
      long w = _ca_os_write(fd, report + off, n - off);
      if (w < 0) errno = (int)-w;
      if (w <= 0) break;
      off += (size_t)w;
    }
    rc = off == n ? 0 : -1;
    _ca_os_close(fd);
  }
  _ca_unlock(&report_lock);
  return rc;
}

void _ca_stats_exit(void) {
  if (atomic_load_explicit(&_ca_process.state, ca_acquire) != 2) return;
  int e = errno;
  const char* path = _ca_env(CA_ENV_STATS);
  if (path != NULL && path[0] != 0 && chromalloc_stats_write(path) != 0) {
    _ca_warn("could not write the statistics file named by CHROMALLOC_STATS");
  }
  if (_ca_opt(CA_OPT_VERBOSE) >= 2) {
    _ca_lock(&report_lock);
    ca_buf_t b = ca_buf(report, sizeof report);
    _ca_stats_json(&b);
    _ca_write_stderr(report);
    _ca_unlock(&report_lock);
  }
  errno = e;
}
