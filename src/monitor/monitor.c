/* The locality monitor: is a chunk's data reused while it could still be in the L2?

   Per monitored chunk, s^0.65 of its s whole pages are sampled (NightWatch's sampling count),
   one at a random place in each of equal strides, so a sampled page stands for `stride` pages.
   Each sampled page cycles through reference pairs:

     ARMED_FIRST --fault--> OPEN --burst window--> ARMED --fault: judge the pair--> OPEN ...
       (PROT_NONE)          (accessible: burst       (PROT_NONE)
                             accesses run free)

   A fault is a reference; the page then stays open for a burst window (accesses in a burst
   hit in any mapping and say nothing, paper 5.1), after which it is protected again: by the
   next fault of the program's own thread on any sampled page (while a chunk is being walked
   faults come every few microseconds) or its next allocator call (_ca_monitor_tick), else by
   the monitor thread, which looks every LOOK_MS and is not woken for it.  The program's thread
   does it on its own CPU; from the monitor thread every mprotect must flush the program's
   CPU's TLB by an interrupt, which in this VM waits for the host to run that vCPU (64 of them
   took 4-10 ms, long enough for a whole read pass to go by unseen), and waking the monitor
   thread for each opened page cost the program about as much as its trap (sparse members of
   a group, one opened page each: 2.5% of a run where the traps and protection counted 0.7%;
   1.4% without the wake).  The next fault closes a pair.  The paper judges a pair by the PMU's miss count
   between its two references: more misses than the open cache has lines means the reuse
   misses even with open mapping.  Without a PMU the chunk's own sampled pages are the counter:
   every sampled page referenced between the two references of a pair stands for `stride`
   pages of the chunk touched in between, so

       own = (sampled pages referenced in between + 1) x stride x 4 KiB

   is a lower bound of the pair's reuse distance.  A pair is a miss when own > the L2 (the chunk
   alone streams more than the cache between two uses of a page: the reuse misses whatever the
   mapping), else a hit.  A page referenced once and never again (after its burst, before the
   chunk is freed or EXPIRE_MS pass) is a miss too: nothing was reused, and its burst fits any
   mapping (5.1).

   Why not decide by timing the reload?  A timed reload at the second reference (8 dependent
   loads from the lines touched at the first, against thresholds measured at start) says
   whether the data is in the L2 *now*, which includes what other chunks did to it: a hot
   index reused every lap next to a streamed frame buffer reloads from memory too, and was
   judged a polluter (18 of 18 pairs, pv frames, issue 4 notes).  Time is not used either: how
   long an idle line survives in the L2 depends on what else shares the core (measured in
   this VM by the monitor thread: from 300 us to more than 8 ms in successive runs), and a reuse
   that comes late because a polluter ran in between is exactly what restricting the polluter
   fixes.  The reload is still timed, on the faulting thread's core: a pair that is a hit by
   its own footprint but reloaded from beyond the L2 counts as `interference`, the damage other
   data does to this chunk.

   A chunk converges as in the paper: the latest round's miss rate is within 0.1 of the rate
   before it (with at least MIN_EVIDENCE pairs); then its pages are opened and the verdict
   ("polluter": miss rate above one half) goes to the policy from the monitor thread.  A chunk
   freed before it converged gives its verdict at the free when it has enough evidence.

   With a PMU (pmu.c: AMD IBS op, Intel PEBS load latency; detected at start) no page is
   protected: each thread that allocates a monitored chunk samples its own loads into a ring,
   the monitor thread drains the rings, and a sampled load inside a monitored chunk is a hit
   when the hardware says the L1, a fill buffer or the L2 served it, a miss when a level beyond
   the L2 did.  That is the paper's own kind of evidence (counters), with the same caveat as a
   timed reload: a miss caused by other data counts.  The rounds and the verdict are the same.
   This machine (a KVM guest) has no PMU: the path is tested with fed samples only.

   Correctness: the fault handler (trap.c) resolves faults on sampled pages and chains every
   other fault.  A fault racing with the page being opened finds the page already open and is
   retried.  System calls given a sampled buffer, and mprotect/munmap by the program, go through
   _ca_monitor_release first (syscalls.c). */
#define _GNU_SOURCE
#include "monitor.h"
#include "pmu.h"
#include "trap.h"
#include "../core/hooks.h"
#include "../color/colour.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNKS     128         /* chunks being sampled or awaiting delivery of their verdict */
#define MAX_SAMPLES    32          /* pages sampled per chunk at most: 2 pairs each, enough to converge */
#define PAIRS_PER_PAGE 2
#define MIN_EVIDENCE   8
#define MARGIN_PCT     10
#define CHASE_LINES    8
#define BURST_US       20          /* a page stays open this long after a reference */
#define LAZY_US        200         /* ... and the monitor thread leaves it to faults this long */
#define REARM_PER_FAULT 16         /* pages a fault re-protects at most */
#define EXPIRE_MS      50          /* an armed page waits this long for its next reference */
#define LOOK_MS        5           /* the monitor thread's look while chunks are sampled */
#define TRAP_NS        3000        /* a fault's delivery and return, beyond the handler (cost) */
#define PMU_RINGS      64          /* threads sampling with the PMU */
#define PMU_PERIOD     4001        /* sampled loads: one in this many */
#define PMU_DRAIN_US   1000        /* the monitor thread drains the rings this often */

#define MAX_GROUPS     16          /* contexts whose small chunks are sampled together */
#define GROUP_MEMBERS  40          /* a group's members, live or gone, at most */
#define GROUP_WARM     56          /* warm members a group takes in all (after the L2's worth) */
#define GROUP_LIMIT    320         /* members a group takes in all, warm or not */
#define GONE_MS        1000        /* a freed member's last reference counts this long */
#define GROUP_IDLE_MS  100         /* a group with nothing left to learn ends after this */
#define GROUP_FRUITLESS 24         /* warm members freed with no pair judged: the group ends */

enum { PG_ARMED_FIRST, PG_OPEN, PG_ARMED, PG_DONE };
enum { CH_FREE, CH_ACTIVE, CH_VERDICT, CH_GONE };   /* CH_GONE: a group's member, freed */

/* the evidence of a chunk, or of a group: pairs judged, in rounds */
typedef struct evidence_s {
  ca_monitor_result_t r;
  uint32_t  round_hits, round_misses;
} evidence_t;

typedef struct sample_s {
  uint32_t index;        /* page index within the chunk's whole pages */
  uint8_t  state, pairs;
  uint8_t  line;         /* line of the latest reference */
  uint8_t  late;         /* faults after the page was done (races), bounded */
  bool     released;     /* given up for a system call or the program's own mprotect/munmap:
                            its faults are the program's, never opened by us */
  uint64_t t;            /* ns: opened (OPEN) or protected (ARMED) */
  uint64_t last_ref;     /* ns: latest reference seen (0: none yet) */
} sample_t;

typedef struct mchunk_s {
  int       state;
  uintptr_t lo, hi;      /* whole pages of the chunk */
  void*     p;
  size_t    n;
  size_t    stride;      /* bytes of the chunk one sampled page stands for */
  uint64_t  cookie;
  uint32_t  nsamples, done;
  int       group;         /* a member of this group (one page, one sample), or -1 */
  bool      pending;       /* gone member: referenced once, not yet judged unused */
  bool      warm;          /* member: joined after the group had seen the L2's worth of
                              members, so the footprint after its references is seen */
  uint64_t  joined_ns, gone_ns;   /* member: joined, freed (0: live) */
  evidence_t own, *ev;     /* ev: own, or the group's */
  bool      traps;         /* pages protected (else judged by PMU samples) */
  sample_t  s[MAX_SAMPLES];
} mchunk_t;

/* Chunks below the L2 cannot stream more than the L2 by themselves, so they are judged per
   allocation context, together: a group is one context's members, each one page standing for
   `stride` bytes: a sampled small chunk (below a page) on a page of its own (the paper
   page-aligns sampled small chunks) stands for the sampling period's bytes of the context's
   small allocations; a chunk of a page or more (below the L2, with pages of its own) is a
   member by its first page and stands for its size.  A pair's footprint is what the members
   referenced between its two references stood for, plus the page's own stride, by the same
   pair rule as a chunk's.  A member freed after one reference stays in the group (CH_GONE) for
   GONE_MS: its reference still counts in the footprint, and it is an unused miss once the
   members referenced after it stood for more than the L2.  Only members that joined while it
   was live count for that: one that joined after its free may have had its memory (a buffer
   freed and allocated again, one at a time, stays in the cache whatever the group streams in
   all).  A group sees only the members sampled since it started: the first L2's worth only
   mark footprint, and only members that join after them are judged (a group started late in a
   pass over 3 MiB of messages saw a few of them and judged every pair a hit), and once it has
   turned a chunk of its context away (full, or no room), a pair whose first reference came
   before that is judged only when it is a miss: the footprint it sees is a lower bound.  A
   group takes the L2's worth of members and GROUP_WARM warm ones after them (at most
   GROUP_LIMIT in all); when it holds GROUP_MEMBERS, or the monitor has no slot left, its own
   oldest gone member makes room. */
typedef struct mgroup_s {
  int       state;         /* CH_FREE, CH_ACTIVE, CH_VERDICT */
  uint64_t  cookie;
  uint64_t  bytes;         /* what its members stood for, all that joined */
  _Atomic(uint64_t) refused_ns;   /* a chunk of its context could not join (full, no room) */
  uint32_t  members;       /* chunks in the group (active or gone) */
  uint32_t  warm;          /* members that joined warm */
  uint32_t  gone_warm;     /* members that joined warm and were freed */
  uint64_t  joined_ms;     /* the latest member's start */
  evidence_t ev;
} mgroup_t;

static struct {
  ca_lock_t      lock;
  mchunk_t       chunks[MAX_CHUNKS];
  mgroup_t       groups[MAX_GROUPS];
  bool           rearming;            /* the monitor thread is protecting a batch, unlocked */
  ca_verdict_fn  verdict;
  bool           inited, trap_ok;
  _Atomic(int)   wake_seq, sleeping;  /* the monitor thread's futex (sleeping: SLEEP_*) */
  _Atomic(uint64_t) open_ns;          /* a page was opened then and may still be (0: none) */
  _Atomic(pid_t) thread_pid;          /* process the thread runs in (0: none) */
  _Atomic(bool)  measured;            /* the reload thresholds are known */
  size_t         l2;                  /* bytes: the open cache (C_open) */
  uint32_t       hit_ticks, miss_ticks, threshold;
  uint64_t       first_refs, pairs, pair_hits, far, unused, expired, interference;
  uint64_t       rearms, released, no_room, verdicts, fault_ns, members, group_verdicts;
  _Atomic(uint64_t) wakes, wake_ns, tick_rearms;
  uint64_t       fruitless_groups;
  _Atomic(uint64_t) cost_ns;          /* page protection and fault handling, all threads */
  _Atomic(uint64_t) traced;           /* looks that found the process traced (no new traps) */
  _Atomic(uint64_t) maps_looks, maps_ns;   /* scans of /proc/self/maps for async I/O rings */
  _Atomic(bool)  async_by_maps;       /* ... one found them */
  _Atomic(uint64_t) sampled;          /* pages sampled so far */
  /* the PMU method */
  bool           use_pmu, fed;        /* judge by PMU samples; fed: samples come from tests */
  ca_pmu_info_t  pmu;
  ca_pmu_ring_t  rings[PMU_RINGS];
  _Atomic(int)   nrings;
  ca_pmu_stats_t pmu_stats;
  uint64_t       pmu_hits, pmu_misses, pmu_unknown;
} M;

/* ---- sampling count: ceil(s^0.65) without libm: the least k with k^20 >= s^13 ------------- */
static double pow20(double x) { double x2 = x * x, x4 = x2 * x2, x5 = x4 * x, x10 = x5 * x5; return x10 * x10; }
static double pow13(double x) { double x2 = x * x, x4 = x2 * x2, x8 = x4 * x4; return x8 * x4 * x; }

uint32_t _ca_monitor_samples(size_t pages) {
  if (pages <= 1) return (uint32_t)pages;
  double target = pow13((double)pages);
  uint32_t lo = 1, hi = pages < MAX_SAMPLES ? (uint32_t)pages : MAX_SAMPLES;
  if (pow20(hi) < target) return hi;                   /* capped */
  while (lo < hi) { uint32_t mid = (lo + hi) / 2; if (pow20(mid) < target) lo = mid + 1; else hi = mid; }
  return lo;
}

/* ---- the pair rule (pure: tests drive it) ------------------------------------------------- */
bool _ca_monitor_judge(uint64_t between, size_t stride, size_t l2) {
  return between + stride <= l2;
}

/* ---- the timed reload ---------------------------------------------------------------------- */
static unsigned chase_line(unsigned line, unsigned i) { return (line + i * 9) & 63; }

/* A dependent chase over CHASE_LINES lines from `line`; the translation is warmed first by a
   load from a line outside the chase (a fault or mprotect has just flushed it). */
static uint64_t chase(const uint8_t* page, unsigned line) {
  uintptr_t dep = *(const volatile uint8_t*)(page + (((line + 4) & 63) << 6) + 32) & 0;
  uint64_t t0 = _ca_ticks();
  for (unsigned i = 0; i < CHASE_LINES; i++) {
    uint64_t v = *(const volatile uint64_t*)(page + ((uintptr_t)chase_line(line, i) << 6 | dep));
    __asm__ volatile("and $0, %0" : "+r"(v));          /* 0, but only once the load is done */
    dep = (uintptr_t)v;
  }
  return _ca_ticks() - t0 + dep;
}

/* the lines the next chase will time, loaded at a reference */
static void touch_lines(const uint8_t* page, unsigned line) {
  for (unsigned i = 0; i < CHASE_LINES; i++) (void)*(const volatile uint8_t*)(page + (chase_line(line, i) << 6));
}

static uint32_t median(uint32_t* v, int n) {
  for (int i = 1; i < n; i++) for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { uint32_t t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return v[n / 2];
}


/* Chase times with the lines in the L2 and after streaming twice the L2 over them, measured on
   one CPU (an L2 is private to its core). */
static void measure(void) {
  size_t bytes = 2 * M.l2 + 2 * CA_OS_PAGE;
  uint8_t* buf = _ca_os_map(bytes);
  if (buf == NULL) return;
  memset(buf, 1, bytes);
  uint8_t* page = buf;
  uint8_t* stream = buf + CA_OS_PAGE;
  enum { R = 9 };
  uint32_t hit[R], miss[R];
  volatile uint8_t sink = 0;
  for (int r = 0; r < R; r++) {
    touch_lines(page, (unsigned)r);
    for (size_t o = 0; o < 128 * 1024; o += 64) sink += stream[o];        /* out of the L1 */
    hit[r] = (uint32_t)chase(page, (unsigned)r);
    for (size_t o = 0; o < 2 * M.l2; o += 64) stream[o]++;
    miss[r] = (uint32_t)chase(page, (unsigned)r);
  }
  (void)sink;
  M.hit_ticks = median(hit, R);
  M.miss_ticks = median(miss, R);
  M.threshold = M.miss_ticks > M.hit_ticks + M.hit_ticks / 5 ? (M.hit_ticks + M.miss_ticks) / 2 : 0;
  _ca_os_unmap(buf, bytes);
}

static void calibrate(void) {
  cpu_set_t was, one;
  bool pinned = sched_getaffinity(0, sizeof was, &was) == 0;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  if (pinned) pinned = sched_setaffinity(0, sizeof one, &one) == 0;
  measure();
  if (pinned) sched_setaffinity(0, sizeof was, &was);
  atomic_store_explicit(&M.measured, true, ca_release);
}

/* ---- lookup ------------------------------------------------------------------------------- */
static sample_t* sample_at(mchunk_t* c, uintptr_t a) {
  uint32_t idx = (uint32_t)((a - c->lo) / CA_OS_PAGE);
  int lo = 0, hi = (int)c->nsamples - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c->s[mid].index == idx) return &c->s[mid];
    if (c->s[mid].index < idx) lo = mid + 1; else hi = mid - 1;
  }
  return NULL;
}

static void* page_of(const mchunk_t* c, const sample_t* s) { return (void*)(c->lo + (uintptr_t)s->index * CA_OS_PAGE); }

/* The sample of page a in a chunk being sampled or judged, or NULL: not ours.  A delivered
   (freed) chunk's pages were all opened when it was judged, so a fault there raced with its end (or the
   memory is someone else's now, protected by the program itself): the handler retries it once
   (trap.c) and then passes it on, never opens it (a freed chunk's page forced open broke a
   program's own mprotect on a new block at the same address). */
static sample_t* sample_of(uintptr_t a, mchunk_t** out) {
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* c = &M.chunks[i];
    if (c->state == CH_FREE || c->state == CH_GONE || a < c->lo || a >= c->hi) continue;
    sample_t* s = sample_at(c, a);
    if (s != NULL) { *out = c; return s; }
  }
  return NULL;
}

/* M.lock is also wanted inside signal handlers: ours (a trap), and the program's, through the
   system calls we interpose (cmake's SIGCHLD handler calls read(); it hung when the signal came
   while its thread was in our fault handler, holding the lock).  `holding` is set before the
   lock is taken and cleared after it is let go: code that finds it set runs in a handler
   nested in this thread's critical section and must not wait for the lock (it would wait for
   itself). */
static __thread bool holding __attribute__((tls_model("initial-exec")));
static void lock_m(void) { holding = true; _ca_lock(&M.lock); }
static void unlock_m(void) { _ca_unlock(&M.lock); holding = false; }
static bool try_lock_m(void) {
  if (holding) return false;
  holding = true;
  if (_ca_try_lock(&M.lock)) return true;
  holding = false;
  return false;
}

/* the system call itself: the interposed mprotect (syscalls.c) would wait for our own lock */
static int protect(void* page, int prot) {
  uint64_t t0 = _ca_clock_ns();
  int r = (int)_ca_syscall6(SYS_mprotect, (long)page, CA_OS_PAGE, prot, 0, 0, 0);
  atomic_fetch_add_explicit(&M.cost_ns, _ca_clock_ns() - t0, ca_relaxed);
  return r;
}

static void finish_page(mchunk_t* c, sample_t* s) {
  if (s->state == PG_ARMED_FIRST || s->state == PG_ARMED) protect(page_of(c, s), PROT_READ | PROT_WRITE);
  if (s->state != PG_DONE) { s->state = PG_DONE; c->done++; }
}

static void count(mchunk_t* c, bool hit) {
  evidence_t* e = c->ev;
  if (hit) { e->r.hits++; e->round_hits++; M.pair_hits++; } else { e->r.misses++; e->round_misses++; }
  M.pairs++;
}

/* Bytes the chunk's other sampled pages stood for that were referenced after `s` was: of its
   group, the members, live or gone, that joined while c was live */
static uint64_t referenced_since(const mchunk_t* c, const sample_t* s) {
  uint64_t n = 0;
  if (c->group < 0) {
    for (uint32_t i = 0; i < c->nsamples; i++) if (&c->s[i] != s && c->s[i].last_ref > s->last_ref) n++;
    return n * c->stride;
  }
  for (int i = 0; i < MAX_CHUNKS; i++) {
    const mchunk_t* m = &M.chunks[i];
    if ((m->state == CH_ACTIVE || m->state == CH_GONE) && m->group == c->group && &m->s[0] != s &&
        m->s[0].last_ref > s->last_ref && (c->gone_ns == 0 || m->joined_ns < c->gone_ns)) n += m->stride;
  }
  return n;
}

/* A page referenced and then never again, not even after the chunk alone had streamed more
   than the L2 over it: a miss (nothing was reused, and its burst fits any mapping).  Touched
   once by a chunk that stayed small, it is no evidence: its lines may well serve the next
   chunk in the same memory. */
static void count_unused(mchunk_t* c, sample_t* s) {
  if (s->pairs != 0 || s->state != PG_ARMED || s->last_ref == 0 || (c->group >= 0 && !c->warm)) return;
  if (_ca_monitor_judge(referenced_since(c, s), c->stride, M.l2)) return;
  count(c, false); c->ev->r.unused++; M.unused++; s->pairs = 1;
}

/* The paper's convergence: the latest round's miss rate is within the margin of the rate
   before it. */
static bool round_converged(evidence_t* e, uint32_t round_len) {
  uint32_t round = e->round_hits + e->round_misses;
  uint32_t total = e->r.hits + e->r.misses;
  if (round < round_len) return false;
  uint32_t before = total - round;
  bool stable = false;
  if (before > 0 && total >= MIN_EVIDENCE) {
    int64_t rr = (int64_t)e->round_misses * 100 / round;
    int64_t rb = (int64_t)(e->r.misses - e->round_misses) * 100 / before;
    stable = rr - rb <= MARGIN_PCT && rb - rr <= MARGIN_PCT;
  }
  e->round_hits = e->round_misses = 0;
  return stable;
}

static bool converged(mchunk_t* c) {
  if (c->group >= 0) return round_converged(c->ev, 4);
  if (c->traps && c->done == c->nsamples) return c->ev->r.hits + c->ev->r.misses > 0;
  return round_converged(c->ev, c->nsamples / 4 > 4 ? c->nsamples / 4 : 4);
}

static void verdict_of(evidence_t* e, uint32_t pages, uint32_t min_evidence) {
  uint32_t total = e->r.hits + e->r.misses;
  e->r.polluter = e->r.misses * 2 > total;
  e->r.pages = pages;
  e->r.judged = total >= min_evidence && total > 0;
}

/* A group's gone members: an unused miss once the group streamed more than the L2 after their
   reference; dropped after GONE_MS (or `all`). */
static void settle_gone(int g, uint64_t now_ms, bool all) {
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state != CH_GONE || m->group != g) continue;
    if (m->pending && !_ca_monitor_judge(referenced_since(m, &m->s[0]), m->stride, M.l2)) {
      count(m, false); m->ev->r.unused++; M.unused++; m->pending = false;
    }
    if (all || now_ms - m->gone_ns / 1000000 > GONE_MS) { m->state = CH_FREE; M.groups[g].members--; }
  }
}

/* A group's verdict: its live members are no longer sampled (their pages opened). */
static void decide_group(int g, uint32_t min_evidence) {
  mgroup_t* gr = &M.groups[g];
  settle_gone(g, 0, true);
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state != CH_ACTIVE || m->group != g) continue;
    finish_page(m, &m->s[0]);
    m->state = CH_FREE;
    gr->members--;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  }
  verdict_of(&gr->ev, gr->ev.r.pages, min_evidence);
  gr->state = CH_VERDICT;
}

/* The verdict.  `freed`: the chunk is gone, so a page referenced once was never reused; a live
   chunk's pages may still be. */
static void decide(mchunk_t* c, uint32_t min_evidence, bool freed) {
  if (c->group >= 0) { decide_group(c->group, min_evidence); return; }
  for (uint32_t i = 0; i < c->nsamples; i++) {
    if (freed) count_unused(c, &c->s[i]);
    finish_page(c, &c->s[i]);
  }
  verdict_of(c->ev, c->nsamples, min_evidence);
  c->state = CH_VERDICT;
}

/* ---- waking the monitor thread: a futex through chromalloc's own stub (async-signal-safe) --
   Only for a verdict to deliver, and when the first chunk is sampled while the thread sleeps
   with no time limit.  Waking it cost the waking thread 11-29 us here (an interrupt to an idle
   vCPU), counted in the monitoring's cost. */
enum { SLEEP_NO = 0, SLEEP_TIMED, SLEEP_IDLE };
static void wake_monitor(void) {
  atomic_fetch_add_explicit(&M.wake_seq, 1, ca_release);
  if (atomic_load_explicit(&M.sleeping, ca_acquire) == SLEEP_NO) return;
  uint64_t t0 = _ca_clock_ns();
  _ca_syscall6(SYS_futex, (long)&M.wake_seq, FUTEX_WAKE_PRIVATE, 1, 0, 0, 0);
  uint64_t ns = _ca_clock_ns() - t0;
  atomic_fetch_add_explicit(&M.cost_ns, ns, ca_relaxed);
  atomic_fetch_add_explicit(&M.wake_ns, ns, ca_relaxed);
  atomic_fetch_add_explicit(&M.wakes, 1, ca_relaxed);
}

/* sleep until woken after `seq` was read, or for `ns` (0: no limit) */
static void sleep_monitor(int seq, uint64_t ns) {
  struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
  atomic_store_explicit(&M.sleeping, ns ? SLEEP_TIMED : SLEEP_IDLE, ca_release);
  _ca_syscall6(SYS_futex, (long)&M.wake_seq, FUTEX_WAIT_PRIVATE, seq, ns ? (long)&ts : 0, 0, 0);
  atomic_store_explicit(&M.sleeping, SLEEP_NO, ca_release);
}

/* a chunk is sampled now: the thread, asleep with no time limit, must look at it in time */
static void sampling_started(void) {
  if (atomic_load_explicit(&M.sleeping, ca_acquire) == SLEEP_IDLE) wake_monitor();
}

/* ---- the fault handler's client ----------------------------------------------------------- */
static void judge(mchunk_t* c, sample_t* s) {
  if (c->group >= 0 && !c->warm) return;
  uint64_t between = referenced_since(c, s);
  bool timed = atomic_load_explicit(&M.measured, ca_acquire) && M.threshold != 0;
  uint64_t ticks = timed ? chase(page_of(c, s), s->line) : 0;
  bool hit = _ca_monitor_judge(between, c->stride, M.l2);
  /* a group that turned a chunk of its context away since the first reference saw only part of
     what the context touched in between: a hit is no evidence then (a miss still is).  A group
     full in the middle of a pass judged its last members' reuse a hit. */
  if (hit && c->group >= 0 && atomic_load_explicit(&M.groups[c->group].refused_ns, ca_relaxed) > s->last_ref) return;
  count(c, hit);
  if (!hit) { c->ev->r.far++; M.far++; }
  if (hit && timed && ticks > M.threshold) { c->ev->r.interference++; M.interference++; }
}

/* Re-protect pages whose burst is older than `older_ns`, at most `max` of them (lock held);
   M.open_ns becomes the opening time of the oldest page left open (0: none). */
static int rearm_locked(uint64_t now, uint64_t older_ns, int max) {
  int n = 0;
  uint64_t oldest = 0;
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_ACTIVE || !c->traps) continue;
    for (uint32_t j = 0; j < c->nsamples; j++) {
      sample_t* s = &c->s[j];
      if (s->state != PG_OPEN) continue;
      if (n < max && s->t <= now && now - s->t >= older_ns) {
        s->state = PG_ARMED;
        s->t = now;
        protect(page_of(c, s), PROT_NONE);
        n++;
      } else if (oldest == 0 || s->t < oldest) {
        oldest = s->t;
      }
    }
  }
  atomic_store_explicit(&M.open_ns, oldest, ca_relaxed);
  M.rearms += (uint64_t)n;
  return n;
}

static bool on_fault(void* addr, int sig) {
  if (sig != SIGSEGV || !M.inited) return false;
  uint64_t t0 = _ca_clock_ns();
  uintptr_t a = (uintptr_t)addr;
  if (holding) {
    /* a handler of the program, run inside this thread's critical section, touched a sampled
       page: it is opened, with no bookkeeping (the lock is this thread's own) */
    if (!_ca_monitor_covers(a)) return false;
    protect((void*)(a & ~(uintptr_t)(CA_OS_PAGE - 1)), PROT_READ | PROT_WRITE);
    return true;
  }
  lock_m();
  mchunk_t* c = NULL;
  sample_t* s = sample_of(a, &c);
  if (s == NULL) { unlock_m(); return false; }
  bool wake = false;
  unsigned line = (unsigned)((a >> 6) & 63);
  switch (s->state) {
  case PG_ARMED_FIRST:
  case PG_ARMED:
    protect(page_of(c, s), PROT_READ | PROT_WRITE);
    if (s->state == PG_ARMED_FIRST) M.first_refs++;
    else judge(c, s);
    if (s->state == PG_ARMED && ++s->pairs >= PAIRS_PER_PAGE) { s->state = PG_DONE; c->done++; }
    else s->state = PG_OPEN;           /* re-protected by a later fault or allocator call (tick) */
    s->line = (uint8_t)line;
    s->t = s->last_ref = t0;
    if (atomic_load_explicit(&M.measured, ca_relaxed)) touch_lines(page_of(c, s), line);
    if (c->state == CH_ACTIVE && converged(c)) { decide(c, MIN_EVIDENCE / 2, false); wake = true; }
    break;
  default:
    /* released: the program protects it itself now (its own mprotect): not ours */
    if (s->released) { unlock_m(); return false; }
    /* open or done: another thread opened it meanwhile; it must be accessible */
    protect(page_of(c, s), PROT_READ | PROT_WRITE);
    if (s->late < 255) s->late++;
    break;
  }
  rearm_locked(t0, (uint64_t)BURST_US * 1000, REARM_PER_FAULT);
  M.fault_ns += _ca_clock_ns() - t0;
  atomic_fetch_add_explicit(&M.cost_ns, TRAP_NS, ca_relaxed);
  unlock_m();
  if (wake) wake_monitor();
  return true;
}

/* ---- the program's thread re-protects pages at its allocator calls ------------------------ */
/* Called by the policy's hooks (allocations of a page or more, sampled small ones, frees) while
   chunks are sampled: pages whose burst has passed are protected again here, on the program's
   own CPU, as a fault does.  Done by the monitor thread instead, each page would cost the
   program an interrupt (its TLB flushed from the other CPU), and waking that thread for every
   opened page cost the program more than the trap itself (see the header). */
void _ca_monitor_tick(void) {
  uint64_t since = atomic_load_explicit(&M.open_ns, ca_relaxed);
  if (since == 0) return;
  uint64_t now = _ca_clock_ns();
  if (now < since + (uint64_t)BURST_US * 1000 || !try_lock_m()) return;
  int n = rearm_locked(now, (uint64_t)BURST_US * 1000, REARM_PER_FAULT);
  unlock_m();
  atomic_fetch_add_explicit(&M.tick_rearms, (uint64_t)n, ca_relaxed);
}

/* ---- the monitor thread: re-protect pages after their burst, hand verdicts over ---------- */
static void deliver(void) {
  for (int i = 0; i < MAX_CHUNKS; i++) {
    lock_m();
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_VERDICT) { unlock_m(); continue; }
    void* p = c->p; size_t n = c->n; uint64_t cookie = c->cookie;
    ca_monitor_result_t r = c->ev->r;
    c->state = CH_FREE;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
    if (r.judged) M.verdicts++;
    unlock_m();
    if (r.judged && M.verdict != NULL) M.verdict(p, n, cookie, &r);
  }
  /* a group's end is always told (the policy waits for it to sample the context again) */
  for (int g = 0; g < MAX_GROUPS; g++) {
    lock_m();
    mgroup_t* gr = &M.groups[g];
    if (gr->state != CH_VERDICT) { unlock_m(); continue; }
    uint64_t cookie = gr->cookie;
    ca_monitor_result_t r = gr->ev.r;
    gr->state = CH_FREE;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
    if (r.judged) { M.verdicts++; M.group_verdicts++; }
    unlock_m();
    if (M.verdict != NULL) M.verdict(NULL, 0, cookie, &r);
  }
}

/* A group with nothing left to learn (no member page still sampled, no gone member waiting
   for its unused test while members may still join) and no new member for GROUP_IDLE_MS ends
   with what it has.  So does one that has judged no pair by the time GROUP_FRUITLESS of its
   warm members were freed: its context's chunks are used in one burst and freed before
   anything else of the context comes (pv neutral's scratch buffers: 64 members, every group of
   every run, judged nothing); the policy tries the context again later. */
static bool fruitless(const mgroup_t* gr) { return gr->gone_warm >= GROUP_FRUITLESS && gr->ev.r.hits + gr->ev.r.misses == 0; }
static bool group_full(const mgroup_t* gr) { return gr->warm >= GROUP_WARM || gr->ev.r.pages >= GROUP_LIMIT || fruitless(gr); }

static bool group_idle(int g, uint64_t now_ms) {
  if (fruitless(&M.groups[g])) return true;
  if (now_ms - M.groups[g].joined_ms < GROUP_IDLE_MS) return false;
  bool full = group_full(&M.groups[g]);
  for (int i = 0; i < MAX_CHUNKS; i++) {
    const mchunk_t* m = &M.chunks[i];
    if (m->group != g) continue;
    if ((m->state == CH_ACTIVE && m->done < m->nsamples) || (m->state == CH_GONE && m->pending && !full)) return false;
  }
  return true;
}

/* Pages whose burst window has passed LAZY_US ago (no fault re-protected them) are marked ARMED
   under the lock and protected after it
   (system calls under the lock would hold up every fault).  While such a batch is in flight
   (`rearming`), chunks are not stopped and pages not released (lock_settled): a late PROT_NONE
   must not land on a chunk already freed, whose memory may be reused or moved by mremap with
   the protection.  Faults meanwhile find their page ARMED and are judged.  A page armed for
   EXPIRE_MS without a reference is done: unused if it never had a pair. */
static bool rearm(void) {
  enum { BATCH = 64 };
  void* pages[BATCH];
  int n = 0;
  bool wake = false;
  uint64_t oldest = 0;
  lock_m();
  uint64_t now = _ca_clock_ns();             /* after the lock: no fault can date a page later */
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_ACTIVE) continue;
    for (uint32_t j = 0; j < c->nsamples; j++) {
      sample_t* s = &c->s[j];
      if ((s->state == PG_ARMED || s->state == PG_ARMED_FIRST) && now - s->t > (uint64_t)EXPIRE_MS * 1000000) {
        count_unused(c, s);
        finish_page(c, s);
        M.expired++;
        continue;
      }
      if (s->state != PG_OPEN) continue;
      if (now - s->t < (uint64_t)LAZY_US * 1000 || n == BATCH) { if (oldest == 0 || s->t < oldest) oldest = s->t; continue; }
      s->state = PG_ARMED;
      s->t = now;
      pages[n++] = page_of(c, s);
    }
    if (converged(c)) { decide(c, MIN_EVIDENCE / 2, false); wake = true; }
  }
  uint64_t now_ms = now / 1000000;
  for (int g = 0; g < MAX_GROUPS; g++) {
    if (M.groups[g].state != CH_ACTIVE) continue;
    settle_gone(g, now_ms, false);
    if (group_idle(g, now_ms)) { M.fruitless_groups += fruitless(&M.groups[g]); decide_group(g, MIN_EVIDENCE / 2); wake = true; }
  }
  atomic_store_explicit(&M.open_ns, oldest, ca_relaxed);
  M.rearms += (uint64_t)n;
  M.rearming = n > 0;
  unlock_m();
  bool open_left = oldest != 0;
  if (n == 0) return open_left || wake;
  for (int i = 0; i < n; i++) protect(pages[i], PROT_NONE);
  /* a page a fault handler opened between the unlock and its protection must not stay closed */
  lock_m();
  for (int i = 0; i < n; i++) {
    mchunk_t* c = NULL;
    sample_t* s = sample_of((uintptr_t)pages[i], &c);
    if (s == NULL || s->state != PG_ARMED || c->state != CH_ACTIVE) protect(pages[i], PROT_READ | PROT_WRITE);
  }
  M.rearming = false;
  unlock_m();
  return open_left || wake;
}

/* ---- the PMU method ----------------------------------------------------------------------- */
/* Samples of monitored chunks: a hit when served by the L1, a fill buffer or the L2. */
void _ca_monitor_feed(const ca_pmu_sample_t* s, size_t n) {
  lock_m();
  for (size_t i = 0; i < n; i++) {
    if (s[i].level == CA_PMU_UNKNOWN) { M.pmu_unknown++; continue; }
    for (int k = 0; k < MAX_CHUNKS; k++) {
      mchunk_t* c = &M.chunks[k];
      if (c->state != CH_ACTIVE || c->traps || s[i].addr < c->lo || s[i].addr >= c->hi) continue;
      bool hit = !_ca_pmu_is_miss(s[i].level);
      count(c, hit);
      if (hit) M.pmu_hits++; else { M.pmu_misses++; c->ev->r.far++; }
      if (converged(c)) decide(c, MIN_EVIDENCE / 2, false);
      break;
    }
  }
  unlock_m();
}

static void drain_rings(void) {
  ca_pmu_sample_t buf[256];
  int n = atomic_load_explicit(&M.nrings, ca_acquire);
  for (int i = 0; i < n; i++) {
    size_t got;
    while ((got = _ca_pmu_drain(&M.rings[i], buf, 256, &M.pmu_stats)) > 0) _ca_monitor_feed(buf, got);
  }
}

/* The calling thread samples its loads (once per thread, while there are rings left). */
static __thread bool has_ring __attribute__((tls_model("initial-exec")));
static void open_ring(void) {
  if (has_ring || M.fed) return;
  has_ring = true;
  int i = atomic_fetch_add_explicit(&M.nrings, 1, ca_acq_rel);
  if (i >= PMU_RINGS) { atomic_fetch_sub_explicit(&M.nrings, 1, ca_relaxed); return; }
  if (_ca_pmu_thread_open(&M.pmu, &M.rings[i], PMU_PERIOD) != 0) M.rings[i].fd = -1;
}

void _ca_monitor_use_samples(void) { M.use_pmu = M.fed = true; }

static bool async_mapped(void);

static void* thread_main(void* arg) {
  (void)arg;
  _ca_trap_quiet_thread();
  calibrate();
  for (;;) {
    int seq = atomic_load_explicit(&M.wake_seq, ca_acquire);
    if (M.use_pmu && !M.fed) {
      drain_rings();
      deliver();
      struct timespec ts = { 0, PMU_DRAIN_US * 1000 };
      if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0) nanosleep(&ts, NULL);
      else sleep_monitor(seq, 0);
      continue;
    }
    if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0) async_mapped();   /* opens them all */
    bool busy = rearm();
    deliver();
    if (busy) {
      struct timespec ts = { 0, LAZY_US * 1000 };
      nanosleep(&ts, NULL);
    } else {
      /* open pages the program's faults and allocator calls have not re-protected, armed
         pages that expire after EXPIRE_MS, idle groups: looked at every LOOK_MS */
      sleep_monitor(seq, atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0 ? (uint64_t)LOOK_MS * 1000000 : 0);
    }
  }
  return NULL;
}

static void ensure_thread(void) {
  pid_t me = getpid();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) == me) return;
  pid_t old = atomic_load_explicit(&M.thread_pid, ca_relaxed);
  if (old == -1 || !atomic_compare_exchange_strong(&M.thread_pid, &old, -1)) return;   /* another thread starts it */
  sigset_t all, prev;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &prev);
  pthread_t t;
  bool ok = pthread_create(&t, NULL, thread_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &prev, NULL);
  if (ok) pthread_detach(t);
  atomic_store_explicit(&M.thread_pid, ok ? me : 0, ca_release);
}

/* fork(): no thread may hold the lock across it; the child starts its own monitor thread on
   its next monitored chunk (thread_pid is the parent's) and keeps the parent's samples.  The
   parent's monitor thread may have been protecting a batch (`rearming`, outside the lock):
   it does not exist in the child, which must not wait for it. */
static void fork_prepare(void) { lock_m(); }
static void fork_parent(void) { unlock_m(); }
static void fork_child(void) {
  /* the rings are the parent's events: closed, not drained */
  int n = atomic_load_explicit(&M.nrings, ca_relaxed);
  for (int i = 0; i < n && i < PMU_RINGS; i++) _ca_pmu_thread_close(&M.rings[i]);
  atomic_store_explicit(&M.nrings, 0, ca_relaxed);
  has_ring = false;
  M.rearming = false;
  atomic_store_explicit(&M.sleeping, 0, ca_relaxed);
  unlock_m();
}

/* the monitor as a layer of the cache runtime: its lock across fork; its statistics are a part
   of NightWatch's */
const ca_layer_t _ca_layer_monitor = { .fork_prepare = fork_prepare, .fork_parent = fork_parent, .fork_child = fork_child };

/* ---- interface ---------------------------------------------------------------------------- */
static ca_verdict_fn init_verdict;
static void init_once(void) {
  M.verdict = init_verdict;
  M.l2 = 1 << 20;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) M.l2 = _ca_machine.levels[i].size;
  M.inited = true;
  if (!M.use_pmu) M.use_pmu = _ca_pmu_detect(&M.pmu);
  M.trap_ok = M.use_pmu || _ca_trap_register(on_fault);
}

void _ca_monitor_init(ca_verdict_fn verdict) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  init_verdict = verdict;
  pthread_once(&once, init_once);
}

_Atomic(int) _ca_sampled_chunks;             /* chunks in CH_ACTIVE or CH_VERDICT */
bool _ca_monitor_active(void) { return atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0; }
uint64_t _ca_monitor_cost_ns(void) { return atomic_load_explicit(&M.cost_ns, ca_relaxed); }

/* what sampling one page has cost on average; before 16 pages, a guess from this machine (a
   sampled page took 8-45 us: two or three mprotects and faults; with 6 us, churn's first group
   of 64 small chunks cost 1.1% of its run against a budget of 0.5%; with 20 us, mixed's first
   group, whose members cost 37-48 us each, 0.5-1.5% of its 0.3 s run; pv neutral's 24-37 us) */
#define PAGE_COST_GUESS_NS 40000
uint64_t _ca_monitor_page_cost_ns(void) {
  uint64_t n = atomic_load_explicit(&M.sampled, ca_relaxed);
  if (n < 16) return PAGE_COST_GUESS_NS;
  uint64_t avg = _ca_monitor_cost_ns() / n;
  return avg > 2 * TRAP_NS ? avg : 2 * TRAP_NS;
}

/* The TracerPid of a /proc/<pid>/status text (0: none, or not found). */
int _ca_monitor_tracer(const char* status, size_t n) {
  static const char key[] = "\nTracerPid:";
  for (size_t i = 0; i + sizeof key - 1 < n; i++) {
    if (memcmp(status + i, key, sizeof key - 1) != 0) continue;
    int pid = 0;
    for (i += sizeof key - 1; i < n && (status[i] == ' ' || status[i] == '\t'); i++) {}
    for (; i < n && status[i] >= '0' && status[i] <= '9'; i++) pid = pid * 10 + (status[i] - '0');
    return pid;
  }
  return 0;
}

/* A debugger or tracer sees every trap as a SIGSEGV, and gdb stops the program at each (a
   threaded program under gdb stopped in memcpy on a sampled small chunk).  While the process is
   traced no chunk starts being monitored by traps; looked at once per 100 ms at most, with
   chromalloc's own system calls (no allocation). */
static bool traced(void) {
  static _Atomic(uint64_t) next_ms;
  static _Atomic(bool) was;
  uint64_t now = _ca_clock_ms();
  if (now < atomic_load_explicit(&next_ms, ca_relaxed)) return atomic_load_explicit(&was, ca_relaxed);
  atomic_store_explicit(&next_ms, now + 100, ca_relaxed);
  char buf[1024];
  long fd = _ca_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/status", O_RDONLY | O_CLOEXEC, 0, 0, 0);
  long got = fd >= 0 ? _ca_syscall6(SYS_read, fd, (long)buf, sizeof buf, 0, 0, 0) : -1;
  if (fd >= 0) _ca_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
  bool t = got > 0 && _ca_monitor_tracer(buf, (size_t)got) != 0;
  if (t) atomic_fetch_add_explicit(&M.traced, 1, ca_relaxed);
  atomic_store_explicit(&was, t, ca_relaxed);
  return t;
}

/* An io_uring or Linux aio ring among the mappings of a /proc/<pid>/maps text: the kernel's
   names for them, "anon_inode:[io_uring]" and "/[aio] (deleted)". */
bool _ca_monitor_async_maps(const char* text, size_t n) {
  return memmem(text, n, "[io_uring]", 10) != NULL || memmem(text, n, "/[aio]", 6) != NULL;
}

/* io_uring or aio set up by raw system calls (liburing linked statically, or by hand), which no
   interposed call sees (syscalls.c): the kernel would then read and write sampled pages behind
   the program's back (a short read, an EFAULT).  Their rings are mapped, so /proc/self/maps
   shows them: looked for before a chunk starts being monitored and, while chunks are sampled,
   by the monitor thread; at most every 100 ms, and spaced so that the reads take at most 0.1%
   of the time (one took 0.2 ms in a process of 100 mappings here, 20 ms with 60,000), counted
   as monitoring's cost (its budget).  A set-up between two looks goes unseen until the next
   one: the window is narrowed, not closed. */
static bool async_mapped(void) {
  static _Atomic(uint64_t) next_ns;
  uint64_t t0 = _ca_clock_ns();
  if (_ca_async_io()) return true;
  if (t0 < atomic_load_explicit(&next_ns, ca_relaxed)) return false;
  atomic_store_explicit(&next_ns, t0 + 100000000, ca_relaxed);
  char buf[4096 + 16];
  size_t carry = 0;
  bool found = false;
  long fd = _ca_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0, 0, 0);
  for (long got; fd >= 0 && !found && (got = _ca_syscall6(SYS_read, fd, (long)(buf + carry), 4096, 0, 0, 0)) > 0;) {
    size_t n = carry + (size_t)got;
    found = _ca_monitor_async_maps(buf, n);
    carry = n < 16 ? n : 16;                      /* a name across two reads */
    memmove(buf, buf + n - carry, carry);
  }
  if (fd >= 0) _ca_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
  uint64_t took = _ca_clock_ns() - t0;
  atomic_fetch_add_explicit(&M.maps_looks, 1, ca_relaxed);
  atomic_fetch_add_explicit(&M.maps_ns, took, ca_relaxed);
  atomic_fetch_add_explicit(&M.cost_ns, took, ca_relaxed);
  if (took * 1000 > 100000000) atomic_store_explicit(&next_ns, t0 + took * 1000, ca_relaxed);
  if (found) {
    atomic_store_explicit(&M.async_by_maps, true, ca_relaxed);
    _ca_async_io_begins();
  }
  return found;
}

bool _ca_monitor_start(void* p, size_t n, uint64_t cookie) {
  if (!M.trap_ok || (!M.use_pmu && (_ca_async_io() || traced() || async_mapped()))) return false;
  uintptr_t lo = ((uintptr_t)p + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1);
  uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(CA_OS_PAGE - 1);
  if (hi <= lo) return false;
  ensure_thread();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) != getpid()) return false;
  size_t pages = (hi - lo) / CA_OS_PAGE;
  uint32_t k = _ca_monitor_samples(pages);
  uint64_t now = _ca_clock_ms(), now_ns = _ca_clock_ns();
  lock_m();
  mchunk_t* c = NULL;
  for (int i = 0; i < MAX_CHUNKS && c == NULL; i++) {
    mchunk_t* x = &M.chunks[i];
    if (x->state == CH_FREE) c = x;
  }
  if (c == NULL) { M.no_room++; unlock_m(); return false; }
  c->lo = lo; c->hi = hi; c->p = p; c->n = n; c->cookie = cookie;
  c->nsamples = k; c->done = 0;
  c->stride = (hi - lo) / k;
  memset(&c->own, 0, sizeof c->own);
  c->ev = &c->own;
  c->group = -1;
  c->traps = !M.use_pmu;
  atomic_fetch_add_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  if (!c->traps) {                           /* judged by samples: nothing to protect */
    c->nsamples = 0;
    c->state = CH_ACTIVE;
    unlock_m();
    open_ring();
    return true;
  }
  /* one page at a random place in each of k equal strides: sorted, distinct */
  uint64_t rng = (uint64_t)p ^ _ca_process_seed() ^ now;
  for (uint32_t i = 0; i < k; i++) {
    size_t a = pages * i / k, b = pages * (i + 1) / k;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    c->s[i] = (sample_t){ .index = (uint32_t)(a + (rng >> 33) % (b - a)), .state = PG_ARMED_FIRST, .t = now_ns };
    if (protect(page_of(c, &c->s[i]), PROT_NONE) != 0) { c->s[i].state = PG_DONE; c->done++; }
  }
  c->state = CH_ACTIVE;
  atomic_fetch_add_explicit(&M.sampled, k, ca_relaxed);
  unlock_m();
  sampling_started();
  return true;
}

static mchunk_t* free_slot(void) {
  for (int i = 0; i < MAX_CHUNKS; i++) if (M.chunks[i].state == CH_FREE) return &M.chunks[i];
  return NULL;
}

/* a full group's oldest gone member goes (settled first); false when it has none */
static bool drop_oldest_gone(int g) {
  mchunk_t* old = NULL;
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state == CH_GONE && m->group == g && (old == NULL || m->s[0].last_ref < old->s[0].last_ref)) old = m;
  }
  if (old == NULL) return false;
  settle_gone(g, _ca_clock_ms(), false);     /* its unused test first; may drop it (expired) */
  if (old->state == CH_GONE) { old->state = CH_FREE; M.groups[g].members--; }
  return true;
}

/* The least a group's member may stand for: its GROUP_MEMBERS then hold the L2's worth of cold
   members and 16 warm ones, whose pairs see more than the L2 referenced in between.  (With every
   32 KiB chunk a member, a 2 MiB L2 took 64 cold members, more than a group holds, and no group
   of a streamed context judged a pair.) */
size_t _ca_monitor_member_least(void) {
  size_t l2 = M.l2;
  for (uint32_t i = 0; l2 == 0 && i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) l2 = _ca_machine.levels[i].size;
  if (l2 == 0) l2 = (size_t)1 << 20;
  return (l2 + GROUP_MEMBERS - 16 - 1) / (GROUP_MEMBERS - 16);
}

/* A group of members standing for `stride` bytes each takes the L2's worth of them (not judged:
   they mark footprint) and GROUP_WARM more.  With a fixed total of 64, members of 16 KiB or less
   (every chunk a member, nightwatch_monitor=1) filled the group before any was warm: pv
   victims' and neutral's groups judged nothing in the run that monitors every chunk. */
uint32_t _ca_monitor_group_pages(size_t stride) {
  size_t l2 = M.l2 ? M.l2 : (size_t)1 << 20, cold = stride ? (l2 + stride - 1) / stride : GROUP_LIMIT;
  return cold + GROUP_WARM < GROUP_LIMIT ? (uint32_t)(cold + GROUP_WARM) : GROUP_LIMIT;
}

/* whether a member could join the group `cookie` now (or start it, when `start`); no lock:
   a hint that spares the caller a page when the answer is no */
bool _ca_monitor_member_room(uint64_t cookie, bool start) {
  for (int g = 0; g < MAX_GROUPS; g++) {
    if (M.groups[g].state != CH_ACTIVE || M.groups[g].cookie != cookie) continue;
    if (M.groups[g].members < GROUP_MEMBERS && !group_full(&M.groups[g])) return true;
    for (int i = 0; i < MAX_CHUNKS && !group_full(&M.groups[g]); i++)
      if (M.chunks[i].state == CH_GONE && M.chunks[i].group == g) return true;
    atomic_store_explicit(&M.groups[g].refused_ns, _ca_clock_ns(), ca_relaxed);
    return false;
  }
  return start;
}

/* A small chunk p on a page of its own joins the group `cookie` (started when there is none
   and `start`), standing for `stride` bytes of its context's small allocations. */
bool _ca_monitor_start_member(void* p, uint64_t cookie, size_t stride, bool start) {
  if (!M.trap_ok || M.use_pmu || _ca_async_io() || ((uintptr_t)p & (CA_OS_PAGE - 1)) != 0 || traced() || async_mapped()) return false;
  ensure_thread();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) != getpid()) return false;
  uint64_t now_ns = _ca_clock_ns();
  lock_m();
  int g = -1, free_g = -1;
  for (int i = 0; i < MAX_GROUPS && g < 0; i++) {
    if (M.groups[i].state == CH_ACTIVE && M.groups[i].cookie == cookie) g = i;
    else if (M.groups[i].state == CH_FREE && free_g < 0) free_g = i;
  }
  mchunk_t* c = free_slot();
  /* a full group, or no slot left (groups of several contexts hold more than MAX_CHUNKS, their
     gone members for up to GONE_MS: pv victims' four contexts turned 97% of their members
     away): its own oldest gone member makes room */
  if (g >= 0 && (M.groups[g].members >= GROUP_MEMBERS || c == NULL) && drop_oldest_gone(g) && c == NULL) c = free_slot();
  if (g < 0 && !start) { unlock_m(); return false; }   /* the group ended meanwhile */
  if (c == NULL || (g < 0 && free_g < 0) ||
      (g >= 0 && (M.groups[g].members >= GROUP_MEMBERS || group_full(&M.groups[g])))) {
    if (g >= 0) atomic_store_explicit(&M.groups[g].refused_ns, now_ns, ca_relaxed);
    M.no_room++;
    unlock_m();
    return false;
  }
  if (g < 0) {
    g = free_g;
    M.groups[g] = (mgroup_t){ .state = CH_ACTIVE, .cookie = cookie };
    atomic_fetch_add_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  }
  mgroup_t* gr = &M.groups[g];
  c->lo = (uintptr_t)p; c->hi = (uintptr_t)p + CA_OS_PAGE; c->p = p; c->n = CA_OS_PAGE; c->cookie = cookie;
  c->nsamples = 1; c->done = 0; c->stride = stride;
  c->group = g; c->ev = &gr->ev; c->pending = false; c->traps = true;
  c->warm = gr->bytes >= M.l2;
  gr->warm += c->warm;
  c->joined_ns = now_ns; c->gone_ns = 0;
  c->s[0] = (sample_t){ .index = 0, .state = PG_ARMED_FIRST, .t = now_ns };
  if (protect(p, PROT_NONE) != 0) { c->s[0].state = PG_DONE; c->done = 1; }
  c->state = CH_ACTIVE;
  gr->members++;
  gr->ev.r.pages++;
  gr->bytes += stride;
  gr->joined_ms = now_ns / 1000000;
  M.members++;
  atomic_fetch_add_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  atomic_fetch_add_explicit(&M.sampled, 1, ca_relaxed);
  unlock_m();
  sampling_started();
  return true;
}

/* A member is freed: its page opened; it stays in its group while its reference counts. */
static void member_gone(mchunk_t* c) {
  sample_t* s = &c->s[0];
  M.groups[c->group].gone_warm += c->warm;
  c->pending = c->warm && s->pairs == 0 && s->last_ref != 0 && !s->released;
  finish_page(c, s);
  atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  if (s->last_ref == 0) { c->state = CH_FREE; M.groups[c->group].members--; return; }
  c->state = CH_GONE;
  c->gone_ns = _ca_clock_ns();
}

/* Take the lock with no re-protection in flight (see rearm).  Not for the fault handler. */
static void lock_settled(void) {
  for (;;) {
    lock_m();
    if (!M.rearming) return;
    unlock_m();
    sched_yield();
  }
}

void _ca_monitor_stop(void* p) {
  if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0) return;
  lock_settled();
  mchunk_t* c = NULL;
  for (int i = 0; i < MAX_CHUNKS && c == NULL; i++)
    if ((M.chunks[i].state == CH_ACTIVE || M.chunks[i].state == CH_VERDICT) && M.chunks[i].p == p) c = &M.chunks[i];
  if (c == NULL) { unlock_m(); return; }
  if (c->group >= 0) { if (c->state == CH_ACTIVE) member_gone(c); }
  else if (c->state == CH_ACTIVE) decide(c, MIN_EVIDENCE / 2, true);
  unlock_m();
  deliver();
}

/* The sampled pages in [lo, hi) of chunks being sampled, opened.  `locked`: and done, with the
   lock held; else only opened, read without the lock, in a handler nested in this thread's
   critical section; `open` false: only say whether the range meets a sampled chunk. */
static bool release_pages(uintptr_t lo, uintptr_t hi, bool locked, bool open) {
  bool any = false;
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_ACTIVE || hi <= c->lo || lo >= c->hi) continue;
    any = true;
    uint32_t n = c->nsamples < MAX_SAMPLES ? c->nsamples : MAX_SAMPLES;
    for (uint32_t j = 0; open && j < n; j++) {
      uintptr_t pg = c->lo + (uintptr_t)c->s[j].index * CA_OS_PAGE;
      if (pg < lo || pg >= hi || pg >= c->hi || c->s[j].state == PG_DONE) continue;
      if (!locked) { protect((void*)pg, PROT_READ | PROT_WRITE); continue; }
      finish_page(c, &c->s[j]);
      c->s[j].released = true;
      M.released++;
    }
  }
  return any;
}

void _ca_monitor_release(const void* p, size_t len) {
  if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0 || len == 0) return;
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1), hi = (uintptr_t)p + len;
  if (hi < lo) hi = UINTPTR_MAX;
  /* nested in this thread's own critical section (a signal handler's read()): open the pages,
     never wait for the lock; else take it only when the buffer meets a sampled chunk (every
     read and write comes here) */
  if (holding) { release_pages(lo, hi, false, true); return; }
  if (!release_pages(lo, hi, false, false)) return;
  lock_settled();
  release_pages(lo, hi, true, true);
  unlock_m();
}

void _ca_monitor_stop_traps(void) {
  if (!M.inited || M.use_pmu || atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0 || holding) return;
  lock_settled();
  release_pages(0, UINTPTR_MAX, true, true);
  unlock_m();
}

bool _ca_monitor_covers(uintptr_t a) {
  if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0) return false;
  for (int i = 0; i < MAX_CHUNKS; i++) {
    const mchunk_t* c = &M.chunks[i];
    if (c->state == CH_ACTIVE && c->traps && a >= c->lo && a < c->hi) return true;
  }
  return false;
}

void _ca_monitor_stats_json(ca_buf_t* b) {
  ca_buf_str(b, "{\"method\":\"");
  ca_buf_str(b, !M.inited ? "unused" : M.use_pmu ? (M.fed ? "samples fed by a test" : M.pmu.name) : "page traps");
  ca_buf_str(b, "\",\"pmu\":\"");
  ca_buf_str(b, M.use_pmu ? M.pmu.name : M.inited ? M.pmu.reason : "not probed");
  ca_buf_str(b, "\",\"trap\":");           ca_buf_str(b, M.trap_ok ? "true" : "false");
  ca_buf_str(b, ",\"async_io\":");        ca_buf_str(b, _ca_async_io() ? "true" : "false");
  ca_buf_str(b, ",\"async_io_by_maps\":"); ca_buf_str(b, atomic_load_explicit(&M.async_by_maps, ca_relaxed) ? "true" : "false");
  ca_buf_field_u64(b, "maps_looks", atomic_load_explicit(&M.maps_looks, ca_relaxed));
  ca_buf_field_u64(b, "maps_ns", atomic_load_explicit(&M.maps_ns, ca_relaxed));
  ca_buf_field_u64(b, "l2_bytes", M.l2);
  ca_buf_field_u64(b, "burst_us", BURST_US);
  ca_buf_field_u64(b, "expire_ms", EXPIRE_MS);
  ca_buf_field_u64(b, "hit_ticks", M.hit_ticks);
  ca_buf_field_u64(b, "miss_ticks", M.miss_ticks);
  ca_buf_field_u64(b, "threshold", M.threshold);
  ca_buf_field_u64(b, "first_refs", M.first_refs);
  ca_buf_field_u64(b, "pairs", M.pairs);
  ca_buf_field_u64(b, "pair_hits", M.pair_hits);
  ca_buf_field_u64(b, "misses_far", M.far);
  ca_buf_field_u64(b, "misses_unused", M.unused);
  ca_buf_field_u64(b, "expired_pages", M.expired);
  ca_buf_field_u64(b, "interference", M.interference);
  ca_buf_field_u64(b, "rearms", M.rearms);
  ca_buf_field_u64(b, "rearms_by_allocator_calls", M.tick_rearms);
  ca_buf_field_u64(b, "groups_fruitless", M.fruitless_groups);
  ca_buf_field_u64(b, "monitor_wakes", M.wakes);
  ca_buf_field_u64(b, "monitor_wake_ns", M.wake_ns);
  ca_buf_field_u64(b, "released_pages", M.released);
  ca_buf_field_u64(b, "chunks_without_room", M.no_room);
  ca_buf_field_u64(b, "verdicts", M.verdicts);
  ca_buf_field_u64(b, "traced_looks", atomic_load_explicit(&M.traced, ca_relaxed));
  ca_buf_field_u64(b, "group_members", M.members);
  ca_buf_field_u64(b, "group_verdicts", M.group_verdicts);
  ca_buf_field_u64(b, "fault_handling_ns", M.fault_ns);
  ca_buf_field_u64(b, "pmu_rings", (uint64_t)atomic_load_explicit(&M.nrings, ca_relaxed));
  ca_buf_field_u64(b, "pmu_samples_hit", M.pmu_hits);
  ca_buf_field_u64(b, "pmu_samples_miss", M.pmu_misses);
  ca_buf_field_u64(b, "pmu_samples_unknown", M.pmu_unknown);
  ca_buf_field_u64(b, "pmu_samples_lost", M.pmu_stats.lost);
  ca_buf_field_u64(b, "cost_ns", _ca_monitor_cost_ns());
  ca_buf_str(b, "}");
}
