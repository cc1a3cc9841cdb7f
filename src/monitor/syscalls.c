/* System calls on sampled pages.  A page the monitor samples is PROT_NONE between references;
   the program's own loads and stores fault into our handler and go on, but the kernel touching
   it for a system call would return EFAULT instead.  So the calls that take a user buffer are
   interposed: the buffer's sampled pages are made accessible and dropped from the sample
   (_ca_monitor_release) before the real call.  With no chunk being monitored this costs one
   atomic load per call.

   Covered:
   - buffers: read pread pread64 readv preadv write pwrite pwrite64 writev pwritev recv recvfrom
     recvmsg send sendto sendmsg getdents64 getrandom getcwd readlink readlinkat realpath, the
     stdio calls that read into or write from the caller's buffer directly (fread fwrite and
     their _unlocked forms) or give it to stdio (setvbuf setbuffer setbuf), the _FORTIFY_SOURCE
     forms (__read_chk __pread64_chk __recv_chk __recvfrom_chk __fread_chk __getcwd_chk
     __readlink_chk __realpath_chk), event arrays (poll ppoll epoll_wait epoll_pwait select);
   - paths (the PATH_MAX bytes from the string's start): open open64 openat openat64 creat
     __open_2 __open64_2 __openat_2 __openat64_2 fopen fopen64 freopen opendir stat stat64 lstat
     lstat64 fstatat fstatat64 statx __xstat __lxstat __fxstatat (and their 64-bit forms) access
     faccessat euidaccess unlink unlinkat rename renameat renameat2 mkdir mkdirat rmdir chdir
     chmod fchmodat chown lchown fchownat link linkat symlink symlinkat truncate utimensat
     utimes mknod mkfifo, and exec: execve execv execvp execvpe fexecve execveat posix_spawn
     posix_spawnp (path, argument and environment strings; `environ` where the call uses it);
   - small structures (a page from the pointer): fstat fstat64 __fxstat connect bind accept
     accept4 getsockname getpeername getsockopt setsockopt pipe pipe2 socketpair, and ioctl and
     syscall() (every argument that points into a monitored chunk: the rest of that chunk);
   - the program changing its own memory: mprotect munmap madvise (a sampled page would
     otherwise be re-protected by the monitor after the program made it read-only, or vice
     versa);
   - stacks the kernel or a context switch runs on: sigaltstack pthread_attr_setstack
     setcontext swapcontext; more vectors: preadv2 pwritev2 (and the _FILE_OFFSET_BITS=64 names:
     preadv64 pwritev64 preadv64v2 pwritev64v2, statfs64, rlimit64...) vmsplice process_vm_readv
     process_vm_writev; exec arguments of any length;
   - getentropy epoll_ctl msgsnd msgrcv eventfd_read signalfd timerfd_settime/gettime wait3
     sigsuspend, the fortified __poll_chk __ppoll_chk __pread_chk __fread_unlocked_chk,
     freopen64; commands of system and popen (and `environ`); execl execlp execle (their
     vector is built here and goes through execve/execvp);
   - timer_settime timer_gettime pthread_setname_np pthread_getname_np pthread_setaffinity_np
     pthread_getaffinity_np mincore, the extended attributes (getxattr setxattr listxattr
     removexattr and their l- and f- forms), inotify_add_watch memfd_create semop semtimedop
     msgctl shmctl futimens futimes lutimes utime mknodat mkfifoat sched_getparam
     sched_setparam sched_setscheduler sched_rr_get_interval getresuid getresgid sigwait, and
     prctl and semctl (as ioctl); clock_gettime clock_getres fcntl fcntl64 only after an
     EFAULT (below);
   - the printf family (printf fprintf dprintf and their v- and _chk forms), the err/warn
     family (warn warnx err errx and their v-forms), perror psignal psiginfo: the format and its
     string arguments, within monitored chunks; error and error_at_line (formatted here, below);
   - asynchronous kernel I/O (io_uring, Linux aio, glibc's POSIX aio): no more traps at all
     once a process sets it up (below).
   Not covered: system calls glibc makes internally on the program's memory from functions not
   listed: the monitor never samples chunks whose call site is in glibc, and such buffers in a
   sampled page of a program's chunk would see EFAULT; another process reading ours (ptrace, a
   debugger).

   The real functions: glibc's public aliases where it has them (__read, __write, __pread64,
   __pwrite64, __send), else dlsym(RTLD_NEXT) on first use - never during allocator start-up. */
#define _GNU_SOURCE
#include "monitor.h"
#include "next.h"
#include "../core/hooks.h"
#include "../color/colour.h"
#include <dirent.h>
#include <dlfcn.h>
#include <err.h>
#include <error.h>
#include <signal.h>
#include <fcntl.h>
#include <aio.h>
#include <poll.h>
#include <printf.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/msg.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/xattr.h>
#include <utime.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <sys/sysinfo.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <sys/vfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sched.h>
#include <semaphore.h>
#include <ucontext.h>
#include <unistd.h>

#pragma GCC visibility push(default)
extern ssize_t __read(int fd, void* buf, size_t n);
extern ssize_t __write(int fd, const void* buf, size_t n);
extern ssize_t __pread64(int fd, void* buf, size_t n, off_t off);
extern ssize_t __pwrite64(int fd, const void* buf, size_t n, off_t off);
extern ssize_t __send(int fd, const void* buf, size_t n, int flags);
#pragma GCC visibility pop

/* the monitor's sampled pages, and protection's ranges (a page being recoloured is briefly
   read-only), in [p, p + n) */
static inline void release(const void* p, size_t n) { _ca_monitor_release(p, n); _ca_protect_release(p, n); }
static inline bool watching(void) { return _ca_monitor_active() || _ca_protect_recorded(); }


static void release_iov(const struct iovec* iov, int cnt) {
  if (!watching() || iov == NULL || cnt <= 0) return;
  release(iov, (size_t)cnt * sizeof *iov);                  /* the kernel reads the vector too */
  for (int i = 0; i < cnt; i++) release(iov[i].iov_base, iov[i].iov_len);
}
static void release_msg(const struct msghdr* m) {
  if (m == NULL || !watching()) return;
  release(m, sizeof *m);
  release_iov(m->msg_iov, (int)m->msg_iovlen);
  release(m->msg_name, m->msg_namelen);
  release(m->msg_control, m->msg_controllen);
}


#define PATH_BYTES 4096                       /* PATH_MAX: a path is released whole */
static inline void path(const char* p) { if (p != NULL) release(p, PATH_BYTES); }
static inline void small(const void* p) { if (p != NULL) release(p, CA_OS_PAGE); }
/* a string of any length: released page by page up to its NUL (an exec argument of 20000
   bytes reached past PATH_MAX and the kernel read a sampled page: EFAULT); `monitored_only`:
   while its pages lie in monitored chunks, no page outside one read (printf's %.*s) */
static void string_pages(const char* s, bool monitored_only) {
  for (uintptr_t p = (uintptr_t)s; s != NULL && (!monitored_only || _ca_monitor_covers(p));) {
    uintptr_t end = (p & ~(uintptr_t)(CA_OS_PAGE - 1)) + CA_OS_PAGE;
    release((const void*)p, end - p);
    if (memchr((const void*)p, 0, end - p) != NULL) break;
    p = end;
  }
}
static void string(const char* s) { string_pages(s, false); }
static void strings(char* const* v) {
  for (size_t i = 0; v != NULL && i < 65536; i++) { release(&v[i], sizeof v[i]); if (v[i] == NULL) break; string(v[i]); }
}
/* a pointer-sized argument that may point into a monitored chunk: the rest of that chunk */
static inline void maybe(uintptr_t a) { if (_ca_monitor_covers(a)) release((const void*)a, SIZE_MAX - a); }

/* WRAP(ret, name, (params), (args), releases...): release, then call the next `name` */
#define WRAP(ret, name, params, args, ...) \
  ca_interpose ret name params { if (watching()) { __VA_ARGS__; } return NEXT(__typeof__(&name), name) args; }

ca_interpose ssize_t read(int fd, void* buf, size_t n) { release(buf, n); return __read(fd, buf, n); }
ca_interpose ssize_t write(int fd, const void* buf, size_t n) { release(buf, n); return __write(fd, buf, n); }
ca_interpose ssize_t pread(int fd, void* buf, size_t n, off_t off) { release(buf, n); return __pread64(fd, buf, n, off); }
ca_interpose ssize_t pread64(int fd, void* buf, size_t n, off_t off) { release(buf, n); return __pread64(fd, buf, n, off); }
ca_interpose ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) { release(buf, n); return __pwrite64(fd, buf, n, off); }
ca_interpose ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { release(buf, n); return __pwrite64(fd, buf, n, off); }
ca_interpose ssize_t send(int fd, const void* buf, size_t n, int flags) { release(buf, n); return __send(fd, buf, n, flags); }

typedef ssize_t (*iov_fn)(int, const struct iovec*, int);
typedef ssize_t (*piov_fn)(int, const struct iovec*, int, off_t);
ca_interpose ssize_t readv(int fd, const struct iovec* v, int c) { release_iov(v, c); return NEXT(iov_fn, readv)(fd, v, c); }
ca_interpose ssize_t writev(int fd, const struct iovec* v, int c) { release_iov(v, c); return NEXT(iov_fn, writev)(fd, v, c); }
ca_interpose ssize_t preadv(int fd, const struct iovec* v, int c, off_t o) { release_iov(v, c); return NEXT(piov_fn, preadv)(fd, v, c, o); }
ca_interpose ssize_t pwritev(int fd, const struct iovec* v, int c, off_t o) { release_iov(v, c); return NEXT(piov_fn, pwritev)(fd, v, c, o); }

typedef ssize_t (*recv_fn)(int, void*, size_t, int);
typedef ssize_t (*recvfrom_fn)(int, void*, size_t, int, struct sockaddr*, socklen_t*);
typedef ssize_t (*sendto_fn)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);
typedef ssize_t (*msg_fn)(int, struct msghdr*, int);
typedef ssize_t (*cmsg_fn)(int, const struct msghdr*, int);
ca_interpose ssize_t recv(int fd, void* b, size_t n, int fl) { release(b, n); return NEXT(recv_fn, recv)(fd, b, n, fl); }
ca_interpose ssize_t recvfrom(int fd, void* b, size_t n, int fl, struct sockaddr* a, socklen_t* al) {
  release(b, n); return NEXT(recvfrom_fn, recvfrom)(fd, b, n, fl, a, al);
}
ca_interpose ssize_t sendto(int fd, const void* b, size_t n, int fl, const struct sockaddr* a, socklen_t al) {
  release(b, n); return NEXT(sendto_fn, sendto)(fd, b, n, fl, a, al);
}
ca_interpose ssize_t recvmsg(int fd, struct msghdr* m, int fl) { release_msg(m); return NEXT(msg_fn, recvmsg)(fd, m, fl); }
ca_interpose ssize_t sendmsg(int fd, const struct msghdr* m, int fl) { release_msg(m); return NEXT(cmsg_fn, sendmsg)(fd, m, fl); }

#undef fread_unlocked
#undef fwrite_unlocked
typedef size_t (*fread_fn)(void*, size_t, size_t, FILE*);
typedef size_t (*fwrite_fn)(const void*, size_t, size_t, FILE*);
static size_t bytes_of(size_t size, size_t count) { size_t n; return __builtin_mul_overflow(size, count, &n) ? SIZE_MAX : n; }
ca_interpose size_t fread(void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fread_fn, fread)(p, s, c, f); }
ca_interpose size_t fread_unlocked(void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fread_fn, fread_unlocked)(p, s, c, f); }
ca_interpose size_t fwrite(const void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fwrite_fn, fwrite)(p, s, c, f); }
ca_interpose size_t fwrite_unlocked(const void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fwrite_fn, fwrite_unlocked)(p, s, c, f); }

typedef ssize_t (*read_chk_fn)(int, void*, size_t, size_t);
typedef ssize_t (*pread_chk_fn)(int, void*, size_t, off_t, size_t);
typedef ssize_t (*recv_chk_fn)(int, void*, size_t, size_t, int);
typedef ssize_t (*recvfrom_chk_fn)(int, void*, size_t, size_t, int, struct sockaddr*, socklen_t*);
typedef size_t (*fread_chk_fn)(void*, size_t, size_t, size_t, FILE*);
ca_interpose ssize_t __read_chk(int fd, void* b, size_t n, size_t bl) { release(b, n); return NEXT(read_chk_fn, __read_chk)(fd, b, n, bl); }
ca_interpose ssize_t __pread64_chk(int fd, void* b, size_t n, off_t o, size_t bl) { release(b, n); return NEXT(pread_chk_fn, __pread64_chk)(fd, b, n, o, bl); }
ca_interpose ssize_t __recv_chk(int fd, void* b, size_t n, size_t bl, int fl) { release(b, n); return NEXT(recv_chk_fn, __recv_chk)(fd, b, n, bl, fl); }
ca_interpose ssize_t __recvfrom_chk(int fd, void* b, size_t n, size_t bl, int fl, struct sockaddr* a, socklen_t* al) {
  release(b, n); return NEXT(recvfrom_chk_fn, __recvfrom_chk)(fd, b, n, bl, fl, a, al);
}
ca_interpose size_t __fread_chk(void* p, size_t bs, size_t s, size_t c, FILE* f) {
  release(p, bytes_of(s, c)); return NEXT(fread_chk_fn, __fread_chk)(p, bs, s, c, f);
}

/* the program's own protection changes: raw system calls, so chromalloc's own calls (which
   also land here) never wait on the monitor */
static int sys_result(long r) { if (r < 0) { errno = (int)-r; return -1; } return (int)r; }
ca_interpose int mprotect(void* p, size_t n, int prot) { release(p, n); return sys_result(_ca_syscall6(SYS_mprotect, (long)p, (long)n, prot, 0, 0, 0)); }
ca_interpose int munmap(void* p, size_t n) { release(p, n); return sys_result(_ca_syscall6(SYS_munmap, (long)p, (long)n, 0, 0, 0, 0)); }
ca_interpose int madvise(void* p, size_t n, int advice) { release(p, n); return sys_result(_ca_syscall6(SYS_madvise, (long)p, (long)n, advice, 0, 0, 0)); }

/* ---- more buffers ------------------------------------------------------------------------- */
WRAP(ssize_t, getdents64, (int fd, void* b, size_t n), (fd, b, n), release(b, n))
WRAP(ssize_t, getrandom, (void* b, size_t n, unsigned fl), (b, n, fl), release(b, n))
WRAP(char*, getcwd, (char* b, size_t n), (b, n), release(b, n))
WRAP(char*, __getcwd_chk, (char* b, size_t n, size_t bl), (b, n, bl), release(b, n))
WRAP(ssize_t, readlink, (const char* p, char* b, size_t n), (p, b, n), path(p); release(b, n))
WRAP(ssize_t, __readlink_chk, (const char* p, char* b, size_t n, size_t bl), (p, b, n, bl), path(p); release(b, n))
WRAP(ssize_t, readlinkat, (int d, const char* p, char* b, size_t n), (d, p, b, n), path(p); release(b, n))
WRAP(char*, realpath, (const char* p, char* r), (p, r), path(p); path(r))
WRAP(char*, __realpath_chk, (const char* p, char* r, size_t rl), (p, r, rl), path(p); path(r))
WRAP(int, setvbuf, (FILE* f, char* b, int mode, size_t n), (f, b, mode, n), release(b, n))
WRAP(void, setbuffer, (FILE* f, char* b, size_t n), (f, b, n), release(b, n))
WRAP(void, setbuf, (FILE* f, char* b), (f, b), release(b, BUFSIZ))
WRAP(int, poll, (struct pollfd* f, nfds_t n, int t), (f, n, t), release(f, n * sizeof *f))
WRAP(int, ppoll, (struct pollfd* f, nfds_t n, const struct timespec* t, const sigset_t* m), (f, n, t, m), release(f, n * sizeof *f); small(t); small(m))
WRAP(int, epoll_wait, (int fd, struct epoll_event* e, int n, int t), (fd, e, n, t), release(e, (size_t)n * sizeof *e))
WRAP(int, epoll_pwait, (int fd, struct epoll_event* e, int n, int t, const sigset_t* m), (fd, e, n, t, m), release(e, (size_t)n * sizeof *e); small(m))
WRAP(int, select, (int n, fd_set* r, fd_set* w, fd_set* x, struct timeval* t), (n, r, w, x, t), small(r); small(w); small(x); small(t))

/* ---- paths -------------------------------------------------------------------------------- */
/* open and friends take a mode only with O_CREAT or O_TMPFILE */
static mode_t mode_of(int flags, va_list ap) { return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0; }
#define OPEN(name, params, args) \
  ca_interpose int name params { va_list ap; va_start(ap, flags); mode_t mode = mode_of(flags, ap); va_end(ap); \
    path(p); return NEXT(int (*)(), name) args; }
OPEN(open, (const char* p, int flags, ...), (p, flags, mode))
OPEN(open64, (const char* p, int flags, ...), (p, flags, mode))
OPEN(openat, (int d, const char* p, int flags, ...), (d, p, flags, mode))
OPEN(openat64, (int d, const char* p, int flags, ...), (d, p, flags, mode))
WRAP(int, creat, (const char* p, mode_t m), (p, m), path(p))
WRAP(int, __open_2, (const char* p, int fl), (p, fl), path(p))
WRAP(int, __open64_2, (const char* p, int fl), (p, fl), path(p))
WRAP(int, __openat_2, (int d, const char* p, int fl), (d, p, fl), path(p))
WRAP(int, __openat64_2, (int d, const char* p, int fl), (d, p, fl), path(p))
WRAP(FILE*, fopen, (const char* p, const char* m), (p, m), path(p))
WRAP(FILE*, fopen64, (const char* p, const char* m), (p, m), path(p))
WRAP(FILE*, freopen, (const char* p, const char* m, FILE* f), (p, m, f), path(p))
WRAP(DIR*, opendir, (const char* p), (p), path(p))
WRAP(int, stat, (const char* p, struct stat* st), (p, st), path(p); small(st))
WRAP(int, stat64, (const char* p, struct stat64* st), (p, st), path(p); small(st))
WRAP(int, lstat, (const char* p, struct stat* st), (p, st), path(p); small(st))
WRAP(int, lstat64, (const char* p, struct stat64* st), (p, st), path(p); small(st))
WRAP(int, fstatat, (int d, const char* p, struct stat* st, int fl), (d, p, st, fl), path(p); small(st))
WRAP(int, fstatat64, (int d, const char* p, struct stat64* st, int fl), (d, p, st, fl), path(p); small(st))
WRAP(int, fstat, (int fd, struct stat* st), (fd, st), small(st))
WRAP(int, fstat64, (int fd, struct stat64* st), (fd, st), small(st))
WRAP(int, statx, (int d, const char* p, int fl, unsigned m, struct statx* st), (d, p, fl, m, st), path(p); small(st))
/* the stat entry points of binaries built against glibc before 2.33 */
int __xstat(int v, const char* p, struct stat* st);
int __lxstat(int v, const char* p, struct stat* st);
int __fxstat(int v, int fd, struct stat* st);
int __fxstatat(int v, int d, const char* p, struct stat* st, int fl);
int __xstat64(int v, const char* p, struct stat64* st);
int __lxstat64(int v, const char* p, struct stat64* st);
int __fxstat64(int v, int fd, struct stat64* st);
int __fxstatat64(int v, int d, const char* p, struct stat64* st, int fl);
WRAP(int, __xstat, (int v, const char* p, struct stat* st), (v, p, st), path(p); small(st))
WRAP(int, __lxstat, (int v, const char* p, struct stat* st), (v, p, st), path(p); small(st))
WRAP(int, __fxstat, (int v, int fd, struct stat* st), (v, fd, st), small(st))
WRAP(int, __fxstatat, (int v, int d, const char* p, struct stat* st, int fl), (v, d, p, st, fl), path(p); small(st))
WRAP(int, __xstat64, (int v, const char* p, struct stat64* st), (v, p, st), path(p); small(st))
WRAP(int, __lxstat64, (int v, const char* p, struct stat64* st), (v, p, st), path(p); small(st))
WRAP(int, __fxstat64, (int v, int fd, struct stat64* st), (v, fd, st), small(st))
WRAP(int, __fxstatat64, (int v, int d, const char* p, struct stat64* st, int fl), (v, d, p, st, fl), path(p); small(st))
WRAP(int, access, (const char* p, int m), (p, m), path(p))
WRAP(int, faccessat, (int d, const char* p, int m, int fl), (d, p, m, fl), path(p))
WRAP(int, euidaccess, (const char* p, int m), (p, m), path(p))
WRAP(int, unlink, (const char* p), (p), path(p))
WRAP(int, unlinkat, (int d, const char* p, int fl), (d, p, fl), path(p))
WRAP(int, rename, (const char* a, const char* b), (a, b), path(a); path(b))
WRAP(int, renameat, (int da, const char* a, int db, const char* b), (da, a, db, b), path(a); path(b))
WRAP(int, renameat2, (int da, const char* a, int db, const char* b, unsigned fl), (da, a, db, b, fl), path(a); path(b))
WRAP(int, mkdir, (const char* p, mode_t m), (p, m), path(p))
WRAP(int, mkdirat, (int d, const char* p, mode_t m), (d, p, m), path(p))
WRAP(int, rmdir, (const char* p), (p), path(p))
WRAP(int, chdir, (const char* p), (p), path(p))
WRAP(int, chmod, (const char* p, mode_t m), (p, m), path(p))
WRAP(int, fchmodat, (int d, const char* p, mode_t m, int fl), (d, p, m, fl), path(p))
WRAP(int, chown, (const char* p, uid_t u, gid_t g), (p, u, g), path(p))
WRAP(int, lchown, (const char* p, uid_t u, gid_t g), (p, u, g), path(p))
WRAP(int, fchownat, (int d, const char* p, uid_t u, gid_t g, int fl), (d, p, u, g, fl), path(p))
WRAP(int, link, (const char* a, const char* b), (a, b), path(a); path(b))
WRAP(int, linkat, (int da, const char* a, int db, const char* b, int fl), (da, a, db, b, fl), path(a); path(b))
WRAP(int, symlink, (const char* a, const char* b), (a, b), path(a); path(b))
WRAP(int, symlinkat, (const char* a, int d, const char* b), (a, d, b), path(a); path(b))
WRAP(int, truncate, (const char* p, off_t n), (p, n), path(p))
WRAP(int, truncate64, (const char* p, off64_t n), (p, n), path(p))
WRAP(int, creat64, (const char* p, mode_t m), (p, m), path(p))
WRAP(int, utimensat, (int d, const char* p, const struct timespec t[2], int fl), (d, p, t, fl), path(p); small(t))
WRAP(int, utimes, (const char* p, const struct timeval t[2]), (p, t), path(p); small(t))
WRAP(int, mknod, (const char* p, mode_t m, dev_t dev), (p, m, dev), path(p))
WRAP(int, mkfifo, (const char* p, mode_t m), (p, m), path(p))

/* ---- processes ---------------------------------------------------------------------------- */
WRAP(int, execve, (const char* p, char* const* a, char* const* e), (p, a, e), path(p); strings(a); strings(e))
/* execv, execvp, system and popen hand the kernel `environ`, whose strings may be the program's
   own chunks (putenv keeps the caller's string: gcc's COLLECT_GCC_OPTIONS; cc1 failed to start
   with EFAULT in CI) */
extern char** environ;
WRAP(int, execv, (const char* p, char* const* a), (p, a), path(p); strings(a); strings(environ))
WRAP(int, execvp, (const char* p, char* const* a), (p, a), path(p); strings(a); strings(environ))
WRAP(int, execvpe, (const char* p, char* const* a, char* const* e), (p, a, e), path(p); strings(a); strings(e))
WRAP(int, fexecve, (int fd, char* const* a, char* const* e), (fd, a, e), strings(a); strings(e))
WRAP(int, execveat, (int d, const char* p, char* const* a, char* const* e, int fl), (d, p, a, e, fl), path(p); strings(a); strings(e))
WRAP(int, posix_spawn, (pid_t* pid, const char* p, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* at,
     char* const* a, char* const* e), (pid, p, fa, at, a, e), small(pid); path(p); small(fa); small(at); strings(a); strings(e))
WRAP(int, posix_spawnp, (pid_t* pid, const char* p, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* at,
     char* const* a, char* const* e), (pid, p, fa, at, a, e), small(pid); path(p); small(fa); small(at); strings(a); strings(e))

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

/* ---- more vectors ------------------------------------------------------------------------- */
typedef ssize_t (*piov2_fn)(int, const struct iovec*, int, off_t, int);
ca_interpose ssize_t preadv2(int fd, const struct iovec* v, int c, off_t o, int fl) { release_iov(v, c); return NEXT(piov2_fn, preadv2)(fd, v, c, o, fl); }
ca_interpose ssize_t pwritev2(int fd, const struct iovec* v, int c, off_t o, int fl) { release_iov(v, c); return NEXT(piov2_fn, pwritev2)(fd, v, c, o, fl); }
/* the names a program built with _FILE_OFFSET_BITS=64 calls (python3's os.preadv read 16 KiB of 2 MiB) */
ca_interpose ssize_t preadv64(int fd, const struct iovec* v, int c, off64_t o) { release_iov(v, c); return NEXT(piov_fn, preadv64)(fd, v, c, o); }
ca_interpose ssize_t pwritev64(int fd, const struct iovec* v, int c, off64_t o) { release_iov(v, c); return NEXT(piov_fn, pwritev64)(fd, v, c, o); }
ca_interpose ssize_t preadv64v2(int fd, const struct iovec* v, int c, off64_t o, int fl) { release_iov(v, c); return NEXT(piov2_fn, preadv64v2)(fd, v, c, o, fl); }
ca_interpose ssize_t pwritev64v2(int fd, const struct iovec* v, int c, off64_t o, int fl) { release_iov(v, c); return NEXT(piov2_fn, pwritev64v2)(fd, v, c, o, fl); }
WRAP(ssize_t, vmsplice, (int fd, const struct iovec* v, size_t c, unsigned fl), (fd, v, c, fl), release_iov(v, (int)c))
/* the remote vector is ours too when the process names itself */
#define VM_IOV(l, lc, r, rc, pid) release_iov(l, (int)(lc)); if ((pid) == getpid()) release_iov(r, (int)(rc))
WRAP(ssize_t, process_vm_readv, (pid_t pid, const struct iovec* l, unsigned long lc, const struct iovec* r, unsigned long rc, unsigned long fl),
     (pid, l, lc, r, rc, fl), VM_IOV(l, lc, r, rc, pid))
WRAP(ssize_t, process_vm_writev, (pid_t pid, const struct iovec* l, unsigned long lc, const struct iovec* r, unsigned long rc, unsigned long fl),
     (pid, l, lc, r, rc, fl), VM_IOV(l, lc, r, rc, pid))
static void release_mmsg(const struct mmsghdr* m, unsigned n) {
  if (m == NULL) return;
  release(m, (size_t)n * sizeof *m);
  for (unsigned i = 0; i < n; i++) release_msg(&m[i].msg_hdr);
}
WRAP(int, sendmmsg, (int fd, struct mmsghdr* m, unsigned n, int fl), (fd, m, n, fl), release_mmsg(m, n))
WRAP(int, recvmmsg, (int fd, struct mmsghdr* m, unsigned n, int fl, struct timespec* t), (fd, m, n, fl, t), release_mmsg(m, n); small(t))

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
   page as the argument, twentieth session: EFAULT from timer_settime, timer_gettime,
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
#define RETRY(call, ...) ({ int e_ = errno; __typeof__(call) r_ = call; \
    if (r_ < 0 && errno == EFAULT && watching()) { __VA_ARGS__; errno = e_; r_ = call; } r_; })
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

/* commands: glibc runs them through its internal posix_spawn */
WRAP(int, system, (const char* c), (c), string(c); strings(environ))
WRAP(FILE*, popen, (const char* c, const char* m), (c, m), string(c); small(m); strings(environ))

/* execl and friends build their vector and call glibc's internal execve: build it here (on
   the stack, as glibc does) and go through the interposed execve/execvp, which release every
   string */
#define ARGV(v, first, ap) \
  va_list n_; va_copy(n_, ap); size_t count_ = 1; while (va_arg(n_, char*) != NULL) count_++; va_end(n_); \
  char* v[count_ + 1];                           /* `first` (glibc declares it non-null) and the rest */ \
  for (size_t i_ = 0; i_ < count_; i_++) v[i_] = i_ == 0 ? (char*)(first) : va_arg(ap, char*); \
  v[count_] = NULL; \
  (void)va_arg(ap, char*)                        /* the NULL: execle's environment follows it */
ca_interpose int execl(const char* p, const char* a, ...) {
  va_list ap; va_start(ap, a);
  ARGV(v, a, ap);
  va_end(ap);
  return execve(p, v, environ);
}
ca_interpose int execlp(const char* f, const char* a, ...) {
  va_list ap; va_start(ap, a);
  ARGV(v, a, ap);
  va_end(ap);
  return execvp(f, v);
}
ca_interpose int execle(const char* p, const char* a, ...) {
  va_list ap; va_start(ap, a);
  ARGV(v, a, ap);
  char* const* env = va_arg(ap, char* const*);
  va_end(ap);
  return execve(p, v, env);
}

/* stdio functions that may hand a long string to write() directly (an unbuffered stream) */
WRAP(int, fputs, (const char* p, FILE* f), (p, f), string(p))
WRAP(int, fputs_unlocked, (const char* p, FILE* f), (p, f), string(p))
WRAP(int, puts, (const char* p), (p), string(p))

/* The printf family: glibc 2.36's vfprintf hands a piece of output longer than the stream's
   buffer (a long %s, or a long stretch of the format itself) to write() straight from where it
   lies; from a sampled page, write() failed with EFAULT and the output was lost (fprintf of a
   64 KiB string, its chunk's sampled pages protected).  The argument types come from glibc's
   parse_printf_format; each string argument (and the format) has its pages released up to its
   NUL, but only pages of monitored chunks are read for it: a %.*s argument need not end in a
   NUL, and the rest of the chunk is never released (the page a program prints a name from
   stays sampled).  Formats with more than 64 arguments have the first 64 looked at. */
static void printed(const char* s) { string_pages(s, true); }
static void printed_args(const char* fmt, va_list ap) {
  if (!_ca_monitor_active() || fmt == NULL) return;
  printed(fmt);
  int types[64];
  size_t n = parse_printf_format(fmt, 64, types);
  va_list a;
  va_copy(a, ap);
  for (size_t i = 0; i < n && i < 64; i++) {     /* each argument taken as it was passed */
    int t = types[i];
    if (t & PA_FLAG_PTR) { (void)va_arg(a, void*); continue; }
    switch (t & ~PA_FLAG_MASK) {
    case PA_INT:
      if (t & (PA_FLAG_LONG | PA_FLAG_LONG_LONG)) (void)va_arg(a, long long); else (void)va_arg(a, int);
      break;
    case PA_CHAR: case PA_WCHAR: (void)va_arg(a, int); break;
    case PA_STRING: printed(va_arg(a, const char*)); break;
    case PA_WSTRING: case PA_POINTER: (void)va_arg(a, void*); break;
    case PA_FLOAT: case PA_DOUBLE:
      if (t & PA_FLAG_LONG_DOUBLE) (void)va_arg(a, long double); else (void)va_arg(a, double);
      break;
    default: i = n; break;                         /* a type the program registered: stop */
    }
  }
  va_end(a);
}
typedef int (*vfprintf_fn)(FILE*, const char*, va_list);
typedef int (*vdprintf_fn)(int, const char*, va_list);
typedef int (*vfprintf_chk_fn)(FILE*, int, const char*, va_list);
typedef int (*vdprintf_chk_fn)(int, int, const char*, va_list);
int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap);
int __vdprintf_chk(int fd, int flag, const char* fmt, va_list ap);
int __vprintf_chk(int flag, const char* fmt, va_list ap);
int __printf_chk(int flag, const char* fmt, ...);
int __fprintf_chk(FILE* f, int flag, const char* fmt, ...);
int __dprintf_chk(int fd, int flag, const char* fmt, ...);
/* PRINTF(name, params, last, call): the variadic form, through the next v-form */
#define PRINTF(name, params, last, call) \
  ca_interpose int name params { va_list ap; va_start(ap, last); printed_args(fmt, ap); int r_ = call; va_end(ap); return r_; }
PRINTF(printf, (const char* fmt, ...), fmt, NEXT(vfprintf_fn, vfprintf)(stdout, fmt, ap))
PRINTF(fprintf, (FILE* f, const char* fmt, ...), fmt, NEXT(vfprintf_fn, vfprintf)(f, fmt, ap))
PRINTF(dprintf, (int fd, const char* fmt, ...), fmt, NEXT(vdprintf_fn, vdprintf)(fd, fmt, ap))
PRINTF(__printf_chk, (int flag, const char* fmt, ...), fmt, NEXT(vfprintf_chk_fn, __vfprintf_chk)(stdout, flag, fmt, ap))
PRINTF(__fprintf_chk, (FILE* f, int flag, const char* fmt, ...), fmt, NEXT(vfprintf_chk_fn, __vfprintf_chk)(f, flag, fmt, ap))
PRINTF(__dprintf_chk, (int fd, int flag, const char* fmt, ...), fmt, NEXT(vdprintf_chk_fn, __vdprintf_chk)(fd, flag, fmt, ap))
ca_interpose int vprintf(const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_fn, vfprintf)(stdout, fmt, ap); }
ca_interpose int vfprintf(FILE* f, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_fn, vfprintf)(f, fmt, ap); }
ca_interpose int vdprintf(int fd, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vdprintf_fn, vdprintf)(fd, fmt, ap); }
ca_interpose int __vprintf_chk(int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_chk_fn, __vfprintf_chk)(stdout, flag, fmt, ap); }
ca_interpose int __vfprintf_chk(FILE* f, int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vfprintf_chk_fn, __vfprintf_chk)(f, flag, fmt, ap); }
ca_interpose int __vdprintf_chk(int fd, int flag, const char* fmt, va_list ap) { printed_args(fmt, ap); return NEXT(vdprintf_chk_fn, __vdprintf_chk)(fd, flag, fmt, ap); }

/* The err/warn family, perror, psignal and psiginfo: glibc prints them to stderr through its
   own vfprintf, not through the wrappers above, and to a stderr the program made buffered a long
   %s goes to write() straight from where it lies (strace of warnx("<%s>", s) with a 64 KiB s
   after setvbuf(stderr, NULL, _IOFBF, 4096): write(2, s, 65535)).  Unbuffered, as stderr
   starts, glibc copies through a buffer on its stack.  The variadic forms go through the
   v-forms here. */
typedef void (*vwarn_fn)(const char*, va_list);
typedef void (*verr_fn)(int, const char*, va_list);
ca_interpose void vwarn(const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(vwarn_fn, vwarn)(fmt, ap); }
ca_interpose void vwarnx(const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(vwarn_fn, vwarnx)(fmt, ap); }
ca_interpose void verr(int st, const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(verr_fn, verr)(st, fmt, ap); __builtin_unreachable(); }
ca_interpose void verrx(int st, const char* fmt, va_list ap) { printed_args(fmt, ap); NEXT(verr_fn, verrx)(st, fmt, ap); __builtin_unreachable(); }
ca_interpose void warn(const char* fmt, ...) { va_list ap; va_start(ap, fmt); vwarn(fmt, ap); va_end(ap); }
ca_interpose void warnx(const char* fmt, ...) { va_list ap; va_start(ap, fmt); vwarnx(fmt, ap); va_end(ap); }
ca_interpose void err(int st, const char* fmt, ...) { va_list ap; va_start(ap, fmt); verr(st, fmt, ap); }
ca_interpose void errx(int st, const char* fmt, ...) { va_list ap; va_start(ap, fmt); verrx(st, fmt, ap); }
static inline void printed_one(const char* s) { if (_ca_monitor_active()) printed(s); }
ca_interpose void perror(const char* s) { printed_one(s); NEXT(__typeof__(&perror), perror)(s); }
ca_interpose void psignal(int sig, const char* s) { printed_one(s); NEXT(__typeof__(&psignal), psignal)(sig, s); }
ca_interpose void psiginfo(const siginfo_t* info, const char* s) { printed_one(s); NEXT(__typeof__(&psiginfo), psiginfo)(info, s); }

/* error and error_at_line have no v-form in glibc to forward to: the message is formatted here,
   on the stack (on the heap when longer than 1 KiB; its first 1023 bytes when there is no memory
   for that), with the caller's errno for %m, and the real function prints it as "%s".  So glibc
   never writes from the program's pages, and its own part is unchanged: stdout flushed,
   error_print_progname, error_one_per_line, error_message_count, the exit status. */
static char* message(char* buf, size_t cap, const char* fmt, va_list ap) {
  int e = errno;
  va_list a;
  va_copy(a, ap);
  int n = vsnprintf(buf, cap, fmt, a);
  va_end(a);
  char* heap = NULL;
  if (n < 0) buf[0] = 0;
  else if ((size_t)n >= cap) { errno = e; if (vasprintf(&heap, fmt, ap) < 0) heap = NULL; }
  errno = e;
  return heap;
}
ca_interpose void error(int st, int errnum, const char* fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  char* heap = message(buf, sizeof buf, fmt, ap);
  va_end(ap);
  NEXT(__typeof__(&error), error)(st, errnum, "%s", heap != NULL ? heap : buf);
  free(heap);
}
ca_interpose void error_at_line(int st, int errnum, const char* file, unsigned line, const char* fmt, ...) {
  char buf[1024];
  va_list ap; va_start(ap, fmt);
  char* heap = message(buf, sizeof buf, fmt, ap);
  va_end(ap);
  printed_one(file);
  NEXT(__typeof__(&error_at_line), error_at_line)(st, errnum, file, line, "%s", heap != NULL ? heap : buf);
  free(heap);
}

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
SYNC(pthread_mutex_lock, (pthread_mutex_t* m), (m), word(m, sizeof *m))
SYNC(pthread_mutex_unlock, (pthread_mutex_t* m), (m), word(m, sizeof *m))
SYNC(pthread_mutex_timedlock, (pthread_mutex_t* m, const struct timespec* t), (m, t), word(m, sizeof *m))
SYNC(pthread_cond_wait, (pthread_cond_t* c, pthread_mutex_t* m), (c, m), word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_cond_timedwait, (pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* t), (c, m, t), word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_cond_signal, (pthread_cond_t* c), (c), word(c, sizeof *c))
SYNC(pthread_cond_broadcast, (pthread_cond_t* c), (c), word(c, sizeof *c))
SYNC(pthread_rwlock_rdlock, (pthread_rwlock_t* l), (l), word(l, sizeof *l))
SYNC(pthread_rwlock_wrlock, (pthread_rwlock_t* l), (l), word(l, sizeof *l))
SYNC(pthread_rwlock_unlock, (pthread_rwlock_t* l), (l), word(l, sizeof *l))
SYNC(pthread_barrier_wait, (pthread_barrier_t* b), (b), word(b, sizeof *b))
SYNC(sem_wait, (sem_t* s), (s), word(s, sizeof *s))
SYNC(sem_timedwait, (sem_t* s, const struct timespec* t), (s, t), word(s, sizeof *s))
SYNC(sem_post, (sem_t* s), (s), word(s, sizeof *s))
SYNC(pthread_mutex_clocklock, (pthread_mutex_t* m, clockid_t k, const struct timespec* t), (m, k, t), word(m, sizeof *m))
SYNC(pthread_cond_clockwait, (pthread_cond_t* c, pthread_mutex_t* m, clockid_t k, const struct timespec* t), (c, m, k, t),
     word(c, sizeof *c); word(m, sizeof *m))
SYNC(pthread_rwlock_timedrdlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), word(l, sizeof *l))
SYNC(pthread_rwlock_timedwrlock, (pthread_rwlock_t* l, const struct timespec* t), (l, t), word(l, sizeof *l))
SYNC(pthread_rwlock_clockrdlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), word(l, sizeof *l))
SYNC(pthread_rwlock_clockwrlock, (pthread_rwlock_t* l, clockid_t k, const struct timespec* t), (l, k, t), word(l, sizeof *l))
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
