#!/usr/bin/env python3
"""mimalloc-bench's benchmarks under glibc, jemalloc, mimalloc, tcmalloc and chromalloc.

  MIMALLOC_BENCH=/path/to/mimalloc-bench make bench-mimalloc
  python3 bench/mimalloc_bench.py --suite PATH [--reps 3] [--procs 2] [--only cfrac,larsonN]
                                  [--allocators glibc,...] [--chromalloc LIB] [--also NAME=LIB[:OPTIONS]]

PATH is a checkout of https://github.com/daanx/mimalloc-bench (fetched once, outside this
repository: nothing is downloaded here).  Its bench/ folder is built with CMake into
build/mimalloc-bench, and each benchmark runs with the arguments its bench.sh gives (procs = 2
where bench.sh says $procs), every allocator through LD_PRELOAD and build/bench/launch (wall time
and peak RSS), the allocators' order rotated between repetitions.  Like bench.sh, larson,
rptest, xmalloc-test and glibc-thread are timed by what they print (their "relative time"); the
others by wall time.  sh6bench and sh8bench are built only when their sources are present in
bench/shbench (bench.sh's environment script downloads them).

Writes mimalloc-bench.csv (every run), mimalloc-bench_summary.{csv,json} (median time, its range and peak
RSS per benchmark and allocator, ratios to mimalloc, geometric means) and mimalloc-bench.png to
the results directory (default bench/results).
"""
import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as br  # noqa: E402

OUT = br.ROOT / "build" / "mimalloc-bench"


def benchmarks(src, procs):
    """name -> (binary, argv, stdin file or None, metric): bench.sh's run_test, for the
    benchmarks in its bench/ folder."""
    b = src / "bench"
    p = str(procs)
    rel = {
        "larson": lambda out: float(re.search(r" time: ([0-9.]+)", out).group(1)),
        "rptest": lambda out: 2000000.0 / float(re.search(r"\.\.\.([0-9]+) memory ops", out).group(1)),
        "xmalloc": lambda out: float(re.search(r"rtime: ([0-9.]+)", out).group(1)),
        "glibc-thread": lambda out: 1e9 / float(re.match(r"\s*([0-9.]+)", out).group(1)),
    }
    return {
        "cfrac": ("cfrac", ["17545186520507317056371138836327483792789528"], None, None),
        "espresso": ("espresso", [str(b / "espresso" / "largest.espresso")], None, None),
        "barnes": ("barnes", [], b / "barnes" / "input", None),
        "alloc-test1": ("alloc-test", ["1"], None, None),
        "alloc-testN": ("alloc-test", [p], None, None),
        "larsonN": ("larson", "5 8 1000 5000 100 4141".split() + [p], None, rel["larson"]),
        "larsonN-sized": ("larson-sized", "5 8 1000 5000 100 4141".split() + [p], None, rel["larson"]),
        "sh6benchN": ("sh6bench", [str(2 * procs)], None, None),
        "sh8benchN": ("sh8bench", [str(2 * procs)], None, None),
        "xmalloc-testN": ("xmalloc-test", ["-w", p, "-t", "5", "-s", "64"], None, rel["xmalloc"]),
        "cache-scratch1": ("cache-scratch", ["1", "1000", "1", "2000000", p], None, None),
        "cache-scratchN": ("cache-scratch", [p, "1000", "1", "2000000", p], None, None),
        "cache-thrash1": ("cache-thrash", ["1", "1000", "1", "2000000", p], None, None),
        "cache-thrashN": ("cache-thrash", [p, "1000", "1", "2000000", p], None, None),
        "malloc-large": ("malloc-large", [], None, None),
        "mstressN": ("mstress", [p, "50", "25"], None, None),
        "mleak10": ("mleak", ["5"], None, None),
        "mleak100": ("mleak", ["50"], None, None),
        "rptestN": ("rptest", [p, "0", "1", "2", "500", "1000", "100", "8", "16000"], None, rel["rptest"]),
        "glibc-simple": ("glibc-simple", [], None, None),
        "glibc-thread": ("glibc-thread", [p], None, rel["glibc-thread"]),
    }


def build_suite(src):
    """Build a copy of its bench/ folder: the copy lets us leave out sh6bench and sh8bench when
    their downloaded sources are absent, without touching the user's checkout."""
    copy = OUT.parent / "mimalloc-bench-src"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(src / "bench", copy, symlinks=True)
    if not (copy / "shbench" / "sh6bench-new.c").exists():
        cml = copy / "CMakeLists.txt"
        text = re.sub(r"if\(NOT APPLE\)\s*add_executable\(sh6bench.*?endif\(\)", "", cml.read_text(), flags=re.S)
        cml.write_text(text)
    OUT.mkdir(parents=True, exist_ok=True)
    cfg = ["cmake", "-S", str(copy), "-B", str(OUT), "-DCMAKE_BUILD_TYPE=Release"]
    for cmd in (cfg, ["cmake", "--build", str(OUT), "-j", str(os.cpu_count() or 2)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("mimalloc-bench: %s failed:\n%s" % (" ".join(cmd[:2]), (r.stdout + r.stderr)[-3000:]))


def run_one(alloc, name, spec, rep, timeout):
    binary, argv, stdin, metric = spec
    with tempfile.NamedTemporaryFile(prefix="mb-report-") as rf:
        cmd = br.launch_cmd(alloc.preload, rf.name, [str(OUT / binary)] + argv)
        with open(stdin) if stdin else open(os.devnull) as f:
            p = subprocess.Popen(cmd, env=br.child_env(alloc), stdin=f, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True, cwd=str(OUT))
            out, err, report, error = br.wait_launched(p, timeout, rf.name)
    row = {"benchmark": name, "allocator": alloc.name, "rep": rep, "error": error or ""}
    if report is not None:
        row.update(wall_s=report[0], maxrss_kib=report[1], user_s=report[3], sys_s=report[4])
    if not error:
        try:
            row["time"] = metric(out + err) if metric else report[0]
        except (AttributeError, ValueError, ZeroDivisionError):
            row["error"] = "no time in its output"
    if row["error"]:
        br.loud("FAILED: %s under %s, rep %d: %s %s" % (name, alloc.name, rep, row["error"], err.strip()[-300:]))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default=os.environ.get("MIMALLOC_BENCH"), help="mimalloc-bench checkout")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--only", help="comma-separated benchmarks")
    ap.add_argument("--allocators", help="comma-separated allocators (default: glibc, the peers, chromalloc)")
    ap.add_argument("--chromalloc", help="default build/libchromalloc.so (the allocator alone)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB[:OPTIONS]")
    ap.add_argument("--out", help="results directory (default bench/results)")
    ap.add_argument("--timeout", type=int, default=300)
    a = ap.parse_args()
    if not a.suite or not (Path(a.suite) / "bench" / "CMakeLists.txt").exists():
        sys.exit("mimalloc-bench: give a mimalloc-bench checkout: MIMALLOC_BENCH=/path make bench-mimalloc "
                 "(git clone https://github.com/daanx/mimalloc-bench, once, outside this repository)")
    src = Path(a.suite).resolve()
    results = Path(a.out).resolve() if a.out else br.RESULTS
    br.RESULTS = results
    results.mkdir(parents=True, exist_ok=True)
    table = br.allocator_table(Path(a.chromalloc).resolve() if a.chromalloc else br.ROOT / "build" / "libchromalloc.so", a.also)
    wanted = a.allocators.split(",") if a.allocators else [n for n in table if not table[n].index_only]
    br.build(os.environ.get("CC", "cc"))
    build_suite(src)
    specs = benchmarks(src, a.procs)
    names = [n for n in (a.only.split(",") if a.only else specs) if n in specs]
    missing = [n for n in names if not (OUT / specs[n][0]).exists()]
    for n in missing:
        br.say("not built: %s (%s)" % (n, "its sources are downloaded by mimalloc-bench's environment script"
                                       if n.startswith("sh") else "see the CMake output"))
    names = [n for n in names if n not in missing]
    allocs = br.ensure_preloads([table[n] for n in wanted])
    usable = []
    for x in allocs:
        why = br.check_preload(x)
        if why:
            br.loud("ERROR: %s cannot be used: %s" % (x.name, why))
        else:
            usable.append(x)
    allocs = usable
    meta = br.machine_info(allocs, table, os.environ.get("CC", "cc"))
    meta["suite"] = {"path": str(src), "commit": subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"],
                                                                capture_output=True, text=True).stdout.strip() or "unknown"}
    br.say("machine: %s, %d CPUs; mimalloc-bench %s; procs %d" % (meta["cpu_model"], meta["nproc"], meta["suite"]["commit"], a.procs))
    rows = []
    for rep in range(1, a.reps + 1):
        for k, name in enumerate(names):
            for alloc in br.rotated(allocs, rep + k):
                r = run_one(alloc, name, specs[name], rep, a.timeout)
                rows.append(r)
                br.say("rep %d/%d  %-15s %-12s %8s  %8s KiB  %s" % (rep, a.reps, name, alloc.name,
                       br.fmt(r.get("time")), r.get("maxrss_kib", "-"), r["error"] or "ok"))
    br.write_csv(results / "mimalloc-bench.csv", ["benchmark", "allocator", "rep", "time", "wall_s", "maxrss_kib",
                                                   "user_s", "sys_s", "error"],
                 [[r.get(k, "") for k in ("benchmark", "allocator", "rep", "time", "wall_s", "maxrss_kib", "user_s", "sys_s", "error")]
                  for r in rows])
    anames = [x.name for x in allocs]
    stats = {}
    for n in names:
        stats[n] = {}
        for an in anames:
            ok = [r for r in rows if r["benchmark"] == n and r["allocator"] == an and not r["error"]]
            if ok:
                t = br.median([r["time"] for r in ok])
                stats[n][an] = {"time": t, "time_min": min(r["time"] for r in ok), "time_max": max(r["time"] for r in ok),
                                "maxrss_kib": br.median([r["maxrss_kib"] for r in ok]), "runs": len(ok)}
    ref = "mimalloc"
    geo = {}
    for an in anames:
        tr = [stats[n][an]["time"] / stats[n][ref]["time"] for n in names if an in stats[n] and ref in stats[n]]
        rr = [stats[n][an]["maxrss_kib"] / stats[n][ref]["maxrss_kib"] for n in names if an in stats[n] and ref in stats[n]]
        geo[an] = {"time_ratio": br.geomean(tr), "rss_ratio": br.geomean(rr), "benchmarks": len(tr)}
    br.write_json(results / "mimalloc-bench_summary.json", {"machine": meta, "reps": a.reps, "procs": a.procs,
                                                            "reference": ref, "benchmarks": stats, "geomean": geo})
    hdr = (["benchmark"] + ["%s_time_ratio" % x for x in anames] + ["%s_rss_ratio" % x for x in anames] +
           ["%s_time_range" % x for x in anames])
    out = []
    br.say("\nmimalloc-bench: median time (ratio to %s) | peak RSS ratio" % ref)
    br.say("%-16s" % "benchmark" + "".join("%16s" % x for x in anames))
    for n in names:
        base = stats[n].get(ref)
        cells = [(stats[n][x]["time"] / base["time"], stats[n][x]["maxrss_kib"] / base["maxrss_kib"]) if base and x in stats[n]
                 else (None, None) for x in anames]
        ranges = ["%s-%s" % (br.fmt(stats[n][x]["time_min"]), br.fmt(stats[n][x]["time_max"])) if x in stats[n] else ""
                  for x in anames]                      # the spread of single runs, in the benchmark's unit
        out.append([n] + [br.fmt(c[0], ".3f") for c in cells] + [br.fmt(c[1], ".3f") for c in cells] + ranges)
        br.say("%-16s" % n + "".join("%16s" % ("%.2f | %.2f" % c if c[0] is not None else "-") for c in cells))
    br.say("%-16s" % "geomean" + "".join("%16s" % ("%.3f | %.3f" % (geo[x]["time_ratio"], geo[x]["rss_ratio"])
                                                    if geo[x]["benchmarks"] else "-") for x in anames))
    br.write_csv(results / "mimalloc-bench_summary.csv", hdr, out)
    plt = br.load_matplotlib()
    if plt is not None:
        fig, axes = plt.subplots(2, 1, figsize=(max(10, len(names) * 0.7), 8), sharex=True)
        width = 0.8 / max(1, len(anames))
        for i, an in enumerate(anames):
            for ax, key in zip(axes, ("time", "maxrss_kib")):
                ys = [stats[n][an][key] / stats[n][ref][key] if an in stats[n] and ref in stats[n] else math.nan for n in names]
                ax.bar([k + i * width for k in range(len(names))], ys, width, label=an, color=br.color_of(an))
        for ax, what in zip(axes, ("time", "peak RSS")):
            ax.axhline(1, color="grey", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylabel("%s / %s" % (what, ref))
        axes[1].set_xticks([k + 0.4 - width / 2 for k in range(len(names))])
        axes[1].set_xticklabels(names, rotation=45, ha="right")
        axes[0].legend(ncol=len(anames), fontsize=8)
        axes[0].set_title("mimalloc-bench (%s), %d procs, median of %d: ratio to %s (lower is better)" %
                          (meta["suite"]["commit"], a.procs, a.reps, ref))
        fig.savefig(results / "mimalloc-bench.png", dpi=100, bbox_inches="tight")
        br.say("wrote %s" % (results / "mimalloc-bench.png"))
    failed = [r for r in rows if r["error"]]
    br.say("mimalloc-bench: %d runs, %d failed" % (len(rows), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
