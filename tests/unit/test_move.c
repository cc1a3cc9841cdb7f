/* Moving live pages (move.c; internal interfaces: built static only), each way the machine
   offers: 100,000 moves of a page that another thread keeps writing lose no write and no byte
   of its other data, and by UFFDIO_MOVE add no mapping; while a forked child shares the pages
   (UFFDIO_MOVE answers EBUSY) the moves fall back to mremap and still lose nothing; nor while
   another thread arms access traps on the page, or the locality monitor samples it.

     test_move            the default: UFFDIO_MOVE where the kernel offers it (said when not)
     test_move mremap     run with colour_moves=mremap: every move an mremap
     test_move seccomp    userfaultfd denied by a seccomp filter before the first move: the
                          moves fall back to mremap, saying why */
#include "check.h"
#include "../../src/color/colour.h"
#include "../../src/monitor/monitor.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#define PAGE 4096
#define COUNTERS 256                     /* the first half of the page: the writer's */

static volatile unsigned long* page;
static atomic_bool stop;
static unsigned long writes;

static void* writer(void* arg) {
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) { page[writes % COUNTERS]++; writes++; }
  return arg;
}

static const char* stats_string(const char* key, char* out, size_t len) {
  static char json[1 << 18];
  chromalloc_stats_json(json, sizeof json);
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\":\"", key);
  const char* p = strstr(json, "\"moves\":{");
  p = p != NULL ? strstr(p, pat) : NULL;
  out[0] = 0;
  if (p != NULL) {
    p += strlen(pat);
    size_t n = 0;
    while (p[n] && p[n] != '"' && n + 1 < len) { out[n] = p[n]; n++; }
    out[n] = 0;
  }
  return out;
}

static long maps_count(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  long n = 0;
  for (int c; f != NULL && (c = fgetc(f)) != EOF;) n += c == '\n';
  if (f) fclose(f);
  return n;
}

static bool pattern_intact(void) {
  const unsigned char* b = (const unsigned char*)page;
  for (int i = COUNTERS * 8; i < PAGE; i++)
    if (b[i] != (unsigned char)(i * 7)) return false;
  return true;
}

/* n moves of the live page, each into the frame the last one parked: returns moves made,
   *by_uffd those made by UFFDIO_MOVE */
static long move_n(long n, long* by_uffd) {
  uint8_t* fresh = _ca_colour_slot();
  uint8_t* park = _ca_colour_slot();
  CHECK(fresh != NULL && park != NULL);
  /* the first fresh frame: the slot region is writable where pages move in by UFFDIO_MOVE, an
     inaccessible reservation otherwise */
  if (!_ca_move_uffd()) CHECK(mmap(fresh, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == fresh);
  fresh[0] = 1;
  long moved = 0;
  *by_uffd = 0;
  for (long i = 0; i < n; i++) {
    bool parked = false;
    int how = _ca_colour_move_live((void*)page, fresh, park, &parked);
    if (how == 0 || !parked) break;
    moved++;
    *by_uffd += how == 1;
    /* the old frame, parked read-only by the mremap way, is the next move's fresh frame; the
       next park is the frame's old address, unless mremap took it away: that hole may hold
       another thread's mapping by now (a new thread's stack, a heap), and a page moved there
       would replace it */
    mprotect(park, PAGE, PROT_READ | PROT_WRITE);
    uint8_t* t = fresh; fresh = park; park = how == 2 ? _ca_colour_slot() : t;
    CHECK(park != NULL);
  }
  return moved;
}

static void live_moves(long n, bool want_uffd, bool some_uffd) {
  pthread_t t;
  atomic_store(&stop, false);
  writes = 0;
  pthread_create(&t, NULL, writer, NULL);
  long maps0 = maps_count(), by_uffd = 0;        /* the writer's stack counted */
  long moved = move_n(n, &by_uffd);
  long maps1 = maps_count();
  atomic_store(&stop, true);
  pthread_join(t, NULL);
  unsigned long sum = 0;
  for (int i = 0; i < COUNTERS; i++) sum += page[i];
  fprintf(stderr, "test_move: %ld of %ld moves (%ld by UFFDIO_MOVE) while %lu writes; mappings %ld -> %ld\n",
          moved, n, by_uffd, writes, maps0, maps1);
  CHECK_EQ(moved, n);
  CHECK_EQ(sum, writes);                       /* no write lost */
  CHECK(pattern_intact());                     /* nor any other byte */
  CHECK(writes > 0);
  if (want_uffd) {
    CHECK_EQ(by_uffd, n);
    CHECK(maps1 <= maps0 + 2);                 /* no mapping per move */
  } else if (some_uffd) {
    CHECK(by_uffd > 0);                        /* an armed page moves by mremap */
  } else {
    CHECK_EQ(by_uffd, 0);
  }
  for (int i = 0; i < COUNTERS; i++) page[i] = 0;
}

/* Another thread changes the page's protection meanwhile, `times` counting its rounds: the
   moves must lose no write to it. */
static atomic_bool beside_on;
static atomic_long times;
static void moves_beside(void* (*side)(void*), const char* what, long n, bool uffd) {
  pthread_t t;
  atomic_store(&times, 0);
  atomic_store(&beside_on, true);
  pthread_create(&t, NULL, side, NULL);
  live_moves(n, false, uffd);
  atomic_store(&beside_on, false);
  pthread_join(t, NULL);
  fprintf(stderr, "test_move: the page %s %ld times meanwhile\n", what, atomic_load(&times));
  CHECK(atomic_load(&times) > 0);
}

/* Access traps (monitor/access.c) arm and open the page, as hot pages' windows do while another
   thread recolours: no trap may open the page under a move's copy, nor a window's arming make
   the mover's own copy fault (a write was lost in test_rocs `fixed`; here the moves hung). */
static void* armer(void* arg) {
  uint64_t bits[1];
  while (atomic_load(&beside_on)) {
    int id = _ca_access_arm((void*)page, 1, bits, false);
    for (volatile int i = 0; i < 200; i++) {}
    if (id >= 0) { _ca_access_disarm(id); atomic_fetch_add(&times, 1); }
  }
  return arg;
}

/* The locality monitor samples the page (protects it, opens it at a fault), as it does a
   NightWatch chunk's pages while hot pages or protection recolour them. */
static void verdict(void* chunk, size_t size, uint64_t cookie, const ca_monitor_result_t* r) { (void)chunk; (void)size; (void)cookie; (void)r; }
static void* sampler(void* arg) {
  while (atomic_load(&beside_on)) {
    if (!_ca_monitor_start((void*)page, PAGE, 7)) { usleep(100); continue; }
    atomic_fetch_add(&times, 1);
    usleep(300);
    _ca_monitor_stop((void*)page);
  }
  return arg;
}

/* A child shares every page (copy on write): UFFDIO_MOVE refuses them, mremap moves them. */
static void moves_while_shared(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  if (pid == 0) {                              /* holds the pages until the parent is done */
    char c;
    close(fds[1]);
    int ok = read(fds[0], &c, 1) >= 0 && pattern_intact();
    _exit(ok ? 0 : 1);
  }
  close(fds[0]);
  long fell0 = stats_value("moves", "uffd_fell_back"), by_uffd = 0;
  long moved = move_n(1000, &by_uffd);
  long fell = stats_value("moves", "uffd_fell_back") - fell0;
  fprintf(stderr, "test_move: with a child sharing the pages, %ld of 1000 moves (%ld by UFFDIO_MOVE, %ld fell back)\n",
          moved, by_uffd, fell);
  CHECK_EQ(moved, 1000);
  CHECK(pattern_intact());
  CHECK(fell >= 1);                            /* the first move at least: the page was shared */
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);   /* the child's copy untouched */
}

static void deny_userfaultfd(void) {
  struct sock_filter f[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = { (unsigned short)(sizeof f / sizeof f[0]), f };
  CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
  CHECK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0);
  CHECK(syscall(SYS_userfaultfd, O_CLOEXEC) == -1 && errno == EPERM);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "auto";
  char method[64], because[128];
  CHECK(strcmp(stats_string("method", method, sizeof method), "untried") == 0);
  if (strcmp(mode, "seccomp") == 0) deny_userfaultfd();
  CHECK(_ca_pool_init());
  page = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int i = COUNTERS * 8; i < PAGE; i++) ((unsigned char*)page)[i] = (unsigned char)(i * 7);
  bool uffd = _ca_move_uffd();
  stats_string("method", method, sizeof method);
  stats_string("mremap_because", because, sizeof because);
  fprintf(stderr, "test_move (%s): moves by %s%s%s\n", mode, method, uffd ? "" : ": ", because);
  if (strcmp(mode, "auto") == 0) {
    CHECK(strcmp(method, uffd ? "userfaultfd" : "mremap") == 0);
    /* a kernel without UFFDIO_MOVE (before 6.8) or without userfaultfd only says so */
    if (!uffd) CHECK(strstr(because, "kernel") != NULL || strstr(because, "denied") != NULL);
  } else {
    CHECK(!uffd);
    CHECK(strcmp(method, "mremap") == 0);
    CHECK(strcmp(because, strcmp(mode, "mremap") == 0 ? "colour_moves=mremap" : "userfaultfd denied") == 0);
  }
  live_moves(100000, uffd, uffd);
  moves_beside(armer, "armed", 100000, uffd);
  _ca_monitor_init(verdict);
  moves_beside(sampler, "sampled by the monitor", 100000, uffd);
  if (uffd) moves_while_shared();
  return check_done("test_move");
}
