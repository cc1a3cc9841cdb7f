#!/usr/bin/env python3
"""chromalloc benchmark runner.

  python3 bench/run.py suite [--reps 5] [--only churn,mixed] [--allocators glibc,jemalloc,...]
  python3 bench/run.py index [--reps 3] [--step 16]
  python3 bench/run.py all

Builds the programs in bench/src into build/bench/ (no allocator linked in), runs each
one under every allocator through LD_PRELOAD, several repetitions with the allocator order
rotated between repetitions, and writes CSV, JSON and PNG results to bench/results/ (see
bench/results/README.md).  Every process is started by build/bench/launch, which measures
its wall time and peak RSS (see bench/harness/launch.c for why not from Python).
Exit status: 0 when every run succeeded (targets missed or not), 1 when a run failed or an
allocator could not be checked, 2 on usage or build errors.
"""

import argparse
import csv
import datetime
import hashlib
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
RESULTS = BENCH_DIR / "results"
BUILD = ROOT / "build" / "bench"
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")

SUITE = ["churn", "mixed", "prodcons", "larson", "cscratch", "large", "threadchurn", "xchurn", "cxxmap"]
MULTI_THREADED = ["prodcons", "larson", "cscratch", "threadchurn", "xchurn"]
PEERS = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]
REFERENCE = "mimalloc"            # suite ratios are to this allocator
SUITE_TIMEOUT = 180               # seconds for one suite process
INDEX_TIMEOUT = 30                # seconds for one mcache process


@dataclass
class Allocator:
    name: str
    preload: str | None           # LD_PRELOAD path; None = glibc's malloc
    env: dict = field(default_factory=dict)
    package: str | None = None    # Debian package that provides `preload`
    index_only: bool = False      # only in the index benchmark


def allocator_table(chromalloc: Path, also=()) -> dict:
    """The one place where allocators are defined (`also`: more chromalloc builds, NAME=LIB[:OPTIONS])."""
    table = [
        Allocator("glibc", None),
        Allocator("jemalloc", str(LIBDIR / "libjemalloc.so.2"), package="libjemalloc2"),
        Allocator("mimalloc", str(LIBDIR / "libmimalloc.so.2"), package="libmimalloc2.0"),
        Allocator("tcmalloc", str(LIBDIR / "libtcmalloc_minimal.so.4"), package="libtcmalloc-minimal4"),
        Allocator("chromalloc", str(chromalloc)),
        Allocator("chromalloc-ciu", str(chromalloc), env={"CHROMALLOC_OPTIONS": "layout=ciu"},
                  index_only=True),
    ]
    for spec in also:
        name, _, rest = spec.partition("=")
        lib, _, opts = rest.partition(":")
        table.append(Allocator(name, str(Path(lib).resolve()), env={"CHROMALLOC_OPTIONS": opts} if opts else {}))
    return {a.name: a for a in table}


# ---------------------------------------------------------------------------------------
# Output helpers

def say(msg=""):
    print(msg, flush=True)


def loud(msg):
    bar = "!" * 78
    print(f"{bar}\n!! {msg}\n{bar}", flush=True)


def median(xs):
    """median of the values that are not None (None when there are none)"""
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def geomean(xs):
    """geometric mean of the values that are set (None and 0 are left out)"""
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def fmt(x, spec=".3f", none="-"):
    return none if x is None else format(x, spec)


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------------------------------
# Setup: peers, chromalloc, build, machine description

def run_quiet(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def apt_install(package):
    """Installs a Debian package; returns True on success."""
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if not shutil.which("apt-get"):
        return False
    for update_first in (False, True):
        if update_first:
            run_quiet(prefix + ["apt-get", "update"], env=env)
        if run_quiet(prefix + ["apt-get", "install", "-y", package], env=env).returncode == 0:
            return True
    return False


def ensure_preloads(allocators):
    """Installs missing peer packages and drops allocators whose library is unavailable."""
    usable = []
    for a in allocators:
        if a.preload and not Path(a.preload).exists():
            if a.package:
                say(f"{a.name}: {a.preload} missing; installing {a.package} with apt-get")
                if not apt_install(a.package) or not Path(a.preload).exists():
                    loud(f"WARNING: could not install {a.package}; skipping {a.name}")
                    continue
            else:
                loud(f"{a.name}: {a.preload} does not exist (build it with `make`, or pass "
                     f"--chromalloc PATH); skipping {a.name}")
                continue
        usable.append(a)
    return usable


def build(cc):
    """Compiles the benchmarks (C with $CC, C++ with $CXX) and the harness into build/bench/."""
    BUILD.mkdir(parents=True, exist_ok=True)
    warn = ["-O2", "-Wall", "-Wextra"]
    jobs = [(src, ["-std=c11", "-pthread", *warn], []) for src in sorted((BENCH_DIR / "src").glob("*.c"))]
    jobs += [(BENCH_DIR / "harness" / "launch.c", warn, []),
             (BENCH_DIR / "harness" / "probe.c", warn, ["-ldl"])]
    jobs += [(src, ["-std=c++17", *warn], []) for src in sorted((BENCH_DIR / "src").glob("*.cpp"))]
    cxx = os.environ.get("CXX", "c++")
    for src, flags, libs in jobs:
        cmd = [cxx if src.suffix == ".cpp" else cc, *flags, "-o", str(BUILD / src.stem), str(src), *libs]
        r = run_quiet(cmd)
        if r.stdout.strip():
            say(r.stdout)
        if r.returncode != 0:
            say(f"build failed: {shlex.join(cmd)}")
            sys.exit(2)
    missing = [b for b in SUITE + ["mcache"] if not (BUILD / b).exists()]
    if missing:
        say(f"build: no program for {', '.join(missing)} in bench/src")
        sys.exit(2)


def child_env(alloc):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(alloc.env)
    return env


# MiB of free pages the cache runtime's benchmarks wash before each process (launch.c -w): a
# process that confined memory leaves frames of few colours on top of the kernel's lists
WASH_MIB = 512


def launch_cmd(preload, report, argv, wash_mib=0):
    """build/bench/launch's command line: `preload` (None: the C library's malloc), free pages
    washed first (MiB, 0: none), the report file, then the program and its arguments"""
    cmd = [str(BUILD / "launch")]
    if preload:
        cmd += ["-p", preload]
    if wash_mib:
        cmd += ["-w", str(wash_mib)]
    return cmd + [report] + argv


def check_preload(alloc):
    """Returns None when malloc in a child really comes from the allocator, else the reason."""
    with tempfile.NamedTemporaryFile(prefix="bench-probe-") as rep:
        r = subprocess.run(launch_cmd(alloc.preload, rep.name, [str(BUILD / "probe")]),
                           env=child_env(alloc), capture_output=True, text=True, timeout=60)
        report = Path(rep.name).read_text().split()
    where = r.stdout.strip()
    if r.returncode != 0 or len(report) != 5 or report[2] != "0":
        return f"probe failed: {r.stderr.strip() or r.stdout.strip()}"
    if alloc.preload is None:
        return None if "libc.so" in Path(where).name else f"malloc comes from {where}, not libc"
    if os.path.realpath(where) != os.path.realpath(alloc.preload):
        return f"malloc comes from {where}, not {alloc.preload} ({r.stderr.strip()})"
    return None


def l1d_geometry():
    """(line size, sets) of cpu0's L1 data cache, as mcache reads it."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for d in sorted(base.glob("index*")):
        try:
            if (d / "level").read_text().strip() == "1" and (d / "type").read_text().strip() == "Data":
                return int((d / "coherency_line_size").read_text()), int((d / "number_of_sets").read_text())
        except (OSError, ValueError):
            continue
    return 64, 64


def fingerprint(path):
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None


def changed_libraries(meta):
    """chromalloc libraries rebuilt since the run started (their results mix two builds)."""
    changed = [path for path, info in meta["chromalloc_library"].items()
               if fingerprint(path) != info["sha256"]]
    if changed:
        loud(f"WARNING: {', '.join(changed)} changed during the run: its results mix builds")
    return changed


def machine_info(allocators, table, cc):
    cpu = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "cpu family", "model", "stepping"):
                cpu.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    packages = [a.package for a in table.values() if a.package]
    versions = {}
    if packages and shutil.which("dpkg-query"):
        r = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n", *packages],
                           capture_output=True, text=True)
        versions = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    libs = {}
    for a in allocators:
        if a.name.startswith("chromalloc") and a.preload and Path(a.preload).exists():
            libs[a.preload] = {
                "sha256": fingerprint(a.preload),
                "mtime": datetime.datetime.fromtimestamp(Path(a.preload).stat().st_mtime,
                                                         datetime.timezone.utc).isoformat(),
            }
    line, sets = l1d_geometry()
    ccv = run_quiet([cc, "--version"]).stdout.splitlines()
    return {
        "cpu_model": cpu.get("model name", "unknown"),
        "cpu_family_model_stepping": [cpu.get(k) for k in ("cpu family", "model", "stepping")],
        "nproc": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "l1d": {"line_bytes": line, "sets": sets},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable] + sys.argv),
        "compiler": ccv[0] if ccv else cc,
        "python": platform.python_version(),
        "peer_packages": versions,
        "chromalloc_library": libs,
        "allocators": {a.name: {"preload": a.preload, "env": a.env} for a in allocators},
    }


# ---------------------------------------------------------------------------------------
# Running one process

@dataclass
class Run:
    bench: str
    alloc: str
    rep: int
    size: int | None = None       # mcache only
    seconds: float | None = None
    maxrss_kib: int | None = None
    user_seconds: float | None = None
    sys_seconds: float | None = None
    checksum: str | None = None
    sets: int | None = None       # mcache only
    ns_per_step: float | None = None
    error: str = ""

    @property
    def ok(self):
        return not self.error


def wait_launched(p, timeout, report_path):
    """Waits for a process started through build/bench/launch (killing its group after `timeout`
    seconds) and reads the launcher's report.  Returns (stdout, stderr, report, error): report is
    [wall seconds, peak RSS KiB, exit status, user seconds, sys seconds] or None when the launcher
    failed; error is None or why the run failed (timeout, launcher, signal, exit status)."""
    error = None
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        error = f"timed out after {timeout} s"
    path = Path(report_path)
    fields = path.read_text().split() if path.exists() else []
    if p.returncode != 0 or len(fields) != 5:
        return out, err, None, error or f"launcher failed ({p.returncode})"
    report = [float(fields[0]), int(fields[1]), int(fields[2]), float(fields[3]), float(fields[4])]
    status = report[2]
    if status < 0:
        error = error or f"killed by signal {-status} ({signal.strsignal(-status)})"
    elif status != 0:
        error = error or f"exit status {status}"
    return out, err, report, error


def execute(alloc, bench, rep, argv, timeout, size=None):
    """Runs one benchmark process and checks its output; failures are reported loudly."""
    run = Run(bench, alloc.name, rep, size)
    with tempfile.NamedTemporaryFile(prefix="bench-report-") as rep_file:
        cmd = launch_cmd(alloc.preload, rep_file.name, [str(BUILD / bench)] + argv)
        p = subprocess.Popen(cmd, env=child_env(alloc), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        out, err, report, run.error = wait_launched(p, timeout, rep_file.name)
    if report is not None:
        run.seconds, run.maxrss_kib = report[0], report[1]
        run.user_seconds, run.sys_seconds = report[3], report[4]
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "RESULT" and f[1] == bench:
            run.checksum = f[2]
        elif len(f) == 4 and f[0] == "MCACHE" and size is not None and f[1] == str(size):
            run.sets, run.ns_per_step = int(f[2]), float(f[3])
    if not run.error:
        if run.checksum is None:
            run.error = "no RESULT line"
        elif size is not None and run.ns_per_step is None:
            run.error = "no MCACHE line"
        elif "cannot be preloaded" in err:
            run.error = "LD_PRELOAD failed"
    if not run.ok:
        what = f"{bench}{'' if size is None else f' size {size}'} under {alloc.name}, rep {rep}"
        tail = "\n".join(err.strip().splitlines()[-8:])
        loud(f"FAILED: {what}: {run.error}\n   command: {shlex.join(cmd)}"
             + (f"\n   stderr: {tail}" if tail else ""))
        save_log(run, cmd, out, err)
    return run


def save_log(run, cmd, out, err):
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = f"{run.bench}{'' if run.size is None else '-' + str(run.size)}-{run.alloc}-rep{run.rep}.log"
    (logs / name).write_text(f"command: {shlex.join(cmd)}\nerror: {run.error}\n"
                             f"--- stdout\n{out}--- stderr\n{err}")


def check_checksums(runs, key):
    """Every allocator must compute the same result; glibc's is the reference when present,
    otherwise the most common one.  Runs that differ are marked failed."""
    groups = {}
    for r in runs:
        if r.ok:
            groups.setdefault(key(r), []).append(r)
    for k, group in groups.items():
        ref_runs = [r for r in group if r.alloc == "glibc"] or group
        sums = [r.checksum for r in ref_runs]
        ref = max(set(sums), key=sums.count)
        for r in group:
            if r.checksum != ref:
                r.error = f"checksum {r.checksum} differs from the reference {ref}"
                loud(f"FAILED: {r.bench} under {r.alloc}, rep {r.rep}: {r.error}")


def rotated(items, k):
    k %= len(items)
    return items[k:] + items[:k]


def record_unusable(runs, broken, benches, reps, sizes=(None,)):
    """Planned runs of allocators that failed the preload check, recorded as failed."""
    for name, reason in broken.items():
        for rep in range(1, reps + 1):
            for b in benches:
                for s in sizes:
                    runs.append(Run(b, name, rep, s, error=f"not run: {reason}"))


# ---------------------------------------------------------------------------------------
# Suite

def run_suite(allocators, broken, benches, reps, meta):
    if not allocators:
        loud("suite: no usable allocator")
        return False
    say(f"\n=== suite: {len(benches)} benchmarks x {len(allocators)} allocators x {reps} reps")
    runs = []
    t0 = time.monotonic()
    for rep in range(1, reps + 1):
        for b in benches:
            for a in rotated(allocators, rep - 1):
                r = execute(a, b, rep, [], SUITE_TIMEOUT)
                runs.append(r)
                say(f"rep {rep}/{reps}  {b:<12} {a.name:<15} {fmt(r.seconds):>8} s "
                    f"{fmt(r.maxrss_kib, 'd'):>8} KiB  {'ok' if r.ok else 'FAILED'}")
    check_checksums(runs, key=lambda r: r.bench)
    record_unusable(runs, broken, benches, reps)
    elapsed = time.monotonic() - t0

    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS / "suite.csv",
              ["benchmark", "allocator", "rep", "seconds", "maxrss_kib", "ok", "user_seconds",
               "sys_seconds", "checksum", "error"],
              [[r.bench, r.alloc, r.rep, fmt(r.seconds, ".6f", ""), fmt(r.maxrss_kib, "d", ""),
                int(r.ok), fmt(r.user_seconds, ".6f", ""), fmt(r.sys_seconds, ".6f", ""),
                r.checksum or "", r.error] for r in runs])

    names = [a.name for a in allocators] + list(broken)
    stats = {b: {} for b in benches}
    for b in benches:
        for n in names:
            mine = [r for r in runs if r.bench == b and r.alloc == n]
            good = [r for r in mine if r.ok]
            secs = [r.seconds for r in good]
            stats[b][n] = {"runs": len(mine), "ok_runs": len(good),
                           "median_seconds": median(secs),
                           "min_seconds": min(secs, default=None),
                           "max_seconds": max(secs, default=None),
                           "median_maxrss_kib": median([r.maxrss_kib for r in good])}
    have_ref = REFERENCE in names
    if not have_ref:
        loud(f"WARNING: {REFERENCE} was not run: no ratios, no targets")
    geo = {}
    for n in names:
        for b in benches:
            s, ref = stats[b][n], stats[b].get(REFERENCE, {})
            s["time_ratio"] = ratio(s["median_seconds"], ref.get("median_seconds"))
            s["rss_ratio"] = ratio(s["median_maxrss_kib"], ref.get("median_maxrss_kib"))
        t = [stats[b][n]["time_ratio"] for b in benches if stats[b][n]["time_ratio"]]
        m = [stats[b][n]["rss_ratio"] for b in benches if stats[b][n]["rss_ratio"]]
        geo[n] = {"time_ratio": geomean(t), "rss_ratio": geomean(m), "benchmarks": len(t)}

    targets = suite_targets(stats, geo, benches) if have_ref else []
    rows = [[b, n, s["runs"], s["ok_runs"], fmt(s["median_seconds"], ".6f", ""),
             fmt(s["median_maxrss_kib"], ".0f", ""), fmt(s["time_ratio"], ".4f", ""),
             fmt(s["rss_ratio"], ".4f", ""), fmt(s["min_seconds"], ".6f", ""),
             fmt(s["max_seconds"], ".6f", "")]
            for b in benches for n in names for s in [stats[b][n]]]
    rows += [["geomean", n, "", "", "", "", fmt(geo[n]["time_ratio"], ".4f", ""),
              fmt(geo[n]["rss_ratio"], ".4f", ""), "", ""] for n in names]
    write_csv(RESULTS / "suite_summary.csv",
              ["benchmark", "allocator", "runs", "ok_runs", "median_seconds", "median_maxrss_kib",
               f"time_ratio_{REFERENCE}", f"rss_ratio_{REFERENCE}", "min_seconds", "max_seconds"],
              rows)
    write_json(RESULTS / "suite_summary.json", {
        "machine": meta, "reps": reps, "elapsed_seconds": round(elapsed, 1),
        "reference": REFERENCE, "benchmarks": stats, "geomean": geo,
        "library_changed_during_run": changed_libraries(meta),
        "targets": targets_json(targets), "failed_runs": sum(not r.ok for r in runs)})

    print_suite_tables(stats, geo, benches, names)
    if have_ref:
        plot("suite", lambda plt: plot_suite(plt, stats, geo, benches, names))
    else:
        say("suite.png skipped: no reference allocator")
    print_targets("suite", targets)
    say(f"suite: {len(runs)} runs in {elapsed:.0f} s, {sum(not r.ok for r in runs)} failed")
    return all(r.ok for r in runs)


def ratio(x, ref):
    return x / ref if x is not None and ref else None


def suite_targets(stats, geo, benches):
    """The project's suite targets for chromalloc: (name, status, detail) triples."""
    if "chromalloc" not in geo:
        return [("suite targets", "SKIP", "chromalloc was not run")]
    c = {b: stats[b]["chromalloc"] for b in benches}
    missing = [b for b in benches if c[b]["time_ratio"] is None]
    out = []
    g = geo["chromalloc"]
    out.append(check("geomean time ratio to mimalloc <= 1.10", g["time_ratio"], 1.10, missing))
    worst = max(benches, key=lambda b: c[b]["time_ratio"] or math.inf)
    out.append(check("no benchmark slower than 1.5x mimalloc", c[worst]["time_ratio"], 1.5, missing,
                     f" (worst: {worst})"))
    out.append(check("geomean peak-RSS ratio to mimalloc <= 1.15", g["rss_ratio"], 1.15, missing))
    mt = [b for b in MULTI_THREADED if b in benches]
    if mt and "glibc" in stats[mt[0]]:
        slower = [f"{b} {fmt(c[b]['median_seconds'])} s vs {fmt(stats[b]['glibc']['median_seconds'])} s"
                  for b in mt if c[b]["median_seconds"] is None
                  or stats[b]["glibc"]["median_seconds"] is None
                  or c[b]["median_seconds"] >= stats[b]["glibc"]["median_seconds"]]
        out.append(("faster than glibc on " + ", ".join(mt), "FAIL" if slower else "PASS",
                    "not faster: " + "; ".join(slower) if slower else "all faster"))
    else:
        out.append(("faster than glibc on the multi-threaded benchmarks", "SKIP",
                    "glibc or the multi-threaded benchmarks were not run"))
    return out


def check(name, value, limit, missing, extra=""):
    if missing:
        return (name, "FAIL", "no result for " + ", ".join(missing))
    return (name, "PASS" if value <= limit else "FAIL", f"{value:.3f}{extra}")


def print_suite_tables(stats, geo, benches, names):
    for title, key, scale, spec, rkey in (
            ("median wall time, s", "median_seconds", 1, ".3f", "time_ratio"),
            ("median peak RSS, MiB", "median_maxrss_kib", 1 / 1024, ".1f", "rss_ratio")):
        say(f"\nSuite: {title} (ratio to {REFERENCE})")
        say(f"{'benchmark':<12}" + "".join(f"{n:>18}" for n in names))
        for b in benches:
            cells = []
            for n in names:
                s = stats[b][n]
                v = None if s[key] is None else s[key] * scale
                cells.append(f"{fmt(v, spec, 'FAILED')} ({fmt(s[rkey], '.2f')})")
            say(f"{b:<12}" + "".join(f"{c:>18}" for c in cells))
        say(f"{'geomean':<12}" + "".join(f"{'(' + fmt(geo[n][rkey], '.2f') + ')':>18}" for n in names))


def targets_json(targets):
    return [{"target": name, "status": status, "detail": detail} for name, status, detail in targets]


def print_targets(mode, targets):
    say(f"\nTargets ({mode}; reported, not enforced):")
    for name, status, detail in targets:
        say(f"  {status:<4}  {name}: {detail}")


# ---------------------------------------------------------------------------------------
# Index benchmark

def run_index(allocators, broken, reps, step, meta):
    sizes = list(range(16, 4097, step))
    line, nsets = meta["l1d"]["line_bytes"], meta["l1d"]["sets"]
    if not allocators:
        loud("index: no usable allocator")
        return False
    say(f"\n=== index: {len(sizes)} sizes x {len(allocators)} allocators x {reps} reps "
        f"(L1d: {nsets} sets of {line}-byte lines)")
    runs = []
    t0 = time.monotonic()
    for rep in range(1, reps + 1):
        for i, size in enumerate(sizes):
            for a in rotated(allocators, rep - 1):
                runs.append(execute(a, "mcache", rep, [str(size)], INDEX_TIMEOUT, size))
            if (i + 1) % 32 == 0 or i + 1 == len(sizes):
                say(f"rep {rep}/{reps}: sizes up to {size} done, {time.monotonic() - t0:.0f} s")
    check_checksums(runs, key=lambda r: r.size)
    record_unusable(runs, broken, ["mcache"], reps, sizes)
    elapsed = time.monotonic() - t0

    RESULTS.mkdir(parents=True, exist_ok=True)
    write_csv(RESULTS / "index.csv",
              ["allocator", "size", "rep", "sets", "ns_per_step", "ok", "error"],
              [[r.alloc, r.size, r.rep, fmt(r.sets, "d", ""), fmt(r.ns_per_step, ".3f", ""),
                int(r.ok), r.error] for r in runs])

    names = [a.name for a in allocators] + list(broken)
    per = {n: {} for n in names}
    for r in runs:
        per[r.alloc].setdefault(r.size, []).append(r)
    table = {n: {} for n in names}
    for n in names:
        for s in sizes:
            good = [r for r in per[n].get(s, []) if r.ok]
            ns = [r.ns_per_step for r in good]
            table[n][s] = {"ok_runs": len(good),
                           "sets_min": min((r.sets for r in good), default=None),
                           "ns_per_step": median(ns),
                           "ns_per_step_min": min(ns, default=None),
                           "ns_per_step_max": max(ns, default=None)}
    peers = [n for n in PEERS if n in names]
    for s in sizes:
        best = min(((table[n][s]["ns_per_step"], n) for n in peers
                    if table[n][s]["ns_per_step"] is not None), default=(None, None))
        # the ratio: each repetition's against the fastest peer of the same repetition (run next
        # to it), then their median: the host's drift from one repetition to the next (30% here)
        # cancels, where a ratio of medians could pair one allocator's fast repetition with a
        # peer's slow one
        fastest = {}
        for n in peers:
            for r in per[n].get(s, []):
                if r.ok and (r.rep not in fastest or r.ns_per_step < fastest[r.rep]):
                    fastest[r.rep] = r.ns_per_step
        for n in names:
            table[n][s]["best_peer"] = best[1]
            table[n][s]["best_peer_ns"] = best[0]
            table[n][s]["ratio_to_best_peer"] = median([r.ns_per_step / fastest[r.rep] for r in per[n].get(s, [])
                                                        if r.ok and fastest.get(r.rep)])
    summary = {}
    for n in names:
        t = table[n]
        done = [s for s in sizes if t[s]["ns_per_step"] is not None]
        ratios = [t[s]["ratio_to_best_peer"] for s in done if t[s]["ratio_to_best_peer"]]
        worst = max(done, key=lambda s: t[s]["ratio_to_best_peer"] or 0, default=None)
        summary[n] = {
            "sizes_measured": len(done),
            "sizes_failed": [s for s in sizes if t[s]["ns_per_step"] is None],
            "min_sets": min((t[s]["sets_min"] for s in done), default=None),
            "sizes_below_all_sets": [s for s in done if t[s]["sets_min"] < nsets],
            "max_ratio_to_best_peer": t[worst]["ratio_to_best_peer"] if worst else None,
            "size_at_max_ratio": worst,
            "geomean_ratio_to_best_peer": geomean(ratios),
            "median_ns_per_step": median([t[s]["ns_per_step"] for s in done]),
        }

    write_csv(RESULTS / "index_summary.csv",
              ["allocator", "size", "ok_runs", "sets_min", "ns_per_step_median", "best_peer",
               "best_peer_ns", "ratio_to_best_peer", "ns_per_step_min", "ns_per_step_max"],
              [[n, s, t["ok_runs"], fmt(t["sets_min"], "d", ""), fmt(t["ns_per_step"], ".3f", ""),
                t["best_peer"] or "", fmt(t["best_peer_ns"], ".3f", ""),
                fmt(t["ratio_to_best_peer"], ".4f", ""), fmt(t["ns_per_step_min"], ".3f", ""),
                fmt(t["ns_per_step_max"], ".3f", "")]
               for n in names for s, t in table[n].items()])
    targets = index_targets(summary, nsets)
    write_json(RESULTS / "index_summary.json", {
        "machine": meta, "reps": reps, "sizes": sizes, "elapsed_seconds": round(elapsed, 1),
        "peers": peers, "summary": summary,
        "library_changed_during_run": changed_libraries(meta),
        "per_size": {n: {str(s): v for s, v in table[n].items()} for n in names},
        "targets": targets_json(targets), "failed_runs": sum(not r.ok for r in runs)})

    say(f"\nIndex: {nsets} L1d sets; ns per step is the median over reps; a ratio is the median over reps "
        f"of the ratio to the fastest of {'/'.join(peers)} at that size in the same rep")
    say(f"{'allocator':<16}{'min sets':>9}{'sizes < all sets':>18}{'median ns':>11}"
        f"{'geomean ratio':>15}{'max ratio (size)':>20}")
    for n in names:
        m = summary[n]
        say(f"{n:<16}{fmt(m['min_sets'], 'd'):>9}{len(m['sizes_below_all_sets']):>18}"
            f"{fmt(m['median_ns_per_step']):>11}{fmt(m['geomean_ratio_to_best_peer']):>15}"
            f"{fmt(m['max_ratio_to_best_peer']) + ' (' + str(m['size_at_max_ratio']) + ')':>20}")
    plot("index", lambda plt: plot_index(plt, table, sizes, names, nsets))
    print_targets("index", targets)
    say(f"index: {len(runs)} runs in {elapsed:.0f} s, {sum(not r.ok for r in runs)} failed")
    return all(r.ok for r in runs)


def index_targets(summary, nsets):
    if "chromalloc" not in summary:
        return [("index targets", "SKIP", "chromalloc was not run")]
    m = summary["chromalloc"]
    if m["sizes_failed"]:
        failed = f"no result for {len(m['sizes_failed'])} sizes"
        return [("covers all L1 sets at every size", "FAIL", failed),
                ("chase time <= 1.05x the best peer at every size", "FAIL", failed)]
    below = m["sizes_below_all_sets"]
    out = [("covers all L1 sets at every size", "FAIL" if below else "PASS",
            f"min {m['min_sets']} of {nsets} sets"
            + (f"; below at sizes {', '.join(map(str, below[:12]))}{' ...' if len(below) > 12 else ''}"
               if below else ""))]
    worst = m["max_ratio_to_best_peer"]
    if worst is None:
        out.append(("chase time <= 1.05x the best peer at every size", "SKIP", "no peer was run"))
    else:
        out.append(("chase time <= 1.05x the best peer at every size",
                    "PASS" if worst <= 1.05 else "FAIL",
                    f"max {worst:.3f} at size {m['size_at_max_ratio']}"))
    return out


# ---------------------------------------------------------------------------------------
# Plots

COLORS = {"glibc": "#7f7f7f", "jemalloc": "#1f77b4", "mimalloc": "#2ca02c",
          "tcmalloc": "#ff7f0e", "chromalloc": "#d62728", "chromalloc-ciu": "#9467bd"}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#17becf", "#bcbd22", "#000000"]


def color_of(name):
    """A fixed colour per allocator; builds given with --also get the extra ones in turn."""
    if name not in COLORS:
        COLORS[name] = EXTRA_COLORS[(len(COLORS) - 6) % len(EXTRA_COLORS)]
    return COLORS[name]


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        say("matplotlib missing; trying pip install --quiet matplotlib")
        r = run_quiet([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
        if r.returncode != 0:
            say(r.stdout.strip()[-2000:])
            return None
        try:
            import matplotlib
        except ImportError:
            return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot(mode, draw):
    path = RESULTS / f"{mode}.png"
    plt = load_matplotlib()
    if plt is None:
        path.unlink(missing_ok=True)
        loud(f"plot skipped: matplotlib is not available ({mode}.png not written; CSV/JSON are)")
        return
    fig = draw(plt)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say(f"wrote {os.path.relpath(path, ROOT)}")


RATIO_TICKS = [1 / 16, 1 / 8, 1 / 4, 1 / 2, 2 / 3, 0.8, 1, 1.25, 1.5, 2, 3, 4, 8, 16, 32]
WIDE_RATIO_TICKS = [1 / 16, 1 / 8, 1 / 4, 1 / 2, 1, 2, 4, 8, 16, 32]   # when the range is wide


def plot_suite(plt, stats, geo, benches, names):
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    groups = benches + ["geomean"]
    fig, axes = plt.subplots(2, 1, figsize=(12, 8.5), sharex=True)
    width = 0.8 / len(names)
    for ax, key, title in ((axes[0], "time_ratio", "wall time"),
                           (axes[1], "rss_ratio", "peak RSS")):
        every = []
        for i, n in enumerate(names):
            vals = [stats[b][n][key] for b in benches] + [geo[n][key]]
            xs = [g + (i - (len(names) - 1) / 2) * width for g in range(len(groups))]
            pts = [(x, v) for x, v in zip(xs, vals) if v]
            every += [v for _, v in pts]
            # bars grow from 1.0 (= mimalloc) up or down, on a log scale
            ax.bar([x for x, _ in pts], [v - 1 for _, v in pts], width, bottom=1,
                   label=n + (" (= 1)" if n == REFERENCE else ""), color=color_of(n))
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axvline(len(benches) - 0.5, color="black", linewidth=0.5, linestyle=":")
        ax.set_yscale("log")
        lo, hi = min(every + [1]) / 1.15, max(every + [1]) * 1.15
        ax.set_ylim(lo, hi)
        ticks = WIDE_RATIO_TICKS if hi / lo > 16 else RATIO_TICKS
        ax.yaxis.set_major_locator(FixedLocator([t for t in ticks if lo <= t <= hi]))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.3g}"))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_ylabel(f"{title} / {REFERENCE} (log scale)")
        ax.set_title(f"{title}: median ratio to {REFERENCE} (lower is better)")
        ax.grid(axis="y", linestyle=":", linewidth=0.5)
    axes[1].set_xticks(range(len(groups)))
    ref = [stats[b].get(REFERENCE, {}) for b in benches]
    axes[1].set_xticklabels([f"{b}\n{fmt(r.get('median_seconds'), '.2f')} s, "
                             f"{fmt(r.get('median_maxrss_kib') and r['median_maxrss_kib'] / 1024, '.0f')} MiB"
                             for b, r in zip(benches, ref)] + ["geomean"], fontsize=9)
    axes[1].set_xlabel(f"benchmark ({REFERENCE}'s median time and peak RSS)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=len(names), loc="upper center", fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


def plot_index(plt, table, sizes, names, nsets):
    fig, axes = plt.subplots(2, 1, figsize=(12, 8.5), sharex=True)
    for i, n in enumerate(names):
        # earlier lines are wider so that lines drawn over them (equal values) stay visible
        style = {"color": color_of(n), "label": n, "linewidth": 1.0 + 0.6 * (len(names) - 1 - i),
                 "linestyle": "--" if n == "chromalloc-ciu" else "-"}
        axes[0].plot(sizes, [table[n][s]["sets_min"] for s in sizes], drawstyle="steps-mid", **style)
        axes[1].plot(sizes, [table[n][s]["ns_per_step"] for s in sizes], **style)
    axes[0].set_yscale("log", base=2)
    ticks = [2 ** k for k in range(int(math.log2(nsets)) + 1)]
    axes[0].set_yticks(ticks)
    axes[0].set_yticklabels([str(t) for t in ticks])
    axes[0].set_ylim(0.8, nsets * 1.25)
    axes[0].set_ylabel("distinct L1d sets (log)")
    axes[0].set_title(f"L1d sets hit by the starts of 256 blocks (of {nsets}; higher is better)")
    axes[1].set_ylabel("ns per step")
    axes[1].set_title("ring chase through the 256 blocks: median ns per dependent load (lower is better)")
    axes[1].set_xlabel("block size, bytes")
    axes[1].set_xticks(range(0, 4097, 256))
    axes[1].set_xlim(0, 4112)
    for ax in axes:
        ax.grid(linestyle=":", linewidth=0.5)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=len(names), loc="upper center", fontsize=10, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description="chromalloc benchmark runner",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Outputs go to bench/results/; see bench/README.md.")
    ap.add_argument("mode", choices=["suite", "index", "all"])
    ap.add_argument("--reps", type=int, help="repetitions (default: 7 for suite, 3 for index)")
    ap.add_argument("--only", help="suite: comma-separated benchmarks (default: all of "
                    + ",".join(SUITE) + ")")
    ap.add_argument("--step", type=int, default=16, help="index: size step, 16..4096 (default 16)")
    ap.add_argument("--allocators", help="comma-separated allocators (default: all)")
    ap.add_argument("--chromalloc", help="path of libchromalloc.so (default: build/libchromalloc.so)")
    ap.add_argument("--out", help="results directory (default: bench/results)")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=LIB[:OPTIONS]",
                    help="another chromalloc build in the same interleaved runs (e.g. an older one)")
    args = ap.parse_args()
    global RESULTS
    if args.out:
        RESULTS = Path(args.out).resolve()

    chromalloc = Path(args.chromalloc).resolve() if args.chromalloc else ROOT / "build" / "libchromalloc.so"
    table = allocator_table(chromalloc, args.also)
    wanted = args.allocators.split(",") if args.allocators else list(table)
    unknown = [n for n in wanted if n not in table]
    if args.mode == "suite":
        wanted = [n for n in wanted if n not in table or not table[n].index_only]
    benches = args.only.split(",") if args.only else SUITE
    bad = [b for b in benches if b not in SUITE]
    if unknown or bad or (args.reps is not None and args.reps < 1) or not 1 <= args.step <= 4080:
        ap.error(f"unknown allocator(s) {unknown} (known: {', '.join(table)})" if unknown else
                 f"unknown benchmark(s) {bad} (known: {', '.join(SUITE)})" if bad else
                 "--reps must be >= 1 and --step in 1..4080")

    cc = os.environ.get("CC", "cc")
    build(cc)
    allocators = ensure_preloads([table[n] for n in wanted])
    broken = {}
    for a in allocators:
        reason = check_preload(a)
        if reason:
            loud(f"ERROR: {a.name} cannot be used: {reason}; its runs are recorded as failed")
            broken[a.name] = reason
    usable = [a for a in allocators if a.name not in broken]
    meta = machine_info(allocators, table, cc)
    say(f"machine: {meta['cpu_model']}, {meta['nproc']} CPUs, kernel {meta['kernel']}")
    say(f"allocators: {', '.join(a.name for a in usable)}")

    shutil.rmtree(RESULTS / "logs", ignore_errors=True)
    ok = not broken
    if args.mode in ("suite", "all"):
        suite_allocs = [a for a in usable if not a.index_only]
        suite_broken = {n: r for n, r in broken.items() if not table[n].index_only}
        ok &= run_suite(suite_allocs, suite_broken, benches, args.reps or 7, meta)
    if args.mode in ("index", "all"):
        ok &= run_index(usable, broken, args.reps or 3, args.step, meta)
    if not ok:
        loud("some runs FAILED (see above, the ok column of the CSV files and bench/results/logs/)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
