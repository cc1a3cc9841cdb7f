#!/usr/bin/env python3
"""chromalloc colour-layer benchmarks (chromalloc only: they measure its colour layer).

  python3 bench/colour.py [--reps 5] [--victims 256,384,512] [--out DIR]

  pollute    a victim chasing its working set while a polluter streams twice the L2 (at least
             1 MiB; 4 MiB with a 2 MiB L2, so that it evicts everything it can): victim ns/access
             alone, with the polluter in ordinary memory, confined to 1/8 of the L2 colours by
             chromalloc, and confined by naive address-bit colours; the victim in ordinary
             memory (the first coloured allocation from the polluter's slice reserves it, and
             the colour layer moves the victim's pages there to the other 7/8), in the other 7/8
             of the colours, and in ordinary memory with nothing reserved (colour_reserve=0).
             Target: confinement recovers >= 80% of the gap between "ordinary" and "alone".
  calibrate  `chromalloc_calibrate` several times: colours found, time to classify a page
             against 1/8 of the colours (target <= 40 us), time to stock 4 MiB of 1/8-of-L2
             pages (target <= 2 s), agreement of two independent calibrations (target >= 98%),
             unclassified pages.
  recolour   cost of moving a live page to another colour while a thread writes to it, each way
             the colour layer can move pages (colour_moves=auto: UFFDIO_MOVE where the kernel
             offers it; colour_moves=mremap), interleaved, and the mappings the moves added.
             `--only recolour` runs this alone.

Writes colour.csv (every run), colour_summary.json and colour.png to bench/results/.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from run import say, median  # bench/run.py, this directory

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "bench"
LIB = ROOT / "build" / "libchromalloc-colour.so"
CONFIGS = ["alone", "ordinary", "coloured", "naive"]
VICTIM_MEMORY = ["ordinary", "other7/8", "unreserved"]


def build(cc):
    BUILD.mkdir(parents=True, exist_ok=True)
    for prog in ("pollute", "recolour", "confine", "sweep", "l3share"):   # confine, sweep, l3share: tools for docs, not run here
        cmd = [cc, "-O2", "-std=gnu11", "-pthread", "-Wall", "-Wextra", f"-I{ROOT / 'include'}",
               "-o", str(BUILD / prog), str(ROOT / "bench" / "colour" / f"{prog}.c"),
               f"-L{LIB.parent}", f"-Wl,-rpath,{LIB.parent}", "-lchromalloc-colour"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"build failed: {' '.join(cmd)}\n{r.stderr}")


def run(argv, timeout=300, env=None):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                       env=None if env is None else dict(os.environ, **env))
    if r.returncode != 0 or "RESULT" not in r.stdout:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def l2_kib():
    """the L2's size from sysfs (512 KiB when it cannot be read)"""
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if (d / "level").read_text().strip() == "2":
                return int((d / "size").read_text().strip().rstrip("K"))
        except (OSError, ValueError):
            pass
    return 512


def pollute(victims, reps):
    """Returns the rows, the summary per victim and the runs that failed (they are left out)."""
    rows, failures = [], []
    polluter = max(1024, 2 * l2_kib())
    say(f"  polluter streams {polluter} KiB (twice the L2)")
    for rep in range(reps):
        for v in victims:
            try:
                # the colour layer alone: NightWatch would monitor the victim (page traps) and
                # keep it from protection until its verdict
                out = run([BUILD / "pollute", str(v), str(polluter)], env={"CHROMALLOC_OPTIONS": "nightwatch=0"})
                out += run([BUILD / "pollute", str(v), str(polluter), "300", "ordinary"],
                           env={"CHROMALLOC_OPTIONS": "nightwatch=0,colour_reserve=0"})
            except (RuntimeError, subprocess.TimeoutExpired) as e:      # reported, not fatal
                say(f"  !! pollute rep {rep + 1}/{reps} victim {v} KiB FAILED: {e}")
                failures.append({"rep": rep, "victim_kib": v, "error": str(e)})
                continue
            colours = next((int(l.split()[1]) for l in out.splitlines() if l.startswith("COLOURS")), None)
            for line in out.splitlines():
                if line.startswith("POLLUTE"):
                    _, kib, cfg, mem, ns = line.split()
                    rows.append({"rep": rep, "victim_kib": int(kib), "config": cfg, "victim_memory": mem,
                                 "ns_per_access": float(ns), "colours": colours})
            say(f"  pollute rep {rep + 1}/{reps} victim {v} KiB done")
    summary = {}
    for v in victims:
        for mem in VICTIM_MEMORY:
            med = {c: median([r["ns_per_access"] for r in rows
                              if r["victim_kib"] == v and r["victim_memory"] == mem and r["config"] == c])
                   for c in CONFIGS}
            if None in med.values():
                continue                                               # every run of it failed
            gap = med["ordinary"] - med["alone"]
            rec = {c: (med["ordinary"] - med[c]) / gap if gap > 0 else None for c in ("coloured", "naive")}
            summary[f"{v}KiB/{mem}"] = {"median_ns": med, "recovery": rec, "gap_ns": gap}
    return rows, summary, failures


def calibrate(reps):
    runs = []
    for rep in range(reps):
        code = ("import ctypes,sys; l=ctypes.CDLL(sys.argv[1]); b=ctypes.create_string_buffer(16384);"
                "l.chromalloc_calibrate(None, 2|4, b, 16384); print(b.value.decode())")
        out = subprocess.run([sys.executable, "-c", code, str(LIB)], capture_output=True, text=True, timeout=600)
        runs.append(json.loads(out.stdout))
        say(f"  calibrate rep {rep + 1}/{reps}: {runs[-1]['colours']} colours, agreement {runs[-1]['agreement']}")
    keys = ["colours", "classify_restricted_us", "classify_all_us", "pool_4mib_s", "agreement",
            "unclassified", "discover_s", "set_build_ms", "seconds"]
    return runs, {k: statistics.median(r[k] for r in runs) for k in keys}


MOVES = ["auto", "mremap"]


def recolour(reps):
    """Returns the runs, the medians by way of moving (and the mappings the moves added) and the
    runs that failed (reported, not fatal)."""
    runs, failures = [], []
    for rep in range(reps):
        for way in (MOVES if rep % 2 == 0 else MOVES[::-1]):
            try:
                out = run([BUILD / "recolour"], env={"CHROMALLOC_OPTIONS": f"colour_moves={way}"})
                line = next(l for l in out.splitlines() if l.startswith("RECOLOUR"))
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                say(f"  !! recolour rep {rep + 1}/{reps} ({way}) FAILED: {e}")
                failures.append({"rep": rep, "moves": way, "error": str(e)})
                continue
            _, pages, med, p90, maps = line.split()
            runs.append({"moves": way, "pages": int(pages), "us_median": float(med), "us_p90": float(p90),
                         "mappings_added": int(maps)})
            say(f"  recolour rep {rep + 1}/{reps} {way}: {pages} pages, {med} us median, {p90} us p90, {maps} mappings added")
    med = {}
    for way in MOVES:
        r = [x for x in runs if x["moves"] == way]
        med[way] = {"us_per_page_median": statistics.median(x["us_median"] for x in r) if r else None,
                    "us_per_page_range": [min(x["us_median"] for x in r), max(x["us_median"] for x in r)] if r else None,
                    "mappings_added_median": statistics.median(x["mappings_added"] for x in r) if r else None}
    med["us_per_page_median"] = med["auto"]["us_per_page_median"]
    return runs, med, failures


def plot(summary, victims, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib not available: colour.png not written")
        return
    fig, axes = plt.subplots(1, len(VICTIM_MEMORY), figsize=(17, 4.5), sharey=False)
    colors = {"alone": "#2ca02c", "ordinary": "#d62728", "coloured": "#1f77b4", "naive": "#ff7f0e"}
    for ax, mem in zip(axes, VICTIM_MEMORY):
        width = 0.2
        for i, c in enumerate(CONFIGS):
            ys = [summary[f"{v}KiB/{mem}"]["median_ns"][c] if f"{v}KiB/{mem}" in summary else 0
                  for v in victims]
            ax.bar([x + i * width for x in range(len(victims))], ys, width, label=c, color=colors[c])
        ax.set_xticks([x + 1.5 * width for x in range(len(victims))])
        ax.set_xticklabels([f"{v} KiB" for v in victims])
        ax.set_title(f"victim in {mem} memory" if mem != "unreserved" else "victim in ordinary memory, nothing reserved")
        ax.set_ylabel("victim ns per access (median)")
        ax.legend(fontsize=8)
    fig.suptitle("polluter streaming twice the L2: alone / ordinary / confined to 1/8 of L2 by chromalloc / naive address bits")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    say(f"wrote {os.path.relpath(path, ROOT)}")


def say_recolour(rec):
    for way in MOVES:
        m = rec[way]
        if m["us_per_page_median"] is None:
            say(f"Recolouring (colour_moves={way}): every run failed")
        else:
            lo, hi = m["us_per_page_range"]
            say(f"Recolouring (colour_moves={way}): {m['us_per_page_median']:.1f} us per page (median of runs, "
                f"{lo:.1f}-{hi:.1f}), {m['mappings_added_median']:.0f} mappings added")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--victims", default="256,384,512")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--only", choices=["recolour"], help="run one benchmark alone")
    args = ap.parse_args()
    if not LIB.exists():
        sys.exit("build the library first (make)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    victims = [int(v) for v in args.victims.split(",")]
    build(os.environ.get("CC", "cc"))
    if args.only == "recolour":
        say("== recolouring")
        rec_runs, rec, rec_failures = recolour(args.reps)
        with open(out / "colour_recolour.json", "w") as f:
            json.dump({"median": rec, "runs": rec_runs, "failures": rec_failures, "command": " ".join(sys.argv)}, f, indent=1)
        say_recolour(rec)
        return
    say("== calibration")
    cal_runs, cal = calibrate(max(3, args.reps // 2))
    say("== polluter / victim")
    rows, pol, pol_failures = pollute(victims, args.reps)
    say("== recolouring")
    rec_runs, rec, rec_failures = recolour(3)
    with open(out / "colour.csv", "w") as f:
        f.write("rep,victim_kib,config,victim_memory,ns_per_access,colours\n")
        for r in rows:
            f.write(f"{r['rep']},{r['victim_kib']},{r['config']},{r['victim_memory']},{r['ns_per_access']},{r['colours']}\n")
    targets = [
        {"target": "classify a page against 1/8 of the colours <= 40 us", "value": cal["classify_restricted_us"],
         "status": "PASS" if cal["classify_restricted_us"] <= 40 else "FAIL"},
        {"target": "4 MiB pool of 1/8-of-L2 pages <= 2 s", "value": cal["pool_4mib_s"],
         "status": "PASS" if 0 < cal["pool_4mib_s"] <= 2 else "FAIL"},
        {"target": "two independent calibrations agree on >= 98% of classified pages", "value": cal["agreement"],
         "status": "PASS" if cal["agreement"] >= 0.98 else "FAIL"},
    ]
    if pol_failures:
        targets.append({"target": "every polluter/victim run completes", "value": f"{len(pol_failures)} failed",
                        "status": "FAIL"})
    if rec_failures:
        targets.append({"target": "every recolouring run completes", "value": f"{len(rec_failures)} failed",
                        "status": "FAIL"})
    for key, s in pol.items():
        r = s["recovery"]["coloured"]
        targets.append({"target": f"confined polluter recovers >= 80% of the gap ({key} victim)", "value": r,
                        "status": "PASS" if r is not None and r >= 0.8 else "FAIL"})
    doc = {"calibration": {"median": cal, "runs": cal_runs}, "pollute": pol, "pollute_failures": pol_failures,
           "recolour": {"median": rec, "runs": rec_runs, "failures": rec_failures}, "targets": targets,
           "command": " ".join(sys.argv)}
    with open(out / "colour_summary.json", "w") as f:
        json.dump(doc, f, indent=1)
    plot(pol, victims, out / "colour.png")
    say("\nPolluter/victim: median victim ns per access")
    say(f"{'victim':>16} {'alone':>8} {'ordinary':>9} {'coloured':>9} {'naive':>8} {'recovered':>10} {'naive rec.':>10}")
    for key, s in pol.items():
        m, r = s["median_ns"], s["recovery"]
        fr = lambda x: "-" if x is None else f"{100 * x:.0f}%"
        say(f"{key:>16} {m['alone']:8.2f} {m['ordinary']:9.2f} {m['coloured']:9.2f} {m['naive']:8.2f} "
            f"{fr(r['coloured']):>10} {fr(r['naive']):>10}")
    say(f"\nCalibration (median of {len(cal_runs)}): {cal['colours']} colours, classify {cal['classify_restricted_us']:.1f} us "
        f"(1/8) / {cal['classify_all_us']:.1f} us (all), 4 MiB pool {cal['pool_4mib_s']:.2f} s, agreement "
        f"{100 * cal['agreement']:.1f}%, unclassified {100 * cal['unclassified']:.1f}%, {cal['seconds']:.1f} s in all")
    say_recolour(rec)
    say("\nTargets (colour; reported, not enforced):")
    for t in targets:
        say(f"  {t['status']:4}  {t['target']}: {t['value']}")


if __name__ == "__main__":
    main()
