#!/bin/sh
# The colour layer unavailable because the machine profile says so: the program keeps working
# with ordinary memory, and the library says why in one line.  The profile is this test's own
# (CHROMALLOC_PROFILE, from tests/run.py), made for the machine the library sees: its "cpu" is
# what `chromalloc calibrate --json --no-save` reports.  Usage: colour_off_profile.sh TESTBIN LIB
set -eu
bin=$1 lib=$2
cpu=$(python3 "$(dirname "$0")/../../tools/chromalloc" calibrate --quick --json --no-save --lib "$lib" |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["cpu"])')
printf '{"profile_version":1,"cpu":"%s","usable":false,"reason":"test: not controllable","level":2,"method":"none","colours":0,"ways":0}\n' \
  "$cpu" > "$CHROMALLOC_PROFILE"
LD_PRELOAD=$lib "$bin/test_colour_api-plain" disabled 2>"$TEST_WORK/stderr" || { cat "$TEST_WORK/stderr"; exit 1; }
cat "$TEST_WORK/stderr"
grep -q "chromalloc: cache colours cannot be controlled here (test: not controllable)" "$TEST_WORK/stderr"
