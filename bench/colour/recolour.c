/* recolour: the cost of moving live pages to frames of another colour (chromalloc_recolour), and
   that it is safe while another thread keeps writing to them.  A writer thread increments one
   counter per page of a 4 MiB buffer in a loop; the main thread recolours every page into the
   first 1/8 of the L2 colours, then into the second 1/8; at the end every counter must equal the
   number of increments the writer made (no write lost or duplicated across a move).  Each round
   takes a fresh page per page moved, so each slice is stocked with 4 MiB first (the run used to
   ask 12 MiB of the first eighth, which stocking could not reach in 120 s on 1 MiB L2s: a 1/8
   slice is found in about 1 of 8 frames, and frames rejected beyond 64 MiB come back).
   Run with colour_moves=auto (UFFDIO_MOVE where the kernel offers it) and =mremap by colour.py.
   Output: RECOLOUR <pages> <us_per_page_median> <us_per_page_p90> <mappings added>, then RESULT. */
#define _GNU_SOURCE
#include "../src/bench.h"
#include <chromalloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define PAGES 1024
static unsigned long* buf;
static atomic_bool stop;
static unsigned long rounds_written;

static void* writer(void* arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    for (size_t i = 0; i < PAGES; i++) buf[i * 512] += 1;
    rounds_written++;
  }
  return NULL;
}

static long maps_count(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  long n = 0;
  for (int c; f != NULL && (c = fgetc(f)) != EOF;) n += c == '\n';
  if (f) fclose(f);
  return n;
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(void) {
  bench_name = "recolour";
  int sets[2] = { chromalloc_colours(0, 0, 1, 8), chromalloc_colours(0, 1, 2, 8) };
  for (int k = 0; k < 2; k++)
    if (sets[k] < 0 || chromalloc_colours_prepare(sets[k], (size_t)PAGES * 4096, 120000) != 0)
      fail("no colour stock for slice %d/8 (errno %d)", k, errno);
  buf = check_alloc(aligned_alloc(4096, (size_t)PAGES * 4096), (size_t)PAGES * 4096);
  memset(buf, 0, (size_t)PAGES * 4096);
  pthread_t w;
  pthread_create(&w, NULL, writer, NULL);
  long maps0 = maps_count();
  static double us[PAGES * 2];
  size_t n = 0;
  for (int round = 0; round < 2; round++)
    for (size_t i = 0; i < PAGES; i++) {
      double t0 = now();
      long moved = chromalloc_recolour((char*)buf + i * 4096, 4096, sets[round]);
      double t = now() - t0;
      if (moved == 1) us[n++] = t * 1e6;
    }
  long maps1 = maps_count();
  atomic_store(&stop, true);
  pthread_join(w, NULL);
  for (size_t i = 0; i < PAGES; i++)
    if (buf[i * 512] != rounds_written && buf[i * 512] != rounds_written + 1)
      fail("page %zu: counter %lu, writer made %lu rounds", i, buf[i * 512], rounds_written);
  if (n == 0) fail("nothing was recoloured");
  qsort(us, n, sizeof *us, cmp_double);
  printf("RECOLOUR %zu %.2f %.2f %ld\n", n, us[n / 2], us[n * 9 / 10], maps1 - maps0);
  printf("RESULT recolour %zu\n", n);
  free(buf);
  return 0;
}
