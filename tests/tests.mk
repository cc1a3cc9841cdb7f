# Tests.  `make test` builds the test programs and runs tests/run.py, which gives every test its
# own home, cache and machine profile, and a described machine whose L2 the colour layer
# simulates (so no outcome depends on this host's timing), and ends with "N passed, N failed".
# `make check-machine` measures the machine at hand instead: it reports, and never fails.
#
# Every program test is one C file built once without chromalloc (it reaches chromalloc's
# extensions through weak symbols) and run three ways: linked against libchromalloc.so, linked
# against libchromalloc.a, and as a plain binary under LD_PRELOAD.  Tests of internal
# interfaces are linked statically only.
TEST_NAMES = api stress fork threads enomem invalid_free rss colour_api monitor
TEST_INTERNAL = hooks colour colour_start nightwatch small pmu protect geometry profile
TEST_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-alloc-size-larger-than -Wno-free-nonheap-object -Wno-use-after-free -Wno-maybe-uninitialized -pthread -Iinclude
TEST_BIN   = $(BUILD)/tests
TEST_DEPS  = tests/unit/check.h bench/colour/l2reading.h
ABS_SO     = $(abspath $(SO))

$(TEST_BIN)/%-plain: tests/unit/%.c $(TEST_DEPS)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -ldl

$(TEST_BIN)/%-shared: tests/unit/%.c $(TEST_DEPS) $(SO)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -lchromalloc -ldl

$(TEST_BIN)/%-static: tests/unit/%.c $(TEST_DEPS) $(AR_LIB)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -Wl,--whole-archive $(AR_LIB) -Wl,--no-whole-archive -ldl

TEST_BINS = $(foreach t,$(TEST_NAMES),$(TEST_BIN)/test_$(t)-plain $(TEST_BIN)/test_$(t)-shared $(TEST_BIN)/test_$(t)-static) \
            $(foreach t,$(TEST_INTERNAL),$(TEST_BIN)/test_$(t)-static)

.PHONY: test test-build check-machine
test-build: lib $(TEST_BINS)

# TESTS=substring runs only the tests whose names contain it (tests/run.py --list names them)
test: test-build
	@python3 tests/run.py --build $(BUILD) $(TESTS)

# The machine at hand, measured: the colour layer's calibration, readiness and pools read in
# the L2 by timing, and NightWatch end to end.  Prints what it saw and "not checked: why" for
# what it could not measure; the exit status is 0 whatever it found.
check-machine: test-build
	@python3 tests/check_machine.py --build $(BUILD)
