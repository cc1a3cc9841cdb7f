/* The worker thread: pinned to one CPU while it measures, it starts the layer (start.c), builds
   the eviction sets the registered sets need, and keeps each set's pool stocked with classified
   pages, a batch at a time, each batch bracketed by controls and its verdicts kept only when
   they pass, judging its progress and backing off when a stretch goes badly; between chunks it
   does protection's moves (protect.c).  Every few seconds it re-verifies a sample of pooled
   pages and drops the ones whose colour changed.  Started for a client alone (hot pages), it
   first runs the client without the layer until the client wants colours (client_first).

   Its cost is bounded: until the first stock is in it runs at the priority of the thread that
   asked (a program keeping both CPUs busy left a nice-19 worker 100 ms of CPU in 6 s, and no
   colours), then at nice 19, and from then on (a second after the layer was asked for at the
   earliest) within colour_worker percent of the CPU time the program's own threads use. */
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

#define REJECTED_MAX  16384                  /* rejected frames held back at most where they cannot
                                                go back at once (64 MiB; at 8 MiB the kernel handed
                                                the same frames back: 4 MiB of 1/8 not stocked in
                                                20 s, 3 runs of 3, against 0.8-0.9 s) */
#define STRETCH       (64 * STOCK_CHUNK)     /* pages classified between two judgements of progress */
#define BACKOFF_MIN_MS 500                   /* a slow or starved stretch: the worker sleeps this long, */
#define BACKOFF_MAX_MS 30000                 /* doubling up to this, until a round fills the pools */

/* A stretch of stocking judged: a 1/8 slice is 1 page in 8 and the slice test keeps most of
   them, and the slices it stocks by elimination keep more.  Keeping fewer than 1 in 1024, the
   sets see no colour (2.4 million pages classified in two minutes stocked 211 pages once);
   fewer than 1 in 256, the host is too loud for the tests just then. */
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

/* The held frames go back (they were pushed in address order within each supply chunk; each
   madvise is a TLB shootdown, an interrupt to every CPU running one of the program's threads:
   page by page, one 3 s pv messages run made 12,383 such calls). */
static void release_rejected(ca_page_pool_t* rejected) {
  _ca_pool_purge(rejected->pages, rejected->count);
  rejected->count = 0;
}

/* A supply chunk done with; taken[i]: page i went to a pool (it stays where it is).  The others
   of a fresh chunk go back now: the huge page is split first, by moving one of them out (the
   kernel splits it to move a page; pages given back from a huge page still whole stay
   allocated until memory runs short), and a chunk nothing was taken from goes whole.  Those of
   a chunk that is not fresh are held until the round ends. */
static void release_chunk(uint8_t* chunk, const bool* taken, bool fresh, ca_page_pool_t* rejected) {
  void* give[STOCK_CHUNK];
  size_t n = 0, kept = 0;
  for (size_t i = 0; i < STOCK_CHUNK; i++) {
    kept += taken[i];
    if (!taken[i]) give[n++] = chunk + i * CA_OS_PAGE;
  }
  if (!fresh) { for (size_t i = 0; i < n; i++) _ca_pool_push(rejected, give[i]); return; }
  if (kept == 0) { _ca_os_unmap(chunk, STOCK_CHUNK * CA_OS_PAGE); return; }
  /* khugepaged would collapse what is left of the chunk into a new huge page, new frames for the
     pooled pages (it fills up to 511 missing pages of a range with zeros) */
  _ca_os_thp(chunk, STOCK_CHUNK * CA_OS_PAGE, false);
  if (n == 0) return;
  void* slot = _ca_colour_slot();
  bool split = slot != NULL && _ca_colour_move_page(give[0], slot) != 0;
  _ca_pool_purge(split ? give + 1 : give, split ? n - 1 : n);
  if (slot != NULL) _ca_colour_drop_slot(slot);
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

/* The program's CPU time so far (ns): the process's, less the worker's. */
static uint64_t program_cpu_ns(void) {
  uint64_t all = 0, w = _ca_cs_worker_cpu_ns();
  _ca_clock_read_ns(CLOCK_PROCESS_CPUTIME_ID, &all);
  return all > w ? all - w : 0;
}

/* The worker's pace (option colour_worker, percent of the program's CPU time): how much of the
   worker's CPU time `worker` (ns, since the pace began) is over its share of the program's
   `program` ns since then, beyond one allowance (a supply chunk's work, so that a pool a program
   keeps drawing on is refilled a chunk at a time).  0: within its share; 100 = no limit. */
#define PACE_ALLOWANCE_NS 50000000ull
uint64_t _ca_colour_pace_ns(uint64_t worker, uint64_t program, uint32_t pct) {
  if (pct >= 100 || pct == 0) return 0;
  uint64_t share = program / 100 * pct + PACE_ALLOWANCE_NS;
  return worker > share ? worker - share : 0;
}

/* The CPU the worker may spend on its first stock once its sets are ready, at the priority of
   the thread that asked: beyond it, the rest runs in the background, and paced.  Counted from
   the sets, not from the start: a start without a set file spends 0.4-0.8 s of CPU building
   them, and then, niced and at 2% of the program's CPU beside two busy threads, 1 process in 5
   had no stock 5 s after asking. */
#define START_CPU_NS 500000000ull

static bool start_spent(void) {
  return L.ready_ns != 0 && _ca_cs_worker_cpu_ns() > L.start_cpu_ns + START_CPU_NS;
}

/* From the first stock, or once the start has had its CPU, and a second after the layer was
   asked for at the earliest, the worker sleeps between supply chunks while it is over its share
   (not while a program thread waits in chromalloc_colours_prepare: that thread asked for the
   stock); the program's threads wake it by using CPU, a new set or a prepare by signalling. */
static void pace(void) {
  if (atomic_load(&L.preparing) > 0) return;
  uint64_t now = _ca_clock_ns();
  if (L.pace_from_ns == 0) {
    if (now < L.start_ns + 1000000000ull || (L.stocked_ns == 0 && !start_spent())) return;
    L.pace_from_ns = now;
    L.pace_cpu_ns = _ca_cs_worker_cpu_ns();
    L.pace_program_ns = program_cpu_ns();
  }
  uint32_t pct = (uint32_t)_ca_colour_opt(CA_COPT_WORKER);
  for (int naps = 0; naps < 20; naps++) {           /* a second at most between two chunks */
    uint64_t w = _ca_cs_worker_cpu_ns(), p = program_cpu_ns();
    if (_ca_colour_pace_ns(w - L.pace_cpu_ns, p - L.pace_program_ns, pct) == 0) return;
    uint64_t t = _ca_clock_ns();
    pthread_mutex_lock(&L.wake_lock);
    _ca_cs_wait_wake(50);
    pthread_mutex_unlock(&L.wake_lock);
    L.paced_ns += _ca_clock_ns() - t;
    if (atomic_load(&L.preparing) > 0) return;
  }
}

/* Started for a client alone, the worker waits until the process has run the client's delay
   (or a set is registered): a program that ends sooner never gets back what the start costs
   (xchurn, 0.12 s: 0.19-0.27 s with hot pages on from the first millisecond). */
static void client_delay(void) {
  const ca_colour_client_t* c = _ca_cs_client();
  uint64_t until = c != NULL ? L.born_ns + c->delay_ms * 1000000u : 0;
  pthread_mutex_lock(&L.wake_lock);
  for (uint64_t now; L.generation == 0 && (now = _ca_clock_ns()) < until; )
    _ca_cs_wait_wake((until - now) / 1000000 + 1);
  pthread_mutex_unlock(&L.wake_lock);
}

/* A client that needs no colours yet (hot pages with a hot set random frames fit) has the
   worker's time without the layer: no calibration, no set file, no slot region, until it asks
   or a set is registered (a neutral program under hot pages: 0.4 s of the worker's CPU and the
   set file's 16 MiB otherwise). */
static void client_first(void) {
  const ca_colour_client_t* c = _ca_cs_client();
  pthread_mutex_lock(&L.wake_lock);
  while (_ca_cs_client_waits()) {
    pthread_mutex_unlock(&L.wake_lock);
    uint64_t ms = c->work();
    pthread_mutex_lock(&L.wake_lock);
    if (_ca_cs_client_waits()) _ca_cs_wait_wake(ms);
  }
  pthread_mutex_unlock(&L.wake_lock);
  _ca_cs_ask();
}

void* _ca_cs_worker_main(void* arg) {
  if (pthread_getcpuclockid(pthread_self(), &L.worker_clock) == 0) atomic_store(&L.worker_alive, true);
  _ca_trap_quiet_thread();
  client_delay();
  client_first();
  /* the slot region (a userfaultfd, 4 GiB registered): nothing takes a slot before the layer is ready */
  if (_ca_pool_init()) worker((int)(intptr_t)arg);
  else _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, "no address space for the pool's slots");
  _ca_clock_read_ns(CLOCK_THREAD_CPUTIME_ID, &L.worker_cpu_ns);
  atomic_store(&L.worker_alive, false);
  return NULL;
}

/* Background from here on: the program's threads come first.  Not with a client spreading
   pages (hot pages): its work is bounded by its own budgets, and at nice 19 beside two busy
   processes on one CPU it measured 3 of 120 hot pages in 5 s (an unprivileged thread cannot
   take its priority back). */
static void background(void) {
  if (!L.niced && _ca_cs_client() == NULL) setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
  L.niced = true;
}

/* One batch of a supply chunk: the verdicts of its pages, kept when the controls of the colours
   tested pass after it.  Returns the pages taken (taken[i]; -1: the controls failed, nothing
   taken). */
static int stock_batch(uint8_t* pages, size_t n, const ca_plan_t* plan, uint32_t turn, bool* taken) {
  int id[BATCH], colour[BATCH];
  uint64_t tc = _ca_clock_ns();
  for (size_t i = 0; i < n; i++) {
    id[i] = _ca_cs_classify(pages + i * CA_OS_PAGE, plan, &colour[i]);
    if (id[i] != 0 && _ca_cs_audited(pages + i * CA_OS_PAGE, colour[i]) == -2) id[i] = 0;
  }
  L.classified += n;
  bool trusted = true;
  for (uint32_t k = 0; k < plan->n && trusted; k++) {
    bool seen = false;                             /* one control per distinct mask */
    for (uint32_t j = 0; j < k && !seen; j++) seen = plan->mask[j] == plan->mask[k];
    if (!seen && plan->mask[k] != 0) trusted = _ca_cs_controls(plan->mask[k], turn);
  }
  L.classify_ns += _ca_clock_ns() - tc;
  int count = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t* page = pages + i * CA_OS_PAGE;
    /* bytes of its own: a page tested holds the chase every reference holds, and pages alike can
       be merged into one frame by the host (calibrate.c, touch_free) */
    if (trusted && id[i] != 0) ((uint64_t*)page)[1] = (uint64_t)(uintptr_t)page ^ L.start_ns;
    taken[i] = trusted && id[i] != 0 && _ca_cs_take(id[i], page);
    count += taken[i];
  }
  if (!trusted) { L.batches_dropped++; return -1; }
  return count;
}

/* Wait for a moment whose controls pass (a second at most): a batch measured in a loud one is
   thrown away. */
static void quiet_moment(const ca_plan_t* plan, uint32_t turn) {
  uint64_t tq = _ca_clock_ns();
  int tries = 0;
  for (; tries < 50 && plan->n > 0 && !_ca_cs_controls(plan->mask[0], turn + (uint32_t)tries); tries++) {
    struct timespec t = { 0, 20000000 };
    nanosleep(&t, NULL);
  }
  L.unquiet_batches += tries == 50;
  L.quiet_ns += _ca_clock_ns() - tq;
}

/* calibrate, then stock the pools and protect for the process's life; returns when it gives up */
static void worker(int here) {
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
  uint32_t turn = 0;
  for (;;) {
    /* the colours the registered sets need, and their eviction sets */
    _ca_lock(&L.lock);
    uint32_t need = _ca_cs_colours_needed(), gen = L.generation;
    _ca_unlock(&L.lock);
    /* at least two sets: a control needs a colour outside the one tested */
    if (need < 2 && L.cal.colours >= 2) need = 2;
#ifdef CA_TEST_HOOKS
    uint32_t drops = atomic_load(&L.inject_drops);
    if (drops > 0 && atomic_compare_exchange_strong(&L.inject_drops, &drops, drops - 1)) {
      _ca_cs_drop_sets();
      if (!_ca_cs_retry_later("test: eviction sets lost on purpose")) return;
      continue;
    }
#endif
    /* a client spreading pages wants every colour's set, once it wants colours (the layer may
       have started for a set first): built once, kept as far as found */
    uint32_t want = _ca_cs_client_wants() && !L.client_built && L.cal.colours > need ? L.cal.colours : need;
    if (L.map.ncolours < want) _ca_cs_build_sets(want, &rng);
    L.client_built = L.client_built || want > need;
    if (L.map.ncolours < need) {
      if (!_ca_cs_retry_later("could not find eviction sets for the colours the sets need")) return;
      continue;
    }
    L.failures_in_row = 0;
    if (L.ready_ns == 0) { L.ready_ns = _ca_clock_ns() - L.start_ns; L.start_cpu_ns = _ca_cs_worker_cpu_ns(); L.reason[0] = 0; }
    atomic_store_explicit(&L.state, CA_COLOURS_READY, ca_release);
    _ca_frames_learn();
    /* stock the pools, a batch at a time; pages no set takes go back with their chunk (fresh
       chunks), or are held until the round ends: released at once, the kernel would hand the
       very same frames (of the wrong colours) back in the next chunk */
    ca_page_pool_t rejected = {0};
    size_t stretch_classified = 0, stretch_taken = 0, stretch_batches = 0, stretch_dropped = 0;
    bool suspect = false, slow = false, judged_ok = false, loud = true;
    while (_ca_cs_pools_short(gen) && !suspect && !slow && !CA_DROP_PENDING()) {
      if (!_ca_cs_audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; break; }
      bool fresh, taken_here[STOCK_CHUNK] = { false };
      uint8_t* chunk = _ca_pool_supply(STOCK_CHUNK, &fresh);
      if (chunk == NULL) break;
      for (size_t b = 0; b < STOCK_CHUNK; b += BATCH) {
        ca_plan_t plan;
        _ca_cs_plan(&plan, gen);
        if (plan.n == 0) break;
        if (loud) quiet_moment(&plan, turn);
        int taken = stock_batch(chunk + b * CA_OS_PAGE, BATCH, &plan, turn++, taken_here + b);
        loud = taken < 0;
        stretch_batches++;
        stretch_dropped += loud;
        stretch_taken += taken > 0 ? (size_t)taken : 0;
        stretch_classified += BATCH;
      }
      release_chunk(chunk, taken_here, fresh, &rejected);
      if (rejected.count >= REJECTED_MAX) release_rejected(&rejected);
      /* a stretch judged: controls failing in most batches (sets that no longer see their
         colours, or a long loud spell), or sets that confirm almost nothing, are suspected;
         few pages, left to a quieter moment */
      if (stretch_classified >= STRETCH) {
        ca_stock_progress_t g = _ca_colour_progress(stretch_classified, stretch_taken);
        bool controls_bad = stretch_dropped * 2 > stretch_batches;
        L.suspected_by[0] += !suspect && controls_bad;
        L.suspected_by[1] += !suspect && !controls_bad && g == CA_STOCK_STARVED;
        suspect = suspect || controls_bad || g == CA_STOCK_STARVED;
        slow = slow || g == CA_STOCK_SLOW;
        judged_ok = g == CA_STOCK_OK && !suspect;
        stretch_classified = stretch_taken = stretch_batches = stretch_dropped = 0;
      }
      pthread_mutex_lock(&L.wake_lock);
      pthread_cond_broadcast(&L.wake);               /* waiters in chromalloc_colours_prepare */
      pthread_mutex_unlock(&L.wake_lock);
      /* a victim waits no longer than a chunk: every page due, as far as the stock of the
         other colours allows (64 per chunk of 512 pages classified: pv packets' 606 pages
         were done by frame 850-900, by 400-500 now, the victim slower until then) */
      protect_some(SIZE_MAX);
      if (!L.niced && start_spent()) background();
      pace();
    }
    release_rejected(&rejected);
    if (rejected.pages) _ca_os_unmap(rejected.pages, rejected.cap * sizeof(void*));
    if (!suspect && !slow && !_ca_cs_audit_groups(&rng)) { suspect = true; L.suspected_by[2]++; }   /* a pool that just filled */
    if (L.stocked_ns == 0 && !_ca_cs_pools_short(gen) && !_ca_cs_replan(gen)) {
      L.stocked_ns = _ca_clock_ns() - L.start_ns;
      L.stocked_cpu_ns = _ca_cs_worker_cpu_ns();
      background();
    }
    L.suspicions += suspect;
    if (_ca_colour_suspect(&L.suspected, suspect, judged_ok)) _ca_cs_drop_sets();
    else if (suspect) slow = true;                   /* the first: a back-off, the sets kept */
    if (slow || suspect) L.backoffs++;
    backoff_ms = _ca_colour_backoff(backoff_ms, slow || suspect);
    if (_ca_clock_ms() - last_verify > 2000) { _ca_cs_verify_sample(&rng); last_verify = _ca_clock_ms(); }
    size_t pending = protect_some(256);
    _ca_cs_test_kept();
    uint64_t client_ms = _ca_cs_client() != NULL ? _ca_cs_client()->work() : UINT64_MAX;
    /* sleep until a pool runs low or a set is added (briefly while ranges wait), or the client's turn */
    uint64_t sleep_ms = backoff_ms > 0 ? backoff_ms : pending ? 20 : 2000;
    pthread_mutex_lock(&L.wake_lock);
    if ((!_ca_cs_pools_short(gen) || backoff_ms > 0) && !_ca_cs_replan(gen)) _ca_cs_wait_wake(sleep_ms < client_ms ? sleep_ms : client_ms);
    pthread_mutex_unlock(&L.wake_lock);
  }
}

void _ca_cs_wake_worker(void) {
  pthread_mutex_lock(&L.wake_lock);
  pthread_cond_broadcast(&L.wake);
  pthread_mutex_unlock(&L.wake_lock);
}
