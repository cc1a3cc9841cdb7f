/* The colour layer's run-time state, shared by its files (and no one else's):

     sets.c    the registry of colour sets, the colour API's entry points, the core hooks that
               fill spans with pooled pages, reservation, fork
     start.c   the worker's start: the machine profile, or calibration (the colour count
               estimated from pages), made again after a failure for the moment
     stock.c   what the worker decides page by page: which colours to test, whether a moment is
               quiet, where a classified page goes, the slice audit, the pools' re-tests
     worker.c  the worker thread: stocking rounds, judgements of progress, back-off, its pace,
               protection's moves
     layer.c   the layer's options, start and statistics

   L (one per process) is read by every one of them; L.lock guards the sets, the pools and the
   map (the worker measures without it). */
#ifndef CA_COLOUR_LAYER_H
#define CA_COLOUR_LAYER_H

#include "colour.h"
#include <pthread.h>

#pragma GCC visibility push(hidden)

typedef struct ca_colour_set_s {
  bool          used;
  uint32_t      from, to, den;
  uint64_t      mask;            /* colours of the set, once their count is known */
  bool          by_elimination;  /* classified as "none of the other colours" */
  ca_page_pool_t pool;
  size_t        target;          /* pages to keep in stock */
  uint64_t      fallback_spans, filled_spans, dropped_pages;
  ca_audit_group_t audit;        /* a small slice's group (audit.c), out of the pool; the worker's */
  bool          unvouched;       /* a small slice whose group has not vouched for its pool yet:
                                    none of its pages is handed out (L.lock) */
} ca_colour_set_t;

typedef struct ca_colour_layer_s {
  _Atomic(int)      state;       /* ca_colour_state_t */
  ca_lock_t         lock;        /* sets, pools, map (the worker measures without it) */
  ca_colour_set_t   sets[CA_COLOUR_SETS + 1];
  ca_calibration_t  cal;
  bool              cal_from_profile;
  ca_timing_probe_t probe;
  ca_colour_map_t   map;
  ca_page_source_t  src;         /* pages for eviction sets and references (none: the map's
                                    sets are the set file's) */
  ca_setfile_t      file;        /* the set file the map's sets live in (loaded, or ours) */
  uint32_t          sets_origin; /* SETS_NONE, SETS_FILE (loaded), SETS_BUILT (found here) */
  uint32_t          file_checks, file_stale;   /* set files checked; found not to hold */
  uint32_t          published;   /* set files this process wrote */
  uint32_t          file_extended, file_adopted;   /* sets it added to the file; sets it took
                                                      from the file that another added meanwhile */
  pthread_t         worker;
  bool              worker_running;
  int               worker_cpu;  /* where it measures (-1: not yet) */
  clockid_t         worker_clock;    /* its CPU-time clock, read while it lives, */
  _Atomic(bool)     worker_alive;
  uint64_t          worker_cpu_ns;   /* ... and its CPU time when it ended */
  uint32_t          generation;  /* sets registered so far: the worker plans again when it moves */
  bool              client_built;    /* every colour's set was sought for the client (spread.c) */
  pthread_mutex_t   wake_lock;
  pthread_cond_t    wake;
  uint64_t          classified, claimed, verify_drops, set_rebuilds, batches_dropped, backoffs;
  uint64_t          undecided;       /* pages the slice test could not tell (partly evicted) */
  uint64_t          frames_kept;     /* recoloured pages' old frames pooled (protection's moves) */
  uint64_t          audit_judged, audit_invalid, audit_strays;   /* the slice audit's groups */
  uint64_t          audit_pages, audit_turned_away;   /* pages it was asked about, */
  uint64_t          audit_loud, audit_loud_pages;     /* ... judgements and pages put off by controls */
  uint64_t          quiet_ns, classify_ns;
  uint64_t          unquiet_batches;  /* classified after waiting in vain for controls that pass */
  uint64_t          recolours, recolour_ns;
  uint64_t          start_ns, probe_ns, discover_ns, estimate_ns, ready_ns;  /* start-up phases */
  uint64_t          stocked_ns;      /* from start_ns until every set first had its stock (0: not yet) */
  uint64_t          born_ns;         /* the process started (the layer's init) */
  uint64_t          asked_ns;        /* when the first set was registered, since then */
  uint64_t          start_cpu_ns;    /* the worker's CPU time when the sets were ready, */
  uint64_t          stocked_cpu_ns;  /* ... and when the first stock was in */
  uint64_t          pace_from_ns, pace_cpu_ns;  /* when the worker's pace began, and its CPU time
                                        then (0: not yet; reset in a fork child) */
  uint64_t          pace_program_ns; /* ... and the program's CPU time then */
  uint64_t          paced_ns;        /* the worker's sleeps to keep within colour_worker */
  bool              niced;           /* the worker runs at nice 19 (after its start) */
  _Atomic(uint32_t) preparing;       /* threads in chromalloc_colours_prepare */
  uint32_t          estimated, estimate_chunks;  /* the colour count the pages gave; chunks used */
  uint32_t          probe_remeasured;            /* the probe measured again for a second estimate */
  ca_discovery_stats_t disc;         /* eviction-set searches, all of them */
  uint64_t          suspicions;      /* stretches judged bad (the second in a row drops the sets), */
  uint64_t          suspected_by[3]; /* ... by the judgement that said so: controls, starved, audit */
  bool              suspected;       /* the last judgement was bad */
  uint32_t          effect_pct;      /* what the sets read on their references now (controls), */
  uint32_t          effect_ring[8];  /* ... the median of the last eight readings */
  uint32_t          effect_next;
  uint32_t          start_failures;  /* starts that failed for the moment (retry_later), in all */
  uint32_t          failures_in_row; /* ... since the layer was last ready */
  uint32_t          retry_ms;        /* the first wait before starting again (doubles) */
#ifdef CA_TEST_HOOKS
  uint32_t          inject_failures; /* tests: starts to fail before measuring */
  uint32_t          inject_no_sets;  /* tests: starts whose first discovery finds no set */
  _Atomic(uint32_t) inject_drops;    /* tests: once ready, eviction sets to lose and not find */
#endif
  char              reason[160];
} ca_colour_layer_t;
extern ca_colour_layer_t _ca_cs;
#define L _ca_cs

#define STOCK_CHUNK 512                      /* pages per supply chunk (2 MiB) */
#define STOCK_MAX   (64 * 256)               /* pages: a set's stock grows to at most 64 MiB */
#define BATCH       32                       /* pages classified between two checks */
/* Batches per quiet-window check while every batch's sets held: the check re-measures four
   sets' effect (9 alternations each) and took 6.4 s of the worker's 7.4 s on a Zen 1 when made
   before every batch, for 18304 pages classified; a batch whose sets did not hold is followed
   by a check */
#define QUIET_EVERY 4

/* Protection's kept frames (_ca_colour_keep_frame) wait here for the pool's re-test (stock.c). */
#define KEPT_MAX 64                  /* a batch moves 8 pages */
typedef struct ca_kept_s {
  void*    page[KEPT_MAX];           /* old frames waiting for the test (L.lock), */
  uint8_t  set[KEPT_MAX];            /* ... the set each is for */
  uint32_t n;
  uint64_t rejected;                 /* frames the test did not place in their set */
} ca_kept_t;
extern ca_kept_t _ca_cs_kept;
#define K _ca_cs_kept

/* Failures the internal tests inject (test builds only: CA_TEST_HOOKS, tests.mk) */
#ifdef CA_TEST_HOOKS
#define CA_INJECTED(n)        ((n) > 0 ? ((n)--, true) : false)
#define CA_DROP_PENDING()     (atomic_load(&L.inject_drops) != 0)
#else
#define CA_INJECTED(n)        false
#define CA_DROP_PENDING()     false
#endif

/* What a stretch of stocking is for: the sets short of stock, the colours their pages are
   tested against, and whether a set takes pages of those colours or of none of them. */
typedef struct ca_plan_s {
  uint32_t n;
  uint8_t  id[CA_COLOUR_SETS];
  uint64_t mask[CA_COLOUR_SETS];
  bool     in[CA_COLOUR_SETS];
} ca_plan_t;

enum { SETS_NONE, SETS_FILE, SETS_BUILT };

/* sets.c */
void     _ca_cs_set_state(int s, const char* why);
/* start.c */
bool     _ca_cs_start(uint64_t* rng);
bool     _ca_cs_retry_later(const char* why);
void     _ca_cs_forget_sets(void);
void     _ca_cs_drop_sets(void);
void     _ca_cs_build_sets(uint32_t need, uint64_t* rng);   /* until `need` colours have sets */
/* stock.c */
uint32_t _ca_cs_audit_need(const ca_colour_set_t* s);
uint32_t _ca_cs_colours_needed(void);
bool     _ca_cs_quiet_window(void);
uint64_t _ca_cs_known_colours(void);
int      _ca_cs_member(void* page, uint64_t mask);           /* the slice test: 1, 0, -1 */
void     _ca_cs_plan(ca_plan_t* plan, uint32_t gen);
int      _ca_cs_classify(void* page, const ca_plan_t* plan, int* colour);
bool     _ca_cs_controls(uint64_t mask, uint32_t turn);
bool     _ca_cs_take(int id, void* page);
bool     _ca_cs_pools_short(uint32_t gen);
bool     _ca_cs_replan(uint32_t gen);
int      _ca_cs_audited(void* page, int c);
bool     _ca_cs_audit_groups(uint64_t* rng);
void     _ca_cs_verify_sample(uint64_t* rng);
void     _ca_cs_test_kept(void);
/* spread.c */
const ca_colour_client_t* _ca_cs_client(void);
/* sets.c */
void     _ca_cs_start_worker(void);
void     _ca_cs_ask(void);              /* the layer is wanted: calibrating */
bool     _ca_cs_client_waits(void);     /* a client alone, needing no colours yet */
bool     _ca_cs_client_wants(void);     /* a client wanting every colour's set now */
/* worker.c */
void*    _ca_cs_worker_main(void* arg);
void     _ca_cs_wake_worker(void);
void     _ca_cs_wait_wake(uint64_t ms);        /* wake_lock held */
bool     _ca_cs_pin_here(cpu_set_t* was);   /* held on a CPU other than the worker's, measuring */
uint64_t _ca_cs_worker_cpu_ns(void);

#pragma GCC visibility pop

#endif
