#!/usr/bin/env python3
"""Are the colour pools what chromalloc says, by what their pages do in the L2?  Builds of
chromalloc compared in interleaved rounds (one process of each per round, so the host's moods fall
on all).

  python3 bench/colour_purity.py [--rounds 12] NAME=LIB.so[:OPTIONS] [NAME=LIB.so[:OPTIONS] ...]

Each process is build/bench/purity (bench/colour/purity.c, built here) under LD_PRELOAD=LIB (and CHROMALLOC_OPTIONS=OPTIONS): it
stocks a 1/8 and a 7/8 colour slice and reads blocks of them by timing alone
(bench/colour/l2reading.h), up to 8 tries a quarter of a second apart.  A try is *sane* when
ordinary pages read as L2 hits (few slow by the block's median, and that median within 1.1x of
16 of its pages') and the 1/8 polluter evicts 6 or more of 8 pages of another 1/8
block; a run with no sane try is not judged.  Counted bad: the 1/8 block of twice the slice's
size evicts itself (3/4 of its pages slow) in no try whose ordinary pages read as hits (the 1/8
pool is not of few colours: a block of many colours never evicts itself, a block of few may
fail to in some tries, as the L2 here at times keeps part of a cyclic sweep), or, by the median
of the sane tries, the polluter evicts more than 1/16 of a 7/8 block's pages that read fast
before it (the 7/8 pool holds pages of the first eighth) or a quarter or more of the 7/8
block's pages evict one another (the 7/8 block is of few colours).  The colour layer's ready
time and worker CPU come from CHROMALLOC_STATS.  See docs/colours.md, "The slice audit"."""
import argparse, json, os, re, statistics, subprocess, sys, tempfile
from pathlib import Path

from colour_ready import configs

ROOT = Path(__file__).resolve().parent.parent
PROG = ROOT / "build" / "bench" / "purity"


def build():
    PROG.parent.mkdir(parents=True, exist_ok=True)
    cmd = [os.environ.get("CC", "cc"), "-O2", "-std=gnu11", "-Wall", "-Wextra", f"-I{ROOT / 'include'}", "-o", str(PROG),
           str(ROOT / "bench" / "colour" / "purity.c"), f"-L{ROOT / 'build'}", f"-Wl,-rpath,{ROOT / 'build'}", "-lchromalloc-colour"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"colour_purity: build failed: {' '.join(cmd)}\n{r.stderr}")


def one(lib, opts, stats):
    env = dict(os.environ, LD_PRELOAD=lib, CHROMALLOC_STATS=stats, **({"CHROMALLOC_OPTIONS": opts} if opts else {}))
    try:
        r = subprocess.run([str(PROG)], env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            err = (r.stderr.strip().splitlines() or ["no message"])[-1]
            return {"failed": f"exit {r.returncode}: {err}"}
        out = r.stdout
        tries = [{k: int(x) for k, x in (f.split("=") for f in m.split())} for m in re.findall(r"^PURITY (.*)$", out, re.M)]
        if not tries:
            raise ValueError("no PURITY line")
        v = {"tries": tries}
        c = json.load(open(stats))["colours"]
        v.update(ready_ms=c.get("ready_ms"), worker_cpu_ms=c.get("worker_cpu_ms"))
        return v
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, AttributeError) as e:
        return {"failed": e.__class__.__name__}


def verdict(v):
    if "failed" in v:
        return "failed"
    tries = v["tries"]
    n = tries[0]["pages"]
    # ordinary pages read as L2 hits: few slow by the block's median, and that median within
    # 1.1x of 16 of its pages' (hot_ns; a block that reads slower is not all in the L2)
    quiet = [t for t in tries if t["ordinary_slow"] * 4 <= n and t.get("base_ns", 0) * 10 <= t.get("hot_ns", 10**9) * 11]
    sane = [t for t in quiet if t["small_evicted"] >= 6]
    if not sane:
        return "not sane"
    med = lambda k: statistics.median(t[k] for t in sane)
    bad = [w for w, b in (("1/8 spread", all(t["slice_self"] * 4 < n * 3 for t in quiet)), ("7/8 impure", med("rest_evicted") * 16 > n),
                          ("7/8 of few colours", med("rest_self") * 4 >= n)) if b]
    return "bad: " + ", ".join(bad) if bad else "ok"


def show(v):
    """the tries of a run, one field at a time: slice_self=30,41,63"""
    if "tries" not in v:
        return " ".join(f"{k}={x}" for k, x in v.items() if k != "verdict")
    keys = [k for k in v["tries"][0] if k not in ("try", "pages")]
    return " ".join(f"{k}={','.join(str(t[k]) for t in v['tries'])}" for k in keys) + \
        f" pages={v['tries'][0]['pages']} ready_ms={v.get('ready_ms')} worker_cpu_ms={v.get('worker_cpu_ms')}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("libs", nargs="+", metavar="NAME=LIB.so[:OPTIONS]")
    a = ap.parse_args()
    libs = configs(a.libs)
    if a.rounds < 1 or libs is None:
        sys.exit("colour_purity: need --rounds >= 1 and NAME=LIB.so[:OPTIONS] with existing files")
    build()
    seen = {n: [] for n, _, _ in libs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, lib, opts in libs:
                v = one(os.path.abspath(lib), opts, os.path.join(tmp, "s.json"))
                v["verdict"] = verdict(v)
                seen[name].append(v)
                print(f"round {r + 1} {name}: {v['verdict']}  {show(v)}", flush=True)
    for name, runs in seen.items():
        sane = [v for v in runs if v["verdict"] not in ("not sane", "failed")]
        bad = [v for v in sane if v["verdict"] != "ok"]
        kinds = {k: sum(k in v["verdict"] for v in bad) for k in ("1/8 spread", "7/8 impure", "7/8 of few colours")}
        cpu = [v["worker_cpu_ms"] for v in runs if v.get("worker_cpu_ms") is not None]
        ready = [v["ready_ms"] for v in runs if v.get("ready_ms")]
        print(f"{name}: bad in {len(bad)} of {len(sane)} sane runs ({', '.join(f'{k} {x}' for k, x in kinds.items())}; "
              f"{sum(v['verdict'] == 'not sane' for v in runs)} not sane, {sum(v['verdict'] == 'failed' for v in runs)} failed)"
              + (f", median ready {statistics.median(ready) / 1000:.1f} s" if ready else "")
              + (f", median worker CPU {statistics.median(cpu) / 1000:.1f} s" if cpu else ""))


if __name__ == "__main__":
    main()
