/* pipeline: two stages and a queue, after PARSEC's dedup (bench/locksets.py).

   Stage 1 allocates chunks of 256 B-4 KiB, fills them with the random content of one of K seeds,
   and pushes them through a bounded queue (a mutex and two condition variables).  Stage 2 pops a
   chunk, hashes its bytes, looks the fingerprint up in a hash table under the table's mutex,
   allocates a 64-byte entry under that mutex when it is new (a duplicate only counts), and frees
   the chunk.  The K entries total --pct percent of the L2 (read from sysfs): the table is the
   data allocated under a lock; the chunks, allocated outside any, stream past it.

     SECOND k chunks=<chunks through stage 2 per second>
     RESULT pipeline pct=P seeds=K unique=U chunks=C chunks_from3s=X

   Build: cc -std=gnu11 -O2 -pthread -o build/bench/pipeline bench/colour/pipeline.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=locksets=1 build/bench/pipeline */
#include "lockset.h"

typedef struct entry_s { struct entry_s* next; uint64_t fp, count, len, pad[4]; } entry_t;   /* 64 bytes */
typedef struct { uint64_t* data; size_t len; } chunk_t;

#define QUEUE 64
static struct {
  pthread_mutex_t lock;
  pthread_cond_t not_empty, not_full;
  chunk_t item[QUEUE];
  size_t head, count;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, { { 0, 0 } }, 0, 0 };

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static entry_t** table;
static size_t seeds, nbuckets, unique;
static counter_t done;
static pthread_barrier_t ready;

static void push(chunk_t c) {
  pthread_mutex_lock(&q.lock);
  while (q.count == QUEUE) pthread_cond_wait(&q.not_full, &q.lock);
  q.item[(q.head + q.count++) % QUEUE] = c;
  pthread_cond_signal(&q.not_empty);
  pthread_mutex_unlock(&q.lock);
}

static chunk_t pop(void) {
  pthread_mutex_lock(&q.lock);
  while (q.count == 0) pthread_cond_wait(&q.not_empty, &q.lock);
  chunk_t c = q.item[q.head];
  q.head = (q.head + 1) % QUEUE;
  q.count--;
  pthread_cond_signal(&q.not_full);
  pthread_mutex_unlock(&q.lock);
  return c;
}

static void* stage1(void* arg) {
  rng_t r = rng_seed(1);
  pthread_barrier_wait(&ready);
  while (!stopped()) {
    uint64_t seed = (rng_next(&r) >> 32) * seeds >> 32;
    size_t len = 256 + mix64(seed) % (4096 - 256 + 1);         /* a seed's content has one size */
    uint64_t* d = check_alloc(malloc(len), len);
    rng_t c = rng_seed(seed);
    for (size_t i = 0; i < len / 8; i++) d[i] = rng_next(&c);
    push((chunk_t){ d, len });
  }
  push((chunk_t){ NULL, 0 });                                  /* the end */
  return arg;
}

static void* stage2(void* arg) {
  uint64_t chunks = 0;
  for (chunk_t c; (c = pop()).data != NULL;) {
    uint64_t fp = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < c.len / 8; i++) fp = (fp ^ c.data[i]) * 0x100000001b3ull;
    entry_t** b = &table[(fp >> 32) * nbuckets >> 32];
    pthread_mutex_lock(&table_lock);
    entry_t* e;
    for (e = *b; e && e->fp != fp; e = e->next) {}
    if (e) e->count++;
    else {
      e = check_alloc(malloc(sizeof *e), sizeof *e);           /* allocated under the table's lock */
      *e = (entry_t){ *b, fp, 1, c.len, { 0 } };
      *b = e;
      unique++;
    }
    pthread_mutex_unlock(&table_lock);
    free(c.data);
    publish(&done, ++chunks);
  }
  return arg;
}

int main(int argc, char** argv) {
  bench_name = "pipeline";
  opts_t o = { 85, 10, 1, 0 };
  parse(argc, argv, &o, true, false, NULL, "[--pct=85] [--seconds=10]");
  seeds = (size_t)(l2_sysfs_bytes() * o.pct / 100) / sizeof(entry_t);
  nbuckets = seeds ? seeds : 1;
  table = check_alloc(calloc(nbuckets, sizeof *table), nbuckets * sizeof *table);
  pthread_barrier_init(&ready, NULL, 2);
  pthread_t t1, t2;
  if (pthread_create(&t1, NULL, stage1, NULL) || pthread_create(&t2, NULL, stage2, NULL)) fail("pthread_create");
  pthread_barrier_wait(&ready);
  double rate = report("chunks", &done, 1, (int)o.seconds);
  pthread_join(t1, NULL);
  pthread_join(t2, NULL);
  printf("RESULT pipeline pct=%g seeds=%zu unique=%zu chunks=%llu chunks_from3s=%.0f\n", o.pct, seeds, unique,
         (unsigned long long)atomic_load(&done.n), rate);
  return 0;
}
