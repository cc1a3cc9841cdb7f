/* large: large blocks, 1-32 MiB.
   Measures the large-allocation path: how the allocator gets and returns address space
   (mmap/munmap, retained or decommitted extents), whether realloc grows in place or by
   remapping instead of copying, and how much memory it keeps resident for it.  SLOTS blocks
   are live at a time; each step picks a slot and, if it holds a block, grows it with
   realloc (one time in four, by 1.25-2x, up to 64 MiB) or frees it and allocates a new
   block of 1-32 MiB.  Every 4 KiB page of a block gets a marker byte when first touched,
   as a program filling a buffer would fault it in; markers are checked after every realloc
   and before every free, and the tag sums of allocations and frees must agree.
   Usage: large [STEPS=120] [SLOTS=4] [SEED=1] */
#include "bench.h"

#define MIB ((size_t)1 << 20)
#define PAGE 4096

static unsigned char marker(uint32_t tag, size_t off)
{
    return (unsigned char)(tag + off / PAGE);
}

static void touch(unsigned char *p, size_t from, size_t to, uint32_t tag)
{
    for (size_t off = from; off < to; off += PAGE)
        p[off] = marker(tag, off);
}

static void verify(const unsigned char *p, size_t size, uint32_t tag)
{
    for (size_t off = 0; off < size; off += PAGE)
        if (p[off] != marker(tag, off))
            fail("corrupt page marker at offset %zu of a %zu-byte block", off, size);
}

int main(int argc, char **argv)
{
    bench_name = "large";
    long steps = arg_long(argc, argv, 1, 120, 1);
    long nslots = arg_long(argc, argv, 2, 4, 1);
    long seed = arg_long(argc, argv, 3, 1, 0);

    struct block { unsigned char *p; size_t size; uint32_t tag; } *slot;
    slot = check_alloc(calloc((size_t)nslots, sizeof *slot), (size_t)nslots * sizeof *slot);
    rng_t r = rng_seed((uint64_t)seed);
    uint64_t sum_alloc = 0, sum_free = 0;

    for (long i = 0; i < steps; i++) {
        struct block *b = &slot[rng_range(&r, 0, (uint64_t)nslots - 1)];
        if (b->p && rng_range(&r, 0, 3) == 0 && b->size < 32 * MIB) {
            size_t n = b->size + rng_range(&r, b->size / 4, b->size);
            b->p = check_alloc(realloc(b->p, n), n);
            verify(b->p, b->size, b->tag);
            touch(b->p, (b->size + PAGE - 1) / PAGE * PAGE, n, b->tag);
            b->size = n;
            continue;
        }
        if (b->p) {
            verify(b->p, b->size, b->tag);
            free(b->p);
            sum_free += b->tag;
        }
        b->size = rng_range(&r, MIB, 32 * MIB);
        b->tag = (uint32_t)mix64((uint64_t)i);
        b->p = check_alloc(malloc(b->size), b->size);
        touch(b->p, 0, b->size, b->tag);
        sum_alloc += b->tag;
    }
    for (long k = 0; k < nslots; k++) {
        if (slot[k].p) {
            verify(slot[k].p, slot[k].size, slot[k].tag);
            free(slot[k].p);
            sum_free += slot[k].tag;
        }
    }
    free(slot);

    if (sum_alloc != sum_free)
        fail("tag sums differ: allocated %llx, freed %llx",
             (unsigned long long)sum_alloc, (unsigned long long)sum_free);
    printf("RESULT large %016llx\n", (unsigned long long)sum_free);
    return 0;
}
