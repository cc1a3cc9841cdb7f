/* The locality monitor (monitor.c): sampled page traps that decide whether a chunk's data is
   reused while it is still in the L2 (victim) or not (polluter). */
#ifndef CA_MONITOR_H
#define CA_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ca_buf_s;

/* A chunk's monitoring ended with enough evidence: `polluter` when its miss rate was above
   one half.  Called on the monitor thread or in the thread that freed the chunk, never in the
   fault handler, with no monitor lock held.  `cookie` is what _ca_monitor_start was given. */
typedef void (*ca_verdict_fn)(void* chunk, size_t size, uint64_t cookie, bool polluter,
                              uint32_t hits, uint32_t misses, uint32_t pages);

#pragma GCC visibility push(hidden)
void   _ca_monitor_init(ca_verdict_fn verdict);
/* Start sampling a chunk (whole pages inside [p, p + n)); false when there is no room or no
   whole page. */
bool   _ca_monitor_start(void* p, size_t n, uint64_t cookie);
/* The chunk is freed or resized: stop, give the verdict if the evidence suffices. */
void   _ca_monitor_stop(void* p);
/* The kernel is about to touch [p, p + len) (a system call's buffer) or the program changes its
   protection: make any sampled page in it accessible and stop sampling it. */
void   _ca_monitor_release(const void* p, size_t len);
bool   _ca_monitor_active(void);                    /* any chunk being sampled */
uint32_t _ca_monitor_samples(size_t pages);         /* pages sampled for a chunk of `pages` */
void   _ca_monitor_stats_json(struct ca_buf_s* b);
#pragma GCC visibility pop

#endif
