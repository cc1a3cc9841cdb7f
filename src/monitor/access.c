/* Software access bits: which pages of a range the program touched during a short window.

   The paper's hot-page tracker (002) reads the page table's accessed bits.  User space has no
   such bit on stock Linux (page_idle needs root and is absent here; soft-dirty sees writes
   only, and is compiled out of the guests measured), so a read is seen the one way it can be:
   the range is made inaccessible for the window, and the first touch of each page faults into
   our handler, which sets the page's bit and opens the page again.

     arm      slot[i] = { base, pages, bits }  published, then mprotect(range, PROT_NONE)
     fault    the page's bit set, mprotect(page, RW): one fault per page touched, then none
     disarm   mprotect(range, RW) (the mappings merge again), the slot freed

   A window therefore costs a fault (a few microseconds) per page touched in it and two system
   calls per range, nothing per untouched page: the opposite of a page-table scan, whose cost is
   per entry.  The caller chooses the ranges to fit its budget (policy/hot.c).  A range armed for
   `writes` is write-protected instead (written.c): no trap, written pages only, read at disarm;
   nothing below (release, quiet) concerns it.

   The kernel touching an armed page for a system call would fail with EFAULT, so the monitor's
   wrappers (wrap.h) tell the client of every call's buffers, and of the program's own mprotect,
   munmap and madvise, before the real call (_ca_access_release): it never arms that memory
   again (a call may block longer than any window; re-arming would undo the program's own
   protection), and armed ranges meeting it open at once, the buffer's pages counted as touched.  Pages the locality monitor samples
   are never armed: two clients changing one page's protection would lose each other's traps.

   Quiet: a thread touching an armed page with SIGSEGV blocked is killed by the kernel, not
   trapped.  The program's own masks never block it (trap.c), but the C library blocks every
   signal itself where the program cannot see: a thread's last steps after its key destructors
   (freeing cached threads' TLS vectors, small blocks of ours), posix_spawn's and vfork's child
   (the program's argument and file-action arrays).  So every armed range opens, and none is
   armed, from a thread's exit until the thread is gone, during posix_spawn, system and popen,
   and for 100 ms after vfork (the child has exec'd by then or broke vfork's rules).

   Moves: a page the colour layer moves (color/move.c) must keep one protection from its copy
   to its new frame, or a write lands in the old frame and is lost (a window's arming made the
   mover's own copy fault and wait for itself; a trap's opening let a writer in under it).  So
   a live move holds A.lock throughout (no arming, opening or release meanwhile), first opening
   the page if a range has it armed (counted as touched), and waits for traps under way; a
   trap on the moving page waits for the move to end and is retried.

   Signal handlers: a program's handler may make a system call (waitpid in bash's SIGCHLD
   handler, a read) while its thread is inside A.lock here; the release then opens the pages
   itself, without the lock, as the fault handler does (the slots cannot change meanwhile: their
   lock is this suspended thread's). */
#define _GNU_SOURCE
#include "monitor.h"
#include "trap.h"
#include "../core/hooks.h"
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define SLOTS    64                  /* ranges armed at once */
#define LEAVING  8                   /* exiting threads waited for (more: 1 s of quiet) */
#define GONE_NS  1000000000ull       /* an exiting thread taken as gone after this long anyway */
#define OPENED   16                  /* ranges opened lately: a late trap there is retried */
#define LATE_NS  50000000ull

typedef struct slot_s {
  _Atomic(uintptr_t) base;           /* 0: free */
  uintptr_t          end;
  bool               writes;         /* armed by write protection (written.c), not a trap */
  _Atomic(uint64_t)* bits;           /* one per page, set by the fault */
  uint64_t           armed_ns, open_ns;   /* when armed; how long it stayed armed (once opened) */
  uint64_t           fault_ns;       /* A.fault_ns then: the traps' own time is no wait */
  _Atomic(uint64_t)  waited_ns;      /* from arming to each trap, summed */
} slot_t;

static struct {
  ca_lock_t        lock;             /* arming, disarming, release (never the fault handler) */
  slot_t           slot[SLOTS];
  _Atomic(int)     armed;            /* slots in use by traps */
  _Atomic(uintptr_t) moving;         /* the page a live move is copying (A.lock held) */
  _Atomic(int)     in_fault;         /* traps under way */
  _Atomic(uintptr_t) opened_lo[OPENED], opened_hi[OPENED];   /* ranges opened lately, */
  _Atomic(uint64_t) opened_ns[OPENED];                      /* ... and when (A.lock) */
  unsigned         opened_next;
  void           (*changed)(uintptr_t lo, uintptr_t hi);   /* the client: never arm these again */
  void           (*touched[2])(uintptr_t addr);           /* ... and which thread touched what */
  bool             trap_ok;
  uint32_t         gen[SLOTS];       /* arms of the slot: an id is slot + SLOTS x gen */
  uint32_t         cut[SLOTS];       /* ... the last one opened early by quiet */
  _Atomic(uint64_t) faults, fault_ns, released, written;
  _Atomic(int)     holds;            /* quiet: calls under way */
  _Atomic(uint64_t) until;           /* ... until then */
  _Atomic(int)     leaving[LEAVING]; /* ... until these threads are gone */
  _Atomic(uint64_t) leaving_ns[LEAVING];
  uint64_t         quiet_refused, quiet_cut;
} A;

static bool quiet(void);

/* Set while this thread takes or holds A.lock: a release nested in that section (a signal
   handler's system call) must not wait for the lock. */
static __thread bool holding __attribute__((tls_model("initial-exec")));
#ifdef CA_TEST_HOOKS
void (*_ca_test_locked)(char which);
#endif
static void lock_a(void) { holding = true; _ca_lock(&A.lock); CA_TEST_LOCKED('A'); }
static void unlock_a(void) { _ca_unlock(&A.lock); holding = false; }

bool _ca_access_armed(void) { return atomic_load_explicit(&A.armed, ca_relaxed) != 0; }

static int prot(uintptr_t p, size_t n, int pr) {
  return (int)_ca_syscall6(SYS_mprotect, (long)p, (long)n, pr, 0, 0, 0);   /* not the interposed one */
}

static slot_t* find(uintptr_t a) {
  for (int i = 0; i < SLOTS; i++) {
    uintptr_t b = atomic_load_explicit(&A.slot[i].base, ca_acquire);
    if (b != 0 && a >= b && a < A.slot[i].end && !A.slot[i].writes) return &A.slot[i];
  }
  return NULL;
}

bool _ca_access_covers(uintptr_t a) { return _ca_access_armed() && find(a) != NULL; }

static void touch(slot_t* s, size_t i) { atomic_fetch_or_explicit(&s->bits[i / 64], (uint64_t)1 << (i % 64), ca_relaxed); }

static bool trap(uintptr_t a);

/* A thread that faulted on an armed page may reach the handler after its range was opened, and
   the range may be armed again by its next fault there: unclaimed twice, that fault would go to
   the program's handler (trap.c), by default its death.  Pages the monitor kept are its own. */
static bool opened_lately(uintptr_t a) {
  if (_ca_monitor_active() && _ca_monitor_covers(a & ~(uintptr_t)(CA_OS_PAGE - 1))) return false;
  uint64_t now = _ca_clock_ns();
  for (int i = 0; i < OPENED; i++)
    if (a >= atomic_load_explicit(&A.opened_lo[i], ca_relaxed) && a < atomic_load_explicit(&A.opened_hi[i], ca_relaxed) &&
        now - atomic_load_explicit(&A.opened_ns[i], ca_relaxed) < LATE_NS)
      return true;
  return false;
}

static bool on_fault(void* addr, int sig) {
  (void)sig;
  if (!_ca_access_armed()) return opened_lately((uintptr_t)addr);
  atomic_fetch_add(&A.in_fault, 1);                    /* before reading A.moving (move_begin) */
  bool ours = trap((uintptr_t)addr);
  atomic_fetch_sub(&A.in_fault, 1);
  return ours;
}

static bool trap(uintptr_t a) {
  uintptr_t page = a & ~(uintptr_t)(CA_OS_PAGE - 1);
  slot_t* s = find(a);
  if (s == NULL) return opened_lately(a);
  if (atomic_load(&A.moving) == page) {                /* the page opens with its new frame */
    atomic_fetch_sub(&A.in_fault, 1);
    while (atomic_load(&A.moving) == page) sched_yield();
    atomic_fetch_add(&A.in_fault, 1);
    return true;
  }
  uint64_t t0 = _ca_clock_ns();
  uintptr_t b = atomic_load_explicit(&s->base, ca_acquire);
  if (b == 0 || a < b || a >= s->end) return true;             /* disarmed meanwhile: retry */
  size_t i = (a - b) / CA_OS_PAGE;
  touch(s, i);
  uint64_t in_traps = atomic_load_explicit(&A.fault_ns, ca_relaxed) - s->fault_ns, waited = t0 - s->armed_ns;
  atomic_fetch_add_explicit(&s->waited_ns, waited > in_traps ? waited - in_traps : 0, ca_relaxed);
  prot(page, CA_OS_PAGE, PROT_READ | PROT_WRITE);
  for (int k = 0; k < 2; k++) if (A.touched[k] != NULL) A.touched[k](a);   /* open: a reload may time it */
  atomic_fetch_add_explicit(&A.faults, 1, ca_relaxed);
  atomic_fetch_add_explicit(&A.fault_ns, _ca_clock_ns() - t0, ca_relaxed);
  return true;
}

int _ca_access_arm(void* base, size_t pages, uint64_t* bits, bool writes) {
  uintptr_t lo = (uintptr_t)base, hi = lo + pages * CA_OS_PAGE;
  if (pages == 0 || (lo & (CA_OS_PAGE - 1)) != 0) return -1;
  if (writes && !_ca_written_ok()) return -1;
  if (!writes && !A.trap_ok && !(A.trap_ok = _ca_trap_register(on_fault))) return -1;
  for (uintptr_t p = lo; !writes && _ca_monitor_active() && p < hi; p += CA_OS_PAGE)
    if (_ca_monitor_covers(p)) return -1;
  lock_a();
  int id = -1;
  if (!writes && quiet()) { A.quiet_refused++; unlock_a(); return -1; }
  for (int i = 0; i < SLOTS && id < 0; i++)
    if (atomic_load_explicit(&A.slot[i].base, ca_relaxed) == 0) id = i;
  if (id >= 0) {
    memset(bits, 0, (pages + 63) / 64 * sizeof(uint64_t));
    A.slot[id].end = hi;
    A.slot[id].bits = (_Atomic(uint64_t)*)bits;
    A.slot[id].writes = writes;
    if (writes) {
      if (_ca_written_arm(lo, hi)) atomic_store_explicit(&A.slot[id].base, lo, ca_release);
      else id = -1;
    } else {
      A.slot[id].armed_ns = _ca_clock_ns();
      A.slot[id].fault_ns = atomic_load_explicit(&A.fault_ns, ca_relaxed);
      A.slot[id].open_ns = 0;
      atomic_store_explicit(&A.slot[id].waited_ns, 0, ca_relaxed);
      atomic_store_explicit(&A.slot[id].base, lo, ca_release);
      atomic_fetch_add_explicit(&A.armed, 1, ca_relaxed);
      if (prot(lo, hi - lo, PROT_NONE) != 0) {             /* not a mapping of ours any more */
        atomic_store_explicit(&A.slot[id].base, 0, ca_release);
        atomic_fetch_sub_explicit(&A.armed, 1, ca_relaxed);
        id = -1;
      }
    }
  }
  if (id >= 0) id += SLOTS * (int)(A.gen[id] = (A.gen[id] + 1) % (1u << 20));
  unlock_a();
  return id;
}

void _ca_access_move_begin(void* page) {
  lock_a();
  atomic_store(&A.moving, (uintptr_t)page);
  while (atomic_load(&A.in_fault) != 0) sched_yield();  /* one that read no move may open it */
  slot_t* s = find((uintptr_t)page);
  if (s != NULL) {                                     /* open: the move touches it */
    size_t i = ((uintptr_t)page - atomic_load_explicit(&s->base, ca_relaxed)) / CA_OS_PAGE;
    touch(s, i);
    prot((uintptr_t)page, CA_OS_PAGE, PROT_READ | PROT_WRITE);
  }
}

void _ca_access_move_end(void) {
  atomic_store(&A.moving, 0);
  unlock_a();
}

/* slot i opened (A.lock held): pages the monitor took meanwhile keep their protection */
static void open_slot(int i) {
  slot_t* s = &A.slot[i];
  uintptr_t lo = atomic_load_explicit(&s->base, ca_relaxed);
  if (lo == 0) return;
  if (s->writes) {
    atomic_fetch_add_explicit(&A.written, _ca_written_collect(lo, s->end, s->bits), ca_relaxed);
    atomic_store_explicit(&s->base, 0, ca_release);
    return;
  }
  uint64_t open = _ca_clock_ns() - s->armed_ns, in_traps = atomic_load_explicit(&A.fault_ns, ca_relaxed) - s->fault_ns;
  s->open_ns = open > in_traps ? open - in_traps : 0;
  if (!_ca_monitor_active()) prot(lo, s->end - lo, PROT_READ | PROT_WRITE);
  else
    for (uintptr_t p = lo; p < s->end; p += CA_OS_PAGE)
      if (!_ca_monitor_covers(p)) prot(p, CA_OS_PAGE, PROT_READ | PROT_WRITE);
  unsigned k = A.opened_next++ % OPENED;
  atomic_store_explicit(&A.opened_ns[k], _ca_clock_ns(), ca_relaxed);
  atomic_store_explicit(&A.opened_lo[k], lo, ca_relaxed);
  atomic_store_explicit(&A.opened_hi[k], s->end, ca_relaxed);
  atomic_store_explicit(&s->base, 0, ca_release);
  atomic_fetch_sub_explicit(&A.armed, 1, ca_relaxed);
}

/* false: quiet opened the range before its window's end (its bits say nothing of the rest) */
bool _ca_access_disarm(int id) {
  if (id < 0) return false;
  int i = id % SLOTS;
  uint32_t gen = (uint32_t)(id / SLOTS);
  lock_a();
  bool whole = A.cut[i] != gen;
  if (A.gen[i] == gen) open_slot(i);
  unlock_a();
  return whole;
}

/* a trapped range's times once disarmed (until it is armed again): from arming to its pages'
   traps, summed, and to its opening, less the time in trap handlers meanwhile (any thread's:
   a single-threaded program waits behind its own) */
void _ca_access_waited(int id, uint64_t* waited_ns, uint64_t* open_ns) {
  slot_t* s = &A.slot[id % SLOTS];
  *waited_ns = atomic_load_explicit(&s->waited_ns, ca_relaxed);
  *open_ns = s->open_ns;
}

/* ---- quiet ------------------------------------------------------------------------------------ */

static bool alive(int tid) {
  return _ca_syscall6(SYS_tgkill, _ca_syscall6(SYS_getpid, 0, 0, 0, 0, 0, 0), tid, 0, 0, 0, 0) == 0;
}

/* (A.lock held) a reason not to arm now */
static bool quiet(void) {
  if (atomic_load(&A.holds) > 0) return true;
  uint64_t now = _ca_clock_ns();
  if (now < atomic_load(&A.until)) return true;
  bool q = false;
  for (int i = 0; i < LEAVING; i++) {
    int tid = atomic_load(&A.leaving[i]);
    if (tid == 0) continue;
    if (now - atomic_load(&A.leaving_ns[i]) < GONE_NS && alive(tid)) q = true;
    else atomic_compare_exchange_strong(&A.leaving[i], &tid, 0);
  }
  return q;
}

/* every armed range opened now (the reason to be quiet is published before: an arm after this
   sees it) */
static void hush(void) {
  if (!_ca_access_armed()) return;
  lock_a();
  for (int i = 0; i < SLOTS; i++)
    if (atomic_load_explicit(&A.slot[i].base, ca_relaxed) != 0 && !A.slot[i].writes) {
      A.cut[i] = A.gen[i];
      open_slot(i);
      A.quiet_cut++;
    }
  unlock_a();
}

bool _ca_access_quiet(void) {
  lock_a();
  bool q = quiet();
  unlock_a();
  return q;
}

void _ca_access_hold(bool on) {
  if (A.changed == NULL) return;
  atomic_fetch_add(&A.holds, on ? 1 : -1);
  if (on) hush();
}

void _ca_access_quiet_for(uint64_t ns) {
  if (A.changed == NULL) return;
  uint64_t until = _ca_clock_ns() + ns, u = atomic_load(&A.until);
  while (u < until && !atomic_compare_exchange_weak(&A.until, &u, until)) {}
  if (!holding) hush();    /* nested in this thread's A.lock: what it arms, it arms after the call */
}

void _ca_access_thread_leaving(void) {
  if (A.changed == NULL) return;
  int tid = (int)_ca_syscall6(SYS_gettid, 0, 0, 0, 0, 0, 0);
  bool kept = false;
  for (int pass = 0; pass < 2 && !kept; pass++)              /* the second: gone ones' entries */
    for (int i = 0; i < LEAVING && !kept; i++) {
      int was = atomic_load(&A.leaving[i]);
      if (was != 0 && (pass == 0 || alive(was))) continue;
      atomic_store(&A.leaving_ns[i], _ca_clock_ns());      /* first: a taken entry is timed */
      kept = atomic_compare_exchange_strong(&A.leaving[i], &was, tid);
    }
  if (!kept) { _ca_access_quiet_for(GONE_NS); return; }
  hush();
}

/* the pages of [lo, hi) in armed ranges opened and counted as touched, by a release nested in
   this thread's own A.lock section: the slots stay as they are (their disarm opens the rest) */
static void open_nested(uintptr_t lo, uintptr_t hi) {
  for (int i = 0; i < SLOTS; i++) {
    slot_t* s = &A.slot[i];
    uintptr_t b = atomic_load_explicit(&s->base, ca_acquire);
    if (b == 0 || hi <= b || s->end <= lo || s->writes) continue;
    size_t k0 = ((lo > b ? lo : b) - b) / CA_OS_PAGE, k1 = ((hi < s->end ? hi : s->end) - b + CA_OS_PAGE - 1) / CA_OS_PAGE;
    for (size_t k = k0; k < k1; k++) touch(s, k);
    prot(b + k0 * CA_OS_PAGE, (k1 - k0) * CA_OS_PAGE, PROT_READ | PROT_WRITE);
    atomic_fetch_add_explicit(&A.released, 1, ca_relaxed);
  }
}

/* [p, p + len) is about to be touched by the kernel (a system call's buffer) or changed by the
   program (its mprotect, munmap, madvise): the client is told first, so that it never arms that
   memory again (a blocking call, wait4 for a child's status, outlives any window), then armed
   ranges meeting it open, its pages counted as touched. */
void _ca_access_release(const void* p, size_t len) {
  if (len == 0 || (A.changed == NULL && !_ca_access_armed())) return;
  uintptr_t lo = (uintptr_t)p, hi = lo + len < lo ? UINTPTR_MAX : lo + len;
  if (A.changed != NULL) A.changed(lo, hi);
  if (!_ca_access_armed()) return;
  if (holding) { open_nested(lo, hi); return; }
  lock_a();
  for (int i = 0; i < SLOTS; i++) {
    slot_t* s = &A.slot[i];
    uintptr_t b = atomic_load_explicit(&s->base, ca_relaxed);
    if (b == 0 || hi <= b || s->end <= lo || s->writes) continue;
    uintptr_t from = lo > b ? lo : b, to = hi < s->end ? hi : s->end;
    for (size_t k = (from - b) / CA_OS_PAGE; k < (to - b + CA_OS_PAGE - 1) / CA_OS_PAGE; k++)
      touch(s, k);
    open_slot(i);
    atomic_fetch_add_explicit(&A.released, 1, ca_relaxed);
  }
  unlock_a();
}

void _ca_access_on_change(void (*fn)(uintptr_t lo, uintptr_t hi)) { A.changed = fn; }
void _ca_access_on_touch(void (*fn)(uintptr_t addr)) { A.touched[A.touched[0] != NULL && A.touched[0] != fn] = fn; }

/* the wrappers must look at every call's buffers: ranges are armed, or a client may arm them */
bool _ca_access_watching(void) { return A.changed != NULL || _ca_access_armed(); }

void _ca_access_stats(uint64_t* faults, uint64_t* fault_ns, uint64_t* released, uint64_t* quiet, uint64_t* written) {
  *written = atomic_load(&A.written);
  *faults = atomic_load(&A.faults);
  *fault_ns = atomic_load(&A.fault_ns);
  *released = atomic_load(&A.released);
  *quiet = A.quiet_cut;
}

/* a fork child: its lock may have been held by a thread it does not have */
void _ca_access_fork_child(void) {
  atomic_store_explicit(&A.lock.v, 0, ca_relaxed);
  for (int i = 0; i < SLOTS; i++)                          /* write protection: the kernel dropped */
    if (A.slot[i].writes) atomic_store(&A.slot[i].base, 0);   /* the child's; traps: opened here */
    else open_slot(i);
  A.faults = A.fault_ns = A.released = A.written = 0;
  A.quiet_refused = A.quiet_cut = 0;
  _ca_written_fork_child();
  atomic_store(&A.holds, 0);                               /* the calls under way are the parent's */
  for (int i = 0; i < LEAVING; i++) atomic_store(&A.leaving[i], 0);
}
