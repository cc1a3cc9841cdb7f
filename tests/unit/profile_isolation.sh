#!/bin/sh
# No test reads the user's machine profile.  A calibrated, usable profile of the machine the
# tests see sits in this test's $HOME/.cache and $XDG_CACHE_HOME (where a user's would be, as
# `chromalloc calibrate` puts it); test_colour_start, whose cases need the start without a
# profile (a discovery that finds no set), must still pass: tests/run.py gives every test its
# own CHROMALLOC_PROFILE.  (Before it did, a calibrated profile in ~/.cache failed make test.)
# Usage: profile_isolation.sh TESTBIN
set -eu
bin=$1
tool=$(dirname "$0")/../../tools/chromalloc
lib=$(dirname "$bin")/libchromalloc-colour.so
for dir in "$HOME/.cache" "$XDG_CACHE_HOME"; do
  python3 "$tool" calibrate --quick --lib "$lib" --out "$dir/chromalloc/profile.json" >/dev/null
  grep -q '"usable":true' "$dir/chromalloc/profile.json" || { echo "FAIL the calibration was not usable"; exit 1; }
done
[ ! -e "$CHROMALLOC_PROFILE" ] || { echo "FAIL the test's own profile exists"; exit 1; }
"$bin/test_colour_start-internal"
[ ! -e "$CHROMALLOC_PROFILE" ] || { echo "FAIL the test wrote a profile"; exit 1; }
echo "profile isolation: the user's calibrated profile was not read"
