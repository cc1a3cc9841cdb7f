#!/usr/bin/env python3
"""malloc's and free's fast paths in instructions, under callgrind (counts are exact and
repeatable, unlike times on a shared host): bench/src/fastpath.c (6.4 M pairs of 32-80 B, no
slow path after the first round) preloaded with each allocator; instructions per call of malloc
and free, inclusive of what they call.  Writes bench/results/fastpath.csv and .json.

    python3 bench/fastpath.py [--chromalloc build/libchromalloc.so] [--allocators a,b,...]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as suite  # noqa: E402  (the allocator table, the output helpers)

ROOT = Path(__file__).resolve().parent.parent
CALLS = 6_400_000 + 4              # pairs in the loop, and the kept blocks
NAMES = {"malloc": ("malloc", "__libc_malloc", "mi_malloc", "tc_malloc"),
         "free": ("free", "__libc_free", "mi_free", "tc_free", "cfree")}


def per_call(annotated, names):
    """The largest inclusive count among the functions named (an alias and its body both show)."""
    best = 0
    for line in annotated.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(?:.*:)?([A-Za-z_][\w]*)(?:\s|$)", line)
        if m and m.group(2) in names:
            best = max(best, int(m.group(1).replace(",", "")))
    return best / CALLS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chromalloc", default=str(ROOT / "build" / "libchromalloc.so"))
    ap.add_argument("--allocators", default="glibc,jemalloc,mimalloc,tcmalloc,chromalloc")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "fastpath"))
    a = ap.parse_args()
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode != 0:
        sys.exit("fastpath: valgrind not found (apt-get install valgrind)")
    table = suite.allocator_table(Path(a.chromalloc).resolve())
    allocators = suite.ensure_preloads([table[n] for n in a.allocators.split(",")])
    exe = ROOT / "build" / "bench" / "fastpath"
    exe.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", str(exe), str(ROOT / "bench" / "src" / "fastpath.c")], check=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for al in allocators:
            out = Path(tmp) / f"cg.{al.name}"
            env = dict(os.environ, **al.env)
            if al.preload:
                env["LD_PRELOAD"] = al.preload
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(exe)],
                           env=env, capture_output=True, check=True)
            ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
                                 capture_output=True, text=True, check=True).stdout
            rows.append([al.name, round(per_call(ann, NAMES["malloc"]), 2), round(per_call(ann, NAMES["free"]), 2)])
            suite.say(f"{al.name:12s} malloc {rows[-1][1]:6.2f}  free {rows[-1][2]:6.2f}  instructions a call")
    suite.write_csv(Path(a.out + ".csv"), ["allocator", "malloc_instructions", "free_instructions"], rows)
    suite.write_json(Path(a.out + ".json"), {"calls": CALLS, "rows": [dict(zip(["allocator", "malloc", "free"], r)) for r in rows]})


if __name__ == "__main__":
    main()
