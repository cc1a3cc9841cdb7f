/* NightWatch's statistics section: the contexts (what each call path allocated, what the
   monitor saw of it, what was decided, how its predictions fared) and the timeline. */
#define _GNU_SOURCE
#include "nw.h"

/* ---- statistics -------------------------------------------------------------------------- */
static void context_json(ca_buf_t* b, int i) {
  const ca_nw_context_t* k = _ca_nw_context_info(i);
  nw_ctx_t* c = &NW.ctx[i];
  char site[192];
  _ca_context_symbol(k->nframes ? k->frames[0] : 0, site, sizeof site);
  ca_buf_str(b, "{\"site\":\"");
  for (const char* s = site; *s; s++) if (*s != '"' && *s != '\\') ca_buf_char(b, *s);
  ca_buf_str(b, "\",\"hash\":\""); ca_buf_hex(b, (uintptr_t)k->hash); ca_buf_str(b, "\"");
  ca_buf_str(b, ",\"frames\":[");
  for (uint32_t f = 0; f < k->nframes; f++) { if (f) ca_buf_char(b, ','); ca_buf_char(b, '"'); ca_buf_hex(b, k->frames[f]); ca_buf_char(b, '"'); }
  ca_buf_str(b, "]");
  ca_buf_field_u64(b, "chunks", c->chunks);
  ca_buf_field_u64(b, "bytes", c->bytes);
  ca_buf_field_u64(b, "monitored", c->monitored);
  ca_buf_field_u64(b, "sampled_pages", c->pages);
  ca_buf_field_u64(b, "pair_hits", c->hits);
  ca_buf_field_u64(b, "pair_misses", c->misses);
  ca_buf_field_u64(b, "misses_far", c->far);
  ca_buf_field_u64(b, "misses_unused", c->unused);
  ca_buf_field_u64(b, "interference", c->interference);
  ca_buf_str(b, ",\"miss_rate\":");
  if (c->hits + c->misses) ca_buf_fixed(b, (int64_t)(c->misses * 1000 / (c->hits + c->misses)), 3); else ca_buf_str(b, "null");
  ca_buf_str(b, ",\"decision\":\"");
  ca_buf_str(b, c->nverdicts == 0 ? "unknown" : c->decision == CA_MAP_RESTRICTIVE ? "restrictive" : "open");
  ca_buf_str(b, "\"");
  ca_buf_field_u64(b, "restrictive_chunks", c->restrictive);
  ca_buf_field_u64(b, "restrictive_ordinary", c->restrictive_ordinary);
  ca_buf_field_u64(b, "pred_hits", c->pred_hits);
  ca_buf_field_u64(b, "pred_misses", c->pred_misses);
  ca_buf_field_u64(b, "skip", c->skip);
  ca_buf_field_u64(b, "groups_unjudged", c->unjudged);
  ca_buf_field_u64(b, "switches", c->switches);
  ca_buf_field_u64(b, "small_samples", c->samples);
  ca_buf_str(b, "}");
}

static void timeline_json(ca_buf_t* b) {
  static const char* const names[] = { NULL, "verdict", "decision", "route", "colours_ready", "protection", "place" };
  static const char* const args[] = { NULL, "context", "context", "size", NULL, NULL, "size" };
  static const char* const flags[] = { NULL, "polluter", "restrictive", "restrictive", NULL, "armed", "shared" };
  uint32_t n = atomic_load_explicit(&NW.nevents, ca_relaxed);
  ca_buf_field_u64(b, "timeline_dropped", n > EVENTS ? n - EVENTS : 0);
  ca_buf_str(b, ",\"timeline\":[");
  for (uint32_t i = 0, first = 1; i < n && i < EVENTS; i++) {
    const nw_event_t* e = &NW.events[i];
    uint8_t k = atomic_load_explicit(&e->kind, ca_acquire);
    if (k == EV_NONE) continue;               /* another thread is writing it */
    if (!first) ca_buf_char(b, ',');
    first = 0;
    ca_buf_str(b, "{\"ms\":"); ca_buf_u64(b, e->ms);
    ca_buf_str(b, ",\"event\":\""); ca_buf_str(b, names[k]); ca_buf_str(b, "\"");
    if (args[k]) ca_buf_field_u64(b, args[k], e->arg);
    if (flags[k]) { ca_buf_str(b, ",\""); ca_buf_str(b, flags[k]); ca_buf_str(b, e->on ? "\":true" : "\":false"); }
    ca_buf_char(b, '}');
  }
  ca_buf_str(b, "]");
}

void _ca_nw_stats_json(ca_buf_t* b) {
  uint64_t ph = 0, pm = 0, chunks = 0, restrictive = 0, ordinary = 0;
  int n = _ca_nw_contexts();
  for (int i = 0; i < n; i++) {
    ph += NW.ctx[i].pred_hits; pm += NW.ctx[i].pred_misses;
    chunks += NW.ctx[i].chunks; restrictive += NW.ctx[i].restrictive;
    ordinary += NW.ctx[i].restrictive_ordinary;
  }
  ca_nw_site_stats_t st;
  _ca_nw_sites_stats(&st);
  ca_buf_str(b, "{\"enabled\":");
  ca_buf_str(b, NW.on && NW.off_reason[0] == 0 ? "true" : "false");
  ca_buf_str(b, ",\"off_reason\":\""); ca_buf_str(b, NW.off_reason); ca_buf_str(b, "\"");
  ca_buf_str(b, ",\"monitor_all\":"); ca_buf_str(b, NW.monitor_all ? "true" : "false");
  ca_buf_field_u64(b, "chunks", chunks);
  ca_buf_field_u64(b, "monitored", NW.monitored);
  ca_buf_field_u64(b, "monitor_lost", NW.lost);
  ca_buf_field_u64(b, "over_budget", NW.over_budget);
  ca_buf_field_u64(b, "budget_per_mille", NW.budget_pm);
  ca_buf_field_u64(b, "monitor_cost_ns", _ca_monitor_cost_ns() + NW.alloc_cost_ns);
  ca_buf_field_u64(b, "reserved_ns", NW.reserved_ns);
  ca_buf_field_u64(b, "run_ns", _ca_clock_ns() - NW.start_ns);
  ca_buf_field_u64(b, "start_monotonic_ns", NW.start_ns);
  ca_buf_field_u64(b, "restrictive", restrictive);               /* chunks decided restrictive */
  ca_buf_field_u64(b, "restrictive_ordinary", ordinary);        /* ... given ordinary memory */
  ca_buf_field_u64(b, "switches", NW.switches);
  ca_buf_field_u64(b, "small_period", (uint64_t)_ca_sample_period_bytes());
  uint64_t samples = 0;
  for (int i = 0; i < CA_NW_CONTEXTS; i++) samples += atomic_load_explicit(&NW.ctx[i].samples, ca_relaxed);
  ca_buf_field_u64(b, "small_samples", samples);
  ca_buf_field_u64(b, "small_members", NW.small_members);
  ca_buf_field_u64(b, "medium_members", NW.medium_members);
  ca_buf_str(b, ",\"routed_sizes\":[");
  for (uint32_t k = 0, first = 1; k < _ca_class_count; k++)
    if (_ca_class_route(k) != 0) { if (!first) ca_buf_char(b, ','); ca_buf_u64(b, _ca_class_size[k]); first = 0; }
  ca_buf_str(b, "],\"one_by_one_sizes\":[");
  for (uint32_t k = 0, first = 1; k < _ca_class_count; k++)
    if (_ca_class_placed(k)) { if (!first) ca_buf_char(b, ','); ca_buf_u64(b, _ca_class_size[k]); first = 0; }
  ca_buf_str(b, "]");
  ca_buf_field_u64(b, "site_hits", st.site_hits);
  ca_buf_field_u64(b, "caller_hits", st.caller_hits);
  ca_buf_field_u64(b, "size_table_hits", st.size_hits);
  ca_buf_field_u64(b, "leaf_sites", st.leaf_sites);
  ca_buf_field_u64(b, "wrapper_sites", st.wrapper_sites);
  ca_buf_field_u64(b, "context_captures", st.scans);
  ca_buf_field_u64(b, "context_capture_ns", st.scan_ns);
  ca_buf_str(b, ",\"predictions\":{\"hits\":"); ca_buf_u64(b, ph);
  ca_buf_str(b, ",\"misses\":"); ca_buf_u64(b, pm); ca_buf_str(b, "}");
  ca_buf_str(b, ",\"monitor\":");
  _ca_monitor_stats_json(b);
  timeline_json(b);
  /* the report buffer is bounded: the first MAX_REPORTED contexts, and how many were left out */
  ca_buf_field_u64(b, "contexts_omitted", n > MAX_REPORTED ? (uint64_t)(n - MAX_REPORTED) : 0);
  if (n > MAX_REPORTED) n = MAX_REPORTED;
  ca_buf_str(b, ",\"contexts\":[");
  for (int i = 0; i < n; i++) { if (i) ca_buf_char(b, ','); context_json(b, i); }
  ca_buf_str(b, "]}");
}

