/* NightWatch (nightwatch.c): per-allocation-context cache-pollution control. */
#ifndef CA_NIGHTWATCH_H
#define CA_NIGHTWATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "../monitor/monitor.h"

struct ca_buf_s;

typedef enum ca_mapping_e { CA_MAP_OPEN = 0, CA_MAP_RESTRICTIVE = 1 } ca_mapping_t;

#pragma GCC visibility push(hidden)
struct ca_layer_s;
extern const struct ca_layer_s _ca_layer_nightwatch;   /* installs the policy when the option is on */

/* The predictor, exposed for tests (contexts come from sites.h): what a context predicts for
   its next chunk, whether that chunk is to be monitored (and the countdown advanced), and a
   monitor verdict for a chunk that was given `predicted` (returns the new prediction). */
ca_mapping_t _ca_nw_predict(int ctx);
bool         _ca_nw_should_monitor(int ctx);
ca_mapping_t _ca_nw_verdict(int ctx, ca_mapping_t predicted, const ca_monitor_result_t* r);
uint32_t     _ca_nw_skip(int ctx);
int          _ca_nw_budget_halves(int ctx, bool group);   /* its share of the monitoring budget, in halves */
void         _ca_nw_tried(int ctx);           /* a chunk or group of it is being monitored */
/* its group ended at now_ms (coarse clock), judged or not; when its next group may start */
void         _ca_nw_group_ended(int ctx, bool judged, uint64_t now_ms);
uint64_t     _ca_nw_retry_ms(int ctx);
/* its chunk or group of `pages` sampled pages started / ended: the expected cost is held */
void         _ca_nw_reserve(int ctx, uint32_t pages);
void         _ca_nw_release(int ctx);
uint64_t     _ca_nw_budget_due_ns(uint32_t pages, int halves);   /* when the budget allows it */
void         _ca_nw_reset(void);
#pragma GCC visibility pop

#endif
