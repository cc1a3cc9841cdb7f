/* NightWatch's predictor (paper 000, section 3): restrictive only when a context's last two
   monitored chunks were polluters; the skip interval that doubles after a correct prediction and
   falls back to 0 after a wrong one; and the monitoring budget every chunk and group asks. */
#define _GNU_SOURCE
#include "nw.h"

/* ---- the predictor ---------------------------------------------------------------------- */
ca_mapping_t _ca_nw_predict(int ctx) { return (ca_mapping_t)atomic_load_explicit(&NW.ctx[ctx].decision, ca_relaxed); }

bool _ca_nw_should_monitor(int ctx) {
  _Atomic(int64_t)* d = &NW.ctx[ctx].countdown;
  int64_t v = atomic_load_explicit(d, ca_relaxed);
  if (v <= 0) return true;
  atomic_store_explicit(d, v - 1, ca_relaxed);            /* racing threads may skip one less */
  return false;
}

uint32_t _ca_nw_skip(int ctx) { return NW.ctx[ctx].skip; }

ca_mapping_t _ca_nw_verdict(int ctx, ca_mapping_t predicted, const ca_monitor_result_t* r) {
  nw_ctx_t* c = &NW.ctx[ctx];
  bool polluter = r->polluter;
  _ca_lock(&NW.lock);
  c->monitored++;
  c->pages += r->pages;
  c->hits += r->hits;
  c->misses += r->misses;
  c->far += r->far;
  c->unused += r->unused;
  c->interference += r->interference;
  if ((predicted == CA_MAP_RESTRICTIVE) == polluter) {
    c->pred_hits++;
    c->skip = c->skip == 0 ? 1 : c->skip * 2 > SKIP_MAX ? SKIP_MAX : c->skip * 2;
  } else {
    c->pred_misses++;
    c->skip = 0;
  }
  atomic_store_explicit(&c->countdown, (int64_t)c->skip, ca_relaxed);
  c->history = (uint8_t)(((c->history << 1) | polluter) & 3);
  if (c->nverdicts < 2) c->nverdicts++;
  ca_mapping_t d = c->nverdicts == 2 && c->history == 3 ? CA_MAP_RESTRICTIVE : CA_MAP_OPEN;
  _ca_nw_log_event(EV_VERDICT, (uint32_t)ctx, polluter);
  if (d != (ca_mapping_t)c->decision) {
    NW.nrestrictive += d == CA_MAP_RESTRICTIVE ? 1 : -1;
    _ca_nw_log_event(EV_DECISION, (uint32_t)ctx, d == CA_MAP_RESTRICTIVE);
  }
  atomic_store_explicit(&c->decision, d, ca_relaxed);
  _ca_unlock(&NW.lock);
  return d;
}

void _ca_nw_reset(void) {
  _ca_lock(&NW.lock);
  memset(NW.ctx, 0, sizeof NW.ctx);
  atomic_store_explicit(&NW.reserved_ns, 0, ca_relaxed);
  NW.nrestrictive = 0;
  for (int i = 0; i < EVENTS; i++) atomic_store_explicit(&NW.events[i].kind, EV_NONE, ca_relaxed);
  atomic_store_explicit(&NW.nevents, 0, ca_relaxed);
  _ca_unlock(&NW.lock);
  _ca_nw_sites_reset();
}

/* ---- the budget ------------------------------------------------------------------------- */

/* Monitoring may start a chunk of n bytes when what it cost so far, and what this chunk will
   cost (its sampled pages at the average cost of a sampled page), are within the budget's share
   of the time the program has run.  The share, in halves of the budget:
   - the second chunk of a context whose first verdict was a polluter: four times the budget
     (one chunk per context; until then its chunks stay open, and pv frames ran 2200 of 6000
     frames open with the second verdict at the plain share, 950 at four times);
   - a context's first chunk of the L2's size or more: twice the budget.  In pv requests two
     contexts learn at once, and at the plain share the second one's first chunk waited for
     the first one's two (their decision came at frame 237-1990 of 6000 in 7 of 50 runs, in
     the others at 22; none of 40 late at two or four times).  Four times made the foundation's
     mixed and churn (0.3 s runs) monitor one big chunk each, 0.7-1.4% of their run, for no
     verdict; at twice they monitor none, as before;
   - one still learning otherwise (fewer than two verdicts, a group of smaller chunks): the
     budget;
   - the others: half of it, so that one busy context does not starve the rest.
   (With every learning context at twice the budget, mixed's contexts, whose chunks are mostly
   freed before a verdict, stayed learning, and monitoring took 1.0% of its run for a budget of
   0.5%: the first chunk's share is one chunk per context.) */
int _ca_nw_budget_halves(int ctx, bool group) {
  const nw_ctx_t* c = &NW.ctx[ctx];
  if (!group && c->nverdicts == 0 && !c->tried) return 4;
  return c->nverdicts == 1 && c->history == 1 ? 8 : c->nverdicts < 2 ? 2 : 1;
}

/* Context ctx's chunk or group is being monitored (NW.lock held): its first try is over. */
void _ca_nw_tried(int ctx) { NW.ctx[ctx].tried = true; }

/* Context ctx's group ended at now_ms, judged or not (NW.lock held): see on_group_verdict. */
void _ca_nw_group_ended(int ctx, bool judged, uint64_t now_ms) {
  nw_ctx_t* c = &NW.ctx[ctx];
  if (judged) { c->unjudged_run = 0; return; }
  c->unjudged++;
  c->retry_ms = now_ms + ((uint64_t)RETRY_MS << (c->unjudged_run < 5 ? c->unjudged_run : 5));
  c->unjudged_run++;
}

uint64_t _ca_nw_retry_ms(int ctx) { return NW.ctx[ctx].retry_ms; }

/* A chunk or group in flight holds its expected cost (its sampled pages at the average cost
   of one) until it ends, on top of what it has cost so far: without it, two contexts' groups
   starting together were each admitted by the budget alone (the foundation's mixed took 0.97%
   of its run for a budget of 0.5% in one benchmark run).  Not under nightwatch_monitor. */
void _ca_nw_reserve(int ctx, uint32_t pages) {
  if (NW.monitor_all) return;
  uint64_t ns = (uint64_t)pages * _ca_monitor_page_cost_ns();
  atomic_fetch_add_explicit(&NW.ctx[ctx].reserved_ns, ns, ca_relaxed);
  atomic_fetch_add_explicit(&NW.reserved_ns, ns, ca_relaxed);
}

void _ca_nw_release(int ctx) {
  uint64_t ns = atomic_exchange_explicit(&NW.ctx[ctx].reserved_ns, 0, ca_relaxed);
  atomic_fetch_sub_explicit(&NW.reserved_ns, ns, ca_relaxed);
}

/* Context ctx's chunk or group has ended (or never started): one fewer in flight. */
void _ca_nw_inflight_end(int ctx) {
  atomic_fetch_sub_explicit(&NW.ctx[ctx].inflight, 1, ca_relaxed);
  _ca_nw_release(ctx);
}

/* When (clock ns) the budget allows a chunk of `pages` sampled pages at share `halves`. */
uint64_t _ca_nw_budget_due_ns(uint32_t pages, int halves) {
  uint64_t spent = _ca_monitor_cost_ns() + atomic_load_explicit(&NW.alloc_cost_ns, ca_relaxed) +
                   atomic_load_explicit(&NW.reserved_ns, ca_relaxed);
  spent += (uint64_t)pages * _ca_monitor_page_cost_ns();
  return NW.start_ns + spent * 1000 * 2 / ((NW.budget_pm ? NW.budget_pm : 1) * (uint64_t)halves);
}

bool _ca_nw_within_budget(uint32_t pages, int halves) {
  if (NW.monitor_all) return true;
  if (NW.budget_pm == 0) return false;
  /* refused until then: a coarse clock read, not the sums and a precise clock on every chunk
     (learning contexts recomputed it for each of mixed's 160,000 chunks: 8% of its time) */
  _Atomic(uint64_t)* next = &NW.next_ok_ms[__builtin_ctz((unsigned)halves)];   /* 1, 2, 4, 8: 0-3 */
  if (_ca_clock_ms() < atomic_load_explicit(next, ca_relaxed)) { bump(&NW.over_budget, 1); return false; }
  uint64_t ok_ns = _ca_nw_budget_due_ns(pages, halves);
  if (_ca_clock_ns() >= ok_ns) return true;
  atomic_store_explicit(next, ok_ns / 1000000, ca_relaxed);
  bump(&NW.over_budget, 1);
  return false;
}

