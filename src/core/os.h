/* The core's OS layer (os.c): the only way the allocator reaches the kernel (memory, clocks,
   randomness, messages), and the one small lock type of its rare global paths.  The layers of
   the cache runtime use it too, through hooks.h.  Nothing here allocates, and every helper keeps
   errno as the caller left it, except _ca_os_map, which reports ENOMEM. */
#ifndef CA_OS_H
#define CA_OS_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#pragma GCC visibility push(hidden)

#define ca_likely(x)       __builtin_expect(!!(x), 1)
#define ca_unlikely(x)     __builtin_expect(!!(x), 0)
#define ca_noinline        __attribute__((noinline))
#define ca_cold            __attribute__((noinline, cold))
#define ca_relaxed         memory_order_relaxed
#define ca_acquire         memory_order_acquire
#define ca_release         memory_order_release
#define ca_acq_rel         memory_order_acq_rel

#if defined(__x86_64__) || defined(__i386__)
#define ca_cpu_relax()     __builtin_ia32_pause()
#elif defined(__aarch64__)
#define ca_cpu_relax()     __asm__ volatile("yield")
#else
#define ca_cpu_relax()     ((void)0)
#endif

#define CA_OS_PAGE         ((size_t)4096)

void*    _ca_os_map(size_t size);                           /* NULL + errno ENOMEM on failure */
void*    _ca_os_map_aligned(size_t size, size_t align);
void*    _ca_os_map_at(void* want, size_t size);             /* there or NULL (errno kept) */
void     _ca_os_unmap(void* p, size_t size);
void*    _ca_os_remap(void* p, size_t old_size, size_t size);  /* 2 MiB-aligned result or NULL */
bool     _ca_os_purge(void* p, size_t size);                /* give pages back, keep the range */
bool     _ca_os_purges_zero(void);                         /* no purge has failed: purged pages read zero */
void     _ca_os_thp(void* p, size_t size, bool on);
bool     _ca_os_move(void* from, void* to, size_t size);    /* mremap: pages keep their frames */
/* chromalloc's own system-call stub: the kernel's result, -errno on failure, never a wrapper
   the cache runtime interposes */
long     _ca_syscall6(long nr, long a, long b, long c, long d, long e, long f);
uint64_t _ca_clock_ms(void);                                /* coarse, cheap */
uint64_t _ca_clock_ns(void);
bool     _ca_clock_read_ns(clockid_t clock, uint64_t* ns);  /* any clock (a thread's CPU time) */
void     _ca_os_random(void* buf, size_t len);
int      _ca_os_open(const char* path, int flags, int mode);   /* fd, or -errno (O_CLOEXEC added) */
long     _ca_os_read(int fd, void* buf, size_t n);             /* bytes, or -errno */
long     _ca_os_write(int fd, const void* buf, size_t n);
void     _ca_os_close(int fd);
void     _ca_os_close_ours(int fd, const char* names);     /* only if /proc/self/fd/fd names it still */
void     _ca_os_signals_block(uint64_t* old);                /* all but SIGSEGV, SIGBUS: around creating */
void     _ca_os_signals_restore(uint64_t old);               /* ... a thread of ours */
bool     _ca_os_maybe_in_handler(void);                      /* a blocked signal has a handler */
size_t   _ca_os_rss_peak(void);                             /* bytes, from getrusage */
size_t   _ca_os_rss_now(void);                              /* bytes, from /proc/self/statm */
void     _ca_write_stderr(const char* msg);
_Noreturn void _ca_fatal(const char* fmt, const void* p);   /* "chromalloc: ..." then abort */
void     _ca_warn(const char* msg);                         /* "chromalloc: msg" */

/* the environment variables chromalloc reads, as they were at process start (env.c) */
typedef enum ca_env_e {
  CA_ENV_OPTIONS, CA_ENV_MACHINE, CA_ENV_STATS, CA_ENV_PROFILE, CA_ENV_SETS, CA_ENV_XDG_CACHE_HOME,
  CA_ENV_HOME, CA_ENV_LD_PRELOAD, CA_ENV_THP, CA_ENV_COUNT
} ca_env_t;
void        _ca_env_init(void);                             /* at process start; again: read again */
const char* _ca_env(ca_env_t e);                            /* NULL when unset */

/* a spinlock that yields after a while: for paths taken per segment or per span, never per block */
typedef struct ca_lock_s { _Atomic(int) v; } ca_lock_t;
void _ca_lock(ca_lock_t* l);
static inline void _ca_unlock(ca_lock_t* l) { atomic_store_explicit(&l->v, 0, ca_release); }
static inline bool _ca_try_lock(ca_lock_t* l) {
  int expected = 0;
  return atomic_compare_exchange_strong_explicit(&l->v, &expected, 1, ca_acquire, ca_relaxed);
}
/* fork() child: the lock's holder, if any, is gone */
static inline void _ca_lock_reset(ca_lock_t* l) { atomic_store_explicit(&l->v, 0, ca_relaxed); }

#pragma GCC visibility pop

#endif
