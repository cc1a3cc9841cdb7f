/* The sampling count (pages sampled per chunk), the pair rule, and the timed reload that tells
   an L2 hit from a miss (counted as interference: monitor.c says why it does not decide). */
#define _GNU_SOURCE
#include "mon.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ---- sampling count: ceil(s^0.65) without libm: the least k with k^20 >= s^13 ------------- */
static double pow20(double x) { double x2 = x * x, x4 = x2 * x2, x5 = x4 * x, x10 = x5 * x5; return x10 * x10; }
static double pow13(double x) { double x2 = x * x, x4 = x2 * x2, x8 = x4 * x4; return x8 * x4 * x; }

uint32_t _ca_monitor_samples(size_t pages) {
  if (pages <= 1) return (uint32_t)pages;
  double target = pow13((double)pages);
  uint32_t lo = 1, hi = pages < MAX_SAMPLES ? (uint32_t)pages : MAX_SAMPLES;
  if (pow20(hi) < target) return hi;                   /* capped */
  while (lo < hi) { uint32_t mid = (lo + hi) / 2; if (pow20(mid) < target) lo = mid + 1; else hi = mid; }
  return lo;
}

/* ---- the pair rule (pure: tests drive it) ------------------------------------------------- */
bool _ca_monitor_judge(uint64_t between, size_t stride, size_t l2) {
  return between + stride <= l2;
}

/* ---- the timed reload ---------------------------------------------------------------------- */
static unsigned chase_line(unsigned line, unsigned i) { return (line + i * 9) & 63; }

/* A dependent chase over CHASE_LINES lines from `line`; the translation is warmed first by a
   load from a line outside the chase (a fault or mprotect has just flushed it). */
uint64_t _ca_mon_chase(const uint8_t* page, unsigned line) {
  uintptr_t dep = *(const volatile uint8_t*)(page + (((line + 4) & 63) << 6) + 32) & 0;
  uint64_t t0 = _ca_ticks();
  for (unsigned i = 0; i < CHASE_LINES; i++) {
    uint64_t v = *(const volatile uint64_t*)(page + ((uintptr_t)chase_line(line, i) << 6 | dep));
    __asm__ volatile("and $0, %0" : "+r"(v));          /* 0, but only once the load is done */
    dep = (uintptr_t)v;
  }
  return _ca_ticks() - t0 + dep;
}

/* the lines the next chase will time, loaded at a reference */
void _ca_mon_touch_lines(const uint8_t* page, unsigned line) {
  for (unsigned i = 0; i < CHASE_LINES; i++) (void)*(const volatile uint8_t*)(page + (chase_line(line, i) << 6));
}

static void pinned_measure(void);

static uint32_t median(uint32_t* v, int n) {
  for (int i = 1; i < n; i++) for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { uint32_t t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
  return v[n / 2];
}


static uint32_t isqrt(uint64_t v) {
  uint64_t r = 0;
  for (uint64_t b = 1ull << 62; b != 0; b >>= 2) {
    if (v >= r + b) { v -= r + b; r = (r >> 1) + b; } else r >>= 1;
  }
  return (uint32_t)r;
}

/* Where a reload from beyond the L2 begins: the geometric middle of the L2's reading and the L3's
   fastest.  On the Xeon the L3's pages read 360-820 ticks, the L2's 130-240, and halfway to the
   L3's median (380-480) read a quarter of a 4 MiB stream's reloads as the L2's, more or less from
   process to process.  0: the levels are not apart, the L3's fastest within 1.2x of the L2's (a
   loud second on the Xeon read 618 against 644, put every L3 reload of art4's stream in the L2,
   and its profile found 1 run of 76; the L3's median alone was apart, 792). */
uint32_t _ca_monitor_l2_threshold(uint32_t hit, uint32_t l3_low) {
  return l3_low > hit + hit / 5 ? isqrt((uint64_t)hit * l3_low) : 0;
}

/* Where a reload from memory begins, from the chase's fastest reading of the L3 (the second of
   nine: the other tenants only ever add) and flushed lines' median.  A page of a stream beyond
   the L3 reads about 3x the L3 on Zen 4 (the L3 keeps some of its lines; flushed lines read
   12-13x), and as slow as flushed lines on the Intel Xeon (L3 pages 440-820 ticks, beyond it 1400-2600, flushed about 2000).  So: 3x the
   L3, at most the geometric middle of L3 and memory, and at most a quarter of memory's time,
   which keeps a loud L3 reading on Zen (260-858 ticks from process to process) from taking such
   a stream for the L3's.  That cap is dropped when it would put the line within 1.5x of the L3's
   fastest reading: there the L3 itself is slow (the Xeon), and the cap read its pages as memory
   at random.  0: no threshold (the levels are not apart). */
uint32_t _ca_monitor_mem_threshold(uint32_t l3_low, uint32_t mem) {
  if (l3_low == 0 || mem <= 2 * (uint64_t)l3_low) return 0;
  uint64_t t = 3 * (uint64_t)l3_low, mid = isqrt((uint64_t)l3_low * mem), cap = mem / 4;
  if (mid < t) t = mid;
  if (cap < t && 2 * cap >= 3 * (uint64_t)l3_low) t = cap;
  return (uint32_t)t;
}

/* Chase times with the lines in the L2, after streaming twice the L2 over them (the next level
   holds them), and flushed (memory), measured on one CPU (an L2 is private to its core). */
static void measure(void) {
  size_t l2 = M.l2 != 0 ? M.l2 : _ca_machine_l2();     /* NightWatch off: the monitor never started */
  size_t bytes = 2 * l2 + 2 * CA_OS_PAGE;
  uint8_t* buf = _ca_os_map(bytes);
  if (buf == NULL) return;
  memset(buf, 1, bytes);
  uint8_t* page = buf;
  uint8_t* stream = buf + CA_OS_PAGE;
  enum { R = 9 };
  uint32_t hit[R], miss[R], mem[R];
  volatile uint8_t sink = 0;
  for (int r = 0; r < R; r++) {
    _ca_mon_touch_lines(page, (unsigned)r);
    for (size_t o = 0; o < 128 * 1024; o += 64) sink += stream[o];        /* out of the L1 */
    hit[r] = (uint32_t)_ca_mon_chase(page, (unsigned)r);
    for (size_t o = 0; o < 2 * l2; o += 64) stream[o]++;
    miss[r] = (uint32_t)_ca_mon_chase(page, (unsigned)r);
    for (unsigned o = 0; o < CA_OS_PAGE; o += 64) __asm__ volatile("clflush (%0)" :: "r"(page + o) : "memory");
    __asm__ volatile("mfence" ::: "memory");
    mem[r] = (uint32_t)_ca_mon_chase(page, (unsigned)r);
  }
  (void)sink;
  _ca_os_unmap(buf, bytes);
  (void)median(hit, R);                                /* for its sort */
  uint32_t h = hit[1];                                 /* the second fastest, as the L3's: a loud hit
                                                          reading (946-1388 ticks, not 170-240) read
                                                          every reload as the L2's */
  uint32_t l3 = median(miss, R), l3_low = miss[1];     /* sorted by median(): the second fastest */
  uint32_t m = median(mem, R), t = _ca_monitor_l2_threshold(h, l3_low);
  uint32_t mt = t != 0 ? _ca_monitor_mem_threshold(l3_low, m) : 0;
  /* a measurement in a quieter moment than the one kept replaces it whole (its readings belong
     together): the L2's reading is a floor the other tenants only ever add to */
  M.measures++;
  if (M.mem_threshold != 0 && (mt == 0 || h >= M.hit_ticks)) return;
  M.hit_ticks = h;
  M.miss_ticks = l3;
  M.mem_ticks = m;
  M.l3_low_ticks = l3_low;
  M.threshold = t;
  M.mem_threshold = mt;
}

/* Where the lines of a page about to be touched are: a timed reload (in the faulting thread's
   handler, on its core) against the thresholds. */
int _ca_monitor_reload(const void* page, unsigned line, uint32_t* ticks) {
  if (!atomic_load_explicit(&M.measured, ca_acquire) || M.mem_threshold == 0) return 0;
  uint64_t t = _ca_mon_chase((const uint8_t*)page, line & 63);
  *ticks = t > UINT32_MAX ? UINT32_MAX : (uint32_t)t;
  return t <= M.threshold ? 2 : t <= M.mem_threshold ? 3 : 4;
}

/* ROCS's worker, each window: measured once, then REFINE times more 200 ms apart, the quietest
   kept (a loud first reading of the L2, 372-500 ticks against 174-226, put its threshold among
   the L3's reloads, and the profile of art4 found 1-3 runs of 65-76 in 5 processes of 29 on the
   Intel Xeon); and again while a loud moment left no memory threshold (ROCS would read
   nothing: 2 processes of 20, and 1 of 7 after five tries a second apart), a second later,
   then 2, 4 ... 64 s apart: a measure costs a few ms */
#define REFINE 4
void _ca_monitor_measure(void) {
  static uint64_t last, wait = 1000;
  if (!atomic_load_explicit(&M.measured, ca_acquire)) { _ca_mon_calibrate(); last = _ca_clock_ms(); return; }
  if (M.measures <= REFINE && _ca_clock_ms() - last >= 200) { last = _ca_clock_ms(); pinned_measure(); return; }
  if (M.mem_threshold != 0 || _ca_clock_ms() - last < wait) return;
  if (wait < 64000) wait *= 2;
  last = _ca_clock_ms();
  pinned_measure();
}

void _ca_mon_calibrate(void) {
  static _Atomic(bool) begun;                          /* the monitor thread or ROCS's worker: once */
  if (atomic_exchange(&begun, true)) return;
  pinned_measure();
  atomic_store_explicit(&M.measured, true, ca_release);
}

/* measure() on this thread's CPU (the L2 is the core's) */
static void pinned_measure(void) {
  cpu_set_t was, one;
  bool pinned = sched_getaffinity(0, sizeof was, &was) == 0;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  if (pinned) pinned = sched_setaffinity(0, sizeof one, &one) == 0;
  measure();
  if (pinned) sched_setaffinity(0, sizeof was, &was);
}

