/* purity: are a 1/8 slice's pages, and the other 7/8's, what chromalloc says, by what they do in
   the L2 (l2reading.h), not by the colour layer's own labels?
   Blocks: a 1/8 polluter of L2/2 bytes, a 1/8 block and a 7/8 block of L2/4 each, an ordinary
   block of L2/4.  Read: the ordinary block (its pages should be
   L2 hits, its median within 1.1x of 16 of its pages': the reading is sane; a block that
   reads slower is not all in the L2, and pages slow by its median mean nothing then), the 1/8 block alone (twice the slice's size: it should evict
   itself), then 8 pages of the 1/8 block (which fit), the 7/8 block and the ordinary block each after reading
   the polluter (it should evict the 8 pages, hardly any page of the 7/8 block, and about
   one ordinary page in eight: fewer when protection has moved them).
   Read up to 8 times, a quarter of a second apart (the pages stay put), stopping once the 1/8
   block has evicted itself and 3 tries were sane: on the Zen 4 host the same blocks read 30,
   41, 63, 63 of 64 slow on their own, and 0, 3, 8, 8 of 8 evicted by the polluter, in four
   tries of one process, so one reading called a pool spread that was
   not: a block that evicts itself once is of few colours (a block of many colours never
   does), while one that does not may only have met the L2 in a mood that keeps part of a
   cyclic sweep.
   Output: one line per try, PURITY try=N ordinary_slow=N slice_self=N small_evicted=N/8
           rest_evicted=N rest_self=N ordinary_evicted=N pages=N base_ns=N hot_ns=N (counts of pages;
           RESULT purity ok)
   Needs chromalloc (linked with -lchromalloc); bench/colour_purity.py runs it under builds. */
#include "../src/bench.h"
#include <chromalloc.h>
#include "l2reading.h"

int main(void) {
  bench_name = "purity";
  size_t l2 = l2_bytes(), q = l2 / 4;
  int low = chromalloc_colours(0, 0, 1, 8), rest = chromalloc_colours(0, 1, 8, 8);
  if (low < 0 || rest < 0) fail("no colour sets (errno %d)", errno);
  if (chromalloc_colours_prepare(low, l2 / 2 + q + 64 * 4096, 120000) != 0 || chromalloc_colours_prepare(rest, q + 64 * 4096, 120000) != 0)
    fail("no stock of colours in two minutes (errno %d)", errno);
  char* pol = l2_rings(chromalloc_malloc_coloured(l2 / 2, low), l2 / 2);     /* the biggest first */
  char* mine = l2_rings(chromalloc_malloc_coloured(q, low), q);
  char* other = l2_rings(chromalloc_malloc_coloured(q, rest), q);
  char* ord = l2_rings(aligned_alloc(4096, q), q);
  if (!pol || !mine || !other || !ord) fail("out of memory");
  for (int t = 0, self = 0, sane = 0; t < 8 && !(self && sane >= 3); t++) {
    if (t > 0) usleep(250000);
    l2_reading_t h = l2_read(ord, 16 * 4096, NULL, 0, 0);               /* 16 pages: L2 hits */
    l2_reading_t o = l2_read(ord, q, NULL, 0, 0);
    l2_reading_t m = l2_read(mine, q, NULL, 0, o.base);
    l2_reading_t c = l2_read(mine, 8 * 4096, pol, l2 / 2, o.base);    /* 8 pages of it fit */
    l2_reading_t r = l2_read(other, q, pol, l2 / 2, o.base);
    l2_reading_t e = l2_read(ord, q, pol, l2 / 2, o.base);
    printf("PURITY try=%d ordinary_slow=%d slice_self=%d small_evicted=%d rest_evicted=%d rest_self=%d ordinary_evicted=%d pages=%d base_ns=%llu hot_ns=%llu\n",
           t + 1, o.quiet_slow, m.quiet_slow, c.evicted, r.evicted, r.quiet_slow, e.evicted, o.pages, (unsigned long long)o.base,
           (unsigned long long)h.base);
    self |= m.quiet_slow * 4 >= o.pages * 3;
    sane += o.quiet_slow * 4 <= o.pages && l2_held(o, h) && c.evicted >= 6;
  }
  printf("RESULT purity ok\n");
  return 0;
}
