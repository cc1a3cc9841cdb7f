/* l3share: are the L2's page colours the shared L3's too?  If so, a stream confined to 1/8 of
   the L2 colours is confined to 1/8 of the L3's sets as well, eight times as dense there, and a
   co-running program's lines in those colours are evicted from the L3.
   Not part of the benchmark's table (colour.py builds it, never runs it): the tool behind
   docs/nightwatch.md's "The co-run: the L2's colours are the L3's".
   One process, so that both threads see the same colour numbering: thread P (CPU 0) streams a
   2 MiB buffer, one line in eight written then read, over and over; thread V (CPU 1) chases
   two victims of 1 MiB each (64-byte lines in one random cycle, beyond its own 1 MiB L2
   together, so served by the L3), "in" from the first eighth of the colours and "out" from the
   other 7/8, and times every pass over each.
   Usage: l3share none|open|confined [SECONDS=2]
     none      no stream (the victims alone)
     open      the stream in ordinary memory
     confined  the stream from the first eighth (as NightWatch places a polluter)
   Output: RESULT l3share mode=.. in_ns=<median ns per load over passes> out_ns=.. passes=..
   Needs chromalloc (linked with -lchromalloc) and CPUs 0 and 1. */
#define _GNU_SOURCE
#include "../src/bench.h"
#include <chromalloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include "coloured.h"

#define VICTIM (1u << 20)
#define STREAM (2u << 20)
#define PASSES 4096

static atomic_int stop;
static uint64_t* stream;

static void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  if (pthread_setaffinity_np(pthread_self(), sizeof s, &s) != 0) fail("cannot run on CPU %d", cpu);
}

static void* streamer(void* arg) {
  (void)arg;
  pin(0);
  volatile uint64_t sink = 0;
  for (uint64_t x = 1; !atomic_load_explicit(&stop, memory_order_relaxed); x++) {
    for (size_t i = 0; i < STREAM / 8; i += 8) stream[i] = x + i;
    uint64_t s = 0;
    for (size_t i = 0; i < STREAM / 8; i += 8) s += stream[i];
    sink += s;
  }
  return NULL;
}

/* the lines of b in one random cycle */
static void cycle(unsigned char* b, size_t lines, uint64_t seed) {
  uint32_t* perm = check_alloc(malloc(lines * sizeof *perm), lines * sizeof *perm);
  rng_t r = rng_seed(seed);
  for (size_t i = 0; i < lines; i++) perm[i] = (uint32_t)i;
  for (size_t i = lines - 1; i > 0; i--) {
    size_t j = rng_range(&r, 0, i);
    uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  for (size_t i = 0; i < lines; i++) *(unsigned char**)(b + perm[i] * 64) = b + perm[(i + 1) % lines] * 64;
  free(perm);
}

static double chase(unsigned char* b, size_t lines) {
  uint64_t t = now_ns();
  unsigned char* p = b;
  for (size_t i = 0; i < lines; i++) p = *(unsigned char* volatile*)p;
  return (double)(now_ns() - t) / (double)lines;
}

int main(int argc, char** argv) {
  bench_name = "l3share";
  const char* mode = argc > 1 ? argv[1] : "";
  bool confined = strcmp(mode, "confined") == 0, open = strcmp(mode, "open") == 0;
  if (!confined && !open && strcmp(mode, "none") != 0) fail("usage: l3share none|open|confined [SECONDS]");
  double secs = argc > 2 ? atof(argv[2]) : 2.0;
  if (!(secs > 0)) fail("SECONDS must be > 0");
  unsigned char* in = check_alloc(coloured(VICTIM, 0, 1, VICTIM + (confined ? STREAM : 0)), VICTIM);
  unsigned char* out = check_alloc(coloured(VICTIM, 1, 8, VICTIM), VICTIM);
  stream = check_alloc(confined ? coloured(STREAM, 0, 1, VICTIM + STREAM) : malloc(STREAM), STREAM);
  memset(stream, 1, STREAM);
  cycle(in, VICTIM / 64, 1);
  cycle(out, VICTIM / 64, 2);
  pthread_t t;
  if ((confined || open) && pthread_create(&t, NULL, streamer, NULL) != 0) fail("pthread_create");
  pin(1);
  static double tin[PASSES], tout[PASSES];
  int n = 0;
  for (uint64_t end = now_ns() + (uint64_t)(secs * 1e9); n < PASSES && now_ns() < end; n++) {
    tin[n] = chase(in, VICTIM / 64);
    tout[n] = chase(out, VICTIM / 64);
  }
  atomic_store(&stop, 1);
  if (confined || open) pthread_join(t, NULL);
  qsort(tin, (size_t)n, sizeof *tin, cmp_double);
  qsort(tout, (size_t)n, sizeof *tout, cmp_double);
  printf("RESULT l3share mode=%s in_ns=%.2f out_ns=%.2f passes=%d\n", mode, tin[n / 2], tout[n / 2], n);
  return 0;
}
