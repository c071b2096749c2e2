#!/usr/bin/env python3
"""scripts/dpstools/gate.py, imported, on small inputs with known answers.
options: the head build's options as -D values and the base's option
names; verdict: compare.py's exit status turned INCONCLUSIVE (3) or kept,
and the gate's compare on fixed folders (ci-host against itself, and
against its copy with every step 1.5 times as long); out: the results
folder's name and its -2, -3 after a taken one; baseline: the machine key,
the commit a git_describe names, baseline.json, who recorded a run, its
age; rounds: the base and head interleaved round after round by a
stand-in for dpscale, the reason each stop gives, a refused command line.
Usage: test_dpstools_gate.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools gate " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("options", "verdict", "out", "baseline", "rounds")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import datetime
import io
import json
import os
import re
import socket
import stat
import subprocess
import tempfile
import time
import types

from dpstools import gate
from helpers import HERE, copy_fixture, edit, expect, run_cases, write

ROOT = os.path.dirname(HERE)


def raises(fn, *args, needle=""):
    """The message of the GateError fn(*args) raises; fails when it raises none."""
    try:
        fn(*args)
    except gate.GateError as e:
        expect(needle in str(e), f"{fn.__name__}: {e!r} lacks {needle!r}")
        return str(e)
    expect(False, f"{fn.__name__}{args}: no GateError")


def quiet(fn, *args, **kw):
    """(fn's result, what it printed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        got = fn(*args, **kw)
    return got, out.getvalue()


def case_options(fixtures):
    """head_options: the user section's options only (not core's, base's,
    backend's), a bool as true/false,
    a list joined by commas, a number as its text; a folder without
    meson-info refused. base_option_names: the option() names of
    meson_options.txt and meson.options together."""
    with tempfile.TemporaryDirectory() as tmp:
        raises(gate.head_options, tmp, needle="cannot read the head build's options")
        os.makedirs(os.path.join(tmp, "meson-info"))
        write(os.path.join(tmp, "meson-info", "intro-buildoptions.json"), json.dumps(
            [{"section": "user", "name": "cuda", "value": "disabled"},
             {"section": "user", "name": "strict", "value": True},
             {"section": "user", "name": "fast", "value": False},
             {"section": "user", "name": "archs", "value": ["sm_80", "sm_90"]},
             {"section": "user", "name": "threads", "value": 4},
             {"section": "core", "name": "buildtype", "value": "debug"},
             {"section": "base", "name": "b_sanitize", "value": "address"},
             {"section": "backend", "name": "backend_max_links", "value": 0}]))
        got = gate.head_options(tmp)
        want = {"cuda": "disabled", "strict": "true", "fast": "false", "archs": "sm_80,sm_90",
                "threads": "4"}
        expect(got == want, f"head_options: {got}, expected {want}")
        src = os.path.join(tmp, "src")
        os.makedirs(src)
        expect(gate.base_option_names(src) == set(), "no options file: names found")
        write(os.path.join(src, "meson_options.txt"),
              "option('cuda', type: 'feature')\noption( 'nvtx', type : 'boolean')\n"
              "# option is not option(\n")
        write(os.path.join(src, "meson.options"), "option('tf32', type: 'combo')\n")
        got = gate.base_option_names(src)
        expect(got == {"cuda", "nvtx", "tf32"}, f"base_option_names: {got}")


def stand_in(tmp, name, text):
    path = write(os.path.join(tmp, name), text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def slower_copy(tmp, factor):
    """ci-host with every steps.csv time (step and phases) times factor."""
    folder = copy_fixture("ci-host", tmp, "slower")
    edit(os.path.join(folder, "steps.csv"), lambda rows: [
        {k: f"{float(v) * factor:.4f}" if k.endswith("_ms") and v else v for k, v in r.items()}
        for r in rows])
    return folder


def case_verdict(fixtures):
    """inconclusive: a failing or deciding comparison keeps its status, an
    INCONCLUSIVE one that passed is 3 (--warn-only: 0) and says what would
    decide it. compare: ci-host against itself passes (exit 0, every
    step_ms row SAME at +0 %); against its copy 1.5 times as slow (fixed
    data: the same verdict every run) exit 1, REGRESSION of every
    configuration's step_ms by +50 %."""
    for rc, res, extra, want in [(1, {"verdict": "INCONCLUSIVE"}, [], 1),
                                 (0, {"verdict": "PASS"}, [], 0),
                                 (1, {"verdict": "REGRESSION"}, [], 1),
                                 (0, {"verdict": "INCONCLUSIVE", "paired": True}, [], 3),
                                 (0, {"verdict": "INCONCLUSIVE"}, ["--warn-only"], 0)]:
        got, said = quiet(gate.inconclusive, rc, res, extra)
        expect(got == want, f"inconclusive({rc}, {res}, {extra}): {got}, expected {want}")
        expect((want == 3 or "--warn-only" in extra) == bool(said), f"printed {said!r}")
    _, said = quiet(gate.inconclusive, 0, {"verdict": "INCONCLUSIVE", "paired": True}, [], 5)
    expect("(--rounds;" in said and "exit 3" in said, f"paired, --rounds: {said!r}")
    _, said = quiet(gate.inconclusive, 0, {"verdict": "INCONCLUSIVE", "paired": True}, [])
    expect("(--budget-min, --max-rounds;" in said, f"paired rounds: {said!r}")
    _, said = quiet(gate.inconclusive, 0, {"verdict": "INCONCLUSIVE"}, ["--warn-only"])
    expect("exit 0 (--warn-only)" in said and "base run beside the head" in said,
           f"one run each, --warn-only: {said!r}")
    ci = os.path.join(fixtures, "ci-host")
    with tempfile.TemporaryDirectory() as tmp:
        rc, res = gate.compare(ci, ci, os.path.join(tmp, "same.json"), [])
        steps = [r for r in res["rows"] if r["metric"] == "step_ms"]
        expect(rc == 0 and res["verdict"] == "PASS" and len(steps) == 4 and
               all(r["status"] == "SAME" and r["delta_pct"] == 0 for r in steps),
               f"ci-host against itself: exit {rc}, {res['verdict']}, {steps}")
        rc, res = gate.compare(ci, slower_copy(tmp, 1.5), os.path.join(tmp, "slow.json"), [])
        steps = [r for r in res["rows"] if r["metric"] == "step_ms"]
        expect(rc == 1 and res["verdict"] == "REGRESSION" and len(steps) == 4 and
               all(r["status"] == "REGRESSION" and abs(r["delta_pct"] - 50) < 0.05
                   for r in steps), f"1.5 times as slow: exit {rc}, {res['verdict']}, {steps}")
        expect(gate.inconclusive(rc, res, []) == 1, "a regression not kept by inconclusive")
        bad = os.path.join(tmp, "not-results")
        os.makedirs(bad)
        raises(gate.compare, ci, bad, os.path.join(tmp, "bad.json"), [],
               needle="compare.py refused")


def case_out(fixtures):
    """stamp: YYYYmmdd-HHMMSS-HOST (the host name's first label). new_out,
    its stamp held: regress-STAMP, then -2, -3 once taken (a folder, or a
    .log of --stored's run); make: the folder made."""
    host = socket.gethostname().split(".")[0]
    got = gate.stamp()
    expect(re.fullmatch(r"20\d{6}-\d{6}-" + re.escape(host), got), f"stamp {got!r}")
    real = gate.stamp
    gate.stamp = lambda: "20260101-000000-h"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            parent = os.path.join(tmp, "p")
            first = gate.new_out(parent, make=True)
            expect(first == os.path.join(parent, "regress-20260101-000000-h") and
                   os.path.isdir(first), f"first: {first}")
            second = gate.new_out(parent, make=True)
            expect(second == first + "-2" and os.path.isdir(second), f"second: {second}")
            write(first + "-3.log", "")
            third = gate.new_out(parent, make=False)
            expect(third == first + "-4" and not os.path.exists(third), f"a .log taken: {third}")
    finally:
        gate.stamp = real


def head_commit():
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
    expect(p.returncode == 0, f"git rev-parse HEAD in {ROOT}: {p.stderr}")
    return p.stdout.strip()


def meta(tmp, name, **fields):
    folder = os.path.join(tmp, name)
    os.makedirs(folder)
    write(os.path.join(folder, "meta.json"), json.dumps(fields))
    return folder


def case_baseline(fixtures):
    """machine_key: ci-host's is host-amd-epyc (backend host, 'emulated
    device on AMD EPYC'), no devices: BACKEND-unknown. commit_of: the full
    commit of HEAD's abbreviation, of git describe's v1-3-gABBREV, of
    ABBREV-dirty; '' for a name git does not know. stamp_baseline,
    recorded_by and staleness on runs whose meta.json the test writes."""
    key = gate.machine_key(os.path.join(fixtures, "ci-host", "meta.json"))
    expect(key == "host-amd-epyc", f"ci-host's machine key {key!r}")
    with tempfile.TemporaryDirectory() as tmp:
        bare = meta(tmp, "bare", backend="cuda", devices=[{"name": "NVIDIA H100 80GB HBM3"}])
        key = gate.machine_key(os.path.join(bare, "meta.json"))
        expect(key == "cuda-nvidia-h100-80gb-hbm3", f"an H100's machine key {key!r}")
        none = meta(tmp, "none", backend="cuda", devices=[])
        expect(gate.machine_key(os.path.join(none, "meta.json")) == "cuda-unknown", "no devices")
        full = head_commit()
        for describe in (full[:9], f"v1-3-g{full[:9]}", f"{full[:9]}-dirty"):
            got = gate.commit_of(describe)
            expect(got == full, f"commit_of({describe!r}) = {got!r}, expected {full}")
        expect(gate.commit_of("no-such-ref-anywhere") == "", "an unknown name has a commit")
        base = os.path.join(tmp, "baselines")
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=3, hours=2)
        run = meta(base, "run-1", dpscale_version="0.1.0", git_describe=f"{full[:9]}-dirty",
                   start_time=when.strftime("%Y-%m-%dT%H:%M:%SZ"), host="vm")
        expect(gate.recorded_by(run, {"dpscale_version": "0.1.0", "git_describe": "abc"}) ==
               "dpscale 0.1.0 (abc)", "no baseline.json: not meta.json's version")
        _, said = quiet(gate.stamp_baseline, run, "dpscale 0.1.0 (x)",
                        os.path.join(ROOT, "bench", "ci.suite"))
        with open(os.path.join(run, "baseline.json")) as f:
            got = json.load(f)
        want = {"recorded_by": "dpscale 0.1.0 (x)", "dpscale_version": "0.1.0",
                "git_describe": f"{full[:9]}-dirty", "git_commit": full,
                "suite": os.path.join("bench", "ci.suite"),
                "recorded_at": when.strftime("%Y-%m-%dT%H:%M:%SZ")}
        expect(got == want, f"baseline.json {got}, expected {want}")
        expect("warning" in said and "working tree with changes" in said, f"dirty: {said!r}")
        expect(gate.recorded_by(run, {}) == "dpscale 0.1.0 (x)", "baseline.json's stamp not read")
        meta(base, "run-0", start_time="", host="old")  # older: sorted first
        got = gate.staleness(base)
        want = (f"recorded {want['recorded_at']} (3 days ago) on vm by dpscale 0.1.0 (x), "
                f"2 run(s)")
        expect(got == want, f"staleness {got!r}, expected {want!r}")
        meta(base, "run-2", start_time="", host="new", dpscale_version="0.2.0")
        got = gate.staleness(base)
        expect(got == "recorded ? (at an unknown time) on new by dpscale 0.2.0 (?), 3 run(s)",
               f"no start_time: {got!r}")
        ok = stand_in(tmp, "good", "#!/bin/sh\necho 'dpscale 9.9.9 (cafe)'\n")
        expect(gate.version_of(ok) == "dpscale 9.9.9 (cafe)", "version_of")
        bad = stand_in(tmp, "bad", "#!/bin/sh\necho 'other 1.0'\n")
        raises(gate.version_of, bad, needle="not 'dpscale VERSION (COMMIT)'")


# A stand-in for dpscale: `sweep SUITE --no-links --out OUT --name NAME [ARGS]` copies
# ci-host to OUT/NAME and appends "SIDE NAME ARGS" to LOG (SIDE: OUT's last part); with
# REFUSE set it exits 2, as a refused command line does.
SWEEP = """#!/bin/sh
[ -n "$REFUSE" ] && exit 2
out=$5 name=$7
shift 7
mkdir -p "$out" && cp -r {fixture} "$out/$name"
echo "$(basename "$out") $name $*" >> {log}
"""


def options(**kw):
    a = dict(rounds=0, max_rounds=20, min_rounds=99, budget_min=60.0, inject_slowdown=0,
             steps=0, suite="x.suite")
    return types.SimpleNamespace(**{**a, **kw})


def rounds(tmp, binary, a, name):
    out = os.path.join(tmp, name)
    os.makedirs(out)
    log = os.path.join(tmp, "sweeps")
    write(log, "")
    got, said = quiet(gate.run_rounds, a, binary, binary, out, [], time.monotonic())
    with open(log) as f:
        return got, said, f.read().splitlines()


def case_rounds(fixtures):
    """run_rounds with a stand-in dpscale: --rounds 3 runs base, head; head,
    base; base, head (the first side alternates), --steps on both sides,
    --inject-slowdown on the head's alone, and stops with '--rounds 3 run';
    --max-rounds 2 (no comparison before --min-rounds) stops after 2 with
    that reason; a spent budget after the first; exit 2 refused."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sweeps")
        binary = stand_in(tmp, "dpscale", SWEEP.format(
            fixture=os.path.join(fixtures, "ci-host"), log=log))
        got, said, lines = rounds(tmp, binary, options(rounds=3, steps=5, inject_slowdown=7), "a")
        want = ["base run-001 --steps 5", "head run-001 --steps 5 --inject-slowdown 7",
                "head run-002 --steps 5 --inject-slowdown 7", "base run-002 --steps 5",
                "base run-003 --steps 5", "head run-003 --steps 5 --inject-slowdown 7"]
        expect(got == (3, "--rounds 3 run") and lines == want,
               f"--rounds 3: {got}, sweeps {lines}, expected {want}")
        expect(said.count("round ") == 3 and "round 3 of 3" in said, f"printed {said!r}")
        expect(all(os.path.isdir(os.path.join(tmp, "a", s, f"run-00{i}"))
                   for s in ("base", "head") for i in (1, 2, 3)), "the rounds' folders")
        got, said, lines = rounds(tmp, binary, options(max_rounds=2), "b")
        expect(got == (2, "--max-rounds 2 reached") and len(lines) == 4,
               f"--max-rounds 2: {got}, {lines}")
        got, said, lines = rounds(tmp, binary, options(budget_min=0.0), "c")
        expect(got[0] == 1 and got[1].startswith("--budget-min 0 reached after") and
               len(lines) == 2, f"budget spent: {got}, {lines}")
        expect("stopped after 1 rounds" in said, f"printed {said!r}")
        os.environ["REFUSE"] = "1"
        try:
            raises(rounds, tmp, binary, options(rounds=1), "d", needle="exit 2")
        finally:
            del os.environ["REFUSE"]


if __name__ == "__main__":
    run_cases(globals())
