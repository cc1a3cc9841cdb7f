/* Chunks below a page (internal interfaces: built static only):
   - the core samples small allocations by bytes and asks the policy (hooks.h `sample`), about
     one call per `_ca_sample_period` bytes, for blocks served from lists and one by one;
   - a policy's page of its own (_ca_malloc_page) is page-aligned, a page long, and its free
     reaches the policy;
   - a routed size class (_ca_route_class) is served from the thread's heap of that flavour:
     malloc, calloc and realloc, in any thread, freed by any thread, and back when unrouted;
     the flavour heap's kept spans hand out neighbouring blocks one after another, frame after
     frame, and a span the hook could not fill serves only what the filled ones cannot;
   - the monitor judges a group of sampled small chunks by their joint footprint: a context
     that writes 40 of them and reads them back in order is a polluter, one that reuses each
     soon is not, and the first L2's worth of members only mark footprint;
   - allocations inside pthread_getattr_np, which a stack scan calls, are never sampled;
   - NightWatch end to end (every sample monitored): a context streaming 3 L2s of 2 KiB
     messages per pass is judged a polluter and its size class routed, while the class of a
     hot table allocated next to it is not.
   - a segment names its owner's thread for free(): the allocating thread, none once it exits,
     and the thread that adopts it, whose frees of its blocks are then local (owner's list);
   The test runs itself again with CHROMALLOC_OPTIONS=nightwatch=0 (the first parts install
   their own policy and drive the monitor directly) and with nightwatch_monitor=1 (the last). */
#include "check.h"
#include <malloc.h>
#include "../../src/core/alloc.h"
#include "../../src/core/hooks.h"
#include "../../src/monitor/monitor.h"
#include <pthread.h>
#include <time.h>

static void sleep_ms(int ms) { struct timespec ts = { 0, ms * 1000000L }; nanosleep(&ts, NULL); }
static double now_s(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return (double)ts.tv_sec + ts.tv_nsec * 1e-9; }

/* ---- sampling and pages of their own ------------------------------------------------------ */
/* volatile: the compiler takes malloc for a builtin that touches none of the program's globals */
static volatile long samples, frees_seen;
static void* volatile page_given;
static volatile bool give_page, defer;
static void* on_place(size_t n, bool zero, const void* frame, const void* ret) { return NULL; }
static void on_chunk(ca_chunk_event_t ev, void* p, size_t size) { if (ev == CA_CHUNK_FREE && p == page_given) frees_seen++; }
static void* on_sample(size_t n, const void* frame, const void* ret) {
  samples++;
  CHECK(n < 4096 && frame != NULL);
  if (defer) _ca_sample_defer(4);
  if (!give_page) return NULL;
  give_page = false;
  return page_given = _ca_malloc_page();
}
static const ca_policy_t policy = { on_place, on_chunk, on_sample };

static void test_sampling(void) {
  _ca_policy_install(&policy);
  _ca_sample_period = 65536;
  static void* p[40000];
  samples = 0;
  for (int i = 0; i < 40000; i++) p[i] = malloc(100);        /* from free lists */
  for (int i = 0; i < 40000; i++) free(p[i]);
  long listed = samples;
  size_t bytes = 40000 * _ca_class_size[_ca_size_class(100)];
  CHECK(listed >= (long)(bytes / 65536 / 2) && listed <= (long)(bytes / 65536 * 2));
  samples = 0;
  for (int i = 0; i < 2000; i++) p[i] = malloc(3000);         /* one by one (generic path) */
  for (int i = 0; i < 2000; i++) free(p[i]);
  bytes = 2000 * _ca_class_size[_ca_size_class(3000)];
  CHECK(samples >= (long)(bytes / 65536 / 2) && samples <= (long)(bytes / 65536 * 2));
  fprintf(stderr, "sampling: %ld and %ld samples for %zu KiB of 100-byte and 3000-byte blocks\n",
          listed, samples, (size_t)(40000 * 100 + 2000 * 3000) >> 10);
  /* each sample defers the next by 4 periods: about a quarter as many */
  defer = true;
  samples = 0;
  for (int i = 0; i < 40000; i++) p[i] = malloc(100);
  for (int i = 0; i < 40000; i++) free(p[i]);
  defer = false;
  fprintf(stderr, "sampling: %ld samples deferred 4 periods each, %ld not\n", samples, listed);
  CHECK(samples * 2 <= listed && samples * 8 >= listed);
  /* the policy's own page */
  give_page = true;
  char* q = NULL;
  for (int i = 0; i < 1000 && give_page; i++) { void* x = malloc(2000); if (!give_page && x == page_given) q = x; else free(x); }
  CHECK(q != NULL);
  if (q != NULL) {
    CHECK(((uintptr_t)q & 4095) == 0 && malloc_usable_size(q) >= 4096);
    memset(q, 7, 4096);
    free(q);
    CHECK_EQ(frees_seen, 1);
  }
  _ca_sample_period = 0;
  samples = 0;
  for (int i = 0; i < 2000; i++) free(malloc(3000));
  CHECK_EQ(samples, 0);
  _ca_policy_install(NULL);
}

/* ---- routing ------------------------------------------------------------------------------ */
static uint8_t flavour_of(void* p) {
  ca_heap_t* h = atomic_load_explicit(&_ca_segment_of(p)->owner, ca_relaxed);
  return h != NULL ? h->flavour : 0xff;
}

#define ROUTED 2000
static void* alloc_routed(void* arg) {
  void** out = arg;
  uintptr_t wrong = 0;
  for (int i = 0; i < ROUTED; i++) { out[i] = malloc(200); memset(out[i], i, 200); wrong += flavour_of(out[i]) != 3; }
  return (void*)wrong;
}

static void test_routing(void) {
  enum { F = 3 };
  static void* p[ROUTED];
  uint32_t c = _ca_size_class(200);
  for (int i = 0; i < ROUTED; i++) p[i] = malloc(200);        /* the class's span is warm */
  for (int i = 0; i < ROUTED; i++) free(p[i]);
  _ca_route_class(c, F);
  CHECK_EQ(_ca_class_route(c), F);
  for (int i = 0; i < ROUTED; i++) p[i] = malloc(200);        /* the heap sees the route at its next generic call */
  CHECK_EQ(flavour_of(p[ROUTED - 1]), F);
  void* other = malloc(64);
  CHECK_EQ(flavour_of(other), 0);
  void* z = calloc(1, 200);
  CHECK(z != NULL && flavour_of(z) == F && ((char*)z)[199] == 0);
  void* r = realloc(other, 200);
  CHECK(r != NULL && flavour_of(r) == F);
  free(z); free(r);
  for (int i = 0; i < ROUTED; i++) free(p[i]);
  CHECK(_ca_heap->flavours[F] != NULL && _ca_heap->flavours[F]->queues[c].first != NULL);   /* empty spans kept */
  chromalloc_collect();
  CHECK(_ca_heap->flavours[F]->queues[c].first == NULL);                                      /* and given back */
  /* another thread's routed blocks, freed here */
  pthread_t t;
  void* wrong = (void*)1;
  pthread_create(&t, NULL, alloc_routed, p);
  pthread_join(t, &wrong);
  CHECK(wrong == NULL);
  int bad = 0;
  for (int i = 0; i < ROUTED; i++) { bad += ((unsigned char*)p[i])[199] != (unsigned char)i; free(p[i]); }   /* its heap is gone */
  CHECK_EQ(bad, 0);
  _ca_route_class(c, 0);
  void* back = malloc(200);
  CHECK_EQ(flavour_of(back), 0);
  free(back);
}

/* A flavour heap keeps its empty spans; each time one empties it starts again in address order,
   so that a routed class used frame after frame, each frame ending in the middle of a span's
   list, still hands out neighbouring blocks one after another (over 3000 frames of pv
   messages, 52% of them were before; here, 1000 frames of 4.5 spans left 78%). */
static void test_kept_order(void) {
  enum { F = 4, FRAMES = 1000 };
  static void* p[256];
  size_t n = 2048;
  uint32_t c = _ca_size_class(n), bs = _ca_class_size[c];
  _ca_route_class(c, F);
  free(malloc(n));                                            /* the heap sees the route */
  void* q = malloc(n);
  uint32_t per = _ca_span_of(_ca_segment_of(q), q)->reserved;
  free(q);
  size_t m = per * 9 / 2;                                     /* each frame ends in a span's middle */
  CHECK(m <= 256);
  if (m > 256) m = 256;
  size_t adjacent = 0, pairs = 0;
  for (int f = 0; f < FRAMES; f++) {
    for (size_t i = 0; i < m; i++) { p[i] = malloc(n); memset(p[i], f, n); }
    if (f == FRAMES - 1)
      for (size_t i = 1; i < m; i++, pairs++) {
        intptr_t d = (intptr_t)((char*)p[i] - (char*)p[i - 1]);
        adjacent += d == (intptr_t)bs || d == -(intptr_t)bs;
      }
    CHECK_EQ(flavour_of(p[0]), F);
    for (size_t i = 0; i < m; i++) free(p[i]);
    if (f % 7 == 3) free(malloc(n));                          /* and now and then one more */
  }
  CHECK(adjacent * 10 >= pairs * 9);
  if (adjacent * 10 < pairs * 9) fprintf(stderr, "kept spans: %zu of %zu consecutive blocks neighbours\n", adjacent, pairs);
  _ca_route_class(c, 0);
  chromalloc_collect();
}

/* A flavour heap's span that the hook could not fill (its pool was short) is ordinary memory:
   the heap takes blocks from it only when its filled spans have none, and gives it back, empty,
   once the hook could fill its replacement.  (Taken in queue order, pv packets' one ordinary
   span served a third of every frame's packets, through every colour, for 1-2 s or the run.) */
static volatile bool fill_ok;
static bool test_fill(void* base, size_t bytes, uint32_t flavour) { (void)base; (void)bytes; return flavour != 0 && fill_ok; }
static bool test_ready(size_t bytes, uint32_t flavour) { (void)bytes; return flavour != 0 && fill_ok; }
static const ca_hooks_t fill_hooks = { test_fill, NULL, test_ready };

static uint8_t span_flavour(void* p) { return _ca_span_of(_ca_segment_of(p), p)->flavour; }

static void test_ordinary_last(void) {
  enum { F = 5 };
  static void* p[64];
  size_t n = 32768;
  uint32_t c = _ca_size_class(n);
  const ca_hooks_t* old = _ca_hooks;
  _ca_hooks_install(&fill_hooks);
  fill_ok = true;
  void* q = _ca_malloc_flavour(n, F);
  CHECK(q != NULL && span_flavour(q) == F);
  size_t per = _ca_span_of(_ca_segment_of(q), q)->reserved;
  CHECK(per >= 2 && per <= 32);
  if (per < 2 || per > 32) per = 2;
  p[0] = q;
  for (size_t i = 1; i < per; i++) p[i] = _ca_malloc_flavour(n, F);         /* the filled span, full */
  fill_ok = false;
  for (size_t i = per; i < 2 * per; i++) p[i] = _ca_malloc_flavour(n, F);   /* a second span: the pool is short */
  CHECK_EQ(span_flavour(p[per]), 0);
  for (size_t i = 0; i < 2 * per; i++) free(p[i]);                          /* both kept (the filled one was full) */
  ca_heap_t* fh = _ca_heap->flavours[F];
  CHECK(fh != NULL);
  if (fh == NULL) { _ca_hooks_install(old); return; }
  /* frames of fewer blocks than a span: all from the filled span */
  size_t wrong = 0;
  for (int f = 0; f < 20; f++) {
    for (size_t i = 0; i < per - 1; i++) { p[i] = _ca_malloc_flavour(n, F); wrong += span_flavour(p[i]) != F; }
    for (size_t i = 0; i < per - 1; i++) free(p[i]);
  }
  CHECK_EQ(wrong, 0);
  /* more than the filled span holds: the ordinary one serves the rest, and no third span is made */
  size_t ordinary = 0;
  for (size_t i = 0; i < per + 1; i++) { p[i] = _ca_malloc_flavour(n, F); ordinary += span_flavour(p[i]) == 0; }
  CHECK_EQ(ordinary, 1);
  for (size_t i = 0; i < per + 1; i++) free(p[i]);
  /* the pool could fill a span now: the empty ordinary one goes back at the next look */
  fill_ok = true;
  for (size_t i = 0; i < per; i++) p[i] = _ca_malloc_flavour(n, F);
  for (size_t i = 0; i < per + 1; i++) {
    if (i == per) p[i] = _ca_malloc_flavour(n, F);
    CHECK_EQ(span_flavour(p[i]), F);
  }
  size_t spans = 0, plain = 0;
  for (ca_span_t* s = fh->queues[c].first; s != NULL; s = s->next) { spans++; plain += s->flavour == 0; }
  CHECK_EQ(plain, 0);
  for (size_t i = 0; i < per + 1; i++) free(p[i]);
  _ca_hooks_install(old);
  chromalloc_collect();
  CHECK(spans >= 1);
}

/* ---- the monitor's groups ----------------------------------------------------------------- */
static _Atomic(int) got[6];
static ca_monitor_result_t result[6];
static void on_verdict(void* chunk, size_t n, uint64_t cookie, const ca_monitor_result_t* r) {
  if (chunk != NULL || cookie < 1 || cookie > 5) return;
  result[cookie] = *r;
  atomic_store(&got[cookie], 1);
}

static size_t l2_bytes(void) {
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) return _ca_machine.levels[i].size;
  return 1 << 20;
}

static bool wait_verdict(int cookie) {
  for (int i = 0; i < 400 && !atomic_load(&got[cookie]); i++) sleep_ms(5);
  return atomic_load(&got[cookie]);
}

/* n members of group `cookie` written, then those from `warm` on each read twice in a row,
   soon after it was written (pairs of reuse); the members stay live */
static long reuse(volatile char** m, int n, uint64_t cookie, size_t stride, int warm) {
  long sum = 0;
  for (int i = 0; i < n; i++) {
    m[i] = _ca_malloc_page();
    CHECK(m[i] != NULL && _ca_monitor_start_member((void*)m[i], cookie, stride, true));
  }
  for (int i = 0; i < n; i++) memset((void*)m[i], i, 2048);
  sleep_ms(2);
  for (int i = warm; i < n; i++) {
    sum += m[i][5]; sleep_ms(1);
    sum += m[i][6]; sleep_ms(1);
  }
  return sum;
}

#define MEMBERS 40
static void test_groups(void) {
  _ca_monitor_init(on_verdict);
  size_t stride = l2_bytes() / 16;                  /* 16 members: the L2 */
  static volatile char* m[MEMBERS];
  /* streamed: written in order, then read in order */
  for (int i = 0; i < MEMBERS; i++) {
    m[i] = _ca_malloc_page();
    CHECK(m[i] != NULL && _ca_monitor_start_member((void*)m[i], 1, stride, true));
  }
  for (int i = 0; i < MEMBERS; i++) memset((void*)m[i], i, 2048);
  sleep_ms(20);                                     /* re-armed */
  long sum = 0;
  for (int i = 0; i < MEMBERS; i++) sum += m[i][100];
  CHECK(wait_verdict(1));
  CHECK(result[1].judged && result[1].polluter);
  CHECK(result[1].misses >= 4 && result[1].misses >= 4 * result[1].hits);   /* a burst cut by preemption is a hit */
  for (int i = 0; i < MEMBERS; i++) free((void*)m[i]);
  /* reused: each warm member read twice in a row, soon after it was written (an armed page
     expires after 50 ms; on a loaded machine the group may end with too few pairs: again) */
  enum { REUSED = 24 };
  for (int attempt = 0; attempt < 4 && !atomic_load(&got[2]); attempt++) {
    sum += reuse(m, REUSED, 2, stride, 16);
    if (attempt == 0) CHECK(!_ca_monitor_start_member((void*)m[0] + 4096, 3, stride, false));   /* no group 3 to join */
    wait_verdict(2);
    for (int i = 0; i < REUSED; i++) free((void*)m[i]);
    if (!result[2].judged) atomic_store(&got[2], 0);
  }
  CHECK(atomic_load(&got[2]) && result[2].judged && !result[2].polluter);
  CHECK(result[2].hits >= 4 && result[2].misses == 0);
  /* recycled: each member written once and freed before the next joins (a buffer allocated
     again and again, in the same memory when it is not sampled): 2.5 L2s in all, but never
     more than one live, so nothing is an unused miss */
  for (int i = 0; i < MEMBERS; i++) {
    volatile char* b = _ca_malloc_page();
    CHECK(b != NULL && _ca_monitor_start_member((void*)b, 4, stride, true));
    memset((void*)b, i, 2048);
    sleep_ms(1);
    _ca_monitor_stop((void*)b);                     /* as NightWatch's free hook does */
    free((void*)b);
  }
  (void)(wait_verdict(4) || wait_verdict(4));              /* gone members count for GONE_MS (1 s) */
  CHECK(!result[4].polluter && result[4].misses == 0);
  /* small members: each stands for L2 / 64 (16 KiB chunks, every one a member), so the L2's
     worth is 64 members before any is warm (a group of 64 in all judged nothing); the cold ones
     written and freed in turn, then warm ones each read twice, soon after it was written */
  for (int attempt = 0; attempt < 4 && !atomic_load(&got[5]); attempt++) {
    for (int i = 0; i < 64; i++) {
      volatile char* b = _ca_malloc_page();
      CHECK(b != NULL && _ca_monitor_start_member((void*)b, 5, l2_bytes() / 64, true));
      memset((void*)b, i, 2048);
      _ca_monitor_stop((void*)b);
      free((void*)b);
    }
    sum += reuse(m, REUSED, 5, l2_bytes() / 64, 0);
    wait_verdict(5);
    for (int i = 0; i < REUSED; i++) { _ca_monitor_stop((void*)m[i]); free((void*)m[i]); }
    (void)(result[5].judged || wait_verdict(5) || wait_verdict(5));
    if (!result[5].judged) atomic_store(&got[5], 0);
  }
  CHECK(atomic_load(&got[5]) && result[5].judged && !result[5].polluter);
  CHECK(result[5].hits >= 4 && result[5].misses == 0);
  /* members of any size: 12 chunks of L2 / 4 (their first pages) streamed, one L2 of them
     warm: polluter */
  static char* big[12];
  for (int i = 0; i < 12; i++) {
    big[i] = _ca_large_alloc(l2_bytes() / 4, 4096, false, 0);   /* as NightWatch places a member */
    CHECK(big[i] != NULL && ((uintptr_t)big[i] & 4095) == 0 && _ca_monitor_start_member(big[i], 3, l2_bytes() / 4, true));
  }
  for (int i = 0; i < 12; i++) memset(big[i], i, l2_bytes() / 4);
  sleep_ms(20);
  for (int i = 0; i < 12; i++) sum += big[i][100];
  CHECK(wait_verdict(3));
  CHECK(result[3].judged && result[3].polluter);
  for (int i = 0; i < 12; i++) free(big[i]);
  fprintf(stderr, "groups: streamed %u hits %u misses, reused %u hits %u misses, recycled %u misses (judged %d), "
          "16 KiB members %u hits %u misses, large members %u hits %u misses (sum %ld)\n", result[1].hits,
          result[1].misses, result[2].hits, result[2].misses, result[4].misses, result[4].judged, result[5].hits,
          result[5].misses, result[3].hits, result[3].misses, sum);
}

/* ---- NightWatch end to end ---------------------------------------------------------------- */
__attribute__((noinline)) static char* msg_alloc(void) { char* p = malloc(2048); __asm__ volatile("" : : "r"(p) : "memory"); return p; }
__attribute__((noinline)) static long* table_alloc(void) { long* p = malloc(48); __asm__ volatile("" : : "r"(p) : "memory"); return p; }

/* glibc's pthread_getattr_np allocates while it holds the thread's lock, and a stack scan calls
   it: a sampled allocation inside it hung (java at start-up).  SIGALRM ends a hang. */
static void* getattr_loop(void* arg) {
  for (int i = 0; i < 20000; i++) {
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) pthread_attr_destroy(&a);
  }
  return arg;
}
static void test_getattr(void) {
  alarm(60);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, getattr_loop, NULL) == 0);
  pthread_join(t, NULL);
  getattr_loop(NULL);                               /* the main thread's reads /proc/self/maps */
  alarm(0);
}

static void test_nightwatch(void) {
  size_t per_pass = 3 * l2_bytes() / 2048;
  char** msg = malloc(per_pass * sizeof *msg);
  enum { TABLE = 4000 };
  static long* table[TABLE];
  for (int i = 0; i < TABLE; i++) { table[i] = table_alloc(); *table[i] = i; }
  uint32_t cm = _ca_size_class(2048), ct = _ca_size_class(48);
  static volatile long sum;          /* the passes are not optimised away */
  /* passes until the class is routed, and one more, whose messages must come from the
     restrictive heap (from this same call path: another one would be another context, and
     the size table would route the class back) */
  int pass = 0, check_pass = -1;
  size_t restrictive = 0;
  uint8_t route = 0;
  /* a group's verdict comes 100 ms after its last member at the soonest: passes for 30 s */
  for (double end = now_s() + 30; now_s() < end && check_pass < 0; pass++) {
    if ((route = _ca_class_route(cm)) != 0) check_pass = pass;
    for (size_t i = 0; i < per_pass; i++) { msg[i] = msg_alloc(); memset(msg[i], (int)i, 2048); __asm__ volatile("" : : "r"(msg[i]) : "memory"); }
    for (size_t i = 0; i < per_pass; i++) sum += msg[i][(i * 64) & 2047];
    if (check_pass >= 0)
      for (size_t i = 0; i < per_pass; i++) restrictive += atomic_load_explicit(&_ca_segment_of(msg[i])->owner, ca_relaxed)->flavour == route;
    for (size_t i = 0; i < per_pass; i++) free(msg[i]);
    for (int i = 0; i < TABLE; i++) sum += *table[i];
  }
  if (_ca_policy == NULL) {
    fprintf(stderr, "test_small: NightWatch turned itself off: routing not checked\n");
    CHECK(!machine_described());
    return;
  }
  fprintf(stderr, "nightwatch: class of 2048 B routed after %d passes of %zu messages, %zu of the next pass's from the "
          "restrictive heap; %lld members, %lld group verdicts\n", check_pass, per_pass, restrictive,
          stats_value("nightwatch", "small_members"), stats_value("monitor", "group_verdicts"));
  CHECK(check_pass >= 0);
  if (check_pass < 0 && chromalloc_stats_json != NULL) {
    static char buf[1 << 16];
    chromalloc_stats_json(buf, sizeof buf);
    char* nw = strstr(buf, "\"nightwatch\"");
    fprintf(stderr, "test_small: %.3000s\n", nw ? nw : buf);
  }
  CHECK_EQ(_ca_class_route(ct), 0);
  CHECK(restrictive >= per_pass * 3 / 4);       /* but for sampled chunks, on pages of their own */
  for (int i = 0; i < TABLE; i++) free(table[i]);
  free(msg);
}

/* Chunks of a page or more below the L2 (every one monitored, as group members): a context
   whose 32 KiB packets, 3 L2s of them per pass, are written and then read is a polluter, and
   its new packets come from restrictive memory; a context that allocates a 24 KiB buffer, uses
   it and frees it before the next (as much in all) stays open. */
__attribute__((noinline)) static char* packet_alloc(void) { char* p = malloc(32768); __asm__ volatile("" : : "r"(p) : "memory"); return p; }
__attribute__((noinline)) static char* scratch_alloc(void) { char* p = malloc(24576); __asm__ volatile("" : : "r"(p) : "memory"); return p; }

static void test_medium(void) {
  size_t per_pass = 3 * l2_bytes() / 32768;
  char** pkt = malloc(per_pass * sizeof *pkt);
  static volatile long sum;
  size_t restrictive = 0, scratch_restrictive = 0;
  int pass = 0, check_pass = -1;
  for (double end = now_s() + 30; now_s() < end && check_pass < 0; pass++) {
    size_t r = 0;
    for (size_t i = 0; i < per_pass; i++) { pkt[i] = packet_alloc(); memset(pkt[i], (int)i, 32768); r += _ca_segment_of(pkt[i])->flavour != 0; }
    for (size_t i = 0; i < per_pass; i++) for (size_t j = 0; j < 32768; j += 64) sum += pkt[i][j];
    for (size_t i = 0; i < per_pass; i++) free(pkt[i]);
    for (size_t i = 0; i < per_pass * 4 / 3; i++) {
      char* b = scratch_alloc();
      memset(b, (int)i, 24576);
      sum += b[i & 4095];
      scratch_restrictive += _ca_segment_of(b)->flavour != 0;
      free(b);
    }
    if (r == per_pass) { check_pass = pass; restrictive = r; }
  }
  if (_ca_policy == NULL) {
    fprintf(stderr, "test_small: NightWatch turned itself off: medium chunks not checked\n");
    CHECK(!machine_described());
    free(pkt);
    return;
  }
  fprintf(stderr, "nightwatch: packets restrictive from pass %d (%zu of %zu), scratch buffers restrictive %zu; "
          "%lld medium members\n", check_pass, restrictive, per_pass, scratch_restrictive,
          stats_value("nightwatch", "medium_members"));
  CHECK(check_pass >= 0);
  CHECK_EQ(scratch_restrictive, 0);
  /* every chunk monitored: each packet was named one by one, routed class or not */
  CHECK(stats_value("nightwatch", "chunks") >= (long long)(pass * per_pass));
  free(pkt);
}

/* Chunks of a page or more in span classes, with the policy as it runs by default (not every
   chunk monitored): sampled as small chunks are.  A class that only a polluter's 32 KiB packets
   use is served from restrictive spans and never named one by one; a 16 KiB class that a
   polluter shares with buffers that stay open is named one by one once the polluter is known,
   its chunks restrictive and the others' not. */
__attribute__((noinline)) static char* shared_polluter(void) { char* p = malloc(16384); __asm__ volatile("" : : "r"(p) : "memory"); return p; }
__attribute__((noinline)) static char* shared_open(void) { char* p = malloc(16384); __asm__ volatile("" : : "r"(p) : "memory"); return p; }

static void test_medium_sampled(void) {
  size_t per_pass = 3 * l2_bytes() / 32768, shared = 3 * l2_bytes() / 16384;
  char** pkt = malloc(shared * sizeof *pkt);
  static volatile long sum;
  size_t open_restrictive = 0, pkt_r = 0, shared_r = 0;
  bool done = false;
  uint32_t pk = _ca_size_class(32768), sh = _ca_size_class(16384);
  CHECK(pk != sh && !_ca_class_placed(pk) && !_ca_class_placed(sh));   /* sampled from the start */
  for (double end = now_s() + 60; now_s() < end && !done;) {
    pkt_r = shared_r = 0;
    for (size_t i = 0; i < per_pass; i++) { pkt[i] = packet_alloc(); memset(pkt[i], (int)i, 32768); pkt_r += _ca_segment_of(pkt[i])->flavour != 0; }
    for (size_t i = 0; i < per_pass; i++) for (size_t j = 0; j < 32768; j += 64) sum += pkt[i][j];
    for (size_t i = 0; i < per_pass; i++) free(pkt[i]);
    for (size_t i = 0; i < shared; i++) { pkt[i] = shared_polluter(); memset(pkt[i], (int)i, 16384); shared_r += _ca_segment_of(pkt[i])->flavour != 0; }
    for (size_t i = 0; i < shared; i++) for (size_t j = 0; j < 16384; j += 64) sum += pkt[i][j];
    for (size_t i = 0; i < shared; i++) free(pkt[i]);
    for (size_t i = 0; i < shared / 2; i++) {
      char* b = shared_open();
      memset(b, (int)i, 16384);
      sum += b[i & 4095];
      open_restrictive += _ca_segment_of(b)->flavour != 0;
      free(b);
    }
    done = pkt_r == per_pass && shared_r == shared && _ca_class_route(pk) != 0;
  }
  if (_ca_policy == NULL) {
    fprintf(stderr, "test_small: NightWatch turned itself off: sampled medium chunks not checked\n");
    CHECK(!machine_described());
    free(pkt);
    return;
  }
  fprintf(stderr, "nightwatch, sampled: packets restrictive %zu of %zu, shared polluter %zu of %zu, open buffers "
          "restrictive %zu; class of 32 KiB routed %d, named one by one %d; of 16 KiB routed %d, one by one %d\n",
          pkt_r, per_pass, shared_r, shared, open_restrictive, _ca_class_route(pk) != 0, _ca_class_placed(pk),
          _ca_class_route(sh) != 0, _ca_class_placed(sh));
  CHECK(done);
  CHECK(_ca_class_route(pk) != 0);
  CHECK(_ca_class_route(sh) == 0 && _ca_class_placed(sh));
  CHECK_EQ(open_restrictive, 0);
  /* the timeline: the 16 KiB class named one by one for its restrictive context, the 32 KiB
     class never (it may be, while a group of the packets' context is on: not logged) */
  static char json[1 << 18];
  chromalloc_stats_json(json, sizeof json);
  char shared_ev[96], pk_ev[96];
  snprintf(shared_ev, sizeof shared_ev, "\"event\":\"place\",\"size\":%u,\"shared\":true", (unsigned)_ca_class_size[sh]);
  snprintf(pk_ev, sizeof pk_ev, "\"event\":\"place\",\"size\":%u,", (unsigned)_ca_class_size[pk]);
  CHECK(strstr(json, shared_ev) != NULL);
  CHECK(strstr(json, pk_ev) == NULL);
  free(pkt);
}

/* NightWatch gives restrictive memory only once the colour layer is ready (before, it would be
   ordinary memory anyway): wait for it, as a long-running program would have */
int chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den);
int chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms);
static bool colours_ready(void) {
  int set = chromalloc_colours(0, 0, 1, 8);
  if (set > 0 && chromalloc_colours_prepare(set, 4 << 20, 90000) == 0) return true;
  fprintf(stderr, "test_small: the colour layer is not ready (%s): NightWatch's routing and placement not checked\n",
          set > 0 ? strerror(errno) : "no colour set");
  CHECK(!machine_described());
  return false;
}

/* after a phase that passed (status 0), the next one: this program again with other options */
static int next_phase(int status, char* self, const char* options, char* phase) {
  if (status != 0) return status;
  setenv("CHROMALLOC_OPTIONS", options, 1);
  char* args[] = { self, phase, NULL };
  execv("/proc/self/exe", args);
  perror("execv");
  return 1;
}

/* ---- the owner's thread -------------------------------------------------------------------- */

enum { OWNED = 64 };
static void* owned[OWNED];
static void* alloc_owned(void* arg) {
  for (int i = 0; i < OWNED; i++) owned[i] = malloc(176);
  CHECK(atomic_load(&_ca_segment_of(owned[0])->thread) == _ca_heap);
  return arg;
}
static void* adopt_owned(void* arg) {
  void* volatile p = malloc(176);                     /* a new heap adopts what exited threads left */
  free(p);
  ca_segment_t* seg = _ca_segment_of(owned[0]);
  CHECK(atomic_load(&seg->owner) == _ca_heap && atomic_load(&seg->thread) == _ca_heap);
  free(owned[0]);
  CHECK(_ca_span_of(seg, owned[0])->local_free == owned[0]);   /* a local free, not a remote one */
  for (int i = 1; i < OWNED; i++) free(owned[i]);
  return arg;
}
static void test_owner(void) {
  pthread_t t;
  pthread_create(&t, NULL, alloc_owned, NULL);
  pthread_join(t, NULL);
  CHECK(atomic_load(&_ca_segment_of(owned[0])->thread) == NULL);   /* abandoned */
  pthread_create(&t, NULL, adopt_owned, NULL);
  pthread_join(t, NULL);
}

int main(int argc, char** argv) {
  const char* opts = getenv("CHROMALLOC_OPTIONS");
  if (argc < 2) {
    setenv("CHROMALLOC_OPTIONS", "nightwatch=0", 1);
    char* args[] = { argv[0], "core", NULL };
    execv("/proc/self/exe", args);
    perror("execv");
    return 1;
  }
  (void)opts;
  free(malloc(1));
  if (strcmp(argv[1], "core") == 0) {
    test_owner();
    test_sampling();
    test_routing();
    test_kept_order();
    test_ordinary_last();
    test_groups();
    return next_phase(check_done("test_small (core, monitor)"), argv[0], "nightwatch=1,nightwatch_monitor=1", "nightwatch");
  }
  if (strcmp(argv[1], "sampled") == 0) {
    if (colours_ready()) test_medium_sampled();
    return check_done("test_small (nightwatch, sampled)");
  }
  test_getattr();
  if (colours_ready()) {
    test_nightwatch();
    malloc_trim(0);          /* the messages' restrictive spans, kept by the flavour heap, go back to the pool */
    test_medium();
  }
  return next_phase(check_done("test_small (nightwatch)"), argv[0], "nightwatch=1", "sampled");
}
