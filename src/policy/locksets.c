/* Lock sets (paper 003): data a thread allocates while it holds a lock is data other threads
   will touch soon, under that lock: it should never conflict with itself in the cache.

   The paper marks the lock set in pthread_mutex_lock and has a kernel patch give the pages
   first touched inside it distinct colours.  Here (no kernel patch, frames' colours visible only
   by timing):

     monitor/locks.h   the interposed lock calls keep each thread's depth and its outermost
                       call site; at depth 0 -> 1 the thread's allocations are diverted to its
                       heap of the spread flavour, at 1 -> 0 back (the malloc fast path is the
                       same: it reads another thread-local heap pointer, nothing more)
     spread flavour    spans and large objects of their own, ordinary frames when handed out;
                       the colour layer tells hot.c of them, which counts them hot from the start
     hot.c             measures their colours on the colour worker and moves them, within
                       hot_budget pages a hot_period, until no colour holds more than
                       ceil(n / colours) of the n lock-set pages (then the hot set's own cap)
     nested sets       at depth lockset_nest (2) and more, the paper write-protects all shared
                       data and recolours pages of a colour the set touched too often.  Here,
                       once a thread has been that deep, hot.c's sampling windows run (traps on
                       lanes of ordinary memory, within hot_overhead); a trap taken by a thread
                       at that depth is noted with its lock set (touched(), in the handler),
                       and hot.c counts the page with that lock set's pages: hot, and balanced
                       with them to ceil(n / colours) a colour (no colour then holds more of
                       the set's pages than the cache has ways, the paper's test)
     this file         the options, the lock sets by call site, the pages touched deep in
                       them, and their statistics

     sets[id] = { site, deepest, touched }   id = what hot.c's ranges carry (0: outside any)
     ring[TOUCHED] = { page, site }          written by the fault handler, read by the worker

   What differs from the paper: pages are coloured after the fact (a move each, on the worker),
   not at their first touch; memory allocated outside a lock set but first touched inside one
   is not seen (unless the nested check samples it); the nested check samples lanes of memory a
   window at a time rather than trapping all shared data on every entry.  Allocations inside a
   lock set are not offered to NightWatch (their heap is not an ordinary one): the two policies
   never place the same chunk. */
#define _GNU_SOURCE
#include "locksets.h"
#include "../monitor/locks.h"
#include "../monitor/monitor.h"
#include "../monitor/context.h"
#include "../color/colour.h"

enum { LS_OPT_ON, LS_OPT_NEST, LS_OPT_COUNT };
static long opt[LS_OPT_COUNT];
static const ca_option_desc_t options[LS_OPT_COUNT] = {
  [LS_OPT_ON] = { "locksets", 0, 0, 1, _ca_bool_words,
                  "lock sets (paper 003): memory a thread allocates while it holds a pthread mutex or rwlock gets "
                  "pages spread evenly over the L2's colours (moved by the colour worker); see docs/locksets.md" },
  [LS_OPT_NEST] = { "lockset_nest", 2, 0, 64, NULL,
                    "lock sets this deep (nested locks held) have the pages they touch sampled (hot pages' traps, "
                    "within hot_overhead) and balanced over the colours with the set's own (0: no such check)" },
};

static struct {
  ca_lock_t   lock;
  const void* site[CA_LOCKSETS_MAX + 1];
  uint32_t    deepest[CA_LOCKSETS_MAX + 1];
  uint64_t    touched[CA_LOCKSETS_MAX + 1];   /* pages the nested check saw it touch */
  uint32_t    n;                      /* ids 1..n in use */
  uint64_t    full;                   /* lock sets not told apart (table full) */
} S;

#define TOUCHED 1024                  /* pages touched deep in a lock set, not yet read */
static struct {
  _Atomic(uint64_t) head;             /* entries written (the fault handler) */
  uint64_t          tail, lost;       /* read, and overwritten unread (the worker) */
  struct { _Atomic(uintptr_t) page; _Atomic(const void*) site; } e[TOUCHED];
} T;

bool _ca_locksets_on(void) { return opt[LS_OPT_ON] != 0; }
uint32_t _ca_locksets_nest(void) { return opt[LS_OPT_ON] ? (uint32_t)opt[LS_OPT_NEST] : 0; }

static uint8_t id_of(const void* site, uint32_t deepest) {
  _ca_lock(&S.lock);
  uint32_t id = 1;
  while (id <= S.n && S.site[id] != site) id++;
  if (id > S.n && S.n < CA_LOCKSETS_MAX) S.site[id = ++S.n] = site;
  if (id > S.n) { S.full++; id = 0; }
  else if (deepest > S.deepest[id]) S.deepest[id] = deepest;
  _ca_unlock(&S.lock);
  return (uint8_t)id;
}

uint8_t _ca_lockset_current(void) {
  const ca_lockset_thread_t* t = &_ca_lockset;
  return t->depth == 0 ? 0 : id_of(t->site, t->deepest);
}

/* a trap (access.c's handler, in the faulting thread): noted if the thread is deep enough */
static void touched(uintptr_t addr) {
  const ca_lockset_thread_t* t = &_ca_lockset;
  if (_ca_lockset_nest == 0 || t->depth < _ca_lockset_nest) return;
  uintptr_t page = addr & ~(uintptr_t)(CA_OS_PAGE - 1);
  uint64_t i = atomic_fetch_add_explicit(&T.head, 1, ca_relaxed) % TOUCHED;
  atomic_store_explicit(&T.e[i].site, t->site, ca_relaxed);
  atomic_store_explicit(&T.e[i].page, page, ca_release);
}

bool _ca_lockset_touched(uintptr_t* page, uint8_t* set) {
  uint64_t head = atomic_load_explicit(&T.head, ca_acquire);
  if (head - T.tail > TOUCHED) { T.lost += head - T.tail - TOUCHED; T.tail = head - TOUCHED; }
  while (T.tail < head) {
    uint64_t i = T.tail++ % TOUCHED;
    uintptr_t p = atomic_exchange_explicit(&T.e[i].page, 0, ca_acquire);
    if (p == 0) continue;                           /* not written yet: a trap under way */
    uint8_t id = id_of(atomic_load_explicit(&T.e[i].site, ca_relaxed), 0);
    if (id == 0) continue;                          /* the table is full */
    S.touched[id]++;
    *page = p;
    *set = id;
    return true;
  }
  return false;
}

static void init(void) {
  _ca_lockset_nest = _ca_locksets_nest();
  if (_ca_lockset_nest != 0) _ca_access_on_touch(touched);
}

static void stats(ca_buf_t* b) {
  ca_buf_str(b, "{\"on\":");
  ca_buf_str(b, _ca_lockset_flavour != 0 ? "true" : "false");
  uint32_t colours = (uint32_t)__builtin_popcountll(_ca_colour_known_mask());
  ca_buf_field_u64(b, "untold", S.full);
  ca_buf_field_u64(b, "nest", _ca_lockset_nest);
  ca_buf_field_u64(b, "nested_seen", atomic_load(&_ca_lockset_nested));
  ca_buf_field_u64(b, "touched_lost", T.lost);
  ca_buf_str(b, ",\"sets\":[");
  bool first = true;
  for (uint32_t id = 0; id <= S.n; id++) {
    const uint32_t* per = NULL;
    uint64_t moved = 0;
    uint32_t conflicts = 0, pages = _ca_hot_lockset(id, &per, &moved, &conflicts);
    if (id == 0 && pages == 0) continue;              /* spread memory from outside a lock set */
    char site[192] = "(outside a lock set)";
    if (id > 0) _ca_context_symbol((uintptr_t)S.site[id], site, sizeof site);
    if (!first) ca_buf_char(b, ',');
    first = false;
    ca_buf_str(b, "{\"site\":\"");
    for (const char* s = site; *s; s++) if (*s != '"' && *s != '\\') ca_buf_char(b, *s);
    ca_buf_str(b, "\"");
    ca_buf_field_u64(b, "deepest", id > 0 ? S.deepest[id] : 0);
    ca_buf_field_u64(b, "pages", pages);
    ca_buf_field_u64(b, "touched_deep", id > 0 ? S.touched[id] : 0);
    ca_buf_field_u64(b, "conflicts", conflicts);
    ca_buf_field_u64(b, "moved", moved);
    uint32_t most = 0;
    for (uint32_t c = 0; c < colours; c++) if (per[c] > most) most = per[c];
    ca_buf_field_u64(b, "most_on_a_colour", most);
    ca_buf_str(b, ",\"per_colour\":[");
    for (uint32_t c = 0; c < colours; c++) { if (c) ca_buf_char(b, ','); ca_buf_u64(b, per[c]); }
    ca_buf_str(b, "]}");
  }
  ca_buf_str(b, "]}");
}

/* an exiting thread's heaps go back (and may come to another thread): its cached one is forgotten */
static void thread_done(void) { _ca_lockset.to = NULL; }

/* a fork child keeps its sets (its threads' depths are the forking thread's) */
static void fork_prepare(void) { _ca_lock(&S.lock); }
static void fork_parent(void) { _ca_unlock(&S.lock); }
static void fork_child(void) { _ca_lock_reset(&S.lock); }

const ca_layer_t _ca_layer_locksets = {
  .name = "locksets", .options = options, .values = opt, .noptions = LS_OPT_COUNT, .init = init,
  .fork_prepare = fork_prepare, .fork_parent = fork_parent, .fork_child = fork_child,
  .thread_done = thread_done, .stats = stats,
};
