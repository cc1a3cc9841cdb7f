#!/usr/bin/env python3
"""`make demo`, second part: the cache runtime protecting a victim from a streamed polluter.

`pv frames` (bench/nightwatch/pv.c) chases a victim array that fits the L2 while each frame
streams a buffer three times the L2 through it.  It runs three times: the victim alone and with
the polluter under the allocator alone (libchromalloc), then with the polluter under the cache
runtime (libchromalloc-colour, NightWatch on), whose statistics timeline says when the polluter
was confined and protection armed.  Prints a table (victim ns per lookup, before and after
protection) and writes build/demo/protect.png; says so plainly when colours cannot be controlled
on this machine.

  python3 tools/demo_protect.py [--frames N] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# after its first 20 frames pv waits (at most this long) until the restrictive pool has a
# buffer's worth of pages, as bench/nightwatch.py runs it: the colour layer measures the
# machine first (seconds without a machine profile: tools/chromalloc calibrate)
SETTLE_MS = 20000
sys.path.insert(0, os.path.join(ROOT, "bench"))
import nightwatch as nwb  # noqa: E402  (builds pv)
import run as br          # noqa: E402  (matplotlib)


def run_pv(pv, lib, frames, trace=None, stats=None, extra=(), settle=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHROMALLOC_") and k != "LD_PRELOAD"}
    if lib:
        env["LD_PRELOAD"] = lib
    if stats:
        env["CHROMALLOC_STATS"] = stats
    cmd = [pv, "frames", "--frames=%d" % frames, "--settle-ms=%d" % settle] + list(extra) + (["--trace=" + trace] if trace else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    line = next((l for l in r.stdout.splitlines() if l.startswith("RESULT")), None)
    if r.returncode != 0 or line is None:
        sys.exit("demo: pv failed (%s): %s" % (r.returncode, (r.stderr or r.stdout).strip()[-300:]))
    return dict(kv.split("=", 1) for kv in line.split()[2:])


def read_trace(path):
    """[(start ns, ns per lookup)] per frame"""
    out = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) >= 3:
                out.append((int(p[1]), float(p[2])))
    return out


def when(nw, kind):
    """ms after start of the first timeline event of that kind (None: not there)"""
    for e in nw.get("timeline", []):
        if e.get("event") == kind:
            return e.get("ms")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=6000)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "demo"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    lean = os.path.join(ROOT, "build", "libchromalloc.so")
    colour = os.path.join(ROOT, "build", "libchromalloc-colour.so")
    nwb.BUILD.mkdir(parents=True, exist_ok=True)
    nwb.build_pv(os.environ.get("CC", "cc"))
    pv = str(nwb.BUILD / "pv")
    alone = run_pv(pv, lean, a.frames, extra=["--no-polluter"])
    before = run_pv(pv, lean, a.frames, trace=os.path.join(a.out, "before.trace"))
    stats = os.path.join(a.out, "after.json")
    after = run_pv(pv, colour, a.frames, trace=os.path.join(a.out, "after.trace"), stats=stats, settle=SETTLE_MS)
    d = json.load(open(stats))
    nw, co = d.get("nightwatch", {}), d.get("colours", {})
    tb, ta = read_trace(os.path.join(a.out, "before.trace")), read_trace(os.path.join(a.out, "after.trace"))
    start = nw.get("start_monotonic_ns", ta[0][0] if ta else 0)
    confined, armed, ready = when(nw, "decision"), when(nw, "protection"), when(nw, "colours_ready")
    print("pv frames: a %s KiB victim chased once per frame, a %s KiB buffer streamed per frame, %d frames"
          % (alone.get("victim_kib", "L2-sized"), alone.get("buf_kib", "3 L2s of"), a.frames)
          if "victim_kib" in alone else "pv frames: a victim that fits the L2, a buffer 3x the L2 streamed per frame, %d frames" % a.frames)
    rows = [("victim alone, allocator alone", float(alone["victim_ns"]), alone),
            ("with the polluter, allocator alone", float(before["victim_ns"]), before)]
    usable = co.get("state") == "ready" and nw.get("enabled", False) and armed is not None
    if usable:
        prot_ns = start + armed * 1_000_000
        pre = [ns for t, ns in ta if t < prot_ns]
        post = [ns for t, ns in ta if t >= prot_ns + 100_000_000]   # protection's moves take a moment
        if pre:
            rows.append(("with the polluter, cache runtime, before protection", statistics.median(pre), None))
        if post:
            rows.append(("with the polluter, cache runtime, protected", statistics.median(post), None))
    else:
        rows.append(("with the polluter, cache runtime", float(after["victim_ns"]), after))
    w = max(len(r[0]) for r in rows)
    print("%-*s  %s" % (w, "run", "victim ns per lookup (median over frames)"))
    for name, ns, _ in rows:
        print("%-*s  %.2f" % (w, name, ns))
    if usable:
        print("time from start: colour layer ready %s ms, polluter confined %s ms, protection armed %s ms"
              % (ready, confined, armed))
        print("(the victim's slowdown from the polluter: %.2fx under the allocator alone, %.2fx once protected)"
              % (rows[1][1] / rows[0][1], rows[-1][1] / rows[0][1]))
        if rows[-1][1] >= rows[1][1] * 0.95:
            print("here the confined polluter still slows the victim as much: the pools this host's timing gave "
                  "were not pure enough, or the L2 was shared with a loud neighbour (docs/nightwatch.md, Limits)")
    else:
        why = co.get("reason") or nw.get("off_reason") or ("NightWatch found no polluter" if co.get("state") == "ready" else
                                                          "the colour layer was %s" % co.get("state", "off"))
        print("colours cannot be controlled here, or the policy did not act in this run: %s; the cache runtime "
              "served ordinary memory" % why)
    plt = br.load_matplotlib()
    if plt is None:
        print("plot skipped: matplotlib is not available")
        return 0
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.plot(range(len(tb)), [ns for _, ns in tb], ".", ms=2, label="allocator alone")
    ax.plot(range(len(ta)), [ns for _, ns in ta], ".", ms=2, label="cache runtime (NightWatch)")
    ax.axhline(rows[0][1], color="grey", ls="--", lw=1, label="victim alone")
    if usable:
        at = next((k for k, (t, _) in enumerate(ta) if t >= start + armed * 1_000_000), len(ta))
        ax.axvline(at, color="red", lw=1, label="protection armed (frame %d, %.1f s)" % (at, armed / 1000))
    ax.set_ylim(0, 3 * max(rows[1][1], rows[0][1]))
    ax.set_xlabel("frame")
    ax.set_ylabel("victim ns per lookup")
    ax.set_title("pv frames: a victim chased while a polluter streams (3x the median at most shown)")
    ax.legend()
    png = os.path.join(a.out, "protect.png")
    fig.savefig(png, dpi=100, bbox_inches="tight")
    print("plot: %s" % os.path.relpath(png, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
