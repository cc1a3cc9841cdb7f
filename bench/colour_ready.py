#!/usr/bin/env python3
"""How often, and how fast, the colour layer finishes discovering colours: builds of chromalloc
compared in interleaved rounds (one process of each per round, so the host's moods fall on all).

  python3 bench/colour_ready.py [--rounds 8] [--workload messages] [--frames 200] NAME=LIB.so[:OPTIONS] ...

Each process is `pv WORKLOAD --frames=FRAMES --settle-ms=20000` (FRAMES 200 by default) under LD_PRELOAD=LIB with NightWatch on
(CHROMALLOC_OPTIONS=nightwatch=1, then OPTIONS, e.g. `cap=build/libchromalloc-colour.so:colour_worker=25`;
with nightwatch=0 among them pv does not wait); pv waits up to 20 s for the restrictive pool,
and the order of the configurations turns by one place per round.  The colour layer's state, eviction sets and
ready time are read from CHROMALLOC_STATS.  A change to the timing probe, or anything that moves
its code, should be checked with this against the build before it (docs/colours.md).  The
process's wall time and peak RSS, the worker's CPU time (worker_cpu_ms), its eviction-set builds (and the step at which failed ones failed), the colour-count estimate
(estimated, over how many chunks, whether a second try ran), the slice audit's counts, suspicions and set rebuilds are printed too."""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

import nightwatch   # its pv build

PV = str(nightwatch.BUILD / "pv")


def one(lib, opts, workload, frames, stats):
    """the colours section of one run's statistics, with pv's victim_ns and the first set's
    restrictive spans (filled from its pool / left ordinary) added"""
    env = dict(os.environ, CHROMALLOC_OPTIONS="nightwatch=1" + (f",{opts}" if opts else ""),
               CHROMALLOC_STATS=stats, LD_PRELOAD=lib)
    argv = [PV, workload, f"--frames={frames}"] + ([] if "nightwatch=0" in opts else ["--settle-ms=20000"])
    try:   # the timeout is applied from outside: a preloaded `timeout` would write the statistics too
        t0 = time.monotonic()
        out = subprocess.run(argv, env=env, timeout=300, stdout=subprocess.PIPE, text=True, check=True).stdout
        wall = time.monotonic() - t0
        s = json.load(open(stats))
        c = s["colours"]
        c["wall_s"] = wall
        c["rss_peak_mib"] = s.get("memory", {}).get("rss_peak_bytes", 0) / 2**20
        kv = dict(x.split("=", 1) for x in out.split() if "=" in x)
        c["victim_ns"] = float(kv["victim_ns"]) if "victim_ns" in kv else None
        first = (c.get("sets") or [{}])[0]
        c["spans"] = f"{first.get('spans_filled', '-')}/{first.get('spans_ordinary', '-')}"
        return c
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
        return {"state": f"failed ({e.__class__.__name__})"}


def configs(specs):
    """NAME=LIB.so[:OPTIONS] -> [(NAME, LIB.so, OPTIONS)], or None when a name is empty or a file is missing"""
    libs = [(n, *(rest.split(":", 1) + [""])[:2]) for n, _, rest in (s.partition("=") for s in specs)]
    return None if any(not n or not os.path.isfile(lib) for n, lib, _ in libs) else libs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--workload", default="messages")
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("libs", nargs="+", metavar="NAME=LIB.so[:OPTIONS]")
    a = ap.parse_args()
    libs = configs(a.libs)
    if a.rounds < 1 or libs is None:
        sys.exit("colour_ready: need --rounds >= 1 and NAME=LIB.so[:OPTIONS] with existing files")
    nightwatch.build_pv(os.environ.get("CC", "cc"))
    seen = {n: [] for n, _, _ in libs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, lib, opts in libs[r % len(libs):] + libs[:r % len(libs)]:
                c = one(os.path.abspath(lib), opts, a.workload, a.frames, os.path.join(tmp, "s.json"))
                seen[name].append(c)
                print(f"round {r + 1} {name}: {c.get('state')} sets {c.get('eviction_sets', '-')} "
                      f"victim_ns {c.get('victim_ns', '-')} spans filled/ordinary {c.get('spans', '-')} "
                      f"wall_s {c.get('wall_s', 0):.1f} rss_peak_mib {c.get('rss_peak_mib', 0):.0f} "
                      f"ready_ms {c.get('ready_ms', '-')} worker_cpu_ms {c.get('worker_cpu_ms', '-')} "
                      f"paced_ms {c.get('worker_paced_ms', '-')} "
                      f"set builds {c.get('set_builds', '-')} failed {c.get('set_build_failures', '-')} "
                      f"at {c.get('set_build_failed_at', '-')} duplicate {c.get('sets_duplicate', '-')} "
                      f"estimated {c.get('estimated', '-')} over {c.get('estimate_chunks', '-')} chunks "
                      f"second try {c.get('probe_remeasured', '-')} passes {c.get('passes', '-')} "
                      f"start_failures {c.get('start_failures', '-')} audit {c.get('audit', '-')} "
                      f"suspicions {c.get('suspicions', '-')} rebuilds {c.get('set_rebuilds', '-')} "
                      f"reason {c.get('reason') or '-'}", flush=True)
    for name, runs in seen.items():
        ready = [c["ready_ms"] for c in runs if c.get("state") == "ready"]
        med = f", median ready {statistics.median(ready) / 1000:.1f} s" if ready else ""
        cpu = [c["worker_cpu_ms"] for c in runs if "worker_cpu_ms" in c]
        med += f", median worker CPU {statistics.median(cpu) / 1000:.1f} s" if cpu else ""
        for key, what, unit in (("wall_s", "wall", "s"), ("rss_peak_mib", "peak RSS", "MiB")):
            v = [c[key] for c in runs if key in c]
            med += f", median {what} {statistics.median(v):.1f} {unit}" if v else ""
        vns = [c["victim_ns"] for c in runs if c.get("victim_ns") is not None]
        med += f", median victim {statistics.median(vns):.2f} ns" if vns else ""
        print(f"{name}: ready in {len(ready)} of {len(runs)}{med}")


if __name__ == "__main__":
    main()
