#!/usr/bin/env python3
"""Lock sets: memory a thread allocates while it holds a pthread mutex is shared hot data, and the
cache runtime gives it pages spread evenly over the L2's colours, so that a hot set near the L2's
size fits.  Six multi-threaded kernels (bench/colour/*.c) under glibc, mimalloc and the cache
runtime with lock sets off and on.

  python3 bench/locksets.py [--pcts 60,85,100] [--reps 7] [--seconds 10] [--configs ...]
                            [--kernels ...] [--out DIR] [--quick]

Kernels (2 threads each; sizes from the L2's size in sysfs):
  lockhash   a hash table with a mutex per bucket (one per 8 nodes), its 64-byte nodes malloc'd
             under the bucket's lock, --pcts percent of the L2, among cold blocks; random
             lookups (lookups/s)
  nested     lockhash --nested at 85%: nodes malloc'd outside any lock, every insert and lookup
             under a mutex of the worker's own and the bucket's (depth 2): only the nested check
             (lockset_nest) can spread them (lookups/s)
  water      molecules of 4 lines malloc'd under their own locks (85% of the L2), all pairs'
             forces each step, added to the other molecule under its lock (pairs/s)
  ocean      red-black Gauss-Seidel on one grid (85% of the L2) allocated outside any lock,
             barriers and a mutex-protected residual: the negative control (sweeps/s)
  pipeline   dedup-like: chunks through a mutex+condvar queue, a fingerprint table (85% of the
             L2) whose entries are malloc'd under its mutex (chunks/s)
  lockloop   each thread locks and unlocks a private mutex in a tight loop, no allocation: the
             wrapper's overhead (lock/unlock pairs/s)

Configurations:
  glibc, mimalloc   the peers
  colour-off        build/libchromalloc-colour.so, locksets=0
  colour-locksets   the same with locksets=1
Both colour configurations get a machine profile and the set file that `chromalloc calibrate`
writes once at the start into the run's own directory (as bench/hot.py).

Every process runs through build/bench/launch (wall time, peak RSS), the configurations
interleaved (their order turns by one each repetition).  A kernel prints its rate for every
second; a process's figure is the median of the seconds from the 3rd on, and the summary gives
the median (range) over processes.  colour-locksets runs with CHROMALLOC_STATS: the statistics'
"locksets" section, when the library has one, is carried into locksets.json.

Targets (reported, never enforced): lockhash at 85% of the L2: colour-locksets at least 1.10x the
lookups/s of colour-off; ocean: colour-locksets at most 3% slower than colour-off; lockloop: at
most 2% slower; water and pipeline: the ratio, reported.  Beside them, a model: the share of
lockhash's hot set that random frames put beyond the ways of its colour on this L2 (sysfs), the
most that spreading can win back.

--quick: a smoke run (1 repetition of 3 s, lockhash at 85% only) unless those are given.

Writes locksets.csv (every process), locksets.json (summary, targets, command, machine) and
locksets.png to bench/results/ (or --out)."""
import argparse, math, os, re, sys, time
from pathlib import Path

import run as harness
from colour_start import results, prepare, finish, launched, saved, shm_path, med, fmt, listed, l2_geometry

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
COLOUR = ROOT / "build" / "libchromalloc-colour.so"
CONFIGS = ["glibc", "mimalloc", "colour-off", "colour-locksets"]
# kernel -> (what it counts, the percent of the L2 it is given: None = --pcts, 0 = none)
KERNELS = {"lockhash": ("lookups", None), "nested": ("lookups", 85), "water": ("pairs", 85), "ocean": ("sweeps", 85),
           "pipeline": ("chunks", 85), "lockloop": ("locks", 0)}
PROGRAM = {"nested": ("lockhash", ["--nested"])}      # a kernel that is another's program, with arguments
UNIT = {"lookups": "lookups/s", "pairs": "pairs/s", "sweeps": "sweeps/s", "chunks": "chunks/s", "locks": "lock+unlock/s"}
SCALE = {"lookups": 1e6, "pairs": 1e6, "sweeps": 1, "chunks": 1e3, "locks": 1e6}     # for the printed table
PREFIX = {1e6: "M ", 1e3: "k ", 1: ""}
say = harness.say


def build(cc):
    harness.build(cc)                                   # launch, and the suite's programs
    for k in KERNELS:
        if k in PROGRAM:
            continue
        cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(BUILD / k), str(ROOT / "bench" / "colour" / f"{k}.c")]
        r = harness.run_quiet(cmd)
        if r.returncode != 0:
            sys.exit(f"locksets: build failed: {' '.join(cmd)}\n{r.stdout}")
        if r.stdout.strip():
            say(r.stdout.strip())


def config_table(work):
    files = {"CHROMALLOC_PROFILE": str(work / "profile.json"), "CHROMALLOC_SETS": shm_path(work, "colour")}
    return {
        "glibc": (None, {}),
        "mimalloc": (str(harness.LIBDIR / "libmimalloc.so.2"), {}),
        "colour-off": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS="locksets=0")),
        "colour-locksets": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS="locksets=1")),
    }


def one(name, table, work, kernel, argv, key):
    preload, extra = table[name]
    program, args = PROGRAM.get(kernel, (kernel, []))
    out, err, rep, error, s = launched(BUILD / program, args + argv, preload, extra, work, key, name.startswith("colour"))
    metric = KERNELS[kernel][0]
    row = {"config": name, "kernel": kernel, "metric": metric, "error": error}
    if rep:
        row.update(wall_s=rep[0], rss_mib=rep[1] / 1024, user_s=rep[3], sys_s=rep[4])
    kv, secs, row["error"] = results(out, err, error)
    row["rate"] = float(kv.pop(f"{metric}_from3s")) if f"{metric}_from3s" in kv else None
    row["result"] = " ".join(f"{k}={v}" for k, v in kv.items())
    row["per_second"] = " ".join(f"{x:.0f}" for x in secs)
    # an option the library does not know is warned about once (chromalloc: ...): say so
    row["warning"] = next((x for x in err.splitlines() if x.startswith("chromalloc:") and "locksets" in x), None)
    row["worker_cpu_ms"] = (s.get("colours") or {}).get("worker_cpu_ms")
    if name == "colour-locksets" and "locksets" in s:
        row["locksets"] = s["locksets"]
    return row


def plot(rows, jobs, args, path):
    plt = harness.load_matplotlib()
    if plt is None:
        say("matplotlib not available: locksets.png not written")
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    width = 0.8 / len(args.configs)
    for i, name in enumerate(args.configs):
        xs, ys = [], []
        for g, (kernel, pct) in enumerate(jobs):
            base = med([r for r in rows if r["kernel"] == kernel and r["pct"] == pct and r["config"] == "colour-off" and not r["error"]], "rate")[0]
            for r in rows:
                if base and r["config"] == name and r["kernel"] == kernel and r["pct"] == pct and r.get("rate"):
                    xs.append(g + (i - (len(args.configs) - 1) / 2) * width)
                    ys.append(r["rate"] / base)
        ax.scatter(xs, ys, s=14, label=name, color=harness.color_of(name))
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(jobs)), [f"{k} {p:g}%" if p else k for k, p in jobs], rotation=20)
    ax.set_ylabel("rate / colour-off's median (from the 3rd second)")
    ax.set_title("each process against lock sets off (higher is faster)")
    ax = axes[1]
    hash_pcts = [p for k, p in jobs if k == "lockhash"]
    show = ("lockhash", 85.0 if 85.0 in hash_pcts else max(hash_pcts)) if hash_pcts else jobs[0]
    scale = SCALE[KERNELS[show[0]][0]]
    for name in args.configs:
        rs = [r for r in rows if r["config"] == name and (r["kernel"], r["pct"]) == show and r.get("per_second")]
        for k, r in enumerate(rs):
            ys = [float(x) / scale for x in r["per_second"].split()]
            ax.plot(range(1, len(ys) + 1), ys, color=harness.color_of(name), alpha=0.5, label=name if k == 0 else None, linewidth=1)
    ax.set_xlabel("second of the run")
    ax.set_ylabel(PREFIX[scale] + UNIT[KERNELS[show[0]][0]])
    ax.set_title(f"every second: {show[0]}" + (f" at {show[1]:g}% of the L2" if show[1] else ""))
    saved(fig, plt, path)


def overfull_share(pages, colours, ways):
    """The share of a hot set of `pages` pages on random frames that lies beyond the ways of its
    colour (a binomial model): the most that spreading it evenly over the colours wins back."""
    p, total = 1.0 / colours, 0.0
    for k in range(ways + 1, pages + 1):
        total += (k - ways) * math.comb(pages, k) * p ** k * (1 - p) ** (pages - k)
    return total * colours / pages


def ceilings(pcts):
    """For each percent of the L2: the share of such a hot set in over-full colours, from sysfs."""
    geo = l2_geometry()
    m = re.match(r"(\d+)K (\d+)-way", geo or "")
    if not m:
        return {}
    size, ways = int(m.group(1)) * 1024, int(m.group(2))
    colours = size // (ways * 4096)
    return {pct: round(overfull_share(int(size * pct / 100) // 4096, colours, ways), 4) for pct in pcts if colours >= 2}


def targets_of(summary):
    get = lambda kernel, pct, name: next((e["rate"][0] for e in summary if e["kernel"] == kernel and e["pct"] == pct and e["config"] == name), None)
    targets = []
    for kernel, pct, what, limit in (("lockhash", 85.0, "lockhash at 85% of the L2: colour-locksets at least 1.10x colour-off", 1.10),
                                     ("ocean", 85.0, "ocean: colour-locksets no more than 3% slower than colour-off", 0.97),
                                     ("lockloop", None, "lockloop: colour-locksets no more than 2% slower than colour-off", 0.98),
                                     ("nested", 85.0, "nested: colour-locksets / colour-off (reported)", None),
                                     ("water", 85.0, "water: colour-locksets / colour-off (reported)", None),
                                     ("pipeline", 85.0, "pipeline: colour-locksets / colour-off (reported)", None)):
        on, off = get(kernel, pct, "colour-locksets"), get(kernel, pct, "colour-off")
        value = round(on / off, 3) if on and off else None
        targets.append({"target": what, "value": value, "limit": limit,
                        "met": None if value is None or limit is None else value >= limit})
    # each of lockloop's 2 threads does rate/2 pairs a second: what lock sets add to one pair
    on, off = get("lockloop", None, "colour-locksets"), get("lockloop", None, "colour-off")
    value = round(2e9 / on - 2e9 / off, 2) if on and off else None
    targets.append({"target": "lockloop: lock sets add at most 1 ns a lock/unlock pair to colour-off",
                    "value": value, "unit": " ns", "limit": 1.0, "met": None if value is None else value <= 1.0})
    return targets


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pcts", help="lockhash's node sets, percent of the L2 (default 60,85,100)")
    ap.add_argument("--reps", type=int, help="repetitions (default 7)")
    ap.add_argument("--seconds", type=int, help="run time of each process (default 10)")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--out", default=str(harness.RESULTS))
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repetition of 3 s, lockhash at 85%%")
    args = ap.parse_args()
    quick = {"pcts": "85", "reps": 1, "seconds": 3} if args.quick else {"pcts": "60,85,100", "reps": 7, "seconds": 10}
    for k, v in quick.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.pcts = [float(p) for p in args.pcts.split(",")]
    args.configs = listed("locksets", "configuration", args.configs, CONFIGS)
    args.kernels = listed("locksets", "kernel", args.kernels, KERNELS)
    if args.reps < 1 or args.seconds < 1:
        sys.exit("locksets: --reps and --seconds must be at least 1")
    if not COLOUR.exists():
        sys.exit("locksets: build the libraries first (make)")
    build(os.environ.get("CC", "cc"))
    t0 = time.monotonic()
    out, work = prepare("locksets", args.configs, args.out)
    table = config_table(work)
    jobs = [(k, p) for k in args.kernels for p in (args.pcts if KERNELS[k][1] is None else [float(KERNELS[k][1]) or None])]
    rows, k, warned = [], 0, []
    for rep in range(args.reps):
        for kernel, pct in jobs:
            for name in harness.rotated(args.configs, rep):
                argv = ([f"--pct={pct:g}"] if pct else []) + [f"--seconds={args.seconds}"]
                r = one(name, table, work, kernel, argv, f"{k}")
                k += 1
                r.update(pct=pct, rep=rep)
                rows.append(r)
                if r["error"]:
                    say(f"  !! {kernel} {pct or ''} {name} rep {rep + 1}: {r['error']}")
                if r["warning"] and r["warning"] not in warned:
                    warned.append(r["warning"])
                    say(f"  note: {name}: {r['warning']}")
        say(f"  repetition {rep + 1}/{args.reps} done ({time.monotonic() - t0:.0f} s)")
    keys = ["kernel", "pct", "config", "rep", "error", "metric", "rate", "wall_s", "rss_mib", "user_s", "sys_s",
            "worker_cpu_ms", "result", "per_second"]
    harness.write_csv(out / "locksets.csv", keys, [[r.get(k) for k in keys] for r in rows])
    summary = []
    say("\nmedian (range) over processes, of each process's median second from the 3rd on")
    say(f"{'kernel':9} {'% L2':>5} {'config':16} {'rate':>26} {'unit':17} {'/ off':>6} {'peak RSS MiB':>18} failed")
    for kernel, pct in jobs:
        off = med([r for r in rows if r["kernel"] == kernel and r["pct"] == pct and r["config"] == "colour-off" and not r["error"]], "rate")[0]
        for name in args.configs:
            rs = [r for r in rows if r["kernel"] == kernel and r["pct"] == pct and r["config"] == name]
            ok = [r for r in rs if not r["error"]]
            e = {"kernel": kernel, "pct": pct, "config": name, "unit": UNIT[KERNELS[kernel][0]], "processes": len(rs),
                 "failed": len(rs) - len(ok), "rate": med(ok, "rate"), "wall_s": med(ok, "wall_s"), "rss_mib": med(ok, "rss_mib"),
                 "worker_cpu_ms": med(ok, "worker_cpu_ms")}
            e["to_off"] = round(e["rate"][0] / off, 3) if e["rate"][0] and off else None
            summary.append(e)
            scale = SCALE[KERNELS[kernel][0]]
            shown = tuple(None if x is None else x / scale for x in e["rate"])
            say(f"{kernel:9} {'' if pct is None else format(pct, 'g'):>5} {name:16} {fmt(shown, '.4g'):>26} {PREFIX[scale] + e['unit']:17} "
                f"{harness.fmt(e['to_off']):>6} {fmt(e['rss_mib'], '.1f'):>18} {e['failed']}")
    targets = targets_of(summary)
    say("\nTargets (reported, not enforced):")
    for t in targets:
        mark = "    " if t["limit"] is None else "SKIP" if t["met"] is None else "met " if t["met"] else "MISS"
        say(f"  {mark}  {t['target']}: {'-' if t['value'] is None else str(t['value']) + t.get('unit', 'x')}")
    if warned:
        say("  (the library warned about the option: colour-locksets may have run as colour-off)")
    ceiling = ceilings(sorted({p for k, p in jobs if k == "lockhash"}))
    for pct, share in ceiling.items():
        say(f"  model: a hot set of {pct:g}% of this L2 ({l2_geometry()}) on random frames has {share:.1%} of its pages "
            "beyond the ways of their colour: what spreading can win back")
    stats = [{"kernel": r["kernel"], "pct": r["pct"], "rep": r["rep"], "locksets": r["locksets"]} for r in rows if "locksets" in r]
    plot(rows, jobs, args, out / "locksets.png")
    finish("locksets", out, work, args.configs, table,
           {"summary": summary, "targets": targets, "locksets_stats": stats, "option_warnings": warned,
            "overfull_share_by_pct": ceiling}, t0)


if __name__ == "__main__":
    main()
