/* confine: does confining a polluter to 1/8 of the L2 colours help a victim in ordinary memory?
   Not part of the benchmark's table (colour.py builds it, never runs it): the tool behind
   docs/nightwatch.md's "Why confining the polluter does not pay here".
   A victim of 384 KiB (64-byte nodes in one random cycle, as pv frames' victim on a 1 MiB L2) is
   chased once per frame after a pass over a 3 MiB polluter buffer allocated once (its pages
   stay the same: no allocator effects).  The pass writes the buffer, reads it, or both.
   Usage: confine MODE POLLUTER VICTIM [FRAMES=1500]
     MODE      wr | r | w | none   (the polluter's pass; none: the victim alone)
     POLLUTER  ordinary | eighth   (eighth: chromalloc_malloc_coloured from colours 0/8-1/8)
     VICTIM    ordinary | rest     (rest: from the other 7/8 of the colours)
   Output: CONFINE mode=.. polluter=.. victim=.. victim_ns=<median over frames> p10=.. p90=..
   Needs chromalloc (linked with -lchromalloc). */
#include "../src/bench.h"
#include <chromalloc.h>
#include <stdbool.h>
#include "coloured.h"

typedef struct { uint32_t next, pad; uint64_t key; uint64_t payload[6]; } node_t;

int main(int argc, char** argv) {
  bench_name = "confine";
  if (argc < 4) fail("usage: confine wr|r|w|none ordinary|eighth ordinary|rest [FRAMES]");
  const char* mode = argv[1];
  bool eighth = strcmp(argv[2], "eighth") == 0, rest = strcmp(argv[3], "rest") == 0;
  if (strspn(mode, "wr") != strlen(mode) && strcmp(mode, "none") != 0) fail("MODE is wr, r, w or none");
  if (!eighth && strcmp(argv[2], "ordinary") != 0) fail("POLLUTER is ordinary or eighth");
  if (!rest && strcmp(argv[3], "ordinary") != 0) fail("VICTIM is ordinary or rest");
  long frames = arg_long(argc, argv, 4, 1500, 1);
  size_t vbytes = 384u << 10, bbytes = 3u << 20, n = vbytes / sizeof(node_t);
  bool pollute = strcmp(mode, "none") != 0;
  uint64_t* buf = pollute ? (eighth ? coloured(bbytes, 0, 1, 0) : malloc(bbytes)) : NULL;
  node_t* v = rest ? coloured(vbytes, 1, 8, 0) : malloc(vbytes);
  uint32_t* perm = malloc(n * sizeof *perm);
  double* ns = malloc((size_t)frames * sizeof *ns);
  if ((pollute && !buf) || !v || !perm || !ns) fail("out of memory");
  if (pollute) memset(buf, 1, bbytes);
  rng_t r = rng_seed(1);
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  for (size_t i = n - 1; i > 0; i--) {            /* Sattolo: one cycle through all nodes */
    size_t j = rng_range(&r, 0, i - 1);
    uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  for (size_t i = 0; i < n; i++) { v[i].next = perm[i]; v[i].key = i; }
  uint64_t sum = 0;
  uint32_t pos = 0;
  size_t words = bbytes / 8;
  for (long f = 0; f < frames; f++) {
    if (pollute && strchr(mode, 'w')) for (size_t i = 0; i < words; i++) buf[i] = (uint64_t)f + i * 0x9e3779b97f4a7c15ull;
    if (pollute && strchr(mode, 'r')) for (size_t i = 0; i < words; i++) sum += buf[i] ^ (buf[i] >> 29);
    uint64_t t0 = now_ns();
    uint32_t i = pos;
    for (size_t k = 0; k < n; k++) { i = v[i].next; sum += v[i].key; }
    pos = i;
    ns[f] = (double)(now_ns() - t0) / (double)n;
  }
  qsort(ns, (size_t)frames, sizeof *ns, cmp_double);
  printf("CONFINE mode=%s polluter=%s victim=%s victim_ns=%.2f p10=%.2f p90=%.2f (sum %llu)\n", mode, argv[2], argv[3],
         ns[frames / 2], ns[frames / 10], ns[frames * 9 / 10], (unsigned long long)(sum & 0xff));
  return 0;
}
