/* Range logs: hot pages learns of every span and large object the core hands out and takes back
   (hot.c's ranges).  Told straight to its shared index, each costs H.lock and the index's cache
   lines on two CPUs: in xchurn (39,000 ranges in 0.13 s, nearly all large objects one thread
   allocates and frees) that was 2.5% of the CPU time and a thousand sched_yields on H.lock.  So
   a thread notes its ranges in a log of its own, a range it gives back while still noted is
   struck out there (or in another thread's log: a remote free), and the logs are applied
   (drained) under H.lock when the worker starts a turn and before anything that must see every
   range (a buffer handed to the kernel, a heat asked for, a fork child); a thread's own, when it
   is full and when the thread ends.

     logs[0 .. used):  [ lock | n | owned | (p, bytes) x LOG_MAX ]   one per thread while it lives
     mine (TLS)    ->  this thread's, NULL until its first range (none: every log is taken)

   Lock order: H.lock, then the logs'.  A thread takes its own log's lock alone, only to append or
   strike; the drain takes each non-empty log's in turn. */
#include "rangelog.h"
#include "../core/os.h"
#include <stdatomic.h>

#define LOGS    128                   /* threads with a log at once; more tell H directly */
#define LOG_MAX 64                    /* ranges a log holds (a thread of xchurn keeps ~20 large) */

typedef struct rlog_s {
  ca_lock_t         lock;
  _Atomic(uint32_t) n;                /* read without the lock: an empty log is skipped */
  _Atomic(bool)     owned;
  uint64_t          struck;           /* ranges struck out here (statistics) */
  struct { void* p; size_t bytes; } e[LOG_MAX];
} rlog_t;

static rlog_t logs[LOGS];
static _Atomic(uint32_t) used;        /* logs handed out at least once: [0, used) */
static __thread rlog_t* mine __attribute__((tls_model("initial-exec")));
static __thread bool    none __attribute__((tls_model("initial-exec")));

static rlog_t* my_log(void) {
  if (mine != NULL || none) return mine;
  for (uint32_t i = 0; i < LOGS; i++) {
    bool free_ = false;
    if (atomic_load_explicit(&logs[i].owned, ca_relaxed) || !atomic_compare_exchange_strong(&logs[i].owned, &free_, true)) continue;
    for (uint32_t u = atomic_load(&used); u <= i && !atomic_compare_exchange_weak(&used, &u, i + 1);) {}
    return mine = &logs[i];
  }
  none = true;
  return NULL;
}

bool _ca_rlog_add(void* p, size_t bytes) {
  rlog_t* l = my_log();
  if (l == NULL) return false;
  _ca_lock(&l->lock);
  uint32_t n = atomic_load_explicit(&l->n, ca_relaxed);
  bool room = n < LOG_MAX;
  if (room) {
    l->e[n].p = p;
    l->e[n].bytes = bytes;
    atomic_store_explicit(&l->n, n + 1, ca_relaxed);
  }
  _ca_unlock(&l->lock);
  return room;
}

/* p struck out of log l, if there */
static bool strike_in(rlog_t* l, void* p) {
  if (atomic_load_explicit(&l->n, ca_relaxed) == 0) return false;
  _ca_lock(&l->lock);
  uint32_t n = atomic_load_explicit(&l->n, ca_relaxed), i = n;
  while (i > 0 && l->e[i - 1].p != p) i--;           /* newest first: freed soon after taken */
  if (i > 0) {
    l->e[i - 1] = l->e[n - 1];
    atomic_store_explicit(&l->n, n - 1, ca_relaxed);
    l->struck++;
  }
  _ca_unlock(&l->lock);
  return i > 0;
}

/* This thread's log first, then the others': a range still noted anywhere was never applied,
   and one not found was applied before the search passed its log (a drain holds both locks). */
bool _ca_rlog_strike(void* p) {
  if (mine != NULL && strike_in(mine, p)) return true;
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++)
    if (&logs[i] != mine && strike_in(&logs[i], p)) return true;
  return false;
}

static void drain_one(rlog_t* l, ca_rlog_apply_t apply) {
  if (atomic_load_explicit(&l->n, ca_relaxed) == 0) return;
  _ca_lock(&l->lock);
  uint32_t n = atomic_load_explicit(&l->n, ca_relaxed);
  for (uint32_t k = 0; k < n; k++) apply(l->e[k].p, l->e[k].bytes);
  atomic_store_explicit(&l->n, 0, ca_relaxed);
  _ca_unlock(&l->lock);
}

void _ca_rlog_drain(ca_rlog_apply_t apply) {
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++) drain_one(&logs[i], apply);
}

void _ca_rlog_drain_mine(ca_rlog_apply_t apply) { if (mine != NULL) drain_one(mine, apply); }

void _ca_rlog_thread_done(void) {
  if (mine != NULL) atomic_store(&mine->owned, false);
  mine = NULL;
  none = true;                        /* its last frees (later destructors) go to H directly */
}

void _ca_rlog_fork_prepare(void) {
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++) _ca_lock(&logs[i].lock);
}

void _ca_rlog_fork_parent(void) {
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++) _ca_unlock(&logs[i].lock);
}

void _ca_rlog_unlock_all(void) {
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++) _ca_lock_reset(&logs[i].lock);
}

void _ca_rlog_fork_child(void) {
  uint32_t u = atomic_load(&used);
  for (uint32_t i = 0; i < u; i++)
    if (&logs[i] != mine) atomic_store(&logs[i].owned, false);   /* their threads are the parent's */
}

uint64_t _ca_rlog_struck(void) {
  uint64_t n = 0;
  for (uint32_t i = 0, u = atomic_load(&used); i < u; i++) n += __atomic_load_n(&logs[i].struck, __ATOMIC_RELAXED);
  return n;
}
