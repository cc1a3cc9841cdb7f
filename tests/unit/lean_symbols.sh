#!/bin/sh
# libchromalloc.so (the allocator alone) exports the malloc family, glibc's __libc_* aliases,
# malloc_trim, malloc_usable_size, C++'s operator new and delete (plain, array, sized) and
# chromalloc's own functions that need no colours: nothing else (no libc function wrapped).
# Usage: lean_symbols.sh LIB
set -eu
lib=$1
allowed="malloc free calloc realloc reallocarray posix_memalign aligned_alloc memalign valloc pvalloc
malloc_usable_size malloc_trim cfree __libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign
__libc_valloc __libc_pvalloc __posix_memalign chromalloc_version chromalloc_stats_json chromalloc_stats_write
chromalloc_option chromalloc_options_describe chromalloc_collect
_Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm"
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
want=$(printf '%s\n' $allowed | sort)
extra=$(printf '%s\n' "$got" | grep -vxF "$want" || true)
missing=$(printf '%s\n' "$want" | grep -vxF "$got" || true)
echo "$lib exports $(printf '%s\n' "$got" | wc -l) symbols"
[ -z "$extra" ] || { echo "FAIL exported beyond the list: $extra"; exit 1; }
[ -z "$missing" ] || { echo "FAIL not exported: $missing"; exit 1; }
