/* The cache runtime (libchromalloc-colour): the allocator plus these layers, outermost first
   (hooks.h: init runs from the last to the first, fork's prepare from the first to the last).
   The allocator alone (libchromalloc) has none and never links this. */
#include "../policy/nightwatch.h"
#include "../policy/hot.h"
#include "../policy/locksets.h"
#include "../policy/rocs.h"
#include "../monitor/monitor.h"
#include "../monitor/trap.h"
#include "../color/colour.h"

const ca_layer_t* const _ca_layers[] = {
  &_ca_layer_nightwatch,     /* the policy: contexts, predictions, placement */
  &_ca_layer_locksets,       /* lock sets: what is allocated under a lock, spread (by hot's) */
  &_ca_layer_rocs,           /* ROCS: a pollute buffer for pages that come back from memory (by hot's windows) */
  &_ca_layer_hot,            /* hot pages spread over the colours */
  &_ca_layer_monitor,        /* sampled page traps: locality verdicts */
  &_ca_layer_colours,        /* colour sets, pools, recolouring, protection */
  &_ca_layer_trap,           /* the fault handler the two above share */
  NULL,
};
