/* System calls on sampled pages (the wrap_*.c files, which share this header).  A page the monitor samples is PROT_NONE between references;
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
     posix_spawnp (path, argument and environment strings; `environ` where the call uses it;
     posix_spawn, system, popen and vfork also keep hot pages' traps quiet: access.c);
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
#ifndef CA_WRAP_H
#define CA_WRAP_H
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

/* the monitor's sampled pages, protection's ranges (a page being recoloured is briefly
   read-only) and ranges armed for access bits (access.c), in [p, p + n) */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define CA_ADDRESS_ONLY __attribute__((access(none, 1)))   /* not read: read(2)'s buffer may be unset (gcc -O0 warned) */
#else
#define CA_ADDRESS_ONLY
#endif
static inline CA_ADDRESS_ONLY void release(const void* p, size_t n) { _ca_monitor_release(p, n); _ca_protect_release(p, n); _ca_access_release(p, n); }
static inline bool watching(void) { return _ca_monitor_active() || _ca_protect_recorded() || _ca_access_watching(); }


static inline void release_iov(const struct iovec* iov, int cnt) {
  if (!watching() || iov == NULL || cnt <= 0) return;
  release(iov, (size_t)cnt * sizeof *iov);                  /* the kernel reads the vector too */
  for (int i = 0; i < cnt; i++) release(iov[i].iov_base, iov[i].iov_len);
}
static inline void release_msg(const struct msghdr* m) {
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
static inline void string_pages(const char* s, bool monitored_only) {
  for (uintptr_t p = (uintptr_t)s; s != NULL && (!monitored_only || _ca_monitor_covers(p));) {
    uintptr_t end = (p & ~(uintptr_t)(CA_OS_PAGE - 1)) + CA_OS_PAGE;
    release((const void*)p, end - p);
    if (memchr((const void*)p, 0, end - p) != NULL) break;
    p = end;
  }
}
static inline void string(const char* s) { string_pages(s, false); }
static inline void strings(char* const* v) {
  for (size_t i = 0; v != NULL && i < 65536; i++) { release(&v[i], sizeof v[i]); if (v[i] == NULL) break; string(v[i]); }
}
/* a pointer-sized argument that may point into a monitored chunk: the rest of that chunk */
static inline void maybe(uintptr_t a) { if (_ca_monitor_covers(a) || _ca_access_covers(a)) release((const void*)a, SIZE_MAX - a); }

/* WRAP(ret, name, (params), (args), releases...): release, then call the next `name` */
#define WRAP(ret, name, params, args, ...) \
  ca_interpose ret name params { if (watching()) { __VA_ARGS__; } return NEXT(__typeof__(&name), name) args; }
/* a call retried after releasing its argument, when it failed with EFAULT while watching */
#define RETRY(call, ...) ({ int e_ = errno; __typeof__(call) r_ = call; \
    if (r_ < 0 && errno == EFAULT && watching()) { __VA_ARGS__; errno = e_; r_ = call; } r_; })
static inline int sys_result(long r) { if (r < 0) { errno = (int)-r; return -1; } return (int)r; }
static inline size_t bytes_of(size_t size, size_t count) { size_t n; return __builtin_mul_overflow(size, count, &n) ? SIZE_MAX : n; }

#endif
