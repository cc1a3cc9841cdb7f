/* Groups: one allocation context's chunks below the L2, judged together (monitor.c, above
   mgroup_t in mon.h, says how). */
#define _GNU_SOURCE
#include "mon.h"
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* A group's gone members: an unused miss once the group streamed more than the L2 after their
   reference; dropped after GONE_MS (or `all`). */
void _ca_mon_settle_gone(int g, uint64_t now_ms, bool all) {
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state != CH_GONE || m->group != g) continue;
    if (m->pending && !_ca_monitor_judge(_ca_mon_referenced_since(m, &m->s[0]), m->stride, M.l2)) {
      _ca_mon_count(m, false); m->ev->r.unused++; M.unused++; m->pending = false;
    }
    if (all || now_ms - m->gone_ns / 1000000 > GONE_MS) { m->state = CH_FREE; M.groups[g].members--; }
  }
}

/* A group's verdict: its live members are no longer sampled (their pages opened). */
void _ca_mon_decide_group(int g, uint32_t min_evidence) {
  mgroup_t* gr = &M.groups[g];
  _ca_mon_settle_gone(g, 0, true);
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state != CH_ACTIVE || m->group != g) continue;
    _ca_mon_finish_page(m, &m->s[0]);
    m->state = CH_FREE;
    gr->members--;
    atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  }
  _ca_mon_verdict_of(&gr->ev, gr->ev.r.pages, min_evidence);
  gr->state = CH_VERDICT;
}



/* A group with nothing left to learn (no member page still sampled, no gone member waiting
   for its unused test while members may still join) and no new member for GROUP_IDLE_MS ends
   with what it has.  So does one that has judged no pair by the time GROUP_FRUITLESS of its
   warm members were freed: its context's chunks are used in one burst and freed before
   anything else of the context comes (pv neutral's scratch buffers: 64 members, every group of
   every run, judged nothing); the policy tries the context again later. */
bool _ca_mon_fruitless(const mgroup_t* gr) { return gr->gone_warm >= GROUP_FRUITLESS && gr->ev.r.hits + gr->ev.r.misses == 0; }
static bool group_full(const mgroup_t* gr) { return gr->warm >= GROUP_WARM || gr->ev.r.pages >= GROUP_LIMIT || _ca_mon_fruitless(gr); }

bool _ca_mon_group_idle(int g, uint64_t now_ms) {
  if (_ca_mon_fruitless(&M.groups[g])) return true;
  if (now_ms - M.groups[g].joined_ms < GROUP_IDLE_MS) return false;
  bool full = group_full(&M.groups[g]);
  for (int i = 0; i < MAX_CHUNKS; i++) {
    const mchunk_t* m = &M.chunks[i];
    if (m->group != g) continue;
    if ((m->state == CH_ACTIVE && m->done < m->nsamples) || (m->state == CH_GONE && m->pending && !full)) return false;
  }
  return true;
}


static mchunk_t* free_slot(void) {
  for (int i = 0; i < MAX_CHUNKS; i++) if (M.chunks[i].state == CH_FREE) return &M.chunks[i];
  return NULL;
}

/* a full group's oldest gone member goes (settled first); false when it has none */
static bool drop_oldest_gone(int g) {
  mchunk_t* old = NULL;
  for (int i = 0; i < MAX_CHUNKS; i++) {
    mchunk_t* m = &M.chunks[i];
    if (m->state == CH_GONE && m->group == g && (old == NULL || m->s[0].last_ref < old->s[0].last_ref)) old = m;
  }
  if (old == NULL) return false;
  _ca_mon_settle_gone(g, _ca_clock_ms(), false);     /* its unused test first; may drop it (expired) */
  if (old->state == CH_GONE) { old->state = CH_FREE; M.groups[g].members--; }
  return true;
}

/* The least a group's member may stand for: its GROUP_MEMBERS then hold the L2's worth of cold
   members and 16 warm ones, whose pairs see more than the L2 referenced in between.  (With every
   32 KiB chunk a member, a 2 MiB L2 took 64 cold members, more than a group holds, and no group
   of a streamed context judged a pair.) */
size_t _ca_monitor_member_least(void) {
  size_t l2 = M.l2;
  for (uint32_t i = 0; l2 == 0 && i < _ca_machine.nlevels; i++) if (_ca_machine.levels[i].level == 2) l2 = _ca_machine.levels[i].size;
  if (l2 == 0) l2 = (size_t)1 << 20;
  return (l2 + GROUP_MEMBERS - 16 - 1) / (GROUP_MEMBERS - 16);
}

/* A group of members standing for `stride` bytes each takes the L2's worth of them (not judged:
   they mark footprint) and GROUP_WARM more.  With a fixed total of 64, members of 16 KiB or less
   (every chunk a member, nightwatch_monitor=1) filled the group before any was warm: pv
   victims' and neutral's groups judged nothing in the run that monitors every chunk. */
uint32_t _ca_monitor_group_pages(size_t stride) {
  size_t l2 = M.l2 ? M.l2 : (size_t)1 << 20, cold = stride ? (l2 + stride - 1) / stride : GROUP_LIMIT;
  return cold + GROUP_WARM < GROUP_LIMIT ? (uint32_t)(cold + GROUP_WARM) : GROUP_LIMIT;
}

/* whether a member could join the group `cookie` now (or start it, when `start`); no lock:
   a hint that spares the caller a page when the answer is no */
bool _ca_monitor_member_room(uint64_t cookie, bool start) {
  for (int g = 0; g < MAX_GROUPS; g++) {
    if (M.groups[g].state != CH_ACTIVE || M.groups[g].cookie != cookie) continue;
    if (M.groups[g].members < GROUP_MEMBERS && !group_full(&M.groups[g])) return true;
    for (int i = 0; i < MAX_CHUNKS && !group_full(&M.groups[g]); i++)
      if (M.chunks[i].state == CH_GONE && M.chunks[i].group == g) return true;
    atomic_store_explicit(&M.groups[g].refused_ns, _ca_clock_ns(), ca_relaxed);
    return false;
  }
  return start;
}

/* A small chunk p on a page of its own joins the group `cookie` (started when there is none
   and `start`), standing for `stride` bytes of its context's small allocations. */
bool _ca_monitor_start_member(void* p, uint64_t cookie, size_t stride, bool start) {
  if (!M.trap_ok || M.use_pmu || _ca_async_io() || ((uintptr_t)p & (CA_OS_PAGE - 1)) != 0 || _ca_mon_traced() || _ca_mon_async_mapped()) return false;
  _ca_mon_ensure_thread();
  if (atomic_load_explicit(&M.thread_pid, ca_acquire) != getpid()) return false;
  uint64_t now_ns = _ca_clock_ns();
  _ca_mon_lock_m();
  int g = -1, free_g = -1;
  for (int i = 0; i < MAX_GROUPS && g < 0; i++) {
    if (M.groups[i].state == CH_ACTIVE && M.groups[i].cookie == cookie) g = i;
    else if (M.groups[i].state == CH_FREE && free_g < 0) free_g = i;
  }
  mchunk_t* c = free_slot();
  /* a full group, or no slot left (groups of several contexts hold more than MAX_CHUNKS, their
     gone members for up to GONE_MS: pv victims' four contexts turned 97% of their members
     away): its own oldest gone member makes room */
  if (g >= 0 && (M.groups[g].members >= GROUP_MEMBERS || c == NULL) && drop_oldest_gone(g) && c == NULL) c = free_slot();
  if (g < 0 && !start) { _ca_mon_unlock_m(); return false; }   /* the group ended meanwhile */
  if (c == NULL || (g < 0 && free_g < 0) ||
      (g >= 0 && (M.groups[g].members >= GROUP_MEMBERS || group_full(&M.groups[g])))) {
    if (g >= 0) atomic_store_explicit(&M.groups[g].refused_ns, now_ns, ca_relaxed);
    M.no_room++;
    _ca_mon_unlock_m();
    return false;
  }
  if (g < 0) {
    g = free_g;
    M.groups[g] = (mgroup_t){ .state = CH_ACTIVE, .cookie = cookie };
    atomic_fetch_add_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  }
  mgroup_t* gr = &M.groups[g];
  c->lo = (uintptr_t)p; c->hi = (uintptr_t)p + CA_OS_PAGE; c->p = p; c->n = CA_OS_PAGE; c->cookie = cookie;
  c->nsamples = 1; c->done = 0; c->stride = stride;
  c->group = g; c->ev = &gr->ev; c->pending = false; c->traps = true;
  c->warm = gr->bytes >= M.l2;
  gr->warm += c->warm;
  c->joined_ns = now_ns; c->gone_ns = 0;
  c->s[0] = (sample_t){ .index = 0, .state = PG_ARMED_FIRST, .t = now_ns };
  if (_ca_mon_protect(p, PROT_NONE) != 0) { c->s[0].state = PG_DONE; c->done = 1; }
  c->state = CH_ACTIVE;
  gr->members++;
  gr->ev.r.pages++;
  gr->bytes += stride;
  gr->joined_ms = now_ns / 1000000;
  M.members++;
  atomic_fetch_add_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  atomic_fetch_add_explicit(&M.sampled, 1, ca_relaxed);
  _ca_mon_unlock_m();
  _ca_mon_sampling_started();
  return true;
}

/* A member is freed: its page opened; it stays in its group while its reference counts. */
void _ca_mon_member_gone(mchunk_t* c) {
  sample_t* s = &c->s[0];
  M.groups[c->group].gone_warm += c->warm;
  c->pending = c->warm && s->pairs == 0 && s->last_ref != 0 && !s->released;
  _ca_mon_finish_page(c, s);
  atomic_fetch_sub_explicit(&_ca_sampled_chunks, 1, ca_relaxed);
  if (s->last_ref == 0) { c->state = CH_FREE; M.groups[c->group].members--; return; }
  c->state = CH_GONE;
  c->gone_ns = _ca_clock_ns();
}

