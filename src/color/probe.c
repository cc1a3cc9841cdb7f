/* The timing probe: does touching a group of pages evict reference page R from a cache level?

   R holds a dependent chase through its 64 lines in a fixed random order (a single timed load
   reads 80 ticks from L2 and 110 from L3 here, too close for rdtscp's 26-tick steps; 64 chained
   loads read ~450-650 ticks from L2 and 1300-2000 after an eviction set).  Each line holds the
   distance to the next, not its address, and the order is the same in every process: a page
   of the shared set file (setfile.c), mapped at different addresses, is then a reference for
   all of them without being written again.  One test: chase R
   twice (R in L1/L2 and its translation in the TLB), read every line of every page of the group
   `passes` times, time a third chase; the median of `reps` tests, divided by the same median
   after touching quiet pages instead, is compared with a ratio (the rule, below).  A stricter
   ratio answers "is most of R evicted?" (evicts_fully), which confirms a page's colour.  Each
   test lasts well under 100 us, because something outside this VM evicts idle lines from L2
   within ~0.1-1 ms.

   x86-64 only (rdtscp); elsewhere the probe reports that it cannot measure. */
#include "colour.h"
#include <sys/mman.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#define LINES_PER_PAGE 64
static uint8_t line_order[LINES_PER_PAGE];     /* R's chase */

#if defined(__x86_64__)
uint64_t _ca_ticks(void) {
  unsigned aux;
  _mm_lfence();
  uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
}
#else
uint64_t _ca_ticks(void) { return 0; }
#endif

double _ca_ticks_per_us(void) {
  static double cached;
  if (cached > 0) return cached;
  uint64_t t0 = _ca_ticks(), c0 = _ca_clock_ns();
  while (_ca_clock_ns() - c0 < 2000000) {}
  uint64_t t1 = _ca_ticks(), c1 = _ca_clock_ns();
  cached = (double)(t1 - t0) * 1000.0 / (double)(c1 - c0);
  return cached;
}

/* The two loops a test runs are placed at the start of a 64-byte line, whatever the code around
   them: where the compiler put them decided whether discovery worked.  A build whose touch loop
   straddled a line boundary (12 bytes, 8 of them before it) finished discovering the
   colours in 19 of 58 processes, against 60 of 64 for one whose loop did not (interleaved, on a
   Zen 5 L2); the same build with the loops aligned, 16 of 16 (docs/colours.md).  The loop ran
   no slower (16-512 pages, same median); why the placement matters is not known. */
static void* chase(void* r) {
  uint8_t* p = (uint8_t*)r + line_order[0] * 64;
#if defined(__x86_64__)
  long n = LINES_PER_PAGE;
  __asm__ volatile(".p2align 6\n1:\tadd (%0), %0\n\tdec %1\n\tjnz 1b" : "+r"(p), "+r"(n) : : "memory");
#else
  for (int i = 0; i < LINES_PER_PAGE; i++) p += *(volatile int64_t*)p;
#endif
  return p;
}

static void touch(const void* page) {
#if defined(__x86_64__)
  const uint8_t* q = page;
  const uint8_t* end = q + LINES_PER_PAGE * 64;
  uint64_t v;
  __asm__ volatile(".p2align 6\n1:\tmov (%0), %1\n\tadd $64, %0\n\tcmp %2, %0\n\tjne 1b"
                   : "+r"(q), "=&r"(v) : "r"(end) : "memory");
#else
  const volatile uint64_t* q = page;
  for (int l = 0; l < LINES_PER_PAGE; l++) (void)q[l * 8];
#endif
}

static void timing_prepare(ca_probe_t* p, void* r) {
  (void)p;
  uint8_t* b = r;
  /* the first 8 bytes of each line: bytes 8-15 of the page keep what its source wrote there, so
     that no two references are alike (calibrate.c, touch_free) */
  /* written only where it differs: references are shared by the worker and the threads that
     ask for a page's colour, and a store, even of the same value, takes the line from the other
     CPU's cache, which then reads as an eviction there (every page of the 7/8 pool read as of
     the first eighth while the worker stocked) */
  for (int i = 0; i < LINES_PER_PAGE; i++) {
    int64_t* slot = (int64_t*)(b + line_order[i] * 64);
    int64_t step = ((int64_t)line_order[(i + 1) % LINES_PER_PAGE] - line_order[i]) * 64;
    if (*slot != step) *slot = step;
  }
}

static uint32_t median_u32(uint32_t* v, int n) {
  for (int i = 1; i < n; i++)                    /* insertion sort: n <= 41 */
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { uint32_t t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return v[n / 2];
}

/* median ticks of R's chase after touching pages[0..n) */
static uint32_t evict_ticks(ca_timing_probe_t* tp, void* r, void* const* pages, size_t n, int reps) {
  uint32_t v[32];
  if (reps > 32) reps = 32;
  void* sink = NULL;
  for (int k = 0; k < reps; k++) {
    sink = chase(r);
    sink = chase(r);
    for (int pass = 0; pass < tp->passes; pass++)
      for (size_t i = 0; i < n; i++) touch(pages[i]);
    uint64_t t0 = _ca_ticks();
    sink = chase(r);
    uint64_t t1 = _ca_ticks();
    v[k] = (uint32_t)(t1 - t0) + (sink == NULL);
  }
  return median_u32(v, reps);
}

/* Evicted when R's chase after touching the group is `ratio_pct`% of its chase after touching
   the quiet pages, measured in alternation: both see the same core clock.  (The TSC ticks at a
   fixed rate, and on this host the core's clock moves with the load of other guests, which
   shifts any fixed threshold in ticks both ways within seconds.) */
static bool evicts_above(ca_timing_probe_t* tp, void* r, void* const* pages, size_t n, uint32_t pct) {
  tp->base.tests++;
  uint32_t g = evict_ticks(tp, r, pages, n, tp->reps);
  uint32_t q = evict_ticks(tp, r, tp->quiet, (size_t)tp->nquiet, 5);   /* the quiet level is steady */
  tp->last_ticks = g;
  tp->last_quiet = q;
  return (uint64_t)g * 100 > (uint64_t)q * pct;
}

/* The ratio alone, for callers with thresholds of their own.  The quiet chase is measured again
   when its last reading is more than QUIET_FRESH_US old: it is two thirds of a test's reads, and
   it moves with the core's clock over milliseconds, not microseconds. */
#define QUIET_FRESH_US 200
static uint32_t timing_ratio(ca_probe_t* p, void* r, void* const* pages, size_t n, int reps) {
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  tp->base.tests++;
  uint32_t g = evict_ticks(tp, r, pages, n, reps);
  uint64_t now = _ca_ticks();
  if (tp->quiet_at == 0 || now - tp->quiet_at > (uint64_t)(_ca_ticks_per_us() * QUIET_FRESH_US)) {
    tp->quiet_median = evict_ticks(tp, r, tp->quiet, (size_t)tp->nquiet, 5);
    tp->quiet_at = _ca_ticks();
  }
  tp->last_ticks = g;
  tp->last_quiet = tp->quiet_median;
  return tp->quiet_median ? (uint32_t)((uint64_t)g * 100 / tp->quiet_median) : 0;
}

static bool timing_evicts(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  return evicts_above(tp, r, pages, n, tp->ratio_pct);
}

/* Most of R evicted: the chase reads 4/5 of what eviction sets do to their references now
   (measured on a Zen 5 L2 while sets read 200-220%: at the plain rule 38% of the pages a 1/8
   pool took were another colour's, their own colour's set reading higher; at 165-185% none of
   240 were) */
static bool timing_evicts_fully(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  return evicts_above(tp, r, pages, n, tp->full_pct > tp->ratio_pct ? tp->full_pct : tp->ratio_pct);
}

/* Clearly evicted: what an eviction-set search asks of a group (evset.c).  At the plain rule, a
   group of pages that each share only part of R's sets can add up to an eviction and not be
   reducible to a set: on the Zen 5 host 36-44% of the reductions stopped above 16 pages, no
   group of them essential, and most set builds failed (docs/colours.md).  4/5 of the way up to
   what sets (or, before there are any, the stream) do to R, but at most CA_CLEAR_MARGIN above
   the rule: sets read about 210% or 290% here, switching every few seconds, and at 4/5 of a
   high reading the low state never cleared it (2 processes in 16 found no set in 20 s). */
#define CA_CLEAR_MARGIN 30

/* what streaming the level did to R's chase, in % of the quiet chase (0: not measured) */
static uint32_t stream_pct(const ca_timing_probe_t* tp) {
  return tp->hit_ticks ? (uint32_t)((uint64_t)tp->miss_ticks * 100 / tp->hit_ticks) : 0;
}

static uint32_t clear_for(uint32_t effect, uint32_t rule) {
  uint32_t c = 100 + (effect > 100 ? (effect - 100) * 4 / 5 : 0);
  return c < rule ? rule : c > rule + CA_CLEAR_MARGIN ? rule + CA_CLEAR_MARGIN : c;
}

static bool timing_evicts_clearly(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  return evicts_above(tp, r, pages, n, tp->clear_pct > tp->ratio_pct ? tp->clear_pct : tp->ratio_pct);
}

/* The decision ratio for an eviction effect of r% of the quiet chase: halfway up, and never
   above 150%.  Measured on a 16-way Zen 5 L2 over a minute (quiet pages pushing R out of L1):
   groups that leave R in the level read 95-112% of the quiet chase (15 same-colour pages
   100-108%, 12 of them up to 137% through L1 effects), an eviction set 208-300%, switching
   between ~210% and ~290% every few seconds (the L2 latency follows the core clock, the L3's
   does not), the initial stream 210-290%.  Halfway up a high reading (190%) would call half
   the low-state evictions "not evicting", so the ratio is capped where both states clear it. */
static uint32_t rule_for(uint32_t r) {
  uint32_t half = 100 + (r > 100 ? (r - 100) / 2 : 0);
  return half < 150 ? half : 150;
}

/* What known eviction sets do to their references: the median over sets of each set's median
   chase after it, in % of the quiet chase. */
static uint32_t set_effect(ca_timing_probe_t* tp, void* const* refs, void* const (*sets)[CA_WAYS_MAX], size_t n, size_t ways) {
  uint32_t ratio[16];
  for (size_t i = 0; i < n; i++) {
    uint32_t v[9];
    timing_prepare(&tp->base, refs[i]);
    for (int k = 0; k < 9; k++) {
      uint32_t g = evict_ticks(tp, refs[i], sets[i], ways, tp->reps), q = evict_ticks(tp, refs[i], tp->quiet, (size_t)tp->nquiet, 5);
      v[k] = q ? (uint32_t)((uint64_t)g * 100 / q) : 0;
    }
    ratio[i] = median_u32(v, 9);
  }
  return median_u32(ratio, (int)n);
}

/* How often a test reads its group.  An L2 whose replacement spares a line just used keeps
   part of R through two reads of its eviction set: on a Zen 1 L2 (8-way) sets read twice took
   R's chase to 145-154% of the quiet one, six times to 175-184%, about what streaming the
   whole level does, and with two reads most set builds failed and two calibrations agreed on
   22-62% of pages.  The fewest reads that reach 7/8 of the effect of eight are kept (each
   read costs a group's time; two served on the Zen 3-5 machines). */
static void choose_passes(ca_timing_probe_t* tp, void* const* refs, void* const (*sets)[CA_WAYS_MAX], size_t n, size_t ways) {
  static const int tries[] = { 2, 3, 4, 6 };
  tp->passes = 8;
  uint32_t most = set_effect(tp, refs, sets, n, ways);
  for (size_t t = 0; t < sizeof tries / sizeof tries[0]; t++) {
    tp->passes = tries[t];
    uint32_t r = set_effect(tp, refs, sets, n, ways);
    if (most <= 100 || (r > 100 && (r - 100) * 8 >= (most - 100) * 7)) break;
    tp->passes = 8;
  }
  tp->passes_chosen = true;
}

/* Re-place the rule on what known eviction sets do to their references (the median of a few
   sets' effects), or what the initial stream did if that is less; the first time, choose how
   often a test reads its group. */
static void timing_recalibrate(ca_probe_t* p, void* const* refs, void* const (*sets)[CA_WAYS_MAX], size_t n, size_t ways) {
  ca_timing_probe_t* tp = (ca_timing_probe_t*)p;
  /* no sets (they were just dropped): nothing to measure, the rule stays.  The median of no
     readings was stack garbage, up to 4e9 %: 5 of 45 make bench processes kept it as the best
     the sets had done, and their elimination never trusted a test again */
  if (n == 0) return;
  if (n > 16) n = 16;
  if (!tp->passes_chosen) choose_passes(tp, refs, sets, n, ways);
  uint32_t r = set_effect(tp, refs, sets, n, ways);
  tp->set_ratio_pct = r;
  tp->full_pct = 100 + (r > 100 ? (r - 100) * 4 / 5 : 0);
  uint32_t stream = stream_pct(tp);
  if (stream != 0 && stream < r) r = stream;
  if (r >= 140) tp->ratio_pct = rule_for(r);                 /* clearly apart */
  tp->clear_pct = clear_for(tp->set_ratio_pct, tp->ratio_pct);
}

/* Measure the two levels and set the threshold.  R and a few quiet pages come from a scratch
   mapping; "evicted" streams four times the level's size.  False when the two cannot be told
   apart (the level is not measurable here).  With level_bytes 0 the stream is left out (4 MiB
   of a process's peak RSS on a 1 MiB L2): known eviction sets will place the rule (recalibrate). */
bool _ca_probe_timing_init(ca_timing_probe_t* tp, size_t level_bytes, uint32_t l1_ways) {
#if !defined(__x86_64__)
  (void)tp; (void)level_bytes; (void)l1_ways;
  return false;
#else
  uint64_t rng = 0x9E3779B97F4A7C15ull;                 /* the same order in every process */
  for (int i = 0; i < LINES_PER_PAGE; i++) line_order[i] = (uint8_t)i;
  for (int i = LINES_PER_PAGE - 1; i > 0; i--) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    int j = (int)(rng % (uint64_t)(i + 1));
    uint8_t t = line_order[i]; line_order[i] = line_order[j]; line_order[j] = t;
  }
  tp->base.evicts = timing_evicts;
  tp->base.prepare = timing_prepare;
  tp->base.recalibrate = timing_recalibrate;
  tp->base.evicts_fully = timing_evicts_fully;
  tp->base.evicts_clearly = timing_evicts_clearly;
  tp->base.ratio = timing_ratio;
  tp->quiet_at = 0;
  tp->base.tests = 0;
  tp->reps = 7;
  tp->passes = 4;              /* until the first sets show how many reads evict (choose_passes) */
  tp->passes_chosen = false;
  /* R and the quiet pages live apart from the streamed region: right after it, the hardware
     prefetcher following the stream would pull R back in and the "evicted" level would read low */
  size_t stream_bytes = 4 * level_bytes;
  /* the quiet pages must push R out of L1, or the quiet chase reads L1 and a group that only
     evicts R from L1 to the level looks like an eviction (a 12-way L1 with 9 quiet pages: 12
     same-colour pages of a 16-way L2 read as "evicted" half the time) */
  size_t quiet = (size_t)(l1_ways > 0 ? l1_ways : 8) + 4;
  if (quiet < 9) quiet = 9;
  if (quiet > CA_QUIET_MAX) quiet = CA_QUIET_MAX;
  tp->nquiet = (int)quiet;
  /* ... and must lie apart: 16 adjacent pages read 5-30% slower on R than 16 scattered ones
     (which is what groups of pool pages are); 8 pages apart they read alike */
  size_t stride = 8, span = (1 + quiet * stride) * CA_OS_PAGE;
  if (tp->scratch != NULL) _ca_os_unmap(tp->scratch, tp->scratch_len);   /* measured before */
  tp->scratch = NULL;
  uint8_t* mem = stream_bytes ? _ca_os_map(stream_bytes) : NULL;
  uint8_t* r = _ca_os_map(span);                    /* R, then the quiet pages (kept, touched) */
  if ((stream_bytes && mem == NULL) || r == NULL) {
    if (mem) _ca_os_unmap(mem, stream_bytes);
    if (r) _ca_os_unmap(r, span);
    return false;
  }
  tp->scratch = r;
  tp->scratch_len = span;
  if (mem) memset(mem, 1, stream_bytes);
  memset(r, 1, CA_OS_PAGE);
  for (size_t i = 0; i < quiet; i++) {
    tp->quiet[i] = r + (1 + i * stride) * CA_OS_PAGE;
    memset(tp->quiet[i], 1, CA_OS_PAGE);
  }
  timing_prepare(&tp->base, r);
  /* a noisy moment (the program itself streaming memory on the other core, say) can bring the
     two levels together for a while: measure again, for a few seconds, before giving up (with
     three tries 50 ms apart, 1 process in 20 here ran without colours) */
  bool apart = mem == NULL;
  if (apart) {
    uint32_t hit[41];
    for (int k = 0; k < 41; k++) hit[k] = evict_ticks(tp, r, tp->quiet, quiet, tp->reps);
    tp->hit_ticks = median_u32(hit, 41);
    tp->miss_ticks = 0;
  }
  for (int attempt = 0; attempt < 10 && !apart; attempt++) {
    if (attempt > 0) {
      struct timespec pause = { 0, 300000000 };
      nanosleep(&pause, NULL);
    }
    uint32_t hit[41], miss[41];
    for (int k = 0; k < 41; k++) hit[k] = evict_ticks(tp, r, tp->quiet, quiet, tp->reps);
    for (int k = 0; k < 41; k++) {
      chase(r);
      chase(r);
      for (size_t off = 0; off < stream_bytes; off += 64) (void)*(volatile uint8_t*)(mem + off);
      uint64_t t0 = _ca_ticks();
      void* s = chase(r);
      miss[k] = (uint32_t)(_ca_ticks() - t0) + (s == NULL);
    }
    tp->hit_ticks = median_u32(hit, 41);
    /* beyond the L2 lies more than one level (an L3 shared with other guests, memory): the
       fastest quarter of the evicted chases is the nearest of them, the one to tell from the L2 */
    median_u32(miss, 41);
    tp->miss_ticks = miss[41 / 4];
    apart = tp->miss_ticks > tp->hit_ticks + tp->hit_ticks / 2;   /* at least 1.5x apart */
  }
  uint32_t stream = stream_pct(tp);
  tp->ratio_pct = rule_for(stream ? stream : 200);
  tp->threshold = (uint32_t)((uint64_t)tp->hit_ticks * tp->ratio_pct / 100);
  tp->set_ratio_pct = 0;
  tp->full_pct = 0;
  tp->clear_pct = clear_for(stream, tp->ratio_pct);
  if (mem) _ca_os_unmap(mem, stream_bytes);
  return apart;
#endif
}
