/* lockset.h: what the lock-set kernels share (bench/locksets.py; lockhash.c, water.c, ocean.c,
   pipeline.c, lockloop.c): the L2's size from sysfs, option parsing, per-thread counters and the
   main thread's report of one rate per second of run time:

     SECOND <k> <metric>=<per second, in second k>
     (the kernel then prints RESULT <kernel> ... <metric>_from3s=<median of the seconds from the 3rd on>)

   The workers count what they did in their own counter (a cache line each); the main thread
   only sleeps to each second's end and reads the counters, so it takes no CPU from them. */
#ifndef LOCKSET_H
#define LOCKSET_H
#include "../src/bench.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* the L2's size: cpu0's level-2 Data or Unified cache in sysfs (no guess: without it, no run) */
static inline size_t l2_sysfs_bytes(void) {
  for (int i = 0; i < 32; i++) {
    char path[96], level[16] = "", type[32] = "", size[32] = "";
    const char* field[3] = { "level", "type", "size" };
    char* into[3] = { level, type, size };
    bool ok = true;
    for (int f = 0; f < 3 && ok; f++) {
      snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, field[f]);
      FILE* fp = fopen(path, "r");
      ok = fp && fscanf(fp, "%31s", into[f]) == 1;
      if (fp) fclose(fp);
    }
    if (!ok || strcmp(level, "2") || (strcmp(type, "Data") && strcmp(type, "Unified"))) continue;
    char* end;
    unsigned long v = strtoul(size, &end, 10);
    if (*end == 'K') v <<= 10; else if (*end == 'M') v <<= 20;
    if (v >= 64 << 10) return v;
  }
  fail("no level-2 Data or Unified cache in /sys/devices/system/cpu/cpu0/cache/index*");
  return 0;
}

/* --name=<number>: true (and *v set) when `a` is that option */
static bool opt_num(const char* a, const char* name, double* v) {
  size_t n = strlen(name);
  if (strncmp(a, name, n)) return false;
  char* end;
  *v = strtod(a + n, &end);
  if (*end || end == a + n) fail("%s needs a number", name);
  return true;
}

/* a worker's count, alone on its cache line (no false sharing between the counters) */
typedef struct { _Alignas(64) _Atomic uint64_t n; } counter_t;

static atomic_bool stop;                       /* set by report() when the run time is over */

static inline void publish(counter_t* c, uint64_t n) { atomic_store_explicit(&c->n, n, memory_order_relaxed); }
static inline bool stopped(void) { return atomic_load_explicit(&stop, memory_order_relaxed); }

/* Called by the main thread once the workers are ready: prints each second's rate (the sum of
   the counters' growth over the second's real length), then sets `stop`.  Returns the median of
   the seconds from the 3rd on (all of them in a shorter run, as hotfit does). */
static double report(const char* metric, counter_t* c, int nc, int seconds) {
  double* per = check_alloc(calloc((size_t)seconds, sizeof *per), (size_t)seconds * sizeof *per);
  uint64_t start = now_ns(), t0 = start, before = 0;
  for (int s = 0; s < seconds; s++) {
    uint64_t end = start + (uint64_t)(s + 1) * 1000000000u;
    struct timespec ts = { (time_t)(end / 1000000000u), (long)(end % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
    uint64_t sum = 0, t = now_ns();
    for (int i = 0; i < nc; i++) sum += atomic_load_explicit(&c[i].n, memory_order_relaxed);
    per[s] = (double)(sum - before) * 1e9 / (double)(t - t0);
    before = sum;
    t0 = t;
    printf("SECOND %d %s=%.0f\n", s + 1, metric, per[s]);
    fflush(stdout);
  }
  atomic_store(&stop, true);
  int from = seconds >= 3 ? 2 : 0;
  qsort(per + from, (size_t)(seconds - from), sizeof *per, cmp_double);
  double m = per[from + (seconds - from) / 2];
  free(per);
  return m;
}

/* the common options: --pct=P (percent of the L2) --seconds=S --threads=T, as the kernel takes
   them, and one of its own (`extra`, "--name=", or NULL) */
typedef struct { double pct, seconds, threads, extra; } opts_t;

static void parse(int argc, char** argv, opts_t* o, bool pct, bool threads, const char* extra, const char* usage) {
  for (int i = 1; i < argc; i++) {
    if ((pct && opt_num(argv[i], "--pct=", &o->pct)) || opt_num(argv[i], "--seconds=", &o->seconds) ||
        (threads && opt_num(argv[i], "--threads=", &o->threads)) || (extra && opt_num(argv[i], extra, &o->extra)))
      continue;
    fprintf(stderr, "usage: %s %s\n", bench_name, usage);
    exit(2);
  }
  if (o->seconds < 1 || o->seconds > 3600 || o->seconds != (int)o->seconds || o->pct <= 0 || o->pct > 400 ||
      o->threads < 1 || o->threads > 64 || o->threads != (int)o->threads)
    fail("bad argument (%s)", usage);
}

#endif
