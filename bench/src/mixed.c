/* mixed: single-thread mixed sizes, 8 B - 64 KiB (log-uniform), with realloc.
   Measures the allocator across its size classes at once, including the medium sizes where
   many allocators switch strategy, and realloc: whether blocks grow and shrink in place or
   are copied.  Blocks are fully written, so a moving realloc pays for a real copy.
   A table of SLOTS slots is toggled at random; a full slot is reallocated (grown or shrunk)
   two times in three and freed otherwise.  Fresh blocks come from malloc, calloc (1/8; the
   zeroing is spot-checked) or posix_memalign (1/16, alignment 64-4096 B below the size;
   checked).  posix_memalign sizes get bit 3 set so they are never powers of two: mimalloc
   2.0.9, the Debian package used as the reference, returns misaligned blocks for
   power-of-two sizes 256-1024 (microsoft/mimalloc#700) and would otherwise fail here.
   Every block is a header (tag, size) followed by a fill byte; contents are spot-checked
   after every realloc and before every free, and the tag sums of allocations and frees
   must agree.
   Usage: mixed [OPS=1000000] [SLOTS=2048] [SEED=1] */
#include "bench.h"

#define MAX_SIZE 65536

static void write_header(unsigned char *p, size_t size, uint32_t tag)
{
    uint64_t w = (uint64_t)tag << 32 | (uint32_t)size;
    memcpy(p, &w, sizeof w);
}

/* Spot-checks the header and the fill byte at the start, middle and end of the first
   `valid` bytes; returns the tag. */
static uint32_t check_contents(const unsigned char *p, size_t size, size_t valid)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    uint32_t tag = (uint32_t)(w >> 32);
    if ((uint32_t)w != size)
        fail("corrupt header: size %u, expected %zu", (unsigned)(uint32_t)w, size);
    unsigned char fill = (unsigned char)tag;
    if (valid > 8 && (p[8] != fill || p[8 + (valid - 8) / 2] != fill || p[valid - 1] != fill))
        fail("corrupt contents in a block of %zu bytes", size);
    return tag;
}

static size_t pick_size(rng_t *r)
{
    unsigned e = (unsigned)rng_range(r, 0, 12);
    return ((size_t)8 << e) + rng_range(r, 0, ((size_t)8 << e) - 1);
}

/* Allocates a block for a request of *size bytes (posix_memalign may adjust *size). */
static unsigned char *fresh_block(rng_t *r, size_t *psize)
{
    unsigned kind = (unsigned)rng_range(r, 0, 15);
    size_t size = *psize;
    unsigned char *p;
    if (kind < 2) {
        p = check_alloc(calloc(1, size), size);
        if (p[0] | p[size / 2] | p[size - 1])
            fail("calloc(%zu) returned non-zeroed memory", size);
    } else if (kind == 2 && size > 64) {
        /* alignment 64 B .. min(4 KiB, largest power of two below size) */
        unsigned top = 0;
        while (top < 6 && ((size_t)128 << top) < size)
            top++;
        size_t align = (size_t)64 << rng_range(r, 0, top);
        size = *psize = size | 8;
        void *q;
        if (posix_memalign(&q, align, size))
            fail("posix_memalign(%zu, %zu) failed", align, size);
        if ((uintptr_t)q % align)
            fail("posix_memalign(%zu, %zu) returned a misaligned block", align, size);
        p = q;
    } else {
        p = check_alloc(malloc(size), size);
    }
    return p;
}

int main(int argc, char **argv)
{
    bench_name = "mixed";
    long ops = arg_long(argc, argv, 1, 1000000, 1);
    long nslots = arg_long(argc, argv, 2, 2048, 1);
    long seed = arg_long(argc, argv, 3, 1, 0);

    unsigned char **slot = check_alloc(calloc((size_t)nslots, sizeof *slot), (size_t)nslots * sizeof *slot);
    size_t *size = check_alloc(calloc((size_t)nslots, sizeof *size), (size_t)nslots * sizeof *size);
    rng_t r = rng_seed((uint64_t)seed);
    uint64_t sum_alloc = 0, sum_free = 0;

    for (long i = 0; i < ops; i++) {
        size_t k = rng_range(&r, 0, (uint64_t)nslots - 1);
        unsigned action = (unsigned)rng_range(&r, 0, 2);
        if (!slot[k]) {
            size_t n = pick_size(&r);
            uint32_t tag = (uint32_t)mix64((uint64_t)i);
            slot[k] = fresh_block(&r, &n);
            write_header(slot[k], n, tag);
            memset(slot[k] + 8, (unsigned char)tag, n - 8);
            size[k] = n;
            sum_alloc += tag;
        } else if (action == 0) {
            sum_free += check_contents(slot[k], size[k], size[k]);
            free(slot[k]);
            slot[k] = NULL;
        } else {
            size_t old = size[k], n;
            if (action == 1 && old < MAX_SIZE) {
                size_t grow = rng_range(&r, 1, old);
                n = old + grow > MAX_SIZE ? MAX_SIZE : old + grow;
            } else
                n = old > 8 ? rng_range(&r, old / 4 < 8 ? 8 : old / 4, old - 1) : 8;
            unsigned char *p = check_alloc(realloc(slot[k], n), n);
            size_t kept = n < old ? n : old;
            uint32_t tag = check_contents(p, old, kept);
            write_header(p, n, tag);
            if (n > old)
                memset(p + old, (unsigned char)tag, n - old);
            slot[k] = p;
            size[k] = n;
        }
    }
    for (long k = 0; k < nslots; k++) {
        if (slot[k]) {
            sum_free += check_contents(slot[k], size[k], size[k]);
            free(slot[k]);
        }
    }
    free(slot);
    free(size);

    if (sum_alloc != sum_free)
        fail("tag sums differ: allocated %llx, freed %llx",
             (unsigned long long)sum_alloc, (unsigned long long)sum_free);
    printf("RESULT mixed %016llx\n", (unsigned long long)sum_free);
    return 0;
}
