/* NightWatch's state, shared by its files (nightwatch.c says how the policy works):

     nightwatch.c  the policy hooks (place, sample, chunk), monitored chunks and their verdicts,
                   mappings, the layer (options, init, fork)
     predictor.c   the predictor, and the monitoring budget
     classes.c     chunks below the L2: the size table, span-level mapping, groups
     report.c      the statistics section: contexts and the timeline

   NW (one per process): contexts' verdict fields and watched[] under NW.lock; counters on the
   allocation path are plain loads and stores (bump). */
#ifndef CA_NW_H
#define CA_NW_H

#include "nightwatch.h"
#include "sites.h"
#include "../core/hooks.h"
#include "../color/colour.h"
#include "../monitor/context.h"
#include "../monitor/monitor.h"

#pragma GCC visibility push(hidden)

/* the options (the table is at the end) */
typedef enum { NW_OPT_ON, NW_OPT_MONITOR, NW_OPT_BUDGET, NW_OPT_PROTECT, NW_OPT_SMALL, NW_OPT_DELAY, NW_OPT_COUNT } nw_option_t;
extern long _ca_nw_options[NW_OPT_COUNT];
static inline long nw_opt(nw_option_t o) { return _ca_nw_options[o]; }

#define SKIP_MAX       1024
#define BUDGET_SKIP    64                    /* chunks a context skips after the budget refused it */
#define RETRY_MS       250                   /* a context's next group after one that judged nothing */
#define MAX_WATCHED    64
#define SWITCH_AGE_MS  20
#define MAX_REPORTED   200
#define TOUCH_NS       1500                  /* first touch of a fresh page (a fault: 1.4 us here) */
#define GROUP_COOKIE   (1ull << 32)          /* a monitor cookie naming a context's group */
#define CLASS_CTXS     4                     /* contexts the size table tells apart per class */
#define ROUTE_SHARE_PCT 95                   /* restrictive contexts' share of a class's samples */
#define ROUTE_MIN      8                     /* samples of a class before it is routed */
#define EVENTS         96                    /* timeline entries kept (the first ones) */
#define DEFER_MIN      8                     /* a context's countdown beyond which samples are deferred */
#define SAMPLE_DEFER   4                     /* periods a deferred thread's next sample waits */

typedef struct nw_ctx_s {                     /* NightWatch's view of one context (sites.c) */
  /* what every chunk of the context reads or counts, in its first cache line: a program that
     copies a block bigger than the L1 between two chunks (the foundation's mixed) misses on
     each line of it every time; member_bytes and group_on are written under NW.lock */
  _Atomic(uint64_t) chunks, bytes;
  _Atomic(int64_t)  countdown;
  uint64_t          member_bytes;             /* `bytes` when its next chunk of a page or more may join */
  _Atomic(int)      inflight;                 /* its chunks being monitored now */
  _Atomic(int)      decision;                 /* ca_mapping_t */
  bool              group_on;                 /* its chunks below the L2 are being monitored as a group */
  _Atomic(uint64_t) restrictive;              /* chunks it decided restrictive */
  _Atomic(uint64_t) samples;                  /* its small chunks sampled (each ~_ca_sample_period bytes) */
  _Atomic(uint64_t) reserved_ns;              /* expected cost of its chunk or group in flight */
  _Atomic(uint64_t) restrictive_ordinary;     /* restrictive chunks given ordinary memory (no colours
                                                 yet, or no stock) */
  /* under NW.lock */
  uint32_t          skip;
  uint8_t           history, nverdicts;
  bool              tried;                    /* a chunk or group of it has been monitored */
  uint64_t          monitored, pages, hits, misses, far, unused, interference;
  uint64_t          pred_hits, pred_misses, switches;
  ca_mapping_t      group_predicted;          /* the prediction when the group started */
  uint32_t          unjudged, unjudged_run;   /* its groups that judged nothing: all, in a row */
  uint64_t          retry_ms;                 /* its next group not before (coarse clock) */
} __attribute__((aligned(64))) nw_ctx_t;
_Static_assert(offsetof(nw_ctx_t, reserved_ns) == 64, "what every chunk reads fills the first line");

typedef struct nw_class_s {                   /* the size table of small chunks, per size class */
  _Atomic(int)      ctx[CLASS_CTXS];          /* context + 1 (0: none), claimed once */
  _Atomic(uint32_t) samples[CLASS_CTXS];
  _Atomic(uint32_t) total;                    /* with the samples of contexts beyond CLASS_CTXS */
} nw_class_t;

typedef enum nw_event_kind_e { EV_NONE, EV_VERDICT, EV_DECISION, EV_ROUTE, EV_COLOURS, EV_PROTECT, EV_PLACE } nw_event_kind_t;

typedef struct nw_event_s {                   /* one entry of the timeline (statistics) */
  uint32_t         ms;                        /* since start */
  _Atomic(uint8_t) kind;                      /* nw_event_kind_t, stored last (EV_NONE: being written) */
  bool             on;                        /* polluter, restrictive, routed, shared by a restrictive context */
  uint32_t         arg;                       /* context, or a class's block size */
} nw_event_t;

typedef struct nw_watched_s {                 /* a chunk being monitored */
  void*        p;
  size_t       n;
  int          ctx;
  ca_mapping_t predicted;
  uint64_t     born_ms;
  bool         freeing;                       /* the program is freeing it: no switch */
  bool         reserved;                      /* slot taken, chunk being allocated */
} nw_watched_t;


typedef struct nw_state_s {
  bool              on, monitor_all, protect;
  bool              groups;                   /* chunks below the L2 are judged in groups (nightwatch_small) */
  size_t            judged_min;               /* bytes: smaller chunks are not monitored (the L2) */
  ca_lock_t         lock;                     /* contexts' verdict fields, watched[] */
  nw_ctx_t          ctx[CA_NW_CONTEXTS];
  _Atomic(int)      nrestrictive;             /* contexts predicted restrictive now (changed under lock) */
  nw_watched_t      watched[MAX_WATCHED];
  _Atomic(int)      nwatched;
  _Atomic(void*)    switching;                /* chunk being recoloured (free waits) */
  int               restrict_id, open_id;     /* colour sets: 0 = not yet, -1 = unavailable */
  bool              monitor_ready;
  uint64_t          start_ns, budget_pm;
  nw_class_t        classes[CA_CLASS_MAX];    /* no lock: counts may lose an increment in a race */
  bool              class_shared[CA_CLASS_MAX];   /* named one by one for a restrictive context (logged) */
  _Atomic(uint64_t) small_members, medium_members;
  char              off_reason[96];
  _Atomic(uint64_t) monitored, switches, lost, over_budget, alloc_cost_ns;
  _Atomic(uint64_t) reserved_ns;              /* expected cost of the chunks and groups in flight */
  _Atomic(uint64_t) next_ok_ms[4];            /* the budget allows nothing before (coarse clock),
                                                 per share (within_budget) */
  nw_event_t        events[EVENTS];           /* the timeline: when the policy changed its mind */
  _Atomic(uint32_t) nevents;                  /* including those past EVENTS (not kept) */
  _Atomic(bool)     colours_seen;             /* EV_COLOURS logged */
} nw_state_t;
extern nw_state_t _ca_nw;
#define NW _ca_nw

/* statistics counters on the allocation path: a plain load and store (no locked instruction);
   threads racing may lose an increment */
static inline void bump(_Atomic(uint64_t)* c, uint64_t v) {
  atomic_store_explicit(c, atomic_load_explicit(c, ca_relaxed) + v, ca_relaxed);
}
static inline void bump32(_Atomic(uint32_t)* c) {
  atomic_store_explicit(c, atomic_load_explicit(c, ca_relaxed) + 1, ca_relaxed);
}

/* nightwatch.c */
void     _ca_nw_log_event(nw_event_kind_t kind, uint32_t arg, bool on);
uint8_t  _ca_nw_restrictive_now(void);
void*    _ca_nw_alloc_mapped(size_t n, bool zero, uint8_t flavour, bool own_pages);
void     _ca_nw_arm_protection(void);
void     _ca_nw_monitor_ready(void);
/* predictor.c */
bool     _ca_nw_within_budget(uint32_t pages, int halves);
void     _ca_nw_inflight_end(int ctx);
/* classes.c */
void     _ca_nw_classes_init(void);
void     _ca_nw_update_routes(void);
bool     _ca_nw_note_class(uint32_t k, int ctx);
void*    _ca_nw_place_member(int ctx, size_t n, bool zero, ca_mapping_t m, uint8_t flavour);
bool     _ca_nw_group_budget(int ctx, size_t n);
bool     _ca_nw_group_due(int ctx, bool join, size_t n);
void     _ca_nw_on_group_verdict(int ctx, const ca_monitor_result_t* r);
/* report.c */
void     _ca_nw_stats_json(ca_buf_t* b);

#pragma GCC visibility pop

#endif
