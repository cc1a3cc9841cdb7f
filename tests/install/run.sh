#!/usr/bin/env bash
# Install into a temporary prefix and use chromalloc the three ways a user would: a program
# built with pkg-config, a CMake project with find_package(chromalloc) (shared and static
# targets), and the installed `chromalloc run` tool.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
make -s -C "$root" install PREFIX="$prefix" >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -o "$tmp/hello_pc" "$root/tests/install/hello.c" $(pkg-config --cflags --libs chromalloc) -Wl,-rpath,"$prefix/lib"
out=$("$tmp/hello_pc")
[[ $out == "hello from chromalloc "*": stats ok, own error, own sigset" ]] || { echo "FAIL pkg-config build: $out"; exit 1; }
echo "PASS pkg-config: $out"
cmake -S "$root/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$prefix/lib" >/dev/null
cmake --build "$tmp/cm" >/dev/null
for t in hello_shared hello_static; do
  out=$("$tmp/cm/$t")
  [[ $out == "hello from chromalloc "*": stats ok, own error, own sigset" ]] || { echo "FAIL cmake $t: $out"; exit 1; }
  echo "PASS cmake $t"
done
out=$(CHROMALLOC_LIB= "$prefix/bin/chromalloc" run --report -- /bin/true 2>&1)
grep -q "chromalloc .* statistics" <<<"$out" || { echo "FAIL installed chromalloc run: $out"; exit 1; }
echo "PASS installed chromalloc run --report"
