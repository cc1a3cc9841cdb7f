/* NightWatch's chunks below the L2: the size table (per size class, the contexts sampled there),
   span-level mapping (a class served from restrictive spans while restrictive contexts hold its
   samples), classes named one by one, and the groups a context's chunks are judged in. */
#define _GNU_SOURCE
#include "nw.h"

/* ---- small chunks: the size table, span-level mapping, groups ---------------------------- */

/* What the size table asks of class k: `route`, serve it from restrictive spans, when the
   contexts the predictor makes restrictive hold ROUTE_SHARE_PCT of its samples; `one_by_one`,
   for a class of a page or more, name its chunks one by one (`place`, each given its context's
   mapping): `shared`, a restrictive context shares it with others; or one of its contexts has a
   group on (its members join as in `place`, one per sampling period of the context's bytes:
   sampled members of pv neutral's reused buffers were never re-protected between uses, item 7
   of the header); or nothing
   samples it (nightwatch_small=0), or every chunk is monitored. */
typedef struct { bool route, one_by_one, shared; } class_want_t;

static class_want_t class_want(uint32_t k) {
  const nw_class_t* t = &NW.classes[k];
  uint32_t total = atomic_load_explicit(&t->total, ca_relaxed);
  uint64_t r = 0;
  bool grouped = false;
  for (int i = 0; i < CLASS_CTXS; i++) {
    int c1 = atomic_load_explicit(&t->ctx[i], ca_relaxed);
    if (c1 == 0) continue;
    if (_ca_nw_predict(c1 - 1) == CA_MAP_RESTRICTIVE) r += atomic_load_explicit(&t->samples[i], ca_relaxed);
    grouped |= NW.ctx[c1 - 1].group_on;
  }
  class_want_t w;
  bool medium = _ca_class_size[k] >= CA_OS_PAGE;
  bool restrictive_only = r * 100 >= (uint64_t)total * ROUTE_SHARE_PCT;
  w.route = total >= ROUTE_MIN && restrictive_only;
  /* shared: another context holds its part of the samples (not merely too few samples yet: a
     class only a polluter used was named one by one until its eighth sample, and from then on
     its chunks came from `place`, uncounted, so the eighth never came) */
  w.shared = medium && r > 0 && !restrictive_only;
  w.one_by_one = w.shared || (medium && (grouped || !NW.groups || NW.monitor_all));
  return w;
}

/* A sample of context ctx in class k; true when the class's route, or whether it is named one
   by one, should change.  No lock
   (every sample of every thread took one): a context claims a free entry once, with a
   compare-and-swap, and counts are plain stores. */
bool _ca_nw_note_class(uint32_t k, int ctx) {
  nw_class_t* t = &NW.classes[k];
  bump32(&t->total);
  for (int i = 0; i < CLASS_CTXS; i++) {
    int c1 = atomic_load_explicit(&t->ctx[i], ca_relaxed);
    if (c1 == 0 && (atomic_compare_exchange_strong(&t->ctx[i], &c1, ctx + 1) || c1 == ctx + 1)) c1 = ctx + 1;
    if (c1 == ctx + 1) { bump32(&t->samples[i]); break; }
  }
  if (atomic_load_explicit(&NW.nrestrictive, ca_relaxed) == 0 && _ca_class_route(k) == 0 && !_ca_class_placed(k)) return false;   /* the usual case */
  class_want_t w = class_want(k);
  return w.route != (_ca_class_route(k) != 0) || w.one_by_one != _ca_class_placed(k);
}

/* Make the core's class routes, and the classes it hands `place` one by one, agree with the size
   table.  Not under NW.lock: the restrictive flavour may start the colour layer, which
   allocates. */
void _ca_nw_update_routes(void) {
  class_want_t want[CA_CLASS_MAX];
  for (uint32_t k = 0; k < _ca_class_count; k++) want[k] = class_want(k);
  for (uint32_t k = 0; k < _ca_class_count; k++) {
    uint8_t f = want[k].route ? _ca_nw_restrictive_now() : 0;
    if (want[k].route && NW.protect && !_ca_protect_armed()) _ca_nw_arm_protection();
    if (_ca_class_route(k) != f) { _ca_route_class(k, f); _ca_nw_log_event(EV_ROUTE, (uint32_t)_ca_class_size[k], f != 0); }
    if (_ca_class_placed(k) != want[k].one_by_one) _ca_place_class(k, want[k].one_by_one);
    /* the timeline says when a class is shared by a restrictive context (not each group) */
    if (NW.class_shared[k] != want[k].shared) {
      NW.class_shared[k] = want[k].shared;
      _ca_nw_log_event(EV_PLACE, (uint32_t)_ca_class_size[k], want[k].shared);
    }
  }
}

/* What a member of n bytes stands for: a small chunk, or a chunk below the sampling period, the
   period's bytes of its context's allocations (one is sampled per period); with every chunk
   monitored, every one joins and stands for itself, unless that is below the least a group's
   member must stand for (monitor.c): then one chunk in k joins, standing for k of them. */
static size_t member_stride(size_t n) {
  size_t period = (size_t)_ca_sample_period_bytes(), least = _ca_monitor_member_least();
  if (n < CA_OS_PAGE) return period;
  if (!NW.monitor_all) return n >= period ? n : period;
  return n >= least ? n : n * ((least + n - 1) / n);
}

/* A member of its context's group in the monitor; NULL when the group has no room (the core
   allocates the chunk as usual).  A sampled small chunk (n below a page) gets a page of its
   own inside a block of an ordinary span (_ca_malloc_page), so no mapping is made for it; a
   chunk of a page or more gets pages of its own (a large object, of its predicted flavour) and
   is a member by its first page. */
void* _ca_nw_place_member(int ctx, size_t n, bool zero, ca_mapping_t m, uint8_t flavour) {
  uint64_t t0 = _ca_clock_ns(), cookie = GROUP_COOKIE | (uint64_t)ctx;
  size_t stride = member_stride(n);
  nw_ctx_t* c = &NW.ctx[ctx];
  _ca_lock(&NW.lock);
  bool start = !c->group_on;
  if (!_ca_monitor_member_room(cookie, start)) { _ca_unlock(&NW.lock); return NULL; }
  if (start) {
    c->group_on = true;
    c->group_predicted = m;
    atomic_fetch_add_explicit(&c->inflight, 1, ca_relaxed);
    _ca_nw_reserve(ctx, _ca_monitor_group_pages(stride));
    _ca_nw_tried(ctx);
  }
  _ca_unlock(&NW.lock);
  bool small = n < CA_OS_PAGE;
  void* p = small ? _ca_malloc_page() : _ca_nw_alloc_mapped(n, zero, flavour, true);
  if (p != NULL && small) _ca_protect_release(p, CA_OS_PAGE);   /* its page will trap: never recoloured */
  if (p != NULL && !small) _ca_protect_remove(p);
  uint64_t t1 = _ca_clock_ns();               /* the monitor counts its own cost (mprotect) */
  if (p != NULL && _ca_monitor_start_member(p, cookie, stride, start)) {
    bump(small ? &NW.small_members : &NW.medium_members, 1);
    if (!small) c->member_bytes = atomic_load_explicit(&c->bytes, ca_relaxed) + stride - n;
  } else {
    if (start) {
      _ca_lock(&NW.lock);
      c->group_on = false;
      _ca_nw_inflight_end(ctx);
      _ca_unlock(&NW.lock);
    }
    if (p != NULL) _ca_free_chunk(p);
    p = NULL;
    atomic_fetch_add_explicit(&NW.lost, 1, ca_relaxed);
  }
  /* a chunk that would have been a block of a warm span gets fresh pages: their first touches
     are the monitoring's cost too */
  uint64_t touch = p == NULL ? 0 : small ? TOUCH_NS : (uint64_t)(n / CA_OS_PAGE) * TOUCH_NS;
  atomic_fetch_add_explicit(&NW.alloc_cost_ns, t1 - t0 + touch, ca_relaxed);
  return p;
}

/* The budget allows a whole group for ctx now.  When it refuses, the context's next chunks do
   not ask again at once (each ask reads the clock; asked by every chunk of mixed's two undecided
   contexts, about 1% of its run). */
bool _ca_nw_group_budget(int ctx, size_t n) {
  if ((NW.monitor_all || _ca_clock_ms() >= _ca_nw_retry_ms(ctx)) &&
      _ca_nw_within_budget(_ca_monitor_group_pages(member_stride(n)), _ca_nw_budget_halves(ctx, true)))
    return true;
  atomic_store_explicit(&NW.ctx[ctx].countdown, BUDGET_SKIP, ca_relaxed);
  return false;
}

/* A context's sampled small chunk joins its group: always while the group is on (members must
   be dense for their footprint to be seen), else when the context is due and the budget allows
   a whole group */
bool _ca_nw_group_due(int ctx, bool join, size_t n) {
  if (join) return true;
  if (!(NW.monitor_all || _ca_nw_should_monitor(ctx)) || atomic_load_explicit(&NW.ctx[ctx].inflight, ca_relaxed) != 0) return false;
  if (_ca_nw_context_info(ctx)->in_libc) {    /* never monitored (place_rare) */
    atomic_store_explicit(&NW.ctx[ctx].countdown, SKIP_MAX, ca_relaxed);
    return false;
  }
  return _ca_nw_group_budget(ctx, n);
}

/* A group's end: with a verdict, it counts as one monitored chunk of its context.  Without one,
   the context's chunks told the monitor nothing (used in one burst and freed, or not used again
   while it looked): its next group waits RETRY_MS, doubled for each such group in a row (up to
   32 times), so that a context with nothing to tell does not take the whole budget (pv
   neutral: three or four groups of 64 members a run, all for nothing). */
void _ca_nw_on_group_verdict(int ctx, const ca_monitor_result_t* r) {
  nw_ctx_t* c = &NW.ctx[ctx];
  _ca_lock(&NW.lock);
  ca_mapping_t predicted = c->group_predicted;
  if (c->group_on) _ca_nw_inflight_end(ctx);
  c->group_on = false;
  _ca_nw_group_ended(ctx, r->judged, _ca_clock_ms());
  _ca_unlock(&NW.lock);
  if (r->judged) _ca_nw_verdict(ctx, predicted, r);
  _ca_nw_update_routes();                            /* the verdict, and the group's classes sampled again */
}


/* at start: span classes of a page or more that nothing samples are named one by one */
void _ca_nw_classes_init(void) {
  for (uint32_t k = 0; k < _ca_class_count; k++) _ca_place_class(k, class_want(k).one_by_one);
}
