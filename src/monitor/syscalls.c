/* System calls on sampled pages.  A page the monitor samples is PROT_NONE between references;
   the program's own loads and stores fault into our handler and go on, but the kernel touching
   it for a system call would return EFAULT instead.  So the calls that take a user buffer are
   interposed: the buffer's sampled pages are made accessible and dropped from the sample
   (_ca_monitor_release) before the real call.  With no chunk being monitored this costs one
   atomic load per call.

   Covered: read pread pread64 readv preadv write pwrite pwrite64 writev pwritev recv recvfrom
   recvmsg send sendto sendmsg, the stdio calls that read into or write from the caller's buffer
   directly (fread fread_unlocked fwrite fwrite_unlocked), their _FORTIFY_SOURCE forms
   (__read_chk __pread64_chk __recv_chk __recvfrom_chk __fread_chk), and the program changing
   its own memory: mprotect munmap madvise (a sampled page would otherwise be re-protected by
   the monitor after the program made it read-only, or vice versa).

   The real functions: glibc's public aliases where it has them (__read, __write, __pread64,
   __pwrite64, __send), else dlsym(RTLD_NEXT) on first use - never during allocator start-up. */
#define _GNU_SOURCE
#include "monitor.h"
#include "../core/internal.h"
#include <dlfcn.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define ca_export __attribute__((visibility("default")))

#pragma GCC visibility push(default)
extern ssize_t __read(int fd, void* buf, size_t n);
extern ssize_t __write(int fd, const void* buf, size_t n);
extern ssize_t __pread64(int fd, void* buf, size_t n, off_t off);
extern ssize_t __pwrite64(int fd, const void* buf, size_t n, off_t off);
extern ssize_t __send(int fd, const void* buf, size_t n, int flags);
#pragma GCC visibility pop

static inline void release(const void* p, size_t n) { _ca_monitor_release(p, n); }


static void release_iov(const struct iovec* iov, int cnt) {
  if (!_ca_monitor_active() || iov == NULL) return;
  for (int i = 0; i < cnt; i++) release(iov[i].iov_base, iov[i].iov_len);
}
static void release_msg(const struct msghdr* m) { if (m != NULL) release_iov(m->msg_iov, (int)m->msg_iovlen); }

/* the next definition of `name`, looked up once */
#define NEXT(type, name) ({ static _Atomic(type) f_; type f = atomic_load_explicit(&f_, ca_relaxed); \
    if (f == NULL) { f = (type)dlsym(RTLD_NEXT, #name); atomic_store_explicit(&f_, f, ca_relaxed); } f; })

ca_export ssize_t read(int fd, void* buf, size_t n) { release(buf, n); return __read(fd, buf, n); }
ca_export ssize_t write(int fd, const void* buf, size_t n) { release(buf, n); return __write(fd, buf, n); }
ca_export ssize_t pread(int fd, void* buf, size_t n, off_t off) { release(buf, n); return __pread64(fd, buf, n, off); }
ca_export ssize_t pread64(int fd, void* buf, size_t n, off_t off) { release(buf, n); return __pread64(fd, buf, n, off); }
ca_export ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) { release(buf, n); return __pwrite64(fd, buf, n, off); }
ca_export ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { release(buf, n); return __pwrite64(fd, buf, n, off); }
ca_export ssize_t send(int fd, const void* buf, size_t n, int flags) { release(buf, n); return __send(fd, buf, n, flags); }

typedef ssize_t (*iov_fn)(int, const struct iovec*, int);
typedef ssize_t (*piov_fn)(int, const struct iovec*, int, off_t);
ca_export ssize_t readv(int fd, const struct iovec* v, int c) { release_iov(v, c); return NEXT(iov_fn, readv)(fd, v, c); }
ca_export ssize_t writev(int fd, const struct iovec* v, int c) { release_iov(v, c); return NEXT(iov_fn, writev)(fd, v, c); }
ca_export ssize_t preadv(int fd, const struct iovec* v, int c, off_t o) { release_iov(v, c); return NEXT(piov_fn, preadv)(fd, v, c, o); }
ca_export ssize_t pwritev(int fd, const struct iovec* v, int c, off_t o) { release_iov(v, c); return NEXT(piov_fn, pwritev)(fd, v, c, o); }

typedef ssize_t (*recv_fn)(int, void*, size_t, int);
typedef ssize_t (*recvfrom_fn)(int, void*, size_t, int, struct sockaddr*, socklen_t*);
typedef ssize_t (*sendto_fn)(int, const void*, size_t, int, const struct sockaddr*, socklen_t);
typedef ssize_t (*msg_fn)(int, struct msghdr*, int);
typedef ssize_t (*cmsg_fn)(int, const struct msghdr*, int);
ca_export ssize_t recv(int fd, void* b, size_t n, int fl) { release(b, n); return NEXT(recv_fn, recv)(fd, b, n, fl); }
ca_export ssize_t recvfrom(int fd, void* b, size_t n, int fl, struct sockaddr* a, socklen_t* al) {
  release(b, n); return NEXT(recvfrom_fn, recvfrom)(fd, b, n, fl, a, al);
}
ca_export ssize_t sendto(int fd, const void* b, size_t n, int fl, const struct sockaddr* a, socklen_t al) {
  release(b, n); return NEXT(sendto_fn, sendto)(fd, b, n, fl, a, al);
}
ca_export ssize_t recvmsg(int fd, struct msghdr* m, int fl) { release_msg(m); return NEXT(msg_fn, recvmsg)(fd, m, fl); }
ca_export ssize_t sendmsg(int fd, const struct msghdr* m, int fl) { release_msg(m); return NEXT(cmsg_fn, sendmsg)(fd, m, fl); }

#undef fread_unlocked
#undef fwrite_unlocked
typedef size_t (*fread_fn)(void*, size_t, size_t, FILE*);
typedef size_t (*fwrite_fn)(const void*, size_t, size_t, FILE*);
static size_t bytes_of(size_t size, size_t count) { size_t n; return __builtin_mul_overflow(size, count, &n) ? SIZE_MAX : n; }
ca_export size_t fread(void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fread_fn, fread)(p, s, c, f); }
ca_export size_t fread_unlocked(void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fread_fn, fread_unlocked)(p, s, c, f); }
ca_export size_t fwrite(const void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fwrite_fn, fwrite)(p, s, c, f); }
ca_export size_t fwrite_unlocked(const void* p, size_t s, size_t c, FILE* f) { release(p, bytes_of(s, c)); return NEXT(fwrite_fn, fwrite_unlocked)(p, s, c, f); }

typedef ssize_t (*read_chk_fn)(int, void*, size_t, size_t);
typedef ssize_t (*pread_chk_fn)(int, void*, size_t, off_t, size_t);
typedef ssize_t (*recv_chk_fn)(int, void*, size_t, size_t, int);
typedef ssize_t (*recvfrom_chk_fn)(int, void*, size_t, size_t, int, struct sockaddr*, socklen_t*);
typedef size_t (*fread_chk_fn)(void*, size_t, size_t, size_t, FILE*);
ca_export ssize_t __read_chk(int fd, void* b, size_t n, size_t bl) { release(b, n); return NEXT(read_chk_fn, __read_chk)(fd, b, n, bl); }
ca_export ssize_t __pread64_chk(int fd, void* b, size_t n, off_t o, size_t bl) { release(b, n); return NEXT(pread_chk_fn, __pread64_chk)(fd, b, n, o, bl); }
ca_export ssize_t __recv_chk(int fd, void* b, size_t n, size_t bl, int fl) { release(b, n); return NEXT(recv_chk_fn, __recv_chk)(fd, b, n, bl, fl); }
ca_export ssize_t __recvfrom_chk(int fd, void* b, size_t n, size_t bl, int fl, struct sockaddr* a, socklen_t* al) {
  release(b, n); return NEXT(recvfrom_chk_fn, __recvfrom_chk)(fd, b, n, bl, fl, a, al);
}
ca_export size_t __fread_chk(void* p, size_t bs, size_t s, size_t c, FILE* f) {
  release(p, bytes_of(s, c)); return NEXT(fread_chk_fn, __fread_chk)(p, bs, s, c, f);
}

/* the program's own protection changes: raw system calls, so chromalloc's own calls (which
   also land here) never wait on the monitor */
static int sys_result(long r) { if (r < 0) { errno = (int)-r; return -1; } return (int)r; }
ca_export int mprotect(void* p, size_t n, int prot) { release(p, n); return sys_result(_ca_syscall6(SYS_mprotect, (long)p, (long)n, prot, 0, 0, 0)); }
ca_export int munmap(void* p, size_t n) { release(p, n); return sys_result(_ca_syscall6(SYS_munmap, (long)p, (long)n, 0, 0, 0, 0)); }
ca_export int madvise(void* p, size_t n, int advice) { release(p, n); return sys_result(_ca_syscall6(SYS_madvise, (long)p, (long)n, advice, 0, 0, 0)); }
