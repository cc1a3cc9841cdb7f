#!/usr/bin/env python3
"""ROCS (issue: paper 004): a polluter and its victim in one allocation (bench/colour/artlike.c),
under glibc, mimalloc and the cache runtime with ROCS off and on.

  python3 bench/rocs.py [--streams 4,48] [--reps 7] [--seconds 15] [--configs ...] [--out DIR]

Every process is `artlike --stream=S --seconds=T`: one malloc holding S MiB read line by line
every lap and, after it, a third of the L2 chased in random order once a lap.  With a stream
the L3 holds (4 MiB here), the stream's pages come back from the L3; with one beyond it (48 MiB),
from memory.

Configurations:
  glibc, mimalloc    the peers
  nostream           glibc, laps without the stream: the chase with nothing in its way
  colour             build/libchromalloc-colour.so as by default: NightWatch alone (it judges
                     whole chunks, so it cannot split this one)
  colour-rocs        rocs=1 (its search scored by the stand-in: the reloads' time)
  colour-rocs-progress  rocs=1, the program calling chromalloc_progress(1) every lap
  colour-rocs-l3     the same with rocs_l3=1: pages reused through the L3 join the stack, so the
                     search sweeps the stream into the buffer step by step
  split              colour, the stream moved into the first 1/16 of the colours by hand before
                     the laps (artlike --split): the pollute buffer ROCS would build, placed at once
The colour configurations get a machine profile and the set file that `chromalloc calibrate`
writes once at the start into the run's own directory, and hot_period=50 (ROCS's profile and
search then take about 3 s of windows instead of 7); the ROCS ones also colour_worker=25: the
buffer's frames are 1 in 16 fresh pages, and stocking 48 MiB of them takes about 2.3 s of the
colour worker's CPU, which its default share (2% of the program's) would spread over two minutes.

Figures: the chase's ns per line and the laps per second, medians of the seconds from the 5th
on, per process; then medians (ranges) per configuration, the configurations interleaved (their
order turns by one each repetition).  Under colour-rocs-progress the search is scored by the
program's progress, and the stand-in (the mean reload time) is measured beside it for each
configuration: "rank corr" is their Spearman rank correlation per process (1: the stand-in orders
the configurations as the program's own measure does).  Targets (the issue's; reported, never enforced): the
chase under colour-rocs within 1.3x of nostream's; no configuration of the cache runtime slower
in laps per second than colour by more than 2% where ROCS should leave the program alone.

Writes rocs.csv (every process), rocs.json (summary, targets, command, machine) and rocs.png to
bench/results/ (or --out)."""
import argparse, os, sys, time
from pathlib import Path

import run as harness
from colour_start import prepare, finish, launched, saved, shm_path, med, fmt, listed

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
ARTLIKE = BUILD / "artlike"
COLOUR = ROOT / "build" / "libchromalloc-colour.so"
CONFIGS = ["glibc", "mimalloc", "nostream", "colour", "colour-rocs", "colour-rocs-progress", "colour-rocs-l3", "split"]
say = harness.say


def build(cc):
    harness.build(cc)
    cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-o", str(ARTLIKE), str(ROOT / "bench" / "colour" / "artlike.c")]
    r = harness.run_quiet(cmd)
    if r.returncode != 0:
        sys.exit(f"rocs: build failed: {' '.join(cmd)}\n{r.stdout}")


def config_table(work):
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
        "split": (str(COLOUR), dict(files, CHROMALLOC_OPTIONS=fast), ["--split"]),
    }


def one(name, table, work, argv, key):
    preload, extra, more = table[name]
    out, err, rep, error, s = launched(ARTLIKE, argv + more, preload, extra, work, key, name.startswith("colour"))
    row = {"config": name, "error": error}
    if rep:
        row.update(wall_s=rep[0], rss_mib=rep[1] / 1024)
    kv, secs = {}, []
    for line in out.splitlines():
        if line.startswith("RESULT"):
            kv = dict(x.split("=", 1) for x in line.split()[1:])
        elif line.startswith("SECOND"):
            secs.append(float(line.split("chase_ns=")[1].split()[0]))
    if not kv and not error:
        row["error"] = "no RESULT line: " + err.strip()[-300:]
    row["chase_ns"] = float(kv["chase_ns_from5s"]) if kv else None
    row["laps_per_s"] = float(kv["laps_per_s_from5s"]) if kv else None
    row["per_second"] = " ".join(f"{x:.3f}" for x in secs)
    r, c = s.get("rocs") or {}, s.get("colours") or {}
    row["worker_cpu_ms"] = c.get("worker_cpu_ms")
    for k in ("state", "objective", "stack_runs", "chosen_runs", "moved_in", "moved_out", "reloads_l2",
              "reloads_beyond_l2", "reloads_memory", "phase_changes"):
        row[k] = r.get(k)
    sc = r.get("scores") or []
    row["scores"] = " ".join(f"{k}:{p:.0f}/{t:.0f}" for k, p, t in sc[:12])
    row["rank_corr"] = spearman([p for _, p, _ in sc], [-t for _, _, t in sc]) if sc and all(p for _, p, _ in sc) else None
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
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / len(args.configs)
    for ax, key, label in ((axes[0], "chase_ns", "chase, ns per line"), (axes[1], "laps_per_s", "laps per second")):
        for i, name in enumerate(args.configs):
            xs, ys = [], []
            for g, st in enumerate(args.streams):
                for r in rows:
                    if r["config"] == name and r["stream"] == st and r.get(key):
                        xs.append(g + (i - (len(args.configs) - 1) / 2) * width)
                        ys.append(r[key])
            ax.scatter(xs, ys, s=14, label=name, color=harness.color_of(name))
        ax.set_xticks(range(len(args.streams)), [f"{s:g} MiB stream" for s in args.streams])
        ax.set_ylabel(label + " (median of the seconds from the 5th on)")
        ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    axes[0].set_title("the reused third of the L2, chased after each stream")
    axes[1].set_title("the whole program")
    saved(fig, plt, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="4,48", help="stream sizes, MiB")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=str(harness.RESULTS))
    args = ap.parse_args()
    args.streams = [float(s) for s in args.streams.split(",")]
    args.configs = listed("rocs", "configuration", args.configs, CONFIGS)
    if not COLOUR.exists():
        sys.exit("rocs: build the libraries first (make)")
    build(os.environ.get("CC", "cc"))
    t0 = time.monotonic()
    out, work = prepare("rocs", args.configs, args.out)
    table = config_table(work)
    rows, k = [], 0
    for rep in range(args.reps):
        for st in args.streams:
            for name in harness.rotated(args.configs, rep):
                r = one(name, table, work, [f"--stream={st:g}", f"--seconds={args.seconds}"], f"{k}")
                k += 1
                r.update(stream=st, rep=rep)
                rows.append(r)
                if r["error"]:
                    say(f"  !! {st:g} MiB {name} rep {rep + 1}: {r['error']}")
        say(f"  repetition {rep + 1}/{args.reps} done ({time.monotonic() - t0:.0f} s)")
    keys = ["stream", "config", "rep", "error", "chase_ns", "laps_per_s", "wall_s", "rss_mib", "worker_cpu_ms", "state",
            "objective", "stack_runs", "chosen_runs", "moved_in", "moved_out", "reloads_l2", "reloads_beyond_l2",
            "reloads_memory", "phase_changes", "rank_corr", "scores", "per_second"]
    harness.write_csv(out / "rocs.csv", keys, [[r.get(k) for k in keys] for r in rows])
    summary = []
    say("\nmedian (range) over processes, from the 5th second on")
    say(f"{'MiB':>4} {'config':21} {'chase ns/line':>22} {'laps/s':>26} {'chosen runs':>14} {'moved in':>16} {'worker CPU ms':>18} {'rank corr':>20} failed")
    for st in args.streams:
        for name in args.configs:
            rs = [r for r in rows if r["stream"] == st and r["config"] == name]
            ok = [r for r in rs if not r["error"]]
            e = {"stream_mib": st, "config": name, "processes": len(rs), "failed": len(rs) - len(ok),
                 "chase_ns": med(ok, "chase_ns"), "laps_per_s": med(ok, "laps_per_s"), "chosen_runs": med(ok, "chosen_runs"),
                 "moved_in": med(ok, "moved_in"), "worker_cpu_ms": med(ok, "worker_cpu_ms"), "rss_mib": med(ok, "rss_mib"),
                 "rank_corr": med([r for r in ok if r.get("rank_corr") is not None], "rank_corr")}
            summary.append(e)
            say(f"{st:>4g} {name:21} {fmt(e['chase_ns'], '.3f'):>22} {fmt(e['laps_per_s'], '.0f'):>26} "
                f"{fmt(e['chosen_runs'], '.0f'):>14} {fmt(e['moved_in'], '.0f'):>16} {fmt(e['worker_cpu_ms'], '.0f'):>18} "
                f"{fmt(e['rank_corr'], '.2f'):>20} {e['failed']}")
    get = lambda st, name, k: next((e[k][0] for e in summary if e["stream_mib"] == st and e["config"] == name and e[k]), None)
    targets = []
    for st in args.streams:
        base = get(st, "nostream", "chase_ns")
        for name in ("colour-rocs", "colour-rocs-progress", "colour-rocs-l3"):
            on, laps, off_laps = get(st, name, "chase_ns"), get(st, name, "laps_per_s"), get(st, "colour", "laps_per_s")
            if on and base:
                targets.append({"target": f"{st:g} MiB: {name}'s chase within 1.3x of nostream's", "value": round(on / base, 3),
                                "met": on / base <= 1.3})
            if laps and off_laps:
                targets.append({"target": f"{st:g} MiB: {name}'s laps per second at least 0.98x colour's",
                                "value": round(laps / off_laps, 3), "met": laps / off_laps >= 0.98})
    say("\nTargets (reported, not enforced):")
    for t in targets:
        say(f"  {'met ' if t['met'] else 'MISS'}  {t['target']}: {t['value']}")
    finish("rocs", out, work, args.configs, table, {"summary": summary, "targets": targets}, t0)
    plot(rows, args, out / "rocs.png")
    say(f"({time.monotonic() - t0:.0f} s; per-process rows in {os.path.relpath(out / 'rocs.csv', ROOT)})")


if __name__ == "__main__":
    main()
