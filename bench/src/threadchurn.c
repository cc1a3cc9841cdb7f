/* threadchurn: many short-lived threads.
   Measures the per-thread costs of an allocator: setting up a thread's heap or cache on its
   first malloc, tearing it down (and recovering what it still holds) at thread exit, and
   freeing blocks whose allocating thread is gone or still running.  ROUNDS times, the main
   thread starts THREADS threads and joins them.  Each allocates OBJECTS small blocks
   (16-512 B), frees three quarters of them in random order, posts the rest to the next
   thread of its round, then frees the blocks posted to it by the previous thread, which may
   be running or may have exited already.  Blocks are stamped and checked; the tag sums of
   allocations and frees must agree.
   Usage: threadchurn [ROUNDS=500] [THREADS=4] [OBJECTS=2000] [SEED=1] */
#include "bench.h"
#include <pthread.h>

#define MIN_SIZE 16
#define MAX_SIZE 512

typedef struct {
    pthread_t tid;
    long index, objects;
    uint64_t seed;
    unsigned char **outbox;             /* blocks for the next thread, set when posted */
    uint64_t sum_alloc, sum_free;
} worker_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t posted;
    worker_t *w;
    long nthreads;
} round_ = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0 };

static void *worker(void *arg)
{
    worker_t *w = arg;
    long n = w->objects, keep = n / 4;
    rng_t r = rng_seed(w->seed);
    unsigned char **obj = check_alloc(malloc((size_t)n * sizeof *obj), (size_t)n * sizeof *obj);
    for (long i = 0; i < n; i++) {
        size_t size = rng_range(&r, MIN_SIZE, MAX_SIZE);
        uint32_t tag = (uint32_t)mix64(w->seed << 24 ^ (uint64_t)i);
        obj[i] = check_alloc(malloc(size), size);
        stamp_block(obj[i], size, tag);
        w->sum_alloc += tag;
    }
    /* free a random three quarters: shuffle, keep the first quarter */
    for (long i = n - 1; i > 0; i--) {
        long j = (long)rng_range(&r, 0, (uint64_t)i);
        unsigned char *t = obj[i];
        obj[i] = obj[j];
        obj[j] = t;
    }
    for (long i = keep; i < n; i++) {
        w->sum_free += check_block(obj[i], MIN_SIZE, MAX_SIZE);
        free(obj[i]);
    }

    worker_t *prev = &round_.w[(w->index + round_.nthreads - 1) % round_.nthreads];
    pthread_mutex_lock(&round_.lock);
    w->outbox = obj;
    pthread_cond_broadcast(&round_.posted);
    while (!prev->outbox)
        pthread_cond_wait(&round_.posted, &round_.lock);
    unsigned char **inbox = prev->outbox;
    pthread_mutex_unlock(&round_.lock);

    for (long i = 0; i < keep; i++) {
        w->sum_free += check_block(inbox[i], MIN_SIZE, MAX_SIZE);
        free(inbox[i]);
    }
    free(inbox);
    return NULL;
}

int main(int argc, char **argv)
{
    bench_name = "threadchurn";
    long rounds = arg_long(argc, argv, 1, 500, 1);
    long nthreads = arg_long(argc, argv, 2, 4, 1);
    long objects = arg_long(argc, argv, 3, 2000, 1);
    long seed = arg_long(argc, argv, 4, 1, 0);

    worker_t *w = check_alloc(calloc((size_t)nthreads, sizeof *w), (size_t)nthreads * sizeof *w);
    round_.w = w;
    round_.nthreads = nthreads;
    uint64_t sum_alloc = 0, sum_free = 0;
    for (long rd = 0; rd < rounds; rd++) {
        for (long t = 0; t < nthreads; t++)
            w[t] = (worker_t){ .index = t, .objects = objects,
                               .seed = ((uint64_t)seed << 32) + (uint64_t)(rd * nthreads + t) };
        for (long t = 0; t < nthreads; t++)
            if (pthread_create(&w[t].tid, NULL, worker, &w[t]))
                fail("pthread_create failed");
        for (long t = 0; t < nthreads; t++) {
            pthread_join(w[t].tid, NULL);
            sum_alloc += w[t].sum_alloc;
            sum_free += w[t].sum_free;
        }
    }
    free(w);

    if (sum_alloc != sum_free)
        fail("tag sums differ: allocated %llx, freed %llx",
             (unsigned long long)sum_alloc, (unsigned long long)sum_free);
    printf("RESULT threadchurn %016llx\n", (unsigned long long)sum_free);
    return 0;
}
