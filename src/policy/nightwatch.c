/* NightWatch (paper 000): learn online which allocation contexts produce polluter chunks and
   give their new chunks restrictive mapping (pages of 1/8 of the L2's colours); everything
   else keeps open mapping.

   Per chunk above the span classes (64 KiB here), and per chunk of a page or more of a span
   class named one by one (7, below) (the core calls `place`, src/core/hooks.h):
     1. context: sites.c names it from the call site or the size, else by a stack scan.
     2. prediction: restrictive only when the context's last two monitored chunks were
        polluters; a first chunk, unknown or mixed evidence -> open.
     3. sampling: a context monitors its next chunk when its countdown runs out; the skip
        interval doubles after a correct prediction (up to SKIP_MAX) and falls back to 0 after
        a wrong one.  A monitored chunk is a large object (own pages) given its predicted
        mapping; the monitor (monitor/monitor.c) samples it and hands back a verdict.  A
        context monitors one chunk at a time, and monitoring as a whole stays within its
        budget (option nightwatch_budget, per mille of the run time: page protection and
        faults, measured, plus the extra cost of allocating monitored chunks apart).  A chunk
        below the L2 cannot stream more than the L2 by itself: it joins its context's group
        instead (6), by its first page.
     4. a live chunk switches mapping at most once, by recolouring: to restrictive when its
        verdict makes its context restrictive (two polluter verdicts), back to open when its
        verdict is normal, and only when it has lived SWITCH_AGE_MS (short-lived chunks are not
        worth moving: the next ones get the new prediction).
     5. protection (option nightwatch_protect): open memory (spans and large objects up to the
        L2's size, 4 times the L2 in all, oldest first) is recorded as the core hands it out;
        once a restrictive chunk is placed, the colour worker moves its pages that lie in the
        restrictive colours to the other 7/8 (color/protect.c), so that the confined polluter
        can evict nothing of it.  Monitored chunks join only after their verdict (their pages
        trap until then).
   Chunks of the span classes, below a page and up to 64 KiB (option nightwatch_small), do not
   reach `place`: the fast path stays the foundation's.  The core samples them instead, one per
   _ca_sample_period bytes (the L2 / 8) of a thread's span-class allocations (hooks.h), and calls
   `sample` (naming, counting and predicting every chunk of 4-64 KiB cost the foundation's
   mixed 2.2% of its wall time, 0.1% sampled):
     6. the sampled chunk's context is noted in the size table (per size class: the contexts
        sampled there and how often); when the context is due for monitoring, the chunk is placed
        on a page of its own and joins its context's group in the monitor, where the sampled
        chunks of one context are judged together, each standing for the period's bytes, next
        to the context's chunks of a page or more below the L2, each standing for its size
        (monitor.c); the group's verdict goes through the same predictor as a chunk's.  A
        context not due for DEFER_MIN more samples defers its thread's next sample by
        SAMPLE_DEFER periods, as the skip interval grows (or the budget refuses it).
     7. span-level mapping: a size class is served from restrictive spans (the core routes the
        class to the thread's restrictive heap) while the contexts the predictor makes
        restrictive hold ROUTE_SHARE_PCT of the class's samples, and back from open spans as
        soon as they do not (another context appears there).  A class of a page or more is
        named one by one instead (`place`, each chunk its context's mapping) while a
        restrictive context shares it with others, and while one of its contexts has a group
        on (its members then join as chunks of `place` do); it is still sampled meanwhile.  A
        member's page pairs only when something re-protects it after its burst and before its
        next use: pv neutral's buffers are reused every ~10 us, with no allocator call in
        between, and its sampled members paired 0-1 times in 160, against 16 in 30-94 named one
        by one (a 5 us burst paired them too; docs/nightwatch.md, eighteenth session).
   Chunks allocated by glibc itself (stdio and directory-stream buffers, which the kernel fills
   through glibc's internal, non-interposable system calls) are never monitored.  When the
   colour layer turns out to be unavailable, the policy uninstalls itself and says why in the
   statistics. */
#define _GNU_SOURCE
#include "nightwatch.h"
#include "sites.h"
#include "../core/hooks.h"
#include "../color/colour.h"
#include "../monitor/context.h"
#include "../monitor/monitor.h"
#include <pthread.h>
#include <stdlib.h>

/* the options (the table is at the end) */
typedef enum { NW_OPT_ON, NW_OPT_MONITOR, NW_OPT_BUDGET, NW_OPT_PROTECT, NW_OPT_SMALL, NW_OPT_DELAY, NW_OPT_COUNT } nw_option_t;
static long nw_options[NW_OPT_COUNT];
static inline long nw_opt(nw_option_t o) { return nw_options[o]; }

#define SKIP_MAX       1024
#define BUDGET_SKIP    64                    /* chunks a context skips after the budget refused it */
#define RETRY_MS       250                   /* a context's next group after one that judged nothing */
#define MAX_WATCHED    64
#define SWITCH_AGE_MS  20
#define MAX_REPORTED   200
#define TOUCH_NS       1500                  /* first touch of a fresh page (a fault: 1.4 us here) */
#define GROUP_COOKIE   (1ull << 32)          /* a monitor cookie naming a context's group */
#define CLASS_CTXS     4                     /* contexts the size table tells apart per class */
#define ROUTE_SHARE_PCT 95                   /* restrictive contexts' share of a class's samples */
#define ROUTE_MIN      8                     /* samples of a class before it is routed */
#define EVENTS         96                    /* timeline entries kept (the first ones) */
#define DEFER_MIN      8                     /* a context's countdown beyond which samples are deferred */
#define SAMPLE_DEFER   4                     /* periods a deferred thread's next sample waits */

typedef struct nw_ctx_s {                     /* NightWatch's view of one context (sites.c) */
  /* what every chunk of the context reads or counts, in its first cache line: a program that
     copies a block bigger than the L1 between two chunks (the foundation's mixed) misses on
     each line of it every time; member_bytes and group_on are written under NW.lock */
  _Atomic(uint64_t) chunks, bytes;
  _Atomic(int64_t)  countdown;
  uint64_t          member_bytes;             /* `bytes` when its next chunk of a page or more may join */
  _Atomic(int)      inflight;                 /* its chunks being monitored now */
  _Atomic(int)      decision;                 /* ca_mapping_t */
  bool              group_on;                 /* its chunks below the L2 are being monitored as a group */
  _Atomic(uint64_t) restrictive;
  _Atomic(uint64_t) samples;                  /* its small chunks sampled (each ~_ca_sample_period bytes) */
  _Atomic(uint64_t) reserved_ns;              /* expected cost of its chunk or group in flight */
  /* under NW.lock */
  uint32_t          skip;
  uint8_t           history, nverdicts;
  bool              tried;                    /* a chunk or group of it has been monitored */
  uint64_t          monitored, pages, hits, misses, far, unused, interference;
  uint64_t          pred_hits, pred_misses, switches;
  ca_mapping_t      group_predicted;          /* the prediction when the group started */
  uint32_t          unjudged, unjudged_run;   /* its groups that judged nothing: all, in a row */
  uint64_t          retry_ms;                 /* its next group not before (coarse clock) */
} __attribute__((aligned(64))) nw_ctx_t;
_Static_assert(offsetof(nw_ctx_t, reserved_ns) == 64, "what every chunk reads fills the first line");

typedef struct nw_class_s {                   /* the size table of small chunks, per size class */
  _Atomic(int)      ctx[CLASS_CTXS];          /* context + 1 (0: none), claimed once */
  _Atomic(uint32_t) samples[CLASS_CTXS];
  _Atomic(uint32_t) total;                    /* with the samples of contexts beyond CLASS_CTXS */
} nw_class_t;

typedef enum nw_event_kind_e { EV_NONE, EV_VERDICT, EV_DECISION, EV_ROUTE, EV_COLOURS, EV_PROTECT, EV_PLACE } nw_event_kind_t;

typedef struct nw_event_s {                   /* one entry of the timeline (statistics) */
  uint32_t         ms;                        /* since start */
  _Atomic(uint8_t) kind;                      /* nw_event_kind_t, stored last (EV_NONE: being written) */
  bool             on;                        /* polluter, restrictive, routed, shared by a restrictive context */
  uint32_t         arg;                       /* context, or a class's block size */
} nw_event_t;

typedef struct nw_watched_s {                 /* a chunk being monitored */
  void*        p;
  size_t       n;
  int          ctx;
  ca_mapping_t predicted;
  uint64_t     born_ms;
  bool         freeing;                       /* the program is freeing it: no switch */
  bool         reserved;                      /* slot taken, chunk being allocated */
} nw_watched_t;

static struct {
  bool              on, monitor_all, protect;
  bool              groups;                   /* chunks below the L2 are judged in groups (nightwatch_small) */
  size_t            judged_min;               /* bytes: smaller chunks are not monitored (the L2) */
  ca_lock_t         lock;                     /* contexts' verdict fields, watched[] */
  nw_ctx_t          ctx[CA_NW_CONTEXTS];
  _Atomic(int)      nrestrictive;             /* contexts predicted restrictive now (changed under lock) */
  nw_watched_t      watched[MAX_WATCHED];
  _Atomic(int)      nwatched;
  _Atomic(void*)    switching;                /* chunk being recoloured (free waits) */
  int               restrict_id, open_id;     /* colour sets: 0 = not yet, -1 = unavailable */
  bool              monitor_ready;
  uint64_t          start_ns, budget_pm;
  nw_class_t        classes[CA_CLASS_MAX];    /* no lock: counts may lose an increment in a race */
  bool              class_shared[CA_CLASS_MAX];   /* named one by one for a restrictive context (logged) */
  _Atomic(uint64_t) small_members, medium_members;
  char              off_reason[96];
  _Atomic(uint64_t) monitored, switches, lost, over_budget, alloc_cost_ns;
  _Atomic(uint64_t) reserved_ns;              /* expected cost of the chunks and groups in flight */
  _Atomic(uint64_t) next_ok_ms[4];            /* the budget allows nothing before (coarse clock),
                                                 per share (within_budget) */
  nw_event_t        events[EVENTS];           /* the timeline: when the policy changed its mind */
  _Atomic(uint32_t) nevents;                  /* including those past EVENTS (not kept) */
  _Atomic(bool)     colours_seen;             /* EV_COLOURS logged */
} NW;

/* statistics counters on the allocation path: a plain load and store (no locked instruction);
   threads racing may lose an increment */
static inline void bump(_Atomic(uint64_t)* c, uint64_t v) {
  atomic_store_explicit(c, atomic_load_explicit(c, ca_relaxed) + v, ca_relaxed);
}
static inline void bump32(_Atomic(uint32_t)* c) {
  atomic_store_explicit(c, atomic_load_explicit(c, ca_relaxed) + 1, ca_relaxed);
}

static __thread bool busy __attribute__((tls_model("initial-exec")));

/* The timeline: verdicts, decisions, class routes, the colour layer found ready, protection
   armed, each with its time, so that a run whose victim gained late (or not at all) can be
   explained from its statistics.  Rare events (a few per context); the first EVENTS are kept. */
static void log_event(nw_event_kind_t kind, uint32_t arg, bool on) {
  uint32_t i = atomic_fetch_add_explicit(&NW.nevents, 1, ca_relaxed);
  if (i >= EVENTS) return;
  nw_event_t* e = &NW.events[i];
  e->ms = (uint32_t)((_ca_clock_ns() - NW.start_ns) / 1000000);
  e->on = on;
  e->arg = arg;
  atomic_store_explicit(&e->kind, (uint8_t)kind, ca_release);
}

/* ---- the predictor ---------------------------------------------------------------------- */
ca_mapping_t _ca_nw_predict(int ctx) { return (ca_mapping_t)atomic_load_explicit(&NW.ctx[ctx].decision, ca_relaxed); }

bool _ca_nw_should_monitor(int ctx) {
  _Atomic(int64_t)* d = &NW.ctx[ctx].countdown;
  int64_t v = atomic_load_explicit(d, ca_relaxed);
  if (v <= 0) return true;
  atomic_store_explicit(d, v - 1, ca_relaxed);            /* racing threads may skip one less */
  return false;
}

uint32_t _ca_nw_skip(int ctx) { return NW.ctx[ctx].skip; }

ca_mapping_t _ca_nw_verdict(int ctx, ca_mapping_t predicted, const ca_monitor_result_t* r) {
  nw_ctx_t* c = &NW.ctx[ctx];
  bool polluter = r->polluter;
  _ca_lock(&NW.lock);
  c->monitored++;
  c->pages += r->pages;
  c->hits += r->hits;
  c->misses += r->misses;
  c->far += r->far;
  c->unused += r->unused;
  c->interference += r->interference;
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
  ca_mapping_t d = c->nverdicts == 2 && c->history == 3 ? CA_MAP_RESTRICTIVE : CA_MAP_OPEN;
  log_event(EV_VERDICT, (uint32_t)ctx, polluter);
  if (d != (ca_mapping_t)c->decision) {
    NW.nrestrictive += d == CA_MAP_RESTRICTIVE ? 1 : -1;
    log_event(EV_DECISION, (uint32_t)ctx, d == CA_MAP_RESTRICTIVE);
  }
  atomic_store_explicit(&c->decision, d, ca_relaxed);
  _ca_unlock(&NW.lock);
  return d;
}

void _ca_nw_reset(void) {
  _ca_lock(&NW.lock);
  memset(NW.ctx, 0, sizeof NW.ctx);
  atomic_store_explicit(&NW.reserved_ns, 0, ca_relaxed);
  NW.nrestrictive = 0;
  for (int i = 0; i < EVENTS; i++) atomic_store_explicit(&NW.events[i].kind, EV_NONE, ca_relaxed);
  atomic_store_explicit(&NW.nevents, 0, ca_relaxed);
  _ca_unlock(&NW.lock);
  _ca_nw_sites_reset();
}

/* ---- mappings ---------------------------------------------------------------------------- */
static void turn_off(const char* why) {
  _ca_policy_install(NULL);
  _ca_sample_set_period(0);
  for (uint32_t k = 0; k < _ca_class_count; k++) _ca_route_class(k, 0);
  ca_buf_t b = ca_buf(NW.off_reason, sizeof NW.off_reason);
  ca_buf_str(&b, why);
}

/* the flavour of restrictive memory (0: ordinary, the colour layer is not there) */
static uint8_t restrictive_flavour(void) {
  if (NW.restrict_id == 0) {
    /* not before nightwatch_delay: the colour layer's start costs a CPU for seconds (a 0.5 s
       program under it took 20% longer), which a program that ends soon never gets back */
    if (_ca_clock_ns() - NW.start_ns < (uint64_t)nw_opt(NW_OPT_DELAY) * 1000000u) return 0;
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

/* The flavour a restrictive chunk gets now: 0 until the colour layer is ready (it starts it).
   Until then the flavour's memory would be ordinary anyway, at the cost of the flavour heap's
   generic paths for every routed block and a failed fill for every chunk. */
static uint8_t restrictive_now(void) {
  uint8_t f = restrictive_flavour();
  if (f == 0 || _ca_colour_state() != CA_COLOURS_READY) return 0;
  if (!atomic_load_explicit(&NW.colours_seen, ca_relaxed) && !atomic_exchange_explicit(&NW.colours_seen, true, ca_relaxed))
    log_event(EV_COLOURS, 0, true);
  return f;
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

/* Monitoring may start a chunk of n bytes when what it cost so far, and what this chunk will
   cost (its sampled pages at the average cost of a sampled page), are within the budget's share
   of the time the program has run.  The share, in halves of the budget:
   - the second chunk of a context whose first verdict was a polluter: four times the budget
     (one chunk per context; until then its chunks stay open, and pv frames ran 2200 of 6000
     frames open with the second verdict at the plain share, 950 at four times);
   - a context's first chunk of the L2's size or more: twice the budget.  In pv requests two
     contexts learn at once, and at the plain share the second one's first chunk waited for
     the first one's two (their decision came at frame 237-1990 of 6000 in 7 of 50 runs, in
     the others at 22; none of 40 late at two or four times).  Four times made the foundation's
     mixed and churn (0.3 s runs) monitor one big chunk each, 0.7-1.4% of their run, for no
     verdict; at twice they monitor none, as before;
   - one still learning otherwise (fewer than two verdicts, a group of smaller chunks): the
     budget;
   - the others: half of it, so that one busy context does not starve the rest.
   (With every learning context at twice the budget, mixed's contexts, whose chunks are mostly
   freed before a verdict, stayed learning, and monitoring took 1.0% of its run for a budget of
   0.5%: the first chunk's share is one chunk per context.) */
int _ca_nw_budget_halves(int ctx, bool group) {
  const nw_ctx_t* c = &NW.ctx[ctx];
  if (!group && c->nverdicts == 0 && !c->tried) return 4;
  return c->nverdicts == 1 && c->history == 1 ? 8 : c->nverdicts < 2 ? 2 : 1;
}

/* Context ctx's chunk or group is being monitored (NW.lock held): its first try is over. */
void _ca_nw_tried(int ctx) { NW.ctx[ctx].tried = true; }

/* Context ctx's group ended at now_ms, judged or not (NW.lock held): see on_group_verdict. */
void _ca_nw_group_ended(int ctx, bool judged, uint64_t now_ms) {
  nw_ctx_t* c = &NW.ctx[ctx];
  if (judged) { c->unjudged_run = 0; return; }
  c->unjudged++;
  c->retry_ms = now_ms + ((uint64_t)RETRY_MS << (c->unjudged_run < 5 ? c->unjudged_run : 5));
  c->unjudged_run++;
}

uint64_t _ca_nw_retry_ms(int ctx) { return NW.ctx[ctx].retry_ms; }

/* A chunk or group in flight holds its expected cost (its sampled pages at the average cost
   of one) until it ends, on top of what it has cost so far: without it, two contexts' groups
   starting together were each admitted by the budget alone (the foundation's mixed took 0.97%
   of its run for a budget of 0.5% in one benchmark run).  Not under nightwatch_monitor. */
void _ca_nw_reserve(int ctx, uint32_t pages) {
  if (NW.monitor_all) return;
  uint64_t ns = (uint64_t)pages * _ca_monitor_page_cost_ns();
  atomic_fetch_add_explicit(&NW.ctx[ctx].reserved_ns, ns, ca_relaxed);
  atomic_fetch_add_explicit(&NW.reserved_ns, ns, ca_relaxed);
}

void _ca_nw_release(int ctx) {
  uint64_t ns = atomic_exchange_explicit(&NW.ctx[ctx].reserved_ns, 0, ca_relaxed);
  atomic_fetch_sub_explicit(&NW.reserved_ns, ns, ca_relaxed);
}

/* Context ctx's chunk or group has ended (or never started): one fewer in flight. */
static void inflight_end(int ctx) {
  atomic_fetch_sub_explicit(&NW.ctx[ctx].inflight, 1, ca_relaxed);
  _ca_nw_release(ctx);
}

/* When (clock ns) the budget allows a chunk of `pages` sampled pages at share `halves`. */
uint64_t _ca_nw_budget_due_ns(uint32_t pages, int halves) {
  uint64_t spent = _ca_monitor_cost_ns() + atomic_load_explicit(&NW.alloc_cost_ns, ca_relaxed) +
                   atomic_load_explicit(&NW.reserved_ns, ca_relaxed);
  spent += (uint64_t)pages * _ca_monitor_page_cost_ns();
  return NW.start_ns + spent * 1000 * 2 / ((NW.budget_pm ? NW.budget_pm : 1) * (uint64_t)halves);
}

static bool within_budget(uint32_t pages, int halves) {
  if (NW.monitor_all) return true;
  if (NW.budget_pm == 0) return false;
  /* refused until then: a coarse clock read, not the sums and a precise clock on every chunk
     (learning contexts recomputed it for each of mixed's 160,000 chunks: 8% of its time) */
  _Atomic(uint64_t)* next = &NW.next_ok_ms[__builtin_ctz((unsigned)halves)];   /* 1, 2, 4, 8: 0-3 */
  if (_ca_clock_ms() < atomic_load_explicit(next, ca_relaxed)) { bump(&NW.over_budget, 1); return false; }
  uint64_t ok_ns = _ca_nw_budget_due_ns(pages, halves);
  if (_ca_clock_ns() >= ok_ns) return true;
  atomic_store_explicit(next, ok_ns / 1000000, ca_relaxed);
  bump(&NW.over_budget, 1);
  return false;
}

/* ---- monitored chunks -------------------------------------------------------------------- */
static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r);

static void monitor_ready(void) {
  if (!NW.monitor_ready) { _ca_monitor_init(on_verdict); NW.monitor_ready = true; }
}

static void unwatch(int w) {
  inflight_end(NW.watched[w].ctx);
  NW.watched[w].p = NULL;
  atomic_fetch_sub_explicit(&NW.nwatched, 1, ca_relaxed);
}

/* A monitored chunk: its own pages (a large object), watched until freed or judged.  NULL when
   it cannot be monitored: the caller allocates it as usual. */
static void* place_monitored(int ctx, size_t n, bool zero, ca_mapping_t m, uint8_t flavour) {
  uint64_t t0 = _ca_clock_ns();
  _ca_lock(&NW.lock);
  int w = -1;
  if (NW.monitor_all || atomic_load_explicit(&NW.ctx[ctx].inflight, ca_relaxed) == 0)
    for (int i = 0; i < MAX_WATCHED && w < 0; i++) if (NW.watched[i].p == NULL && !NW.watched[i].reserved) w = i;
  if (w >= 0) {
    NW.watched[w].reserved = true;
    atomic_fetch_add_explicit(&NW.ctx[ctx].inflight, 1, ca_relaxed);
    _ca_nw_reserve(ctx, _ca_monitor_samples(n / CA_OS_PAGE));
    _ca_nw_tried(ctx);
  }
  _ca_unlock(&NW.lock);
  if (w < 0) { atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed); return NULL; }
  void* p = alloc_mapped(n, zero, flavour, true);
  _ca_lock(&NW.lock);
  NW.watched[w] = (nw_watched_t){ p, n, ctx, m, _ca_clock_ms(), false, false };
  if (p != NULL) atomic_fetch_add_explicit(&NW.nwatched, 1, ca_relaxed);
  else inflight_end(ctx);
  _ca_unlock(&NW.lock);
  if (p == NULL) return NULL;
  _ca_protect_remove((void*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1)));   /* its pages will trap */
  uint64_t t1 = _ca_clock_ns();               /* the monitor counts its own cost (mprotect) */
  bool started = _ca_monitor_start(p, n, (uint64_t)w);
  if (!started) {
    _ca_lock(&NW.lock); unwatch(w); _ca_unlock(&NW.lock);
    atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed);
  } else {
    atomic_fetch_add_explicit(&NW.monitored, 1, ca_relaxed);
  }
  /* a chunk that would have been a block of a warm span gets fresh pages as a large object:
     their first touches are the monitoring's cost too */
  uint64_t touch = n <= _ca_medium_limit ? (uint64_t)(n / CA_OS_PAGE) * TOUCH_NS : 0;
  atomic_fetch_add_explicit(&NW.alloc_cost_ns, t1 - t0 + touch, ca_relaxed);
  return p;
}

/* The chunk stays watched until the switch is decided: a free meanwhile marks it `freeing`
   (no switch), and a free after the decision waits on `switching` before the memory goes. */
static void update_routes(void);
static void on_group_verdict(int ctx, const ca_monitor_result_t* r);
static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r) {
  if (cookie & GROUP_COOKIE) { on_group_verdict((int)(uint32_t)cookie, r); return; }
  _ca_lock(&NW.lock);
  nw_watched_t w = NW.watched[cookie];
  _ca_unlock(&NW.lock);
  if (w.p != p) return;
  ca_mapping_t before = _ca_nw_predict(w.ctx);
  ca_mapping_t d = _ca_nw_verdict(w.ctx, w.predicted, r);
  if (d != before) update_routes();
  /* switch a live chunk whose mapping its context now contradicts, once; a switch never
     starts the colour layer by itself (that costs seconds and megabytes) */
  ca_mapping_t target = r->polluter && d == CA_MAP_RESTRICTIVE ? CA_MAP_RESTRICTIVE : CA_MAP_OPEN;
  _ca_lock(&NW.lock);
  bool live = NW.watched[cookie].p == p && !NW.watched[cookie].freeing;
  bool sw = live && target != w.predicted && _ca_clock_ms() - w.born_ms >= SWITCH_AGE_MS && !_ca_async_io() &&
            NW.restrict_id > 0 && _ca_colour_state() == CA_COLOURS_READY;
  if (sw) atomic_store_explicit(&NW.switching, p, ca_release);
  if (live) unwatch((int)cookie);
  _ca_unlock(&NW.lock);
  /* a chunk that stays open is ordinary memory again, its pages no longer trapped: protection
     may look at it now (a hot victim is often the first chunk of its context, and monitored) */
  if (live && !sw && w.predicted == CA_MAP_OPEN && NW.protect) _ca_protect_add(p, p, n);
  if (!sw) return;
  int id = target == CA_MAP_RESTRICTIVE ? restrictive_flavour() : (NW.open_id == 0 ? (NW.open_id = _ca_colour_set(1, 8, 8)) : NW.open_id);
  uint8_t had = 0;
  /* a coloured chunk's old frames are of its flavour's set: that pool takes them */
  if (id > 0 && _ca_large_info(p, NULL, &had) && _ca_recolour(p, n, id, had, false) > 0) {
    /* pages now of the target set: its pool takes them back when the chunk is freed, but
       only if the whole chunk moved; a partly moved chunk goes back as ordinary memory (the
       chunk's free waits on `switching`) */
    _ca_large_set_flavour(p, 0);
    _ca_lock(&NW.lock);
    NW.ctx[w.ctx].switches++;
    _ca_unlock(&NW.lock);
    atomic_fetch_add_explicit(&NW.switches, 1, ca_relaxed);
  }
  atomic_store_explicit(&NW.switching, NULL, ca_release);
}

/* The first restrictive chunk once the restrictive set is registered: from now on the recorded
   open objects are kept out of the restrictive colours, in pages of the other 7/8 (a colour set
   registered for that).  Before it (nightwatch_delay) nothing is armed and nothing logged: each
   restrictive chunk then logged "armed", and pv frames, requests and packets processes filled
   the timeline with them before the colour layer was ready (4 of 20 in the run at 297f8e3, whose
   benchmark then read "colour layer never ready").  Once: a verdict on the monitor thread and
   the program's next restrictive chunk may both come here. */
static void arm_protection(void) {
  static _Atomic(bool) tried;
  if (NW.restrict_id <= 0 || atomic_exchange_explicit(&tried, true, ca_relaxed)) return;
  if (_ca_colour_reserve(NW.restrict_id) != 0) NW.protect = false;   /* the program reserved another set */
  log_event(EV_PROTECT, 0, NW.protect);
}

/* ---- small chunks: the size table, span-level mapping, groups ---------------------------- */

/* What the size table asks of class k: `route`, serve it from restrictive spans, when the
   contexts the predictor makes restrictive hold ROUTE_SHARE_PCT of its samples; `one_by_one`,
   for a class of a page or more, name its chunks one by one (`place`, each given its context's
   mapping): `shared`, a restrictive context shares it with others; or one of its contexts has a
   group on (its members join as in `place`, one per sampling period of the context's bytes:
   sampled members of pv neutral's reused buffers were never re-protected between uses, item 7
   of the header); or nothing
   samples it (nightwatch_small=0), or every chunk is monitored. */
typedef struct { bool route, one_by_one, shared; } class_want_t;

static class_want_t class_want(uint32_t k) {
  const nw_class_t* t = &NW.classes[k];
  uint32_t total = atomic_load_explicit(&t->total, ca_relaxed);
  uint64_t r = 0;
  bool grouped = false;
  for (int i = 0; i < CLASS_CTXS; i++) {
    int c1 = atomic_load_explicit(&t->ctx[i], ca_relaxed);
    if (c1 == 0) continue;
    if (_ca_nw_predict(c1 - 1) == CA_MAP_RESTRICTIVE) r += atomic_load_explicit(&t->samples[i], ca_relaxed);
    grouped |= NW.ctx[c1 - 1].group_on;
  }
  class_want_t w;
  bool medium = _ca_class_size[k] >= CA_OS_PAGE;
  bool restrictive_only = r * 100 >= (uint64_t)total * ROUTE_SHARE_PCT;
  w.route = total >= ROUTE_MIN && restrictive_only;
  /* shared: another context holds its part of the samples (not merely too few samples yet: a
     class only a polluter used was named one by one until its eighth sample, and from then on
     its chunks came from `place`, uncounted, so the eighth never came) */
  w.shared = medium && r > 0 && !restrictive_only;
  w.one_by_one = w.shared || (medium && (grouped || !NW.groups || NW.monitor_all));
  return w;
}

/* A sample of context ctx in class k; true when the class's route, or whether it is named one
   by one, should change.  No lock
   (every sample of every thread took one): a context claims a free entry once, with a
   compare-and-swap, and counts are plain stores. */
static bool note_class(uint32_t k, int ctx) {
  nw_class_t* t = &NW.classes[k];
  bump32(&t->total);
  for (int i = 0; i < CLASS_CTXS; i++) {
    int c1 = atomic_load_explicit(&t->ctx[i], ca_relaxed);
    if (c1 == 0 && (atomic_compare_exchange_strong(&t->ctx[i], &c1, ctx + 1) || c1 == ctx + 1)) c1 = ctx + 1;
    if (c1 == ctx + 1) { bump32(&t->samples[i]); break; }
  }
  if (atomic_load_explicit(&NW.nrestrictive, ca_relaxed) == 0 && _ca_class_route(k) == 0 && !_ca_class_placed(k)) return false;   /* the usual case */
  class_want_t w = class_want(k);
  return w.route != (_ca_class_route(k) != 0) || w.one_by_one != _ca_class_placed(k);
}

/* Make the core's class routes, and the classes it hands `place` one by one, agree with the size
   table.  Not under NW.lock: the restrictive flavour may start the colour layer, which
   allocates. */
static void update_routes(void) {
  class_want_t want[CA_CLASS_MAX];
  for (uint32_t k = 0; k < _ca_class_count; k++) want[k] = class_want(k);
  for (uint32_t k = 0; k < _ca_class_count; k++) {
    uint8_t f = want[k].route ? restrictive_now() : 0;
    if (want[k].route && NW.protect && !_ca_protect_armed()) arm_protection();
    if (_ca_class_route(k) != f) { _ca_route_class(k, f); log_event(EV_ROUTE, (uint32_t)_ca_class_size[k], f != 0); }
    if (_ca_class_placed(k) != want[k].one_by_one) _ca_place_class(k, want[k].one_by_one);
    /* the timeline says when a class is shared by a restrictive context (not each group) */
    if (NW.class_shared[k] != want[k].shared) {
      NW.class_shared[k] = want[k].shared;
      log_event(EV_PLACE, (uint32_t)_ca_class_size[k], want[k].shared);
    }
  }
}

/* What a member of n bytes stands for: a small chunk, or a chunk below the sampling period, the
   period's bytes of its context's allocations (one is sampled per period); with every chunk
   monitored, every one joins and stands for itself, unless that is below the least a group's
   member must stand for (monitor.c): then one chunk in k joins, standing for k of them. */
static size_t member_stride(size_t n) {
  size_t period = (size_t)_ca_sample_period_bytes(), least = _ca_monitor_member_least();
  if (n < CA_OS_PAGE) return period;
  if (!NW.monitor_all) return n >= period ? n : period;
  return n >= least ? n : n * ((least + n - 1) / n);
}

/* A member of its context's group in the monitor; NULL when the group has no room (the core
   allocates the chunk as usual).  A sampled small chunk (n below a page) gets a page of its
   own inside a block of an ordinary span (_ca_malloc_page), so no mapping is made for it; a
   chunk of a page or more gets pages of its own (a large object, of its predicted flavour) and
   is a member by its first page. */
static void* place_member(int ctx, size_t n, bool zero, ca_mapping_t m, uint8_t flavour) {
  uint64_t t0 = _ca_clock_ns(), cookie = GROUP_COOKIE | (uint64_t)ctx;
  size_t stride = member_stride(n);
  nw_ctx_t* c = &NW.ctx[ctx];
  _ca_lock(&NW.lock);
  bool start = !c->group_on;
  if (!_ca_monitor_member_room(cookie, start)) { _ca_unlock(&NW.lock); return NULL; }
  if (start) {
    c->group_on = true;
    c->group_predicted = m;
    atomic_fetch_add_explicit(&c->inflight, 1, ca_relaxed);
    _ca_nw_reserve(ctx, _ca_monitor_group_pages(stride));
    _ca_nw_tried(ctx);
  }
  _ca_unlock(&NW.lock);
  bool small = n < CA_OS_PAGE;
  void* p = small ? _ca_malloc_page() : alloc_mapped(n, zero, flavour, true);
  if (p != NULL && small) _ca_protect_release(p, CA_OS_PAGE);   /* its page will trap: never recoloured */
  if (p != NULL && !small) _ca_protect_remove(p);
  uint64_t t1 = _ca_clock_ns();               /* the monitor counts its own cost (mprotect) */
  if (p != NULL && _ca_monitor_start_member(p, cookie, stride, start)) {
    bump(small ? &NW.small_members : &NW.medium_members, 1);
    if (!small) c->member_bytes = atomic_load_explicit(&c->bytes, ca_relaxed) + stride - n;
  } else {
    if (start) {
      _ca_lock(&NW.lock);
      c->group_on = false;
      inflight_end(ctx);
      _ca_unlock(&NW.lock);
    }
    if (p != NULL) _ca_free_chunk(p);
    p = NULL;
    atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed);
  }
  /* a chunk that would have been a block of a warm span gets fresh pages: their first touches
     are the monitoring's cost too */
  uint64_t touch = p == NULL ? 0 : small ? TOUCH_NS : (uint64_t)(n / CA_OS_PAGE) * TOUCH_NS;
  atomic_fetch_add_explicit(&NW.alloc_cost_ns, t1 - t0 + touch, ca_relaxed);
  return p;
}

/* The budget allows a whole group for ctx now.  When it refuses, the context's next chunks do
   not ask again at once (each ask reads the clock; asked by every chunk of mixed's two undecided
   contexts, about 1% of its run). */
static bool group_budget(int ctx, size_t n) {
  if ((NW.monitor_all || _ca_clock_ms() >= _ca_nw_retry_ms(ctx)) &&
      within_budget(_ca_monitor_group_pages(member_stride(n)), _ca_nw_budget_halves(ctx, true)))
    return true;
  atomic_store_explicit(&NW.ctx[ctx].countdown, BUDGET_SKIP, ca_relaxed);
  return false;
}

/* A context's sampled small chunk joins its group: always while the group is on (members must
   be dense for their footprint to be seen), else when the context is due and the budget allows
   a whole group */
static bool group_due(int ctx, bool join, size_t n) {
  if (join) return true;
  if (!(NW.monitor_all || _ca_nw_should_monitor(ctx)) || atomic_load_explicit(&NW.ctx[ctx].inflight, ca_relaxed) != 0) return false;
  if (_ca_nw_context_info(ctx)->in_libc) {    /* never monitored (place_rare) */
    atomic_store_explicit(&NW.ctx[ctx].countdown, SKIP_MAX, ca_relaxed);
    return false;
  }
  return group_budget(ctx, n);
}

/* A group's end: with a verdict, it counts as one monitored chunk of its context.  Without one,
   the context's chunks told the monitor nothing (used in one burst and freed, or not used again
   while it looked): its next group waits RETRY_MS, doubled for each such group in a row (up to
   32 times), so that a context with nothing to tell does not take the whole budget (pv
   neutral: three or four groups of 64 members a run, all for nothing). */
static void on_group_verdict(int ctx, const ca_monitor_result_t* r) {
  nw_ctx_t* c = &NW.ctx[ctx];
  _ca_lock(&NW.lock);
  ca_mapping_t predicted = c->group_predicted;
  if (c->group_on) inflight_end(ctx);
  c->group_on = false;
  _ca_nw_group_ended(ctx, r->judged, _ca_clock_ms());
  _ca_unlock(&NW.lock);
  if (r->judged) _ca_nw_verdict(ctx, predicted, r);
  update_routes();                            /* the verdict, and the group's classes sampled again */
}

/* ---- the policy hooks -------------------------------------------------------------------- */
/* May context c's chunk of n bytes be monitored?  (place's quick look: the budget and the
   glibc-owned contexts are asked in place_rare.)  A chunk below the L2 cannot stream more than
   the L2 by itself: it is judged with its context's other chunks below the L2, as a member of
   their group (monitor.c); while the group is on, one chunk per sampling period of the
   context's bytes joins, as small chunks are sampled, so a group spans several L2s of them. */
static inline bool may_monitor(nw_ctx_t* c, int ctx, size_t n) {
  if (n < NW.judged_min) {
    if (!NW.groups) return false;
    if (c->group_on) return atomic_load_explicit(&c->bytes, ca_relaxed) >= c->member_bytes;
  }
  if (NW.monitor_all) return true;
  return _ca_nw_should_monitor(ctx) && atomic_load_explicit(&c->inflight, ca_relaxed) == 0;
}

/* While chunks are sampled, the program's allocator calls re-protect their pages after a burst
   (monitor.c: cheaper on this thread than on the monitor's) */
static inline void tick(void) {
  if (ca_unlikely(atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0)) _ca_monitor_tick();
}

/* The rest of `place`, for the few chunks that are monitored or get restrictive pages. */
static ca_noinline void* place_rare(int ctx, size_t n, bool zero, ca_mapping_t m, bool monitor) {
  nw_ctx_t* c = &NW.ctx[ctx];
  void* p = NULL;
  uint8_t flavour = m == CA_MAP_RESTRICTIVE ? restrictive_now() : 0;
  if (m == CA_MAP_RESTRICTIVE) bump(&c->restrictive, 1);
  if (monitor && _ca_nw_context_info(ctx)->in_libc) {
    /* glibc fills its own buffers (stdio, directory streams) through internal system calls
       that cannot be interposed: a sampled page there would make them fail with EFAULT */
    atomic_store_explicit(&c->countdown, SKIP_MAX, ca_relaxed);
  } else if (monitor && n >= NW.judged_min) {
    if (within_budget(_ca_monitor_samples(n / CA_OS_PAGE), _ca_nw_budget_halves(ctx, false))) {
      monitor_ready();
      p = place_monitored(ctx, n, zero, m, flavour);
    }
  } else if (monitor && (c->group_on || (atomic_load_explicit(&c->inflight, ca_relaxed) == 0 && group_budget(ctx, n)))) {
    monitor_ready();
    p = place_member(ctx, n, zero, m, flavour);
  }
  if (p == NULL && flavour != 0) p = alloc_mapped(n, zero, flavour, false);
  if (m == CA_MAP_RESTRICTIVE && NW.protect && !_ca_protect_armed()) arm_protection();
  return p;
}

/* Every chunk of a page or more: its context, counted; NULL (the core allocates as usual)
   unless it is monitored or restrictive. */
static void* place(size_t n, bool zero, const void* frame, const void* ret) {
  if (busy) return NULL;                      /* the stack scan or a colour set allocating */
  busy = true;
  tick();
  void* p = NULL;
  int ctx = _ca_nw_context_of(n, frame, ret);
  if (ctx >= 0) {
    nw_ctx_t* c = &NW.ctx[ctx];
    bump(&c->chunks, 1);
    bump(&c->bytes, n);
    ca_mapping_t m = _ca_nw_predict(ctx);
    bool monitor = may_monitor(c, ctx, n);
    if (ca_unlikely(monitor || m == CA_MAP_RESTRICTIVE)) p = place_rare(ctx, n, zero, m, monitor);
  }
  busy = false;
  return p;
}

/* A small chunk sampled by the core (hooks.h): noted in the size table; placed on a page of
   its own and monitored with its context's group when the context is due. */
static void* sample(size_t n, const void* frame, const void* ret) {
  if (busy) return NULL;
  busy = true;
  tick();
  void* p = NULL;
  int ctx = _ca_nw_context_of(n, frame, ret);
  if (ctx >= 0) {
    nw_ctx_t* c = &NW.ctx[ctx];
    bump(&c->samples, 1);
    uint32_t k = _ca_class_of(n);
    bool reroute = note_class(k, ctx);
    if (reroute) update_routes();
    /* a class named one by one is counted here, so that its shares stay what its samples say,
       and monitored in `place` */
    bool placed = n >= CA_OS_PAGE && _ca_class_placed(k);
    if (!placed && group_due(ctx, c->group_on, n)) {
      monitor_ready();
      bool was_on = c->group_on;
      p = place_member(ctx, n, false, _ca_nw_predict(ctx), 0);
      if (n >= CA_OS_PAGE && !was_on && c->group_on) update_routes();   /* class_want: grouped */
    } else if (!placed && !reroute && !c->group_on && atomic_load_explicit(&c->countdown, ca_relaxed) > DEFER_MIN) {
      /* nothing due for a while (its skip has grown, or the budget refused it): this thread's
         next sample waits SAMPLE_DEFER periods (larson's 45 000 samples cost it 1.7%) */
      _ca_sample_defer(SAMPLE_DEFER);
    }
  }
  busy = false;
  return p;
}

static void wait_switch(void* p) { while (atomic_load_explicit(&NW.switching, ca_acquire) == p) ca_cpu_relax(); }

static void chunk_event(ca_chunk_event_t ev, void* p, size_t size) {
  (void)ev;
  if (atomic_load_explicit(&NW.switching, ca_relaxed) == NULL && atomic_load_explicit(&NW.nwatched, ca_relaxed) == 0 &&
      !_ca_monitor_active()) return;                  /* nothing watched, switched or sampled: most frees that come here */
  tick();
  wait_switch(p);
  bool watched = false;
  if (atomic_load_explicit(&NW.nwatched, ca_relaxed) != 0) {
    _ca_lock(&NW.lock);
    for (int i = 0; i < MAX_WATCHED; i++) if (NW.watched[i].p == p) { NW.watched[i].freeing = true; watched = true; }
    _ca_unlock(&NW.lock);
  }
  if (!watched) {
    if (size < NW.judged_min && _ca_monitor_active()) _ca_monitor_stop(p);   /* a group's member */
    return;
  }
  _ca_monitor_stop(p);                        /* delivers the verdict if there is one */
  _ca_lock(&NW.lock);
  for (int i = 0; i < MAX_WATCHED; i++)
    if (NW.watched[i].p == p) unwatch(i);
  _ca_unlock(&NW.lock);
  wait_switch(p);
}

static const ca_policy_t policy = { place, chunk_event, sample };

/* fork: the policy's locks, outermost of the runtime's (hooks.h) */
static void fork_prepare(void) { _ca_lock(&NW.lock); _ca_nw_sites_fork_prepare(); _ca_context_fork_prepare(); }
static void fork_release(void) { _ca_context_fork_release(); _ca_nw_sites_fork_release(); _ca_unlock(&NW.lock); }
/* the thread switching a chunk's mapping is not in the child: its free must not wait for it */
static void fork_child(void) { atomic_store_explicit(&NW.switching, NULL, ca_relaxed); fork_release(); }

/* Valgrind runs the program on a JIT that does not resume a faulting instruction the way the
   CPU does: a memset over a page that a SIGSEGV handler makes writable leaves wrong bytes (199
   of 200 rounds in a test, none natively), so page traps would corrupt the program's data.
   Its preload library is in LD_PRELOAD.  Without monitoring (nightwatch_budget=0) nothing
   traps, and callgrind can count what the policy's look at each chunk costs. */
static bool under_valgrind(void) {
  const char* p = getenv("LD_PRELOAD");
  return p != NULL && strstr(p, "vgpreload") != NULL;
}

static void init(void) {
  NW.monitor_all = nw_opt(NW_OPT_MONITOR) != 0;
  NW.budget_pm = (uint64_t)nw_opt(NW_OPT_BUDGET);
  NW.judged_min = _ca_machine_l2();
  bool traps = NW.budget_pm > 0 || NW.monitor_all;
  NW.on = nw_opt(NW_OPT_ON) != 0 && _ca_colour_opt(CA_COPT_COLOURS) != 0 && !(traps && under_valgrind());
  NW.protect = nw_opt(NW_OPT_PROTECT) != 0;
  NW.start_ns = _ca_clock_ns();
  if (NW.on) {
    _ca_policy_install(&policy);
    if (NW.protect) _ca_colour_protect_default();   /* record open memory from the start */
    NW.groups = nw_opt(NW_OPT_SMALL) != 0;
    if (NW.groups) _ca_sample_set_period((int64_t)(NW.judged_min / 8));
    /* span classes of a page or more that nothing samples are named one by one (class_want) */
    for (uint32_t k = 0; k < _ca_class_count; k++) _ca_place_class(k, class_want(k).one_by_one);
  }
  else turn_off(nw_opt(NW_OPT_ON) == 0 ? "nightwatch=0" : _ca_colour_opt(CA_COPT_COLOURS) == 0 ? "colours=0"
                 : "under valgrind (it misexecutes instructions resumed after a page trap; nightwatch_budget=0 runs without traps)");
}

/* ---- statistics -------------------------------------------------------------------------- */
static void context_json(ca_buf_t* b, int i) {
  const ca_nw_context_t* k = _ca_nw_context_info(i);
  nw_ctx_t* c = &NW.ctx[i];
  char site[192];
  _ca_context_symbol(k->nframes ? k->frames[0] : 0, site, sizeof site);
  ca_buf_str(b, "{\"site\":\"");
  for (const char* s = site; *s; s++) if (*s != '"' && *s != '\\') ca_buf_char(b, *s);
  ca_buf_str(b, "\",\"hash\":\""); ca_buf_hex(b, (uintptr_t)k->hash); ca_buf_str(b, "\"");
  ca_buf_str(b, ",\"frames\":[");
  for (uint32_t f = 0; f < k->nframes; f++) { if (f) ca_buf_char(b, ','); ca_buf_char(b, '"'); ca_buf_hex(b, k->frames[f]); ca_buf_char(b, '"'); }
  ca_buf_str(b, "]");
  ca_buf_field_u64(b, "chunks", c->chunks);
  ca_buf_field_u64(b, "bytes", c->bytes);
  ca_buf_field_u64(b, "monitored", c->monitored);
  ca_buf_field_u64(b, "sampled_pages", c->pages);
  ca_buf_field_u64(b, "pair_hits", c->hits);
  ca_buf_field_u64(b, "pair_misses", c->misses);
  ca_buf_field_u64(b, "misses_far", c->far);
  ca_buf_field_u64(b, "misses_unused", c->unused);
  ca_buf_field_u64(b, "interference", c->interference);
  ca_buf_str(b, ",\"miss_rate\":");
  if (c->hits + c->misses) ca_buf_fixed(b, (int64_t)(c->misses * 1000 / (c->hits + c->misses)), 3); else ca_buf_str(b, "null");
  ca_buf_str(b, ",\"decision\":\"");
  ca_buf_str(b, c->nverdicts == 0 ? "unknown" : c->decision == CA_MAP_RESTRICTIVE ? "restrictive" : "open");
  ca_buf_str(b, "\"");
  ca_buf_field_u64(b, "restrictive_chunks", c->restrictive);
  ca_buf_field_u64(b, "pred_hits", c->pred_hits);
  ca_buf_field_u64(b, "pred_misses", c->pred_misses);
  ca_buf_field_u64(b, "skip", c->skip);
  ca_buf_field_u64(b, "groups_unjudged", c->unjudged);
  ca_buf_field_u64(b, "switches", c->switches);
  ca_buf_field_u64(b, "small_samples", c->samples);
  ca_buf_str(b, "}");
}

static void timeline_json(ca_buf_t* b) {
  static const char* const names[] = { NULL, "verdict", "decision", "route", "colours_ready", "protection", "place" };
  static const char* const args[] = { NULL, "context", "context", "size", NULL, NULL, "size" };
  static const char* const flags[] = { NULL, "polluter", "restrictive", "restrictive", NULL, "armed", "shared" };
  uint32_t n = atomic_load_explicit(&NW.nevents, ca_relaxed);
  ca_buf_field_u64(b, "timeline_dropped", n > EVENTS ? n - EVENTS : 0);
  ca_buf_str(b, ",\"timeline\":[");
  for (uint32_t i = 0, first = 1; i < n && i < EVENTS; i++) {
    const nw_event_t* e = &NW.events[i];
    uint8_t k = atomic_load_explicit(&e->kind, ca_acquire);
    if (k == EV_NONE) continue;               /* another thread is writing it */
    if (!first) ca_buf_char(b, ',');
    first = 0;
    ca_buf_str(b, "{\"ms\":"); ca_buf_u64(b, e->ms);
    ca_buf_str(b, ",\"event\":\""); ca_buf_str(b, names[k]); ca_buf_str(b, "\"");
    if (args[k]) ca_buf_field_u64(b, args[k], e->arg);
    if (flags[k]) { ca_buf_str(b, ",\""); ca_buf_str(b, flags[k]); ca_buf_str(b, e->on ? "\":true" : "\":false"); }
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "]");
}

static void stats_json(ca_buf_t* b) {
  uint64_t ph = 0, pm = 0, chunks = 0, restrictive = 0;
  int n = _ca_nw_contexts();
  for (int i = 0; i < n; i++) {
    ph += NW.ctx[i].pred_hits; pm += NW.ctx[i].pred_misses;
    chunks += NW.ctx[i].chunks; restrictive += NW.ctx[i].restrictive;
  }
  ca_nw_site_stats_t st;
  _ca_nw_sites_stats(&st);
  ca_buf_str(b, "{\"enabled\":");
  ca_buf_str(b, NW.on && NW.off_reason[0] == 0 ? "true" : "false");
  ca_buf_str(b, ",\"off_reason\":\""); ca_buf_str(b, NW.off_reason); ca_buf_str(b, "\"");
  ca_buf_str(b, ",\"monitor_all\":"); ca_buf_str(b, NW.monitor_all ? "true" : "false");
  ca_buf_field_u64(b, "chunks", chunks);
  ca_buf_field_u64(b, "monitored", NW.monitored);
  ca_buf_field_u64(b, "monitor_lost", NW.lost);
  ca_buf_field_u64(b, "over_budget", NW.over_budget);
  ca_buf_field_u64(b, "budget_per_mille", NW.budget_pm);
  ca_buf_field_u64(b, "monitor_cost_ns", _ca_monitor_cost_ns() + NW.alloc_cost_ns);
  ca_buf_field_u64(b, "reserved_ns", NW.reserved_ns);
  ca_buf_field_u64(b, "run_ns", _ca_clock_ns() - NW.start_ns);
  ca_buf_field_u64(b, "start_monotonic_ns", NW.start_ns);
  ca_buf_field_u64(b, "restrictive", restrictive);
  ca_buf_field_u64(b, "switches", NW.switches);
  ca_buf_field_u64(b, "small_period", (uint64_t)_ca_sample_period_bytes());
  uint64_t samples = 0;
  for (int i = 0; i < CA_NW_CONTEXTS; i++) samples += atomic_load_explicit(&NW.ctx[i].samples, ca_relaxed);
  ca_buf_field_u64(b, "small_samples", samples);
  ca_buf_field_u64(b, "small_members", NW.small_members);
  ca_buf_field_u64(b, "medium_members", NW.medium_members);
  ca_buf_str(b, ",\"routed_sizes\":[");
  for (uint32_t k = 0, first = 1; k < _ca_class_count; k++)
    if (_ca_class_route(k) != 0) { if (!first) ca_buf_char(b, ','); ca_buf_u64(b, _ca_class_size[k]); first = 0; }
  ca_buf_str(b, "],\"one_by_one_sizes\":[");
  for (uint32_t k = 0, first = 1; k < _ca_class_count; k++)
    if (_ca_class_placed(k)) { if (!first) ca_buf_char(b, ','); ca_buf_u64(b, _ca_class_size[k]); first = 0; }
  ca_buf_str(b, "]");
  ca_buf_field_u64(b, "site_hits", st.site_hits);
  ca_buf_field_u64(b, "caller_hits", st.caller_hits);
  ca_buf_field_u64(b, "size_table_hits", st.size_hits);
  ca_buf_field_u64(b, "leaf_sites", st.leaf_sites);
  ca_buf_field_u64(b, "wrapper_sites", st.wrapper_sites);
  ca_buf_field_u64(b, "context_captures", st.scans);
  ca_buf_field_u64(b, "context_capture_ns", st.scan_ns);
  ca_buf_str(b, ",\"predictions\":{\"hits\":"); ca_buf_u64(b, ph);
  ca_buf_str(b, ",\"misses\":"); ca_buf_u64(b, pm); ca_buf_str(b, "}");
  ca_buf_str(b, ",\"monitor\":");
  _ca_monitor_stats_json(b);
  timeline_json(b);
  /* the report buffer is bounded: the first MAX_REPORTED contexts, and how many were left out */
  ca_buf_field_u64(b, "contexts_omitted", n > MAX_REPORTED ? (uint64_t)(n - MAX_REPORTED) : 0);
  if (n > MAX_REPORTED) n = MAX_REPORTED;
  ca_buf_str(b, ",\"contexts\":[");
  for (int i = 0; i < n; i++) { if (i) ca_buf_char(b, ','); context_json(b, i); }
  ca_buf_str(b, "]}");
}

/* ---- the layer ---------------------------------------------------------------------------- */
static const ca_option_desc_t options[NW_OPT_COUNT] = {
  [NW_OPT_ON]      = { "nightwatch", 1, 0, 1, _ca_bool_words,
                       "NightWatch: learn which allocation contexts pollute the cache and give their new chunks pages of "
                       "1/8 of the L2 colours (the colour layer); 0 turns it off (see docs/nightwatch.md)" },
  [NW_OPT_MONITOR] = { "nightwatch_monitor", 0, 0, 1, _ca_bool_words,
                       "NightWatch monitors every chunk instead of adaptive sampling (to check predictions; slow)" },
  [NW_OPT_BUDGET]  = { "nightwatch_budget", 5, 0, 1000, NULL,
                       "NightWatch's monitoring (page protection, faults, chunks placed apart) may take at most this "
                       "per mille of the run time (5 = 0.5%; a context's second verdict, after a first that found a "
                       "polluter, four times that; its first chunk of the L2's size or more twice that)" },
  [NW_OPT_PROTECT] = { "nightwatch_protect", 1, 0, 1, _ca_bool_words,
                       "once NightWatch confines a polluter, move the pages of open memory (spans and objects up to "
                       "the L2's size, 4 times the L2 in all, oldest first) that lie in the polluter's colours to the "
                       "other 7/8" },
  [NW_OPT_SMALL]   = { "nightwatch_small", 1, 0, 1, _ca_bool_words,
                       "NightWatch judges chunks below the L2 too, sampled by bytes (one per L2/8 bytes of a context's "
                       "allocations, each on pages of its own, judged together per context), and serves a span size "
                       "class (up to 64 KiB) from restrictive spans while its sampled contexts are polluters; with 0, "
                       "span-class chunks of a page or more are named one by one" },
  [NW_OPT_DELAY]   = { "nightwatch_delay", 1000, 0, 3600000, NULL,
                       "NightWatch starts the colour layer (seconds of one CPU's time to find the colours) only once "
                       "the process has run this many ms: a shorter program never pays for it, and its restrictive "
                       "chunks until then are ordinary memory" },
};

const ca_layer_t _ca_layer_nightwatch = {
  .name = "nightwatch", .options = options, .values = nw_options, .noptions = NW_OPT_COUNT,
  .init = init, .fork_prepare = fork_prepare, .fork_parent = fork_release, .fork_child = fork_child,
  .stats = stats_json,
};
