#!/bin/sh
# The core reaches the OS only through its own OS layer: none of the functions the allocator's
# objects call (core, index-aware placement, the malloc API) is one the cache runtime defines
# (its wrapped libc calls: open, read, write, clock_gettime ...).  Usage: core_calls.sh BUILD
set -eu
b=$1
nm -D --defined-only "$b/libchromalloc-colour.so" | awk '{print $3}' | sort -u > "$TEST_WORK/runtime"
nm -D --defined-only "$b/libchromalloc.so" | awk '{print $3}' | sort -u > "$TEST_WORK/lean"
comm -23 "$TEST_WORK/runtime" "$TEST_WORK/lean" > "$TEST_WORK/wrapped"
for o in "$b"/obj/core/*.o "$b"/obj/index/*.o "$b"/obj/api/malloc.o "$b"/obj/api/new.o; do nm -u "$o"; done | awk '{print $2}' | sed 's/@.*//' | sort -u > "$TEST_WORK/called"
both=$(comm -12 "$TEST_WORK/wrapped" "$TEST_WORK/called")
echo "the allocator calls $(wc -l < "$TEST_WORK/called") outside functions; the cache runtime defines $(wc -l < "$TEST_WORK/wrapped") the allocator does not"
[ -z "$both" ] || { echo "FAIL the core calls functions the cache runtime wraps: $both"; exit 1; }
