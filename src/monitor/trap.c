/* chromalloc's SIGSEGV/SIGBUS handler.  Faults on pages chromalloc is working on (a page being
   recoloured; later, pages the locality monitor samples) are resolved by the client that owns
   them; every other fault goes to the handler the program installed, else to the default
   action (the program dies as it would have without chromalloc).

   So that a program installing its own handler after chromalloc does not silently take ours
   away, sigaction() and signal() are interposed for these two signals: the program's handler
   is recorded as the one to chain to, and what the program reads back is its own.  The handler
   is installed lazily, the first time a client registers. */
#define _GNU_SOURCE
#include "../core/internal.h"
#include "trap.h"
#include <signal.h>
#include <string.h>

#pragma GCC visibility push(default)
extern int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);
extern sighandler_t bsd_signal(int sig, sighandler_t fn);     /* glibc's signal() */
#pragma GCC visibility pop

#define CA_TRAP_CLIENTS 4
static ca_trap_fn       clients[CA_TRAP_CLIENTS];
static _Atomic(int)     nclients;
static _Atomic(bool)    installed;
static struct sigaction chained[2];      /* the program's handlers for SIGSEGV, SIGBUS */
static ca_lock_t        install_lock;

static int slot(int sig) { return sig == SIGSEGV ? 0 : sig == SIGBUS ? 1 : -1; }

static void handler(int sig, siginfo_t* info, void* uctx) {
  int n = atomic_load_explicit(&nclients, ca_acquire);
  for (int i = 0; i < n; i++)
    if (clients[i](info->si_addr, sig)) return;              /* ours: retry the access */
  struct sigaction* next = &chained[slot(sig)];
  if (next->sa_flags & SA_SIGINFO) {
    if (next->sa_sigaction != NULL) { next->sa_sigaction(sig, info, uctx); return; }
  } else if (next->sa_handler == SIG_IGN) {
    return;
  } else if (next->sa_handler != SIG_DFL && next->sa_handler != NULL) {
    next->sa_handler(sig);
    return;
  }
  /* default action: restore it and return, so the faulting access raises the signal again
     and the kernel kills the process with the right status (and core) */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  __sigaction(sig, &dfl, NULL);
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

bool _ca_trap_register(ca_trap_fn fn) {
  int n = atomic_load_explicit(&nclients, ca_acquire);
  for (int i = 0; i < n; i++) if (clients[i] == fn) { install(); return true; }
  if (n >= CA_TRAP_CLIENTS) return false;
  clients[n] = fn;
  atomic_store_explicit(&nclients, n + 1, ca_release);
  install();
  return true;
}

/* ---- interposed: the program's handlers are chained, ours stays installed -------------------- */

__attribute__((visibility("default")))
int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  int s = slot(sig);
  if (s < 0 || !atomic_load_explicit(&installed, ca_acquire)) return __sigaction(sig, act, old);
  _ca_lock(&install_lock);
  if (old != NULL) *old = chained[s];
  if (act != NULL) chained[s] = *act;
  _ca_unlock(&install_lock);
  return 0;
}

__attribute__((visibility("default")))
sighandler_t signal(int sig, sighandler_t fn) {
  if (slot(sig) < 0 || !atomic_load_explicit(&installed, ca_acquire)) return bsd_signal(sig, fn);
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, &old) != 0) return SIG_ERR;
  return (old.sa_flags & SA_SIGINFO) ? (sighandler_t)(void*)old.sa_sigaction : old.sa_handler;
}
