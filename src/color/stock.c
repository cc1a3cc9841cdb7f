/* What the worker decides page by page while it stocks: the colours the sets need, whether a
   fresh page belongs to a set (the slice test, below), whether a batch's verdicts can be trusted
   (its controls), the slice audit's verdicts, the pools' re-tests, and the kept frames
   protection hands back.  A set covering more than half of the colours is classified by
   elimination: a page belongs when it is of none of the other colours. */
#define _GNU_SOURCE
#include "layer.h"

static void set_range(const ca_colour_set_t* s, uint32_t colours, uint32_t* lo, uint32_t* hi) {
  *lo = s->from * colours / s->den;
  *hi = s->to * colours / s->den;
  if (*hi <= *lo) *hi = *lo + 1;
}

static uint64_t range_mask(uint32_t lo, uint32_t hi) {
  uint64_t m = 0;
  for (uint32_t c = lo; c < hi && c < 64; c++) m |= (uint64_t)1 << c;
  return m;
}

/* ---- the worker ---------------------------------------------------------------------------- */

uint32_t _ca_cs_audit_need(const ca_colour_set_t* s);

uint32_t _ca_cs_colours_needed(void) {
  uint32_t need = 0, C = L.cal.colours;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used) continue;
    uint32_t lo, hi;
    set_range(s, C, &lo, &hi);
    s->by_elimination = hi - lo > C / 2;
    s->mask = range_mask(lo, hi);
    s->unvouched = _ca_cs_audit_need(s) > 0 && !s->audit.valid;
    /* elimination needs the sets of the colours outside the slice: below lo, and up to C when
       the slice ends before the last colour (7/8 of 16 from 2/16 on needs 2 sets, not 16) */
    uint32_t n = !s->by_elimination ? hi : hi >= C ? lo : C;
    if (n > need) need = n;
  }
  return need;
}

/* Is now a moment when the slice audit's readings can be trusted?  Re-places the threshold on
   the current levels (they drift with the other hardware thread) and requires them clearly
   apart. */
bool _ca_cs_quiet_window(void) {
  uint32_t n = L.map.ncolours < 4 ? L.map.ncolours : 4;
  if (n == 0) return false;                          /* no sets to judge the moment by */
  L.probe.base.recalibrate(&L.probe.base, (void* const*)L.map.ref, (void* const (*)[CA_WAYS_MAX])L.map.set, n, L.map.ways);
  return L.probe.set_ratio_pct > 160;
}

/* The colours discovered so far. */
uint64_t _ca_cs_known_colours(void) {
  return L.map.ncolours >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << L.map.ncolours) - 1);
}

/* ---- the slice test --------------------------------------------------------------------------
   A page is of one of a mask's colours when the union of their eviction sets evicts it: one
   test against UNION_MAX colours at once, where testing colour by colour took one test per
   colour and three more to confirm each (and lost three pages in four of a 1/8 slice: strict
   tests, each passing three times in four).  Two colours, not more: against the union of four
   (32 pages) the pages of those colours read 160-230% of a quiet chase, against that of two
   210-240%, for the same pages' reads of the group (Zen 4 host); and one set alone (8 pages)
   leaves part of the page in the L1 (read 60%).  Pages fall in two clusters and a few between:
   3000 pages against 1/8 of 32 colours, one test each, read 60-130% or 180-260%, and 5% read
   120-140% in every test, pages that share a quarter of their sets with one of those colours
   (every page read 190-230% against exactly one of the 32 sets).  So one test below LOW says
   "none of them", and a page above it is tested twice more: the median at HIGH or above says
   "one of them", between the two "cannot tell" (the page goes to neither side).  LOW and HIGH
   lie a fifth and three fifths of the way up to what the sets read on their own references,
   and follow it (the batch controls, below). */
#define UNION_MAX 2

static uint32_t effect(void) {
  uint32_t e = L.effect_pct ? L.effect_pct : L.probe.set_ratio_pct;
  return e > 100 ? e : 200;
}
static uint32_t low_mark(void) { uint32_t l = 100 + (effect() - 100) / 5; return l < 112 ? 112 : l; }
static uint32_t high_mark(void) { uint32_t h = 100 + (effect() - 100) * 3 / 5; return h < 140 ? 140 : h; }

/* The union of the sets of the colours of `mask` from colour `*from` on, UNION_MAX colours at
   most, into g; *from moves past them.  Returns its pages (0: no colour left). */
static size_t union_from(uint64_t mask, uint32_t* from, void** g, uint64_t* colours) {
  size_t n = 0;
  uint32_t k = 0;
  *colours = 0;
  for (; *from < L.map.ncolours && k < UNION_MAX; (*from)++) {
    if (!((mask >> *from) & 1)) continue;
    memcpy(g + n, L.map.set[*from], L.map.ways * sizeof(void*));
    n += L.map.ways;
    *colours |= (uint64_t)1 << *from;
    k++;
  }
  return n;
}

/* The union (as union_from) of the mask's colours that holds colour c. */
static size_t union_holding(uint64_t mask, uint32_t c, void** g) {
  uint64_t colours = 0;
  size_t n = 0;
  for (uint32_t from = 0; !((colours >> c) & 1);)
    if ((n = union_from(mask, &from, g, &colours)) == 0) return 0;
  return n;
}

static uint32_t median3(uint32_t a, uint32_t b, uint32_t c) {
  return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

/* 1: the group evicts r (the median of three tests at HIGH or above), 0: it does not (one test
   below LOW, or the median), -1: in between. */
static int group_verdict(void* r, void* const* g, size_t n) {
  ca_probe_t* p = &L.probe.base;
  uint32_t lo = low_mark(), first = p->ratio(p, r, g, n, 1);
  if (first < lo) return 0;
  uint32_t med = median3(first, p->ratio(p, r, g, n, 1), p->ratio(p, r, g, n, 1));
  return med >= high_mark() ? 1 : med < lo ? 0 : -1;
}

/* The k-th (mod the count) colour of a non-empty mask. */
static uint32_t nth_colour(uint64_t mask, uint32_t k) {
  k %= (uint32_t)__builtin_popcountll(mask);
  for (; k > 0; k--) mask &= mask - 1;
  return (uint32_t)__builtin_ctzll(mask);
}

/* Is `page` of a colour of `mask`?  1 yes, 0 no, -1 cannot tell.  The page becomes a probe
   reference (its contents are overwritten): pool and supply pages only. */
int _ca_cs_member(void* page, uint64_t mask) {
  int c = _ca_frames_colour(page);
  if (c >= 0) return (mask >> c) & 1;
  void* g[UNION_MAX * CA_WAYS_MAX];
  uint64_t colours;
  bool unsure = false;
  L.probe.base.prepare(&L.probe.base, page);
  for (uint32_t from = 0;;) {
    size_t n = union_from(mask, &from, g, &colours);
    if (n == 0) break;
    int v = group_verdict(page, (void* const*)g, n);
    if (v == 1) return 1;
    unsure |= v < 0;
  }
  return unsure ? -1 : 0;
}

/* The colours a set's pages are tested against, and whether it takes the pages of those
   colours (`in`) or of none of them (by elimination). */
static uint64_t test_mask(const ca_colour_set_t* s, bool* in) {
  *in = !s->by_elimination;
  return (s->by_elimination ? ~s->mask : s->mask) & _ca_cs_known_colours();
}

/* The sets short of stock with the plan of generation `gen` (none once the plan moved on: a set
   registered since has no colours yet, and stocking for the old plan never fills it). */
void _ca_cs_plan(ca_plan_t* plan, uint32_t gen) {
  plan->n = 0;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS && L.generation == gen; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->pool.count >= s->target) continue;
    plan->id[plan->n] = (uint8_t)i;
    plan->mask[plan->n] = test_mask(s, &plan->in[plan->n]);
    plan->n += plan->mask[plan->n] != 0 || !plan->in[plan->n];
  }
  _ca_unlock(&L.lock);
}

/* The set of the plan a fresh page goes to (0: none), and the first colour of its slice that it
   was tested against (for the audit; -1 by elimination).  Sets testing the same colours share
   one test (the 1/8 of NightWatch and the 7/8 of protection: one test serves both). */
int _ca_cs_classify(void* page, const ca_plan_t* plan, int* colour) {
  uint64_t asked[CA_COLOUR_SETS];
  int said[CA_COLOUR_SETS], nasked = 0;
  for (uint32_t i = 0; i < plan->n; i++) {
    int v = -2;
    for (int k = 0; k < nasked && v == -2; k++) if (asked[k] == plan->mask[i]) v = said[k];
    if (v == -2) { v = _ca_cs_member(page, plan->mask[i]); asked[nasked] = plan->mask[i]; said[nasked++] = v; }
    if (plan->in[i] ? v == 1 : v == 0) {
      *colour = plan->in[i] ? __builtin_ctzll(plan->mask[i]) : -1;
      return plan->id[i];
    }
  }
  for (int k = 0; k < nasked; k++) if (said[k] < 0) { L.undecided++; break; }
  return 0;
}

/* A batch's controls, for the colours of `mask`: the reference of one of them (the turn's) must
   read evicted by its union, and one of a colour outside them (where one is known) must not.
   The first reading is what the sets do now, and places the marks (a ring of the last eight).
   False: a loud moment, or sets that no longer see their colours; the batch is not trusted. */
bool _ca_cs_controls(uint64_t mask, uint32_t turn) {
  uint64_t known = _ca_cs_known_colours(), out = known & ~mask;
  mask &= known;
  void* g[UNION_MAX * CA_WAYS_MAX];
  uint32_t c = mask ? nth_colour(mask, turn) : 0;
  size_t n = mask ? union_holding(mask, c, g) : 0;
  if (n == 0) return false;
  ca_probe_t* p = &L.probe.base;
  void* r = L.map.ref[c];
  p->prepare(p, r);
  uint32_t med = median3(p->ratio(p, r, (void* const*)g, n, 1), p->ratio(p, r, (void* const*)g, n, 1),
                         p->ratio(p, r, (void* const*)g, n, 1));
  L.effect_ring[L.effect_next++ % 8] = med;
  uint32_t ring[8], k = L.effect_next < 8 ? L.effect_next : 8;
  memcpy(ring, L.effect_ring, sizeof ring);
  for (uint32_t i = 1; i < k; i++)                  /* insertion sort: k <= 8 */
    for (uint32_t j = i; j > 0 && ring[j - 1] > ring[j]; j--) { uint32_t t = ring[j]; ring[j] = ring[j - 1]; ring[j - 1] = t; }
  L.effect_pct = ring[k / 2];
  if (med < high_mark()) return false;
  if (out == 0) return true;
  r = L.map.ref[nth_colour(out, turn)];
  p->prepare(p, r);
  return group_verdict(r, (void* const*)g, n) == 0;
}

/* A page the plan's set `id` takes: into its pool (false: the pool is full now, or no room). */
bool _ca_cs_take(int id, void* page) {
  _ca_lock(&L.lock);
  ca_colour_set_t* s = &L.sets[id];
  bool ok = s->used && s->pool.count < s->target && _ca_pool_push(&s->pool, page);
  _ca_unlock(&L.lock);
  L.claimed += ok;
  return ok;
}

bool _ca_cs_pools_short(uint32_t gen) {
  ca_plan_t plan;
  _ca_cs_plan(&plan, gen);
  return plan.n > 0;
}

bool _ca_cs_replan(uint32_t gen) {
  _ca_lock(&L.lock);
  bool moved = L.generation != gen;
  _ca_unlock(&L.lock);
  return moved;
}

/* A pooled page of set i, taken out of its pool at random (NULL: none).  Out of the pool while
   it is tested: a span filled from the pool meanwhile would have moved it away under the test
   (SIGSEGV in the worker, seen with a routed small class taking spans). */
static void* pool_take(int i, uint64_t* rng) {
  _ca_lock(&L.lock);
  void* page = L.sets[i].used ? _ca_pool_pop_any(&L.sets[i].pool, rng) : NULL;
  _ca_unlock(&L.lock);
  return page;
}

/* ---- the slice audit (audit.c) ------------------------------------------------------------ */

/* Pages of a small slice's group: twice what its colours hold in the level; 0 for a set that is
   no small slice (by elimination, or more than a quarter of the colours), and with the audit
   off (option colour_audit=0). */
uint32_t _ca_cs_audit_need(const ca_colour_set_t* s) {
  if (!_ca_colour_opt(CA_COPT_AUDIT)) return 0;
  uint32_t k = (uint32_t)__builtin_popcountll(s->mask), need = 2 * k * L.map.ways;
  return s->used && !s->by_elimination && k > 0 && k * 4 <= L.cal.colours && need <= CA_AUDIT_MAX ? need : 0;
}

/* The colours of the sets by elimination (their own, not the ones they exclude). */
static uint64_t elimination_colours(void) {
  uint64_t m = 0;
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].by_elimination) m |= L.sets[i].mask;
  return m;
}

/* Does group g speak for a page of colour c (-1: none, for elimination)?  1: the page must be of
   its slice (c is one of its colours), 0: must not be (for elimination, the slice lying
   outside the elimination sets' colours), -1: it does not speak for the page. */
static int audit_wants(const ca_colour_set_t* g, int c, uint64_t elim) {
  if (!g->audit.valid) return -1;
  if (c >= 0) return (g->mask >> c) & 1 ? 1 : -1;
  return c == -1 && (g->mask & elim) == 0 ? 0 : -1;
}

/* The audit's verdict on a page classified as colour c (-1: none): c, or -2 when a valid group
   speaking for it disagrees (the page is turned away: a page costs less than a pool's purity). */
int _ca_cs_audited(void* page, int c) {
  uint64_t elim = elimination_colours();
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* g = &L.sets[i];
    int want = audit_wants(g, c, elim);
    if (want < 0) continue;
    L.audit_pages++;
    /* a page of the slice is asked twice, and beside a control (audit.c): on the Zen 4 host
       (32 colours, a page claimed for a 1/8 slice about 1 in 30) one clear reading let strays
       in, and a 64-page block of the pool did not evict itself in 3 of 18 test_colour_api
       processes (0 of 18 asked twice, interleaved); the pages turned away must be replaced:
       the worker's CPU, median 3.9 s against 6.4 s in those processes, 2.5 against 3.2 s in
       pv messages (colour_ready.py, 5 rounds) */
    int v = want == 1 ? _ca_audit_admits(&L.probe.base, &g->audit, page)
                      : !_ca_audit_evicts(&L.probe.base, (void* const*)g->audit.page, g->audit.n, page, false);
    if (v != 1) {
      L.audit_turned_away++;
      L.audit_loud_pages += v < 0;
      return -2;
    }
  }
  return c;
}

/* Audit the pages pooled for set i (its pool is drained meanwhile and refilled with the pages
   that pass; `c`: a colour of the set, or -1 for a set by elimination). */
static void audit_pool(int i, int c, uint64_t* rng) {
  ca_page_pool_t kept = {0};
  for (void* page; (page = pool_take(i, rng)) != NULL;) {
    bool ok = _ca_cs_audited(page, c) == c;
    _ca_lock(&L.lock);
    if (!ok || !_ca_pool_push(&kept, page)) { _ca_pool_drop(page); L.sets[i].dropped_pages++; }
    _ca_unlock(&L.lock);
  }
  _ca_lock(&L.lock);
  for (void* page; (page = _ca_pool_pop(&kept)) != NULL;)
    if (!_ca_pool_push(&L.sets[i].pool, page)) _ca_pool_drop(page);
  _ca_unlock(&L.lock);
  if (kept.pages) _ca_os_unmap(kept.pages, kept.cap * sizeof(void*));
}

/* Form and judge the groups of small slices whose pools have the pages for one, in a quiet
   moment (else later).  A valid group then audits what was pooled before it: its own set's
   pages and the elimination sets'.  False: a group was not of few colours, and its pool is
   dropped (the sets that stocked it were wrong: the caller's suspicion). */
bool _ca_cs_audit_groups(uint64_t* rng) {
  bool quiet = false;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    ca_audit_group_t* g = &s->audit;
    uint32_t need = _ca_cs_audit_need(s);
    if (need == 0 || (g->valid && g->n * 4 >= need * 3) || s->pool.count + g->n < need) continue;
    if (!quiet && !(quiet = _ca_cs_quiet_window())) return true;
    while (g->n < need) {
      void* page = pool_take(i, rng);
      if (page == NULL) break;
      g->page[g->n++] = page;
    }
    if (g->ncontrols == 0) {                       /* random pages, kept for the set's life */
      bool fresh;
      uint8_t* c = _ca_pool_supply(CA_AUDIT_CONTROLS, &fresh);
      for (uint32_t k = 0; c != NULL && k < CA_AUDIT_CONTROLS; k++) g->control[g->ncontrols++] = c + k * CA_OS_PAGE;
    }
    uint32_t strays = 0;
    ca_audit_verdict_t v = _ca_audit_judge(&L.probe.base, g, &strays);
    L.audit_judged++;
    if (v == CA_AUDIT_LOUD) { L.audit_loud++; continue; }   /* its members wait for another moment */
    bool ok = v == CA_AUDIT_VALID;
    _ca_lock(&L.lock);
    for (uint32_t k = 0; k < strays; k++) _ca_pool_drop(g->page[g->n + k]);
    if (!ok) {
      while (g->n > 0) _ca_pool_drop(g->page[--g->n]);
      for (void* page; (page = _ca_pool_pop(&s->pool)) != NULL;) { _ca_pool_drop(page); s->dropped_pages++; }
    }
    _ca_unlock(&L.lock);
    L.audit_strays += strays;
    if (!ok) { L.audit_invalid++; return false; }
    audit_pool(i, __builtin_ctzll(s->mask), rng);
    for (int j = 1; j <= CA_COLOUR_SETS; j++)
      if (L.sets[j].used && L.sets[j].by_elimination && (L.sets[j].mask & s->mask) == 0) audit_pool(j, -1, rng);
    _ca_lock(&L.lock);
    s->unvouched = false;
    _ca_unlock(&L.lock);
  }
  return true;
}

/* The pool's re-test: is the page (a pool page: its contents are overwritten) of set i?  The
   slice test, asked again when it cannot tell; then the slice audit's verdict, where a group
   speaks for the set.  Only after the controls of the set's colours passed: in a loud moment
   every union "evicts" every page. */
static bool of_set(int i, void* page) {
  bool in;
  uint64_t m = test_mask(&L.sets[i], &in);
  int v = _ca_cs_member(page, m);
  if (v < 0) v = _ca_cs_member(page, m);
  return (in ? v == 1 : v == 0) && _ca_cs_audited(page, in ? __builtin_ctzll(m) : -1) != -2;
}

static bool set_controls(int i, uint32_t turn) {
  bool in;
  uint64_t m = test_mask(&L.sets[i], &in);
  return m != 0 && _ca_cs_controls(m, turn);
}

/* Re-test a few pooled pages of each set; drop those no longer of the set. */
void _ca_cs_verify_sample(uint64_t* rng) {
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->pool.count == 0 || !set_controls(i, (uint32_t)*rng)) continue;
    for (int k = 0; k < 4; k++) {
      void* page = pool_take(i, rng);
      if (page == NULL) break;
      bool ok = of_set(i, page);
      _ca_lock(&L.lock);
      if (ok) ok = _ca_pool_push(&s->pool, page);
      if (!ok) { _ca_pool_drop(page); s->dropped_pages++; L.verify_drops++; }
      _ca_unlock(&L.lock);
    }
  }
}

/* Protection's kept frames (_ca_colour_keep_frame) join their set's pool only if the pool's
   re-test places them there: protection moves every page it looks at, of any colour (1 in 8 of
   a 1/8 slice's), and a pooled frame of another colour would let the polluter confined to the
   set evict outside it.  Frames whose set's controls fail wait for a quieter moment (and those
   kept beyond KEPT_MAX meanwhile are given back). */
ca_kept_t _ca_cs_kept;

void _ca_cs_test_kept(void) {
  uint32_t quiet = 0, loud = 0;                    /* sets whose controls passed / failed just now */
  for (uint32_t turn = 0;; turn++) {
    _ca_lock(&L.lock);
    uint32_t n = K.n;
    int id = n ? K.set[n - 1] : 0;
    _ca_unlock(&L.lock);
    if (n == 0 || ((loud >> id) & 1)) return;
    if (!((quiet >> id) & 1)) {
      if (!L.sets[id].used || !set_controls(id, turn)) { loud |= 1u << id; continue; }
      quiet |= 1u << id;
    }
    _ca_lock(&L.lock);
    void* page = K.n ? K.page[K.n - 1] : NULL;
    id = K.n ? K.set[K.n - 1] : 0;
    K.n = K.n ? K.n - 1 : 0;
    _ca_unlock(&L.lock);
    if (page == NULL) return;
    bool ok = L.sets[id].used && of_set(id, page);
    _ca_lock(&L.lock);
    if (ok && _ca_pool_push(&L.sets[id].pool, page)) { L.sets[id].pool.returned++; L.frames_kept++; }
    else { _ca_pool_drop(page); K.rejected += !ok; }
    _ca_unlock(&L.lock);
  }
}
