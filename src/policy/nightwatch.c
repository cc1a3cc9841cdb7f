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
        once a restrictive chunk is placed, the colour worker moves its touched pages to pages
        of the other 7/8 (color/protect.c: every one, not only those a test would place in the
        restrictive colours), so that the confined polluter can evict nothing of it.  Monitored chunks join only after their verdict (their pages
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
        by one (a 5 us burst paired them too).
   Chunks allocated by glibc itself (stdio and directory-stream buffers, which the kernel fills
   through glibc's internal, non-interposable system calls) are never monitored.  When the
   colour layer turns out to be unavailable, the policy uninstalls itself and says why in the
   statistics. */
#define _GNU_SOURCE
#include "nw.h"
#include "../monitor/trap.h"
#include <pthread.h>
#include <stdlib.h>

long _ca_nw_options[NW_OPT_COUNT];
nw_state_t _ca_nw;

static __thread bool busy __attribute__((tls_model("initial-exec")));

/* The timeline: verdicts, decisions, class routes, the colour layer found ready, protection
   armed, each with its time, so that a run whose victim gained late (or not at all) can be
   explained from its statistics.  Rare events (a few per context); the first EVENTS are kept. */
void _ca_nw_log_event(nw_event_kind_t kind, uint32_t arg, bool on) {
  uint32_t i = atomic_fetch_add_explicit(&NW.nevents, 1, ca_relaxed);
  if (i >= EVENTS) return;
  nw_event_t* e = &NW.events[i];
  e->ms = (uint32_t)((_ca_clock_ns() - NW.start_ns) / 1000000);
  e->on = on;
  e->arg = arg;
  atomic_store_explicit(&e->kind, (uint8_t)kind, ca_release);
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
    /* not before nightwatch_delay: a program that ends soon never gets back what the colour
       layer's start costs (0.1-0.3 s of a CPU with the set file, about a second without) */
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
uint8_t _ca_nw_restrictive_now(void) {
  uint8_t f = restrictive_flavour();
  if (f == 0 || _ca_colour_state() != CA_COLOURS_READY) return 0;
  if (!atomic_load_explicit(&NW.colours_seen, ca_relaxed) && !atomic_exchange_explicit(&NW.colours_seen, true, ca_relaxed))
    _ca_nw_log_event(EV_COLOURS, 0, true);
  return f;
}

/* own_pages: a large object starting on a page (as the paper aligns sampled chunks), so all
   of the chunk's pages are its own and can be sampled */
void* _ca_nw_alloc_mapped(size_t n, bool zero, uint8_t flavour, bool own_pages) {
  if (own_pages) return _ca_large_alloc(n, CA_OS_PAGE, zero, flavour);
  if (n > _ca_medium_limit) return _ca_large_alloc(n, 0, zero, flavour);
  void* p = _ca_malloc_flavour(n, flavour);
  if (p != NULL && zero) memset(p, 0, n);
  return p;
}

/* ---- monitored chunks -------------------------------------------------------------------- */
static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r);

void _ca_nw_monitor_ready(void) {
  if (!NW.monitor_ready) { _ca_monitor_init(on_verdict); NW.monitor_ready = true; }
}

static void unwatch(int w) {
  _ca_nw_inflight_end(NW.watched[w].ctx);
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
  void* p = _ca_nw_alloc_mapped(n, zero, flavour, true);
  _ca_lock(&NW.lock);
  NW.watched[w] = (nw_watched_t){ p, n, ctx, m, _ca_clock_ms(), false, false };
  if (p != NULL) atomic_fetch_add_explicit(&NW.nwatched, 1, ca_relaxed);
  else _ca_nw_inflight_end(ctx);
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
void _ca_nw_update_routes(void);
void _ca_nw_on_group_verdict(int ctx, const ca_monitor_result_t* r);
static void on_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r) {
  if (cookie & GROUP_COOKIE) { _ca_nw_on_group_verdict((int)(uint32_t)cookie, r); return; }
  _ca_lock(&NW.lock);
  nw_watched_t w = NW.watched[cookie];
  _ca_unlock(&NW.lock);
  if (w.p != p) return;
  ca_mapping_t before = _ca_nw_predict(w.ctx);
  ca_mapping_t d = _ca_nw_verdict(w.ctx, w.predicted, r);
  if (d != before) _ca_nw_update_routes();
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
   the timeline with them before the colour layer was ready (4 of 20 in one benchmark run, which
   then read "colour layer never ready").  Once: a verdict on the monitor thread and
   the program's next restrictive chunk may both come here. */
void _ca_nw_arm_protection(void) {
  static _Atomic(bool) tried;
  if (NW.restrict_id <= 0 || atomic_exchange_explicit(&tried, true, ca_relaxed)) return;
  if (_ca_colour_reserve(NW.restrict_id) != 0) NW.protect = false;   /* the program reserved another set */
  _ca_nw_log_event(EV_PROTECT, 0, NW.protect);
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
  uint8_t flavour = m == CA_MAP_RESTRICTIVE ? _ca_nw_restrictive_now() : 0;
  if (m == CA_MAP_RESTRICTIVE) bump(&c->restrictive, 1);
  if (monitor && _ca_nw_context_info(ctx)->in_libc) {
    /* glibc fills its own buffers (stdio, directory streams) through internal system calls
       that cannot be interposed: a sampled page there would make them fail with EFAULT */
    atomic_store_explicit(&c->countdown, SKIP_MAX, ca_relaxed);
  } else if (monitor && n >= NW.judged_min) {
    if (_ca_nw_within_budget(_ca_monitor_samples(n / CA_OS_PAGE), _ca_nw_budget_halves(ctx, false))) {
      _ca_nw_monitor_ready();
      p = place_monitored(ctx, n, zero, m, flavour);
    }
  } else if (monitor && (c->group_on || (atomic_load_explicit(&c->inflight, ca_relaxed) == 0 && _ca_nw_group_budget(ctx, n)))) {
    _ca_nw_monitor_ready();
    p = _ca_nw_place_member(ctx, n, zero, m, flavour);
  }
  if (p == NULL && flavour != 0) p = _ca_nw_alloc_mapped(n, zero, flavour, false);
  /* what it got, said plainly: a restrictive chunk the colour layer could not serve (not ready,
     or no stock) is ordinary memory */
  if (m == CA_MAP_RESTRICTIVE && (p == NULL || _ca_flavour_of(p) == 0)) bump(&c->restrictive_ordinary, 1);
  if (m == CA_MAP_RESTRICTIVE && NW.protect && !_ca_protect_armed()) _ca_nw_arm_protection();
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
    bool reroute = _ca_nw_note_class(k, ctx);
    if (reroute) _ca_nw_update_routes();
    /* a class named one by one is counted here, so that its shares stay what its samples say,
       and monitored in `place` */
    bool placed = n >= CA_OS_PAGE && _ca_class_placed(k);
    if (!placed && _ca_nw_group_due(ctx, c->group_on, n)) {
      _ca_nw_monitor_ready();
      bool was_on = c->group_on;
      p = _ca_nw_place_member(ctx, n, false, _ca_nw_predict(ctx), 0);
      if (n >= CA_OS_PAGE && !was_on && c->group_on) _ca_nw_update_routes();   /* class_want: grouped */
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

/* Under valgrind page traps would corrupt the program's data (trap.h); without monitoring
   (nightwatch_budget=0) nothing traps, and callgrind can count what the policy costs. */
static void init(void) {
  NW.monitor_all = nw_opt(NW_OPT_MONITOR) != 0;
  NW.budget_pm = (uint64_t)nw_opt(NW_OPT_BUDGET);
  NW.judged_min = _ca_machine_l2();
  bool traps = NW.budget_pm > 0 || NW.monitor_all;
  NW.on = nw_opt(NW_OPT_ON) != 0 && _ca_colour_opt(CA_COPT_COLOURS) != 0 && !(traps && _ca_trap_under_valgrind());
  NW.protect = nw_opt(NW_OPT_PROTECT) != 0;
  NW.start_ns = _ca_clock_ns();
  if (NW.on) {
    _ca_policy_install(&policy);
    if (NW.protect) _ca_colour_protect_default();   /* record open memory from the start */
    NW.groups = nw_opt(NW_OPT_SMALL) != 0;
    if (NW.groups) _ca_sample_set_period((int64_t)(NW.judged_min / 8));
    /* span classes of a page or more that nothing samples are named one by one (class_want) */
    _ca_nw_classes_init();
  }
  else turn_off(nw_opt(NW_OPT_ON) == 0 ? "nightwatch=0" : _ca_colour_opt(CA_COPT_COLOURS) == 0 ? "colours=0"
                 : "under valgrind (it misexecutes instructions resumed after a page trap; nightwatch_budget=0 runs without traps)");
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
                       "once NightWatch confines a polluter, move the touched pages of open memory (spans and objects "
                       "up to the L2's size, 4 times the L2 in all, oldest first) to pages of the other 7/8, so that "
                       "none lies in the polluter's colours" },
  [NW_OPT_SMALL]   = { "nightwatch_small", 1, 0, 1, _ca_bool_words,
                       "NightWatch judges chunks below the L2 too, sampled by bytes (one per L2/8 bytes of a context's "
                       "allocations, each on pages of its own, judged together per context), and serves a span size "
                       "class (up to 64 KiB) from restrictive spans while its sampled contexts are polluters; with 0, "
                       "span-class chunks of a page or more are named one by one" },
  [NW_OPT_DELAY]   = { "nightwatch_delay", 200, 0, 3600000, NULL,
                       "NightWatch starts the colour layer (0.1-0.3 s of a CPU's time with the user's set file, about a "
                       "second without) only once the process has run this many ms: a shorter program never pays for "
                       "it, and its restrictive chunks until then are ordinary memory" },
};

const ca_layer_t _ca_layer_nightwatch = {
  .name = "nightwatch", .options = options, .values = _ca_nw_options, .noptions = NW_OPT_COUNT,
  .init = init, .fork_prepare = fork_prepare, .fork_parent = fork_release, .fork_child = fork_child,
  .stats = _ca_nw_stats_json,
};

