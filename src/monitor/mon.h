/* The monitor's state, shared by its files (monitor.c says how it works):

     monitor.c   chunks: lookup, evidence and rounds, verdicts, start, stop and release, the
                 interface, statistics
     groups.c    groups: a context's chunks below the L2 judged together (members, gone
                 members, when a group ends)
     mthread.c   faults and the monitor thread: the fault handler's client, re-protection by
                 the program's allocator calls and by the thread, verdicts handed over, the PMU
                 method's rings, fork
     reload.c    the sampling count, the pair rule, the timed reload

   M (one per process) is guarded by M.lock (lock_m: never taken by the fault handler nested in
   its holder's critical section). */
#ifndef CA_MON_H
#define CA_MON_H

#include "monitor.h"
#include "pmu.h"
#include "trap.h"
#include "../core/hooks.h"
#include "../color/colour.h"

#pragma GCC visibility push(hidden)

#define MAX_CHUNKS     128         /* chunks being sampled or awaiting delivery of their verdict */
#define MAX_SAMPLES    32          /* pages sampled per chunk at most: 2 pairs each, enough to converge */
#define PAIRS_PER_PAGE 2
#define MIN_EVIDENCE   8
#define MARGIN_PCT     10
#define CHASE_LINES    8
#define BURST_US       20          /* a page stays open this long after a reference */
#define LAZY_US        200         /* ... and the monitor thread leaves it to faults this long */
#define REARM_PER_FAULT 16         /* pages a fault re-protects at most */
#define EXPIRE_MS      50          /* an armed page waits this long for its next reference */
#define LOOK_MS        5           /* the monitor thread's look while chunks are sampled */
#define TRAP_NS        3000        /* a fault's delivery and return, beyond the handler (cost) */
#define PMU_RINGS      64          /* threads sampling with the PMU */
#define PMU_PERIOD     4001        /* sampled loads: one in this many */
#define PMU_DRAIN_US   1000        /* the monitor thread drains the rings this often */

#define MAX_GROUPS     16          /* contexts whose small chunks are sampled together */
#define GROUP_MEMBERS  40          /* a group's members, live or gone, at most */
#define GROUP_WARM     56          /* warm members a group takes in all (after the L2's worth) */
#define GROUP_LIMIT    320         /* members a group takes in all, warm or not */
#define GONE_MS        1000        /* a freed member's last reference counts this long */
#define GROUP_IDLE_MS  100         /* a group with nothing left to learn ends after this */
#define GROUP_FRUITLESS 24         /* warm members freed with no pair judged: the group ends */

enum { PG_ARMED_FIRST, PG_OPEN, PG_ARMED, PG_DONE };
enum { CH_FREE, CH_ACTIVE, CH_VERDICT, CH_GONE };   /* CH_GONE: a group's member, freed */


typedef struct evidence_s {
  ca_monitor_result_t r;
  uint32_t  round_hits, round_misses;
} evidence_t;

typedef struct sample_s {
  uint32_t index;        /* page index within the chunk's whole pages */
  uint8_t  state, pairs;
  uint8_t  line;         /* line of the latest reference */
  uint8_t  late;         /* faults after the page was done (races), bounded */
  bool     released;     /* given up for a system call or the program's own mprotect/munmap:
                            its faults are the program's, never opened by us */
  uint64_t t;            /* ns: opened (OPEN) or protected (ARMED) */
  uint64_t last_ref;     /* ns: latest reference seen (0: none yet) */
} sample_t;

typedef struct mchunk_s {
  int       state;
  uintptr_t lo, hi;      /* whole pages of the chunk */
  void*     p;
  size_t    n;
  size_t    stride;      /* bytes of the chunk one sampled page stands for */
  uint64_t  cookie;
  uint32_t  nsamples, done;
  int       group;         /* a member of this group (one page, one sample), or -1 */
  bool      pending;       /* gone member: referenced once, not yet judged unused */
  bool      warm;          /* member: joined after the group had seen the L2's worth of
                              members, so the footprint after its references is seen */
  uint64_t  joined_ns, gone_ns;   /* member: joined, freed (0: live) */
  evidence_t own, *ev;     /* ev: own, or the group's */
  bool      traps;         /* pages protected (else judged by PMU samples) */
  sample_t  s[MAX_SAMPLES];
} mchunk_t;

/* Chunks below the L2 cannot stream more than the L2 by themselves, so they are judged per
   allocation context, together: a group is one context's members, each one page standing for
   `stride` bytes: a sampled small chunk (below a page) on a page of its own (the paper
   page-aligns sampled small chunks) stands for the sampling period's bytes of the context's
   small allocations; a chunk of a page or more (below the L2, with pages of its own) is a
   member by its first page and stands for its size.  A pair's footprint is what the members
   referenced between its two references stood for, plus the page's own stride, by the same
   pair rule as a chunk's.  A member freed after one reference stays in the group (CH_GONE) for
   GONE_MS: its reference still counts in the footprint, and it is an unused miss once the
   members referenced after it stood for more than the L2.  Only members that joined while it
   was live count for that: one that joined after its free may have had its memory (a buffer
   freed and allocated again, one at a time, stays in the cache whatever the group streams in
   all).  A group sees only the members sampled since it started: the first L2's worth only
   mark footprint, and only members that join after them are judged (a group started late in a
   pass over 3 MiB of messages saw a few of them and judged every pair a hit), and once it has
   turned a chunk of its context away (full, or no room), a pair whose first reference came
   before that is judged only when it is a miss: the footprint it sees is a lower bound.  A
   group takes the L2's worth of members and GROUP_WARM warm ones after them (at most
   GROUP_LIMIT in all); when it holds GROUP_MEMBERS, or the monitor has no slot left, its own
   oldest gone member makes room. */
typedef struct mgroup_s {
  int       state;         /* CH_FREE, CH_ACTIVE, CH_VERDICT */
  uint64_t  cookie;
  uint64_t  bytes;         /* what its members stood for, all that joined */
  _Atomic(uint64_t) refused_ns;   /* a chunk of its context could not join (full, no room) */
  uint32_t  members;       /* chunks in the group (active or gone) */
  uint32_t  warm;          /* members that joined warm */
  uint32_t  gone_warm;     /* members that joined warm and were freed */
  uint64_t  joined_ms;     /* the latest member's start */
  evidence_t ev;
} mgroup_t;

typedef struct ca_monitor_state_s {
  ca_lock_t      lock;
  mchunk_t       chunks[MAX_CHUNKS];
  mgroup_t       groups[MAX_GROUPS];
  bool           rearming;            /* the monitor thread is protecting a batch, unlocked */
  ca_verdict_fn  verdict;
  bool           inited, trap_ok;
  _Atomic(int)   wake_seq, sleeping;  /* the monitor thread's futex (sleeping: SLEEP_*) */
  _Atomic(uint64_t) open_ns;          /* a page was opened then and may still be (0: none) */
  _Atomic(pid_t) thread_pid;          /* process the thread runs in (0: none) */
  _Atomic(bool)  measured;            /* the reload thresholds are known */
  size_t         l2;                  /* bytes: the open cache (C_open) */
  uint32_t       hit_ticks, miss_ticks, threshold;
  uint32_t       l3_low_ticks;        /* the L3's second fastest reading of nine */
  uint32_t       mem_ticks, mem_threshold;  /* lines flushed to memory; beyond it a reload came from memory */
  uint32_t       measures;            /* measurements taken (the quietest is kept) */
  uint64_t       first_refs, pairs, pair_hits, far, unused, expired, interference;
  uint64_t       rearms, released, no_room, verdicts, fault_ns, members, group_verdicts;
  _Atomic(uint64_t) wakes, wake_ns, tick_rearms;
  uint64_t       fruitless_groups;
  _Atomic(uint64_t) cost_ns;          /* page protection and fault handling, all threads */
  _Atomic(uint64_t) traced;           /* looks that found the process _ca_mon_traced (no new traps) */
  _Atomic(uint64_t) maps_looks, maps_ns;   /* scans of /proc/self/maps for async I/O rings */
  _Atomic(bool)  async_by_maps;       /* ... one found them */
  _Atomic(uint64_t) sampled;          /* pages sampled so far */
  /* the PMU method */
  bool           use_pmu, fed;        /* judge by PMU samples; fed: samples come from tests */
  ca_pmu_info_t  pmu;
  ca_pmu_ring_t  rings[PMU_RINGS];
  _Atomic(int)   nrings;
  ca_pmu_stats_t pmu_stats;
  uint64_t       pmu_hits, pmu_misses, pmu_unknown;
} ca_monitor_state_t;
extern ca_monitor_state_t _ca_mon;
#define M _ca_mon

uint64_t _ca_mon_chase(const uint8_t* page, unsigned line);   /* reload.c */
void _ca_mon_touch_lines(const uint8_t* page, unsigned line);   /* reload.c */
void _ca_mon_calibrate(void);   /* reload.c */
void* _ca_mon_page_of(const mchunk_t* c, const sample_t* s);   /* monitor.c */
sample_t* _ca_mon_sample_of(uintptr_t a, mchunk_t** out);   /* monitor.c */
void _ca_mon_lock_m(void);   /* monitor.c */
void _ca_mon_unlock_m(void);   /* monitor.c */
bool _ca_mon_try_lock_m(void);   /* monitor.c */
int _ca_mon_protect(void* page, int prot);   /* monitor.c */
void _ca_mon_finish_page(mchunk_t* c, sample_t* s);   /* monitor.c */
void _ca_mon_count(mchunk_t* c, bool hit);   /* monitor.c */
uint64_t _ca_mon_referenced_since(const mchunk_t* c, const sample_t* s);   /* monitor.c */
void _ca_mon_count_unused(mchunk_t* c, sample_t* s);   /* monitor.c */
bool _ca_mon_converged(mchunk_t* c);   /* monitor.c */
void _ca_mon_verdict_of(evidence_t* e, uint32_t pages, uint32_t min_evidence);   /* monitor.c */
void _ca_mon_decide(mchunk_t* c, uint32_t min_evidence, bool freed);   /* monitor.c */
bool _ca_mon_traced(void);   /* monitor.c */
bool _ca_mon_async_mapped(void);   /* mthread.c */
void _ca_mon_lock_settled(void);   /* monitor.c */
void _ca_mon_settle_gone(int g, uint64_t now_ms, bool all);   /* groups.c */
void _ca_mon_decide_group(int g, uint32_t min_evidence);   /* groups.c */
bool _ca_mon_fruitless(const mgroup_t* gr);   /* groups.c */
bool _ca_mon_group_idle(int g, uint64_t now_ms);   /* groups.c */
void _ca_mon_member_gone(mchunk_t* c);   /* groups.c */
void _ca_mon_sampling_started(void);   /* mthread.c */
bool _ca_mon_on_fault(void* addr, int sig);   /* mthread.c */
void _ca_mon_deliver(void);   /* mthread.c */
bool _ca_mon_rearm(void);   /* mthread.c */
void _ca_mon_open_ring(void);   /* mthread.c */
void _ca_mon_ensure_thread(void);   /* mthread.c */
/* set while this thread holds (or takes) M.lock: a fault handler nested in its critical section
   must not wait for it */
extern __thread bool _ca_mon_holding __attribute__((tls_model("initial-exec")));

#pragma GCC visibility pop

#endif
