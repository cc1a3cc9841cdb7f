#!/usr/bin/env python3
"""NightWatch benchmark: does chromalloc's pollution control protect victims, and at what cost?

  python3 bench/nightwatch.py [--reps 5] [--quick] [--chromalloc PATH] [--out DIR]
                              [--only frames,requests,messages,packets,neutral,victims]
                              [--skip corun,foundation,instructions,mimalloc] [--corun-seconds 2] [--settle 20]

Programs: pv (bench/nightwatch/pv.c, built here with cc -std=c11 -O2) and the foundation
suite of bench/run.py (bench/src/*.c, with run.py's own build function), all built into
build/bench/nightwatch/ (run.py may rebuild build/bench/ meanwhile).

  workloads   pv frames / requests / messages / packets (polluter workloads: a hot victim plus
              data streamed once from their own call sites, in big buffers or, in messages and
              packets, in many 2 KiB or 32 KiB chunks), neutral and victims (no polluter), and the victim alone
              (frames-alone, requests-alone, messages-alone, packets-alone: pv --no-polluter, the best case),
              each under glibc, mimalloc, chromalloc-off (CHROMALLOC_OPTIONS=nightwatch=0),
              chromalloc-on (nightwatch=1, the default) and chromalloc-monitor
              (nightwatch=1,nightwatch_monitor=1: every chunk monitored, for the prediction
              success);
              interleaved: every repetition runs each workload under all configurations back
              to back, in an order rotated by one place per repetition.  neutral and victims
              then run 3 more chromalloc-on / chromalloc-off pairs per repetition (which goes
              first alternates): their 2% target is below this host's run-to-run noise, and
              their slowdown is the median of the per-pair ratios over all pairs (with its 90%
              bootstrap interval: what this many pairs can tell on the host's noise).
  corun       pv polluter on CPU 0 and pv victim on CPU 1 at the same time (taskset), under
              glibc, chromalloc-off and chromalloc-on, and the victim alone; --reps times.  The
              victim starts once the polluter has streamed 20 buffers and, under the policy,
              settled (--settle) until its restrictive pool holds a buffer (pv --ready-file);
              the polluter's buffer is frames' (3 MiB here): its former 16 MiB of 1/8 pages
              were never stocked within 20 s here (the colour layer's limit, docs/colours.md).
  foundation  run.py's churn, mixed, large and larson under chromalloc with nightwatch=0,
              nightwatch=1 and nightwatch=0 again (the control), order rotated per rep: the
              policy's cost on allocation-heavy programs, as the median of per-rep on / off
              ratios, next to the control's off / off (what noise makes of identical runs);
              10 x --reps repetitions (short programs and a 1% target: with 3 x, the median
              on / off read 1.020 in two runs in a row where 150 interleaved pairs by hand read
              1.002 for identical runs).
  instructions  the same four under callgrind (valgrind; installed with apt-get when missing),
              nightwatch=0 against nightwatch=1,nightwatch_budget=0: the policy's own work
              (naming contexts, sampling, predicting) in instructions, which do not vary from
              run to run as wall time does here; no traps (valgrind cannot resume a trapped
              instruction correctly, and these short runs trap nothing under the default budget
              anyway: the monitoring time of the wall-time runs is read from their statistics).
              Once each, larson (threads: its count moves by ~0.5%) 3 times (--reps if fewer);
              2 at a time.

--profile: measure the machine's colours first (chromalloc calibrate, saved in
build/bench/nightwatch/machine-profile.json) and give every chromalloc run that profile, as a
deployment that ran `chromalloc calibrate` once would; without it (the default, what a fresh
machine does) each process measures what it needs at start-up, which here takes 1.4-21.5 s (idle program) and in
some runs outlasts the workload.

Every chromalloc run writes its statistics (CHROMALLOC_STATS) and the "nightwatch" object in
them gives the prediction counts and the per-context decisions; a library without it is
reported as n/a.  The library is copied once at start and the copy is measured, so a rebuild
during the run cannot mix two builds.  Outputs (bench/results/): nightwatch.csv (every run),
nightwatch_summary.json (medians, ratios, prediction success, contexts, targets, machine),
nightwatch.png.  Exit status: 0 when every run succeeded (targets met or not), 1 when a run
failed, 2 on usage or build errors.
"""
import argparse
import bisect
import csv
import hashlib
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import run as bench_run      # bench/run.py (this directory is on sys.path when run as a script)
from run import say, loud, median, geomean

sys.dont_write_bytecode = True
ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench" / "nightwatch"   # private: run.py may rebuild build/bench meanwhile
LIB = ROOT / "build" / "libchromalloc-colour.so"   # the cache runtime: NightWatch off and on
LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
RESULTS = ROOT / "bench" / "results"

WORKLOADS = ["frames", "requests", "messages", "packets", "neutral", "victims"]
POLLUTED = ["frames", "requests", "messages", "packets"]   # the polluter workloads
CLEAN = ["neutral", "victims"]               # no polluter: must not slow down
CLEAN_PAIRS = 3                               # extra on/off pairs per rep for these (below)
ALONE = {"frames-alone": "frames", "requests-alone": "requests", "messages-alone": "messages",
         "packets-alone": "packets"}
FOUNDATION = ["churn", "mixed", "large", "larson"]
INSTR_CONFIGS = {"chromalloc-off": "nightwatch=0", "chromalloc-on": "nightwatch=1,nightwatch_budget=0"}
CONFIGS = ["glibc", "mimalloc", "chromalloc-off", "chromalloc-on", "chromalloc-monitor"]
CORUN_CONFIGS = ["glibc", "chromalloc-off", "chromalloc-on"]
# expected roles of pv's allocation sites (function names), for the context check
POLLUTER_SITES = ["frame_buffer", "stream_frame", "read_body", "render_response", "msg_alloc",
                  "pkt_alloc", "stream_chunks"]
VICTIM_SITES = ["victim_alloc", "session_scratch", "index_buckets", "index_node", "work_buffer",
                "scratch_chunk", "table_a", "table_b", "table_c", "table_d"]

TARGETS = {"speedup_off": 1.3, "geomean_vs_glibc": 1.18, "slowdown": 1.02, "overhead": 1.01}
# foundation repetitions per --reps: short programs, a 1% target, and a host whose loudness moves
# within minutes (with 3: 1.020 on / off in two runs in a row, where 150 interleaved pairs by
# hand read 1.002 for identical runs)
FOUNDATION_REPS = 10
PV_TIMEOUT = 180
OWN_ENV = ("CHROMALLOC_OPTIONS", "CHROMALLOC_STATS")   # set per configuration, never inherited


def ratio(a, b):
    return a / b if a is not None and b else None


def pair_ratios(runs, w, a, b, k="total_s"):
    """a's value / b's for each rep run under both configurations a and b"""
    by = {}
    for r in runs:
        if r.workload == w and r.ok and r.config in (a, b) and getattr(r, k) is not None:
            by.setdefault(r.rep, {})[r.config] = getattr(r, k)
    return [v[a] / v[b] for v in by.values() if a in v and b in v and v[b]]


def paired(runs, w, a, b, k="total_s"):
    """median over the reps run under both configurations a and b of a's value / b's"""
    return median(pair_ratios(runs, w, a, b, k))


def median_interval(xs, level=0.9, resamples=2000):
    """bootstrap interval of the median of xs (fixed seed: the same runs give the same interval):
    how far the median of this many pairs moves on this host's noise alone"""
    if len(xs) < 5:
        return None
    rng = random.Random(1)
    meds = sorted(median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    tail = (1 - level) / 2
    return meds[int(tail * resamples)], meds[int((1 - tail) * resamples) - 1]


def fmt(x, spec=".3f", none="n/a"):
    return none if x is None else format(x, spec)


def load_runpy():
    """bench/run.py as a module: its build, launcher, preload check and suite runner."""
    return bench_run


# ---------------------------------------------------------------------------------------
# Configurations

@dataclass
class Config:
    name: str
    preload: str | None
    env: dict = field(default_factory=dict)
    package: str | None = None
    stats: bool = False                       # chromalloc: write CHROMALLOC_STATS


def config_table(lib):
    return {c.name: c for c in [
        Config("glibc", None),
        Config("mimalloc", str(LIBDIR / "libmimalloc.so.2"), package="libmimalloc2.0"),
        Config("chromalloc-off", str(lib), {"CHROMALLOC_OPTIONS": "nightwatch=0"}, stats=True),
        Config("chromalloc-on", str(lib), {"CHROMALLOC_OPTIONS": "nightwatch=1"}, stats=True),
        Config("chromalloc-monitor", str(lib), {"CHROMALLOC_OPTIONS": "nightwatch=1,nightwatch_monitor=1"},
               stats=True),
    ]}


def snapshot_library(src):
    """A private copy of the library, so that a rebuild during the run cannot mix builds."""
    data = src.read_bytes()
    dst_dir = BUILD
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    tmp = dst_dir / (".%s.tmp" % src.name)
    tmp.write_bytes(data)
    os.chmod(tmp, 0o755)
    os.replace(tmp, dst)
    return dst, hashlib.sha256(data).hexdigest()


def build_pv(cc):
    BUILD.mkdir(parents=True, exist_ok=True)
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-o", str(BUILD / "pv"),
           str(ROOT / "bench" / "nightwatch" / "pv.c"), "-lm", "-ldl"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.stdout.strip() or r.stderr.strip():
        say((r.stdout + r.stderr).strip())
    if r.returncode != 0:
        say(f"build failed: {shlex.join(cmd)}")
        sys.exit(2)


# ---------------------------------------------------------------------------------------
# Running pv

@dataclass
class Run:
    experiment: str                           # workload | corun-victim | corun-polluter | foundation | instructions
    workload: str
    config: str
    rep: int
    victim_ns: float | None = None
    victim_ns_p10: float | None = None
    victim_ns_p90: float | None = None
    total_s: float | None = None
    victim_s: float | None = None
    frames: int | None = None
    near: float | None = None                 # messages, packets: chunks allocated next to the one before (pv)
    wall_s: float | None = None
    maxrss_kib: int | None = None
    instructions: int | None = None           # callgrind's count (instructions experiment)
    user_s: float | None = None               # CPU time in user space and in the kernel (foundation)
    sys_s: float | None = None
    checksum: str | None = None
    nw: dict | None = None                    # the "nightwatch" object of the stats, if any
    acted: dict | None = None                 # when the policy acted, from pv --trace (acted_frame)
    colours: dict | None = None               # colour layer: state, restrictive spans coloured or not
    option_unknown: bool = False              # the library warned "unknown option 'nightwatch..."
    error: str = ""

    @property
    def ok(self):
        return not self.error


def child_env(cfg, stats_path=None):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",) + OWN_ENV}
    env.update(cfg.env)
    if cfg.stats and stats_path:
        env["CHROMALLOC_STATS"] = stats_path
    return env


def pv_argv(workload, extra):
    if workload in ALONE:
        return [str(BUILD / "pv"), ALONE[workload], "--no-polluter"] + extra
    return [str(BUILD / "pv"), workload] + extra


def start(br, cfg, argv, report, stats_path, cpu=None, wash_mib=0):
    cmd = br.launch_cmd(cfg.preload, report, argv, wash_mib)
    if cpu is not None:
        cmd = (["taskset", "-c", str(cpu)] + cmd) if shutil.which("taskset") else cmd
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None and not shutil.which("taskset") else None
    for attempt in range(3):
        try:
            p = subprocess.Popen(cmd, env=child_env(cfg, stats_path), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=pre)
            return p, cmd
        except OSError as e:                   # e.g. a program being rewritten: retry, then report
            err = e
            time.sleep(1)
    return FailedStart(str(err)), cmd


class FailedStart:
    """Stands in for a process that could not be started."""
    def __init__(self, why):
        self.why = why


def keep_stats(run, stats_path):
    """every chromalloc run's statistics, kept as RESULTS/nightwatch-stats/EXPERIMENT-WORKLOAD-CONFIG-repN[-K].json
    (-K should a name repeat), so that a repetition that did not gain can be
    explained afterwards (protection's pages, the timeline, the colour layer's start-up)"""
    d = RESULTS / "nightwatch-stats"
    d.mkdir(parents=True, exist_ok=True)
    base = f"{run.experiment}-{run.workload}-{run.config}-rep{run.rep}"
    dest, k = d / f"{base}.json", 1
    while dest.exists():
        dest, k = d / f"{base}-{k}.json", k + 1
    shutil.copyfile(stats_path, dest)


def finish(run, p, cmd, report, stats_path, timeout, name):
    if isinstance(p, FailedStart):
        out, err, run.error = "", "", f"could not start: {p.why}"
    else:
        out, err, rep, error = bench_run.wait_launched(p, timeout, report)
        run.error = run.error or error
        if rep is not None:
            run.wall_s, run.maxrss_kib = rep[0], rep[1]
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 2 and f[0] == "RESULT" and f[1] == name:
            kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
            try:
                run.victim_ns = float(kv["victim_ns"])
                run.victim_ns_p10 = float(kv.get("victim_ns_p10", "nan"))
                run.victim_ns_p90 = float(kv.get("victim_ns_p90", "nan"))
                run.total_s = float(kv["total_s"])
                run.victim_s = float(kv.get("victim_s", "nan"))
                run.frames = int(kv.get("frames", "0"))
                run.near = float(kv["near"]) if "near" in kv else None
                run.checksum = kv.get("checksum")
            except (KeyError, ValueError):
                run.error = run.error or f"bad RESULT line: {line}"
    if not run.error and run.victim_ns is None:
        run.error = "no RESULT line"
    if not run.error and "cannot be preloaded" in err:
        run.error = "LD_PRELOAD failed"
    run.option_unknown = "unknown option 'nightwatch" in err
    if stats_path and Path(stats_path).exists():
        keep_stats(run, stats_path)
        try:
            doc = json.loads(Path(stats_path).read_text())
            nw = doc.get("nightwatch")
            run.nw = nw if isinstance(nw, dict) else None
            run.colours = colour_state(doc.get("colours"))
        except (OSError, ValueError) as e:
            say(f"  note: unreadable statistics of {run.workload} under {run.config}: {e}")
    if not run.ok:
        loud(f"FAILED: {run.experiment} {run.workload} under {run.config}, rep {run.rep}: {run.error}\n"
             f"   command: {shlex.join(cmd)}" + (f"\n   stderr: {err.strip()[-600:]}" if err.strip() else ""))
        logs = RESULTS / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"nightwatch-{run.experiment}-{run.workload}-{run.config}-rep{run.rep}.log").write_text(
            f"command: {shlex.join(cmd)}\nerror: {run.error}\n--- stdout\n{out}--- stderr\n{err}")
    return run


def run_pv(br, cfg, experiment, workload, rep, extra, cpu=None, timeout=PV_TIMEOUT, trace=False):
    with tempfile.TemporaryDirectory(prefix="nightwatch-") as tmp:
        report, stats = os.path.join(tmp, "report"), os.path.join(tmp, "stats.json")
        trace_path = os.path.join(tmp, "trace") if trace else None
        argv = pv_argv(workload, extra + ([f"--trace={trace_path}"] if trace else []))
        p, cmd = start(br, cfg, argv, report, stats, cpu, br.WASH_MIB)   # alone: nothing else runs meanwhile
        name = argv[1] + ("-alone" if "--no-polluter" in argv else "")
        run = finish(Run(experiment, workload, cfg.name, rep), p, cmd, report, stats, timeout, name)
        if trace and run.ok and run.nw:
            run.acted = acted(trace_path, run.nw)
        return run


def read_trace(path):
    """pv --trace: (frame, start ns CLOCK_MONOTONIC, ns per lookup) per frame; [] when unreadable."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                x = line.split()
                out.append((int(x[0]), int(x[1]), float(x[2])))
    except (OSError, ValueError, IndexError):
        return []
    return out


def acted(trace_path, nw):
    """When the policy was in the state it ended in, from its timeline (statistics): every
    context that ends restrictive decided so, the colour layer ready, every class routed at the
    end routed.  The frame then, and the victim's median over the frames after it (without the
    first 5: the change settles).  acted_frame None: it never placed anything restrictive (no
    restrictive context, or the colour layer never ready); the reason in `why`."""
    frames, events = read_trace(trace_path), nw.get("timeline")
    if not frames or not isinstance(events, list) or "start_monotonic_ns" not in nw:
        return None
    ctxs = nw.get("contexts") or []
    final = {i for i, c in enumerate(ctxs) if c.get("decision") == "restrictive"}
    routed = set(nw.get("routed_sizes") or [])
    last, ready = {}, None
    for e in events:
        k = e.get("event")
        if k == "decision" and e.get("restrictive") and e.get("context") in final:
            last[("ctx", e["context"])] = e["ms"]
        elif k == "route" and e.get("restrictive") and e.get("size") in routed:
            last[("size", e["size"])] = e["ms"]
        elif k == "colours_ready" and ready is None:
            ready = e["ms"]
    out = {"acted_ms": None, "acted_frame": None, "victim_ns_after": None, "why": ""}
    if not final:
        out["why"] = "no context restrictive"
    elif ready is None:
        # a full timeline may have lost the entry (older builds logged a protection flood)
        out["why"] = "timeline incomplete" if nw.get("timeline_dropped") else "colour layer never ready"
    elif len(last) < len(final) + len(routed) or nw.get("timeline_dropped"):
        out["why"] = "timeline incomplete"
    else:
        ms = max(list(last.values()) + [ready])
        at = nw["start_monotonic_ns"] + ms * 1_000_000
        out["acted_ms"] = ms
        out["acted_frame"] = next((f for f, t, _ in frames if t >= at), len(frames))
        after = [v for f, _, v in frames if f >= out["acted_frame"] + 5]
        out["victim_ns_after"] = median(after) if after else None
    return out


def colour_state(c):
    """The colour layer's state and how many spans of colour sets got pooled (coloured) pages
    and how many fell back to ordinary memory (stock not ready): restrictive chunks only take
    effect when they are coloured."""
    if not isinstance(c, dict):
        return None
    sets = [x for x in c.get("sets") or [] if isinstance(x, dict)]
    prot = c.get("protect") if isinstance(c.get("protect"), dict) else {}
    return {"state": c.get("state"), "eviction_sets": c.get("eviction_sets"),
            "spans_filled": sum(int(x.get("spans_filled", 0)) for x in sets),
            "spans_ordinary": sum(int(x.get("spans_ordinary", 0)) for x in sets),
            "protect_checked": prot.get("pages_checked"), "protect_moved": prot.get("pages_moved"),
            # of the pages protection looked at, those the program had touched (each is moved)
            "protect_touched": (prot["pages_checked"] - prot["pages_untouched"]
                                if "pages_checked" in prot and "pages_untouched" in prot else None),
            # old frames of moved pages: pooled, or given back by the pool's re-test
            "frames_kept": c.get("frames_kept"), "frames_rejected": c.get("frames_rejected"),
            # the worker's start-up (ms; ready 0: not ready by the end), to tell a late run's cause
            "probe_ms": c.get("probe_ms"), "discover_ms": c.get("discover_ms"),
            "estimate_ms": c.get("estimate_ms"), "ready_ms": c.get("ready_ms"),
            "set_rebuilds": c.get("set_rebuilds"),
            # what the worker cost: CPU on the other core, in no wall time above (docs/colours.md)
            "worker_cpu_ms": c.get("worker_cpu_ms")}


def check_checksums(runs):
    """pv's checksum depends on the workload only: every configuration must print glibc's."""
    by = {}
    for r in runs:
        if r.ok and r.checksum not in (None, "na"):
            by.setdefault(r.workload, []).append(r)
    for w, group in by.items():
        ref = [r.checksum for r in group if r.config == "glibc"] or [r.checksum for r in group]
        ref = max(set(ref), key=ref.count)
        for r in group:
            if r.checksum != ref:
                r.error = f"checksum {r.checksum} differs from the reference {ref}"
                loud(f"FAILED: {w} under {r.config}, rep {r.rep}: {r.error}")


# ---------------------------------------------------------------------------------------
# NightWatch statistics

def pred_counts(nw):
    """(hits, misses) of a run's "nightwatch" object: its "predictions", else the contexts' sum."""
    if not nw:
        return None
    p = nw.get("predictions")
    if isinstance(p, dict) and "hits" in p and "misses" in p:
        return int(p["hits"]), int(p["misses"])
    ctx = nw.get("contexts")
    if isinstance(ctx, list):
        return (sum(int(c.get("pred_hits", 0)) for c in ctx), sum(int(c.get("pred_misses", 0)) for c in ctx))
    return None


_SYMS = None


def pv_symbols():
    """pv's functions as a sorted list of (address, name), from nm; [] without nm."""
    global _SYMS
    if _SYMS is None:
        _SYMS = []
        nm = shutil.which("nm")
        if nm:
            r = subprocess.run([nm, "--defined-only", str(BUILD / "pv")], capture_output=True, text=True)
            for line in r.stdout.splitlines():
                f = line.split()
                if len(f) == 3 and f[1] in "tTwW":
                    _SYMS.append((int(f[0], 16), f[2].split(".", 1)[0]))   # drop .constprop.0 etc.
            _SYMS.sort()
    return _SYMS


def context_functions(c):
    """The pv functions on a context's call stack, innermost first ([] when it cannot be told):
    the site "0xOFF (pv)" or "name+0xOFF (pv)" gives pv's load address from the first frame."""
    syms = pv_symbols()
    m = re.match(r"^(?:(\S+?)\+)?0x([0-9a-fA-F]+) \((.*)\)$", str(c.get("site", "")))
    try:
        frames = [int(str(x), 16) for x in c.get("frames") or []]
    except ValueError:
        return []
    if not syms or not m or not frames or os.path.basename(m.group(3)) != "pv":
        return []
    off = int(m.group(2), 16)
    if m.group(1):
        addr = [a for a, n in syms if n == m.group(1).split(".", 1)[0]]
        if not addr:
            return []
        off += addr[0]
    base, top = frames[0] - off, syms[-1][0] + 4096
    names = []
    for f in frames:
        o = f - base
        if 0 <= o < top:
            i = bisect.bisect_right(syms, (o, "\U0010ffff")) - 1
            if i >= 0 and (not names or names[-1] != syms[i][1]):
                names.append(syms[i][1])
    return names


def expected_role(names):
    """From the three innermost pv functions (deeper words of a stack scan may be stale)."""
    for n in names[:3]:
        if n in POLLUTER_SITES:
            return "restrictive"
        if n in VICTIM_SITES:
            return "open"
    return None


def prediction_summary(runs):
    """Pooled over the repetitions: hits / (hits + misses); None without statistics."""
    counts = [pred_counts(r.nw) for r in runs if r.ok]
    counts = [c for c in counts if c is not None]
    if not counts:
        return {"runs_with_stats": 0, "hits": None, "misses": None, "success": None}
    h, m = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return {"runs_with_stats": len(counts), "hits": h, "misses": m, "success": ratio(h, h + m)}


def nw_totals(runs):
    keys = ["chunks", "monitored", "restrictive"]
    out = {}
    for k in keys:
        out[k] = median([r.nw.get(k) for r in runs if r.ok and r.nw and isinstance(r.nw.get(k), (int, float))])
    out["enabled"] = sorted({bool(r.nw.get("enabled")) for r in runs if r.ok and r.nw and "enabled" in r.nw}) or None
    col = [r.colours for r in runs if r.ok and r.colours]
    out["colour_states"] = sorted({str(c["state"]) for c in col}) or None
    out["restrictive_spans_coloured"] = median([c["spans_filled"] for c in col])
    out["restrictive_spans_ordinary"] = median([c["spans_ordinary"] for c in col])
    out["protect_pages_checked"] = median([c["protect_checked"] for c in col if c.get("protect_checked") is not None])
    out["protect_pages_moved"] = median([c["protect_moved"] for c in col if c.get("protect_moved") is not None])
    out["worker_cpu_ms"] = median([c["worker_cpu_ms"] for c in col if c.get("worker_cpu_ms") is not None])
    return out


def contexts_of(runs):
    """The contexts of the last run that has them, with the role expected from the site name."""
    for r in reversed(runs):
        if r.ok and r.nw and isinstance(r.nw.get("contexts"), list):
            out = []
            for c in r.nw["contexts"]:
                names = context_functions(c)
                out.append({k: c.get(k) for k in ("site", "chunks", "bytes", "sampled_pages", "miss_rate",
                                                   "decision", "pred_hits", "pred_misses")}
                           | {"functions": names, "expected": expected_role(names), "rep": r.rep})
            return out
    return None


# ---------------------------------------------------------------------------------------
# Experiments

def workloads_experiment(br, cfgs, reps, quick, settle_ms):
    extra = {"frames": ["--frames=150"], "requests": ["--frames=120"], "messages": ["--frames=120"],
             "packets": ["--frames=120"], "packets-alone": ["--frames=120"],
             "neutral": ["--frames=400"], "victims": ["--frames=4000"], "frames-alone": ["--frames=150"],
             "requests-alone": ["--frames=120"], "messages-alone": ["--frames=120"]} if quick else \
        {"frames-alone": ["--frames=3000"], "requests-alone": ["--frames=3000"],   # cheap: more samples
         "messages-alone": ["--frames=3000"], "packets-alone": ["--frames=3000"],
         # long enough for the policy to learn within its budget: monitoring one chunk costs
         # 5-40 ms here, and monitoring may take 0.5% of the run: two verdicts need seconds
         "frames": ["--frames=6000"], "requests": ["--frames=6000"], "messages": ["--frames=6000"],
         "packets": ["--frames=6000"],
         # ... and for the no-polluter workloads too: at their defaults (0.5-0.9 s) the budget
         # never allowed a group, nothing was monitored, and on/off measured only the context
         # lookups; at these lengths (2.4-2.9 s) every context is judged
         "neutral": ["--frames=8000"], "victims": ["--frames=100000"]}
    def args(w, cfg):
        """the settle phase is for NightWatch's colour worker: pv waits until chromalloc's
        restrictive pool is stocked (at most settle_ms); the other configurations, and the
        workloads without a polluter, need none"""
        a = list(extra.get(w, []))
        if settle_ms and "nightwatch=1" in cfg.env.get("CHROMALLOC_OPTIONS", "") and w in POLLUTED:
            a.append(f"--settle-ms={settle_ms}")
        return a
    plan = [(w, [c for c in cfgs]) for w in WORKLOADS]
    plan += [(w, [c for c in cfgs if c.name != "chromalloc-monitor"]) for w in ALONE]
    # the no-polluter workloads' target (2%) is below this host's run-to-run noise (3-6% between
    # two runs of the same library): CLEAN_PAIRS more on/off pairs per rep, alternating which
    # goes first, and their slowdown is the median of the per-pair ratios (summarise)
    pair = [c for c in cfgs if c.name in ("chromalloc-on", "chromalloc-off")]
    clean = [w for w, _ in plan if w in CLEAN] if len(pair) == 2 else []
    n = sum(len(cs) for _, cs in plan) * reps + 2 * len(clean) * CLEAN_PAIRS * reps
    say(f"\n=== workloads: {len(plan)} workloads, {n} runs ({reps} reps, interleaved; "
        f"{CLEAN_PAIRS * reps} more on/off pairs of {', '.join(clean) or 'none'})")
    runs, t0 = [], time.monotonic()
    total = reps + CLEAN_PAIRS * reps

    def one(cfg, w, rep):
        r = run_pv(br, cfg, "workload", w, rep, args(w, cfg), trace=cfg.name == "chromalloc-on" and w in POLLUTED)
        runs.append(r)
        pc = pred_counts(r.nw)
        say(f"rep {rep}/{reps if rep <= reps else total}  {w:<15} {cfg.name:<19} victim {fmt(r.victim_ns, '7.2f')} ns  "
            f"total {fmt(r.total_s, '6.3f')} s"
            + (f"  pred {pc[0]}/{pc[0] + pc[1]}" if pc else "")
            + (f"  {acted_text(r.acted)}" if r.acted else "")
            + ("" if r.ok else "  FAILED"))
    for rep in range(1, reps + 1):
        for w, cs in plan:
            k = (rep - 1) % len(cs)
            for cfg in cs[k:] + cs[:k]:
                one(cfg, w, rep)
    for rep in range(reps + 1, total + 1):
        for w in clean:
            for cfg in (pair if rep % 2 else pair[::-1]):
                one(cfg, w, rep)
    check_checksums(runs)
    say(f"workloads: {len(runs)} runs in {time.monotonic() - t0:.0f} s")
    return runs


def clean_policy_text(runs, w):
    """what the policy did in a no-polluter workload's policy-on runs: a target met by a policy
    that never monitored anything says nothing about monitoring's cost"""
    on = [r.nw for r in runs if r.workload == w and r.config == "chromalloc-on" and r.ok and r.nw]
    if not on:
        return "no statistics"
    judged = sum(1 for nw in on if any(c.get("pair_hits", 0) + c.get("pair_misses", 0) for c in nw.get("contexts", [])))
    share = median([nw["monitor_cost_ns"] / nw["run_ns"] for nw in on if nw.get("run_ns")])
    return (f"policy-on runs with a context judged: {judged}/{len(on)}; "
            f"monitoring's counted share of the run (median) {fmt(100 * share if share is not None else None, '.2f')}%")


def acted_text(a):
    if a.get("acted_frame") is None:
        return f"never acted ({a.get('why')})"
    return f"acted at frame {a['acted_frame']}, victim after {fmt(a.get('victim_ns_after'), '.2f')} ns"


def corun_experiment(br, cfgs, reps, seconds, settle_ms):
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        loud("corun: needs CPUs 0 and 1; skipped")
        return []
    names = [c for c in CORUN_CONFIGS if c in cfgs]
    say(f"\n=== corun: pv polluter on CPU 0 + pv victim on CPU 1, {seconds:g} s, "
        f"{'/'.join(names)} and the victim alone, {reps} reps")
    runs = []
    for rep in range(1, reps + 1):
        order = names[(rep - 1) % len(names):] + names[:(rep - 1) % len(names)] + ["alone"]
        for name in order:
            cfg = cfgs["glibc" if name == "alone" else name]
            with tempfile.TemporaryDirectory(prefix="nightwatch-") as tmp:
                pol = None
                if name != "alone":
                    # the polluter runs alone first (its context learnt; under the policy, the
                    # settle until its restrictive pool holds a buffer), then creates the ready
                    # file and goes on for the victim's time
                    prep, pstats = os.path.join(tmp, "prep"), os.path.join(tmp, "pstats.json")
                    ready = os.path.join(tmp, "ready")
                    extra = [f"--seconds={seconds + 0.5:g}", f"--ready-file={ready}"]
                    if settle_ms and "nightwatch=1" in cfg.env.get("CHROMALLOC_OPTIONS", ""):
                        extra.append(f"--settle-ms={settle_ms}")
                    pol, pcmd = start(br, cfg, pv_argv("polluter", extra), prep, pstats, cpu=0)
                    deadline = time.time() + settle_ms / 1000 + 15
                    while not os.path.exists(ready) and time.time() < deadline and \
                            not isinstance(pol, FailedStart) and pol.poll() is None:
                        time.sleep(0.02)
                vrep, vstats = os.path.join(tmp, "vrep"), os.path.join(tmp, "vstats.json")
                vargv = pv_argv("victim", [f"--seconds={seconds:g}"])
                vp, vcmd = start(br, cfg, vargv, vrep, vstats, cpu=1)
                v = finish(Run("corun-victim", "victim", name, rep), vp, vcmd, vrep, vstats, PV_TIMEOUT, "victim")
                runs.append(v)
                line = f"rep {rep}/{reps}  corun {name:<15} victim {fmt(v.victim_ns, '7.2f')} ns/lookup"
                if pol is not None:
                    pr = finish(Run("corun-polluter", "polluter", name, rep), pol, pcmd, prep, pstats,
                                PV_TIMEOUT, "polluter")
                    runs.append(pr)
                    line += f"   polluter {fmt(pr.victim_ns, '6.2f')} ns/line"
                    if pr.nw:
                        line += f", restrictive chunks {pr.nw.get('restrictive', 'n/a')}"
                    if pr.colours:
                        line += f", coloured {pr.colours.get('spans_filled')} / ordinary {pr.colours.get('spans_ordinary')}"
                say(line + ("" if v.ok else "  FAILED"))
    return runs


def foundation_experiment(br, lib, reps, stats_dir):
    on = br.Allocator("chromalloc-on", str(lib), env={"CHROMALLOC_OPTIONS": "nightwatch=1",
                                                        "CHROMALLOC_STATS": str(stats_dir / "on.json")})
    off = br.Allocator("chromalloc-off", str(lib), env={"CHROMALLOC_OPTIONS": "nightwatch=0",
                                                          "CHROMALLOC_STATS": str(stats_dir / "off.json")})
    # the control: nightwatch=0 once more, judged against the first exactly as on is; what it
    # reads beside 1 is what this host's noise makes of identical runs
    again = br.Allocator("chromalloc-off-again", str(lib), env={"CHROMALLOC_OPTIONS": "nightwatch=0",
                                                                "CHROMALLOC_STATS": str(stats_dir / "again.json")})
    say(f"\n=== foundation: {', '.join(FOUNDATION)} under chromalloc nightwatch=0 / nightwatch=1 / nightwatch=0 "
        f"(control), {reps} reps, order rotated")
    runs = []
    for rep in range(1, reps + 1):
        for b in FOUNDATION:
            order = [off, on, again]
            for a in order[rep % 3:] + order[:rep % 3]:
                try:
                    r = br.execute(a, b, rep, [], br.SUITE_TIMEOUT)
                except OSError as e:
                    r = br.Run(b, a.name, rep, error=f"could not start: {e}")
                    loud(f"FAILED: foundation {b} under {a.name}, rep {rep}: {r.error}")
                run = Run("foundation", b, a.name, rep, total_s=r.seconds, wall_s=r.seconds,
                          maxrss_kib=r.maxrss_kib, checksum=r.checksum, error=r.error,
                          user_s=r.user_seconds, sys_s=r.sys_seconds)
                sp = Path(a.env["CHROMALLOC_STATS"])
                if sp.exists():
                    try:
                        nw = json.loads(sp.read_text()).get("nightwatch")
                        run.nw = nw if isinstance(nw, dict) else None
                    except (OSError, ValueError):
                        pass
                    sp.unlink()
                runs.append(run)
                say(f"rep {rep}/{reps}  {b:<8} {a.name:<15} {fmt(r.seconds, '6.3f')} s"
                    + ("" if r.ok else "  FAILED"))
    for b in FOUNDATION:
        group = [r for r in runs if r.workload == b and r.ok]
        sums = [r.checksum for r in group]
        if sums:
            ref = max(set(sums), key=sums.count)
            for r in group:
                if r.checksum != ref:
                    r.error = f"checksum {r.checksum} differs from {ref}"
                    loud(f"FAILED: foundation {b} under {r.config}, rep {r.rep}: {r.error}")
    return runs


def instructions_experiment(br, lib, reps):
    valgrind = shutil.which("valgrind")
    if not valgrind and br.apt_install("valgrind"):
        valgrind = shutil.which("valgrind")
    if not valgrind:
        loud("WARNING: valgrind missing and not installable: instructions experiment skipped")
        return []
    jobs = [(b, c, rep) for b in FOUNDATION for rep in range(1, (min(reps, 3) if b in br.MULTI_THREADED else 1) + 1)
            for c in INSTR_CONFIGS]
    say(f"\n=== instructions: {', '.join(FOUNDATION)} under callgrind, {', '.join(f'{c} ({o})' for c, o in INSTR_CONFIGS.items())}"
        f"; {len(jobs)} runs, 2 at a time (minutes)")

    def one(job):
        b, c, rep = job
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",) + OWN_ENV}
        env.update(LD_PRELOAD=str(lib), CHROMALLOC_OPTIONS=INSTR_CONFIGS[c])
        run = Run("instructions", b, c, rep)
        try:
            r = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", str(BUILD / b)],
                               env=env, capture_output=True, text=True, timeout=3600)
            m = re.search(r"Collected : (\d+)", r.stderr)
            run.instructions = int(m.group(1)) if m else None
            if r.returncode != 0 or m is None:
                run.error = f"exit {r.returncode}" + ("" if m else ", no instruction count")
        except (OSError, subprocess.TimeoutExpired) as e:
            run.error = str(e)
        return run

    from concurrent.futures import ThreadPoolExecutor
    runs = []
    with ThreadPoolExecutor(max_workers=2) as ex:
        for r in ex.map(one, jobs):
            runs.append(r)
            say(f"rep {r.rep}  {r.workload:<8} {r.config:<15} {fmt(r.instructions, ',', 'n/a'):>16} instructions"
                + ("" if r.ok else f"  FAILED: {r.error}"))
            if not r.ok:
                loud(f"FAILED: instructions {r.workload} under {r.config}, rep {r.rep}: {r.error}")
    return runs


# ---------------------------------------------------------------------------------------
# Summary and targets

def summarise(runs, corun, found, instr, cfg_names):
    wl = {}
    for w in WORKLOADS + list(ALONE):
        wl[w] = {}
        for c in cfg_names:
            mine = [r for r in runs if r.workload == w and r.config == c]
            good = [r for r in mine if r.ok]
            if not mine:
                continue
            ns = [r.victim_ns for r in good]
            wl[w][c] = {"runs": len(mine), "ok_runs": len(good), "victim_ns": median(ns),
                        "victim_ns_min": min(ns, default=None), "victim_ns_max": max(ns, default=None),
                        "total_s": median([r.total_s for r in good]),
                        "near": median([r.near for r in good if r.near is not None]),
                        "wall_s": median([r.wall_s for r in good]),
                        "maxrss_kib": median([r.maxrss_kib for r in good])}
            if c == "chromalloc-on" and any(r.acted for r in good):
                # each repetition: its victim, when the policy acted and the victim after that
                wl[w][c]["reps"] = [{"rep": r.rep, "victim_ns": r.victim_ns, **(r.acted or {}),
                                     "restrictive_spans_ordinary": (r.colours or {}).get("spans_ordinary")}
                                    for r in good]
            if c.startswith("chromalloc"):
                wl[w][c]["nightwatch"] = nw_totals(good)
                wl[w][c]["prediction"] = prediction_summary(good)
                wl[w][c]["nightwatch_stats_present"] = any(r.nw for r in good)
                wl[w][c]["option_unknown"] = any(r.option_unknown for r in good)

    def get(w, c, k="victim_ns"):
        return wl.get(w, {}).get(c, {}).get(k)

    ratios = {}
    for w in WORKLOADS:
        on, off, gl, mi = (get(w, c) for c in ("chromalloc-on", "chromalloc-off", "glibc", "mimalloc"))
        d = {"speedup_on_vs_off": ratio(off, on),
             # the same per rep (on and off run next to each other there), then the median: the
             # host's loudness changes within minutes, and a median of each side can pair a loud
             # rep's off with a quiet one's on (reported; the target is judged on the one above)
             "speedup_on_vs_off_paired": paired(runs, w, "chromalloc-off", "chromalloc-on", "victim_ns"),
             "speedup_on_vs_glibc": ratio(gl, on),
             "speedup_on_vs_mimalloc": ratio(mi, on),
             "slowdown_total_on_vs_off": paired(runs, w, "chromalloc-on", "chromalloc-off") if w in CLEAN else
                                         ratio(get(w, "chromalloc-on", "total_s"), get(w, "chromalloc-off", "total_s")),
             # the per-pair ratios of the no-polluter workloads spread by +-10-20% on a loud
             # host: the median's 90% bootstrap interval says what a 2% target can tell there
             "slowdown_total_on_vs_off_interval90": median_interval(pair_ratios(runs, w, "chromalloc-on", "chromalloc-off"))
                                                    if w in CLEAN else None,
             "slowdown_victim_on_vs_off": ratio(on, off),
             "slowdown_wall_on_vs_off": ratio(get(w, "chromalloc-on", "wall_s"), get(w, "chromalloc-off", "wall_s")),
             "monitor_total_vs_off": ratio(get(w, "chromalloc-monitor", "total_s"), get(w, "chromalloc-off", "total_s"))}
        if w in POLLUTED:
            alone_off, alone_gl = get(w + "-alone", "chromalloc-off"), get(w + "-alone", "glibc")
            d["upper_bound_speedup_off_vs_alone"] = ratio(off, alone_off)
            d["upper_bound_speedup_glibc_vs_alone"] = ratio(gl, alone_gl)
            d["pollution_factor_glibc"] = ratio(gl, alone_gl)
            d["gap_recovered_vs_off"] = (off - on) / (off - alone_off) if None not in (on, off, alone_off) and off > alone_off else None
        ratios[w] = d

    pred = {w: {"monitor_run": wl.get(w, {}).get("chromalloc-monitor", {}).get("prediction"),
                "default_run": wl.get(w, {}).get("chromalloc-on", {}).get("prediction")} for w in WORKLOADS}
    ctx = {w: contexts_of([r for r in runs if r.workload == w and r.config == c])
           for w in WORKLOADS for c in ["chromalloc-monitor"]}
    ctx_default = {w: contexts_of([r for r in runs if r.workload == w and r.config == "chromalloc-on"]) for w in WORKLOADS}

    co = {}
    for name in CORUN_CONFIGS + ["alone"]:
        v = [r for r in corun if r.experiment == "corun-victim" and r.config == name and r.ok]
        p = [r for r in corun if r.experiment == "corun-polluter" and r.config == name and r.ok]
        if v or p:
            co[name] = {"victim_ns": median([r.victim_ns for r in v]),
                        "victim_ns_min": min((r.victim_ns for r in v), default=None),
                        "victim_ns_max": max((r.victim_ns for r in v), default=None),
                        "polluter_ns_per_line": median([r.victim_ns for r in p]),
                        "polluter_restrictive_chunks": median([r.nw.get("restrictive") for r in p
                                                               if r.nw and isinstance(r.nw.get("restrictive"), (int, float))]),
                        "polluter_coloured_runs": sum(1 for r in p if r.colours and (r.colours.get("spans_filled") or 0) > 0),
                        "polluter_runs": len(p),
                        "runs": len(v)}
    if co:
        g, off, on, al = (co.get(n, {}).get("victim_ns") for n in ("glibc", "chromalloc-off", "chromalloc-on", "alone"))
        co["ratios"] = {"speedup_on_vs_off": ratio(off, on), "speedup_on_vs_glibc": ratio(g, on),
                        "pollution_factor_glibc": ratio(g, al)}

    fd = {}
    for b in FOUNDATION if found else []:
        d = {}
        for c in ("chromalloc-off", "chromalloc-on", "chromalloc-off-again"):
            secs = [r.total_s for r in found if r.workload == b and r.config == c and r.ok]
            d[c] = {"median_seconds": median(secs), "min_seconds": min(secs, default=None),
                    "max_seconds": max(secs, default=None), "ok_runs": len(secs)}
        # per rep (the three run next to each other there), then the median, as the neutral
        # workloads' on / off; and the same of the control against off
        d["ratio_on_vs_off"] = paired(found, b, "chromalloc-on", "chromalloc-off")
        d["ratio_control_vs_off"] = paired(found, b, "chromalloc-off-again", "chromalloc-off")
        d["ratio_of_medians_on_vs_off"] = ratio(d["chromalloc-on"]["median_seconds"], d["chromalloc-off"]["median_seconds"])
        fd[b] = d
    if found:                                  # over all four, or none when one has no result
        for k in ("ratio_on_vs_off", "ratio_control_vs_off", "ratio_of_medians_on_vs_off"):
            per = [fd[b][k] for b in FOUNDATION]
            fd["geomean_" + k] = geomean(per) if all(per) else None
        fd["geomean_ratio_on_vs_off_available"] = geomean([fd[b]["ratio_on_vs_off"] for b in FOUNDATION])
    # the policy's cost: its instructions, and the monitoring time of the wall-time runs
    for b in FOUNDATION if instr else []:
        d = fd.setdefault(b, {})
        for c in INSTR_CONFIGS:
            d[c + "-instructions"] = median([r.instructions for r in instr if r.workload == b and r.config == c and r.ok])
        d["instructions_on_vs_off"] = ratio(d["chromalloc-on-instructions"], d["chromalloc-off-instructions"])
        shares = [r.nw["monitor_cost_ns"] / r.nw["run_ns"] for r in found
                  if r.workload == b and r.config == "chromalloc-on" and r.ok and r.nw and r.nw.get("run_ns")
                  and isinstance(r.nw.get("monitor_cost_ns"), (int, float))]
        d["monitoring_share_on"] = median(shares)
        # the extra instructions are user-space ones: they slow the part of the run spent there
        # (large: 8 M instructions in 0.5 s, mostly page faults)
        users = [r.user_s / (r.user_s + r.sys_s) for r in found if r.workload == b and r.config == "chromalloc-off"
                 and r.ok and r.user_s is not None and r.sys_s is not None and r.user_s + r.sys_s > 0]
        d["user_share_off"] = median(users)
        extra = d["instructions_on_vs_off"]
        d["policy_cost"] = ((extra - 1) * (d["user_share_off"] if d["user_share_off"] is not None else 1)
                            + (d["monitoring_share_on"] or 0) if extra is not None else None)
    return wl, ratios, pred, ctx, ctx_default, co, fd


def verdict(value, limit, higher_is_better, ran=True):
    """PASS/FAIL; without a value FAIL when the runs were made (they failed), else SKIP."""
    if value is None:
        return "FAIL" if ran else "SKIP"
    return "PASS" if (value >= limit if higher_is_better else value <= limit) else "FAIL"


def targets(wl, ratios, fd, found_ran, instr_ran, runs):
    def ran(w, *cs):                           # were these configurations run on w at all?
        return all(wl.get(w, {}).get(c, {}).get("runs") for c in cs)
    t = []
    for w in POLLUTED:
        v = ratios.get(w, {}).get("speedup_on_vs_off")
        t.append((f"{w}: victim speed-up chromalloc-on vs -off >= {TARGETS['speedup_off']}x",
                  verdict(v, TARGETS["speedup_off"], True, ran(w, "chromalloc-on", "chromalloc-off")),
                  fmt(v) + f"  [paired per rep: {fmt(ratios.get(w, {}).get('speedup_on_vs_off_paired'))}]"))
    vals = [ratios.get(w, {}).get("speedup_on_vs_glibc") for w in POLLUTED]
    gm = geomean(vals) if all(vals) else None
    t.append((f"geomean victim speed-up vs glibc over {', '.join(POLLUTED)} >= {TARGETS['geomean_vs_glibc']}x",
              verdict(gm, TARGETS["geomean_vs_glibc"], True, all(ran(w, "chromalloc-on", "glibc") for w in POLLUTED)),
              fmt(gm) + "  [" + ", ".join(f"{w} {fmt(v)}" for w, v in zip(POLLUTED, vals)) + "]"))
    for w in CLEAN:
        v = ratios.get(w, {}).get("slowdown_total_on_vs_off")
        iv = ratios.get(w, {}).get("slowdown_total_on_vs_off_interval90")
        t.append((f"{w}: time on / off <= {TARGETS['slowdown']} (workload loop, in-program; median of per-pair ratios)",
                  verdict(v, TARGETS["slowdown"], False, ran(w, "chromalloc-on", "chromalloc-off")),
                  fmt(v, ".4f") + (f" (90% interval of the median {iv[0]:.3f}-{iv[1]:.3f})" if iv else "")
                  + "  [" + clean_policy_text(runs, w) + "]"))
    name = (f"foundation ({', '.join(FOUNDATION)}): geomean wall time on / off <= {TARGETS['overhead']} "
            f"(median of per-rep ratios; control: nightwatch=0 / nightwatch=0)")
    if not found_ran:
        t.append((name, "SKIP", "not run"))
    else:
        per = [fd[b]["ratio_on_vs_off"] for b in FOUNDATION]
        missing = [b for b, v in zip(FOUNDATION, per) if v is None]
        g = fd.get("geomean_ratio_on_vs_off")
        t.append((name, "FAIL" if missing else verdict(g, TARGETS["overhead"], False),
                  (f"no result for {', '.join(missing)}; " if missing else "") + fmt(g, ".4f")
                  + "  [" + ", ".join(f"{b} {fmt(v, '.3f')}" for b, v in zip(FOUNDATION, per)) + "]"
                  + f"  control {fmt(fd.get('geomean_ratio_control_vs_off'), '.4f')}  [" + ", ".join(
                      f"{b} {fmt(fd[b]['ratio_control_vs_off'], '.3f')}" for b in FOUNDATION) + "]"
                  + f"  ratio of medians {fmt(fd.get('geomean_ratio_of_medians_on_vs_off'), '.4f')}"))
    limit = TARGETS["overhead"] - 1
    name = (f"foundation: policy cost (extra instructions (callgrind) x user share of CPU time + monitoring "
            f"time share, both of the wall-time runs) <= {limit:.0%} for each")
    if not instr_ran:
        t.append((name, "SKIP", "not run"))
    else:
        per = [fd.get(b, {}).get("policy_cost") for b in FOUNDATION]
        worst = None if None in per else max(per)
        t.append((name, verdict(worst, limit, False), f"worst {fmt(worst, '.2%')}  [" + ", ".join(
            f"{b} {fmt(fd[b].get('instructions_on_vs_off'), '.4f')} instr x {fmt(fd[b].get('user_share_off'), '.2f')}"
            f" + {fmt(fd[b].get('monitoring_share_on'), '.2%')}"
            for b in FOUNDATION if b in fd) + "]"))
    return t


# ---------------------------------------------------------------------------------------
# Output

def write_csv(path, runs):
    cols = ["experiment", "workload", "config", "rep", "victim_ns", "victim_ns_p10", "victim_ns_p90",
            "total_s", "victim_s", "frames", "near", "wall_s", "maxrss_kib", "instructions", "user_s", "sys_s", "checksum", "ok", "nw_enabled",
            "nw_chunks", "nw_monitored", "nw_restrictive", "pred_hits", "pred_misses", "colours_state",
            "restrictive_spans_coloured", "restrictive_spans_ordinary", "protect_pages_checked",
            "protect_pages_moved", "protect_pages_touched",
            "colours_frames_kept", "colours_frames_rejected",
            "colours_probe_ms", "colours_discover_ms", "colours_estimate_ms",
            "colours_ready_ms", "colours_set_rebuilds", "colours_worker_cpu_ms", "acted_frame", "victim_ns_after_acting", "error"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in runs:
            pc = pred_counts(r.nw)
            nw = r.nw or {}
            w.writerow([r.experiment, r.workload, r.config, r.rep, fmt(r.victim_ns, ".4f", ""),
                        fmt(r.victim_ns_p10, ".4f", ""), fmt(r.victim_ns_p90, ".4f", ""),
                        fmt(r.total_s, ".5f", ""), fmt(r.victim_s, ".5f", ""), r.frames or "", fmt(r.near, ".4f", ""),
                        fmt(r.wall_s, ".5f", ""), r.maxrss_kib or "", r.instructions or "",
                        fmt(r.user_s, ".5f", ""), fmt(r.sys_s, ".5f", ""), r.checksum or "", int(r.ok),
                        "" if "enabled" not in nw else int(bool(nw["enabled"])), nw.get("chunks", ""),
                        nw.get("monitored", ""), nw.get("restrictive", ""),
                        "" if pc is None else pc[0], "" if pc is None else pc[1],
                        (r.colours or {}).get("state", ""), (r.colours or {}).get("spans_filled", ""),
                        (r.colours or {}).get("spans_ordinary", ""), (r.colours or {}).get("protect_checked", ""),
                        *[(r.colours or {}).get(k, "") for k in ("protect_moved", "protect_touched", "frames_kept", "frames_rejected", "probe_ms", "discover_ms", "estimate_ms",
                                                                 "ready_ms", "set_rebuilds", "worker_cpu_ms")],
                        "" if not r.acted or r.acted.get("acted_frame") is None else r.acted["acted_frame"],
                        fmt((r.acted or {}).get("victim_ns_after"), ".4f", ""), r.error])


COLORS = {"glibc": "#7f7f7f", "mimalloc": "#2ca02c", "chromalloc-off": "#ff7f0e",
          "chromalloc-on": "#d62728", "chromalloc-monitor": "#9467bd", "alone": "#1f77b4"}


def plot(path, wl, ratios, co, fd, cfg_names):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib not available: nightwatch.png not written (CSV and JSON are)")
        return
    fig, ax = plt.subplots(2, 2, figsize=(14, 9))
    a = ax[0][0]
    names = [c for c in cfg_names if c != "chromalloc-monitor"]
    width = 0.8 / len(names)
    for i, c in enumerate(names):
        ys = [wl[w].get(c, {}).get("victim_ns") or 0 for w in WORKLOADS]
        a.bar([x + (i - (len(names) - 1) / 2) * width for x in range(len(WORKLOADS))], ys, width,
              label=c, color=COLORS.get(c))
    for x, w in enumerate(WORKLOADS):
        if w in POLLUTED:
            al = wl.get(w + "-alone", {}).get("glibc", {}).get("victim_ns")
            if al:
                a.hlines(al, x - 0.45, x + 0.45, colors=COLORS["alone"], linestyles="--",
                         label="victim alone (glibc)" if x == 0 else None)
    a.set_xticks(range(len(WORKLOADS)))
    a.set_xticklabels(WORKLOADS)
    a.set_ylabel("ns per victim lookup / line (median)")
    a.set_title("victim phase: median ns (lower is better)")
    a.legend(fontsize=8)

    a = ax[0][1]
    keys = [("speedup_on_vs_off", "on vs off"), ("speedup_on_vs_glibc", "on vs glibc"),
            ("speedup_on_vs_mimalloc", "on vs mimalloc"), ("upper_bound_speedup_off_vs_alone", "bound: off / alone")]
    width = 0.8 / len(keys)
    for i, (k, lab) in enumerate(keys):
        ys = [ratios[w].get(k) or 0 for w in WORKLOADS]
        a.bar([x + (i - (len(keys) - 1) / 2) * width for x in range(len(WORKLOADS))], ys, width, label=lab)
    a.axhline(1.0, color="black", linewidth=0.8)
    a.axhline(TARGETS["speedup_off"], color="red", linewidth=0.8, linestyle=":", label=f"target {TARGETS['speedup_off']}x")
    a.set_xticks(range(len(WORKLOADS)))
    a.set_xticklabels(WORKLOADS)
    a.set_ylabel("victim speed-up (x)")
    a.set_title("speed-up of chromalloc-on (higher is better)")
    a.legend(fontsize=8)

    a = ax[1][0]
    names = [n for n in CORUN_CONFIGS + ["alone"] if n in co]
    if names:
        a.bar(range(len(names)), [co[n]["victim_ns"] or 0 for n in names], color=[COLORS.get(n) for n in names])
        for x, n in enumerate(names):
            lo, hi = co[n]["victim_ns_min"], co[n]["victim_ns_max"]
            if lo is not None:
                a.vlines(x, lo, hi, colors="black")
        a.set_xticks(range(len(names)))
        a.set_xticklabels(names)
    a.set_ylabel("victim ns per lookup (median, min-max)")
    a.set_title("co-running: polluter on CPU 0, victim on CPU 1")

    a = ax[1][1]
    bs = [b for b in FOUNDATION if b in fd]
    if bs:
        series = [("wall time", [fd[b].get("ratio_on_vs_off") for b in bs] + [fd.get("geomean_ratio_on_vs_off")], "#d62728"),
                  ("control: off / off", [fd[b].get("ratio_control_vs_off") for b in bs]
                   + [fd.get("geomean_ratio_control_vs_off")], "#7f7f7f"),
                  ("instructions (callgrind)", [fd[b].get("instructions_on_vs_off") for b in bs] + [None], "#1f77b4")]
        series = [(n, [y or 0 for y in ys], c) for n, ys, c in series if any(ys)]
        bw = 0.8 / max(len(series), 1)
        for i, (n, ys, c) in enumerate(series):
            a.bar([x + (i - (len(series) - 1) / 2) * bw for x in range(len(ys))], ys, bw, label=n, color=c)
        a.axhline(1.0, color="black", linewidth=0.8)
        a.axhline(TARGETS["overhead"], color="red", linewidth=0.8, linestyle=":", label=f"target {TARGETS['overhead']}")
        a.set_xticks(range(len(bs) + 1))
        a.set_xticklabels(bs + ["geomean"])
        ys = [y for _, v, _ in series for y in v]
        lo = min([y for y in ys if y] + [0.97])
        hi = max(ys + [1.03])
        a.set_ylim(lo - 0.01, hi + 0.01)
        a.legend(fontsize=8)
    a.set_ylabel("nightwatch=1 / nightwatch=0")
    a.set_title("policy cost on allocation-heavy benchmarks (lower is better)")
    fig.suptitle("NightWatch: victims protected from polluters (bench/nightwatch.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say(f"wrote {os.path.relpath(path, ROOT)}")


def print_tables(wl, ratios, pred, ctx, co, fd, cfg_names):
    say("\nVictim ns per lookup (median over reps of each run's median over frames; neutral: ns per line)")
    say(f"{'workload':<16}" + "".join(f"{c:>20}" for c in cfg_names))
    for w in WORKLOADS + list(ALONE):
        say(f"{w:<16}" + "".join(f"{fmt(wl[w].get(c, {}).get('victim_ns'), '.2f', '-'):>20}" for c in cfg_names))
    say("\nIn-program workload time, s (median)")
    for w in WORKLOADS:
        say(f"{w:<16}" + "".join(f"{fmt(wl[w].get(c, {}).get('total_s'), '.3f', '-'):>20}" for c in cfg_names))
    near = [w for w in WORKLOADS if any(wl[w].get(c, {}).get("near") is not None for c in cfg_names)]
    if near:
        say("\nChunks allocated right next to the one before (pv's near, median)")
        for w in near:
            say(f"{w:<16}" + "".join(f"{fmt(wl[w].get(c, {}).get('near'), '.3f', '-'):>20}" for c in cfg_names))
    say("\nRatios")
    say(f"{'workload':<10}{'on/off speed-up':>17}{'vs glibc':>10}{'vs mimalloc':>13}{'bound off/alone':>17}"
        f"{'gap recovered':>15}{'time on/off':>13}{'monitor/off':>13}")
    for w in WORKLOADS:
        d = ratios[w]
        say(f"{w:<10}{fmt(d['speedup_on_vs_off']):>17}{fmt(d['speedup_on_vs_glibc']):>10}"
            f"{fmt(d['speedup_on_vs_mimalloc']):>13}{fmt(d.get('upper_bound_speedup_off_vs_alone'), '.3f', '-'):>17}"
            f"{fmt(d.get('gap_recovered_vs_off'), '.0%', '-'):>15}{fmt(d['slowdown_total_on_vs_off'], '.4f'):>13}"
            f"{fmt(d['monitor_total_vs_off'], '.4f'):>13}")
    say("\nNightWatch statistics (chromalloc-on: medians; prediction success pooled over reps)")
    say(f"{'workload':<10}{'chunks':>9}{'monitored':>11}{'restrictive':>13} {'pred. default':>18} {'pred. monitor':>18}"
        f"   colour layer: state, restrictive spans coloured/ordinary, worker CPU s")
    for w in WORKLOADS:
        s = wl[w].get("chromalloc-on", {}).get("nightwatch", {}) or {}
        pd, pm = pred[w]["default_run"] or {}, pred[w]["monitor_run"] or {}

        def ps(p):
            return "n/a" if not p or p.get("success") is None else f"{100 * p['success']:.1f}% ({p['hits']}/{p['hits'] + p['misses']})"
        say(f"{w:<10}{fmt(s.get('chunks'), '.0f'):>9}{fmt(s.get('monitored'), '.0f'):>11}"
            f"{fmt(s.get('restrictive'), '.0f'):>13} {ps(pd):>18} {ps(pm):>18}   "
            f"{'/'.join(s.get('colour_states') or ['n/a'])}, {fmt(s.get('restrictive_spans_coloured'), '.0f')}"
            f"/{fmt(s.get('restrictive_spans_ordinary'), '.0f')}, "
            f"{fmt(None if s.get('worker_cpu_ms') is None else s['worker_cpu_ms'] / 1000, '.1f')}")
    reps_on = {w: wl[w].get("chromalloc-on", {}).get("reps") for w in WORKLOADS if wl[w].get("chromalloc-on", {}).get("reps")}
    if reps_on:
        say("\nWhen the policy acted (chromalloc-on, each rep: victim ns of the run / after the frame by which every "
            "context ending restrictive was so, the colour layer ready and every routed class routed)")
        for w, rs in reps_on.items():
            say(f"  {w:<10}" + "   ".join(
                f"{fmt(x['victim_ns'], '.2f')}/" + (f"{fmt(x.get('victim_ns_after'), '.2f')} @{x['acted_frame']}"
                                                    if x.get("acted_frame") is not None else f"never ({x.get('why')})")
                for x in rs))
    for w in WORKLOADS:
        if ctx.get(w):
            shown = [c for c in ctx[w] if c["expected"] or (c.get("chunks") or 0) >= 10]
            say(f"  contexts of {w} (monitor run; functions innermost first, decision, miss rate, chunks;"
                f" {len(ctx[w]) - len(shown)} more of one-off allocations in the JSON):")
            for c in shown:
                where = "<-".join(c["functions"][:3]) or str(c["site"])
                mark = "" if not c["expected"] else "  ok" if c["decision"] == c["expected"] else \
                    f"  (expected {c['expected']})"
                say(f"    {where:<44} {str(c['decision']):<12} {fmt(c.get('miss_rate'), '.2f'):>5} "
                    f"{c.get('chunks')!s:>6}{mark}")
    if co:
        say("\nCo-running (victim on CPU 1, polluter on CPU 0): victim ns per lookup, median [min-max]")
        for n in CORUN_CONFIGS + ["alone"]:
            if n in co:
                c = co[n]
                say(f"  {n:<16}{fmt(c['victim_ns'], '.2f'):>8}  [{fmt(c['victim_ns_min'], '.2f')}-{fmt(c['victim_ns_max'], '.2f')}]"
                    + (f"   polluter {fmt(c['polluter_ns_per_line'], '.2f')} ns/line" if n != "alone" else "")
                    + (f", its memory coloured in {c['polluter_coloured_runs']} of {c['polluter_runs']} runs"
                       if n == "chromalloc-on" else ""))
        r = co["ratios"]
        say(f"  on/off speed-up {fmt(r['speedup_on_vs_off'])}, on vs glibc {fmt(r['speedup_on_vs_glibc'])}, "
            f"glibc co-run / alone {fmt(r['pollution_factor_glibc'])} (the pollution there is to remove)")
    if any("ratio_on_vs_off" in fd.get(b, {}) for b in FOUNDATION):
        say("\nFoundation benchmarks: median wall s, nightwatch=0 / nightwatch=1 / nightwatch=0 again (control) "
            "[min-max]; on / off and control / off: median of per-rep ratios")
        for b in FOUNDATION:
            if "ratio_on_vs_off" in fd.get(b, {}):
                d = fd[b]
                say(f"  {b:<8}" + "".join(
                    f"{fmt(d[c]['median_seconds'], '.3f'):>8} [{fmt(d[c]['min_seconds'], '.3f')}-{fmt(d[c]['max_seconds'], '.3f')}]"
                    for c in ("chromalloc-off", "chromalloc-on", "chromalloc-off-again"))
                    + f"   on/off {fmt(d['ratio_on_vs_off'], '.4f')}   control/off {fmt(d['ratio_control_vs_off'], '.4f')}")
    if any("instructions_on_vs_off" in fd.get(b, {}) for b in FOUNDATION):
        say("\nFoundation benchmarks: instructions (callgrind, median), " + " / ".join(f"{c} {o}" for c, o in INSTR_CONFIGS.items())
            + "; user share: user / (user + sys) CPU time of the wall-time runs with nightwatch=0; monitoring share: "
            "monitor_cost_ns / run_ns of those with nightwatch=1 (medians)")
        for b in FOUNDATION:
            d = fd.get(b, {})
            if "instructions_on_vs_off" in d:
                say(f"  {b:<8}{fmt(d['chromalloc-off-instructions'], ',', 'n/a'):>16}{fmt(d['chromalloc-on-instructions'], ',', 'n/a'):>16}"
                    f"   ratio {fmt(d['instructions_on_vs_off'], '.4f')}   user share {fmt(d['user_share_off'], '.2f')}"
                    f"   monitoring {fmt(d['monitoring_share_on'], '.2%')}"
                    f"   policy cost {fmt(d['policy_cost'], '.2%')}")


def context_check(ctx):
    """Extra: every pv context with a known role decided as expected (monitor runs)."""
    seen = [c for w in WORKLOADS for c in (ctx.get(w) or []) if c["expected"] and c["decision"] != "unknown"]
    if not seen:
        return ("(extra) contexts decided as their role (polluter sites restrictive, others open)", "SKIP",
                "no decided contexts in the statistics")
    wrong = [f"{'<-'.join(c['functions'][:2]) or c['site']} {c['decision']}" for c in seen
             if c["decision"] != c["expected"]]
    return ("(extra) contexts decided as their role (polluter sites restrictive, others open)",
            "FAIL" if wrong else "PASS", f"{len(seen) - len(wrong)}/{len(seen)} right" + (": wrong " + "; ".join(wrong) if wrong else ""))


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, help="repetitions (default 5; --quick 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 rep, short workloads")
    ap.add_argument("--chromalloc", help="the cache runtime to measure (default build/libchromalloc-colour.so)")
    ap.add_argument("--only", help="comma-separated workloads (default: " + ",".join(WORKLOADS) + ")")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: corun, foundation, instructions, mimalloc")
    ap.add_argument("--corun-seconds", type=float, help="victim duration in the co-running runs (default 2)")
    ap.add_argument("--settle", type=float, default=20.0,
                    help="at most this many seconds each NightWatch run waits after its first 20 frames "
                         "(pv --settle-ms) until chromalloc's colour worker has stocked restrictive pages "
                         "(default 20; 0: no wait)")
    ap.add_argument("--profile", action="store_true",
                    help="first measure the machine's colours (chromalloc calibrate, into the results "
                         "directory) and give every chromalloc run that profile, as a deployment would; "
                         "without it each run measures what it needs at start-up")
    ap.add_argument("--out", help="results directory (default bench/results)")
    args = ap.parse_args()
    global RESULTS
    if args.out:
        RESULTS = Path(args.out).resolve()
    reps = args.reps or (1 if args.quick else 5)
    skip = {s for s in args.skip.split(",") if s}
    only = args.only.split(",") if args.only else list(WORKLOADS)
    if reps < 1 or skip - {"corun", "foundation", "instructions", "mimalloc"} or args.settle < 0 or set(only) - set(WORKLOADS):
        ap.error(f"--reps must be >= 1; --skip takes corun, foundation, instructions, mimalloc; --only takes {', '.join(WORKLOADS)}")
    WORKLOADS[:] = [w for w in WORKLOADS if w in only]
    for a in [a for a, w in ALONE.items() if w not in only]:
        del ALONE[a]
    t_start = time.monotonic()
    for k in OWN_ENV:                          # run.py's launcher passes the environment on
        os.environ.pop(k, None)
    cc = os.environ.get("CC", "cc")
    try:
        br = load_runpy()
    except Exception as e:                     # noqa: BLE001 - anything there is a build error here
        say(f"cannot load bench/run.py: {e}")
        return 2
    br.RESULTS = RESULTS
    shutil.rmtree(RESULTS / "nightwatch-stats", ignore_errors=True)   # this run's only (keep_stats)
    br.BUILD = BUILD                           # run.py's programs, built into our own directory
    br.build(cc)                               # the foundation programs, launch and probe
    build_pv(cc)

    src = Path(args.chromalloc).resolve() if args.chromalloc else LIB
    table = config_table(src)
    lib_info = None
    if src.exists():
        snap, sha = snapshot_library(src)
        lib_info = {"path": str(src), "sha256": sha, "measured_copy": str(snap)}
        for c in table.values():
            if c.name.startswith("chromalloc"):
                c.preload = str(snap)
    else:
        loud(f"{src} does not exist (make lib): chromalloc configurations skipped")
    if "mimalloc" in skip:
        table.pop("mimalloc")
    profile = None
    os.environ.pop("CHROMALLOC_PROFILE", None)
    if args.profile and lib_info:
        profile = BUILD / "machine-profile.json"
        r = subprocess.run([sys.executable, str(ROOT / "tools" / "chromalloc"), "calibrate", "--lib", lib_info["measured_copy"],
                            "--out", str(profile)], capture_output=True, text=True, timeout=900)
        say(r.stdout.strip())
        if r.returncode != 0 or not profile.exists():
            loud(f"chromalloc calibrate failed ({r.returncode}): runs measure at start-up instead")
            profile = None
        else:
            os.environ["CHROMALLOC_PROFILE"] = str(profile)   # inherited by every run
    usable = {}
    for name, c in table.items():
        if c.preload is None:
            usable[name] = c
            continue
        if not Path(c.preload).exists():
            if c.package:
                say(f"{name}: {c.preload} missing; installing {c.package} with apt-get")
                if not br.apt_install(c.package) or not Path(c.preload).exists():
                    loud(f"WARNING: could not install {c.package}; skipping {name}")
                    continue
            else:
                continue
        why = br.check_preload(br.Allocator(name, c.preload))
        if why:
            loud(f"ERROR: {name} cannot be used: {why}; skipped")
            continue
        usable[name] = c
    cfg_names = [n for n in CONFIGS if n in usable]
    say(f"configurations: {', '.join(cfg_names)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    for old in list((RESULTS / "logs").glob("nightwatch-*.log")) + \
            [p for b in FOUNDATION for p in (RESULTS / "logs").glob(f"{b}-chromalloc-o[nf]*-rep*.log")]:
        old.unlink()                           # this script's logs of an earlier run

    runs = workloads_experiment(br, [usable[n] for n in cfg_names], reps, args.quick, int(args.settle * 1000))
    corun = []
    if "corun" not in skip:
        secs = args.corun_seconds or (1.0 if args.quick else 2.0)
        corun = corun_experiment(br, usable, reps, secs, int(args.settle * 1000))
    found = []
    if "foundation" not in skip and lib_info:
        with tempfile.TemporaryDirectory(prefix="nightwatch-") as tmp:
            found = foundation_experiment(br, Path(lib_info["measured_copy"]), FOUNDATION_REPS * reps, Path(tmp))
    instr = []
    if "instructions" not in skip and lib_info:
        instr = instructions_experiment(br, Path(lib_info["measured_copy"]), reps)
    elapsed = time.monotonic() - t_start

    all_runs = runs + corun + found + instr
    wl, ratios, pred, ctx, ctx_default, co, fd = summarise(runs, corun, found, instr, cfg_names)
    tg = targets(wl, ratios, fd, bool(found), bool(instr), runs) + [context_check(ctx)]
    if lib_info:
        lib_info["changed_during_run"] = (hashlib.sha256(src.read_bytes()).hexdigest() != lib_info["sha256"]
                                          if src.exists() else True)
    nw_present = any(r.nw for r in runs)
    option_unknown = any(r.option_unknown for r in runs)
    write_csv(RESULTS / "nightwatch.csv", all_runs)
    try:
        meta = br.machine_info([br.Allocator(n, c.preload, c.env) for n, c in usable.items()],
                               br.allocator_table(src), cc)
    except Exception as e:                     # noqa: BLE001 - the description is optional
        meta = {"error": str(e)}
    doc = {"machine": meta, "library": lib_info, "reps": reps, "quick": args.quick, "settle_seconds": args.settle,
           "machine_profile": str(profile) if profile else None,
           "elapsed_seconds": round(elapsed, 1), "configs": {n: {"preload": c.preload, "env": c.env}
                                                             for n, c in usable.items()},
           "nightwatch_stats_present": nw_present, "nightwatch_option_unknown": option_unknown,
           "workloads": wl, "ratios": ratios, "prediction": pred,
           "contexts_monitor_run": ctx, "contexts_default_run": ctx_default,
           "corun": co, "foundation": fd,
           "targets": [{"target": a, "status": b, "detail": c} for a, b, c in tg],
           "failed_runs": sum(not r.ok for r in all_runs), "command": shlex.join([sys.executable] + sys.argv)}
    with open(RESULTS / "nightwatch_summary.json", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    say(f"wrote {os.path.relpath(RESULTS / 'nightwatch.csv', ROOT)}, "
        f"{os.path.relpath(RESULTS / 'nightwatch_summary.json', ROOT)}")
    plot(RESULTS / "nightwatch.png", wl, ratios, co, fd, cfg_names)

    print_tables(wl, ratios, pred, ctx, co, fd, cfg_names)
    if not nw_present and any(n.startswith("chromalloc") for n in cfg_names):
        loud("the library writes no \"nightwatch\" statistics: prediction and contexts are n/a"
             + ("; it does not know the option 'nightwatch' either, so on = off" if option_unknown else ""))
    idle = [w for w in POLLUTED if (wl.get(w, {}).get("chromalloc-on", {}).get("nightwatch") or {}).get("restrictive")
            and not (wl[w]["chromalloc-on"]["nightwatch"].get("restrictive_spans_coloured") or 0)]
    if idle:
        loud(f"{', '.join(idle)}: chunks were predicted restrictive but their spans got ordinary memory "
             f"(colour layer not ready: {', '.join(wl[idle[0]]['chromalloc-on']['nightwatch'].get('colour_states') or ['?'])}"
             "): the policy cannot have changed placement there"
             + (f", even after {args.settle:g} s of idle time (--settle)" if args.settle else " (see --settle)"))
    if lib_info and lib_info["changed_during_run"]:
        say(f"note: {src} changed during the run; the copy taken at start was measured")
    say("\nTargets (NightWatch; reported, not enforced):")
    for a, b, c in tg:
        say(f"  {b:<4}  {a}: {c}")
    failed = sum(not r.ok for r in all_runs)
    say(f"\nnightwatch: {len(all_runs)} runs in {elapsed:.0f} s, {failed} failed")
    if failed:
        loud("some runs FAILED (see above, the ok column of nightwatch.csv and bench/results/logs/)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
