/* ROCS (internal interfaces: built static only; run with rocs=1 on a described machine, whose
   L2 the colour layer simulates, so the colours are exact and no outcome is this host's timing's).

   1. The pieces, scripted: a page's profile and its decay, the stack's key (memory at least half
      the time; the L3's reuse only with rocs_l3), the search over known curves (it finds the
      best k; a gain below the margin keeps k = 0), a phase change only when it lasts.
   2. The mechanism (argument `gain`, `loss`, `fixed`, `l3` or `l3small`): one 4.5 MiB block, its first 4 MiB "streamed" (the
      reload's level scripted as memory by a test hook) and the rest "reused" (the L2), touched
      every lap and checked for its pattern while another thread writes a count into the stream's
   pages and checks it (no write lost to a move); the program reports progress by a scripted curve of
      the runs ROCS has in the buffer.  `gain`: the more, the better: the whole stream ends in the
      buffer's colours (chromalloc_colour_of), the reused part out of them, and so do the pages
      scripted as the L3's inside the stream (spared when their run goes in).  `loss`: the more, the
      worse: the search keeps none, every page it tried is moved back out.  `fixed` (rocs_fixed=50):
      no search, half the stack in the buffer, nothing moved back out.  `l3`: the stream's pages
      scripted as the L3's (and the spared ones as the L2's) on a machine whose L3 holds the
      stream in the buffer's share (rocs_l3=auto): as `gain`.  `l3small`: the same pages beside a
      32 MiB L3 (the buffer's share 2 MiB): the profile finds no candidate, nothing moves.
      `unscored`: as `lap`, but with no lap page (a test hook) and no progress calls: nothing to
      score a search by, so none is run and nothing moves.  `recheck`, `burst`: see RECHECK, BURST. */
#include "check.h"
#include "../../src/policy/rocs.h"
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

extern int  chromalloc_colour_of(const void* p) __attribute__((weak));
extern int  chromalloc_colours(unsigned level, unsigned from, unsigned to, unsigned den) __attribute__((weak));
extern int  chromalloc_colours_prepare(int colours, size_t bytes, int timeout_ms) __attribute__((weak));
extern long chromalloc_recolour(void* p, size_t len, int colours) __attribute__((weak));
extern int  chromalloc_colour_count(void) __attribute__((weak));
extern void chromalloc_progress(unsigned long units) __attribute__((weak));
void     _ca_rocs_test_level(int (*fn)(uintptr_t page));   /* rocs.c, test builds */
void     _ca_rocs_test_no_laps(bool on);
bool     _ca_rocs_test_profiling(void);
bool     _ca_rocs_test_rechecking(void);
bool     _ca_rocs_test_referenced(void);                   /* settled, with the phase's reference */
uint32_t _ca_rocs_test_in(void);

/* a search of a stack of 64 runs in 4 steps fed a scripted sequence of scores (its end: the
   search must be done by then); the k chosen, the scores it took, the highest k tried */
typedef struct { uint32_t k, tried, highest; } scripted_t;
static scripted_t scripted(const double* scores, size_t n) {
  ca_rocs_search_t s;
  scripted_t r = { 0, 0, 0 };
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  for (; !s.done && r.tried < n; r.tried++) {
    r.highest = r.k > r.highest ? r.k : r.highest;
    r.k = _ca_rocs_search_next(&s, scores[r.tried]);
  }
  CHECK(s.done);
  return r;
}
#define SCRIPTED(a) scripted(a, sizeof a / sizeof a[0])

static void pieces(void) {
  ca_rocs_page_t p = {0};
  for (int i = 0; i < 3; i++) _ca_rocs_note(&p, 4, 1000);
  CHECK_EQ(p.n, 3); CHECK_EQ(p.l3, 3); CHECK_EQ(p.mem, 3); CHECK_EQ(p.sn, 3); CHECK_EQ(p.ssum, 3000);
  CHECK(_ca_rocs_key(&p, false) > 65536);                    /* from memory: a candidate */
  ca_rocs_page_t two = { 2, 2, 2, 0, 0, 0, 0 };
  CHECK_EQ(_ca_rocs_key(&two, false), 0);                    /* too few reloads */
  ca_rocs_page_t l3 = { 10, 9, 1, 0, 0, 0, 0 };              /* missed the L2, hit the L3 */
  CHECK_EQ(_ca_rocs_key(&l3, false), 0);
  CHECK(_ca_rocs_key(&l3, true) > 0 && _ca_rocs_key(&l3, true) < _ca_rocs_key(&p, true));
  /* with the L3's pages in, gone from the L2 most often first: the stream (all from the L3)
     above a victim read from memory a third of the time and from the L2 the rest */
  ca_rocs_page_t stream = { 12, 12, 0, 0, 0, 0, 0 }, victim = { 12, 4, 4, 0, 0, 0, 0 };
  CHECK(_ca_rocs_key(&stream, true) > _ca_rocs_key(&victim, true) && _ca_rocs_key(&victim, true) > 0);
  CHECK(_ca_rocs_key(&victim, false) > 0 && _ca_rocs_key(&stream, false) == 0);
  ca_rocs_page_t quarter = { 12, 12, 3, 0, 0, 0, 0 }, most = { 12, 12, 11, 0, 0, 0, 0 }, less = { 12, 12, 2, 0, 0, 0, 0 };
  CHECK(_ca_rocs_key(&most, false) > _ca_rocs_key(&quarter, false) && _ca_rocs_key(&quarter, false) > 0);
  CHECK_EQ(_ca_rocs_key(&less, false), 0);
  /* decay: the counts halve together at CA_ROCS_DECAY, so a page that changed its ways shows it */
  ca_rocs_page_t d = {0};
  for (int i = 0; i < CA_ROCS_DECAY; i++) _ca_rocs_note(&d, 4, 100);
  for (int i = 0; i < CA_ROCS_DECAY; i++) _ca_rocs_note(&d, 2, 100);
  CHECK(d.n <= CA_ROCS_DECAY && d.mem * 4 <= d.n);
  for (int i = 0; i < CA_ROCS_DECAY; i++) _ca_rocs_note(&d, 2, 100);
  CHECK_EQ(_ca_rocs_key(&d, false), 0);

  /* the search: a peak at 37 of 100, 8 steps of 13: k = 0 (twice), 13, 26, 39 ... 91, 100 tried (91 is a
     third below 39's score, not k = 0's: the sweep goes on); 39 best */
  ca_rocs_search_t s;
  _ca_rocs_search_begin(&s, 100, 8, 0.05);
  uint32_t tried = 0, k = 0;
  while (!s.done) { double x = (double)k - 37; k = _ca_rocs_search_next(&s, 10000 - x * x); tried++; }
  CHECK_EQ(tried, 10 + 4);                                  /* the sweep, then 39, 0, 39, 0 */
  CHECK_EQ(k, 39);
  CHECK_EQ(s.best_k, 39);
  /* a cliff past 32 of 64 (the victim confined): 40 is tried, 48-64 never */
  _ca_rocs_search_begin(&s, 64, 8, 0.05);
  uint32_t highest = 0;
  for (k = 0; !s.done; ) { highest = k > highest ? k : highest; k = _ca_rocs_search_next(&s, k <= 32 ? 1000.0 + 10 * k : 500); }
  CHECK_EQ(highest, 40);
  CHECK_EQ(k, 32);
  /* a fall is scored again, and the sweep ends only if the two scores' mean falls: one slow
     reading after a best does not end it (art4: 36 of 72 runs read 554 us of lap, k = 0 362) ... */
  static const double slow[] = { 1000, 1000, 1200, 600, 1150, 1300, 1250,   /* 0, 0, 16, 32, 32, 48, 64 */
                                 1300, 1000, 1300, 1000 };
  scripted_t r = SCRIPTED(slow);
  CHECK_EQ(r.highest, 64);
  CHECK_EQ(r.k, 48);
  /* ... a cliff read twice does */
  static const double cliff[] = { 1000, 1000, 1200, 600, 600, 1200, 1000, 1200, 1000 };
  r = SCRIPTED(cliff);
  CHECK_EQ(r.highest, 32);
  CHECK_EQ(r.k, 16);
  /* a fall with no best above k = 0 before it goes on (the stand-in's noise at small k) */
  _ca_rocs_search_begin(&s, 64, 8, 0.05);
  for (highest = 0, k = 0; !s.done; ) { highest = k > highest ? k : highest; k = _ca_rocs_search_next(&s, k == 8 ? 600 : k >= 56 ? 1200 : 1000); }
  CHECK_EQ(highest, 64);
  CHECK_EQ(k, 56);
  /* the stand-in's scores are negative (minus the reload time): higher is still better */
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  for (k = 0; !s.done; ) k = _ca_rocs_search_next(&s, -1000.0 + 10.0 * k);   /* best at the top */
  CHECK_EQ(k, 64);
  /* a gain below the margin: k = 0 */
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  for (k = 0; !s.done; ) k = _ca_rocs_search_next(&s, k == 32 ? 1030 : 1000);
  CHECK_EQ(k, 0);
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  for (k = 0; !s.done; ) k = _ca_rocs_search_next(&s, k == 32 ? 1100 : 1000);
  CHECK_EQ(k, 32);
  /* the sweep's best was luck: scored again, it is no better than k = 0 */
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  uint32_t scored32 = 0;
  for (k = 0; !s.done; ) k = _ca_rocs_search_next(&s, k == 32 && scored32++ < 1 ? 1100 : 1000);
  CHECK_EQ(scored32, 3);                                    /* in the sweep, then in each round */
  CHECK_EQ(k, 0);
  /* ... or k = 0 was unlucky in the sweep and is as good scored again */
  _ca_rocs_search_begin(&s, 64, 4, 0.05);
  uint32_t scored0 = 0;
  for (k = 0; !s.done; ) k = _ca_rocs_search_next(&s, k == 32 ? 1100 : k == 0 && scored0++ > 0 ? 1100 : 1000);
  CHECK_EQ(k, 0);
  /* a lucky early best, then one slow reading a third below it but not below k = 0: the sweep
     goes on to the real best (the lap time of art4, whose victim gains only once the whole stream
     is in: 0:561 10:454 20:585 30:684 ended a sweep at 30 and kept 10) */
  static const double lap[] = { 560, 450, 585, 684, 500, 480, 250, 540, 545 };   /* k = 0, 10 ... 70, 75 */
  _ca_rocs_search_begin(&s, 75, 8, 0.05);
  for (highest = 0, k = 0; !s.done; ) { highest = k > highest ? k : highest; k = _ca_rocs_search_next(&s, -lap[(k + 9) / 10]); }
  CHECK_EQ(highest, 75);
  CHECK_EQ(k, 60);
  /* of the steps within k = 0's noise of the best (371 and 411: 10%), the largest before a fall:
     40 read 249 and 60 257 in art4's sweep, and 40 kept left its victim at 12.2 ns against 60's
     6.4-7.8 (50's 352 is noise; 70 is the victim's cliff, 76 falls) ... */
  static const double near[] = { 371, 411, 499, 422, 410, 249, 352, 257, 476, 842 };   /* 0, 0, 10 ... 70, 76 */
  _ca_rocs_search_begin(&s, 76, 8, 0.05);
  for (tried = 0, k = 0; !s.done && tried < 10; tried++) k = _ca_rocs_search_next(&s, -near[tried]);
  CHECK_EQ(k, 60);                                          /* confirmed first */
  for (int i = 0; i < 4; i++) k = _ca_rocs_search_next(&s, k == 0 ? -400 : -250);
  CHECK(s.done);
  CHECK_EQ(k, 60);
  /* ... not beyond the noise (60 at 300: 20% from the best) ... */
  static const double far[] = { 371, 411, 499, 422, 410, 249, 352, 300, 476, 842 };
  _ca_rocs_search_begin(&s, 76, 8, 0.05);
  for (tried = 0, k = 0; !s.done && tried < 10; tried++) k = _ca_rocs_search_next(&s, -far[tried]);
  CHECK_EQ(k, 40);
  /* ... nor past a fall (50 twice a third below k = 0) ... */
  static const double past[] = { 371, 411, 499, 422, 410, 249, 600, 600 };   /* the sweep ends at 50 */
  _ca_rocs_search_begin(&s, 76, 8, 0.05);
  for (tried = 0, k = 0; !s.done && tried < 8; tried++) k = _ca_rocs_search_next(&s, -past[tried]);
  CHECK(s.confirm > 0);
  CHECK_EQ(k, 40);
  /* ... and if it fails both rounds, the best itself is confirmed */
  _ca_rocs_search_begin(&s, 76, 8, 0.05);
  for (tried = 0, k = 0; !s.done && tried < 10; tried++) k = _ca_rocs_search_next(&s, -near[tried]);
  for (int i = 0; i < 4; i++) k = _ca_rocs_search_next(&s, -400);   /* 60 no better than k = 0, twice */
  CHECK_EQ(k, 40);
  for (int i = 0; i < 4; i++) k = _ca_rocs_search_next(&s, k == 0 ? -400 : -250);
  CHECK(s.done);
  CHECK_EQ(k, 40);
  /* the confirmation judges each score of the best beside the k = 0 scores next to it: a sweep
     whose k = 0 read in a fast moment still keeps a best that holds in its pairs ... */
  static const double fast0[] = { 1300, 1300, 1400, 1200, 1000, 1200, 1000 };   /* 0, 0, 32 (best), 32, 0, 32, 0 */
  _ca_rocs_search_begin(&s, 32, 1, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, fast0[tried]);
  CHECK_EQ(tried, 7);
  CHECK_EQ(k, 32);
  /* ... forgives one round spoilt by a slow best ... */
  static const double once[] = { 1000, 1000, 1200, 1200, 1000, 1000, 1200, 1000, 1200, 1000 };
  _ca_rocs_search_begin(&s, 32, 1, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, once[tried]);
  CHECK_EQ(tried, 10);
  CHECK_EQ(k, 32);
  /* ... and drops it when either side of a pair fails in both rounds: the second best against
     the first k = 0, or the last k = 0 */
  static const double second[] = { 1000, 1000, 1200, 1200, 1000, 1000, 1200, 1150 },
                      last[] = { 1000, 1000, 1200, 1200, 1000, 1200, 1150, 1200, 1000, 1200, 1150 };
  _ca_rocs_search_begin(&s, 32, 1, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, second[tried]);
  CHECK_EQ(tried, 8);
  CHECK_EQ(k, 0);
  _ca_rocs_search_begin(&s, 32, 1, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, last[tried]);
  CHECK_EQ(tried, 11);
  CHECK_EQ(k, 0);
  /* a lucky best that fails both rounds gives way to the sweep's next best that beat k = 0,
     confirmed the same way (art4 with a buffer of 1/8: 40 read 209 in the sweep, 60 259, k = 0
     396; 40 then read 380-461) ... */
  static const double next[] = { 1000, 1000, 1000, 1300, 1150, 1000,   /* 0, 0, 16, 32 (lucky), 48, 64 */
                                 950, 1000, 950, 1000,                 /* 32 fails in both rounds */
                                 1150, 1000, 1150, 1000 };             /* 48 holds */
  r = SCRIPTED(next);
  CHECK_EQ(r.tried, 14);
  CHECK_EQ(r.k, 48);
  /* ... once: a second best that fails too gives k = 0 ... */
  static const double none[] = { 1000, 1000, 1000, 1300, 1150, 1000,
                                 950, 1000, 950, 1000,                 /* 32 fails in both rounds */
                                 1150, 1000, 1000, 1000, 1000 };       /* 48: its second score, then its second round */
  r = SCRIPTED(none);
  CHECK_EQ(r.tried, 15);
  CHECK_EQ(r.k, 0);
  /* ... and a step that beat k = 0 by less than the margin is no candidate (16: 4%) */
  static const double small[] = { 1000, 1000, 1040, 1300, 1000, 1000, 950, 1000, 950, 1000 };
  r = SCRIPTED(small);
  CHECK_EQ(r.tried, 10);
  CHECK_EQ(r.k, 0);
  /* k = 0 is scored twice and judged by their mean: one lucky first score (1250 against 1000)
     does not leave the sweep nothing to keep (art4: k = 0 read 281, then 317-426 all process) */
  static const double lucky0[] = { 1250, 1000, 1200, 1200, 1000, 1200, 1000 };
  _ca_rocs_search_begin(&s, 32, 1, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, lucky0[tried]);
  CHECK_EQ(tried, 7);
  CHECK_EQ(k, 32);
  /* a host that speeds up by 10% a score, whatever k is: the sweep's last is its best, and the
     k = 0 after it beats it */
  _ca_rocs_search_begin(&s, 64, 8, 0.05);
  double t = -1000;
  for (k = 0; !s.done; t *= 0.9) k = _ca_rocs_search_next(&s, t);
  CHECK_EQ(k, 0);
  /* a stack smaller than the steps: one page a step */
  _ca_rocs_search_begin(&s, 3, 8, 0.05);
  for (tried = 0, k = 0; !s.done; tried++) k = _ca_rocs_search_next(&s, k == 2 ? 2 : 1);
  CHECK_EQ(tried, 5 + 4);
  CHECK_EQ(k, 2);
  _ca_rocs_search_begin(&s, 0, 8, 0.05);
  CHECK(s.done);

  /* rocs_l3=auto: the L3's pages join when the stack fits in half the buffer's share of the L3 */
  CHECK(_ca_rocs_l3_fits(4u << 20, 260u << 20, 16));
  CHECK(!_ca_rocs_l3_fits(4u << 20, 32u << 20, 16));
  CHECK(_ca_rocs_l3_fits(1u << 20, 32u << 20, 16) && !_ca_rocs_l3_fits((1u << 20) + 4096, 32u << 20, 16));
  CHECK(!_ca_rocs_l3_fits(0, 260u << 20, 16) && !_ca_rocs_l3_fits(4096, 0, 16));

  /* a phase change lasts: three scores in a row off by more than a third */
  ca_rocs_phase_t ph = { 0 };
  CHECK(!_ca_rocs_phase(&ph, 900, 1.0 / 3, 3));             /* the reference: the median of the first three */
  CHECK(!_ca_rocs_phase(&ph, 2000, 1.0 / 3, 3));
  CHECK(!_ca_rocs_phase(&ph, 1000, 1.0 / 3, 3));
  CHECK(ph.ref == 1000);
  CHECK(!_ca_rocs_phase(&ph, 1200, 1.0 / 3, 3));
  CHECK(!_ca_rocs_phase(&ph, 600, 1.0 / 3, 3));
  CHECK(!_ca_rocs_phase(&ph, 600, 1.0 / 3, 3));
  CHECK(!_ca_rocs_phase(&ph, 1000, 1.0 / 3, 3));             /* back: counted from nothing again */
  CHECK(!_ca_rocs_phase(&ph, 1400, 1.0 / 3, 3));
  CHECK(!_ca_rocs_phase(&ph, 1400, 1.0 / 3, 3));
  CHECK(_ca_rocs_phase(&ph, 1400, 1.0 / 3, 3));
  ca_rocs_phase_t neg = { -500, 0, 3, {0} };
  CHECK(!_ca_rocs_phase(&neg, -600, 1.0 / 3, 1));
  CHECK(_ca_rocs_phase(&neg, -700, 1.0 / 3, 1));
}

#define STREAM_PAGES 1024
#define REUSED_PAGES 128
static uint8_t* stream_lo;

/* the stream's pages come from memory (`l3`: from the L3), but one in 64 from the level above
   (reused data inside a run of the stack: spared when the run goes in); the rest from the L2 */
#define SPARED(p) ((p) % 64 == 5)
/* `fixed`: each of the stream's last TAIL_PAGES comes from memory one time in three, else from
   the L3: candidates still, page by page too (never "reused"), at the stack's bottom, so left
   out of the half confined.  Moved into the buffer's colours first (a victim's pages lying there
   read from beyond the L2 like the stream), they must leave them once the buffer is settled */
#define TAIL_PAGES 64
static bool tail_low, all_stream;       /* all_stream: the reused part's pages come from memory too */
static _Atomic(unsigned) tail_reloads[TAIL_PAGES];
static int stream_level = 4;
static int scripted_level(uintptr_t page) {
  if (page < (uintptr_t)stream_lo || page >= (uintptr_t)stream_lo + (all_stream ? STREAM_PAGES + REUSED_PAGES : STREAM_PAGES) * 4096)
    return 2;
  if (all_stream) return stream_level;
  uintptr_t p = (page - (uintptr_t)stream_lo) / 4096;
  if (tail_low && p >= STREAM_PAGES - TAIL_PAGES)
    return atomic_fetch_add(&tail_reloads[p - (STREAM_PAGES - TAIL_PAGES)], 1) % 3 == 0 ? stream_level : stream_level - 1;
  return SPARED(p) ? stream_level - 1 : stream_level;
}

/* pages of [p, p + n pages) in the buffer's colours (the first 1/rocs_buffer) */
static int in_buffer(const uint8_t* p, int n) {
  int buffer = chromalloc_colour_count() / (int)chromalloc_option("rocs_buffer"), in = 0;
  for (int i = 0; i < n; i++) {
    int c = chromalloc_colour_of(p + (size_t)i * 4096);
    in += c >= 0 && c < buffer;
  }
  return in;
}

/* a writer meanwhile: a count in every stream page, each write checked at the next (a move that
   lost one would show) */
static _Atomic(bool) stop_writer, lap_scored;
static _Atomic(long) lost_writes, writes;
static void* writer(void* arg) {
  (void)arg;
  static uint64_t last[STREAM_PAGES];
  for (uint64_t n = 1; !atomic_load(&stop_writer); n++, usleep(200))   /* a small share of the CPU */
    for (uint32_t p = 0; p < STREAM_PAGES; p += 3) {
      /* under the lap score only while profiling: a third of the lap pages would be the
         writer's, touched every 0.2 ms whatever the laps (2 failures in 6 beside another test) */
      if (atomic_load_explicit(&lap_scored, memory_order_relaxed) && !_ca_rocs_test_profiling()) break;
      volatile uint64_t* w = (volatile uint64_t*)(stream_lo + (size_t)p * 4096 + 2048);
      if (*w != last[p]) atomic_fetch_add(&lost_writes, 1);
      *w = last[p] = n;
      atomic_fetch_add_explicit(&writes, 1, memory_order_relaxed);
    }
  return NULL;
}

static uint64_t now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }

static long stat_of(const char* buf, const char* name) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char* r = strstr(buf, "\"rocs\":{");
  const char* at = r ? strstr(r, key) : NULL;
  return at ? atol(at + strlen(key)) : -1;
}

/* FIXED: run with rocs_fixed=50, no search; LAP: no progress calls, the search scored by the lap
   pages' waits, each lap 12 ms longer while fewer than half the stack's runs are in the buffer
   (40x: no host's noise turns that round); the writer stops once the profile is done.  RECHECK:
   the gain, then every lap's progress 16x less whatever the buffer holds (a slower host): the
   settled score moves as in a new phase, k = 0 scored beside it is still worse, the buffer stays.
   BURST: the gain, then a burst of laps 2^20 times slower (below k = 0's) that ends as the
   recheck begins: k = 0 beats the score that looked off, the settled k scored again beats
   k = 0, the buffer stays.  ALONE: progress only while nothing is in the buffer: every
   configuration with runs in it must read none, i.e. none is scored over a window of the one
   before (each step's first window ran the previous one when the measure began before the moves) */
enum { GAIN, LOSS, FIXED, L3SMALL, LAP, UNSCORED, RECHECK, BURST, ALONE };
static void mechanism(int mode) {
  bool gain = mode != LOSS;
  static char buf[1 << 16];
  _ca_rocs_test_level(scripted_level);
  _ca_rocs_test_no_laps(mode == UNSCORED);
  tail_low = mode == FIXED;
  all_stream = mode == ALONE;      /* nothing reused: no victim moved away, whose moves would start a measure again */
  atomic_store(&lap_scored, mode == LAP);
  uint8_t* block = malloc((STREAM_PAGES + REUSED_PAGES + 1) * 4096);
  void* volatile cold = malloc(8u << 20);               /* profiled too, never touched: not waited for */
  stream_lo = (uint8_t*)(((uintptr_t)block + 4095) & ~(uintptr_t)4095);
  uint8_t* reused = stream_lo + STREAM_PAGES * 4096;
  for (uint32_t p = 0; p < STREAM_PAGES + REUSED_PAGES; p++) memset(stream_lo + (size_t)p * 4096, (int)(p * 7 + 1), 4096);
  for (uint32_t p = 0; p < STREAM_PAGES; p += 3) *(uint64_t*)(stream_lo + (size_t)p * 4096 + 2048) = 0;
  pthread_t wt;
  pthread_create(&wt, NULL, writer, NULL);
  int colours_before[REUSED_PAGES], tail_before = -1;
  uint8_t* tail = stream_lo + (STREAM_PAGES - TAIL_PAGES) * 4096;
  bool settled = false, intact = true, known = false, slowed = false, burst_over = false;
  long laps = 0;
  for (uint64_t t0 = now_ns(), look = t0; now_ns() - t0 < 90000000000ull && !settled; laps++) {
    for (uint32_t p = 0; p < STREAM_PAGES + REUSED_PAGES; p++) {
      volatile uint8_t* q = stream_lo + (size_t)p * 4096;
      intact &= q[(p * 64) % 2048] == (uint8_t)(p * 7 + 1) && q[4095] == (uint8_t)(p * 7 + 1);
    }
    uint32_t in = _ca_rocs_test_in();                   /* runs in the buffer: the scripted curve */
    /* doubling every 4 runs: a step of the search is worth 2x, more than a busy host's noise
       on lap times (a linear curve, 1.3x from 48 to 64 runs, chose 48 beside other tests) */
    uint32_t k = in < 64 ? in : 64;
    burst_over |= mode == BURST && slowed && _ca_rocs_test_rechecking();
    unsigned shift = !slowed ? 0 : mode == RECHECK ? 4 : burst_over ? 0 : 20;
    if (mode == ALONE) { if (in == 0) chromalloc_progress(1000); }
    else if (mode != LAP && mode != UNSCORED) chromalloc_progress((1000ul << (gain ? k / 4 : (64 - k) / 4)) >> shift);
    else if (in < 32)
      for (uint64_t until = now_ns() + 12000000u; now_ns() < until; ) {}
    if (!known && chromalloc_colour_count() > 0 && chromalloc_colour_of(reused) >= 0) {   /* once the colours are */
      if (mode == ALONE && tail_before < 0) {          /* every step's frames at hand: its moves take one window */
        int id = chromalloc_colours(0, 0, 1, (unsigned)chromalloc_option("rocs_buffer"));
        tail_before = id > 0 && chromalloc_colours_prepare(id, (STREAM_PAGES + REUSED_PAGES) * 4096, 10000) == 0;
      }
      if (mode == FIXED && tail_before < 0) {
        int id = chromalloc_colours(0, 0, 1, (unsigned)chromalloc_option("rocs_buffer"));
        if (id > 0 && chromalloc_colours_prepare(id, TAIL_PAGES * 4096, 10000) == 0) chromalloc_recolour(tail, TAIL_PAGES * 4096, id);
        tail_before = in_buffer(tail, TAIL_PAGES);
      }
      for (int i = 0; i < REUSED_PAGES; i++) colours_before[i] = chromalloc_colour_of(reused + (size_t)i * 4096);
      known = strstr((chromalloc_stats_json(buf, sizeof buf), buf), "\"moved_in\":0,") != NULL;      /* before any move */
    }
    if (now_ns() < look) continue;
    look = now_ns() + 200000000u;
    chromalloc_stats_json(buf, sizeof buf);
    if (mode == L3SMALL) { settled = stat_of(buf, "profiles") >= 2; continue; }   /* profiled twice, found nothing */
    if (mode == UNSCORED) { settled = stat_of(buf, "searches_unscored") >= 2; continue; }
    if (mode == ALONE) {
      settled = strstr(buf, "\"rocs\":{\"state\":\"settled\"") != NULL && stat_of(buf, "runs_in_buffer") == 0;
      continue;
    }
    settled = strstr(buf, "\"rocs\":{\"state\":\"settled\"") != NULL &&
              stat_of(buf, "runs_in_buffer") == stat_of(buf, "chosen_runs") &&   /* its moves done too */
              (mode == LOSS || stat_of(buf, "reused_moved_out") >= REUSED_PAGES * 3 / 4) &&  /* and the reused part's */
              (mode != FIXED || stat_of(buf, "left_out_moved") >= TAIL_PAGES);            /* and the stack's bottom */
    /* slower once the settled score has its reference (the median of its first three; half a
       second after settling was too soon on a loaded machine: the slow scores became it) */
    if ((mode == RECHECK || mode == BURST) && settled && !slowed) { slowed = _ca_rocs_test_referenced(); settled = false; }
    if (slowed) settled = settled && stat_of(buf, "phase_rechecks") >= 1;
  }
  atomic_store(&stop_writer, true);
  pthread_join(wt, NULL);
  CHECK(atomic_load(&writes) > 0);
  CHECK_EQ(atomic_load(&lost_writes), 0);
  chromalloc_stats_json(buf, sizeof buf);
  if (!settled) fprintf(stderr, "not settled: %s\n", strstr(buf, "\"rocs\":{") ? strstr(buf, "\"rocs\":{") : buf);
  CHECK(settled);
  CHECK(intact);
  if (mode == L3SMALL) {
    fprintf(stderr, "l3small: %ld profiles, stack %ld runs, %ld pages moved in, %ld laps\n", stat_of(buf, "profiles"),
            stat_of(buf, "stack_runs"), stat_of(buf, "moved_in"), laps);
    CHECK_EQ(stat_of(buf, "stack_runs"), 0);
    CHECK_EQ(stat_of(buf, "moved_in"), 0);
    CHECK_EQ(stat_of(buf, "windows_apart"), 4);              /* found nothing twice: fewer windows */
    CHECK_EQ(stat_of(buf, "reused_moved_out"), 0);
    free(block);
    free(cold);
    return;
  }
  if (mode == UNSCORED) {                                  /* a stack, and nothing to score a search by */
    fprintf(stderr, "unscored: %ld profiles, stack %ld runs, %ld searches (%ld without a score), %ld pages moved in\n",
            stat_of(buf, "profiles"), stat_of(buf, "stack_runs"), stat_of(buf, "searches"), stat_of(buf, "searches_unscored"),
            stat_of(buf, "moved_in"));
    CHECK(stat_of(buf, "stack_runs") > 0);
    CHECK_EQ(stat_of(buf, "searches"), 0);
    CHECK_EQ(stat_of(buf, "moved_in"), 0);
    CHECK_EQ(stat_of(buf, "buffer_colours"), 0);           /* no buffer set up, none stocked */
    CHECK_EQ(stat_of(buf, "windows_apart"), 4);
    CHECK(strstr(buf, "\"objective\":\"none\"") != NULL);
    free(block);
    free(cold);
    return;
  }
  if (mode == ALONE) {
    const char* at = strstr(buf, "\"scores\":[");
    double zero = 0, others = 0;
    int n = 0, tried = 0;
    for (at = at ? at + strlen("\"scores\":[") : NULL; at != NULL && *at == '['; n++) {
      unsigned k;
      double progress;
      if (sscanf(at, "[%u,%lf", &k, &progress) != 2) break;
      if (k == 0 && progress > zero) zero = progress;
      if (k != 0 && progress > others) others = progress;
      tried += k != 0;
      at = strchr(at, ']');
      at = at ? at + 1 + (at[1] == ',') : NULL;
    }
    fprintf(stderr, "alone: %d scores, %d with runs in the buffer: their most progress %.0f, k = 0's %.0f a CPU second\n",
            n, tried, others, zero);
    CHECK(tried >= 2 && zero > 0);
    CHECK(others * 10 < zero);                               /* a lap at most read `in` before the moves */
    CHECK_EQ(stat_of(buf, "chosen_runs"), 0);
    CHECK_EQ(stat_of(buf, "windows_apart"), 4);              /* it kept nothing: fewer windows */
    free(block);
    free(cold);
    return;
  }
  CHECK(strstr(buf, mode == LAP ? "\"objective\":\"lap time\"" : "\"objective\":\"progress\"") != NULL);
  if (mode == LAP) CHECK(stat_of(buf, "lap_pages") > 0);
  CHECK(stat_of(buf, "profiled_pct") >= 90);
  const char* measures = strstr(buf, "\"reload_measures\":");       /* measured again, the quietest kept */
  CHECK(measures != NULL && atol(measures + strlen("\"reload_measures\":")) >= 2);
  CHECK_EQ(stat_of(buf, "windows_apart"), mode == LOSS ? 4 : 1);   /* windows every period, unless the search kept nothing */
  long runs = stat_of(buf, "stack_runs"), chosen = stat_of(buf, "chosen_runs");
  /* the stream (most of it: a run needs CA_ROCS_MIN_SAMPLES reloads in the profile), nothing else */
  uint32_t run = _ca_rocs_run(STREAM_PAGES + REUSED_PAGES + 1);
  CHECK_EQ(run, CA_ROCS_RUN);
  CHECK_EQ(_ca_rocs_run(CA_ROCS_RUNS * 48), 48);
  /* one more when the block starts inside a page: the runs are then a page off the stream's, and
     the one that straddles its end into the reused part may read as memory's a quarter of the time */
  CHECK(runs >= STREAM_PAGES / run * 7 / 8 && runs <= STREAM_PAGES / run + 1);
  int colours = chromalloc_colour_count(), buffer = colours / (int)chromalloc_option("rocs_buffer");
  int confined = 0, moved_reused = 0, reused_in = 0, spared_in = 0;
  for (uint32_t p = 0; p < STREAM_PAGES; p++) {
    int c = chromalloc_colour_of(stream_lo + (size_t)p * 4096);
    confined += c >= 0 && c < buffer && !SPARED(p);
    spared_in += c >= 0 && c < buffer && SPARED(p);
  }
  for (int i = 0; i < REUSED_PAGES; i++) {
    int c = chromalloc_colour_of(reused + (size_t)i * 4096);
    moved_reused += c != colours_before[i];
    reused_in += c >= 0 && c < buffer;
  }
  long guarded = stat_of(buf, "reused_moved_out");
  fprintf(stderr, "%s: stack %ld runs, chosen %ld, %d of %d stream pages in the buffer's %d colours (of %d), %ld laps; "
          "reused pages: %ld moved out, %d in the buffer's colours, %d of another colour\n",
          mode == GAIN ? "gain" : mode == LOSS ? "loss" : mode == LAP ? "lap" : mode == RECHECK ? "recheck" : mode == BURST ? "burst" : "fixed", runs, chosen, confined, STREAM_PAGES, buffer, colours, laps,
          guarded, reused_in, moved_reused);
  CHECK(known);
  /* the reused pages are never confined; while anything is, they move out of the buffer's colours,
     and once settled so do the runs left out */
  long left_out = stat_of(buf, "left_out_moved");
  CHECK(left_out >= 0 && left_out <= (runs - chosen) * (long)run);
  long reusable = REUSED_PAGES + STREAM_PAGES / 64 + (mode == FIXED ? TAIL_PAGES : 0) + left_out;   /* the reused part, the
                                             stream's L3 pages, the bottom's pages whose reloads were the L3's most */
  CHECK(guarded >= 0 && guarded <= reusable);
  if (mode != LOSS) CHECK(guarded >= REUSED_PAGES * 3 / 4 && reused_in <= reusable - guarded);
  /* the stream's L3 pages were not moved in with their runs (spared once profiled) */
  if (mode == GAIN) CHECK(stat_of(buf, "reused_spared") > 0);   /* their runs are the stack's last */
  /* a page trapped three times or fewer goes in with its run; under the lap score the laps are
     12 ms long while fewer than half the runs are in, so fewer pages are profiled by then: 3-6
     of the 16 went in with all the runs in about 1 run of this test in 8, as often before the
     left-out runs and the recheck's second score as after */
  int spared_max = mode == LAP ? STREAM_PAGES / 64 / 2 : 2;
  if (spared_in > 2) fprintf(stderr, "%d of the stream's L3 pages in the buffer's colours\n", spared_in);
  CHECK(spared_in <= spared_max);
  if (mode == FIXED) {                                     /* half the stack, as set, without a search */
    CHECK_EQ(stat_of(buf, "searches"), 0);
    CHECK_EQ(chosen, runs * 50 / 100);
    CHECK_EQ(stat_of(buf, "moved_out"), 0);
    CHECK(confined >= chosen * (long)run * 95 / 100 && confined <= (chosen * (long)run + STREAM_PAGES / 4));
    int tail_after = in_buffer(tail, TAIL_PAGES);
    fprintf(stderr, "fixed: the stack's bottom %d pages: %d in the buffer's colours before, %d after; %ld pages of runs left out moved\n",
            TAIL_PAGES, tail_before, tail_after, left_out);
    CHECK_EQ(tail_before, TAIL_PAGES);
    CHECK(tail_after <= 1);       /* the last page's run may hold the reused part's first: no candidate */
  } else if (mode == LAP) {                                /* any k of half the stack or more is as fast */
    CHECK(chosen >= runs / 2);
    if (chosen < runs / 2) fprintf(stderr, "lap: %s\n", strstr(buf, "\"rocs\":{") ? strstr(buf, "\"rocs\":{") : buf);
    CHECK(confined >= chosen * (long)run * 95 / 100);
  } else if (gain) {
    if (mode == RECHECK || mode == BURST) CHECK_EQ(stat_of(buf, "phase_changes"), 0);   /* the buffer held: no new profile */
    CHECK_EQ(chosen, runs);
    CHECK(confined >= chosen * (long)run * 95 / 100);
  } else {
    CHECK_EQ(chosen, 0);
    CHECK_EQ(stat_of(buf, "runs_in_buffer"), 0);
    CHECK(stat_of(buf, "moved_in") > 0 && stat_of(buf, "moved_out") == stat_of(buf, "moved_in"));
    CHECK(confined <= STREAM_PAGES / 4);                     /* back out (some by chance: 1 in 16) */
  }
  free(block);
  free(cold);
}

int main(int argc, char** argv) {
  pieces();
  if (argc > 1 && strncmp(argv[1], "l3", 2) == 0) stream_level = 3;
  if (argc > 1) mechanism(strcmp(argv[1], "gain") == 0 || strcmp(argv[1], "l3") == 0 ? GAIN : strcmp(argv[1], "loss") == 0 ? LOSS
                          : strcmp(argv[1], "l3small") == 0 ? L3SMALL : strcmp(argv[1], "lap") == 0 ? LAP
                          : strcmp(argv[1], "unscored") == 0 ? UNSCORED : strcmp(argv[1], "recheck") == 0 ? RECHECK
                          : strcmp(argv[1], "burst") == 0 ? BURST : strcmp(argv[1], "alone") == 0 ? ALONE : FIXED);
  return check_done("rocs");
}
