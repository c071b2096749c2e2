#!/usr/bin/env python3
"""The regression gate, scripts/regress.py (scripts/dpstools/gate.py): the
base commit it chooses and builds in a worktree (a clone of this checkout
with a commit of its own), a planted slowdown caught on recorded rounds
while identical ones pass, a gate that stops undecided
(INCONCLUSIVE, exit 3), and the stored baseline against what this build
allocates. Usage: test_regress.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, LONG, NOSAN, exit_if_listing, test

# the base built in a worktree (once: the second time from its cache); a planted slowdown
# caught and a gate that stops undecided INCONCLUSIVE, exit 3 (both on the recorded rounds of
# a stand-in for dpscale, never stopped by the clock); the stored baseline holds what this
# build allocates and the version that recorded it
TESTS = [test("regress worktree", DPSCALE, "worktree", suite=NOSAN, timeout=900,
              priority=LONG),
         test("regress planted", DPSCALE, "planted", suite="scripts", timeout=300),
         test("regress inconclusive", DPSCALE, "inconclusive", suite="scripts", timeout=300),
         test("regress baseline", DPSCALE, "baseline", suite="scripts", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile

from helpers import FIXTURES, HERE, PYTHON, dpscale, dpsresults, expect, run_case, write

ROOT = os.path.dirname(HERE)
SUITE = ("modes = dp, ddp\ngpus = 1, 2\nbatch = weak\nsteps = 30\nwarmup = 3\n"
         "[host]\nmodels = small\nprecisions = fp32\n")


def sh(*cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    expect(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout.strip()


def clone_with_commit(tmp):
    """A clone of this checkout's HEAD on a branch `feature` off `main`,
    one commit ahead; returns (repo, main's commit, the feature commit)."""
    repo = os.path.join(tmp, "repo")
    sh("git", "clone", "--quiet", "--no-hardlinks", ROOT, repo)
    git = ("git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t")
    sh(*git, "checkout", "--quiet", "-B", "main")
    main = sh(*git, "rev-parse", "HEAD")
    sh(*git, "checkout", "--quiet", "-b", "feature")
    write(os.path.join(repo, "FEATURE"), "a change\n")
    sh(*git, "add", "FEATURE")
    sh(*git, "commit", "--quiet", "-m", "a change")
    return repo, main, sh(*git, "rev-parse", "HEAD")


def gate_module(repo):
    """The clone's gate (scripts/dpstools/gate.py), imported from its file,
    so that its ROOT is the clone's."""
    spec = importlib.util.spec_from_file_location(
        "clone_gate", os.path.join(repo, "scripts", "dpstools", "gate.py"))
    gate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gate)
    return gate


def case_worktree(binary):
    """The base is the merge-base with main, HEAD^ on main, HEAD with
    changes; it is built once in BUILD/regress-base/<commit>/ with the head
    build's options and is that commit's code."""
    with tempfile.TemporaryDirectory() as tmp:
        repo, main, feature = clone_with_commit(tmp)
        regress = gate_module(repo)
        expect(regress.choose_base(None)[0] == main, "feature branch: not the merge-base")
        sh("git", "-C", repo, "checkout", "--quiet", "main")
        parent = sh("git", "-C", repo, "rev-parse", "HEAD^")
        expect(regress.choose_base(None)[0] == parent, "on main: not HEAD^")
        write(os.path.join(repo, "README.md"), "changed\n")
        expect(regress.choose_base(None)[0] == main, "on main with changes: not HEAD")
        expect(regress.choose_base("feature")[0] == feature, "--base feature")
        build = os.path.join(tmp, "build")  # the head build: its options, no CUDA for speed
        os.makedirs(os.path.join(build, "meson-info"))
        write(os.path.join(build, "meson-info", "intro-buildoptions.json"), json.dumps(
            [{"section": "user", "name": "cuda", "value": "disabled"},
             {"section": "user", "name": "not-an-option-of-the-base", "value": "x"},
             {"section": "core", "name": "buildtype", "value": "debug"}]))
        said, base = gate_says(regress.build_base, feature, build)
        expect(base.startswith(os.path.join(build, "regress-base", feature[:12])), base)
        expect(f"regress: base {feature[:12]}: built in " in said, f"the first build said {said!r}")
        version = sh(base, "--version")
        expect(feature[:7] in version, f"the base binary says {version!r}, not {feature[:7]}")
        kept = files_kept(os.path.dirname(os.path.dirname(os.path.dirname(base))))
        said, again = gate_says(regress.build_base, feature, build)
        expect(again == base, f"built again elsewhere: {again}, not {base}")
        expect(said == f"regress: base {feature[:12]}: built before, in "
                       f"{os.path.dirname(os.path.dirname(base))}\n",
               f"the second build did not say it took the cached one: {said!r}")
        changed = files_kept(os.path.dirname(os.path.dirname(os.path.dirname(base)))) ^ kept
        expect(not changed, f"the second build changed the cached base's files: "
                            f"{sorted(changed)[:10]}")


def gate_says(fn, *args):
    """What a function of the gate prints (its log lines) and returns."""
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        got = fn(*args)
    return said.getvalue(), got


def files_kept(folder):
    """Every file under folder with its size and modification time, (path,
    size, mtime_ns): a build that ran again rewrites some."""
    kept = set()
    for where, _, names in os.walk(folder):
        for name in names:
            st = os.lstat(os.path.join(where, name))
            kept.add((os.path.join(where, name), st.st_size, st.st_mtime_ns))
    return kept


# A budget no gate here reaches (its rounds take seconds), so that what stops one is
# --max-rounds or the verdict, never the machine's load; and the hang guard of a gate run,
# far above what a busy machine takes.
NO_BUDGET_MIN = 600
HANG_GUARD_S = 300


def gate(binary, tmp, budget_min, *args):
    """regress.py's verdict on timings, so outside strict mode, whose timings are
    not representative (docs/DESIGN.md "Strict mode"): DPSCALE_STRICT=0 for it."""
    suite = write(os.path.join(tmp, "gate.suite"), SUITE)
    p = subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "regress.py"), binary,
                        "--base-binary", binary, "--suite", suite, "--out", tmp,
                        "--budget-min", str(budget_min), *args], capture_output=True, text=True,
                       timeout=HANG_GUARD_S, env=dict(os.environ, DPSCALE_STRICT="0"))
    folder = [d for d in os.listdir(tmp) if d.startswith("regress-")][-1]
    with open(os.path.join(tmp, folder, "regression.json")) as f:
        return p, json.load(f)


def case_planted(binary):
    """--inject-slowdown 25 on the head is REGRESSION on every configuration,
    exit 1. The rounds are recorded ones (the
    stand-in for dpscale below: ci-host's steps, the head's 25 % longer), so
    the verdict is the gate's statistics on fixed data, never the machine's
    load; the live drill on a runner's own timings is docs/regression.md's
    "A fire drill", a benchmark rather than a test."""
    del binary  # the stand-in's rounds, not the binary's
    with tempfile.TemporaryDirectory() as tmp:
        fake = write(os.path.join(tmp, "dpscale"), FAKE_DPSCALE.format(
            python=PYTHON, fixture=os.path.join(FIXTURES, "ci-host"), every=True))
        os.chmod(fake, 0o755)
        with tempfile.TemporaryDirectory(dir=tmp) as out:
            p, report = gate(fake, out, NO_BUDGET_MIN, "--max-rounds", "8", "--inject-slowdown",
                             "25")
            steps = {r["config"]: r["status"] for r in report["rows"] if r["metric"] == "step_ms"}
            expect(p.returncode == 1 and len(steps) == 4 and
                   all(s == "REGRESSION" for s in steps.values()) and
                   report["verdict"] == "REGRESSION",
                   f"planted 25 %: exit {p.returncode}, verdict {report['verdict']}, {steps}\n"
                   f"{p.stdout}{p.stderr}")


# A stand-in for dpscale whose rounds are known: `sweep ... --out OUT --name run-NNN
# [--inject-slowdown PCT]` writes the fixture's results, step times PCT % longer in odd
# rounds (in every round with every=True).
FAKE_DPSCALE = """#!{python}
import csv, os, shutil, sys
args = sys.argv[1:]
opt = lambda name, default=None: args[args.index(name) + 1] if name in args else default
folder = os.path.join(opt("--out"), opt("--name"))
shutil.copytree({fixture!r}, folder)
factor = 1 + float(opt("--inject-slowdown", 0)) / 100 if {every} or int(opt("--name")[4:]) % 2 \\
    else 1
path = os.path.join(folder, "steps.csv")
with open(path) as f:
    rows = list(csv.DictReader(f))
with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\\n")
    w.writeheader()
    for r in rows:
        w.writerow({{k: f"{{float(v) * factor:.4f}}" if k.endswith("_ms") and v else v
                    for k, v in r.items()}})
"""


def first_line(p, tmp):
    folder = [d for d in os.listdir(tmp) if d.startswith("regress-")][-1]
    with open(os.path.join(tmp, folder, "regression.md")) as f:
        line = f.readline().rstrip("\n")
    expect(line in p.stdout, f"regression.md's first line {line!r} not on stdout:\n{p.stdout}")
    return line


def case_inconclusive(binary):
    """Rounds that never decide (the head 6 % slower every other round: the
    estimate just below the 3 % threshold, the interval across it) stop at
    --max-rounds, a budget spent after one round stops there: INCONCLUSIVE
    in the report's first line with the reason, exit 3 (--warn-only: 0);
    rounds that decide (identical) PASS with exit 0. The rounds come from a
    stand-in for dpscale, so that none depends on the machine's timing."""
    with tempfile.TemporaryDirectory() as tmp:
        fake = write(os.path.join(tmp, "dpscale"), FAKE_DPSCALE.format(
            python=PYTHON, fixture=os.path.join(FIXTURES, "ci-host"), every=False))
        os.chmod(fake, 0o755)
        head = "## dpscale performance comparison: "
        undecided = "INCONCLUSIVE: 4 of 4 configuration(s) undecided after "
        # (budget in minutes, options, exit status, the first line after `head`)
        cases = [(NO_BUDGET_MIN, ["--max-rounds", "6", "--inject-slowdown", "6"], 3,
                  undecided + "6 round(s); stopped: --max-rounds 6 reached"),
                 (0.0001, ["--inject-slowdown", "6"], 3,
                  undecided + "1 round(s); stopped: --budget-min 0.0001 reached after"),
                 (0.0001, ["--inject-slowdown", "6", "--warn-only"], 0, undecided + "1 round(s)"),
                 # five rows decided together: eight rounds are the fewest with intervals
                 (NO_BUDGET_MIN, ["--max-rounds", "8"], 0, "PASS")]
        for budget, args, rc, want in cases:
            with tempfile.TemporaryDirectory(dir=tmp) as out:
                p, report = gate(fake, out, budget, *args)
                line = first_line(p, out)
                expect(p.returncode == rc and line.startswith(head + want),
                       f"{' '.join(args)}: exit {p.returncode} (expected {rc}), first line "
                       f"{line!r}, expected {head + want!r}\n{p.stdout}{p.stderr}")
                last = p.stdout.splitlines()[-1]
                expect(last.startswith("regress: 8 rounds; report in") if want == "PASS" else
                       last.startswith("regress: " + undecided) and f": exit {rc}" in last,
                       f"{' '.join(args)}: the gate's last line {last!r}")
                expect(report["verdict"] == want.split(":")[0], f"JSON verdict {report['verdict']}")


def case_baseline(binary):
    """bench/baselines/host-amd-epyc/ holds what this build allocates (memory
    is exact on the host backend): each run's alloc_peak_bytes equal to a
    run of bench/ci.suite now, and each run stamped with the dpscale that
    recorded it, its --version and commit."""
    base = os.path.join(ROOT, "bench", "baselines", "host-amd-epyc")
    runs = sorted(d for d in os.listdir(base) if d.startswith("run-"))
    with tempfile.TemporaryDirectory() as tmp:
        dpscale(binary, "sweep", os.path.join(ROOT, "bench", "ci.suite"), "--no-links", out=tmp,
                name="now", check_rc=0)
        now = peaks(os.path.join(tmp, "now"))
    expect(runs, f"{base}: no baseline run")
    fix = ("if a change moved memory on purpose, record the baseline again with it (three "
           "times: scripts/regress.sh BUILD/src/dpscale --update-baseline) and commit it")
    for run in runs:
        folder = os.path.join(base, run)
        was = peaks(folder)
        moved = {k: (was.get(k), now.get(k)) for k in set(was) | set(now)
                 if was.get(k) != now.get(k)}
        expect(not moved, f"{folder}: alloc_peak_bytes (baseline, this build) differ: {moved}; "
               f"{fix}")
        meta = dpsresults.read_meta(folder)
        stamp_path = os.path.join(folder, "baseline.json")
        expect(os.path.exists(stamp_path), f"{stamp_path}: no stamp of the dpscale that "
               f"recorded it; record the baseline with scripts/regress.sh BUILD/src/dpscale "
               f"--update-baseline")
        with open(stamp_path) as f:
            stamp = json.load(f)
        version = f"dpscale {meta['dpscale_version']} ({meta['git_describe']})"
        abbrev = re.search(r"(?:^|-g)([0-9a-f]{4,})$", meta["git_describe"])
        expect(stamp.get("recorded_by") == version and abbrev and
               re.fullmatch(abbrev[1] + r"[0-9a-f]*", stamp.get("git_commit", "")) and
               len(stamp["git_commit"]) == 40,
               f"{stamp_path}: {stamp}, not the stamp of {version} built from a commit")


def peaks(folder):
    """{(config_id, device): alloc_peak_bytes} of a results folder."""
    rows = dpsresults.read_csv(os.path.join(folder, "devices.csv"))
    return {(r["config_id"], r["device"]): int(r["alloc_peak_bytes"]) for r in rows}


CASES = {"worktree": case_worktree, "planted": case_planted, "inconclusive": case_inconclusive,
         "baseline": case_baseline}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
