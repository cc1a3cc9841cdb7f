/* What the worker decides page by page while it stocks: the colours the sets need, whether a
   moment is quiet enough to trust a test, where a classified page goes, the slice audit's
   verdicts, the pools' re-tests, and the kept frames protection hands back.  A set covering more
   than half of the colours is classified by elimination: a page belongs when none of the other
   colours claims it. */
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

/* Is now a moment when classification can be trusted?  Re-places the threshold on the current
   levels (they drift with the other hardware thread) and requires them clearly apart. */
bool _ca_cs_quiet_window(void) {
  uint32_t n = L.map.ncolours < 4 ? L.map.ncolours : 4;
  if (n == 0) return false;                          /* no sets to judge the moment by */
  L.probe.base.recalibrate(&L.probe.base, (void* const*)L.map.ref, (void* const (*)[CA_WAYS_MAX])L.map.set, n, L.map.ways);
  uint32_t r = L.probe.set_ratio_pct;
  if (r > L.top_ratio_pct) { L.best_ratio_pct = L.top_ratio_pct; L.top_ratio_pct = r; }
  else if (r > L.best_ratio_pct) L.best_ratio_pct = r;
  return r > 160;
}

/* After a batch: do most sets still evict their references? */
bool _ca_cs_sets_held(void) {
  uint32_t held = 0;
  for (uint32_t c = 0; c < L.map.ncolours; c++) {
    L.probe.base.prepare(&L.probe.base, L.map.ref[c]);
    held += L.probe.base.evicts(&L.probe.base, L.map.ref[c], (void* const*)L.map.set[c], L.map.ways);
  }
  return held * 2 > L.map.ncolours;
}

/* Route a classified page to the sets it belongs to; returns whether one took it. */
bool _ca_cs_route(void* page, int c) {
  bool taken = false;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->pool.count >= s->target) continue;
    bool in = c >= 0 ? ((s->mask >> c) & 1) != 0 : s->by_elimination && c == -1;
    if (in && !taken) taken = _ca_pool_push(&s->pool, page);
  }
  _ca_unlock(&L.lock);
  L.claimed += c >= 0;
  return taken;
}

/* Is a set short of stock, with the sets the worker planned for (generation `gen`)?  A set
   registered since has no colours yet: stocking for the old plan would never fill it (and
   kept classifying, 1.7 million pages in two minutes, holding the rejected frames). */
bool _ca_cs_pools_short(uint32_t gen) {
  bool any = false;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].pool.count < L.sets[i].target) any = true;
  if (L.generation != gen) any = false;
  _ca_unlock(&L.lock);
  return any;
}

bool _ca_cs_replan(uint32_t gen) {
  _ca_lock(&L.lock);
  bool moved = L.generation != gen;
  _ca_unlock(&L.lock);
  return moved;
}

/* A page the strict test placed nowhere may still be of an excluded colour: the strict test
   misses about half of a colour's pages on the Zen 5 host, and by elimination they would join
   the set.  Two single plain tests per excluded colour look again; either saying "evicts" keeps
   the page out of elimination sets (-2), without making it a member of anything (a partly
   evicted page passes the plain test too). */
int _ca_cs_excluded(void* page, uint64_t excl) {
  for (int k = 0; k < 2 && excl != 0; k++)
    if (_ca_colour_classify_n(&L.probe.base, &L.map, page, excl, 1, 1, CA_ASK_PLAIN) >= 0) return -2;
  return -1;
}

/* The colours discovered so far. */
uint64_t _ca_cs_known_colours(void) {
  return L.map.ncolours >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << L.map.ncolours) - 1);
}

/* The colours the sets short of stock need pages tested against: a set's own, or for a set by
   elimination the colours it excludes (only those when `excluded_only`), among the colours
   discovered.  A full set costs no tests (with the 7/8 complement of protection stocked, the
   second look of excluded() took most of the time that stocking the first 1/8 needed). */
uint64_t _ca_cs_sets_mask(bool excluded_only) {
  uint64_t m = 0;
  _ca_lock(&L.lock);
  for (int i = 1; i <= CA_COLOUR_SETS; i++)
    if (L.sets[i].used && L.sets[i].pool.count < L.sets[i].target && (L.sets[i].by_elimination || !excluded_only))
      m |= L.sets[i].by_elimination ? ~L.sets[i].mask : L.sets[i].mask;
  _ca_unlock(&L.lock);
  return m & _ca_cs_known_colours();
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
      uint8_t* c = _ca_pool_supply(CA_AUDIT_CONTROLS);
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

/* The pool's re-test: is the page (a pool page: its contents are overwritten) of set i?  One
   strict classification, and a second against all of the mask's colours when the first says
   no; then the slice audit's verdict, where a group speaks for the set. */
static bool of_set(int i, void* page) {
  const ca_colour_set_t* s = &L.sets[i];
  uint64_t m = s->by_elimination ? ~s->mask : s->mask;
  int c = _ca_colour_classify(&L.probe.base, &L.map, page, m & _ca_cs_known_colours());
  bool ok = s->by_elimination ? c < 0 : c >= 0;
  if (!ok) ok = s->by_elimination ? _ca_colour_classify(&L.probe.base, &L.map, page, m) < 0
                                  : (c = _ca_colour_classify(&L.probe.base, &L.map, page, m)) >= 0;
  return ok && _ca_cs_audited(page, s->by_elimination ? -1 : c) != -2;
}

/* Re-test a few pooled pages of each set; drop those no longer of the set. */
void _ca_cs_verify_sample(uint64_t* rng) {
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
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

/* Do the sets still claim pages they stocked?  Up to 16 of the small slices' (not by
   elimination): members of a slice group the audit vouched for, else pooled pages (a slice
   handing out pages as fast as they come has none), each classified again against its set's
   colours; true when half or more are claimed, false when they are not or none is there. */
bool _ca_cs_sets_claim_stock(uint64_t* rng) {
  uint32_t asked = 0, claimed = 0;
  for (int i = 1; i <= CA_COLOUR_SETS && asked < 16; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used || s->by_elimination) continue;
    uint64_t m = s->mask & _ca_cs_known_colours();
    for (uint32_t k = 0; s->audit.valid && k < s->audit.n && asked < 16; k += 4, asked++)
      claimed += _ca_colour_find(&L.probe.base, &L.map, s->audit.page[k], m) >= 0;
    for (void* page; asked < 16 && (page = pool_take(i, rng)) != NULL;) {
      asked++;
      claimed += _ca_colour_find(&L.probe.base, &L.map, page, m) >= 0;
      _ca_lock(&L.lock);
      if (!_ca_pool_push(&s->pool, page)) _ca_pool_drop(page);
      _ca_unlock(&L.lock);
    }
  }
  return asked > 0 && claimed * 2 >= asked;
}

/* Protection's kept frames (_ca_colour_keep_frame) join their set's pool only if the pool's
   re-test places them there: protection moves every page it looks at, of any colour (1 in 8 of
   a 1/8 slice's), and a pooled frame of another colour would let the polluter confined to the
   set evict outside it. */
ca_kept_t _ca_cs_kept;


/* Only in a quiet moment (else they wait, and frames kept beyond KEPT_MAX meanwhile are given
   back): in a loud one every set "evicts" every page, and the test would place any frame in
   the slice. */
void _ca_cs_test_kept(void) {
  if (__atomic_load_n(&K.n, __ATOMIC_RELAXED) == 0 || !_ca_cs_quiet_window()) return;
  for (;;) {
    _ca_lock(&L.lock);
    uint32_t n = K.n;
    void* page = n ? K.page[n - 1] : NULL;
    int id = n ? K.set[n - 1] : 0;
    K.n = n ? n - 1 : 0;
    _ca_unlock(&L.lock);
    if (page == NULL) return;
    bool ok = L.sets[id].used && of_set(id, page);
    _ca_lock(&L.lock);
    if (ok && _ca_pool_push(&L.sets[id].pool, page)) { L.sets[id].pool.returned++; L.frames_kept++; }
    else { _ca_pool_drop(page); K.rejected += !ok; }
    _ca_unlock(&L.lock);
  }
}

/* Power of two nearest to n (geometric rounding: 12 -> 16, 24 -> 32). */
