/* alias: how fast memcpy copies SIZE bytes between two buffers, by their distance modulo 4 KiB.
   No allocator is involved: both buffers lie in one aligned mapping, the destination
   SIZE rounded up to 4 KiB plus DELTA bytes above the source, for DELTA from -256 to 256 in
   steps of 8.  Per DELTA: the best of 300 timed copies (the copies run back to back, so
   both buffers stay in the cache).

   Why: x86 cores compare loads with older stores by their address modulo 4 KiB first, and a
   copy whose destination lies a few bytes above its source (modulo 4 KiB) makes loads wait
   for stores they do not depend on.  On the Zen 3 development machine glibc's memcpy (rep
   movsb above 2 KiB) took 17-28x longer at DELTA 8-24, about 1.35x at other distances that
   are not a multiple of 32, and full speed at multiples of 32.  An allocator whose blocks of
   one size lie 4 KiB x n + 16 bytes apart (glibc's chunks, index-aware classes that add 16
   bytes) puts neighbouring blocks at DELTA 16; src/index/layout.c widens such classes to
   + 32.

   Usage: alias [SIZE]   (default 16384)
   Output: one line per DELTA: "delta <d> ns <best>", then "RESULT alias <checksum>". */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int main(int argc, char** argv) {
  size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 16384;
  if (size == 0 || size > (64u << 20)) {
    fprintf(stderr, "alias: SIZE must be 1..64 MiB\n");
    return 2;
  }
  size_t room = (size + 4095) / 4096 * 4096;
  size_t total = 2 * room + 3 * 4096;
  unsigned char* base = aligned_alloc(4096, total);
  if (base == NULL) { perror("alias"); return 1; }
  memset(base, 1, total);
  unsigned char* src = base + 4096;
  uint64_t sum = 0;
  for (long delta = -256; delta <= 256; delta += 8) {
    unsigned char* dst = src + room + delta;
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 300; r++) {
      uint64_t a = now_ns();
      memcpy(dst, src, size);
      __asm__ volatile("" : : "r"(dst) : "memory");
      uint64_t b = now_ns();
      if (b - a < best) best = b - a;
    }
    sum += dst[size / 2];
    printf("delta %ld ns %llu\n", delta, (unsigned long long)best);
  }
  printf("RESULT alias %llu\n", (unsigned long long)sum);
  free(base);
  return 0;
}
