/* Interposed calls that take a path, and exec: open and stat and their families, exec and posix_spawn (their argument and environment strings), system and popen (wrap.h says what is covered and why). */
#include "wrap.h"

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
/* posix_spawn's child runs on the parent's memory with every signal blocked, reading its
   argument and file-action arrays: no range armed for hot pages meanwhile (access.c) */
#define SPAWN(ret, name, params, args, ...) \
  ca_interpose ret name params { if (watching()) { __VA_ARGS__; } _ca_access_hold(true); \
    ret r_ = NEXT(__typeof__(&name), name) args; _ca_access_hold(false); return r_; }
SPAWN(int, posix_spawn, (pid_t* pid, const char* p, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* at,
      char* const* a, char* const* e), (pid, p, fa, at, a, e), small(pid); path(p); small(fa); small(at); strings(a); strings(e))
SPAWN(int, posix_spawnp, (pid_t* pid, const char* p, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* at,
      char* const* a, char* const* e), (pid, p, fa, at, a, e), small(pid); path(p); small(fa); small(at); strings(a); strings(e))

/* commands: glibc runs them through its internal posix_spawn */
SPAWN(int, system, (const char* c), (c), string(c); strings(environ))
SPAWN(FILE*, popen, (const char* c, const char* m), (c, m), string(c); small(m); strings(environ))

/* vfork's child, too, runs on our memory with signals blocked (Python's subprocess), and vfork
   returns twice on one stack: it cannot be wrapped by a function.  An entry in assembly asks
   for quiet and jumps to glibc's; the quiet lasts 100 ms, by when the child has exec'd. */
#if defined(__x86_64__)
void* _ca_vfork_next(void);
void* _ca_vfork_next(void) {
  _ca_access_quiet_for(100000000u);
  return NEXT(void*, vfork);
}
__asm__(".text\n.globl vfork\n.weak vfork\n.type vfork,@function\nvfork:\n"
        "  sub $8, %rsp\n  call _ca_vfork_next\n  add $8, %rsp\n  jmp *%rax\n.size vfork, .-vfork\n");
#endif

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

