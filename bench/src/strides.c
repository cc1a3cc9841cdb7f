/* strides: what governs an address-order chase, the L1 set count or something else?
   Not part of the suite (run.py builds it, never runs it): a tool behind docs/results.md's
   index section.  For each layout argument, BLOCKS blocks (default 256, as mcache) are laid
   out STRIDE bytes apart in one mmap'd region (no allocator involved), linked in address order
   through their first word and chased with dependent loads as mcache does; it prints the median
   ns per step of 7 timed runs, the number of distinct L1 sets (64-byte lines, 64 sets) the block
   starts fall on and the number of 4 KiB pages they touch.  A layout STRIDE/K/GAP is punctuated:
   GAP extra bytes after every K blocks (2304/16/64 puts 256 blocks on all 64 sets).
   The first block lies OFFSET bytes into the region (default 0; a page-aligned mapping).
   Usage: strides [-n BLOCKS] [-o OFFSET] LAYOUT...   (STRIDE or STRIDE/K/GAP, bytes, 64..65536; BLOCKS <= 4096)
   Output: STRIDES <layout> <sets> <pages> <ns_per_step>, one line per layout. */
#include "bench.h"
#include <sched.h>
#include <sys/mman.h>

#define MAX_BLOCKS 4096
#define STEPS  2000000
#define RUNS   7

/* Parses STRIDE or STRIDE/K/GAP; exits with a message on anything else. */
static void parse_layout(const char *arg, long *stride, long *every, long *gap)
{
    char end;
    *every = 0;
    *gap = 0;
    int n = sscanf(arg, "%ld/%ld/%ld%c", stride, every, gap, &end);
    if (!(n == 1 || n == 3) || *stride < 64 || *stride > 65536 || (n == 3 && (*every < 1 || *gap < 0 || *gap > 65536)))
        fail("bad layout '%s' (want STRIDE or STRIDE/K/GAP, stride 64..65536)", arg);
}

int main(int argc, char **argv)
{
    bench_name = "strides";
    int first = 1;
    long blocks = 256, start = 0;
    while (argc > first + 1 && (strcmp(argv[first], "-n") == 0 || strcmp(argv[first], "-o") == 0)) {
        if (argv[first][1] == 'n') {
            blocks = arg_long(argc, argv, first + 1, 256, 2);
            if (blocks > MAX_BLOCKS)
                fail("at most %d blocks", MAX_BLOCKS);
        } else {
            start = arg_long(argc, argv, first + 1, 0, 0);
            if (start > 65535)
                fail("offset %ld: at most 65535", start);
        }
        first += 2;
    }
    if (argc <= first)
        fail("usage: strides [-n BLOCKS] [-o OFFSET] STRIDE[/K/GAP]...");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    size_t region = (size_t)blocks * 2 * 65536 + 65536 + 4096;
    char *m = mmap(NULL, region, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        fail("mmap: %s", strerror(errno));
    memset(m, 1, region);
    static char *b[MAX_BLOCKS];
    for (int a = first; a < argc; a++) {
        long stride, every, gap;
        parse_layout(argv[a], &stride, &every, &gap);
        uint64_t seen = 0;
        size_t off = (size_t)start;
        long pages = 0;
        for (long i = 0; i < blocks; i++) {
            if (every > 0 && i > 0 && i % every == 0)
                off += (size_t)gap;
            b[i] = m + off;
            off += (size_t)stride;
            seen |= 1ull << (((uintptr_t)b[i] >> 6) & 63);
            pages += i == 0 || ((uintptr_t)b[i] >> 12) != ((uintptr_t)b[i - 1] >> 12);
        }
        for (long i = 0; i < blocks; i++)
            *(char **)b[i] = b[(i + 1) % blocks];
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
        if ((char *)p != b[(STEPS / 4 + (long)RUNS * STEPS) % blocks])
            fail("chase ended on the wrong block");
        qsort(ns, RUNS, sizeof ns[0], cmp_double);
        printf("STRIDES %s %d %ld %.3f\n", argv[a], __builtin_popcountll(seen), pages, ns[RUNS / 2]);
    }
    return 0;
}
