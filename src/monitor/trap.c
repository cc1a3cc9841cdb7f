/* chromalloc's SIGSEGV/SIGBUS handler.  Faults on pages chromalloc is working on (a page being
   recoloured; later, pages the locality monitor samples) are resolved by the client that owns
   them; every other fault goes to the handler the program installed, else to the default
   action (the program dies as it would have without chromalloc).

   So that a program installing its own handler after chromalloc does not silently take ours
   away, sigaction() and the signal() family (signal, bsd_signal, sysv_signal and __sysv_signal,
   which programs built with -std=c99 call, and sigset) are interposed for these two signals:
   the program's handler is recorded as the one to chain to, and what the program reads back is
   its own; a chained handler set with SA_RESETHAND is reset to the default when it is called.  The handler
   is installed lazily, the first time a client registers.

   A thread that blocks SIGSEGV cannot take a trap: the kernel kills the process at the first
   fault on a page we protect (`xz -T2 -d`: liblzma starts its threads with every signal
   blocked).  Blocking these two signals serves a program nothing (a synchronous fault while
   they are blocked kills it anyway), so the masks it sets never block them: pthread_sigmask,
   sigprocmask and the sa_mask of any handler are interposed and strip them, and what the
   program reads back is what it set (per thread; a new thread starts with them unblocked in
   its own view too). */
#define _GNU_SOURCE
#include "../core/hooks.h"
#include "trap.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "next.h"

#pragma GCC visibility push(default)
extern int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);
#pragma GCC visibility pop

#define CA_TRAP_CLIENTS 4
static ca_trap_fn       clients[CA_TRAP_CLIENTS];
static _Atomic(int)     nclients;
static _Atomic(bool)    installed;
static struct sigaction chained[2];      /* the program's handlers for SIGSEGV, SIGBUS */
static ca_lock_t        install_lock;

static int slot(int sig) { return sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : -1; }

/* A fault no client claims may still have been one of ours: the page was opened (its chunk's
   verdict given, its recolouring done) while this thread was on its way into the handler, and
   the client has forgotten it since (a thread descheduled for 50 ms on a loaded host).  Passing
   it on would restore the default action for good, and the next trap would kill the program.
   So the first unclaimed fault at an address is retried once; only a second one there, straight
   after, is the program's own. */
#define RETRY_NS 100000000ull
static __thread uintptr_t unclaimed_addr __attribute__((tls_model("initial-exec")));
static __thread uint64_t  unclaimed_ns __attribute__((tls_model("initial-exec")));

static bool retry_first(siginfo_t* info) {
  uintptr_t a = (uintptr_t)info->si_addr;
  uint64_t now = _ca_clock_ns();
  if (a != unclaimed_addr || now - unclaimed_ns > RETRY_NS) {
    unclaimed_addr = a;
    unclaimed_ns = now;
    return true;
  }
  unclaimed_addr = 0;
  return false;
}

static void handler(int sig, siginfo_t* info, void* uctx) {
  int e = errno;
  bool from_fault = info->si_code > 0;                      /* not kill(), sigqueue(), raise() */
  if (from_fault) {
    int n = atomic_load_explicit(&nclients, ca_acquire);
    for (int i = 0; i < n; i++)
      if (clients[i](info->si_addr, sig)) { unclaimed_addr = 0; errno = e; return; }  /* ours: retry */
    if (retry_first(info)) { errno = e; return; }
  }
  errno = e;
  int k = sig == SIGBUS;                           /* installed for SIGSEGV and SIGBUS only */
  struct sigaction next = chained[k];
  if (next.sa_flags & SA_RESETHAND) {              /* one-shot: the default from now on */
    memset(&chained[k], 0, sizeof chained[0]);
    chained[k].sa_handler = SIG_DFL;
  }
  if (next.sa_flags & SA_SIGINFO) {
    if (next.sa_sigaction != NULL) { next.sa_sigaction(sig, info, uctx); return; }
  } else if (next.sa_handler == SIG_IGN) {
    return;
  } else if (next.sa_handler != SIG_DFL && next.sa_handler != NULL) {
    next.sa_handler(sig);
    return;
  }
  /* default action: restore it and return, so the faulting access raises the signal again
     and the kernel kills the process with the right status (and core); a signal sent to the
     program is raised again (it is not blocked here: SA_NODEFER) */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  __sigaction(sig, &dfl, NULL);
  if (!from_fault) raise(sig);
}

static void install(void) {
  _ca_lock(&install_lock);
  if (!atomic_load_explicit(&installed, ca_relaxed)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    __sigaction(SIGSEGV, &sa, &chained[0]);
    __sigaction(SIGBUS, &sa, &chained[1]);
    atomic_store_explicit(&installed, true, ca_release);
  }
  _ca_unlock(&install_lock);
}

static void fork_prepare(void) { _ca_lock(&install_lock); }
static void fork_release(void) { _ca_unlock(&install_lock); }

/* the fault handler as the innermost layer of the cache runtime: its lock across fork */
const ca_layer_t _ca_layer_trap = { .fork_prepare = fork_prepare, .fork_parent = fork_release, .fork_child = fork_release };

bool _ca_trap_under_valgrind(void) {
  const char* p = _ca_env(CA_ENV_LD_PRELOAD);
  return p != NULL && strstr(p, "vgpreload") != NULL;
}

bool _ca_trap_register(ca_trap_fn fn) {
  int n = atomic_load_explicit(&nclients, ca_acquire);
  for (int i = 0; i < n; i++) if (clients[i] == fn) { install(); return true; }
  if (n >= CA_TRAP_CLIENTS) return false;
  clients[n] = fn;
  atomic_store_explicit(&nclients, n + 1, ca_release);
  install();
  return true;
}

/* ---- interposed: SIGSEGV and SIGBUS are never blocked ------------------------------------------ */

#define SIGCANCEL_  32                     /* glibc's own: never blocked either (as glibc does) */
#define SIGSETXID_  33

/* which of the two a mask blocks: bit 0 SIGSEGV, bit 1 SIGBUS */
static unsigned ours_in(const sigset_t* m) { return (unsigned)(sigismember(m, SIGSEGV) == 1) | (unsigned)(sigismember(m, SIGBUS) == 1) << 1; }
static void ours_add(sigset_t* m, unsigned bits) { if (bits & 1) sigaddset(m, SIGSEGV); if (bits & 2) sigaddset(m, SIGBUS); }
static void ours_strip(sigset_t* m) { sigdelset(m, SIGSEGV); sigdelset(m, SIGBUS); }

static __thread unsigned believed __attribute__((tls_model("initial-exec")));   /* this thread's view */
static unsigned handler_bits[_NSIG];       /* the sa_mask bits each signal's handler was set with */

/* 0 or an errno value, as pthread_sigmask answers.  The kernel reads and writes copies: the
   program's sets may lie on a sampled page (EFAULT for the old set in a small chunk). */
static int set_mask(int how, const sigset_t* set, sigset_t* old) {
  sigset_t s, was;
  if (set != NULL) {
    s = *set;
    ours_strip(&s);
    sigdelset(&s, SIGCANCEL_);
    sigdelset(&s, SIGSETXID_);
  }
  long r = _ca_syscall6(SYS_rt_sigprocmask, how, set != NULL ? (long)&s : 0, old != NULL ? (long)&was : 0, _NSIG / 8, 0, 0);
  if (r < 0) return (int)-r;
  if (old != NULL) { *old = was; ours_add(old, believed); }
  if (set != NULL) {
    unsigned b = ours_in(set);
    believed = how == SIG_BLOCK ? believed | b : how == SIG_UNBLOCK ? believed & ~b : b;
  }
  return 0;
}

ca_interpose
int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) { return set_mask(how, set, old); }

ca_interpose
int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  int e = set_mask(how, set, old);
  if (e == 0) return 0;
  errno = e;
  return -1;
}

/* chromalloc's own threads (the monitor, the colour worker) hold locks that the program's
   signal handlers may want (through the system calls we interpose): a process signal handled
   on one of them could wait for the lock its own thread holds.  They block every signal but
   the faults. */
void _ca_trap_quiet_thread(void) {
  sigset_t all;
  sigfillset(&all);
  set_mask(SIG_BLOCK, &all, NULL);
}

/* ---- interposed: the program's handlers are chained, ours stays installed -------------------- */

ca_interpose
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  int s = slot(sig);
  if (s >= 0 && atomic_load_explicit(&installed, ca_acquire)) {
    _ca_lock(&install_lock);
    if (old != NULL) *old = chained[s];
    if (act != NULL) chained[s] = *act;
    _ca_unlock(&install_lock);
    return 0;
  }
  if (sig <= 0 || sig >= _NSIG) return __sigaction(sig, act, old);
  struct sigaction a;
  if (act != NULL) { a = *act; ours_strip(&a.sa_mask); }
  _ca_lock(&install_lock);
  unsigned before = handler_bits[sig];
  int r = __sigaction(sig, act != NULL ? &a : NULL, old);
  if (r == 0 && old != NULL) ours_add(&old->sa_mask, before);
  if (r == 0 && act != NULL) handler_bits[sig] = ours_in(&act->sa_mask);
  _ca_unlock(&install_lock);
  return r;
}

/* The signal() family for our two signals: a sigaction with the flags and mask glibc gives
   each; other signals, or before our handler is installed, go to glibc's own. */
typedef sighandler_t (*signal_fn)(int, sighandler_t);

static sighandler_t handler_of(const struct sigaction* a) {
  return (a->sa_flags & SA_SIGINFO) ? (sighandler_t)(void*)a->sa_sigaction : a->sa_handler;
}

static sighandler_t set_handler(int sig, sighandler_t fn, int flags, bool mask_self) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (mask_self) sigaddset(&sa.sa_mask, sig);
  if (sigaction(sig, &sa, &old) != 0) return SIG_ERR;
  return handler_of(&old);
}

static bool ours(int sig) { return slot(sig) >= 0 && atomic_load_explicit(&installed, ca_acquire); }

static sighandler_t glibc(signal_fn g, int sig, sighandler_t fn) {
  if (g == NULL) { errno = ENOSYS; return SIG_ERR; }
  return g(sig, fn);
}

#define SIGNAL_LIKE(name, flags, mask_self) \
  ca_interpose sighandler_t name(int sig, sighandler_t fn) { \
    return ours(sig) ? set_handler(sig, fn, flags, mask_self) : glibc(NEXT(signal_fn, name), sig, fn); \
  }
SIGNAL_LIKE(signal, SA_RESTART, true)
SIGNAL_LIKE(bsd_signal, SA_RESTART, true)
SIGNAL_LIKE(__sysv_signal, SA_RESETHAND | SA_NODEFER, false)
SIGNAL_LIKE(sysv_signal, SA_RESETHAND | SA_NODEFER, false)

/* sigset(): SIG_HOLD would block the signal, which these two never are (see above): the
   handler stays and the previous one is returned */
ca_interpose sighandler_t sigset(int sig, sighandler_t fn) {
  if (!ours(sig)) return glibc(NEXT(signal_fn, sigset), sig, fn);
  if (fn != SIG_HOLD) return set_handler(sig, fn, 0, false);
  struct sigaction old;
  sigaction(sig, NULL, &old);
  return handler_of(&old);
}
