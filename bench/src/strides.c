/* strides: is an address-order chase governed by the L1 set count, or by the stride?
   Not part of the suite (run.py builds it, never runs it): a tool behind docs/results.md's
   index section.  For each STRIDE argument, 256 blocks are laid out STRIDE bytes apart in one
   mmap'd region (no allocator involved), linked in address order through their first word and
   chased with dependent loads as mcache does; it prints the median ns per step of 7 timed runs
   and the number of distinct L1 sets (64-byte lines, 64 sets) the block starts fall on.
   Usage: strides STRIDE... (bytes, 64..65536)
   Output: STRIDES <stride> <sets> <ns_per_step>, one line per stride. */
#include "bench.h"
#include <sched.h>
#include <sys/mman.h>

#define BLOCKS 256
#define STEPS  2000000
#define RUNS   7

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    bench_name = "strides";
    if (argc < 2)
        fail("usage: strides STRIDE...");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    size_t region = (size_t)BLOCKS * 65536 + 4096;
    char *m = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        fail("mmap: %s", strerror(errno));
    memset(m, 1, region);
    for (int a = 1; a < argc; a++) {
        long stride = arg_long(argc, argv, a, 0, 64);
        if (stride > 65536)
            fail("stride %ld above 65536", stride);
        char *b[BLOCKS];
        uint64_t seen = 0;
        for (int i = 0; i < BLOCKS; i++) {
            b[i] = m + (size_t)i * (size_t)stride;
            seen |= 1ull << (((uintptr_t)b[i] >> 6) & 63);
        }
        for (int i = 0; i < BLOCKS; i++)
            *(char **)b[i] = b[(i + 1) % BLOCKS];
        void *volatile *p = (void *volatile *)b[0];
        for (long k = 0; k < STEPS / 4; k++)
            p = (void *volatile *)*p;
        double ns[RUNS];
        for (int r = 0; r < RUNS; r++) {
            uint64_t t0 = now_ns();
            for (long k = 0; k < STEPS; k++)
                p = (void *volatile *)*p;
            ns[r] = (double)(now_ns() - t0) / STEPS;
        }
        if ((char *)p != b[(STEPS / 4 + (long)RUNS * STEPS) % BLOCKS])
            fail("chase ended on the wrong block");
        qsort(ns, RUNS, sizeof ns[0], cmpd);
        printf("STRIDES %ld %d %.3f\n", stride, __builtin_popcountll(seen), ns[RUNS / 2]);
    }
    return 0;
}
