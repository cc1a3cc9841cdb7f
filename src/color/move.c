/* Page moves: a page and its frame (so its colour) to another address.

   Two ways, the first the kernel offers:

     UFFDIO_MOVE (userfaultfd, Linux 6.8+)     mremap (the fallback)
     the page table entry moves into a range    the page becomes a mapping (VMA) of its own
     registered with our userfaultfd; the       at its new address: about three mappings more
     mappings stay as they were                 per page, capped at vm.max_map_count / 4

   UFFDIO_MOVE needs the destination empty and registered, the source page exclusive to this
   process (one shared with a forked child answers EBUSY) and both mappings alike; when any of
   that fails, the page moves by mremap instead.  The slot region (pool.c) is registered once,
   in write-protect mode with nothing ever protected, so that it takes moved pages; a range
   being filled is registered around the fill.

   A live page (other threads may touch it meanwhile) is registered for missing-page faults
   while it moves:

     register page      (missing)        a thread touching the page from here on waits in the kernel
     move page -> slot                   the old frame, with the data
     copy slot -> fresh                  fresh: a frame of the wanted colour
     move fresh -> page (wakes waiters)
     unregister page                     the mapping merges back with its neighbours

   so no write can land in the old frame after the copy.  Opened without UFFD_USER_MODE_ONLY
   (root, or vm.unprivileged_userfaultfd = 1) system calls touching the page wait too; with it,
   such a call fails with EFAULT during the few microseconds of the move, as with mremap's
   write protection.  The mremap way: the page is made read-only, copied, and fresh moved over
   it (atomically); writers fault and wait in recolour.c's fault handler.  Its old frame, when
   kept, is moved out first with MREMAP_DONTUNMAP, the address staying mapped (inaccessible)
   until the new frame replaces it: never a hole another thread's mmap could take.

   fork(): a child must not inherit a page in the middle of a move (read-only, or unmapped
   between the two moves, by a thread the child does not have: its first write waited for ever,
   or read zeros).  The fork waits until no page is in flight and none starts before it is done
   (_ca_move_fork_hold / _ca_move_fork_release, the layer's fork handlers).

   Userfaultfd may be absent or denied (seccomp profiles deny it): then every move is an mremap,
   and `colour_moves=mremap` asks for that.  A forked child does not inherit the registrations,
   and the descriptor would act on the parent's memory: the child opens its own when it moves. */
#define _GNU_SOURCE
#include "colour.h"
#include "../monitor/monitor.h"
#include "../monitor/trap.h"
#include <fcntl.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/userfaultfd.h>

/* newer than some distributions' headers (Debian 12's describe Linux 6.1) */
#define MOVE_FEATURE   ((uint64_t)1 << 16)                 /* UFFD_FEATURE_MOVE */
#define USER_MODE_ONLY 1                                   /* UFFD_USER_MODE_ONLY */
struct ca_uffdio_move { uint64_t dst, src, len, mode; int64_t move; };
#define CA_UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct ca_uffdio_move)

enum { UNTRIED, UFFD, MREMAP };
static _Atomic int      state = UNTRIED;
static int              fd = -1;
static bool             kernel_waits;                      /* opened without USER_MODE_ONLY */
static const char*      why = "";                          /* why moves are mremaps */
static ca_lock_t        open_lock;
static void*            quiet_base;                        /* the slot region */
static size_t           quiet_len;
static _Atomic uint64_t n_uffd, n_mremap, n_fallback;

static long uffd_ioctl(unsigned long req, void* arg) { return _ca_syscall6(SYS_ioctl, fd, (long)req, (long)arg, 0, 0, 0); }

static bool reg(void* p, size_t len, uint64_t mode) {
  struct uffdio_register r = { .range = { (uint64_t)(uintptr_t)p, len }, .mode = mode };
  return uffd_ioctl(UFFDIO_REGISTER, &r) == 0;
}

/* unregistered, and every thread that waits there woken (one whose page came back by mremap
   has no registration left to be woken by) */
static void unreg(void* p, size_t len) {
  struct uffdio_range r = { (uint64_t)(uintptr_t)p, len };
  uffd_ioctl(UFFDIO_UNREGISTER, &r);
  uffd_ioctl(UFFDIO_WAKE, &r);
}

static int open_uffd(int flags) {
  int f = (int)_ca_syscall6(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | flags, 0, 0, 0, 0, 0);
  if (f < 0) return -1;
  struct uffdio_api api = { .api = UFFD_API, .features = MOVE_FEATURE };
  if (_ca_syscall6(SYS_ioctl, f, (long)UFFDIO_API, (long)&api, 0, 0, 0) != 0 || !(api.features & MOVE_FEATURE)) {
    close(f);
    errno = EOPNOTSUPP;
    return -1;
  }
  return f;
}

static void open_once(void) {
  _ca_lock(&open_lock);
  if (atomic_load(&state) == UNTRIED) {
    int e = errno;
    int s = MREMAP;
    if (_ca_colour_options[CA_COPT_MOVES] != 0) {
      why = "colour_moves=mremap";
    } else {
      kernel_waits = true;
      fd = open_uffd(0);
      if (fd < 0 && errno == EPERM) { kernel_waits = false; fd = open_uffd(USER_MODE_ONLY); }
      if (fd < 0) why = errno == EOPNOTSUPP || errno == EINVAL ? "this kernel has no UFFDIO_MOVE"
                      : errno == ENOSYS ? "no userfaultfd in this kernel" : "userfaultfd denied";
      else if (quiet_base != NULL && !reg(quiet_base, quiet_len, UFFDIO_REGISTER_MODE_WP)) {
        why = "the slot region could not be registered";
        close(fd);
        fd = -1;
      } else {
        s = UFFD;
      }
    }
    atomic_store(&state, s);
    errno = e;
  }
  _ca_unlock(&open_lock);
}

bool _ca_move_uffd(void) {
  if (atomic_load_explicit(&state, ca_acquire) == UNTRIED) open_once();
  return atomic_load_explicit(&state, ca_relaxed) == UFFD;
}

/* The region pages are parked in: registered now and in every child that moves (moves are
   mremaps when it cannot be). */
void _ca_move_quiet_region(void* base, size_t len) {
  _ca_lock(&open_lock);
  quiet_base = base;
  quiet_len = len;
  if (atomic_load(&state) == UFFD && !reg(base, len, UFFDIO_REGISTER_MODE_WP)) {
    why = "the slot region could not be registered";
    atomic_store(&state, MREMAP);
  }
  _ca_unlock(&open_lock);
}

void _ca_move_fork_child(void) {
  _ca_move_fork_release();
  _ca_os_close_ours(fd, "userfaultfd");
  fd = -1;
  atomic_store(&state, UNTRIED);
  atomic_store_explicit(&open_lock.v, 0, ca_relaxed);
}

static bool uffd_move(void* src, void* dst) {
  struct ca_uffdio_move m = { (uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, CA_OS_PAGE, 0, 0 };
  if (uffd_ioctl(CA_UFFDIO_MOVE, &m) != 0 || m.move != (int64_t)CA_OS_PAGE) return false;
  atomic_fetch_add_explicit(&n_uffd, 1, ca_relaxed);
  _ca_sim_moved(src, dst, 1);
  return true;
}

static bool remap(void* src, void* dst) {
  if (!_ca_os_move(src, dst, CA_OS_PAGE)) return false;
  atomic_fetch_add_explicit(&n_mremap, 1, ca_relaxed);
  _ca_sim_moved(src, dst, 1);
  return true;
}

/* Move the page at src to dst (both page aligned, neither in use), keeping its frame: every
   move of a page whose colour matters goes through here, so a simulated L2 follows it.
   2: by mremap (a mapping more), 1: by UFFDIO_MOVE, 0: failed (the page is where it was). */
int _ca_colour_move_page(void* src, void* dst) {
  int e = errno, how = 0;
  if (_ca_move_uffd() && uffd_move(src, dst)) how = 1;
  else {
    if (atomic_load_explicit(&state, ca_relaxed) == UFFD) atomic_fetch_add_explicit(&n_fallback, 1, ca_relaxed);
    how = remap(src, dst) ? 2 : 0;
  }
  errno = e;
  return how;
}

/* Around filling [base, base + len) with pool pages: registered (and emptied, as a move needs)
   for the fill, and back as it was after. */
bool _ca_move_fill_begin(void* base, size_t len) {
  if (!_ca_move_uffd() || !reg(base, len, UFFDIO_REGISTER_MODE_WP)) return false;
  _ca_os_purge(base, len);
  return true;
}

void _ca_move_fill_end(void* base, size_t len, bool registered) {
  if (registered) unreg(base, len);
}

static bool protect(void* page, int prot) { return _ca_syscall6(SYS_mprotect, (long)page, CA_OS_PAGE, prot, 0, 0, 0) == 0; }

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4                                 /* Linux 5.7 */
#endif

/* The old frame to the slot, its address left mapped and inaccessible until fresh replaces it:
   a hole there took another thread's new mapping (a heap's page) between the two mremaps, and
   fresh replaced it (test_move, with a thread starting meanwhile).  False: not parked (a kernel
   before 5.7), the page as it was. */
static bool park(void* page, void* slot) {
  if (!protect(page, PROT_NONE)) return false;
  if (_ca_syscall6(SYS_mremap, (long)page, CA_OS_PAGE, CA_OS_PAGE, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                   (long)slot, 0) == (long)slot) {
    atomic_fetch_add_explicit(&n_mremap, 1, ca_relaxed);
    _ca_sim_moved(page, slot, 1);
    return true;
  }
  protect(page, PROT_READ);
  return false;
}

/* The mremap way for a live page (see the top). */
static int live_by_remap(void* page, void* fresh, void* slot, bool* parked) {
  if (!protect(page, PROT_READ)) return 0;
  memcpy(fresh, page, CA_OS_PAGE);
  *parked = slot != NULL && park(page, slot);
  if (remap(fresh, page)) return 2;                  /* replaces the page's mapping at once */
  if (*parked && !remap(slot, page)) {
    /* the address must not stay unmapped (only the process's map limit makes moves fail):
       its data goes into a fresh page there */
    if (_ca_syscall6(SYS_mmap, (long)page, CA_OS_PAGE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == (long)page && protect(slot, PROT_READ))
      memcpy(page, slot, CA_OS_PAGE);
    _ca_os_purge(slot, CA_OS_PAGE);
  }
  *parked = false;
  protect(page, PROT_READ | PROT_WRITE);
  return 0;
}

/* The UFFDIO_MOVE way (see the top); -1: not possible for this page (as it was, slot empty). */
static int live_by_uffd(void* page, void* fresh, void* slot) {
  if (!reg(page, CA_OS_PAGE, UFFDIO_REGISTER_MODE_MISSING)) return -1;
  if (!uffd_move(page, slot)) {                    /* not present, or shared with a child */
    unreg(page, CA_OS_PAGE);
    return -1;
  }
  memcpy(fresh, slot, CA_OS_PAGE);
  int how = uffd_move(fresh, page) ? 1 : remap(fresh, page) ? 2 : 0;   /* fresh shared: EBUSY */
  if (how == 0 && !uffd_move(slot, page) && !remap(slot, page)) {
    unreg(page, CA_OS_PAGE);                       /* our own touch must not wait */
    memcpy(page, slot, CA_OS_PAGE);
    _ca_os_purge(slot, CA_OS_PAGE);
  }
  unreg(page, CA_OS_PAGE);
  return how;
}

/* ---- pages in flight ----------------------------------------------------------------------- */

#define INFLIGHT 8
static _Atomic(uintptr_t) inflight[INFLIGHT];        /* pages being recoloured */
static _Atomic(uintptr_t) recent[64];                 /* pages recoloured in the last moments */
static _Atomic(uint64_t)  recent_ms[64];
static _Atomic(unsigned)  recent_next;
static _Atomic(bool)      forking;                    /* a fork waits: no new page in flight */

/* A fault on a page being recoloured waits for it; one on a page recoloured within the last
   50 ms is retried (the thread faulted during the copy and woke after it).  Anything else is
   the program's own fault. */
static bool on_fault(void* addr, int sig) {
  (void)sig;
  uintptr_t page = (uintptr_t)addr & ~(uintptr_t)(CA_OS_PAGE - 1);
  /* page 0 is never recoloured, and empty slots hold 0: a null-pointer fault (the JVM's
     implicit null checks) waited on them for ever */
  if (page == 0) return false;
  bool ours = false;
  for (int i = 0; i < INFLIGHT; i++)
    while (atomic_load_explicit(&inflight[i], ca_acquire) == page) { ours = true; sched_yield(); }
  uint64_t now = _ca_clock_ms();
  for (int i = 0; i < 64 && !ours; i++)
    ours = atomic_load_explicit(&recent[i], ca_relaxed) == page && now - atomic_load_explicit(&recent_ms[i], ca_relaxed) < 50;
  return ours;
}

/* A free in-flight slot for page, or -1 while none is free or another thread has the same page in flight:
   two moves of one page at once (protection's and the program's chromalloc_recolour) took its
   frame away under each other's copy, and the thread that faulted there waited for its own
   slot for ever (test_colour_api, fork during recolouring). */
static ca_lock_t claim_lock;
static int claim_slot(uintptr_t page) {
  int slot = -1;
  _ca_lock(&claim_lock);
  bool busy = false;
  for (int i = 0; i < INFLIGHT; i++) busy |= atomic_load(&inflight[i]) == page;
  for (int i = 0; i < INFLIGHT && slot < 0 && !busy; i++)
    if (atomic_load(&inflight[i]) == 0) { atomic_store(&inflight[i], page); slot = i; }
  _ca_unlock(&claim_lock);
  return slot;
}

/* The claim lock is held across the fork too: a child that inherited it taken would wait for
   it at its first recolouring. */
void _ca_move_fork_hold(void) {
  atomic_store(&forking, true);
  _ca_lock(&claim_lock);
  for (int i = 0; i < INFLIGHT; i++)
    while (atomic_load(&inflight[i]) != 0) sched_yield();
}

void _ca_move_fork_release(void) {
  _ca_unlock(&claim_lock);
  atomic_store(&forking, false);
}

/* Give the live page at `page` fresh's frame, with its data.  The old frame goes to `slot`
   (*parked; NULL: released; the mremap way leaves it read-only there).  1: moved by
   UFFDIO_MOVE, 2: by mremap, 0: not moved (page as it was, slot empty, fresh still fresh's). */
int _ca_colour_move_live(void* page, void* fresh, void* slot, bool* parked) {
  static _Atomic(bool) registered;
  if (!atomic_exchange(&registered, true)) _ca_trap_register(on_fault);
  int e = errno, how = -1, claim = -1;
  *parked = false;
  bool held = false;
  for (;;) {
    /* the monitor's and the traps' locks before the claim: a fork holds the monitor's while it
       waits for the pages in flight (a move that claimed first waited for it: both for ever) */
    held = _ca_monitor_move_begin();
    _ca_access_move_begin(page);
    claim = claim_slot((uintptr_t)page);
    /* the claim first, then the fork's flag: a fork that set it before sees this claim and
       waits, one that sets it after waits too (both sequentially consistent) */
    if (claim >= 0 && !atomic_load(&forking)) break;
    if (claim >= 0) atomic_store(&inflight[claim], 0);
    _ca_access_move_end();
    _ca_monitor_move_end(page, held);
    sched_yield();
  }
  if (slot != NULL && _ca_move_uffd()) {
    how = live_by_uffd(page, fresh, slot);
    *parked = how > 0;
    if (how != 1) atomic_fetch_add_explicit(&n_fallback, 1, ca_relaxed);
  }
  if (how < 0) how = live_by_remap(page, fresh, slot, parked);
  _ca_access_move_end();
  _ca_monitor_move_end(page, held);
  unsigned r = atomic_fetch_add(&recent_next, 1) % 64;
  atomic_store_explicit(&recent_ms[r], _ca_clock_ms(), ca_relaxed);
  atomic_store_explicit(&recent[r], (uintptr_t)page, ca_relaxed);
  atomic_store_explicit(&inflight[claim], 0, ca_release);
  errno = e;
  return how;
}

void _ca_move_stats_json(ca_buf_t* b) {
  bool uffd = atomic_load_explicit(&state, ca_relaxed) == UFFD;
  ca_buf_str(b, ",\"moves\":{\"method\":\"");
  ca_buf_str(b, atomic_load_explicit(&state, ca_relaxed) == UNTRIED ? "untried" : uffd ? "userfaultfd" : "mremap");
  ca_buf_str(b, "\",\"mremap_because\":\"");
  ca_buf_str(b, uffd ? "" : why);
  ca_buf_str(b, "\",\"system_calls_wait\":");
  ca_buf_str(b, uffd && kernel_waits ? "true" : "false");
  ca_buf_field_u64(b, "by_uffd", atomic_load(&n_uffd));
  ca_buf_field_u64(b, "by_mremap", atomic_load(&n_mremap));
  ca_buf_field_u64(b, "uffd_fell_back", atomic_load(&n_fallback));
  ca_buf_char(b, '}');
}
