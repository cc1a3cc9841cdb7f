#!/bin/sh
# colour_worker=10: the worker keeps within its share of a CPU while it stocks a big pool.  The
# machine is described with a 10 us cost per simulated eviction test (as a timed one takes), and
# calibrated first into the test's own profile, so that the worker's CPU goes to stocking, not
# to finding the colours.  Usage: colour_pace.sh TESTBIN LIB
set -eu
bin=$1 lib=$2
python3 "$(dirname "$0")/../../tools/chromalloc" calibrate --quick --lib "$lib" --out "$CHROMALLOC_PROFILE" >/dev/null
CHROMALLOC_STATS=$TEST_WORK/stats.json CHROMALLOC_OPTIONS=colour_worker=10,colour_pool=64 LD_PRELOAD=$lib "$bin/test_colour_api-plain" pace
