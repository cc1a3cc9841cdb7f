/* Eviction sets by group testing (Vila, Köpf, Morales: "Theory and practice of finding eviction
   sets", S&P 2019), adapted to a cache shared with a neighbour we cannot see.

   Given candidate pages that together evict R, split them into ways + 1 groups and drop a group
   whose removal leaves the rest still evicting R; repeat.  On this VM the L2 is shared with
   whatever the host runs on the other hardware thread, which holds some of the ways of every
   set, so how many same-colour pages it takes to evict R varies from moment to moment (3 to 8
   measured).  So the reduction does not aim at exactly `ways` pages: it goes down to a minimal
   set (whatever evicts R now; all of its pages have R's colour), and `extend` then adds
   candidates one at a time - a page belongs when it can stand in for a member of the minimal
   set - until there are `ways` of them.  `ways` same-colour pages evict R whatever the
   neighbour does, which makes the set a reliable colour test.

   Noise: a drop is confirmed by a second test once the set is small, and when no group can be
   dropped (an earlier drop was a mistake) the last dropped group is put back (backtracking). */
#include "colour.h"

#define CA_EVSET_CAND_MAX 4096
#define CA_EVSET_CONFIRM  512          /* confirm drops below this many pages */

/* The question each step asks (evicts_t): "evicts clearly" where the probe has it (probe.c),
   else "evicts".  Two signs that the clear rule is above what an eviction reads just then, and
   the search asks plainly: the whole candidate group (dozens of pages of R's colour among
   several hundred) does not evict R clearly; or CLEAR_STREAK searches in a row asking clearly
   failed (on a loud Zen 5 host 4 processes of 20 built no more than 2 sets in 20 s that way,
   200-250 searches, all failed; asking clearly, 1 search in 3 succeeds here, so 8 failures in
   a row come about 1 time in 17 when it works).  The next CLEAR_STREAK searches ask plainly,
   then clearly again. */
#define CLEAR_STREAK 8

typedef bool (*evicts_t)(ca_probe_t* p, void* r, void* const* pages, size_t n);

static void shuffle(void** a, int n, uint64_t* rng) {
  for (int i = n - 1; i > 0; i--) {
    uint64_t x = *rng;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    *rng = x;
    int j = (int)(x % (uint64_t)(i + 1));
    void* t = a[i]; a[i] = a[j]; a[j] = t;
  }
}

/* Reduce cand[0..n) in place to a minimal set that evicts r; the dropped pages stay in
   cand[result..n).  Returns the size of the minimal set, or -1. */
static int reduce(ca_probe_t* p, evicts_t evicts, void* r, void** cand, int n, int ways, uint64_t* rng) {
  void* rest[CA_EVSET_CAND_MAX];                /* 32 KiB of stack: calibration threads only */
  int dropped_sizes[128], ndropped = 0, stuck = 0, backtracks = 0, total = n;
  while (n > 1) {
    int groups = ways + 1 < n ? ways + 1 : n;
    bool dropped = false;
    for (int g = 0; g < groups && !dropped; g++) {
      int lo = g * n / groups, hi = (g + 1) * n / groups, m = 0;
      for (int i = 0; i < lo; i++) rest[m++] = cand[i];
      for (int i = hi; i < n; i++) rest[m++] = cand[i];
      if (!evicts(p, r, (void* const*)rest, (size_t)m)) continue;
      if (m < CA_EVSET_CONFIRM && !evicts(p, r, (void* const*)rest, (size_t)m)) continue;
      int k = m;                                 /* the dropped group follows the live set */
      for (int i = lo; i < hi; i++) rest[k++] = cand[i];
      memcpy(cand, rest, (size_t)k * sizeof *cand);
      if (ndropped < 128) dropped_sizes[ndropped++] = hi - lo;
      n = m;
      dropped = true;
    }
    if (dropped) { stuck = 0; continue; }
    if (++stuck <= 2) { shuffle(cand, n, rng); continue; }
    /* minimal, or wrong: a minimal set still evicts r; otherwise undo the last drop */
    int yes = 0;
    for (int k = 0; k < 3; k++) yes += evicts(p, r, (void* const*)cand, (size_t)n);
    if (yes >= 2) return n;
    if (ndropped == 0 || ++backtracks > 12) return -1;
    n += dropped_sizes[--ndropped];
    if (n > total) return -1;
    shuffle(cand, n, rng);
    stuck = 0;
  }
  return n == 1 && evicts(p, r, (void* const*)cand, 1) ? 1 : -1;
}

/* cand[0..m) is a minimal set for r; move pages of r's colour from cand[m..n) into it until it
   has `want` pages.  A page is of r's colour when the set with it in place of one member still
   evicts r (the member left out is rotated, so no one member decides).  Returns the new size. */
static int extend(ca_probe_t* p, evicts_t evicts, void* r, void** cand, int m, int n, int want) {
  void* trial[CA_WAYS_MAX];
  int size = m, out = 0;
  for (int i = m; i < n && size < want; i++) {
    int k = 0;
    for (int j = 0; j < m; j++) if (j != out) trial[k++] = cand[j];
    trial[k++] = cand[i];
    if (evicts(p, r, (void* const*)trial, (size_t)k) && evicts(p, r, (void* const*)trial, (size_t)k)) {
      void* t = cand[size]; cand[size] = cand[i]; cand[i] = t;
      size++;
      out = (out + 1) % m;
    }
  }
  return size;
}

static int failed(ca_probe_t* p, int stage) { p->search_failed[stage]++; return -1; }

/* A set of `ways` pages of r's colour asking `evicts`, left in cand[0..ways): ways, or -1. */
static int search(ca_probe_t* p, evicts_t evicts, void* r, void** cand, int n, int ways, uint64_t* rng) {
  int m = reduce(p, evicts, r, cand, n, ways, rng);
  if (m < 1) return failed(p, CA_SEARCH_REDUCE);
  if (m > ways) return failed(p, CA_SEARCH_LARGE);
  if (extend(p, evicts, r, cand, m, n, ways) < ways) return failed(p, CA_SEARCH_EXTEND);
  int yes = 0;                                   /* the full set must evict r: two of three */
  for (int k = 0; k < 3; k++) yes += evicts(p, r, (void* const*)cand, (size_t)ways);
  if (yes < 2) return failed(p, CA_SEARCH_FULL);
  /* and every member must be needed: left out, the other ways - 1 must not evict r.  This
     rejects a set with a stranger in it, and sets measured while the neighbour held ways. */
  void* fewer[CA_WAYS_MAX];
  for (int j = 0; j < ways; j++) {
    int k = 0;
    for (int i = 0; i < ways; i++) if (i != j) fewer[k++] = cand[i];
    int still = 0;
    for (int t = 0; t < 3; t++) still += p->evicts(p, r, (void* const*)fewer, (size_t)k);
    if (still >= 2) return failed(p, CA_SEARCH_NEEDED);
  }
  return ways;
}

/* After a search: CLEAR_STREAK failures in a row asking clearly switch to asking plainly, and
   CLEAR_STREAK searches asking plainly switch back. */
static void judge(ca_probe_t* p, bool found) {
  if (p->search_plainly) {
    if (++p->search_streak >= CLEAR_STREAK) { p->search_plainly = false; p->search_streak = 0; }
  } else if (found) {
    p->search_streak = 0;
  } else if (++p->search_streak >= CLEAR_STREAK) {
    p->search_plainly = true;
    p->search_streak = 0;
  }
}

/* An eviction set of `ways` pages of r's colour from cand[0..n), left in cand[0..ways).
   Returns ways, or -1. */
int _ca_evset_reduce(ca_probe_t* p, void* r, void** cand, int n, int ways, uint64_t* rng) {
  if (n > CA_EVSET_CAND_MAX || n < ways || ways > CA_WAYS_MAX) return -1;
  p->prepare(p, r);
  evicts_t evicts = p->evicts;
  if (p->evicts_clearly && !p->search_plainly && p->evicts_clearly(p, r, (void* const*)cand, (size_t)n)) evicts = p->evicts_clearly;
  else if (!p->evicts(p, r, (void* const*)cand, (size_t)n)) return failed(p, CA_SEARCH_WHOLE);
  int k = search(p, evicts, r, cand, n, ways, rng);
  if (p->evicts_clearly) {
    p->plain_searches += evicts == p->evicts;
    judge(p, k == ways);
  }
  return k;
}
