/* The locality monitor seen from a program: with every chunk monitored (the test re-executes
   itself with CHROMALLOC_OPTIONS=nightwatch=1,nightwatch_monitor=1; a chunk below the L2 by its
   first page, as a member of its context's group), sampled pages are PROT_NONE between
   references, and still
   - the program's loads, stores and libc memcpy work (faults resolved by chromalloc),
   - system calls given sampled buffers work (no EFAULT): read write readv writev send recv
     fread fwrite pread pwrite, and paths, structures and argument strings in sampled pages:
     open stat lstat access fopen opendir realpath readlink getcwd mkdir rename unlink
     syscall() posix_spawn, and a long string printed by fprintf, warn, perror, error and
     error_at_line,
   - a child forked while pages are being re-armed can free its monitored chunks,
   - the program's own mprotect on a sampled page works,
   - a genuine fault reaches the program's own SIGSEGV handler, or kills it by default, null
     pointer faults too after a recolouring,
   - sigprocmask / pthread_sigmask write the old mask into a sampled small chunk,
   - allocation contexts through a shared wrapper are told apart by call site.
   Without chromalloc (the plain binary) the same checks run and must pass trivially. */
#include "check.h"
#include <err.h>
#include <error.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

/* A monitored buffer: 16 pages, or what a group's member stands for at least (an L2 / 24,
   monitor.c), so that every one of them is a member of its group on any L2 */
static size_t PAGES = 16, BYTES = 16 * 4096;
static void buffer_size(void) {
  long long l2 = chromalloc_version != NULL ? stats_value("monitor", "l2_bytes") : 0;
  size_t least = l2 > 0 ? ((size_t)l2 / 24 + 4095) / 4096 : 0;
  if (least > PAGES) PAGES = least;
  BYTES = PAGES * 4096;
}

static void fill(unsigned char* p, size_t n, unsigned seed) { for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + seed); }
static bool same(const unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) if (p[i] != (unsigned char)(i * 7 + seed)) return false;
  return true;
}
static void settle(void) { struct timespec ts = { 0, 3 * 1000 * 1000 }; nanosleep(&ts, NULL); }   /* pages re-armed */

/* a monitored buffer whose sampled pages have had their first reference and are armed again */
static unsigned char* armed_buffer(unsigned seed) {
  unsigned char* p = malloc(BYTES);
  if (p) { fill(p, BYTES, seed); settle(); }
  return p;
}

static void test_memory_access(void) {
  unsigned char* a = armed_buffer(1);
  unsigned char* b = malloc(BYTES);
  CHECK(a != NULL && b != NULL);
  memcpy(b, a, BYTES);                       /* libc reads sampled pages */
  CHECK(same(b, BYTES, 1));
  settle();
  CHECK(same(a, BYTES, 1));
  free(a); free(b);
}

/* the printf family: glibc writes a piece longer than the stream's buffer straight from the
   caller's string, so the wrappers release a string argument's sampled pages first (walking the
   format's argument types) and pass every argument on unchanged */
static void test_printf(void) {
  char* s = malloc(BYTES);
  CHECK(s != NULL);
  if (s == NULL) return;
  memset(s, 'x', BYTES - 1);
  s[BYTES - 1] = 0;
  settle();
  long long r0 = chromalloc_version != NULL ? stats_value("monitor", "released_pages") : 0;
  FILE* f = fopen("/dev/null", "w");
  CHECK(f != NULL);
  if (f != NULL) {
    CHECK_EQ(fprintf(f, "%d|%.*s|%s|%Lg", 5, 3, s, s + 4096, 1.5L), 2 + 3 + 1 + (BYTES - 4097) + 1 + 3);
    fclose(f);
  }
  if (chromalloc_version != NULL) CHECK(stats_value("monitor", "released_pages") > r0);
  free(s);
}

/* the err/warn family and perror print through glibc's own vfprintf: their wrappers release
   the strings' pages (each call a string of its own, just written: its pages sampled) */
static char* sampled_string(void) {
  char* s = malloc(BYTES);
  if (s == NULL) return NULL;
  memset(s, 'w', BYTES - 1);
  s[BYTES - 1] = 0;
  settle();
  return s;
}
static void test_warn(void) {
  int err_fd = dup(2), null_fd = open("/dev/null", O_WRONLY);
  CHECK(err_fd >= 0 && null_fd >= 0);
  fflush(stderr);
  dup2(null_fd, 2);
  char* s = sampled_string();
  long long r1 = chromalloc_version != NULL ? stats_value("monitor", "released_pages") : 0;
  if (s != NULL) warnx("%d|%s", 5, s);
  long long r2 = chromalloc_version != NULL ? stats_value("monitor", "released_pages") : 0;
  char* t = sampled_string();
  long long r3 = chromalloc_version != NULL ? stats_value("monitor", "released_pages") : 0;
  if (t != NULL) perror(t);
  long long r4 = chromalloc_version != NULL ? stats_value("monitor", "released_pages") : 0;
  dup2(err_fd, 2);
  close(err_fd); close(null_fd);
  CHECK(s != NULL && t != NULL);
  if (chromalloc_version != NULL) { CHECK(r2 > r1); CHECK(r4 > r3); }
  free(s); free(t);
}

/* error and error_at_line: to a stderr made fully buffered, glibc wrote a long message straight
   from the program's string (an EFAULT on a sampled page: the output lost); chromalloc formats
   it first.  In a child, since stderr's buffering is changed; the bytes in the file are checked. */
static int error_child(void* arg) {
  FILE* f = arg;
  dup2(fileno(f), 2);
  setvbuf(stderr, NULL, _IOFBF, 4096);
  char* s = sampled_string();
  char* t = sampled_string();
  if (s == NULL || t == NULL) return 1;
  errno = ENOENT;
  error(0, EACCES, "%s|%d|%m", s, 1);
  error_at_line(0, 0, "file.c", 42, "%s", t);
  fflush(stderr);
  return error_message_count == 2 ? 0 : 1;
}
static void test_error(void) {
  FILE* f = tmpfile();
  CHECK(f != NULL);
  if (f == NULL) return;
  fflush(NULL);
  CHECK_EQ(fork_children(1, error_child, f, "test_error"), 1);
  size_t n = 2 * BYTES + 4096;
  char* want = malloc(n);
  char* got = malloc(n);
  CHECK(want != NULL && got != NULL);
  if (want != NULL && got != NULL) {
    char* s = malloc(BYTES);
    memset(s, 'w', BYTES - 1);
    s[BYTES - 1] = 0;
    const char* me = program_invocation_name;
    int len = snprintf(want, n, "%s: %s|1|%s: %s\n%s:file.c:42: %s\n", me, s, strerror(ENOENT), strerror(EACCES), me, s);
    ssize_t g = pread(fileno(f), got, n, 0);
    CHECK_EQ(g, len);
    CHECK(g == len && memcmp(got, want, (size_t)len) == 0);
    free(s);
  }
  free(want); free(got);
  fclose(f);
}

static void test_syscalls(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  unsigned char* src = armed_buffer(2);
  unsigned char* dst = armed_buffer(9);
  /* write from / read into sampled pages, 16 KiB at a time (within the pipe's capacity) */
  for (size_t off = 0; off < BYTES; off += 16384) {
    CHECK_EQ(write(fds[1], src + off, 16384), 16384);
    CHECK_EQ(read(fds[0], dst + off, 16384), 16384);
  }
  CHECK(same(dst, BYTES, 2));
  settle();
  struct iovec wv[2] = { { src, 8192 }, { src + 8192, 8192 } };
  struct iovec rv[2] = { { dst + 20000, 8192 }, { dst + 40000, 8192 } };
  CHECK_EQ(writev(fds[1], wv, 2), 16384);
  CHECK_EQ(readv(fds[0], rv, 2), 16384);
  CHECK(memcmp(dst + 20000, src, 8192) == 0 && memcmp(dst + 40000, src + 8192, 8192) == 0);
  close(fds[0]); close(fds[1]);

  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  settle();
  CHECK_EQ(send(sv[0], src + 4096, 8192, 0), 8192);
  CHECK_EQ(recv(sv[1], dst + 4096, 8192, MSG_WAITALL), 8192);
  CHECK(memcmp(dst + 4096, src + 4096, 8192) == 0);
  close(sv[0]); close(sv[1]);

  FILE* f = tmpfile();
  CHECK(f != NULL);
  if (f) {
    settle();
    CHECK_EQ(fwrite(src, 1, BYTES, f), BYTES);
    CHECK(fflush(f) == 0);
    rewind(f);
    unsigned char* back = armed_buffer(5);
    CHECK_EQ(fread(back, 1, BYTES, f), BYTES);
    CHECK(same(back, BYTES, 2));
    settle();
    CHECK_EQ(pwrite(fileno(f), back, BYTES, 0), BYTES);
    settle();
    CHECK_EQ(pread(fileno(f), dst, BYTES, 0), BYTES);
    CHECK(same(dst, BYTES, 2));
    free(back);
    fclose(f);
  }
  free(src); free(dst);
}

/* a path written into every page of a monitored buffer whose sampled pages are armed again */
static char* armed_path(const char* name) {
  char* p = malloc(BYTES);
  if (p == NULL) return NULL;
  for (size_t off = 0; off + 256 <= BYTES; off += 4096) snprintf(p + off, 256, "%s", name);
  settle();
  return p;
}

static void test_paths(void) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/chromalloc-monitor-%d", (int)getpid());
  char* d = armed_path(dir);
  char* f = armed_path(dir);
  CHECK(d != NULL && f != NULL);
  if (d == NULL || f == NULL) return;
  strcat(f + 8192, "/file");
  settle();
  CHECK(mkdir(d + 4096, 0700) == 0);
  int fd = open(f + 8192, O_CREAT | O_WRONLY, 0600);
  CHECK(fd >= 0);
  if (fd >= 0) { CHECK_EQ(write(fd, "x", 1), 1); close(fd); }
  settle();
  struct stat st;
  CHECK(stat(f + 8192, &st) == 0 && st.st_size == 1);
  CHECK(lstat(f + 8192, &st) == 0);
  CHECK(access(f + 8192, R_OK) == 0);
  FILE* fp = fopen(f + 8192, "r");
  CHECK(fp != NULL);
  if (fp) fclose(fp);
  DIR* dp = opendir(d + 4096);
  CHECK(dp != NULL);
  if (dp) closedir(dp);
  settle();
  char* out = armed_path("");
  CHECK(realpath(f + 8192, out + 4096) != NULL && strcmp(out + 4096, f + 8192) == 0);
  char link[80];
  snprintf(link, sizeof link, "%s/link", dir);
  CHECK(symlink(f + 8192, link) == 0);
  settle();
  CHECK_EQ(readlink(link, out + 12288, 200), (ssize_t)strlen(f + 8192));
  CHECK(getcwd(out + 20000, 4096) != NULL);
  settle();
  CHECK_EQ(syscall(SYS_access, f + 8192, R_OK), 0);      /* raw syscall(): argument released */
  /* posix_spawn with its argument strings in sampled pages */
  snprintf(out + 4096, 64, "/bin/sh");
  snprintf(out + 8192, 64, "-c");
  snprintf(out + 12288, 64, "test -f %s", f + 8192);
  char** argv = malloc(BYTES);
  argv[0] = out + 4096; argv[1] = out + 8192; argv[2] = out + 12288; argv[3] = NULL;
  settle();
  pid_t pid;
  extern char** environ;
  CHECK(posix_spawn(&pid, out + 4096, NULL, NULL, argv, environ) == 0);
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(unlink(link) == 0);
  CHECK(rename(f + 8192, link) == 0);
  CHECK(unlink(link) == 0);
  CHECK(rmdir(d + 4096) == 0);
  free(argv); free(out); free(d); free(f);
}

/* fork() while the monitor thread is busy re-arming pages: the child frees monitored chunks */
static void fork_frees(void* arg) {
  unsigned char** v = arg;
  for (int i = 0; i < 8; i++) { v[i][100] ^= 1; free(v[i]); }
  exit(0);
}

static void test_fork_while_rearming(void) {
  unsigned char* v[8];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 8; i++) { v[i] = malloc(BYTES); fill(v[i], BYTES, (unsigned)i); }
    char err[64];
    int st = run_child(fork_frees, v, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    for (int i = 0; i < 8; i++) free(v[i]);
  }
}

static void test_own_mprotect(void) {
  unsigned char* p = armed_buffer(3);
  unsigned char* page = (unsigned char*)(((uintptr_t)p + 4095) & ~(uintptr_t)4095);
  for (size_t i = 0; i < PAGES - 1; i++) {
    CHECK(mprotect(page + i * 4096, 4096, PROT_READ) == 0);
  }
  CHECK(same(p, BYTES, 3));                   /* readable everywhere */
  settle();
  CHECK(same(p, BYTES, 3));                   /* and not re-armed behind the program's back */
  CHECK(mprotect(page, (PAGES - 1) * 4096, PROT_READ | PROT_WRITE) == 0);
  fill(p, BYTES, 4);
  CHECK(same(p, BYTES, 4));
  free(p);
}

static sigjmp_buf jump;
static volatile int own_handler_runs;
static void own_handler(int sig) { own_handler_runs++; siglongjmp(jump, 1); }

static void test_chaining(void) {
  unsigned char* keep = armed_buffer(6);      /* chromalloc's handler is installed by now */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = own_handler;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
  char* guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (sigsetjmp(jump, 1) == 0) { guard[0] = 1; CHECK(!"not reached"); }
  CHECK_EQ(own_handler_runs, 1);
  CHECK(same(keep, BYTES, 6));                /* sampled pages still resolved by chromalloc */
  struct sigaction back;
  CHECK(sigaction(SIGSEGV, NULL, &back) == 0);
  CHECK(back.sa_handler == own_handler);      /* the program reads back its own handler */
  signal(SIGSEGV, SIG_DFL);
  munmap(guard, 4096);
  free(keep);
}

static void crash(void* arg) { volatile char* bad = (volatile char*)arg; *bad = 1; }

static void test_default_action(void) {
  char err[256];
  int st = run_child(crash, (void*)16, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

/* contexts: the same size through one wrapper from two call sites */
#define CTX_SIZE (17 * 4096 + 64)
__attribute__((noinline)) static void* wrapper(size_t n) { void* p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void* site_a(void) { void* p = wrapper(CTX_SIZE); __asm__ volatile("" ::: "memory"); return p; }
__attribute__((noinline)) static void* site_b(void) { void* p = wrapper(CTX_SIZE); __asm__ volatile("" ::: "memory"); return p; }

/* sigprocmask / pthread_sigmask writing the old set into a fresh small chunk (a sampled one is
   on a trapped page: the kernel wrote it and failed with EFAULT) */
static void test_sigmask_small(void) {
  int bad = 0;
  for (int i = 0; i < 100000 && bad == 0; i++) {
    sigset_t* ss = malloc(sizeof *ss);
    bad += (i & 1 ? sigprocmask(SIG_BLOCK, NULL, ss) : pthread_sigmask(SIG_BLOCK, NULL, ss)) != 0;
    bad += sigismember(ss, SIGSEGV) != 0;
    free(ss);
  }
  CHECK_EQ(bad, 0);
}

/* A program's own null-pointer faults after chromalloc recoloured a page: the recolouring's
   fault client waited for ever on page 0 (empty slots hold 0; the JVM's implicit null checks
   fault there) */
static sigjmp_buf null_jb;
static void null_handler(int sig, siginfo_t* si, void* u) { siglongjmp(null_jb, 1); }
static void null_child(void* arg) {
  long (*recolour)(void*, size_t, int) = (long (*)(void*, size_t, int))dlsym(RTLD_DEFAULT, "chromalloc_recolour");
  alarm(20);
  if (recolour != NULL) {
    char* big = malloc(1 << 20);
    memset(big, 1, 1 << 20);
    recolour(big, 1 << 16, 1);                    /* whatever it achieves, its client is registered */
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = null_handler;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, NULL);
  int caught = 0;
  for (int i = 0; i < 10; i++)
    if (sigsetjmp(null_jb, 1) == 0) (void)*(volatile int*)0xc;
    else caught++;
  _exit(caught == 10 ? 0 : 3);
}
static void test_null_fault(void) {
  char err[256];
  int st = run_child(null_child, NULL, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_contexts(void) {
  static volatile int na = 3, nb = 5;        /* loops the compiler cannot unroll into call sites */
  for (int i = 0; i < na; i++) { void* p = site_a(); memset(p, 1, CTX_SIZE); free(p); }
  for (int i = 0; i < nb; i++) { void* p = site_b(); memset(p, 2, CTX_SIZE); free(p); }
  if (chromalloc_stats_json == NULL) return;
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  char a[64], b[64];
  snprintf(a, sizeof a, "\"chunks\":3,\"bytes\":%d,", 3 * CTX_SIZE);
  snprintf(b, sizeof b, "\"chunks\":5,\"bytes\":%d,", 5 * CTX_SIZE);
  CHECK(strstr(buf, a) != NULL);
  CHECK(strstr(buf, b) != NULL);
}

/* A page opened by its first reference is protected again at the program's next allocator
   call once its burst (20 us) is over, with no monitor thread involved (that looks only after
   200 us).  Run first: the chunk is the first member of its group.  A try counts only when the
   window from the reference to the call took under 150 us (a vCPU taken away for longer lets
   the monitor thread re-protect the page first: once in 14 `make -j2 test` runs) and the call
   found the monitor's lock free (a call never waits for it: a monitor thread scanning at that
   moment leaves the page to itself; once in a CI run); up to 20 tries, each with a chunk of its
   own, and one of them must re-protect. */
static void* volatile kept;
static void test_tick(void) {
  if (chromalloc_version == NULL) return;
  int judged = 0;
  for (int tries = 0; tries < 20 && judged == 0; tries++) {
    unsigned char* p = malloc(BYTES);        /* a member of its group by its first page */
    CHECK(p != NULL);
    long long r0 = stats_value("monitor", "rearms_by_allocator_calls");
    long long f0 = stats_value("monitor", "first_refs");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    p[0] = 1;                                /* its first reference: the page opens */
    do clock_gettime(CLOCK_MONOTONIC, &b); while ((b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec < 60000);
    unsigned char* q = malloc(BYTES);        /* re-protects it */
    kept = q;                                /* (not optimised away with its free) */
    clock_gettime(CLOCK_MONOTONIC, &b);
    long ns = (b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec;
    CHECK_EQ(stats_value("monitor", "first_refs"), f0 + 1);
    if (ns < 150000 && stats_value("monitor", "rearms_by_allocator_calls") > r0) judged++;
    CHECK_EQ(p[0], 1);                       /* and the next reference is resolved */
    free(q); free(p);
  }
  CHECK_EQ(judged, 1);
}

/* A group whose members are each used once and freed at once judges nothing: it ends when enough
   of them have joined warm (the L2's worth of them first), not at 64 members. */
__attribute__((noinline)) static unsigned char* used_once(size_t n) { return malloc(n); }
static void test_fruitless_group(void) {
  if (chromalloc_version == NULL) return;
  long long g0 = stats_value("monitor", "groups_fruitless"), l2 = stats_value("monitor", "l2_bytes");
  size_t n = l2 > 0 ? (size_t)l2 / 4 : 256 << 10;   /* a member: below the L2 */
  int i = 0;
  for (; i < 300 && stats_value("monitor", "groups_fruitless") == g0; i++) {
    unsigned char* p = used_once(n);
    CHECK(p != NULL);
    p[0] = (unsigned char)i;
    kept = p;
    free(p);
    usleep(500);
  }
  CHECK(stats_value("monitor", "groups_fruitless") > g0);
  CHECK(i < 64);
}

/* nightwatch_delay: a polluter judged before it does not start the colour layer (a short
   program never pays for its calibration); with 0, its first restrictive chunk does.  Run as
   `test_monitor delay-off` with nightwatch_delay=3600000 and `delay-on` with 0 (tests.mk):
   buffers of 4 MiB from one call site, written and then read in order, until one of them is
   given restrictive mapping.  Protection is armed only once the colour layer is started: before
   it the timeline holds no "protection" entry (each restrictive chunk logged one). */
static volatile unsigned long sink;
__attribute__((noinline)) static unsigned char* streamed(size_t n) { unsigned char* p = malloc(n); __asm__ volatile("" ::: "memory"); return p; }
static int test_delay(bool on) {
  require_chromalloc("test_monitor delay");
  size_t n = 4u << 20;
  int i = 0;
  for (; i < 400 && stats_value("nightwatch", "restrictive") <= 0; i++) {
    unsigned char* p = streamed(n);
    CHECK(p != NULL);
    memset(p, i, n);
    unsigned long sum = 0;
    for (size_t k = 0; k < n; k += 64) sum += p[k];
    sink += sum;
    free(p);
  }
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  bool off = strstr(buf, "\"colours\":{\"state\":\"off\"") != NULL;
  fprintf(stderr, "test_monitor delay-%s: %d buffers, %lld restrictive chunks, colour layer %s\n", on ? "on" : "off", i,
          stats_value("nightwatch", "restrictive"), off ? "not started" : "started");
  CHECK(stats_value("nightwatch", "restrictive") > 0);
  CHECK(off != on);
  int armed = 0;
  for (const char* t = buf; (t = strstr(t, "\"event\":\"protection\"")) != NULL; t++) armed++;
  CHECK(armed <= (on ? 1 : 0));
  return check_done("test_monitor delay");
}

int main(int argc, char** argv) {
  if (argc > 1 && strncmp(argv[1], "delay-", 6) == 0) return test_delay(strcmp(argv[1], "delay-on") == 0);
  const char* opts = getenv("CHROMALLOC_OPTIONS");
  if (chromalloc_version != NULL && (opts == NULL || strstr(opts, "nightwatch_monitor=1") == NULL)) {
    setenv("CHROMALLOC_OPTIONS", "nightwatch=1,nightwatch_monitor=1", 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    return 1;
  }
  buffer_size();
  test_tick();
  test_fruitless_group();
  test_memory_access();
  test_syscalls();
  test_printf();
  test_warn();
  test_error();
  test_paths();
  test_fork_while_rearming();
  test_own_mprotect();
  test_chaining();
  test_default_action();
  test_contexts();
  test_sigmask_small();
  test_null_fault();
  if (chromalloc_version != NULL) {
    /* chunks below the L2 are monitored as members of their context's group */
    CHECK(stats_value("nightwatch", "monitored") + stats_value("nightwatch", "medium_members") > 10);
    CHECK(stats_value("monitor", "first_refs") > 0);     /* the pages really were trapped */
    CHECK(stats_value("monitor", "released_pages") > 0); /* and handed to system calls */
  }
  return check_done("test_monitor");
}
