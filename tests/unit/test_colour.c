/* The colour layer's algorithms against a simulated cache, so they are tested without this
   machine's timing: a set-mapping oracle gives every page a colour by hashing its address
   (like a hashed index), a group evicts a reference when it holds `ways` distinct pages of the
   reference's colour, and a seeded fraction of answers is flipped (noise).  Pages are fake
   addresses that are never touched.  Checks: eviction sets are exact (also where pages that
   share part of the reference's sets add up to a plain eviction: the search asks whether a
   group evicts clearly; and where the clear rule is too high, asking plainly then), discovery
   finds every
   colour once, also when bursts of false "no" answers let duplicates slip past the check a new
   set gets (4% of tests starting a burst: without the pruning sweep 34 colours are found),
   classification agrees with the oracle, protection's live test keeps to colours it can tell
   apart (a set that evicts one member short is not used) and its batch controls fail in a moment
   when every group evicts or none does, pages that share part of their sets with a second
   colour stay out of its pool, and the profile JSON round-trips.  Protection (protect.c) runs
   with a fake colour test and a fake move: exactly the pages of live, old enough ranges that
   lie in the set are moved, once each; a removed range is never touched, and removing a range
   waits while the worker is at one of its pages; a system call's buffer drops its ranges.  The
   worker's judgement of a stretch of stocking: sets that work keep a 1/8 slice's share, sets of
   no colour are starved, they are dropped at the second bad judgement in a row, and the worker's
   sleep after bad rounds doubles to its cap. */
#include "check.h"
#include "../../src/color/colour.h"
#include "../../src/color/layer.h"
#include "../../src/core/hooks.h"
#include "../../include/chromalloc.h"
#include <sys/mman.h>
#include <pthread.h>
#include <time.h>

typedef struct sim_s {
  ca_probe_t base;
  uint32_t   colours, ways;
  double     noise;
  uint64_t   rng;
  uint32_t   partial_pct;   /* this % of pages also share sets with a second colour */
  uint32_t   burst_pmil;    /* per mille of tests that start a burst of BURST "no" answers */
  uint32_t   burst_left;
  bool       adds_up;       /* the plain test counts a page sharing part of r's sets as half */
} sim_t;

#define BURST 5               /* a noisy moment on a busy host outlasts a three-test check */

static uint32_t oracle(const sim_t* s, const void* page) {
  uint64_t x = (uintptr_t)page / 4096;
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33;   /* a hashed index */
  return (uint32_t)(x % s->colours);
}

/* A partial page shares some of its sets with this second colour: a full set of that colour
   evicts part of it (the plain test says yes), never most of it (the strict test says no). */
static bool is_partial(const sim_t* s, const void* page) { return ((uintptr_t)page / 4096 * 37 + 11) % 100 < s->partial_pct; }
static uint32_t second(const sim_t* s, const void* page) { return (oracle(s, page) + 1 + (uint32_t)((uintptr_t)page / 4096 % 5)) % s->colours; }

static uint32_t count_colour(const sim_t* s, void* r, void* const* pages, size_t n, uint32_t c) {
  uint32_t same = 0;
  for (size_t i = 0; i < n; i++) {
    bool dup = false;
    for (size_t j = 0; j < i && !dup; j++) dup = pages[j] == pages[i];
    if (!dup && pages[i] != r && oracle(s, pages[i]) == c) same++;
  }
  return same;
}

static bool noisy(sim_t* s, bool v) {
  s->rng ^= s->rng << 13; s->rng ^= s->rng >> 7; s->rng ^= s->rng << 17;
  if (s->burst_left > 0) { s->burst_left--; return false; }
  if (s->rng % 1000 < s->burst_pmil) { s->burst_left = BURST - 1; return false; }
  return (double)(s->rng % 1000000) < s->noise * 1e6 ? !v : v;
}

/* pages of other colours that share part of their sets with colour c */
static uint32_t count_partial(const sim_t* s, void* const* pages, size_t n, uint32_t c) {
  uint32_t k = 0;
  for (size_t i = 0; i < n; i++) k += is_partial(s, pages[i]) && oracle(s, pages[i]) != c && second(s, pages[i]) == c;
  return k;
}

static bool sim_evicts(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  sim_t* s = (sim_t*)p;
  p->tests++;
  uint32_t c = oracle(s, r), same = count_colour(s, r, pages, n, c);
  bool v = same >= s->ways
        || (is_partial(s, r) && count_colour(s, r, pages, n, second(s, r)) >= s->ways)
        || (s->adds_up && same + count_partial(s, pages, n, c) / 2 >= s->ways);
  return noisy(s, v);
}

static bool sim_evicts_fully(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  sim_t* s = (sim_t*)p;
  p->tests++;
  return noisy(s, count_colour(s, r, pages, n, oracle(s, r)) >= s->ways);
}
static void sim_prepare(ca_probe_t* p, void* r) { (void)p; (void)r; }
static bool sim_always(ca_probe_t* p, void* r, void* const* pages, size_t n) { (void)r; (void)pages; (void)n; p->tests++; return true; }

static sim_t sim(uint32_t colours, uint32_t ways, double noise) {
  sim_t s = { .base = { .evicts = sim_evicts, .prepare = sim_prepare }, .colours = colours, .ways = ways, .noise = noise,
              .rng = 0x2545F4914F6CDD1Dull };
  return s;
}

/* a page source of fake addresses: only the bookkeeping arrays are real */
static ca_page_source_t fake_source(size_t n, uintptr_t base) {
  ca_page_source_t src;
  src.npages = n;
  src.base = (uint8_t*)base;
  src.pages = calloc(n, sizeof(void*));
  src.reserved = calloc(n, 1);
  src.colour = malloc(n);
  src.tested = calloc(n, 1);
  memset(src.colour, 0xff, n);
  for (size_t i = 0; i < n; i++) src.pages[i] = (void*)(base + i * 4096);
  return src;
}
static void free_source(ca_page_source_t* s) { free(s->pages); free(s->reserved); free(s->colour); free(s->tested); }

static void test_reduce(double noise) {
  sim_t s = sim(32, 8, noise);
  ca_page_source_t src = fake_source(8192, 0x100000000ull);
  uint64_t rng = 7;
  int ok = 0, exact = 0, tries = 60;
  for (int t = 0; t < tries; t++) {
    void* cand[600];
    for (int i = 0; i < 600; i++) cand[i] = src.pages[1 + (t * 600 + i) % 8000];
    void* r = src.pages[8191 - t];
    int k = _ca_evset_reduce(&s.base, r, cand, 600, 8, &rng);
    if (k != 8) continue;
    ok++;
    bool all = true;
    for (int i = 0; i < 8; i++) all &= oracle(&s, cand[i]) == oracle(&s, r);
    exact += all;
  }
  fprintf(stderr, "reduce, noise %.1f%%: %d of %d sets built, %d exact, %.0f tests per try\n",
          noise * 100, ok, tries, exact, (double)s.base.tests / tries);
  CHECK_EQ(exact, ok);                 /* a set it returns never holds a page of another colour */
  CHECK(ok >= (noise == 0 ? tries : tries * 3 / 4));
  uint32_t failed = 0;                 /* each failed search is counted once, at its step */
  for (int i = 0; i < CA_SEARCH_STAGES; i++) failed += s.base.search_failed[i];
  CHECK_EQ((int)failed, tries - ok);
  /* candidates none of which has r's colour: the whole group evicts nothing, and that step is
     the one counted */
  void* cand[600], *r = src.pages[8000];
  int n = 0;
  for (int i = 0; i < 8000 && n < 600; i++) if (oracle(&s, src.pages[i]) != oracle(&s, r)) cand[n++] = src.pages[i];
  uint32_t whole = s.base.search_failed[CA_SEARCH_WHOLE];
  if (noise == 0) {
    CHECK_EQ(_ca_evset_reduce(&s.base, r, cand, n, 8, &rng), -1);
    CHECK_EQ(s.base.search_failed[CA_SEARCH_WHOLE], whole + 1);
  }
  free_source(&src);
}

/* Pages that share part of r's sets add up, at the plain rule, to an eviction that no set of
   r's colour explains (a Zen 5 L2: 36-44% of reductions stopped above 16 pages): the search asks
   whether a group evicts r clearly, and then builds exact sets where the plain question fails. */
/* Sets searched for `tries` references, 600 candidates each (8 ways): how many came out exact. */
static int exact_sets(sim_t* s, uintptr_t base, int tries, uint64_t rng) {
  ca_page_source_t src = fake_source(8192, base);
  int exact = 0;
  for (int t = 0; t < tries; t++) {
    void* cand[600];
    for (int i = 0; i < 600; i++) cand[i] = src.pages[1 + (t * 600 + i) % 8000];
    void* r = src.pages[8191 - t];
    if (_ca_evset_reduce(&s->base, r, cand, 600, 8, &rng) != 8) continue;
    bool all = true;
    for (int i = 0; i < 8; i++) all &= oracle(s, cand[i]) == oracle(s, r);
    exact += all;
  }
  free_source(&src);
  return exact;
}

static int reduce_exact(bool clearly, int tries) {
  sim_t s = sim(32, 8, 0.01);
  s.partial_pct = 33;
  s.adds_up = true;
  if (clearly) s.base.evicts_clearly = sim_evicts_fully;
  return exact_sets(&s, 0x300000000ull, tries, 5);
}

/* a clear rule above what a set of `ways` pages reads: only a group with twice as many pages
   of r's colour clears it (the whole candidate group does, no set does) */
static bool sim_evicts_too_clearly(ca_probe_t* p, void* r, void* const* pages, size_t n) {
  sim_t* s = (sim_t*)p;
  p->tests++;
  return noisy(s, count_colour(s, r, pages, n, oracle(s, r)) >= 2 * s->ways);
}

/* ... and one that nothing clears: the searches ask plainly, at once or after a streak of
   failures, and still build exact sets */
static void test_reduce_clear_rule_too_high(bool (*too_clearly)(ca_probe_t*, void*, void* const*, size_t), const char* what) {
  sim_t s = sim(32, 8, 0.01);
  s.base.evicts_clearly = too_clearly;
  int tries = 48, exact = exact_sets(&s, 0x400000000ull, tries, 9);
  fprintf(stderr, "reduce, clear rule too high (%s): %d of %d exact sets, %llu searches asked plainly\n",
          what, exact, tries, (unsigned long long)s.base.plain_searches);
  CHECK(exact >= tries / 3);
  CHECK(s.base.plain_searches > 0);
}

static bool sim_never(ca_probe_t* p, void* r, void* const* pages, size_t n) { p->tests++; return false; }

/* A group of 64 pages: 52 of the 1/8 slice (colours 0-1, *pure), the rest strays (returned);
   its controls are 16 pages of any colour. */
static uint32_t slice_group(sim_t* s, const ca_page_source_t* src, ca_audit_group_t* g, uint32_t* pure) {
  uint32_t stray = 0;
  *pure = 0;
  memset(g, 0, sizeof *g);
  for (size_t i = 3500; i < 3500 + CA_AUDIT_CONTROLS; i++) g->control[g->ncontrols++] = src->pages[i];
  for (size_t i = 0; i < src->npages && g->n < 64; i++) {
    bool of_slice = oracle(s, src->pages[i]) < 2;
    if (of_slice ? *pure < 52 : stray < 12) { g->page[g->n++] = src->pages[i]; *pure += of_slice; stray += !of_slice; }
  }
  return stray;
}

/* The slice audit (audit.c): a group of a 1/8 slice's pages, a fifth of them strays of other
   colours, is valid, loses exactly its strays, and then tells the slice's pages from the rest
   (evicted clearly, or not at the plain rule); so is it when no test reads "clearly"; a group of
   random pages is not valid (its members do not evict one another); and in a loud moment, when
   every test reads "evicted", a group of random pages is not judged (its controls are evicted
   like its members), no page passes as one of no slice colour, and none is admitted to the
   slice. */
static void test_audit(double noise) {
  sim_t s = sim(16, 16, noise);
  s.base.evicts_clearly = sim_evicts_fully;
  ca_page_source_t src = fake_source(4096, 0x700000000ull);
  ca_audit_group_t g;
  uint32_t pure, stray = slice_group(&s, &src, &g, &pure);
  uint32_t strays = 0;
  CHECK_EQ(_ca_audit_judge(&s.base, &g, &strays), CA_AUDIT_VALID);
  CHECK(g.valid);
  uint32_t kept_strays = 0, dropped_pure = 0;
  for (uint32_t i = 0; i < g.n; i++) kept_strays += oracle(&s, g.page[i]) >= 2;
  for (uint32_t i = g.n; i < g.n + strays; i++) dropped_pure += oracle(&s, g.page[i]) < 2;
  int wrong_in = 0, wrong_out = 0, in = 0, pages = 0;
  for (size_t i = 2048; i < 2048 + 400; i++) {
    bool of_slice = oracle(&s, src.pages[i]) < 2;
    bool says_in = _ca_audit_admits(&s.base, &g, src.pages[i]) == 1;
    bool says_out = !_ca_audit_evicts(&s.base, g.page, g.n, src.pages[i], false);
    wrong_in += says_in && !of_slice;
    wrong_out += says_out && of_slice;
    in += of_slice;
    pages++;
  }
  fprintf(stderr, "audit (noise %.2f): group of %u (%u strays): %u strays left, %u of the slice dropped; "
          "of %d pages (%d of the slice) %d taken for the slice wrongly, %d for none wrongly\n", noise, pure + stray, stray,
          kept_strays, dropped_pure, pages, in, wrong_in, wrong_out);
  CHECK(in > 20);
  if (noise == 0) {
    CHECK_EQ(kept_strays, 0);
    CHECK_EQ(dropped_pure, 0);
    CHECK_EQ(wrong_in + wrong_out, 0);
  } else {
    CHECK(kept_strays <= 1 && dropped_pure <= 2);
    CHECK(wrong_in + wrong_out <= pages / 25);
  }
  /* a moment in which the group evicts its members only in part (no member reads "clearly"):
     the pool is still of few colours, and only its strays leave (audit.c) */
  if (noise == 0) {
    ca_audit_group_t w;
    uint32_t w_strays = 0, w_pure, w_stray = slice_group(&s, &src, &w, &w_pure);
    s.base.evicts_clearly = sim_never;
    CHECK_EQ(_ca_audit_judge(&s.base, &w, &w_strays), CA_AUDIT_VALID);
    CHECK_EQ(w_strays, w_stray);
    s.base.evicts_clearly = sim_evicts_fully;
  }
  /* random pages: about 4 of each colour, fewer than the 16 ways */
  ca_audit_group_t r = { .n = 0 };
  for (size_t i = 3000; i < 3064; i++) r.page[r.n++] = src.pages[i];
  for (size_t i = 3500; i < 3500 + CA_AUDIT_CONTROLS; i++) r.control[r.ncontrols++] = src.pages[i];
  CHECK_EQ(_ca_audit_judge(&s.base, &r, &strays), CA_AUDIT_INVALID);
  CHECK(!r.valid && r.n == 64);
  /* a loud moment: every test says "evicted" */
  s.base.evicts = s.base.evicts_clearly = sim_always;
  CHECK_EQ(_ca_audit_judge(&s.base, &r, &strays), CA_AUDIT_LOUD);
  CHECK(!r.valid && r.n == 64);
  int said_out = 0, said_in = 0;
  for (size_t i = 2048; i < 2048 + 100; i++) {
    said_out += !_ca_audit_evicts(&s.base, g.page, g.n, src.pages[i], false);
    said_in += _ca_audit_admits(&s.base, &g, src.pages[i]) == 1;
  }
  CHECK_EQ(said_out, 0);
  CHECK_EQ(said_in, 0);
  free_source(&src);
}

static void test_reduce_adding_up(void) {
  int tries = 60, plain = reduce_exact(false, tries), clearly = reduce_exact(true, tries);
  fprintf(stderr, "reduce, partial pages adding up: %d of %d exact sets asking plainly, %d asking clearly\n",
          plain, tries, clearly);
  CHECK(clearly >= tries * 3 / 4);
  CHECK(clearly > plain);
}

static void test_discover(double noise, uint32_t burst_pmil) {
  sim_t s = sim(32, 8, noise);
  s.burst_pmil = burst_pmil;
  ca_page_source_t src = fake_source(4096, 0x200000000ull);
  static ca_colour_map_t map;
  memset(&map, 0, sizeof map);
  map.ways = 8;
  uint64_t rng = 11;
  ca_discovery_stats_t st = {0};
  uint32_t n = _ca_colour_discover(&s.base, &map, &src, 0, 16, 60000, &rng, &st);
  /* every colour once: the references' true colours are distinct and cover all 32 */
  uint64_t seen = 0;
  bool distinct = true, pure = true;
  for (uint32_t c = 0; c < n; c++) {
    uint32_t oc = oracle(&s, map.ref[c]);
    distinct &= !((seen >> oc) & 1);
    seen |= (uint64_t)1 << oc;
    for (uint32_t w = 0; w < map.ways; w++) pure &= oracle(&s, map.set[c][w]) == oc;
  }
  fprintf(stderr, "discover, noise %.1f%%, bursts %.1f%%: %u colours (%lu builds, %lu failed, %lu duplicates)\n",
          noise * 100, burst_pmil / 10.0, n, (unsigned long)st.set_builds, (unsigned long)st.set_failures, (unsigned long)st.duplicates);
  CHECK_EQ(n, 32);
  CHECK(distinct);                     /* with bursts: duplicates slip past the check on entry */
  CHECK(pure);
  if (burst_pmil > 0) CHECK(st.duplicates > 0);
  s.burst_pmil = 0;
  /* classification of pages nobody used agrees with the oracle */
  ca_page_source_t other = fake_source(2000, 0x300000000ull);
  int agree = 0, claimed = 0;
  for (size_t i = 0; i < other.npages; i++) {
    int c = _ca_colour_classify(&s.base, &map, other.pages[i], ~(uint64_t)0);
    if (c < 0) continue;
    claimed++;
    agree += oracle(&s, map.ref[c]) == oracle(&s, other.pages[i]);
  }
  fprintf(stderr, "classify, noise %.1f%%: %d of %zu pages claimed, %d agree with the oracle\n",
          noise * 100, claimed, other.npages, agree);
  CHECK(claimed >= (int)other.npages * 95 / 100);
  CHECK(agree >= claimed * 98 / 100);
  free_source(&other);
  free_source(&src);
}

/* The colour of a live page (chromalloc_colour_of's test): a set with one member replaced by
   the page still evicts its reference only if the page is of its colour; a page two colours
   claim (a loud moment: every colour claims every page) cannot be told. */
static void test_of_live(void) {
  sim_t s = sim(32, 8, 0);
  ca_page_source_t src = fake_source(4096, 0x500000000ull);
  static ca_colour_map_t map;
  memset(&map, 0, sizeof map);
  map.ways = 8;
  uint64_t rng = 5;
  CHECK_EQ(_ca_colour_discover(&s.base, &map, &src, 8, 32, 60000, &rng, NULL) >= 8, 1);
  ca_page_source_t pages = fake_source(600, 0x600000000ull);
  int right = 0, known = 0;
  for (size_t i = 0; i < pages.npages; i++) {
    int want = -1;
    for (uint32_t c = 0; c < map.ncolours; c++) if (oracle(&s, map.ref[c]) == oracle(&s, pages.pages[i])) want = (int)c;
    right += _ca_colour_of_live(&s.base, &map, pages.pages[i], ~(uint64_t)0, 3, 3, CA_ASK_PLAIN) == want;
    known += want >= 0;
  }
  CHECK_EQ(right, (int)pages.npages);
  CHECK(known > 100);
  s.base.evicts = sim_always;
  CHECK_EQ(_ca_colour_of_live(&s.base, &map, pages.pages[0], ~(uint64_t)0, 3, 3, CA_ASK_PLAIN), -1);
  free_source(&pages);
  free_source(&src);
}

static void test_profile(void) {
  ca_calibration_t a, b;
  memset(&a, 0, sizeof a);
  strcpy(a.cpu, "Test CPU 9000");
  a.usable = true;
  a.level = 2; a.method = CA_METHOD_TIMING; a.colours = 32; a.ways = 8; a.line = 64;
  a.measured_size = 1 << 20; a.sysfs_size = 512 << 10; a.sysfs_ways = 8; a.expected_colours = 16;
  a.hit_ticks = 700; a.miss_ticks = 2600; a.threshold = 1460; a.ticks_per_us = 2250.5;
  a.agreement = 0.9917; a.classify_restricted_us = 31.25;
  char j1[4096], j2[4096];
  ca_buf_t b1 = ca_buf(j1, sizeof j1);
  _ca_calibration_json(&a, &b1);
  CHECK(_ca_calibration_parse(&b, j1));
  ca_buf_t b2 = ca_buf(j2, sizeof j2);
  _ca_calibration_json(&b, &b2);
  CHECK(strcmp(j1, j2) == 0);
  CHECK(b.colours == 32 && b.ways == 8 && b.method == CA_METHOD_TIMING && b.usable);
  CHECK(!_ca_calibration_parse(&b, "{\"profile_version\":2}"));
}

/* Pools on real pages: filling a range moves the pool's pages (their data comes along: the
   frames are kept), taking it back returns those same frames to the pool and leaves the range
   ordinary zero memory; a fill without enough stock changes nothing. */
static void test_pool(void) {
  CHECK(_ca_pool_init());
  ca_page_pool_t pool = {0};
  bool fresh;
  uint8_t* supply = _ca_pool_supply(24, &fresh);
  CHECK(!fresh);                                        /* not a huge page: 24 pages */
  for (int i = 0; i < 24; i++) { memset(supply + i * 4096, 'a' + i, 4096); CHECK(_ca_pool_push(&pool, supply + i * 4096)); }
  CHECK_EQ(pool.count, 24);
  uint8_t* range = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(_ca_pool_fill(&pool, range, 16 * 4096));
  CHECK_EQ(pool.count, 8);
  CHECK_EQ(pool.handed, 16);
  bool moved = true, seen[24] = {false};                /* 16 distinct pool pages, from anywhere in it */
  for (int i = 0; i < 16; i++) {
    int k = range[i * 4096] - 'a';
    moved &= k >= 0 && k < 24 && !seen[k] && range[i * 4096 + 4095] == 'a' + k;
    if (k >= 0 && k < 24) seen[k] = true;
  }
  CHECK(moved);
  for (int i = 0; i < 16; i++) range[i * 4096 + 100] = 'Z';             /* used as memory */
  CHECK(!_ca_pool_fill(&pool, range, 16 * 4096));       /* 8 left: nothing happens */
  CHECK_EQ(pool.count, 8);
  _ca_pool_take_back(&pool, range, 16 * 4096);
  CHECK_EQ(pool.count, 24);
  CHECK_EQ(pool.returned, 16);
  bool zero = true, kept = true;
  for (int i = 0; i < 16 * 4096; i += 512) zero &= range[i] == 0;       /* ordinary again */
  for (int i = 8; i < 24; i++) kept &= ((uint8_t*)pool.pages[i])[100] == 'Z';   /* same frames */
  CHECK(zero);
  CHECK(kept);
  CHECK_EQ(_ca_pool_moved(), 0);
  munmap(range, 16 * 4096);
}

/* A map of every colour of the simulated cache, found from src (`expected`: the colour count the discovery is told to expect) */
static uint32_t discover_all(sim_t* s, ca_page_source_t* src, ca_colour_map_t* map, uint32_t expected) {
  memset(map, 0, sizeof *map);
  map->ways = s->ways;
  uint64_t rng = 5;
  return _ca_colour_discover(&s->base, map, src, 0, expected, 60000, &rng, NULL);
}

/* Pages that share part of their sets with a second colour (a third of them, as on a Zen 5 L2)
   join that colour's pool under the plain test; the strict test keeps them out. */
static void test_partial(void) {
  sim_t s = sim(32, 8, 0);
  ca_page_source_t src = fake_source(4096, 0x400000000ull);
  static ca_colour_map_t map;
  CHECK_EQ(discover_all(&s, &src, &map, 32), 32);
  int index_of[64];
  for (uint32_t c = 0; c < map.ncolours; c++) index_of[oracle(&s, map.ref[c])] = (int)c;
  s.partial_pct = 33;
  s.base.evicts_fully = sim_evicts_fully;
  ca_page_source_t other = fake_source(600, 0x500000000ull);
  int partial = 0, plain_wrong = 0, strict_wrong = 0, strict_right = 0;
  for (size_t i = 0; i < other.npages; i++) {
    void* pg = other.pages[i];
    if (!is_partial(&s, pg)) continue;
    partial++;
    uint64_t wrong = (uint64_t)1 << index_of[second(&s, pg)], right = (uint64_t)1 << index_of[oracle(&s, pg)];
    plain_wrong += _ca_colour_classify_n(&s.base, &map, pg, wrong, 3, 3, CA_ASK_PLAIN) >= 0;
    strict_wrong += _ca_colour_classify(&s.base, &map, pg, wrong) >= 0;
    strict_right += _ca_colour_classify(&s.base, &map, pg, right) >= 0;
  }
  fprintf(stderr, "partial pages: %d; into the wrong colour's pool: plain test %d, strict %d; strict right %d\n",
          partial, plain_wrong, strict_wrong, strict_right);
  CHECK(partial > 100);
  CHECK_EQ(plain_wrong, partial);     /* what the strict test is for */
  CHECK_EQ(strict_wrong, 0);
  CHECK_EQ(strict_right, partial);
  free_source(&other);
  free_source(&src);
}

/* Stocking's classification (_ca_colour_find: a union test per group of colours first) claims
   the same pages as colour-by-colour classification, with partial pages and noise too, and
   turns away a page of another colour with fewer tests. */
static void test_find(void) {
  sim_t s = sim(32, 8, 0);
  ca_page_source_t src = fake_source(4096, 0x600000000ull);
  static ca_colour_map_t map;
  CHECK_EQ(discover_all(&s, &src, &map, 32), 32);
  s.partial_pct = 33;
  s.base.evicts_fully = sim_evicts_fully;
  uint64_t slice = 0;                               /* 1/8 of the colours: four, not adjacent */
  for (uint32_t c = 0; c < 32; c += 8) slice |= (uint64_t)1 << (c + 3);
  ca_page_source_t other = fake_source(2000, 0x700000000ull);
  int same = 0, in_slice = 0, found = 0, wrong = 0;
  uint64_t t_find = 0, t_classify = 0;
  for (size_t i = 0; i < other.npages; i++) {
    void* page = other.pages[i];
    uint64_t t0 = s.base.tests;
    int f = _ca_colour_find(&s.base, &map, page, slice);
    uint64_t t1 = s.base.tests;
    int c = _ca_colour_classify(&s.base, &map, page, slice);
    t_find += t1 - t0;
    t_classify += s.base.tests - t1;
    same += f == c;
    in_slice += c >= 0;
    found += f >= 0;
    wrong += f >= 0 && oracle(&s, map.ref[f]) != oracle(&s, page);
  }
  fprintf(stderr, "find vs classify against 1/8: %d of %zu pages the same, %d found; tests per page %.2f vs %.2f\n",
          same, other.npages, found, (double)t_find / other.npages, (double)t_classify / other.npages);
  CHECK_EQ(same, (int)other.npages);
  CHECK(in_slice > 150 && wrong == 0);
  CHECK(t_find * 2 < t_classify);
  /* noise: what it claims is still right */
  s.noise = 0.01;
  found = wrong = 0;
  for (size_t i = 0; i < other.npages; i++) {
    int f = _ca_colour_find(&s.base, &map, other.pages[i], slice);
    found += f >= 0;
    wrong += f >= 0 && oracle(&s, map.ref[f]) != oracle(&s, other.pages[i]);
  }
  fprintf(stderr, "find with 1%% noise: %d found, %d of another colour\n", found, wrong);
  CHECK(found > in_slice * 9 / 10 && wrong <= found / 50);
  free_source(&other);
  free_source(&src);
}

/* ---- protection with a fake move ------------------------------------------------------------ */
#define PBASE ((uintptr_t)1 << 40)                /* fake page addresses, never touched */
static uint8_t p_moved[1024];
static int p_move_answer = 1;
static _Atomic(int) p_slow;                       /* move sleeps this many ms */
static _Atomic(int) p_inside;

static bool p_fake(const void* page) { return (uintptr_t)page >= PBASE && (uintptr_t)page < PBASE + 1024 * 4096; }
static size_t p_index(const void* page) { return ((uintptr_t)page - PBASE) / 4096; }
static int fake_move(void* page, int from, int to) {
  CHECK_EQ(from, 1);
  CHECK_EQ(to, 2);
  CHECK(p_fake(page));
  atomic_store(&p_inside, 1);
  int ms = atomic_load(&p_slow);
  if (ms) { struct timespec t = { 0, ms * 1000000L }; nanosleep(&t, NULL); }
  atomic_store(&p_inside, 0);
  if (p_move_answer == 1) p_moved[p_index(page)]++;
  return p_move_answer;
}
static bool fake_resident(const void* page) { return p_index(page) != 11; }   /* never touched */
static const ca_protect_ops_t fake_ops = { fake_move, fake_resident };
static void* pg(size_t i) { return (void*)(PBASE + i * 4096); }
static void sleep_ms(int ms) { struct timespec t = { ms / 1000, ms % 1000 * 1000000L }; nanosleep(&t, NULL); }
static int moved_in(size_t from, size_t to) { int n = 0; for (size_t i = from; i < to; i++) n += p_moved[i]; return n; }

static void* remover(void* key) {
  while (!atomic_load(&p_inside)) {}
  _ca_protect_remove(key);
  CHECK_EQ(atomic_load(&p_inside), 0);            /* returned only after the page was done */
  return NULL;
}

static void test_protect(void) {
  /* ranges A = pages 0..63, B = 64..95 (removed before it is looked at), C = 100..115 given
     unaligned (only whole pages count: 101..115) */
  _ca_hooks_install(NULL);                                  /* no more of the process's memory */
  _ca_protect_release(NULL, SIZE_MAX);                      /* and none of what was recorded */
  size_t own = _ca_protect_pages();
  CHECK_EQ(own, 0);
  _ca_protect_init(64 * 4096, 64 + 32 + 15);               /* room for A, B and C */
  _ca_protect_add(pg(300), pg(300), 65 * 4096);             /* too big a range: not recorded */
  _ca_protect_add(pg(0), pg(0), 64 * 4096);
  _ca_protect_add(pg(64), pg(64), 32 * 4096);
  _ca_protect_add(pg(100), (uint8_t*)pg(100) + 8, 16 * 4096 - 8);
  CHECK_EQ(_ca_protect_pages(), 64 + 32 + 15);
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);           /* not armed: nothing */
  _ca_protect_arm(1, 2);
  CHECK(_ca_protect_armed());
  CHECK(_ca_protect_work(&fake_ops, 100000) > 0);             /* too young: pending, not moved */
  CHECK_EQ(moved_in(0, 1024), 0);
  sleep_ms(25);
  _ca_protect_remove(pg(64));
  p_move_answer = 0;                                        /* no stock: stops, the page waits */
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 64 + 15);
  p_move_answer = 1;
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);
  /* every touched page moved once, whatever its colour; the untouched one (11) left alone */
  for (size_t i = 0; i < 1024; i++) {
    bool live = (i < 64 && i != 11) || (i >= 101 && i < 116);
    CHECK_EQ(p_moved[i], live ? 1 : 0);
  }
  char json[1024];
  ca_buf_t b = ca_buf(json, sizeof json);
  _ca_protect_stats_json(&b);
  CHECK(strstr(json, "\"pages_checked\":79,") != NULL && strstr(json, "\"pages_untouched\":1,") != NULL &&
        strstr(json, "\"pages_moved\":78,") != NULL);
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);           /* looked at once */
  CHECK_EQ(moved_in(0, 1024), 78);
  /* removing a range waits while the worker is at one of its pages */
  _ca_protect_release(NULL, SIZE_MAX);
  _ca_protect_add(pg(200), pg(200), 4 * 4096);
  sleep_ms(25);
  atomic_store(&p_slow, 30);
  pthread_t t;
  pthread_create(&t, NULL, remover, pg(200));
  _ca_protect_work(&fake_ops, 1);
  pthread_join(t, NULL);
  atomic_store(&p_slow, 0);
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);
  CHECK_EQ(moved_in(200, 204), 1);
  /* a system call's buffer (or the program's mprotect) drops every range it touches */
  _ca_protect_add(pg(460), pg(460), 4 * 4096);
  _ca_protect_add(pg(470), pg(470), 4 * 4096);
  _ca_protect_add(pg(480), pg(480), 4 * 4096);
  CHECK_EQ(_ca_protect_pages(), 12);
  _ca_protect_release((uint8_t*)pg(463) + 100, 8 * 4096);   /* the end of one, the start of the next */
  CHECK_EQ(_ca_protect_pages(), 4);
  sleep_ms(25);
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);
  CHECK_EQ(moved_in(460, 480), 0);
  CHECK_EQ(moved_in(480, 484), 4);
  /* the move cap stops protection for good; a range beyond the budget is not recorded */
  _ca_protect_add(pg(240), pg(240), 8 * 4096);
  _ca_protect_add(pg(400), pg(400), 60 * 4096);
  _ca_protect_add(pg(600), pg(600), 60 * 4096);            /* 132 pages: beyond the 111 */
  CHECK_EQ(_ca_protect_pages(), 4 + 8 + 60);
  sleep_ms(25);
  p_move_answer = -1;
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);
  p_move_answer = 1;
  CHECK_EQ(_ca_protect_work(&fake_ops, 100000), 0);
  CHECK_EQ(moved_in(240, 1024) - moved_in(480, 484), 0);
}

/* The interposed system calls drop a recorded range their buffer lies in: a page being
   recoloured is read-only for a moment, and read(2) into it would fail with EFAULT. */
static void test_protect_syscalls(void) {
  static char buf[8 * 4096] __attribute__((aligned(4096)));
  int fd[2];
  CHECK(pipe(fd) == 0);
  CHECK(write(fd[1], "abc", 3) == 3);
  size_t before = _ca_protect_pages();
  _ca_protect_add(buf, buf, sizeof buf);
  CHECK_EQ(_ca_protect_pages(), before + 8);
  CHECK(read(fd[0], buf + 5 * 4096, 3) == 3);
  CHECK_EQ(_ca_protect_pages(), before);
  _ca_protect_add(buf, buf, sizeof buf);
  CHECK(mprotect(buf, 4096, PROT_READ) == 0);
  CHECK(mprotect(buf, 4096, PROT_READ | PROT_WRITE) == 0);
  CHECK_EQ(_ca_protect_pages(), before);
  /* the program recolouring its memory itself: protection lets it be */
  _ca_protect_add(buf, buf, sizeof buf);
  CHECK(chromalloc_recolour(buf + 2 * 4096, 4096, 1) >= 0);
  CHECK_EQ(_ca_protect_pages(), before);
  close(fd[0]);
  close(fd[1]);
}

/* 32768 fresh pages classified against the first 1/8 of the colours, as the worker stocks */
static ca_stock_progress_t stock_stretch(sim_t* s, const ca_colour_map_t* map, uint64_t base) {
  uint64_t mask = 0;
  for (uint32_t c = 0; c < map->ncolours; c++) if (oracle(s, map->ref[c]) < s->colours / 8) mask |= (uint64_t)1 << c;
  size_t taken = 0, n = 32768;
  for (size_t i = 0; i < n; i++) taken += _ca_colour_classify(&s->base, map, (void*)(uintptr_t)(base + i * 4096), mask) >= 0;
  fprintf(stderr, "stock stretch: %zu of %zu pages taken\n", taken, n);
  return _ca_colour_progress(n, taken);
}

static void test_stock_progress(void) {
  sim_t s = sim(32, 8, 0.01);
  ca_page_source_t src = fake_source(4096, 0x200000000ull);
  static ca_colour_map_t map;
  CHECK_EQ(discover_all(&s, &src, &map, 16), 32);
  CHECK_EQ(stock_stretch(&s, &map, 0x400000000ull), CA_STOCK_OK);
  /* sets of no colour: members of eight different colours */
  for (uint32_t c = 0; c < map.ncolours; c++)
    for (uint32_t w = 0; w < map.ways; w++)
      for (size_t i = 0; i < src.npages; i++)
        if (oracle(&s, src.pages[i]) == (oracle(&s, map.ref[c]) + 1 + w) % s.colours) { map.set[c][w] = src.pages[i]; break; }
  CHECK_EQ(stock_stretch(&s, &map, 0x500000000ull), CA_STOCK_STARVED);
  CHECK_EQ(_ca_colour_progress(32768, 100), CA_STOCK_SLOW);   /* 1 in 328: a noisy moment */
  uint64_t ms = 0, seen[8];
  for (int i = 0; i < 8; i++) seen[i] = ms = _ca_colour_backoff(ms, true);
  CHECK_EQ(seen[0], 500);
  CHECK_EQ(seen[1], 1000);
  CHECK_EQ(seen[6], 30000);                                 /* 32 s capped */
  CHECK_EQ(seen[7], 30000);
  CHECK_EQ(_ca_colour_backoff(ms, false), 0);
  /* colour_worker: the worker's CPU time since the pace began within pct% of the program's
     since then, plus a 50 ms allowance; the excess in ns */
  const uint64_t S = 1000000000ull, MS = 1000000ull;
  CHECK_EQ(_ca_colour_pace_ns(10 * S, S, 100), 0);          /* 100: no limit */
  CHECK_EQ(_ca_colour_pace_ns(40 * MS, 0, 2), 0);           /* within the allowance, the program idle */
  CHECK_EQ(_ca_colour_pace_ns(60 * MS, 0, 2), 10 * MS);     /* beyond it */
  CHECK_EQ(_ca_colour_pace_ns(60 * MS, S, 2), 0);           /* 2% of a second of the program's: 20 ms more */
  CHECK_EQ(_ca_colour_pace_ns(100 * MS, S, 2), 30 * MS);
  CHECK_EQ(_ca_colour_pace_ns(300 * MS, 10 * S, 2), 50 * MS);
  /* the sets go at the second bad judgement in a row, not at the first, nor after a good one */
  bool suspected = false;
  CHECK(!_ca_colour_suspect(&suspected, true, false));
  CHECK(_ca_colour_suspect(&suspected, true, false));
  CHECK(!_ca_colour_suspect(&suspected, true, false));       /* dropped: the count starts again */
  CHECK(!_ca_colour_suspect(&suspected, false, false));      /* a round without judgement */
  CHECK(_ca_colour_suspect(&suspected, true, false));
  CHECK(!_ca_colour_suspect(&suspected, true, false));
  CHECK(!_ca_colour_suspect(&suspected, false, true));       /* a good judgement clears it */
  CHECK(!_ca_colour_suspect(&suspected, true, false));
  free_source(&src);
}

/* Trimming a (real) page source gives back the frames of the pages no set uses and forgets
   their colours; the sets keep theirs, and a later discovery faults the others in again and
   finds more colours from them. */
static void test_trim(void) {
  sim_t s = sim(32, 8, 0);
  ca_page_source_t src;
  memset(&src, 0, sizeof src);
  CHECK(_ca_page_source_init(&src, 4096));
  static ca_colour_map_t map;
  memset(&map, 0, sizeof map);
  map.ways = 8;
  uint64_t rng = 3;
  CHECK_EQ(_ca_colour_discover(&s.base, &map, &src, 4, 32, 60000, &rng, NULL), 4);
  _ca_page_source_trim(&src);
  CHECK(src.trimmed);
  size_t kept = 0, given_back = 0, free_pages = 0;
  bool forgotten = true, known = true;
  for (size_t i = 0; i < src.npages; i++) {
    unsigned char v = 0;
    known &= mincore(src.pages[i], 4096, &v) == 0;
    if (src.reserved[i]) { kept += v & 1; continue; }
    free_pages++;
    given_back += !(v & 1);
    forgotten &= src.colour[i] == -1 && src.tested[i] == 0;
  }
  size_t reserved = src.npages - free_pages;
  CHECK(known);
  CHECK(reserved >= 4 * 9);                        /* four sets of 8 and their references */
  CHECK_EQ(kept, reserved);
  CHECK_EQ(given_back, free_pages);
  CHECK(forgotten);
  CHECK_EQ(_ca_colour_discover(&s.base, &map, &src, 8, 32, 60000, &rng, NULL), 8);
  CHECK(!src.trimmed);
  _ca_page_source_free(&src);
}

/* The timing probe asked to re-place its rule with no eviction sets (the worker's quiet_window
   right after the sets were dropped) keeps the rule it has: it read the median of no readings,
   stack garbage, and set_ratio_pct, full_pct and the worker's best reading with it. */
__attribute__((noinline)) static void dirty_stack(void) {
  volatile uint32_t junk[4096];
  for (int i = 0; i < 4096; i++) junk[i] = 0xA5A5A5A5u + (uint32_t)i;
  (void)junk[4095];
}

static void test_recalibrate_without_sets(void) {
#if defined(__x86_64__)
  static ca_timing_probe_t tp;
  _ca_probe_timing_init(&tp, 1u << 20, 8);     /* the levels apart or not: the rule is placed */
  uint32_t ratio = tp.ratio_pct, set = tp.set_ratio_pct, full = tp.full_pct, clear = tp.clear_pct;
  dirty_stack();
  tp.base.recalibrate(&tp.base, NULL, NULL, 0, 16);
  CHECK_EQ(tp.set_ratio_pct, set);
  CHECK_EQ(tp.full_pct, full);
  CHECK_EQ(tp.ratio_pct, ratio);
  CHECK_EQ(tp.clear_pct, clear);
  CHECK(!tp.passes_chosen);                     /* chosen from sets only */
#endif
}

/* ---- the slice test (stock.c) against readings, not answers ------------------------------
   A reading model: a page evicted by the group reads `full`% of a quiet chase, a page sharing a
   quarter of its sets with one of the group's colours 135%, any other 95%, each with noise of
   +-`spread` points, and one reading in 100 of an uninvolved page an outlier of 260%; a loud
   moment reads 250% whatever the group. */
typedef struct { sim_t s; uint32_t full, spread; bool loud; } reader_t;
static reader_t R;

static uint32_t reading(ca_probe_t* p, void* r, void* const* pages, size_t n, int reps) {
  (void)p; (void)reps;
  sim_t* s = &R.s;
  s->rng ^= s->rng << 13; s->rng ^= s->rng >> 7; s->rng ^= s->rng << 17;
  int jitter = (int)(s->rng % (2 * R.spread + 1)) - (int)R.spread;
  if (R.loud) return 250;
  uint32_t c = oracle(s, r);
  if (count_colour(s, r, pages, n, c) >= s->ways) return (uint32_t)((int)R.full + jitter);
  if (is_partial(s, r) && count_colour(s, r, pages, n, second(s, r)) >= s->ways) return (uint32_t)(135 + jitter);
  return s->rng % 100 == 7 ? 260 : (uint32_t)(95 + jitter);
}

/* The slice test on 20,000 fresh pages against the first 1/8 of 32 colours, 10% of them sharing a
   quarter of their sets with another colour: it takes nearly every page of the slice, almost no
   other page, and no page that only shares sets with the slice; classification sends the slice's
   pages to the 1/8 set and the others to the 7/8 set by elimination, and the partial pages to
   neither; the controls pass in a quiet moment and fail in a loud one. */
static void test_slice(void) {
  R = (reader_t){ .s = sim(32, 8, 0), .full = 220, .spread = 25 };
  ca_page_source_t src = fake_source(4096, 0x600000000ull);
  static ca_colour_map_t map;
  CHECK_EQ(discover_all(&R.s, &src, &map, 32), 32);
  R.s.partial_pct = 10;
  L.map = map;
  L.probe.base.prepare = sim_prepare;
  L.probe.base.ratio = reading;
  L.probe.set_ratio_pct = 220;
  L.effect_pct = L.effect_next = 0;
  uint64_t slice = 0;
  bool in_slice[64] = { false };
  for (uint32_t c = 0; c < map.ncolours; c++)
    if (oracle(&R.s, map.ref[c]) < 4) { slice |= (uint64_t)1 << c; in_slice[oracle(&R.s, map.ref[c])] = true; }
  CHECK_EQ(__builtin_popcountll(slice), 4);
  ca_plan_t plan = { .n = 2, .id = { 1, 2 }, .mask = { slice, slice }, .in = { true, false } };
  int members = 0, taken = 0, others = 0, strays = 0, partials = 0, partial_in = 0, to_rest = 0, rest_right = 0;
  for (int i = 0; i < 20000; i++) {
    void* pg = (void*)(uintptr_t)(0x700000000ull + (uint64_t)i * 4096);
    bool member = in_slice[oracle(&R.s, pg)], partial = !member && is_partial(&R.s, pg) && in_slice[second(&R.s, pg)];
    int colour = -3, id = _ca_cs_classify(pg, &plan, &colour);
    if (member) { members++; taken += id == 1; CHECK(id != 2); }
    else if (partial) { partials++; partial_in += id == 1; }
    else { others++; strays += id == 1; to_rest += id == 2; }
    rest_right += id == 2 && !member && !partial;
  }
  fprintf(stderr, "slice test: %d of %d pages of the slice taken, %d of %d others, %d of %d partial; %d others to the rest\n",
          taken, members, strays, others, partial_in, partials, to_rest);
  CHECK(taken * 100 >= members * 97);
  CHECK(strays * 1000 <= others);
  CHECK_EQ(partial_in, 0);
  CHECK(partials > 100);
  CHECK(to_rest * 100 >= others * 97);
  uint32_t passed = 0;
  for (uint32_t t = 0; t < 100; t++) passed += _ca_cs_controls(slice, t);
  CHECK(passed >= 97);
  CHECK(L.effect_pct >= 200 && L.effect_pct <= 240);         /* what the sets read now */
  R.loud = true;
  passed = 0;
  for (uint32_t t = 0; t < 100; t++) passed += _ca_cs_controls(slice, t);
  CHECK_EQ(passed, 0);
  memset(&L.map, 0, sizeof L.map);
  free_source(&src);
}

int main(void) {
  require_chromalloc("test_colour");
  test_pool();
  test_reduce(0);
  test_reduce(0.01);
  test_reduce_adding_up();
  test_reduce_clear_rule_too_high(sim_never, "nothing clears it");
  test_reduce_clear_rule_too_high(sim_evicts_too_clearly, "no set clears it");
  test_discover(0, 40);
  test_discover(0.01, 0);
  test_discover(0, 40);
  test_profile();
  test_of_live();
  test_partial();
  test_find();
  test_protect();
  test_protect_syscalls();
  test_stock_progress();
  test_trim();
  test_audit(0);
  test_audit(0.01);
  test_recalibrate_without_sets();
  test_slice();
  return check_done("test_colour");
}
