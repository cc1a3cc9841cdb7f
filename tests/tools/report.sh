#!/usr/bin/env bash
# `chromalloc report` on recorded statistics of the cache runtime (pv-messages-stats.json: `pv
# messages` with NightWatch on, Zen 4 machine): the NightWatch context table and the timeline
# come out as documented in docs/nightwatch.md ("Reading the statistics").  The other files,
# from `pv frames`/`pv packets` runs and bench/nightwatch.py runs on a Zen 5 machine, carry the
# fields the older ones lack: the colour worker's cost (pv-frames-stats.json), the slice
# audit's line (pv-frames-audit-stats.json), the step at which failed eviction-set builds
# failed and the sets dropped as duplicates (pv-packets-failed-at-stats.json), the judgements
# that found the stock bad, by cause (pv-packets-suspected-stats.json); and a `bench/colour/vp.c`
# run (vp-stats.json) the layer's start, where its sets came from and what it cost, and the
# restrictive chunks NightWatch decided before the layer could serve them.  On an Intel Xeon:
# an art4 process under ROCS (artlike-rocs-stats.json: its scores carry the lap time) and a
# `bench/colour/lockhash.c` run under lock sets (lockhash-stats.json).
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
expect "    start: asked for; sets ready 5.45 s after"
expect "    worker: 6.67 s of CPU in all; 67 eviction-set builds, 60 failed"
grep -qF "stocking:" <<<"$out" && { echo "FAIL chromalloc report: a stocking line from statistics without its fields"; fail=1; }
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
out=$("$HERE/../../tools/chromalloc" report "$HERE/vp-stats.json")
expect "    start: asked for 200 ms into the run; sets from set file; sets ready 3 ms after (3 ms of CPU), first stock in 464 ms after (322 ms of CPU)"
expect "    worker: 0.33 s of CPU in all; 0 eviction-set builds, 0 failed"
expect "    stocking: 10432 pages classified, 581 could not be told (partly of the slice), 13 batches dropped by their controls"
expect "16067 restrictive (1879 of them ordinary memory: colours not ready or no stock)"
out=$("$HERE/../../tools/chromalloc" report "$HERE/artlike-rocs-stats.json")
expect "  ROCS: settled, scored by lap time; reloads from the L2 6440, beyond it 30802, from memory 189"
expect "    configurations scored (runs: progress per CPU s / mean reload ticks / lap us): 0: 0/468/397, 0: 0/486/491, 10: 0/542/433"
grep -qF "  locksets:" <<<"$out" && { echo "FAIL chromalloc report: the lock sets' section printed raw while off"; fail=1; }
out=$("$HERE/../../tools/chromalloc" report "$HERE/lockhash-stats.json")
expect "  lock sets: nesting 2 deep watched (not seen); 0 touches lost, 0 sets untold (the table full)"
expect "    0x1f1e (lockhash)                            deepest 1, 446 pages (0 touched nested), 6 over their colour's share, 8 moved, at most 3 on a colour"
# `chromalloc run --report` keeps its statistics in a temporary directory and removes it, also
# when the program cannot be started
tmp=$(mktemp -d)
TMPDIR=$tmp "$HERE/../../tools/chromalloc" run --report -- true 2>/dev/null || { echo "FAIL chromalloc run --report -- true"; fail=1; }
TMPDIR=$tmp "$HERE/../../tools/chromalloc" run --report -- /nonexistent/program 2>/dev/null && { echo "FAIL chromalloc run: a missing program ran"; fail=1; }
[ -z "$(ls -A "$tmp")" ] || { echo "FAIL chromalloc run --report left files in TMPDIR: $(ls -A "$tmp")"; fail=1; }
rm -rf "$tmp"
[ $fail -eq 0 ] && echo "PASS chromalloc report renders contexts, the NightWatch timeline, ROCS and lock sets; run --report leaves nothing in TMPDIR"
exit $fail
