/* Written pages without a trap: userfaultfd's asynchronous write protection and PAGEMAP_SCAN
   (Linux 6.7+), the access-bit sampler's second backend (access.c).

     arm      UFFDIO_REGISTER(range, WP) on our own userfaultfd opened with WP_ASYNC,
              UFFDIO_WRITEPROTECT(range): every present page's entry write-protected
     write    the kernel clears the page's protection itself and goes on (no signal, no
              message, nothing to serve): about a microsecond, once per page
     collect  PAGEMAP_SCAN(range, PAGE_IS_WRITTEN): the pages whose protection is gone,
              then UFFDIO_UNREGISTER (the protection of the rest cleared, the mapping merged)

   Nothing here can fail a system call or kill a thread: the kernel's own writes into the range
   resolve the same way, and a thread with every signal blocked is never signalled.  What it
   cannot see is reads.  Opened with UFFD_USER_MODE_ONLY (allowed unprivileged; it changes
   nothing for asynchronous protection).  The kernel, the feature or /proc may say no: the
   backend then stays off, and `why` says what refused.  A forked child does not inherit the
   registrations (the kernel drops them and their protection from the child's page tables) and
   must not use the parent's descriptors: it closes them. */
#define _GNU_SOURCE
#include "monitor.h"
#include "../core/hooks.h"
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/userfaultfd.h>

/* newer than some distributions' headers (Debian 12's describe Linux 6.1) */
#define WP_ASYNC       ((uint64_t)1 << 15)                 /* UFFD_FEATURE_WP_ASYNC */
#define USER_MODE_ONLY 1                                   /* UFFD_USER_MODE_ONLY */
#define IS_WRITTEN     ((uint64_t)1 << 1)                  /* PAGE_IS_WRITTEN */
struct region { uint64_t start, end, categories; };
struct scan_arg { uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages,
                  category_inverted, category_mask, category_anyof_mask, return_mask; };
#define PAGEMAP_SCAN_IOCTL _IOWR('f', 16, struct scan_arg)

static struct {
  ca_lock_t   lock;                  /* the first use */
  _Atomic int state;                 /* 0 untried, 1 usable, -1 not here */
  int         uffd, pagemap;
  const char* why;
} W = { .uffd = -1, .pagemap = -1, .why = "not tried" };

static long ctl(int fd, unsigned long req, void* arg) { return _ca_syscall6(SYS_ioctl, fd, (long)req, (long)arg, 0, 0, 0); }

bool _ca_written_arm(uintptr_t lo, uintptr_t hi) {
  struct uffdio_register r = { .range = { lo, hi - lo }, .mode = UFFDIO_REGISTER_MODE_WP };
  if (ctl(W.uffd, UFFDIO_REGISTER, &r) != 0) return false;    /* not one anonymous mapping, or */
  struct uffdio_writeprotect w = { .range = { lo, hi - lo }, .mode = UFFDIO_WRITEPROTECT_MODE_WP };
  if (ctl(W.uffd, UFFDIO_WRITEPROTECT, &w) == 0) return true;  /* taken by a page move meanwhile */
  struct uffdio_range u = { lo, hi - lo };
  ctl(W.uffd, UFFDIO_UNREGISTER, &u);
  return false;
}

/* the written pages of [lo, hi) into bits (page i of the range: bit i), the range let go;
   returns how many were written */
size_t _ca_written_collect(uintptr_t lo, uintptr_t hi, _Atomic(uint64_t)* bits) {
  struct region v[32];
  size_t n = 0;
  for (uintptr_t at = lo; at < hi; ) {
    struct scan_arg a = { sizeof a, 0, at, hi, 0, (uintptr_t)v, 32, 0, 0, IS_WRITTEN, 0, IS_WRITTEN };
    long got = ctl(W.pagemap, PAGEMAP_SCAN_IOCTL, &a);
    if (got < 0) break;
    for (long k = 0; k < got; k++)
      for (uintptr_t p = v[k].start; p < v[k].end; p += CA_OS_PAGE, n++) {
        size_t i = (p - lo) / CA_OS_PAGE;
        atomic_fetch_or_explicit(&bits[i / 64], (uint64_t)1 << (i % 64), ca_relaxed);
      }
    if (a.walk_end <= at) break;
    at = a.walk_end;
  }
  struct uffdio_range u = { lo, hi - lo };
  ctl(W.uffd, UFFDIO_UNREGISTER, &u);
  return n;
}

/* opened, and tried on a page of our own: protected, not written, written, seen */
static const char* open_and_try(void) {
  W.uffd = (int)_ca_syscall6(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | USER_MODE_ONLY, 0, 0, 0, 0, 0);
  if (W.uffd < 0) return "userfaultfd refused";
  struct uffdio_api api = { .api = UFFD_API, .features = WP_ASYNC };
  if (ctl(W.uffd, UFFDIO_API, &api) != 0 || !(api.features & WP_ASYNC)) return "no asynchronous write protection (Linux 6.7+)";
  W.pagemap = (int)_ca_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0, 0, 0);
  if (W.pagemap < 0) return "no /proc/self/pagemap";
  volatile uint8_t* p = _ca_os_map(CA_OS_PAGE);
  if (p == NULL) return "no memory";
  p[0] = 1;
  uint64_t before[1] = { 0 }, after[1] = { 0 };
  const char* why = NULL;
  uintptr_t lo = (uintptr_t)p, hi = lo + CA_OS_PAGE;
  if (!_ca_written_arm(lo, hi)) why = "write protection refused";
  else {
    _ca_written_collect(lo, hi, (_Atomic(uint64_t)*)before);
    if (_ca_written_arm(lo, hi)) { p[0] = 2; _ca_written_collect(lo, hi, (_Atomic(uint64_t)*)after); }
    if (before[0] != 0 || after[0] != 1) why = "PAGEMAP_SCAN absent or not telling written pages";
  }
  _ca_os_unmap((void*)p, CA_OS_PAGE);
  return why;
}

bool _ca_written_ok(void) {
  int s = atomic_load_explicit(&W.state, ca_acquire);
  if (s != 0) return s > 0;
  _ca_lock(&W.lock);
  if (atomic_load_explicit(&W.state, ca_relaxed) == 0) {
    const char* why = open_and_try();
    W.why = why != NULL ? why : "";
    if (why != NULL) {
      if (W.uffd >= 0) _ca_syscall6(SYS_close, W.uffd, 0, 0, 0, 0, 0);
      if (W.pagemap >= 0) _ca_syscall6(SYS_close, W.pagemap, 0, 0, 0, 0, 0);
      W.uffd = W.pagemap = -1;
    }
    atomic_store_explicit(&W.state, why == NULL ? 1 : -1, ca_release);
  }
  _ca_unlock(&W.lock);
  return atomic_load_explicit(&W.state, ca_acquire) > 0;
}

const char* _ca_written_why(void) { return W.why; }

void _ca_written_fork_child(void) {
  _ca_lock_reset(&W.lock);
  if (atomic_load(&W.state) > 0) {
    _ca_os_close_ours(W.uffd, "userfaultfd");
    _ca_os_close_ours(W.pagemap, "/pagemap");       /* the parent's (/proc/PID/pagemap) */
    W.uffd = W.pagemap = -1;
    W.why = "a forked child";
    atomic_store(&W.state, -1);
  }
}
