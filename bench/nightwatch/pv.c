/* pv: polluter/victim workloads for the NightWatch policy (bench/nightwatch.py).
   A *victim* is hot data (a structure looked up again and again, small enough for the L2); a
   *polluter* is a chunk (>= 4 KiB; in messages and packets many from one context) whose data is
   streamed once.  NightWatch learns from the allocation context (call stack) of a chunk whether
   it is a polluter and gives new chunks of polluter contexts pages of 1/8 of the L2 colours, so
   that streaming them evicts little of the victim.  Every victim phase is a dependent chase
   (each lookup needs the previous one's result), timed on its own with clock_gettime, so that
   its ns per lookup shows whether the victim's lines were still in the L2.

   Usage: pv WORKLOAD [--key=value ...] [--no-polluter]
     frames    one victim array of 64-byte nodes (--victim-kib, default 192), allocated once;
               per frame (--frames, 1000) a buffer (--buf-kib, 1536) is malloc'd in its own
               function, written, read once (summed) and freed, then one lap of random lookups
               through the victim (each node once, in a random cyclic order) is timed.
     requests  a hash index (buckets + one malloc'd 64-byte node per key, --victim-kib of
               nodes, default 128) as the victim; per request (--frames, 1500) a body (768 or
               1024 KiB alternately) and a response (768 KiB) are allocated through one wrapper,
               req_alloc(), from two call sites and streamed once, and a 32 KiB session scratch
               from a third call site of the same wrapper is reused heavily (8 passes); then one
               lap of chained lookups in the index (each key once) is timed.
     messages  small-chunk pollution: the index of requests (--victim-kib of nodes, default 128)
               as the victim; per frame (--frames, 1500) 2 KiB messages, --buf-kib of them in all
               (default 1536: 768 messages, 3x the L2), each malloc'd by msg_alloc() from one call
               site and written fully, then all read once (summed); then one lap of chained
               lookups in the index is timed, and the messages are freed at the end of the frame.
     packets   as messages, with 32 KiB chunks (a page or more, below the L2: judged in groups
               as small chunks are, and placed one by one): 48 packets per frame by default,
               3x the L2.
     neutral   no polluter: per iteration (--frames, 2400) four 32 KiB work buffers reused over
               8 passes, plus 32 scratch chunks of 8 KiB each written and read 4 times; the
               passes over the work buffers are the timed phase (ns per 64-byte line).
     victims   no polluter: hot tables of 16 KiB (--victim-kib / 16 of them, default 128 KiB)
               from 4 call sites, one chase through all of them per round (--frames, 20000),
               and one table re-allocated (copied into a new chunk, old one freed) per round.
     polluter  co-running: frames' polluter alone (--buf-kib, default 1536 as frames'): 20 buffers,
               the settle (--settle-ms), then --ready-file=PATH is created and the polluter
               goes on for --seconds (default 4); its "victim_ns" is ns per streamed line.
     victim    co-running: frames' victim alone (--victim-kib, default 1024 here: beyond the L2,
               inside what the shared L3 holds for us) for --seconds.
   Sizes scale with the L2 of the machine (sysfs): the defaults above are for an L2 of 512 KiB,
   and every size is multiplied by L2 / 512 KiB (counts stay; a message stays 2 KiB, a small
   chunk, and their number scales instead), so that the victim fits the L2 and the polluter
   does not wherever this runs (2 MiB L2: frames' victim 768 KiB, buffer 6 MiB).  On the first
   machine (512 KiB, 8 ways, shared with the host's other hardware thread) a chase of 128-192 KiB
   alone ran at L2 speed, 256 KiB often did not; the index of requests takes more room than its
   nodes (glibc puts a 64-byte node in 80 bytes).
   --no-polluter (frames, requests, messages, packets): skip the polluter buffers: the victim alone, the
   best case.
   --confine (frames, under chromalloc): the frame buffer from the first 1/8 of the L2 colours,
   asked for with chromalloc_malloc_coloured: what restrictive mapping can do here at best.
   --protect (frames, under chromalloc): the victim array from the other 7/8 of the colours
   (with --confine: a pollute buffer as ROCS has it, where nothing else uses the polluter's
   colours; NightWatch's open mapping is ordinary memory, which has 1/8 of its pages there).
   --seed=N changes the data (and the checksum).
   --trace=FILE writes every frame's victim phase to FILE, one line each: frame number, start
   (CLOCK_MONOTONIC ns), ns per lookup and the CPU it ended on, so that a run can be lined up with chromalloc's
   NightWatch timeline (statistics: nightwatch.timeline, ms after start_monotonic_ns).
   --audit=R (frames, requests, messages, packets; x86-64): after the loop, R rounds of the
   polluter phase, each followed by timed reads of every victim line, print one AUDIT line: per
   4 KiB page of the victim, the share of its lines the polluter evicted from the L2 (see
   audit() below), so that a run can show whether some pages were left in the polluter's
   colours (those pages near 1) or the polluter reaches every page a little (all pages alike).
   --settle-ms=N (frames, requests, messages, packets, neutral, victims, polluter): sleep N ms after the first 20
   frames, which are then left out of the statistics, as is the sleep from total_s: the steady
   state of an allocator whose background work (chromalloc's colour worker) needs an idle
   moment.  Under chromalloc with NightWatch on (found with dlsym: chromalloc_option("nightwatch")
   == 1), the idle moment ends as soon as the restrictive colour set (1/8 of the L2) has a
   polluter chunk's worth of pages in stock (chromalloc_colours_prepare), at most N ms
   (messages, packets: a frame's chunks, which are all live at once; requests: a body and a
   response).

   Output, one line: RESULT <workload> victim_ns=<median over frames of ns per lookup>
     victim_ns_p10=.. victim_ns_p90=.. total_s=<the workload loop> victim_s=<timed phases>
     frames=<n> [near=<messages, packets: share of chunks allocated right next to the one before,
     within two chunk sizes>] checksum=<hex>
   The checksum depends on the workload, its options and the seed only (never on addresses), so
   it is the same under every allocator; the timed modes (polluter, victim) print checksum=na.
   --pin: pin the main thread to the CPU it starts on (off by default: threads an allocator starts
   later inherit the pin, and chromalloc's colour worker, which stocks the pages of restrictive
   chunks at nice 19, then shares one CPU with the busy benchmark and makes no progress). */
#include "../src/bench.h"
#include <dlfcn.h>
#include <sched.h>

#define NOINLINE __attribute__((noinline))

/* Allocation sites: each is a function of its own that counts its calls in its own slot, so
   that the compiler cannot fold two identical bodies into one (-O2 does identical code folding),
   which would merge their innermost return addresses.  bench/nightwatch.py maps the contexts in
   chromalloc's statistics back to these names with nm. */
enum { S_FRAME, S_VICTIM, S_REQ, S_NODE, S_BUCKETS, S_MSG, S_PKT, S_WORK, S_SCRATCH, S_TA, S_TB, S_TC, S_TD, S_N };
static unsigned long site_calls[S_N];
#define SITE(k) (site_calls[k]++)

/* ---- options ------------------------------------------------------------------------------ */

static long opt_victim_kib = -1, opt_buf_kib = -1, opt_frames = -1, opt_seed = 1;
static double opt_seconds = 4.0;
static int opt_no_polluter = 0, opt_pin = 0, opt_confine = 0, opt_protect = 0;
static long opt_settle_ms = 0;
static const char* opt_trace = NULL, *opt_ready_file = NULL;
static long opt_audit = 0;

static long parse_num(const char* s, const char* name, long min) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || *end || end == s || v < min) fail("--%s must be an integer >= %ld", name, min);
  return v;
}

static void parse_options(int argc, char** argv) {
  for (int i = 2; i < argc; i++) {
    const char* a = argv[i];
    const char* eq = strchr(a, '=');
    const char* v = eq ? eq + 1 : "";
    if (strcmp(a, "--no-polluter") == 0) opt_no_polluter = 1;
    else if (strcmp(a, "--pin") == 0) opt_pin = 1;
    else if (strcmp(a, "--confine") == 0) opt_confine = 1;
    else if (strcmp(a, "--protect") == 0) opt_protect = 1;
    else if (strncmp(a, "--trace=", 8) == 0 && v[0]) opt_trace = v;
    else if (strncmp(a, "--ready-file=", 13) == 0 && v[0]) opt_ready_file = v;
    else if (strncmp(a, "--audit=", 8) == 0) opt_audit = parse_num(v, "audit", 1);
    else if (strncmp(a, "--settle-ms=", 12) == 0) opt_settle_ms = parse_num(v, "settle-ms", 0);
    else if (strncmp(a, "--victim-kib=", 13) == 0) opt_victim_kib = parse_num(v, "victim-kib", 8);
    else if (strncmp(a, "--buf-kib=", 10) == 0) opt_buf_kib = parse_num(v, "buf-kib", 4);
    else if (strncmp(a, "--frames=", 9) == 0) opt_frames = parse_num(v, "frames", 1);
    else if (strncmp(a, "--seed=", 7) == 0) opt_seed = parse_num(v, "seed", 0);
    else if (strncmp(a, "--seconds=", 10) == 0) {
      char* end;
      opt_seconds = strtod(v, &end);
      if (*end || end == v || opt_seconds <= 0) fail("--seconds must be a positive number");
    } else fail("unknown option '%s'", a);
  }
}

/* L2 / 512 KiB, from sysfs (1 when it cannot be read) */
static size_t scale(void) {
  static size_t k;
  if (k) return k;
  k = 1;
  for (int i = 0; i < 8; i++) {
    char path[96], buf[32];
    long level = 0, kib = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    FILE* f = fopen(path, "r");
    if (!f) break;
    if (fgets(buf, sizeof buf, f)) level = strtol(buf, NULL, 10);
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (level != 2 || !(f = fopen(path, "r"))) continue;
    if (fgets(buf, sizeof buf, f)) kib = strtol(buf, NULL, 10);
    fclose(f);
    if (kib >= 512) k = (size_t)kib / 512;
  }
  return k;
}

/* the option, else the default for a 512 KiB L2 scaled to this machine's */
static long def(long v, long d) { return v < 0 ? d * (long)scale() : v; }
static long def_count(long v, long d) { return v < 0 ? d : v; }

/* ---- timing ------------------------------------------------------------------------------- */

typedef struct { double* v; uint64_t* at; int* cpu; size_t n, cap; double sum_s; } samples_t;

/* room for `n` samples up front: no allocation between the timed phases (with --trace, their
   start times too) */
static samples_t samples(size_t n) {
  samples_t s = { check_alloc(malloc(n * sizeof(double)), n * sizeof(double)), NULL, NULL, 0, n, 0 };
  if (opt_trace) {
    s.at = check_alloc(malloc(n * sizeof(uint64_t)), n * sizeof(uint64_t));
    s.cpu = check_alloc(malloc(n * sizeof(int)), n * sizeof(int));
  }
  return s;
}

/* a timed phase that took `ns` for `lookups`, ending now */
static void sample(samples_t* s, uint64_t ns, uint64_t lookups) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 1024;
    s->v = check_alloc(realloc(s->v, s->cap * sizeof *s->v), s->cap * sizeof *s->v);
    if (s->at) {
      s->at = check_alloc(realloc(s->at, s->cap * sizeof *s->at), s->cap * sizeof *s->at);
      s->cpu = check_alloc(realloc(s->cpu, s->cap * sizeof *s->cpu), s->cap * sizeof *s->cpu);
    }
  }
  if (s->at) { s->at[s->n] = now_ns() - ns; s->cpu[s->n] = sched_getcpu(); }
  s->v[s->n++] = (double)ns / (double)lookups;
  s->sum_s += (double)ns * 1e-9;
}

static void write_trace(const samples_t* s) {
  FILE* f = fopen(opt_trace, "w");
  if (!f) fail("--trace: cannot write %s: %s", opt_trace, strerror(errno));
  for (size_t i = 0; i < s->n; i++) fprintf(f, "%zu %llu %.3f %d\n", i, (unsigned long long)s->at[i], s->v[i], s->cpu[i]);
  if (fclose(f) != 0) fail("--trace: cannot write %s: %s", opt_trace, strerror(errno));
}

/* --settle-ms: after the first SETTLE_AT frames the program sleeps (an idle moment in which an
   allocator's background work can finish); the sleep is not part of total_s, and the frames
   before it are not part of the statistics. */
#define SETTLE_AT 20

/* chromalloc with NightWatch on: wait until its restrictive set holds `bytes`, at most ms */
static int settle_chromalloc(size_t bytes, long ms) {
  long (*option)(const char*) = (long (*)(const char*))dlsym(RTLD_DEFAULT, "chromalloc_option");
  int (*colours)(unsigned, unsigned, unsigned, unsigned) = (int (*)(unsigned, unsigned, unsigned, unsigned))dlsym(RTLD_DEFAULT, "chromalloc_colours");
  int (*prepare)(int, size_t, int) = (int (*)(int, size_t, int))dlsym(RTLD_DEFAULT, "chromalloc_colours_prepare");
  if (!option || !colours || !prepare || option("nightwatch") != 1) return 0;
  int id = colours(0, 0, 1, 8);
  if (id > 0) prepare(id, bytes + 4096, (int)ms);
  return 1;
}

static void settle(long frame, uint64_t* t0, size_t polluter_bytes) {
  if (opt_settle_ms > 0 && frame == SETTLE_AT) {
    uint64_t a = now_ns();
    if (!polluter_bytes || !settle_chromalloc(polluter_bytes, opt_settle_ms)) {
      struct timespec t = { opt_settle_ms / 1000, (opt_settle_ms % 1000) * 1000000L };
      while (nanosleep(&t, &t) != 0 && errno == EINTR) {}
    }
    *t0 += now_ns() - a;
  }
}

static size_t skipped(void) { return opt_settle_ms > 0 ? SETTLE_AT + 5 : 5; }

/* the first `skip` frames (cold caches, first touches) are not part of the statistics */
/* messages, packets: how often a chunk lies right after or before the one allocated before it
   (its address within two chunk sizes), over the frames in the statistics: an allocator that
   hands out neighbouring blocks one after another lets the streams run over whole pages */
static uint64_t near_hits, near_pairs;

static void report(const char* name, samples_t* s, size_t skip, double total_s, uint64_t checksum,
                   int has_checksum) {
  if (s->at) { write_trace(s); free(s->at); free(s->cpu); }
  size_t n = s->n > skip ? s->n - skip : 0;
  double* v = s->v + (s->n - n);
  double med = 0, p10 = 0, p90 = 0;
  if (n) {
    qsort(v, n, sizeof *v, cmp_double);
    med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    p10 = v[n / 10];
    p90 = v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
  }
  free(s->v);
  printf("RESULT %s victim_ns=%.3f victim_ns_p10=%.3f victim_ns_p90=%.3f total_s=%.4f victim_s=%.4f "
         "frames=%zu ", name, med, p10, p90, total_s, s->sum_s, s->n);
  if (near_pairs) printf("near=%.3f ", (double)near_hits / (double)near_pairs);
  if (has_checksum) printf("checksum=%016llx\n", (unsigned long long)checksum);
  else printf("checksum=na\n");
}

/* ---- --audit=R: which of the victim's pages does the polluter evict? -----------------------
   After the loop, R more rounds of the workload's polluter phase, each followed by two timed
   passes over the victim's lines in one random order (each line once per pass, one load between
   two rdtscp): the first finds what the polluter left of the victim, the second (the victim just
   read) what the L2 gives at that moment.  A load is *slow* when it reads above the median of a
   pass over the hot victim made before the rounds by more than half a tick step of this
   machine's TSC (an L2 hit reads 70-80 ticks here, the L3 one step more, DRAM several).  Per
   4 KiB page, `evicted` is the share of its loads slow in the first pass less the share slow in
   the second, over all its lines and rounds: about 1 for a page whose lines the polluter always
   evicts, about 0 for a page it leaves alone.  With the polluter confined to 1/8 of the L2's
   colours (NightWatch's restrictive mapping) and the victim protected, no page should be
   evicted: a page that is was left in the polluter's colours, and every page partly evicted
   means that the polluter (or the host) reaches beyond them.  This is the colour test as the
   program sees it, with none of chromalloc's eviction sets involved. */
typedef uint64_t (*pollute_fn)(uint64_t round);
typedef struct { uintptr_t page; size_t line; } aline_t;

static int cmp_aline(const void* a, const void* b) {
  const aline_t *x = a, *y = b;
  return x->page < y->page ? -1 : x->page > y->page ? 1 : (x->line > y->line) - (x->line < y->line);
}

#if defined(__x86_64__)
#include <x86intrin.h>
static inline uint64_t timed_load(const void* p) {
  unsigned aux;
  uint64_t a = __rdtscp(&aux);
  _mm_lfence();
  (void)*(const volatile uint64_t*)p;
  uint64_t b = __rdtscp(&aux);
  _mm_lfence();
  return b - a;
}
/* the TSC's step: the smallest nonzero difference between two readings */
static uint64_t tsc_step(void) {
  unsigned aux;
  uint64_t a = __rdtscp(&aux), b;
  while ((b = __rdtscp(&aux)) == a) {}
  return b - a;
}
#else
static inline uint64_t timed_load(const void* p) { (void)p; fail("--audit needs x86-64 (rdtscp)"); return 0; }
static uint64_t tsc_step(void) { return 0; }
#endif

static void audit(const char* name, const void* const* lines, size_t n, pollute_fn pollute) {
  if (opt_audit <= 0 || n == 0) return;
  size_t* order = check_alloc(malloc(n * sizeof *order), n * sizeof *order);
  uint32_t* slow_after = check_alloc(calloc(n, sizeof *slow_after), n * sizeof *slow_after);
  uint32_t* slow_base = check_alloc(calloc(n, sizeof *slow_base), n * sizeof *slow_base);
  double* t = check_alloc(malloc(n * sizeof *t), n * sizeof *t);
  rng_t r = rng_seed((uint64_t)opt_seed + 77);
  for (size_t i = 0; i < n; i++) order[i] = i;
  for (size_t i = n - 1; i > 0; i--) {              /* one random order: no prefetcher streams */
    size_t j = rng_range(&r, 0, i);
    size_t x = order[i]; order[i] = order[j]; order[j] = x;
  }
  /* the threshold: the hot victim's median, and the TSC's step */
  uint64_t step = ~(uint64_t)0;
  for (size_t k = 0; k < n; k++) (void)timed_load(lines[order[k]]);
  for (size_t k = 0; k < n; k++) {
    t[k] = (double)timed_load(lines[order[k]]);
    uint64_t d = tsc_step();
    if (d < step) step = d;
  }
  qsort(t, n, sizeof *t, cmp_double);
  uint64_t limit = (uint64_t)t[n / 2] + step / 2;
  uint64_t check = 0;
  for (long round = 0; round < opt_audit; round++) {
    check += pollute((uint64_t)round);
    for (size_t k = 0; k < n; k++) slow_after[order[k]] += timed_load(lines[order[k]]) > limit;
    for (size_t k = 0; k < n; k++) slow_base[order[k]] += timed_load(lines[order[k]]) > limit;
  }
  aline_t* al = check_alloc(malloc(n * sizeof *al), n * sizeof *al);
  for (size_t i = 0; i < n; i++) al[i] = (aline_t){ (uintptr_t)lines[i] & ~(uintptr_t)4095, i };
  qsort(al, n, sizeof *al, cmp_aline);
  size_t pages = 0;
  uint64_t all_after = 0, all_base = 0;
  for (size_t i = 0; i < n;) {                      /* t[page]: its evicted share */
    uint64_t a = 0, b = 0;
    size_t j = i;
    for (; j < n && al[j].page == al[i].page; j++) { a += slow_after[al[j].line]; b += slow_base[al[j].line]; }
    t[pages++] = ((double)a - (double)b) / (double)((j - i) * (size_t)opt_audit);
    all_after += a; all_base += b;
    i = j;
  }
  qsort(t, pages, sizeof *t, cmp_double);
  size_t evicted = 0;
  for (size_t i = 0; i < pages; i++) evicted += t[i] >= 0.5;
  double loads = (double)n * (double)opt_audit;
  printf("AUDIT %s pages=%zu lines=%zu rounds=%ld limit=%llu slow_after=%.3f slow_base=%.3f evicted_pages=%zu "
         "evicted_p50=%.3f evicted_p90=%.3f evicted=", name, pages, n, opt_audit, (unsigned long long)limit,
         (double)all_after / loads, (double)all_base / loads, evicted, t[pages / 2], t[pages * 9 / 10]);
  for (size_t i = pages; i-- > 0;) printf("%.2f%s", t[i], i ? "," : "\n");
  if (check == 42) puts("");                        /* keep the sums */
  free(order); free(slow_after); free(slow_base); free(t); free(al);
}

/* ---- the polluter: a buffer from its own call site, written, read once, freed ------------- */

/* --confine / --protect: memory from a slice of chromalloc's L2 colours, asked for explicitly
   (no learning, no monitoring): what colouring can do for this workload at best */
static void* (*coloured_alloc)(size_t, int);
static int confine_id = -1;

static int coloured_init(unsigned from, unsigned to, size_t bytes, const char* what) {
  int (*colours)(unsigned, unsigned, unsigned, unsigned) = (int (*)(unsigned, unsigned, unsigned, unsigned))dlsym(RTLD_DEFAULT, "chromalloc_colours");
  int (*prepare)(int, size_t, int) = (int (*)(int, size_t, int))dlsym(RTLD_DEFAULT, "chromalloc_colours_prepare");
  coloured_alloc = (void* (*)(size_t, int))dlsym(RTLD_DEFAULT, "chromalloc_malloc_coloured");
  if (!colours || !prepare || !coloured_alloc) fail("%s needs chromalloc", what);
  int id = colours(0, from, to, 8);
  if (id < 0 || prepare(id, bytes + 4096, 120000) != 0) fail("%s: no stock of %u/8 of the L2 (errno %d)", what, to - from, errno);
  return id;
}

NOINLINE static uint64_t* frame_buffer(size_t bytes) {
  SITE(S_FRAME);
  uint64_t* p = confine_id >= 0 ? coloured_alloc(bytes, confine_id) : malloc(bytes);
  return check_alloc(p, bytes);
}

static void fill(uint64_t* w, size_t words, uint64_t x) {
  for (size_t i = 0; i < words; i++) w[i] = x + i * 0x9e3779b97f4a7c15ULL;
}

static uint64_t sum(const uint64_t* w, size_t words) {
  uint64_t s = 0;
  for (size_t i = 0; i < words; i++) s += w[i] ^ (w[i] >> 29);
  return s;
}

NOINLINE static uint64_t stream_frame(size_t bytes, uint64_t frame) {
  uint64_t* b = frame_buffer(bytes);
  fill(b, bytes / 8, mix64(frame));
  uint64_t s = sum(b, bytes / 8);
  free(b);
  return s;
}

/* ---- the frames victim: an array of 64-byte nodes in one random cycle -------------------- */

typedef struct { uint32_t next, pad; uint64_t key; uint64_t payload[6]; } node_t;

NOINLINE static node_t* victim_alloc(size_t bytes) {
  SITE(S_VICTIM);
  int id = opt_protect ? coloured_init(1, 8, bytes, "--protect") : -1;   /* sets coloured_alloc */
  node_t* p = id >= 0 ? coloured_alloc(bytes, id) : malloc(bytes);
  return check_alloc(p, bytes);
}

static node_t* make_victim(size_t n, rng_t* r) {
  node_t* v = victim_alloc(n * sizeof *v);
  uint32_t* perm = check_alloc(malloc(n * sizeof *perm), n * sizeof *perm);
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  for (size_t i = n - 1; i > 0; i--) {            /* Sattolo: one cycle through all nodes */
    size_t j = rng_range(r, 0, i - 1);
    uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  for (size_t i = 0; i < n; i++) {
    v[i].next = perm[i];
    v[i].key = rng_next(r);
    for (int k = 0; k < 6; k++) v[i].payload[k] = v[i].key + (uint64_t)k;
  }
  free(perm);
  return v;
}

/* `lookups` dependent lookups from *pos; returns the sum of the keys seen */
static uint64_t chase(const node_t* v, uint32_t* pos, size_t lookups) {
  uint32_t i = *pos;
  uint64_t s = 0;
  for (size_t k = 0; k < lookups; k++) {
    i = v[i].next;
    s += v[i].key;
  }
  *pos = i;
  return s;
}

static size_t audit_bytes;                           /* --audit: frames' buffer */
static uint64_t pollute_frame(uint64_t round) { return stream_frame(audit_bytes, round); }

static void run_frames(void) {
  size_t vkib = (size_t)def(opt_victim_kib, 192), bkib = (size_t)def(opt_buf_kib, 1536);
  long frames = def_count(opt_frames, 1000);
  rng_t r = rng_seed((uint64_t)opt_seed);
  size_t n = vkib * 1024 / sizeof(node_t);
  node_t* v = make_victim(n, &r);
  if (opt_confine && !opt_no_polluter) confine_id = coloured_init(0, 1, bkib * 1024, "--confine");
  uint32_t pos = 0;
  uint64_t check = 0;
  samples_t s = samples((size_t)frames);
  uint64_t t0 = now_ns();
  for (long f = 0; f < frames; f++) {
    settle(f, &t0, opt_no_polluter ? 0 : bkib * 1024);
    if (!opt_no_polluter) check += stream_frame(bkib * 1024, (uint64_t)f);
    uint64_t a = now_ns();
    check += chase(v, &pos, n);
    sample(&s, now_ns() - a, n);
  }
  double total = (double)(now_ns() - t0) * 1e-9;
  if (opt_audit && !opt_no_polluter) {
    const void** lines = check_alloc(malloc(n * sizeof *lines), n * sizeof *lines);
    for (size_t i = 0; i < n; i++) lines[i] = &v[i];
    audit_bytes = bkib * 1024;
    audit("frames", lines, n, pollute_frame);
    free(lines);
  }
  free(v);
  report(opt_no_polluter ? "frames-alone" : "frames", &s, skipped(), total, check, 1);
}

/* ---- requests: a hash index of malloc'd nodes; request buffers through one wrapper -------- */

typedef struct inode_s { uint64_t key, value; struct inode_s* next; uint64_t payload[5]; } inode_t;

NOINLINE static void* req_alloc(size_t bytes) {        /* the common wrapper */
  SITE(S_REQ);
  void* p = malloc(bytes);
  return check_alloc(p, bytes);
}

NOINLINE static uint64_t read_body(size_t bytes, uint64_t req) {    /* call site 1: streamed */
  uint64_t* b = req_alloc(bytes);
  fill(b, bytes / 8, mix64(req));
  uint64_t s = sum(b, bytes / 8);
  free(b);
  return s;
}

NOINLINE static uint64_t render_response(size_t bytes, uint64_t seed) {  /* call site 2: streamed */
  uint64_t* b = req_alloc(bytes);
  fill(b, bytes / 8, seed);
  uint64_t s = sum(b, bytes / 8);
  free(b);
  return s;
}

NOINLINE static uint64_t session_scratch(size_t bytes, uint64_t seed) {  /* call site 3: reused */
  uint64_t* b = req_alloc(bytes);
  size_t words = bytes / 8;
  fill(b, words, seed);
  uint64_t s = 0;
  for (int pass = 0; pass < 8; pass++)
    for (size_t i = 0; i < words; i++) { s += b[i]; b[i] = s ^ (uint64_t)pass; }
  free(b);
  return s;
}

NOINLINE static inode_t* index_node(void) {
  SITE(S_NODE);
  inode_t* p = malloc(sizeof *p);
  return check_alloc(p, sizeof *p);
}
NOINLINE static inode_t** index_buckets(size_t n) {
  SITE(S_BUCKETS);
  inode_t** p = calloc(n, sizeof *p);
  return check_alloc(p, n * sizeof *p);
}

static uint64_t lookup_chain(inode_t** buckets, uint64_t mask, uint64_t* key, size_t lookups) {
  uint64_t k = *key, s = 0;
  for (size_t i = 0; i < lookups; i++) {
    inode_t* e = buckets[mix64(k) & mask];
    while (e->key != k) e = e->next;                 /* every key looked up is present */
    s += e->payload[0];
    k = e->value;
  }
  *key = k;
  return s;
}

/* the index (requests, messages): n = vkib KiB / 64 nodes, each malloc'd by index_node(), in
   nb buckets (a power of two, one to two nodes per bucket); the values form one cycle of keys,
   so that lookup_chain from `first` meets every key once per lap */
typedef struct { inode_t** buckets; inode_t** nodes; size_t n, nb; uint64_t first; } index_t;

static index_t make_index(size_t vkib, rng_t* r) {
  index_t x = { NULL, NULL, vkib * 1024 / sizeof(inode_t), 1, 0 };
  size_t n = x.n;
  while (x.nb * 2 <= n) x.nb *= 2;                  /* one to two nodes per bucket */
  x.buckets = index_buckets(x.nb);
  uint64_t* keys = check_alloc(malloc(n * sizeof *keys), n * sizeof *keys);
  uint32_t* perm = check_alloc(malloc(n * sizeof *perm), n * sizeof *perm);
  for (size_t i = 0; i < n; i++) { keys[i] = rng_next(r) | 1; perm[i] = (uint32_t)i; }
  for (size_t i = n - 1; i > 0; i--) {              /* the values form one cycle of keys */
    size_t j = rng_range(r, 0, i - 1);
    uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  x.nodes = check_alloc(malloc(n * sizeof *x.nodes), n * sizeof *x.nodes);
  for (size_t i = 0; i < n; i++) {
    inode_t* e = index_node();
    e->key = keys[i];
    e->value = keys[perm[i]];
    for (int k = 0; k < 5; k++) e->payload[k] = mix64(keys[i] + (uint64_t)k);
    uint64_t b = mix64(e->key) & (x.nb - 1);
    e->next = x.buckets[b];
    x.buckets[b] = e;
    x.nodes[i] = e;
  }
  free(perm);
  x.first = keys[0];
  free(keys);
  return x;
}

static void free_index(index_t* x) {
  for (size_t i = 0; i < x->n; i++) free(x->nodes[i]);
  free(x->nodes);
  free(x->buckets);
}

/* --audit: the index's lines (each node, and the bucket array line by line) */
static void audit_index(const char* name, const index_t* x, pollute_fn pollute) {
  if (!opt_audit || opt_no_polluter) return;
  size_t nb_lines = (x->nb * sizeof *x->buckets + 63) / 64, n = x->n + nb_lines;
  const void** lines = check_alloc(malloc(n * sizeof *lines), n * sizeof *lines);
  for (size_t i = 0; i < x->n; i++) lines[i] = x->nodes[i];
  for (size_t i = 0; i < nb_lines; i++) lines[x->n + i] = (const char*)x->buckets + 64 * i;
  audit(name, lines, n, pollute);
  free(lines);
}

static uint64_t pollute_request(uint64_t q) {
  uint64_t check = read_body((q & 1 ? 1024 : 768) * 1024 * scale(), q);
  check += session_scratch(32 * 1024, q);
  return check + render_response(768 * 1024 * scale(), check);
}

static void run_requests(void) {
  size_t vkib = (size_t)def(opt_victim_kib, 128);
  long reqs = def_count(opt_frames, 1500);
  rng_t r = rng_seed((uint64_t)opt_seed);
  index_t x = make_index(vkib, &r);
  size_t n = x.n;
  uint64_t key = x.first, check = 0;
  samples_t s = samples((size_t)reqs);
  uint64_t t0 = now_ns();
  for (long q = 0; q < reqs; q++) {
    /* both polluter sizes: a freed restrictive chunk is kept whole for the next one that fits
       (no more than twice smaller), so the biggest body and a response are each assembled once;
       with one body's worth, a response assembled first left the bodies short of pages for
       about 1000 requests (the pool refills at some 400 pages/s next to this loop) */
    settle(q, &t0, opt_no_polluter ? 0 : (1024 + 768) * 1024 * scale());
    if (!opt_no_polluter) check += pollute_request((uint64_t)q);
    uint64_t a = now_ns();
    check += lookup_chain(x.buckets, x.nb - 1, &key, n);
    sample(&s, now_ns() - a, n);
  }
  double total = (double)(now_ns() - t0) * 1e-9;
  audit_index("requests", &x, pollute_request);
  free_index(&x);
  report(opt_no_polluter ? "requests-alone" : "requests", &s, skipped(), total, check, 1);
}

/* ---- messages, packets: many chunks below the L2 from one context, streamed once ---------- */

#define MSG_BYTES 2048                               /* below a page: a small chunk */
#define PKT_BYTES 32768                              /* a page or more, below the L2 */

NOINLINE static uint64_t* msg_alloc(void) {
  SITE(S_MSG);
  uint64_t* p = malloc(MSG_BYTES);
  return check_alloc(p, MSG_BYTES);
}

NOINLINE static uint64_t* pkt_alloc(void) {
  SITE(S_PKT);
  uint64_t* p = malloc(PKT_BYTES);
  return check_alloc(p, PKT_BYTES);
}

/* one frame's chunks of `bytes` (messages or packets): each allocated (the one call site of
   msg_alloc or pkt_alloc) and written, then all read once; they stay live until free_chunks at
   the end of the frame */
NOINLINE static uint64_t stream_chunks(uint64_t** msg, size_t m, size_t bytes, uint64_t frame) {
  for (size_t i = 0; i < m; i++) {
    msg[i] = bytes == MSG_BYTES ? msg_alloc() : pkt_alloc();
    fill(msg[i], bytes / 8, mix64(frame * m + i));
  }
  uint64_t s = 0;
  for (size_t i = 0; i < m; i++) s += sum(msg[i], bytes / 8);
  return s;
}

static void free_chunks(uint64_t** msg, size_t m) {
  for (size_t i = 0; i < m; i++) free(msg[i]);
}

/* --audit: a frame's chunks, freed before the next round's as in the loop (the last round's
   after the audit), so that the victim is read where it is in the loop: after the stream */
static struct { uint64_t** msg; size_t m, bytes; } audit_chunks;
static uint64_t pollute_chunks(uint64_t frame) {
  if (frame > 0) free_chunks(audit_chunks.msg, audit_chunks.m);
  return stream_chunks(audit_chunks.msg, audit_chunks.m, audit_chunks.bytes, frame);
}

static void run_messages(size_t bytes, const char* name) {
  size_t vkib = (size_t)def(opt_victim_kib, 128), bkib = (size_t)def(opt_buf_kib, 1536);
  long frames = def_count(opt_frames, 1500);
  size_t m = bkib * 1024 / bytes;                   /* chunks per frame */
  if (m < 1) m = 1;
  rng_t r = rng_seed((uint64_t)opt_seed);
  index_t x = make_index(vkib, &r);
  size_t n = x.n;
  uint64_t** msg = check_alloc(malloc(m * sizeof *msg), m * sizeof *msg);
  uint64_t key = x.first, check = 0;
  samples_t s = samples((size_t)frames);
  uint64_t t0 = now_ns();
  for (long f = 0; f < frames; f++) {
    settle(f, &t0, opt_no_polluter ? 0 : m * bytes);
    if (!opt_no_polluter) check += stream_chunks(msg, m, bytes, (uint64_t)f);
    uint64_t a = now_ns();
    check += lookup_chain(x.buckets, x.nb - 1, &key, n);
    sample(&s, now_ns() - a, n);
    if (!opt_no_polluter && (size_t)f >= skipped()) {
      for (size_t i = 1; i < m; i++) {
        uintptr_t p = (uintptr_t)msg[i], q = (uintptr_t)msg[i - 1];
        near_hits += (p > q ? p - q : q - p) < 2 * bytes;
      }
      near_pairs += m - 1;
    }
    if (!opt_no_polluter) free_chunks(msg, m);
  }
  double total = (double)(now_ns() - t0) * 1e-9;
  audit_chunks.msg = msg; audit_chunks.m = m; audit_chunks.bytes = bytes;
  audit_index(name, &x, pollute_chunks);
  if (opt_audit && !opt_no_polluter) free_chunks(msg, m);
  free(msg);
  free_index(&x);
  char label[32];
  snprintf(label, sizeof label, "%s%s", name, opt_no_polluter ? "-alone" : "");
  report(label, &s, skipped(), total, check, 1);
}

/* ---- neutral: chunks with reuse only ------------------------------------------------------ */

NOINLINE static uint64_t* work_buffer(size_t b) { SITE(S_WORK); uint64_t* p = malloc(b); return check_alloc(p, b); }
NOINLINE static uint64_t* scratch_chunk(size_t b) { SITE(S_SCRATCH); uint64_t* p = malloc(b); return check_alloc(p, b); }

static void run_neutral(void) {
  long iters = def_count(opt_frames, 2400);
  enum { NBUF = 4, PASSES = 8, NSCR = 32 };
  const size_t BUF = 32 * 1024 * scale(), SCR = 8 * 1024 * scale();
  size_t words = BUF / 8;
  uint64_t check = 0;
  samples_t s = samples((size_t)iters);
  uint64_t t0 = now_ns();
  for (long it = 0; it < iters; it++) {
    settle(it, &t0, 0);
    uint64_t* b[NBUF];
    for (int k = 0; k < NBUF; k++) { b[k] = work_buffer(BUF); fill(b[k], words, mix64((uint64_t)(it * NBUF + k))); }
    uint64_t a = now_ns();
    uint64_t acc = 0;
    for (int p = 0; p < PASSES; p++)
      for (int k = 0; k < NBUF; k++) {
        uint64_t* w = b[k];
        for (size_t i = 0; i < words; i++) { acc += w[i]; w[i] = acc ^ (uint64_t)p; }
      }
    sample(&s, now_ns() - a, (uint64_t)PASSES * NBUF * BUF / 64);
    check += acc;
    for (int k = 0; k < NSCR; k++) {
      uint64_t* c = scratch_chunk(SCR);
      fill(c, SCR / 8, acc + (uint64_t)k);
      for (int p = 0; p < 4; p++) check += sum(c, SCR / 8) + (uint64_t)p;
      free(c);
    }
    for (int k = 0; k < NBUF; k++) free(b[k]);
  }
  report("neutral", &s, skipped(), (double)(now_ns() - t0) * 1e-9, check, 1);
}

/* ---- victims: several hot tables, re-allocated now and then, no streaming ----------------- */

typedef struct { uint32_t next, pad; uint64_t val; uint64_t payload[6]; } entry_t;

NOINLINE static entry_t* table_a(size_t b) { SITE(S_TA); entry_t* p = malloc(b); return check_alloc(p, b); }
NOINLINE static entry_t* table_b(size_t b) { SITE(S_TB); entry_t* p = malloc(b); return check_alloc(p, b); }
NOINLINE static entry_t* table_c(size_t b) { SITE(S_TC); entry_t* p = malloc(b); return check_alloc(p, b); }
NOINLINE static entry_t* table_d(size_t b) { SITE(S_TD); entry_t* p = malloc(b); return check_alloc(p, b); }
static entry_t* (*const table_site[4])(size_t) = { table_a, table_b, table_c, table_d };

static void run_victims(void) {
  enum { TMAX = 256 };
  const unsigned ps = 8;                            /* 256 entries of 64 B: 16 KiB per table */
  size_t per = (size_t)1 << ps;
  size_t T = (size_t)def(opt_victim_kib, 128) / 16;
  if (T < 2) T = 2;
  if (T > TMAX) T = TMAX;
  size_t n = per * T;
  long rounds = def_count(opt_frames, 20000);
  rng_t r = rng_seed((uint64_t)opt_seed);
  entry_t* tab[TMAX];
  for (size_t t = 0; t < T; t++) tab[t] = table_site[t % 4](per * sizeof(entry_t));
  uint32_t* perm = check_alloc(malloc(n * sizeof *perm), n * sizeof *perm);
  for (size_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  for (size_t i = n - 1; i > 0; i--) {
    size_t j = rng_range(&r, 0, i - 1);
    uint32_t x = perm[i]; perm[i] = perm[j]; perm[j] = x;
  }
  for (size_t g = 0; g < n; g++) {
    entry_t* e = &tab[g >> ps][g & (per - 1)];
    e->next = perm[g];
    e->val = rng_next(&r);
    for (int k = 0; k < 6; k++) e->payload[k] = e->val ^ (uint64_t)k;
  }
  free(perm);
  uint32_t g = 0;
  uint64_t check = 0;
  samples_t s = samples((size_t)rounds);
  uint64_t t0 = now_ns();
  for (long q = 0; q < rounds; q++) {
    settle(q, &t0, 0);
    uint64_t a = now_ns();
    uint64_t acc = 0;
    for (size_t k = 0; k < n; k++) {
      const entry_t* e = &tab[g >> ps][g & (per - 1)];
      g = e->next;
      acc += tab[g >> ps][g & (per - 1)].val;
    }
    sample(&s, now_ns() - a, n);
    check += acc;
    size_t t = (size_t)q % T;                         /* re-allocate one table */
    entry_t* fresh = table_site[t % 4](per * sizeof(entry_t));
    memcpy(fresh, tab[t], per * sizeof(entry_t));
    free(tab[t]);
    tab[t] = fresh;
  }
  double total = (double)(now_ns() - t0) * 1e-9;
  for (size_t t = 0; t < T; t++) free(tab[t]);
  report("victims", &s, skipped(), total, check, 1);
}

/* ---- co-running halves -------------------------------------------------------------------- */

/* co-running: the polluter's first SETTLE_AT buffers (its context learnt), then the settle if
   asked, then --ready-file is created: the co-runner starts, and --seconds count from here */
static void ready(void) {
  if (!opt_ready_file) return;
  FILE* f = fopen(opt_ready_file, "w");
  if (!f || fclose(f) != 0) fail("--ready-file: cannot create %s: %s", opt_ready_file, strerror(errno));
}

static void run_polluter(void) {
  size_t bkib = (size_t)def(opt_buf_kib, 1536);
  uint64_t end = UINT64_MAX, check = 0;
  samples_t s = samples(1024);
  uint64_t t0 = now_ns();
  for (long f = 0; now_ns() < end; f++) {
    if (f == SETTLE_AT) {
      settle(f, &t0, bkib * 1024);
      ready();
      end = now_ns() + (uint64_t)(opt_seconds * 1e9);
      t0 = now_ns();
    }
    uint64_t a = now_ns();
    check += stream_frame(bkib * 1024, (uint64_t)f);
    sample(&s, now_ns() - a, bkib * 1024 / 64);     /* ns per streamed line */
  }
  if (check == 42) puts("");                        /* keep the sums */
  report("polluter", &s, SETTLE_AT, (double)(now_ns() - t0) * 1e-9, 0, 0);
}

static void run_victim(void) {
  size_t vkib = (size_t)def(opt_victim_kib, 1024);
  rng_t r = rng_seed((uint64_t)opt_seed);
  size_t n = vkib * 1024 / sizeof(node_t);
  node_t* v = make_victim(n, &r);
  uint64_t end = now_ns() + (uint64_t)(opt_seconds * 1e9), check = 0;
  uint32_t pos = 0;
  samples_t s = samples(1024);
  uint64_t t0 = now_ns();
  while (now_ns() < end) {
    uint64_t a = now_ns();
    check += chase(v, &pos, n);
    sample(&s, now_ns() - a, n);
  }
  if (check == 42) puts("");
  free(v);
  report("victim", &s, 2, (double)(now_ns() - t0) * 1e-9, 0, 0);
}

int main(int argc, char** argv) {
  bench_name = "pv";
  if (argc < 2) fail("usage: pv frames|requests|messages|packets|neutral|victims|polluter|victim [--victim-kib=N] "
                     "[--buf-kib=N] [--frames=N] [--seconds=S] [--seed=N] [--settle-ms=N] [--trace=FILE] [--audit=R] [--ready-file=PATH] [--no-polluter] [--pin]");
  parse_options(argc, argv);
  if (opt_pin) {                      /* this thread only; threads started later inherit it */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
  }
  const char* w = argv[1];
  if (strcmp(w, "frames") == 0) run_frames();
  else if (strcmp(w, "requests") == 0) run_requests();
  else if (strcmp(w, "messages") == 0) run_messages(MSG_BYTES, "messages");
  else if (strcmp(w, "packets") == 0) run_messages(PKT_BYTES, "packets");
  else if (strcmp(w, "neutral") == 0) run_neutral();
  else if (strcmp(w, "victims") == 0) run_victims();
  else if (strcmp(w, "polluter") == 0) run_polluter();
  else if (strcmp(w, "victim") == 0) run_victim();
  else fail("unknown workload '%s'", w);
  (void)arg_long;
  return 0;
}
