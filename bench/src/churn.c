/* churn: single-thread small-object churn.
   Measures the malloc/free fast paths and how well an allocator keeps a large, randomly
   churning population of small objects (8-256 B, about LIVE of them live) compact and
   cache-friendly.  A table of 2*LIVE slots is toggled at random: an empty slot gets a new
   block, a full one is freed, so allocations and frees interleave unpredictably in random
   order, as in an object-heavy program.  Every block is stamped when allocated and checked
   when freed; the sums of the tags allocated and freed must agree.
   Usage: churn [OPS=4000000] [LIVE=100000] [SEED=1] */
#include "bench.h"

/* Three quarters of the objects are 8-64 B, the rest 65-256 B. */
static size_t pick_size(rng_t *r)
{
    uint64_t x = rng_next(r) >> 11;
    return (x & 3) ? 8 + (x >> 2) % 57 : 65 + (x >> 2) % 192;
}

int main(int argc, char **argv)
{
    bench_name = "churn";
    long ops = arg_long(argc, argv, 1, 4000000, 1);
    long live = arg_long(argc, argv, 2, 100000, 1);
    long seed = arg_long(argc, argv, 3, 1, 0);

    size_t nslots = 2 * (size_t)live;
    unsigned char **slot = check_alloc(calloc(nslots, sizeof *slot), nslots * sizeof *slot);
    rng_t r = rng_seed((uint64_t)seed);
    uint64_t sum_alloc = 0, sum_free = 0;

    for (long i = 0; i < ops; i++) {
        size_t k = rng_range(&r, 0, nslots - 1);
        if (slot[k]) {
            sum_free += check_block(slot[k], 8, 256);
            free(slot[k]);
            slot[k] = NULL;
        } else {
            size_t size = pick_size(&r);
            uint32_t tag = (uint32_t)mix64((uint64_t)i);
            slot[k] = check_alloc(malloc(size), size);
            stamp_block(slot[k], size, tag);
            sum_alloc += tag;
        }
    }
    for (size_t k = 0; k < nslots; k++) {
        if (slot[k]) {
            sum_free += check_block(slot[k], 8, 256);
            free(slot[k]);
        }
    }
    free(slot);

    if (sum_alloc != sum_free)
        fail("tag sums differ: allocated %llx, freed %llx",
             (unsigned long long)sum_alloc, (unsigned long long)sum_free);
    printf("RESULT churn %016llx\n", (unsigned long long)sum_free);
    return 0;
}
