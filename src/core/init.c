/* Process and thread life cycle.
   - Process init runs once, from the library constructor or from the first allocation, before
     anything that could allocate: the environment's copy (env.c), options (our own parser, the
     layers' tables too), the machine cache model, the size-class layout, the random key/seed;
     then the layers' init, inner first.  No dlsym, no stdio.
   - A thread gets its heap on its first allocation (the TLS heap pointer starts at the empty
     sentinel heap, whose empty spans send the fast path here).  A pthread key destructor hands
     the heap back when the thread exits.
   - fork(): one handler chain, registered once: the layers' prepare handlers outer first, then
     the core's, which take every global lock; parent and child undo it in the reverse order
     (the lock order of hooks.h), so a child of a multi-threaded parent can allocate.
   - At exit the statistics are written when CHROMALLOC_STATS is set. */
#include "internal.h"
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#ifndef CA_RUNTIME
const ca_layer_t* const _ca_layers[] = { NULL };   /* the allocator alone (the runtime: runtime.c) */
#endif

ca_process_t _ca_process;
uintptr_t    _ca_key;

static ca_heap_t       heap_first;            /* the first thread's heap: no mapping needed */
static _Atomic(bool)   heap_first_taken;
static pthread_key_t   thread_key;
static bool            thread_key_ok;
static _Atomic(bool)   atfork_done;

static void thread_done(void* arg);
static void fork_prepare(void);
static void fork_parent(void);
static void fork_child(void);

void _ca_process_init(void) {
  int state = 0;
  if (!atomic_compare_exchange_strong_explicit(&_ca_process.state, &state, 1, ca_acq_rel, ca_acquire)) {
    while (atomic_load_explicit(&_ca_process.state, ca_acquire) != 2) sched_yield();
    return;
  }
  _ca_env_init();
  _ca_options_init();
  _ca_machine_init();
  _ca_layout_init();
  uint64_t r[3];
  _ca_os_random(r, sizeof r);
  _ca_process.secret = (uintptr_t)r[0] | 1;
  _ca_key = (uintptr_t)r[1] | 1;
  _ca_process.seed = _ca_opt(CA_OPT_SEED) != 0 ? (uint64_t)_ca_opt(CA_OPT_SEED) : (r[2] | 1);
  thread_key_ok = pthread_key_create(&thread_key, thread_done) == 0;
  atomic_store_explicit(&_ca_process.state, 2, ca_release);
  size_t n = 0;
  while (_ca_layers[n] != NULL) n++;
  while (n-- > 0) if (_ca_layers[n]->init) _ca_layers[n]->init();
}

ca_heap_t* _ca_thread_init(void) {
  _ca_ensure_init();
  ca_heap_t* h;
  if (!atomic_exchange_explicit(&heap_first_taken, true, ca_acq_rel)) {
    h = &heap_first;
    _ca_heap_init(h);
    _ca_heap_register(h);
  } else {
    h = _ca_heap_acquire();
    if (h == NULL) return NULL;
  }
  _ca_heap = _ca_heap_alloc = h;
  _ca_stat_inc(&_ca_stats.threads, 1);
  /* both may allocate (pthread_setspecific for high keys, pthread_atfork always): the heap is set */
  if (thread_key_ok) pthread_setspecific(thread_key, h);
  if (!atomic_exchange_explicit(&atfork_done, true, ca_acq_rel))
    pthread_atfork(fork_prepare, fork_parent, fork_child);
  return h;
}

static void thread_done(void* arg) {
  ca_heap_t* h = arg;
  if (h == NULL || h != _ca_heap) return;
  for (const ca_layer_t* const* l = _ca_layers; *l != NULL; l++) if ((*l)->thread_done) (*l)->thread_done();
  _ca_heap = _ca_heap_alloc = &_ca_heap_empty;   /* a later allocation in this thread starts a new heap */
  _ca_heap_done(h);
}

static void fork_prepare(void) {
  for (const ca_layer_t* const* l = _ca_layers; *l != NULL; l++) if ((*l)->fork_prepare) (*l)->fork_prepare();
  _ca_heap_fork_prepare();
  _ca_segment_fork_prepare();
}

static void layers_after_fork(bool child) {
  size_t n = 0;
  while (_ca_layers[n] != NULL) n++;
  while (n-- > 0) {
    void (*fn)(void) = child ? _ca_layers[n]->fork_child : _ca_layers[n]->fork_parent;
    if (fn) fn();
  }
}

static void fork_parent(void) {
  _ca_segment_fork_parent();
  _ca_heap_fork_parent();
  layers_after_fork(false);
}

static void fork_child(void) {
  _ca_segment_fork_child();
  _ca_large_fork_child();
  _ca_heap_fork_child(_ca_heap);
  layers_after_fork(true);
}

__attribute__((constructor)) static void ca_constructor(void) { _ca_ensure_init(); }
__attribute__((destructor)) static void ca_destructor(void) { _ca_stats_exit(); }
