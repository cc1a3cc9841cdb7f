#!/usr/bin/env python3
"""The test suite's runner (`make test` calls it once the test programs are built).

Every test is one program run with an environment of its own:
  - HOME, XDG_CACHE_HOME, TMPDIR, CHROMALLOC_PROFILE and CHROMALLOC_SETS point into
    build/tests/work/NAME, so no test reads or writes the user's home, cache directory, machine
    profile or set file (nor another test's);
  - CHROMALLOC_MACHINE describes the machine (cachemodel.c): the colour layer then simulates
    that machine's L2 instead of timing this host's, so the outcome of a test never depends on
    this host's timing; a test that measures the real machine belongs to `make check-machine`.
Tests whose logic depends on the cache geometry run once per geometry of GEOMETRIES (and the
quick geometry check on every L2 x L1d x index combination).

Exit status 77 means "not run here" (the log's last line says why).  The last line printed is
"N passed, N failed" (", N skipped" when any were), counting test programs; the status is 1
when any failed.

  python3 tests/run.py [--jobs N] [--list] [NAME_SUBSTRING ...]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# L2s seen on the machines chromalloc runs on (AMD Zen 3, Zen 4, Zen 5; Intel server, client).
GEOMETRIES = [
    ("zen3", "l2=512K/8,l3=32M/16"),       # 16 colours
    ("zen4", "l2=1M/8,l3=32M/16"),         # 32 colours
    ("zen5", "l2=1M/16,l3=32M/16"),        # 16 colours
    ("xeon", "l2=2M/16,l3=60M/15"),        # 32 colours
    ("client", "l2=1280K/10,l3=24M/12"),   # 32 colours
]
L1DS = [("l1d32", "l1d=32K/8"), ("l1d48", "l1d=48K/12")]
INDEXES = ["linear", "hashed"]


def machine(geometry, l1d, index):
    g = dict(GEOMETRIES)[geometry]
    return "%s,%s,index=%s" % (dict(L1DS)[l1d], g, index)


# the machine of tests that do not depend on the geometry
DEFAULT = machine("zen4", "l1d32", "hashed")


class Test:
    def __init__(self, name, cmd, env=None, described=DEFAULT, timeout=300):
        self.name, self.cmd, self.env, self.described, self.timeout = name, cmd, env or {}, described, timeout


def suite(build):
    b = os.path.join(build, "tests")
    so = os.path.join(build, "libchromalloc.so")              # the allocator alone
    cso = os.path.join(build, "libchromalloc-colour.so")      # the cache runtime
    lean, colour = {"LD_PRELOAD": so}, {"LD_PRELOAD": cso}
    tests = []
    add = lambda *a, **k: tests.append(Test(*a, **k))
    exe = lambda t, how: os.path.join(b, "test_%s-%s" % (t, how))
    # the allocator's tests: linked (shared, static) and preloaded, then preloaded under the
    # cache runtime (the same allocator, with NightWatch on)
    for t in ["api", "stress", "fork", "threads", "enomem", "invalid_free", "rss", "lean"]:
        add("%s-shared" % t, [exe(t, "shared")])
        add("%s-static" % t, [exe(t, "static")])
        add("%s-preload" % t, [exe(t, "plain")], lean)
        if t != "lean":
            add("%s-colour" % t, [exe(t, "plain")], colour)
    # C++'s operator new and delete: the library's, linked, preloaded, and in the cache runtime
    add("new-shared", [exe("new", "shared")])
    add("new-static", [exe("new", "static")])
    add("new-preload", [exe("new", "plain")], lean)
    add("new-colour", [exe("new", "plain")], colour)
    # the cache runtime's: linked (shared, static) and preloaded
    for t in ["colour_api", "monitor"]:
        add("%s-shared" % t, [exe(t, "cshared")])
        add("%s-static" % t, [exe(t, "cstatic")])
        add("%s-preload" % t, [exe(t, "plain")], colour)
    for t in ["hooks", "colour", "colour_start", "nightwatch", "small", "pmu", "protect", "purge", "move"]:
        add(t, [exe(t, "internal")])
    # hot pages: found and spread over the colours (the layer from the start: hot_fit=0), within
    # a move budget of 8 a period
    add("hot", [exe("hot", "internal")], {"CHROMALLOC_OPTIONS": "hot=1,hot_budget=8,hot_fit=0"})
    # ... and no colour layer for a hot set random frames fit, one for a set near the L2's size
    add("hot-fit", [exe("hot", "internal"), "fit"], {"CHROMALLOC_OPTIONS": "hot=1,hot_delay=0,hot_period=20"})
    # ... the ranges threads note, with no worker to apply them
    add("hot-ranges", [exe("hot", "internal"), "ranges"], {"CHROMALLOC_OPTIONS": "hot=1,hot_delay=3600000"})
    add("partition", [exe("partition", "internal")])
    # ROCS: the search's pieces, then its loop on a scripted stream (gain: confined; loss: given
    # back; fixed: half the stack confined without a search)
    rocs = "rocs=1,nightwatch=0,hot_delay=0,hot_period=20,hot_overhead=100,rocs_profile=20,rocs_step=3,rocs_steps=4"
    add("rocs-gain", [exe("rocs", "internal"), "gain"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-loss", [exe("rocs", "internal"), "loss"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-lap", [exe("rocs", "internal"), "lap"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-unscored", [exe("rocs", "internal"), "unscored"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-recheck", [exe("rocs", "internal"), "recheck"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-burst", [exe("rocs", "internal"), "burst"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-alone", [exe("rocs", "internal"), "alone"], {"CHROMALLOC_OPTIONS": rocs})
    add("rocs-fixed", [exe("rocs", "internal"), "fixed"], {"CHROMALLOC_OPTIONS": rocs + ",rocs_fixed=50"})
    # a stream the L3 holds: confined where the buffer's share of the L3 holds it too, else left
    add("rocs-l3", [exe("rocs", "internal"), "l3"], {"CHROMALLOC_OPTIONS": rocs},
        described="l1d=48K/12,l2=2M/16,l3=256M/16,index=hashed")
    add("rocs-l3small", [exe("rocs", "internal"), "l3small"], {"CHROMALLOC_OPTIONS": rocs})
    # ... and with NightWatch on beside it (its slice holds the buffer's colours): the same outcome
    add("rocs-nightwatch", [exe("rocs", "internal"), "gain"], {"CHROMALLOC_OPTIONS": rocs.replace("nightwatch=0,", "")})
    # lock sets: what a thread allocates under a lock is spread over the colours (preloaded and
    # linked; a static link keeps glibc's own lock calls); off, nothing is
    ls = "locksets=1,hot_delay=0,hot_partition=0"
    add("locksets-preload", [exe("locksets", "plain")], dict(colour, CHROMALLOC_OPTIONS=ls + ",lockset_nest=0"))
    add("locksets-shared", [exe("locksets", "cshared")], {"CHROMALLOC_OPTIONS": ls + ",lockset_nest=0"})
    add("locksets-nested", [exe("locksets", "plain"), "nested"], dict(colour, CHROMALLOC_OPTIONS=ls + ",lockset_nest=2,hot_period=20"))
    add("locksets-off", [exe("locksets", "plain"), "off"], dict(colour, CHROMALLOC_OPTIONS="locksets=0"))

    # live page moves each way: mremap by option, and when seccomp denies userfaultfd
    add("move-mremap", [exe("move", "internal"), "mremap"], {"CHROMALLOC_OPTIONS": "colour_moves=mremap"})
    add("move-seccomp", [exe("move", "internal"), "seccomp"])
    # the layers hold at link time
    add("lean-symbols", ["sh", os.path.join(ROOT, "tests/unit/lean_symbols.sh"), so])
    add("core-alone", [os.path.join(b, "core-alone")])
    add("core-calls", ["sh", os.path.join(ROOT, "tests/unit/core_calls.sh"), build])
    # geometry: the quick check on every combination, the tests whose logic depends on it on
    # every L2 (the L1d and the index alternating)
    for g, _ in GEOMETRIES:
        for l1d, _ in L1DS:
            for ix in INDEXES:
                add("geometry-%s-%s-%s" % (g, l1d, ix), [exe("geometry", "internal")], described=machine(g, l1d, ix))
    for k, (g, _) in enumerate(GEOMETRIES):
        m = machine(g, L1DS[k % 2][0], INDEXES[(k // 2) % 2])
        if g == "zen4":
            continue                        # the default machine: run above
        add("api-%s" % g, [exe("api", "plain")], lean, described=m)
        add("colour_api-%s" % g, [exe("colour_api", "plain")], colour, described=m)
        add("monitor-%s" % g, [exe("monitor", "plain")], colour, described=m)
        for t in ["colour_start", "nightwatch", "small", "protect"]:
            add("%s-%s" % (t, g), [exe(t, "internal")], described=m)
    # colours from frame numbers: where frames are the colour's (bare metal), where they say
    # nothing (a VM's host pages), where they cannot be read (not root)
    zl = machine("zen4", "l1d32", "linear")
    add("frames-on", [exe("frames", "internal"), "on"], described=zl + ",frames=1")
    add("frames-disagree", [exe("frames", "internal"), "disagree"], described=DEFAULT + ",frames=1")
    add("frames-hidden", [exe("frames", "internal"), "hidden"], described=zl)
    # the colour layer unavailable: by option, or by a machine profile that says so
    add("colour_api-mremap", [exe("colour_api", "plain")], dict(colour, CHROMALLOC_OPTIONS="colour_moves=mremap"))
    add("colour-off-option", [exe("colour_api", "plain"), "disabled"], dict(colour, CHROMALLOC_OPTIONS="colours=0"))
    # the worker started and waiting for hot pages' delay: the program's signals are not its
    add("colour_api-signals", [exe("colour_api", "plain"), "signals"], dict(colour, CHROMALLOC_OPTIONS="hot=1,hot_delay=5000"))
    add("colour-off-profile", ["sh", os.path.join(ROOT, "tests/unit/colour_off_profile.sh"), b, cso])
    # colour_worker: the worker keeps within its share of a CPU while it stocks a big pool
    add("colour-pace", ["sh", os.path.join(ROOT, "tests/unit/colour_pace.sh"), b, cso],
        described=machine("zen3", "l1d32", "hashed") + ",probe_us=10")
    add("colour-audit", ["sh", os.path.join(ROOT, "tests/unit/colour_audit.sh"), b, cso])
    # nightwatch_delay: a polluter before it leaves the colour layer off
    add("delay-off", [exe("monitor", "plain"), "delay-off"],
        dict(colour, CHROMALLOC_OPTIONS="nightwatch=1,nightwatch_monitor=1,nightwatch_delay=3600000"))
    add("delay-on", [exe("monitor", "plain"), "delay-on"],
        dict(colour, CHROMALLOC_OPTIONS="nightwatch=1,nightwatch_monitor=1,nightwatch_delay=0"))
    # the profile: where it is read from, and never the user's
    add("profile", [exe("profile", "internal")])
    add("profile-isolation", ["sh", os.path.join(ROOT, "tests/unit/profile_isolation.sh"), b])
    # the stress tests under options that change the slow paths
    for k, o in enumerate(["segment_cache=0,purge_delay=0", "purge_delay=-1,colour=0", "layout=ciu,thp=1"]):
        for t in ["stress", "threads", "fork"]:
            add("%s-options%d" % (t, k + 1), [exe(t, "plain")], dict(lean, CHROMALLOC_OPTIONS=o))
    # real programs: the allocator alone (statistics written), the cache runtime, the cache
    # runtime with NightWatch monitoring every chunk, and with hot pages sampling from the start
    # (traps and write protection; quiet while glibc runs with every signal blocked: docs/hot.md)
    run_sh = os.path.join(ROOT, "tests/programs/run.sh")
    for p in ["python3", "sqlite3", "git", "cc", "xz", "kbuf", "cxx"]:
        add("program-%s" % p, ["bash", run_sh, so, p], {"CHROMALLOC_CHECK_STATS": "1", "BUILD_DIR": b})
        add("program-%s-colour" % p, ["bash", run_sh, cso, p], {"BUILD_DIR": b})
        add("program-%s-monitored" % p, ["bash", run_sh, cso, p],
            {"CHROMALLOC_OPTIONS": "nightwatch=1,nightwatch_monitor=1", "BUILD_DIR": b})
        add("program-%s-hot" % p, ["bash", run_sh, cso, p], {"CHROMALLOC_OPTIONS": "hot=1,hot_delay=0", "BUILD_DIR": b})
    # monitored again with the runtime built without tail calls (tests.mk): glibc's own buffers
    # (getcwd's) must still read as glibc's, never sampled
    add("program-monitored-nosibcall", ["bash", run_sh, os.path.join(build, "nosib", "libchromalloc-colour.so"), "git", "kbuf"],
        {"CHROMALLOC_OPTIONS": "nightwatch=1,nightwatch_monitor=1", "BUILD_DIR": b})
    add("install", ["bash", os.path.join(ROOT, "tests/install/run.sh")])
    add("report", ["bash", os.path.join(ROOT, "tests/tools/report.sh")])
    add("docs", ["sh", "-c", "%s options --markdown --lib %s | diff -u %s -" %
                 (os.path.join(ROOT, "tools/chromalloc"), cso, os.path.join(ROOT, "docs/options.md"))])
    return tests


def environment(t, build):
    work = os.path.join(build, "tests", "work", t.name)
    shutil.rmtree(work, ignore_errors=True)
    for d in ("home", "cache", "tmp"):
        os.makedirs(os.path.join(work, d))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHROMALLOC_") and k != "LD_PRELOAD"}
    env.update(HOME=os.path.join(work, "home"), XDG_CACHE_HOME=os.path.join(work, "cache"),
               TMPDIR=os.path.join(work, "tmp"), CHROMALLOC_PROFILE=os.path.join(work, "profile.json"),
               CHROMALLOC_SETS=os.path.join(work, "sets"), TEST_WORK=work)
    if t.described:
        env["CHROMALLOC_MACHINE"] = t.described
    env.update(t.env)
    return env


def run(t, build):
    log = os.path.join(build, "tests", "logs", t.name + ".log")
    start = time.monotonic()
    with open(log, "w") as out:
        if t.described:
            out.write("CHROMALLOC_MACHINE=%s\n" % t.described)
        out.write("$ %s\n" % " ".join(t.cmd))
        out.flush()
        try:
            rc = subprocess.run(t.cmd, env=environment(t, build), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, timeout=t.timeout, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout after %d s" % t.timeout
        except OSError as e:
            rc = "cannot run: %s" % e
    return t, rc, time.monotonic() - start, log


def tail(path, n):
    with open(path, errors="replace") as f:
        return f.read().splitlines()[-n:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    tests = [t for t in suite(build) if not a.names or any(n in t.name for n in a.names)]
    if a.list:
        for t in tests:
            print(t.name)
        return 0
    os.makedirs(os.path.join(build, "tests", "logs"), exist_ok=True)
    passed, failed, skipped = [], [], []
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        for t, rc, secs, log in pool.map(lambda t: run(t, build), tests):
            if rc == 0:
                passed.append(t.name)
                print("PASS %s (%.1f s)" % (t.name, secs), flush=True)
            elif rc == 77:
                skipped.append(t.name)
                print("SKIP %s: %s" % (t.name, (tail(log, 1) or ["?"])[0]), flush=True)
            else:
                failed.append(t.name)
                print("FAIL %s (%s, %.1f s; log %s)" % (t.name, "exit %d" % rc if isinstance(rc, int) else rc, secs,
                                                          os.path.relpath(log, ROOT)), flush=True)
                for line in tail(log, 25):
                    print("    " + line)
    if failed:
        print("failed: " + " ".join(failed))
    print("%d passed, %d failed%s" % (len(passed), len(failed), ", %d skipped" % len(skipped) if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
