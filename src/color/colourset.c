/* The colour layer at run time: colour sets, the worker that calibrates and classifies in the
   background, and the core hooks that fill spans with pooled pages.

   A colour set is a slice of the colours of the controlled level, [from/den, to/den): the
   first eighth of the L2 is (0, 1, 8), the rest (1, 8, 8).  Its id is the flavour the core
   allocates it as.  Nothing is measured until the first set is registered; then a worker thread
   (pinned to one CPU while it measures) loads the machine profile (or calibrates: discovering
   the colours takes seconds here), builds eviction sets for the colours the sets need, and keeps
   each set's pool stocked with classified pages.  Until a pool has pages, spans of the set are
   ordinary memory (counted as fallbacks).  A set covering more than half of the colours is
   classified by elimination: a page belongs when none of the other colours claims it.

   Every few seconds the worker re-verifies a sample of pooled pages and drops the ones whose
   colour changed.  After fork() the child's pages are copy-on-write copies with new frames,
   so the child's pools are dropped and its sets serve ordinary memory until re-stocked. */
#define _GNU_SOURCE
#include "colour.h"
#include "../monitor/trap.h"
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct ca_colour_set_s {
  bool          used;
  uint32_t      from, to, den;
  uint64_t      mask;            /* colours of the set, once their count is known */
  bool          by_elimination;  /* classified as "none of the other colours" */
  ca_page_pool_t pool;
  size_t        target;          /* pages to keep in stock */
  uint64_t      fallback_spans, filled_spans, dropped_pages;
  ca_audit_group_t audit;        /* a small slice's group (audit.c), out of the pool; the worker's */
  bool          unvouched;       /* a small slice whose group has not vouched for its pool yet:
                                    none of its pages is handed out (L.lock) */
} ca_colour_set_t;

static struct {
  _Atomic(int)      state;       /* ca_colour_state_t */
  ca_lock_t         lock;        /* sets, pools, map (the worker measures without it) */
  ca_colour_set_t   sets[CA_COLOUR_SETS + 1];
  ca_calibration_t  cal;
  bool              cal_from_profile;
  ca_timing_probe_t probe;
  ca_colour_map_t   map;
  ca_page_source_t  src;         /* pages for eviction sets and references */
  pthread_t         worker;
  bool              worker_running;
  int               worker_cpu;  /* where it measures (-1: not yet) */
  clockid_t         worker_clock;    /* its CPU-time clock, read while it lives, */
  _Atomic(bool)     worker_alive;
  uint64_t          worker_cpu_ns;   /* ... and its CPU time when it ended */
  uint32_t          generation;  /* sets registered so far: the worker plans again when it moves */
  pthread_mutex_t   wake_lock;
  pthread_cond_t    wake;
  uint64_t          classified, claimed, verify_drops, set_rebuilds, batches_dropped, backoffs;
  uint64_t          frames_kept;     /* recoloured pages' old frames pooled (protection's moves) */
  uint64_t          audit_judged, audit_invalid, audit_strays;   /* the slice audit's groups */
  uint64_t          audit_pages, audit_turned_away;   /* pages it was asked about, */
  uint64_t          audit_loud, audit_loud_pages;     /* ... judgements and pages put off by controls */
  uint64_t          quiet_ns, classify_ns, held_ns;
  uint64_t          unquiet_batches;  /* classified after waiting in vain for a quiet window */
  uint64_t          recolours, recolour_ns;
  uint64_t          start_ns, probe_ns, discover_ns, estimate_ns, ready_ns;  /* start-up phases */
  uint64_t          pace_from_ns, pace_cpu_ns;  /* when this process's worker was first ready, and
                                        its CPU time then (0: not yet; reset in a fork child) */
  uint64_t          paced_ns;        /* the worker's sleeps to keep within colour_worker */
  _Atomic(uint32_t) preparing;       /* threads in chromalloc_colours_prepare */
  uint32_t          estimated, estimate_chunks;  /* the colour count the pages gave; chunks used */
  uint32_t          probe_remeasured;            /* the probe measured again for a second estimate */
  ca_discovery_stats_t disc;         /* eviction-set searches, all of them */
  uint64_t          suspicions;      /* stretches judged bad (the second in a row drops the sets), */
  uint64_t          suspected_by[3]; /* ... by the judgement that said so: claims, starved, audit */
  uint64_t          claims_short;    /* stretches of few claims that pages the sets stocked explained */
  bool              suspected;       /* the last judgement was bad */
  uint32_t          top_ratio_pct;   /* the clearest the sets have evicted (quiet_window), */
  uint32_t          best_ratio_pct;  /* ... and the clearest but that one reading */
  uint32_t          start_failures;  /* starts that failed for the moment (retry_later), in all */
  uint32_t          failures_in_row; /* ... since the layer was last ready */
  uint32_t          retry_ms;        /* the first wait before starting again (doubles) */
  uint32_t          inject_failures; /* tests: starts to fail before measuring */
  uint32_t          inject_no_sets;  /* tests: starts whose first discovery finds no set */
  _Atomic(uint32_t) inject_drops;    /* tests: once ready, eviction sets to lose and not find */
  char              reason[160];
} L = { .wake_lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .worker_cpu = -1,
        .retry_ms = 1000 };

#define STOCK_CHUNK 512                      /* pages per supply chunk (2 MiB) */
#define STOCK_MAX   (64 * 256)               /* pages: a set's stock grows to at most 64 MiB */
#define BATCH       32                       /* pages classified between two checks */
/* Batches per quiet-window check while every batch's sets held: the check re-measures four
   sets' effect (9 alternations each) and took 6.4 s of the worker's 7.4 s on a Zen 1 when made
   before every batch, for 18304 pages classified; a batch whose sets did not hold is followed
   by a check */
#define QUIET_EVERY 4

int _ca_colour_state(void) { return atomic_load_explicit(&L.state, ca_acquire); }
int _ca_colour_count(void) { return _ca_colour_state() == CA_COLOURS_READY ? (int)L.cal.colours : -1; }

static void set_state(int s, const char* why) {
  if (why && !L.reason[0]) { ca_buf_t b = ca_buf(L.reason, sizeof L.reason); ca_buf_str(&b, why); }
  atomic_store_explicit(&L.state, s, ca_release);
  if (s == CA_COLOURS_UNAVAILABLE) {
    char line[256];
    ca_buf_t b = ca_buf(line, sizeof line);
    ca_buf_str(&b, "cache colours cannot be controlled here (");
    ca_buf_str(&b, L.reason);
    ca_buf_str(&b, "): coloured memory is ordinary memory");
    _ca_warn(line);
  }
}

/* colours [lo, hi) of the set, once the colour count is known */
static void set_range(const ca_colour_set_t* s, uint32_t colours, uint32_t* lo, uint32_t* hi) {
  *lo = s->from * colours / s->den;
  *hi = s->to * colours / s->den;
  if (*hi <= *lo) *hi = *lo + 1;
}

static uint64_t range_mask(uint32_t lo, uint32_t hi) {
  uint64_t m = 0;
  for (uint32_t c = lo; c < hi && c < 64; c++) m |= (uint64_t)1 << c;
  return m;
}

/* ---- the worker ---------------------------------------------------------------------------- */

static uint32_t audit_need(const ca_colour_set_t* s);

static uint32_t colours_needed(void) {
  uint32_t need = 0, C = L.cal.colours;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used) continue;
    uint32_t lo, hi;
    set_range(s, C, &lo, &hi);
    s->by_elimination = hi - lo > C / 2;
    s->mask = range_mask(lo, hi);
    s->unvouched = audit_need(s) > 0 && !s->audit.valid;
    /* elimination needs the sets of the colours outside the slice: below lo, and up to C when
       the slice ends before the last colour (7/8 of 16 from 2/16 on needs 2 sets, not 16) */
    uint32_t n = !s->by_elimination ? hi : hi >= C ? lo : C;
    if (n > need) need = n;
  }
  return need;
}

/* Is now a moment when classification can be trusted?  Re-places the threshold on the current
   levels (they drift with the other hardware thread) and requires them clearly apart. */
static bool quiet_window(void) {
  uint32_t n = L.map.ncolours < 4 ? L.map.ncolours : 4;
  if (n == 0) return false;                          /* no sets to judge the moment by */
  L.probe.base.recalibrate(&L.probe.base, (void* const*)L.map.ref, (void* const (*)[CA_WAYS_MAX])L.map.set, n, L.map.ways);
  uint32_t r = L.probe.set_ratio_pct;
  if (r > L.top_ratio_pct) { L.best_ratio_pct = L.top_ratio_pct; L.top_ratio_pct = r; }
  else if (r > L.best_ratio_pct) L.best_ratio_pct = r;
  return r > 160;
}

/* After a batch: do most sets still evict their references? */
static bool sets_held(void) {
  uint32_t held = 0;
  for (uint32_t c = 0; c < L.map.ncolours; c++) {
    L.probe.base.prepare(&L.probe.base, L.map.ref[c]);
    held += L.probe.base.evicts(&L.probe.base, L.map.ref[c], (void* const*)L.map.set[c], L.map.ways);
  }
  return held * 2 > L.map.ncolours;
}

/* Route a classified page to the sets it belongs to; returns whether one took it. */
static bool route(void* page, int c) {
  bool taken = false;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->pool.count >= s->target) continue;
    bool in = c >= 0 ? ((s->mask >> c) & 1) != 0 : s->by_elimination && c == -1;
    if (in && !taken) taken = _ca_pool_push(&s->pool, page);
  }
  _ca_unlock(&L.lock);
  L.claimed += c >= 0;
  return taken;
}

/* Is a set short of stock, with the sets the worker planned for (generation `gen`)?  A set
   registered since has no colours yet: stocking for the old plan would never fill it (and
   kept classifying, 1.7 million pages in two minutes, holding the rejected frames). */
static bool pools_short(uint32_t gen) {
  bool any = false;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].pool.count < L.sets[i].target) any = true;
  if (L.generation != gen) any = false;
  _ca_unlock(&L.lock);
  return any;
}

static bool replan(uint32_t gen) {
  _ca_lock(&L.lock);
  bool moved = L.generation != gen;
  _ca_unlock(&L.lock);
  return moved;
}

/* A page the strict test placed nowhere may still be of an excluded colour: the strict test
   misses about half of a colour's pages on the Zen 5 host, and by elimination they would join
   the set.  Two single plain tests per excluded colour look again; either saying "evicts" keeps
   the page out of elimination sets (-2), without making it a member of anything (a partly
   evicted page passes the plain test too). */
static int excluded(void* page, uint64_t excl) {
  for (int k = 0; k < 2 && excl != 0; k++)
    if (_ca_colour_classify_n(&L.probe.base, &L.map, page, excl, 1, 1, CA_ASK_PLAIN) >= 0) return -2;
  return -1;
}

/* The colours discovered so far. */
static uint64_t known_colours(void) {
  return L.map.ncolours >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << L.map.ncolours) - 1);
}

/* The colours the sets short of stock need pages tested against: a set's own, or for a set by
   elimination the colours it excludes (only those when `excluded_only`), among the colours
   discovered.  A full set costs no tests (with the 7/8 complement of protection stocked, the
   second look of excluded() took most of the time that stocking the first 1/8 needed). */
static uint64_t sets_mask(bool excluded_only) {
  uint64_t m = 0;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].pool.count < L.sets[i].target && (L.sets[i].by_elimination || !excluded_only))
      m |= L.sets[i].by_elimination ? ~L.sets[i].mask : L.sets[i].mask;
  _ca_unlock(&L.lock);
  return m & known_colours();
}

/* A pooled page of set i, taken out of its pool at random (NULL: none).  Out of the pool while
   it is tested: a span filled from the pool meanwhile would have moved it away under the test
   (SIGSEGV in the worker, seen with a routed small class taking spans). */
static void* pool_take(int i, uint64_t* rng) {
  _ca_lock(&L.lock);
  void* page = L.sets[i].used ? _ca_pool_pop_any(&L.sets[i].pool, rng) : NULL;
  _ca_unlock(&L.lock);
  return page;
}

/* ---- the slice audit (audit.c) ------------------------------------------------------------ */

/* Pages of a small slice's group: twice what its colours hold in the level; 0 for a set that is
   no small slice (by elimination, or more than a quarter of the colours), and with the audit
   off (option colour_audit=0). */
static uint32_t audit_need(const ca_colour_set_t* s) {
  if (!_ca_colour_opt(CA_COPT_AUDIT)) return 0;
  uint32_t k = (uint32_t)__builtin_popcountll(s->mask), need = 2 * k * L.map.ways;
  return s->used && !s->by_elimination && k > 0 && k * 4 <= L.cal.colours && need <= CA_AUDIT_MAX ? need : 0;
}

/* The colours of the sets by elimination (their own, not the ones they exclude). */
static uint64_t elimination_colours(void) {
  uint64_t m = 0;
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].by_elimination) m |= L.sets[i].mask;
  return m;
}

/* Does group g speak for a page of colour c (-1: none, for elimination)?  1: the page must be of
   its slice (c is one of its colours), 0: must not be (for elimination, the slice lying
   outside the elimination sets' colours), -1: it does not speak for the page. */
static int audit_wants(const ca_colour_set_t* g, int c, uint64_t elim) {
  if (!g->audit.valid) return -1;
  if (c >= 0) return (g->mask >> c) & 1 ? 1 : -1;
  return c == -1 && (g->mask & elim) == 0 ? 0 : -1;
}

/* The audit's verdict on a page classified as colour c (-1: none): c, or -2 when a valid group
   speaking for it disagrees (the page is turned away: a page costs less than a pool's purity). */
static int audited(void* page, int c) {
  uint64_t elim = elimination_colours();
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* g = &L.sets[i];
    int want = audit_wants(g, c, elim);
    if (want < 0) continue;
    L.audit_pages++;
    /* a page of the slice is asked twice, and beside a control (audit.c): on the Zen 4 host
       (32 colours, a page claimed for a 1/8 slice about 1 in 30) one clear reading let strays
       in, and a 64-page block of the pool did not evict itself in 3 of 18 test_colour_api
       processes (0 of 18 asked twice, interleaved); the pages turned away must be replaced:
       the worker's CPU, median 3.9 s against 6.4 s in those processes, 2.5 against 3.2 s in
       pv messages (colour_ready.py, 5 rounds) */
    int v = want == 1 ? _ca_audit_admits(&L.probe.base, &g->audit, page)
                      : !_ca_audit_evicts(&L.probe.base, (void* const*)g->audit.page, g->audit.n, page, false);
    if (v != 1) {
      L.audit_turned_away++;
      L.audit_loud_pages += v < 0;
      return -2;
    }
  }
  return c;
}

/* Audit the pages pooled for set i (its pool is drained meanwhile and refilled with the pages
   that pass; `c`: a colour of the set, or -1 for a set by elimination). */
static void audit_pool(int i, int c, uint64_t* rng) {
  ca_page_pool_t kept = {0};
  for (void* page; (page = pool_take(i, rng)) != NULL;) {
    bool ok = audited(page, c) == c;
    _ca_lock(&L.lock);
    if (!ok || !_ca_pool_push(&kept, page)) { _ca_pool_drop(page); L.sets[i].dropped_pages++; }
    _ca_unlock(&L.lock);
  }
  _ca_lock(&L.lock);
  for (void* page; (page = _ca_pool_pop(&kept)) != NULL;)
    if (!_ca_pool_push(&L.sets[i].pool, page)) _ca_pool_drop(page);
  _ca_unlock(&L.lock);
  if (kept.pages) _ca_os_unmap(kept.pages, kept.cap * sizeof(void*));
}

/* Form and judge the groups of small slices whose pools have the pages for one, in a quiet
   moment (else later).  A valid group then audits what was pooled before it: its own set's
   pages and the elimination sets'.  False: a group was not of few colours, and its pool is
   dropped (the sets that stocked it were wrong: the caller's suspicion). */
static bool audit_groups(uint64_t* rng) {
  bool quiet = false;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    ca_audit_group_t* g = &s->audit;
    uint32_t need = audit_need(s);
    if (need == 0 || (g->valid && g->n * 4 >= need * 3) || s->pool.count + g->n < need) continue;
    if (!quiet && !(quiet = quiet_window())) return true;
    while (g->n < need) {
      void* page = pool_take(i, rng);
      if (page == NULL) break;
      g->page[g->n++] = page;
    }
    if (g->ncontrols == 0) {                       /* random pages, kept for the set's life */
      uint8_t* c = _ca_pool_supply(CA_AUDIT_CONTROLS);
      for (uint32_t k = 0; c != NULL && k < CA_AUDIT_CONTROLS; k++) g->control[g->ncontrols++] = c + k * CA_OS_PAGE;
    }
    uint32_t strays = 0;
    ca_audit_verdict_t v = _ca_audit_judge(&L.probe.base, g, &strays);
    L.audit_judged++;
    if (v == CA_AUDIT_LOUD) { L.audit_loud++; continue; }   /* its members wait for another moment */
    bool ok = v == CA_AUDIT_VALID;
    _ca_lock(&L.lock);
    for (uint32_t k = 0; k < strays; k++) _ca_pool_drop(g->page[g->n + k]);
    if (!ok) {
      while (g->n > 0) _ca_pool_drop(g->page[--g->n]);
      for (void* page; (page = _ca_pool_pop(&s->pool)) != NULL;) { _ca_pool_drop(page); s->dropped_pages++; }
    }
    _ca_unlock(&L.lock);
    L.audit_strays += strays;
    if (!ok) { L.audit_invalid++; return false; }
    audit_pool(i, __builtin_ctzll(s->mask), rng);
    for (int j = 1; j <= CA_COLOUR_SETS; j++)
      if (L.sets[j].used && L.sets[j].by_elimination && (L.sets[j].mask & s->mask) == 0) audit_pool(j, -1, rng);
    _ca_lock(&L.lock);
    s->unvouched = false;
    _ca_unlock(&L.lock);
  }
  return true;
}

/* The pool's re-test: is the page (a pool page: its contents are overwritten) of set i?  One
   strict classification, and a second against all of the mask's colours when the first says
   no; then the slice audit's verdict, where a group speaks for the set. */
static bool of_set(int i, void* page) {
  const ca_colour_set_t* s = &L.sets[i];
  uint64_t m = s->by_elimination ? ~s->mask : s->mask;
  int c = _ca_colour_classify(&L.probe.base, &L.map, page, m & known_colours());
  bool ok = s->by_elimination ? c < 0 : c >= 0;
  if (!ok) ok = s->by_elimination ? _ca_colour_classify(&L.probe.base, &L.map, page, m) < 0
                                  : (c = _ca_colour_classify(&L.probe.base, &L.map, page, m)) >= 0;
  return ok && audited(page, s->by_elimination ? -1 : c) != -2;
}

/* Re-test a few pooled pages of each set; drop those no longer of the set. */
static void verify_sample(uint64_t* rng) {
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    for (int k = 0; k < 4; k++) {
      void* page = pool_take(i, rng);
      if (page == NULL) break;
      bool ok = of_set(i, page);
      _ca_lock(&L.lock);
      if (ok) ok = _ca_pool_push(&s->pool, page);
      if (!ok) { _ca_pool_drop(page); s->dropped_pages++; L.verify_drops++; }
      _ca_unlock(&L.lock);
    }
  }
}

/* Do the sets still claim pages they stocked?  Up to 16 of the small slices' (not by
   elimination): members of a slice group the audit vouched for, else pooled pages (a slice
   handing out pages as fast as they come has none), each classified again against its set's
   colours; true when half or more are claimed, false when they are not or none is there. */
static bool sets_claim_stock(uint64_t* rng) {
  uint32_t asked = 0, claimed = 0;
  for (int i = 1; i <= CA_COLOUR_SETS && asked < 16; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->by_elimination) continue;
    uint64_t m = s->mask & known_colours();
    for (uint32_t k = 0; s->audit.valid && k < s->audit.n && asked < 16; k += 4, asked++)
      claimed += _ca_colour_find(&L.probe.base, &L.map, s->audit.page[k], m) >= 0;
    for (void* page; asked < 16 && (page = pool_take(i, rng)) != NULL;) {
      asked++;
      claimed += _ca_colour_find(&L.probe.base, &L.map, page, m) >= 0;
      _ca_lock(&L.lock);
      if (!_ca_pool_push(&s->pool, page)) _ca_pool_drop(page);
      _ca_unlock(&L.lock);
    }
  }
  return asked > 0 && claimed * 2 >= asked;
}

/* Protection's kept frames (_ca_colour_keep_frame) join their set's pool only if the pool's
   re-test places them there: protection moves every page it looks at, of any colour (1 in 8 of
   a 1/8 slice's), and a pooled frame of another colour would let the polluter confined to the
   set evict outside it. */
#define KEPT_MAX 64                  /* a batch moves 8 pages */
static struct {
  void*    page[KEPT_MAX];           /* old frames waiting for the test (L.lock), */
  uint8_t  set[KEPT_MAX];            /* ... the set each is for */
  uint32_t n;
  uint64_t rejected;                 /* frames the test did not place in their set */
} K;

/* Only in a quiet moment (else they wait, and frames kept beyond KEPT_MAX meanwhile are given
   back): in a loud one every set "evicts" every page, and the test would place any frame in
   the slice. */
static void test_kept(void) {
  if (__atomic_load_n(&K.n, __ATOMIC_RELAXED) == 0 || !quiet_window()) return;
  for (;;) {
    _ca_lock(&L.lock);
    uint32_t n = K.n;
    void* page = n ? K.page[n - 1] : NULL;
    int id = n ? K.set[n - 1] : 0;
    K.n = n ? n - 1 : 0;
    _ca_unlock(&L.lock);
    if (page == NULL) return;
    bool ok = L.sets[id].used && of_set(id, page);
    _ca_lock(&L.lock);
    if (ok && _ca_pool_push(&L.sets[id].pool, page)) { L.sets[id].pool.returned++; L.frames_kept++; }
    else { _ca_pool_drop(page); K.rejected += !ok; }
    _ca_unlock(&L.lock);
  }
}

/* Power of two nearest to n (geometric rounding: 12 -> 16, 24 -> 32). */
static uint32_t round_colours(uint32_t n) {
  uint32_t c = 1;
  while (c * 2 <= CA_COLOURS_MAX && (double)c * 1.41421356 < (double)n) c *= 2;
  return c;
}

/* The eviction sets are not to be trusted: forget them and what they classified; the worker
   finds them again (or gives up, saying so).  drop_sets also drops the pages they stocked. */
static void forget_sets(void) {
  _ca_lock(&L.lock);
  L.map.ncolours = 0;
  L.top_ratio_pct = L.best_ratio_pct = 0;
  _ca_unlock(&L.lock);
  if (L.src.npages) {
    memset(L.src.colour, -1, L.src.npages);
    memset(L.src.tested, 0, L.src.npages);
  }
}

static void drop_sets(void) {
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    for (void* page; (page = _ca_pool_pop(&L.sets[i].pool)) != NULL;) _ca_pool_drop(page);
    ca_audit_group_t* g = &L.sets[i].audit;
    while (g->n > 0) _ca_pool_drop(g->page[--g->n]);
    g->valid = false;
    L.sets[i].unvouched = audit_need(&L.sets[i]) > 0;
  }
  L.set_rebuilds++;
  _ca_unlock(&L.lock);
  forget_sets();
}

/* Without a profile the colour count is estimated: pages are classified against the first few
   colours' sets, and each set claims about one page in `colours`.  Cache geometries have
   power-of-two colour counts, so the estimate is rounded to one.  A page counts as claimed when
   the first of three tests and two of them say so, not the three "fully evicted" tests that
   fill pools: every further or stricter test also loses true positives on a busy host, which
   biases the count up (64 for 32 in 1 of 20 processes with three in a row; 32 for 16 in 1 of 2
   with the strict kind; on the Zen 5 host one plain test in 20 reads low).  The tests ask
   whether the set evicts the page clearly (probe.c), between the plain and the strict
   question: at the plain rule a page sharing part of a set's colour (one in three on the Zen
   5 host) was claimed too, and the estimate read 8 for 16, or needed its second try, in 5 of
   16 pv messages processes, against 0 of 16 asked clearly (interleaved; 0 of 10 each in 10
   more rounds, a quieter moment) - unless the eviction-set searches found the clear rule too
   high just now (evset.c), when they ask plainly.

   The pages are far from a random sample of colours: the frames of one 4 MiB chunk fell
   unevenly on this VM's colours (four sets claiming 8, 6, 22 and 21 of its 1024 pages, 2, 75,
   99 and 78 of the next chunk's), and a chunk unmapped and mapped again gets the same frames
   back (six estimates in one process then claimed 80 of 1024 pages each, and all said 64 for
   32).  So the claims add up over chunks that stay mapped until the end, up to SAMPLES of them,
   and the estimate is taken again after each, from the median set's claims: one set of four
   could claim almost nothing (1 and 2 of 1024 and 2048 pages, the others 24-30 and 52-95). */
static uint32_t estimate_colours_from_pages(uint32_t expected) {
  enum { SAMPLE = 2 * STOCK_CHUNK, SAMPLES = 6 };
  uint8_t* chunk[SAMPLES];
  uint32_t claims[CA_COLOURS_MAX] = {0}, sorted[CA_COLOURS_MAX], n = L.map.ncolours, estimate = 0;
  uint64_t pages = 0;
  int k = 0;
  ca_ask_t ask = L.probe.base.search_plainly ? CA_ASK_PLAIN : CA_ASK_CLEARLY;
  for (; n > 0 && k < SAMPLES && (estimate != expected || k == 0); k++) {
    if ((chunk[k] = _ca_pool_supply(SAMPLE)) == NULL) break;
    for (size_t i = 0; i < SAMPLE; i++) {
      int c = _ca_colour_classify_n(&L.probe.base, &L.map, chunk[k] + i * CA_OS_PAGE, ~(uint64_t)0, 3, 2, ask);
      if (c >= 0) claims[c]++;
    }
    pages += SAMPLE;
    memcpy(sorted, claims, n * sizeof *sorted);
    for (uint32_t i = 1; i < n; i++)               /* insertion sort: n <= 64 */
      for (uint32_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) { uint32_t t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t; }
    double median = (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0;
    estimate = median > 0 ? round_colours((uint32_t)((double)pages / median + 0.5)) : 0;
  }
  for (int i = 0; i < k; i++) _ca_os_unmap(chunk[i], SAMPLE * CA_OS_PAGE);
  L.estimated = estimate;
  L.estimate_chunks = (uint32_t)k;
  return estimate;
}

/* The first four sets, without a profile.  Thresholds measured while the program streams
   memory on the other core can be wrong for good (pv frames: no set in 20 s, 3 runs of 6): when
   a few seconds find no new colour, they are measured again. */
static void discover_first(uint32_t expected, size_t level_bytes, uint64_t* rng) {
  if (L.inject_no_sets > 0) { L.inject_no_sets--; return; }
  for (int tries = 0; tries < 10 && L.map.ncolours < 4; tries++) {
    uint32_t had = L.map.ncolours;
    _ca_colour_discover(&L.probe.base, &L.map, &L.src, 4, expected, 3000, rng, &L.disc);
    if (L.map.ncolours == had && !_ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways)) break;
  }
}

/* `expected` is what sysfs's geometry implies: an estimate agreeing with it settles it.  When
   none does, the estimate is not trusted (on the Zen 5 host 3 processes in 8 estimated 8 or 64
   colours for 16: pages partly evicted by another colour's set inflate the claims, and missed
   tests deflate them).  It is taken once more with four new sets (here 2 of 30 pv frames
   processes estimated 16 for 32 over six chunks, and the discovery below kept them from being
   ready for 14 s or more); when that disagrees too, the colours are counted the way `chromalloc
   calibrate` counts them, by discovering all of them (10-25 s of the worker's time here), and
   the count rounded to a power of two, or the number of sets found when that is more (a
   duplicate set that the pruning sweep missed on a noisy host: calibrate counts it too).  The
   second try doubles the chance that a wrong sysfs geometry is taken for true by a chance
   agreement (a first estimate was off by a factor of two in 10 of 164 processes here).
   The probe is measured again before it: its rule stays below what the stream measured at
   start-up, and a low reading there is kept for the process's life.  Zen 4 VM, 40 pv messages
   processes: the one never ready had the rule at 134% (stream 168% of the hit chase, sets
   225%; 150% in 34 of the 39 others), and both its tries said 16.  Measured again, the second
   try settled 6 of the 7 processes in 60 that needed it (without, 4 of 6 in 70: too few to
   show a difference); 1 in 60 was never ready either way. */
static uint32_t estimate_colours(uint32_t expected, size_t level_bytes, uint64_t* rng) {
  if (estimate_colours_from_pages(expected) == expected) return expected;
  forget_sets();
  L.probe_remeasured++;
  _ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways);
  discover_first(expected, level_bytes, rng);
  if (L.map.ncolours >= 2 && estimate_colours_from_pages(expected) == expected) return expected;
  _ca_colour_discover(&L.probe.base, &L.map, &L.src, 0, expected, 60000, rng, &L.disc);
  uint32_t n = L.map.ncolours, c = round_colours(n);
  return n < 2 ? 0 : n > c ? n : c;
}

enum { START_OK, START_RETRY, START_NEVER };

/* START_RETRY: the measurement failed for the moment (why says how); START_NEVER: the layer
   cannot work here (the state is UNAVAILABLE, with the reason) */
static int calibrate_or_load(uint64_t* rng, const char** why) {
  if (L.inject_failures > 0) { L.inject_failures--; *why = "test: a start failed on purpose"; return START_RETRY; }
  ca_calibration_t saved;
  memset(&saved, 0, sizeof saved);
  bool have = _ca_profile_load(&saved);
  if (have && !saved.usable) {
    /* `chromalloc calibrate` found colours uncontrollable on this machine: do not retry here */
    set_state(CA_COLOURS_UNAVAILABLE, saved.reason[0] ? saved.reason : "the machine profile says so");
    return START_NEVER;
  }
  L.cal = saved;
  L.cal_from_profile = have && saved.method == CA_METHOD_TIMING && saved.colours >= 2;
  if (!L.cal_from_profile) memset(&L.cal, 0, sizeof L.cal);
  const ca_cache_level_t* l2 = NULL;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) l2 = &_ca_machine.levels[i];
  if (!L.cal_from_profile) {
    if (l2 == NULL || l2->ways == 0 || l2->ways > CA_WAYS_MAX) { set_state(CA_COLOURS_UNAVAILABLE, "no L2 described by sysfs or cpuid"); return START_NEVER; }
    L.cal.level = 2;
    L.cal.ways = l2->ways;
    L.cal.line = l2->line;
    L.cal.method = CA_METHOD_TIMING;
  }
  size_t level_bytes = l2 && l2->size > (1u << 20) ? l2->size : (1u << 20);
  /* the probe measures for about 3 s before it gives up; a busy moment can last longer (pv
     frames streams 3 MiB per frame on the other core: 2 runs of 7 ran without colours), so the
     worker tries again for a minute, the layer calibrating meanwhile.  One second between two
     tries: the moment often ends soon (with 5 s, 7 of 54 pv frames processes took 7.7-10.5 s
     to measure the probe, the first try failing while the program ran) */
  bool probe = false;
  uint64_t t0 = _ca_clock_ns();
  for (int tries = 0; tries < 15 && !probe; tries++) {
    if (tries > 0) { struct timespec t = { 1, 0 }; nanosleep(&t, NULL); }
    probe = _ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways);
  }
  L.probe_ns = _ca_clock_ns() - t0;
  if (!probe) { *why = "timing cannot tell the L2 from what lies beyond it"; return START_RETRY; }
  if (!_ca_page_source_init(&L.src, 4096)) { set_state(CA_COLOURS_UNAVAILABLE, "out of memory"); return START_NEVER; }
  L.map.ways = L.cal.ways;
  if (!L.cal_from_profile) {
    uint32_t expected = l2 != NULL && l2->ways ? (uint32_t)(l2->size / l2->ways / CA_OS_PAGE) : 0;
    t0 = _ca_clock_ns();
    discover_first(expected, level_bytes, rng);
    L.discover_ns = _ca_clock_ns() - t0;
    t0 = _ca_clock_ns();
    L.cal.colours = L.map.ncolours >= 2 ? estimate_colours(expected, level_bytes, rng) : 0;
    L.estimate_ns = _ca_clock_ns() - t0;
    /* no colours (fewer than two sets found: the probe could not be measured again, or every
       search failed) is a failure too: until cb5a768 such a start was taken for a good one, and
       the layer said "ready" with no set (1 pv packets process in 20, its spans ordinary) */
    if (L.cal.colours < 2 || L.cal.colours < L.map.ncolours) { *why = "could not measure the colours of the L2"; return START_RETRY; }
    L.cal.measured_size = (uint64_t)L.cal.colours * L.cal.ways * CA_OS_PAGE;
  }
  return START_OK;
}

/* A start that failed for the moment (the host loud for longer than the measurements wait:
   on the Zen 5 host 1 benchmark process in 12 gave up after 12 s, and pv's settle lasts 20 s)
   is made again after a wait, 1 s, then doubling: CA_COLOUR_START_TRIES in a row, half a
   minute of waiting and a few seconds of the worker's measuring per try.  Then the layer is
   unavailable for the process's life.  Each time the layer is ready again the count starts
   afresh: a long-lived process whose sets are lost and not found again now and then (a drop
   on a loud host) would otherwise lose the layer for good at its sixth such moment.  At the
   start the state stays CALIBRATING meanwhile (eviction sets that cannot be found again after
   a drop leave it READY, the spans ordinary memory until they are), and `reason` says why the
   last try failed.  False: give up. */
static bool retry_later(const char* why) {
  ca_buf_t b = ca_buf(L.reason, sizeof L.reason);
  ca_buf_str(&b, why);
  L.start_failures++;
  if (++L.failures_in_row >= CA_COLOUR_START_TRIES) { set_state(CA_COLOURS_UNAVAILABLE, NULL); return false; }
  uint64_t ms = (uint64_t)L.retry_ms << (L.failures_in_row - 1);
  struct timespec t = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  while (nanosleep(&t, &t) != 0) {}
  return true;
}

/* calibrate (or load the profile), starting again while a failure is for the moment */
static bool start(uint64_t* rng) {
  for (;;) {
    const char* why = NULL;
    int r = calibrate_or_load(rng, &why);
    if (r != START_RETRY) return r == START_OK;
    forget_sets();
    _ca_page_source_free(&L.src);
    if (!retry_later(why)) return false;
  }
}

void _ca_colour_test_fail_starts(uint32_t n, uint32_t retry_ms) {
  L.inject_failures = n;
  L.retry_ms = retry_ms;
}

void _ca_colour_test_no_sets(uint32_t n, uint32_t retry_ms) {
  L.inject_no_sets = n;
  L.retry_ms = retry_ms;
}

static void wake_worker(void);

/* tests: the ready worker loses its eviction sets and fails to find them n times */
void _ca_colour_test_drop_sets(uint32_t n) {
  atomic_store(&L.inject_drops, n);
  wake_worker();
}

/* Protection's move: the live page to a pooled page of set `to`; its old frame stocks set
   `from`'s pool if the pool's re-test places it there (test_kept). */
static int colour_move_to(void* page, int from, int to) {
  if (_ca_pool_moved() >= _ca_pool_moved_limit()) return -1;
  return _ca_recolour(page, CA_OS_PAGE, to, from, true) == 1;
}

/* mincore: a page never touched has no frame yet (reading it to time it would map the shared
   zero page, whose colour says nothing about the page's future frame) */
static bool page_resident(const void* page) {
  unsigned char v = 0;
  return _ca_syscall6(SYS_mincore, (long)page, CA_OS_PAGE, (long)&v, 0, 0, 0) == 0 && (v & 1);   /* not the interposed one */
}

static const ca_protect_ops_t protect_ops = { colour_move_to, page_resident };

#define REJECTED_MAX  16384                  /* rejected frames held back at most (64 MiB; at
                                                8 MiB the kernel handed the same frames back:
                                                4 MiB of 1/8 not stocked in 20 s, 3 runs of 3,
                                                against 0.8-0.9 s) */
#define STRETCH       (64 * STOCK_CHUNK)     /* pages classified between two judgements of progress */
#define CLAIM_STRETCH 4096                   /* pages tested against the sets' own colours, between
                                                two judgements of what they claim */
#define BACKOFF_MIN_MS 500                   /* a slow or starved stretch: the worker sleeps this long, */
#define BACKOFF_MAX_MS 30000                 /* doubling up to this, until a round fills the pools */

/* A stretch of stocking judged: a set's colour is 1 page in 16-64 and the strict test confirms
   20-65% of them, so a 1/8 slice keeps 1 page in 40 or more.  Keeping fewer than 1 in 1024, a
   set is no colour's (2.4 million pages classified in two minutes stocked 211 pages once,
   holding 9 GB of rejected frames); fewer than 1 in 256, the host is too noisy for the strict
   test just then (1 page in 700: 1.7 million pages in two minutes, a whole CPU, for 2500). */
ca_stock_progress_t _ca_colour_progress(size_t classified, size_t taken) {
  return taken * 1024 < classified ? CA_STOCK_STARVED : taken * 256 < classified ? CA_STOCK_SLOW : CA_STOCK_OK;
}

/* A stretch judged bad (`bad`) may be the moment: in 5 of 24 pv frames processes the sets, good
   until then, were dropped at their first judgement while the program ran, and not found again
   before it ended.  So the sets are dropped (true) only when the judgement after a bad one,
   after the back-off, is bad too; a good one (`judged_ok`) clears `*suspected`. */
bool _ca_colour_suspect(bool* suspected, bool bad, bool judged_ok) {
  if (bad) { bool drop = *suspected; *suspected = !drop; return drop; }
  if (judged_ok) *suspected = false;
  return false;
}

/* The worker's sleep after a round: none after a good one, else 0.5 s doubling to 30 s. */
uint64_t _ca_colour_backoff(uint64_t ms, bool bad) {
  return !bad ? 0 : ms == 0 ? BACKOFF_MIN_MS : ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
}

/* Wait (wake_lock held) for a wake-up or ms milliseconds. */
static void wait_wake(uint64_t ms) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += (time_t)(ms / 1000);
  t.tv_nsec += (long)(ms % 1000) * 1000000;
  if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
  pthread_cond_timedwait(&L.wake, &L.wake_lock, &t);
}

/* One madvise per run of adjacent pages (they were pushed in address order within each supply
   chunk): each call is a TLB shootdown, an interrupt to every CPU running one of the program's
   threads.  Page by page, one 3 s pv messages run made 12,383 such calls. */
static void release_rejected(ca_page_pool_t* rejected) {
  for (size_t i = 0, len; i < rejected->count; i += len) {
    uint8_t* start = rejected->pages[i];
    for (len = 1; i + len < rejected->count && rejected->pages[i + len] == start + len * CA_OS_PAGE; len++) {}
    _ca_os_purge(start, len * CA_OS_PAGE);
  }
  rejected->count = 0;
}

/* The first CPU of `allowed` after `avoid` (cyclically), or `avoid` when it is the only one. */
static int other_cpu(const cpu_set_t* allowed, int avoid) {
  for (int k = 1; k < CPU_SETSIZE; k++) {
    int c = (avoid + k) % CPU_SETSIZE;
    if (CPU_ISSET(c, allowed)) return c;
  }
  return avoid;
}

static bool pin(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof one, &one) == 0;
}

/* Protection's share of the worker (protect.c): up to `pages` pages of registered ranges, 8 at a
   time, each batch's old frames re-tested for their pool; returns the pages still pending. */
static size_t protect_some(size_t pages) {
  size_t pending = 0;
  for (size_t done = 0; _ca_protect_armed() && done < pages; done += 8) {
    size_t before = pending;
    pending = _ca_protect_work(&protect_ops, 8);
    test_kept();
    if (pending == 0 || pending == before) break;     /* all done, or nothing due / no stock */
  }
  return pending;
}

static void worker(int here);

/* The worker's CPU time so far (ns): its cost to the machine, on a CPU the program may want. */
static uint64_t worker_cpu_ns(void) {
  uint64_t ns;
  return atomic_load(&L.worker_alive) && _ca_clock_read_ns(L.worker_clock, &ns) ? ns : L.worker_cpu_ns;
}

/* The worker's pace (option colour_worker, percent of one CPU): once the layer is ready, its
   CPU time since then stays within that share of the wall time since then plus a second's
   allowance, by sleeping between supply chunks (not while a program thread waits in
   chromalloc_colours_prepare: it asked for the stock).  At 100% it never sleeps: the pool of a
   1/8 slice, of which a page classified here is about 1 in 30, kept it classifying for as
   long as the process ran.  The sleep due after `cpu` ns of CPU time in `wall` ns, at most a
   second at a time: */
#define PACE_ALLOWANCE_NS 1000000000ull
uint64_t _ca_colour_pace_ns(uint64_t cpu, uint64_t wall, uint32_t pct) {
  if (pct >= 100 || pct == 0 || cpu <= PACE_ALLOWANCE_NS) return 0;
  uint64_t due = (cpu - PACE_ALLOWANCE_NS) * 100 / pct;      /* wall time this CPU time needs */
  if (due <= wall) return 0;
  return due - wall > 1000000000ull ? 1000000000ull : due - wall;
}

static void pace(void) {
  uint64_t cpu = worker_cpu_ns();
  if (L.pace_from_ns == 0 || atomic_load(&L.preparing) > 0 || cpu < L.pace_cpu_ns) return;   /* no clock: no pace */
  uint64_t ns = _ca_colour_pace_ns(cpu - L.pace_cpu_ns, _ca_clock_ns() - L.pace_from_ns,
                                   (uint32_t)_ca_colour_opt(CA_COPT_WORKER));
  if (ns == 0) return;
  uint64_t t = _ca_clock_ns();
  pthread_mutex_lock(&L.wake_lock);
  wait_wake(ns / 1000000 + 1);                  /* a prepare or a new set wakes it */
  pthread_mutex_unlock(&L.wake_lock);
  L.paced_ns += _ca_clock_ns() - t;
}

static void* worker_main(void* arg) {
  if (pthread_getcpuclockid(pthread_self(), &L.worker_clock) == 0) atomic_store(&L.worker_alive, true);
  worker((int)(intptr_t)arg);
  _ca_clock_read_ns(CLOCK_THREAD_CPUTIME_ID, &L.worker_cpu_ns);
  atomic_store(&L.worker_alive, false);
  return NULL;
}

/* calibrate, then stock the pools and protect for the process's life; returns when it gives up */
static void worker(int here) {
  _ca_trap_quiet_thread();
  /* background work: the program's threads come first (nice 19 for this thread) */
  setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
  /* measure on one CPU, preferably not the one of the thread that asked (its own memory traffic
     would share the L2 with our measurements) */
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    int cpu = other_cpu(&allowed, here >= 0 ? here : 0);
    if (pin(cpu)) L.worker_cpu = cpu;
  }
  uint64_t rng = 0x9E3779B97F4A7C15ull ^ _ca_clock_ns();
  L.start_ns = _ca_clock_ns();
  if (!start(&rng)) return;
  uint64_t last_verify = _ca_clock_ms(), backoff_ms = 0;
  for (;;) {
    /* the colours the registered sets need, and their eviction sets */
    _ca_lock(&L.lock);
    uint32_t need = colours_needed(), gen = L.generation;
    _ca_unlock(&L.lock);
    /* at least four sets: quiet_window() and sets_held() judge the moment by them (with a
       profile and one set needed, stocking 3 MiB of 1/8 took 26-120 s in 3 runs of 8, against
       1-5 s in the others) */
    if (need < 4 && L.cal.colours >= 4) need = 4;
    uint32_t drops = atomic_load(&L.inject_drops);
    if (drops > 0 && atomic_compare_exchange_strong(&L.inject_drops, &drops, drops - 1)) {
      drop_sets();
      if (!retry_later("test: eviction sets lost on purpose")) return;
      continue;
    }
    for (int attempt = 0; attempt < 3 && L.map.ncolours < need; attempt++)
      _ca_colour_discover(&L.probe.base, &L.map, &L.src, need, L.cal.colours, 60000, &rng, &L.disc);
    if (L.map.ncolours < need) {
      if (!retry_later("could not find eviction sets for the colours the sets need")) return;
      continue;
    }
    L.failures_in_row = 0;
    if (!L.src.trimmed) _ca_page_source_trim(&L.src);   /* 16 MiB of calibration pages */
    if (L.ready_ns == 0) { L.ready_ns = _ca_clock_ns() - L.start_ns; L.reason[0] = 0; }
    if (L.pace_from_ns == 0) { L.pace_from_ns = _ca_clock_ns(); L.pace_cpu_ns = worker_cpu_ns(); }
    atomic_store_explicit(&L.state, CA_COLOURS_READY, ca_release);
    /* stock the pools, a batch at a time, each batch in a quiet window and bracketed by a check
       that the sets still work; a batch measured in a noisy moment is thrown away.  Pages no set
       takes keep their frames until the round ends: released at once, the kernel would hand
       the very same frames (of the wrong colours) back in the next chunk. */
    ca_page_pool_t rejected = {0};
    size_t stretch_classified = 0, stretch_taken = 0, claim_tested = 0, claim_hits = 0;
    bool suspect = false, slow = false, judged_ok = false;
    int since_quiet = QUIET_EVERY;
    /* an injected loss (tests) is taken between chunks, as a suspicion would be: stocking a
       pool can take tens of seconds, and the test waits for the loss, not for the stock */
    while (pools_short(gen) && !suspect && !slow && atomic_load(&L.inject_drops) == 0) {
      if (!audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; break; }
      uint8_t* chunk = _ca_pool_supply(STOCK_CHUNK);
      if (chunk == NULL) break;
      for (size_t b = 0; b < STOCK_CHUNK; b += BATCH) {
        int colour[BATCH];
        uint64_t mask = sets_mask(false), excl = sets_mask(true);
        if (since_quiet >= QUIET_EVERY) {
          int tries = 0;
          uint64_t tq = _ca_clock_ns();
          for (; !quiet_window() && tries < 50; tries++) {
            struct timespec t = { 0, 20000000 };
            nanosleep(&t, NULL);
          }
          L.unquiet_batches += tries == 50;
          L.quiet_ns += _ca_clock_ns() - tq;
          since_quiet = 0;
        }
        since_quiet++;
        uint64_t tc = _ca_clock_ns();
        /* elimination trusts a test that sees nothing: only while the sets evict about as
           clearly as they have at best in this process (at 170%, in runs where they had 250%
           otherwise, a 7/8 pool held as many pages of the first eighth as random pages do,
           and protection moved victims into them); at best bar one reading (one of 288%,
           where the others read 200-233%, kept a pv packets process's 7/8 pool empty to the
           end, and protection with it) */
        uint32_t best = L.best_ratio_pct ? L.best_ratio_pct : L.top_ratio_pct;
        bool eliminate = L.probe.set_ratio_pct * 5 >= best * 4;
        size_t claimed = 0;
        for (size_t i = 0; i < BATCH; i++) {
          colour[i] = _ca_colour_find(&L.probe.base, &L.map, chunk + (b + i) * CA_OS_PAGE, mask);
          claimed += colour[i] >= 0;
          if (colour[i] < 0) colour[i] = eliminate ? excluded(chunk + (b + i) * CA_OS_PAGE, excl) : -2;
          if (colour[i] != -2) colour[i] = audited(chunk + (b + i) * CA_OS_PAGE, colour[i]);
        }
        L.classified += BATCH;
        L.classify_ns += _ca_clock_ns() - tc;
        tc = _ca_clock_ns();
        bool trusted = sets_held();
        L.held_ns += _ca_clock_ns() - tc;
        if (!trusted) { L.batches_dropped++; since_quiet = QUIET_EVERY; }   /* look again first */
        /* pages the colours tested claimed, counted as if for a 1/8 slice: the sets' claims,
           before the audit, since they judge the sets (counted after it, a group that evicts
           its slice's pages only in part, as at times here, turned every claimed page away,
           and 1 of 8 pv packets processes monitoring every chunk had its good sets dropped:
           173-622 claims of 4096 in the stretches judged, 0-10 of them left by the audit;
           audit.c) */
        uint32_t share = L.cal.colours ? (uint32_t)__builtin_popcountll(mask) * 8 : 0;
        if (trusted && share) {
          claim_tested += BATCH * share / L.cal.colours;
          claim_hits += claimed;
        }
        for (size_t i = 0; i < BATCH; i++) {
          uint8_t* page = chunk + (b + i) * CA_OS_PAGE;
          if (!trusted || !pools_short(gen) || !route(page, colour[i])) _ca_pool_push(&rejected, page);
          else stretch_taken++;
        }
        stretch_classified += BATCH;
      }
      if (rejected.count >= REJECTED_MAX) {
        release_rejected(&rejected);
        /* the kernel hands the released frames back next: what the sets claim of them says
           nothing of the sets (judged, recolour's 12 MiB of 1/8 had its sets and stock dropped
           three times in 120 s) */
        claim_tested = claim_hits = 0;
      }
      /* the sets claim almost none of their colours' pages (1 in 16 expected; seen: 3 in
         4000 pages, the probe's sets evicting at 170% where they had 250% in other runs, while
         elimination filled the complement with pages the sets missed): find them again */
      if (claim_tested >= CLAIM_STRETCH) {
        bool few = _ca_colour_progress(claim_tested, claim_hits) != CA_STOCK_OK;
        /* ... unless the sets still claim pages they stocked: then the supply is short of
           their colours, not the sets wrong.  The frames a round gives back (release_rejected,
           none of the sets' colours) are what the kernel hands out next, and in pv packets
           processes that monitor every chunk, whose slice pool never filled, the claims fell
           after each release (235, 88, 22, 12, 5 of 4096) while the sets read 200-226% on
           their references; in a benchmark run (8d3e5d0) 4 of the 5 such processes had their
           sets dropped by the claims and found again.  A back-off then, not a suspicion. */
        if (few && sets_claim_stock(&rng)) { slow = true; L.claims_short++; }
        else { suspect = few; L.suspected_by[0] += few; }
        judged_ok = !few;
        claim_tested = claim_hits = 0;
      }
      /* sets that confirm almost nothing are dropped; few, left to a quieter moment */
      if (stretch_classified >= STRETCH) {
        ca_stock_progress_t g = _ca_colour_progress(stretch_classified, stretch_taken);
        L.suspected_by[1] += !suspect && g == CA_STOCK_STARVED;
        suspect = suspect || g == CA_STOCK_STARVED;
        slow = slow || g == CA_STOCK_SLOW;
        judged_ok = g == CA_STOCK_OK && !suspect;
        stretch_classified = stretch_taken = 0;
      }
      pthread_mutex_lock(&L.wake_lock);
      pthread_cond_broadcast(&L.wake);               /* waiters in chromalloc_colours_prepare */
      pthread_mutex_unlock(&L.wake_lock);
      /* a victim waits no longer than a chunk: every page due, as far as the stock of the
         other colours allows (64 per chunk of 512 pages classified: pv packets' 606 pages
         were done by frame 850-900, by 400-500 now, the victim slower until then) */
      protect_some(SIZE_MAX);
      pace();
    }
    release_rejected(&rejected);
    if (rejected.pages) _ca_os_unmap(rejected.pages, rejected.cap * sizeof(void*));
    if (!suspect && !slow && !audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; }   /* a pool that just filled */
    L.suspicions += suspect;
    if (_ca_colour_suspect(&L.suspected, suspect, judged_ok)) drop_sets();
    else if (suspect) slow = true;                   /* the first: a back-off, the sets kept */
    if (slow || suspect) L.backoffs++;
    backoff_ms = _ca_colour_backoff(backoff_ms, slow || suspect);
    if (_ca_clock_ms() - last_verify > 2000) { verify_sample(&rng); last_verify = _ca_clock_ms(); }
    size_t pending = protect_some(256);
    test_kept();
    /* sleep until a pool runs low or a set is added (briefly while ranges wait) */
    pthread_mutex_lock(&L.wake_lock);
    if ((!pools_short(gen) || backoff_ms > 0) && !replan(gen)) wait_wake(backoff_ms > 0 ? backoff_ms : pending ? 20 : 2000);
    pthread_mutex_unlock(&L.wake_lock);
  }
}

static void wake_worker(void) {
  pthread_mutex_lock(&L.wake_lock);
  pthread_cond_broadcast(&L.wake);
  pthread_mutex_unlock(&L.wake_lock);
}

/* ---- the core hooks ----------------------------------------------------------------------- */

/* What set id can hand out now (L.lock held): its pool, unless its slice audit has not vouched
   for it yet (then nothing). */
static ca_page_pool_t* vouched_pool(int id) {
  return L.sets[id].unvouched ? NULL : &L.sets[id].pool;
}

static bool hook_span_memory(void* base, size_t bytes, uint32_t flavour) {
  if (flavour == 0) { _ca_protect_add(base, base, bytes); return false; }   /* ordinary memory */
  if (flavour > CA_COLOUR_SETS) return false;
  ca_colour_set_t* s = &L.sets[flavour];
  _ca_lock(&L.lock);
  ca_page_pool_t* pool = vouched_pool((int)flavour);
  bool ok = atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY && pool != NULL && _ca_pool_fill(pool, base, bytes);
  if (ok) s->filled_spans++; else s->fallback_spans++;
  /* the stock must cover the biggest request seen (up to STOCK_MAX): the next one of that size
     is then filled */
  size_t need = bytes / CA_OS_PAGE + STOCK_CHUNK / 8;
  if (!ok && s->target < need) s->target = need < STOCK_MAX ? need : STOCK_MAX;
  size_t stock = s->pool.count, target = s->target;
  _ca_unlock(&L.lock);
  if (stock < target / 2 || !ok) wake_worker();
  return ok;
}

static void hook_span_released(void* base, size_t bytes, uint32_t flavour) {
  if (flavour == 0) { _ca_protect_remove(base); return; }
  if (flavour > CA_COLOUR_SETS) return;
  _ca_lock(&L.lock);
  _ca_pool_take_back(&L.sets[flavour].pool, base, bytes);
  _ca_unlock(&L.lock);
}

static bool hook_span_ready(size_t bytes, uint32_t flavour) {
  return flavour >= 1 && flavour <= CA_COLOUR_SETS && atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY &&
         L.sets[flavour].pool.count >= bytes / CA_OS_PAGE;
}

static const ca_hooks_t colour_hooks = { hook_span_memory, hook_span_released, hook_span_ready };

void _ca_colour_fork_child(void) {
  /* the child's pooled pages are copies: their frames (colours) are not the parent's */
  atomic_store_explicit(&L.lock.v, 0, ca_relaxed);
  /* the worker does not exist here: it may have held the wake-up lock, or slept on the
     condition, at the fork (a child that asked for stock then waited on that lock for ever) */
  pthread_mutex_init(&L.wake_lock, NULL);
  pthread_cond_init(&L.wake, NULL);
  _ca_recolour_fork_release();
  for (int i = 1; i <= CA_COLOUR_SETS; i++) L.sets[i].pool.count = 0;
  L.worker_running = false;
  L.pace_from_ns = L.pace_cpu_ns = 0;           /* a new worker, on its own clock */
  atomic_store(&L.preparing, 0);                /* the threads waiting there are the parent's */
  _ca_protect_fork_child();
  if (atomic_load_explicit(&L.state, ca_relaxed) == CA_COLOURS_READY)
    atomic_store_explicit(&L.state, CA_COLOURS_CALIBRATING, ca_relaxed);
}

void _ca_colour_fork_parent(void) { _ca_recolour_fork_release(); }

static void install_hooks(void) {
  static _Atomic(bool) done;
  if (atomic_exchange(&done, true)) return;
  _ca_hooks_install(&colour_hooks);
}

/* Record ordinary spans and large objects, from now on, to be kept out of a colour set once a
   policy arms protection (protect.c): those up to the L2's size, PROTECT_L2S times the L2. */
#define PROTECT_L2S 4
void _ca_colour_protect_default(void) {
  size_t l2 = 0;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++)
    if (_ca_machine.levels[i].level == 2) l2 = _ca_machine.levels[i].size;
  if (l2 == 0 || _ca_colour_opt(CA_COPT_COLOURS) == 0) return;
  _ca_protect_init(l2, PROTECT_L2S * l2 / CA_OS_PAGE);
  install_hooks();
}

/* Set id (1..CA_COLOUR_SETS) when it is a slice at either end of the level, else one not used. */
static ca_colour_set_t end_slice(int id) {
  _ca_lock(&L.lock);
  ca_colour_set_t s = L.sets[id];
  _ca_unlock(&L.lock);
  if (s.from != 0 && s.to != s.den) s.used = false;
  return s;
}

/* Keep ordinary memory out of set id, a slice at either end of the level: the worker moves the
   recorded pages in its colours to the complement set.  0, or -1 with errno. */
int _ca_colour_reserve(int id) {
  if (_ca_colour_opt(CA_COPT_COLOURS) == 0 || atomic_load_explicit(&L.state, ca_acquire) == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; return -1; }
  if (id < 1 || id > CA_COLOUR_SETS) { errno = EINVAL; return -1; }
  ca_colour_set_t s = end_slice(id);
  if (!s.used || (s.from == 0 && s.to == s.den)) { errno = EINVAL; return -1; }
  int comp = s.from == 0 ? _ca_colour_set(s.to, s.den, s.den) : _ca_colour_set(0, s.from, s.den);
  if (comp < 0) return -1;
  if (!_ca_protect_recording()) _ca_colour_protect_default();
  if (!_ca_protect_arm(id, comp)) { errno = EBUSY; return -1; }
  wake_worker();
  return 0;
}

/* The first coloured allocation from a slice of at most a quarter at either end of the level
   reserves it, once per process (option colour_reserve): what a program confines there should
   evict nothing else.  Failure (another set reserved, colours off) changes nothing. */
void _ca_colour_reserve_first(int id) {
  static _Atomic(bool) tried;
  if (_ca_colour_opt(CA_COPT_RESERVE) == 0 || atomic_load_explicit(&tried, ca_relaxed)) return;
  ca_colour_set_t s = end_slice(id);
  if (!s.used || 4 * (s.to - s.from) > s.den) return;
  if (atomic_exchange(&tried, true)) return;
  int e = errno;
  _ca_colour_reserve(id);
  errno = e;
}

/* ---- registering sets ------------------------------------------------------------------------ */

/* A colour set id (the flavour), or -1 with errno. */
int _ca_colour_set(uint32_t from, uint32_t to, uint32_t den) {
  if (den == 0 || den > 64 || from >= to || to > den) { errno = EINVAL; return -1; }
  if (_ca_colour_opt(CA_COPT_COLOURS) == 0) { errno = ENOTSUP; return -1; }
  if (atomic_load_explicit(&L.state, ca_acquire) == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; return -1; }
  _ca_lock(&L.lock);
  int id = -1;
  for (int i = 1; i <= CA_COLOUR_SETS && id < 0; i++)
    if (L.sets[i].used && L.sets[i].from == from && L.sets[i].to == to && L.sets[i].den == den) id = i;
  for (int i = 1; i <= CA_COLOUR_SETS && id < 0; i++)
    if (!L.sets[i].used) {
      L.sets[i] = (ca_colour_set_t){ .used = true, .from = from, .to = to, .den = den,
                                     .target = (size_t)_ca_colour_opt(CA_COPT_POOL) * 256 };
      L.generation++;
      id = i;
    }
  bool start = id > 0 && !L.worker_running;
  if (start) L.worker_running = true;
  _ca_unlock(&L.lock);
  if (id < 0) { errno = ENOSPC; return -1; }
  if (start) {
    static bool once;
    if (!once) { once = true; _ca_pool_init(); install_hooks(); }
    int st = 0;
    atomic_compare_exchange_strong(&L.state, &st, CA_COLOURS_CALIBRATING);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 1u << 20);
    if (pthread_create(&L.worker, &a, worker_main, (void*)(intptr_t)sched_getcpu()) != 0) set_state(CA_COLOURS_UNAVAILABLE, "no worker thread");
    pthread_attr_destroy(&a);
  } else {
    wake_worker();
  }
  return id;
}

/* Wait until the set's pool holds `pages`, or timeout.  0, or -1 with errno. */
int _ca_colour_prepare(int id, size_t pages, int timeout_ms) {
  if (id < 1 || id > CA_COLOUR_SETS || !L.sets[id].used) { errno = EINVAL; return -1; }
  _ca_lock(&L.lock);
  if (L.sets[id].target < pages) L.sets[id].target = pages;
  _ca_unlock(&L.lock);
  atomic_fetch_add(&L.preparing, 1);
  wake_worker();
  uint64_t deadline = _ca_clock_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
  int r;
  for (;;) {
    int st = atomic_load_explicit(&L.state, ca_acquire);
    if (st == CA_COLOURS_UNAVAILABLE) { errno = ENOTSUP; r = -1; break; }
    _ca_lock(&L.lock);
    ca_page_pool_t* pool = vouched_pool(id);
    size_t have = pool != NULL ? pool->count : 0;
    _ca_unlock(&L.lock);
    if (st == CA_COLOURS_READY && have >= pages) { r = 0; break; }
    if (_ca_clock_ms() >= deadline) { errno = ETIMEDOUT; r = -1; break; }
    pthread_mutex_lock(&L.wake_lock);
    wait_wake(50);
    pthread_mutex_unlock(&L.wake_lock);
  }
  atomic_fetch_sub(&L.preparing, 1);
  return r;
}

/* Hold the calling thread on its CPU while it measures (not the worker's, when there is
   another: it may be measuring too); `was` keeps its affinity to restore.  A test whose
   reference is loaded on one CPU and timed on the other reads as an eviction (unpinned, 40% of
   a colour's pages read as not of it, or a third of other pages as of it; pinned, 1-3%). */
static bool pin_here(cpu_set_t* was) {
  int cpu = sched_getcpu();
  if (cpu < 0 || sched_getaffinity(0, sizeof *was, was) != 0) return false;
  if (cpu == L.worker_cpu) cpu = other_cpu(was, cpu);
  return pin(cpu);
}

/* Colour index of the page holding p among the known colours, or -1, measured pinned. */
int _ca_colour_of(const void* p) {
  if (atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return -1;
  const void* page = (const void*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  cpu_set_t was;
  bool pinned = pin_here(&was);
  int c = _ca_colour_of_live(&L.probe.base, &L.map, page, ~(uint64_t)0, 3, 3, CA_ASK_FULLY);
  if (pinned) sched_setaffinity(0, sizeof was, &was);
  return c;
}

/* Take one pooled page of set id (for recolouring); NULL when the pool is empty. */
void* _ca_colour_take_page(int id) {
  if (id < 1 || id > CA_COLOUR_SETS || atomic_load_explicit(&L.state, ca_acquire) != CA_COLOURS_READY) return NULL;
  _ca_lock(&L.lock);
  ca_page_pool_t* pool = vouched_pool(id);
  void* p = pool != NULL ? _ca_pool_pop(pool) : NULL;
  _ca_unlock(&L.lock);
  wake_worker();
  return p;
}

void* _ca_colour_slot(void) {
  _ca_lock(&L.lock);
  void* slot = _ca_pool_slot();
  _ca_unlock(&L.lock);
  return slot;
}

/* A recoloured page's old frame, parked at slot, is of set id: it joins that set's pool (made
   writable again: it was parked read-only), after the pool's re-test if `test` (test_kept), or
   the slot is given back unused (id 0). */
void _ca_colour_keep_frame(int id, void* slot, bool test) {
  bool writable = id > 0 && _ca_syscall6(SYS_mprotect, (long)slot, CA_OS_PAGE, PROT_READ | PROT_WRITE, 0, 0, 0) == 0;
  _ca_lock(&L.lock);
  if (!writable) _ca_pool_unslot(slot);
  else if (test && K.n < KEPT_MAX) { K.page[K.n] = slot; K.set[K.n++] = (uint8_t)id; }
  else if (!test && _ca_pool_push(&L.sets[id].pool, slot)) { L.sets[id].pool.returned++; L.frames_kept++; }
  else _ca_pool_drop(slot);
  _ca_unlock(&L.lock);
}

/* A page was recoloured: it is a VMA of its own from now on (pool.c caps those). */
void _ca_colour_note_recolour(uint64_t ns) {
  _ca_lock(&L.lock);
  L.recolours++;
  L.recolour_ns += ns;
  _ca_pool_note_moved(1);
  _ca_unlock(&L.lock);
}

/* ---- statistics ----------------------------------------------------------------------------- */

void _ca_colour_stats_json(ca_buf_t* b) {
  static const char* const names[] = { "off", "calibrating", "ready", "unavailable" };
  int st = atomic_load_explicit(&L.state, ca_acquire);
  ca_buf_str(b, "{\"state\":\"");
  ca_buf_str(b, names[st & 3]);
  ca_buf_str(b, "\",\"reason\":\"");
  ca_buf_str(b, L.reason);
  ca_buf_str(b, "\",\"profile\":");
  ca_buf_str(b, L.cal_from_profile ? "true" : "false");
  ca_buf_str(b, ",\"level\":"); ca_buf_u64(b, L.cal.level);
  ca_buf_str(b, ",\"colours\":"); ca_buf_u64(b, L.cal.colours);
  ca_buf_str(b, ",\"ways\":"); ca_buf_u64(b, L.cal.ways);
  ca_buf_str(b, ",\"eviction_sets\":"); ca_buf_u64(b, L.map.ncolours);
  /* start-up: the worker's phases (ms); ready_ms from its start, 0 while not ready */
  ca_buf_str(b, ",\"probe_ms\":"); ca_buf_u64(b, L.probe_ns / 1000000);
  ca_buf_str(b, ",\"discover_ms\":"); ca_buf_u64(b, L.discover_ns / 1000000);
  ca_buf_str(b, ",\"estimate_ms\":"); ca_buf_u64(b, L.estimate_ns / 1000000);
  ca_buf_str(b, ",\"ready_ms\":"); ca_buf_u64(b, L.ready_ns / 1000000);
  ca_buf_str(b, ",\"worker_cpu_ms\":"); ca_buf_u64(b, worker_cpu_ns() / 1000000);
  ca_buf_str(b, ",\"worker_paced_ms\":"); ca_buf_u64(b, L.paced_ns / 1000000);
  ca_buf_str(b, ",\"set_builds\":"); ca_buf_u64(b, L.disc.set_builds);
  ca_buf_str(b, ",\"set_build_failures\":"); ca_buf_u64(b, L.disc.set_failures);
  ca_buf_str(b, ",\"set_build_ms\":"); ca_buf_u64(b, L.disc.set_build_ns / 1000000);
  ca_buf_str(b, ",\"set_builds_plain\":"); ca_buf_u64(b, L.probe.base.plain_searches);
  static const char* const stage[CA_SEARCH_STAGES] = { "whole", "reduce", "large", "extend", "full", "needed" };
  ca_buf_str(b, ",\"set_build_failed_at\":{");
  for (int i = 0; i < CA_SEARCH_STAGES; i++) {
    ca_buf_str(b, i ? ",\"" : "\""); ca_buf_str(b, stage[i]); ca_buf_str(b, "\":");
    ca_buf_u64(b, L.probe.base.search_failed[i]);
  }
  ca_buf_str(b, "}");
  ca_buf_str(b, ",\"sets_duplicate\":"); ca_buf_u64(b, L.disc.duplicates);
  ca_buf_str(b, ",\"start_failures\":"); ca_buf_u64(b, L.start_failures);
  ca_buf_str(b, ",\"estimated\":"); ca_buf_u64(b, L.estimated);
  ca_buf_str(b, ",\"estimate_chunks\":"); ca_buf_u64(b, L.estimate_chunks);
  ca_buf_str(b, ",\"probe_remeasured\":"); ca_buf_u64(b, L.probe_remeasured);
  ca_buf_str(b, ",\"pages_classified\":"); ca_buf_u64(b, L.classified);
  ca_buf_str(b, ",\"batches_dropped\":"); ca_buf_u64(b, L.batches_dropped);
  ca_buf_str(b, ",\"unquiet_batches\":"); ca_buf_u64(b, L.unquiet_batches);
  ca_buf_str(b, ",\"quiet_ms\":"); ca_buf_u64(b, L.quiet_ns / 1000000);
  ca_buf_str(b, ",\"classify_ms\":"); ca_buf_u64(b, L.classify_ns / 1000000);
  ca_buf_str(b, ",\"held_ms\":"); ca_buf_u64(b, L.held_ns / 1000000);
  ca_buf_str(b, ",\"set_ratio_pct\":"); ca_buf_u64(b, L.probe.set_ratio_pct);
  ca_buf_str(b, ",\"top_ratio_pct\":"); ca_buf_u64(b, L.top_ratio_pct);
  ca_buf_str(b, ",\"best_ratio_pct\":"); ca_buf_u64(b, L.best_ratio_pct);
  ca_buf_str(b, ",\"passes\":"); ca_buf_u64(b, (uint64_t)L.probe.passes);
  ca_buf_str(b, ",\"verify_drops\":"); ca_buf_u64(b, L.verify_drops);
  ca_buf_str(b, ",\"frames_kept\":"); ca_buf_u64(b, L.frames_kept);
  ca_buf_str(b, ",\"frames_rejected\":"); ca_buf_u64(b, K.rejected);
  ca_buf_str(b, ",\"audit\":{\"groups_judged\":"); ca_buf_u64(b, L.audit_judged);
  ca_buf_str(b, ",\"groups_invalid\":"); ca_buf_u64(b, L.audit_invalid);
  ca_buf_str(b, ",\"strays\":"); ca_buf_u64(b, L.audit_strays);
  ca_buf_str(b, ",\"pages\":"); ca_buf_u64(b, L.audit_pages);
  ca_buf_str(b, ",\"turned_away\":"); ca_buf_u64(b, L.audit_turned_away);
  ca_buf_str(b, ",\"groups_loud\":"); ca_buf_u64(b, L.audit_loud);
  ca_buf_str(b, ",\"loud_pages\":"); ca_buf_u64(b, L.audit_loud_pages);
  ca_buf_str(b, "}");
  ca_buf_str(b, ",\"suspicions\":"); ca_buf_u64(b, L.suspicions);
  ca_buf_str(b, ",\"suspected_by\":{\"claims\":"); ca_buf_u64(b, L.suspected_by[0]);
  ca_buf_str(b, ",\"starved\":"); ca_buf_u64(b, L.suspected_by[1]);
  ca_buf_str(b, ",\"audit\":"); ca_buf_u64(b, L.suspected_by[2]);
  ca_buf_str(b, "}");
  ca_buf_str(b, ",\"claims_short\":"); ca_buf_u64(b, L.claims_short);
  ca_buf_str(b, ",\"set_rebuilds\":"); ca_buf_u64(b, L.set_rebuilds);
  ca_buf_str(b, ",\"backoffs\":"); ca_buf_u64(b, L.backoffs);
  ca_buf_str(b, ",\"pages_moved\":"); ca_buf_u64(b, _ca_pool_moved());
  ca_buf_str(b, ",\"pages_moved_limit\":"); ca_buf_u64(b, _ca_pool_moved_limit());
  ca_buf_str(b, ",\"recolours\":"); ca_buf_u64(b, L.recolours);
  ca_buf_str(b, ",\"recolour_us\":");
  ca_buf_fixed(b, L.recolours ? (int64_t)(L.recolour_ns / L.recolours / 10) : 0, 2);
  ca_buf_str(b, ",\"protect\":");
  _ca_protect_stats_json(b);
  ca_buf_str(b, ",\"sets\":[");
  bool first = true;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used) continue;
    if (!first) ca_buf_char(b, ',');
    first = false;
    ca_buf_str(b, "{\"id\":"); ca_buf_u64(b, (uint64_t)i);
    ca_buf_str(b, ",\"slice\":\""); ca_buf_u64(b, s->from); ca_buf_char(b, '/'); ca_buf_u64(b, s->den);
    ca_buf_str(b, "-"); ca_buf_u64(b, s->to); ca_buf_char(b, '/'); ca_buf_u64(b, s->den);
    ca_buf_str(b, "\",\"by_elimination\":"); ca_buf_str(b, s->by_elimination ? "true" : "false");
    ca_buf_str(b, ",\"pool_pages\":"); ca_buf_u64(b, s->pool.count);
    ca_buf_str(b, ",\"pages_handed\":"); ca_buf_u64(b, s->pool.handed);
    ca_buf_str(b, ",\"pages_returned\":"); ca_buf_u64(b, s->pool.returned);
    ca_buf_str(b, ",\"spans_filled\":"); ca_buf_u64(b, s->filled_spans);
    ca_buf_str(b, ",\"spans_ordinary\":"); ca_buf_u64(b, s->fallback_spans);
    ca_buf_str(b, ",\"dropped_pages\":"); ca_buf_u64(b, s->dropped_pages);
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "]}");
}
