/* Purge pacing: how long free memory waits before it is given back to the OS.

   The wait starts at `purge_delay` ms and is multiplied by `mult` (1..CA_PACER_MAX).  Memory
   that we gave back and that is wanted again soon after (a span or segment taken from the
   cache while its pages were purged less than a few waits ago) means the program keeps coming
   back for it: every such refault doubles the wait.  A stretch of many waits without one
   halves it again, so a program that stops reusing its memory returns it at the base pace.
   (At a fixed 10 ms, bench/src/xchurn.c took 47,000 page faults where mimalloc took 15,600.)

     pacer { mult, calm_since }      one per heap (spans, owner only) and one for the segment
                                     cache (under its lock): no atomics */
#ifndef CA_PACER_H
#define CA_PACER_H

#include "internal.h"

#define CA_PACER_MAX     64      /* at most 64 x purge_delay (640 ms by default) */
#define CA_PACER_SOON    4       /* a refault within 4 waits of the purge counts */
#define CA_PACER_CALM    32      /* 32 waits without one halve the wait */

/* a zeroed pacer (a new heap, the static cache's) is at the base pace */
static inline uint32_t _ca_pacer_mult(const ca_pacer_t* p) { return p->mult ? p->mult : 1; }

/* the wait in ms; 0 when purge_delay is 0 (at once) or -1 (never), which callers test first */
static inline uint64_t _ca_pacer_delay(const ca_pacer_t* p) {
  long d = _ca_opt(CA_OPT_PURGE_DELAY);
  return d <= 0 ? 0 : (uint64_t)d * _ca_pacer_mult(p);
}

/* memory purged at `purged_at` (ms) is being reused at `now` */
static inline void _ca_pacer_reused(ca_pacer_t* p, uint64_t purged_at, uint64_t now) {
  if (now - purged_at > CA_PACER_SOON * _ca_pacer_delay(p)) return;
  p->mult = _ca_pacer_mult(p) < CA_PACER_MAX ? 2 * _ca_pacer_mult(p) : CA_PACER_MAX;
  p->calm_since = now;
}

/* a purge is due at `now`: calm long enough to pace down? */
static inline void _ca_pacer_purging(ca_pacer_t* p, uint64_t now) {
  if (p->mult > 1 && now - p->calm_since > CA_PACER_CALM * _ca_pacer_delay(p)) {
    p->mult /= 2;
    p->calm_since = now;
  }
}

#endif
