/* larson: server-like load after Larson & Krishnan ("Memory allocation for long-running
   server applications", ISMM 1998).
   Measures multi-threaded throughput when memory migrates between threads and threads come
   and go: each of THREADS chains owns an array of SLOTS blocks (16-1000 B); a thread
   repeatedly frees a random slot and mallocs a new block into it, and after OPS operations
   it spawns a successor, hands it the array, and exits.  The successor frees blocks its
   predecessor (or, at first, the main thread) allocated, so allocators must reclaim and
   reuse memory of dead threads.  The total work is fixed (THREADS x GENERATIONS x OPS
   operations), so wall time measures throughput.  Blocks are stamped and checked; the tag
   sums of allocations and frees must agree.
   Usage: larson [THREADS=4] [GENERATIONS=100] [OPS=30000] [SLOTS=1000] [SEED=1] */
#include "bench.h"
#include <pthread.h>

#define MIN_SIZE 16
#define MAX_SIZE 1000

typedef struct {
    unsigned char **slot;
    long nslots, ops, generations, gen;
    rng_t rng;
    uint64_t id, counter, sum_alloc, sum_free;
    pthread_t prev;                     /* the thread to reap (generation > 0) */
    pthread_t last;                     /* the final generation's thread, for main to join */
} chain_t;

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static long chains_done;

static void new_block(chain_t *c, long k)
{
    size_t size = rng_range(&c->rng, MIN_SIZE, MAX_SIZE);
    uint32_t tag = (uint32_t)mix64(c->id << 40 ^ c->counter++);
    c->slot[k] = check_alloc(malloc(size), size);
    stamp_block(c->slot[k], size, tag);
    c->sum_alloc += tag;
}

static void *generation(void *arg)
{
    chain_t *c = arg;
    if (c->gen > 0 && pthread_join(c->prev, NULL))
        fail("pthread_join failed");
    for (long i = 0; i < c->ops; i++) {
        long k = (long)rng_range(&c->rng, 0, (uint64_t)c->nslots - 1);
        c->sum_free += check_block(c->slot[k], MIN_SIZE, MAX_SIZE);
        free(c->slot[k]);
        new_block(c, k);
    }
    if (++c->gen < c->generations) {
        pthread_t next;
        c->prev = pthread_self();
        if (pthread_create(&next, NULL, generation, c))
            fail("pthread_create failed");
    } else {
        pthread_mutex_lock(&done_lock);
        c->last = pthread_self();
        chains_done++;
        pthread_cond_signal(&done_cond);
        pthread_mutex_unlock(&done_lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_name = "larson";
    long nthreads = arg_long(argc, argv, 1, 4, 1);
    long generations = arg_long(argc, argv, 2, 100, 1);
    long ops = arg_long(argc, argv, 3, 30000, 1);
    long nslots = arg_long(argc, argv, 4, 1000, 1);
    long seed = arg_long(argc, argv, 5, 1, 0);

    chain_t *chain = check_alloc(calloc((size_t)nthreads, sizeof *chain), (size_t)nthreads * sizeof *chain);
    for (long t = 0; t < nthreads; t++) {
        chain_t *c = &chain[t];
        c->nslots = nslots;
        c->ops = ops;
        c->generations = generations;
        c->id = (uint64_t)t;
        c->rng = rng_seed((uint64_t)seed * 1000 + (uint64_t)t);
        c->slot = check_alloc(calloc((size_t)nslots, sizeof *c->slot), (size_t)nslots * sizeof *c->slot);
        for (long k = 0; k < nslots; k++)
            new_block(c, k);
    }
    for (long t = 0; t < nthreads; t++) {
        pthread_t tid;
        if (pthread_create(&tid, NULL, generation, &chain[t]))
            fail("pthread_create failed");
    }
    pthread_mutex_lock(&done_lock);
    while (chains_done < nthreads)
        pthread_cond_wait(&done_cond, &done_lock);
    pthread_mutex_unlock(&done_lock);

    uint64_t sum_alloc = 0, sum_free = 0;
    for (long t = 0; t < nthreads; t++) {
        chain_t *c = &chain[t];
        if (pthread_join(c->last, NULL))
            fail("pthread_join failed");
        for (long k = 0; k < nslots; k++) {
            c->sum_free += check_block(c->slot[k], MIN_SIZE, MAX_SIZE);
            free(c->slot[k]);
        }
        free(c->slot);
        sum_alloc += c->sum_alloc;
        sum_free += c->sum_free;
    }
    free(chain);

    if (sum_alloc != sum_free)
        fail("tag sums differ: allocated %llx, freed %llx",
             (unsigned long long)sum_alloc, (unsigned long long)sum_free);
    printf("RESULT larson %016llx\n", (unsigned long long)sum_free);
    return 0;
}
