/* artlike: a polluter and its victim in one allocation (issue: ROCS, paper 004's `art`).

   One malloc holds a streamed region (`stream` MiB, read line by line every lap) and after it a
   reused region (`reuse` % of the L2, a ring through all its lines in random order, chased
   `chases` times after each stream: art's neurons are reused more often than its weights are
   streamed).  The first chase after a stream is timed: what the stream left of the reused region.
   NightWatch judges whole chunks and cannot split this one; a per-page pollute buffer (ROCS) can.
   Every second prints that chase's ns per line and the laps run:

     SECOND n chase_ns=X laps=L
     RESULT chase_ns_from5s=X laps_per_s_from5s=L         (medians of the seconds from the 5th on)

   --nostream   laps without the stream: the chase's time with nothing in its way
   --split[=D]  the stream's pages moved into the first 1/D (16) of the L2's colours before the
                laps, that slice reserved (chromalloc_recolour, chromalloc_colours_reserve: the
                pollute buffer placed by hand, the bound ROCS aims at)
   --progress   chromalloc_progress(1) after every lap (the opt-in progress call, when loaded)

   Build: cc -O2 -o build/bench/artlike bench/colour/artlike.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=rocs=1 build/bench/artlike */
#define _GNU_SOURCE
#include "l2reading.h"
#include <stdio.h>

/* the cache runtime, when it is loaded (weak: the program runs under any malloc) */
extern int  chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den) __attribute__((weak));
extern int  chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms) __attribute__((weak));
extern long chromalloc_recolour(void* p, size_t len, int colours) __attribute__((weak));
extern int  chromalloc_colours_reserve(int colours) __attribute__((weak));
extern void chromalloc_progress(unsigned long units) __attribute__((weak));

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + (double)t.tv_nsec * 1e-9; }
static int cmp_double(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
static double median(double* v, size_t n) { qsort(v, n, sizeof *v, cmp_double); return n ? v[n / 2] : 0; }

int main(int argc, char** argv) {
  double stream_mib = 4, reuse_pct = 33;
  int seconds = 12, den = 16, chases = 4;
  bool nostream = false, split = false, progress = false;
  for (int i = 1; i < argc; i++) {
    if (sscanf(argv[i], "--stream=%lf", &stream_mib) == 1) continue;
    if (sscanf(argv[i], "--reuse=%lf", &reuse_pct) == 1) continue;
    if (sscanf(argv[i], "--seconds=%d", &seconds) == 1) continue;
    if (sscanf(argv[i], "--chases=%d", &chases) == 1 && chases >= 1) continue;
    if (strcmp(argv[i], "--nostream") == 0) { nostream = true; continue; }
    if (strcmp(argv[i], "--split") == 0) { split = true; continue; }
    if (sscanf(argv[i], "--split=%d", &den) == 1 && den >= 2) { split = true; continue; }
    if (strcmp(argv[i], "--progress") == 0) { progress = true; continue; }
    fprintf(stderr, "usage: artlike [--stream=4 (MiB)] [--reuse=33 (%% of the L2)] [--seconds=12] [--chases=4] [--nostream] [--split[=16]] [--progress]\n");
    return 2;
  }
  size_t sbytes = ((size_t)(stream_mib * 1048576) + 4095) & ~(size_t)4095;
  size_t lines = (size_t)((double)l2_bytes() * reuse_pct / 100.0) / 64;
  char* block = malloc(sbytes + lines * 64 + 4096);
  char** order = malloc(lines * sizeof *order);
  if (block == NULL || order == NULL || lines < 2) { fprintf(stderr, "artlike: no memory\n"); return 1; }
  memset(block, 1, sbytes + lines * 64 + 4096);
  char* reused = (char*)(((uintptr_t)block + sbytes + 4095) & ~(uintptr_t)4095);   /* pages of its own */
  for (size_t i = 0; i < lines; i++) order[i] = reused + i * 64;
  for (size_t i = lines - 1; i > 0; i--) { size_t j = next_rand() % (i + 1); char* t = order[i]; order[i] = order[j]; order[j] = t; }
  for (size_t i = 0; i < lines; i++) *(char**)order[i] = order[(i + 1) % lines];
  void* p = order[0];
  free(order);
  if (split) {
    int id = chromalloc_colours ? chromalloc_colours(0, 0, 1, (unsigned)den) : -1;
    if (id < 0 || chromalloc_colours_prepare(id, sbytes, 120000) != 0) { fprintf(stderr, "artlike: no 1/16 slice here\n"); return 1; }
    chromalloc_colours_reserve(id);                 /* ordinary memory (the program's other blocks) out of it */
    long moved = chromalloc_recolour(block, sbytes, id);
    fprintf(stderr, "artlike: %ld of %zu stream pages moved into 1/%d\n", moved, sbytes / 4096, den);
  }
  printf("ARTLIKE stream_kib=%zu reused_kib=%zu chases=%d%s%s\n", sbytes >> 10, lines * 64 >> 10, chases, nostream ? " nostream" : "",
         split ? " split" : "");
  double* chase = malloc(sizeof(double) * 1000000);
  double per_s[3600], laps_s[3600];
  int nsec = 0;
  uint64_t sink = 0;
  double start = now(), mark = start + 1;
  size_t n = 0, laps = 0;
  while (nsec < seconds && chase != NULL) {
    if (!nostream)
      for (size_t o = 0; o < sbytes; o += 64) sink += (uint8_t)block[o];
    double t0 = now();
    for (size_t i = 0; i < lines; i++) p = *(void**)p;
    double t1 = now();
    if (n < 1000000) chase[n++] = (t1 - t0) / (double)lines * 1e9;
    for (int c = 1; c < chases; c++)
      for (size_t i = 0; i < lines; i++) p = *(void**)p;
    t1 = now();
    laps++;
    if (progress && chromalloc_progress) chromalloc_progress(1);
    if (t1 >= mark) {
      per_s[nsec] = median(chase, n);
      laps_s[nsec] = (double)laps / (t1 - mark + 1);
      printf("SECOND %d chase_ns=%.3f laps=%zu\n", nsec + 1, per_s[nsec], laps);
      fflush(stdout);
      nsec++, n = 0, laps = 0, mark = t1 + 1;
    }
  }
  if (p == NULL || sink == 1) return 1;
  int from = nsec > 5 ? 4 : 0;
  printf("RESULT chase_ns_from5s=%.3f laps_per_s_from5s=%.1f\n", median(per_s + from, (size_t)(nsec - from)),
         median(laps_s + from, (size_t)(nsec - from)));
  return 0;
}
