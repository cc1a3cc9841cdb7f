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
     this file         the option, the lock sets by call site, and their statistics

     sets[id] = { site, deepest }   id = what hot.c's ranges carry (0: outside any lock set)

   What differs from the paper: pages are coloured after the fact (a move each, on the worker),
   not at their first touch; memory allocated outside a lock set but first touched inside one
   is not seen; nested lock sets (the paper's write-protected re-check at depth 2) are counted,
   not checked.  Allocations inside a lock set are not offered to NightWatch (their heap is not
   an ordinary one): the two policies never place the same chunk. */
#define _GNU_SOURCE
#include "locksets.h"
#include "../monitor/locks.h"
#include "../monitor/context.h"
#include "../color/colour.h"

enum { LS_OPT_ON, LS_OPT_COUNT };
static long opt[LS_OPT_COUNT];
static const ca_option_desc_t options[LS_OPT_COUNT] = {
  [LS_OPT_ON] = { "locksets", 0, 0, 1, _ca_bool_words,
                  "lock sets (paper 003): memory a thread allocates while it holds a pthread mutex or rwlock gets "
                  "pages spread evenly over the L2's colours (moved by the colour worker); see docs/locksets.md" },
};

static struct {
  ca_lock_t   lock;
  const void* site[CA_LOCKSETS_MAX + 1];
  uint32_t    deepest[CA_LOCKSETS_MAX + 1];
  uint32_t    n;                      /* ids 1..n in use */
  uint64_t    full;                   /* lock sets not told apart (table full) */
} S;

bool _ca_locksets_on(void) { return opt[LS_OPT_ON] != 0; }

uint8_t _ca_lockset_current(void) {
  const ca_lockset_thread_t* t = &_ca_lockset;
  if (t->depth == 0) return 0;
  _ca_lock(&S.lock);
  uint32_t id = 1;
  while (id <= S.n && S.site[id] != t->site) id++;
  if (id > S.n && S.n < CA_LOCKSETS_MAX) S.site[id = ++S.n] = t->site;
  if (id > S.n) { S.full++; id = 0; }
  else if (t->deepest > S.deepest[id]) S.deepest[id] = t->deepest;
  _ca_unlock(&S.lock);
  return (uint8_t)id;
}

static void stats(ca_buf_t* b) {
  ca_buf_str(b, "{\"on\":");
  ca_buf_str(b, _ca_lockset_flavour != 0 ? "true" : "false");
  uint32_t colours = (uint32_t)__builtin_popcountll(_ca_colour_known_mask());
  ca_buf_field_u64(b, "untold", S.full);
  ca_buf_str(b, ",\"sets\":[");
  bool first = true;
  for (uint32_t id = 0; id <= S.n; id++) {
    const uint32_t* per = NULL;
    uint64_t moved = 0;
    uint32_t pages = _ca_hot_lockset(id, &per, &moved);
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
  .name = "locksets", .options = options, .values = opt, .noptions = LS_OPT_COUNT,
  .fork_prepare = fork_prepare, .fork_parent = fork_parent, .fork_child = fork_child,
  .thread_done = thread_done, .stats = stats,
};
