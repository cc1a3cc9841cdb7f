#!/usr/bin/env python3
"""ROCS (issue: paper 004): a polluter and its victim in one allocation (bench/colour/artlike.c),
and the other kernels of bench/colour/rocskern.c, under glibc, mimalloc and the cache runtime
with ROCS off and on.

  python3 bench/rocs.py [--streams 4,48] [--kernels cg,swim,reuse,chase] [--reps 7] [--seconds 15]
                        [--configs ...] [--sweep 0,25,50,100] [--out DIR]

The workloads:
  artS   `artlike --stream=S`: one malloc holding S MiB read line by line every lap and, after
         it, a third of the L2 chased in random order four times a lap.  With a stream the L3
         holds (4 MiB here), the stream's pages come back from the L3; with one beyond it (48
         MiB), from memory.
  cg     a sparse matrix-vector loop: vectors 3/4 of the L2, the matrix 8x the L2
  swim   a stencil over nine grids of one L2 each
  reuse  adversary: 4x the L2 read every lap (hits in the L3: no loss beyond 2% allowed)
  chase  adversary: a pointer chase over 64 MiB (no reuse: no loss beyond 2% allowed)

Configurations:
  glibc, mimalloc    the peers
  nostream           glibc, laps without the stream: the chase with nothing in its way
  colour             build/libchromalloc-colour.so as by default: NightWatch alone (it judges
                     whole chunks, so it cannot split this one)
  colour-rocs        rocs=1 (its search scored by the lap stand-in; none without lap pages)
  colour-rocs-progress  rocs=1, the program calling chromalloc_progress(1) every lap
                     (both with rocs_l3=auto: pages reused through the L3 join the stack where
                     the buffer's share of the L3 holds them all)
  colour-rocs-l3     the same with rocs_l3=1: pages reused through the L3 always join the stack
  colour-rocs-8      colour-rocs with a buffer of 1/8 of the colours (rocs_buffer=8; 1/16 by default)
  split              colour, the stream moved into the first 1/16 of the colours by hand before
                     the laps (artlike --split): the pollute buffer ROCS would build, placed at once
  (nostream and split are artlike's only.)
  --sweep P,...      adds rocs-fixed-P: the top P% of the stack confined without a search
                     (rocs_fixed=P, the program calling chromalloc_progress): the offline sweep
                     the search (colour-rocs-progress) is checked against
The colour configurations get a machine profile and the set file that `chromalloc calibrate`
writes once at the start into the run's own directory, and hot_period=50 (ROCS's profile and
search then take about 3 s of windows instead of 7); the ROCS ones also colour_worker=25: the
buffer's frames are 1 in 16 fresh pages, and stocking 48 MiB of them takes about 2.3 s of the
colour worker's CPU, which its default share (2% of the program's) would spread over two minutes.

Figures: the chase's ns per line and the laps per second, medians of the seconds from the 5th
on, per process; then medians (ranges) per configuration, the configurations interleaved (their
order turns by one each repetition); "paired": the median over repetitions of a process's laps
over those of `colour`'s process of the same repetition (run beside it: the host's drift cancels,
the processes' own spread does not).  Under colour-rocs-progress the search is scored by the
program's progress, and both stand-ins (the lap pages' wait, colour-rocs's score, and the mean
reload time) are measured beside it for each configuration: "lap corr" and "stall corr" are
their Spearman rank correlations with it per process (1: the stand-in orders the configurations
as the program's own measure does); with --sweep, the same over the sweep's points (their median
laps per second against their median stand-in).  Targets (the issue's;
reported, never enforced): the chase under colour-rocs within 1.3x of nostream's; under the
adversaries (art4, reuse, chase), no ROCS configuration slower in laps per second than colour by
more than 2%; the search within 5% of the sweep's best point.

Writes rocs.csv (every process), rocs.json (summary, targets, command, machine) and rocs.png to
bench/results/ (or --out)."""
import argparse, os, sys, time
from pathlib import Path

import run as harness
from colour_start import results, prepare, say_targets, finish, launched, saved, shm_path, med, fmt, listed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
ARTLIKE = BUILD / "artlike"
ROCSKERN = BUILD / "rocskern"
KERNELS = ["cg", "swim", "reuse", "chase"]
ARTONLY = ("nostream", "split")
COLOUR = ROOT / "build" / "libchromalloc-colour.so"
CONFIGS = ["glibc", "mimalloc", "nostream", "colour", "colour-rocs", "colour-rocs-progress", "colour-rocs-l3", "colour-rocs-8",
           "split"]
say = harness.say


def build(cc):
    harness.build(cc)
    for exe in (ARTLIKE, ROCSKERN):
        cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-o", str(exe), str(ROOT / "bench" / "colour" / (exe.name + ".c"))]
        r = harness.run_quiet(cmd)
        if r.returncode != 0:
            sys.exit(f"rocs: build failed: {' '.join(cmd)}\n{r.stdout}")


def config_table(work, sweep):
    files = {"CHROMALLOC_PROFILE": str(work / "profile.json"), "CHROMALLOC_SETS": shm_path(work, "colour")}
    fast = "hot_period=50"
    search = fast + ",colour_worker=25,rocs=1"       # the buffer's stock: 2.3 s of CPU for 48 MiB
    return {   # name: (preload, environment, extra arguments)
        "glibc": (None, {}, []),
        "mimalloc": (str(harness.LIBDIR / "libmimalloc.so.2"), {}, []),
        "nostream": (None, {}, ["--nostream"]),
        "colour": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=fast), []),
        "colour-rocs": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=search), []),
        "colour-rocs-progress": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=search), ["--progress"]),
        "colour-rocs-l3": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=search + ",rocs_l3=1"), ["--progress"]),
        "colour-rocs-8": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=search + ",rocs_buffer=8"), []),
        "split": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=fast), ["--split"]),
        **{f"rocs-fixed-{p}": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=search + f",rocs_fixed={p}"), ["--progress"])
           for p in sweep},
    }


def one(name, table, work, program, argv, key):
    preload, extra, more = table[name]
    out, err, rep, error, s = launched(program, argv + more, preload, extra, work, key, preload == str(COLOUR))
    row = {"config": name, "error": error}
    if rep:
        row.update(wall_s=rep[0], rss_mib=rep[1] / 1024)
    kv, secs, row["error"] = results(out, err, error)
    row["chase_ns"] = float(kv["chase_ns_from5s"]) if "chase_ns_from5s" in kv else None
    row["laps_per_s"] = float(kv["laps_per_s_from5s"]) if kv else None
    row["per_second"] = " ".join(f"{x:.3f}" for x in secs)
    r, c = s.get("rocs") or {}, s.get("colours") or {}
    m = (s.get("nightwatch") or {}).get("monitor") or {}   # the reload's readings and thresholds, ticks
    row["reload_ticks"] = "/".join(str(m.get(k, "")) for k in ("hit_ticks", "threshold", "l3_low_ticks", "miss_ticks", "mem_threshold", "mem_ticks"))
    row["worker_cpu_ms"] = c.get("worker_cpu_ms")
    for k in ("state", "objective", "stack_runs", "chosen_runs", "moved_in", "moved_out", "reloads_l2",
              "reloads_beyond_l2", "reloads_memory", "phase_changes"):
        row[k] = r.get(k)
    sc = r.get("scores") or []
    row["scores"] = " ".join(f"{k}:{p:.0f}/{t:.0f}/{l:.0f}" for k, p, t, l in sc)
    tried = len({s[0] for s in sc}) >= 3                      # a search's configurations, not one point of a sweep
    progress = [s[1] for s in sc]
    for col, key in ((2, "stall"), (3, "lap")):
        vals = [s[col] for s in sc]
        row[f"{key}_corr"] = spearman(progress, [-v for v in vals]) if tried and all(progress) and all(vals) else None
        row[key] = sum(vals) / len(vals) if vals else None
    return row


def spearman(a, b):
    """rank correlation of the program's progress and the stand-in (minus the reload time) over the
    configurations a process scored"""
    if len(a) < 3:
        return None
    rank = lambda v: {i: r for r, i in enumerate(sorted(range(len(v)), key=lambda i: v[i]))}
    ra, rb = rank(a), rank(b)
    n = len(a)
    return 1 - 6 * sum((ra[i] - rb[i]) ** 2 for i in range(n)) / (n * (n * n - 1))


def plot(rows, args, path):
    plt = harness.load_matplotlib()
    if plt is None:
        say("matplotlib not available: rocs.png not written")
        return
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    width = 0.8 / len(args.configs)
    arts = [w for w, _, _ in args.workloads if w.startswith("art")]
    names = [w for w, _, _ in args.workloads]
    for i, name in enumerate(args.configs):
        for ax, group, key in ((axes[0], arts, "chase_ns"), (axes[1], names, "laps_rel")):
            xs, ys = [], []
            for g, w in enumerate(group):
                for r in rows:
                    if r["config"] == name and r["workload"] == w and r.get(key):
                        xs.append(g + (i - (len(args.configs) - 1) / 2) * width)
                        ys.append(r[key])
            ax.scatter(xs, ys, s=14, label=name, color=harness.color_of(name))
    axes[0].set_xticks(range(len(arts)), arts)
    axes[0].set_ylabel("ns per line (median of the seconds from the 5th on)")
    if arts:
        axes[0].set_yscale("log")
    axes[0].set_title("artlike: the reused third of the L2, chased after each stream")
    axes[1].set_xticks(range(len(names)), names)
    axes[1].set_ylabel("laps per second / colour's median")
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set_title("the whole program")
    axes[1].legend(fontsize=7)
    saved(fig, plt, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="4,48", help="artlike's stream sizes, MiB (none: no artlike)")
    ap.add_argument("--kernels", default=",".join(KERNELS), help="rocskern's kernels (none: no kernel)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--sweep", default="", help="percents of the stack for rocs-fixed-P configurations")
    ap.add_argument("--out", default=str(harness.RESULTS))
    args = ap.parse_args()
    sweep = [int(p) for p in args.sweep.split(",") if p]
    if any(not 0 <= p <= 100 for p in sweep):
        sys.exit("rocs: --sweep takes percents 0..100")
    args.configs = listed("rocs", "configuration", args.configs, CONFIGS) + [f"rocs-fixed-{p}" for p in sweep]
    args.workloads = [(f"art{float(st):g}", ARTLIKE, [f"--stream={float(st):g}"]) for st in args.streams.split(",") if st != "none"]
    args.workloads += [(k, ROCSKERN, [k]) for k in listed("rocs", "kernel", args.kernels, KERNELS + ["none"]) if k != "none"]
    if not COLOUR.exists():
        sys.exit("rocs: build the libraries first (make)")
    build(os.environ.get("CC", "cc"))
    t0 = time.monotonic()
    out, work = prepare("rocs", args.configs, args.out)
    table = config_table(work, sweep)
    rows, k = [], 0
    for rep in range(args.reps):
        for w, program, argv in args.workloads:
            for name in harness.rotated(args.configs, rep):
                if name in ARTONLY and program != ARTLIKE:
                    continue
                r = one(name, table, work, program, argv + [f"--seconds={args.seconds}"], f"{k}")
                k += 1
                r.update(workload=w, rep=rep)
                rows.append(r)
                if r["error"]:
                    say(f"  !! {w} {name} rep {rep + 1}: {r['error']}")
        say(f"  repetition {rep + 1}/{args.reps} done ({time.monotonic() - t0:.0f} s)")
    for r in rows:                                   # laps relative to colour's median, per workload
        base = med([x for x in rows if x["workload"] == r["workload"] and x["config"] == "colour" and not x["error"]], "laps_per_s")[0]
        r["laps_rel"] = r["laps_per_s"] / base if base and r.get("laps_per_s") else None
        same = [x for x in rows if x["workload"] == r["workload"] and x["config"] == "colour" and x["rep"] == r["rep"]
                and not x["error"] and x.get("laps_per_s")]   # the same repetition's, run beside it
        r["laps_paired"] = r["laps_per_s"] / same[0]["laps_per_s"] if same and r.get("laps_per_s") else None
    keys = ["workload", "config", "rep", "error", "chase_ns", "laps_per_s", "laps_rel", "laps_paired", "wall_s", "rss_mib", "worker_cpu_ms",
            "state", "objective", "stack_runs", "chosen_runs", "moved_in", "moved_out", "reloads_l2", "reloads_beyond_l2",
            "reloads_memory", "phase_changes", "reload_ticks", "stall", "stall_corr", "lap", "lap_corr", "scores", "per_second"]
    harness.write_csv(out / "rocs.csv", keys, [[r.get(k) for k in keys] for r in rows])
    summary = []
    say("\nmedian (range) over processes, from the 5th second on")
    say(f"{'load':>6} {'config':21} {'chase ns/line':>22} {'laps/s':>26} {'x colour':>18} {'paired':>6} {'chosen runs':>14} {'moved in':>16} "
        f"{'worker CPU ms':>18} {'stall corr':>20} {'lap corr':>20} failed")
    for w, _, _ in args.workloads:
        for name in args.configs:
            rs = [r for r in rows if r["workload"] == w and r["config"] == name]
            if not rs:
                continue
            ok = [r for r in rs if not r["error"]]
            e = {"workload": w, "config": name, "processes": len(rs), "failed": len(rs) - len(ok),
                 "chase_ns": med(ok, "chase_ns"), "laps_per_s": med(ok, "laps_per_s"), "laps_rel": med(ok, "laps_rel"),
                 "laps_paired": med([r for r in ok if r.get("laps_paired") is not None], "laps_paired"),
                 "chosen_runs": med(ok, "chosen_runs"), "stack_runs": med(ok, "stack_runs"), "moved_in": med(ok, "moved_in"),
                 "worker_cpu_ms": med(ok, "worker_cpu_ms"), "rss_mib": med(ok, "rss_mib"), "stall": med(ok, "stall"),
                 "lap": med(ok, "lap"),
                 "stall_corr": med([r for r in ok if r.get("stall_corr") is not None], "stall_corr"),
                 "lap_corr": med([r for r in ok if r.get("lap_corr") is not None], "lap_corr")}
            summary.append(e)
            say(f"{w:>6} {name:21} {fmt(e['chase_ns'], '.3f'):>22} {fmt(e['laps_per_s'], '.0f'):>26} {fmt(e['laps_rel'], '.3f'):>18} "
                f"{'-' if e['laps_paired'][0] is None else format(e['laps_paired'][0], '.3f'):>6} {fmt(e['chosen_runs'], '.0f'):>14} {fmt(e['moved_in'], '.0f'):>16} {fmt(e['worker_cpu_ms'], '.0f'):>18} "
                f"{fmt(e['stall_corr'], '.2f'):>20} {fmt(e['lap_corr'], '.2f'):>20} {e['failed']}")
    get = lambda w, name, k: next((e[k][0] for e in summary if e["workload"] == w and e["config"] == name and e[k][0] is not None), None)
    targets, searches = [], ("colour-rocs", "colour-rocs-progress", "colour-rocs-l3", "colour-rocs-8")
    for w, program, _ in args.workloads:
        base = get(w, "nostream", "chase_ns")
        for name in searches:
            on = get(w, name, "chase_ns")
            if on and base:
                targets.append({"target": f"{w}: {name}'s chase within 1.3x of nostream's", "value": round(on / base, 3),
                                "met": on / base <= 1.3})
        if w in ("art4", "reuse", "chase"):                  # the adversaries: ROCS must leave them alone
            for name in searches + tuple(f"rocs-fixed-{p}" for p in sweep):
                rel = get(w, name, "laps_rel")
                if rel:
                    targets.append({"target": f"{w}: {name}'s laps per second at least 0.98x colour's", "value": round(rel, 3),
                                    "met": rel >= 0.98})
                paired = get(w, name, "laps_paired")
                if paired:
                    targets.append({"target": f"{w}: {name}'s laps per second over colour's of the same repetition (reported)",
                                    "value": round(paired, 3), "met": None})
        laps = [l for l in (get(w, f"rocs-fixed-{p}", "laps_per_s") for p in sweep) if l]
        for standin in ("stall", "lap"):
            points = [(get(w, f"rocs-fixed-{p}", "laps_per_s"), get(w, f"rocs-fixed-{p}", standin)) for p in sweep]
            points = [(l, t) for l, t in points if l and t]   # the stand-in: once a point's moves were done
            if len(points) >= 3:
                rc = spearman([l for l, _ in points], [-t for _, t in points])
                targets.append({"target": f"{w}: the {standin} stand-in's rank correlation with laps per second over the sweep (reported)",
                                "value": round(rc, 2), "met": None})
        found = get(w, "colour-rocs-progress", "laps_per_s")
        if laps and found:
            best = max(laps)
            targets.append({"target": f"{w}: the search (colour-rocs-progress) within 5% of the sweep's best laps per second",
                            "value": round(found / best, 3), "met": found / best >= 0.95})
    say_targets(targets)
    plot(rows, args, out / "rocs.png")
    finish("rocs", out, work, args.configs, table, {"summary": summary, "targets": targets}, t0)


if __name__ == "__main__":
    main()
