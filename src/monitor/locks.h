/* Lock sets (paper 003): what a thread does between taking a lock and letting it go.  The
   interposed lock calls (wrap_async.c) keep each thread's nesting depth and the call site of its
   outermost lock; while the depth is above zero, the thread's allocations come from its heap of
   the flavour the lock-set policy chose (policy/locksets.c: pages spread over every colour), and
   its own heap again once the last lock is let go.

     pthread_mutex_lock(a)   depth 0 -> 1: site = caller, allocations diverted
       pthread_mutex_lock(b)   depth 2     (nested: counted, nothing else changes)
       pthread_mutex_unlock(b) depth 1
     pthread_mutex_unlock(a) depth 1 -> 0: allocations back to the thread's own heap

   Only calls that succeed count (a trylock that finds the lock taken, an error-checking mutex
   refusing a relock or an unlock it does not own); a condition wait gives the mutex back and
   takes it again, so the depth is the same after it.  An unlock at depth 0 (a lock taken before
   chromalloc was loaded, or by another thread) is ignored.  With lock sets off (flavour 0) a
   wrapper costs three loads and branches before its tail call (wrap_async.c). */
#ifndef CA_LOCKS_H
#define CA_LOCKS_H

#include "../core/hooks.h"

#pragma GCC visibility push(hidden)

typedef struct ca_lockset_thread_s {
  struct ca_heap_s* to;     /* the thread's heap of the lock sets' flavour (NULL: not known yet,
                               or the thread's heaps went back at its exit) */
  uint32_t    depth;        /* locks held (a recursive mutex counts each time) */
  uint32_t    deepest;      /* the most this thread has held at once */
  const void* site;         /* the return address of the outermost lock call */
} ca_lockset_thread_t;

extern __thread ca_lockset_thread_t _ca_lockset __attribute__((tls_model("initial-exec")));
extern uint8_t _ca_lockset_flavour;           /* 0: lock sets off; set once, at start */
extern uint32_t _ca_lockset_nest;             /* depth whose touched pages are checked (0: none) */
extern _Atomic(bool) _ca_lockset_nested;      /* a thread has been that deep */

void _ca_lockset_first(const void* site);        /* a thread's first entry: finds its heap */
/* Called with lock sets on.  The first entry of a thread goes out of line (its diverted heap is
   looked up then), so that the wrappers' paths need no frame. */
static inline void _ca_lockset_enter(const void* site) {
  ca_lockset_thread_t* t = &_ca_lockset;
  if (t->depth == 0) {
    if (__builtin_expect(t->to == NULL, 0)) { _ca_lockset_first(site); return; }
    t->depth = 1;
    t->site = site;
    _ca_heap_alloc = t->to;
  } else if (++t->depth > t->deepest) {
    t->deepest = t->depth;
    if (t->depth == _ca_lockset_nest) atomic_store_explicit(&_ca_lockset_nested, true, memory_order_relaxed);
  }
}

/* the thread's diverted heap is known: entering needs no call */
static inline bool _ca_lockset_known(void) { return _ca_lockset.to != NULL; }

static inline void _ca_lockset_leave(void) {
  ca_lockset_thread_t* t = &_ca_lockset;
  if (t->depth > 0 && --t->depth == 0) _ca_heap_alloc = _ca_heap;
}

#pragma GCC visibility pop
#endif
