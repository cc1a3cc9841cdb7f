/* ROCS (rocs.c, paper 004): a pollute buffer of the L2's colours for the pages of large objects
   whose reuse misses the L3 too, chosen by per-page profiles and an empirical search. */
#ifndef CA_ROCS_H
#define CA_ROCS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_rocs;

/* A page's profile, kept beside its heat in hot.c's arena: timed reloads at its traps by the
   level that served them (n in all, l3 from beyond the L2, mem from memory), halved together
   when n reaches CA_ROCS_DECAY (recent laps count most); `in`: in the pollute buffer (ROCS moved
   it there); `out`: moved to the other colours (out of the buffer's, once); sn/ssum: the reloads
   of the search step under way, for the stand-in objective. */
typedef struct ca_rocs_page_s { uint8_t n, l3, mem, in; uint16_t sn, out; uint32_t ssum; } ca_rocs_page_t;
#define CA_ROCS_DECAY 32
#define CA_ROCS_MIN_SAMPLES 3

static inline void _ca_rocs_note(ca_rocs_page_t* p, int level, uint32_t ticks) {
  if (p->n >= CA_ROCS_DECAY) { p->n /= 2; p->l3 /= 2; p->mem /= 2; }
  p->n++;
  p->l3 += level >= 3;
  p->mem += level >= 4;
  if (p->sn < UINT16_MAX) { p->sn++; p->ssum += ticks < 65536 ? ticks : 65535; }
}
/* The stack's order: pages whose reloads came from memory at least a quarter of the time, most
   often first; with `l3`, also those from beyond the L2 at least half the time, and then ordered
   by how often they came from beyond the L2; 0 = not a candidate (too few reloads, or reused
   through the L3 without `l3`: a slice of the L2's colours is a slice of the L3's sets too, and
   confined there its reuse would miss the L3). */
uint32_t _ca_rocs_key(const ca_rocs_page_t* p, bool l3);
/* rocs_l3=auto: the L3's pages are candidates when all the stack would confine (`bytes`) fits in
   half the buffer's share of the L3 (a slice of the L2's colours is as large a slice of the L3's
   sets): confined there, their reuse still hits the L3.  A 4 MiB stream beside a 260 MiB L3
   does (confined by hand, the victim beside it ran 1.67x the laps); beside a 32 MiB one it does
   not (17-21% fewer laps: the stream then missed the L3 too). */
static inline bool _ca_rocs_l3_fits(size_t bytes, size_t l3, uint32_t buffer) {
  return bytes > 0 && buffer > 0 && bytes <= l3 / buffer / 2;
}

/* The search (the paper's Algorithm 1): the top k pages of a stack of `size` go to the buffer,
   k = 0 (scored twice, their mean: a lucky first score alone left art4's sweep nothing to keep),
   step, 2 step ... size, each configuration scored (higher is better) by the caller, until
   one scores a third below both k = 0 and a best that beat k = 0 (the stack's tail is the victim
   beside the stream: art4's victim, confined, doubled the lap time; below the best alone was one
   slow reading as often: art4 ended a sweep at 30 of 75 runs after a lucky 10, and kept 10),
   in the mean of two scores (one slow reading, 554 us of lap against k = 0's 362, ended a sweep
   at 36 of 72 runs).
   A best that beats k = 0 by `margin` (a fraction) gives way to the largest k after it, before
   a fall, that reads within the noise of it (k = 0's two scores' spread, at most a quarter): the
   scores cannot tell those apart, and the largest confines the most polluters.  That one is
   then confirmed in pairs taken next to each
   other: best, k = 0, best, k = 0, and kept only if each of its two scores beats the k = 0 scores
   beside it by the margin (the best of a sweep of noisy scores is the luckiest, and scores
   seconds apart move with the host: the lap stand-in's moved 20-25% at a fixed k; a trend alone
   cannot pass both sides).  A round that fails is run once more: one lucky k = 0 or one slow
   best spoils a round (art4 lost its gain so in 1 search of 8).  A best that fails both gives
   way to the sweep's next best that beat k = 0 by the margin, confirmed the same way (a lucky
   40 of 73 runs, 209 against 60's 259 and k = 0's 396 in microseconds of lap, failed and left
   art4's victim unprotected).  Else k = 0. */
#define CA_ROCS_STEPS_MAX 64        /* rocs_steps at most */
#define CA_ROCS_CANDIDATES 2        /* bests confirmed at most */
typedef struct ca_rocs_search_s {
  uint32_t size, step, k, best_k, steps;
  uint32_t confirm, rounds;         /* scores of the round taken (best, 0, best, 0); rounds failed */
  uint32_t swept, candidates;       /* steps of the sweep recorded; bests that failed */
  bool again;                       /* the step that fell is scored again */
  uint32_t swept_k[CA_ROCS_STEPS_MAX];
  double   swept_score[CA_ROCS_STEPS_MAX];
  double best, base, margin, noise, pair[3];   /* noise: k = 0's two scores apart (a fraction) */
  bool done;
} ca_rocs_search_t;
void     _ca_rocs_search_begin(ca_rocs_search_t* s, uint32_t size, uint32_t steps, double margin);
/* the score of the configuration measured (k = s->k); returns the k to set up next (s->done:
   the one chosen) */
uint32_t _ca_rocs_search_next(ca_rocs_search_t* s, double score);

/* A phase change: the score leaves [ref / (1 + tol), ref * (1 + tol)] for `lasting` scores in a
   row (negative scores, the stand-in's, by their magnitude).  The reference is the median of the
   first three scores once settled (n counts them; start from {0}): the search's best is the
   luckiest of its noisy scores, and against it the stand-in's ordinary ones looked off a third
   of the time (art4: the buffer emptied 1-2 times a process). */
typedef struct ca_rocs_phase_s { double ref; uint32_t off, n; double first[3]; } ca_rocs_phase_t;
bool     _ca_rocs_phase(ca_rocs_phase_t* p, double score, double tol, uint32_t lasting);

/* hot.c's side: the windows run for ROCS too, its traps reach rocs.c's handler hook, and after
   each window the worker hands over (no lock held) */
bool     _ca_rocs_on(void);
size_t   _ca_rocs_min_pages(void);          /* large objects of this many pages and more are profiled */
int      _ca_rocs_buffer_set(void);         /* the buffer's colour set (0: none yet) */
bool     _ca_rocs_l3(void);                 /* the L3's pages are candidates (rocs_l3, decided): a
                                               page is a polluter when its _ca_rocs_key says so */
void     _ca_rocs_progress(unsigned long units);   /* chromalloc_progress */
void     _ca_rocs_window(bool sampled);   /* a window closed (sampled: it armed lanes; the
                                               profile counts only those, so a window the
                                               sampling's budget left empty does not end it) */
uint32_t _ca_rocs_apart(void);              /* windows this many periods apart (profiles that
                                               found nothing to do: fewer windows, up to 4x) */
/* ... and hot.c gives it the pages: profiles noted (a batch of reloads), the candidates in
   profiled ranges (runs of _ca_rocs_run pages, their counts summed) with their key (and how many
   of all `runs` have CA_ROCS_MIN_SAMPLES reloads: `covered`), moves of a profiled page under
   hot.c's busy guard */
typedef struct ca_rocs_sample_s { uintptr_t page; uint32_t ticks; int32_t level; } ca_rocs_sample_t;
typedef struct ca_rocs_cand_s { uint8_t* page; uint32_t key, pages, done; } ca_rocs_cand_t;   /* a run; done: pages moved */
#define CA_ROCS_RUN 16              /* pages profiled and moved together at least (a window traps a few per lane) */
#define CA_ROCS_RUNS 256            /* runs of one object at most: a big one's runs are longer (a few
                                       thousand reloads in a profile must cover it) */
static inline uint32_t _ca_rocs_run(uint32_t pages) {
  uint32_t r = (pages + CA_ROCS_RUNS - 1) / CA_ROCS_RUNS;
  return r > CA_ROCS_RUN ? r : CA_ROCS_RUN;
}
void     _ca_hot_rocs_notes(const ca_rocs_sample_t* s, size_t n);
uint32_t _ca_hot_rocs_candidates(ca_rocs_cand_t* out, uint32_t max, bool l3, uint32_t* covered, uint32_t* runs);
void     _ca_hot_rocs_step(double* sum, uint32_t* pages);   /* mean ticks per page sampled in the step; reset */
/* lap pages: a few touched pages of the profiled objects, armed alone a few at a time between
   the windows; how long they waited to be touched (an untouched one: its time armed), summed,
   and how many were, since the last call */
uint32_t _ca_hot_rocs_laps(void);                 /* chosen anew: how many */
void     _ca_hot_rocs_lap(uint64_t* waited_ns, uint32_t* trapped);
enum { CA_ROCS_IN, CA_ROCS_OUT, CA_ROCS_AWAY };   /* into the buffer, back out, away from its colours */
int      _ca_hot_rocs_move(uint8_t* page, int set, int how);   /* 1 moved, 0 no frame, -1 gone, -2 spared
                                                                   (reused), -3 not in the buffer */
/* pages of profiled objects whose data is reused through the caches (not candidates by
   _ca_rocs_key: not the stack's), neither in the buffer nor moved out of its colours yet,
   those that hit the L2 first, then the L3's: the victims that share an object with what is
   confined (a victim page in the buffer's colours is evicted there, and reads from the L3) */
uint32_t _ca_hot_rocs_reused(uint8_t** out, uint32_t max);
/* the address-space profile for the report: the profiled objects' runs in address order, each
   with its percent of reloads from memory and from beyond the L2, and whether ROCS moved it */
typedef struct ca_rocs_run_s { uint8_t mem, beyond, in, object; } ca_rocs_run_t;
uint32_t _ca_hot_rocs_profile(ca_rocs_run_t* out, uint32_t max);
#pragma GCC visibility pop

#endif
