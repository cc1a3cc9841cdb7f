/* The slice audit: a small slice's pages judged by what they do to one another in the L2,
   without eviction sets.  Off by default (option colour_audit): on the Zen 4 host it cost the
   worker 3-5 times the CPU and made no pool measurably purer (docs/colours.md, "The audit off
   by default").

   A slice of k colours holds k x ways pages in the level at once.  A group of twice as many
   pages from its pool (ca_audit_group_t), read, evicts every line of those colours: a page the
   group evicts clearly is of the slice, and a page it leaves in the level is not, whatever the
   eviction sets that stocked the pool said.  Only the pool's majority has to be right: a group
   of which a fifth are strays of other colours still holds about 25 pages of each of a 1/8
   slice's two colours (16-way L2), and its strays, a page or two per other colour, evict
   nothing.  So the group is judged first, each member against the others: when fewer than
   half of them are evicted, the pool is not of few colours (the sets that stocked it were
   wrong), else the members left in the level are strays and leave the group.  (At 3/4, with
   two clear readings asked of each member, 1 test_colour_api process in 6 judged six groups in
   a row invalid and got no stock in 60 s; a pool of random pages has about none evicted.)

   Why: the sets' tests err both ways on this host, and their errors gather in the pools.  Read
   by timing alone (bench/colour_purity.py, docs/colours.md "The slice audit"), before the audit
   a 7/8 block evicted by a 1/8 block in more than 1/16 of its pages (random pages: 1/8) in 4 of
   19 processes on the Zen 5 host, with it in 0 of 16 (two tests per page); in a second run, 3
   of 14 against 1 of 15 (one test per page, as now).

   The probe's questions, one test each: a page of the slice must be evicted *clearly* (item 4
   of docs/colours.md), a page for elimination must not be evicted at the plain rule.  Two
   tests each (of the slice twice clearly, of none twice "no") cost the worker 1.0 s more CPU
   per pv messages process than no audit (median 2.8 s against 1.8 s, 8 interleaved rounds).

   The judgement asks the plain rule, not "clearly": a group holds twice the ways of each
   colour, and on the Zen 5 host such a group at times evicts its members only in part, for
   seconds on end, where an eviction set (exactly the ways) evicts them fully.  In the 4 of 67
   pv processes whose groups were judged invalid, 344 of 360 members were evicted by exactly
   one of the slice's two sets (the pool was pure), the group reading a median 168-188% of the
   quiet chase on them and their own colour's set 191-218% at the same moment, against a clear
   rule of 174-180%: the pool was dropped and the sets built again, up to 5 times in a row, and
   the slice got no page.  Reading the group twice as often, each page's passes in a row, or
   every other pass backwards did not raise it.  Of 31 groups judged invalid (112 processes),
   30 had a majority above the plain rule.  A page joining the pool is still asked "clearly"
   (_ca_audit_evicts' callers): in such a moment it is turned away, not let in; a page joining
   a small slice is asked twice (stock.c, audited(): one reading let too many strays into
   a 1/8 pool on the Zen 4 host).

   Controls: a reading errs towards "evicted" in a loud moment (something outside the VM clears
   the L2 while the group is read), and then a group of random pages judges valid and admits
   random pages.  So the group keeps 16 random pages of no pool, its controls, and reads them
   as it reads its members: a judgement in which they are evicted at more than half the
   members' rate says nothing (loud: the group waits for another moment), and a page admitted
   to the slice is read beside a control the valid judgement left in the level, and turned away
   when that control reads evicted too (docs/colours.md, "Controls"). */
#include "colour.h"

/* Does reading group g[0..n) evict `page` (clearly, or at the plain rule)?  `page` becomes a
   probe reference (its contents are overwritten); it must not be one of g[0..n). */
bool _ca_audit_evicts(ca_probe_t* p, void* const* g, size_t n, void* page, bool clearly) {
  p->prepare(p, page);
  return _ca_evicts_confirmed(p, page, g, n, 1, 1, clearly ? CA_ASK_CLEARLY : CA_ASK_PLAIN);
}

/* evicted at the plain rule in one of two tests */
static bool evicted_plainly(ca_probe_t* p, void* const* g, size_t n, void* page) {
  return _ca_audit_evicts(p, g, n, page, false) || _ca_audit_evicts(p, g, n, page, false);
}

/* Is `page` (a page the slice's sets claimed) of the valid group's slice?  1: evicted clearly
   twice, and a control the judgement left in the level is left there now; 0: not evicted
   (a stray); -1: the control was evicted too (a loud moment: nothing can be told). */
int _ca_audit_admits(ca_probe_t* p, ca_audit_group_t* g, void* page) {
  void* const* grp = (void* const*)g->page;
  if (!_ca_audit_evicts(p, grp, g->n, page, true) || !_ca_audit_evicts(p, grp, g->n, page, true)) return 0;
  if (g->controls_left == 0) return 1;
  uint32_t k = g->next_control;
  do k = (k + 1) % g->ncontrols; while (!((g->controls_left >> k) & 1));
  g->next_control = k;
  return _ca_audit_evicts(p, grp, g->n, g->control[k], true) ? -1 : 1;
}

/* Judge the group's members, each against the others, at the plain rule; strays (members the
   others leave in the level in two tests) move to the end of g->page and out of the group
   (*nstrays of them, from g->page[g->n]).  A group of which fewer than half are evicted is not
   of few colours: invalid, its members left as they were.  Then its controls, the same way:
   evicted at more than half the members' rate, the moment was loud (members left as they
   were, and the group as valid as it was). */
ca_audit_verdict_t _ca_audit_judge(ca_probe_t* p, ca_audit_group_t* g, uint32_t* nstrays) {
  bool stray[CA_AUDIT_MAX];
  uint32_t evicted = 0;
  *nstrays = 0;
  for (uint32_t i = 0; i < g->n; i++) {
    void* m = g->page[i];
    g->page[i] = g->page[g->n - 1];              /* the others: the group without member i */
    stray[i] = !evicted_plainly(p, (void* const*)g->page, g->n - 1, m);
    g->page[g->n - 1] = g->page[i];
    g->page[i] = m;
    evicted += !stray[i];
  }
  if (evicted * 2 < g->n) { g->valid = false; return CA_AUDIT_INVALID; }
  uint32_t ctl_evicted = 0, left = 0;
  for (uint32_t i = 0; i < g->ncontrols; i++) {
    bool e = evicted_plainly(p, (void* const*)g->page, g->n, g->control[i]);
    ctl_evicted += e;
    left |= (uint32_t)!e << i;
  }
  if ((uint64_t)ctl_evicted * 2 * g->n > (uint64_t)evicted * g->ncontrols) return CA_AUDIT_LOUD;
  for (uint32_t i = g->n; i-- > 0;)
    if (stray[i]) {
      void* m = g->page[i];
      g->page[i] = g->page[--g->n];
      g->page[g->n] = m;
      ++*nstrays;
    }
  g->controls_left = left;
  g->valid = true;
  return CA_AUDIT_VALID;
}
