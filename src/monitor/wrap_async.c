/* Interposed synchronisation calls (futex words) and asynchronous kernel I/O (io_uring, Linux aio, POSIX aio: no more traps once a process sets one up) (wrap.h says what is covered and why). */
#include "wrap.h"
#include "locks.h"

/* ---- futex words: a thread waiting on a mutex, condition, rwlock, barrier or semaphore has the
   kernel read its word; on a sampled page that read fails and glibc aborts ("The futex facility
   returned an unexpected error code": a mutex in a sampled chunk, 1 run in 8 of kernel_buffers
   with every chunk monitored).  Only while a chunk is being sampled does this cost more than
   one load. */
static inline void word(const void* p, size_t n) {
  if (ca_unlikely(atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) != 0)) _ca_monitor_release(p, n);
}
#define SYNC(name, params, args, ...) \
  ca_interpose int name params { __VA_ARGS__; return NEXT(int (*) params, name) args; }
/* a lock taken (0, or a robust mutex's EOWNERDEAD) enters a lock set; one let go leaves it
   (locks.h).  Every path ends in a tail call, and the common ones have no frame: returning into
   the wrapper after the lock's atomic, or popping a frame just before it, costs a few ns a
   lock/unlock pair.  A call that cannot fail (`sure`) is counted in the wrapper before it is
   made; any other goes to name##_slow and is counted after.  `name##_next` is the next
   definition, once a first call has looked it up. */
#define CA_ARGS(...) __VA_ARGS__
#define LOCKING(name, params, args, lk, sure, taken, count) \
  static _Atomic(void*) name##_next; \
  static __attribute__((noinline)) int name##_slow(const void* site, CA_ARGS params) { \
    (void)site; word(lk, sizeof *lk); \
    int (*f) params = NEXT(int (*) params, name); \
    if (atomic_load_explicit(&name##_next, ca_relaxed) == NULL) atomic_store_explicit(&name##_next, (void*)f, ca_relaxed); \
    if (_ca_lockset_flavour == 0) return f args; \
    int r = f args; \
    if (taken) { count; } \
    return r; } \
  ca_interpose int name params { \
    void* f = atomic_load_explicit(&name##_next, ca_relaxed); \
    if (ca_likely(f != NULL) && ca_likely(atomic_load_explicit(&_ca_sampled_chunks, ca_relaxed) == 0)) { \
      if (ca_likely(_ca_lockset_flavour == 0)) return ((int (*) params)f) args; \
      if (sure) { const void* site = __builtin_return_address(0); (void)site; count; return ((int (*) params)f) args; } \
    } \
    return name##_slow(__builtin_return_address(0), CA_ARGS args); }
#define LOCK(name, params, args, lk, sure) LOCKING(name, params, args, lk, sure, r == 0 || r == EOWNERDEAD, _ca_lockset_enter(site))
#define UNLOCK(name, params, args, lk, sure) LOCKING(name, params, args, lk, sure, r == 0, _ca_lockset_leave())
/* glibc's default (timed) and adaptive mutexes: lock cannot fail, and unlock does not check the
   owner (error-checking, recursive, robust, PI and PP mutexes can refuse: those are checked) */
static inline bool plain(const pthread_mutex_t* m) {
#ifdef __GLIBC__
  int k = __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED) & 0x7f;
  return k == PTHREAD_MUTEX_TIMED_NP || k == PTHREAD_MUTEX_ADAPTIVE_NP;
#else
  (void)m;
  return false;
#endif
}
__thread ca_lockset_thread_t _ca_lockset __attribute__((tls_model("initial-exec")));
uint8_t _ca_lockset_flavour;
uint32_t _ca_lockset_nest;
_Atomic(bool) _ca_lockset_nested;
/* a thread's first lock set: its heap of the lock sets' flavour, started now if the thread has
   no heap yet (`to` stays NULL, and the next entry comes here again, only when out of memory) */
void _ca_lockset_first(const void* site) {
  ca_lockset_thread_t* t = &_ca_lockset;
  t->depth = 1;
  t->site = site;
  if (t->deepest == 0) t->deepest = 1;
  if (_ca_lockset_nest == 1) atomic_store_explicit(&_ca_lockset_nested, true, memory_order_relaxed);
  struct ca_heap_s* to = _ca_heap_divert(_ca_lockset_flavour);
  if (to != _ca_heap) t->to = to;
}

LOCK(pthread_mutex_lock, (pthread_mutex_t* m), (m), m, plain(m) && _ca_lockset_known())
LOCK(pthread_mutex_trylock, (pthread_mutex_t* m), (m), m, false)
LOCK(pthread_mutex_timedlock, (pthread_mutex_t* m, const struct timespec* t), (m, t), m, false)
LOCK(pthread_mutex_clocklock, (pthread_mutex_t* m, clockid_t k, const struct timespec* t), (m, k, t), m, false)
UNLOCK(pthread_mutex_unlock, (pthread_mutex_t* m), (m), m, plain(m))
LOCK(pthread_rwlock_rdlock, (pthread_rwlock_t* l), (l), l, false)
LOCK(pthread_rwlock_wrlock, (pthread_rwlock_t* l), (l), l, false)
LOCK(pthread_rwlock_tryrdlock, (pthread_rwlock_t* l), (l), l, false)
LOCK(pthread_rwlock_trywrlock, (pthread_rwlock_t* l), (l), l, false)
LOCK(pthread_rwlock_timedrdlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), l, false)
LOCK(pthread_rwlock_timedwrlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), l, false)
LOCK(pthread_rwlock_clockrdlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), l, false)
LOCK(pthread_rwlock_clockwrlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), l, false)
UNLOCK(pthread_rwlock_unlock, (pthread_rwlock_t* l), (l), l, false)
/* a condition wait lets the mutex go and takes it again: the depth is as before */
SYNC(pthread_cond_wait, (pthread_cond_t* c, pthread_mutex_t* m), (c, m), word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_cond_timedwait, (pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* t), (c, m, t), word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_cond_clockwait, (pthread_cond_t* c, pthread_mutex_t* m, clockid_t k, const struct timespec* t), (c, m, k, t),
     word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_cond_signal, (pthread_cond_t* c), (c), word(c, sizeof *c))
SYNC(pthread_cond_broadcast, (pthread_cond_t* c), (c), word(c, sizeof *c))
SYNC(pthread_barrier_wait, (pthread_barrier_t* b), (b), word(b, sizeof *b))
SYNC(sem_wait, (sem_t* s), (s), word(s, sizeof *s))
SYNC(sem_timedwait, (sem_t* s, const struct timespec* t), (s, t), word(s, sizeof *s))
SYNC(sem_post, (sem_t* s), (s), word(s, sizeof *s))
SYNC(sem_clockwait, (sem_t* s, clockid_t k, const struct timespec* t), (s, k, t), word(s, sizeof *s))

/* ---- asynchronous kernel I/O --------------------------------------------------------------
   io_uring and Linux aio let the kernel read and write the program's buffers after the call
   that named them has returned, where no interposed call can open them first (a raw io_uring
   read into a sampled page came back short, 4096 of 65536 bytes); glibc's POSIX aio does the
   I/O from threads of its own through internal calls.  A process that sets any of them up gets
   no more traps: sampled pages are opened and dropped, protection records and moves nothing
   more, no chunk is switched (statistics: monitor.async_io).  Seen through syscall(), libaio,
   liburing's shared library and glibc's aio_*; a program that makes the system call by itself
   (liburing linked statically) is seen later, by its rings' mappings (monitor.c, async_mapped). */
static _Atomic(bool) async_io;
bool _ca_async_io(void) { return atomic_load_explicit(&async_io, ca_relaxed); }
void _ca_async_io_begins(void) {
  if (atomic_exchange_explicit(&async_io, true, ca_acq_rel)) return;
  _ca_monitor_stop_traps();
  _ca_protect_stop();
}
#define ASYNC(ret, name, params, args) \
  ca_interpose ret name params { _ca_async_io_begins(); ret (*f_) params = NEXT(ret (*) params, name); return f_ != NULL ? f_ args : -ENOSYS; }
ASYNC(int, io_setup, (unsigned n, void** ctx), (n, ctx))
ASYNC(int, io_queue_init, (int n, void** ctx), (n, ctx))
ASYNC(int, io_uring_setup, (unsigned n, void* params), (n, params))
ASYNC(int, io_uring_queue_init, (unsigned n, void* ring, unsigned fl), (n, ring, fl))
ASYNC(int, io_uring_queue_init_params, (unsigned n, void* ring, void* params), (n, ring, params))
#define POSIX_AIO(name, params, args) \
  ca_interpose int name params { _ca_async_io_begins(); return NEXT(int (*) params, name) args; }
POSIX_AIO(aio_read, (struct aiocb* cb), (cb))
POSIX_AIO(aio_write, (struct aiocb* cb), (cb))
POSIX_AIO(aio_read64, (struct aiocb64* cb), (cb))
POSIX_AIO(aio_write64, (struct aiocb64* cb), (cb))
POSIX_AIO(lio_listio, (int mode, struct aiocb* const list[], int n, struct sigevent* sev), (mode, list, n, sev))
POSIX_AIO(lio_listio64, (int mode, struct aiocb64* const list[], int n, struct sigevent* sev), (mode, list, n, sev))

