#!/usr/bin/env python3
"""`make check-machine`: the checks that measure the machine at hand rather than a described
one.  Each runs in its own home and profile location (as in tests/run.py), with no
CHROMALLOC_MACHINE, so the colour layer times this host's L2.  A check whose measurement this
host cannot make (a noisy moment, no controllable colours) says "not checked: why".  It prints
what each saw and a summary, and exits 0 whatever it found: its outcome is the machine's, not
the code's (`make test` is what must pass).

  python3 tests/check_machine.py [--build DIR] [NAME_SUBSTRING ...]
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as runner  # noqa: E402


def checks(build):
    b = os.path.join(build, "tests")
    cso = os.path.join(build, "libchromalloc-colour.so")
    tool = os.path.join(runner.ROOT, "tools", "chromalloc")
    T = lambda name, cmd, env=None: runner.Test(name, cmd, env, described=None, timeout=600)
    return [
        T("calibrate", ["python3", tool, "calibrate", "--quick", "--lib", cso]),
        T("colour_api", [os.path.join(b, "test_colour_api-plain")], {"LD_PRELOAD": cso}),
        T("colour_start", [os.path.join(b, "test_colour_start-internal")]),
        T("protect", [os.path.join(b, "test_protect-internal")]),
        T("small", [os.path.join(b, "test_small-internal")]),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(runner.ROOT, "build"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(os.path.join(build, "tests", "logs"), exist_ok=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("check-machine on %s (%d CPUs)" % (cpu, os.cpu_count() or 0))
    counts = {"as expected": 0, "differs": 0, "not checked": 0}
    for t in checks(build):
        if a.names and not any(n in t.name for n in a.names):
            continue
        t.name = "machine-" + t.name
        _, rc, secs, log = runner.run(t, build)
        text = open(log, errors="replace").read()
        skipped = [m.strip() for m in re.findall(r"[^\n]*not checked[^\n]*", text)]
        if rc == 0 and not skipped:
            kind, why = "as expected", ""
        elif rc == 0:
            kind, why = "not checked", "; ".join(skipped[:3])
        else:
            kind = "differs"
            failed = [l for l in text.splitlines() if "CHECK failed" in l or l.startswith("FAIL")]
            why = "exit %s: %s" % (rc, "; ".join(failed[:3]) or "see " + os.path.relpath(log, runner.ROOT))
        counts[kind] += 1
        print("%s %s (%.1f s)%s" % (kind, t.name, secs, ": " + why if why else ""), flush=True)
        for line in text.splitlines():
            if re.search(r"in the L2|verdict|colours:|method:|took|routed|restrictive from|looked at", line):
                print("    " + line[:200])
    print("%d as expected, %d differ, %d not checked (logs in %s)" %
          (counts["as expected"], counts["differs"], counts["not checked"], os.path.relpath(os.path.join(build, "tests", "logs"), runner.ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
