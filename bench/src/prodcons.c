/* prodcons: producer/consumer message passing with cross-thread frees.
   Measures the cost of freeing memory on a thread other than the one that allocated it,
   the common pattern of pipelines and servers: producers malloc and fill messages
   (16 B - 2 KiB, log-uniform), consumers read and free them.  Allocators that return remote
   frees cheaply (and hand the memory back to the producer for reuse) win; allocators that
   funnel them through a shared lock or strand them in the consumer's cache lose.
   Messages travel in batches of BATCH pointers through one bounded ring (mutex + condition
   variables), so queue synchronisation is amortised and the allocator dominates.  Every
   message carries a value; the sums sent and received, and the message count, must agree,
   and consumers check the fill byte once per cache line.
   Usage: prodcons [MESSAGES_PER_PRODUCER=1500000] [PRODUCERS=2] [CONSUMERS=2] [SEED=1] */
#include "bench.h"
#include <pthread.h>

#define BATCH 32
#define RING (64 * BATCH)
#define MAX_MSG 2047                    /* message sizes are 16 << e .. (32 << e) - 1, e <= 6 */

typedef struct {
    uint32_t size;
    uint32_t fill;
    uint64_t value;
} msg_t;                                /* followed by size - sizeof(msg_t) fill bytes */

static struct {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    msg_t *slot[RING];
    size_t head, count;
    int producers_left;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0, 0 };

typedef struct {
    pthread_t tid;
    uint64_t seed;
    long messages;
    uint64_t sum, count;                /* sent (producers) or received (consumers) */
} worker_t;

static void push_batch(msg_t **batch, size_t n)
{
    pthread_mutex_lock(&q.lock);
    while (RING - q.count < n)
        pthread_cond_wait(&q.not_full, &q.lock);
    for (size_t i = 0; i < n; i++)
        q.slot[(q.head + q.count + i) % RING] = batch[i];
    q.count += n;
    pthread_cond_signal(&q.not_empty);
    pthread_mutex_unlock(&q.lock);
}

/* Takes up to BATCH messages; returns 0 once the producers are done and the ring is empty. */
static size_t pop_batch(msg_t **batch)
{
    pthread_mutex_lock(&q.lock);
    while (q.count == 0 && q.producers_left > 0)
        pthread_cond_wait(&q.not_empty, &q.lock);
    size_t n = q.count < BATCH ? q.count : BATCH;
    for (size_t i = 0; i < n; i++)
        batch[i] = q.slot[(q.head + i) % RING];
    q.head = (q.head + n) % RING;
    q.count -= n;
    if (n)
        pthread_cond_broadcast(&q.not_full);
    pthread_mutex_unlock(&q.lock);
    return n;
}

static void *producer(void *arg)
{
    worker_t *w = arg;
    rng_t r = rng_seed(w->seed);
    msg_t *batch[BATCH];
    size_t n = 0;
    for (long i = 0; i < w->messages; i++) {
        unsigned e = (unsigned)rng_range(&r, 0, 6);
        size_t size = ((size_t)16 << e) + rng_range(&r, 0, ((size_t)16 << e) - 1);
        msg_t *m = check_alloc(malloc(size), size);
        m->size = (uint32_t)size;
        m->value = mix64(w->seed << 32 ^ (uint64_t)i);
        m->fill = (uint32_t)(m->value >> 56);
        memset(m + 1, (int)m->fill, size - sizeof *m);
        w->sum += m->value;
        w->count++;
        batch[n++] = m;
        if (n == BATCH) {
            push_batch(batch, n);
            n = 0;
        }
    }
    if (n)
        push_batch(batch, n);
    pthread_mutex_lock(&q.lock);
    if (--q.producers_left == 0)
        pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.lock);
    return NULL;
}

static void *consumer(void *arg)
{
    worker_t *w = arg;
    msg_t *batch[BATCH];
    size_t n;
    while ((n = pop_batch(batch)) > 0) {
        for (size_t i = 0; i < n; i++) {
            msg_t *m = batch[i];
            const unsigned char *body = (const unsigned char *)m;
            if (m->size < sizeof *m || m->size > MAX_MSG)
                fail("corrupt message header (size %u)", (unsigned)m->size);
            for (size_t off = sizeof *m; off < m->size; off += 64)
                if (body[off] != m->fill)
                    fail("corrupt message body (size %u, offset %zu)", (unsigned)m->size, off);
            if (m->size > sizeof *m && body[m->size - 1] != m->fill)
                fail("corrupt message tail (size %u)", (unsigned)m->size);
            w->sum += m->value;
            w->count++;
            free(m);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    bench_name = "prodcons";
    long messages = arg_long(argc, argv, 1, 1500000, 1);
    long np = arg_long(argc, argv, 2, 2, 1);
    long nc = arg_long(argc, argv, 3, 2, 1);
    long seed = arg_long(argc, argv, 4, 1, 0);

    worker_t *w = check_alloc(calloc((size_t)(np + nc), sizeof *w), (size_t)(np + nc) * sizeof *w);
    q.producers_left = (int)np;
    for (long i = 0; i < np + nc; i++) {
        w[i].seed = (uint64_t)seed * 1000 + (uint64_t)i + 1;
        w[i].messages = messages;
        if (pthread_create(&w[i].tid, NULL, i < np ? producer : consumer, &w[i]))
            fail("pthread_create failed");
    }
    uint64_t sent = 0, received = 0, nsent = 0, nreceived = 0;
    for (long i = 0; i < np + nc; i++) {
        pthread_join(w[i].tid, NULL);
        if (i < np) {
            sent += w[i].sum;
            nsent += w[i].count;
        } else {
            received += w[i].sum;
            nreceived += w[i].count;
        }
    }
    free(w);

    if (sent != received || nsent != nreceived)
        fail("sent %llu messages (sum %llx), received %llu (sum %llx)",
             (unsigned long long)nsent, (unsigned long long)sent,
             (unsigned long long)nreceived, (unsigned long long)received);
    printf("RESULT prodcons %016llx\n", (unsigned long long)received);
    return 0;
}
