/* Calibration: find out how this machine's L2 colours can be controlled from user space, and
   discover them.

   Which level: the largest private data level (sharing one CPU), the L2 here.  L1 has a
   single colour wherever its ways are no bigger than a page (32 KiB / 8 ways = 4 KiB here: the
   set index lies inside the page, and index-aware placement is all there is to do); a shared
   L3 belongs to other tenants too in a cloud VM (only ~4-6 MiB of its 32 MiB is ours here),
   which no user-space timing can partition reliably, so it is not attempted.

   How: three sources of a page's colour, cheapest first, each *verified by timing* before it
   is trusted: (1) address bits inside a transparent huge page (bare metal: the page offset
   inside 2 MiB is physical), (2) /proc/self/pagemap frame numbers (root only), (3) eviction
   sets, one per colour, found by group testing (evset.c).  The check for (1) and (2): pages
   that the source says share a reference page's colour, `ways` of them, must evict it, and
   pages it says differ must not.  In a VM whose host backs memory with 4 KiB pages both fail,
   and timing is the method.

   Discovery: take pages of a scratch region in random order; a page that no known set evicts
   starts a new colour (an eviction set built for it, kept unless it evicts an existing
   colour's reference, i.e. duplicates one); stop when many pages in a row fall into known
   colours.  The number of colours found is the measurement; sysfs's geometry is only what it
   is compared with (a VM may describe its caches as it likes). */
#define _GNU_SOURCE
#include "colour.h"
#include <sched.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>

static uint64_t rnd(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13; x ^= x >> 7; x ^= x << 17;
  return *s = x;
}

/* ---- classification ----------------------------------------------------------------------- */

/* A page is tested against up to every colour of the mask, and the first positive answer wins,
   so a false "evicts" (on a busy host up to 1 test in 7, as inferred from two calibrations
   agreeing on only 42-58% of pages) must be rare indeed: a positive answer counts only when
   CONFIRM tests in a row give it, each asking whether most of the page is evicted (a page
   sharing only part of its sets with a colour must not count as that colour).  With two, that
   rate puts up to a third of other colours' pages into a 1/8 pool (and a polluter confined to
   it recovered 0-100% of the gap from run to run); each further test costs only the pages that
   pass the first. */
#define CONFIRM 3

/* Yes when the first of `confirm` tests says so and `need` of them do (stopping as soon as the
   answer is known): a page of another colour is turned away by one test, the usual case.  The
   probe's plain question where it lacks the one asked. */
bool _ca_evicts_confirmed(ca_probe_t* p, void* ref, void* const* set, size_t ways, int confirm, int need, ca_ask_t ask) {
  bool (*test)(ca_probe_t*, void*, void* const*, size_t) =
    ask == CA_ASK_FULLY && p->evicts_fully ? p->evicts_fully : ask == CA_ASK_CLEARLY && p->evicts_clearly ? p->evicts_clearly : p->evicts;
  int yes = 0;
  for (int k = 0; k < confirm && yes < need && yes + (confirm - k) >= need; k++) {
    bool v = test(p, ref, set, ways);
    if (k == 0 && !v) return false;
    yes += v;
  }
  return yes >= need;
}

/* Colour of `page` among the colours in `mask`, or -1, a positive answer confirmed by `need` of
   `confirm` tests, the first among them (of the stricter kind when `fully`).  `page` becomes a
   probe reference (its contents are overwritten), so only pool pages are classified this way. */
int _ca_colour_classify_n(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask, int confirm, int need, ca_ask_t ask) {
  p->prepare(p, page);
  for (uint32_t c = 0; c < map->ncolours; c++)
    if ((mask >> c) & 1 && _ca_evicts_confirmed(p, page, (void* const*)map->set[c], map->ways, confirm, need, ask)) return (int)c;
  return -1;
}

/* _ca_colour_find: _ca_colour_classify for callers to whom a missed page costs only a page (pool
   stocking, never elimination).  The colours of `mask` are taken UNION_MAX at a time: one plain
   test against the union of their eviction sets says whether the page can be of any of them (a
   page of colour c is evicted by any union that holds c's set; the other colours' pages fill
   other L2 sets), and only a group that evicts it is tested colour by colour.  A page of none
   of them costs one test per group instead of one per colour: against a 1/8 slice of 32
   colours, 7 of 8 pages take one test instead of four.  A noisy test that says "not evicted"
   loses the page once more than before (the union's and the colour's); elimination, which
   takes what no colour claims, must not use it. */
#define UNION_MAX 4

int _ca_colour_find(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask) {
  p->prepare(p, page);
  void* group[UNION_MAX * CA_WAYS_MAX];
  uint32_t members[UNION_MAX];
  for (uint32_t from = 0; from < map->ncolours; ) {
    uint32_t n = 0;
    for (; from < map->ncolours && n < UNION_MAX; from++) {
      if (!((mask >> from) & 1)) continue;
      memcpy(group + n * map->ways, map->set[from], map->ways * sizeof(void*));
      members[n++] = from;
    }
    if (n == 0 || (n > 1 && !p->evicts(p, page, (void* const*)group, n * map->ways))) continue;
    for (uint32_t k = 0; k < n; k++)
      if (_ca_evicts_confirmed(p, page, (void* const*)map->set[members[k]], map->ways, CONFIRM, CONFIRM, CA_ASK_FULLY)) return (int)members[k];
  }
  return -1;
}

int _ca_colour_classify(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask) {
  return _ca_colour_classify_n(p, map, page, mask, CONFIRM, CONFIRM, CA_ASK_FULLY);
}

/* Colour of a live page without writing to it: it replaces one member of each candidate set,
   and the set still evicts that colour's reference only if the page has the colour.  `need` of
   `confirm` tests must say so (as `ask` says).  Every candidate is asked, and a page two
   colours claim cannot be told (-1): in a loud moment every set "evicts" with any member
   replaced, and the first colour asked took the page (test_colour_api on the Zen 5 host: looks
   that placed 64 of 64 ordinary pages, 59 of them in the first eighth, the first colours asked). */
int _ca_colour_of_live(ca_probe_t* p, const ca_colour_map_t* map, const void* page, uint64_t mask, int confirm, int need, ca_ask_t ask) {
  void* trial[CA_WAYS_MAX];
  int found = -1;
  for (uint32_t c = 0; c < map->ncolours; c++) {
    if (!((mask >> c) & 1)) continue;
    memcpy(trial, map->set[c], map->ways * sizeof(void*));
    trial[0] = (void*)page;
    p->prepare(p, map->ref[c]);
    if (!_ca_evicts_confirmed(p, map->ref[c], (void* const*)trial, map->ways, confirm, need, ask)) continue;
    if (found >= 0) return -1;
    found = (int)c;
  }
  return found;
}

static void touch_free(ca_page_source_t* src);   /* page sources, below */

/* ---- discovery ------------------------------------------------------------------------------ */

/* The colour of source page i among the map's colours, testing only the colours found since
   it was last looked at. */
static int page_colour(ca_probe_t* p, const ca_colour_map_t* map, ca_page_source_t* src, size_t i) {
  if (src->colour[i] >= 0 || src->tested[i] >= map->ncolours) return src->colour[i];
  uint64_t mask = ~(uint64_t)0 << src->tested[i];
  /* the plain test: a page partly evicted by a known colour's set is no new colour (with the
     strict test such pages seeded sets of their own, and 17-25 colours were found for 16); and
     two of three, not three in a row: a page of a known colour that reads as new costs a set
     build (25-40 ms) that fails or makes a duplicate, and one true test in 20 reads low here
     (three in a row missed 14% of known pages; 85% of set builds failed) */
  src->colour[i] = (int8_t)_ca_colour_classify_n(p, map, src->pages[i], mask, CONFIRM, 2, CA_ASK_PLAIN);
  src->tested[i] = (uint8_t)map->ncolours;
  return src->colour[i];
}

/* Build an eviction set for pages[ref] from `ncand` random other pages, none reserved and none
   of a known colour (which makes pages of ref's colour denser with every colour found).  The
   set goes into map->set[map->ncolours] (not yet counted).  True on success. */
static bool build_set(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src, size_t ref,
                      size_t ncand, uint64_t* rng) {
  void* cand[4096];
  if (ncand > 4096) ncand = 4096;
  size_t n = 0;
  for (size_t tries = 0; n < ncand && tries < ncand * 8; tries++) {
    size_t i = (size_t)(rnd(rng) % src->npages);
    if (i == ref || src->reserved[i] || page_colour(p, map, src, i) >= 0) continue;
    cand[n++] = src->pages[i];
  }
  if (n < map->ways * 2) return false;
  int k = _ca_evset_reduce(p, src->pages[ref], cand, (int)n, (int)map->ways, rng);
  if (k != (int)map->ways) return false;
  memcpy(map->set[map->ncolours], cand, map->ways * sizeof(void*));
  return true;
}

static void reserve(ca_page_source_t* src, void* page) {
  size_t i = (size_t)((uint8_t*)page - src->base) / CA_OS_PAGE;
  if (i < src->npages) src->reserved[i] = 1;
}

/* Keep the sets marked alive, in order; returns how many went. */
static uint32_t keep_alive(ca_colour_map_t* map, ca_page_source_t* src, const bool* alive) {
  uint32_t m = 0, n = map->ncolours;
  for (uint32_t i = 0; i < n; i++) {
    if (!alive[i]) continue;
    map->ref[m] = map->ref[i];
    memmove(map->set[m], map->set[i], map->ways * sizeof(void*));
    m++;
  }
  map->ncolours = m;
  map->epoch++;
  memset(src->colour, 0xff, src->npages);          /* colour indices moved: look again */
  memset(src->tested, 0, src->npages);
  return n - m;
}

/* Drop sets that evict another colour's reference, or whose reference another set evicts: a
   duplicate of a colour (its check when it was added read a false "no"), or a set that spans
   colours.  On a busy Zen 5 host both slipped through now and then: 17-28 colours found for 16,
   one set evicting the references of five colours, and two calibrations then agreed on 77-88%
   of pages (pages of a colour split between its duplicates).  Each pair is tested both ways,
   three times each (a conflict when two of the six say "evicts": a duplicate says it about six
   times), and the set in the most conflicts goes first (so one set spanning five colours costs
   one set, not five), until no conflict is left.  Sets below `first` are in use
   (pools hold pages by colour index) and stay.  Returns the number dropped. */
static uint32_t prune(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src, uint32_t first) {
  static uint8_t yes[CA_COLOURS_MAX][CA_COLOURS_MAX];    /* set i evicted ref j yes[i][j] of 3 */
  uint32_t n = map->ncolours, dropped = 0;
  bool alive[CA_COLOURS_MAX];
  for (uint32_t j = 0; j < n; j++) {
    alive[j] = true;
    p->prepare(p, map->ref[j]);
    for (uint32_t i = 0; i < n; i++) {
      yes[i][j] = 0;
      for (int k = 0; k < 3 && i != j; k++) yes[i][j] += p->evicts(p, map->ref[j], (void* const*)map->set[i], map->ways);
    }
  }
  for (;;) {
    uint32_t worst = 0, most = 0;
    for (uint32_t i = first; i < n; i++) {
      uint32_t c = 0;                              /* a conflict: 2 of the pair's 6 tests say yes */
      for (uint32_t j = 0; j < n && alive[i]; j++) c += alive[j] && yes[i][j] + yes[j][i] >= 2;
      if (c > 0 && c >= most) { most = c; worst = i; }    /* ties: the later set goes */
    }
    if (most == 0) break;
    alive[worst] = false;
    dropped++;
  }
  return dropped ? keep_alive(map, src, alive) : 0;
}

/* Drop sets that claim far more than their share of random pages: a set whose pages cover parts
   of several colours claims pages of all of them, and a pool filled through it holds other
   colours (a 1/8 pool measured with only 48% of its pages in the set).  The sweep above catches
   such a set only when it knows a reference of those colours, which at run time, with 2-4
   sets, it mostly does not.  256 unreserved pages, each tested against every new set (2 of 3
   tests); a set goes when it claims more than 1.5 times the expected share, plus 4.  The tests
   ask clearly (plainly while searches do, evset.c), as the colour-count estimate does: at the
   plain rule a page partly evicted by another colour's set counts too, and on the Zen 5 host
   sets claimed 10-38 of 256 pages (share 16, limit 28), and 39 of the 63 sets 6 `pv packets`
   processes found were dropped, as duplicates or for this, and built again (33 of 37 in one
   process); asking clearly, sets claimed 1-26, or 29-61 for the few that went, and 4 of 28. */
static uint32_t drop_wide(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src, uint32_t first,
                          uint32_t expected, uint64_t* rng) {
  if (expected == 0 || map->ncolours <= first) return 0;
  uint32_t claims[CA_COLOURS_MAX] = {0}, sample = 0;
  ca_ask_t ask = p->search_plainly ? CA_ASK_PLAIN : CA_ASK_CLEARLY;
  for (size_t tries = 0; sample < 256 && tries < 4096; tries++) {
    size_t i = (size_t)(rnd(rng) % src->npages);
    if (src->reserved[i]) continue;
    sample++;
    p->prepare(p, src->pages[i]);
    for (uint32_t c = first; c < map->ncolours; c++)
      claims[c] += _ca_evicts_confirmed(p, src->pages[i], (void* const*)map->set[c], map->ways, CONFIRM, 2, ask);
  }
  bool alive[CA_COLOURS_MAX];
  uint32_t limit = sample * 3 / (2 * expected) + 4, dropped = 0;
  for (uint32_t c = 0; c < map->ncolours; c++) {
    alive[c] = c < first || claims[c] <= limit;
    dropped += !alive[c];
  }
  return dropped ? keep_alive(map, src, alive) : 0;
}

/* One round of discovery (see _ca_colour_discover), until `deadline` (ns). */
static void discover_until(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src,
                           uint32_t want, uint32_t expected, uint64_t deadline, uint64_t* rng,
                           ca_discovery_stats_t* st) {
  size_t ncand = (size_t)3 * map->ways * (expected > 0 ? expected : 32);
  if (ncand > src->npages / 2) ncand = src->npages / 2;
  uint32_t in_a_row = 0;
  for (size_t step = 0; _ca_clock_ns() < deadline; step++) {
    if (want == 0 && step >= src->npages * 4) break;
    if (want > 0 && map->ncolours >= want) break;
    if (map->ncolours >= CA_COLOURS_MAX) break;
    if (want == 0 && map->ncolours > 0 && in_a_row >= 3 * map->ncolours + 24) break;
    size_t i = (size_t)(rnd(rng) % src->npages);
    if (src->reserved[i]) continue;
    if (page_colour(p, map, src, i) >= 0) { in_a_row++; continue; }
    src->tested[i] = 0;                            /* a second look costs less than a set */
    if (page_colour(p, map, src, i) >= 0) { in_a_row++; continue; }
    in_a_row = 0;
    uint64_t b0 = _ca_clock_ns();
    bool ok = build_set(p, map, src, i, ncand, rng);
    if (st) { st->set_builds++; st->set_build_ns += _ca_clock_ns() - b0; }
    if (!ok) { if (st) st->set_failures++; continue; }
    /* a duplicate of a known colour evicts that colour's reference */
    bool dup = false;
    for (uint32_t c = 0; c < map->ncolours && !dup; c++) {
      p->prepare(p, map->ref[c]);
      int yes = 0;
      for (int k = 0; k < 3; k++) yes += p->evicts(p, map->ref[c], (void* const*)map->set[map->ncolours], map->ways);
      dup = yes >= 2;
    }
    if (dup) { if (st) st->duplicates++; continue; }
    map->ref[map->ncolours] = src->pages[i];
    reserve(src, src->pages[i]);
    for (uint32_t w = 0; w < map->ways; w++) reserve(src, map->set[map->ncolours][w]);
    map->ncolours++;
    /* the first sets show what an eviction looks like: place the threshold on them, and look at
       every page again with it */
    if ((map->ncolours == 3 || (want > 0 && want < 3 && map->ncolours == want)) && p->recalibrate) {
      p->recalibrate(p, (void* const*)map->ref, (void* const (*)[CA_WAYS_MAX])map->set, map->ncolours < 3 ? map->ncolours : 3, map->ways);
      memset(src->tested, 0, src->npages);
    }
  }
}

/* Discover colours until `want` are known (0: all of them: stop after many pages in a row fall
   into known colours), or until `budget_ms` has passed, then drop duplicate or colour-spanning
   sets among the new ones (prune, drop_wide) and go on while some were dropped.  Building a set
   fails often when the core's other hardware thread is busy (a try costs ~25 ms; 1 in 10
   succeeds at worst here), so failures only end the search through the time budget.  Returns
   the number known. */
uint32_t _ca_colour_discover(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src,
                             uint32_t want, uint32_t expected, uint64_t budget_ms, uint64_t* rng,
                             ca_discovery_stats_t* st) {
  uint64_t t0 = _ca_clock_ns(), deadline = t0 + budget_ms * 1000000u;
  uint32_t first = map->ncolours;
  if (src->trimmed) touch_free(src);
  for (int round = 0, clean = 0; round < 12 && clean < 2; round++) {
    if (clean == 0) discover_until(p, map, src, want, expected, deadline, rng, st);
    uint32_t dropped = prune(p, map, src, first);   /* until two sweeps in a row find nothing */
    if (dropped == 0) dropped = drop_wide(p, map, src, first, expected, rng);
    if (st) st->duplicates += dropped;
    clean = dropped == 0 ? clean + 1 : 0;
    if (_ca_clock_ns() >= deadline) break;
  }
  if (st) st->discover_ns += _ca_clock_ns() - t0;
  return map->ncolours;
}

/* ---- is a cheaper source of colours valid here? ------------------------------------------ */

/* A source claims pages[same[0..ways)] share pages[ref]'s colour and pages[diff[0..ways)] do
   not.  Valid when the first group evicts the reference and the second does not, for most of
   `trials` references. */
static bool source_verified(ca_probe_t* p, void** refs, void* (*same)[CA_WAYS_MAX], void* (*diff)[CA_WAYS_MAX],
                            int trials, uint32_t ways) {
  int good = 0;
  for (int t = 0; t < trials; t++) {
    p->prepare(p, refs[t]);
    bool a = p->evicts(p, refs[t], (void* const*)same[t], ways);
    bool b = p->evicts(p, refs[t], (void* const*)diff[t], ways);
    good += a && !b;
  }
  return good * 10 >= trials * 9;
}

/* Transparent huge pages: same offset inside different 2 MiB pages = same colour on bare metal. */
bool _ca_colour_try_address_bits(ca_probe_t* p, uint32_t ways, bool* backed) {
  size_t huge = (size_t)1 << 21, n = ways + 2;
  uint8_t* mem = _ca_os_map_aligned(n * huge, huge);
  *backed = false;
  if (mem == NULL) return false;
  _ca_os_thp(mem, n * huge, true);
  memset(mem, 1, n * huge);
  /* were we given huge pages at all? */
  int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    static char buf[1 << 16];
    char want[32];
    ca_buf_t b = ca_buf(want, sizeof want);
    ca_buf_hex(&b, (uintptr_t)mem);
    ssize_t r;
    size_t keep = 0;
    while ((r = read(fd, buf + keep, sizeof buf - 1 - keep)) > 0) {
      buf[keep + (size_t)r] = 0;
      char* at = strstr(buf, want + 2);
      char* ah = at ? strstr(at, "AnonHugePages:") : NULL;
      if (ah) { long kb = 0; for (char* q = ah + 14; *q == ' ' || (*q >= '0' && *q <= '9'); q++) if (*q != ' ') kb = kb * 10 + (*q - '0'); *backed = kb > 0; break; }
      keep = 0;
    }
    close(fd);
  }
  enum { TRIALS = 8 };
  void* refs[TRIALS];
  void* same[TRIALS][CA_WAYS_MAX];
  void* diff[TRIALS][CA_WAYS_MAX];
  for (int t = 0; t < TRIALS; t++) {
    size_t off = (size_t)(t * 37 + 5) % 512 * CA_OS_PAGE;
    refs[t] = mem + off;
    for (uint32_t w = 0; w < ways; w++) {
      same[t][w] = mem + (w + 1) * huge + off;
      diff[t][w] = mem + (w + 1) * huge + (off + (w + 1) * 7 * CA_OS_PAGE) % huge;
    }
  }
  bool ok = source_verified(p, refs, same, diff, TRIALS, ways);
  _ca_os_unmap(mem, n * huge);
  return ok;
}

/* pagemap: frame numbers equal modulo the number of colours = same colour on bare metal. */
bool _ca_colour_try_pagemap(ca_probe_t* p, uint32_t ways, uint32_t colours, bool* readable) {
  *readable = false;
  int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  /* frames equal modulo 4x the expected colour count also share the colour if the real count
     is up to 4x the expectation (sysfs can be wrong: it says 16 colours here, timing finds 32) */
  colours = colours * 4 > 512 ? 512 : colours * 4;
  size_t npages = (size_t)colours * ways * 3;
  uint8_t* mem = _ca_os_map(npages * CA_OS_PAGE);
  if (mem == NULL) { close(fd); return false; }
  memset(mem, 1, npages * CA_OS_PAGE);
  static uint64_t pfn[8192];
  if (npages > 8192) npages = 8192;
  bool have = true;
  for (size_t i = 0; i < npages && have; i++) {
    uint64_t e = 0;
    if (pread(fd, &e, 8, (off_t)(((uintptr_t)mem / CA_OS_PAGE + i) * 8)) != 8) have = false;
    pfn[i] = e & ((1ull << 55) - 1);
    if (!(e >> 63) || pfn[i] == 0) have = false;     /* not present, or frame hidden (no root) */
  }
  close(fd);
  *readable = have;
  bool ok = false;
  if (have) {
    enum { TRIALS = 8 };
    void* refs[TRIALS];
    void* same[TRIALS][CA_WAYS_MAX];
    void* diff[TRIALS][CA_WAYS_MAX];
    int t = 0;
    for (size_t i = 0; i < npages && t < TRIALS; i += npages / TRIALS) {
      uint32_t ns = 0, nd = 0;
      for (size_t j = 0; j < npages && (ns < ways || nd < ways); j++) {
        if (j == i) continue;
        if (pfn[j] % colours == pfn[i] % colours) { if (ns < ways) same[t][ns++] = mem + j * CA_OS_PAGE; }
        else if (nd < ways) diff[t][nd++] = mem + j * CA_OS_PAGE;
      }
      if (ns < ways || nd < ways) continue;
      refs[t++] = mem + i * CA_OS_PAGE;
    }
    ok = t == TRIALS && source_verified(p, refs, same, diff, TRIALS, ways);
  }
  _ca_os_unmap(mem, npages * CA_OS_PAGE);
  return ok;
}

/* ---- page sources ---------------------------------------------------------------------------- */

/* Fault in (by writing) the pages no set uses: each gets a frame of its own (a page only read
   would map the kernel's one zero page), and bytes of its own. */
static void touch_free(ca_page_source_t* src) {
  uint64_t stamp = _ca_clock_ns() ^ (uint64_t)(uintptr_t)src->base;
  for (size_t i = 0; i < src->npages; i++)
    if (!src->reserved[i]) {
      memset(src->pages[i], 0, 64);
      /* bytes of its own, where no reference's chase writes (probe.c): pages alike can be merged
         into one frame by the host (KSM), and references that were all one chase were (a set
         file's sets stopped evicting their references within minutes) */
      ((uint64_t*)src->pages[i])[1] = stamp + i;
    }
  src->trimmed = false;
}

/* Give back the frames of the pages no set uses, forgetting their colours (touched again they
   are new frames): the source is 16 MiB, the sets of a run keep a few dozen pages of it.  The
   next discovery faults them in again.  A set file's pages become holes in the file. */
void _ca_page_source_trim(ca_page_source_t* src) {
  size_t run = 0;
  for (size_t i = 0; i <= src->npages; i++) {
    if (i < src->npages && !src->reserved[i]) {
      src->colour[i] = -1;
      src->tested[i] = 0;
      run++;
      continue;
    }
    uint8_t* at = src->base + (i - run) * CA_OS_PAGE;
    if (run && src->fd >= 0) fallocate(src->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                       (off_t)(at - src->base) + (off_t)(src->file_offset), (off_t)(run * CA_OS_PAGE));
    if (run) _ca_os_purge(at, run * CA_OS_PAGE);
    run = 0;
  }
  src->trimmed = true;
}

/* map's sets and references from colour `from` on: never tested, touched nor given back */
void _ca_page_source_reserve(ca_page_source_t* src, const ca_colour_map_t* map, uint32_t from) {
  for (uint32_t c = from; c < map->ncolours; c++) {
    reserve(src, map->ref[c]);
    for (uint32_t w = 0; w < map->ways; w++) reserve(src, map->set[c][w]);
  }
}

static bool source_arrays(ca_page_source_t* src, size_t npages, const ca_colour_map_t* keep) {
  src->pages = _ca_os_map(npages * sizeof(void*));
  src->reserved = _ca_os_map(npages);
  src->colour = _ca_os_map(npages);
  src->tested = _ca_os_map(npages);
  if (!src->base || !src->pages || !src->reserved || !src->colour || !src->tested) return false;
  memset(src->colour, 0xff, npages);
  for (size_t i = 0; i < npages; i++) src->pages[i] = src->base + i * CA_OS_PAGE;
  src->npages = npages;
  if (keep != NULL) _ca_page_source_reserve(src, keep, 0);
  touch_free(src);
  return true;
}

/* npages fresh, faulted-in pages. */
bool _ca_page_source_init(ca_page_source_t* src, size_t npages) {
  npages = (npages + 511) & ~(size_t)511;
  src->fd = -1;
  src->base = _ca_os_map_aligned(npages * CA_OS_PAGE, (size_t)1 << 21);
  if (src->base != NULL) _ca_os_thp(src->base, npages * CA_OS_PAGE, _ca_env(CA_ENV_THP) != NULL);
  return source_arrays(src, npages, NULL);
}

/* The pages of a set file (setfile.c), which stays their owner: one under construction, or a
   published one held to grow it (keep: its sets). */
bool _ca_page_source_init_file(ca_page_source_t* src, uint8_t* pages, size_t npages, int fd, size_t offset,
                               const ca_colour_map_t* keep) {
  src->fd = fd;
  src->base = pages;
  src->file_offset = offset;
  return source_arrays(src, npages, keep);
}

void _ca_page_source_free(ca_page_source_t* src) {
  if (src->base && src->fd < 0) _ca_os_unmap(src->base, src->npages * CA_OS_PAGE);
  if (src->pages) _ca_os_unmap(src->pages, src->npages * sizeof(void*));
  if (src->reserved) _ca_os_unmap(src->reserved, src->npages);
  if (src->colour) _ca_os_unmap(src->colour, src->npages);
  if (src->tested) _ca_os_unmap(src->tested, src->npages);
  memset(src, 0, sizeof *src);
  src->fd = -1;
}

/* ---- the whole calibration --------------------------------------------------------------- */

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The level to colour: the largest data cache private to one CPU. */
static const ca_cache_level_t* colour_level(void) {
  const ca_cache_level_t* best = NULL;
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) {
    const ca_cache_level_t* l = &_ca_machine.levels[i];
    if (l->level >= 2 && l->shared_cpus <= 1 && (best == NULL || l->size > best->size)) best = l;
  }
  return best;
}

/* The machine a profile or a set file is for: the CPU's model name, family, model and stepping
   and the geometry of its L1d and L2 (guests of different CPUs all read "AMD EPYC" here), or
   the description of a described one. */
static void cpuinfo_field(const char* info, const char* name, ca_buf_t* b) {
  const char* m = strstr(info, name);
  if (!m || !(m = strchr(m, ':'))) return;
  for (m += 2; *m && *m != '\n'; m++) ca_buf_char(b, *m == '"' ? '\'' : *m);
}

void _ca_machine_key(char* out, size_t len) {
  ca_buf_t b = ca_buf(out, len);
  out[0] = 0;
  const char* d = _ca_env(CA_ENV_MACHINE);
  if (_ca_machine.simulated && d != NULL) {
    ca_buf_str(&b, "described: ");
    for (; *d; d++) ca_buf_char(&b, *d == '"' ? '\'' : *d);
    return;
  }
  char info[4096];
  int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, info, sizeof info - 1) : -1;
  if (fd >= 0) close(fd);
  info[n > 0 ? n : 0] = 0;
  cpuinfo_field(info, "model name", &b);
  ca_buf_str(&b, "; family "); cpuinfo_field(info, "cpu family", &b);
  ca_buf_str(&b, " model "); cpuinfo_field(info, "\nmodel\t", &b);
  ca_buf_str(&b, " stepping "); cpuinfo_field(info, "stepping", &b);
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++) {
    const ca_cache_level_t* l = &_ca_machine.levels[i];
    if (l->level > 2) continue;
    ca_buf_str(&b, "; L"); ca_buf_u64(&b, l->level); ca_buf_char(&b, ' ');
    ca_buf_u64(&b, l->size >> 10); ca_buf_str(&b, "K/"); ca_buf_u64(&b, l->ways);
  }
}

/* median microseconds to classify `count` pages of src against `mask`; *hits = pages claimed */
static double classify_cost(ca_probe_t* p, const ca_colour_map_t* map, ca_page_source_t* src,
                            size_t count, uint64_t mask, size_t* hits) {
  static double us[1024];
  if (count > 1024) count = 1024;
  double tpu = _ca_ticks_per_us();
  size_t n = 0;
  *hits = 0;
  for (size_t i = 0; i < src->npages && n < count; i++) {
    if (src->reserved[i]) continue;
    uint64_t t0 = _ca_ticks();
    int c = _ca_colour_find(p, map, src->pages[i], mask);
    us[n++] = (double)(_ca_ticks() - t0) / tpu;
    *hits += c >= 0;
  }
  qsort(us, n, sizeof *us, cmp_double);
  return n ? us[n / 2] : 0;
}

/* Two maps built from different pages classify a third set of pages: the fraction of pages
   classified by both whose colours correspond (labels matched by majority). */
static double agreement(ca_probe_t* p, const ca_colour_map_t* a, const ca_colour_map_t* b,
                        ca_page_source_t* src, size_t count, uint32_t* both) {
  static uint16_t pairs[CA_COLOURS_MAX][CA_COLOURS_MAX];
  static int8_t la[2048], lb[2048];
  memset(pairs, 0, sizeof pairs);
  if (count > 2048) count = 2048;
  size_t n = 0;
  for (size_t i = 0; i < src->npages && n < count; i++, n++) {
    la[n] = (int8_t)_ca_colour_classify(p, a, src->pages[i], ~(uint64_t)0);
    lb[n] = (int8_t)_ca_colour_classify(p, b, src->pages[i], ~(uint64_t)0);
    if (la[n] >= 0 && lb[n] >= 0) pairs[la[n]][lb[n]]++;
  }
  int match[CA_COLOURS_MAX];
  for (uint32_t i = 0; i < a->ncolours; i++) {
    match[i] = -1;
    uint16_t best = 0;
    for (uint32_t j = 0; j < b->ncolours; j++) if (pairs[i][j] > best) { best = pairs[i][j]; match[i] = (int)j; }
  }
  uint32_t agree = 0;
  *both = 0;
  for (size_t k = 0; k < n; k++) {
    if (la[k] < 0 || lb[k] < 0) continue;
    (*both)++;
    agree += match[la[k]] == lb[k];
  }
  return *both ? (double)agree / *both : 0;
}

bool _ca_calibrate(ca_calibration_t* cal, bool quick, bool write_sets) {
  memset(cal, 0, sizeof *cal);
  uint64_t start = _ca_clock_ns();
  _ca_machine_key(cal->cpu, sizeof cal->cpu);
  const ca_cache_level_t* lv = colour_level();
  ca_buf_t why = ca_buf(cal->reason, sizeof cal->reason);
  if (lv == NULL) { ca_buf_str(&why, "no private cache level beyond L1 is described by sysfs or cpuid"); return false; }
  cal->level = lv->level;
  cal->sysfs_size = lv->size;
  cal->sysfs_ways = lv->ways;
  cal->line = lv->line;
  cal->expected_colours = lv->size / (lv->ways * (uint32_t)CA_OS_PAGE);
  if (lv->ways == 0 || lv->ways > CA_WAYS_MAX) { ca_buf_str(&why, "the level's associativity is unknown or too high"); return false; }

  /* measure on one CPU */
  cpu_set_t old, one;
  bool pinned = sched_getaffinity(0, sizeof old, &old) == 0;
  if (pinned) { CPU_ZERO(&one); CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one); sched_setaffinity(0, sizeof one, &one); }

  ca_timing_probe_t tp;
  memset(&tp, 0, sizeof tp);
  size_t stream = (size_t)(lv->size > (1u << 20) ? lv->size : (1u << 20));
  bool ok = _ca_probe_init(&tp, stream, _ca_machine.l1d.ways);
  cal->ticks_per_us = _ca_ticks_per_us();
  ca_probe_t* p = &tp.base;
  uint64_t rng = 0x2545F4914F6CDD1Dull ^ _ca_clock_ns();
  ca_page_source_t a_src = { .fd = -1 }, b_src = { .fd = -1 }, c_src = { .fd = -1 };
  ca_setfile_t file = { .fd = -1 };
  static ca_colour_map_t a, b;
  if (!ok) {
    ca_buf_str(&why, "timing cannot tell the level from what lies beyond it here");
    goto out;
  }
  cal->ways = lv->ways;
  cal->address_bits_valid = _ca_colour_try_address_bits(p, cal->ways, &cal->thp_backed);
  cal->pagemap_valid = _ca_colour_try_pagemap(p, cal->ways, cal->expected_colours, &cal->pagemap_readable);
  cal->method = cal->address_bits_valid ? CA_METHOD_ADDRESS_BITS : cal->pagemap_valid ? CA_METHOD_PAGEMAP : CA_METHOD_TIMING;

  /* discover the colours with eviction sets (also what the address methods are checked against),
     in the pages of a new set file when it is to be written (the user's processes then load
     every colour's set from it) */
  size_t npages = quick ? 2048 : 4096;
  bool filed = write_sets && _ca_setfile_create(&file, npages) &&
               _ca_page_source_init_file(&a_src, file.pages, file.npages, file.fd, (size_t)(file.pages - file.base), NULL);
  if (!filed && !_ca_page_source_init(&a_src, npages)) { ca_buf_str(&why, "out of memory"); ok = false; goto out; }
  memset(&a, 0, sizeof a);
  a.ways = cal->ways;
  _ca_colour_discover(p, &a, &a_src, 0, cal->expected_colours, quick ? 20000 : 60000, &rng, &cal->discovery);
  cal->hit_ticks = tp.hit_ticks;
  cal->miss_ticks = tp.miss_ticks;                 /* after recalibration: an eviction set's effect */
  cal->threshold = tp.threshold;
  cal->ratio_pct = tp.ratio_pct;
  cal->set_ratio_pct = tp.set_ratio_pct;
  cal->passes = (uint32_t)tp.passes;
  cal->colours = a.ncolours;
  cal->measured_size = (uint64_t)a.ncolours * a.ways * CA_OS_PAGE;
  if (a.ncolours < 2) { ca_buf_str(&why, "fewer than two colours found"); ok = false; goto out; }

  /* costs: against every colour, and against 1/8 of them */
  size_t hits;
  cal->classify_all_us = classify_cost(p, &a, &a_src, quick ? 128 : 512, ~(uint64_t)0, &hits);
  cal->unclassified = 1.0 - (double)hits / (double)(quick ? 128 : 512);
  uint32_t eighth = a.ncolours / 8 ? a.ncolours / 8 : 1;
  uint64_t mask = eighth >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << eighth) - 1);
  cal->classify_restricted_us = classify_cost(p, &a, &a_src, quick ? 128 : 512, mask, &hits);

  /* a 4 MiB pool of 1/8-of-level pages from fresh pages */
  if (!quick) {
    /* 1/8 of the pages are of the eighth (fewer when the colours found do not divide by 8);
       the strict test confirms 20-65% of those on a busy host (Zen 5 here): fresh pages are
       offered, 32 MiB at a time, until the pool is full or 30 s have passed (-1) */
    size_t pool_pages = 1024, found = 0;
    uint64_t t0 = _ca_clock_ns();
    while (found < pool_pages && _ca_clock_ns() - t0 < 30000000000ull) {
      _ca_page_source_free(&c_src);
      if (!_ca_page_source_init(&c_src, pool_pages * 8)) { ca_buf_str(&why, "out of memory"); ok = false; goto out; }
      for (size_t i = 0; i < c_src.npages && found < pool_pages; i++)
        found += _ca_colour_find(p, &a, c_src.pages[i], mask) >= 0;
    }
    cal->pool_4mib_s = found >= pool_pages ? (double)(_ca_clock_ns() - t0) / 1e9 : -1;

    /* agreement of an independent second calibration of eight colours, on pages neither used
       (all of them took as long again: a calibration of 32 colours ran 6-23 s) */
    if (_ca_page_source_init(&b_src, npages)) {
      memset(&b, 0, sizeof b);
      b.ways = cal->ways;
      _ca_colour_discover(p, &b, &b_src, 8, cal->expected_colours, 20000, &rng, NULL);
      cal->agreement = agreement(p, &a, &b, &c_src, 1024, &cal->agreement_pages);
    }
  }
  ok = true;
out:
  cal->usable = ok && cal->colours >= 2 && (quick || cal->agreement >= 0.9);
  if (ok && !cal->usable && cal->reason[0] == 0) ca_buf_str(&why, "two independent calibrations disagree");
  cal->sets_written = cal->usable && file.fd >= 0 && _ca_setfile_publish(&file, &a, cal->colours, &tp);
  _ca_page_source_free(&a_src);
  _ca_setfile_close(&file);
  _ca_page_source_free(&b_src);
  _ca_page_source_free(&c_src);
  if (tp.scratch != NULL) _ca_os_unmap(tp.scratch, tp.scratch_len);
  if (pinned) sched_setaffinity(0, sizeof old, &old);
  cal->seconds = (double)(_ca_clock_ns() - start) / 1e9;
  return cal->usable;
}
