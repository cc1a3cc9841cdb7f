/* The colour layer as a layer of the cache runtime (hooks.h): its options, its start (open
   memory recorded for protection from the first allocation on), its fork handlers and its
   statistics section. */
#include "colour.h"

long _ca_colour_options[CA_COPT_COUNT];

static const ca_option_desc_t options[CA_COPT_COUNT] = {
  [CA_COPT_COLOURS] = { "colours", 1, 0, 1, _ca_bool_words,
                        "the colour layer: memory of chosen L2 page colours (chromalloc_colours); "
                        "0: coloured requests get ordinary memory" },
  [CA_COPT_POOL]    = { "colour_pool", 4, 1, 1024, NULL,
                        "MiB of classified pages kept in stock per colour set (grows to the biggest "
                        "coloured request seen, up to 64 MiB)" },
  [CA_COPT_RESERVE] = { "colour_reserve", 1, 0, 1, _ca_bool_words,
                        "the program's first coloured allocation from a slice of at most 1/4 at "
                        "either end of the L2 reserves that slice as a pollute buffer "
                        "(chromalloc_colours_reserve): ordinary memory recorded since start-up is "
                        "moved out of its colours; 0: only an explicit call reserves" },
  [CA_COPT_WORKER]  = { "colour_worker", 100, 1, 100, NULL,
                        "percent of one CPU the colour layer's worker may take on average once the "
                        "layer is ready (after one second's allowance; not while "
                        "chromalloc_colours_prepare waits): less CPU, slower stocking; 100: no limit" },
  [CA_COPT_AUDIT]   = { "colour_audit", 0, 0, 1, _ca_bool_words,
                        "1: a small slice's pool (1/4 of the colours or less) is audited by what its pages do "
                        "to one another in the L2, and pages for the other colours against it (3-5 times the "
                        "worker's CPU, no purer pools measured on the Zen 4 host); 0: the eviction sets' word "
                        "alone (docs/colours.md, \"The slice audit\")" },
};

static void init(void) {
  if (_ca_colour_opt(CA_COPT_RESERVE) != 0) _ca_colour_protect_default();   /* record from the start */
}

const ca_layer_t _ca_layer_colours = {
  .name = "colours", .options = options, .values = _ca_colour_options, .noptions = CA_COPT_COUNT,
  .init = init,
  .fork_prepare = _ca_recolour_fork_hold,    /* no page in flight across the fork */
  .fork_parent = _ca_colour_fork_parent,
  .fork_child = _ca_colour_fork_child,
  .stats = _ca_colour_stats_json,
};
