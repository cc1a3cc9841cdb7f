/* l2reading: what pages do in the L2, read by timing, without chromalloc's own colour labels
   (test_colour_api, bench/colour/purity.c).

   Each page of a block holds a ring through its 64 lines; its chase, timed, reads an L2 hit or
   a miss.  A 1/8 slice of the colours holds L2/8 bytes: a block of twice that evicts itself,
   which a block of ordinary pages of the same size does not; and reading a bigger 1/8 block
   evicts the pages of the first eighth from the L2, so a page it evicts that read fast before
   it is of the first eighth.  clock_gettime, not rdtscp: 64 chained loads read ~0.2 us from
   the L2 and ~0.7 us from beyond on the Zen 5 host, far apart next to the clock's cost. */
#ifndef CA_L2READING_H
#define CA_L2READING_H
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* the L2's size, as CHROMALLOC_MACHINE describes it or as the machine says */
static inline size_t l2_bytes(void) {
  const char* d = getenv("CHROMALLOC_MACHINE");
  const char* at = d ? strstr(d, "l2=") : NULL;
  if (at != NULL) {
    char* end;
    unsigned long v = strtoul(at + 3, &end, 10);
    if (*end == 'K') v <<= 10; else if (*end == 'M') v <<= 20;
    if (v >= (64 << 10)) return v;
  }
  long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return v >= (64 << 10) ? (size_t)v : (size_t)1 << 20;
}

/* write the rings into the block's pages */
static inline char* l2_rings(char* b, size_t bytes) {
  for (size_t p = 0; b && p < bytes / 4096; p++)
    for (int i = 0; i < 64; i++)
      *(void**)(b + p * 4096 + (size_t)(i * 37 % 64) * 64) = b + p * 4096 + (size_t)((i + 1) % 64 * 37 % 64) * 64;
  return b;
}

static inline uint64_t l2_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void* volatile l2_sink;
static inline uint64_t l2_page_ns(char* page) {
  void** p = (void**)page;
  uint64_t t = l2_now_ns();
  for (int i = 0; i < 64; i++) p = *p;
  uint64_t e = l2_now_ns();
  l2_sink = p;
  return e - t;
}

/* read every line of [b, b + bytes) twice */
static inline void l2_sweep(const char* b, size_t bytes) {
  char s = 0;
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < bytes; i += 64) s += ((const volatile char*)b)[i];
  l2_sink = (void*)(intptr_t)s;
}

static inline int l2_cmp_u64(const void* a, const void* b) { uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b; return x < y ? -1 : x > y; }

/* Each page of blk (up to 256): its chase right after the block was read (quiet) and after `by`
   was read (none: NULL), medians of 5.  Slow: 1.5 x `ref` or more (0: the block's own quiet
   median, returned as base). */
typedef struct { int pages, quiet_slow, swept_slow, evicted; uint64_t base; } l2_reading_t;
static inline l2_reading_t l2_read(char* blk, size_t bytes, const char* by, size_t by_bytes, uint64_t ref) {
  enum { R = 5, MAXP = 256 };
  static uint64_t q[MAXP][R], t[MAXP][R];
  size_t n = bytes / 4096 < MAXP ? bytes / 4096 : MAXP;
  for (int r = 0; r < R; r++) {
    for (size_t p = 0; p < n; p++) l2_page_ns(blk + p * 4096);
    for (size_t p = 0; p < n; p++) q[p][r] = l2_page_ns(blk + p * 4096);
    if (by) l2_sweep(by, by_bytes);
    for (size_t p = 0; p < n; p++) t[p][r] = l2_page_ns(blk + p * 4096);
  }
  l2_reading_t x = { (int)n, 0, 0, 0, 0 };
  uint64_t med[MAXP];
  for (size_t p = 0; p < n; p++) { qsort(q[p], R, 8, l2_cmp_u64); qsort(t[p], R, 8, l2_cmp_u64); med[p] = q[p][R / 2]; }
  qsort(med, n, 8, l2_cmp_u64);
  x.base = med[n / 2];
  if (ref == 0) ref = x.base;
  for (size_t p = 0; p < n; p++) {
    bool qs = q[p][R / 2] * 2 >= ref * 3, ts = t[p][R / 2] * 2 >= ref * 3;
    x.quiet_slow += qs;
    x.swept_slow += ts;
    x.evicted += ts && !qs;
  }
  return x;
}

/* The L2 holds the block read as `block`: its median within 1.1x of `hot`'s, a reading of 16 of
   its pages (which surely fit).  A block that reads slower is partly in the L3, and pages slow
   by its own median mean nothing then (2026-11-29: docs/colours.md, "Reading the L2 only while
   it holds a quarter of itself"). */
static inline bool l2_held(l2_reading_t block, l2_reading_t hot) { return block.base * 10 <= hot.base * 11; }

#endif
