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
   (locks.h) */
#define LOCK(name, params, args, lk) \
  ca_interpose int name params { word(lk, sizeof *lk); int r = NEXT(int (*) params, name) args; \
    if (r == 0 || r == EOWNERDEAD) { _ca_lockset_enter(__builtin_return_address(0)); } return r; }
#define UNLOCK(name, params, args, lk) \
  ca_interpose int name params { word(lk, sizeof *lk); int r = NEXT(int (*) params, name) args; \
    if (r == 0) { _ca_lockset_leave(); } return r; }
__thread ca_lockset_thread_t _ca_lockset __attribute__((tls_model("initial-exec")));
uint8_t _ca_lockset_flavour;
/* kept only once the thread has a heap (a thread's first allocation, diverted or not, makes it) */
void _ca_lockset_first(uint8_t flavour) {
  _ca_lockset.deepest = 1;
  struct ca_heap_s* to = _ca_heap_divert(flavour);
  if (to != _ca_heap) _ca_lockset.to = to;
}

LOCK(pthread_mutex_lock, (pthread_mutex_t* m), (m), m)
LOCK(pthread_mutex_trylock, (pthread_mutex_t* m), (m), m)
LOCK(pthread_mutex_timedlock, (pthread_mutex_t* m, const struct timespec* t), (m, t), m)
LOCK(pthread_mutex_clocklock, (pthread_mutex_t* m, clockid_t k, const struct timespec* t), (m, k, t), m)
UNLOCK(pthread_mutex_unlock, (pthread_mutex_t* m), (m), m)
LOCK(pthread_rwlock_rdlock, (pthread_rwlock_t* l), (l), l)
LOCK(pthread_rwlock_wrlock, (pthread_rwlock_t* l), (l), l)
LOCK(pthread_rwlock_tryrdlock, (pthread_rwlock_t* l), (l), l)
LOCK(pthread_rwlock_trywrlock, (pthread_rwlock_t* l), (l), l)
LOCK(pthread_rwlock_timedrdlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), l)
LOCK(pthread_rwlock_timedwrlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), l)
LOCK(pthread_rwlock_clockrdlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), l)
LOCK(pthread_rwlock_clockwrlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), l)
UNLOCK(pthread_rwlock_unlock, (pthread_rwlock_t* l), (l), l)
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

