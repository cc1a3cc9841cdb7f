/* mtchurn: three threads allocate blocks of 1 B-2 KiB (three in four) or up to 3 MiB, touch
   their first 64 bytes and swap them into 64 shared slots, freeing what was there (the loop of
   tests/unit/test_fork.c), for SECONDS; prints the operations done.  One call site whose chunks
   are written once and never read: NightWatch may judge it a polluter, and nothing here is a
   victim, so any difference between nightwatch=0 and nightwatch=1 is the policy's cost.
   Build and run by hand (docs/nightwatch.md, "Chunks below the L2, fork fixes"):
     cc -O2 -pthread bench/nightwatch/mtchurn.c -o build/mtchurn
     for o in nightwatch=0 nightwatch=1; do CHROMALLOC_OPTIONS=$o LD_PRELOAD=build/libchromalloc-colour.so build/mtchurn 3; done
   Usage: mtchurn [SECONDS=5] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_bool stop;
static _Atomic(void*) shared[64];
static atomic_long ops;

static void* churn(void* arg) {
  unsigned long r = (unsigned long)arg + 1;
  long n_ops = 0;
  while (!atomic_load(&stop)) {
    r ^= r << 13; r ^= r >> 7; r ^= r << 17;
    size_t n = r % 4 == 0 ? r % (3 << 20) : r % 2000 + 1;
    void* p = malloc(n);
    if (p == NULL) { perror("malloc"); exit(1); }
    memset(p, 1, n < 64 ? n : 64);
    free(atomic_exchange(&shared[r % 64], p));
    n_ops++;
  }
  atomic_fetch_add(&ops, n_ops);
  return NULL;
}

int main(int argc, char** argv) {
  int seconds = argc > 1 ? atoi(argv[1]) : 5;
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, churn, (void*)(unsigned long)i);
  sleep((unsigned)(seconds > 0 ? seconds : 5));
  atomic_store(&stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 64; i++) free(atomic_exchange(&shared[i], NULL));
  printf("mtchurn ops %ld in %d s\n", (long)ops, seconds);
  return 0;
}
