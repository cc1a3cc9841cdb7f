#!/bin/sh
# colour_audit=1 (off by default): the coloured API still behaves, and no page of a small slice
# is handed out before its group has been judged (a slice the audit has not vouched for waits).
# Usage: colour_audit.sh TESTBIN LIB
set -eu
bin=$1 lib=$2 stats=$TEST_WORK/colour-audit.json
CHROMALLOC_OPTIONS=colour_audit=1 CHROMALLOC_STATS=$stats LD_PRELOAD=$lib "$bin/test_colour_api-plain"
python3 - "$stats" <<'PY'
import json, sys
from fractions import Fraction as F
c = json.load(open(sys.argv[1]))["colours"]
small = lambda s: (lambda a, b: F(b) - F(a) <= F(1, 4))(*s["slice"].split("-"))
handed = sum(s["pages_handed"] for s in c.get("sets", []) if not s["by_elimination"] and small(s))
judged = c.get("audit", {}).get("groups_judged", 0)
print("colour_audit=1: layer %s, groups judged %d, small slices handed %d pages" % (c["state"], judged, handed))
sys.exit(0 if handed == 0 or judged >= 1 else "FAIL a small slice handed out pages no group vouched for")
PY
