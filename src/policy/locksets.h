/* Lock sets (locksets.c, paper 003): memory a thread allocates while it holds a lock is spread
   over every colour (hot.c moves it), and each lock set's pages and colours are reported. */
#ifndef CA_LOCKSETS_H
#define CA_LOCKSETS_H

#include <stdbool.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_locksets;

#define CA_LOCKSETS_MAX 63          /* lock sets told apart by their outermost call site */
bool    _ca_locksets_on(void);      /* the option (read before any layer's init) */
uint32_t _ca_locksets_nest(void);   /* the depth the nested check samples (0: none, or off) */
/* the lock set the calling thread is in: 1..CA_LOCKSETS_MAX by its outermost lock's call site,
   0 when it holds no lock (realloc of lock-set memory outside one) or the table is full */
uint8_t _ca_lockset_current(void);
/* the next page a thread touched at depth lockset_nest or more (a trap), and its lock set;
   false: none left.  The colour worker's (hot.c). */
bool    _ca_lockset_touched(uintptr_t* page, uint8_t* set);
/* hot.c: a lock set's pages (spread ones and those touched deep in it, last period), per
   colour, pages beyond ceil(n / colours) on their colour, and moves */
uint32_t _ca_hot_lockset(uint32_t set, const uint32_t** per_colour, uint64_t* moved, uint32_t* conflicts);
#pragma GCC visibility pop

#endif
