/* sweep: what does confinement to 1/8 of the L2 colours cost the confined data itself?
   Not part of the benchmark's table (colour.py builds it, never runs it): the tool behind
   docs/nightwatch.md's "Whole-program time".  For each size, a buffer from malloc and one from
   chromalloc_malloc_coloured (the first 1/8 of the colours) are written and then read, 20
   passes, best pass kept, five times in turn; printed: GB/s moved (written + read) for each,
   and the time ratio coloured / ordinary.  It first waits (up to 150 s) for 1/8 stock that
   covers the largest size, so that no coloured buffer falls back to ordinary pages.
   Usage: sweep [busy] [KIB ...]   (default 256 512 1024 2048 3072)
     busy: then ask for a 16 MiB coloured block once (freed at once), so that the colour worker
     stocks in the background, on the other CPU, while the buffers are measured
   Needs chromalloc (linked with -lchromalloc); run with CHROMALLOC_OPTIONS=nightwatch=0. */
#include <chromalloc.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static volatile uint64_t sink;

static double best_pass(uint64_t* b, size_t words, int passes) {
  double best = 1e9;
  for (int r = 0; r < passes; r++) {
    double t = now();
    for (size_t i = 0; i < words; i++) b[i] = (uint64_t)r + i * 0x9e3779b97f4a7c15ULL;
    uint64_t s = 0;
    for (size_t i = 0; i < words; i++) s += b[i] ^ (b[i] >> 29);
    sink += s;
    t = now() - t;
    if (t < best) best = t;
  }
  return best;
}

int main(int argc, char** argv) {
  int busy = argc > 1 && strcmp(argv[1], "busy") == 0;
  argc -= busy;
  argv += busy;
  size_t def[] = { 256, 512, 1024, 2048, 3072 }, n = argc > 1 ? (size_t)argc - 1 : 5;
  size_t max = 0;
  for (size_t k = 0; k < n; k++) { size_t v = argc > 1 ? strtoul(argv[k + 1], NULL, 10) : def[k]; if (v > max) max = v; }
  int low = chromalloc_colours(0, 0, 1, 8);
  if (low < 0 || chromalloc_colours_prepare(low, (max + 1024) << 10, 150000) != 0) {
    fprintf(stderr, "sweep: no stock of 1/8 of the L2 (errno %d)\n", errno);
    return 1;
  }
  if (busy) free(chromalloc_malloc_coloured(16u << 20, low));   /* the stock target grows */
  for (size_t k = 0; k < n; k++) {
    size_t kib = argc > 1 ? strtoul(argv[k + 1], NULL, 10) : def[k], bytes = kib << 10;
    uint64_t* o = malloc(bytes);
    uint64_t* c = chromalloc_malloc_coloured(bytes, low);
    if (o == NULL || c == NULL) { fprintf(stderr, "sweep: out of memory\n"); return 1; }
    double to = 0, tc = 0;
    for (int rep = 0; rep < 5; rep++) { to += best_pass(o, bytes / 8, 20); tc += best_pass(c, bytes / 8, 20); }
    printf("SWEEP %zu KiB: ordinary %.2f GB/s, 1/8 of colours %.2f GB/s, ratio %.2f\n", kib,
           2.0 * bytes * 5 / to / 1e9, 2.0 * bytes * 5 / tc / 1e9, tc / to);
    free(o);
    free(c);
  }
  return 0;
}
