/* Minimal test support shared by the unit tests: CHECK counts and reports failures without
   stopping, `ca_loaded()` proves chromalloc (not glibc) is the allocator in use, and
   `run_child()` runs a function in a forked child and reports how it ended.  The tests build
   without linking chromalloc and reach its extensions through weak symbols, so the same
   binary runs linked (-lchromalloc) or under LD_PRELOAD. */
#ifndef CA_TEST_CHECK_H
#define CA_TEST_CHECK_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern const char* chromalloc_version(void) __attribute__((weak));
extern size_t chromalloc_stats_json(char* buf, size_t size) __attribute__((weak));
extern long chromalloc_option(const char* name) __attribute__((weak));
extern void chromalloc_collect(void) __attribute__((weak));

static int check_failures, check_passes;

#define CHECK(cond) do {                                                                  \
    if (cond) check_passes++;                                                             \
    else { check_failures++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } \
  } while (0)

#define CHECK_EQ(a, b) do {                                                               \
    long long va_ = (long long)(a), vb_ = (long long)(b);                                 \
    if (va_ == vb_) check_passes++;                                                       \
    else { check_failures++; fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld != %lld)\n", \
                                     __FILE__, __LINE__, #a, #b, va_, vb_); }             \
  } while (0)

static inline int check_done(const char* name) {
  fprintf(stderr, "%s: %d checks, %d failed\n", name, check_passes + check_failures, check_failures);
  return check_failures == 0 ? 0 : 1;
}

static inline void require_chromalloc(const char* name) {
  if (chromalloc_version == NULL) {
    fprintf(stderr, "%s: chromalloc is not loaded (link with -lchromalloc or LD_PRELOAD it)\n", name);
    exit(2);
  }
}

/* A number from the stats JSON: the integer after "<object>":{ ... "<key>": */
static inline long long stats_value(const char* object, const char* key) {
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  char pat[128];
  snprintf(pat, sizeof pat, "\"%s\":{", object);
  const char* o = strstr(buf, pat);
  if (o == NULL) return -1;
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* k = strstr(o, pat);
  return k ? atoll(k + strlen(pat)) : -1;
}

/* Read fd to its end into buf (NUL-terminated), close it, and wait for pid: its status. */
static inline int collect_child(int fd, pid_t pid, char* buf, size_t len) {
  size_t n = 0;
  ssize_t r;
  while (n + 1 < len && (r = read(fd, buf + n, len - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  close(fd);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

/* Run fn() in a child with stderr captured into `err` (NUL-terminated); returns the wait status. */
static inline int run_child(void (*fn)(void*), void* arg, char* err, size_t errlen) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  return collect_child(fds[0], pid, err, errlen);
}

/* Forks n children one after another, each running child(arg) and exiting with its result;
   returns how many exited with 0, stopping at the first that did not (said, with its status). */
static inline int fork_children(int n, int (*child)(void*), void* arg, const char* what) {
  int ok = 0;
  for (int k = 0; k < n; k++) {
    pid_t pid = fork();
    if (pid == 0) { check_failures = check_passes = 0; _exit(child(arg)); }   /* its own count, not the parent's so far */
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "%s: child %d: status 0x%x\n", what, k, status); break; }
    ok++;
  }
  return ok;
}

static inline size_t rss_bytes(void) {
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f) { if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0; fclose(f); }
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* The machine the test runs on is described (CHROMALLOC_MACHINE, set by tests/run.py): the
   colour layer simulates its L2, so every colour check is exact and nothing may be left
   "not checked" for a noisy host. */
static inline bool machine_described(void) {
  const char* d = getenv("CHROMALLOC_MACHINE");
  return d != NULL && d[0] != 0;
}

/* A level of the described machine: "l2=1M/16" -> bytes and ways (false: not described) */
static inline bool described_level(const char* key, size_t* bytes, unsigned* ways) {
  const char* d = getenv("CHROMALLOC_MACHINE");
  char pat[16];
  snprintf(pat, sizeof pat, "%s=", key);
  const char* at = d ? strstr(d, pat) : NULL;
  if (at == NULL) return false;
  char* end;
  unsigned long v = strtoul(at + strlen(pat), &end, 10);
  if (*end == 'K') { v <<= 10; end++; } else if (*end == 'M') { v <<= 20; end++; }
  *bytes = v;
  *ways = *end == '/' ? (unsigned)strtoul(end + 1, NULL, 10) : 0;
  return v > 0 && *ways > 0;
}

/* L1d geometry the way a user would read it (or as described) */
static inline void l1d_geometry(unsigned* line, unsigned* sets) {
  *line = 64; *sets = 64;
  size_t bytes;
  unsigned ways;
  if (described_level("l1d", &bytes, &ways)) { *sets = (unsigned)(bytes / ways / 64); return; }
  for (int i = 0; i < 8; i++) {
    char path[128], buf[32];
    unsigned level = 0, l = 0, s = 0;
    int data = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    FILE* f = fopen(path, "r");
    if (!f) break;
    if (fgets(buf, sizeof buf, f)) data = buf[0] == 'D' || buf[0] == 'U';
    fclose(f);
#define RD(name, var) snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/" name, i); \
    if ((f = fopen(path, "r"))) { if (fscanf(f, "%u", &var) != 1) var = 0; fclose(f); }
    RD("level", level) RD("coherency_line_size", l) RD("number_of_sets", s)
#undef RD
    if (data && level == 1 && l && s) { *line = l; *sets = s; return; }
  }
}

#endif
