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

.PHONY: all lib test demo bench clean install
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

clean:
	rm -rf $(BUILD)

include tests/tests.mk
