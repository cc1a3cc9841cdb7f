/* xchurn: two threads churning mixed sizes, one free in sixteen handed to the other thread.
   The shape our users reported: each thread keeps SLOTS live blocks and replaces a random
   one per step; sizes are 70% 8-128 B, 25% 128 B-1 KiB, 4.5% 1-32 KiB and 0.5% 32 KiB-1 MiB.
   One replaced block in sixteen is not freed by its thread but posted (in batches of 64) to
   the other thread, which frees it.  Measures the fast paths, remote frees, and how an
   allocator gives memory back while it keeps being reused (page faults, madvise, locks).
   Blocks are stamped and checked; the tag sums of allocations and frees must agree.
   Usage: xchurn [STEPS=2000000] [SLOTS=4096] [SEED=1] */
#include "bench.h"
#include <pthread.h>

#define BATCH 64

typedef struct worker_s {
    pthread_t tid;
    long steps, slots;
    uint64_t seed;
    struct worker_s *peer;
    pthread_mutex_t lock;               /* guards inbox */
    unsigned char **inbox;              /* blocks posted by the peer, to free */
    size_t inbox_n, inbox_cap;
    uint64_t sum_alloc, sum_free;
} worker_t;

static size_t pick_size(rng_t *r)
{
    uint64_t x = rng_next(r) >> 11, p = x % 1000, y = x / 1000;
    if (p < 700) return 8 + y % 121;                    /* 8-128 B */
    if (p < 950) return 129 + y % 896;                  /* 129 B-1 KiB */
    if (p < 995) return 1025 + y % (31 * 1024);         /* 1-32 KiB */
    return 32769 + y % (1024 * 1024 - 32768);           /* 32 KiB-1 MiB */
}

static void post(worker_t *to, unsigned char **batch, size_t n)
{
    pthread_mutex_lock(&to->lock);
    if (to->inbox_n + n > to->inbox_cap) {
        size_t cap = to->inbox_cap ? 2 * to->inbox_cap : 1024;
        while (cap < to->inbox_n + n) cap *= 2;
        to->inbox = check_alloc(realloc(to->inbox, cap * sizeof *to->inbox), cap * sizeof *to->inbox);
        to->inbox_cap = cap;
    }
    memcpy(to->inbox + to->inbox_n, batch, n * sizeof *batch);
    to->inbox_n += n;
    pthread_mutex_unlock(&to->lock);
}

/* Free what the peer posted: swap the inbox out under the lock, free outside it. */
static void drain(worker_t *w, unsigned char ***spare, size_t *spare_cap)
{
    pthread_mutex_lock(&w->lock);
    unsigned char **got = w->inbox;
    size_t n = w->inbox_n, cap = w->inbox_cap;
    w->inbox = *spare; w->inbox_cap = *spare_cap; w->inbox_n = 0;
    pthread_mutex_unlock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        w->sum_free += check_block(got[i], 8, 1024 * 1024);
        free(got[i]);
    }
    *spare = got; *spare_cap = cap;
}

static void *run(void *arg)
{
    worker_t *w = arg;
    rng_t r = rng_seed(w->seed);
    unsigned char **slot = check_alloc(calloc((size_t)w->slots, sizeof *slot), (size_t)w->slots * sizeof *slot);
    unsigned char *batch[BATCH], **spare = NULL;
    size_t nbatch = 0, spare_cap = 0;
    for (long i = 0; i < w->steps; i++) {
        size_t k = rng_range(&r, 0, (uint64_t)w->slots - 1);
        if (slot[k]) {
            if ((rng_next(&r) & 15) == 0) {
                batch[nbatch++] = slot[k];
                if (nbatch == BATCH) { post(w->peer, batch, nbatch); nbatch = 0; }
            } else {
                w->sum_free += check_block(slot[k], 8, 1024 * 1024);
                free(slot[k]);
            }
        }
        size_t size = pick_size(&r);
        uint32_t tag = (uint32_t)mix64(w->seed ^ (uint64_t)i);
        slot[k] = check_alloc(malloc(size), size);
        stamp_block(slot[k], size, tag);
        w->sum_alloc += tag;
        if ((i & 1023) == 0) drain(w, &spare, &spare_cap);
    }
    if (nbatch) post(w->peer, batch, nbatch);
    for (long k = 0; k < w->slots; k++)
        if (slot[k]) { w->sum_free += check_block(slot[k], 8, 1024 * 1024); free(slot[k]); }
    free(slot);
    free(spare);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_name = "xchurn";
    long steps = arg_long(argc, argv, 1, 2000000, 1);
    long slots = arg_long(argc, argv, 2, 4096, 1);
    long seed = arg_long(argc, argv, 3, 1, 0);
    worker_t w[2];
    memset(w, 0, sizeof w);
    for (int t = 0; t < 2; t++) {
        w[t].steps = steps;
        w[t].slots = slots;
        w[t].seed = mix64((uint64_t)seed * 2 + (uint64_t)t);
        w[t].peer = &w[1 - t];
        pthread_mutex_init(&w[t].lock, NULL);
    }
    for (int t = 0; t < 2; t++)
        if (pthread_create(&w[t].tid, NULL, run, &w[t]) != 0) fail("pthread_create failed");
    for (int t = 0; t < 2; t++) pthread_join(w[t].tid, NULL);
    uint64_t sa = 0, sf = 0;
    for (int t = 0; t < 2; t++) {                       /* what was posted after the peer's last drain */
        for (size_t i = 0; i < w[t].inbox_n; i++) { w[t].sum_free += check_block(w[t].inbox[i], 8, 1024 * 1024); free(w[t].inbox[i]); }
        free(w[t].inbox);
        sa += w[t].sum_alloc; sf += w[t].sum_free;
    }
    if (sa != sf)
        fail("tag sums differ: allocated %llx, freed %llx", (unsigned long long)sa, (unsigned long long)sf);
    printf("RESULT xchurn %016llx\n", (unsigned long long)sf);
    return 0;
}
