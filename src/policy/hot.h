/* Hot pages (hot.c, paper 002): the program's most touched pages found by sampled access bits,
   and spread evenly over the L2's colours. */
#ifndef CA_HOT_H
#define CA_HOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_hot;

/* The pieces, pure, for tests. */
#define CA_HOT_JUMP_MAX 64          /* the longest jump over untouched pages (the paper's 64) */
typedef struct ca_hot_scan_s {
  uint64_t checked, skipped, backtracks, touched;
} ca_hot_scan_t;
/* A page's heat after one look: an 8-bit decaying average of "touched in the window" (255:
   every window; a page touched in a fraction p of them settles near 256 p). */
static inline uint8_t _ca_hot_heat(uint8_t h, bool touched) {
  unsigned v = (unsigned)h - (h >> 3) + (touched ? 32u : 0u);
  return (uint8_t)(v > 255 ? 255 : v);
}
/* One window's bits over n pages, read the paper's way: in order, jumping over runs of untouched
   pages with a distance that doubles (jittered) up to CA_HOT_JUMP_MAX, back to the page after
   the last untouched one when a jump lands on a touched page.  Pages jumped over count as
   untouched.  Updates heat[0..n). */
void     _ca_hot_scan(uint8_t* heat, size_t n, const uint64_t* bits, uint64_t* rng, ca_hot_scan_t* st);
/* The written pages of a window beside traps: each a touched look, the rest left as they were
   (a page only read looks untouched to write protection). */
void     _ca_hot_add(uint8_t* heat, size_t n, const uint64_t* bits);
/* The lowest heat of the hottest k pages by a histogram of the heats (the paper's threshold):
   pages at or above it are the top k, or a few more when a bin is shared. */
uint32_t _ca_hot_threshold(const uint32_t hist[256], uint32_t k);
/* A window's budget (ns): `budget`, less the debt, which grows by what the time since the last
   window used beyond its share and shrinks by what it left (never below 0: no credit). */
uint64_t _ca_hot_budget(uint64_t* debt, uint64_t used, uint64_t share, uint64_t budget);
/* The moves that spread hot pages over colours: count[c] hot pages of colour c, `cap` per
   colour; the colours to move a page to (the emptiest below cap), or 0 when none. */
uint64_t _ca_hot_emptiest(const uint32_t* count, uint32_t colours, uint32_t cap);
/* ... where the next move goes: the emptiest, those of them with a classified page waiting
   (`spares`) if any; else the colours at most one above the emptiest (those with a page
   waiting, if any) */
uint64_t _ca_hot_target(const uint32_t* count, uint32_t colours, uint32_t cap, uint64_t spares);
/* The heat of the tracked page holding p, or -1 when it is not tracked; the threshold of the
   hot pages now (-1: off, or no period done yet). */
int      _ca_hot_heat_of(const void* p);
int      _ca_hot_threshold_now(void);
void     _ca_hot_test_busy(void* page);   /* test builds only (CA_TEST_HOOKS) */
#pragma GCC visibility pop

#endif
