/* NightWatch's predictor, its context tables and the monitor's pair rule, driven by scripted
   verdicts and synthetic stacks (internal interfaces: built static only).  No cache or timing
   is involved. */
#include "check.h"
#include "../../src/core/internal.h"
#include "../../src/core/buf.h"
#include "../../src/policy/nightwatch.h"
#include "../../src/policy/sites.h"
#include "../../src/monitor/monitor.h"
#include "../../src/monitor/trap.h"
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>

static void test_sampling_count(void) {
  CHECK_EQ(_ca_monitor_samples(0), 0);
  CHECK_EQ(_ca_monitor_samples(1), 1);
  CHECK_EQ(_ca_monitor_samples(2), 2);          /* 2^0.65 = 1.57 -> 2 */
  CHECK_EQ(_ca_monitor_samples(100), 20);       /* 19.95 */
  CHECK_EQ(_ca_monitor_samples(150), 26);       /* 25.97 */
  CHECK_EQ(_ca_monitor_samples(512), 32);       /* 57.7, capped */
  CHECK_EQ(_ca_monitor_samples(1 << 20), 32);   /* capped */
}

/* the pair rule: a hit while the chunk's own footprint between the references fits the L2 */
static void test_pair_rule(void) {
  size_t l2 = 2 << 20, k = 1024;
  CHECK(_ca_monitor_judge(0, 4096, l2));                   /* reused before anything else */
  CHECK(_ca_monitor_judge(36 * 28 * k, 28 * k, l2));       /* a 1 MiB victim: all 37 samples */
  CHECK(_ca_monitor_judge(63 * 32 * k, 32 * k, l2));       /* exactly the L2 */
  CHECK(!_ca_monitor_judge(64 * 32 * k, 32 * k, l2));      /* one sample more */
  CHECK(!_ca_monitor_judge(89 * 45 * k, 45 * k, l2));      /* a 4 MiB frame streamed over */
  CHECK(!_ca_monitor_judge(l2, 4096, l2));                 /* group members of any sizes */
}

/* the reload's thresholds, from readings (ticks of the 8-line chase) seen on the machines: each
   must lie above the faster level's pages and below the slower's */
static void test_thresholds(void) {
  uint32_t zen = _ca_monitor_mem_threshold(240, 3000);          /* Zen 4, quiet: a stream beyond the L3 reads ~780 */
  CHECK(zen > 2 * 260 && zen <= 780);
  CHECK_EQ(_ca_monitor_mem_threshold(500, 3200), 800);           /* Zen 4, a loud L3 reading: the cap holds */
  uint32_t xeon = _ca_monitor_mem_threshold(480, 2000);          /* L3 pages 440-820, beyond it 1400-2600 */
  CHECK(xeon > 820 && xeon < 1400);
  CHECK_EQ(_ca_monitor_mem_threshold(1100, 2000), 0);            /* not apart */
  CHECK_EQ(_ca_monitor_mem_threshold(0, 2000), 0);               /* no reading */
  uint32_t l2 = _ca_monitor_l2_threshold(196, 532);         /* Xeon: the L2's pages 130-240, the L3's 360-820 */
  CHECK(l2 > 240 && l2 < 360);
  CHECK_EQ(_ca_monitor_l2_threshold(196, 200), 0);               /* not apart */
  CHECK_EQ(_ca_monitor_l2_threshold(618, 644), 0);               /* a loud moment: the L3's median (792) alone was apart */
  CHECK(_ca_monitor_l2_threshold(170, 240) > 170);               /* the L3 at 1.4x the L2 is apart (Zen 4 read its L3 at 240 when quiet; its L2 reading is not on record) */
}

static ca_monitor_result_t verdict(bool polluter, uint32_t hits, uint32_t misses) {
  ca_monitor_result_t r = { .polluter = polluter, .pages = 5, .hits = hits, .misses = misses, .far = misses };
  return r;
}

/* no chunk starts being trapped while a debugger traces the process: TracerPid is read from
   /proc/self/status */
static void test_tracer(void) {
  static const char traced[] = "Name:\tprog2\nUmask:\t0022\nState:\tt (tracing stop)\nTgid:\t77\nPid:\t77\nPPid:\t76\nTracerPid:\t4242\nUid:\t0\n";
  static const char free_[] = "Name:\tprog2\nState:\tR (running)\nPPid:\t1\nTracerPid:\t0\nUid:\t0\n";
  static const char none[] = "Name:\tprog2\nState:\tR (running)\n";
  CHECK_EQ(_ca_monitor_tracer(traced, sizeof traced - 1), 4242);
  CHECK_EQ(_ca_monitor_tracer(free_, sizeof free_ - 1), 0);
  CHECK_EQ(_ca_monitor_tracer(none, sizeof none - 1), 0);
  CHECK_EQ(_ca_monitor_tracer(traced, 40), 0);              /* cut before the line */
}

/* io_uring or aio set up by raw system calls: their rings among the mappings stop the traps */
static void test_async_maps(void) {
  static const char plain[] = "55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 123 /usr/bin/prog\n"
                              "7f141b000000-7f141b021000 rw-p 00000000 00:00 0 \n"
                              "7ffc6a1e0000-7ffc6a201000 rw-p 00000000 00:00 0 [stack]\n";
  static const char uring[] = "7f141b35a000-7f141b35b000 rw-s 00000000 00:10 202247 anon_inode:[io_uring]\n";
  static const char aio[] = "7f141b359000-7f141b35a000 rw-s 00000000 00:13 202248 /[aio] (deleted)\n";
  CHECK(!_ca_monitor_async_maps(plain, sizeof plain - 1));
  CHECK(_ca_monitor_async_maps(uring, sizeof uring - 1));
  CHECK(_ca_monitor_async_maps(aio, sizeof aio - 1));
  CHECK(!_ca_monitor_async_maps(uring, 60));               /* cut before the name */
}

static void test_predictor(void) {
  _ca_nw_reset();
  uintptr_t fa[2] = { 0x1000, 0x2000 }, fb[2] = { 0x3000, 0x2000 };
  int c = _ca_nw_context(0x1235, fa, 2, false);
  CHECK(c >= 0);
  CHECK_EQ(_ca_nw_context(0x1235, fa, 2, false), c);      /* same hash, same context */
  CHECK(_ca_nw_context(0x5679, fb, 2, false) != c);
  CHECK_EQ(_ca_nw_context_info(c)->nframes, 2);
  CHECK_EQ(_ca_nw_context_info(c)->frames[1], 0x2000);
  /* first chunk: open, monitored */
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  CHECK(_ca_nw_should_monitor(c));
  ca_monitor_result_t pol = verdict(true, 0, 10), pol2 = verdict(true, 1, 9), vic = verdict(false, 9, 1);
  CHECK_EQ(_ca_nw_budget_halves(c, false), 4);              /* its first chunk: 2x */
  CHECK_EQ(_ca_nw_budget_halves(c, true), 2);               /* its first group: the budget */
  _ca_nw_tried(c);
  CHECK_EQ(_ca_nw_budget_halves(c, false), 2);                     /* learning: the budget */
  CHECK_EQ(_ca_nw_verdict(c, CA_MAP_OPEN, &pol), CA_MAP_OPEN);   /* one polluter is not enough */
  CHECK_EQ(_ca_nw_skip(c), 0);
  CHECK_EQ(_ca_nw_budget_halves(c, false), 8);                     /* its second verdict: 4x */
  CHECK(_ca_nw_should_monitor(c));
  CHECK_EQ(_ca_nw_verdict(c, CA_MAP_OPEN, &pol), CA_MAP_RESTRICTIVE);
  CHECK_EQ(_ca_nw_budget_halves(c, false), 1);                     /* decided: half */
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_RESTRICTIVE);         /* last two were polluters */
  /* correct predictions double the skip interval */
  uint32_t expect = 1;
  for (int i = 0; i < 12; i++) {
    CHECK(_ca_nw_should_monitor(c));
    _ca_nw_verdict(c, CA_MAP_RESTRICTIVE, &pol2);
    CHECK_EQ(_ca_nw_skip(c), expect);
    for (uint32_t k = 0; k < expect; k++) CHECK(!_ca_nw_should_monitor(c));   /* skipped */
    expect = expect * 2 > 1024 ? 1024 : expect * 2;
  }
  CHECK_EQ(_ca_nw_skip(c), 1024);
  /* a wrong prediction resets it and one victim makes the context open again */
  CHECK(_ca_nw_should_monitor(c));
  CHECK_EQ(_ca_nw_verdict(c, CA_MAP_RESTRICTIVE, &vic), CA_MAP_OPEN);
  CHECK_EQ(_ca_nw_skip(c), 0);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  CHECK(_ca_nw_should_monitor(c));
  /* a first verdict that found no polluter earns no extra share */
  int fresh = _ca_nw_context(0x9abd, fb, 2, false);
  _ca_nw_verdict(fresh, CA_MAP_OPEN, &vic);
  CHECK_EQ(_ca_nw_budget_halves(fresh, false), 2);
  /* mixed evidence stays open: polluter, victim, polluter -> open until two in a row */
  _ca_nw_verdict(c, CA_MAP_OPEN, &pol);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, &vic);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, &pol);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_OPEN);
  _ca_nw_verdict(c, CA_MAP_OPEN, &pol);
  CHECK_EQ(_ca_nw_predict(c), CA_MAP_RESTRICTIVE);
  /* a victim context never becomes restrictive */
  uintptr_t fv[1] = { 0x4000 };
  int v = _ca_nw_context(0x9999, fv, 1, false);
  for (int i = 0; i < 5; i++) _ca_nw_verdict(v, _ca_nw_predict(v), &vic);
  CHECK_EQ(_ca_nw_predict(v), CA_MAP_OPEN);
  CHECK_EQ(_ca_nw_skip(v), 16);                            /* 5 correct: 1 2 4 8 16 */
}

/* A group that judged nothing puts its context's next group off: 250 ms, doubled for each such
   group in a row up to 32 times; a judged group ends the run of them. */
static void test_group_retry(void) {
  _ca_nw_reset();
  uintptr_t f[1] = { 0x7000 };
  int c = _ca_nw_context(0x7777, f, 1, false);
  CHECK(c >= 0);
  CHECK_EQ(_ca_nw_retry_ms(c), 0);                         /* never waited */
  uint64_t expect[] = { 250, 500, 1000, 2000, 4000, 8000, 8000 };
  for (int i = 0; i < 7; i++) {
    _ca_nw_group_ended(c, false, 1000);
    CHECK_EQ(_ca_nw_retry_ms(c), 1000 + expect[i]);
  }
  _ca_nw_group_ended(c, true, 5000);
  CHECK_EQ(_ca_nw_retry_ms(c), 1000 + 8000);               /* a judged group changes no wait... */
  _ca_nw_group_ended(c, false, 20000);
  CHECK_EQ(_ca_nw_retry_ms(c), 20000 + 250);               /* ...but starts the doubling over */
  int other = _ca_nw_context(0x8888, f, 1, false);
  CHECK_EQ(_ca_nw_retry_ms(other), 0);                      /* per context */
}

/* A chunk or group in flight holds its expected cost in the budget until it ends, so that a
   second context starting meanwhile is judged with it (each was admitted alone before). */
static void test_reservation(void) {
  _ca_nw_reset();
  uintptr_t f[1] = { 0x7100 };
  int a = _ca_nw_context(0x7171, f, 1, false), b = _ca_nw_context(0x7272, f, 1, false);
  CHECK(a >= 0 && b >= 0 && a != b);
  uint64_t d0 = _ca_nw_budget_due_ns(0, 2), d10 = _ca_nw_budget_due_ns(10, 2), d20 = _ca_nw_budget_due_ns(20, 2);
  CHECK(d0 < d10 && d10 < d20);                            /* a bigger chunk waits longer */
  _ca_nw_reserve(a, 10);                                   /* a's chunk of 10 pages starts */
  CHECK_EQ(_ca_nw_budget_due_ns(0, 2), d10);               /* anything now waits as if with it */
  _ca_nw_reserve(b, 10);
  CHECK_EQ(_ca_nw_budget_due_ns(0, 2), d20);
  _ca_nw_release(a);
  _ca_nw_release(a);                                       /* released once only */
  CHECK_EQ(_ca_nw_budget_due_ns(0, 2), d10);
  _ca_nw_release(b);
  CHECK_EQ(_ca_nw_budget_due_ns(0, 2), d0);                /* nothing held */
}

/* The timeline in the statistics: each verdict, and each change of a context's decision, in
   order; past its room the entries are counted, not kept. */
static void test_timeline(void) {
  static char json[1 << 17];
  _ca_nw_reset();
  uintptr_t f[1] = { 0x7000 };
  int c = _ca_nw_context(0x7771, f, 1, false);
  ca_monitor_result_t pol = verdict(true, 0, 10), vic = verdict(false, 9, 1);
  _ca_nw_verdict(c, CA_MAP_OPEN, &pol);
  _ca_nw_verdict(c, CA_MAP_OPEN, &pol);
  _ca_nw_verdict(c, CA_MAP_RESTRICTIVE, &vic);
  ca_buf_t b = ca_buf(json, sizeof json);
  _ca_layer_nightwatch.stats(&b);
  CHECK(b.len < sizeof json);
  char want[512];
  const char* t = strstr(json, "\"timeline_dropped\":0,\"timeline\":[");
  CHECK(t != NULL);
  /* the five entries, times left out */
  const char* kinds[5] = { "verdict", "verdict", "decision", "verdict", "decision" };
  const char* flags[5] = { "\"polluter\":true", "\"polluter\":true", "\"restrictive\":true",
                           "\"polluter\":false", "\"restrictive\":false" };
  for (int i = 0; t != NULL && i < 5; i++) {
    t = strstr(t, "{\"ms\":");
    CHECK(t != NULL);
    if (t == NULL) break;
    snprintf(want, sizeof want, "\"event\":\"%s\",\"context\":%d,%s}", kinds[i], c, flags[i]);
    const char* end = strchr(t, '}');
    CHECK(end != NULL && strstr(t, want) == end + 1 - strlen(want));
    t = end;
  }
  CHECK(t != NULL && strncmp(t, "}]", 2) == 0);               /* nothing else */
  for (int i = 0; i < 200; i++) _ca_nw_verdict(c, CA_MAP_OPEN, &vic);
  b = ca_buf(json, sizeof json);
  _ca_layer_nightwatch.stats(&b);
  CHECK(strstr(json, "\"timeline_dropped\":109,") != NULL);  /* 205 events, 96 kept */
  _ca_nw_reset();
}

/* Sites: a call site whose scans always find one context becomes a leaf (no more scans but a
   check in 256 uses, and a scan when the word in its caller's slot changes); call sites inside
   a wrapper called from two places become wrappers, whose contexts come from the caller table,
   the size table and scans. */
#define NOINLINE __attribute__((noinline))
static NOINLINE int ctx_here(size_t n) {
  int c = _ca_nw_context_of(n, __builtin_frame_address(0), __builtin_return_address(0));
  __asm__ volatile("" ::: "memory");
  return c;
}
static NOINLINE int leaf_a(void) { int c = ctx_here(8192); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int leaf_b(void) { int c = ctx_here(8192); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int wrapper(size_t n) { int c = ctx_here(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_a(size_t n) { int c = wrapper(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_b(size_t n) { int c = wrapper(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int wrapper2(size_t n) { int c = ctx_here(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_c(size_t n) { int c = wrapper2(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int outer_1(size_t n) { int c = via_c(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int outer_2(size_t n) { int c = via_c(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int leaf_c(void) { int c = ctx_here(4096); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int first_caller(void) { int c = leaf_c(); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int later_caller(void) { int c = leaf_c(); __asm__ volatile("" ::: "memory"); return c; }

/* Every call site below is called from one place, in a loop: the same 10-frame context each
   time (a call from elsewhere would be another context). */
static void test_sites(void) {
  _ca_nw_reset();
  ca_nw_site_stats_t st;
  int a[300], b[300];
  for (int i = 0; i < 300; i++) { a[i] = leaf_a(); b[i] = leaf_b(); }
  CHECK(a[0] >= 0 && b[0] >= 0 && a[0] != b[0]);          /* two call sites, two contexts */
  int same = 0;
  for (int i = 1; i < 300; i++) same += a[i] == a[0] && b[i] == b[0];
  CHECK_EQ(same, 299);
  _ca_nw_sites_stats(&st);
  CHECK(st.leaf_sites >= 2);
  CHECK(st.site_hits > 500);                              /* leaves are named without a scan */
  CHECK(st.scans < 20);
  /* a leaf called from a new place later: told apart at once, by the word in its caller's slot */
  int fc[22], l = -1;
  for (int i = 0; i < 22; i++) {
    if (i == 20) l = later_caller();
    fc[i] = first_caller();
  }
  CHECK(fc[0] >= 0 && l >= 0 && l != fc[0]);
  same = 0;
  for (int i = 1; i < 22; i++) same += fc[i] == fc[0];
  CHECK_EQ(same, 21);
  /* the same size through one wrapper from two call sites: two contexts, told apart by scans
     and then by the caller table, the same every time although stale return addresses lie in
     this frame's arrays */
  _ca_nw_sites_stats(&st);
  uint64_t before = st.scans;
  int wa[200], wb[200];
  for (int i = 0; i < 200; i++) { wa[i] = via_a(12288); wb[i] = via_b(12288); }
  CHECK(wa[0] >= 0 && wb[0] >= 0 && wa[0] != wb[0]);
  same = 0;
  for (int i = 1; i < 200; i++) same += wa[i] == wa[0] && wb[i] == wb[0];
  CHECK_EQ(same, 199);
  const ca_nw_context_t* k = _ca_nw_context_info(wa[0]);
  CHECK(k->nframes >= 4);                                 /* wrapper, via_a, test_sites, main */
  _ca_nw_sites_stats(&st);
  CHECK(st.wrapper_sites >= 2);
  CHECK(st.caller_hits > 300);                            /* (wrapper, via_a) names wa[0] */
  CHECK(st.scans - before < 60);
  /* a wrapper of a wrapper: (wrapper2, via_c) has two contexts; a size from one of them
     names it without scanning */
  before = st.scans;
  uint64_t size_before = st.size_hits;
  int o1[100], o2[100];
  for (int i = 0; i < 100; i++) { o1[i] = outer_1(20480); o2[i] = outer_2(24576); }
  CHECK(o1[0] >= 0 && o2[0] >= 0 && o1[0] != o2[0]);
  same = 0;
  for (int i = 1; i < 100; i++) same += o1[i] == o1[0] && o2[i] == o2[0];
  CHECK_EQ(same, 99);
  _ca_nw_sites_stats(&st);
  CHECK(st.size_hits - size_before > 150);
  CHECK(st.scans - before < 60);
}

/* Leaves are re-checked by a scan in about 1 of 256 uses (a random gap per thread, 1-511).
   A thread's first use of a wrapper site is named from the caller table: the read of the
   caller's word finds the thread's stack (it waited for a first scan, which every new thread
   then made when the size table could not name the chunk). */
static NOINLINE int wrapper3(size_t n) { int c = ctx_here(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_t(size_t n) { int c = wrapper3(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_u(size_t n) { int c = wrapper3(n); __asm__ volatile("" ::: "memory"); return c; }
static NOINLINE int via_v(size_t n) { int c = wrapper3(n); __asm__ volatile("" ::: "memory"); return c; }
static void* thread_via_t(void* arg) {
  int* got = arg;
  for (int i = 0; got[i] != -2; i++) got[i] = via_t(16384);
  return NULL;
}
static int in_thread(int* got) {
  pthread_t t;
  CHECK_EQ(pthread_create(&t, NULL, thread_via_t, got), 0);
  pthread_join(t, NULL);
  return got[0];
}
static void test_site_checks(void) {
  _ca_nw_reset();                               /* no other pair in the caller table's slots */
  ca_nw_site_stats_t st;
  _ca_nw_sites_stats(&st);
  uint64_t before = st.scans;
  for (int i = 0; i < 2560; i++) { leaf_a(); leaf_b(); leaf_a(); leaf_b(); }
  _ca_nw_sites_stats(&st);
  CHECK(st.scans - before >= 10 && st.scans - before <= 100);   /* 10240 uses: ~40 checks */
  /* wrapper3: a wrapper (main calls it through via_u and via_v); threads call it through
     via_t; chunks of one size from main and from threads make the size table ambiguous there */
  via_u(16384);
  via_v(16384);
  int learn[11], a = -1, b = -1;
  learn[10] = -2;
  for (int t = 0; t < 12; t++) {
    in_thread(learn);
    a = via_u(16384);
    a = via_u(16384);
  }
  b = learn[9];
  for (int i = 0; i < 10; i++) CHECK_EQ(learn[i], b);
  CHECK(a >= 0 && b >= 0 && a != b);
  _ca_nw_sites_stats(&st);
  before = st.scans;
  int one[2] = { 0, -2 };
  for (int t = 0; t < 40; t++) CHECK_EQ(in_thread(one), b);
  _ca_nw_sites_stats(&st);
  CHECK(st.scans - before <= 3);                /* was one per thread */
}

/* A stale word after an indirect call does not end the chain: a synthetic stack holds, above
   the call site, a return address after an indirect call in stale_g (nothing calls stale_g
   directly), then one after an indirect call in via_h, then one after a direct call to via_h
   in caller_k.  The chain is call site <- via_h <- caller_k.  (stale_g must lie below via_h,
   or caller_k's call would seem to lead to it as well: functions keep source order here.) */
static uintptr_t ret_g, ret_h, ret_k;
static __attribute__((noinline)) void note_g(void) { ret_g = (uintptr_t)__builtin_return_address(0); }
static __attribute__((noinline)) void note_h(void) { ret_h = (uintptr_t)__builtin_return_address(0); }
static void (*volatile call_g)(void) = note_g;
static void (*volatile call_h)(void) = note_h;
static __attribute__((noinline)) void stale_g(void) { call_g(); __asm__ volatile(""); }
static __attribute__((noinline)) void via_h(void) {
  ret_k = (uintptr_t)__builtin_return_address(0);
  call_h();
  __asm__ volatile("");
}
static __attribute__((noinline)) void caller_k(void) { via_h(); __asm__ volatile(""); }
static void test_stale_indirect(void) {
  stale_g();
  caller_k();
  if (!(ret_g < (uintptr_t)via_h)) {
    fprintf(stderr, "test_stale_indirect: functions not in source order here: not checked\n");
    return;
  }
  volatile uintptr_t stack[4] = { ret_g, ret_h, ret_k, 0 };
  ca_context_t k;
  /* the call site: just below via_h, so that caller_k's direct call does not lead to it */
  _ca_context_capture(&k, (const void*)stack, (const void*)((uintptr_t)via_h - 1));
  CHECK(k.nframes >= 3);
  CHECK_EQ(k.frames[1], ret_h);
  CHECK_EQ(k.frames[2], ret_k);
}

/* Bytes before a stack word that look like a call by chance name a slot anywhere: the scan must
   not read it (cc1 died in the scan on `ff 15` + a wild displacement).  fake_rip follows
   `call *disp32(%rip)` and fake_rel a `call rel32` to a "PLT stub" `jmp *disp32(%rip)`, both
   displacements 2 GiB away from anything mapped. */
__asm__(".text\n"
        ".byte 0xff, 0x15\n .long 0x7ff00000\n"
        "fake_rip:\n"
        ".byte 0xe8\n .long 8\n"
        "fake_rel:\n"
        ".byte 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc\n"
        ".byte 0xff, 0x25\n .long 0x7ff00000\n"
        ".byte 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc\n");
extern const char fake_rip[], fake_rel[];
static void test_wild_slot(void) {
  volatile uintptr_t stack[4] = { (uintptr_t)fake_rip, (uintptr_t)fake_rel, (uintptr_t)fake_rip, 0 };
  ca_context_t k;
  _ca_context_capture(&k, (const void*)stack, (const void*)((uintptr_t)test_wild_slot + 1));
  CHECK(k.nframes >= 1);
  for (uint32_t i = 1; i < k.nframes; i++) CHECK(k.frames[i] != (uintptr_t)fake_rip && k.frames[i] != (uintptr_t)fake_rel);
}

/* On a signal stack the scan reads nothing above it (the page beyond this one is unmapped; the
   scan window is 16 KiB): the context is the call site alone. */
static volatile int alt_frames = -1, alt_caller = -1;
static void on_usr1(int sig) {
  (void)sig;
  ca_context_t k;
  _ca_context_capture(&k, __builtin_frame_address(0), __builtin_return_address(0));
  alt_frames = (int)k.nframes;
  alt_caller = _ca_context_word(__builtin_frame_address(0), 64) != 0;
}
static void test_signal_stack(void) {
  size_t page = 4096, size = 4 * page;
  char* m = mmap(NULL, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m != MAP_FAILED);
  CHECK_EQ(munmap(m + size, page), 0);                   /* nothing above the signal stack */
  stack_t ss = { .ss_sp = m, .ss_size = size, .ss_flags = 0 }, old;
  CHECK_EQ(sigaltstack(&ss, &old), 0);
  struct sigaction sa = { 0 }, prev;
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  CHECK_EQ(sigaction(SIGUSR1, &sa, &prev), 0);
  raise(SIGUSR1);
  CHECK_EQ(alt_frames, 1);
  CHECK_EQ(alt_caller, 0);
  sigaction(SIGUSR1, &prev, NULL);
  ss.ss_flags = SS_DISABLE;
  sigaltstack(&ss, NULL);
  munmap(m, size);
}

/* The fault handler (trap.c) when a client's page was opened between the fault and the
   client's look, and the client has forgotten it (a retired chunk, a finished recolouring):
   the access is retried, and the handler stays installed, so the next trap is still resolved.
   (Passing it on once restored the default action, and the next trap killed the program.)
   A genuine fault still kills; so does a SIGSEGV the program sends itself.  In children. */
static char* late_page;
static int late_calls;
static bool late_client(void* addr, int sig) {
  if ((uintptr_t)addr - (uintptr_t)late_page < 4096) {
    late_calls++;
    syscall(SYS_mprotect, late_page, 4096, PROT_READ | PROT_WRITE);
  }
  return false;                                     /* opened, but not claimed */
}

static void late_twice(void* arg) {
  for (int round = 0; round < 2; round++) {
    mprotect(late_page, 4096, PROT_NONE);
    ((volatile char*)late_page)[round] = 1;
  }
  _exit(late_calls == 2 && late_page[0] == 1 && late_page[1] == 1 ? 0 : 3);
}
static void genuine(void* arg) { *(volatile char*)arg = 1; }
static void sent(void* arg) { kill(getpid(), SIGSEGV); _exit(0); }

static void test_late_fault(void) {
  late_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(late_page != MAP_FAILED);
  CHECK(_ca_trap_register(late_client));
  char err[256];
  int st = run_child(late_twice, NULL, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  char* guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  st = run_child(genuine, guard, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
  st = run_child(sent, NULL, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
  munmap(guard, 4096);
}

/* A thread that blocks every signal still takes our traps (liblzma's threads do: `xz -T2 -d`
   died at its first fault on a sampled page): the masks the program sets never block SIGSEGV or
   SIGBUS, and what it reads back is what it set.  The trap in a child, in a thread. */
static char* blocked_page;
static bool blocked_client(void* addr, int sig) {
  if ((uintptr_t)addr - (uintptr_t)blocked_page >= 4096) return false;
  syscall(SYS_mprotect, blocked_page, 4096, PROT_READ | PROT_WRITE);
  return true;
}
static void* blocked_thread(void* arg) {
  sigset_t all, now, kernel;
  sigfillset(&all);
  if (pthread_sigmask(SIG_SETMASK, &all, NULL) != 0) return (void*)1;
  pthread_sigmask(SIG_SETMASK, NULL, &now);
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, NULL, &kernel, 8);
  if (sigismember(&now, SIGSEGV) != 1 || sigismember(&now, SIGBUS) != 1 || sigismember(&now, SIGUSR1) != 1) return (void*)2;
  if (sigismember(&kernel, SIGSEGV) != 0 || sigismember(&kernel, SIGBUS) != 0 || sigismember(&kernel, SIGUSR1) != 1) return (void*)3;
  ((volatile char*)blocked_page)[7] = 7;                 /* a trap, SIGSEGV "blocked" */
  sigset_t segv;
  sigemptyset(&segv);
  sigaddset(&segv, SIGSEGV);
  sigprocmask(SIG_UNBLOCK, &segv, NULL);
  sigprocmask(SIG_BLOCK, NULL, &now);
  if (sigismember(&now, SIGSEGV) != 0 || sigismember(&now, SIGBUS) != 1) return (void*)4;
  return arg;
}
static void blocked_child(void* arg) {
  pthread_t t;
  void* r = (void*)9;
  mprotect(blocked_page, 4096, PROT_NONE);
  if (pthread_create(&t, NULL, blocked_thread, NULL) == 0) pthread_join(t, &r);
  _exit(r == NULL && blocked_page[7] == 7 ? 0 : 3 + (int)(uintptr_t)r);
}
static void test_blocked_trap(void) {
  blocked_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(blocked_page != MAP_FAILED);
  CHECK(_ca_trap_register(blocked_client));
  char err[256];
  int st = run_child(blocked_child, NULL, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  /* a handler's sa_mask: the program reads back what it set */
  struct sigaction sa = { 0 }, back;
  sa.sa_handler = SIG_IGN;
  sigfillset(&sa.sa_mask);
  CHECK_EQ(sigaction(SIGUSR2, &sa, NULL), 0);
  CHECK_EQ(sigaction(SIGUSR2, NULL, &back), 0);
  CHECK(sigismember(&back.sa_mask, SIGSEGV) == 1 && sigismember(&back.sa_mask, SIGBUS) == 1 && sigismember(&back.sa_mask, SIGINT) == 1);
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  CHECK_EQ(sigaction(SIGUSR2, &sa, &back), 0);
  CHECK(sigismember(&back.sa_mask, SIGSEGV) == 1);
}

/* A signal whose handler calls read() into a sampled page, arriving while the thread is in our
   fault handler (holding the monitor's lock): cmake's SIGCHLD handler did that and hung in 8 of
   12 runs.  Here a timer signal every 50 us, for 1 s, while the thread keeps walking a sampled
   chunk; in a child, which the alarm kills if it hangs. */
static char* nested_buf;
static int nested_pipe[2];
static volatile unsigned long nested_reads;
static void nested_verdict(void* p, size_t n, uint64_t cookie, const ca_monitor_result_t* r) { (void)p; (void)n; (void)cookie; (void)r; }
static void on_tick(int sig) {
  (void)sig;
  int e = errno;
  if (write(nested_pipe[1], "x", 1) == 1 && read(nested_pipe[0], nested_buf + 4096 * (nested_reads % 64) + 100, 1) == 1) nested_reads++;
  errno = e;
}
static void nested_child(void* arg) {
  (void)arg;
  alarm(20);
  _ca_monitor_init(nested_verdict);
  nested_buf = mmap(NULL, 64 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  memset(nested_buf, 0, 64 * 4096);
  if (pipe(nested_pipe) != 0) _exit(3);
  bool started = false;
  for (int i = 0; i < 2000 && !started; i++) { started = _ca_monitor_start(nested_buf, 64 * 4096, 1); if (!started) usleep(1000); }
  if (!started) _exit(4);
  struct sigaction sa = { 0 };
  sa.sa_handler = on_tick;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, NULL);
  timer_t timer;
  struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGPROF };
  struct itimerspec every = { { 0, 50000 }, { 0, 50000 } }, off = { { 0, 0 }, { 0, 0 } };
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0 || timer_settime(timer, 0, &every, NULL) != 0) _exit(6);
  uint64_t end = _ca_clock_ns() + 1000000000ull;
  unsigned long sum = 0, rounds = 0;
  while (_ca_clock_ns() < end) {
    for (int pg = 0; pg < 64; pg++) { nested_buf[pg * 4096 + 8]++; sum += (unsigned char)nested_buf[pg * 4096 + 9]; }
    if (++rounds % 64 == 0) {                      /* sampled pages are done after two pairs: again */
      _ca_monitor_stop(nested_buf);
      _ca_monitor_start(nested_buf, 64 * 4096, 1);
    }
  }
  timer_settime(timer, 0, &off, NULL);
  _exit(nested_reads > 0 && sum < ~0ul ? 0 : 5);
}
static void test_nested_signal(void) {
  char err[256];
  int st = run_child(nested_child, NULL, err, sizeof err);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) fprintf(stderr, "test_nested_signal: child status 0x%x\n", st);
}

/* The signal() family: a program built with -std=c99 calls __sysv_signal, some call
   bsd_signal, sysv_signal or sigset.  None may take our handler away (zstd, under
   nightwatch_monitor=1, died at the first trap: its handler got the fault), and a one-shot
   handler (sysv: SA_RESETHAND) is called once, then the default action kills. */
extern sighandler_t __sysv_signal(int, sighandler_t);
extern sighandler_t bsd_signal(int, sighandler_t);
extern sighandler_t sysv_signal(int, sighandler_t);
extern sighandler_t sigset(int, sighandler_t);
static volatile int* family_calls;                     /* shared with the parent */
static void family_handler(int sig) { (*family_calls)++; }
static void family_child(void* arg) {
  sighandler_t (*set)(int, sighandler_t) = (sighandler_t (*)(int, sighandler_t))arg;
  alarm(10);                                          /* a handler that fixes nothing loops */
  mprotect(blocked_page, 4096, PROT_NONE);            /* a page a client resolves */
  set(SIGSEGV, family_handler);
  blocked_page[9] = 9;
  if (*family_calls != 0 || blocked_page[9] != 9) _exit(3);
  _exit(0);
}
static void oneshot_child(void* arg) {
  char* guard = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  alarm(10);
  __sysv_signal(SIGSEGV, family_handler);
  *(volatile char*)guard = 1;                         /* the handler once, then the default */
  _exit(4);
}
static void test_signal_family(void) {
  family_calls = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(family_calls != MAP_FAILED && _ca_trap_register(blocked_client));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  sighandler_t (*sets[])(int, sighandler_t) = { __sysv_signal, bsd_signal, sysv_signal, sigset, signal };
#pragma GCC diagnostic pop
  char err[256];
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
    *family_calls = 0;
    int st = run_child(family_child, (void*)sets[i], err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  *family_calls = 0;
  int st = run_child(oneshot_child, NULL, err, sizeof err);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
  CHECK_EQ(*family_calls, 1);
}

int main(void) {
  free(malloc(1));
  test_sampling_count();
  test_pair_rule();
  test_thresholds();
  test_tracer();
  test_async_maps();
  test_predictor();
  test_group_retry();
  test_reservation();
  test_timeline();
  test_sites();
  test_site_checks();
  test_signal_stack();
  test_stale_indirect();
  test_wild_slot();
  test_late_fault();
  test_blocked_trap();
  test_nested_signal();
  test_signal_family();
  return check_done("test_nightwatch");
}
