/* NightWatch (paper 000): learn online which allocation contexts produce polluter chunks and
   give their new chunks restrictive mapping (pages of 1/8 of the L2's colours); everything
   else keeps open mapping.

   Per chunk of at least a page (the core calls `place`, src/core/hooks.h):
     1. context: the size-to-mapping table (64K entries, indexed by size) names the context
        directly once 8 stack scans of that size all found the same context (re-checked by a
        scan on every 64th use); otherwise the stack is scanned (monitor/context.c).  A size
        seen from two contexts is marked ambiguous and always scanned.
     2. prediction: restrictive only when the context's last two monitored chunks were
        polluters; a first chunk, unknown or mixed evidence -> open.
     3. sampling: a context monitors its next chunk when its countdown runs out; the skip
        interval doubles after a correct prediction (up to 1024) and falls back to 0 after a
        wrong one.  A monitored chunk is a large object (own pages) given its predicted
        mapping; the monitor (monitor/monitor.c) samples it and hands back a verdict.
     4. a verdict that contradicts a live chunk's mapping switches it once, by recolouring,
        when the chunk has lived at least SWITCH_AGE_MS (short-lived chunks are not worth
        moving: the next ones get the new prediction).
   Chunks allocated by glibc itself (stdio and directory-stream buffers, which the kernel fills
   through glibc's internal, non-interposable system calls) are never monitored.
   Chunks below a page never reach `place` (the fast path stays the foundation's); see
   docs/nightwatch.md for what that leaves out.  When the colour layer turns out to be
   unavailable, the policy uninstalls itself and says why in the statistics. */
#define _GNU_SOURCE
#include "nightwatch.h"
#include "../core/internal.h"
#include "../core/hooks.h"
#include "../core/buf.h"
#include "../color/colour.h"
#include "../monitor/context.h"
#include "../monitor/monitor.h"
#include <pthread.h>

#define MAX_CTX        1024
#define CTX_SLOTS      2048                  /* hash -> context index, open addressing */
#define SIZE_TABLE     65536
#define SKIP_MAX       1024
#define MAX_WATCHED    64
#define SWITCH_AGE_MS  20
#define MAX_REPORTED   200

typedef struct nw_ctx_s {
  uint64_t          hash;
  uintptr_t         frames[CA_CONTEXT_FRAMES];
  uint32_t          nframes;
  bool              in_libc;                  /* glibc's own buffers: never monitored */
  _Atomic(uint64_t) chunks, bytes, restrictive;
  _Atomic(int64_t)  countdown;
  _Atomic(int)      inflight;                 /* its chunks being monitored now */
  /* under NW.lock */
  uint32_t          skip;
  uint8_t           history, nverdicts;
  _Atomic(int)      decision;                 /* ca_mapping_t */
  uint64_t          monitored, pages, hits, misses, pred_hits, pred_misses, switches;
} nw_ctx_t;

typedef struct nw_watched_s {                 /* a chunk being monitored */
  void*        p;
  size_t       n;
  int          ctx;
  ca_mapping_t predicted;
  uint8_t      flavour;
  uint64_t     born_ms;
  bool         freeing;                       /* the program is freeing it: no switch */
  bool         reserved;                      /* slot taken, chunk being allocated */
} nw_watched_t;

static struct {
  bool              on, monitor_all;
  ca_lock_t         lock;                     /* contexts' verdict fields, watched[], ids */
  nw_ctx_t          ctx[MAX_CTX];
  _Atomic(int)      nctx;
  _Atomic(int16_t)  slot[CTX_SLOTS];          /* context index + 1 */
  _Atomic(uint64_t) size_table[SIZE_TABLE];   /* size | (ctx + 1) << 40 | agreeing scans << 52 | ambiguous << 63 */
  nw_watched_t      watched[MAX_WATCHED];
  _Atomic(int)      nwatched;
  _Atomic(void*)    switching;                /* chunk being recoloured (free waits) */
  int               restrict_id, open_id;     /* colour sets: 0 = not yet, -1 = unavailable */
  bool              monitor_ready;
  char              off_reason[96];
  _Atomic(uint64_t) chunks, monitored, restrictive, captures, capture_ns, table_hits, switches, lost;
} NW;

static __thread bool busy __attribute__((tls_model("initial-exec")));
static __thread uint32_t verify_tick __attribute__((tls_model("initial-exec")));

#define SIZE_BITS   40
#define SIZE_MASK   ((1ull << SIZE_BITS) - 1)
#define AMBIGUOUS   (1ull << 63)
#define AGREE_SHIFT 52
#define CONFIDENT   8                        /* scans that agreed before the table is trusted */

/* ---- contexts ---------------------------------------------------------------------------- */
static void ctx_set_frames(nw_ctx_t* c, const ca_context_t* k) {
  c->nframes = k->nframes;
  c->in_libc = k->in_libc;
  memcpy(c->frames, k->frames, sizeof c->frames);
}

static int ctx_find(uint64_t hash, const ca_context_t* k) {
  for (uint32_t i = (uint32_t)(hash >> 7) % CTX_SLOTS, probes = 0; probes < CTX_SLOTS; i = (i + 1) % CTX_SLOTS, probes++) {
    int s = atomic_load_explicit(&NW.slot[i], ca_acquire);
    if (s == 0) {
      _ca_lock(&NW.lock);
      s = atomic_load_explicit(&NW.slot[i], ca_relaxed);
      if (s == 0) {
        int n = atomic_load_explicit(&NW.nctx, ca_relaxed);
        if (n >= MAX_CTX) { _ca_unlock(&NW.lock); return -1; }
        nw_ctx_t* c = &NW.ctx[n];
        c->hash = hash;
        if (k != NULL) ctx_set_frames(c, k);
        atomic_store_explicit(&NW.nctx, n + 1, ca_release);
        atomic_store_explicit(&NW.slot[i], (int16_t)(n + 1), ca_release);
        _ca_unlock(&NW.lock);
        return n;
      }
      _ca_unlock(&NW.lock);
    }
    if (NW.ctx[s - 1].hash == hash) return s - 1;
  }
  return -1;
}

int _ca_nw_context(uint64_t hash, uintptr_t site) {
  ca_context_t k = { .hash = hash, .nframes = site != 0, .frames = { site } };
  return ctx_find(hash | 1, &k);
}

static int context_of(size_t n, const void* frame) {
  _Atomic(uint64_t)* e = &NW.size_table[(n ^ (n >> 16)) % SIZE_TABLE];
  uint64_t v = atomic_load_explicit(e, ca_relaxed);
  uint64_t known = (v >> SIZE_BITS) & 0xFFF, agree = (v >> AGREE_SHIFT) & 0xF;
  if (!(v & AMBIGUOUS) && (v & SIZE_MASK) == n && known != 0 && agree >= CONFIDENT && (++verify_tick & 63) != 0) {
    atomic_fetch_add_explicit(&NW.table_hits, 1, ca_relaxed);
    return (int)known - 1;
  }
  uint64_t t0 = _ca_clock_ns();
  ca_context_t k;
  _ca_context_capture(&k, frame);
  int ctx = ctx_find(k.hash, &k);
  atomic_fetch_add_explicit(&NW.captures, 1, ca_relaxed);
  atomic_fetch_add_explicit(&NW.capture_ns, _ca_clock_ns() - t0, ca_relaxed);
  if (ctx < 0) return -1;
  uint64_t mine = (uint64_t)n | ((uint64_t)(ctx + 1) << SIZE_BITS);
  if ((v & SIZE_MASK) == n && known != 0 && known != (uint64_t)(ctx + 1)) mine = v | AMBIGUOUS;
  else if ((v & SIZE_MASK) == n && (v & AMBIGUOUS)) mine = v;
  else if ((v & SIZE_MASK) == n && known != 0) mine |= (agree < 15 ? agree + 1 : 15) << AGREE_SHIFT;
  atomic_store_explicit(e, mine, ca_relaxed);
  return ctx;
}

/* ---- the predictor ---------------------------------------------------------------------- */
ca_mapping_t _ca_nw_predict(int ctx) { return (ca_mapping_t)atomic_load_explicit(&NW.ctx[ctx].decision, ca_relaxed); }

bool _ca_nw_should_monitor(int ctx) {
  return atomic_fetch_sub_explicit(&NW.ctx[ctx].countdown, 1, ca_relaxed) <= 0;
}

uint32_t _ca_nw_skip(int ctx) { return NW.ctx[ctx].skip; }

void _ca_nw_verdict(int ctx, ca_mapping_t predicted, bool polluter, uint32_t hits, uint32_t misses, uint32_t pages) {
  nw_ctx_t* c = &NW.ctx[ctx];
  _ca_lock(&NW.lock);
  c->monitored++;
  c->pages += pages;
  c->hits += hits;
  c->misses += misses;
  if ((predicted == CA_MAP_RESTRICTIVE) == polluter) {
    c->pred_hits++;
    c->skip = c->skip == 0 ? 1 : c->skip * 2 > SKIP_MAX ? SKIP_MAX : c->skip * 2;
  } else {
    c->pred_misses++;
    c->skip = 0;
  }
  atomic_store_explicit(&c->countdown, (int64_t)c->skip, ca_relaxed);
  c->history = (uint8_t)(((c->history << 1) | polluter) & 3);
  if (c->nverdicts < 2) c->nverdicts++;
  atomic_store_explicit(&c->decision, c->nverdicts == 2 && c->history == 3 ? CA_MAP_RESTRICTIVE : CA_MAP_OPEN, ca_relaxed);
  _ca_unlock(&NW.lock);
}

void _ca_nw_reset(void) {
  _ca_lock(&NW.lock);
  memset(NW.ctx, 0, sizeof NW.ctx);
  for (int i = 0; i < CTX_SLOTS; i++) atomic_store_explicit(&NW.slot[i], 0, ca_relaxed);
  for (int i = 0; i < SIZE_TABLE; i++) atomic_store_explicit(&NW.size_table[i], 0, ca_relaxed);
  atomic_store_explicit(&NW.nctx, 0, ca_relaxed);
  _ca_unlock(&NW.lock);
}

/* ---- mappings ---------------------------------------------------------------------------- */
static void turn_off(const char* why) {
  _ca_policy_install(NULL);
  ca_buf_t b = ca_buf(NW.off_reason, sizeof NW.off_reason);
  ca_buf_str(&b, why);
}

/* the flavour of restrictive memory (0: ordinary, the colour layer is not there) */
static uint8_t restrictive_flavour(void) {
  if (NW.restrict_id == 0) {
    int id = _ca_colour_set(0, 1, 8);
    NW.restrict_id = id > 0 ? id : -1;
    if (id <= 0) turn_off("colour layer unavailable (colours=0 or no colour control here)");
  }
  if (NW.restrict_id > 0 && _ca_colour_state() == CA_COLOURS_UNAVAILABLE) {
    turn_off("colour layer unavailable (calibration found no usable colours)");
    return 0;
  }
  return NW.restrict_id > 0 ? (uint8_t)NW.restrict_id : 0;
}

/* own_pages: a large object starting on a page (as the paper aligns sampled chunks), so all
   of the chunk's pages are its own and can be sampled */
static void* alloc_mapped(size_t n, bool zero, uint8_t flavour, bool own_pages) {
  if (own_pages) return _ca_large_alloc(n, CA_OS_PAGE, zero, flavour);
  if (n > _ca_medium_limit) return _ca_large_alloc(n, 0, zero, flavour);
  void* p = _ca_malloc_flavour(n, flavour);
  if (p != NULL && zero) memset(p, 0, n);
  return p;
}

/* ---- monitored chunks -------------------------------------------------------------------- */
static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r);

static void unwatch(int w) {
  atomic_fetch_sub_explicit(&NW.ctx[NW.watched[w].ctx].inflight, 1, ca_relaxed);
  NW.watched[w].p = NULL;
  atomic_fetch_sub_explicit(&NW.nwatched, 1, ca_relaxed);
}

/* A monitored chunk: its own pages (a large object), watched until freed or judged.  A context
   has one chunk monitored at a time (every chunk with nightwatch_monitor=1), so a context whose
   chunks never give evidence does not turn all its chunks into large objects.  NULL when it
   cannot be monitored: the caller allocates it as usual. */
static void* place_monitored(int ctx, size_t n, bool zero, ca_mapping_t m, uint8_t flavour) {
  _ca_lock(&NW.lock);
  int w = -1;
  if (NW.monitor_all || atomic_load_explicit(&NW.ctx[ctx].inflight, ca_relaxed) == 0)
    for (int i = 0; i < MAX_WATCHED && w < 0; i++) if (NW.watched[i].p == NULL && !NW.watched[i].reserved) w = i;
  if (w >= 0) { NW.watched[w].reserved = true; atomic_fetch_add_explicit(&NW.ctx[ctx].inflight, 1, ca_relaxed); }
  _ca_unlock(&NW.lock);
  if (w < 0) { atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed); return NULL; }
  void* p = alloc_mapped(n, zero, flavour, true);
  _ca_lock(&NW.lock);
  NW.watched[w] = (nw_watched_t){ p, n, ctx, m, flavour, _ca_clock_ms(), false, false };
  if (p != NULL) atomic_fetch_add_explicit(&NW.nwatched, 1, ca_relaxed);
  else atomic_fetch_sub_explicit(&NW.ctx[ctx].inflight, 1, ca_relaxed);
  _ca_unlock(&NW.lock);
  if (p == NULL) return NULL;
  if (!_ca_monitor_start(p, n, (uint64_t)w)) {
    _ca_lock(&NW.lock); unwatch(w); _ca_unlock(&NW.lock);
    atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed);
    return p;
  }
  atomic_fetch_add_explicit(&NW.monitored, 1, ca_relaxed);
  return p;
}

static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r) {
  bool polluter = r->polluter;
  _ca_lock(&NW.lock);
  nw_watched_t w = NW.watched[cookie];
  bool live = w.p == p;
  if (live) unwatch((int)cookie);
  /* the chunk is only switched while it cannot be freed under us: free waits on `switching` */
  /* a switch never starts the colour layer by itself (that costs seconds and megabytes): it
     waits until a context's prediction has made restrictive memory needed */
  bool sw = live && !w.freeing && (w.predicted == CA_MAP_RESTRICTIVE) != polluter && _ca_clock_ms() - w.born_ms >= SWITCH_AGE_MS &&
            NW.restrict_id > 0 && _ca_colour_state() == CA_COLOURS_READY;
  if (sw) atomic_store_explicit(&NW.switching, p, ca_release);
  _ca_unlock(&NW.lock);
  if (!live) return;
  _ca_nw_verdict(w.ctx, w.predicted, polluter, r->hits, r->misses, r->pages);
  if (!sw) return;
  int target = polluter ? restrictive_flavour() : (NW.open_id == 0 ? (NW.open_id = _ca_colour_set(1, 8, 8)) : NW.open_id);
  ca_segment_t* seg = _ca_segment_of(p);
  if (target > 0 && seg != NULL && _ca_recolour(p, n, target) > 0) {
    /* pages now of the target set: its pool takes them back when the chunk is freed, but
       only if the whole chunk moved; a partly moved chunk goes back as ordinary memory */
    seg->flavour = 0;
    _ca_lock(&NW.lock);
    NW.ctx[w.ctx].switches++;
    _ca_unlock(&NW.lock);
    atomic_fetch_add_explicit(&NW.switches, 1, ca_relaxed);
  }
  atomic_store_explicit(&NW.switching, NULL, ca_release);
}

/* ---- the policy hooks -------------------------------------------------------------------- */
static void* place(size_t n, bool zero, const void* frame) {
  if (busy) return NULL;                      /* the stack scan or a colour set allocating */
  busy = true;
  void* p = NULL;
  int ctx = context_of(n, frame);
  if (ctx >= 0) {
    nw_ctx_t* c = &NW.ctx[ctx];
    atomic_fetch_add_explicit(&c->chunks, 1, ca_relaxed);
    atomic_fetch_add_explicit(&c->bytes, n, ca_relaxed);
    atomic_fetch_add_explicit(&NW.chunks, 1, ca_relaxed);
    ca_mapping_t m = _ca_nw_predict(ctx);
    uint8_t flavour = m == CA_MAP_RESTRICTIVE ? restrictive_flavour() : 0;
    if (m == CA_MAP_RESTRICTIVE) {
      atomic_fetch_add_explicit(&c->restrictive, 1, ca_relaxed);
      atomic_fetch_add_explicit(&NW.restrictive, 1, ca_relaxed);
    }
    /* glibc fills its own buffers (stdio, directory streams) through internal system calls
       that cannot be interposed: a sampled page there would make them fail with EFAULT */
    if (!c->in_libc && (NW.monitor_all || _ca_nw_should_monitor(ctx))) {
      if (!NW.monitor_ready) { _ca_monitor_init(on_verdict); NW.monitor_ready = true; }
      p = place_monitored(ctx, n, zero, m, flavour);
    }
    if (p == NULL && flavour != 0) p = alloc_mapped(n, zero, flavour, false);
  }
  busy = false;
  return p;
}

static void chunk_event(ca_chunk_event_t ev, void* p, size_t size) {
  (void)ev; (void)size;
  while (atomic_load_explicit(&NW.switching, ca_acquire) == p) ca_cpu_relax();
  if (atomic_load_explicit(&NW.nwatched, ca_relaxed) == 0) return;
  _ca_lock(&NW.lock);
  bool watched = false;
  for (int i = 0; i < MAX_WATCHED; i++) if (NW.watched[i].p == p) { NW.watched[i].freeing = true; watched = true; }
  _ca_unlock(&NW.lock);
  if (!watched) return;
  _ca_monitor_stop(p);                        /* delivers the verdict if there is one */
  _ca_lock(&NW.lock);
  for (int i = 0; i < MAX_WATCHED; i++)
    if (NW.watched[i].p == p) unwatch(i);
  _ca_unlock(&NW.lock);
}

static const ca_policy_t policy = { place, chunk_event };

static void fork_prepare(void) { _ca_lock(&NW.lock); }
static void fork_release(void) { _ca_unlock(&NW.lock); }

void _ca_nightwatch_init(void) {
  NW.on = _ca_opt(CA_OPT_NIGHTWATCH) != 0 && _ca_opt(CA_OPT_COLOURS) != 0;
  NW.monitor_all = _ca_opt(CA_OPT_NIGHTWATCH_MONITOR) != 0;
  if (NW.on) { _ca_policy_install(&policy); pthread_atfork(fork_prepare, fork_release, fork_release); }
  else turn_off(_ca_opt(CA_OPT_NIGHTWATCH) == 0 ? "nightwatch=0" : "colours=0");
}

/* ---- statistics -------------------------------------------------------------------------- */
void _ca_nightwatch_stats_json(ca_buf_t* b) {
  uint64_t ph = 0, pm = 0;
  int n = atomic_load_explicit(&NW.nctx, ca_acquire);
  for (int i = 0; i < n; i++) { ph += NW.ctx[i].pred_hits; pm += NW.ctx[i].pred_misses; }
  ca_buf_str(b, "{\"enabled\":");
  ca_buf_str(b, _ca_policy == &policy ? "true" : "false");
  ca_buf_str(b, ",\"off_reason\":\""); ca_buf_str(b, NW.off_reason); ca_buf_str(b, "\"");
  ca_buf_str(b, ",\"monitor_all\":"); ca_buf_str(b, NW.monitor_all ? "true" : "false");
  ca_buf_field_u64(b, "chunks", NW.chunks);
  ca_buf_field_u64(b, "monitored", NW.monitored);
  ca_buf_field_u64(b, "monitor_lost", NW.lost);
  ca_buf_field_u64(b, "restrictive", NW.restrictive);
  ca_buf_field_u64(b, "switches", NW.switches);
  ca_buf_field_u64(b, "size_table_hits", NW.table_hits);
  ca_buf_field_u64(b, "context_captures", NW.captures);
  ca_buf_field_u64(b, "context_capture_ns", NW.capture_ns);
  ca_buf_str(b, ",\"predictions\":{\"hits\":"); ca_buf_u64(b, ph);
  ca_buf_str(b, ",\"misses\":"); ca_buf_u64(b, pm); ca_buf_str(b, "}");
  ca_buf_str(b, ",\"monitor\":");
  _ca_monitor_stats_json(b);
  /* the report buffer is bounded: the first MAX_REPORTED contexts, and how many were left out */
  ca_buf_field_u64(b, "contexts_omitted", n > MAX_REPORTED ? (uint64_t)(n - MAX_REPORTED) : 0);
  if (n > MAX_REPORTED) n = MAX_REPORTED;
  ca_buf_str(b, ",\"contexts\":[");
  for (int i = 0; i < n; i++) {
    nw_ctx_t* c = &NW.ctx[i];
    char site[192];
    _ca_context_symbol(c->nframes ? c->frames[0] : 0, site, sizeof site);
    if (i) ca_buf_char(b, ',');
    ca_buf_str(b, "{\"site\":\"");
    for (const char* s = site; *s; s++) if (*s != '"' && *s != '\\') ca_buf_char(b, *s);
    ca_buf_str(b, "\",\"hash\":\""); ca_buf_hex(b, (uintptr_t)c->hash); ca_buf_str(b, "\"");
    ca_buf_str(b, ",\"frames\":[");
    for (uint32_t f = 0; f < c->nframes; f++) { if (f) ca_buf_char(b, ','); ca_buf_char(b, '"'); ca_buf_hex(b, c->frames[f]); ca_buf_char(b, '"'); }
    ca_buf_str(b, "]");
    ca_buf_field_u64(b, "chunks", c->chunks);
    ca_buf_field_u64(b, "bytes", c->bytes);
    ca_buf_field_u64(b, "monitored", c->monitored);
    ca_buf_field_u64(b, "sampled_pages", c->pages);
    ca_buf_field_u64(b, "pair_hits", c->hits);
    ca_buf_field_u64(b, "pair_misses", c->misses);
    ca_buf_str(b, ",\"miss_rate\":");
    if (c->hits + c->misses) ca_buf_fixed(b, (int64_t)(c->misses * 1000 / (c->hits + c->misses)), 3); else ca_buf_str(b, "null");
    ca_buf_str(b, ",\"decision\":\"");
    ca_buf_str(b, c->nverdicts == 0 ? "unknown" : c->decision == CA_MAP_RESTRICTIVE ? "restrictive" : "open");
    ca_buf_str(b, "\"");
    ca_buf_field_u64(b, "restrictive_chunks", c->restrictive);
    ca_buf_field_u64(b, "pred_hits", c->pred_hits);
    ca_buf_field_u64(b, "pred_misses", c->pred_misses);
    ca_buf_field_u64(b, "skip", c->skip);
    ca_buf_field_u64(b, "switches", c->switches);
    ca_buf_str(b, "}");
  }
  ca_buf_str(b, "]}");
}
