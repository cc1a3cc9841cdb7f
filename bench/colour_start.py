#!/usr/bin/env python3
"""How soon, and at what cost, the cache runtime protects an unmodified program: a victim and a
polluter in one process (bench/colour/vp.c), under glibc, mimalloc and both chromalloc libraries.

  python3 bench/colour_start.py [--seconds 2,5,20] [--procs 10] [--variants plain]
                                [--configs glibc,mimalloc,chromalloc,colour,colour-cold] [--out DIR]

Configurations:
  glibc, mimalloc   the peers (no colours: the victim's gap stays)
  chromalloc        build/libchromalloc.so, the allocator alone
  colour            build/libchromalloc-colour.so with a machine profile and the set file that
                    `chromalloc calibrate` writes, made once at the start into the run's own
                    directory (CHROMALLOC_PROFILE, CHROMALLOC_SETS): the usual case
  colour-cold       the same library with neither: every process finds its own colours
Variants (vp's options): plain (the program alone), streamer (a second thread streams 64 MiB:
the L3 the worker's CPU shares is thrashed), busy (a second thread spins: both CPUs busy).

Each configuration runs `vp --seconds=S` `--procs` times per duration, the configurations
interleaved (their order turns by one each repetition), every process through build/bench/launch
(wall time, peak RSS) with CHROMALLOC_STATS.  vp times the victim alone in the same process (the
first 10 ms of every 100 ms): the ratio is the median over the seconds from the 2nd on of that
second's victim ns with the polluter over its ns alone, so that the host's load, which swings the
victim's own time 2x between seconds, cancels.  Per process: that ratio, the victim's ns with and
alone, rounds, peak RSS; for the cache runtime also when the layer
was asked for, when its sets were ready and its first stock in (ms after asking), the worker's CPU
then and in all, where its sets came from, and the share of rounds protected (polluter chunks
given restrictive pages, over rounds: NightWatch's restrictive less restrictive_ordinary).

Targets (issue 47; reported, never enforced): first stock within 1 s of asking in 19 of 20
`colour` processes; the victim with the polluter within 1.2x of alone from the 2nd second on
(median per duration); worker CPU at most 0.5 s per process.

Writes colour_start.csv (every process), colour_start.json (summary, targets, command, machine) and
colour_start.png to bench/results/ (or --out)."""
import argparse, atexit, json, os, shutil, statistics, subprocess, sys, tempfile, time
from pathlib import Path

import run as harness

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
VP = BUILD / "vp"
TOOL = ROOT / "tools" / "chromalloc"
LEAN = ROOT / "build" / "libchromalloc.so"
COLOUR = ROOT / "build" / "libchromalloc-colour.so"
VARIANTS = {"plain": [], "streamer": ["--streamer"], "busy": ["--busy"]}
CONFIGS = ["glibc", "mimalloc", "chromalloc", "colour", "colour-cold"]
say = harness.say


def build(cc):
    harness.build(cc)                                   # launch, and the suite's programs
    cmd = [cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-pthread", "-o", str(VP), str(ROOT / "bench" / "colour" / "vp.c")]
    r = harness.run_quiet(cmd)
    if r.returncode != 0:
        sys.exit(f"colour_start: build failed: {' '.join(cmd)}\n{r.stdout}")


def config_table(work):
    """name -> (preload or None, extra environment); colour-cold's paths are made per process"""
    return {
        "glibc": (None, {}),
        "mimalloc": (str(harness.LIBDIR / "libmimalloc.so.2"), {}),
        "chromalloc": (str(LEAN), {}),
        "colour": (str(COLOUR), {"CHROMALLOC_PROFILE": str(work / "profile.json"), "CHROMALLOC_SETS": shm_path(work, "colour")}),
        "colour-cold": (str(COLOUR), {}),
    }


def shm_path(work, name):
    """a set file of the run's own, on tmpfs (only tmpfs keeps a file's frames: setfile.c)"""
    return f"/dev/shm/chromalloc-bench-{work.name}-{name}.sets"


def work_dir(name):
    """the run's work directory (launch reports, statistics, the machine profile), removed with the
    run's set file when the script exits, however it ends but by a signal"""
    work = Path(tempfile.mkdtemp(prefix=name + "-"))
    def cleanup():
        for suffix in ("", ".part"):
            Path(shm_path(work, "colour") + suffix).unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    atexit.register(cleanup)
    return work


def calibrate(work):
    env = dict(os.environ, CHROMALLOC_SETS=shm_path(work, "colour"))
    env.pop("LD_PRELOAD", None)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(TOOL), "calibrate", "--lib", str(COLOUR), "--out", str(work / "profile.json")],
                       env=env, capture_output=True, text=True, timeout=600)
    say(r.stdout.strip())
    say(f"calibrate: {time.monotonic() - t0:.1f} s, exit {r.returncode}")
    return r.returncode == 0


def prepare(name, configs, out):
    """The start of a cache-runtime benchmark (hot.py, locksets.py): its output directory, mimalloc
    installed (dropped from `configs` when it cannot be), a work directory, and a machine profile
    and set file calibrated into it when a colour configuration runs.  Returns (out, work)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if "mimalloc" in configs and not harness.ensure_preloads([harness.Allocator("mimalloc", str(harness.LIBDIR / "libmimalloc.so.2"), package="libmimalloc2.0")]):
        configs.remove("mimalloc")
    work = work_dir(name)
    # a loud moment can fail a calibration (on the Xeon once 163 of 165 eviction sets failed): try three times
    if any(c.startswith("colour") for c in configs) and not any(calibrate(work) for _ in range(3)):
        say(f"{name}: calibration failed three times: the colour configurations run without a usable profile")
    return out, work


def say_targets(targets):
    """the targets' lines: met, MISS, or blank for one only reported (met None); [variant] if any"""
    say("\nTargets (reported, not enforced):")
    for t in targets:
        mark = "    " if t["met"] is None else "met " if t["met"] else "MISS"
        tag = f"[{t['variant']}] " if "variant" in t else ""
        say(f"  {mark}  {tag}{t['target']}: {t['value']}")


def finish(name, out, work, configs, table, doc, t0):
    """The end of a cache-runtime benchmark (hot.py, locksets.py, rocs.py, this one), once its
    plot is written: NAME.json, `doc` with the command, the machine and the run's seconds, and the
    line that says where the rows are (work_dir removes the work directory and set file)."""
    allocs = [harness.Allocator(n, table[n][0], env=table[n][1], package="libmimalloc2.0" if n == "mimalloc" else None) for n in configs]
    machine = harness.machine_info(allocs, {a.name: a for a in allocs}, os.environ.get("CC", "cc"))
    machine["l2"] = l2_geometry()
    harness.write_json(out / f"{name}.json", dict({"command": " ".join(sys.argv), "machine": machine}, **doc,
                                                  seconds=time.monotonic() - t0))
    say(f"({time.monotonic() - t0:.0f} s; per-process rows in {os.path.relpath(out / (name + '.csv'), ROOT)})")


def results(out, err, error):
    """a process's RESULT key=values and the first figure of each SECOND line, and its error (no
    RESULT line is one)"""
    kv, secs = {}, []
    for line in out.splitlines():
        if line.startswith("RESULT"):
            kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
        elif line.startswith("SECOND"):
            secs.append(float(line.split("=", 1)[1].split()[0]))
    if not kv and not error:
        error = "no RESULT line: " + err.strip()[-300:]
    return kv, secs, error


def launched(program, argv, preload, extra, work, key, stats):
    """one process through build/bench/launch, the environment cleared of chromalloc's and
    `extra` added: (stdout, stderr, launch's report, error, the statistics JSON or {})"""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("CHROMALLOC_")}
    env.update(extra)
    path = work / f"stats-{key}.json"
    report = work / f"launch-{key}"
    if stats:
        env["CHROMALLOC_STATS"] = str(path)
    cmd = harness.launch_cmd(preload, str(report), [str(program)] + argv, harness.WASH_MIB)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err, rep, error = harness.wait_launched(p, 600, report)
    s = {}
    if path.exists():
        try:
            s = json.load(open(path))
        except ValueError:
            pass
        path.unlink()
    return out, err, rep, error, s


def one(name, table, work, argv, key):
    """one vp process: a row of measurements (error set when it failed)"""
    preload, extra = table[name]
    extra = dict(extra)
    if name == "colour-cold":
        cold = work / f"cold-{key}"
        cold.mkdir(parents=True, exist_ok=True)
        extra.update(CHROMALLOC_PROFILE=str(cold / "profile.json"), CHROMALLOC_SETS=shm_path(work, f"cold-{key}"))
    out, err, rep, error, s = launched(VP, argv, preload, extra, work, key, name.startswith("colour"))
    row = {"config": name, "error": error}
    if rep:
        row.update(wall_s=rep[0], rss_mib=rep[1] / 1024, user_s=rep[3], sys_s=rep[4])
    kv = {}
    for line in out.splitlines():
        if line.startswith("RESULT vp"):
            kv = dict(x.split("=", 1) for x in line.split()[2:])
    if not kv and not error:
        row["error"] = "no RESULT line: " + err.strip()[-300:]
    for k in ("victim_ns", "victim_ns_from2s", "alone_ns_from2s", "ratio_from2s"):
        row[k] = float(kv[k]) if k in kv else None
    row["rounds"] = int(kv["rounds"]) if "rounds" in kv else None
    row["ratio"] = row.pop("ratio_from2s") or None
    c, nw = s.get("colours") or {}, s.get("nightwatch") or {}
    if c:
        for k in ("state", "sets_from", "asked_ms", "ready_ms", "stocked_ms", "ready_cpu_ms", "stocked_cpu_ms", "worker_cpu_ms", "worker_paced_ms"):
            row[k] = c.get(k)
        if not c.get("stocked_ms"):
            row["stocked_ms"] = None                # never stocked
        restrictive, ordinary = nw.get("restrictive", 0), nw.get("restrictive_ordinary", 0)
        row["protected"] = (restrictive - ordinary) / row["rounds"] if row.get("rounds") else None
    if name == "colour-cold":
        Path(shm_path(work, f"cold-{key}")).unlink(missing_ok=True)
    return row


def l2_geometry():
    """the L2 as sysfs describes it: "1024K 8-way", or None"""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            if (d / "level").read_text().strip() == "2":
                return f"{(d / 'size').read_text().strip()} {(d / 'ways_of_associativity').read_text().strip()}-way"
        except OSError:
            pass
    return None


def listed(tool, what, text, allowed):
    """the comma-separated choices of an option, each one of `allowed` (else a one-line error)"""
    given = text.split(",")
    for g in given:
        if g not in allowed:
            sys.exit(f"{tool}: unknown {what} {g} ({', '.join(allowed)})")
    return given


def med(rows, k):
    xs = [r[k] for r in rows if r.get(k) is not None]
    return (statistics.median(xs), min(xs), max(xs)) if xs else (None, None, None)


def fmt(t, spec=".2f"):
    m, lo, hi = t
    return "-" if m is None else f"{m:{spec}} ({lo:{spec}}-{hi:{spec}})"


def plot(rows, args, path):
    plt = harness.load_matplotlib()
    if plt is None:
        say("matplotlib not available: colour_start.png not written")
        return
    groups = [(v, s) for v in args.variants for s in args.seconds]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    ax = axes[0]
    width = 0.8 / len(args.configs)
    for i, name in enumerate(args.configs):
        xs, ys = [], []
        for g, (v, s) in enumerate(groups):
            for r in rows:
                if r["config"] == name and r["variant"] == v and r["seconds"] == s and r.get("ratio"):
                    xs.append(g + (i - (len(args.configs) - 1) / 2) * width)
                    ys.append(r["ratio"])
        ax.scatter(xs, ys, s=12, label=name, color=harness.COLORS.get(name))
    ax.axhline(1.2, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(groups)), [f"{v} {s} s" for v, s in groups], rotation=20)
    ax.set_ylabel("victim ns with the polluter / alone (from the 2nd second)")
    ax.set_title("the victim beside the polluter (target 1.2)")
    ax = axes[1]
    for i, name in enumerate([c for c in args.configs if c.startswith("colour")]):
        xs, ys = [], []
        for g, (v, s) in enumerate(groups):
            for r in rows:
                if r["config"] == name and r["variant"] == v and r["seconds"] == s:
                    xs.append(g + (i - 0.5) * 0.3)
                    ys.append((r.get("stocked_ms") or 60000) / 1000)
        ax.scatter(xs, ys, s=12, label=name)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), [f"{v} {s} s" for v, s in groups], rotation=20)
    ax.set_ylabel("first stock in, s after asking (60: never)")
    ax.set_title("the cache runtime's start (target 1 s)")
    saved(fig, plt, path)


def saved(fig, plt, path):
    """the figure's legends shown, the figure written and closed"""
    for ax in fig.axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say(f"wrote {os.path.relpath(path, ROOT)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", default="2,5,20")
    ap.add_argument("--procs", type=int, default=10)
    ap.add_argument("--variants", default="plain")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=str(harness.RESULTS))
    args = ap.parse_args()
    args.seconds = [float(s) for s in args.seconds.split(",")]
    args.variants = listed("colour_start", "variant", args.variants, VARIANTS)
    args.configs = listed("colour_start", "configuration", args.configs, CONFIGS)
    if not LEAN.exists() or not COLOUR.exists():
        sys.exit("colour_start: build the libraries first (make)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build(os.environ.get("CC", "cc"))
    if "mimalloc" in args.configs and not harness.ensure_preloads([harness.Allocator("mimalloc", str(harness.LIBDIR / "libmimalloc.so.2"), package="libmimalloc2.0")]):
        args.configs.remove("mimalloc")
    work = work_dir("colour-start")
    table = config_table(work)
    t0 = time.monotonic()
    if "colour" in args.configs and not calibrate(work):
        say("colour_start: calibration failed: the colour configuration runs without a usable profile")
    rows, k = [], 0
    for v in args.variants:
        for s in args.seconds:
            for rep in range(args.procs):
                for name in harness.rotated(args.configs, rep):
                    r = one(name, table, work, [f"--seconds={s:g}"] + VARIANTS[v], f"{k}")
                    k += 1
                    r.update(variant=v, seconds=s, rep=rep)
                    rows.append(r)
                    if r["error"]:
                        say(f"  !! {v} {s:g} s {name} rep {rep + 1}: {r['error']}")
                say(f"  {v} {s:g} s: repetition {rep + 1}/{args.procs} done ({time.monotonic() - t0:.0f} s)")
    keys = ["variant", "seconds", "config", "rep", "error", "victim_ns", "victim_ns_from2s", "alone_ns_from2s", "ratio", "rounds",
            "wall_s", "rss_mib", "user_s", "sys_s", "state", "sets_from", "asked_ms", "ready_ms", "stocked_ms",
            "ready_cpu_ms", "stocked_cpu_ms", "worker_cpu_ms", "worker_paced_ms", "protected"]
    harness.write_csv(out / "colour_start.csv", keys, [[r.get(k) for k in keys] for r in rows])
    summary, targets = [], []
    say("\nmedian (range) over processes; ratio = victim ns with the polluter / alone, same process and seconds, from the 2nd on")
    say(f"{'variant':8} {'s':>4} {'config':12} {'ratio':>20} {'stocked ms':>20} {'worker CPU ms':>20} {'peak RSS MiB':>20} {'protected':>18} failed")
    for v in args.variants:
        for s in args.seconds:
            for name in args.configs:
                rs = [r for r in rows if r["variant"] == v and r["seconds"] == s and r["config"] == name]
                ok = [r for r in rs if not r["error"]]
                e = {"variant": v, "seconds": s, "config": name, "processes": len(rs), "failed": len(rs) - len(ok),
                     "alone_ns": med(ok, "alone_ns_from2s"), "ratio": med(ok, "ratio"), "stocked_ms": med(ok, "stocked_ms"),
                     "worker_cpu_ms": med(ok, "worker_cpu_ms"), "rss_mib": med(ok, "rss_mib"), "protected": med(ok, "protected"),
                     "never_stocked": sum(1 for r in ok if name.startswith("colour") and r.get("stocked_ms") is None)}
                summary.append(e)
                say(f"{v:8} {s:>4g} {name:12} {fmt(e['ratio']):>20} {fmt(e['stocked_ms'], '.0f'):>20} "
                    f"{fmt(e['worker_cpu_ms'], '.0f'):>20} {fmt(e['rss_mib'], '.1f'):>20} {fmt(e['protected']):>18} {e['failed']}")
        col = [r for r in rows if r["variant"] == v and r["config"] == "colour" and not r["error"]]
        if col:
            fast = sum(1 for r in col if r.get("stocked_ms") is not None and r["stocked_ms"] <= 1000)
            targets.append({"variant": v, "target": "colour: first stock within 1 s of asking, 19 of 20 processes",
                            "value": f"{fast} of {len(col)}", "met": fast * 20 >= len(col) * 19})
            for s in args.seconds:
                m = med([r for r in col if r["seconds"] == s], "ratio")[0]
                targets.append({"variant": v, "target": f"colour {s:g} s: victim within 1.2x of alone from the 2nd second (median)",
                                "value": None if m is None else round(m, 3), "met": m is not None and m <= 1.2})
            worst = max((r.get("worker_cpu_ms") or 0) for r in col)
            over = sum(1 for r in col if (r.get("worker_cpu_ms") or 0) > 500)
            targets.append({"variant": v, "target": "colour: worker CPU at most 0.5 s per process",
                            "value": f"max {worst} ms, {over} of {len(col)} over", "met": over == 0})
    say_targets(targets)
    plot(rows, args, out / "colour_start.png")
    finish("colour_start", out, work, args.configs, table, {"summary": summary, "targets": targets}, t0)


if __name__ == "__main__":
    main()
