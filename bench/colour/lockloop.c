/* lockloop: what wrapping pthread_mutex_lock/unlock costs a lock-heavy program with nothing to
   gain (bench/locksets.py).

   Each of --threads workers locks and unlocks a mutex of its own in a tight loop, with a few
   arithmetic operations on its own data inside; no memory is shared, nothing is allocated.
   Lock sets must watch every lock and unlock, so any slowdown here is their overhead.

     SECOND k locks=<lock/unlock pairs per second, all workers>
     RESULT lockloop threads=T state=S locks_from3s=X   (S: of the private work)

   Build: cc -std=gnu11 -O2 -pthread -o build/bench/lockloop bench/colour/lockloop.c
   Run:   LD_PRELOAD=build/libchromalloc-colour.so CHROMALLOC_OPTIONS=locksets=1 build/bench/lockloop */
#include "lockset.h"

/* a worker's mutex and data, alone on their cache lines (static: no allocation at all) */
static struct { _Alignas(64) pthread_mutex_t lock; uint64_t x; } priv[64];
static counter_t done[64];
static pthread_barrier_t ready;

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  priv[id].x = (uint64_t)id + 1;
  pthread_barrier_wait(&ready);
  uint64_t count = 0;
  while (!stopped()) {
    for (int k = 0; k < 1024; k++) {
      pthread_mutex_lock(&priv[id].lock);
      priv[id].x = priv[id].x * 6364136223846793005ull + 1442695040888963407ull;   /* the private work */
      pthread_mutex_unlock(&priv[id].lock);
    }
    publish(&done[id], count += 1024);
  }
  return NULL;
}

int main(int argc, char** argv) {
  bench_name = "lockloop";
  opts_t o = { 100, 10, 2, 0 };
  parse(argc, argv, &o, false, true, NULL, "[--seconds=10] [--threads=2]");
  int nthreads = (int)o.threads;
  pthread_barrier_init(&ready, NULL, (unsigned)nthreads + 1);
  pthread_t t[64];
  for (int i = 0; i < nthreads; i++) {
    pthread_mutex_init(&priv[i].lock, NULL);
    if (pthread_create(&t[i], NULL, worker, (void*)(intptr_t)i)) fail("pthread_create");
  }
  pthread_barrier_wait(&ready);
  double rate = report("locks", done, nthreads, (int)o.seconds);
  uint64_t sum = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i], NULL);
    sum ^= priv[i].x;
  }
  printf("RESULT lockloop threads=%d state=%llx locks_from3s=%.0f\n", nthreads, (unsigned long long)sum, rate);
  return 0;
}
