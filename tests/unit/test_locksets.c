/* Lock sets (paper 003), under the cache runtime preloaded with locksets=1 on a described
   machine (its L2 simulated: colours exact, no timing).  A block allocated inside a lock set is
   lock-set memory, which the runtime tracks hot from the start: chromalloc_heat() says 255 for
   it and -1 for ordinary memory (hot pages' sampling is off).  So each case below checks, by a
   malloc, whether the runtime thinks the thread is in a lock set:
     plain, nested, recursive, trylock (taken and refused), a new thread's first lock (before
     it has a heap), adaptive, error-checking (a relock and a foreign unlock refused), rwlocks,
     a condition wait (gives the mutex back and takes it again), an unlock at depth 0, a fork
     inside a lock set;
   then the pages of n chunks allocated inside one lock set end up at most ceil(n / colours) to
   a colour (the worker moves them), and the statistics name the lock set.
   With the argument "off" (locksets=0): nothing allocated under a lock is lock-set memory.
   With "nested" (lockset_nest=2): ordinary memory touched under two locks joins the lock set's
   pages, and is spread as they are. */
#include "check.h"
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern int chromalloc_heat(const void*) __attribute__((weak));
extern int chromalloc_colour_of(const void*) __attribute__((weak));
extern int chromalloc_colour_count(void) __attribute__((weak));

static bool locked_memory(void) {          /* the next allocation is lock-set memory */
  void* p = malloc(48);
  bool in = chromalloc_heat(p) == 255;
  free(p);
  return in;
}

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER;
static void* hold(void* arg) {             /* holds `held` until told */
  pthread_mutex_lock(&held);
  __atomic_store_n((int*)arg, 1, __ATOMIC_RELEASE);
  while (__atomic_load_n((int*)arg, __ATOMIC_ACQUIRE) != 2) usleep(1000);
  pthread_mutex_unlock(&held);
  return NULL;
}

/* a thread whose first act is a lock: the lock set starts its heap, and its first malloc (inside)
   is lock-set memory; after many pairs with nothing allocated, the depth is back at 0 */
static void* fresh(void* arg) {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&m);
  *(bool*)arg = locked_memory();
  pthread_mutex_unlock(&m);
  for (int i = 0; i < 100000; i++) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); }
  ((bool*)arg)[1] = !locked_memory();
  return NULL;
}

static void depths(void) {
  pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
  CHECK(!locked_memory());
  pthread_mutex_lock(&a);
  CHECK(locked_memory());
  pthread_mutex_lock(&b);                  /* nested */
  CHECK(locked_memory());
  pthread_mutex_unlock(&b);
  CHECK(locked_memory());
  pthread_mutex_unlock(&a);
  CHECK(!locked_memory());

  pthread_mutexattr_t at;                  /* recursive: each lock counts */
  pthread_mutexattr_init(&at);
  pthread_mutexattr_settype(&at, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_t r;
  pthread_mutex_init(&r, &at);
  pthread_mutex_lock(&r);
  pthread_mutex_lock(&r);
  pthread_mutex_unlock(&r);
  CHECK(locked_memory());
  pthread_mutex_unlock(&r);
  CHECK(!locked_memory());

  CHECK_EQ(pthread_mutex_trylock(&a), 0);  /* trylock taken */
  CHECK(locked_memory());
  pthread_mutex_unlock(&a);
  CHECK(!locked_memory());
  int state = 0;                           /* trylock refused: held by another thread */
  pthread_t t;
  pthread_create(&t, NULL, hold, &state);
  while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 1) usleep(1000);
  CHECK_EQ(pthread_mutex_trylock(&held), EBUSY);
  CHECK(!locked_memory());
  CHECK_EQ(pthread_mutex_unlock(&held), 0);  /* a normal mutex's unlock by another thread: at depth 0, ignored */
  CHECK(!locked_memory());
  __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
  pthread_join(t, NULL);

  bool fresh_in[2] = { false, false };
  pthread_create(&t, NULL, fresh, fresh_in);
  pthread_join(t, NULL);
  CHECK(fresh_in[0]);
  CHECK(fresh_in[1]);

  pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ADAPTIVE_NP);   /* glibc's spinning mutex */
  pthread_mutex_t ad;
  pthread_mutex_init(&ad, &at);
  pthread_mutex_lock(&ad);
  CHECK(locked_memory());
  pthread_mutex_unlock(&ad);
  CHECK(!locked_memory());

  pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK);   /* refusals do not count */
  pthread_mutex_t e;
  pthread_mutex_init(&e, &at);
  pthread_mutex_lock(&e);
  CHECK_EQ(pthread_mutex_lock(&e), EDEADLK);
  pthread_mutex_lock(&a);
  pthread_mutex_unlock(&a);
  CHECK(locked_memory());
  CHECK_EQ(pthread_mutex_unlock(&e), 0);
  CHECK(!locked_memory());                 /* had EDEADLK counted, the depth would be 1 */
  CHECK_EQ(pthread_mutex_unlock(&e), EPERM);
  pthread_mutex_lock(&a);                  /* ... and had EPERM, 0 would be -1 or stay 0 here */
  CHECK(locked_memory());
  pthread_mutex_unlock(&a);
  CHECK(!locked_memory());

  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  pthread_rwlock_rdlock(&rw);
  CHECK(locked_memory());
  pthread_rwlock_unlock(&rw);
  CHECK(!locked_memory());
  CHECK_EQ(pthread_rwlock_trywrlock(&rw), 0);
  CHECK(locked_memory());
  pthread_rwlock_unlock(&rw);
  CHECK(!locked_memory());

  pthread_cond_t c = PTHREAD_COND_INITIALIZER;   /* a wait gives the mutex back and retakes it */
  pthread_mutex_lock(&a);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += 2000000;
  if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
  CHECK_EQ(pthread_cond_timedwait(&c, &a, &ts), ETIMEDOUT);
  CHECK(locked_memory());
  pthread_mutex_unlock(&a);
  CHECK(!locked_memory());

  pthread_mutex_lock(&a);                  /* fork inside a lock set: the child is in it too */
  pid_t pid = fork();
  if (pid == 0) {
    int bad = !locked_memory();
    pthread_mutex_unlock(&a);
    bad |= locked_memory() << 1;
    _exit(bad);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  pthread_mutex_unlock(&a);
  CHECK(!locked_memory());
}

/* 64-byte nodes allocated under one lock among cold blocks allocated outside it: their pages
   end up at most ceil(n / colours) to a colour */
enum { NODES = 6000 };
static void *nodes[NODES], *cold[NODES];
static pthread_mutex_t table = PTHREAD_MUTEX_INITIALIZER;
__attribute__((noinline)) static void insert(int i) {
  pthread_mutex_lock(&table);
  nodes[i] = malloc(64);
  memset(nodes[i], i, 64);
  pthread_mutex_unlock(&table);
}
static int cmp(const void* a, const void* b) { uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b; return x < y ? -1 : x > y; }

/* the distinct pages of nodes[], then up to a minute (a few hot_periods on the simulated L2) for
   them to end at most ceil(n / colours) to a colour, calling `meanwhile` between looks */
static void settle(const char* what, void (*meanwhile)(void)) {
  static uintptr_t pages[NODES];
  size_t n = 0;
  for (int i = 0; i < NODES; i++) pages[n++] = (uintptr_t)nodes[i] >> 12;
  qsort(pages, n, sizeof pages[0], cmp);
  size_t u = 0;
  for (size_t i = 0; i < n; i++) if (u == 0 || pages[i] != pages[u - 1]) pages[u++] = pages[i];
  int most = 0, colours = 0, unknown = 0;
  for (int s = 0; s < 600; s++) {
    colours = chromalloc_colour_count();
    int count[64] = {0};
    most = unknown = 0;
    for (size_t i = 0; i < u; i++) {
      int c = chromalloc_colour_of((void*)(pages[i] << 12));
      if (c < 0 || c >= 64) { unknown++; continue; }
      if (++count[c] > most) most = count[c];
    }
    if (colours > 0 && unknown == 0 && most <= (int)((u + (size_t)colours - 1) / (size_t)colours)) break;
    if (meanwhile) meanwhile();
    else usleep(100000);
  }
  fprintf(stderr, "  %zu pages of %s, %d colours: at most %d on a colour (%d not told)\n", u, what, colours, most, unknown);
  CHECK(colours > 0);
  CHECK_EQ(unknown, 0);
  CHECK(most <= (int)((u + (size_t)(colours > 0 ? colours : 1) - 1) / (size_t)(colours > 0 ? colours : 1)));
}

static void spread(void) {
  for (int i = 0; i < NODES; i++) { insert(i); cold[i] = malloc(64 + (size_t)(i % 7) * 32); }
  CHECK(chromalloc_heat(nodes[0]) == 255 && chromalloc_heat(cold[0]) == -1);
  settle("nodes", NULL);
  for (int i = 0; i < NODES; i++) CHECK_EQ(((unsigned char*)nodes[i])[63], (unsigned char)i);   /* moved whole */
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  CHECK(strstr(buf, "\"locksets\":{\"on\":true") != NULL);
  const char* sets = strstr(buf, "\"locksets\":{");
  CHECK(sets != NULL && strstr(sets, "test_locksets") != NULL);   /* named by its call site's object */
  CHECK(stats_value("hot", "moved") > 0);
  for (int i = 0; i < NODES; i++) { free(nodes[i]); free(cold[i]); }
}

/* lockset_nest=2: nodes allocated outside any lock set, then touched under two locks.  The
   nested check's traps see them touched that deep; their pages join the lock set's and end at
   most ceil(n / colours) to a colour, contents intact.  At depth 1 nothing is noted. */
static pthread_mutex_t outer = PTHREAD_MUTEX_INITIALIZER, inner = PTHREAD_MUTEX_INITIALIZER;
static void touch_all(void) { for (int i = 0; i < NODES; i++) ((volatile unsigned char*)nodes[i])[0]++; }
__attribute__((noinline)) static void touch_under(int depth) {
  pthread_mutex_lock(&outer);
  if (depth > 1) pthread_mutex_lock(&inner);
  touch_all();
  if (depth > 1) pthread_mutex_unlock(&inner);
  pthread_mutex_unlock(&outer);
}
static void deep_for_100ms(void) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do { touch_under(2); clock_gettime(CLOCK_MONOTONIC, &t); } while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < 100000000L);
}
static void* deep_until(void* stop) {
  while (!__atomic_load_n((int*)stop, __ATOMIC_ACQUIRE)) touch_under(2);
  return NULL;
}
static void nested(void) {
  for (int i = 0; i < NODES; i++) {
    nodes[i] = malloc(64);
    memset(nodes[i], i, 64);
    cold[i] = malloc(64 + (size_t)(i % 7) * 32);
  }
  CHECK(chromalloc_heat(nodes[0]) != 255);   /* ordinary memory */
  for (int k = 0; k < 20; k++) { touch_under(1); usleep(10000); }
  CHECK_EQ(stats_value("locksets", "nested_seen"), 0);   /* one lock held: no window opened for it */
  CHECK_EQ(stats_value("locksets", "touched_lost"), 0);
  settle("nodes touched under two locks", deep_for_100ms);
  for (int i = 0; i < NODES; i++) CHECK_EQ(((unsigned char*)nodes[i])[63], (unsigned char)i);
  CHECK_EQ(stats_value("locksets", "nested_seen"), 1);
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  const char* deep = strstr(buf, "\"touched_deep\":");
  long long touched = 0;
  for (; deep != NULL; deep = strstr(deep + 1, "\"touched_deep\":")) touched += atoll(deep + 15);
  fprintf(stderr, "  pages noted touched at depth 2: %lld\n", touched);
  CHECK(touched > 0);
  CHECK(stats_value("hot", "moved") > 0);
  /* forks while the check runs: fork's handlers take the lock sets' lock, then hot pages'; the
     worker must never hold them the other way round */
  pthread_t t;
  int stop = 0, forked = 0;
  pthread_create(&t, NULL, deep_until, &stop);
  for (int i = 0; i < 100; i++) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int st = 0;
    forked += pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    usleep(5000);
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  CHECK_EQ(forked, 100);
  for (int i = 0; i < NODES; i++) { free(nodes[i]); free(cold[i]); }
}

int main(int argc, char** argv) {
  require_chromalloc("test_locksets");
  if (chromalloc_heat == NULL || chromalloc_colour_of == NULL) { fprintf(stderr, "test_locksets: needs the cache runtime\n"); return 2; }
  if (argc > 1 && strcmp(argv[1], "off") == 0) {
    pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&a);
    CHECK(!locked_memory());
    pthread_mutex_unlock(&a);
    CHECK(stats_value("locksets", "untold") == 0);
    return check_done("test_locksets off");
  }
  if (argc > 1 && strcmp(argv[1], "nested") == 0) {
    nested();
    return check_done("test_locksets nested");
  }
  depths();
  spread();
  return check_done("test_locksets");
}
