#!/usr/bin/env bash
# Install into a temporary prefix and use both libraries the three ways a user would: a program
# built with pkg-config, a CMake project with find_package(chromalloc) (shared and static
# targets), and the installed `chromalloc run` tool (with and without --colour).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
make -s -C "$root" install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -o "$tmp/hello_pc" "$root/tests/install/hello.c" $(pkg-config --cflags --libs chromalloc) -Wl,-rpath,"$prefix/lib"
cc -o "$tmp/hello_pcc" -DHELLO_COLOUR "$root/tests/install/hello.c" $(pkg-config --cflags --libs chromalloc-colour) -Wl,-rpath,"$prefix/lib"
check() {  # name output [colour]
  want="hello${3:+ colour} from chromalloc "
  case $2 in "$want"*": stats ok, own error, own sigset") echo "PASS $1: $2" ;; *) echo "FAIL $1: $2"; exit 1 ;; esac
}
check pkg-config "$("$tmp/hello_pc")"
check "pkg-config chromalloc-colour" "$("$tmp/hello_pcc")" colour
cmake -S "$root/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$prefix/lib" >/dev/null
cmake --build "$tmp/cm" >/dev/null
check "cmake hello_shared" "$("$tmp/cm/hello_shared")"
check "cmake hello_static" "$("$tmp/cm/hello_static")"
check "cmake hello_colour_shared" "$("$tmp/cm/hello_colour_shared")" colour
check "cmake hello_colour_static" "$("$tmp/cm/hello_colour_static")" colour
for colour in "" --colour; do
  out=$(CHROMALLOC_LIB= CHROMALLOC_COLOUR_LIB= "$prefix/bin/chromalloc" run $colour --report -- /bin/true 2>&1)
  grep -q "chromalloc .* statistics" <<<"$out" || { echo "FAIL installed chromalloc run $colour: $out"; exit 1; }
  echo "PASS installed chromalloc run $colour --report"
done
