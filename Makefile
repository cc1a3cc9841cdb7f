# chromalloc build.  `make` builds the library (shared + static) and the chromalloc tool;
# `make test` runs the test suite, `make demo` a short tour, `make bench` the benchmarks
# against glibc/jemalloc/mimalloc/tcmalloc.  Out-of-tree output goes to build/.

CC      ?= cc
CXX     ?= c++
PREFIX  ?= /usr/local
BUILD   ?= build
OPT     ?= -O2 -g

WARN    = -Wall -Wextra -Wno-unused-parameter
LIBFLAGS = -std=gnu11 $(OPT) $(WARN) -fPIC -pthread -fvisibility=hidden -ftls-model=initial-exec \
           -fno-semantic-interposition -fno-builtin-malloc -fno-builtin-calloc \
           -fno-builtin-realloc -fno-builtin-free -Iinclude
# Two libraries from one tree: the allocator alone (core + index-aware placement + the malloc
# API) and the cache runtime (the same allocator plus the colour layer, the monitor and the
# policies).  They share every object but the core's init, which the runtime's names its layers in.
LEAN_SRC    = $(wildcard src/core/*.c src/index/*.c) src/api/malloc.c src/api/new.c
RUNTIME_SRC = $(wildcard src/color/*.c src/monitor/*.c src/policy/*.c) src/api/colours.c src/api/runtime.c
LEAN_OBJ    = $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LEAN_SRC))
RUNTIME_OBJ = $(patsubst src/%.c,$(BUILD)/obj/%.o,$(RUNTIME_SRC))
COLOUR_OBJ  = $(filter-out $(BUILD)/obj/core/init.o,$(LEAN_OBJ)) $(BUILD)/obj/core/init-runtime.o $(RUNTIME_OBJ)
LIB_HDR     = $(wildcard src/*/*.h include/*.h)
SO          = $(BUILD)/libchromalloc.so
AR_LIB      = $(BUILD)/libchromalloc.a
CSO         = $(BUILD)/libchromalloc-colour.so
CAR_LIB     = $(BUILD)/libchromalloc-colour.a

.PHONY: all lib test demo bench docs clean install uninstall
all: lib

lib: $(SO) $(AR_LIB) $(CSO) $(CAR_LIB)

$(BUILD)/obj/%.o: src/%.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -c $< -o $@

$(BUILD)/obj/core/init-runtime.o: src/core/init.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -DCA_RUNTIME -c $< -o $@

$(SO): $(LEAN_OBJ)
	$(CC) -shared -pthread -Wl,-soname,libchromalloc.so -Wl,-z,relro,-z,now -o $@ $(LEAN_OBJ)

$(AR_LIB): $(LEAN_OBJ)
	@rm -f $@
	ar rcs $@ $(LEAN_OBJ)

$(CSO): $(COLOUR_OBJ)
	$(CC) -shared -pthread -Wl,-soname,libchromalloc-colour.so -Wl,-z,relro,-z,now -o $@ $(COLOUR_OBJ) -ldl

$(CAR_LIB): $(COLOUR_OBJ)
	@rm -f $@
	ar rcs $@ $(COLOUR_OBJ)

# The internal tests link the cache runtime built with its test hooks (failures they inject,
# CA_TEST_HOOKS): the runtime's objects compiled again, the allocator's shared.
TEST_OBJ    = $(filter-out $(BUILD)/obj/core/init.o,$(LEAN_OBJ)) $(BUILD)/obj/core/init-runtime.o \
              $(patsubst src/%.c,$(BUILD)/obj-test/%.o,$(RUNTIME_SRC))
TEST_LIB    = $(BUILD)/tests/libchromalloc-colour-test.a

$(BUILD)/obj-test/%.o: src/%.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -DCA_TEST_HOOKS -c $< -o $@

$(TEST_LIB): $(TEST_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $(TEST_OBJ)

VERSION = $(shell sed -n 's/^\#define CHROMALLOC_VERSION "\(.*\)"/\1/p' include/chromalloc.h)
DESTDIR ?=
SUBST   = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g'

# Installs both libraries (shared + static), the header, the chromalloc tool, pkg-config and
# CMake package files: `pkg-config --libs chromalloc` (or chromalloc-colour),
# `find_package(chromalloc)`.
install: lib
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc \
	           $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(SO) $(CSO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(AR_LIB) $(CAR_LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/chromalloc.h $(DESTDIR)$(PREFIX)/include/chromalloc.h
	install -m 755 tools/chromalloc $(DESTDIR)$(PREFIX)/bin/chromalloc
	$(SUBST) packaging/chromalloc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc.pc
	$(SUBST) packaging/chromalloc-colour.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc-colour.pc
	$(SUBST) packaging/chromallocConfig.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc/chromallocConfig.cmake
	$(SUBST) packaging/chromallocConfigVersion.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc/chromallocConfigVersion.cmake

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/libchromalloc.so $(DESTDIR)$(PREFIX)/lib/libchromalloc.a \
	      $(DESTDIR)$(PREFIX)/lib/libchromalloc-colour.so $(DESTDIR)$(PREFIX)/lib/libchromalloc-colour.a \
	      $(DESTDIR)$(PREFIX)/include/chromalloc.h $(DESTDIR)$(PREFIX)/bin/chromalloc \
	      $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc-colour.pc
	rm -rf $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc

# Benchmarks against glibc, jemalloc, mimalloc and tcmalloc (installed from Debian packages by
# the runner), then the colour layer's own (polluter/victim, calibration, recolouring): CSV, JSON
# and PNG in bench/results/.  About 25 minutes; see bench/README.md.
bench: lib
	python3 bench/run.py all
	python3 bench/colour.py
	python3 bench/nightwatch.py

# mimalloc-bench's benchmarks (a checkout given by MIMALLOC_BENCH, fetched once outside this
# repository) under glibc, jemalloc, mimalloc, tcmalloc and the allocator: bench/mimalloc_bench.py.
.PHONY: bench-mimalloc
bench-mimalloc: lib
	python3 bench/mimalloc_bench.py --suite "$(MIMALLOC_BENCH)"

# malloc's and free's fast paths in instructions under callgrind, against the peers (a minute;
# needs valgrind): bench/fastpath.py.
.PHONY: bench-fastpath
bench-fastpath: lib
	python3 bench/fastpath.py

# The cache runtime's start and cost on an unmodified victim/polluter program (bench/colour/vp.c):
# 2, 5 and 20 s runs under glibc, mimalloc and both libraries, with and without a machine
# profile and set file, 10 processes each (about 25 minutes): bench/colour_start.py.
.PHONY: bench-colour-start
bench-colour-start: lib
	python3 bench/colour_start.py

# Hot pages (docs/hot.md): a hot set of 85% and 42.5% of the L2 chased among cold blocks under
# glibc, mimalloc and the cache runtime with hot pages off and on, 7 repetitions of 10 s (about
# 10 minutes): bench/hot.py.  Then the allocator's own suite with hot pages off and on, for the
# sampling's cost on programs it cannot help (about 10 minutes).
.PHONY: bench-hot
bench-hot: lib
	python3 bench/hot.py
	python3 bench/run.py suite --reps 5 --allocators colour,colour-hot --out bench/results/hot-suite \
	  --also colour=$(CSO):hot=0 --also colour-hot=$(CSO):hot=1

# Lock sets: six two-thread kernels (a hash table with per-bucket locks at 60, 85 and 100% of the
# L2, the same under two nested locks, water, ocean, a dedup-like pipeline, a lock loop) under
# glibc, mimalloc and the cache runtime with lock sets off and on, 7 repetitions of 10 s (about
# 38 minutes): bench/locksets.py.
.PHONY: bench-locksets
bench-locksets: lib
	python3 bench/locksets.py

# ROCS (docs/rocs.md): a stream and a reused third of the L2 in one allocation (4 MiB, held by the
# L3, and 48 MiB, beyond it), CG- and swim-like kernels and two adversaries, under glibc, mimalloc,
# NightWatch alone and ROCS (scored by its stand-in, by the program's progress, with pages reused
# through the L3, and at 0, 50 and 100% of its stack without a search), 7 repetitions of 15 s
# (about 1 h 50): bench/rocs.py.
.PHONY: bench-rocs
bench-rocs: lib
	python3 bench/rocs.py --sweep 0,50,100

# A short tour (under a minute): the allocator's index benchmark at a few sizes (chromalloc, its
# index-unfriendly layout and whichever peers are installed), then the cache runtime protecting a
# victim from a streamed polluter (tools/demo_protect.py: a table and build/demo/protect.png).
demo: lib
	@echo "== the allocator: 256 blocks per size, distinct L1 sets and ns per step of an address-ordered chase"
	@python3 bench/run.py index --reps 3 --step 496 --out $(BUILD)/demo \
	  --allocators $$(python3 tools/demo_allocators.py) | sed -n '/^Index:/,$$p'
	@echo
	@echo "== the cache runtime: a victim chased while a polluter streams through the L2"
	@python3 tools/demo_protect.py --out $(BUILD)/demo

# Regenerate the generated parts of the documentation.
docs: lib
	tools/chromalloc options --markdown --lib $(abspath $(CSO)) > docs/options.md

clean:
	rm -rf $(BUILD)

include tests/tests.mk
