/* lockhash: a hash table with a mutex per bucket, its nodes allocated under the bucket's lock
   (bench/locksets.py: lock sets' main case).

   The table is filled at the start by the --threads workers: each inserts its share of the keys,
   and malloc's every 64-byte node while it holds the bucket's mutex, as a concurrent table does.
   The nodes total --pct percent of the L2 (read from sysfs), --chain nodes per bucket (default 8:
   a bucket holds a mutex, 48 bytes, so the bucket array, allocated outside any lock and hot too,
   is 9% of the nodes' bytes; at 4 it would be 19%, and nodes of 85% of the L2 with their buckets
   would not fit in it).  Between inserts each worker also allocates unrelated cold blocks (256 B-16 KiB,
   written once, never read again; one after every 16 nodes, about 4 MiB in all at 85%) so the
   nodes are not one contiguous run.  Then every worker looks up random keys for --seconds: lock
   the bucket, walk its chain, unlock.

   With the random frames a VM is given, a set of nodes of 85% of the L2 puts more pages on some
   colours than the L2 has ways, and those lines evict one another on every lookup.  Lock sets
   take memory allocated under a lock as shared hot data and spread its pages evenly over the
   L2's colours, so the set fits.

   With --nested the nodes are malloc'd before the locks are taken (ordinary memory), and every
   insert and lookup holds a mutex of the worker's own around the bucket's: depth 2, where lock
   sets' nested check samples the pages touched and balances them as if allocated inside.

     SECOND k lookups=<lookups per second, all workers>
     RESULT lockhash pct=P nodes=N buckets=B threads=T sum=S lookups_from3s=X   (S: of the values found)

   Build: cc -std=gnu11 -O2 -pthread -o build/bench/lockhash bench/colour/lockhash.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=locksets=1 build/bench/lockhash --pct=85 [--nested] */
#include "lockset.h"

typedef struct node_s { struct node_s* next; uint64_t key, val, pad[5]; } node_t;   /* 64 bytes */
typedef struct { pthread_mutex_t lock; node_t* head; } bucket_t;

static bucket_t* buckets;
static size_t nodes, nbuckets;
static int nthreads;
static counter_t* done;
static pthread_barrier_t ready;
static _Atomic(void*) sink;         /* the cold blocks: the optimiser must not drop them */
static bool nested;                 /* --nested */
static pthread_mutex_t own[64];     /* ... each worker's outer lock */

/* the key of node i (mix64 is a bijection: distinct keys), and its bucket (multiply-shift) */
static inline uint64_t key_of(size_t i) { return mix64(i + 1); }
static inline bucket_t* bucket_of(uint64_t key) { return &buckets[(key >> 32) * nbuckets >> 32]; }

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  rng_t r = rng_seed((uint64_t)id + 1);
  void** list = NULL;                                           /* the cold blocks, kept */
  for (size_t i = (size_t)id, k = 0; i < nodes; i += (size_t)nthreads, k++) {
    uint64_t key = key_of(i);
    bucket_t* b = bucket_of(key);
    node_t* n = nested ? check_alloc(malloc(sizeof *n), sizeof *n) : NULL;
    if (nested) pthread_mutex_lock(&own[id]);
    pthread_mutex_lock(&b->lock);
    if (!nested) n = check_alloc(malloc(sizeof *n), sizeof *n);   /* allocated under the lock */
    *n = (node_t){ b->head, key, i, { 0 } };
    b->head = n;
    pthread_mutex_unlock(&b->lock);
    if (nested) pthread_mutex_unlock(&own[id]);
    if (k % 16 == 15) {                                         /* unrelated, outside any lock */
      size_t len = (size_t)256 << rng_range(&r, 0, 6);
      void** c = check_alloc(malloc(len), len);
      memset(c, 1, len);                                        /* written once, never read again */
      *c = list;
      list = c;
    }
  }
  atomic_store_explicit(&sink, (void*)list, memory_order_relaxed);
  pthread_barrier_wait(&ready);
  uint64_t count = 0, sum = 0;
  while (!stopped()) {
    for (int k = 0; k < 256; k++) {
      size_t i = (size_t)((rng_next(&r) >> 32) * nodes >> 32);
      uint64_t key = key_of(i);
      bucket_t* b = bucket_of(key);
      const node_t* p;
      if (nested) pthread_mutex_lock(&own[id]);
      pthread_mutex_lock(&b->lock);
      for (p = b->head; p && p->key != key; p = p->next) {}
      if (p) sum += p->val;
      pthread_mutex_unlock(&b->lock);
      if (nested) pthread_mutex_unlock(&own[id]);
      if (!p) fail("key %zu not found", i);
    }
    publish(&done[id], count += 256);
  }
  return (void*)(uintptr_t)sum;
}

int main(int argc, char** argv) {
  bench_name = "lockhash";
  opts_t o = { 85, 10, 2, 8 };
  int kept = 1;                                                /* --nested taken out first */
  for (int i = 1; i < argc; i++) if (strcmp(argv[i], "--nested") == 0) nested = true; else argv[kept++] = argv[i];
  parse(kept, argv, &o, true, true, "--chain=", "[--pct=85] [--seconds=10] [--threads=2] [--chain=8 (nodes per bucket)] [--nested]");
  if (o.extra < 1) fail("--chain= needs a number of nodes >= 1");
  nodes = (size_t)(l2_sysfs_bytes() * o.pct / 100) / sizeof(node_t);
  nbuckets = (size_t)(nodes / o.extra) ? (size_t)(nodes / o.extra) : 1;
  nthreads = (int)o.threads;
  for (int i = 0; i < nthreads; i++) pthread_mutex_init(&own[i], NULL);
  buckets = check_alloc(malloc(nbuckets * sizeof *buckets), nbuckets * sizeof *buckets);
  for (size_t b = 0; b < nbuckets; b++) {
    pthread_mutex_init(&buckets[b].lock, NULL);
    buckets[b].head = NULL;
  }
  done = check_alloc(aligned_alloc(64, (size_t)nthreads * sizeof *done), (size_t)nthreads * sizeof *done);
  memset(done, 0, (size_t)nthreads * sizeof *done);
  pthread_barrier_init(&ready, NULL, (unsigned)nthreads + 1);
  pthread_t* t = check_alloc(calloc((size_t)nthreads, sizeof *t), (size_t)nthreads * sizeof *t);
  for (int i = 0; i < nthreads; i++)
    if (pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i)) fail("pthread_create");
  pthread_barrier_wait(&ready);                                /* filled: the clock starts */
  double rate = report("lookups", done, nthreads, (int)o.seconds);
  uint64_t sum = 0;
  for (int i = 0; i < nthreads; i++) {
    void* s;
    pthread_join(t[i], &s);
    sum += (uintptr_t)s;
  }
  printf("RESULT lockhash pct=%g nodes=%zu buckets=%zu threads=%d nested=%d sum=%llx lookups_from3s=%.0f\n",
         o.pct, nodes, nbuckets, nthreads, nested, (unsigned long long)sum, rate);
  return 0;
}
