#!/usr/bin/env python3
"""The regression gate, scripts/regress.py: the base commit it chooses and
builds in a worktree (a clone of this checkout with a commit of its own),
and a planted slowdown caught end to end on a small suite while identical
binaries pass. Usage: test_regress.py DPSCALE CASE; exit 0 pass, 1 fail,
77 skip."""
import json
import os
import subprocess
import sys
import tempfile
import time

from helpers import HERE, PYTHON, expect, run_case, write

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
    """The clone's regress.py, imported (ROOT is the clone)."""
    sys.path.insert(0, os.path.join(repo, "scripts"))
    import regress
    return regress


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
        t0 = time.monotonic()
        base = regress.build_base(feature, build)
        first = time.monotonic() - t0
        expect(base.startswith(os.path.join(build, "regress-base", feature[:12])), base)
        version = sh(base, "--version")
        expect(feature[:7] in version, f"the base binary says {version!r}, not {feature[:7]}")
        t0 = time.monotonic()
        expect(regress.build_base(feature, build) == base, "built again elsewhere")
        expect(time.monotonic() - t0 < min(5.0, first), "the second build was not the cache")


def gate(binary, tmp, budget_min, *args):
    suite = write(os.path.join(tmp, "gate.suite"), SUITE)
    p = subprocess.run([PYTHON, os.path.join(ROOT, "scripts", "regress.py"), binary,
                        "--base-binary", binary, "--suite", suite, "--out", tmp,
                        "--budget-min", str(budget_min), *args], capture_output=True, text=True,
                       timeout=60 * budget_min + 120)
    folder = [d for d in os.listdir(tmp) if d.startswith("regress-")][-1]
    with open(os.path.join(tmp, folder, "regression.json")) as f:
        return p, json.load(f)


def case_planted(binary):
    """--inject-slowdown 15 on the head is REGRESSION on every configuration
    (within 2 minutes of rounds); the same binary on both sides is not
    (1 minute). Skipped in the sanitizer build, whose steps take 20 times
    as long and whose timings say nothing of the code's."""
    if "ASAN_OPTIONS" in os.environ:
        print("SKIP: timings of the sanitizer build (ASAN_OPTIONS is set) say nothing")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        p, report = gate(binary, tmp, 2, "--inject-slowdown", "15")
        steps = {r["config"]: r["status"] for r in report["rows"] if r["metric"] == "step_ms"}
        expect(p.returncode == 1 and len(steps) == 4 and
               all(s == "REGRESSION" for s in steps.values()),
               f"planted 15 %: exit {p.returncode}, {steps}\n{p.stdout}")
    with tempfile.TemporaryDirectory() as tmp:
        p, report = gate(binary, tmp, 1)
        statuses = [r["status"] for r in report["rows"]]
        expect(p.returncode == 0 and "REGRESSION" not in statuses,
               f"identical: exit {p.returncode}\n{p.stdout}")


CASES = {"worktree": case_worktree, "planted": case_planted}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
