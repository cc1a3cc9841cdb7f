/* The worker's start: the eviction sets of the shared set file when it holds, else sets built
   here (and published for the user's other processes), with the colour count from the machine
   profile, or else estimated from pages and the first sets; a start that fails for the moment
   (a loud host) is made again after a wait that doubles, and the layer is unavailable after
   CA_COLOUR_START_TRIES in a row. */
#define _GNU_SOURCE
#include "layer.h"
#include <time.h>
#include <unistd.h>

static uint32_t round_colours(uint32_t n) {
  uint32_t c = 1;
  while (c * 2 <= CA_COLOURS_MAX && (double)c * 1.41421356 < (double)n) c *= 2;
  return c;
}

/* The eviction sets are not to be trusted: forget them and what they classified; the worker
   finds them again (or gives up, saying so).  drop_sets also drops the pages they stocked. */
void _ca_cs_forget_sets(void) {
  _ca_lock(&L.lock);
  L.map.ncolours = 0;
  L.map.epoch++;
  L.effect_pct = L.effect_next = 0;
  _ca_unlock(&L.lock);
  if (L.src.npages) {
    memset(L.src.colour, -1, L.src.npages);
    memset(L.src.tested, 0, L.src.npages);
  }
}

/* Dropped sets are left where they are (pages of the set file or of the process's source):
   another thread may be reading them (chromalloc_colour_of), and a drop is rare.  The next sets
   are built in a new source. */
static void abandon_sources(void) {
  if (L.file.fd >= 0) close(L.file.fd);
  memset(&L.file, 0, sizeof L.file);
  L.file.fd = L.file.lock_fd = -1;
  memset(&L.src, 0, sizeof L.src);
  L.src.fd = -1;
  L.sets_origin = SETS_NONE;
}

void _ca_cs_drop_sets(void) {
  abandon_sources();
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    for (void* page; (page = _ca_pool_pop(&L.sets[i].pool)) != NULL;) _ca_pool_drop(page);
    ca_audit_group_t* g = &L.sets[i].audit;
    while (g->n > 0) _ca_pool_drop(g->page[--g->n]);
    g->valid = false;
    L.sets[i].unvouched = _ca_cs_audit_need(&L.sets[i]) > 0;
  }
  L.set_rebuilds++;
  _ca_unlock(&L.lock);
  _ca_cs_forget_sets();
}

/* Without a profile the colour count is estimated: pages are classified against the first few
   colours' sets, and each set claims about one page in `colours`.  Cache geometries have
   power-of-two colour counts, so the estimate is rounded to one.  A page counts as claimed when
   the first of three tests and two of them say so, not the three "fully evicted" tests that
   fill pools: every further or stricter test also loses true positives on a busy host, which
   biases the count up (64 for 32 in 1 of 20 processes with three in a row; 32 for 16 in 1 of 2
   with the strict kind; on the Zen 5 host one plain test in 20 reads low).  The tests ask
   whether the set evicts the page clearly (probe.c), between the plain and the strict
   question: at the plain rule a page sharing part of a set's colour (one in three on the Zen
   5 host) was claimed too, and the estimate read 8 for 16, or needed its second try, in 5 of
   16 pv messages processes, against 0 of 16 asked clearly (interleaved; 0 of 10 each in 10
   more rounds, a quieter moment) - unless the eviction-set searches found the clear rule too
   high just now (evset.c), when they ask plainly.

   The pages are far from a random sample of colours: the frames of one 4 MiB chunk fell
   unevenly on this VM's colours (four sets claiming 8, 6, 22 and 21 of its 1024 pages, 2, 75,
   99 and 78 of the next chunk's), and a chunk unmapped and mapped again gets the same frames
   back (six estimates in one process then claimed 80 of 1024 pages each, and all said 64 for
   32).  So the claims add up over chunks that stay mapped until the end, up to SAMPLES of them,
   and the estimate is taken again after each, from the median set's claims: one set of four
   could claim almost nothing (1 and 2 of 1024 and 2048 pages, the others 24-30 and 52-95). */
static uint32_t estimate_colours_from_pages(uint32_t expected) {
  enum { SAMPLE = 2 * STOCK_CHUNK, SAMPLES = 6 };
  uint8_t* chunk[SAMPLES];
  uint32_t claims[CA_COLOURS_MAX] = {0}, sorted[CA_COLOURS_MAX], n = L.map.ncolours, estimate = 0;
  uint64_t pages = 0;
  int k = 0;
  ca_ask_t ask = L.probe.base.search_plainly ? CA_ASK_PLAIN : CA_ASK_CLEARLY;
  for (; n > 0 && k < SAMPLES && (estimate != expected || k == 0); k++) {
    bool fresh;
    if ((chunk[k] = _ca_pool_supply(SAMPLE, &fresh)) == NULL) break;
    for (size_t i = 0; i < SAMPLE; i++) {
      int c = _ca_colour_classify_n(&L.probe.base, &L.map, chunk[k] + i * CA_OS_PAGE, ~(uint64_t)0, 3, 2, ask);
      if (c >= 0) claims[c]++;
    }
    pages += SAMPLE;
    memcpy(sorted, claims, n * sizeof *sorted);
    for (uint32_t i = 1; i < n; i++)               /* insertion sort: n <= 64 */
      for (uint32_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) { uint32_t t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t; }
    double median = (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0;
    estimate = median > 0 ? round_colours((uint32_t)((double)pages / median + 0.5)) : 0;
  }
  for (int i = 0; i < k; i++) _ca_os_unmap(chunk[i], SAMPLE * CA_OS_PAGE);
  L.estimated = estimate;
  L.estimate_chunks = (uint32_t)k;
  return estimate;
}

/* The first four sets, without a profile.  Thresholds measured while the program streams
   memory on the other core can be wrong for good (pv frames: no set in 20 s, 3 runs of 6): when
   a few seconds find no new colour, they are measured again. */
static void discover_first(uint32_t expected, size_t level_bytes, uint64_t* rng) {
  if (CA_INJECTED(L.inject_no_sets)) return;
  for (int tries = 0; tries < 10 && L.map.ncolours < 4; tries++) {
    uint32_t had = L.map.ncolours;
    _ca_colour_discover(&L.probe.base, &L.map, &L.src, 4, expected, 3000, rng, &L.disc);
    if (L.map.ncolours == had && !_ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways)) break;
  }
}

/* `expected` is what sysfs's geometry implies: an estimate agreeing with it settles it.  When
   none does, the estimate is not trusted (on the Zen 5 host 3 processes in 8 estimated 8 or 64
   colours for 16: pages partly evicted by another colour's set inflate the claims, and missed
   tests deflate them).  It is taken once more with four new sets (here 2 of 30 pv frames
   processes estimated 16 for 32 over six chunks, and the discovery below kept them from being
   ready for 14 s or more); when that disagrees too, the colours are counted the way `chromalloc
   calibrate` counts them, by discovering all of them (10-25 s of the worker's time here), and
   the count rounded to a power of two, or the number of sets found when that is more (a
   duplicate set that the pruning sweep missed on a noisy host: calibrate counts it too).  The
   second try doubles the chance that a wrong sysfs geometry is taken for true by a chance
   agreement (a first estimate was off by a factor of two in 10 of 164 processes here).
   The probe is measured again before it: its rule stays below what the stream measured at
   start-up, and a low reading there is kept for the process's life.  Zen 4 VM, 40 pv messages
   processes: the one never ready had the rule at 134% (stream 168% of the hit chase, sets
   225%; 150% in 34 of the 39 others), and both its tries said 16.  Measured again, the second
   try settled 6 of the 7 processes in 60 that needed it (without, 4 of 6 in 70: too few to
   show a difference); 1 in 60 was never ready either way. */
static uint32_t estimate_colours(uint32_t expected, size_t level_bytes, uint64_t* rng) {
  if (estimate_colours_from_pages(expected) == expected) return expected;
  _ca_cs_forget_sets();
  L.probe_remeasured++;
  _ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways);
  discover_first(expected, level_bytes, rng);
  if (L.map.ncolours >= 2 && estimate_colours_from_pages(expected) == expected) return expected;
  _ca_colour_discover(&L.probe.base, &L.map, &L.src, 0, expected, 60000, rng, &L.disc);
  uint32_t n = L.map.ncolours, c = round_colours(n);
  return n < 2 ? 0 : n > c ? n : c;
}

/* ---- where the sets come from ---------------------------------------------------------------- */

/* Do the first n sets of the map (the set file's) hold?  Each must evict its own reference and
   not another colour's: the batch controls (stock.c), asked of two colours at a time, once for
   each (one set alone, 8 pages, can leave part of a reference in an 8-way L1: read 57-96% of a
   quiet chase where the pair reads 200%+, so single sets failed the check at random); what the
   first controls read places the marks.  A colour gets a second try (a loud moment). */
static bool file_sets_hold(uint32_t n) {
  L.effect_pct = L.effect_next = 0;
  uint32_t pairs = n < 2 ? 1 : n;
  for (uint32_t c = 0; c < pairs; c++) {
    uint32_t d = c ^ 1u;
    if (d >= L.map.ncolours) d = c ? c - 1 : 1;
    uint64_t mask = ((uint64_t)1 << c) | ((uint64_t)1 << d);
    uint32_t turn = c < d ? 0 : 1;                  /* the control of colour c */
    if (!_ca_cs_controls(mask, turn) && !_ca_cs_controls(mask, turn)) return false;
  }
  return true;
}

/* The set file's sets (opened, m and colours), when those the registered sets need (at least
   two; all the file has when it has fewer) check out: then they are the map.  The file's colour count
   is the process's: every process that loads it names the colours alike. */
static bool load_setfile(const ca_colour_map_t* opened, uint32_t colours) {
  ca_colour_map_t m = *opened;
  L.file_checks++;
  uint32_t was_colours = L.cal.colours;
  _ca_lock(&L.lock);
  L.map = m;
  L.cal.colours = colours;
  L.cal.ways = m.ways;
  uint32_t need = _ca_cs_colours_needed();
  _ca_unlock(&L.lock);
  if (need < 2) need = 2;
  if (L.file.hint_passes && !L.probe.passes_chosen) {   /* how often a test reads a group, as found */
    L.probe.passes = (int)L.file.hint_passes;
    L.probe.passes_chosen = true;
  }
  /* A check fails in loud moments (1 look in 5 beside the victim/polluter program, where a
     reference outside the pair read 132-170% through two looks 200 ms apart, and the next
     process passed the same file): building sets anew costs 0.5 s of CPU and 9 MiB, a look a
     few ms, so up to five looks over 0.75 s before the file is called stale. */
  /* a file with fewer colours than needed is kept when the ones it has hold: the worker builds
     the rest into it (build_source) */
  uint32_t check = need <= m.ncolours ? need : m.ncolours;
  bool enough = check >= 2, hold = false;
  for (int look = 0; look < 5 && enough && !hold; look++) {
    if (look > 0) { struct timespec t = { 0, 50000000L << (look - 1) }; nanosleep(&t, NULL); }
    hold = file_sets_hold(check);
  }
  if (hold) {
    L.probe.set_ratio_pct = L.effect_pct;           /* what the sets read on their references now */
    L.sets_origin = SETS_FILE;
    L.cal.measured_size = (uint64_t)L.cal.colours * L.cal.ways * CA_OS_PAGE;
    return true;
  }
  L.file_stale += enough;
  _ca_lock(&L.lock);
  L.map.ncolours = 0;
  L.map.epoch++;
  L.cal.colours = was_colours;
  _ca_unlock(&L.lock);
  _ca_setfile_close(&L.file);
  return false;
}

/* How long a process waits for another building in the set file before it builds its sets in
   pages of its own (which it cannot share): building a colour's set takes 0.1-0.3 s here. */
#define FILE_WAIT_MS 30000

/* Pages to build sets from: those of a new set file, when no set is known yet and sharing is
   on; the loaded or published file's holes, held (*held) while this process builds there; else
   the process's own.  False: no memory. */
static bool build_source(bool* held) {
  *held = false;
  if (L.src.npages == 0 && L.map.ncolours == 0) {
    L.src.fd = -1;
    if (_ca_setfile_create(&L.file, 4096) && _ca_page_source_init_file(&L.src, L.file.pages, L.file.npages, L.file.fd, (size_t)(L.file.pages - L.file.base), NULL))
      return true;
    if (L.file.built) _ca_setfile_close(&L.file);
  }
  bool filed = L.src.npages ? L.src.fd >= 0 : L.sets_origin == SETS_FILE && L.file.fd >= 0;
  if (filed && L.file.published) {
    if (_ca_setfile_lock(&L.file, FILE_WAIT_MS)) {
      uint32_t from = L.map.ncolours;
      L.file_adopted += _ca_setfile_adopt(&L.file, &L.map);
      if (L.src.npages) _ca_page_source_reserve(&L.src, &L.map, from);
      if (L.src.npages || _ca_page_source_init_file(&L.src, L.file.pages, L.file.npages, L.file.fd, (size_t)(L.file.pages - L.file.base), &L.map))
        return *held = true;
      _ca_setfile_unlock(&L.file);
    }
    if (L.src.npages) _ca_page_source_free(&L.src);   /* the file's pages are left to their builder */
  }
  if (L.src.npages) return true;
  return _ca_page_source_init(&L.src, 4096);
}

/* The sets built here go to the set file for the user's other processes, when they are the
   file's pages: a new file whole, a held one by the sets it lacks. */
static void publish(bool held) {
  if (L.src.fd < 0 || L.map.ncolours < 2) return;
  if (held) L.file_extended += _ca_setfile_extend(&L.file, &L.map);
  else if (L.file.built && !L.file.published && _ca_setfile_publish(&L.file, &L.map, L.cal.colours, &L.probe)) L.published++;
}

void _ca_cs_build_sets(uint32_t need, uint64_t* rng) {
  bool held;
  if (!build_source(&held)) return;
  uint32_t had = L.map.ncolours;
  for (int attempt = 0; attempt < 3 && L.map.ncolours < need; attempt++)
    _ca_colour_discover(&L.probe.base, &L.map, &L.src, need, L.cal.colours, 60000, rng, &L.disc);
  if (L.map.ncolours > had) {
    if (L.sets_origin == SETS_NONE) L.sets_origin = SETS_BUILT;
    publish(held);
  }
  if (!L.src.trimmed) _ca_page_source_trim(&L.src);   /* 16 MiB of calibration pages */
  if (held) _ca_setfile_unlock(&L.file);
}

enum { START_OK, START_RETRY, START_NEVER };

/* START_RETRY: the measurement failed for the moment (why says how); START_NEVER: the layer
   cannot work here (the state is UNAVAILABLE, with the reason) */
static int calibrate_or_load(uint64_t* rng, const char** why) {
  if (CA_INJECTED(L.inject_failures)) { *why = "test: a start failed on purpose"; return START_RETRY; }
  ca_calibration_t saved;
  memset(&saved, 0, sizeof saved);
  bool have = _ca_profile_load(&saved);
  if (have && !saved.usable) {
    /* `chromalloc calibrate` found colours uncontrollable on this machine: do not retry here */
    _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, saved.reason[0] ? saved.reason : "the machine profile says so");
    return START_NEVER;
  }
  L.cal = saved;
  L.cal_from_profile = have && saved.method == CA_METHOD_TIMING && saved.colours >= 2;
  if (!L.cal_from_profile) memset(&L.cal, 0, sizeof L.cal);
  const ca_cache_level_t* l2 = NULL;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) l2 = &_ca_machine.levels[i];
  if (!L.cal_from_profile) {
    if (l2 == NULL || l2->ways == 0 || l2->ways > CA_WAYS_MAX) { _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, "no L2 described by sysfs or cpuid"); return START_NEVER; }
    L.cal.level = 2;
    L.cal.ways = l2->ways;
    L.cal.line = l2->line;
    L.cal.method = CA_METHOD_TIMING;
  }
  size_t level_bytes = l2 && l2->size > (1u << 20) ? l2->size : (1u << 20);
  /* a set file spares the probe its stream: the file's sets place the rule */
  static ca_colour_map_t opened;
  uint32_t file_colours = 0;
  bool have_file = _ca_setfile_open(&L.file, &opened, &file_colours);
  /* the probe measures for about 3 s before it gives up; a busy moment can last longer (pv
     frames streams 3 MiB per frame on the other core: 2 runs of 7 ran without colours), so the
     worker tries again for a minute, the layer calibrating meanwhile.  One second between two
     tries: the moment often ends soon (with 5 s, 7 of 54 pv frames processes took 7.7-10.5 s
     to measure the probe, the first try failing while the program ran) */
  bool probe = false;
  uint64_t t0 = _ca_clock_ns();
  for (int tries = 0; tries < 15 && !probe; tries++) {
    if (tries > 0) { struct timespec t = { 1, 0 }; nanosleep(&t, NULL); }
    probe = _ca_probe_init(&L.probe, have_file ? 0 : level_bytes, _ca_machine.l1d.ways);
  }
  L.probe_ns = _ca_clock_ns() - t0;
  if (!probe) { *why = "timing cannot tell the L2 from what lies beyond it"; return START_RETRY; }
  L.map.ways = L.cal.ways;
  t0 = _ca_clock_ns();
  bool loaded = have_file && load_setfile(&opened, file_colours);
  L.discover_ns = _ca_clock_ns() - t0;
  if (loaded) return START_OK;
  if (have_file && !_ca_probe_init(&L.probe, level_bytes, _ca_machine.l1d.ways)) {   /* with its stream now */
    *why = "timing cannot tell the L2 from what lies beyond it";
    return START_RETRY;
  }
  bool held;                                       /* never: no set is known here */
  if (!build_source(&held)) { _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, "out of memory"); return START_NEVER; }
  if (!L.cal_from_profile) {
    uint32_t expected = l2 != NULL && l2->ways ? (uint32_t)(l2->size / l2->ways / CA_OS_PAGE) : 0;
    t0 = _ca_clock_ns();
    discover_first(expected, level_bytes, rng);
    L.discover_ns = _ca_clock_ns() - t0;
    t0 = _ca_clock_ns();
    L.cal.colours = L.map.ncolours >= 2 ? estimate_colours(expected, level_bytes, rng) : 0;
    L.estimate_ns = _ca_clock_ns() - t0;
    /* no colours (fewer than two sets found: the probe could not be measured again, or every
       search failed) is a failure too: taken for a good one, the layer said "ready" with no set
       (1 pv packets process in 20, its spans ordinary) */
    if (L.cal.colours < 2 || L.cal.colours < L.map.ncolours) { *why = "could not measure the colours of the L2"; return START_RETRY; }
    L.cal.measured_size = (uint64_t)L.cal.colours * L.cal.ways * CA_OS_PAGE;
    L.sets_origin = SETS_BUILT;
    publish(false);
  }
  return START_OK;
}

/* A start that failed for the moment (the host loud for longer than the measurements wait:
   on the Zen 5 host 1 benchmark process in 12 gave up after 12 s, and pv's settle lasts 20 s)
   is made again after a wait, 1 s, then doubling: CA_COLOUR_START_TRIES in a row, half a
   minute of waiting and a few seconds of the worker's measuring per try.  Then the layer is
   unavailable for the process's life.  Each time the layer is ready again the count starts
   afresh: a long-lived process whose sets are lost and not found again now and then (a drop
   on a loud host) would otherwise lose the layer for good at its sixth such moment.  At the
   start the state stays CALIBRATING meanwhile (eviction sets that cannot be found again after
   a drop leave it READY, the spans ordinary memory until they are), and `reason` says why the
   last try failed.  False: give up. */
bool _ca_cs_retry_later(const char* why) {
  ca_buf_t b = ca_buf(L.reason, sizeof L.reason);
  ca_buf_str(&b, why);
  L.start_failures++;
  if (++L.failures_in_row >= CA_COLOUR_START_TRIES) { _ca_cs_set_state(CA_COLOURS_UNAVAILABLE, NULL); return false; }
  uint64_t ms = (uint64_t)L.retry_ms << (L.failures_in_row - 1);
  struct timespec t = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
  while (nanosleep(&t, &t) != 0) {}
  return true;
}

/* calibrate (or load the profile), starting again while a failure is for the moment */
bool _ca_cs_start(uint64_t* rng) {
  for (;;) {
    const char* why = NULL;
    int r = calibrate_or_load(rng, &why);
    if (r != START_RETRY) return r == START_OK;
    _ca_cs_forget_sets();
    _ca_page_source_free(&L.src);
    _ca_setfile_close(&L.file);
    L.sets_origin = SETS_NONE;
    if (!_ca_cs_retry_later(why)) return false;
  }
}


#ifdef CA_TEST_HOOKS
void _ca_colour_test_fail_starts(uint32_t n, uint32_t retry_ms) {
  L.inject_failures = n;
  L.retry_ms = retry_ms;
}

void _ca_colour_test_no_sets(uint32_t n, uint32_t retry_ms) {
  L.inject_no_sets = n;
  L.retry_ms = retry_ms;
}

/* tests: the ready worker loses its eviction sets and fails to find them n times */
void _ca_colour_test_drop_sets(uint32_t n) {
  atomic_store(&L.inject_drops, n);
  _ca_cs_wake_worker();
}
#endif
