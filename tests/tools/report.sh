#!/usr/bin/env bash
# `chromalloc report` on recorded statistics (pv-messages-stats.json: `pv messages` under
# chromalloc with NightWatch on, Zen 4 machine, 2026-11-26): the NightWatch context table and
# the timeline come out as documented in docs/nightwatch.md ("Reading the statistics").
# pv-frames-stats.json (`pv frames --frames=3000 --settle-ms=20000`, Zen 5 machine, 2026-11-27):
# the colour worker's cost, which the older file does not have.  pv-frames-audit-stats.json
# (`bench/nightwatch.py` partial run, pv frames policy on, rep 3, Zen 5 machine, 2026-11-27,
# fourteenth session): the slice audit's line, which the older files do not have.
# pv-packets-failed-at-stats.json (`bench/nightwatch.py` run at 4a14d5e, pv packets policy on,
# rep 4, Zen 5 machine, 2026-11-27, seventeenth session): the step at which failed eviction-set
# builds failed, and the sets dropped as duplicates, on the worker's line.
# pv-packets-suspected-stats.json (`bench/nightwatch.py` run at da69d45, pv packets with every
# chunk monitored, rep 3, Zen 5 machine, 2026-11-27, eighteenth session): the judgements that
# found the stock bad, by cause, and the sets built again.  pv-packets-claims-short-stats.json
# (`pv packets --frames=6000 --settle-ms=20000` with every chunk monitored, Zen 5 machine,
# 2026-11-27, nineteenth session): stretches of few claims put down to the supply.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-messages-stats.json")
fail=0
expect() {
  if ! grep -qF -- "$1" <<<"$out"; then echo "FAIL chromalloc report: no line with '$1'"; fail=1; fi
}
expect "nightwatch: 15 chunks named one by one, 0 monitored"
expect "sizes served from restrictive spans: 2064"
expect "timeline (ms after start):"
expect "     683  verdict polluter: 0x2bf6 (pv)"
expect "     686  now restrictive: 0x2bf6 (pv)"
expect "     686  colour layer ready (as first seen by the policy)"
expect "     686  protection armed: open memory moves out of the restrictive colours"
expect "     686  size class 2064 served from restrictive spans"
expect "    4329  verdict polluter: 0x2bf6 (pv)"
row=$(grep -F "0x2bf6 (pv)" <<<"$out" | grep -v "verdict\|now " || true)
grep -q " restrictive " <<<"$row" || { echo "FAIL chromalloc report: the context row of 0x2bf6 (pv) does not say restrictive: $row"; fail=1; }
grep -qF "    worker:" <<<"$out" && { echo "FAIL chromalloc report: a worker line from statistics without the worker's cost"; fail=1; }
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-frames-stats.json")
expect "    worker: 6.7 s of CPU, ready 5.5 s after it started; 67 eviction-set builds, 60 failed"
grep -qF "slice audit:" <<<"$out" && { echo "FAIL chromalloc report: a slice audit line from statistics without the audit"; fail=1; }
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-frames-audit-stats.json")
expect "    slice audit: 1 groups judged, 0 not of few colours, 16 strays; 32376 pages audited, 2504 turned away"
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-packets-failed-at-stats.json")
expect "72 eviction-set builds, 67 failed (whole 3, reduce 18, large 22, full 1, needed 23), 1 found dropped as duplicates or wide"
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-packets-suspected-stats.json")
expect "    stock judged bad 4 times, sets built again 2 times (judged by claims 4)"
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-frames-audit-stats.json")
expect "    stock judged bad 1 time, sets built again 0 times"
grep -qF "judged by" <<<"$out" && { echo "FAIL chromalloc report: causes of bad judgements from statistics without them"; fail=1; }
grep -qF "put down to the supply" <<<"$out" && { echo "FAIL chromalloc report: claims put down to the supply from statistics without them"; fail=1; }
out=$("$HERE/../../tools/chromalloc" report "$HERE/pv-packets-claims-short-stats.json")
expect "    stock judged bad 1 time, sets built again 0 times (judged by claims 1); few claims put down to the supply 7 times"
[ $fail -eq 0 ] && echo "PASS chromalloc report renders contexts and the NightWatch timeline"
exit $fail
