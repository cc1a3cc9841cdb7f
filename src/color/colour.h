/* The colour layer: which cache sets a page's lines go to, measured from user space, and pools
   of pages sorted by that.

   A *colour* of a physically indexed cache level is the group of sets that one 4 KiB page
   maps to: an 8-way 1 MiB L2 with 64-byte lines has 2048 sets = 32 groups of 64, so 32
   colours, and pages of different colours never compete for L2 space.  On bare metal a page's
   colour is a few bits of its physical address; in a VM whose host backs guest memory with
   4 KiB pages (the AMD guests here) neither virtual addresses, guest huge pages nor
   /proc/self/pagemap say anything about it.  What does work is timing (../shared/experiments/l2colour):

     probe.c      time a dependent chase over the 64 lines of a reference page R after touching
                  a group of other pages: a slow chase means the group evicted R from the level.
                  Everything above the probe sees only "does S evict R?", so tests replace it
                  with a simulated cache (tests/unit/test_colour.c).
     evset.c      reduce a large group that evicts R to a minimal eviction set of `ways` pages
                  (group testing, Vila et al. S&P'19).  The pages of a minimal set share R's
                  colour, so a set *is* a colour: a page is of colour c when set c evicts it.
     calibrate.c  decide how colours can be controlled here (address bits, pagemap frames or
                  timing; the first two are tried and verified by timing before being trusted),
                  find the thresholds, discover every colour of the level (and thereby how many
                  there are), measure cost and agreement; `chromalloc calibrate` prints this and
                  saves it as the machine profile (profile.c).
     setfile.c    the eviction sets in a file on tmpfs that every process of the user maps, so
                  that one process's sets serve all (and name the colours alike).
     frames.c     where frame numbers say the colour (pagemap as root, the host's frames), the
                  colour of each residue learned from the sets: a page's colour without a test.
     pool.c       pages classified by colour, kept in pools; handed to spans by moving them
                  (move.c: UFFDIO_MOVE or mremap keep the frame) and taken back when spans are
                  freed, so no frame whose colour was paid for is lost.
     stock.c      the slice test that classifies fresh pages (a union of two colours' sets at a
                  time), its batch controls, the pools' re-tests.
     worker.c     the background thread: starts the layer (start.c), stocks the pools, protects.
     recolour.c   move a live page to a frame of another colour (move.c).
     protect.c    keep registered live ranges out of a colour set (a polluter's slice): the
                  worker recolours their pages.
     sets.c       the public colour sets ("colours from/den to to/den of L2"), the flavours the
                  core allocates from, and the hooks that fill spans with pooled pages.

   Colour sets are slices of a level, never colour counts, so a policy written for "1/8 of the
   L2" works whether the level has 16 or 64 colours.  When colours cannot be controlled (no
   level measurable, timing too noisy, calibration failed), the layer says so once and every
   coloured request is served with ordinary memory. */
#ifndef CA_COLOUR_H
#define CA_COLOUR_H

#include "../core/hooks.h"

#pragma GCC visibility push(hidden)

/* ---- the layer's options (layer.c) ---------------------------------------------------------- */
typedef enum ca_colour_option_e {
  CA_COPT_COLOURS,        /* the colour layer: pages of chosen cache colours */
  CA_COPT_POOL,           /* MiB of classified pages kept in stock per colour set */
  CA_COPT_RESERVE,        /* a program's first allocation from a small end slice reserves it */
  CA_COPT_WORKER,         /* % of a CPU the colour worker may take once ready */
  CA_COPT_AUDIT,          /* small slices' pools judged by what their pages do to one another */
  CA_COPT_MOVES,          /* 0 = UFFDIO_MOVE where the kernel offers it, 1 = mremap only */
  CA_COPT_SHARE,          /* eviction sets shared with the user's other processes (setfile.c) */
  CA_COPT_COUNT
} ca_colour_option_t;
extern long _ca_colour_options[CA_COPT_COUNT];
static inline long _ca_colour_opt(ca_colour_option_t o) { return _ca_colour_options[o]; }
extern const ca_layer_t _ca_layer_colours;

#define CA_COLOURS_MAX    64      /* colours of one level we can tell apart (a 64-bit mask) */
#define CA_WAYS_MAX       32
#define CA_COLOUR_SETS    15      /* public colour sets (flavours 1..15) */
/* memory whose pages a client spreads evenly over every colour (lock sets): ordinary frames when
   handed out, told to the client (its `range`), which moves them; never from a pool */
#define CA_FLAVOUR_SPREAD (CA_COLOUR_SETS + 1)
#define CA_QUIET_MAX      24      /* quiet pages of the timing probe */

/* ---- the probe: does touching pages[0..n) evict page r from the level? ------------------- */
/* The steps of an eviction-set search (evset.c), for counting where searches fail: the whole
   candidate group does not evict r, the reduction finds no minimal set, or one of more than
   `ways` pages, the extension finds too few pages of r's colour, the full set does not evict r,
   or a member is not needed. */
enum { CA_SEARCH_WHOLE, CA_SEARCH_REDUCE, CA_SEARCH_LARGE, CA_SEARCH_EXTEND, CA_SEARCH_FULL, CA_SEARCH_NEEDED, CA_SEARCH_STAGES };

typedef struct ca_probe_s ca_probe_t;
struct ca_probe_s {
  bool (*evicts)(ca_probe_t* p, void* r, void* const* pages, size_t n);
  void (*prepare)(ca_probe_t* p, void* r);          /* make r a reference (may write to it) */
  /* optional: re-place the threshold from known eviction sets (refs[i] is evicted by the `ways`
     pages of sets[i]), which is what every later test looks like */
  void (*recalibrate)(ca_probe_t* p, void* const* refs, void* const (*sets)[CA_WAYS_MAX], size_t n, size_t ways);
  uint64_t tests;                                   /* number of evicts() calls */
  uint64_t plain_searches;                          /* eviction-set searches that asked plainly */
  uint32_t search_streak;                           /* ... and how they went (evset.c) */
  bool     search_plainly;
  uint32_t search_failed[CA_SEARCH_STAGES];         /* failed searches by the step that failed */
  /* optional: the stricter question "is most of r evicted?", which confirms a page's colour.
     A page can share part of its sets with another colour's pages (a Zen 5 L2: 1 page in 3
     read 60-75% of a full eviction against another colour's set); it must not join that
     colour's pool */
  bool (*evicts_fully)(ca_probe_t* p, void* r, void* const* pages, size_t n);
  /* optional: "does the group evict r clearly?", between the plain and the strict question:
     what an eviction-set search asks (evset.c), so that pages sharing only part of r's sets do
     not add up to an eviction */
  bool (*evicts_clearly)(ca_probe_t* p, void* r, void* const* pages, size_t n);
  /* optional: r's chase after the group, in % of a quiet chase (the median of `reps` tests), for
     callers that place their own thresholds (stocking, stock.c); without it they ask the
     questions above */
  uint32_t (*ratio)(ca_probe_t* p, void* r, void* const* pages, size_t n, int reps);
};

/* The timing probe of this machine (probe.c). */
typedef struct ca_timing_probe_s {
  ca_probe_t base;
  uint32_t   threshold;       /* ticks of a 64-line chase: above = evicted */
  uint32_t   hit_ticks;       /* median chase when r stays in the level */
  uint32_t   miss_ticks;      /* median chase after streaming twice the level's size */
  int        reps, passes;    /* passes: reads of a group per test (chosen on the first sets) */
  bool       passes_chosen;
  uint32_t   ratio_pct;       /* evicted: the chase is this % of the quiet chase measured with it */
  uint32_t   set_ratio_pct;   /* what eviction sets measured (0: not yet) */
  uint32_t   full_pct;        /* evicted fully: 4/5 of the way up to set_ratio_pct */
  uint32_t   clear_pct;       /* evicted clearly: 4/5 of the way up to the sets' or the stream's
                                 effect, at most CA_CLEAR_MARGIN above ratio_pct */
  uint32_t   last_ticks, last_quiet;   /* medians of the last test (diagnostics) */
  uint64_t   quiet_at;        /* ratio(): when the quiet chase was last measured (ticks), */
  uint32_t   quiet_median;    /* ... what it read */
  /* pages of random colours: touching them pushes R out of L1 (more of them than L1 has ways)
     but leaves it in the level, so a quiet chase is a chase from the level */
  void*      quiet[CA_QUIET_MAX];
  int        nquiet;
  uint8_t*   scratch;         /* R and the quiet pages (unmapped when measured again); zero it first */
  size_t     scratch_len;
} ca_timing_probe_t;

bool     _ca_probe_timing_init(ca_timing_probe_t* tp, size_t level_bytes, uint32_t l1_ways);
/* a described machine's simulated L2 (simcache.c), instead of timing */
bool     _ca_probe_sim_init(ca_timing_probe_t* tp);
void     _ca_sim_moved(const void* from, const void* to, size_t npages);   /* frames follow moved pages */
void     _ca_sim_fork(bool hold);    /* fork: its lock held across (a child inherited it held by the worker) */
/* page moves (move.c): 1 by UFFDIO_MOVE, 2 by mremap, 0 failed */
int      _ca_colour_move_page(void* from, void* to);                    /* a page and its frame, neither in use */
int      _ca_colour_move_live(void* page, void* fresh, void* slot, bool* parked);   /* a page in use */
bool     _ca_move_uffd(void);                                           /* moves by UFFDIO_MOVE here */
void     _ca_move_quiet_region(void* base, size_t len);                 /* the slot region: takes moved pages */
bool     _ca_move_fill_begin(void* base, size_t len);
void     _ca_move_fill_end(void* base, size_t len, bool registered);
void     _ca_move_fork_hold(void);                                      /* fork: wait for pages in flight, start none */
void     _ca_move_fork_release(void);
void     _ca_move_fork_child(void);                                     /* ... and the child opens its own userfaultfd */
void     _ca_move_stats_json(ca_buf_t* b);
int      _ca_sim_colour(const void* p);                                 /* -1: not simulated */
uint64_t _ca_sim_frame(const void* p);                                  /* 0: not simulated */
/* the probe of this machine: simulated when it is described, else timed */
static inline bool _ca_probe_init(ca_timing_probe_t* tp, size_t level_bytes, uint32_t l1_ways) {
  return _ca_machine.simulated ? _ca_probe_sim_init(tp) : _ca_probe_timing_init(tp, level_bytes, l1_ways);
}
uint64_t _ca_ticks(void);
double   _ca_ticks_per_us(void);

/* ---- eviction sets (evset.c) ----------------------------------------------------------------- */
int  _ca_evset_reduce(ca_probe_t* p, void* r, void** cand, int n, int ways, uint64_t* rng);

/* ---- colours of one level (calibrate.c) ------------------------------------------------------ */
typedef struct ca_colour_map_s {
  uint32_t ways;                               /* pages in a minimal eviction set */
  uint32_t ncolours;                           /* colours discovered so far */
  uint32_t epoch;                              /* counts renumberings (sets dropped or forgotten) */
  void*    ref[CA_COLOURS_MAX];                /* a page of each colour (a probe reference) */
  void*    set[CA_COLOURS_MAX][CA_WAYS_MAX];   /* its eviction set: `ways` pages of that colour */
} ca_colour_map_t;

/* pages to calibrate with; reserved = part of a set or a reference, never handed out.  While
   colours are discovered each page remembers its colour (-1: none of the first `tested`). */
typedef struct ca_page_source_s {
  uint8_t* base;
  void**   pages;
  uint8_t* reserved;
  int8_t*  colour;
  uint8_t* tested;
  size_t   npages;
  bool     trimmed;                            /* free pages given back (_ca_page_source_trim) */
  int      fd;                                 /* >= 0: pages of a set file (owned by it), */
  size_t   file_offset;                        /* ... starting at this offset in it */
} ca_page_source_t;

typedef struct ca_discovery_stats_s {
  uint64_t set_builds, set_failures, duplicates;   /* duplicates: sets dropped, duplicates or spanning colours */
  uint64_t set_build_ns, discover_ns;
} ca_discovery_stats_t;

bool     _ca_page_source_init(ca_page_source_t* src, size_t npages);
/* the pages of a set file; `keep`'s sets (of that file, may be NULL) reserved before any is touched */
bool     _ca_page_source_init_file(ca_page_source_t* src, uint8_t* pages, size_t npages, int fd, size_t offset,
                                   const ca_colour_map_t* keep);
void     _ca_page_source_reserve(ca_page_source_t* src, const ca_colour_map_t* map, uint32_t from);
void     _ca_page_source_free(ca_page_source_t* src);
void     _ca_page_source_trim(ca_page_source_t* src);
int      _ca_colour_classify(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask);
int      _ca_colour_find(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask);   /* stocking only */
/* the question a colour test asks the probe: evicts (plain), evicts_fully, evicts_clearly */
typedef enum { CA_ASK_PLAIN, CA_ASK_FULLY, CA_ASK_CLEARLY } ca_ask_t;
int      _ca_colour_classify_n(ca_probe_t* p, const ca_colour_map_t* map, void* page, uint64_t mask, int confirm, int need, ca_ask_t ask);
int      _ca_colour_of_live(ca_probe_t* p, const ca_colour_map_t* map, const void* page, uint64_t mask, int confirm, int need, ca_ask_t ask);
/* `need` of `confirm` tests ask `ask` and say yes, the first among them (calibrate.c) */
bool     _ca_evicts_confirmed(ca_probe_t* p, void* ref, void* const* set, size_t ways, int confirm, int need, ca_ask_t ask);

/* ---- the slice audit (audit.c): a small slice's pool judged by its own pages ------------- */
#define CA_AUDIT_MAX 256                       /* pages in a group at most */
#define CA_AUDIT_CONTROLS 16                   /* random pages read beside the members */
typedef struct ca_audit_group_s {
  void*    page[CA_AUDIT_MAX];                 /* out of every pool while in the group */
  uint32_t n;                                  /* members */
  bool     valid;                              /* judged: its members evict one another */
  void*    control[CA_AUDIT_CONTROLS];         /* random pages of no pool, the group's own */
  uint32_t ncontrols;
  uint32_t controls_left;                      /* bit i: the valid judgement left control i in the level */
  uint32_t next_control;                       /* the one the next admitted page is read beside */
} ca_audit_group_t;
typedef enum { CA_AUDIT_INVALID, CA_AUDIT_VALID, CA_AUDIT_LOUD } ca_audit_verdict_t;
bool     _ca_audit_evicts(ca_probe_t* p, void* const* g, size_t n, void* page, bool clearly);
int      _ca_audit_admits(ca_probe_t* p, ca_audit_group_t* g, void* page);
ca_audit_verdict_t _ca_audit_judge(ca_probe_t* p, ca_audit_group_t* g, uint32_t* nstrays);
uint32_t _ca_colour_discover(ca_probe_t* p, ca_colour_map_t* map, ca_page_source_t* src,
                             uint32_t want, uint32_t expected, uint64_t budget_ms, uint64_t* rng,
                             ca_discovery_stats_t* st);
bool     _ca_colour_try_address_bits(ca_probe_t* p, uint32_t ways, bool* backed);
bool     _ca_colour_try_pagemap(ca_probe_t* p, uint32_t ways, uint32_t colours, bool* readable);

/* ---- page pools (pool.c) -------------------------------------------------------------------- */
typedef struct ca_page_pool_s {
  void**   pages;                              /* pages of known colour, ready to move */
  size_t   count, cap;
  uint64_t handed, returned;                   /* pages moved into spans / taken back */
} ca_page_pool_t;

bool     _ca_pool_init(void);
uint8_t* _ca_pool_supply(size_t npages, bool* fresh);
void     _ca_pool_purge(void* const* pages, size_t n);      /* in address order */
bool     _ca_pool_push(ca_page_pool_t* p, void* page);
void*    _ca_pool_slot(void);
void     _ca_pool_unslot(void* slot);
void*    _ca_pool_pop(ca_page_pool_t* p);
void*    _ca_pool_pop_any(ca_page_pool_t* p, uint64_t* rng);   /* from anywhere in it */
bool     _ca_pool_fill(ca_page_pool_t* pool, uint8_t* base, size_t bytes);
void     _ca_pool_take_back(ca_page_pool_t* pool, uint8_t* base, size_t bytes);
void     _ca_pool_drop(void* page);
size_t   _ca_pool_moved(void);
void     _ca_pool_note_moved(size_t n);             /* recoloured pages: VMAs of their own for good */
size_t   _ca_pool_moved_limit(void);
bool     _ca_pool_moves_capped(size_t n);          /* n more mremap moves would pass the limit */

/* ---- the layer at run time (sets.c) and recolouring (recolour.c) ---------------------------- */
enum { CA_COLOURS_OFF, CA_COLOURS_CALIBRATING, CA_COLOURS_READY, CA_COLOURS_UNAVAILABLE };
int   _ca_colour_state(void);
int   _ca_colour_count(void);
int   _ca_colour_set(uint32_t from, uint32_t to, uint32_t den);
int   _ca_colour_prepare(int id, size_t pages, int timeout_ms);
int   _ca_colour_of(const void* p);
void* _ca_colour_take_page(int id);
void  _ca_colour_note_recolour(uint64_t ns, bool remapped);
void  _ca_colour_drop_slot(void* slot);        /* a parked frame released, the slot free */
void* _ca_colour_slot(void);                /* a parking address for a page whose frame is kept */
void  _ca_colour_keep_frame(int id, void* slot, bool test);   /* parked page -> set id's pool, re-tested first
                                                              if `test` (id 0: slot unused) */
void  _ca_colour_stats_json(ca_buf_t* b);
void  _ca_colour_fork_child(void);
void  _ca_colour_fork_parent(void);
#define CA_COLOUR_START_TRIES 6   /* failed starts in a row before the layer is unavailable */
/* failures injected by the internal tests (in test builds only: CA_TEST_HOOKS) */
void  _ca_colour_test_fail_starts(uint32_t n, uint32_t retry_ms);   /* before the first set */
void  _ca_colour_test_no_sets(uint32_t n, uint32_t retry_ms);       /* discovery finds none */
void  _ca_colour_test_drop_sets(uint32_t n);                       /* once ready */
long  _ca_recolour(void* p, size_t len, int id, int keep, bool test);
int   _ca_recolour_page(void* page, void* fresh, int keep, bool test);   /* onto fresh's frame: 1, 2 or 0 */   /* keep: set whose pool takes the old
                                                                        frames (0: none), re-tested if `test` */
void  _ca_colour_protect_default(void);
int   _ca_colour_reserve(int id);
void  _ca_colour_reserve_first(int id);    /* a coloured allocation from set id: maybe reserve it */
typedef enum { CA_STOCK_OK, CA_STOCK_SLOW, CA_STOCK_STARVED } ca_stock_progress_t;
ca_stock_progress_t _ca_colour_progress(size_t classified, size_t taken);   /* a stretch of stocking */
uint64_t _ca_colour_backoff(uint64_t ms, bool bad);   /* the worker's next sleep after a round */
uint64_t _ca_colour_pace_ns(uint64_t cpu_ns, uint64_t wall_ns, uint32_t pct);   /* colour_worker's sleep */
bool     _ca_colour_suspect(bool* suspected, bool bad, bool judged_ok);   /* drop the sets now? */

/* ---- single colours (spread.c): a policy spreading pages over every colour ------------------ */
typedef struct ca_colour_client_s {
  /* memory handed out / taken back: ordinary (flavour 0), or to be spread (CA_FLAVOUR_SPREAD) */
  void     (*range)(void* p, size_t n, bool added, uint32_t flavour);
  uint64_t (*work)(void);      /* on the worker once the layer is ready: ms until it wants it again */
  /* NULL, or false while the client needs no colours: the worker then calls work() without the
     layer (no calibration, no set file) until it says true or a set is registered */
  bool     (*wants)(void);
  uint64_t delay_ms;           /* the worker starts this long after the process at the earliest */
} ca_colour_client_t;
void     _ca_colour_client(const ca_colour_client_t* c);   /* one; every colour's set is wanted */
int      _ca_colour_page(const void* page);                /* the worker's: a live page's colour, -1 */
int      _ca_colour_move_to(void* page, uint64_t mask, uint32_t* tries);   /* the worker's: onto a frame
                                  of a colour in mask, classifying *tries fresh pages at most; that colour, or -1 */
uint64_t _ca_colour_known_mask(void);                       /* colours with an eviction set */
uint32_t _ca_colour_ways(void);
uint64_t _ca_colour_spares(void);                           /* colours with a classified page waiting */
/* partitions between processes sharing an L2 (partition.c) */
uint64_t _ca_colour_partition(uint32_t colours);            /* our colours (all when alone); refreshes */
uint32_t _ca_colour_partition_sharing(void);                /* processes sharing our L2 then, us too */
uint64_t _ca_colour_reserved_mask(void);                    /* colours protection keeps live memory out of */
void     _ca_colour_partition_leave(void);
void     _ca_colour_partition_fork_child(void);
void     _ca_colour_spread_stats_json(ca_buf_t* b);
void     _ca_colour_spread_fork_child(void);
/* colours from frame numbers (frames.c): -1 = unknown (time it); teach it what timing found */
int      _ca_frames_colour(const void* page);
void     _ca_frames_teach(const void* page, int colour);
void     _ca_frames_learn(void);                            /* the worker's, ready (once a numbering) */
void     _ca_frames_stats_json(ca_buf_t* b);
void     _ca_frames_fork_child(void);

/* ---- protection (protect.c): live ranges kept out of a colour set --------------------------- */
typedef struct ca_protect_ops_s {
  int (*move)(void* page, int from, int to);   /* 1: moved to set to (the old frame to set from's
                                                  pool if re-tested there), 0: not now, -1: never (cap) */
  bool (*resident)(const void* page);          /* the program has touched it (NULL: assume so) */
} ca_protect_ops_t;

void   _ca_protect_init(size_t max_bytes, size_t budget_pages);  /* ranges up to max_bytes, pages */
void   _ca_protect_add(const void* key, void* p, size_t n);   /* whole pages of [p, p + n) */
void   _ca_protect_remove(const void* key);                   /* waits while the worker is at it */
void   _ca_protect_release(const void* p, size_t n);          /* drop ranges [p, p + n) touches */
void   _ca_protect_stop(void);                                /* drop every range, record none */
bool   _ca_protect_arm(int from, int to);                 /* false: armed with another pair */
bool   _ca_protect_armed(void);
int    _ca_protect_from(void);                                /* the set kept free of live memory (0: none) */
bool   _ca_protect_recording(void);
size_t _ca_protect_pages(void);                               /* pages of the ranges recorded */
bool   _ca_protect_recorded(void);                            /* any range recorded */
size_t _ca_protect_pending(void);                             /* pages not looked at yet */
size_t _ca_protect_work(const ca_protect_ops_t* ops, size_t max_pages);   /* pages still pending */
void   _ca_protect_fork_child(void);
void   _ca_protect_stats_json(ca_buf_t* b);

/* ---- a full calibration (calibrate.c): what `chromalloc calibrate` measures and saves ------ */
typedef enum ca_colour_method_e {
  CA_METHOD_NONE, CA_METHOD_ADDRESS_BITS, CA_METHOD_PAGEMAP, CA_METHOD_TIMING
} ca_colour_method_t;

typedef struct ca_calibration_s {
  /* the level */
  uint32_t level, sysfs_size, sysfs_ways, line, expected_colours;
  /* the probe */
  uint32_t hit_ticks, miss_ticks, threshold;
  uint32_t ratio_pct, set_ratio_pct;      /* the decision rule: evicted above ratio_pct of quiet */
  uint32_t passes;                        /* reads of a group per test */
  double   ticks_per_us;
  /* cheaper sources and their verdicts */
  bool     thp_backed, address_bits_valid, pagemap_readable, pagemap_valid;
  ca_colour_method_t method;
  /* discovery */
  uint32_t ways, colours;
  uint64_t measured_size;                 /* colours x ways x page */
  ca_discovery_stats_t discovery;
  /* costs and quality */
  double   classify_restricted_us;        /* median: one page against 1/8 of the colours */
  double   classify_all_us;               /* median: one page against every colour */
  double   pool_4mib_s;                   /* 4 MiB of 1/8-of-level pages, from fresh pages */
  double   agreement;                     /* two independent maps agree on this fraction */
  uint32_t agreement_pages;               /* pages classified by both */
  double   unclassified;                  /* fraction of pages no set claimed */
  double   seconds;                       /* the whole calibration */
  bool     usable;                        /* colours can be controlled here */
  bool     sets_written;                  /* every colour's set went to the set file (setfile.c) */
  char     reason[160];                   /* why not, when not */
  char     cpu[192];                      /* the profile's machine (_ca_machine_key) */
} ca_calibration_t;

bool _ca_calibrate(ca_calibration_t* cal, bool quick, bool write_sets);
/* the machine a profile or a set file is for: CPU model, family, model, stepping and cache
   geometry (a described machine: its description) */
void _ca_machine_key(char* out, size_t len);
bool _ca_profile_path(char* out, size_t len);
bool _ca_profile_save(const ca_calibration_t* cal, const char* path);
bool _ca_profile_load(ca_calibration_t* cal);
void _ca_calibration_json(const ca_calibration_t* cal, ca_buf_t* b);
bool _ca_calibration_parse(ca_calibration_t* cal, const char* json);
void _ca_calibration_summary(const ca_calibration_t* cal, ca_buf_t* b);

/* ---- the shared set file (setfile.c) ----------------------------------------------------- */
typedef struct ca_setfile_s {
  int      fd;                                 /* -1: none */
  uint8_t* base;                               /* the whole file, mapped shared */
  size_t   len;
  uint8_t* pages;                              /* its pages after the header */
  size_t   npages;
  bool     built;                              /* made by this process (else loaded) */
  bool     published;                          /* named in the file system */
  uint64_t dev, ino;                           /* which file fd is (the program may close it) */
  int      lock_fd;                            /* held to build in it (-1: not) */
  uint32_t hint_ratio_pct, hint_passes;        /* what its sets read when they were found */
} ca_setfile_t;

bool _ca_setfile_path(char* out, size_t len);
bool _ca_setfile_create(ca_setfile_t* f, size_t npages);
bool _ca_setfile_publish(ca_setfile_t* f, const ca_colour_map_t* map, uint32_t colours, const ca_timing_probe_t* tp);
bool _ca_setfile_open(ca_setfile_t* f, ca_colour_map_t* map, uint32_t* colours);
bool _ca_setfile_lock(ca_setfile_t* f, uint64_t wait_ms);     /* to build in a published file */
void _ca_setfile_unlock(ca_setfile_t* f);
void _ca_setfile_fork_child(ca_setfile_t* f);
uint32_t _ca_setfile_adopt(const ca_setfile_t* f, ca_colour_map_t* map);
uint32_t _ca_setfile_extend(ca_setfile_t* f, const ca_colour_map_t* map);
void _ca_setfile_close(ca_setfile_t* f);
void _ca_setfile_remove(void);
bool _ca_setfile_test_spoil(void);             /* test builds only (CA_TEST_HOOKS) */
void _ca_sim_file_frames(void* pages, size_t npages, uint64_t file);   /* simcache.c */

#pragma GCC visibility pop

#endif
