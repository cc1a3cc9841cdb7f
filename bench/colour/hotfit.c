/* hotfit: a hot set near the L2's size, chased among cold allocations (issue: hot pages).

   A linked structure of 64-byte nodes (malloc(64) each) holding `pct`% of the L2 is chased in
   a random order, one dependent load per node, for `seconds`; between the hot nodes the program
   allocates cold blocks (256 B-16 KiB, `cold` MiB in all) that it writes once and then touches one
   line of every tenth of a second, so the heap is mostly cold pages with hot ones among them.
   Every second prints the chase's ns per node in that second:

     SECOND n ns=X
     RESULT pct=P nodes=N ns_from3s=X        (median of the seconds from the 3rd on)
            [hot_pages=H recall=R cold_pages=C cold_called_hot=F]   (hot pages on: below)

   With random frames, a hot set of 85% of the L2 has some colours holding more of its pages
   than the L2 has ways: those lines evict one another on every lap.  Hot-page colouring spreads
   the hot pages evenly over the colours (docs/hot.md).

   Build: cc -O2 -o build/bench/hotfit bench/colour/hotfit.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=hot=1 build/bench/hotfit --pct=85 */
#define _GNU_SOURCE
#include "l2reading.h"
#include <stdio.h>

typedef struct node_s { struct node_s* next; char pad[56]; } node_t;

/* the cache runtime's hot pages, when it is loaded (weak: the program runs under any malloc) */
extern int chromalloc_heat(const void* p) __attribute__((weak));
extern int chromalloc_hot_threshold(void) __attribute__((weak));

static int cmp_ptr(const void* a, const void* b) {
  uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

/* distinct pages of n addresses (sorted in place); how many of them the runtime calls hot */
static size_t pages_of(uintptr_t* a, size_t n, size_t* hot, int thr) {
  for (size_t i = 0; i < n; i++) a[i] &= ~(uintptr_t)4095;
  qsort(a, n, sizeof *a, cmp_ptr);
  size_t d = 0;
  *hot = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || a[i] != a[i - 1]) { d++; *hot += thr >= 0 && chromalloc_heat((void*)a[i]) >= thr; }
  return d;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  double pct = 85, cold_mib = 16;
  int seconds = 10;
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--pct=%lf", &pct) == 1) continue;
    if (sscanf(argv[i], "--seconds=%d", &seconds) == 1) continue;
    if (sscanf(argv[i], "--cold=%lf", &cold_mib) == 1) continue;
    fprintf(stderr, "usage: hotfit [--pct=85] [--seconds=10] [--cold=16 (MiB)]\n");
    return 2;
  }
  if (seconds < 1 || seconds > 3600 || pct <= 0 || pct > 400 || cold_mib < 0) { fprintf(stderr, "hotfit: bad argument\n"); return 2; }
  size_t n = (size_t)(l2_bytes() * pct / 100) / sizeof(node_t);
  node_t** nodes = calloc(n, sizeof *nodes);
  size_t ncold_max = (size_t)(cold_mib * 1024) + 16, ncold = 0, cold_bytes = 0;
  char** cold = calloc(ncold_max, sizeof *cold);
  size_t* cold_len = calloc(ncold_max, sizeof *cold_len);
  if (!nodes || !cold || !cold_len) return 1;
  /* hot nodes, with a cold block after every 64 of them while the cold budget lasts */
  size_t cold_every = 64;
  for (size_t i = 0; i < n; i++) {
    nodes[i] = malloc(sizeof(node_t));
    if (!nodes[i]) return 1;
    if (i % cold_every == cold_every - 1 && cold_bytes < cold_mib * 1048576 && ncold < ncold_max) {
      size_t len = 256 << (next_rand() % 7);
      cold[ncold] = malloc(len);
      if (!cold[ncold]) return 1;
      memset(cold[ncold], 1, len);
      cold_len[ncold++] = len;
      cold_bytes += len;
    }
  }
  while (cold_bytes < cold_mib * 1048576 && ncold < ncold_max) {      /* the rest of the cold */
    size_t len = 256 << (next_rand() % 7);
    if (!(cold[ncold] = malloc(len))) return 1;
    memset(cold[ncold], 1, len);
    cold_len[ncold++] = len;
    cold_bytes += len;
  }
  /* one random cycle through every node */
  for (size_t i = n - 1; i > 0; i--) { size_t j = next_rand() % (i + 1); node_t* t = nodes[i]; nodes[i] = nodes[j]; nodes[j] = t; }
  for (size_t i = 0; i < n; i++) nodes[i]->next = nodes[(i + 1) % n];
  node_t* p = nodes[0];
  uint64_t* per = calloc((size_t)seconds, sizeof *per);
  uint64_t start = l2_now_ns(), next_cold = start;
  size_t cold_at = 0;
  for (int s = 0; s < seconds; s++) {
    uint64_t steps = 0, t0 = l2_now_ns(), end = start + (uint64_t)(s + 1) * 1000000000u, now = t0;
    while (now < end) {
      for (size_t k = 0; k < 4096; k++) p = p->next;
      steps += 4096;
      now = l2_now_ns();
      if (now >= next_cold && ncold > 0) {      /* cold: one line of some blocks, 10 times a second */
        for (size_t k = 0; k < ncold / 64 + 1; k++, cold_at++) cold[cold_at % ncold][(cold_at * 64) % cold_len[cold_at % ncold]]++;
        next_cold = now + 100000000u;
      }
    }
    per[s] = steps ? (uint64_t)((double)(now - t0) * 1000 / (double)steps) : 0;   /* ps per node */
    printf("SECOND %d ns=%.3f\n", s + 1, per[s] / 1000.0);
    fflush(stdout);
  }
  l2_sink = p;
  /* hotness accuracy, under the cache runtime with hot pages on: of the nodes' pages (touched
     every lap: the true top), those it calls hot (recall); of the cold blocks' pages, those it
     calls hot too */
  char acc[128] = "";
  int thr = chromalloc_hot_threshold ? chromalloc_hot_threshold() : -1;
  if (thr >= 0) {
    uintptr_t* a = malloc((n + ncold) * sizeof *a);
    if (a == NULL) return 1;
    for (size_t i = 0; i < n; i++) a[i] = (uintptr_t)nodes[i];
    size_t hot_nodes, hot_cold, np = pages_of(a, n, &hot_nodes, thr), nc = 0;
    for (size_t i = 0; i < ncold; i++)                  /* each page of every cold block */
      for (size_t off = 0; off < cold_len[i] && nc < n + ncold; off += 4096) a[nc++] = (uintptr_t)cold[i] + off;
    size_t cp = pages_of(a, nc, &hot_cold, thr);
    snprintf(acc, sizeof acc, " hot_pages=%zu recall=%.3f cold_pages=%zu cold_called_hot=%zu", np, (double)hot_nodes / (double)np, cp, hot_cold);
    free(a);
  }
  int from = seconds >= 3 ? 2 : 0;
  qsort(per + from, (size_t)(seconds - from), sizeof *per, cmp_u64);
  printf("RESULT pct=%.1f nodes=%zu cold_mib=%.1f ns_from3s=%.3f%s\n", pct, n, cold_bytes / 1048576.0, per[from + (seconds - from) / 2] / 1000.0, acc);
  return 0;
}
