/* The allocator alone (libchromalloc) is a malloc and nothing else: after running for 3 s,
   allocating from two threads, the program still has the default action for SIGSEGV and SIGBUS,
   no thread it did not create, and none of the cache runtime's functions (the colour API, the
   wrapped libc calls) come from chromalloc.  Run linked, static and preloaded (tests/run.py);
   under the cache runtime it says what it sees and exits 77 (not its library). */
#include "check.h"
#include <dirent.h>
#include <stdatomic.h>
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

static atomic_bool stop;
static _Atomic(pid_t) churn_tid;
static void* churn(void* arg) {
  atomic_store(&churn_tid, gettid());
  static __thread void* keep[512];
  unsigned k = 0;
  while (!atomic_load(&stop)) {
    unsigned i = k++ % 512;
    free(keep[i]);
    keep[i] = malloc((k * 2654435761u) % 300000 + 1);
  }
  for (int i = 0; i < 512; i++) free(keep[i]);
  return arg;
}

/* threads of this process that are neither this one nor churn (a joined thread may stay listed
   for a moment after pthread_join returns) */
static int foreign_threads(void) {
  DIR* d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent* e; d && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    pid_t t = (pid_t)atoi(e->d_name);
    n += t != gettid() && t != atomic_load(&churn_tid);
  }
  if (d) closedir(d);
  return n;
}

static bool handler_default(int sig) {
  struct sigaction sa;
  return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO);
}

/* the symbol is defined by chromalloc's library (not by libc or nothing) */
static bool from_chromalloc(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  return f != NULL && dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "chromalloc") != NULL;
}

int main(void) {
  require_chromalloc("test_lean");
  if (from_chromalloc("chromalloc_colours")) {
    fprintf(stderr, "test_lean: the cache runtime is loaded, not the allocator alone\n");
    return 77;
  }
  pthread_t t;
  CHECK(pthread_create(&t, NULL, churn, NULL) == 0);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  do { free(malloc(100000)); clock_gettime(CLOCK_MONOTONIC, &now); } while (now.tv_sec - start.tv_sec < 3);
  CHECK(atomic_load(&churn_tid) != 0);
  CHECK_EQ(foreign_threads(), 0);
  atomic_store(&stop, true);
  pthread_join(t, NULL);
  CHECK_EQ(foreign_threads(), 0);
  CHECK(handler_default(SIGSEGV));
  CHECK(handler_default(SIGBUS));
  const char* runtime[] = { "chromalloc_colours", "chromalloc_malloc_coloured", "chromalloc_calibrate" };
  for (size_t i = 0; i < sizeof runtime / sizeof *runtime; i++) CHECK(!from_chromalloc(runtime[i]));
  const char* libc[] = { "read", "write", "open", "printf", "execve", "sigaction", "pthread_mutex_lock", "syscall" };
  for (size_t i = 0; i < sizeof libc / sizeof *libc; i++) CHECK(!from_chromalloc(libc[i]));
  return check_done("test_lean");
}
