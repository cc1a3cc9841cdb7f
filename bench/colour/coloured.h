/* coloured: memory from a slice of chromalloc's L2 colours, for the colour tools (confine,
   l3share).  Include after ../src/bench.h (fail) and <chromalloc.h>. */
#ifndef BENCH_COLOURED_H
#define BENCH_COLOURED_H

/* size bytes from the colour slice [from/8, to/8), once the slice holds `stock` bytes (at
   least size) plus two pages; exits when it cannot be had within two minutes */
static void* coloured(size_t size, unsigned from, unsigned to, size_t stock) {
  int id = chromalloc_colours(0, from, to, 8);
  if (id < 0 || chromalloc_colours_prepare(id, (stock > size ? stock : size) + 8192, 120000) != 0)
    fail("no stock of colours %u/8-%u/8 (errno %d)", from, to, errno);
  return chromalloc_malloc_coloured(size, id);
}

#endif
