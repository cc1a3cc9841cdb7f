#!/usr/bin/env python3
"""pair.py: one program under two configurations, run in interleaved pairs.

  python3 bench/pair.py [--pairs N] [--seed S] PROG A B [-- ARGS...]

A and B are LIB|OPTIONS: the library preloaded (LD_PRELOAD; empty: none) and the value of
CHROMALLOC_OPTIONS, e.g. "build/libchromalloc-colour.so|nightwatch=0".  Each pair runs A and B next
to each other, their order alternating, so that a host whose loudness changes within minutes
slows both alike; the result is the median over pairs of B's time / A's, with a 95% bootstrap
interval of that median, for wall time (fork to exit) and for CPU time (user + system, from
wait4).  Run A against itself (two spellings of one option string, e.g. "nightwatch=0" and
"nightwatch=0,verbose=0") to see what the host's noise makes of identical runs.  The program's
output is discarded; a run that exits non-zero stops the script.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time


def run(prog, args, cfg):
    lib, _, opts = cfg.partition("|")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "CHROMALLOC_OPTIONS")}
    if lib:
        env["LD_PRELOAD"] = os.path.abspath(lib)
    if opts:
        env["CHROMALLOC_OPTIONS"] = opts
    t = time.perf_counter()
    p = subprocess.Popen([prog] + args, env=env, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if status != 0:
        sys.exit(f"pair.py: {prog} under {cfg!r} exited with status {os.waitstatus_to_exitcode(status)}")
    return wall, ru.ru_utime + ru.ru_stime


def interval(ratios, rng):
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return meds[50], meds[1949]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1, help="of the bootstrap")
    ap.add_argument("prog")
    ap.add_argument("a", help="LIB|OPTIONS")
    ap.add_argument("b", help="LIB|OPTIONS")
    ap.add_argument("args", nargs="*", help="the program's arguments (after --)")
    o = ap.parse_args()
    if o.pairs < 2 or "|" not in o.a or "|" not in o.b:
        ap.error("--pairs must be >= 2, and A and B of the form LIB|OPTIONS")
    for cfg in (o.a, o.b):
        lib = cfg.partition("|")[0]
        if lib and not os.path.isfile(lib):
            ap.error(f"no library {lib!r}")
    res = {"a": [], "b": []}
    for i in range(o.pairs):
        for k in (("a", "b") if i % 2 == 0 else ("b", "a")):
            res[k].append(run(o.prog, o.args, o.a if k == "a" else o.b))
    rng = random.Random(o.seed)
    out = [f"{os.path.basename(o.prog)}, {o.pairs} pairs, B / A:"]
    for i, what in enumerate(("wall", "cpu")):
        r = [y[i] / x[i] for x, y in zip(res["a"], res["b"])]
        lo, hi = interval(r, rng)
        out.append(f"{what} {statistics.median(r):.4f} [{lo:.4f}-{hi:.4f}]")
    ma, mb = (statistics.median(t[0] for t in res[k]) for k in ("a", "b"))
    out.append(f"(median wall A {ma * 1e3:.1f} ms, B {mb * 1e3:.1f} ms)")
    print("  ".join(out))


if __name__ == "__main__":
    main()
