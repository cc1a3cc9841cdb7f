/* ROCS (paper 004): a pollute buffer, a small slice of the L2's colours, for the pages whose data
   is not reused while it could be cached, so that they stop evicting the data that is.

   NightWatch judges whole chunks by their allocation context; it cannot split one allocation
   that holds both a streamed region and a reused one (SPEC's art).  ROCS works per page:

     profile   hot.c's sampling windows also trap the pages of large objects (rocs_min KiB and
               more); at each trap, once the page is open and before the program's access goes
               on, a timed reload of its lines (monitor/reload.c, on the faulting thread's core)
               says which level holds them: the L2, a level beyond (the L3), or memory
               (thresholds measured at start, memory by flushed lines).  The handler writes
               {page, level, ticks} to a ring; after each window the worker adds them to the
               pages' profiles (hot.c's arena: counts that halve every CA_ROCS_DECAY reloads).

                 ring[RING] ──worker──> profile[page] = { n, beyond L2, from memory, in, step }

     stack     after rocs_profile windows that sampled (more, up to ten times as many, until nine runs in
               ten have reloads enough): runs of a large object's pages (16, or 1/256 of the
               object) whose reloads come from memory at least a quarter of the time, most
               often first (_ca_rocs_key; the L3 here keeps part of a stream bigger than
               itself).  A run that misses the L2 but hits the L3 is not a polluter: confined
               to a slice of the L2's colours it is confined to the same slice of the L3's sets,
               and its reuse would then miss the L3, unless the slice holds it: by default
               (rocs_l3=auto) such runs join the stack when all of it fits in half the
               buffer's share of the L3 (a 4 MiB stream beside a 260 MiB L3), rocs_l3=1 always.
               Pages spared going in and victims moved away are those not candidates by the same
               rule (_ca_rocs_key).
     search    the paper's Algorithm 1: k = 0 (twice), then the top step, 2 step ... runs of the stack
               moved into the buffer (the colour layer's moves, at most rocs_budget pages a
               window), each configuration scored over rocs_step windows once its moves are
               done (a page of a run whose own reloads are not memory's is spared); the
               best k stays, unless it beats k = 0 by less than rocs_margin %, or fails the
               confirmation (best, k = 0, best, k = 0: each of its scores must beat the k = 0
               ones beside it by that, in one of two rounds; one that fails gives way to the
               sweep's next best, once), and the runs above it move back out.  rocs_fixed=P
               confines the top P% without a search (points of a sweep by hand, to check the
               search against).
     victims   while anything is in the buffer, the same objects' pages reused through the
               caches move to the other colours, once each (guard: 1 in 16 lay in the buffer's);
               once settled, the pages of the runs left out too, from the stack's bottom.
     score     the paper measures IPC; these machines have no counter of instructions.  If the
               program calls chromalloc_progress(units): its units per CPU second of its own
               threads (the colour worker's stocking and moves left out).  Else the stand-in:
               minus the lap time, how long the lap pages (hot.c: a few touched pages of the
               profiled objects, armed alone between the windows) wait to be touched; a loop
               touches them once a lap.  Without lap pages (no page reloaded often enough: a
               random chase) there is no score and no search: the profile goes on, nothing
               moves.  The mean reload time per page (an estimate of the stall per reference)
               is kept for the report only: it does not follow the program's speed.
     phases    once settled, each rocs_step windows are scored again; a score off the settled one
               by more than a third for three scores in a row: k = 0 is scored beside it, and
               unless the settled k still beats it, or beats it when scored again right after,
               a new phase: the buffer stays emptied and the profile and search run again.

   The buffer is the first 1/rocs_buffer of the colours (a colour set), reserved so that the
   colour layer's protection keeps ordinary memory up to the L2's size out of it; NightWatch's
   restrictive slice is the first 1/8, so the two confine to the same end and its reservation
   (a superset) serves both.  ROCS moves only pages of large ordinary objects; NightWatch's
   chunks live in coloured memory and are never profiled here. */
#define _GNU_SOURCE
#include "rocs.h"
#include "hot.h"
#include "../monitor/monitor.h"
#include "../color/colour.h"
#include <time.h>

static const char* const l3_words[] = { "0", "1", "auto", NULL };
enum { L3_NEVER, L3_ALWAYS, L3_AUTO };
enum { R_OPT_ON, R_OPT_BUFFER, R_OPT_MIN, R_OPT_PROFILE, R_OPT_STEP, R_OPT_STEPS, R_OPT_BUDGET, R_OPT_MARGIN, R_OPT_L3,
       R_OPT_FIXED, R_OPT_COUNT };
static long opt[R_OPT_COUNT];
static const ca_option_desc_t options[R_OPT_COUNT] = {
  [R_OPT_ON]      = { "rocs", 0, 0, 1, _ca_bool_words,
                      "ROCS (paper 004): pages of large objects whose data comes back from memory are moved into a "
                      "pollute buffer, a small slice of the L2's colours, as many as an empirical search finds best; "
                      "see docs/rocs.md" },
  [R_OPT_BUFFER]  = { "rocs_buffer", 16, 2, 64, NULL, "the pollute buffer is the first 1/this of the L2's colours" },
  [R_OPT_MIN]     = { "rocs_min", 1024, 64, 1048576, NULL, "KiB: large objects this big and bigger are profiled" },
  [R_OPT_PROFILE] = { "rocs_profile", 30, 1, 1000, NULL, "sampling windows of profile before a search" },
  [R_OPT_STEP]    = { "rocs_step", 4, 1, 100, NULL, "sampling windows each configuration of the search is scored over" },
  [R_OPT_STEPS]   = { "rocs_steps", 8, 1, CA_ROCS_STEPS_MAX, NULL, "configurations the search tries beyond k = 0 (the stack in that many steps)" },
  [R_OPT_BUDGET]  = { "rocs_budget", 512, 1, 65536, NULL, "pages moved into or out of the buffer per window at most" },
  [R_OPT_MARGIN]  = { "rocs_margin", 5, 0, 100, NULL, "percent the best configuration must beat k = 0 by to be kept" },
  [R_OPT_L3]      = { "rocs_l3", 2, 0, 2, l3_words,
                      "pages reused through the L3 (missing the L2 only) join the stack, below those from memory: 1 always, "
                      "auto when all the stack would confine fits in half the buffer's share of the L3" },
  [R_OPT_FIXED]   = { "rocs_fixed", -1, -1, 100, NULL,
                      "percent of the stack moved into the buffer without a search (-1: search); for a sweep by hand "
                      "(bench/rocs.py --sweep) to check the search against" },
};

#define RING     8192               /* reloads between two drains (a window traps fewer) */
#define STACK    16384              /* pages in the stack at most (64 MiB) */
#define HISTORY  72                 /* search configurations and settled scores kept for the report */
#define PROFILE_RUNS 1024           /* runs of the address-space profile in the report */
#define IDLE_MAX 2                  /* windows 1, 2, then 4 periods apart while profiles find nothing
                                       (4 at once after a search that kept nothing) */

enum { ST_OFF, ST_PROFILE, ST_SEARCH, ST_SETTLED, ST_RECHECK };
static const char* const state_words[] = { "off", "profiling", "searching", "settled", "rechecking" };

static struct {
  _Atomic(uint64_t) head;           /* reloads written (the fault handler) */
  uint64_t          tail, lost;
  struct { _Atomic(uintptr_t) page; _Atomic(uint32_t) ticks; _Atomic(int32_t) level; } e[RING];
} T;

static struct {
  int               state, set, rest;
  uint32_t          windows;        /* in the current state (or step) */
  ca_rocs_cand_t    stack[STACK];
  uint32_t          nstack, in;     /* runs in the stack; the top `in` are in the buffer */
  uint32_t          tail;           /* the runs from here up to the stack's end were re-dealt (guard) */
  ca_rocs_search_t  search;
  ca_rocs_phase_t   phase;
  _Atomic(uint64_t) progress;       /* chromalloc_progress units */
  uint64_t          progress_at, cpu_at;
  bool              reserved;
  bool              l3;             /* runs reused through the L3 are candidates (rocs_l3, decided) */
  /* statistics */
  uint64_t          samples[5], profiles, searches, unscored, phases, rechecks, moved_in, moved_out, move_failures, gone, guarded, redealt, spared;
  double            held;           /* the settled k's last score, when its phase looked over */
  double            zero;           /* the recheck's k = 0 score, when held did not beat it */
  bool              back;           /* the recheck scores the settled k again beside it */
  uint32_t          chosen, history_n;
  struct { uint32_t k; double progress, stall, lap; } history[HISTORY];   /* per configuration scored */
  double            last_progress, last_stall, last_lap;
  uint32_t          laps;           /* lap pages chosen for the search */
  uint32_t          idle;           /* profiles in a row that found nothing to do (at most IDLE_MAX) */
  bool              by_progress;
  ca_rocs_run_t     before[PROFILE_RUNS];   /* the address-space profile the last search began with */
  uint32_t          nbefore, covered;    /* ... and the percent of runs profiled enough then */
} R;

bool   _ca_rocs_on(void) { return opt[R_OPT_ON] != 0; }
int    _ca_rocs_buffer_set(void) { return R.set; }
bool   _ca_rocs_l3(void) { return R.l3; }
size_t _ca_rocs_min_pages(void) { return (size_t)opt[R_OPT_MIN] * 1024 / CA_OS_PAGE; }
uint32_t _ca_rocs_apart(void) { return 1u << R.idle; }

/* ---- the pure pieces (rocs.h) ------------------------------------------------------------------ */

uint32_t _ca_rocs_key(const ca_rocs_page_t* p, bool l3) {
  if (p->n < CA_ROCS_MIN_SAMPLES) return 0;
  uint32_t mem = (uint32_t)p->mem * 255 / p->n, beyond = (uint32_t)p->l3 * 255 / p->n;
  /* with the L3's pages in, what counts is how often the lines were gone from the L2: the
     L3/memory line is the noisier one (the L3's reading moves with the other tenants), and a
     victim reused from the L2 between its L3 reloads must not rank above the stream */
  if (l3) return 2u * p->l3 >= p->n || 4u * p->mem >= p->n ? 65536 + beyond * 256 + mem : 0;
  return 4u * p->mem >= p->n ? 65536 + mem * 256 + beyond : 0;
}

void _ca_rocs_search_begin(ca_rocs_search_t* s, uint32_t size, uint32_t steps, double margin) {
  *s = (ca_rocs_search_t){ .size = size, .step = steps ? (size + steps - 1) / steps : size, .margin = margin };
  if (s->step == 0) s->step = 1;
  s->done = size == 0;
}

static bool beats(double a, double b, double margin) { return a - b >= (b < 0 ? -b : b) * margin; }

/* the sweep's best step not confirmed yet that beat k = 0 by the margin (false: none, or enough
   were tried) */
static bool next_best(ca_rocs_search_t* s) {
  for (uint32_t i = 0; i < s->swept; i++)
    if (s->swept_k[i] == s->best_k) s->swept_k[i] = 0;      /* failed: no candidate again */
  if (++s->candidates >= CA_ROCS_CANDIDATES) return false;
  bool found = false;
  for (uint32_t i = 0; i < s->swept; i++)
    if (s->swept_k[i] != 0 && beats(s->swept_score[i], s->base, s->margin) && (!found || s->swept_score[i] > s->best)) {
      s->best = s->swept_score[i];
      s->best_k = s->swept_k[i];
      found = true;
    }
  return found;
}

/* Within the noise of the best, the largest k: a buffer gains as polluters go in and falls at
   once when the victim does, so of steps the scores cannot tell apart the largest confines the
   most stream (art4: 40 read 249 us of lap, 60 257; kept, 40's victim ran 12.2 ns, 60's 6.4-7.8).
   The noise is the two k = 0 scores' spread (none: the best itself), at most a quarter; the scan
   stops where a step falls a third below k = 0 (the victim's cliff). */
static void prefer_larger(ca_rocs_search_t* s) {
  double tol = s->noise < 0.25 ? s->noise : 0.25, best = s->best;
  uint32_t from = s->best_k;
  if (tol <= 0) return;
  for (uint32_t i = 0; i < s->swept; i++) {
    double x = s->swept_score[i];
    if (s->swept_k[i] <= from) continue;
    if (beats(s->base, x, 1.0 / 3)) break;
    if (best - x <= (best < 0 ? -best : best) * tol) s->best_k = s->swept_k[i];
  }
}

uint32_t _ca_rocs_search_next(ca_rocs_search_t* s, double score) {
  if (s->done) return s->best_k;
  if (s->confirm > 0) {                 /* the best (odd scores) and k = 0 (even) in turn */
    uint32_t i = s->confirm++;
    bool holds = i == 1 || (i % 2 ? beats(score, s->pair[i - 2], s->margin) : beats(s->pair[i - 2], score, s->margin));
    if (i < 4) s->pair[i - 1] = score;
    if (!holds && s->rounds++ == 0) { s->confirm = 1; return s->k = s->best_k; }   /* one round more */
    if (holds && i < 4) return s->k = i % 2 ? 0 : s->best_k;
    if (!holds && next_best(s)) { s->confirm = 1; s->rounds = 0; return s->k = s->best_k; }
    s->done = true;
    return s->k = s->best_k = holds ? s->best_k : 0;
  }
  if (s->steps++ == 0) { s->base = score; return 0; }       /* k = 0 twice: every step is judged by it */
  bool again = s->again;
  s->again = false;
  if (s->steps == 2) {
    double a = s->base < 0 ? -s->base : s->base, b = score < 0 ? -score : score;
    s->noise = a + b > 0 ? 2 * (a > b ? a - b : b - a) / (a + b) : 0;
    s->base = s->best = (s->base + score) / 2;
    s->best_k = 0;
  }
  else {
    if (again) score = (score + s->swept_score[--s->swept]) / 2;   /* a step that fell, scored twice */
    if (s->swept < CA_ROCS_STEPS_MAX) { s->swept_k[s->swept] = s->k; s->swept_score[s->swept++] = score; }
    if (score > s->best) { s->best = score; s->best_k = s->k; }
  }
  bool fallen = s->best_k != 0 && beats(s->best, s->base, s->margin) && beats(s->base, score, 1.0 / 3);
  if (fallen && !again && s->k < s->size) { s->again = true; return s->k; }   /* the last ends it anyway */
  if (s->k < s->size && !fallen) {
    s->k = s->size - s->k > s->step ? s->k + s->step : s->size;
    return s->k;
  }
  if (s->best_k != 0 && !beats(s->best, s->base, s->margin)) s->best_k = 0;
  if (s->best_k != 0) prefer_larger(s);
  s->confirm = s->best_k != 0;
  s->done = !s->confirm;
  return s->k = s->best_k;
}

bool _ca_rocs_phase(ca_rocs_phase_t* p, double score, double tol, uint32_t lasting) {
  if (p->n < 3) {
    p->first[p->n++] = score;
    if (p->n < 3) return false;
    double a = p->first[0], b = p->first[1], c = p->first[2];
    p->ref = a < b ? (b < c ? b : a < c ? c : a) : (a < c ? a : b < c ? c : b);
    return false;
  }
  double a = p->ref < 0 ? -p->ref : p->ref, b = score < 0 ? -score : score;
  bool off = a > 0 && (b > a * (1 + tol) || b * (1 + tol) < a);
  p->off = off ? p->off + 1 : 0;
  if (p->off < lasting) return false;
  p->off = 0;
  return true;
}

/* ---- the fault handler's side ------------------------------------------------------------------- */

static bool test_no_laps;                                  /* tests: a program without lap pages */
#ifdef CA_TEST_HOOKS
static int (*test_level)(uintptr_t page);                  /* tests script the level */
void     _ca_rocs_test_level(int (*fn)(uintptr_t page)) { test_level = fn; }
uint32_t _ca_rocs_test_in(void) { return R.in; }
bool     _ca_rocs_test_profiling(void) { return R.state == ST_PROFILE; }
bool     _ca_rocs_test_rechecking(void) { return R.state == ST_RECHECK; }
bool     _ca_rocs_test_referenced(void) { return R.state == ST_SETTLED && R.phase.n >= 3; }
void     _ca_rocs_test_no_laps(bool on) { test_no_laps = on; }
#endif

static void reloaded(uintptr_t addr) {
  if (R.state == ST_OFF) return;
  uint32_t ticks = 0;
  int level = _ca_monitor_reload((const void*)(addr & ~(uintptr_t)(CA_OS_PAGE - 1)), (unsigned)(addr >> 6), &ticks);
#ifdef CA_TEST_HOOKS
  if (test_level != NULL) level = test_level(addr & ~(uintptr_t)(CA_OS_PAGE - 1));
#endif
  if (level == 0) return;
  uint64_t i = atomic_fetch_add_explicit(&T.head, 1, ca_relaxed) % RING;
  atomic_store_explicit(&T.e[i].ticks, ticks, ca_relaxed);
  atomic_store_explicit(&T.e[i].level, level, ca_relaxed);
  atomic_store_explicit(&T.e[i].page, addr & ~(uintptr_t)(CA_OS_PAGE - 1), ca_release);
}

static void drain(void) {
  static ca_rocs_sample_t batch[RING];
  uint64_t head = atomic_load_explicit(&T.head, ca_acquire);
  if (head - T.tail > RING) { T.lost += head - T.tail - RING; T.tail = head - RING; }
  size_t n = 0;
  for (; T.tail < head; T.tail++) {
    uint64_t i = T.tail % RING;
    uintptr_t p = atomic_exchange_explicit(&T.e[i].page, 0, ca_acquire);
    if (p == 0) continue;                                        /* a trap under way: lost */
    batch[n].page = p;
    batch[n].ticks = atomic_load_explicit(&T.e[i].ticks, ca_relaxed);
    batch[n].level = atomic_load_explicit(&T.e[i].level, ca_relaxed);
    R.samples[batch[n].level]++;
    n++;
  }
  _ca_hot_rocs_notes(batch, n);
}

/* ---- the worker's side ---------------------------------------------------------------------------- */

static uint64_t clock_of(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* the program's CPU time: the process's but this thread's (the colour worker: its stocking and
   moves would count against the configuration being scored) */
static uint64_t cpu_ns(void) { return clock_of(CLOCK_PROCESS_CPUTIME_ID) - clock_of(CLOCK_THREAD_CPUTIME_ID); }

/* the configuration measured since the last call: progress per CPU second, or the lap time;
   both and the mean reload time kept for the report (how well the stand-ins track the
   program's own measure).  False when the lap pages were not touched: a 0 would read as the
   best score of all (art4 under a stand-in confined the victim with the stream that way) */
static bool score(double* out) {
  double sum;
  uint32_t pages;
  _ca_hot_rocs_step(&sum, &pages);
  uint64_t waited;
  uint32_t trapped;
  _ca_hot_rocs_lap(&waited, &trapped);
  uint64_t units = atomic_load_explicit(&R.progress, ca_relaxed), cpu = cpu_ns();
  R.by_progress = units != 0;
  R.last_progress = cpu > R.cpu_at ? (double)(units - R.progress_at) * 1e9 / (double)(cpu - R.cpu_at) : 0;
  R.last_stall = pages ? sum / pages : 0;
  R.last_lap = trapped ? (double)waited / trapped / 1000 : 0;
  R.progress_at = units;
  R.cpu_at = cpu;
  *out = R.by_progress ? R.last_progress : -R.last_lap;
  return R.by_progress || trapped > 0;
}

static void note(uint32_t k) {
  if (R.history_n < HISTORY) R.history[R.history_n++] = (typeof(R.history[0])){ k, R.last_progress, R.last_stall, R.last_lap };
}

/* the top k of the stack in the buffer, within the budget; true when there */
static bool place(uint32_t k) {
  uint32_t budget = (uint32_t)opt[R_OPT_BUDGET];
  while (R.in != k && budget > 0) {
    bool in = R.in < k;
    ca_rocs_cand_t* c = &R.stack[in ? R.in : R.in - 1];
    for (; c->done < c->pages && budget > 0; c->done++, budget--) {
      int r = _ca_hot_rocs_move(c->page + (size_t)(in ? c->done : c->pages - 1 - c->done) * CA_OS_PAGE, in ? R.set : R.rest,
                                in ? CA_ROCS_IN : CA_ROCS_OUT);
      if (r == 0) {                                              /* no frame yet: more stock, and later */
        R.move_failures++;
        _ca_colour_prepare(in ? R.set : R.rest, (size_t)(c->pages - c->done) * (k > R.in ? k - R.in : R.in - k), 0);
        return false;
      }
      if (r > 0) { if (in) R.moved_in++; else R.moved_out++; } else if (r == -2) R.spared++; else if (r == -1) R.gone++;
    }
    if (c->done < c->pages) break;
    c->done = 0;
    R.in = in ? R.in + 1 : R.in - 1;
  }
  return R.in == k;
}

/* While anything is in the buffer, the pages of the same objects whose data is reused through
   the caches (the victim beside the stream in one allocation) move to the other colours, once
   each: 1 in 16 of them lay in the buffer's colours and were evicted by what is confined there
   (the victim's chase read 17-21 ns with the stream confined by hand, against 4 without it).
   Those evicted read from the L3, so reuse through the L3 counts too, after the L2's.  At most
   twice the L2's pages in all: more cannot be reused through it.  Once settled, the pages of
   the runs left out follow, from the stack's bottom (the victim's side): a victim page in the
   buffer's colours is evicted there and reads from the L3 like the stream, so it is no
   "reused" page, and stays slow (after a process that had confined 4 MiB to one colour, the
   next process's art4 had 47-103 of its 169 reused pages there).  True when it moved any: the
   step's measure starts again (bounded: each page once). */
static bool guard(void) {
  static uint8_t* pages[512];
  size_t cap = 2 * _ca_machine_l2() / CA_OS_PAGE;
  uint32_t max = (uint32_t)(opt[R_OPT_BUDGET] < 512 ? opt[R_OPT_BUDGET] : 512);
  if (R.in == 0 || R.guarded >= cap) return false;
  uint32_t n = _ca_hot_rocs_reused(pages, max);
  bool tail = n == 0 && R.state == ST_SETTLED && R.tail > R.chosen;   /* settled: R.in == R.chosen */
  for (uint32_t p = 0; tail && p < R.stack[R.tail - 1].pages && n < max; p++)    /* a run a window */
    pages[n++] = R.stack[R.tail - 1].page + (size_t)p * CA_OS_PAGE;
  bool any = false;
  uint32_t i = 0;
  for (; i < n && R.guarded < cap; i++) {
    int r = _ca_hot_rocs_move(pages[i], R.rest, CA_ROCS_AWAY);
    if (r == 0) { R.move_failures++; _ca_colour_prepare(R.rest, n - i, 0); break; }
    if (r > 0) { R.guarded++; R.redealt += tail; any = true; }
  }
  if (tail && i == n) R.tail--;
  return any;
}

static size_t l3_bytes(void) {
  for (uint32_t i = 0; i < _ca_machine.nlevels; i++)
    if (_ca_machine.levels[i].level == 3) return _ca_machine.levels[i].size;
  return 0;
}

static bool buffer_sets(void) {
  if (R.set > 0) return true;
  uint32_t den = (uint32_t)opt[R_OPT_BUFFER];
  R.set = _ca_colour_set(0, 1, den);
  R.rest = _ca_colour_set(1, den, den);
  if (R.set <= 0 || R.rest <= 0) { R.set = 0; return false; }
  R.reserved = _ca_colour_reserve(R.set) == 0;   /* EBUSY: NightWatch's first 1/8 is, which holds it */
  return true;
}

/* the configuration the current state scores */
static uint32_t scored_k(void) {
  return R.state == ST_SEARCH ? R.search.k : R.state == ST_SETTLED ? R.chosen : R.state == ST_RECHECK && R.back ? R.chosen : 0;
}

/* k in place before its measure starts: a window that moves pages (into or out of the buffer,
   or guard's) starts the measure again after its moves.  Measured from the window before, a
   step's first window of four ran the previous configuration: after the all-in step (art4's
   victim confined, laps 2-3x) the best read 1.2-1.6x its sweep score, and lost its confirmation */
static bool ready(uint32_t k) {
  bool moving = R.in != k;
  if (place(k) && !moving && !guard()) return true;
  (void)score(&(double){0});
  R.windows = 0;
  return false;
}

static void window(void) {
  switch (R.state) {
  case ST_PROFILE:
    if (!place(0)) { R.windows = 0; return; }                  /* a new phase: the buffer emptied first */
    if (R.windows < (uint32_t)opt[R_OPT_PROFILE]) return;
    {
      uint32_t covered, runs;
      R.l3 = opt[R_OPT_L3] != L3_NEVER;
      R.nstack = _ca_hot_rocs_candidates(R.stack, STACK, R.l3, &covered, &runs);
      if (opt[R_OPT_L3] == L3_AUTO) {
        size_t bytes = 0;
        for (uint32_t i = 0; i < R.nstack; i++) bytes += (size_t)R.stack[i].pages * CA_OS_PAGE;
        R.l3 = _ca_rocs_l3_fits(bytes, l3_bytes(), (uint32_t)opt[R_OPT_BUFFER]);
        if (!R.l3) R.nstack = _ca_hot_rocs_candidates(R.stack, STACK, false, &covered, &runs);
      }
      /* the windows go round the heap a few lanes at a time: a big object takes a while to be
         covered (nine runs in ten profiled, or ten times rocs_profile windows at most) */
      if (covered * 10 < runs * 9 && R.windows < 10 * (uint32_t)opt[R_OPT_PROFILE]) return;
      R.covered = runs ? covered * 100 / runs : 0;
    }
    R.profiles++;
    R.tail = R.nstack;
    R.windows = 0;
    /* nothing to confine, or no way to score it: profile on, with fewer windows (their traps
       are a cost for nothing: the 4 MiB reuse adversary read 0.98x without a stack) */
    if (R.nstack == 0) { R.idle += R.idle < IDLE_MAX; return; }
    R.laps = test_no_laps ? 0 : _ca_hot_rocs_laps();
    /* no score that follows the program's speed: no search (the mean reload time ranked a sweep's
       configurations at -0.4 to 0.5 against the program's progress; scored by it, the search
       chose at random and paid for its moves: a 64 MiB random chase ran 7% slower) */
    if (opt[R_OPT_FIXED] < 0 && R.laps == 0 && atomic_load_explicit(&R.progress, ca_relaxed) == 0) {
      R.unscored++;
      R.idle += R.idle < IDLE_MAX;
      return;
    }
    if (!buffer_sets()) return;
    R.idle = 0;
    R.nbefore = _ca_hot_rocs_profile(R.before, PROFILE_RUNS);
    R.history_n = 0;
    (void)score(&(double){0});                                 /* the first configuration's measure starts */
    if (opt[R_OPT_FIXED] >= 0) {                               /* a point of a sweep: no search, no phases */
      R.chosen = (uint32_t)((uint64_t)R.nstack * (uint64_t)opt[R_OPT_FIXED] / 100);
      R.state = ST_SETTLED;
    } else {
      _ca_rocs_search_begin(&R.search, R.nstack, (uint32_t)opt[R_OPT_STEPS], (double)opt[R_OPT_MARGIN] / 100);
      R.searches++;
      R.state = ST_SEARCH;
    }
    {   /* the buffer's pool kept at a step's frames (the stock for the next, while one is scored) */
      size_t pages = 8;
      for (uint32_t i = 0; i < R.nstack && i < (R.state == ST_SETTLED ? R.chosen : R.search.step); i++) pages += R.stack[i].pages;
      _ca_colour_prepare(R.set, pages, 0);
    }
    return;
  case ST_SEARCH:
    if (!ready(R.search.k)) return;
    if (R.windows < (uint32_t)opt[R_OPT_STEP]) return;
    {
      double s;
      R.windows = 0;
      if (!score(&s)) return;                                  /* nothing measured: measure again */
      note(R.search.k);
      uint32_t k = _ca_rocs_search_next(&R.search, s);
      if (R.search.done) {
        R.chosen = k;
        R.phase = (ca_rocs_phase_t){ 0 };
        R.state = ST_SETTLED;
        /* nothing kept: windows 4 periods apart, as for a profile that found nothing (every
           period, their traps cost the 8 MiB reuse adversary 1.1% by hot's estimate) */
        R.idle = k == 0 ? IDLE_MAX : 0;
      }
    }
    return;
  case ST_SETTLED:
    if (!ready(R.chosen)) return;
    if (R.windows < (uint32_t)opt[R_OPT_STEP]) return;
    R.windows = 0;
    if (!score(&R.held)) return;
    note(R.chosen);
    if (opt[R_OPT_FIXED] >= 0 || !_ca_rocs_phase(&R.phase, R.held, 1.0 / 3, 3)) return;
    /* a buffer in use is checked against k = 0 first: the host's slowdowns of a second or more
       move every score alike and read as a phase (art4 emptied a buffer that held its victim's
       gain so) */
    R.state = R.chosen != 0 ? ST_RECHECK : ST_PROFILE;
    R.phases += R.state == ST_PROFILE;
    R.back = false;
    return;
  case ST_RECHECK:
    if (!ready(R.back ? R.chosen : 0)) return;
    if (R.windows < (uint32_t)opt[R_OPT_STEP]) return;
    R.windows = 0;
    {
      double s, margin = (double)opt[R_OPT_MARGIN] / 100;
      if (!score(&s)) return;
      note(R.back ? R.chosen : 0);
      /* the score that looked off was one moment's: unless it beats k = 0, the settled k is
         scored again right after k = 0, and judged beside it (4 of 10 art4 processes emptied a
         buffer that held the victim's gain, on the Intel Xeon in a loud hour) */
      bool holds = R.back ? beats(s, R.zero, margin) : beats(R.held, s, margin);
      if (!holds && !R.back) { R.zero = s; R.back = true; return; }
      R.back = false;
      if (holds) {                                             /* it still holds: in, a new reference */
        R.rechecks++;
        R.phase = (ca_rocs_phase_t){ 0 };
        R.state = ST_SETTLED;
        return;
      }
    }
    R.phases++;
    R.chosen = 0;                                              /* the buffer is empty: profile anew */
    R.state = ST_PROFILE;
    return;
  }
}

void _ca_rocs_window(bool sampled) {
  if (R.state == ST_OFF) return;
  drain();
  R.windows += sampled || R.state != ST_PROFILE;
  int state = R.state;
  uint32_t k = scored_k();
  window();
  if (R.state != ST_PROFILE && (R.state != state || scored_k() != k)) (void)ready(scored_k());   /* the next one's moves now */
}

/* ---- the program's progress (chromalloc.h) ------------------------------------------------------- */

void _ca_rocs_progress(unsigned long units) { atomic_fetch_add_explicit(&R.progress, units, ca_relaxed); }

/* ---- the layer -------------------------------------------------------------------------------------- */

static void init(void) {
  if (!opt[R_OPT_ON] || _ca_colour_opt(CA_COPT_COLOURS) == 0) return;
  R.state = ST_PROFILE;
  _ca_access_on_touch(reloaded);
}

/* a fork child's pages are copies whose frames it gets at its first writes: what the parent
   confined is not confined here, and its reloads under way are the parent's */
static void fork_child(void) {
  if (R.state == ST_OFF) return;
  R.in = R.chosen = 0;
  R.windows = 0;
  R.back = false;
  for (uint32_t i = 0; i < R.nstack; i++) R.stack[i].done = 0;
  R.state = ST_PROFILE;
  T.tail = atomic_load_explicit(&T.head, ca_relaxed);
  atomic_store_explicit(&R.progress, 0, ca_relaxed);
  R.progress_at = R.cpu_at = 0;
}

static void stats(ca_buf_t* b) {
  ca_buf_str(b, "{\"state\":\"");
  ca_buf_str(b, state_words[R.state]);
  ca_buf_str(b, "\",\"objective\":\"");
  ca_buf_str(b, R.by_progress ? "progress" : R.laps ? "lap time" : "none");
  ca_buf_str(b, "\",\"reserved\":");
  ca_buf_str(b, R.reserved ? "true" : "false");
  ca_buf_field_u64(b, "buffer_colours", R.set > 0 ? (uint64_t)__builtin_popcountll(_ca_colour_known_mask()) / (uint64_t)opt[R_OPT_BUFFER] : 0);
  ca_buf_field_u64(b, "reloads_l2", R.samples[2]);
  ca_buf_field_u64(b, "reloads_beyond_l2", R.samples[3]);
  ca_buf_field_u64(b, "reloads_memory", R.samples[4]);
  ca_buf_field_u64(b, "reloads_lost", T.lost);
  ca_buf_field_u64(b, "profiles", R.profiles);
  ca_buf_field_u64(b, "profiled_pct", R.covered);
  ca_buf_field_u64(b, "stack_runs", R.nstack);
  ca_buf_field_u64(b, "searches", R.searches);
  ca_buf_field_u64(b, "searches_unscored", R.unscored);
  ca_buf_field_u64(b, "windows_apart", _ca_rocs_apart());
  ca_buf_field_u64(b, "chosen_runs", R.chosen);
  ca_buf_field_u64(b, "runs_in_buffer", R.in);
  ca_buf_field_u64(b, "moved_in", R.moved_in);
  ca_buf_field_u64(b, "moved_out", R.moved_out);
  ca_buf_field_u64(b, "move_failures", R.move_failures);
  ca_buf_field_u64(b, "pages_gone", R.gone);
  ca_buf_field_u64(b, "reused_moved_out", R.guarded);
  ca_buf_field_u64(b, "left_out_moved", R.redealt);
  ca_buf_field_u64(b, "reused_spared", R.spared);
  ca_buf_field_u64(b, "phase_changes", R.phases);
  ca_buf_field_u64(b, "phase_rechecks", R.rechecks);
  ca_buf_field_u64(b, "lap_pages", R.laps);
  /* the address-space profile, [object, % from memory, % beyond the L2, in the buffer] per run:
     as the last search began, and now */
  ca_rocs_run_t now[PROFILE_RUNS];
  uint32_t nnow = _ca_hot_rocs_profile(now, PROFILE_RUNS);
  for (int k = 0; k < 2; k++) {
    const ca_rocs_run_t* v = k ? now : R.before;
    ca_buf_str(b, k ? "],\"profile_now\":[" : ",\"profile_before\":[");
    for (uint32_t i = 0, n = k ? nnow : R.nbefore; i < n; i++) {
      ca_buf_str(b, i ? ",[" : "[");
      ca_buf_u64(b, v[i].object); ca_buf_char(b, ',');
      ca_buf_u64(b, v[i].mem); ca_buf_char(b, ',');
      ca_buf_u64(b, v[i].beyond); ca_buf_char(b, ',');
      ca_buf_u64(b, v[i].in); ca_buf_char(b, ']');
    }
  }
  ca_buf_char(b, ']');
  /* [runs in the buffer, progress per CPU second (0: no progress calls), mean reload ticks, lap µs] */
  ca_buf_str(b, ",\"scores\":[");
  for (uint32_t i = 0; i < R.history_n; i++) {
    ca_buf_str(b, i ? ",[" : "[");
    ca_buf_u64(b, R.history[i].k);
    ca_buf_char(b, ',');
    ca_buf_fixed(b, (int64_t)(R.history[i].progress * 1000), 3);
    ca_buf_char(b, ',');
    ca_buf_fixed(b, (int64_t)(R.history[i].stall * 1000), 3);
    ca_buf_char(b, ',');
    ca_buf_fixed(b, (int64_t)(R.history[i].lap * 1000), 3);
    ca_buf_char(b, ']');
  }
  ca_buf_str(b, "]}");
}

const ca_layer_t _ca_layer_rocs = {
  .name = "rocs", .options = options, .values = opt, .noptions = R_OPT_COUNT, .init = init, .fork_child = fork_child,
  .stats = stats,
};
