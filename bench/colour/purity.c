/* purity: are a 1/8 slice's pages, and the other 7/8's, what chromalloc says, by what they do in
   the L2 (l2reading.h), not by the colour layer's own labels?
   Blocks: a 1/8 polluter of L2/2 bytes, a 1/8 block and a 7/8 block of L2/4 each, an ordinary
   block of L2/4.  Read: the ordinary block (its pages should be
   L2 hits: the reading is sane), the 1/8 block alone (twice the slice's size: it should evict
   itself), then 8 pages of the 1/8 block (which fit), the 7/8 block and the ordinary block each after reading
   the polluter (it should evict the 8 pages, hardly any page of the 7/8 block, and about
   one ordinary page in eight: fewer when protection has moved them).
   Output: PURITY ordinary_slow=N slice_self=N small_evicted=N/8 rest_evicted=N rest_self=N
           ordinary_evicted=N pages=N base_ns=N   (counts of pages; RESULT purity ok)
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
  l2_reading_t o = l2_read(ord, q, NULL, 0, 0);
  l2_reading_t m = l2_read(mine, q, NULL, 0, o.base);
  l2_reading_t c = l2_read(mine, 8 * 4096, pol, l2 / 2, o.base);    /* 8 pages of it fit */
  l2_reading_t r = l2_read(other, q, pol, l2 / 2, o.base);
  l2_reading_t e = l2_read(ord, q, pol, l2 / 2, o.base);
  printf("PURITY ordinary_slow=%d slice_self=%d small_evicted=%d rest_evicted=%d rest_self=%d ordinary_evicted=%d pages=%d base_ns=%llu\n",
         o.quiet_slow, m.quiet_slow, c.evicted, r.evicted, r.quiet_slow, e.evicted, o.pages, (unsigned long long)o.base);
  printf("RESULT purity ok\n");
  return 0;
}
