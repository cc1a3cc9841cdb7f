# Tests.  Every unit test is one C file built once without chromalloc (it reaches chromalloc's
# extensions through weak symbols) and run three ways: linked against libchromalloc.so,
# linked against libchromalloc.a, and as a plain binary under LD_PRELOAD.
TEST_NAMES = api stress fork threads enomem invalid_free rss colour_api monitor
TEST_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-alloc-size-larger-than -Wno-free-nonheap-object -Wno-use-after-free -Wno-maybe-uninitialized -pthread -Iinclude
TEST_BIN   = $(BUILD)/tests
ABS_SO     = $(abspath $(SO))

$(TEST_BIN)/%-plain: tests/unit/%.c tests/unit/check.h bench/colour/l2reading.h
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -ldl

$(TEST_BIN)/%-shared: tests/unit/%.c tests/unit/check.h bench/colour/l2reading.h $(SO)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -lchromalloc -ldl

$(TEST_BIN)/%-static: tests/unit/%.c tests/unit/check.h bench/colour/l2reading.h $(AR_LIB)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -Wl,--whole-archive $(AR_LIB) -Wl,--no-whole-archive -ldl

TEST_BINS = $(foreach t,$(TEST_NAMES),$(TEST_BIN)/test_$(t)-plain $(TEST_BIN)/test_$(t)-shared $(TEST_BIN)/test_$(t)-static)
# tests of internal interfaces: static link only
TEST_INTERNAL = hooks colour colour_start nightwatch small pmu protect
TEST_BINS += $(foreach t,$(TEST_INTERNAL),$(TEST_BIN)/test_$(t)-static)

.PHONY: test-unit
test-unit: lib $(TEST_BINS)
	@set -e; for t in $(TEST_NAMES); do \
	  echo "== test_$$t (linked -lchromalloc)"; TEST_NO_L2=1 $(TEST_BIN)/test_$$t-shared; \
	  echo "== test_$$t (static libchromalloc.a)"; TEST_NO_L2=1 $(TEST_BIN)/test_$$t-static; \
	  echo "== test_$$t (LD_PRELOAD)"; LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_$$t-plain; \
	done; \
	for t in $(TEST_INTERNAL); do echo "== test_$$t (static, internal)"; $(TEST_BIN)/test_$$t-static; done

test: test-unit

# Real programs (python3, sqlite3, git, a C++ program) with and without LD_PRELOAD: same output.
.PHONY: test-programs test-install test-docs
test-programs: lib
	CHROMALLOC_CHECK_STATS=1 BUILD_DIR=$(abspath $(TEST_BIN)) tests/programs/run.sh $(ABS_SO)

# The same programs with NightWatch monitoring every chunk (sampled pages PROT_NONE between
# references): still the reference output, no EFAULT, no hang.
.PHONY: test-programs-monitored
test-programs-monitored: lib
	CHROMALLOC_OPTIONS=nightwatch=1,nightwatch_monitor=1 BUILD_DIR=$(abspath $(TEST_BIN)) tests/programs/run.sh $(ABS_SO)

test: test-programs-monitored

# make install into a temporary prefix; build user programs with pkg-config and CMake.
test-install: lib
	tests/install/run.sh

# `chromalloc report` on recorded statistics: the NightWatch table and timeline.
.PHONY: test-report
test-report:
	tests/tools/report.sh

# docs/options.md is generated from the library's option table and must not drift.
test-docs: lib
	@tools/chromalloc options --markdown --lib $(ABS_SO) | diff -u docs/options.md - \
	  && echo "PASS docs/options.md matches the option table" \
	  || { echo "FAIL docs/options.md is stale: run 'make docs'"; exit 1; }

# The colour layer unavailable: disabled by option, or a machine profile that says so.
test-colour-off: lib $(TEST_BIN)/test_colour_api-plain
	CHROMALLOC_OPTIONS=colours=0 LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_colour_api-plain disabled
	@printf '{"profile_version":1,"cpu":"%s","usable":false,"reason":"test: not controllable","level":2,"method":"none","colours":0,"ways":0}\n' \
	  "$$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)" > $(TEST_BIN)/unusable-profile.json
	CHROMALLOC_PROFILE=$(abspath $(TEST_BIN))/unusable-profile.json LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_colour_api-plain disabled 2>&1 \
	  | tee $(TEST_BIN)/colour-off.log; grep -q "chromalloc: cache colours cannot be controlled here (test: not controllable)" $(TEST_BIN)/colour-off.log

# colour_worker: the worker keeps within its share of a CPU while it stocks a big pool.
.PHONY: test-colour-pace
test-colour-pace: lib $(TEST_BIN)/test_colour_api-plain
	CHROMALLOC_OPTIONS=colour_worker=10,colour_pool=64 LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_colour_api-plain pace

test: test-colour-pace

# colour_audit=1 (off by default): the coloured API still behaves, and no page of a small slice
# is handed out before its group has been judged (a slice the audit has not vouched for waits).
# Not read in the L2: with the audit the 1/8 block failed to evict itself in 3 of 12 runs of
# this session (2026-11-29), none without it (docs/colours.md); the audit's pools are no claim.
.PHONY: test-colour-audit
test-colour-audit: lib $(TEST_BIN)/test_colour_api-plain
	CHROMALLOC_OPTIONS=colour_audit=1 CHROMALLOC_STATS=$(abspath $(TEST_BIN))/colour-audit.json \
	  TEST_NO_L2=1 LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_colour_api-plain
	python3 -c 'import json, sys; from fractions import Fraction as F; c = json.load(open(sys.argv[1]))["colours"]; \
	  small = lambda s: (lambda a, b: F(b) - F(a) <= F(1, 4))(*s["slice"].split("-")); \
	  handed = sum(s["pages_handed"] for s in c.get("sets", []) if not s["by_elimination"] and small(s)); \
	  judged = c.get("audit", {}).get("groups_judged", 0); \
	  print("colour_audit=1: layer %s, groups judged %d, small slices handed %d pages" % (c["state"], judged, handed)); \
	  sys.exit(0 if handed == 0 or judged >= 1 else "FAIL a small slice handed out pages no group vouched for")' \
	  $(abspath $(TEST_BIN))/colour-audit.json

test: test-colour-audit

# NightWatch starts the colour layer only after nightwatch_delay: a polluter before it leaves
# the layer off.
.PHONY: test-delay
test-delay: lib $(TEST_BIN)/test_monitor-plain
	CHROMALLOC_OPTIONS=nightwatch=1,nightwatch_monitor=1,nightwatch_delay=3600000 LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_monitor-plain delay-off
	CHROMALLOC_OPTIONS=nightwatch=1,nightwatch_monitor=1,nightwatch_delay=0 LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_monitor-plain delay-on

test: test-programs test-install test-docs test-report test-colour-off test-delay

# The stress tests again under settings that change the slow paths: no segment cache and
# immediate purging, never purging, and the index-unfriendly layout.
OPTION_SETS = segment_cache=0,purge_delay=0 purge_delay=-1,colour=0 layout=ciu,thp=1
.PHONY: test-options
test-options: lib $(TEST_BIN)/test_stress-plain $(TEST_BIN)/test_threads-plain $(TEST_BIN)/test_fork-plain
	@set -e; for o in $(OPTION_SETS); do \
	  echo "== stress, threads, fork with CHROMALLOC_OPTIONS=$$o"; \
	  for t in stress threads fork; do CHROMALLOC_OPTIONS=$$o LD_PRELOAD=$(ABS_SO) $(TEST_BIN)/test_$$t-plain; done; \
	done

test: test-options
