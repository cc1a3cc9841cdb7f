/* reach: how many pages of the other 7/8 a confined 1/8 polluter still reaches, page by page.

   Usage (from the repository's top, after make):
     cc -O2 -std=gnu11 -Iinclude -o build/bench/reach bench/colour/reach.c -Lbuild \
        -lchromalloc-colour -Wl,-rpath,$PWD/build
     build/bench/reach slice KIB     a polluter of KIB from the 1/8 slice's pool, a victim of
                                     L2/2 from the other 7/8's: prints REACH slow=N of M pages
     build/bench/reach ordinary KIB  the same polluter, the victim ordinary memory (1/8 of its
                                     pages lie in the slice's colours)

   A victim page counts as reached when the chase of its 64 lines (l2reading.h's ring) after one
   write of the whole polluter reads more than 1.5x the same chase after none, as the median of
   five of each (each preceded by a read of the whole victim).
   Figures in docs/colours.md ("Why the time alone is taken in the same process"). */
#include "../src/bench.h"
#include <chromalloc.h>
#include <stdbool.h>
#include <unistd.h>
#include "l2reading.h"

/* pages of v slower by half after one write of the polluter than after none (medians of five) */
static int reach(char* v, size_t vbytes, uint8_t* pol, size_t pbytes) {
  int slow = 0;
  for (size_t k = 0; k < vbytes / 4096; k++) {
    uint64_t with[5], quiet[5];
    for (int t = 0; t < 10; t++) {
      l2_sweep(v, vbytes);
      if (t & 1) memset(pol, t, pbytes);
      (t & 1 ? with : quiet)[t / 2] = l2_page_ns(v + k * 4096);
    }
    qsort(with, 5, sizeof *with, l2_cmp_u64);
    qsort(quiet, 5, sizeof *quiet, l2_cmp_u64);
    slow += with[2] * 2 > quiet[2] * 3;
  }
  return slow;
}

int main(int argc, char** argv) {
  bench_name = "reach";
  if (argc != 3) fail("usage: reach slice|ordinary KIB");
  size_t vbytes = l2_bytes() / 2, pbytes = (size_t)strtoul(argv[2], NULL, 10) << 10;
  if (pbytes < 4096) fail("the polluter needs at least 4 KiB");
  bool ordinary = !strcmp(argv[1], "ordinary");
  if (!ordinary && strcmp(argv[1], "slice")) fail("unknown mode '%s' (slice or ordinary)", argv[1]);
  int low = chromalloc_colours(0, 0, 1, 8), rest = chromalloc_colours(0, 1, 8, 8);
  if (low < 0 || rest < 0) fail("no colour sets (errno %d)", errno);
  if (chromalloc_colours_prepare(low, pbytes + (1 << 20), 60000) != 0 ||
      chromalloc_colours_prepare(rest, vbytes + (1 << 20), 60000) != 0)
    fail("no stock of colours in a minute (errno %d)", errno);
  uint8_t* pol = chromalloc_malloc_coloured(pbytes, low);
  char* v = ordinary ? aligned_alloc(4096, vbytes) : chromalloc_malloc_coloured(vbytes, rest);
  if (pol == NULL || v == NULL) fail("out of memory");
  l2_rings(v, vbytes);
  printf("REACH mode=%s polluter_kib=%zu slow=%d of %zu pages\n", argv[1], pbytes >> 10,
         reach(v, vbytes, pol, pbytes), vbytes / 4096);
  return 0;
}
