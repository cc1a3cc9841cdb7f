/* OS interface: the only file that talks to the kernel for the core (memory, files, the clock,
   the random source, stderr), through its own system-call stub and the vDSO's clock, never a
   libc function the cache runtime interposes (it wraps open, read, write, clock_gettime ... for
   its sampled pages: the core's own calls must not go through it).  Every helper keeps errno as
   the caller left it, except _ca_os_map which reports ENOMEM, so free() never changes errno.
   Nothing here allocates. */
#define _GNU_SOURCE
#include "internal.h"
#include "buf.h"
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <stdarg.h>
#include <elf.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

/* chromalloc's own system calls: the kernel's result (-errno on failure), errno untouched.  The
   program's munmap, madvise and mprotect are interposed for the locality monitor
   (monitor/syscalls.c), whose lock must never be taken under the core's locks: chromalloc's own
   calls go straight to the kernel. */
#if defined(__x86_64__)
long _ca_syscall6(long nr, long a, long b, long c, long d, long e, long f) {
  register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return r;
}
#else
long _ca_syscall6(long nr, long a, long b, long c, long d, long e, long f) {
  int saved = errno;
  long r = syscall(nr, a, b, c, d, e, f);
  if (r == -1) r = -errno;
  errno = saved;
  return r;
}
#endif

static int sys_munmap(void* p, size_t n) { return (int)_ca_syscall6(SYS_munmap, (long)p, (long)n, 0, 0, 0, 0); }
static int sys_madvise(void* p, size_t n, int advice) { return (int)_ca_syscall6(SYS_madvise, (long)p, (long)n, advice, 0, 0, 0); }
static void* sys_mremap(void* p, size_t old, size_t n, int flags, void* to) {
  long r = _ca_syscall6(SYS_mremap, (long)p, (long)old, (long)n, flags, (long)to, 0);
  return r < 0 && r > -4096 ? MAP_FAILED : (void*)r;
}

void* _ca_os_map(size_t size) {
  long r = _ca_syscall6(SYS_mmap, 0, (long)size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r < 0 && r > -4096) { errno = ENOMEM; return NULL; }
  return (void*)r;
}

/* Map `size` bytes aligned to `align` (a power of two >= page): over-map, then trim both ends. */
void* _ca_os_map_aligned(size_t size, size_t align) {
  if (size + align < size) { errno = ENOMEM; return NULL; }
  uint8_t* p = _ca_os_map(size + align);
  if (p == NULL) return NULL;
  uint8_t* a = (uint8_t*)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
  if (a > p) sys_munmap(p, (size_t)(a - p));
  size_t tail = (size_t)((p + size + align) - (a + size));
  if (tail > 0) sys_munmap(a + size, tail);
  return a;
}

/* Map `size` bytes at `want` if that range is free (MAP_FIXED_NOREPLACE; a kernel that does not
   know the flag treats `want` as a hint, so the address is checked), else NULL. */
void* _ca_os_map_at(void* want, size_t size) {
  long r = _ca_syscall6(SYS_mmap, (long)want, (long)size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (r < 0 && r > -4096) return NULL;
  if ((void*)r != want) { sys_munmap((void*)r, size); return NULL; }
  return want;
}

/* Grow a 2 MiB-aligned mapping to `size` bytes: in place if the address space after it is free,
   else moved (not copied) into a fresh aligned range.  NULL when neither works. */
void* _ca_os_remap(void* p, size_t old_size, size_t size) {
  void* q = sys_mremap(p, old_size, size, 0, NULL);
  if (q != MAP_FAILED) return q;
  int e = errno;
  uint8_t* target = _ca_os_map_aligned(size, (size_t)1 << 21);
  errno = e;
  if (target == NULL || ((uintptr_t)target >> 47) != 0) {
    if (target) sys_munmap(target, size);
    return NULL;
  }
  q = sys_mremap(p, old_size, size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  if (q == MAP_FAILED) { sys_munmap(target, size); return NULL; }
  return q;
}

/* Move `size` bytes of pages from `from` to `to` (page aligned), keeping their frames. */
bool _ca_os_move(void* from, void* to, size_t size) {
  return sys_mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to;
}

void _ca_os_unmap(void* p, size_t size) { sys_munmap(p, size); }

/* MADV_DONTNEED fails on locked memory (mlockall: real-time programs): the pages keep their
   bytes, so from then on nothing purged is taken to be zero */
static _Atomic(bool) purge_failed;
bool _ca_os_purge(void* p, size_t size) {
  if (size == 0 || sys_madvise(p, size, MADV_DONTNEED) == 0) return true;
  atomic_store_explicit(&purge_failed, true, memory_order_relaxed);
  return false;
}
bool _ca_os_purges_zero(void) { return !atomic_load_explicit(&purge_failed, memory_order_relaxed); }

void _ca_os_thp(void* p, size_t size, bool on) { sys_madvise(p, size, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); }

/* ---- files ---------------------------------------------------------------------------------- */

int _ca_os_open(const char* path, int flags, int mode) {
  return (int)_ca_syscall6(SYS_openat, AT_FDCWD, (long)path, flags | O_CLOEXEC, mode, 0, 0);
}
long _ca_os_read(int fd, void* buf, size_t n) { return _ca_syscall6(SYS_read, fd, (long)buf, (long)n, 0, 0, 0); }
long _ca_os_write(int fd, const void* buf, size_t n) { return _ca_syscall6(SYS_write, fd, (long)buf, (long)n, 0, 0, 0); }
void _ca_os_close(int fd) { _ca_syscall6(SYS_close, fd, 0, 0, 0, 0, 0); }

/* A descriptor of ours closed in a fork child only if it still is ours: the program may have
   closed it (a daemon closing every descriptor) and opened a file of its own under its number.
   Unknown (no /proc): left open, since exec closes it (O_CLOEXEC). */
void _ca_os_close_ours(int fd, const char* names) {
  if (fd < 0) return;
  char path[32] = "/proc/self/fd/", link[128], digits[12];
  int k = 0;
  for (unsigned v = (unsigned)fd; k == 0 || v != 0; v /= 10) digits[k++] = (char)('0' + v % 10);
  for (size_t at = strlen(path); k > 0; ) path[at++] = digits[--k];
  long n = _ca_syscall6(SYS_readlinkat, AT_FDCWD, (long)path, (long)link, sizeof link - 1, 0, 0);
  if (n <= 0) return;
  link[n] = 0;
  if (strstr(link, names) != NULL) _ca_os_close(fd);
}

/* Every signal blocked in the calling thread but the two a fault raises (the fault handler must
   still run there), by the system call itself: threads of ours are created under it and inherit
   it, so the program's process-wide signals never run its handlers on them (bash blocks SIGCHLD
   around its own critical sections; a SIGCHLD taken by another thread meanwhile runs its handler
   beside them). */
void _ca_os_signals_block(uint64_t* old) {
  uint64_t all = ~(uint64_t)0 & ~((uint64_t)1 << (SIGSEGV - 1)) & ~((uint64_t)1 << (SIGBUS - 1));
  _ca_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)old, sizeof all, 0, 0);
}
void _ca_os_signals_restore(uint64_t old) { _ca_syscall6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, sizeof old, 0, 0); }

/* A signal this thread blocks has a handler: the thread may be running that handler (a handler
   runs with its own signal blocked), where starting a thread of ours is not safe (pthread_create
   takes locks and allocates).  Blind to handlers installed with SA_NODEFER. */
bool _ca_os_maybe_in_handler(void) {
  uint64_t mask = 0;
  if (_ca_syscall6(SYS_rt_sigprocmask, SIG_BLOCK, 0, (long)&mask, sizeof mask, 0, 0) != 0) return true;
  for (; mask != 0; mask &= mask - 1) {
    struct { uintptr_t handler; unsigned long flags; uintptr_t restorer; uint64_t mask; } k;   /* the kernel's */
    long r = _ca_syscall6(SYS_rt_sigaction, __builtin_ctzll(mask) + 1, 0, (long)&k, sizeof k.mask, 0, 0);
    if (r == 0 && k.handler != (uintptr_t)SIG_DFL && k.handler != (uintptr_t)SIG_IGN) return true;
  }
  return false;
}

/* ---- the clock: the vDSO's clock_gettime, found once in its dynamic symbols ------------------ */

typedef int (*gettime_fn)(clockid_t, struct timespec*);
static _Atomic(gettime_fn) vdso_gettime;
static _Atomic(bool) vdso_looked;

#if defined(__x86_64__) || defined(__aarch64__)
static gettime_fn vdso_lookup(void) {
  uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (base == 0) return NULL;
  const Elf64_Ehdr* eh = (const Elf64_Ehdr*)base;
  const Elf64_Phdr* ph = (const Elf64_Phdr*)(base + eh->e_phoff);
  intptr_t bias = 0;
  bool have_load = false;
  for (int i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_LOAD && !have_load) { bias = (intptr_t)(base + ph[i].p_offset - ph[i].p_vaddr); have_load = true; }
  const Elf64_Shdr* sh = (const Elf64_Shdr*)(base + eh->e_shoff);
  if (!have_load || eh->e_shoff == 0) return NULL;
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_entsize == 0) continue;
    const Elf64_Sym* sym = (const Elf64_Sym*)(base + sh[i].sh_offset);
    const char* names = (const char*)(base + sh[sh[i].sh_link].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sh[i].sh_entsize; k++) {
      const char* n = names + sym[k].st_name;
      if (sym[k].st_shndx != SHN_UNDEF && (strcmp(n, "__vdso_clock_gettime") == 0 || strcmp(n, "__kernel_clock_gettime") == 0))
        return (gettime_fn)(bias + (intptr_t)sym[k].st_value);
    }
  }
  return NULL;
}
#else
static gettime_fn vdso_lookup(void) { return NULL; }
#endif

static bool clock_read(clockid_t clock, struct timespec* t) {
  gettime_fn f = atomic_load_explicit(&vdso_gettime, ca_relaxed);
  if (f == NULL && !atomic_load_explicit(&vdso_looked, ca_acquire)) {
    f = vdso_lookup();
    atomic_store_explicit(&vdso_gettime, f, ca_relaxed);
    atomic_store_explicit(&vdso_looked, true, ca_release);
  }
  if (f != NULL) return f(clock, t) == 0;
  return _ca_syscall6(SYS_clock_gettime, clock, (long)t, 0, 0, 0, 0) == 0;
}

uint64_t _ca_clock_ms(void) {
  struct timespec t = {0, 0};
  clock_read(CLOCK_MONOTONIC_COARSE, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

bool _ca_clock_read_ns(clockid_t clock, uint64_t* ns) {
  struct timespec t;
  if (!clock_read(clock, &t)) return false;
  *ns = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
  return true;
}

uint64_t _ca_clock_ns(void) {
  uint64_t ns = 0;
  _ca_clock_read_ns(CLOCK_MONOTONIC, &ns);
  return ns;
}

void _ca_os_random(void* buf, size_t len) {
  int e = errno;
  if (_ca_syscall6(SYS_getrandom, (long)buf, (long)len, GRND_NONBLOCK, 0, 0, 0) != (long)len) {
    /* no entropy source yet: mix the clock, the stack address and the pid */
    struct timespec t = {0, 0};
    clock_read(CLOCK_MONOTONIC, &t);
    uint64_t x = (uint64_t)t.tv_nsec ^ ((uint64_t)t.tv_sec << 32) ^ (uintptr_t)&t ^ (uint64_t)getpid() << 16;
    uint8_t* b = buf;
    for (size_t i = 0; i < len; i++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      b[i] = (uint8_t)x;
    }
  }
  errno = e;
}

size_t _ca_os_rss_peak(void) {
  struct rusage ru;
  int e = errno;
  size_t r = _ca_syscall6(SYS_getrusage, RUSAGE_SELF, (long)&ru, 0, 0, 0, 0) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0;
  errno = e;
  return r;
}

size_t _ca_os_rss_now(void) {
  int e = errno;
  char buf[128];
  size_t r = 0;
  int fd = _ca_os_open("/proc/self/statm", O_RDONLY, 0);
  if (fd >= 0) {
    long n = _ca_os_read(fd, buf, sizeof buf - 1);
    _ca_os_close(fd);
    if (n > 0) {
      buf[n] = 0;
      const char* q = buf;
      while (*q && *q != ' ') q++;               /* skip total size */
      while (*q == ' ') q++;
      size_t pages = 0;
      while (*q >= '0' && *q <= '9') pages = pages * 10 + (size_t)(*q++ - '0');
      r = pages * (size_t)sysconf(_SC_PAGESIZE);
    }
  }
  errno = e;
  return r;
}

/* ---- messages ----------------------------------------------------------------------------- */

void _ca_write_stderr(const char* msg) {
  int e = errno;
  size_t n = strlen(msg);
  while (n > 0) {
    long w = _ca_os_write(2, msg, n);
    if (w <= 0) break;
    msg += w; n -= (size_t)w;
  }
  errno = e;
}

void _ca_warn(const char* msg) {
  _ca_write_stderr("chromalloc: ");
  _ca_write_stderr(msg);
  _ca_write_stderr("\n");
}

/* One line "chromalloc: <fmt with %p replaced by p>" and abort(): used for heap corruption and
   invalid frees, where continuing would lose data silently. */
_Noreturn void _ca_fatal(const char* fmt, const void* p) {
  char line[256];
  ca_buf_t b = ca_buf(line, sizeof line - 1);
  ca_buf_str(&b, "chromalloc: ");
  for (const char* f = fmt; *f; f++) {
    if (f[0] == '%' && f[1] == 'p') { ca_buf_hex(&b, (uintptr_t)p); f++; }
    else ca_buf_char(&b, *f);
  }
  ca_buf_char(&b, '\n');
  _ca_write_stderr(line);
  abort();
}

/* ---- lock ----------------------------------------------------------------------------------- */

void _ca_lock(ca_lock_t* l) {
  for (int spins = 0;; spins++) {
    int expected = 0;
    if (atomic_load_explicit(&l->v, ca_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(&l->v, &expected, 1, ca_acquire, ca_relaxed)) return;
    if (spins < 64) ca_cpu_relax();
    else _ca_syscall6(SYS_sched_yield, 0, 0, 0, 0, 0, 0);
  }
}
