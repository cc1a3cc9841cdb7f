/* Interposed calls that take or fill a small structure, a stack, or arguments nothing describes (ioctl, syscall(), prctl, semctl), and the calls retried only after an EFAULT (clock_gettime, fcntl) (wrap.h says what is covered and why). */
#include "wrap.h"

/* ---- small structures --------------------------------------------------------------------- */
WRAP(int, connect, (int fd, const struct sockaddr* a, socklen_t n), (fd, a, n), release(a, n))
WRAP(int, bind, (int fd, const struct sockaddr* a, socklen_t n), (fd, a, n), release(a, n))
WRAP(int, accept, (int fd, struct sockaddr* a, socklen_t* n), (fd, a, n), small(a); small(n))
WRAP(int, accept4, (int fd, struct sockaddr* a, socklen_t* n, int fl), (fd, a, n, fl), small(a); small(n))
WRAP(int, getsockname, (int fd, struct sockaddr* a, socklen_t* n), (fd, a, n), small(a); small(n))
WRAP(int, getpeername, (int fd, struct sockaddr* a, socklen_t* n), (fd, a, n), small(a); small(n))
WRAP(int, getsockopt, (int fd, int l, int o, void* v, socklen_t* n), (fd, l, o, v, n), small(v); small(n))
WRAP(int, setsockopt, (int fd, int l, int o, const void* v, socklen_t n), (fd, l, o, v, n), release(v, n))
WRAP(int, pipe, (int fds[2]), (fds), small(fds))
WRAP(int, pipe2, (int fds[2], int fl), (fds, fl), small(fds))
WRAP(int, socketpair, (int d, int t, int p, int sv[2]), (d, t, p, sv), small(sv))

/* ---- stacks: the kernel writes signal frames onto an alternate stack, a context switch runs
   on a stack the program allocated: no sampled page (or page being moved) may lie there ---- */
WRAP(int, sigaltstack, (const stack_t* ss, stack_t* old), (ss, old), small(old); if (ss != NULL) release(ss->ss_sp, ss->ss_size))
WRAP(int, pthread_attr_setstack, (pthread_attr_t* a, void* p, size_t n), (a, p, n), release(p, n))
static void context(const ucontext_t* u) { if (u != NULL) { small(u); release(u->uc_stack.ss_sp, u->uc_stack.ss_size); } }
WRAP(int, setcontext, (const ucontext_t* u), (u), context(u))
WRAP(int, swapcontext, (ucontext_t* o, const ucontext_t* u), (o, u), small(o); context(u))

/* ---- small structures the kernel fills ----------------------------------------------------- */
WRAP(ssize_t, sendfile, (int o, int i, off_t* off, size_t n), (o, i, off, n), small(off))
WRAP(ssize_t, sendfile64, (int o, int i, off64_t* off, size_t n), (o, i, off, n), small(off))
WRAP(ssize_t, copy_file_range, (int i, off64_t* oi, int o, off64_t* oo, size_t n, unsigned fl), (i, oi, o, oo, n, fl), small(oi); small(oo))
WRAP(ssize_t, splice, (int i, off64_t* oi, int o, off64_t* oo, size_t n, unsigned fl), (i, oi, o, oo, n, fl), small(oi); small(oo))
WRAP(int, uname, (struct utsname* u), (u), release(u, sizeof *u))
WRAP(int, sysinfo, (struct sysinfo* i), (i), small(i))
WRAP(int, sched_getaffinity, (pid_t pid, size_t n, cpu_set_t* m), (pid, n, m), release(m, n))
WRAP(int, sched_setaffinity, (pid_t pid, size_t n, const cpu_set_t* m), (pid, n, m), release(m, n))
WRAP(int, getrusage, (int who, struct rusage* u), (who, u), small(u))
WRAP(clock_t, times, (struct tms* t), (t), small(t))
WRAP(int, getrlimit, (__rlimit_resource_t r, struct rlimit* l), (r, l), small(l))
WRAP(int, setrlimit, (__rlimit_resource_t r, const struct rlimit* l), (r, l), small(l))
WRAP(int, prlimit, (pid_t pid, __rlimit_resource_t r, const struct rlimit* n, struct rlimit* o), (pid, r, n, o), small(n); small(o))
WRAP(int, statfs, (const char* p, struct statfs* b), (p, b), path(p); small(b))
WRAP(int, fstatfs, (int fd, struct statfs* b), (fd, b), small(b))
WRAP(int, statvfs, (const char* p, struct statvfs* b), (p, b), path(p); small(b))
WRAP(int, fstatvfs, (int fd, struct statvfs* b), (fd, b), small(b))
WRAP(int, statfs64, (const char* p, struct statfs64* b), (p, b), path(p); small(b))
WRAP(int, fstatfs64, (int fd, struct statfs64* b), (fd, b), small(b))
WRAP(int, statvfs64, (const char* p, struct statvfs64* b), (p, b), path(p); small(b))
WRAP(int, fstatvfs64, (int fd, struct statvfs64* b), (fd, b), small(b))
WRAP(int, getrlimit64, (__rlimit_resource_t r, struct rlimit64* l), (r, l), small(l))
WRAP(int, setrlimit64, (__rlimit_resource_t r, const struct rlimit64* l), (r, l), small(l))
WRAP(int, prlimit64, (pid_t pid, __rlimit_resource_t r, const struct rlimit64* n, struct rlimit64* o), (pid, r, n, o), small(n); small(o))
WRAP(pid_t, waitpid, (pid_t pid, int* st, int o), (pid, st, o), small(st))
WRAP(pid_t, wait, (int* st), (st), small(st))
WRAP(pid_t, wait4, (pid_t pid, int* st, int o, struct rusage* u), (pid, st, o, u), small(st); small(u))
WRAP(int, waitid, (idtype_t t, id_t id, siginfo_t* i, int o), (t, id, i, o), small(i))
WRAP(int, nanosleep, (const struct timespec* a, struct timespec* b), (a, b), small(a); small(b))
WRAP(int, clock_nanosleep, (clockid_t c, int fl, const struct timespec* a, struct timespec* b), (c, fl, a, b), small(a); small(b))
WRAP(int, getgroups, (int n, gid_t* g), (n, g), release(g, (size_t)(n > 0 ? n : 0) * sizeof *g))
WRAP(int, getitimer, (__itimer_which_t w, struct itimerval* v), (w, v), small(v))
WRAP(int, setitimer, (__itimer_which_t w, const struct itimerval* v, struct itimerval* o), (w, v, o), small(v); small(o))
WRAP(int, sigpending, (sigset_t* s), (s), small(s))
WRAP(int, sigtimedwait, (const sigset_t* s, siginfo_t* i, const struct timespec* t), (s, i, t), small(s); small(i); small(t))
WRAP(int, sigwaitinfo, (const sigset_t* s, siginfo_t* i), (s, i), small(s); small(i))
/* POSIX timers, thread names and affinities, residency vectors, extended attributes, System V
   semaphores: glibc hands these pointers straight to the kernel (a probe with a chunk's every
   page as the argument: EFAULT from timer_settime, timer_gettime,
   pthread_getname_np, prctl, pthread_getaffinity_np and mincore) */
WRAP(int, timer_settime, (timer_t t, int fl, const struct itimerspec* n, struct itimerspec* o), (t, fl, n, o), small(n); small(o))
WRAP(int, timer_gettime, (timer_t t, struct itimerspec* v), (t, v), small(v))
WRAP(int, pthread_setname_np, (pthread_t t, const char* n), (t, n), string(n))
WRAP(int, pthread_getname_np, (pthread_t t, char* b, size_t n), (t, b, n), release(b, n))
WRAP(int, pthread_setaffinity_np, (pthread_t t, size_t n, const cpu_set_t* m), (t, n, m), release(m, n))
WRAP(int, pthread_getaffinity_np, (pthread_t t, size_t n, cpu_set_t* m), (t, n, m), release(m, n))
WRAP(int, mincore, (void* a, size_t n, unsigned char* v), (a, n, v), release(v, n / CA_OS_PAGE + 1))
WRAP(ssize_t, getxattr, (const char* p, const char* k, void* v, size_t n), (p, k, v, n), path(p); string(k); release(v, n))
WRAP(ssize_t, lgetxattr, (const char* p, const char* k, void* v, size_t n), (p, k, v, n), path(p); string(k); release(v, n))
WRAP(ssize_t, fgetxattr, (int fd, const char* k, void* v, size_t n), (fd, k, v, n), string(k); release(v, n))
WRAP(int, setxattr, (const char* p, const char* k, const void* v, size_t n, int fl), (p, k, v, n, fl), path(p); string(k); release(v, n))
WRAP(int, lsetxattr, (const char* p, const char* k, const void* v, size_t n, int fl), (p, k, v, n, fl), path(p); string(k); release(v, n))
WRAP(int, fsetxattr, (int fd, const char* k, const void* v, size_t n, int fl), (fd, k, v, n, fl), string(k); release(v, n))
WRAP(ssize_t, listxattr, (const char* p, char* l, size_t n), (p, l, n), path(p); release(l, n))
WRAP(ssize_t, llistxattr, (const char* p, char* l, size_t n), (p, l, n), path(p); release(l, n))
WRAP(ssize_t, flistxattr, (int fd, char* l, size_t n), (fd, l, n), release(l, n))
WRAP(int, removexattr, (const char* p, const char* k), (p, k), path(p); string(k))
WRAP(int, lremovexattr, (const char* p, const char* k), (p, k), path(p); string(k))
WRAP(int, fremovexattr, (int fd, const char* k), (fd, k), string(k))
WRAP(int, inotify_add_watch, (int fd, const char* p, uint32_t m), (fd, p, m), path(p))
WRAP(int, memfd_create, (const char* n, unsigned fl), (n, fl), string(n))
WRAP(int, semop, (int id, struct sembuf* o, size_t n), (id, o, n), release(o, n * sizeof *o))
WRAP(int, semtimedop, (int id, struct sembuf* o, size_t n, const struct timespec* t), (id, o, n, t), release(o, n * sizeof *o); small(t))
WRAP(int, msgctl, (int id, int cmd, struct msqid_ds* b), (id, cmd, b), small(b))
WRAP(int, shmctl, (int id, int cmd, struct shmid_ds* b), (id, cmd, b), small(b))
WRAP(int, futimens, (int fd, const struct timespec t[2]), (fd, t), small(t))
WRAP(int, futimes, (int fd, const struct timeval t[2]), (fd, t), small(t))
WRAP(int, lutimes, (const char* p, const struct timeval t[2]), (p, t), path(p); small(t))
WRAP(int, utime, (const char* p, const struct utimbuf* t), (p, t), path(p); small(t))
WRAP(int, mknodat, (int d, const char* p, mode_t m, dev_t dev), (d, p, m, dev), path(p))
WRAP(int, mkfifoat, (int d, const char* p, mode_t m), (d, p, m), path(p))
WRAP(int, sched_getparam, (pid_t pid, struct sched_param* sp), (pid, sp), small(sp))
WRAP(int, sched_setparam, (pid_t pid, const struct sched_param* sp), (pid, sp), small(sp))
WRAP(int, sched_setscheduler, (pid_t pid, int pol, const struct sched_param* sp), (pid, pol, sp), small(sp))
WRAP(int, sched_rr_get_interval, (pid_t pid, struct timespec* t), (pid, t), small(t))
WRAP(int, getresuid, (uid_t* r, uid_t* e, uid_t* s), (r, e, s), small(r); small(e); small(s))
WRAP(int, getresgid, (gid_t* r, gid_t* e, gid_t* s), (r, e, s), small(r); small(e); small(s))
WRAP(int, sigwait, (const sigset_t* set, int* sig), (set, sig), small(set); small(sig))

/* Calls too frequent to release their argument every time, whose kernel side reads or writes
   it before it changes anything: made as they are and, only when they fail with EFAULT while
   chunks are watched, made again after releasing it.  clock_gettime and clock_getres reach the
   kernel for the clocks the vDSO does not serve (the CPU-time clocks, or every clock with a
   clock source the vDSO cannot read); fcntl's lock, owner and hint commands take a structure. */
/* chromalloc reads the clock itself, from the allocator too (its calls land here), so glibc's
   functions are looked up by a constructor, never from inside malloc; until then the system
   call answers */
typedef int (*clock_fn)(clockid_t, struct timespec*);
static clock_fn real_gettime, real_getres;
__attribute__((constructor)) static void resolve_clocks(void) {
  real_gettime = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime");
  real_getres = (clock_fn)dlsym(RTLD_NEXT, "clock_getres");
}
static int clock_call(clock_fn f, long nr, clockid_t c, struct timespec* t) {
  if (ca_unlikely(f == NULL)) return sys_result(_ca_syscall6(nr, c, (long)t, 0, 0, 0, 0));
  return RETRY(f(c, t), small(t));
}
ca_interpose int clock_gettime(clockid_t c, struct timespec* t) { return clock_call(real_gettime, SYS_clock_gettime, c, t); }
ca_interpose int clock_getres(clockid_t c, struct timespec* t) { return clock_call(real_getres, SYS_clock_getres, c, t); }
#define FCNTL(name) \
  ca_interpose int name(int fd, int cmd, ...) { \
    va_list ap; va_start(ap, cmd); unsigned long a = va_arg(ap, unsigned long); va_end(ap); \
    return RETRY(NEXT(int (*)(int, int, ...), name)(fd, cmd, a), small((const void*)a)); }
FCNTL(fcntl)
FCNTL(fcntl64)

/* semctl's fourth argument is a union (a number, or a structure or array the kernel reads or
   fills) */
ca_interpose int semctl(int id, int num, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  unsigned long a = va_arg(ap, unsigned long);
  va_end(ap);
  maybe(a);
  return NEXT(int (*)(int, int, int, ...), semctl)(id, num, cmd, a);
}
/* prctl says nothing of its arguments either (PR_SET_NAME, PR_GET_NAME take a string): as ioctl */
ca_interpose int prctl(int op, ...) {
  va_list ap;
  va_start(ap, op);
  unsigned long a[4];
  for (int i = 0; i < 4; i++) a[i] = va_arg(ap, unsigned long);
  va_end(ap);
  for (int i = 0; i < 4; i++) maybe(a[i]);
  return NEXT(int (*)(int, ...), prctl)(op, a[0], a[1], a[2], a[3]);
}

WRAP(int, getentropy, (void* b, size_t n), (b, n), release(b, n))
WRAP(int, epoll_ctl, (int ep, int op, int fd, struct epoll_event* e), (ep, op, fd, e), small(e))
WRAP(int, msgsnd, (int id, const void* p, size_t n, int fl), (id, p, n, fl), release(p, n + sizeof(long)))
WRAP(ssize_t, msgrcv, (int id, void* p, size_t n, long t, int fl), (id, p, n, t, fl), release(p, n + sizeof(long)))
WRAP(int, __poll_chk, (struct pollfd* f, nfds_t n, int t, size_t fl), (f, n, t, fl), release(f, n * sizeof *f))
WRAP(int, __ppoll_chk, (struct pollfd* f, nfds_t n, const struct timespec* t, const sigset_t* m, size_t fl), (f, n, t, m, fl),
     release(f, n * sizeof *f); small(t); small(m))
WRAP(ssize_t, __pread_chk, (int fd, void* b, size_t n, off_t o, size_t bl), (fd, b, n, o, bl), release(b, n))
WRAP(size_t, __fread_unlocked_chk, (void* p, size_t bs, size_t s, size_t c, FILE* f), (p, bs, s, c, f), release(p, bytes_of(s, c)))
WRAP(FILE*, freopen64, (const char* p, const char* m, FILE* f), (p, m, f), path(p))
WRAP(int, eventfd_read, (int fd, eventfd_t* v), (fd, v), small(v))
WRAP(pid_t, wait3, (int* st, int o, struct rusage* u), (st, o, u), small(st); small(u))
WRAP(int, signalfd, (int fd, const sigset_t* m, int fl), (fd, m, fl), small(m))
WRAP(int, timerfd_settime, (int fd, int fl, const struct itimerspec* n, struct itimerspec* o), (fd, fl, n, o), small(n); small(o))
WRAP(int, timerfd_gettime, (int fd, struct itimerspec* v), (fd, v), small(v))
WRAP(int, sigsuspend, (const sigset_t* m), (m), small(m))


/* ioctl and syscall() say nothing of their arguments: every one that points into a monitored
   chunk releases the rest of that chunk */
ca_interpose int ioctl(int fd, unsigned long req, ...) {
  va_list ap;
  va_start(ap, req);
  uintptr_t arg = va_arg(ap, uintptr_t);
  va_end(ap);
  maybe(arg);
  return NEXT(int (*)(int, unsigned long, ...), ioctl)(fd, req, arg);
}

ca_interpose long syscall(long nr, ...) {
  va_list ap;
  va_start(ap, nr);
  long a[6];
  for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);
  va_end(ap);
  if (nr == SYS_io_setup || nr == SYS_io_uring_setup) _ca_async_io_begins();
  for (int i = 0; i < 6; i++) maybe((uintptr_t)a[i]);
  long r = _ca_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
  if (r < 0 && r > -4096) { errno = (int)-r; return -1; }
  return r;
}
