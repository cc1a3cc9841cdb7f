/* Thread exit hands memory back: (1) 200 threads in turn allocate and free 2 MiB of small
   blocks and exit: their heaps are reused and the number of segments stays flat; (2) threads
   exit leaving live blocks that the main thread frees later (remote frees into abandoned
   segments), and later threads adopt those segments instead of mapping new ones; (3) the statistics count every
   block once through all that; (4) a span whose every block another thread freed starts again
   from its first block: the owner's next blocks come in address order, not in the reverse order
   of the frees, and the span's lists are not walked; (5) fresh 2 MiB segments come many to one
   mmap (reservations), not one mmap (and a trim) each. */
#include "check.h"
#include <pthread.h>
#include <stddef.h>

static void* churn(void* arg) {
  void** p = malloc(32768 * sizeof(void*));
  for (int i = 0; i < 32768; i++) p[i] = malloc(64);
  for (int i = 0; i < 32768; i++) free(p[i]);
  free(p);
  return arg;
}

static void* free_all(void* arg) {
  void** q = arg;
  for (int i = 0; i < 4000; i++) free(q[i]);
  return NULL;
}

#define LEAVE 20000
static void* leave(void* arg) {
  void** out = arg;
  for (int i = 0; i < LEAVE; i++) { out[i] = malloc(48 + (size_t)(i % 5) * 16); memset(out[i], i, 16); }
  return NULL;
}

int main(void) {
  require_chromalloc("test_threads");
  {                                   /* (5) first, while the segment cache is empty: 64 MiB held */
    enum { M = 4096 };
    static void* big[M];
    long long mapped0 = stats_value("segments", "mapped_total"), res0 = stats_value("segments", "reservations");
    for (int i = 0; i < M; i++) { big[i] = malloc(16384); memset(big[i], 1, 64); }
    long long mapped = stats_value("segments", "mapped_total") - mapped0;
    long long res = stats_value("segments", "reservations") - res0;
    fprintf(stderr, "reservations: %lld fresh segments from %lld reservations\n", mapped, res);
    CHECK(mapped >= 30);
    CHECK(res >= 1 && res <= 6);
    for (int i = 0; i < M; i++) free(big[i]);
  }
  for (int i = 0; i < 5; i++) { pthread_t t; pthread_create(&t, NULL, churn, NULL); pthread_join(t, NULL); }
  long long base = stats_value("segments", "current");
  long long reused0 = stats_value("threads", "heaps_reused");
  for (int i = 0; i < 200; i++) { pthread_t t; pthread_create(&t, NULL, churn, NULL); pthread_join(t, NULL); }
  long long after = stats_value("segments", "current");
  CHECK(stats_value("threads", "heaps_reused") - reused0 >= 200);
  CHECK(after <= base + 2);
  fprintf(stderr, "churn: segments %lld -> %lld after 200 threads\n", base, after);

  static void* blocks[LEAVE];
  long long reclaimed0 = stats_value("segments", "reclaimed");
  long long mapped0 = stats_value("segments", "mapped_total");
  for (int round = 0; round < 50; round++) {
    pthread_t t;
    pthread_create(&t, NULL, leave, blocks);
    pthread_join(t, NULL);
    int bad = 0;
    for (int i = 0; i < LEAVE; i++) {
      unsigned char* b = blocks[i];
      for (int j = 0; j < 16; j++) bad += b[j] != (unsigned char)i;
      free(b);
    }
    CHECK_EQ(bad, 0);
  }
  long long reclaimed = stats_value("segments", "reclaimed") - reclaimed0;
  long long mapped = stats_value("segments", "mapped_total") - mapped0;
  fprintf(stderr, "leave: %lld segments reclaimed, %lld mapped over 50 rounds\n", reclaimed, mapped);
  CHECK(reclaimed >= 40);
  if (chromalloc_option("segment_cache") > 0) CHECK(mapped <= 4);   /* without a cache: remapped */
  /* (3) the statistics count those blocks once each: 205 x 32,768 churned and 50 x 20,000 left
     behind (heaps that exited, spans adopted with blocks freed from afar), plus what libc and
     this test allocate themselves */
  long long allocs = stats_value("totals", "small_allocations");
  long long made = 205LL * 32768 + 50LL * LEAVE;         /* the 256 KiB pointer arrays are large */
  fprintf(stderr, "statistics: %lld small allocations counted, %lld made by the test\n", allocs, made);
  CHECK(allocs >= made && allocs <= made + 100000);

  /* (4) 88-byte blocks: a class nothing else here uses */
  enum { N = 4000 };
  static void* q[N];
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N; i++) q[i] = malloc(88);
    pthread_t t;
    pthread_create(&t, NULL, free_all, q);
    pthread_join(t, NULL);
    for (int i = 0; i < N; i++) q[i] = malloc(88);
    int up = 0, down = 0;
    for (int i = 1; i < N; i++) {
      ptrdiff_t d = (char*)q[i] - (char*)q[i - 1];
      up += d > 0 && d <= 128;
      down += d < 0 && d >= -128;
    }
    fprintf(stderr, "remote frees of whole spans: next blocks %d ascending, %d descending neighbours\n", up, down);
    CHECK(up > N * 3 / 4);
    for (int i = 0; i < N; i++) free(q[i]);
  }
  return check_done("test_threads");
}
