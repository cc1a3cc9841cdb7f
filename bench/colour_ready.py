#!/usr/bin/env python3
"""How often, and how fast, the colour layer finishes discovering colours: builds of chromalloc
compared in interleaved rounds (one process of each per round, so the host's moods fall on all).

  python3 bench/colour_ready.py [--rounds 8] [--workload messages] NAME=LIB.so [NAME=LIB.so ...]

Each process is `pv WORKLOAD --frames=200 --settle-ms=20000` under LD_PRELOAD=LIB with NightWatch on;
pv waits up to 20 s for the restrictive pool.  The colour layer's state, eviction sets and
ready time are read from CHROMALLOC_STATS.  A change to the timing probe, or anything that moves
its code, should be checked with this against the build before it (docs/colours.md).  The
worker's CPU time (worker_cpu_ms), its eviction-set builds (and the step at which failed ones failed) and the colour-count estimate
(estimated, over how many chunks, whether a second try ran) are printed too."""
import argparse, json, os, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PV = os.path.join(HERE, "..", "build", "bench", "nightwatch", "pv")


def one(lib, workload, stats):
    env = dict(os.environ, CHROMALLOC_OPTIONS="nightwatch=1", CHROMALLOC_STATS=stats, LD_PRELOAD=lib)
    try:   # the timeout is applied from outside: a preloaded `timeout` would write the statistics too
        subprocess.run([PV, workload, "--frames=200", "--settle-ms=20000"], env=env, timeout=120,
                       stdout=subprocess.DEVNULL, check=True)
        return json.load(open(stats))["colours"]
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
        return {"state": f"failed ({e.__class__.__name__})"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--workload", default="messages")
    ap.add_argument("libs", nargs="+", metavar="NAME=LIB.so")
    a = ap.parse_args()
    libs = [s.split("=", 1) for s in a.libs]
    if a.rounds < 1 or any(len(x) != 2 or not os.path.isfile(x[1]) for x in libs) or not os.access(PV, os.X_OK):
        sys.exit("colour_ready: need --rounds >= 1, NAME=LIB.so with existing files, and pv (make build/bench/nightwatch/pv)")
    seen = {n: [] for n, _ in libs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, lib in libs:
                c = one(os.path.abspath(lib), a.workload, os.path.join(tmp, "s.json"))
                seen[name].append(c)
                print(f"round {r + 1} {name}: {c.get('state')} sets {c.get('eviction_sets', '-')} "
                      f"ready_ms {c.get('ready_ms', '-')} worker_cpu_ms {c.get('worker_cpu_ms', '-')} "
                      f"set builds {c.get('set_builds', '-')} failed {c.get('set_build_failures', '-')} "
                      f"at {c.get('set_build_failed_at', '-')} duplicate {c.get('sets_duplicate', '-')} "
                      f"estimated {c.get('estimated', '-')} over {c.get('estimate_chunks', '-')} chunks "
                      f"second try {c.get('probe_remeasured', '-')} passes {c.get('passes', '-')} "
                      f"start_failures {c.get('start_failures', '-')} "
                      f"reason {c.get('reason') or '-'}", flush=True)
    for name, runs in seen.items():
        ready = [c["ready_ms"] for c in runs if c.get("state") == "ready"]
        med = f", median ready {statistics.median(ready) / 1000:.1f} s" if ready else ""
        cpu = [c["worker_cpu_ms"] for c in runs if "worker_cpu_ms" in c]
        med += f", median worker CPU {statistics.median(cpu) / 1000:.1f} s" if cpu else ""
        print(f"{name}: ready in {len(ready)} of {len(runs)}{med}")


if __name__ == "__main__":
    main()
