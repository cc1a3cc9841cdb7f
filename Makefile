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
LIB_SRC = $(wildcard src/core/*.c src/index/*.c src/color/*.c src/monitor/*.c src/policy/*.c src/api/*.c)
LIB_OBJ = $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRC))
LIB_HDR = $(wildcard src/*/*.h include/*.h)
SO      = $(BUILD)/libchromalloc.so
AR_LIB  = $(BUILD)/libchromalloc.a

.PHONY: all lib test demo bench docs clean install uninstall
all: lib

lib: $(SO) $(AR_LIB)

$(BUILD)/obj/%.o: src/%.c $(LIB_HDR) Makefile
	@mkdir -p $(dir $@)
	$(CC) $(LIBFLAGS) -c $< -o $@

$(SO): $(LIB_OBJ)
	$(CC) -shared -pthread -Wl,-soname,libchromalloc.so -Wl,-z,relro,-z,now -o $@ $(LIB_OBJ)

$(AR_LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $(LIB_OBJ)

VERSION = $(shell sed -n 's/^\#define CHROMALLOC_VERSION "\(.*\)"/\1/p' include/chromalloc.h)
DESTDIR ?=
SUBST   = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g'

# Installs the library (shared + static), the header, the chromalloc tool, pkg-config and
# CMake package files: `pkg-config --libs chromalloc`, `find_package(chromalloc)`.
install: lib
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc \
	           $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(SO) $(DESTDIR)$(PREFIX)/lib/libchromalloc.so
	install -m 644 $(AR_LIB) $(DESTDIR)$(PREFIX)/lib/libchromalloc.a
	install -m 644 include/chromalloc.h $(DESTDIR)$(PREFIX)/include/chromalloc.h
	install -m 755 tools/chromalloc $(DESTDIR)$(PREFIX)/bin/chromalloc
	$(SUBST) packaging/chromalloc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc.pc
	$(SUBST) packaging/chromallocConfig.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc/chromallocConfig.cmake
	$(SUBST) packaging/chromallocConfigVersion.cmake.in > $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc/chromallocConfigVersion.cmake

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/lib/libchromalloc.so $(DESTDIR)$(PREFIX)/lib/libchromalloc.a \
	      $(DESTDIR)$(PREFIX)/include/chromalloc.h $(DESTDIR)$(PREFIX)/bin/chromalloc \
	      $(DESTDIR)$(PREFIX)/lib/pkgconfig/chromalloc.pc
	rm -rf $(DESTDIR)$(PREFIX)/lib/cmake/chromalloc

# Benchmarks against glibc, jemalloc, mimalloc and tcmalloc (installed from Debian packages by
# the runner), then the colour layer's own (polluter/victim, calibration, recolouring): CSV, JSON
# and PNG in bench/results/.  About 25 minutes; see bench/README.md.
bench: lib
	python3 bench/run.py all
	python3 bench/colour.py
	python3 bench/nightwatch.py

# A short tour: the index benchmark at a few sizes (chromalloc, its index-unfriendly layout and
# whichever peers are installed), then python3 running a bundled workload under chromalloc with
# its statistics report.
demo: lib
	@echo "== index benchmark: 256 blocks per size, distinct L1 sets and ns per step of an address-ordered chase"
	@python3 bench/run.py index --reps 1 --step 496 --out $(BUILD)/demo \
	  --allocators $$(python3 tools/demo_allocators.py) | sed -n '/^Index:/,$$p'
	@echo
	@echo "== python3 running tools/demo_workload.py under chromalloc (PYTHONMALLOC=malloc: every object through malloc)"
	@PYTHONMALLOC=malloc tools/chromalloc run --report --lib $(abspath $(SO)) -- python3 tools/demo_workload.py

# Regenerate the generated parts of the documentation.
docs: lib
	tools/chromalloc options --markdown --lib $(abspath $(SO)) > docs/options.md

clean:
	rm -rf $(BUILD)

include tests/tests.mk
