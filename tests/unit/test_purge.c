/* Purge pacing (src/core/pacer.h), driven by scripted times: the wait starts at purge_delay,
   doubles on each refault within four waits of the purge, stops at 64x, ignores late reuse, and
   halves after 32 calm waits.  Then the same through the allocator: a large object freed,
   purged and taken again (a refault) makes the segment cache wait longer, and its pages come
   back zero for calloc, also with no cache and with purging at once.  And a new span is the
   one freed last while it is still committed, in whichever of the heap's segments it lies.
   calloc skips the memset of blocks carved from zero memory (fresh or purged) and reads zero
   every time: fresh, reused unpurged, purged, and in a child whose memory is locked (mlockall:
   purges fail there, and nothing purged is then taken to be zero).  A heap that the next thread
   reuses keeps its pace.  A large object takes the cached segment whose resident pages fit it
   best, and a thread taking over a cached segment gives a class the span that last served it.
   A thread's slots hand its last freed segments back to it, and give them up when their wait is
   over (to any thread's purge), to malloc_trim, and at thread exit. */
#include "check.h"
#include "../../src/core/pacer.h"
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <errno.h>
#include <unistd.h>

static void scripted(void) {
  _ca_options[CA_OPT_PURGE_DELAY] = 10;
  ca_pacer_t p = { 0, 0 };
  CHECK(_ca_pacer_delay(&p) == 10);                   /* zeroed pacer: the base wait */
  _ca_pacer_reused(&p, 1000, 1030);                   /* 30 ms after its purge: within 4 waits */
  CHECK(p.mult == 2 && _ca_pacer_delay(&p) == 20);
  _ca_pacer_reused(&p, 2000, 2200);                   /* 200 ms: later than 4 x 20, not counted */
  CHECK(p.mult == 2);
  for (uint64_t t = 3000; t < 3010; t++) _ca_pacer_reused(&p, t, t + 1);
  CHECK(p.mult == CA_PACER_MAX && _ca_pacer_delay(&p) == 10 * CA_PACER_MAX);
  uint64_t last = 3010;                               /* calm_since of the last refault */
  _ca_pacer_purging(&p, last + 32 * 640 - 1);         /* not calm long enough */
  CHECK(p.mult == CA_PACER_MAX);
  _ca_pacer_purging(&p, last + 32 * 640 + 1);
  CHECK(p.mult == CA_PACER_MAX / 2);
  uint64_t now = last + 32 * 640 + 1;
  for (int k = 0; k < 10; k++) { now += 32 * 640 + 1; _ca_pacer_purging(&p, now); }
  CHECK(p.mult == 1 && _ca_pacer_delay(&p) == 10);   /* back at the base pace, not below */
  _ca_options[CA_OPT_PURGE_DELAY] = 0;
  CHECK(_ca_pacer_delay(&p) == 0);                    /* purge at once stays at once */
  _ca_options[CA_OPT_PURGE_DELAY] = 10;
}

/* calloc of a segment that held a bigger object before it was shrunk, freed and purged: the
   purge must have covered the object's whole extent, not its last size */
static void zero_after_shrink(bool trim) {
  size_t big = 1536 * 1024, small = 100 * 1024;
  unsigned char* p = malloc(big);
  memset(p, 0xA5, big);
  p = realloc(p, small);                              /* in place: the tail stays dirty */
  free(p);
  if (trim) malloc_trim(0);
  unsigned char* q = calloc(1, big);
  size_t bad = 0;
  for (size_t i = 0; i < big; i++) bad += q[i] != 0;
  if (bad) fprintf(stderr, "calloc after shrink (%s): %zu bytes not zero\n", trim ? "purged" : "cached", bad);
  CHECK(bad == 0);
  free(q);
}

/* In a fresh thread: fill three segments with 64 KiB spans of 3000-byte blocks, empty one span
   of a full segment (its segment now comes first among those with room), then one of the last
   segment.  The next new span (another class) is the second one, not a span of the first
   segment and not a cold one. */
#define SPAN_OF(p) ((uintptr_t)(p) >> 16)
static void* newest_span(void* arg) {
  (void)arg;
  enum { N = 1600 };
  static void* b[N];
  for (int i = 0; i < N; i++) b[i] = malloc(3000);
  uintptr_t full = SPAN_OF(b[40]), last = SPAN_OF(b[N - 40]);   /* first segment; the last one */
  CHECK((full << 16 >> 21) != (last << 16 >> 21));
  for (int i = 0; i < N; i++) if (SPAN_OF(b[i]) == full) { free(b[i]); b[i] = NULL; }
  for (int i = 0; i < N; i++) if (b[i] != NULL && SPAN_OF(b[i]) == last) { free(b[i]); b[i] = NULL; }
  void* p = malloc(5000);
  if (SPAN_OF(p) != last) fprintf(stderr, "new span at %p: not the span freed last (%p) nor %p\n", p, (void*)(last << 16), (void*)(full << 16));
  CHECK(SPAN_OF(p) == last);
  free(p);
  for (int i = 0; i < N; i++) free(b[i]);
  return NULL;
}

/* Two threads, one after the other (the second takes over the first one's heap): `arg` to both. */
static void in_turn(void* (*first)(void*), void* (*second)(void*), void* arg) {
  pthread_t t;
  pthread_create(&t, NULL, first, arg);
  pthread_join(t, NULL);
  pthread_create(&t, NULL, second, arg);
  pthread_join(t, NULL);
}

/* A thread that takes over a cached segment gives class c the span that served c last: a span
   that served every class in turn was resident as far as any of them carved it (threadchurn). */
static uintptr_t served_span[2];
static void* serve_two(void* arg) {
  void* x = malloc(3000), *y = malloc(200);           /* spans 0 and 1 of a new segment */
  served_span[0] = SPAN_OF(x);
  served_span[1] = SPAN_OF(y);
  free(x);
  free(y);
  return arg;                                         /* exit: the segment, all free, is cached */
}
static void* take_second(void* arg) {
  void* y = malloc(200);                              /* the class the first thread's span 1 served */
  *(uintptr_t*)arg = SPAN_OF(y);
  free(y);
  return NULL;
}
static void span_served(void) {
  uintptr_t got = 0;
  in_turn(serve_two, take_second, &got);
  if (got != served_span[1])
    fprintf(stderr, "span served: %#lx, expected %#lx (span 0 was %#lx)\n", (unsigned long)got << 16,
            (unsigned long)served_span[1] << 16, (unsigned long)served_span[0] << 16);
  CHECK((served_span[0] >> 5) == (served_span[1] >> 5) && got == served_span[1]);
}

static uint8_t zero_state(void* p) { return _ca_span_of(_ca_segment_of(p), p)->zero; }

/* n callocs of 208 bytes (a class nothing else here uses): the count of nonzero bytes, and the
   last block's span state; then each block is dirtied and freed */
static long calloc_round(int n, uint8_t* state_last) {
  static unsigned char* b[3000];
  long bad = 0;
  for (int i = 0; i < n; i++) {
    b[i] = calloc(1, 208);
    *state_last = zero_state(b[i]);
    for (int j = 0; j < 208; j++) bad += b[i][j] != 0;
  }
  for (int i = 0; i < n; i++) { memset(b[i], 0xA5, 208); free(b[i]); }
  return bad;
}

static void calloc_zero(void) {
  const ca_hooks_t* hooks = _ca_hooks;                 /* as in the allocator alone: the colour */
  _ca_hooks = NULL;                                    /* layer's pages carry bytes, so it memsets */
  long delay = _ca_options[CA_OPT_PURGE_DELAY];
  _ca_options[CA_OPT_PURGE_DELAY] = 100000;            /* purged only when the test says */
  uint8_t st;
  CHECK_EQ(calloc_round(3000, &st), 0);                /* fresh memory */
  CHECK(st & CA_ZERO_LIST);                            /* and the memset was skipped */
  CHECK_EQ(calloc_round(3000, &st), 0);                /* the same blocks, dirty */
  CHECK(!(st & CA_ZERO_LIST));
  _ca_segment_purge_expired(_ca_heap, true);           /* their spans purged */
  CHECK_EQ(calloc_round(3000, &st), 0);
  CHECK(st & CA_ZERO_LIST);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) { fprintf(stderr, "mlockall: %s: locked memory not tested\n", strerror(errno)); _exit(0); }
    CHECK_EQ(calloc_round(3000, &st), 0);
    _ca_segment_purge_expired(_ca_heap, true);         /* fails: the pages are locked */
    CHECK(!_ca_os_purges_zero());
    CHECK_EQ(calloc_round(3000, &st), 0);
    CHECK(!(st & CA_ZERO_LIST));
    _exit(check_done("test_purge (locked memory)"));
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  _ca_hooks = hooks;
  _ca_options[CA_OPT_PURGE_DELAY] = delay;
}

/* The segment cache hands a large object the cached segment whose resident pages cover it with
   the least to spare, not the newest: taken newest first, a 640 KiB object got a segment that had
   held 128 KiB and faulted in the rest, while one that had held 640 KiB waited (mstress). */
#define SEG_OF(p) ((uintptr_t)(p) >> 21)
static void cache_fit(void) {
  long delay = _ca_options[CA_OPT_PURGE_DELAY];
  _ca_options[CA_OPT_PURGE_DELAY] = 100000;            /* nothing purged meanwhile */
  for (int order = 0; order < 2; order++) {
    void* big = malloc(640 * 1024), *small = malloc(128 * 1024);
    memset(big, 1, 640 * 1024);
    memset(small, 1, 128 * 1024);
    uintptr_t sb = SEG_OF(big), ss = SEG_OF(small);
    if (order == 0) { free(big); free(small); } else { free(small); free(big); }   /* the other one newest */
    void* want = order == 0 ? malloc(640 * 1024) : malloc(128 * 1024);
    uintptr_t got = SEG_OF(want), expect = order == 0 ? sb : ss;
    if (got != expect) fprintf(stderr, "cache fit, %s: segment %#lx, expected %#lx\n", order ? "small" : "big", (unsigned long)got, (unsigned long)expect);
    CHECK(got == expect);
    free(want);
  }
  _ca_options[CA_OPT_PURGE_DELAY] = delay;
}

/* A thread's slots (segment.c): the 2 MiB segment it freed last comes back to it without the
   global cache; one left in an idle thread's slot is taken and purged by another thread's purge
   once its wait is over, not before, and by malloc_trim at once; an exiting thread leaves its
   slots to the cache.  Then threads churn large objects while another purges and trims. */
#define OBJ (1024 * 1024)
static size_t resident(const void* p, size_t n) {
  static unsigned char vec[OBJ / 4096 + 2];
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095;
  size_t pages = ((uintptr_t)p + n - a + 4095) / 4096, r = 0;
  CHECK(mincore((void*)a, pages * 4096, vec) == 0);
  for (size_t i = 0; i < pages; i++) r += vec[i] & 1;
  return r;
}
static int ready[2], go[2];                            /* owner -> main, main -> owner */
static void* slot_owner(void* arg) {
  void** out = arg;
  void* volatile small = malloc(64);                  /* a heap: a thread without one has no slots */
  free(small);
  volatile unsigned char* p = malloc(OBJ);           /* volatile: the writes before free stay */
  for (size_t i = 0; i < OBJ; i += 4096) p[i] = 7;
  free((void*)p);                                     /* into this thread's slot */
  out[0] = (void*)p;
  out[1] = _ca_heap;
  char c = 1;
  CHECK(write(ready[1], &c, 1) == 1);
  CHECK(read(go[0], &c, 1) == 1);                     /* idle until told to exit */
  return NULL;
}
/* An owner thread started, its slot filled (got: the object, its heap); then told to exit. */
static pthread_t owner_start(void* got[2]) {
  CHECK(pipe(ready) == 0 && pipe(go) == 0);
  pthread_t t;
  pthread_create(&t, NULL, slot_owner, got);
  char c;
  CHECK(read(ready[0], &c, 1) == 1);
  return t;
}
static void owner_stop(pthread_t t) {
  char c = 0;
  CHECK(write(go[1], &c, 1) == 1);
  pthread_join(t, NULL);
  for (int i = 0; i < 2; i++) { close(ready[i]); close(go[i]); }
}
static bool slotted(const ca_heap_t* h, const void* p) {
  for (int i = 0; i < CA_HEAP_SLOTS; i++)
    if ((uintptr_t)atomic_load(&h->slots[i]) >> 21 == ((uintptr_t)p - 1) >> 21) return true;
  return false;
}
static void* churn_large(void* arg) {
  uint64_t x = (uintptr_t)arg;
  for (int i = 0; i < 4000; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 64 * 1024 + (size_t)(x >> 33) % (900 * 1024);
    unsigned char* p = malloc(n);
    CHECK(p != NULL);
    p[0] = (unsigned char)i;
    p[n - 1] = (unsigned char)(i >> 3);
    if ((x >> 20) % 8 == 0) sched_yield();
    CHECK(p[0] == (unsigned char)i && p[n - 1] == (unsigned char)(i >> 3));   /* nobody else holds it */
    free(p);
  }
  return NULL;
}
static void slots(void) {
  long delay = _ca_options[CA_OPT_PURGE_DELAY];
  _ca_options[CA_OPT_PURGE_DELAY] = 10;
  /* the thread's own */
  malloc_trim(0);                                     /* its slots empty */
  uint64_t before = atomic_load(&_ca_stats.slot_reuse);
  unsigned char* p = malloc(OBJ);
  memset(p, 1, OBJ);
  free(p);
  CHECK(slotted(_ca_heap, p));
  unsigned char* q = malloc(OBJ);
  CHECK(SEG_OF(q - 1) == SEG_OF(p - 1) && atomic_load(&_ca_stats.slot_reuse) == before + 1);
  CHECK(!slotted(_ca_heap, p));
  free(q);
  /* an idle thread's, purged by this one: not before its wait, at once by malloc_trim */
  for (int trim = 0; trim < 2; trim++) {
    void* got[2];
    pthread_t t = owner_start(got);
    ca_heap_t* h = got[1];
    unsigned char* o = got[0];
    CHECK(slotted(h, o) && resident(o, OBJ) > OBJ / 4096 / 2);
    _ca_segment_cache_purge(false);                   /* its wait has not begun to run out */
    CHECK(slotted(h, o) && resident(o, OBJ) > OBJ / 4096 / 2);
    if (trim) malloc_trim(0);
    else {
      usleep((useconds_t)(10 * _ca_segment_cache_pace() + 20) * 1000);
      _ca_segment_cache_purge(false);
    }
    size_t left = resident(o, OBJ);
    if (slotted(h, o) || left > 1) fprintf(stderr, "slot of an idle thread (%s): %s, %zu pages resident\n", trim ? "trim" : "expired", slotted(h, o) ? "still there" : "taken", left);
    CHECK(!slotted(h, o) && left <= 1);               /* the header page may share the object's first */
    owner_stop(t);
  }
  /* an exiting thread's go to the cache: the next request takes it from there */
  {
    malloc_trim(0);                                   /* this thread's slots empty */
    void* got[2];
    pthread_t t = owner_start(got);
    CHECK(slotted(got[1], got[0]));
    owner_stop(t);
    CHECK(!slotted(got[1], got[0]));
    void* again = malloc(OBJ);
    CHECK(SEG_OF((char*)again - 1) == SEG_OF((char*)got[0] - 1));
    free(again);
  }
  /* churn against purges and trims: a segment is never handed to two threads */
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn_large, (void*)(uintptr_t)(i + 1));
  for (int i = 0; i < 2000; i++) {
    if (i % 10 == 0) malloc_trim(0);
    else _ca_segment_cache_purge(false);
    sched_yield();
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  _ca_options[CA_OPT_PURGE_DELAY] = delay;
}

static int cache_pace(void) {
  static char json[65536];
  chromalloc_stats_json(json, sizeof json);
  const char* p = strstr(json, "\"cache_purge_pace\":");
  return p ? atoi(p + strlen("\"cache_purge_pace\":")) : -1;
}

/* A thread's heap, reused by the next thread, keeps its pace: a program whose threads live a few
   milliseconds each (larson) must not start every one at the base wait. */
static ca_heap_t* paced_heap;
static void* pace_up(void* arg) {
  void* volatile p = malloc(64);                      /* this thread's heap exists (volatile: */
  free(p);                                            /* the pair is not optimised away) */
  paced_heap = _ca_heap;
  _ca_pacer_reused(&_ca_heap->pacer, _ca_clock_ms(), _ca_clock_ms());   /* two refaults */
  _ca_pacer_reused(&_ca_heap->pacer, _ca_clock_ms(), _ca_clock_ms());
  return arg;
}
static void* pace_read(void* arg) {
  void* volatile p = malloc(64);
  free(p);
  *(uint32_t*)arg = _ca_heap == paced_heap ? _ca_pacer_mult(&_ca_heap->pacer) : 0;
  return NULL;
}
static void heap_keeps_pace(void) {
  uint32_t mult = 0;
  in_turn(pace_up, pace_read, &mult);
  fprintf(stderr, "a reused heap's pace: %u (expected 4; 0: another heap)\n", mult);
  CHECK(paced_heap != &_ca_heap_empty && mult == 4);
}

int main(void) {
  require_chromalloc("test_purge");
  free(malloc(1));                                    /* options read */
  scripted();
  cache_fit();                                        /* first: its segments fresh, no history */
  _ca_options[CA_OPT_PURGE_DELAY] = 100000;           /* nothing is purged while it runs */
  pthread_t t;
  pthread_create(&t, NULL, newest_span, NULL);
  pthread_join(t, NULL);
  span_served();
  _ca_options[CA_OPT_PURGE_DELAY] = 10;
  heap_keeps_pace();
  zero_after_shrink(false);
  zero_after_shrink(true);
  calloc_zero();
  /* through the cache: each free is purged by malloc_trim, and the next malloc takes it back at
     once (after the first, which finds the last calloc's segment warm): two refaults */
  _ca_options[CA_OPT_PURGE_DELAY] = 1000;            /* refaults within 4 s, calm after 32 s: no luck */
  int before = cache_pace();
  for (int i = 0; i < 3; i++) {
    void* volatile p = malloc(300 * 1024);           /* volatile: the pair is not optimised away */
    memset(p, 1, 300 * 1024);
    free(p);
    malloc_trim(0);
  }
  int after = cache_pace();
  if (before < 1 || after != before * 4) fprintf(stderr, "segment cache pace %d before two refaults, %d after\n", before, after);
  CHECK(before >= 1 && after == before * 4);
  /* the cache's edge settings: no cache, purging at once, both (a segment freed is then both the
     one to purge and the one to evict) */
  long edges[][2] = { { 0, 10 }, { 128, 0 }, { 0, 0 } };
  for (int e = 0; e < 3; e++) {
    _ca_options[CA_OPT_SEGMENT_CACHE] = edges[e][0];
    _ca_options[CA_OPT_PURGE_DELAY] = edges[e][1];
    zero_after_shrink(false);
    static void* small[40000];
    for (int i = 0; i < 40000; i++) small[i] = malloc(100);   /* two segments of spans, freed whole */
    for (int i = 0; i < 40000; i++) free(small[i]);
  }
  _ca_options[CA_OPT_SEGMENT_CACHE] = 128;
  _ca_options[CA_OPT_PURGE_DELAY] = 10;
  slots();                                            /* last: its churn paces the cache up */
  return check_done("test_purge");
}
