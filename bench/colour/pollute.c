/* pollute: can the colour layer protect a victim from a cache polluter?
   A victim chases a random ring through every line of its working set (VICTIM KiB), again and
   again; before each pass a polluter streams once through POLLUTER KiB.  The victim's ns per
   access (median over the passes) is measured:
     alone        no polluter;
     ordinary     the polluter in ordinary memory (malloc);
     coloured     the polluter in the first 1/8 of the L2 colours (chromalloc_colours);
     naive        the polluter in pages whose virtual address bits say "first 1/8 of the colours"
                  (what page colouring would do if virtual or guest-physical addresses mapped to
                  cache sets, as they do not in this VM);
   each with the victim in ordinary memory (with the polluter's slice reserved, which the first
   coloured allocation from it does by default: the colour layer moves the victim's pages that
   lie there to the other 7/8, as a pollute buffer; with CHROMALLOC_OPTIONS=colour_reserve=0 the
   row is "unreserved"), and with the victim in the other 7/8 of the colours (so that it shares
   no colour with a confined polluter).
   Recovery is the part of the gap between "ordinary" and "alone" that confinement wins back.
   Usage: pollute VICTIM_KIB [POLLUTER_KIB=1024] [PASSES=300] [ordinary]  (ordinary: that row only)
   Output: POLLUTE <victim_kib> <config> <victim_memory> <ns_per_access>, then RESULT. */
#define _GNU_SOURCE
#include "../src/bench.h"
#include <chromalloc.h>
#include <sched.h>
#include <stdbool.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

/* a ring through every line of the pages, in random order */
static void* make_ring(char** pages, size_t npages, rng_t* r) {
  size_t n = npages * 64;
  char** lines = check_alloc(malloc(n * sizeof *lines), n * sizeof *lines);
  for (size_t i = 0; i < npages; i++) for (size_t l = 0; l < 64; l++) lines[i * 64 + l] = pages[i] + l * 64;
  for (size_t i = n - 1; i > 0; i--) { size_t j = rng_range(r, 0, i); char* t = lines[i]; lines[i] = lines[j]; lines[j] = t; }
  for (size_t i = 0; i < n; i++) *(char**)lines[i] = lines[(i + 1) % n];
  void* start = lines[0];
  free(lines);
  return start;
}

static void stream(char** pages, size_t npages) {
  for (size_t i = 0; i < npages; i++)
    for (size_t l = 0; l < 4096; l += 64) (void)*(volatile char*)(pages[i] + l);
}

static double victim_ns(void* ring, size_t nlines, char** pol, size_t npol, int passes) {
  static double v[2000];
  void* p = ring;
  for (int w = 0; w < 5; w++) { if (npol) stream(pol, npol); for (size_t i = 0; i < nlines; i++) p = *(void**)p; }
  for (int k = 0; k < passes; k++) {
    if (npol) stream(pol, npol);
    double t0 = now();
    for (size_t i = 0; i < nlines; i++) p = *(void**)p;
    v[k] = (now() - t0) / (double)nlines * 1e9;
  }
  if (p == NULL) fail("ring broken");
  qsort(v, (size_t)passes, sizeof *v, cmp_double);
  return v[passes / 2];
}

/* npages pages taken from one block of memory */
static char** pages_of(char* block, size_t npages) {
  char** pg = check_alloc(malloc(npages * sizeof *pg), npages * sizeof *pg);
  char* base = (char*)(((uintptr_t)block + 4095) & ~(uintptr_t)4095);
  for (size_t i = 0; i < npages; i++) { pg[i] = base + i * 4096; memset(pg[i], 1, 4096); }
  return pg;
}

/* pages whose virtual address bits 12.. say colour < colours/8 (naive page colouring) */
static char** naive_pages(size_t npages, int colours) {
  size_t span = npages * 8 * 2 + 64;
  char* block = check_alloc(malloc(span * 4096 + 4096), span * 4096);
  char* base = (char*)(((uintptr_t)block + 4095) & ~(uintptr_t)4095);
  char** pg = check_alloc(malloc(npages * sizeof *pg), npages * sizeof *pg);
  size_t n = 0;
  for (size_t i = 0; i < span && n < npages; i++) {
    char* p = base + i * 4096;
    if ((((uintptr_t)p >> 12) % (uintptr_t)colours) < (uintptr_t)colours / 8) { pg[n++] = p; memset(p, 1, 4096); }
  }
  if (n < npages) fail("not enough naive pages");
  return pg;
}

/* Wait until the colour layer has looked at every page it protects (stats: pages_pending). */
static void wait_protected(void) {
  static char json[1 << 20];
  for (int i = 0; i < 1200; i++) {
    const char* p = chromalloc_stats_json(json, sizeof json) ? strstr(json, "\"pages_pending\":") : NULL;
    if (p != NULL && strtol(p + strlen("\"pages_pending\":"), NULL, 10) == 0) return;
    struct timespec t = { 0, 50000000 };
    nanosleep(&t, NULL);
  }
  fail("protection did not finish in 60 s");
}

int main(int argc, char** argv) {
  bench_name = "pollute";
  long victim_kib = arg_long(argc, argv, 1, 256, 4);
  long pol_kib = arg_long(argc, argv, 2, 1024, 4);
  int passes = (int)arg_long(argc, argv, 3, 300, 10);
  if (passes > 2000) passes = 2000;
  cpu_set_t one; CPU_ZERO(&one); CPU_SET(sched_getcpu(), &one); sched_setaffinity(0, sizeof one, &one);
  size_t nv = (size_t)victim_kib / 4, np = (size_t)pol_kib / 4;
  rng_t r = rng_seed(7);

  int low = chromalloc_colours(0, 0, 1, 8), high = chromalloc_colours(0, 1, 8, 8);
  if (low < 0 || high < 0) fail("colour sets unavailable (errno %d)", errno);
  /* wait for full stock, so that the colour worker is idle while we measure */
  size_t stock = (np > nv ? np : nv) * 4096 * 2;
  if (chromalloc_colours_prepare(low, stock, 120000) != 0) fail("no 1/8 stock (errno %d)", errno);
  if (chromalloc_colours_prepare(high, stock, 120000) != 0) fail("no 7/8 stock (errno %d)", errno);
  int colours = chromalloc_colour_count();
  if (colours < 8) fail("colour count unknown (%d)", colours);

  char** pol_ord = pages_of(check_alloc(malloc(np * 4096 + 4096), np * 4096), np);
  char** pol_col = pages_of(check_alloc(chromalloc_malloc_coloured(np * 4096 + 4096, low), np * 4096), np);
  char** pol_naive = naive_pages(np, colours);
  struct { const char* name; char** pages; size_t n; } pol[] = {
    { "alone", NULL, 0 }, { "ordinary", pol_ord, np }, { "coloured", pol_col, np }, { "naive", pol_naive, np } };
  bool reserved = chromalloc_option("colour_reserve") == 1, only_ordinary = argc > 4 && strcmp(argv[4], "ordinary") == 0;
  const char* const vmem[] = { reserved ? "ordinary" : "unreserved", "other7/8" };
  for (int vm = 0; vm < (only_ordinary ? 1 : 2); vm++) {
    char* vblock = vm == 1 ? chromalloc_malloc_coloured(nv * 4096 + 4096, high) : malloc(nv * 4096 + 4096);
    char** vp = pages_of(check_alloc(vblock, nv * 4096), nv);
    if (vm == 0 && reserved) wait_protected();
    void* ring = make_ring(vp, nv, &r);
    for (int k = 0; k < 4; k++)
      printf("POLLUTE %ld %s %s %.3f\n", victim_kib, pol[k].name, vmem[vm],
             victim_ns(ring, nv * 64, pol[k].pages, pol[k].n, passes));
  }
  printf("COLOURS %d\n", colours);
  printf("RESULT pollute %ld\n", victim_kib);
  return 0;
}
