/* The colour layer as a layer of the cache runtime (hooks.h): its options, its start (open
   memory recorded for protection from the first allocation on), its fork handlers and its
   statistics section. */
#include "layer.h"

long _ca_colour_options[CA_COPT_COUNT];

static const char* const move_words[] = { "auto", "mremap", NULL };

static const ca_option_desc_t options[CA_COPT_COUNT] = {
  [CA_COPT_COLOURS] = { "colours", 1, 0, 1, _ca_bool_words,
                        "the colour layer: memory of chosen L2 page colours (chromalloc_colours); "
                        "0: coloured requests get ordinary memory" },
  [CA_COPT_POOL]    = { "colour_pool", 1, 1, 1024, NULL,
                        "MiB of classified pages kept in stock per colour set (grows to the biggest "
                        "coloured request seen, up to 64 MiB)" },
  [CA_COPT_RESERVE] = { "colour_reserve", 1, 0, 1, _ca_bool_words,
                        "the program's first coloured allocation from a slice of at most 1/4 at "
                        "either end of the L2 reserves that slice as a pollute buffer "
                        "(chromalloc_colours_reserve): ordinary memory recorded since start-up is "
                        "moved out of its colours; 0: only an explicit call reserves" },
  [CA_COPT_WORKER]  = { "colour_worker", 2, 1, 100, NULL,
                        "the colour layer's worker takes at most this percent of the CPU time of the "
                        "program's own threads once its start is done (the first stock in, or half a "
                        "second of its CPU after its sets were ready; a second after the layer was asked "
                        "for at the earliest; not while chromalloc_colours_prepare waits): less CPU, "
                        "slower restocking; 100: no limit" },
  [CA_COPT_AUDIT]   = { "colour_audit", 0, 0, 1, _ca_bool_words,
                        "1: a small slice's pool (1/4 of the colours or less) is audited by what its pages do "
                        "to one another in the L2, and pages for the other colours against it (3-5 times the "
                        "worker's CPU, no purer pools measured on the Zen 4 host); 0: the eviction sets' word "
                        "alone (docs/colours.md, \"The slice audit\")" },
  [CA_COPT_MOVES]   = { "colour_moves", 0, 0, 1, move_words,
                        "how pages move to frames of other colours: auto = UFFDIO_MOVE where the kernel "
                        "offers it (no mapping added per page), mremap otherwise; mremap = always mremap "
                        "(a mapping per moved page, at most vm.max_map_count/4 of them)" },
  [CA_COPT_SHARE]   = { "colour_share", 1, 0, 1, _ca_bool_words,
                        "eviction sets shared by the user's processes on this machine through a file on "
                        "tmpfs (the sets of one process serve all; $CHROMALLOC_SETS names it): 0 = every "
                        "process builds its own" },
};

/* ---- statistics ----------------------------------------------------------------------------- */

void _ca_colour_stats_json(ca_buf_t* b) {
  static const char* const names[] = { "off", "calibrating", "ready", "unavailable" };
  int st = atomic_load_explicit(&L.state, ca_acquire);
  ca_buf_str(b, "{\"state\":\"");
  ca_buf_str(b, names[st & 3]);
  ca_buf_str(b, "\",\"reason\":\"");
  ca_buf_str(b, L.reason);
  ca_buf_str(b, "\",\"profile\":");
  ca_buf_str(b, L.cal_from_profile ? "true" : "false");
  static const char* const origins[] = { "none", "set file", "built here" };
  ca_buf_str(b, ",\"sets_from\":\"");
  ca_buf_str(b, origins[L.sets_origin % 3]);
  ca_buf_str(b, "\",\"set_file\":{\"checked\":"); ca_buf_u64(b, L.file_checks);
  ca_buf_field_u64(b, "stale", L.file_stale);
  ca_buf_field_u64(b, "written", L.published);
  ca_buf_field_u64(b, "extended", L.file_extended);
  ca_buf_field_u64(b, "adopted", L.file_adopted);
  ca_buf_str(b, "}");
  ca_buf_field_u64(b, "level", L.cal.level);
  ca_buf_field_u64(b, "colours", L.cal.colours);
  ca_buf_field_u64(b, "ways", L.cal.ways);
  ca_buf_field_u64(b, "eviction_sets", L.map.ncolours);
  ca_buf_str(b, ",\"frames\":");
  _ca_frames_stats_json(b);
  /* start-up: when the layer was asked for (ms after the process started), the worker's phases
     (ms); ready_ms (sets usable) and stocked_ms (every set's first stock in) from its start, 0
     while not yet, and its CPU time at each */
  ca_buf_field_u64(b, "asked_ms", L.asked_ns / 1000000);
  ca_buf_field_u64(b, "probe_ms", L.probe_ns / 1000000);
  ca_buf_field_u64(b, "discover_ms", L.discover_ns / 1000000);
  ca_buf_field_u64(b, "estimate_ms", L.estimate_ns / 1000000);
  ca_buf_field_u64(b, "ready_ms", L.ready_ns / 1000000);
  ca_buf_field_u64(b, "ready_cpu_ms", L.start_cpu_ns / 1000000);
  ca_buf_field_u64(b, "stocked_ms", L.stocked_ns / 1000000);
  ca_buf_field_u64(b, "stocked_cpu_ms", L.stocked_cpu_ns / 1000000);
  ca_buf_field_u64(b, "worker_cpu_ms", _ca_cs_worker_cpu_ns() / 1000000);
  ca_buf_field_u64(b, "worker_paced_ms", L.paced_ns / 1000000);
  ca_buf_field_u64(b, "worker_pace_from_cpu_ms", L.pace_cpu_ns / 1000000);   /* its CPU when the pace began */
  ca_buf_field_u64(b, "set_builds", L.disc.set_builds);
  ca_buf_field_u64(b, "set_build_failures", L.disc.set_failures);
  ca_buf_field_u64(b, "set_build_ms", L.disc.set_build_ns / 1000000);
  ca_buf_field_u64(b, "set_builds_plain", L.probe.base.plain_searches);
  static const char* const stage[CA_SEARCH_STAGES] = { "whole", "reduce", "large", "extend", "full", "needed" };
  ca_buf_str(b, ",\"set_build_failed_at\":{");
  for (int i = 0; i < CA_SEARCH_STAGES; i++) {
    ca_buf_str(b, i ? ",\"" : "\""); ca_buf_str(b, stage[i]); ca_buf_str(b, "\":");
    ca_buf_u64(b, L.probe.base.search_failed[i]);
  }
  ca_buf_str(b, "}");
  ca_buf_field_u64(b, "sets_duplicate", L.disc.duplicates);
  ca_buf_field_u64(b, "start_failures", L.start_failures);
  ca_buf_field_u64(b, "estimated", L.estimated);
  ca_buf_field_u64(b, "estimate_chunks", L.estimate_chunks);
  ca_buf_field_u64(b, "probe_remeasured", L.probe_remeasured);
  ca_buf_field_u64(b, "pages_classified", L.classified);
  ca_buf_field_u64(b, "pages_undecided", L.undecided);
  ca_buf_field_u64(b, "batches_dropped", L.batches_dropped);
  ca_buf_field_u64(b, "unquiet_batches", L.unquiet_batches);
  ca_buf_field_u64(b, "quiet_ms", L.quiet_ns / 1000000);
  ca_buf_field_u64(b, "classify_ms", L.classify_ns / 1000000);
  ca_buf_field_u64(b, "set_ratio_pct", L.probe.set_ratio_pct);
  ca_buf_field_u64(b, "effect_pct", L.effect_pct);
  ca_buf_field_u64(b, "passes", (uint64_t)L.probe.passes);
  ca_buf_field_u64(b, "verify_drops", L.verify_drops);
  ca_buf_field_u64(b, "frames_kept", L.frames_kept);
  ca_buf_field_u64(b, "frames_rejected", K.rejected);
  ca_buf_str(b, ",\"audit\":{\"groups_judged\":"); ca_buf_u64(b, L.audit_judged);
  ca_buf_field_u64(b, "groups_invalid", L.audit_invalid);
  ca_buf_field_u64(b, "strays", L.audit_strays);
  ca_buf_field_u64(b, "pages", L.audit_pages);
  ca_buf_field_u64(b, "turned_away", L.audit_turned_away);
  ca_buf_field_u64(b, "groups_loud", L.audit_loud);
  ca_buf_field_u64(b, "loud_pages", L.audit_loud_pages);
  ca_buf_str(b, "}");
  ca_buf_field_u64(b, "suspicions", L.suspicions);
  ca_buf_str(b, ",\"suspected_by\":{\"controls\":"); ca_buf_u64(b, L.suspected_by[0]);
  ca_buf_field_u64(b, "starved", L.suspected_by[1]);
  ca_buf_field_u64(b, "audit", L.suspected_by[2]);
  ca_buf_str(b, "}");
  ca_buf_field_u64(b, "set_rebuilds", L.set_rebuilds);
  ca_buf_field_u64(b, "backoffs", L.backoffs);
  ca_buf_field_u64(b, "pages_moved", _ca_pool_moved());
  ca_buf_field_u64(b, "pages_moved_limit", _ca_pool_moved_limit());
  ca_buf_field_u64(b, "recolours", L.recolours);
  ca_buf_str(b, ",\"recolour_us\":");
  ca_buf_fixed(b, L.recolours ? (int64_t)(L.recolour_ns / L.recolours / 10) : 0, 2);
  _ca_move_stats_json(b);
  ca_buf_str(b, ",\"protect\":");
  _ca_protect_stats_json(b);
  ca_buf_str(b, ",\"sets\":[");
  bool first = true;
  for (int i = 1; i <= CA_COLOUR_SETS; i++) {
    ca_colour_set_t* s = &L.sets[i];
    if (!s->used) continue;
    if (!first) ca_buf_char(b, ',');
    first = false;
    ca_buf_str(b, "{\"id\":"); ca_buf_u64(b, (uint64_t)i);
    ca_buf_str(b, ",\"slice\":\""); ca_buf_u64(b, s->from); ca_buf_char(b, '/'); ca_buf_u64(b, s->den);
    ca_buf_str(b, "-"); ca_buf_u64(b, s->to); ca_buf_char(b, '/'); ca_buf_u64(b, s->den);
    ca_buf_str(b, "\",\"by_elimination\":"); ca_buf_str(b, s->by_elimination ? "true" : "false");
    ca_buf_field_u64(b, "pool_pages", s->pool.count);
    ca_buf_field_u64(b, "pages_handed", s->pool.handed);
    ca_buf_field_u64(b, "pages_returned", s->pool.returned);
    ca_buf_field_u64(b, "spans_filled", s->filled_spans);
    ca_buf_field_u64(b, "spans_ordinary", s->fallback_spans);
    ca_buf_field_u64(b, "dropped_pages", s->dropped_pages);
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "]}");
}


static void init(void) {
  L.born_ns = _ca_clock_ns();
  if (_ca_colour_opt(CA_COPT_RESERVE) != 0) _ca_colour_protect_default();   /* record from the start */
}

/* no page in flight across the fork, and the simulated cache's table whole */
static void fork_prepare(void) { _ca_move_fork_hold(); _ca_sim_fork(true); }

const ca_layer_t _ca_layer_colours = {
  .name = "colours", .options = options, .values = _ca_colour_options, .noptions = CA_COPT_COUNT,
  .init = init,
  .fork_prepare = fork_prepare,
  .fork_parent = _ca_colour_fork_parent,
  .fork_child = _ca_colour_fork_child,
  .stats = _ca_colour_stats_json,
};
