/* Hot pages (paper 002): find the pages the program touches most, cheaply, and spread them
   evenly over the L2's colours, so that a hot set near the L2's size fits in it.

   With random frames, a hot set of 85% of the L2 puts more pages on some colours than the L2
   has ways (a binomial spread: with 32 colours of 8 ways, 218 pages leave about a tenth of
   them in over-full colours), and those lines evict one another on every lap.  Spread evenly,
   none is.  The paper does it in the kernel, with the page table's accessed bits; here:

     ranges     ordinary memory as the core hands it out (the colour layer's span hook), each
                page with an 8-bit heat and the colour measured for it (-2: not yet, -1: the
                test could not tell), in one arena:

       r[i] = { base, pages, at } ──> heat[at .. at + pages)   colour[at .. at + pages)

     windows    every hot_period ms, lanes of up to 64 pages, from where the last window
                stopped, are made inaccessible for hot_window ms (monitor/access.c): a page's
                first touch faults and sets its bit.  Lanes are armed while their expected
                faults (their heat) fit the budget of hot_overhead per mille of the run time,
                less what earlier windows spent beyond it (measured: window_budget);
                past the traps' share, or while traps are not safe (access.c's quiet), lanes
                are write-protected instead (monitor/written.c): written pages seen, no trap.
     laps       ROCS's lap pages (its stand-in for IPC), 4 at a time spread over them, armed alone
                between the windows, 8 times a period: how long each waited to be touched.
     scan       each lane's bits read the paper's way (locality jumping, _ca_hot_scan) into its
                pages' heat.
     threshold  the histogram of heats gives the lowest heat of the hottest K pages, K = the
                L2's pages (colours x ways) x hot_share %.
     want       until the hot set fills hot_fit % of the L2 (half), random frames fit it: the
                colour layer is not started for it (no calibration, no set file; the windows go on)
     spread     hot pages' colours are measured (the colour layer's eviction sets, on the colour
                worker); pages over `ways` on a colour, and those whose colour could not be told,
                move to frames of the emptiest colours, hottest first, at most hot_budget a
                period (color/spread.c).

   What differs from the paper, and why.  A page-table scan costs per entry and nothing per
   access; a trap costs nothing per untouched page and a fault (a few microseconds) per touched
   one.  So the budget here is in faults: lanes whose pages were hot cost more, and the scan's
   locality jumping saves the counters' work over cold runs, not the sampling itself.  Writes
   are seen for about a quarter of a trap's cost, reads only by traps: a chase only reads, so
   traps come first and write protection takes the rest.  Heat is a decaying average per look
   rather than the paper's counter halved every 128 scans: lanes are looked at at different
   rates here, and an average does not favour the often-seen ones.

   Hot first: once protection keeps live memory out of a polluter's slice (color/protect.c),
   those colours leave the hot pages' share, so the spread moves hot pages out of the slice
   first, ahead of protection's own pass over the ranges, oldest first.

   All of it runs on the colour layer's worker thread; the program's threads only take the
   faults and tell of ranges.  A fork child starts a worker of its own (fork_child). */
#define _GNU_SOURCE
#include "hot.h"
#include "locksets.h"
#include "rangelog.h"
#include "rocs.h"
#include "../monitor/monitor.h"
#include "../monitor/locks.h"
#include "../monitor/trap.h"
#include "../color/colour.h"
#include <sched.h>
#include <unistd.h>

enum { HOT_OPT_ON, HOT_OPT_DELAY, HOT_OPT_PERIOD, HOT_OPT_WINDOW, HOT_OPT_OVERHEAD, HOT_OPT_BUDGET, HOT_OPT_SHARE,
       HOT_OPT_PARTITION, HOT_OPT_TRAPS, HOT_OPT_FIT, HOT_OPT_COUNT };
enum { TRAPS_BOTH, TRAPS_READS, TRAPS_WRITES };
static const char* const traps_words[] = { "both", "reads", "writes", NULL };
static long opt[HOT_OPT_COUNT];
static const ca_option_desc_t options[HOT_OPT_COUNT] = {
  [HOT_OPT_ON]       = { "hot", 0, 0, 1, _ca_bool_words,
                         "hot pages (paper 002): find the program's most touched pages by sampled page traps and "
                         "spread them evenly over the L2's colours (the colour layer); see docs/hot.md" },
  [HOT_OPT_DELAY]    = { "hot_delay", 200, 0, 3600000, NULL,
                         "ms of run time before the colour worker starts for hot pages (a program that ends sooner "
                         "pays nothing)" },
  [HOT_OPT_PERIOD]   = { "hot_period", 100, 10, 10000, NULL, "ms between two sampling windows" },
  [HOT_OPT_WINDOW]   = { "hot_window", 2, 1, 50, NULL, "ms a sampling window lasts (pages touched in it count)" },
  [HOT_OPT_OVERHEAD] = { "hot_overhead", 10, 1, 1000, NULL,
                         "per mille of the run time the sampling's faults and system calls may take (estimated)" },
  [HOT_OPT_BUDGET]   = { "hot_budget", 32, 0, 4096, NULL,
                         "pages recoloured per period at most (0: find hot pages, move none)" },
  [HOT_OPT_SHARE]    = { "hot_share", 100, 1, 100, NULL,
                         "percent of the L2 the hot set is given: K = that many pages are hot, spread at that share "
                         "of each colour's ways" },
  [HOT_OPT_PARTITION] = { "hot_partition", 1, 0, 1, _ca_bool_words,
                         "processes of this user under hot pages that share an L2 (can run on one core) split its "
                         "colours evenly between their hot pages (a registry beside the set file); 0: all colours" },
  [HOT_OPT_TRAPS]    = { "hot_traps", TRAPS_BOTH, 0, 2, traps_words,
                         "how pages are sampled: reads = page protection traps (reads and writes, a signal each); "
                         "writes = asynchronous write protection (Linux 6.7+: no signal, never a failed system call, "
                         "blind to reads); both = traps within the budget while no thread may have signals blocked, "
                         "write protection for the rest" },
  [HOT_OPT_FIT]      = { "hot_fit", 50, 0, 100, NULL,
                         "percent of the L2 the hot set must reach before the colour layer starts for it (below, "
                         "random frames fit it: under 1% of its pages beyond their colour's ways); 0: from the start" },
};

#define RANGES   4096                /* live ranges tracked */
#define PAGES    ((size_t)1 << 18)   /* pages tracked in all (1 GiB) */
#define LANE     64                  /* pages armed as one */
#define LANES    64                  /* lanes armed in one window */
#define HOT_MIN  32                  /* never hot below (touched in fewer than about 1 window in 8) */
#define HOT_MAX  4096                /* hot pages looked at a period */
#define UNMEASURED (-2)

#define INDEX    8192                /* open addressing over the ranges' bases (twice RANGES) */

/* excluded: never trapped nor moved (blocks of 1 KiB or more, large objects, memory handed to a
   system call): write-protected only, its pages' colours measured and left where they are */
/* lock-set memory (locksets.c: a span of the spread flavour) is hot from the start, never
   trapped, and balanced over the colours among itself as well; `set` names its lock set.  An
   ordinary page trapped by a thread deep in a lock set (locksets.c's nested check) joins that
   set's pages: nest[page] = set + 1, heat 255 (then it cools as the windows find it untouched) */
/* profiled: a large object ROCS profiles (rocs.c): trapped and moved, though excluded from spreading */
typedef struct range_s { uint8_t* base; uint32_t pages, at; bool excluded, locked, profiled; uint8_t set; } range_t;
typedef struct lane_s { uint8_t* base; uint32_t pages, at; int slot; bool writes, untrapped; uint64_t bits[LANE / 64]; } lane_t;
#define LAPS     24                  /* ROCS's lap pages */
#define LAP_EACH 4                   /* ... armed at a time */
#define LAP_WINDOWS 8                /* ... that often a period */
typedef struct hot_page_s { uint8_t* page; uint8_t heat; int8_t colour, first; bool fixed, locked; uint8_t set; } hot_page_t;   /* locked: a lock set's */

static struct {
  bool       on, sampling;            /* the layer (hot pages or lock sets); sampling windows (hot) */
  bool       nested;                  /* ... windows also once a lock set is lockset_nest deep */
  bool       rocs;                    /* ... and for ROCS's profiles (rocs.c) */
  _Atomic(bool) want;                 /* the colour layer is wanted (hot_fit reached, ROCS, lock sets):
                                         the worker sets it, a program thread may read it */
  uint64_t   want_ns;                 /* ... since then (clock ns) */
  uint32_t   big_periods;             /* periods in a row the hot set reached hot_fit (before) */
  ca_lock_t  lock;                   /* ranges and the arena (program threads tell of ranges) */
  range_t    r[RANGES];
  uint32_t   n;
  uint16_t   index[INDEX];            /* a range's slot + 1 by its base (0: empty): O(1) removal */
  uint8_t*   heat;                   /* the arena: PAGES entries each, mapped once */
  int8_t*    colour;
  int8_t*    first;                  /* the colour it had when first measured (before any move) */
  uint8_t*   seen;                   /* 1: the page was armed once (in a lane) */
  uint8_t*   nest;                   /* the lock set + 1 that touched it deep (0: none) */
  ca_rocs_page_t* prof;              /* ROCS's profile of the page (rocs.h) */
  uint16_t   order[RANGES];           /* ROCS's notes: the ranges by base */
  uint8_t*   lap[LAPS];              /* ROCS's lap pages, by address (NULL: dropped) */
  int        lap_slot[LAPS];
  uint64_t   lap_bits[LAPS][1];
  uint32_t   nlap, lap_next, lap_trapped;
  uint64_t   lap_ns, lap_end, next_lap;   /* their waits (untouched: the time armed), summed since the
                                            last step; armed until; next armed then */
  size_t     used;                   /* arena entries handed out (compacted when full) */
  lane_t     lane[LANES];            /* the window's */
  uint32_t   nlanes, window_lanes;   /* armed now; in the window last closed */
  uint32_t   cur_range, cur_page;    /* where the next window starts */
  uint64_t   window_end, next_window, rng, started;
  uint64_t   fault_ns, wfault_ns;    /* a trap's round trip, a first write's under write protection
                                        (measured at start): the lanes' forecast */
  uint64_t   kernel_ns;              /* a trap's round trip at start, less its handler's time */
  uint64_t   cost_at, window_at, debt;   /* spent() and the clock at the last window's opening; what
                                            the windows spent beyond their share, to pay back */
  uint64_t   lane_ns, window_arm_ns;  /* a lane armed and opened (learnt); this window's arming */
  hot_page_t hot[HOT_MAX];           /* the worker's copy: hottest first */
  uint8_t* _Atomic busy;             /* the page the worker measures or moves (remove_range waits) */
  _Atomic(bool) forking;             /* between fork's prepare and its parent or child handler, */
  _Atomic(uint64_t) child_born;      /* a fork child whose worker is not started yet: its birth */
  pid_t      fork_pid;               /* ... in this process */
  uint64_t   child_deferred;         /* its start put off: a call from a signal handler, maybe */
  uint32_t   hist[256], threshold, k, nhot;
  uint64_t   live, seen_once;             /* tracked pages, those armed once (find_hot counts) */
  uint32_t   before[CA_COLOURS_MAX], now[CA_COLOURS_MAX];   /* the hot pages per colour, as first
                                                               measured and now */
  /* statistics */
  uint64_t   first_move, last_move;     /* when (clock ns) */
  uint64_t   windows, lanes_armed, lanes_written, pages_armed, arm_refused, arm_ns;
  ca_hot_scan_t scan;
  uint64_t   measured, unknown, moved, move_failures, untracked_pages, excluded;
  uint32_t   over_full, over_full_before;   /* hot pages beyond their colour's share: now, as first measured */
  uint8_t    no_frames[CA_COLOURS_MAX];    /* moves to a colour that found no frame of it */
  uint32_t   unusable;                      /* colours given up for that */
  uint64_t   partition;                     /* the colours our hot pages may use (hot_partition) */
  /* each lock set's pages, those of a known colour, and per colour */
  uint32_t   set_pages[CA_LOCKSETS_MAX + 1], set_known[CA_LOCKSETS_MAX + 1], set_colours[CA_LOCKSETS_MAX + 1][CA_COLOURS_MAX];
  uint32_t   set_over[CA_LOCKSETS_MAX + 1];   /* ... beyond ceil(n / colours) on their colour */
  uint64_t   set_moved[CA_LOCKSETS_MAX + 1];
} H;

/* Set while this thread takes or holds H.lock: a system call in a signal handler nested in that
   section (bash's SIGCHLD handler calls waitpid) comes to on_change, which must not wait for it. */
static __thread bool holding __attribute__((tls_model("initial-exec")));
static void lock_h(void) { holding = true; _ca_lock(&H.lock); CA_TEST_LOCKED('H'); }
static void unlock_h(void) { _ca_unlock(&H.lock); holding = false; }

/* ---- the pure pieces (hot.h) ----------------------------------------------------------------- */

static uint64_t next_rand(uint64_t* s) { *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17; return *s; }
static bool bit(const uint64_t* b, size_t i) { return (b[i / 64] >> (i % 64)) & 1; }

void _ca_hot_add(uint8_t* heat, size_t n, const uint64_t* bits) {
  for (size_t i = 0; i < n; i++) if (bit(bits, i)) heat[i] = _ca_hot_heat(heat[i], true);
}

void _ca_hot_scan(uint8_t* heat, size_t n, const uint64_t* bits, uint64_t* rng, ca_hot_scan_t* st) {
  size_t i = 0, last = SIZE_MAX;         /* last: the last page looked at and found untouched */
  uint32_t run = 0;                      /* untouched pages found in a row */
  bool jumped = false;                   /* i was reached by a jump over pages not looked at */
  while (i < n) {
    bool t = bit(bits, i);
    size_t from = last == SIZE_MAX ? 0 : last + 1;
    if (t && jumped) {                   /* a false jump: back to the page after the last untouched */
      st->backtracks++;
      i = from;
      run = 0;
      jumped = false;
      continue;
    }
    st->checked++;
    st->touched += t;
    heat[i] = _ca_hot_heat(heat[i], t);
    if (t) { run = 0; i++; continue; }
    for (size_t k = from; jumped && k < i; k++) heat[k] = _ca_hot_heat(heat[k], false);   /* jumped over */
    st->skipped += jumped ? i - from : 0;
    last = i;
    run++;
    uint32_t step = run >= 7 ? CA_HOT_JUMP_MAX : 1u << run;
    if (step >= 4) step = step - step / 4 + (uint32_t)(next_rand(rng) % (step / 2 + 1));   /* +-25% */
    if (step > CA_HOT_JUMP_MAX) step = CA_HOT_JUMP_MAX;
    jumped = step > 1;
    i += step;
  }
  if (jumped) {                          /* the jump past the end: what it went over is untouched */
    for (size_t k = last + 1; k < n; k++) heat[k] = _ca_hot_heat(heat[k], false);
    st->skipped += n > last + 1 ? n - last - 1 : 0;
  }
}

uint32_t _ca_hot_threshold(const uint32_t hist[256], uint32_t k) {
  uint32_t sum = 0;
  for (int h = 255; h > 0; h--) {
    sum += hist[h];
    if (sum >= k) return (uint32_t)h;
  }
  return 1;
}

uint64_t _ca_hot_budget(uint64_t* debt, uint64_t used, uint64_t share, uint64_t budget) {
  *debt = *debt + used > share ? *debt + used - share : 0;
  return budget > *debt ? budget - *debt : 0;
}

uint64_t _ca_hot_target(const uint32_t* count, uint32_t colours, uint32_t cap, uint64_t spares) {
  uint64_t e = _ca_hot_emptiest(count, colours, cap);
  if (e == 0 || (e & spares) != 0) return e & spares ? e & spares : e;
  /* no page of the emptiest waits: colours one above them do as well (from a spare if any
     waits, else fresh pages hit them more often) */
  uint32_t least = count[__builtin_ctzll(e)];
  uint64_t near = 0;
  for (uint32_t c = 0; c < colours; c++) if (count[c] <= least + 1 && count[c] < cap) near |= (uint64_t)1 << c;
  return near & spares ? near & spares : near;
}

uint64_t _ca_hot_emptiest(const uint32_t* count, uint32_t colours, uint32_t cap) {
  uint32_t least = UINT32_MAX;
  for (uint32_t c = 0; c < colours; c++) if (count[c] < least) least = count[c];
  if (least >= cap) return 0;
  uint64_t m = 0;
  for (uint32_t c = 0; c < colours; c++) if (count[c] == least) m |= (uint64_t)1 << c;
  return m;
}

/* ---- ranges ---------------------------------------------------------------------------------- */

/* the arena entry of a tracked page, or -1 (H.lock held) */
static range_t* range_of(const uint8_t* page) {
  for (uint32_t i = 0; i < H.n; i++)
    if (page >= H.r[i].base && page < H.r[i].base + (size_t)H.r[i].pages * CA_OS_PAGE) return &H.r[i];
  return NULL;
}

static long entry_of(const uint8_t* page) {
  range_t* r = range_of(page);
  return r != NULL ? (long)r->at + (long)((size_t)(page - r->base) / CA_OS_PAGE) : -1;
}

static size_t home(const uint8_t* b) { return (size_t)(((uintptr_t)b >> 12) * 0x9E3779B97F4A7C15ull >> 51) & (INDEX - 1); }

static void index_put(const uint8_t* b, uint32_t i) {
  size_t h = home(b);
  while (H.index[h] != 0) h = (h + 1) & (INDEX - 1);
  H.index[h] = (uint16_t)(i + 1);
}

static size_t index_find(const uint8_t* b) {
  for (size_t h = home(b); H.index[h] != 0; h = (h + 1) & (INDEX - 1))
    if (H.r[H.index[h] - 1].base == b) return h;
  return SIZE_MAX;
}

/* emptied, the entries after it in their probe run shifted back (linear probing) */
static void index_delete(size_t h) {
  for (size_t j = h;;) {
    j = (j + 1) & (INDEX - 1);
    if (H.index[j] == 0) break;
    size_t k = home(H.r[H.index[j] - 1].base);
    if ((j > h && (k <= h || k > j)) || (j < h && k <= h && k > j)) { H.index[h] = H.index[j]; h = j; }
  }
  H.index[h] = 0;
}

/* the arena's live entries moved down together (H.lock); ranges change order, windows hold none */
static void compact(void) {
  /* by arena position: a shell sort, since nothing here may allocate (the worker's own
     allocation would come back to add_range, H.lock held) */
  for (uint32_t gap = H.n / 2; gap > 0; gap /= 2)
    for (uint32_t i = gap; i < H.n; i++)
      for (uint32_t j = i; j >= gap && H.r[j - gap].at > H.r[j].at; j -= gap) {
        range_t t = H.r[j]; H.r[j] = H.r[j - gap]; H.r[j - gap] = t;
      }
  size_t to = 0;
  for (uint32_t i = 0; i < H.n; i++) {
    range_t* r = &H.r[i];
    memmove(H.heat + to, H.heat + r->at, r->pages);
    memmove(H.colour + to, H.colour + r->at, r->pages);
    memmove(H.first + to, H.first + r->at, r->pages);
    memmove(H.seen + to, H.seen + r->at, r->pages);
    memmove(H.nest + to, H.nest + r->at, r->pages);
    if (H.prof != NULL) memmove(H.prof + to, H.prof + r->at, r->pages * sizeof *H.prof);
    r->at = (uint32_t)to;
    to += r->pages;
  }
  memset(H.index, 0, sizeof H.index);               /* the ranges moved: indexed anew */
  for (uint32_t i = 0; i < H.n; i++) index_put(H.r[i].base, i);
  H.used = to;
  H.cur_range = 0;
  H.cur_page = 0;
  for (uint32_t l = 0; l < H.nlanes; l++) {        /* a window open: its lanes' entries moved too */
    long at = H.lane[l].slot >= 0 ? entry_of(H.lane[l].base) : -1;
    if (at >= 0) H.lane[l].at = (uint32_t)at;
    else if (H.lane[l].slot >= 0) { _ca_access_disarm(H.lane[l].slot); H.lane[l].slot = -1; }
  }
}

/* Only spans of blocks below this are trapped; the rest of the heap (bigger blocks, large
   objects up to BIG_MAX) is write-protected only.  glibc fills and drains its own buffers
   (stdio's, from 1 KiB for a terminal; directory streams', 32 KiB; the resolver's, 64 KiB)
   through system calls of its own, which chromalloc cannot see: a trapped page there fails the
   call with EFAULT (`head -c N | ...` under hot pages: "error writing standard output").  None
   is smaller.  A write-protected page never fails a call. */
#define BLOCK_MAX 1024
#define BIG_MAX   16384              /* pages: larger objects are not tracked (64 MiB) */

/* (H.lock held) */
static void add_range_held(uint8_t* p, size_t bytes, bool locked) {
  uint32_t block = _ca_block_size_of(p);
  bool traps = block != 0 && block < BLOCK_MAX;
  bool profiled = H.rocs && !locked && block == 0 && bytes / CA_OS_PAGE >= _ca_rocs_min_pages() && bytes / CA_OS_PAGE <= 4 * BIG_MAX;
  if (!profiled && (locked ? bytes / CA_OS_PAGE > BIG_MAX : !traps && (opt[HOT_OPT_TRAPS] == TRAPS_READS || bytes / CA_OS_PAGE > BIG_MAX))) return;
  uint8_t set = locked ? _ca_lockset_current() : 0;
  uint8_t* lo = (uint8_t*)(((uintptr_t)p + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
  uint8_t* hi = (uint8_t*)(((uintptr_t)p + bytes) & ~(uintptr_t)(CA_OS_PAGE - 1));
  if (hi <= lo) return;
  size_t pages = (size_t)(hi - lo) / CA_OS_PAGE;
  if (index_find(lo) != SIZE_MAX) return;         /* known (a release unseen) */
  if (H.used + pages > PAGES) compact();
  if (H.n < RANGES && H.used + pages <= PAGES) {
    index_put(lo, H.n);
    H.r[H.n++] = (range_t){ lo, (uint32_t)pages, (uint32_t)H.used, !traps && !locked, locked, profiled, set };
    memset(H.heat + H.used, locked ? 255 : 0, pages);
    memset(H.colour + H.used, UNMEASURED, pages);
    memset(H.first + H.used, UNMEASURED, pages);
    memset(H.seen + H.used, 0, pages);
    memset(H.nest + H.used, 0, pages);
    if (H.prof != NULL) memset(H.prof + H.used, 0, pages * sizeof *H.prof);
    H.used += pages;
  } else H.untracked_pages += pages;
}

static void apply_logged(void* p, size_t bytes) { add_range_held(p, bytes, false); }

/* every range the program's threads have noted, applied (H.lock held) */
static void drain(void) { _ca_rlog_drain(apply_logged); }

/* a lock set's range (its set is the calling thread's now) or one the thread's log cannot take
   (after the log: a range keeps its place in the arena's order) */
static void add_range(uint8_t* p, size_t bytes, bool locked) {
  lock_h();
  _ca_rlog_drain_mine(apply_logged);
  add_range_held(p, bytes, locked);
  unlock_h();
}

/* taken back by the core: out of any window first (its pages are about to be purged) */
static void remove_range(uint8_t* p, size_t bytes) {
  uint8_t* lo = (uint8_t*)(((uintptr_t)p + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
  uint8_t* hi = (uint8_t*)(((uintptr_t)p + bytes) & ~(uintptr_t)(CA_OS_PAGE - 1));
  lock_h();
  for (uint8_t* b; (b = atomic_load(&H.busy)) != NULL && b >= lo && b < hi; lock_h()) {
    unlock_h();                         /* a measurement or a move: under a millisecond */
    sched_yield();
  }
  size_t h = index_find(lo);
  if (h != SIZE_MAX) {
    uint32_t i = H.index[h] - 1;
    for (uint32_t l = 0; l < H.nlanes; l++)
      if (H.lane[l].slot >= 0 && H.lane[l].base >= lo && H.lane[l].base < lo + (size_t)H.r[i].pages * CA_OS_PAGE) {
        _ca_access_disarm(H.lane[l].slot);
        H.lane[l].slot = -1;
      }
    for (uint32_t l = 0; l < H.nlap; l++)           /* the lap pages in it: opened, and dropped */
      if (H.lap[l] != NULL && H.lap[l] >= lo && H.lap[l] < lo + (size_t)H.r[i].pages * CA_OS_PAGE) {
        if (H.lap_end != 0 && H.lap_slot[l] >= 0) _ca_access_disarm(H.lap_slot[l]);
        H.lap_slot[l] = -1;
        H.lap[l] = NULL;
      }
    index_delete(h);
    if (i != --H.n) {                              /* the last range takes its slot */
      H.index[index_find(H.r[H.n].base)] = (uint16_t)(i + 1);
      H.r[i] = H.r[H.n];
    }
    if (H.cur_range >= H.n) { H.cur_range = 0; H.cur_page = 0; }
  }
  unlock_h();
}

int _ca_hot_threshold_now(void) { return H.on && H.threshold > 0 ? (int)H.threshold : -1; }

int _ca_hot_heat_of(const void* p) {
  if (!H.on) return -1;
  const uint8_t* page = (const uint8_t*)((uintptr_t)p & ~(uintptr_t)(CA_OS_PAGE - 1));
  lock_h();
  drain();
  long at = entry_of(page);
  int h = at >= 0 ? H.heat[at] : -1;
  unlock_h();
  return h;
}

static void on_range(void* p, size_t n, bool added, uint32_t flavour) {
  bool locked = flavour == CA_FLAVOUR_SPREAD;
  if (!locked && !H.sampling && !H.nested && !H.rocs) return;  /* lock sets alone: ordinary memory is not ours */
  /* a fork child, before its handlers are done: the core's hands back its kept objects while
     H.lock is still held by the fork (this thread, in the parent) */
  bool child = atomic_load_explicit(&H.forking, ca_acquire) && getpid() != H.fork_pid;
  if (child) { _ca_lock_reset(&H.lock); _ca_rlog_unlock_all(); }
  /* holding: its own log's lock is taken too (a signal handler's system call: on_change) */
  bool logged = false;
  if (!locked && !(child && added)) {
    bool was = holding;
    holding = true;
    logged = added ? _ca_rlog_add(p, n) : _ca_rlog_strike(p);
    holding = was;
  }
  if (!logged) { if (added) add_range(p, n, locked); else remove_range(p, n); }
  if (child) lock_h();
}

/* [lo, hi) goes to the kernel in a system call, or the program changes it itself: never trapped
   nor moved again (write-protected still).  A buffer within a span or two is found by its span;
   a longer one by every range. */
static void child_worker(void);

#define NESTED_QUIET_NS 100000000ull     /* a nested call may block: longer than a window */

/* a move under way in [lo, hi) ends first: the kernel would meet the page unmapped (EFAULT);
   the mover lets go of H.busy before it takes H.lock again */
static void wait_moved(uintptr_t lo, uintptr_t hi) {
  for (uint8_t* m; (m = atomic_load(&H.busy)) != NULL && (uintptr_t)m < hi && (uintptr_t)m + CA_OS_PAGE > lo; ) sched_yield();
}

static void on_change(uintptr_t lo, uintptr_t hi) {
  if (holding) {                 /* nested in this thread's H.lock: no trap armed for a while */
    _ca_access_quiet_for(NESTED_QUIET_NS);
    wait_moved(lo, hi);
    return;
  }
  child_worker();
  uint8_t* a = _ca_span_memory_of((const void*)lo);
  uint8_t* b = hi - lo <= 65536 ? _ca_span_memory_of((const void*)(hi - 1)) : NULL;
  if (hi - lo <= 65536 && a == NULL && b == NULL) return;      /* not span memory: not tracked */
  lock_h();
  drain();
  if (hi - lo <= 65536) {
    for (int k = 0; k < 2; k++) {
      uint8_t* base = (uint8_t*)(((uintptr_t)(k ? b : a) + CA_OS_PAGE - 1) & ~(uintptr_t)(CA_OS_PAGE - 1));
      size_t h = (k ? b : a) != NULL ? index_find(base) : SIZE_MAX;
      if (h != SIZE_MAX && (!H.r[H.index[h] - 1].excluded || H.r[H.index[h] - 1].profiled)) {
        H.r[H.index[h] - 1].excluded = true;
        H.r[H.index[h] - 1].profiled = false;
        H.excluded++;
      }
    }
  } else
    for (uint32_t i = 0; i < H.n; i++) {
      uintptr_t rb = (uintptr_t)H.r[i].base, re = rb + (size_t)H.r[i].pages * CA_OS_PAGE;
      if (lo < re && rb < hi && (!H.r[i].excluded || H.r[i].profiled)) { H.r[i].excluded = true; H.r[i].profiled = false; H.excluded++; }
    }
  unlock_h();
  wait_moved(lo, hi);
}

/* ---- windows ---------------------------------------------------------------------------------- */

/* what arming a lane is expected to cost, ns: its system calls (two to four, and the TLB
   flushes they send to the program's CPUs) and its faults (its heat; a quarter of its pages
   when never armed), traps or first writes */
static uint64_t lane_cost(uint32_t at, uint32_t pages, bool writes) {
  uint32_t faults = pages / 4 + 1;
  if (H.seen[at]) {
    faults = 0;
    for (uint32_t i = 0; i < pages; i++) faults += H.heat[at + i];
    faults = faults / 256 + 1;
  }
  return H.lane_ns + (uint64_t)faults * (writes ? H.wfault_ns : H.fault_ns);
}

static uint64_t measure_fault(bool writes);

/* What the sampling has cost the program so far: its traps (the handler's time as measured in
   them, plus the kernel's part each), its first writes, the worker's system calls. */
static uint64_t spent(void) {
  uint64_t faults, handler, released, quiet, written;
  _ca_access_stats(&faults, &handler, &released, &quiet, &written);
  return handler + faults * H.kernel_ns + written * H.wfault_ns + H.arm_ns;
}

/* The window's budget: hot_overhead of a period, less what earlier windows spent beyond their
   share of the time since.  Lanes are armed on a forecast (their heat, a trap's round trip at
   start): on a 64 MiB random chase every armed page was touched and ROCS's reload made a trap
   3.7 us against 2.3 at start, and the estimate read 1.5% against a cap of 1%.  The forecast
   stays as it was (costed as in the run, it halved the sampling of programs well under the cap);
   the debt keeps what is spent within it. */
static uint64_t window_budget(uint64_t now, uint64_t period) {
  uint64_t cap = (uint64_t)opt[HOT_OPT_OVERHEAD], cost = spent();
  uint64_t share = H.window_at != 0 ? (now - H.window_at) * cap / 1000 : 0, used = H.window_at != 0 ? cost - H.cost_at : 0;
  H.cost_at = cost;
  H.window_at = now;
  return _ca_hot_budget(&H.debt, used, share, period * cap / 1000 * 95 / 100);   /* 5% below the cap */
}

/* ROCS's lap pages, LAP_EACH at a time in turn, armed alone between the windows (no other trap
   to wait behind), every period / LAP_WINDOWS.  Pages close together wait for the same point of a
   loop's lap, so those armed together are spread over the lap pages (which lie in address order):
   their mean wait is then near half a lap wherever the lap was when they were armed */
static void open_laps(uint64_t now) {
  lock_h();
  uint32_t each = H.nlap < LAP_EACH ? H.nlap : LAP_EACH, first = H.lap_next++;
  for (uint32_t i = 0; i < H.nlap; i++) H.lap_slot[i] = -1;
  for (uint32_t k = 0; k < each; k++) {
    uint32_t i = (first + k * H.nlap / each) % H.nlap;
    range_t* r = H.lap[i] != NULL ? range_of(H.lap[i]) : NULL;
    if (r == NULL || !r->profiled) H.lap[i] = NULL;
    H.lap_slot[i] = H.lap[i] != NULL ? _ca_access_arm(H.lap[i], 1, H.lap_bits[i], false) : -1;
  }
  unlock_h();
  H.lap_end = now + (uint64_t)opt[HOT_OPT_WINDOW] * 1000000u;
}

static void close_laps(void) {
  lock_h();
  for (uint32_t i = 0; i < H.nlap; i++) {
    if (H.lap_slot[i] < 0 || !_ca_access_disarm(H.lap_slot[i])) continue;
    uint64_t waited, open;
    _ca_access_waited(H.lap_slot[i], &waited, &open);
    bool t = bit(H.lap_bits[i], 0);
    H.lap_trapped += t;
    H.lap_ns += t ? waited : open;
  }
  unlock_h();
  H.lap_end = 0;
}

/* The window's lanes, from where the last stopped, while their cost fits the budget: traps
   while they fit and no thread may have every signal blocked (access.c's quiet), write
   protection for the rest (hot_traps=both); or one kind only. */
static void open_window(uint64_t now) {
  uint64_t period = (uint64_t)opt[HOT_OPT_PERIOD] * 1000000u;
  bool reads = opt[HOT_OPT_TRAPS] != TRAPS_WRITES, writes = opt[HOT_OPT_TRAPS] != TRAPS_READS && _ca_written_ok();
  if (writes && H.wfault_ns == 0) H.wfault_ns = measure_fault(true);
  uint64_t budget = window_budget(now, period);
  uint64_t t0 = _ca_clock_ns();
  lock_h();
  H.nlanes = 0;
  uint64_t spent = 0;
  for (uint32_t visited = 0; budget > 0 && H.n > 0 && H.nlanes < LANES && visited <= H.n; ) {
    if (H.cur_range >= H.n) { H.cur_range = 0; H.cur_page = 0; }
    range_t* r = &H.r[H.cur_range];
    if ((r->excluded && !writes) || r->locked || H.cur_page >= r->pages) { H.cur_range++; H.cur_page = 0; visited++; continue; }
    uint32_t pages = r->pages - H.cur_page < LANE ? r->pages - H.cur_page : LANE;
    uint32_t at = r->at + H.cur_page;
    bool trap = reads && (!r->excluded || r->profiled);
    uint64_t rcost = trap ? lane_cost(at, pages, false) : UINT64_MAX, wcost = writes ? lane_cost(at, pages, true) : UINT64_MAX;
    bool first = H.nlanes == 0;
    if (!first && spent + (rcost < wcost ? rcost : wcost) > budget) break;
    lane_t* l = &H.lane[H.nlanes];
    *l = (lane_t){ r->base + (size_t)H.cur_page * CA_OS_PAGE, pages, at, -1, false, r->excluded && !r->profiled, {0} };
    if (trap && (first || spent + rcost <= budget)) {
      l->slot = _ca_access_arm(l->base, pages, l->bits, false);
      if (l->slot >= 0) spent += rcost;
      else if (_ca_access_quiet()) reads = false;           /* no trap in this window */
    }
    if (l->slot < 0 && writes && (first || spent + wcost <= budget)) {
      l->slot = _ca_access_arm(l->base, pages, l->bits, true);
      l->writes = l->slot >= 0;
      if (l->writes) spent += wcost;
    }
    if (l->slot >= 0) { H.nlanes++; H.pages_armed += pages; H.lanes_written += l->writes; memset(H.seen + at, 1, pages); }
    else H.arm_refused++;
    H.cur_page += pages;
  }
  unlock_h();
  H.lanes_armed += H.nlanes;
  H.windows++;
  H.window_arm_ns = _ca_clock_ns() - t0;
  H.arm_ns += H.window_arm_ns;
  H.window_end = now + (uint64_t)opt[HOT_OPT_WINDOW] * 1000000u;
  H.next_window = now + period * (H.sampling || H.nested ? 1 : _ca_rocs_apart());   /* ROCS's alone: it may idle */
}

/* A lane's bits into its pages' heat: the paper's scan; a written lane of pages that traps look
   at too only adds (write protection cannot tell a page read from one untouched), while pages
   never trapped have no other look: there the scan decays them as it would */
static void close_window(void) {
  uint64_t t0 = _ca_clock_ns();
  lock_h();
  for (uint32_t l = 0; l < H.nlanes; l++) {
    lane_t* ln = &H.lane[l];
    if (ln->slot < 0 || !_ca_access_disarm(ln->slot)) continue;   /* taken back, or cut short */
    if (ln->writes && !ln->untrapped && opt[HOT_OPT_TRAPS] == TRAPS_BOTH) _ca_hot_add(H.heat + ln->at, ln->pages, ln->bits);
    else _ca_hot_scan(H.heat + ln->at, ln->pages, ln->bits, &H.rng, &H.scan);
  }
  uint32_t lanes = H.window_lanes = H.nlanes;
  H.nlanes = 0;
  unlock_h();
  uint64_t t = _ca_clock_ns() - t0;
  H.arm_ns += t;
  /* a lane's arming and opening, learnt (an average over the last eight windows or so) */
  if (lanes > 0) H.lane_ns = (H.lane_ns * 7 + (H.window_arm_ns + t) / lanes) / 8;
}

/* ---- spreading --------------------------------------------------------------------------------- */

/* the hot pages (the hottest k at most), hottest first, and the threshold (H.lock held) */
static void find_hot(uint32_t k) {
  memset(H.hist, 0, sizeof H.hist);
  H.live = H.seen_once = 0;
  for (uint32_t i = 0; i < H.n; i++) {
    H.live += H.r[i].pages;
    for (uint32_t p = 0; p < H.r[i].pages; p++) { H.hist[H.heat[H.r[i].at + p]]++; H.seen_once += H.seen[H.r[i].at + p] != 0; }
  }
  uint32_t thr = _ca_hot_threshold(H.hist, k);
  H.threshold = thr < HOT_MIN ? HOT_MIN : thr;
  /* the hottest k, hottest first, by the histogram's counts (nothing may allocate here:
     compact); a bin shared at the threshold gives what room is left to its first pages */
  uint32_t at_heat[256], n = 0;
  for (int h = 255; h >= (int)H.threshold; h--) { at_heat[h] = n; n += H.hist[h]; }
  uint32_t most = k < HOT_MAX ? k : HOT_MAX;
  H.nhot = n < most ? n : most;
  for (uint32_t i = 0; i < H.n; i++)
    for (uint32_t p = 0; p < H.r[i].pages; p++) {
      uint32_t at = H.r[i].at + p, h = H.heat[at];
      bool deep = !H.r[i].locked && H.nest[at] != 0;
      if (h >= H.threshold && at_heat[h] < H.nhot)
        H.hot[at_heat[h]++] = (hot_page_t){ H.r[i].base + (size_t)p * CA_OS_PAGE, (uint8_t)h, H.colour[at], H.first[at],
                                            H.r[i].excluded, H.r[i].locked || deep, deep ? H.nest[at] - 1 : H.r[i].set };
    }
}

/* A hot page measured (mask 0) or moved to a colour of mask (*tries: fresh pages the colour
   layer may classify for it), while the core cannot take its range back (remove_range waits
   for H.busy) nor a system call reach it (on_change waits); its new colour noted.  -3: the
   range is gone, or excluded from moves meanwhile. */
static int on_page(hot_page_t* h, uint64_t mask, uint32_t* tries) {
  lock_h();
  range_t* r = range_of(h->page);
  bool live = r != NULL && (mask == 0 || !r->excluded);
  if (live) H.busy = h->page;
  unlock_h();
  if (!live) return -3;
  int c = mask == 0 ? _ca_colour_page(h->page) : _ca_colour_move_to(h->page, mask, tries);
  atomic_store(&H.busy, NULL);
  lock_h();
  long at = entry_of(h->page);
  if (at >= 0 && (mask == 0 || c >= 0)) H.colour[at] = (int8_t)c;
  if (at >= 0 && mask == 0 && H.first[at] == UNMEASURED) H.first[at] = h->first = (int8_t)c;
  unlock_h();
  return c;
}

/* a lock set's share of each of our `parts` colours: ceil(its pages of a known colour / parts) */
static uint32_t set_cap(uint32_t set, uint32_t parts) { return parts ? (H.set_known[set] + parts - 1) / parts : 0; }

/* each lock set's hot pages, how many of them are of each known colour, and how many are
   beyond set_cap on theirs */
static void lockset_counts(uint32_t colours, uint32_t parts) {
  memset(H.set_pages, 0, sizeof H.set_pages);
  memset(H.set_known, 0, sizeof H.set_known);
  memset(H.set_colours, 0, sizeof H.set_colours);
  for (uint32_t i = 0; i < H.nhot; i++)
    if (H.hot[i].locked) {
      H.set_pages[H.hot[i].set]++;
      if (H.hot[i].colour >= 0 && (uint32_t)H.hot[i].colour < colours) { H.set_known[H.hot[i].set]++; H.set_colours[H.hot[i].set][H.hot[i].colour]++; }
    }
  for (uint32_t s = 0; s <= CA_LOCKSETS_MAX; s++) {
    uint32_t cap = set_cap(s, parts);
    H.set_over[s] = 0;
    for (uint32_t c = 0; c < colours; c++) H.set_over[s] += H.set_colours[s][c] > cap ? H.set_colours[s][c] - cap : 0;
  }
}

/* pages trapped deep in a lock set (locksets.c) join its pages.  Read from the ring before
   H.lock is taken: naming a lock set takes locksets.c's lock, which fork's handlers take
   before H.lock. */
static void nested_touched(void) {
  enum { BATCH = 256 };
  uintptr_t page[BATCH];
  uint8_t set[BATCH];
  for (uint32_t n = BATCH; n == BATCH; ) {
    for (n = 0; n < BATCH && _ca_lockset_touched(&page[n], &set[n]); n++) {}
    lock_h();
    for (uint32_t i = 0; i < n; i++) {
      range_t* r = range_of((const uint8_t*)page[i]);
      if (r == NULL || r->locked || r->excluded) continue;
      uint32_t at = r->at + (uint32_t)(((const uint8_t*)page[i] - r->base) / CA_OS_PAGE);
      H.nest[at] = (uint8_t)(set[i] + 1);
      H.heat[at] = 255;
    }
    unlock_h();
  }
}

/* Before the colour layer: the hot set ranked against the L2's pages (the machine's), and the
   layer wanted once, for WANT_PERIODS periods in a row, with most of the heap looked at, the
   pages touched recently fill hot_fit % of the L2 and at most twice it.  Below, random frames fit
   them: a hot set of half the L2 leaves under 1% of its pages beyond their colour's ways
   (binomial: 0.7% with 8 ways, 0.07% with 16), less than the layer's start can pay back; above,
   the rest evicts the hot pages' lines whatever their colours (a program touching its whole
   heap); and one look calls every page it saw touched hot: the hot set must last. */
#define WANT_PERIODS 5

static void rank_alone(void) {
  lock_h();
  H.k = (uint32_t)(_ca_machine_l2() / CA_OS_PAGE * (uint64_t)opt[HOT_OPT_SHARE] / 100);
  find_hot(H.k);
  uint64_t warm = 0;
  for (uint32_t h = HOT_MIN; h < 256; h++) warm += H.hist[h];
  bool big = H.seen_once * 4 >= H.live * 3 && warm * 100 >= (uint64_t)H.k * (uint64_t)opt[HOT_OPT_FIT] && warm <= 2 * (uint64_t)H.k;
  unlock_h();
  H.big_periods = big ? H.big_periods + 1 : 0;
  if (H.big_periods >= WANT_PERIODS) { H.want_ns = _ca_clock_ns(); atomic_store(&H.want, true); }
}

static bool wants(void) { return atomic_load(&H.want); }

static void spread(void) {
  if (!atomic_load(&H.want)) { rank_alone(); return; }   /* the layer may be up for a set: not for us */
  uint32_t colours = (uint32_t)__builtin_popcountll(_ca_colour_known_mask()), ways = _ca_colour_ways();
  /* spread over too few colours, the hot set would crowd them: three quarters known at least */
  if (colours == 0 || ways == 0 || colours * 4 < (uint32_t)_ca_colour_count() * 3) return;
  uint32_t share = (uint32_t)opt[HOT_OPT_SHARE], cap = ways * share / 100 ? ways * share / 100 : 1;
  uint32_t budget = (uint32_t)opt[HOT_OPT_BUDGET];
  /* our colours: all, or our slice of them when other processes share our L2 */
  uint64_t all = colours >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << colours) - 1;
  uint64_t part = opt[HOT_OPT_PARTITION] ? _ca_colour_partition(colours) & all : all;
  /* a polluter's slice (protection armed): hot pages leave it first, hottest first, within the
     budget, ahead of protection's own pass (oldest first) */
  uint64_t reserved = _ca_colour_reserved_mask();
  if ((part & ~reserved) != 0) part &= ~reserved;
  H.partition = part;
  uint32_t cap_of[CA_COLOURS_MAX];
  for (uint32_t c = 0; c < colours; c++) cap_of[c] = (part >> c) & 1 ? cap : 0;
  lock_h();
  H.k = (uint32_t)__builtin_popcountll(part) * ways * share / 100;
  find_hot(H.k);
  unlock_h();
  /* colours measured, hottest first: two per page a period may move, and a few */
  uint32_t measure = budget * 2 + 8;
  for (uint32_t i = 0; i < H.nhot && measure > 0; i++)
    if (H.hot[i].colour == UNMEASURED) {
      H.hot[i].colour = (int8_t)on_page(&H.hot[i], 0, NULL);
      H.measured += H.hot[i].colour != -3;
      H.unknown += H.hot[i].colour == -1;
      measure--;
    }
  uint32_t count[CA_COLOURS_MAX] = {0}, before[CA_COLOURS_MAX] = {0}, over = 0, over_before = 0;
  for (uint32_t i = 0; i < H.nhot; i++) {
    int c = H.hot[i].colour, f = H.hot[i].first;
    if (c >= 0 && (uint32_t)c < colours) count[c]++;
    if (f >= 0 && (uint32_t)f < colours) before[f]++;
  }
  for (uint32_t c = 0; c < colours; c++) {
    over += count[c] > cap_of[c] ? count[c] - cap_of[c] : 0;
    over_before += before[c] > cap_of[c] ? before[c] - cap_of[c] : 0;
  }
  H.over_full = over;
  H.over_full_before = over_before;
  memcpy(H.before, before, sizeof before);
  /* pages to move: beyond `cap` on their colour (the hottest of them first), then the unknown.
     A colour whose frames the colour layer failed to find three times is left alone (its
     eviction set may see no page at all): it counts as full */
  uint32_t left[CA_COLOURS_MAX], room[CA_COLOURS_MAX], tries = budget * 2 + 8;
  memcpy(left, count, sizeof count);
  for (uint32_t c = 0; c < colours; c++) room[c] = H.no_frames[c] >= 3 || cap_of[c] == 0 ? cap : count[c];
  /* each lock set's pages first (pass 0): evenly among themselves, ceil(n / colours) a colour,
     before the hot set's cap (passes 1 and 2) */
  uint32_t parts = (uint32_t)__builtin_popcountll(part), room_of_set[CA_COLOURS_MAX];
  lockset_counts(colours, parts);
  for (uint32_t pass = 0; pass < 3; pass++)
    for (uint32_t i = 0; i < H.nhot && budget > 0; i++) {
      int c = H.hot[i].colour;
      bool known = c >= 0 && (uint32_t)c < colours;
      uint32_t* mine = H.set_colours[H.hot[i].set], mine_cap = set_cap(H.hot[i].set, parts);
      /* passes 1 and 2 are hot pages' (hot=1): with lock sets alone, only their pages move */
      if (H.hot[i].fixed || !(pass == 0 ? H.hot[i].locked && known && mine[c] > mine_cap
                              : pass == 1 ? known && left[c] > cap_of[c] : c == -1)) continue;
      if (pass > 0 && !H.sampling && !H.hot[i].locked) continue;
      if (pass == 0)
        for (uint32_t k = 0; k < colours; k++) room_of_set[k] = H.no_frames[k] >= 3 || cap_of[k] == 0 ? mine_cap : mine[k];
      uint64_t mask = pass == 0 ? _ca_hot_target(room_of_set, colours, mine_cap, _ca_colour_spares())
                                : _ca_hot_target(room, colours, cap, _ca_colour_spares());
      if (mask == 0 || tries == 0) break;            /* every colour is full: the hot set is too big */
      uint32_t had = tries;
      int to = on_page(&H.hot[i], mask, &tries);
      budget--;
      /* no frame of those colours in twice the pages that should have shown one */
      if (to < 0 && to != -3 && (had - tries) * (uint32_t)__builtin_popcountll(mask) >= 2 * colours)
        for (uint32_t k = 0; k < colours; k++) if ((mask >> k) & 1 && ++H.no_frames[k] == 3) { room[k] = cap; H.unusable++; }
      if (to < 0) { H.move_failures += to != -3; continue; }
      if (c >= 0) { count[c]--; left[c]--; room[c] -= room[c] < cap; }
      if (H.hot[i].locked) { if (known) mine[c]--; else H.set_known[H.hot[i].set]++; mine[to]++; H.set_moved[H.hot[i].set]++; }
      count[to]++;
      room[to]++;
      H.hot[i].colour = (int8_t)to;
      H.moved++;
      H.last_move = _ca_clock_ns();
      if (H.first_move == 0) H.first_move = H.last_move;
    }
  memcpy(H.now, count, sizeof count);
}

/* the colour worker's turn: a window opened or closed; ms until the next */
static uint64_t work(void) {
  lock_h();
  drain();
  unlock_h();
  uint64_t now = _ca_clock_ns();
  if (H.rocs) _ca_monitor_measure();                 /* the reload's thresholds, once */
  /* lock sets alone: their pages are hot as they come; windows only for the nested check */
  if (!H.sampling && !H.rocs && !(H.nested && atomic_load_explicit(&_ca_lockset_nested, ca_relaxed))) {
    if (now >= H.next_window) { spread(); H.next_window = _ca_clock_ns() + (uint64_t)opt[HOT_OPT_PERIOD] * 1000000u; }
    return (H.next_window - now) / 1000000 + 1;
  }
  if (H.lap_end != 0) {
    if (now < H.lap_end) return (H.lap_end - now) / 1000000 + 1;
    close_laps();
    H.next_lap = now + (uint64_t)opt[HOT_OPT_PERIOD] * 1000000u / LAP_WINDOWS;
  }
  if (H.window_end != 0) {
    if (now < H.window_end) return (H.window_end - now) / 1000000 + 1;
    close_window();
    H.window_end = 0;
    if (H.nested) nested_touched();
    if (H.rocs) _ca_rocs_window(H.window_lanes > 0);
    if (H.sampling || _ca_locksets_on()) spread();
    now = _ca_clock_ns();
  }
  if (now >= H.next_window) {
    open_window(now);
    H.next_lap = now + 2 * (uint64_t)opt[HOT_OPT_WINDOW] * 1000000u;
    return (uint64_t)opt[HOT_OPT_WINDOW];
  }
  if (H.nlap != 0 && now >= H.next_lap && now + 2 * (uint64_t)opt[HOT_OPT_WINDOW] * 1000000u < H.next_window) {
    open_laps(now);
    return (uint64_t)opt[HOT_OPT_WINDOW];
  }
  uint64_t next = H.nlap != 0 && H.next_lap > now && H.next_lap < H.next_window ? H.next_lap : H.next_window;
  return (next - now) / 1000000 + 1;
}

static ca_colour_client_t client = { on_range, work, wants, 0 };

/* A fault's cost here, once: a page armed, then touched by this thread (a trap: the program's
   own, at start; a first write under write protection: the worker's, at its first window). */
static uint64_t measure_fault(bool writes) {
  uint8_t* p = _ca_os_map(CA_OS_PAGE);
  if (p == NULL) return 5000;
  uint64_t bits[1], best = UINT64_MAX, kernel = UINT64_MAX;
  for (int i = 0; i < 5; i++) {
    p[0] = 1;
    int s = _ca_access_arm(p, 1, bits, writes);
    uint64_t f0, h0, f1, h1, x;
    _ca_access_stats(&f0, &h0, &x, &x, &x);
    uint64_t t0 = _ca_clock_ns();
    ((volatile uint8_t*)p)[0]++;
    uint64_t t = _ca_clock_ns() - t0;
    _ca_access_stats(&f1, &h1, &x, &x, &x);
    _ca_access_disarm(s);
    if (s < 0) continue;
    if (t < best) best = t;
    if (f1 == f0 + 1 && t > h1 - h0 && t - (h1 - h0) < kernel) kernel = t - (h1 - h0);   /* a trap, not a first write */
  }
  _ca_os_unmap(p, CA_OS_PAGE);
  if (!writes) H.kernel_ns = kernel != UINT64_MAX ? kernel : best != UINT64_MAX ? best / 2 : 2500;
  return best == UINT64_MAX ? 5000 : best > 0 ? best : 1;
}

/* Started from a constructor, not the layer's init: that may run in the process's first
   allocation, before the C library can start a thread. */
__attribute__((constructor)) static void start(void) {
  _ca_started();
  if (!H.on) return;
  if (H.sampling || H.nested || H.rocs) H.fault_ns = measure_fault(false);
  H.lane_ns = 20000;                                   /* until learnt */
  client.delay_ms = (uint64_t)opt[HOT_OPT_DELAY];
  H.started = _ca_clock_ns();
  _ca_colour_client(&client);
}

static void init(void) {
  H.sampling = opt[HOT_OPT_ON] != 0;
  H.rocs = _ca_rocs_on();
  H.on = (H.sampling || H.rocs || _ca_locksets_on()) && _ca_colour_opt(CA_COPT_COLOURS) != 0 && !_ca_trap_under_valgrind();
  if (!H.on) return;
  H.heat = _ca_os_map(PAGES);
  H.colour = _ca_os_map(PAGES);
  H.first = _ca_os_map(PAGES);
  H.seen = _ca_os_map(PAGES);
  H.nest = _ca_os_map(PAGES);
  if (H.rocs) H.prof = _ca_os_map(PAGES * sizeof *H.prof);
  if (H.heat == NULL || H.colour == NULL || H.first == NULL || H.seen == NULL || H.nest == NULL || (H.rocs && H.prof == NULL)) {
    H.on = H.rocs = false;
    return;
  }
  H.nested = _ca_locksets_nest() != 0;
  atomic_store(&H.want, H.rocs || _ca_locksets_on() || opt[HOT_OPT_FIT] == 0);
  H.rng = _ca_process_seed() | 1;
  _ca_access_on_change(on_change);
  if (_ca_locksets_on()) _ca_lockset_flavour = CA_FLAVOUR_SPREAD;   /* hot.c spreads what they allocate */
}

/* ---- statistics -------------------------------------------------------------------------------- */

static void counts_json(ca_buf_t* b, const char* name, const uint32_t* c, uint32_t n) {
  ca_buf_str(b, ",\""); ca_buf_str(b, name); ca_buf_str(b, "\":[");
  for (uint32_t i = 0; i < n; i++) { if (i) ca_buf_str(b, ","); ca_buf_u64(b, c[i]); }
  ca_buf_str(b, "]");
}

static void stats(ca_buf_t* b) {
  ca_buf_str(b, "{\"on\":");
  ca_buf_str(b, H.on ? "true" : "false");
  uint64_t faults = 0, fault_ns = 0, released = 0, quiet = 0, written = 0;
  _ca_access_stats(&faults, &fault_ns, &released, &quiet, &written);
  uint64_t run = H.started ? _ca_clock_ns() - H.started : 0;
  uint64_t cost = spent();
  ca_buf_field_u64(b, "windows", H.windows);
  ca_buf_field_u64(b, "lanes_armed", H.lanes_armed);
  ca_buf_field_u64(b, "lanes_written", H.lanes_written);   /* ... of them by write protection */
  ca_buf_field_u64(b, "pages_armed", H.pages_armed);
  ca_buf_field_u64(b, "arm_refused", H.arm_refused);
  ca_buf_field_u64(b, "faults", faults);
  ca_buf_field_u64(b, "fault_ns", H.fault_ns);            /* one trap at start: the forecast's */
  ca_buf_field_u64(b, "kernel_ns", H.kernel_ns);          /* its kernel's part; the estimate's: */
  ca_buf_field_u64(b, "handler_ns", faults ? fault_ns / faults : 0);   /* and the handler's in the run */
  ca_buf_field_u64(b, "debt_us", H.debt / 1000);          /* spent beyond the share, being paid back */
  ca_buf_field_u64(b, "written", written);                /* pages seen written */
  ca_buf_field_u64(b, "write_fault_ns", H.wfault_ns);     /* one first write, measured */
  ca_buf_str(b, ",\"write_protection\":\"");
  ca_buf_str(b, opt[HOT_OPT_TRAPS] == TRAPS_READS ? "not used" : _ca_written_ok() ? "used" : _ca_written_why());
  ca_buf_str(b, "\"");
  ca_buf_field_u64(b, "released", released);
  ca_buf_field_u64(b, "quiet_cut", quiet);                /* lanes opened early: signals blocked */
  ca_buf_field_u64(b, "arm_us", H.arm_ns / 1000);         /* the worker's system calls */
  ca_buf_field_u64(b, "cost_us", cost / 1000);
  ca_buf_field_u64(b, "overhead_ppm", run ? cost * 1000000 / run : 0);
  ca_buf_field_u64(b, "checked", H.scan.checked);
  ca_buf_field_u64(b, "touched", H.scan.touched);
  ca_buf_field_u64(b, "skipped", H.scan.skipped);
  ca_buf_field_u64(b, "backtracks", H.scan.backtracks);
  ca_buf_field_u64(b, "ranges", H.n);
  ca_buf_field_u64(b, "ranges_struck", _ca_rlog_struck());   /* given back by then, never applied */
  ca_buf_field_u64(b, "pages", H.used);
  ca_buf_field_u64(b, "untracked_pages", H.untracked_pages);
  ca_buf_field_u64(b, "excluded_ranges", H.excluded);
  ca_buf_field_u64(b, "k", H.k);
  ca_buf_field_u64(b, "threshold", H.threshold);
  ca_buf_field_u64(b, "hot_pages", H.nhot);
  ca_buf_field_u64(b, "colours_wanted", atomic_load(&H.want));
  ca_buf_field_u64(b, "colours_wanted_ms", H.want_ns > H.started ? (H.want_ns - H.started) / 1000000 : 0);
  ca_buf_field_u64(b, "measured", H.measured);
  ca_buf_field_u64(b, "unknown", H.unknown);
  ca_buf_field_u64(b, "moved", H.moved);
  ca_buf_field_u64(b, "first_move_ms", H.first_move ? (H.first_move - H.started) / 1000000 : 0);   /* since start */
  ca_buf_field_u64(b, "last_move_ms", H.last_move ? (H.last_move - H.started) / 1000000 : 0);
  ca_buf_field_u64(b, "move_failures", H.move_failures);
  ca_buf_field_u64(b, "child_start_deferred", H.child_deferred);
  ca_buf_field_u64(b, "colours_without_frames", H.unusable);
  ca_buf_str(b, ",\"partition\":\"");
  ca_buf_hex(b, H.partition);
  ca_buf_str(b, "\"");
  ca_buf_field_u64(b, "sharing_l2", _ca_colour_partition_sharing());
  ca_buf_field_u64(b, "over_full", H.over_full);
  ca_buf_field_u64(b, "over_full_before", H.over_full_before);
  uint32_t colours = (uint32_t)__builtin_popcountll(_ca_colour_known_mask());
  counts_json(b, "per_colour_before", H.before, colours);
  counts_json(b, "per_colour", H.now, colours);
  counts_json(b, "histogram", H.hist, 256);
  ca_buf_str(b, ",\"spread\":");
  _ca_colour_spread_stats_json(b);
  ca_buf_str(b, "}");
}

static void fork_prepare(void) {
  lock_h();
  _ca_rlog_fork_prepare();
  H.fork_pid = getpid();
  atomic_store_explicit(&H.forking, true, ca_release);
}
static void fork_parent(void) { atomic_store_explicit(&H.forking, false, ca_release); _ca_rlog_fork_parent(); unlock_h(); }
/* A fork child tracks its own hot pages with a worker of its own, started at its first system
   call after hot_delay (not here: a child that execs at once pays nothing).  It keeps the
   ranges and their heat; colours are measured again (a page it writes gets a frame of its own). */
static void fork_child(void) {
  atomic_store_explicit(&H.forking, false, ca_release);
  _ca_lock_reset(&H.lock);
  _ca_rlog_unlock_all();
  holding = false;
  lock_h();                                /* the other threads' ranges are the child's too */
  drain();
  unlock_h();
  _ca_rlog_fork_child();
  _ca_access_fork_child();
  _ca_colour_partition_fork_child();
  H.nlanes = 0;
  H.window_end = 0;
  H.next_window = 0;
  atomic_store(&H.busy, NULL);             /* the parent's worker's page: nothing is measured here */
  if (!H.on) return;
  memset(H.colour, UNMEASURED, H.used);
  memset(H.first, UNMEASURED, H.used);
  H.nhot = H.threshold = H.k = 0;
  memset(H.before, 0, sizeof H.before);
  memset(H.now, 0, sizeof H.now);
  H.first_move = H.last_move = 0;
  H.windows = H.lanes_armed = H.lanes_written = H.pages_armed = H.arm_refused = H.arm_ns = 0;
  H.cost_at = H.window_at = H.debt = 0;
  H.scan = (ca_hot_scan_t){0};
  H.measured = H.unknown = H.moved = H.move_failures = 0;
  H.over_full = H.over_full_before = 0;
  H.child_deferred = 0;
  H.started = _ca_clock_ns();
  atomic_store(&H.child_born, H.started);
}

/* (a wrapped system call: a thread may start here) a fork child's worker, after hot_delay, and
   never from a signal handler's call (bash's SIGCHLD handler calls waitpid): later then */
static void child_worker(void) {
  uint64_t born = atomic_load_explicit(&H.child_born, ca_relaxed);
  if (born == 0 || _ca_clock_ns() - born < (uint64_t)opt[HOT_OPT_DELAY] * 1000000u) return;
  if (_ca_os_maybe_in_handler()) { H.child_deferred++; return; }
  if (!atomic_compare_exchange_strong(&H.child_born, &born, 0)) return;
  client.delay_ms = 0;
  _ca_colour_client(&client);
}

#ifdef CA_TEST_HOOKS
void _ca_hot_test_busy(void* page) { atomic_store(&H.busy, (uint8_t*)page); }   /* as the worker does */
#endif

/* a slice of the L2 is given back at exit, not when the slot goes stale */
__attribute__((destructor)) static void leave(void) { if (H.on) _ca_colour_partition_leave(); }

static void thread_done(void) {
  if (!H.on) return;
  _ca_access_thread_leaving();
  lock_h();
  _ca_rlog_drain_mine(apply_logged);
  _ca_rlog_thread_done();
  unlock_h();
}

const ca_layer_t _ca_layer_hot = {
  .name = "hot", .options = options, .values = opt, .noptions = HOT_OPT_COUNT,
  .init = init, .fork_prepare = fork_prepare, .fork_parent = fork_parent, .fork_child = fork_child,
  .thread_done = thread_done, .stats = stats,
};

/* a lock set's pages as the last period counted them (locksets.c's statistics) */
uint32_t _ca_hot_lockset(uint32_t set, const uint32_t** per_colour, uint64_t* moved, uint32_t* conflicts) {
  if (set > CA_LOCKSETS_MAX) return 0;
  *per_colour = H.set_colours[set];
  *moved = H.set_moved[set];
  *conflicts = H.set_over[set];
  return H.set_pages[set];
}

/* ---- ROCS's pages (rocs.h) ---------------------------------------------------------------------- */

/* the range holding page by the ranges sorted by base (H.order, sorted by the caller) */
static range_t* sorted_range_of(uintptr_t page) {
  int lo = 0, hi = (int)H.n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    range_t* r = &H.r[H.order[mid]];
    if (page < (uintptr_t)r->base) hi = mid - 1;
    else if (page >= (uintptr_t)r->base + (size_t)r->pages * CA_OS_PAGE) lo = mid + 1;
    else return r;
  }
  return NULL;
}

void _ca_hot_rocs_notes(const ca_rocs_sample_t* s, size_t n) {
  if (H.prof == NULL || n == 0) return;
  lock_h();
  for (uint32_t i = 0; i < H.n; i++) H.order[i] = (uint16_t)i;
  for (uint32_t gap = H.n / 2; gap > 0; gap /= 2)      /* a shell sort: nothing may allocate here */
    for (uint32_t i = gap; i < H.n; i++)
      for (uint32_t j = i; j >= gap && H.r[H.order[j - gap]].base > H.r[H.order[j]].base; j -= gap) {
        uint16_t t = H.order[j]; H.order[j] = H.order[j - gap]; H.order[j - gap] = t;
      }
  for (size_t k = 0; k < n; k++) {
    range_t* r = sorted_range_of(s[k].page);
    if (r != NULL) _ca_rocs_note(&H.prof[r->at + (s[k].page - (uintptr_t)r->base) / CA_OS_PAGE], s[k].level, s[k].ticks);
  }
  unlock_h();
}

/* lap pages: up to LAPS of the profiled pages touched (reloads counted), evenly spread over them
   (over a stream's lap, so that their waits do not depend on where the lap was when armed) */
uint32_t _ca_hot_rocs_laps(void) {
  lock_h();
  H.nlap = 0;
  H.lap_ns = 0;
  H.lap_trapped = 0;
  uint32_t touched = 0;
  for (int pass = 0; pass < 2; pass++) {
    uint32_t seen = 0;
    for (uint32_t i = 0; H.prof != NULL && i < H.n; i++)
      for (uint32_t p = 0; H.r[i].profiled && p < H.r[i].pages; p++) {
        if (H.prof[H.r[i].at + p].n < CA_ROCS_MIN_SAMPLES) continue;
        if (pass == 1 && H.nlap < LAPS && (uint64_t)seen * LAPS / touched >= H.nlap) H.lap[H.nlap++] = H.r[i].base + (size_t)p * CA_OS_PAGE;
        seen++;
      }
    touched = seen;
    if (touched == 0) break;
  }
  uint32_t n = H.nlap;
  unlock_h();
  return n;
}

void _ca_hot_rocs_lap(uint64_t* waited_ns, uint32_t* trapped) {
  lock_h();
  *waited_ns = H.lap_ns;
  *trapped = H.lap_trapped;
  H.lap_ns = 0;
  H.lap_trapped = 0;
  unlock_h();
}

void _ca_hot_rocs_step(double* sum, uint32_t* pages) {
  *sum = 0;
  *pages = 0;
  if (H.prof == NULL) return;
  lock_h();
  for (uint32_t i = 0; i < H.n; i++)
    for (uint32_t p = 0; p < H.r[i].pages; p++) {
      ca_rocs_page_t* e = &H.prof[H.r[i].at + p];
      if (e->sn == 0) continue;
      *sum += (double)e->ssum / e->sn;
      ++*pages;
      e->sn = 0;
      e->ssum = 0;
    }
  unlock_h();
}

uint32_t _ca_hot_rocs_candidates(ca_rocs_cand_t* out, uint32_t max, bool l3, uint32_t* covered, uint32_t* runs) {
  uint32_t n = 0;
  *covered = *runs = 0;
  if (H.prof == NULL) return 0;
  lock_h();
  for (uint32_t i = 0; i < H.n && n < max; i++)
    for (uint32_t p = 0, run = _ca_rocs_run(H.r[i].pages); H.r[i].profiled && p < H.r[i].pages && n < max; p += run) {
      uint32_t pages = H.r[i].pages - p < run ? H.r[i].pages - p : run, sn = 0, l3n = 0, memn = 0;
      for (uint32_t q = 0; q < pages; q++) {
        const ca_rocs_page_t* e = &H.prof[H.r[i].at + p + q];
        sn += e->n, l3n += e->l3, memn += e->mem;
      }
      /* armed and never trapped: untouched (artlike's 8 MiB of timings, a page a second),
         neither a candidate nor a run to wait for */
      uint32_t lane0 = H.r[i].at + p / LANE * LANE, lane1 = H.r[i].at + (p + pages - 1) / LANE * LANE;
      if (sn == 0 && H.seen[lane0] && H.seen[lane1]) continue;
      ++*runs;
      *covered += sn >= CA_ROCS_MIN_SAMPLES;
      ca_rocs_page_t sum = { (uint8_t)(sn > 255 ? 255 : sn), (uint8_t)(sn > 255 ? l3n * 255 / sn : l3n), (uint8_t)(sn > 255 ? memn * 255 / sn : memn), 0, 0, 0, 0 };
      uint32_t key = _ca_rocs_key(&sum, l3);
      if (key != 0) out[n++] = (ca_rocs_cand_t){ H.r[i].base + (size_t)p * CA_OS_PAGE, key, pages, 0 };
    }
  unlock_h();
  for (uint32_t gap = n / 2; gap > 0; gap /= 2)       /* most often from memory first, then by address */
    for (uint32_t i = gap; i < n; i++)
      for (uint32_t j = i; j >= gap && (out[j - gap].key < out[j].key ||
                                        (out[j - gap].key == out[j].key && out[j - gap].page > out[j].page)); j -= gap) {
        ca_rocs_cand_t t = out[j]; out[j] = out[j - gap]; out[j - gap] = t;
      }
  return n;
}

uint32_t _ca_hot_rocs_profile(ca_rocs_run_t* out, uint32_t max) {
  uint32_t n = 0, objects = 0;
  if (H.prof == NULL) return 0;
  lock_h();
  for (uint32_t i = 0; i < H.n; i++) H.order[i] = (uint16_t)i;
  for (uint32_t gap = H.n / 2; gap > 0; gap /= 2)      /* by address, as the notes sort them */
    for (uint32_t i = gap; i < H.n; i++)
      for (uint32_t j = i; j >= gap && H.r[H.order[j - gap]].base > H.r[H.order[j]].base; j -= gap) {
        uint16_t t = H.order[j]; H.order[j] = H.order[j - gap]; H.order[j - gap] = t;
      }
  for (uint32_t o = 0; o < H.n && n < max; o++) {
    range_t* r = &H.r[H.order[o]];
    if (!r->profiled) continue;
    objects++;
    for (uint32_t p = 0, run = _ca_rocs_run(r->pages); p < r->pages && n < max; p += run) {
      uint32_t pages = r->pages - p < run ? r->pages - p : run, sn = 0, l3n = 0, memn = 0, in = 0;
      for (uint32_t q = 0; q < pages; q++) {
        const ca_rocs_page_t* e = &H.prof[r->at + p + q];
        sn += e->n, l3n += e->l3, memn += e->mem, in += e->in;
      }
      out[n++] = (ca_rocs_run_t){ (uint8_t)(sn ? memn * 100 / sn : 0), (uint8_t)(sn ? l3n * 100 / sn : 0), in * 2 > pages,
                                  (uint8_t)(objects > 255 ? 255 : objects) };
    }
  }
  unlock_h();
  return n;
}

/* a profiled page into the buffer's set, back out of it, or away from its colours (how), while
   the core cannot take its range back nor a system call reach it (H.busy, as on_page); the old
   frame of a buffer page joins the buffer's pool again (re-tested) */
int _ca_hot_rocs_move(uint8_t* page, int set, int how) {
  bool in = how == CA_ROCS_IN;
  lock_h();
  range_t* r = range_of(page);
  long e = r != NULL && r->profiled ? entry_of(page) : -1;
  /* a page of a run going in whose own reloads do not make it a candidate (_ca_rocs_key) is
     reused data beside the stream (a big object's run is 1/256 of it: its last may hold the
     victim too); one going back out that never went in has nothing to undo, nor one sent away
     that is in the buffer or has left it already */
  int skip = e < 0 ? -1 : in && H.prof[e].n > CA_ROCS_MIN_SAMPLES && _ca_rocs_key(&H.prof[e], _ca_rocs_l3()) == 0 ? -2
           : how == CA_ROCS_OUT && !H.prof[e].in ? -3
           : how == CA_ROCS_AWAY && (H.prof[e].in || H.prof[e].out) ? -3 : 0;
  if (skip == 0) H.busy = page;
  unlock_h();
  if (skip != 0) return skip;
  int keep = in ? 0 : _ca_rocs_buffer_set();
  bool moved = _ca_recolour(page, CA_OS_PAGE, set, keep, keep > 0) == 1;
  atomic_store(&H.busy, NULL);
  lock_h();
  long at = entry_of(page);
  if (at >= 0 && moved) { H.prof[at].in = in; H.prof[at].out = !in; }
  unlock_h();
  return moved;
}

uint32_t _ca_hot_rocs_reused(uint8_t** out, uint32_t max) {
  uint32_t n = 0;
  bool l3 = _ca_rocs_l3();
  if (H.prof == NULL) return 0;
  lock_h();
  for (int tier = 0; tier < 3; tier++)            /* L2 hits first, then the L3's, then memory's rarely */
    for (uint32_t i = 0; i < H.n && n < max; i++)
      for (uint32_t p = 0; H.r[i].profiled && p < H.r[i].pages && n < max; p++) {
        const ca_rocs_page_t* e = &H.prof[H.r[i].at + p];
        if (e->n < CA_ROCS_MIN_SAMPLES || e->in || e->out || _ca_rocs_key(e, l3) != 0) continue;
        int t = e->mem ? 2 : 2u * e->l3 < e->n ? 0 : 1;
        if (t == tier) out[n++] = H.r[i].base + (size_t)p * CA_OS_PAGE;
      }
  unlock_h();
  return n;
}
