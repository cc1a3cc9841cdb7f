/* NightWatch's predictor and the monitor's sampling count, driven by scripted verdicts
   (internal interfaces: built static only).  No cache or timing is involved. */
#include "check.h"
#include "../../src/core/internal.h"
#include "../../src/policy/nightwatch.h"
#include "../../src/monitor/monitor.h"

static void test_sampling_count(void) {
  CHECK_EQ(_ca_monitor_samples(0), 0);
  CHECK_EQ(_ca_monitor_samples(1), 1);
  CHECK_EQ(_ca_monitor_samples(2), 2);          /* 2^0.65 = 1.57 -> 2 */
  CHECK_EQ(_ca_monitor_samples(100), 20);       /* 19.95 */
  CHECK_EQ(_ca_monitor_samples(512), 58);       /* 57.7 */
  CHECK_EQ(_ca_monitor_samples(1 << 20), 512);  /* capped */
}

static void test_predictor(void) {
  _ca_nw_reset();
  int c = _ca_nw_context(0x1234, 0);
  CHECK(c >= 0);
  CHECK_EQ(_ca_nw_context(0x1234, 0), c);                  /* same hash, same context */
  CHECK(_ca_nw_context(0x5678, 0) != c);
  /* first chunk: open, monitored */
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  CHECK(_ca_nw_should_monitor(c));
  _ca_nw_verdict(c, CA_MAP_OPEN, true, 0, 10, 5);          /* polluter: predicted wrong */
  CHECK_EQ(_ca_nw_skip(c), 0);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);                /* one polluter is not enough */
  CHECK(_ca_nw_should_monitor(c));
  _ca_nw_verdict(c, CA_MAP_OPEN, true, 0, 10, 5);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_RESTRICTIVE);         /* last two were polluters */
  /* correct predictions double the skip interval */
  uint32_t expect = 1;
  for (int i = 0; i < 12; i++) {
    CHECK(_ca_nw_should_monitor(c));
    _ca_nw_verdict(c, CA_MAP_RESTRICTIVE, true, 1, 9, 5);
    CHECK_EQ(_ca_nw_skip(c), expect);
    for (uint32_t k = 0; k < expect; k++) CHECK(!_ca_nw_should_monitor(c));   /* skipped */
    expect = expect * 2 > 1024 ? 1024 : expect * 2;
  }
  CHECK_EQ(_ca_nw_skip(c), 1024);
  /* a wrong prediction resets it and one victim makes the context open again */
  CHECK(_ca_nw_should_monitor(c));
  _ca_nw_verdict(c, CA_MAP_RESTRICTIVE, false, 9, 1, 5);
  CHECK_EQ(_ca_nw_skip(c), 0);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  CHECK(_ca_nw_should_monitor(c));
  /* mixed evidence stays open: polluter, victim, polluter -> open until two in a row */
  _ca_nw_verdict(c, CA_MAP_OPEN, true, 0, 9, 5);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, false, 9, 0, 5);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, true, 0, 9, 5);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, true, 0, 9, 5);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_RESTRICTIVE);
  /* a victim context never becomes restrictive */
  int v = _ca_nw_context(0x9999, 0);
  for (int i = 0; i < 5; i++) _ca_nw_verdict(v, _ca_nw_predict(v), false, 10, 0, 5);
  CHECK_EQ(_ca_nw_predict(v), CA_MAP_OPEN);
  CHECK_EQ(_ca_nw_skip(v), 16);                            /* 5 correct: 1 2 4 8 16 */
}

int main(void) {
  free(malloc(1));
  test_sampling_count();
  test_predictor();
  return check_done("test_nightwatch");
}
