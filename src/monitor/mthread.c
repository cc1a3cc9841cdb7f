/* Faults on sampled pages and the monitor thread: references judged in the fault handler,
   pages re-protected after their burst (by the program's next fault or allocator call, else by
   the monitor thread), verdicts handed over, the PMU method's rings, fork. */
#define _GNU_SOURCE
#include "mon.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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
void _ca_mon_sampling_started(void) {
  if (atomic_load_explicit(&M.sleeping, ca_acquire) == SLEEP_IDLE) wake_monitor();
}

/* ---- the fault handler's client ----------------------------------------------------------- */
static void judge(mchunk_t* c, sample_t* s) {
  if (c->group >= 0 && !c->warm) return;
  uint64_t between = _ca_mon_referenced_since(c, s);
  bool timed = atomic_load_explicit(&M.measured, ca_acquire) && M.threshold != 0;
  uint64_t ticks = timed ? _ca_mon_chase(_ca_mon_page_of(c, s), s->line) : 0;
  bool hit = _ca_monitor_judge(between, c->stride, M.l2);
  /* a group that turned a chunk of its context away since the first reference saw only part of
     what the context touched in between: a hit is no evidence then (a miss still is).  A group
     full in the middle of a pass judged its last members' reuse a hit. */
  if (hit && c->group >= 0 && atomic_load_explicit(&M.groups[c->group].refused_ns, ca_relaxed) > s->last_ref) return;
  _ca_mon_count(c, hit);
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
        _ca_mon_protect(_ca_mon_page_of(c, s), PROT_NONE);
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

bool _ca_mon_on_fault(void* addr, int sig) {
  if (sig != SIGSEGV || !M.inited) return false;
  uint64_t t0 = _ca_clock_ns();
  uintptr_t a = (uintptr_t)addr;
  if (_ca_mon_holding) {
    /* a handler of the program, run inside this thread's critical section, touched a sampled
       page: it is opened, with no bookkeeping (the lock is this thread's own) */
    if (!_ca_monitor_covers(a)) return false;
    _ca_mon_protect((void*)(a & ~(uintptr_t)(CA_OS_PAGE - 1)), PROT_READ | PROT_WRITE);
    return true;
  }
  _ca_mon_lock_m();
  mchunk_t* c = NULL;
  sample_t* s = _ca_mon_sample_of(a, &c);
  if (s == NULL) { _ca_mon_unlock_m(); return false; }
  bool wake = false;
  unsigned line = (unsigned)((a >> 6) & 63);
  switch (s->state) {
  case PG_ARMED_FIRST:
  case PG_ARMED:
    _ca_mon_protect(_ca_mon_page_of(c, s), PROT_READ | PROT_WRITE);
    if (s->state == PG_ARMED_FIRST) M.first_refs++;
    else judge(c, s);
    if (s->state == PG_ARMED && ++s->pairs >= PAIRS_PER_PAGE) { s->state = PG_DONE; c->done++; }
    else s->state = PG_OPEN;           /* re-protected by a later fault or allocator call (tick) */
    s->line = (uint8_t)line;
    s->t = s->last_ref = t0;
    if (atomic_load_explicit(&M.measured, ca_relaxed)) _ca_mon_touch_lines(_ca_mon_page_of(c, s), line);
    if (c->state == CH_ACTIVE && _ca_mon_converged(c)) { _ca_mon_decide(c, MIN_EVIDENCE / 2, false); wake = true; }
    break;
  default:
    /* released: the program protects it itself now (its own mprotect): not ours */
    if (s->released) { _ca_mon_unlock_m(); return false; }
    /* open or done: another thread opened it meanwhile; it must be accessible */
    _ca_mon_protect(_ca_mon_page_of(c, s), PROT_READ | PROT_WRITE);
    if (s->late < 255) s->late++;
    break;
  }
  rearm_locked(t0, (uint64_t)BURST_US * 1000, REARM_PER_FAULT);
  M.fault_ns += _ca_clock_ns() - t0;
  atomic_fetch_add_explicit(&M.cost_ns, TRAP_NS, ca_relaxed);
  _ca_mon_unlock_m();
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
  if (now < since + (uint64_t)BURST_US * 1000 || !_ca_mon_try_lock_m()) return;
  int n = rearm_locked(now, (uint64_t)BURST_US * 1000, REARM_PER_FAULT);
  _ca_mon_unlock_m();
  atomic_fetch_add_explicit(&M.tick_rearms, (uint64_t)n, ca_relaxed);
}

/* ---- the monitor thread: re-protect pages after their burst, hand verdicts over ---------- */
void _ca_mon_deliver(void) {
  for (int i = 0; i < MAX_CHUNKS; i++) {
    _ca_mon_lock_m();
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_VERDICT) { _ca_mon_unlock_m(); continue; }
    void* p = c->p; size_t n = c->n; uint64_t cookie = c->cookie;
    ca_monitor_result_t r = c->ev->r;
    c->state = CH_FREE;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
    if (r.judged) M.verdicts++;
    _ca_mon_unlock_m();
    if (r.judged && M.verdict != NULL) M.verdict(p, n, cookie, &r);
  }
  /* a group's end is always told (the policy waits for it to sample the context again) */
  for (int g = 0; g < MAX_GROUPS; g++) {
    _ca_mon_lock_m();
    mgroup_t* gr = &M.groups[g];
    if (gr->state != CH_VERDICT) { _ca_mon_unlock_m(); continue; }
    uint64_t cookie = gr->cookie;
    ca_monitor_result_t r = gr->ev.r;
    gr->state = CH_FREE;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
    if (r.judged) { M.verdicts++; M.group_verdicts++; }
    _ca_mon_unlock_m();
    if (M.verdict != NULL) M.verdict(NULL, 0, cookie, &r);
  }
}

/* Pages whose burst window has passed LAZY_US ago (no fault re-protected them) are marked ARMED
   under the lock and protected after it
   (system calls under the lock would hold up every fault).  While such a batch is in flight
   (`rearming`), chunks are not stopped and pages not released (lock_settled): a late PROT_NONE
   must not land on a chunk already freed, whose memory may be reused or moved by mremap with
   the protection.  Faults meanwhile find their page ARMED and are judged.  A page armed for
   EXPIRE_MS without a reference is done: unused if it never had a pair. */
bool _ca_mon_rearm(void) {
  enum { BATCH = 64 };
  void* pages[BATCH];
  int n = 0;
  bool wake = false;
  uint64_t oldest = 0;
  _ca_mon_lock_m();
  uint64_t now = _ca_clock_ns();             /* after the lock: no fault can date a page later */
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* c = &M.chunks[i];
    if (c->state != CH_ACTIVE) continue;
    for (uint32_t j = 0; j < c->nsamples; j++) {
      sample_t* s = &c->s[j];
      if ((s->state == PG_ARMED || s->state == PG_ARMED_FIRST) && now - s->t > (uint64_t)EXPIRE_MS * 1000000) {
        _ca_mon_count_unused(c, s);
        _ca_mon_finish_page(c, s);
        M.expired++;
        continue;
      }
      if (s->state != PG_OPEN) continue;
      if (now - s->t < (uint64_t)LAZY_US * 1000 || n == BATCH) { if (oldest == 0 || s->t < oldest) oldest = s->t; continue; }
      s->state = PG_ARMED;
      s->t = now;
      pages[n++] = _ca_mon_page_of(c, s);
    }
    if (_ca_mon_converged(c)) { _ca_mon_decide(c, MIN_EVIDENCE / 2, false); wake = true; }
  }
  uint64_t now_ms = now / 1000000;
  for (int g = 0; g < MAX_GROUPS; g++) {
    if (M.groups[g].state != CH_ACTIVE) continue;
    _ca_mon_settle_gone(g, now_ms, false);
    if (_ca_mon_group_idle(g, now_ms)) { M.fruitless_groups += _ca_mon_fruitless(&M.groups[g]); _ca_mon_decide_group(g, MIN_EVIDENCE / 2); wake = true; }
  }
  atomic_store_explicit(&M.open_ns, oldest, ca_relaxed);
  M.rearms += (uint64_t)n;
  M.rearming = n > 0;
  _ca_mon_unlock_m();
  bool open_left = oldest != 0;
  if (n == 0) return open_left || wake;
  for (int i = 0; i < n; i++) _ca_mon_protect(pages[i], PROT_NONE);
  /* a page a fault handler opened between the unlock and its protection must not stay closed */
  _ca_mon_lock_m();
  for (int i = 0; i < n; i++) {
    mchunk_t* c = NULL;
    sample_t* s = _ca_mon_sample_of((uintptr_t)pages[i], &c);
    if (s == NULL || s->state != PG_ARMED || c->state != CH_ACTIVE) _ca_mon_protect(pages[i], PROT_READ | PROT_WRITE);
  }
  M.rearming = false;
  _ca_mon_unlock_m();
  return open_left || wake;
}

/* ---- the PMU method ----------------------------------------------------------------------- */
/* Samples of monitored chunks: a hit when served by the L1, a fill buffer or the L2. */
void _ca_monitor_feed(const ca_pmu_sample_t* s, size_t n) {
  _ca_mon_lock_m();
  for (size_t i = 0; i < n; i++) {
    if (s[i].level == CA_PMU_UNKNOWN) { M.pmu_unknown++; continue; }
    for (int k = 0; k < MAX_CHUNKS; k++) {
      mchunk_t* c = &M.chunks[k];
      if (c->state != CH_ACTIVE || c->traps || s[i].addr < c->lo || s[i].addr >= c->hi) continue;
      bool hit = !_ca_pmu_is_miss(s[i].level);
      _ca_mon_count(c, hit);
      if (hit) M.pmu_hits++; else { M.pmu_misses++; c->ev->r.far++; }
      if (_ca_mon_converged(c)) _ca_mon_decide(c, MIN_EVIDENCE / 2, false);
      break;
    }
  }
  _ca_mon_unlock_m();
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
void _ca_mon_open_ring(void) {
  if (has_ring || M.fed) return;
  has_ring = true;
  int i = atomic_fetch_add_explicit(&M.nrings, 1, ca_acq_rel);
  if (i >= PMU_RINGS) { atomic_fetch_sub_explicit(&M.nrings, 1, ca_relaxed); return; }
  if (_ca_pmu_thread_open(&M.pmu, &M.rings[i], PMU_PERIOD) != 0) M.rings[i].fd = -1;
}

#ifdef CA_TEST_HOOKS
void _ca_monitor_use_samples(void) { M.use_pmu = M.fed = true; }
#endif

bool _ca_mon_async_mapped(void);

static void* thread_main(void* arg) {
  (void)arg;
  _ca_trap_quiet_thread();
  _ca_mon_calibrate();
  for (;;) {
    int seq = atomic_load_explicit(&M.wake_seq, ca_acquire);
    if (M.use_pmu && !M.fed) {
      drain_rings();
      _ca_mon_deliver();
      struct timespec ts = { 0, PMU_DRAIN_US * 1000 };
      if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0) nanosleep(&ts, NULL);
      else sleep_monitor(seq, 0);
      continue;
    }
    if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0) _ca_mon_async_mapped();   /* opens them all */
    bool busy = _ca_mon_rearm();
    _ca_mon_deliver();
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

void _ca_mon_ensure_thread(void) {
  pid_t me = getpid();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) == me) return;
  pid_t old = atomic_load_explicit(&M.thread_pid, ca_relaxed);
  if (old == -1 || !atomic_compare_exchange_strong(&M.thread_pid, &old, -1)) return;   /* another thread starts it */
  uint64_t mask;
  _ca_os_signals_block(&mask);
  pthread_t t;
  bool ok = pthread_create(&t, NULL, thread_main, NULL) == 0;
  _ca_os_signals_restore(mask);
  if (ok) pthread_detach(t);
  atomic_store_explicit(&M.thread_pid, ok ? me : 0, ca_release);
}

/* fork(): no thread may hold the lock across it; the child starts its own monitor thread on
   its next monitored chunk (thread_pid is the parent's) and keeps the parent's samples.  The
   parent's monitor thread may have been protecting a batch (`rearming`, outside the lock):
   it does not exist in the child, which must not wait for it. */
static void fork_prepare(void) { _ca_mon_lock_m(); }
static void fork_parent(void) { _ca_mon_unlock_m(); }
static void fork_child(void) {
  /* the rings are the parent's events: closed, not drained */
  int n = atomic_load_explicit(&M.nrings, ca_relaxed);
  for (int i = 0; i < n && i < PMU_RINGS; i++) _ca_pmu_thread_close(&M.rings[i]);
  atomic_store_explicit(&M.nrings, 0, ca_relaxed);
  has_ring = false;
  M.rearming = false;
  atomic_store_explicit(&M.sleeping, 0, ca_relaxed);
  _ca_mon_unlock_m();
}

/* the monitor as a layer of the cache runtime: its lock across fork; its statistics are a part
   of NightWatch's */
const ca_layer_t _ca_layer_monitor = { .fork_prepare = fork_prepare, .fork_parent = fork_parent, .fork_child = fork_child };

