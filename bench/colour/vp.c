/* vp: a victim and a polluter in one unmodified program, for bench/colour_start.py.

   The victim: --victim-kib of 64-byte nodes (default half the L2), each malloc'd on its own and
   linked in a random cyclic order.  Each round: a fresh buffer of --buf-kib (default four times
   the L2) is malloc'd from its own call site, written once and freed (the polluter), then one lap
   of the victim is chased (each node once) and timed.  The program runs for --seconds.

   Under the cache runtime NightWatch learns from the buffer's call site that it pollutes, and the
   colour layer gives later buffers pages of 1/8 of the L2's colours: the victim then stays in the
   L2.  No chromalloc API is called: the program is what a user would run.

   The victim alone is measured in the same process, in the same moments: the first 10 ms of every
   100 ms are laps without the buffer (the first two of each such stretch not counted: they reload
   what the polluter evicted).  A ratio of two runs would mostly measure how the shared host's
   load changed between them (the victim's own time swings 2x from second to second here).

   Usage: vp [--seconds=S] [--victim-kib=K] [--buf-kib=K] [--alone] [--touch] [--busy] [--streamer]
             [--seed=N]
     --alone     no buffer at all: the victim alone, the best case
     --touch     the buffer written one byte per page, not whole: what its pages cost the victim
                 through address translation (TLB entries, page walks) with hardly a line of it
                 in the L2
     --busy      a second thread spins on arithmetic (both vCPUs busy with the program)
     --streamer  a second thread streams a 64 MiB array without pause (the L3 shared with the
                 worker's CPU is thrashed)
   Output: one line per second of run time, `SECOND <k> ns=<median ns per node with the polluter>
   alone=<median of the laps alone> ratio=<ns/alone> rounds=<n>`, then `RESULT vp victim_ns=<median>
   victim_ns_from2s=<median of the rounds after the first second> alone_ns_from2s=<the same, alone>
   ratio_from2s=<median of the per-second ratios after the first second> rounds=<n> seconds=<s>
   checksum=<hex>` (the checksum depends on the options and the rounds run). */
#include "../src/bench.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

typedef struct node_s { struct node_s* next; uint64_t pad[7]; } node_t;   /* 64 bytes */

static atomic_bool stop;

static double now_s(void) { return (double)now_ns() * 1e-9; }

/* L2 size in bytes (512 KiB when it is not known) */
static size_t l2_bytes(void) {
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v >= (64 << 10) ? (size_t)v : 512 << 10;
}

/* the polluter's call site: its own function, so that its allocation context is its own */
__attribute__((noinline)) static uint8_t* polluter_alloc(size_t n) { return check_alloc(malloc(n), n); }

__attribute__((noinline)) static node_t* victim_alloc(void) { return check_alloc(malloc(sizeof(node_t)), sizeof(node_t)); }

static void* busy(void* arg) {
  volatile uint64_t x = (uintptr_t)arg | 1;
  while (!atomic_load_explicit(&stop, memory_order_relaxed))
    for (int i = 0; i < 100000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return NULL;
}

static void* streamer(void* arg) {
  size_t n = (size_t)64 << 20;
  volatile uint8_t* b = check_alloc(malloc(n), n);
  memset((void*)b, 1, n);
  while (!atomic_load_explicit(&stop, memory_order_relaxed))
    for (size_t i = 0; i < n; i += 64) b[i]++;
  free((void*)b);
  return arg;
}

enum { LAP_WITH, LAP_ALONE, LAP_WARM };
#define WINDOW_MS 100                            /* every 100 ms ...           */
#define ALONE_MS 10                              /* ... begins with 10 ms alone */

/* the median of the laps of one kind begun in [from, to) seconds (0 when there are none) */
static double median_of(const double* ns, const double* at, const uint8_t* kind, size_t rounds,
                        double from, double to, int k, double* tmp) {
  size_t m = 0;
  for (size_t i = 0; i < rounds; i++)
    if (kind[i] == k && at[i] >= from && at[i] < to) tmp[m++] = ns[i];
  if (m == 0) return 0;
  qsort(tmp, m, sizeof *tmp, cmp_double);
  return tmp[m / 2];
}

static size_t count_of(const double* at, size_t rounds, int s) {
  size_t m = 0;
  for (size_t i = 0; i < rounds; i++) m += (int)at[i] == s;
  return m;
}

static double opt_num(const char* a, const char* name) {
  char* end;
  double v = strtod(a + strlen(name), &end);
  if (*end || end == a + strlen(name) || v < 0) fail("%s needs a number >= 0", name);
  return v;
}

int main(int argc, char** argv) {
  bench_name = "vp";
  double seconds = 5;
  size_t victim = l2_bytes() / 2, buf = 4 * l2_bytes();
  bool alone = false, touch = false, with_busy = false, with_streamer = false;
  uint64_t seed = 1;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!strncmp(a, "--seconds=", 10)) seconds = opt_num(a, "--seconds=");
    else if (!strncmp(a, "--victim-kib=", 13)) victim = (size_t)opt_num(a, "--victim-kib=") << 10;
    else if (!strncmp(a, "--buf-kib=", 10)) buf = (size_t)opt_num(a, "--buf-kib=") << 10;
    else if (!strncmp(a, "--seed=", 7)) seed = (uint64_t)opt_num(a, "--seed=");
    else if (!strcmp(a, "--alone")) alone = true;
    else if (!strcmp(a, "--touch")) touch = true;
    else if (!strcmp(a, "--busy")) with_busy = true;
    else if (!strcmp(a, "--streamer")) with_streamer = true;
    else fail("unknown option '%s' (see the header of bench/colour/vp.c)", a);
  }
  size_t n = victim / sizeof(node_t);
  if (n < 2) fail("the victim needs at least two nodes");
  node_t** nodes = check_alloc(malloc(n * sizeof *nodes), n * sizeof *nodes);
  for (size_t i = 0; i < n; i++) nodes[i] = victim_alloc();
  rng_t r = rng_seed(seed);
  for (size_t i = n - 1; i > 0; i--) {                /* a random cyclic order */
    size_t j = (size_t)rng_range(&r, 0, i);
    node_t* t = nodes[i]; nodes[i] = nodes[j]; nodes[j] = t;
  }
  for (size_t i = 0; i < n; i++) nodes[i]->next = nodes[(i + 1) % n];
  node_t* start = nodes[0];
  free(nodes);

  pthread_t other;
  bool have_other = with_busy || with_streamer;
  if (have_other && pthread_create(&other, NULL, with_busy ? busy : streamer, NULL) != 0) fail("no second thread");

  size_t cap = 1 << 16, rounds = 0;
  double* ns = check_alloc(malloc(cap * sizeof *ns), cap * sizeof *ns);
  double* at = check_alloc(malloc(cap * sizeof *at), cap * sizeof *at);
  uint8_t* kind = check_alloc(malloc(cap), cap);    /* LAP_WITH, LAP_ALONE or LAP_WARM */
  uint64_t sum = 0;
  double t0 = now_s(), t = t0;
  int warm = 0;
  for (; t - t0 < seconds; rounds++) {
    bool quiet = alone || (uint64_t)((t - t0) * 1000) % WINDOW_MS < ALONE_MS;
    if (!quiet) {
      uint8_t* b = polluter_alloc(buf);
      if (touch) for (size_t i = 0; i < buf; i += 4096) b[i] = (uint8_t)rounds;
      else memset(b, (int)(rounds & 0xff), buf);
      sum += *(volatile uint8_t*)(b + buf / 2) != (uint8_t)rounds;   /* 0: read, so written */
      free(b);
      warm = 0;
    }
    double c0 = now_s();
    node_t* p = start;
    for (size_t i = 0; i < n; i++) p = p->next;
    t = now_s();
    sum += p == start;                             /* a lap ends where it began */
    if (rounds == cap) {
      cap *= 2;
      ns = check_alloc(realloc(ns, cap * sizeof *ns), cap * sizeof *ns);
      at = check_alloc(realloc(at, cap * sizeof *at), cap * sizeof *at);
      kind = check_alloc(realloc(kind, cap), cap);
    }
    ns[rounds] = (t - c0) * 1e9 / (double)n;
    at[rounds] = c0 - t0;
    kind[rounds] = !quiet ? LAP_WITH : alone || warm >= 2 ? LAP_ALONE : LAP_WARM;
    warm += quiet;
  }
  atomic_store(&stop, true);
  if (have_other) pthread_join(other, NULL);

  /* per second of run time, and overall */
  double* tmp = check_alloc(malloc(rounds * sizeof *tmp + 1), rounds * sizeof *tmp + 1);
  double ratios[4096];
  size_t nr = 0;
  int want = alone ? LAP_ALONE : LAP_WITH;
  for (int s = 0; (double)s < seconds; s++) {
    double with = median_of(ns, at, kind, rounds, s, s + 1, want, tmp);
    double quiet = median_of(ns, at, kind, rounds, s, s + 1, LAP_ALONE, tmp);
    if (with == 0) continue;
    double ratio = quiet > 0 ? with / quiet : 0;
    if (s >= 1 && ratio > 0 && nr < 4096) ratios[nr++] = ratio;
    printf("SECOND %d ns=%.3f alone=%.3f ratio=%.3f rounds=%zu\n", s, with, quiet, ratio, count_of(at, rounds, s));
  }
  qsort(ratios, nr, sizeof *ratios, cmp_double);
  printf("RESULT vp victim_ns=%.3f victim_ns_from2s=%.3f alone_ns_from2s=%.3f ratio_from2s=%.3f rounds=%zu seconds=%.3f checksum=%zx\n",
         median_of(ns, at, kind, rounds, 0, 1e9, want, tmp), median_of(ns, at, kind, rounds, 1, 1e9, want, tmp),
         median_of(ns, at, kind, rounds, 1, 1e9, LAP_ALONE, tmp), nr ? ratios[nr / 2] : 0, rounds, t - t0,
         (size_t)(n * 31 + buf * 7 + alone + touch * 3 + seed * 131 + sum));
  return 0;
}
