/* Hot pages (internal interfaces: built static only; run with hot=1 on a described machine,
   whose L2 the colour layer simulates, so the colours are exact and the outcome is this host's
   timing's in nothing).

   1. The pieces, scripted: the heat average, the jumping scan's back-tracking, the threshold,
      the windows' budget paying back what they overspent, the emptiest colours; and the ranking of a scripted heap (clustered hot pages among warm
      and cold ones, windows drawn from known touch probabilities) against the known top K.
   2. A program: a hot set of 85% of the L2 (64-byte nodes) chased among cold blocks.  Its hot
      pages must be found (recall 0.8 at least), spread (no colour holding more hot pages than
      the L2 has ways, where random frames leave some over), and moved within hot_budget a
      period; meanwhile another thread reads a pipe into memory that windows arm (no EFAULT)
      and has glibc write through stdio and read directories (no error),
      a page the program made read-only stays so, forked children chase the set too (the
      last one tracks its own hot pages), and
      detached threads come and go (glibc's exit path touches our blocks with every signal
      blocked).
   3. Quiet: nothing armed, and armed ranges opened, from a thread's exit until it is gone,
      during posix_spawn, and after vfork.
   4. Nested: a signal handler's system calls inside our own locked sections go on; a fork
      child's worker is not started from one.
   5. (ranges) The ranges the program's threads note in logs of their own, as below. */
#include "check.h"
#include "../../src/policy/hot.h"
#include "../../src/color/colour.h"
#include "../../bench/colour/l2reading.h"
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <signal.h>
#include <sys/syscall.h>
#include "../../src/monitor/monitor.h"

extern int  chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den);
extern int  chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms);
extern long chromalloc_recolour(void* p, size_t len, int colours);
extern int  chromalloc_colour_count(void);

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void set_bit(uint64_t* b, size_t i) { b[i / 64] |= (uint64_t)1 << (i % 64); }

static void pieces(void) {
  CHECK_EQ(_ca_hot_heat(0, true), 32);
  uint8_t h = 0;
  for (int i = 0; i < 64; i++) h = _ca_hot_heat(h, true);
  CHECK_EQ(h, 255);
  CHECK(_ca_hot_heat(255, false) < 255);
  CHECK_EQ(_ca_hot_heat(0, false), 0);
  uint8_t two[2] = { 200, 100 };                   /* written pages beside traps: only raised */
  uint64_t second[1] = { 2 };
  _ca_hot_add(two, 2, second);
  CHECK(two[0] == 200 && two[1] == _ca_hot_heat(100, true));

  /* 0..3 untouched, 4..63 touched: the second jump lands on a touched page, so the scan goes
     back to the page after the last untouched one and reads every touched page */
  uint8_t heat[64] = {0};
  uint64_t bits[1] = {0};
  for (int i = 4; i < 64; i++) set_bit(bits, (size_t)i);
  ca_hot_scan_t st = {0};
  uint64_t r = 7;
  _ca_hot_scan(heat, 64, bits, &r, &st);
  CHECK(st.backtracks >= 1);
  CHECK_EQ(st.touched, 60);
  bool all = true;
  for (int i = 4; i < 64; i++) all &= heat[i] == 32;
  CHECK(all);
  CHECK(heat[0] == 0 && heat[1] == 0 && heat[2] == 0 && heat[3] == 0);

  /* a cold lane: a few looks, the rest jumped over, every page decays alike */
  uint8_t warm[256];
  memset(warm, 100, sizeof warm);
  uint64_t none[4] = {0};
  ca_hot_scan_t cold = {0};
  _ca_hot_scan(warm, 256, none, &r, &cold);
  CHECK(cold.checked * 8 < 256);
  CHECK_EQ(cold.checked + cold.skipped, 256);
  bool decayed = true;
  for (int i = 0; i < 256; i++) decayed &= warm[i] == _ca_hot_heat(100, false);
  CHECK(decayed);

  uint32_t hist[256] = {0};
  hist[200] = 10; hist[100] = 20; hist[0] = 1000;
  CHECK_EQ(_ca_hot_threshold(hist, 10), 200);
  CHECK_EQ(_ca_hot_threshold(hist, 15), 100);
  CHECK_EQ(_ca_hot_threshold(hist, 500), 1);

  /* the windows' budget pays back what they spent beyond their share, and saves no credit */
  uint64_t debt = 0;
  CHECK_EQ(_ca_hot_budget(&debt, 0, 0, 950), 950);               /* the first window */
  CHECK_EQ(_ca_hot_budget(&debt, 1500, 1000, 950), 450);         /* 500 over */
  CHECK_EQ(_ca_hot_budget(&debt, 1800, 1000, 950), 0);           /* 1300 over: no lane */
  CHECK_EQ(debt, 1300);
  CHECK_EQ(_ca_hot_budget(&debt, 0, 1000, 950), 650);            /* an idle period pays 1000 */
  CHECK_EQ(_ca_hot_budget(&debt, 0, 4000, 950), 950);            /* a long idle spell: debt 0, */
  CHECK_EQ(debt, 0);
  CHECK_EQ(_ca_hot_budget(&debt, 900, 1000, 950), 950);          /* and no credit after it */
  CHECK_EQ(debt, 0);

  uint32_t count[4] = { 8, 3, 3, 9 };
  CHECK_EQ(_ca_hot_emptiest(count, 4, 8), 0x6);
  uint32_t full[4] = { 8, 8, 8, 8 };
  CHECK_EQ(_ca_hot_emptiest(full, 4, 8), 0);
  CHECK_EQ(_ca_hot_target(count, 4, 8, 0x4), 0x4);           /* the emptiest with a page waiting */
  CHECK_EQ(_ca_hot_target(count, 4, 8, 0x0), 0x6);           /* none waits: fresh pages, both */
  uint32_t near[4] = { 4, 3, 6, 9 };
  CHECK_EQ(_ca_hot_target(near, 4, 8, 0x1), 0x1);            /* one above the emptiest waits */
  CHECK_EQ(_ca_hot_target(near, 4, 8, 0x4), 0x3);            /* too far: the two lowest, fresh */
  CHECK_EQ(_ca_hot_target(full, 4, 8, 0xf), 0);
}

/* A scripted heap of 4096 pages: 8 clusters of 24 hot pages (touched in 90% of windows), 400
   warm pages scattered (30%), the rest cold (1%).  After 150 windows read through the jumping
   scan, the hottest K by heat must be the hot clusters. */
#define SP 4096
static void ranking(void) {
  static double p[SP];
  static uint8_t heat[SP];
  static bool truth[SP];
  for (int i = 0; i < SP; i++) p[i] = 0.01;
  for (int w = 0; w < 400; w++) p[next_rand() % SP] = 0.3;
  int k = 0;
  for (int c = 0; c < 8; c++) {
    int at = (int)(next_rand() % (SP - 24));
    for (int i = at; i < at + 24; i++) if (!truth[i]) { truth[i] = true; p[i] = 0.9; k++; }
  }
  ca_hot_scan_t st = {0};
  uint64_t r = 3;
  for (int w = 0; w < 150; w++) {
    uint64_t bits[SP / 64] = {0};
    for (int i = 0; i < SP; i++) if ((double)(next_rand() % 1000000) < p[i] * 1000000) set_bit(bits, (size_t)i);
    for (int lane = 0; lane < SP; lane += 64) _ca_hot_scan(heat + lane, 64, bits + lane / 64, &r, &st);
  }
  uint32_t hist[256] = {0};
  for (int i = 0; i < SP; i++) hist[heat[i]]++;
  uint32_t thr = _ca_hot_threshold(hist, (uint32_t)k);
  int found = 0, chosen = 0;
  for (int i = 0; i < SP; i++) { chosen += heat[i] >= thr; found += heat[i] >= thr && truth[i]; }
  fprintf(stderr, "ranking: top %d by heat (threshold %u, %d pages at or above): %d hot; %llu looks, %llu jumped over, %llu back-tracks\n",
          k, thr, chosen, found, (unsigned long long)st.checked, (unsigned long long)st.skipped, (unsigned long long)st.backtracks);
  CHECK(found * 10 >= k * 8);                      /* recall of the top K: 0.8 at least */
  CHECK(chosen <= k * 5 / 4);                      /* ... among not many more than K */
  CHECK(st.skipped > st.checked / 2);              /* the jumps saved looks */
}

/* ---- the program ------------------------------------------------------------------------------ */

typedef struct node_s { struct node_s* next; char pad[56]; } node_t;
static atomic_bool stop;
static atomic_long reads, efaults;

/* system calls on the heap while windows come and go: the program's own read() into small
   blocks (the wrappers open them), and glibc's own, which nothing wraps: stdio draining its
   buffer into a file, a directory stream filled by getdents */
static atomic_long stdio_errors, exited;
static void* leaver(void* arg) {
  char* b[16];
  for (int i = 0; i < 16; i++) { b[i] = malloc(64 + 32 * i); memset(b[i], i, 64); }
  for (int i = 0; i < 16; i++) free(b[i]);
  atomic_fetch_add(&exited, 1);
  return arg;
}
static void* reader(void* arg) {
  int fd[2];
  if (pipe(fd) != 0) return arg;
  char* buf[8];
  for (int i = 0; i < 8; i++) buf[i] = malloc(512);
  FILE* out = fopen("/dev/null", "w");
  for (long n = 0; !atomic_load(&stop); n++) {
    char* b = buf[n % 8];
    if (write(fd[1], "0123456789abcdef", 16) != 16) break;
    ssize_t r = read(fd[0], b + 128, 16);
    if (r < 0 && errno == EFAULT) atomic_fetch_add(&efaults, 1);
    if (r == 16) atomic_fetch_add(&reads, 1);
    if (out != NULL && (fprintf(out, "%ld %s\n", n, "a line through stdio's own buffer") < 0 || fflush(out) != 0))
      atomic_fetch_add(&stdio_errors, 1);
    if (n % 256 == 0) {
      DIR* d = opendir("/proc/self");
      int entries = 0;
      while (d != NULL && readdir(d) != NULL) entries++;
      if (d == NULL || entries < 3) atomic_fetch_add(&stdio_errors, 1);
      if (d != NULL) closedir(d);
      usleep(200);
    }
    if (n % 4096 == 0) {                           /* a detached thread (every 10 ms or so): */
      pthread_t t;                                 /* it frees its own stack */
      pthread_attr_t at;
      pthread_attr_init(&at);
      pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
      pthread_create(&t, &at, leaver, NULL);
      pthread_attr_destroy(&at);
    }
  }
  if (out != NULL) fclose(out);
  close(fd[0]); close(fd[1]);
  for (int i = 0; i < 8; i++) free(buf[i]);
  return arg;
}

/* the protection of the page at p, from /proc/self/maps ("rw-p"...), or "" */
static const char* perms_of(const void* p) {
  static char out[8];
  out[0] = 0;
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char pr[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, pr) == 3 && (uintptr_t)p >= lo && (uintptr_t)p < hi) { strcpy(out, pr); break; }
  }
  if (f) fclose(f);
  return out;
}

static int hot_pages_of(const char* p, int pages, int thr) {
  int n = 0;
  for (int k = 0; k < pages; k++) n += thr > 0 && _ca_hot_heat_of(p + k * 4096) >= thr;
  return n;
}

static node_t* chase(node_t* p, long steps) { for (long i = 0; i < steps; i++) p = p->next; return p; }

/* Twice the ways' worth of the set's pages moved to one colour, so that the spreading has work to
   do whatever frames the program got (a run of pages reads near even on the simulated hashed
   frames: one run found no colour over its share, and nothing to move).  The pages moved. */
static int skew(node_t** nodes, size_t n, int* ways) {
  for (int w = 0; w < 1000 && chromalloc_colour_count() <= 0; w++) usleep(10000);
  int colours = chromalloc_colour_count();
  *ways = (int)stats_value("colours", "ways");
  int id = colours > 0 ? chromalloc_colours(0, 0, 1, (unsigned)colours) : -1;
  if (id <= 0 || *ways <= 0 || chromalloc_colours_prepare(id, (size_t)(2 * *ways) * 4096, 10000) != 0) return 0;
  int moved = 0;
  uintptr_t last = 0;
  for (size_t i = 0; i < n && moved < 2 * *ways; i++) {
    uintptr_t pg = (uintptr_t)nodes[i] & ~(uintptr_t)4095;
    if (pg != last) moved += chromalloc_recolour((void*)pg, 4096, id) == 1;
    last = pg;
  }
  return moved;
}

static void program(void) {
  size_t l2 = l2_bytes(), n = l2 * 85 / 100 / sizeof(node_t);
  node_t** nodes = calloc(n, sizeof *nodes);
  char* cold[512];
  for (size_t i = 0, c = 0; i < n; i++) {
    nodes[i] = malloc(sizeof(node_t));
    if (i % 128 == 127 && c < 512) { cold[c] = malloc(4096 << (c % 3)); memset(cold[c], 1, 4096 << (c % 3)); c++; }
  }
  int skew_ways = 0, skewed = skew(nodes, n, &skew_ways);
  for (size_t i = n - 1; i > 0; i--) { size_t j = next_rand() % (i + 1); node_t* t = nodes[i]; nodes[i] = nodes[j]; nodes[j] = t; }
  for (size_t i = 0; i < n; i++) nodes[i]->next = nodes[(i + 1) % n];
  /* the program makes a page of its own small blocks read-only: it must stay so */
  char* small[32];
  for (int i = 0; i < 32; i++) { small[i] = malloc(500); memset(small[i], 7, 500); }
  char* ro = (char*)(((uintptr_t)small[0] + 4095) & ~(uintptr_t)4095);
  CHECK(ro + 4096 <= small[31]);                           /* a fresh span: the blocks in order */
  CHECK(mprotect(ro, 4096, PROT_READ) == 0);
  /* a block of 16 KiB written every lap: not trapped (blocks of 1 KiB and more), seen written */
  enum { BIG = 4 };
  char* big = malloc(BIG * 4096 + 4096);
  char* bigp = (char*)(((uintptr_t)big + 4095) & ~(uintptr_t)4095);
  pthread_t t;
  pthread_create(&t, NULL, reader, NULL);

  long budget = chromalloc_option("hot_budget");
  node_t* p = nodes[0];
  uint64_t t0 = l2_now_ns();
  int forks = 0;
  long long over_full = -1;
  /* the statistics are read every 100 ms: what they allocate is touched too */
  for (uint64_t look = t0; l2_now_ns() - t0 < 30000000000ull; ) {
    p = chase(p, 4 * (long)n);
    for (int k = 0; k < BIG; k++) bigp[k * 4096]++;
    if (l2_now_ns() < look) continue;
    look = l2_now_ns() + 100000000u;
    /* children while windows come and go and hot pages are measured: each chases the set and
       hands every node to a system call (a page the parent's worker was busy with at the fork
       must not hold the child up) */
    if (forks < 8 && stats_value("hot", "windows") > 10) {
      forks++;
      if (forks == 1) _ca_hot_test_busy((void*)((uintptr_t)nodes[0] & ~(uintptr_t)4095));   /* the worker on it */
      pid_t pid = fork();
      if (pid != 0) _ca_hot_test_busy(NULL);
      if (pid == 0) {
        chase(p, 2 * (long)n);
        int dn = open("/dev/null", O_WRONLY);
        for (size_t i = 0; i < n; i++) if (write(dn, nodes[i], sizeof(node_t)) != (ssize_t)sizeof(node_t)) _exit(3);
        _exit(0);
      }
      int status = -1;
      for (int w = 0; w < 1000 && waitpid(pid, &status, WNOHANG) == 0; w++) usleep(10000);
      if (waitpid(pid, &status, WNOHANG) == 0) { kill(pid, SIGKILL); waitpid(pid, &status, 0); fprintf(stderr, "program: a child hung\n"); }
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    bool forked = forks == 8;
    over_full = stats_value("hot", "over_full");
    if (forked && stats_value("hot", "moved") > 0 && over_full == 0 &&
        (!_ca_written_ok() || hot_pages_of(bigp, BIG, _ca_hot_threshold_now()) * 10 >= BIG * 8) &&
        stats_value("hot", "hot_pages") * 10 >= (long long)(n * sizeof(node_t) / 4096) * 9) break;
  }
  l2_sink = p;
  atomic_store(&stop, true);
  pthread_join(t, NULL);
  fprintf(stderr, "program: %.1f s; %lld windows, %lld hot pages (threshold %lld), %lld over-full as first measured, %lld now; %lld moved; %ld reads\n",
          (l2_now_ns() - t0) / 1e9, stats_value("hot", "windows"), stats_value("hot", "hot_pages"),
          stats_value("hot", "threshold"), stats_value("hot", "over_full_before"), stats_value("hot", "over_full"),
          stats_value("hot", "moved"), atomic_load(&reads));
  fprintf(stderr, "program: sampling %lld ppm of the run by its estimate (a trap %lld ns, %lld us owed); %lld lanes armed\n",
          stats_value("hot", "overhead_ppm"), stats_value("hot", "fault_ns"), stats_value("hot", "debt_us"),
          stats_value("hot", "lanes_armed"));
  fprintf(stderr, "program: %ld detached threads came and went, %lld lanes opened early for them\n",
          atomic_load(&exited), stats_value("hot", "quiet_cut"));

  /* found: the nodes' pages at or above the threshold */
  int thr = (int)stats_value("hot", "threshold"), found = 0, pages = 0;
  static int per[CA_COLOURS_MAX];
  uintptr_t last = 0;
  static uintptr_t seen[8192];
  int nseen = 0;
  for (size_t i = 0; i < n; i++) {
    uintptr_t pg = (uintptr_t)nodes[i] & ~(uintptr_t)4095;
    if (pg == last) continue;
    last = pg;
    bool dup = false;
    for (int k = 0; k < nseen && !dup; k++) dup = seen[k] == pg;
    if (dup || nseen == 8192) continue;
    seen[nseen++] = pg;
    pages++;
    bool hot = _ca_hot_heat_of((void*)pg) >= thr;
    found += hot;
    int c = _ca_colour_of((void*)pg);
    if (hot && c >= 0 && c < CA_COLOURS_MAX) per[c]++;     /* the spread's promise is for hot pages */
  }
  int colours = _ca_colour_count(), ways = (int)stats_value("colours", "ways"), most = 0;
  for (int c = 0; c < CA_COLOURS_MAX; c++) if (per[c] > most) most = per[c];
  fprintf(stderr, "program: %d of the set's %d pages found hot; %d colours of %d ways, at most %d hot pages on one\n",
          found, pages, colours, ways, most);
  CHECK(found * 10 >= pages * 8);                  /* recall 0.8 at least */
  int big_hot = hot_pages_of(bigp, BIG, thr);
  fprintf(stderr, "program: %d of the written block's %d pages hot (%lld lanes write-protected)\n", big_hot, BIG,
          stats_value("hot", "lanes_written"));
  if (_ca_written_ok()) CHECK(big_hot * 10 >= BIG * 8);
  fprintf(stderr, "program: %d of the set's pages moved to one colour at start\n", skewed);
  CHECK(skew_ways > 0 && skewed == 2 * skew_ways);
  CHECK(stats_value("hot", "moved") >= skew_ways);      /* half of them at least had to leave it */
  CHECK_EQ(over_full, 0);       /* reached (a page newly hot may be over until the next period) */
  CHECK(ways > 0 && most <= ways);
  CHECK(stats_value("hot", "moved") <= budget * stats_value("hot", "windows"));
  CHECK(stats_value("hot", "overhead_ppm") > 0);       /* reported */
  CHECK_EQ(atomic_load(&efaults), 0);
  CHECK_EQ(atomic_load(&stdio_errors), 0);
  CHECK(atomic_load(&reads) > 0);
  CHECK(atomic_load(&exited) > 0);
  CHECK(strncmp(perms_of(ro), "r--", 3) == 0);
  CHECK(stats_value("hot", "excluded_ranges") >= 1);
  /* a fork child finds the set itself: its worker starts at its first system call after
     hot_delay, and its windows and colours are its own */
  pid_t child = fork();
  if (child == 0) {
    usleep((useconds_t)chromalloc_option("hot_delay") * 1000 + 50000);
    int dn = open("/dev/null", O_WRONLY);
    if (dn < 0 || write(dn, "x", 1) != 1) _exit(3);
    CHECK_EQ(stats_value("hot", "windows"), 0);    /* the parent's are not counted here */
    for (uint64_t c0 = l2_now_ns(); l2_now_ns() - c0 < 20000000000ull; ) {
      p = chase(p, 4 * (long)n);
      if (stats_value("hot", "windows") > 5 && stats_value("hot", "measured") > 0) break;
    }
    long long w = stats_value("hot", "windows"), m = stats_value("hot", "measured"), h = stats_value("hot", "hot_pages");
    fprintf(stderr, "program: a fork child: %lld windows, %lld hot pages, %lld measured\n", w, h, m);
    _exit(w > 5 && m > 0 ? 0 : 1);           /* its own windows and measurements (how many are hot
                                               depends on how much CPU it had: not asserted) */
  }
  int cstatus = -1;
  waitpid(child, &cstatus, 0);
  CHECK(WIFEXITED(cstatus) && WEXITSTATUS(cstatus) == 0);
  CHECK(mprotect(ro, 4096, PROT_READ | PROT_WRITE) == 0);
  for (int i = 0; i < 32; i++) free(small[i]);
  free(big);
  for (size_t i = 0; i < n; i++) free(nodes[i]);
  free(nodes);
}

static void* leave_slowly(void* arg) {
  _ca_access_thread_leaving();                     /* as its exit does, 300 ms early */
  usleep(300000);
  return arg;
}

static void quiet(void) {
  char* r = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  uint64_t bits[1];
  memset(r, 1, 4 * 4096);
  int s = _ca_access_arm(r, 4, bits, false);
  CHECK(s >= 0);
  CHECK(strncmp(perms_of(r), "---", 3) == 0);
  _ca_access_hold(true);                           /* posix_spawn's way */
  CHECK(strncmp(perms_of(r), "rw-", 3) == 0);      /* opened at once */
  CHECK_EQ(_ca_access_arm(r, 4, bits, false), -1);
  CHECK(!_ca_access_disarm(s));                    /* its window was cut */
  _ca_access_hold(false);
  s = _ca_access_arm(r, 4, bits, false);
  CHECK(s >= 0);
  pthread_t t;
  pthread_create(&t, NULL, leave_slowly, NULL);
  usleep(50000);
  CHECK(strncmp(perms_of(r), "rw-", 3) == 0);
  CHECK_EQ(_ca_access_arm(r, 4, bits, false), -1);        /* the thread is still there */
  pthread_join(t, NULL);                           /* the kernel may reap it a moment later */
  for (int i = 0; i < 100 && (s = _ca_access_arm(r, 4, bits, false)) < 0; i++) usleep(1000);
  CHECK(s >= 0);                                   /* it is gone */
  pid_t pid = vfork();
  if (pid == 0) _exit(0);
  CHECK(strncmp(perms_of(r), "rw-", 3) == 0);
  CHECK_EQ(_ca_access_arm(r, 4, bits, false), -1);        /* 100 ms after vfork */
  waitpid(pid, NULL, 0);
  usleep(150000);
  s = _ca_access_arm(r, 4, bits, false);
  CHECK(s >= 0);
  CHECK(_ca_access_disarm(s));
  extern char** environ;
  char* argv[] = { "true", NULL };
  CHECK(posix_spawnp(&pid, "true", NULL, NULL, argv, environ) == 0);   /* held around, and let go */
  waitpid(pid, NULL, 0);
  s = _ca_access_arm(r, 4, bits, false);
  CHECK(s >= 0);
  CHECK(_ca_access_disarm(s));
  munmap(r, 4 * 4096);
  fprintf(stderr, "quiet: thread exit, posix_spawn and vfork keep ranges open\n");
}

/* how long a trapped range's pages waited to be touched, and how long it stayed armed: at least
   the sleeps before each touch (lower bounds only: the host may add, never take away) */
static void waited(void) {
  volatile char* r = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int i = 0; i < 4; i++) r[i * 4096] = 1;
  uint64_t bits[1], w = 0, open = 0;
  int s = _ca_access_arm((void*)r, 4, bits, false);
  CHECK(s >= 0);
  usleep(5000);
  r[1 * 4096] = 2;                                 /* waited 5 ms */
  usleep(5000);
  r[2 * 4096] = 3;                                 /* 10 ms */
  usleep(2000);
  CHECK(_ca_access_disarm(s));
  _ca_access_waited(s, &w, &open);
  CHECK_EQ(bits[0], (uint64_t)((1 << 1) | (1 << 2)));
  CHECK(w >= 14500000u && open >= 11500000u && w <= 2 * open);   /* less the first trap's own time */
  munmap((void*)r, 4 * 4096);
  fprintf(stderr, "waited: two pages touched 5 and 10 ms after arming waited %.1f ms in all, armed %.1f ms\n", w / 1e6, open / 1e6);
}

/* write protection: the pages written, and only those, seen; a system call writing into the
   range and a thread with every signal blocked go on; quiet does not stop it */
static void written(void) {
  if (!_ca_written_ok()) { fprintf(stderr, "written: not on this kernel (%s)\n", _ca_written_why()); return; }
  volatile char* r = mmap(NULL, 8 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int i = 0; i < 8; i++) r[i * 4096] = 1;
  uint64_t bits[1];
  _ca_access_hold(true);
  int s = _ca_access_arm((void*)r, 8, bits, true);
  CHECK(s >= 0);
  CHECK(strncmp(perms_of((void*)r), "rw-", 3) == 0);
  long sum = r[0] + r[2 * 4096];                   /* reads: unseen */
  r[1 * 4096] = 2;
  int fd[2];
  CHECK(pipe(fd) == 0);
  CHECK(write(fd[1], "x", 1) == 1);
  CHECK(read(fd[0], (char*)r + 3 * 4096 + 5, 1) == 1);   /* the kernel's write: no EFAULT */
  close(fd[0]); close(fd[1]);
  sigset_t all, old;
  sigfillset(&all);
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &old, 8);   /* not stripped: the real mask */
  r[6 * 4096] = 3;
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
  CHECK(_ca_access_disarm(s));
  _ca_access_hold(false);
  CHECK_EQ(bits[0], (uint64_t)((1 << 1) | (1 << 3) | (1 << 6)));
  CHECK(sum == 2 && r[3 * 4096 + 5] == 'x' && r[6 * 4096] == 3);
  munmap((void*)r, 8 * 4096);
  fprintf(stderr, "written: pages 1, 3 (by read()) and 6 (signals blocked) seen written, 0 and 2 (read) not\n");
}

/* a signal handler's system calls nested in our own locked sections (bash's SIGCHLD handler
   calls waitpid while its thread is inside a read() of ours, between lock and unlock): they
   open what they need themselves and go on; a deadlock is killed by the alarm */
static char* nest_page;
static int nest_fd[2];
static _Atomic int nest_reads;
static volatile char nest_in;
static void nest_handler(int sig) {
  (void)sig;
  int st;
  waitpid(-1, &st, WNOHANG);
  if (read(nest_fd[0], nest_page + 4096 + 7, 1) == 1) atomic_fetch_add(&nest_reads, 1);
}
static void nest_hook(char which) {
  if (which != nest_in) return;
  nest_in = 0;                                     /* once */
  raise(SIGUSR1);
}
static void nested(void) {
  nest_page = mmap(NULL, 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(nest_page, 1, 4 * 4096);
  CHECK(pipe(nest_fd) == 0);
  signal(SIGUSR1, nest_handler);
  char* heap = malloc(256);                        /* span memory: its release takes H.lock */
  alarm(10);
  for (int k = 0; k < 2; k++) {
    char which = "AH"[k];
    uint64_t bits[1];
    int s = _ca_access_arm(nest_page, 4, bits, false);
    CHECK(s >= 0);
    CHECK(write(nest_fd[1], "xy", 2) == 2);
    nest_in = which;
    _ca_test_locked = nest_hook;
    CHECK(read(nest_fd[0], heap, 1) == 1);         /* the handler reads first, in the middle */
    _ca_test_locked = NULL;
    CHECK(nest_in == 0);                           /* the section was reached */
    CHECK_EQ(atomic_load(&nest_reads), k + 1);
    CHECK(nest_page[4096 + 7] == 'x' && heap[0] == 'y');
    bool whole = _ca_access_disarm(s);
    if (which == 'A') CHECK(whole && bits[0] == 2);   /* page 1 opened by the nested read, seen touched */
    else CHECK(!whole);                            /* opened whole: no trap for a while */
    nest_page[4096 + 7] = 1;
  }
  alarm(0);
  signal(SIGUSR1, SIG_DFL);
  close(nest_fd[0]); close(nest_fd[1]);
  free(heap);
  munmap(nest_page, 4 * 4096);
  usleep(150000);                                  /* the nested call's quiet over */
  fprintf(stderr, "nested: system calls of a signal handler inside A.lock and H.lock went on\n");
}

/* a fork child's worker starts at a system call after hot_delay, but not at one a signal
   handler makes (pthread_create there may take a lock or a heap the signal interrupted): at the
   next call outside it.  Counted by raw system calls, which start nothing. */
static int threads_now(void) {
  char buf[4096];
  int fd = (int)_ca_syscall6(SYS_openat, AT_FDCWD, (long)"/proc/self/status", O_RDONLY, 0, 0, 0);
  long n = fd >= 0 ? _ca_syscall6(SYS_read, fd, (long)buf, sizeof buf - 1, 0, 0, 0) : -1;
  if (fd >= 0) _ca_syscall6(SYS_close, fd, 0, 0, 0, 0, 0);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char* t = strstr(buf, "Threads:");
  return t != NULL ? atoi(t + 8) : -1;
}
static int handler_fd;
static volatile int handler_threads;
static void child_handler(int sig) {
  (void)sig;
  if (write(handler_fd, "x", 1) == 1) handler_threads = threads_now();
}
static void child_in_handler(void) {
  pid_t pid = fork();
  if (pid == 0) {
    handler_fd = open("/dev/null", O_WRONLY);
    signal(SIGUSR1, child_handler);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct timespec d = { 0, ((long)chromalloc_option("hot_delay") + 50) * 1000000 };
    while (d.tv_nsec >= 1000000000) { d.tv_sec++; d.tv_nsec -= 1000000000; }
    _ca_syscall6(SYS_nanosleep, (long)&d, 0, 0, 0, 0, 0);   /* raw: the start is due from here */
    if (threads_now() != 1) _exit(1);
    raise(SIGUSR1);
    if (handler_threads != 1) _exit(2);           /* not started in the handler */
    sigset_t usr2;                                 /* blocked, but with no handler: no reason to wait */
    sigemptyset(&usr2);
    sigaddset(&usr2, SIGUSR2);
    _ca_syscall6(SYS_rt_sigprocmask, SIG_BLOCK, (long)&usr2, 0, 8, 0, 0);
    if (write(handler_fd, "y", 1) != 1) _exit(3);
    if (threads_now() != 2) _exit(4);             /* started at the next call */
    _exit(stats_value("hot", "child_start_deferred") >= 1 ? 0 : 5);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
  CHECK_EQ(WEXITSTATUS(st), 0);
  fprintf(stderr, "child in handler: a fork child's worker started after its signal handler, not in it\n");
}

/* the program closes our descriptors (a daemon closing every one) and opens files under their
   numbers: a forked child's handlers must not close the program's files for ours */
static void closed_fds(void) {
  int taken[8], n = 0;
  char path[64], link[128];
  for (int fd = 3; fd < 1024 && n < 8; fd++) {
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(path, link, sizeof link - 1);
    if (k <= 0) continue;
    link[k] = 0;
    if (strstr(link, "userfaultfd") == NULL && strstr(link, "/pagemap") == NULL) continue;
    snprintf(path, sizeof path, "%s/tmp/fd%d", getenv("TEST_WORK"), fd);
    int f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(f >= 0 && dup2(f, fd) == fd);            /* ours closed, the program's file in its place */
    close(f);
    taken[n++] = fd;
  }
  CHECK(n >= 2);                                   /* hot pages' write protection: a uffd and pagemap */
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < n; i++) if (write(taken[i], "ok", 2) != 2) _exit(1);
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  for (int i = 0; i < n; i++) {
    char got[4] = "";
    CHECK(pread(taken[i], got, 2, 0) == 2 && memcmp(got, "ok", 2) == 0);
    close(taken[i]);
  }
  fprintf(stderr, "closed fds: %d of our descriptors replaced by the program's files; a child wrote to all\n", n);
}

/* the colour layer's state in the statistics: "off" until something wants it */
static bool colours_off(void) {
  static char buf[1 << 18];
  chromalloc_stats_json(buf, sizeof buf);
  return strstr(buf, "\"colours\":{\"state\":\"off\"") != NULL;
}

/* hot_fit: a hot set of a quarter of the L2, found, starts no colour layer (random frames fit
   it); a slice asked for starts it with that slice's sets alone; the set grown to 85% of the L2
   wants every colour's.  Run alone in its process: nothing else asks for colours. */
static void fit(void) {
  size_t l2 = l2_bytes(), small = l2 / 4 / sizeof(node_t), big = l2 * 85 / 100 / sizeof(node_t);
  node_t** nodes = calloc(big, sizeof *nodes);
  for (size_t i = 0; i < big; i++) {
    nodes[i] = malloc(sizeof(node_t));
    if (i % 128 == 127) { char* c = malloc(8192); memset(c, 1, 8192); }   /* cold, kept */
  }
  for (size_t i = 0; i < small; i++) nodes[i]->next = nodes[(i + 1) % small];
  long long set_pages = (long long)(small * sizeof(node_t) / 4096);
  node_t* p = nodes[0];
  uint64_t t0 = l2_now_ns();
  while (l2_now_ns() - t0 < 20000000000ull &&
         !(stats_value("hot", "windows") >= 40 && stats_value("hot", "hot_pages") * 10 >= set_pages * 8))
    p = chase(p, 4 * (long)small);
  fprintf(stderr, "fit: a quarter of the L2: %lld hot pages of %lld after %lld windows; colours wanted %lld\n",
          stats_value("hot", "hot_pages"), set_pages, stats_value("hot", "windows"), stats_value("hot", "colours_wanted"));
  CHECK(stats_value("hot", "hot_pages") * 10 >= set_pages * 8);   /* found */
  CHECK_EQ(stats_value("hot", "colours_wanted"), 0);
  CHECK(colours_off());
  CHECK(chromalloc_colour_count() < 0);
  /* a slice asked for: the layer starts for it, with the sets it needs, not every colour's */
  CHECK(chromalloc_colours(0, 0, 1, 8) > 0);
  for (int w = 0; w < 1000 && chromalloc_colour_count() <= 0; w++) usleep(10000);
  long long colours = chromalloc_colour_count(), sets = stats_value("colours", "eviction_sets");
  fprintf(stderr, "fit: a slice asked for: %lld of %lld colours' sets\n", sets, colours);
  CHECK(colours > 0 && sets > 0 && sets < colours);
  CHECK_EQ(stats_value("hot", "colours_wanted"), 0);
  for (size_t i = 0; i < big; i++) nodes[i]->next = nodes[(i + 1) % big];
  t0 = l2_now_ns();
  while (l2_now_ns() - t0 < 30000000000ull &&
         (stats_value("hot", "colours_wanted") != 1 || stats_value("colours", "eviction_sets") < colours))
    p = chase(p, 4 * (long)big);
  l2_sink = p;
  fprintf(stderr, "fit: 85%% of the L2: colours wanted %lld after %lld ms, %lld of %lld colours' sets\n",
          stats_value("hot", "colours_wanted"), stats_value("hot", "colours_wanted_ms"),
          stats_value("colours", "eviction_sets"), colours);
  CHECK_EQ(stats_value("hot", "colours_wanted"), 1);
  CHECK_EQ(stats_value("colours", "eviction_sets"), colours);   /* every colour's, for the spread */
}

/* Ranges kept in their threads' logs (rangelog.c), run with a worker that never starts (so
   only the logs' own drains apply them): every live range is seen when asked for, from any
   thread, after its thread ended, past a full log and in a fork child; every range given back
   is gone, struck out of the log of the thread that noted it or of another's (a remote free),
   or removed once applied; a thread's own churn never reaches the shared index. */
#define BIG (256 << 10)                /* a large object: tracked, write-protected */
static void* big_in_thread(void* arg) {
  void** out = arg;
  for (int i = 0; i < 100; i++) out[i] = malloc(BIG);
  return NULL;
}
static void* free_in_thread(void* arg) { free(arg); return NULL; }
static void ranges(void) {
  void* p[100];
  pthread_t t;
  CHECK(pthread_create(&t, NULL, big_in_thread, p) == 0);   /* more than a log holds; the thread ends */
  pthread_join(t, NULL);
  int seen = 0;
  for (int i = 0; i < 100; i++) seen += _ca_hot_heat_of(p[i]) >= 0;
  CHECK_EQ(seen, 100);
  long long struck = stats_value("hot", "ranges_struck"), n = stats_value("hot", "ranges");
  for (int i = 0; i < 1000; i++) { void* volatile q = malloc(BIG); free(q); }   /* this thread's churn */
  CHECK_EQ(stats_value("hot", "ranges_struck"), struck + 1000);
  CHECK_EQ(stats_value("hot", "ranges"), n);
  for (int i = 0; i < 50; i++) free(p[i]);                  /* applied: removed */
  for (int i = 50; i < 100; i++) { CHECK(pthread_create(&t, NULL, free_in_thread, p[i]) == 0); pthread_join(t, NULL); }
  seen = 0;
  for (int i = 0; i < 100; i++) seen += _ca_hot_heat_of(p[i]) >= 0;
  CHECK_EQ(seen, 0);
  /* noted here, freed by another thread: struck out of this thread's log */
  void* q = malloc(BIG);
  struck = stats_value("hot", "ranges_struck");
  CHECK(pthread_create(&t, NULL, free_in_thread, q) == 0);
  pthread_join(t, NULL);
  CHECK_EQ(stats_value("hot", "ranges_struck"), struck + 1);
  CHECK(_ca_hot_heat_of(q) < 0);
  /* noted in the parent, seen in a fork child; freed there, gone */
  q = malloc(BIG);
  pid_t pid = fork();
  if (pid == 0) {
    bool ok = _ca_hot_heat_of(q) >= 0;
    free(q);
    ok = ok && _ca_hot_heat_of(q) < 0;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(_ca_hot_heat_of(q) >= 0);
  free(q);
  CHECK(_ca_hot_heat_of(q) < 0);
}

int main(int argc, char** argv) {
  require_chromalloc("test_hot");
  if (chromalloc_option("hot") != 1) { fprintf(stderr, "test_hot: run with CHROMALLOC_OPTIONS=hot=1\n"); return 2; }
  if (argc > 1 && strcmp(argv[1], "fit") == 0) { fit(); return check_done("test_hot fit"); }
  if (argc > 1 && strcmp(argv[1], "ranges") == 0) { ranges(); return check_done("test_hot ranges"); }
  pieces();
  ranking();
  quiet();
  waited();
  written();
  nested();
  child_in_handler();
  program();
  if (_ca_written_ok()) closed_fds();              /* last: our descriptors are gone after it */
  return check_done("test_hot");
}
