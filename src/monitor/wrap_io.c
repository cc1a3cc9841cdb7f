/* Interposed calls that read into or write from a buffer: read and write and their vector, socket, stdio and _FORTIFY_SOURCE forms, the program changing its own memory (mprotect munmap madvise), event arrays (wrap.h says what is covered and why). */
#include "wrap.h"

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
