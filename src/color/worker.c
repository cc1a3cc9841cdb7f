/* The worker thread: pinned to one CPU while it measures, at nice 19, it starts the layer
   (start.c), builds the eviction sets the registered sets need, and keeps each set's pool
   stocked with classified pages, a batch at a time, judging its progress and backing off when a
   stretch goes badly; between chunks it does protection's moves (protect.c).  Every few seconds
   it re-verifies a sample of pooled pages and drops the ones whose colour changed. */
#define _GNU_SOURCE
#include "layer.h"
#include "../monitor/trap.h"
#include <sched.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Protection's move: the live page to a pooled page of set `to`; its old frame stocks set
   `from`'s pool if the pool's re-test places it there (test_kept). */
static int colour_move_to(void* page, int from, int to) {
  if (_ca_pool_moves_capped(1)) return -1;
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
void _ca_cs_wait_wake(uint64_t ms) {
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

/* Hold the calling thread on its CPU while it measures (not the worker's, when there is
   another: it may be measuring too); `was` keeps its affinity to restore.  A test whose
   reference is loaded on one CPU and timed on the other reads as an eviction (unpinned, 40% of
   a colour's pages read as not of it, or a third of other pages as of it; pinned, 1-3%). */
bool _ca_cs_pin_here(cpu_set_t* was) {
  int cpu = sched_getcpu();
  if (cpu < 0 || sched_getaffinity(0, sizeof *was, was) != 0) return false;
  if (cpu == L.worker_cpu) cpu = other_cpu(was, cpu);
  return pin(cpu);
}

/* Protection's share of the worker (protect.c): up to `pages` pages of registered ranges, 8 at a
   time, each batch's old frames re-tested for their pool; returns the pages still pending. */
static size_t protect_some(size_t pages) {
  size_t pending = 0;
  for (size_t done = 0; _ca_protect_armed() && done < pages; done += 8) {
    size_t before = pending;
    pending = _ca_protect_work(&protect_ops, 8);
    _ca_cs_test_kept();
    if (pending == 0 || pending == before) break;     /* all done, or nothing due / no stock */
  }
  return pending;
}

static void worker(int here);

/* The worker's CPU time so far (ns): its cost to the machine, on a CPU the program may want. */
uint64_t _ca_cs_worker_cpu_ns(void) {
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
  uint64_t cpu = _ca_cs_worker_cpu_ns();
  if (L.pace_from_ns == 0 || atomic_load(&L.preparing) > 0 || cpu < L.pace_cpu_ns) return;   /* no clock: no pace */
  uint64_t ns = _ca_colour_pace_ns(cpu - L.pace_cpu_ns, _ca_clock_ns() - L.pace_from_ns,
                                   (uint32_t)_ca_colour_opt(CA_COPT_WORKER));
  if (ns == 0) return;
  uint64_t t = _ca_clock_ns();
  pthread_mutex_lock(&L.wake_lock);
  _ca_cs_wait_wake(ns / 1000000 + 1);                  /* a prepare or a new set wakes it */
  pthread_mutex_unlock(&L.wake_lock);
  L.paced_ns += _ca_clock_ns() - t;
}

void* _ca_cs_worker_main(void* arg) {
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
  if (!_ca_cs_start(&rng)) return;
  uint64_t last_verify = _ca_clock_ms(), backoff_ms = 0;
  for (;;) {
    /* the colours the registered sets need, and their eviction sets */
    _ca_lock(&L.lock);
    uint32_t need = _ca_cs_colours_needed(), gen = L.generation;
    _ca_unlock(&L.lock);
    /* at least four sets: quiet_window() and sets_held() judge the moment by them (with a
       profile and one set needed, stocking 3 MiB of 1/8 took 26-120 s in 3 runs of 8, against
       1-5 s in the others) */
    if (need < 4 && L.cal.colours >= 4) need = 4;
#ifdef CA_TEST_HOOKS
    uint32_t drops = atomic_load(&L.inject_drops);
    if (drops > 0 && atomic_compare_exchange_strong(&L.inject_drops, &drops, drops - 1)) {
      _ca_cs_drop_sets();
      if (!_ca_cs_retry_later("test: eviction sets lost on purpose")) return;
      continue;
    }
#endif
    for (int attempt = 0; attempt < 3 && L.map.ncolours < need; attempt++)
      _ca_colour_discover(&L.probe.base, &L.map, &L.src, need, L.cal.colours, 60000, &rng, &L.disc);
    if (L.map.ncolours < need) {
      if (!_ca_cs_retry_later("could not find eviction sets for the colours the sets need")) return;
      continue;
    }
    L.failures_in_row = 0;
    if (!L.src.trimmed) _ca_page_source_trim(&L.src);   /* 16 MiB of calibration pages */
    if (L.ready_ns == 0) { L.ready_ns = _ca_clock_ns() - L.start_ns; L.reason[0] = 0; }
    if (L.pace_from_ns == 0) { L.pace_from_ns = _ca_clock_ns(); L.pace_cpu_ns = _ca_cs_worker_cpu_ns(); }
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
    while (_ca_cs_pools_short(gen) && !suspect && !slow && !CA_DROP_PENDING()) {
      if (!_ca_cs_audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; break; }
      uint8_t* chunk = _ca_pool_supply(STOCK_CHUNK);
      if (chunk == NULL) break;
      for (size_t b = 0; b < STOCK_CHUNK; b += BATCH) {
        int colour[BATCH];
        uint64_t mask = _ca_cs_sets_mask(false), excl = _ca_cs_sets_mask(true);
        if (since_quiet >= QUIET_EVERY) {
          int tries = 0;
          uint64_t tq = _ca_clock_ns();
          for (; !_ca_cs_quiet_window() && tries < 50; tries++) {
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
          if (colour[i] < 0) colour[i] = eliminate ? _ca_cs_excluded(chunk + (b + i) * CA_OS_PAGE, excl) : -2;
          if (colour[i] != -2) colour[i] = _ca_cs_audited(chunk + (b + i) * CA_OS_PAGE, colour[i]);
        }
        L.classified += BATCH;
        L.classify_ns += _ca_clock_ns() - tc;
        tc = _ca_clock_ns();
        bool trusted = _ca_cs_sets_held();
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
          if (!trusted || !_ca_cs_pools_short(gen) || !_ca_cs_route(page, colour[i])) _ca_pool_push(&rejected, page);
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
           their references; in one benchmark run 4 of the 5 such processes had their
           sets dropped by the claims and found again.  A back-off then, not a suspicion. */
        if (few && _ca_cs_sets_claim_stock(&rng)) { slow = true; L.claims_short++; }
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
    if (!suspect && !slow && !_ca_cs_audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; }   /* a pool that just filled */
    L.suspicions += suspect;
    if (_ca_colour_suspect(&L.suspected, suspect, judged_ok)) _ca_cs_drop_sets();
    else if (suspect) slow = true;                   /* the first: a back-off, the sets kept */
    if (slow || suspect) L.backoffs++;
    backoff_ms = _ca_colour_backoff(backoff_ms, slow || suspect);
    if (_ca_clock_ms() - last_verify > 2000) { _ca_cs_verify_sample(&rng); last_verify = _ca_clock_ms(); }
    size_t pending = protect_some(256);
    _ca_cs_test_kept();
    /* sleep until a pool runs low or a set is added (briefly while ranges wait) */
    pthread_mutex_lock(&L.wake_lock);
    if ((!_ca_cs_pools_short(gen) || backoff_ms > 0) && !_ca_cs_replan(gen)) _ca_cs_wait_wake(backoff_ms > 0 ? backoff_ms : pending ? 20 : 2000);
    pthread_mutex_unlock(&L.wake_lock);
  }
}

void _ca_cs_wake_worker(void) {
  pthread_mutex_lock(&L.wake_lock);
  pthread_cond_broadcast(&L.wake);
  pthread_mutex_unlock(&L.wake_lock);
}
