/* cscratch: passive false sharing, after Hoard's cache-scratch benchmark (Berger et al.,
   "Hoard: a scalable memory allocator for multithreaded applications", ASPLOS 2000).
   Measures whether an allocator makes threads share cache lines they never share in the
   program.  The main thread allocates one small object per worker, back to back (so they
   likely sit in one cache line), and hands one to each worker.  Each worker frees the object
   it received, then ITERATIONS times mallocs an object of SIZE bytes, writes and reads back
   every byte REPETITIONS times, and frees it.  An allocator that recycles the freed foreign
   object into the worker's own cache gives workers blocks in one line, and every write then
   bounces that line between cores; one that returns remote frees to their owner does not.
   Every read must return the value just written (a block handed to two threads at once
   would break this); the checksum sums what was read.
   Usage: cscratch [THREADS=2] [ITERATIONS=1000] [REPETITIONS=5000] [SIZE=8] */
#include "bench.h"
#include <pthread.h>

typedef struct {
    pthread_t tid;
    unsigned char *received;
    long iterations, repetitions, size;
    uint64_t sum;
} worker_t;

static pthread_barrier_t start;

static void *worker(void *arg)
{
    worker_t *w = arg;
    pthread_barrier_wait(&start);
    free(w->received);
    for (long i = 0; i < w->iterations; i++) {
        volatile unsigned char *a = check_alloc(malloc((size_t)w->size), (size_t)w->size);
        for (long j = 0; j < w->repetitions; j++) {
            unsigned char v = (unsigned char)(i + j);
            for (long k = 0; k < w->size; k++) {
                a[k] = v;
                if (a[k] != v)
                    fail("a block was written by another thread");
                w->sum += a[k];
            }
        }
        free((void *)a);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_name = "cscratch";
    long nthreads = arg_long(argc, argv, 1, 2, 1);
    long iterations = arg_long(argc, argv, 2, 1000, 1);
    long repetitions = arg_long(argc, argv, 3, 5000, 1);
    long size = arg_long(argc, argv, 4, 8, 1);

    worker_t *w = check_alloc(calloc((size_t)nthreads, sizeof *w), (size_t)nthreads * sizeof *w);
    for (long t = 0; t < nthreads; t++) {
        w[t].received = check_alloc(malloc((size_t)size), (size_t)size);
        w[t].iterations = iterations;
        w[t].repetitions = repetitions;
        w[t].size = size;
    }
    pthread_barrier_init(&start, NULL, (unsigned)nthreads);
    for (long t = 0; t < nthreads; t++)
        if (pthread_create(&w[t].tid, NULL, worker, &w[t]))
            fail("pthread_create failed");
    uint64_t sum = 0;
    for (long t = 0; t < nthreads; t++) {
        pthread_join(w[t].tid, NULL);
        sum += w[t].sum;
    }
    pthread_barrier_destroy(&start);
    free(w);

    /* each worker reads sum over i, j of (i + j) mod 256, SIZE times */
    uint64_t expect = 0;
    for (long i = 0; i < iterations; i++)
        for (long j = 0; j < repetitions; j++)
            expect += (unsigned char)(i + j);
    expect *= (uint64_t)size * (uint64_t)nthreads;
    if (sum != expect)
        fail("checksum %llu, expected %llu", (unsigned long long)sum, (unsigned long long)expect);
    printf("RESULT cscratch %016llx\n", (unsigned long long)sum);
    return 0;
}
