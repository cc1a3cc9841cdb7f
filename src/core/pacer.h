/* Purge pacing: how long free memory waits before it is given back to the OS.

   The wait starts at `purge_delay` ms and is multiplied by `mult` (1..CA_PACER_MAX).  Memory
   that we gave back and that is wanted again soon after (a span or segment taken from the
   cache while its pages were purged less than a few waits ago) means the program keeps coming
   back for it: every such refault doubles the wait.  A stretch of many waits without one
   halves it again, so a program that stops reusing its memory returns it at the base pace.
   (A two-thread churn of mixed sizes refaulted 27,000 pages a second at a fixed 10 ms.)

     pacer { mult, calm_since }      one per heap (spans, owner only) and one for the segment
                                     cache (under its lock): no atomics */
#ifndef CA_PACER_H
#define CA_PACER_H

#include "internal.h"

#define CA_PACER_MAX     64      /* at most 64 x purge_delay (640 ms by default) */
#define CA_PACER_SOON    4       /* a refault within 4 waits of the purge counts */
#define CA_PACER_CALM    32      /* 32 waits without one halve the wait */

static inline uint64_t _ca_pacer_delay(const ca_pacer_t* p) {
  long d = _ca_opt(CA_OPT_PURGE_DELAY);
  return d <= 0 ? (uint64_t)d : (uint64_t)d * (p->mult ? p->mult : 1);
}

/* memory purged at `purged_at` (ms) is being reused at `now` */
static inline void _ca_pacer_reused(ca_pacer_t* p, uint64_t purged_at, uint64_t now) {
  if (p->mult == 0) p->mult = 1;
  if (now - purged_at > CA_PACER_SOON * _ca_pacer_delay(p)) return;
  if (p->mult < CA_PACER_MAX) p->mult *= 2;
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
