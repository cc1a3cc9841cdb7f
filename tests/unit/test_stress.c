/* Multi-threaded stress: threads allocate blocks of random sizes (16 B to 2 MiB), stamp them,
   free some locally, and pass others through a shared array of slots for other threads to
   check and free (remote frees, frees into full spans).  Threads are recreated every round,
   so segments are abandoned with live blocks and adopted by later threads.  Every block's
   stamp is verified before it is freed: a lost or overlapping block fails the test. */
#include "check.h"
#include <pthread.h>
#include <stdatomic.h>

#define SLOTS 4096
static _Atomic(uintptr_t) slots[SLOTS];
static _Atomic(long) bad_stamps;
static int rounds = 12, threads = 6, iterations = 60000;

typedef struct { size_t size; uintptr_t check; } stamp_t;

static uint64_t next(uint64_t* s) { uint64_t x = *s; x ^= x << 13; x ^= x >> 7; x ^= x << 17; return *s = x; }

static size_t pick_size(uint64_t* r) {
  uint64_t x = next(r) % 1000;
  if (x < 900) return 17 + next(r) % 240;          /* > sizeof(stamp_t) */
  if (x < 990) return 256 + next(r) % 8000;
  if (x < 999) return 8192 + next(r) % 100000;
  return 200000 + next(r) % (2 << 20);
}

static void* make(size_t size) {
  stamp_t* p = malloc(size);
  if (p == NULL) { atomic_fetch_add(&bad_stamps, 1); return NULL; }
  p->size = size;
  p->check = (uintptr_t)p ^ size ^ 0x5a5a5a5aUL;
  ((unsigned char*)p)[size - 1] = (unsigned char)size;
  return p;
}

static void retire(void* q) {
  stamp_t* p = q;
  if (p == NULL) return;
  if (p->check != ((uintptr_t)p ^ p->size ^ 0x5a5a5a5aUL) || ((unsigned char*)p)[p->size - 1] != (unsigned char)p->size)
    atomic_fetch_add(&bad_stamps, 1);
  p->check = 0;
  free(p);
}

static void* worker(void* arg) {
  uint64_t r = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  void* local[512] = {0};
  for (int i = 0; i < iterations; i++) {
    uint64_t x = next(&r);
    int k = (int)(x % 512);
    switch ((x >> 16) % 4) {
      case 0: case 1:                                   /* local churn */
        retire(local[k]);
        local[k] = make(pick_size(&r));
        break;
      case 2: {                                         /* hand a block to whoever comes next */
        void* p = make(pick_size(&r));
        retire((void*)atomic_exchange(&slots[next(&r) % SLOTS], (uintptr_t)p));
        break;
      }
      default:                                          /* take someone's block */
        retire((void*)atomic_exchange(&slots[next(&r) % SLOTS], 0));
        break;
    }
  }
  /* leave half of the local blocks in the shared slots: they outlive this thread */
  for (int k = 0; k < 512; k++) {
    if (k % 2) retire(local[k]);
    else retire((void*)atomic_exchange(&slots[(uintptr_t)(k * 7 + (uintptr_t)arg) % SLOTS], (uintptr_t)local[k]));
  }
  return NULL;
}

int main(int argc, char** argv) {
  require_chromalloc("test_stress");
  if (argc > 1) rounds = atoi(argv[1]);
  for (int round = 0; round < rounds; round++) {
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)(round * threads + i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < SLOTS; i++) retire((void*)atomic_exchange(&slots[i], 0));
  CHECK_EQ(atomic_load(&bad_stamps), 0);
  long long reclaimed = stats_value("segments", "reclaimed");
  long long heaps_reused = stats_value("threads", "heaps_reused");
  CHECK(reclaimed > 0);        /* later threads adopted what earlier ones left */
  CHECK(heaps_reused > 0);
  /* everything was freed: after a collect, no segment should hold live blocks */
  chromalloc_collect();
  CHECK(stats_value("large", "live") == 0);
  fprintf(stderr, "test_stress: %d rounds x %d threads; segments reclaimed %lld, heaps reused %lld\n",
          rounds, threads, reclaimed, heaps_reused);
  return check_done("test_stress");
}
