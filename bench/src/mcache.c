/* mcache: cache-index awareness, after Afek, Dice and Morrison, "Cache Index-Aware Memory
   Allocation" (ISMM 2011).
   Measures whether blocks of one size, allocated back to back, start on many different L1
   cache sets.  Allocators that carve a size class into blocks whose size is a multiple of a
   large power of two put every block start on the same few sets; data that programs keep at
   the start of objects (headers, keys, list links) then competes for a few ways of the L1
   and misses even though it would fit.  The program mallocs 256 blocks of SIZE bytes (freed only
   at the end), counts the distinct L1d sets of their start addresses (set = addr / line % sets,
   geometry from sysfs), links the blocks into a ring in address order through their first
   word, and chases it with dependent loads: a warm-up of STEPS/4 steps, then RUNS timed
   passes of STEPS steps; it reports the median ns per step.  It pins itself to the last CPU
   it may run on.
   Checks: blocks must not overlap, and the chase must end at the expected block.
   Output: MCACHE <size> <sets> <ns_per_step>, then RESULT mcache <final ring position>.
   Usage: mcache SIZE [STEPS=2000000] */
#include "bench.h"
#include <sched.h>

#define BLOCKS 256
#define RUNS 7

static long read_sysfs(const char *dir, const char *file, char *buf, size_t len)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = '\0';
    return ok ? strtol(buf, NULL, 10) : -1;
}

/* L1 data cache line size and number of sets of cpu0, or 64/64 when sysfs does not say. */
static void l1d_geometry(size_t *line, size_t *sets)
{
    for (int i = 0; ; i++) {
        char dir[96], buf[64];
        snprintf(dir, sizeof dir, "/sys/devices/system/cpu/cpu0/cache/index%d", i);
        long level = read_sysfs(dir, "level", buf, sizeof buf);
        if (level < 0)
            break;
        if (level != 1 || read_sysfs(dir, "type", buf, sizeof buf) < 0 || strcmp(buf, "Data"))
            continue;
        long l = read_sysfs(dir, "coherency_line_size", buf, sizeof buf);
        long s = read_sysfs(dir, "number_of_sets", buf, sizeof buf);
        if (l > 0 && s > 0) {
            *line = (size_t)l;
            *sets = (size_t)s;
            return;
        }
    }
    fprintf(stderr, "mcache: L1d geometry not found in sysfs; assuming 64-byte lines, 64 sets\n");
    *line = 64;
    *sets = 64;
}

static void pin_to_last_cpu(void)
{
    cpu_set_t set;
    int last = -1;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set))
                last = c;
    CPU_ZERO(&set);
    if (last >= 0)
        CPU_SET(last, &set);
    if (last < 0 || sched_setaffinity(0, sizeof set, &set))
        fprintf(stderr, "mcache: could not pin to one CPU; timings may be noisier\n");
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

static void *chase(void *p, long steps)
{
    for (long i = 0; i < steps; i++)
        p = *(void **)p;
    return p;
}

int main(int argc, char **argv)
{
    bench_name = "mcache";
    if (argc < 2)
        fail("usage: mcache SIZE [STEPS]");
    long size = arg_long(argc, argv, 1, 0, (long)sizeof(void *));
    long steps = arg_long(argc, argv, 2, 2000000, 4);

    pin_to_last_cpu();
    uintptr_t addr[BLOCKS];
    for (int i = 0; i < BLOCKS; i++)
        addr[i] = (uintptr_t)check_alloc(malloc((size_t)size), (size_t)size);

    size_t line, nsets;
    l1d_geometry(&line, &nsets);
    unsigned char *seen = check_alloc(calloc(nsets, 1), nsets);
    long sets = 0;
    for (int i = 0; i < BLOCKS; i++) {
        size_t s = addr[i] / line % nsets;
        sets += !seen[s];
        seen[s] = 1;
    }
    free(seen);

    qsort(addr, BLOCKS, sizeof addr[0], by_address);
    for (int i = 0; i < BLOCKS; i++) {
        if (i + 1 < BLOCKS && addr[i + 1] - addr[i] < (uintptr_t)size)
            fail("blocks at %#lx and %#lx overlap (size %ld)",
                 (unsigned long)addr[i], (unsigned long)addr[i + 1], size);
        *(void **)addr[i] = (void *)addr[(i + 1) % BLOCKS];
    }

    void *p = chase((void *)addr[0], steps / 4);
    double ns[RUNS];
    for (int run = 0; run < RUNS; run++) {
        uint64_t t0 = now_ns();
        p = chase(p, steps);
        ns[run] = (double)(now_ns() - t0) / (double)steps;
    }
    qsort(ns, RUNS, sizeof ns[0], cmp_double);

    unsigned long long pos = ((unsigned long long)steps / 4 + (unsigned long long)steps * RUNS) % BLOCKS;
    if ((uintptr_t)p != addr[pos])
        fail("the chase ended at the wrong block");
    printf("MCACHE %ld %ld %.3f\n", size, sets, ns[RUNS / 2]);
    printf("RESULT mcache %llu\n", pos);
    for (int i = 0; i < BLOCKS; i++)
        free((void *)addr[i]);
    return 0;
}
