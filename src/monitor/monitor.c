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
   judged a polluter (18 of 18 pairs, pv frames).  Time is not used either: how
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

ca_monitor_state_t _ca_mon;

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

void* _ca_mon_page_of(const mchunk_t* c, const sample_t* s) { return (void*)(c->lo + (uintptr_t)s->index * CA_OS_PAGE); }

/* The sample of page a in a chunk being sampled or judged, or NULL: not ours.  A delivered
   (freed) chunk's pages were all opened when it was judged, so a fault there raced with its end (or the
   memory is someone else's now, protected by the program itself): the handler retries it once
   (trap.c) and then passes it on, never opens it (a freed chunk's page forced open broke a
   program's own mprotect on a new block at the same address). */
sample_t* _ca_mon_sample_of(uintptr_t a, mchunk_t** out) {
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
__thread bool _ca_mon_holding __attribute__((tls_model("initial-exec")));
void _ca_mon_lock_m(void) { _ca_mon_holding = true; _ca_lock(&M.lock); }
void _ca_mon_unlock_m(void) { _ca_unlock(&M.lock); _ca_mon_holding = false; }
bool _ca_mon_try_lock_m(void) {
  if (_ca_mon_holding) return false;
  _ca_mon_holding = true;
  if (_ca_try_lock(&M.lock)) return true;
  _ca_mon_holding = false;
  return false;
}

/* Around a live page's move (color/move.c): no sampled page is protected or opened meanwhile,
   nor a batch of the monitor thread's protections in flight (lock_settled): either made the page
   writable under the copy, and writes went to the old frame (test_move lost 1.4 million in 100,000
   moves).  false: this thread holds the lock already (a move from within the monitor's section). */
bool _ca_monitor_move_begin(void) {
  if (_ca_mon_holding) return false;
  _ca_mon_lock_settled();
  return true;
}

/* The page came back with its new frame's protection: a sampled page waiting for its next
   reference is protected again. */
void _ca_monitor_move_end(void* page, bool held) {
  if (!held) return;
  mchunk_t* c = NULL;
  sample_t* s = _ca_mon_sample_of((uintptr_t)page, &c);
  if (s != NULL && c->state == CH_ACTIVE && (s->state == PG_ARMED || s->state == PG_ARMED_FIRST)) _ca_mon_protect(page, PROT_NONE);
  _ca_mon_unlock_m();
}

/* the system call itself: the interposed mprotect (syscalls.c) would wait for our own lock */
int _ca_mon_protect(void* page, int prot) {
  uint64_t t0 = _ca_clock_ns();
  int r = (int)_ca_syscall6(SYS_mprotect, (long)page, CA_OS_PAGE, prot, 0, 0, 0);
  atomic_fetch_add_explicit(&M.cost_ns, _ca_clock_ns() - t0, ca_relaxed);
  return r;
}

void _ca_mon_finish_page(mchunk_t* c, sample_t* s) {
  if (s->state == PG_ARMED_FIRST || s->state == PG_ARMED) _ca_mon_protect(_ca_mon_page_of(c, s), PROT_READ | PROT_WRITE);
  if (s->state != PG_DONE) { s->state = PG_DONE; c->done++; }
}

void _ca_mon_count(mchunk_t* c, bool hit) {
  evidence_t* e = c->ev;
  if (hit) { e->r.hits++; e->round_hits++; M.pair_hits++; } else { e->r.misses++; e->round_misses++; }
  M.pairs++;
}

/* Bytes the chunk's other sampled pages stood for that were referenced after `s` was: of its
   group, the members, live or gone, that joined while c was live */
uint64_t _ca_mon_referenced_since(const mchunk_t* c, const sample_t* s) {
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
void _ca_mon_count_unused(mchunk_t* c, sample_t* s) {
  if (s->pairs != 0 || s->state != PG_ARMED || s->last_ref == 0 || (c->group >= 0 && !c->warm)) return;
  if (_ca_monitor_judge(_ca_mon_referenced_since(c, s), c->stride, M.l2)) return;
  _ca_mon_count(c, false); c->ev->r.unused++; M.unused++; s->pairs = 1;
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

bool _ca_mon_converged(mchunk_t* c) {
  if (c->group >= 0) return round_converged(c->ev, 4);
  if (c->traps && c->done == c->nsamples) return c->ev->r.hits + c->ev->r.misses > 0;
  return round_converged(c->ev, c->nsamples / 4 > 4 ? c->nsamples / 4 : 4);
}

void _ca_mon_verdict_of(evidence_t* e, uint32_t pages, uint32_t min_evidence) {
  uint32_t total = e->r.hits + e->r.misses;
  e->r.polluter = e->r.misses * 2 > total;
  e->r.pages = pages;
  e->r.judged = total >= min_evidence && total > 0;
}


/* The verdict.  `freed`: the chunk is gone, so a page referenced once was never reused; a live
   chunk's pages may still be. */
void _ca_mon_decide(mchunk_t* c, uint32_t min_evidence, bool freed) {
  if (c->group >= 0) { _ca_mon_decide_group(c->group, min_evidence); return; }
  for (uint32_t i = 0; i < c->nsamples; i++) {
    if (freed) _ca_mon_count_unused(c, &c->s[i]);
    _ca_mon_finish_page(c, &c->s[i]);
  }
  _ca_mon_verdict_of(c->ev, c->nsamples, min_evidence);
  c->state = CH_VERDICT;
}


/* ---- interface ---------------------------------------------------------------------------- */
static ca_verdict_fn init_verdict;
static void init_once(void) {
  M.verdict = init_verdict;
  M.l2 = 1 << 20;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) M.l2 = _ca_machine.levels[i].size;
  M.inited = true;
  if (!M.use_pmu) M.use_pmu = _ca_pmu_detect(&M.pmu);
  M.trap_ok = M.use_pmu || _ca_trap_register(_ca_mon_on_fault);
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
bool _ca_mon_traced(void) {
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
bool _ca_mon_async_mapped(void) {
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
  if (!M.trap_ok || (!M.use_pmu && (_ca_async_io() || _ca_mon_traced() || _ca_mon_async_mapped()))) return false;
  uintptr_t lo = ((uintptr_t)p + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1);
  uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(CA_OS_PAGE - 1);
  if (hi <= lo) return false;
  _ca_mon_ensure_thread();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) != getpid()) return false;
  size_t pages = (hi - lo) / CA_OS_PAGE;
  uint32_t k = _ca_monitor_samples(pages);
  uint64_t now = _ca_clock_ms(), now_ns = _ca_clock_ns();
  _ca_mon_lock_m();
  mchunk_t* c = NULL;
  for (int i = 0; i < MAX_CHUNKS && c == NULL; i++) {
    mchunk_t* x = &M.chunks[i];
    if (x->state == CH_FREE) c = x;
  }
  if (c == NULL) { M.no_room++; _ca_mon_unlock_m(); return false; }
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
    _ca_mon_unlock_m();
    _ca_mon_open_ring();
    return true;
  }
  /* one page at a random place in each of k equal strides: sorted, distinct */
  uint64_t rng = (uint64_t)p ^ _ca_process_seed() ^ now;
  for (uint32_t i = 0; i < k; i++) {
    size_t a = pages * i / k, b = pages * (i + 1) / k;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    c->s[i] = (sample_t){ .index = (uint32_t)(a + (rng >> 33) % (b - a)), .state = PG_ARMED_FIRST, .t = now_ns };
    if (_ca_mon_protect(_ca_mon_page_of(c, &c->s[i]), PROT_NONE) != 0) { c->s[i].state = PG_DONE; c->done++; }
  }
  c->state = CH_ACTIVE;
  atomic_fetch_add_explicit(&M.sampled, k, ca_relaxed);
  _ca_mon_unlock_m();
  _ca_mon_sampling_started();
  return true;
}


/* Take the lock with no re-protection in flight (see rearm).  Not for the fault handler. */
void _ca_mon_lock_settled(void) {
  for (;;) {
    _ca_mon_lock_m();
    if (!M.rearming) return;
    _ca_mon_unlock_m();
    sched_yield();
  }
}

void _ca_monitor_stop(void* p) {
  if (atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0) return;
  _ca_mon_lock_settled();
  mchunk_t* c = NULL;
  for (int i = 0; i < MAX_CHUNKS && c == NULL; i++)
    if ((M.chunks[i].state == CH_ACTIVE || M.chunks[i].state == CH_VERDICT) && M.chunks[i].p == p) c = &M.chunks[i];
  if (c == NULL) { _ca_mon_unlock_m(); return; }
  if (c->group >= 0) { if (c->state == CH_ACTIVE) _ca_mon_member_gone(c); }
  else if (c->state == CH_ACTIVE) _ca_mon_decide(c, MIN_EVIDENCE / 2, true);
  _ca_mon_unlock_m();
  _ca_mon_deliver();
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
      if (!locked) { _ca_mon_protect((void*)pg, PROT_READ | PROT_WRITE); continue; }
      _ca_mon_finish_page(c, &c->s[j]);
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
  if (_ca_mon_holding) { release_pages(lo, hi, false, true); return; }
  if (!release_pages(lo, hi, false, false)) return;
  _ca_mon_lock_settled();
  release_pages(lo, hi, true, true);
  _ca_mon_unlock_m();
}

void _ca_monitor_stop_traps(void) {
  if (!M.inited || M.use_pmu || atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0 || _ca_mon_holding) return;
  _ca_mon_lock_settled();
  release_pages(0, UINTPTR_MAX, true, true);
  _ca_mon_unlock_m();
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
  ca_buf_field_u64(b, "l3_low_ticks", M.l3_low_ticks);
  ca_buf_field_u64(b, "mem_ticks", M.mem_ticks);
  ca_buf_field_u64(b, "mem_threshold", M.mem_threshold);
  ca_buf_field_u64(b, "reload_measures", M.measures);
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

