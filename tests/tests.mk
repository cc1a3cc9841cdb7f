# Tests.  `make test` builds the test programs and runs tests/run.py, which gives every test its
# own home, cache and machine profile, and a described machine whose L2 the colour layer
# simulates (so no outcome depends on this host's timing), and ends with "N passed, N failed".
# `make check-machine` measures the machine at hand instead: it reports, and never fails.
#
# Every program test is one C file built once without chromalloc (it reaches chromalloc's
# extensions through weak symbols) and run linked against the shared library, linked against
# the static archive, and as a plain binary under LD_PRELOAD.  Tests of internal interfaces are
# linked statically only.
# the allocator's tests: linked against libchromalloc.so and .a, and preloaded (both libraries)
TEST_NAMES = api stress fork threads enomem invalid_free rss lean
# the cache runtime's: linked against libchromalloc-colour.so and .a, and preloaded
TEST_COLOUR = colour_api monitor
# internal interfaces: linked with the cache runtime built with its test hooks (whole archive)
TEST_INTERNAL = hooks colour colour_start frames nightwatch small pmu protect geometry profile purge move hot partition rocs
TEST_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -Wno-unused-parameter -Wno-alloc-size-larger-than -Wno-free-nonheap-object -Wno-use-after-free -Wno-maybe-uninitialized -pthread -Iinclude
TEST_BIN   = $(BUILD)/tests
TEST_DEPS  = tests/unit/check.h bench/colour/l2reading.h

$(TEST_BIN)/%-plain: tests/unit/%.c $(TEST_DEPS)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -ldl

$(TEST_BIN)/%-shared: tests/unit/%.c $(TEST_DEPS) $(SO)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -lchromalloc -ldl

$(TEST_BIN)/%-static: tests/unit/%.c $(TEST_DEPS) $(AR_LIB)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -Wl,--whole-archive $(AR_LIB) -Wl,--no-whole-archive -ldl

$(TEST_BIN)/%-cshared: tests/unit/%.c $(TEST_DEPS) $(CSO)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -lchromalloc-colour -ldl

$(TEST_BIN)/%-cstatic: tests/unit/%.c $(TEST_DEPS) $(CAR_LIB)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ -Wl,--whole-archive $(CAR_LIB) -Wl,--no-whole-archive -ldl

$(TEST_BIN)/%-internal: tests/unit/%.c $(TEST_DEPS) $(TEST_LIB)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) -DCA_TEST_HOOKS $< -o $@ -Wl,--whole-archive $(TEST_LIB) -Wl,--no-whole-archive -ldl

# C++'s operator new and delete (a C++ program; -O0: the compiler may drop a new/delete pair)
TEST_CXXFLAGS = -std=c++17 -O0 -g -Wall -Wextra -Wno-free-nonheap-object -pthread
$(TEST_BIN)/test_new-plain: tests/unit/test_new.cpp
	@mkdir -p $(TEST_BIN)
	$(CXX) $(TEST_CXXFLAGS) $< -o $@ -ldl

$(TEST_BIN)/test_new-shared: tests/unit/test_new.cpp $(SO)
	@mkdir -p $(TEST_BIN)
	$(CXX) $(TEST_CXXFLAGS) $< -o $@ -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -lchromalloc -ldl

$(TEST_BIN)/test_new-static: tests/unit/test_new.cpp $(AR_LIB)
	@mkdir -p $(TEST_BIN)
	$(CXX) $(TEST_CXXFLAGS) $< -o $@ -Wl,--whole-archive $(AR_LIB) -Wl,--no-whole-archive -ldl

# the core and index-aware placement link into a program with libc alone
$(TEST_BIN)/core-alone: tests/unit/core_alone.c $(LEAN_OBJ)
	@mkdir -p $(TEST_BIN)
	$(CC) $(TEST_CFLAGS) $< -o $@ $(filter $(BUILD)/obj/core/% $(BUILD)/obj/index/%,$(LEAN_OBJ)) -nodefaultlibs -lc -lgcc

# the cache runtime built without sibling calls, as -O0 and -O1 builds are: malloc's call site
# (whether glibc's own code asked) must not hang on the compiler making a call a tail call
NOSIB_CSO = $(BUILD)/nosib/libchromalloc-colour.so
$(NOSIB_CSO): $(LEAN_SRC) $(RUNTIME_SRC) $(LIB_HDR) Makefile
	$(MAKE) -s BUILD=$(BUILD)/nosib OPT="$(OPT) -fno-optimize-sibling-calls" $(NOSIB_CSO)

TEST_BINS = $(NOSIB_CSO) $(foreach t,$(TEST_NAMES),$(TEST_BIN)/test_$(t)-plain $(TEST_BIN)/test_$(t)-shared $(TEST_BIN)/test_$(t)-static) \
            $(foreach t,$(TEST_COLOUR),$(TEST_BIN)/test_$(t)-plain $(TEST_BIN)/test_$(t)-cshared $(TEST_BIN)/test_$(t)-cstatic) \
            $(foreach t,$(TEST_INTERNAL),$(TEST_BIN)/test_$(t)-internal) $(TEST_BIN)/core-alone \
            $(TEST_BIN)/test_new-plain $(TEST_BIN)/test_new-shared $(TEST_BIN)/test_new-static \
            $(TEST_BIN)/test_locksets-plain $(TEST_BIN)/test_locksets-cshared

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
