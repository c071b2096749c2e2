#!/usr/bin/env python3
"""The shell scripts around the binary: scripts/ab.sh, the same binary against
itself interleaved, scripts/profile.sh without Nsight Systems, and
scripts/bench.sh drawing with the first python3 on PATH that has matplotlib
(a venv's), else /usr/bin/python3.
Usage: test_wrappers.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail,
77 skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("profile sh", DPSCALE, "profile_sh", timeout=300),
         # timings compared: alone, so that other tests do not load the machine meanwhile
         test("ab", DPSCALE, "ab", timeout=300, parallel=False),
         test("bench python venv", DPSCALE, "bench_python", "venv", timeout=600),
         test("bench python bare", DPSCALE, "bench_python", "bare", timeout=600)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import shutil
import subprocess
import sys
import tempfile

from helpers import SCRIPTS, expect, expect_exit, run_cases, write


def case_profile_sh(binary):
    """scripts/profile.sh without Nsight Systems says so and exits 2."""
    profile_sh = os.path.join(SCRIPTS, "profile.sh")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "DPSCALE": binary}
    if subprocess.run(["sh", "-c", "command -v nsys"], env=env, capture_output=True).returncode == 0:
        return 77  # nsys is here: nothing to test
    p = subprocess.run(["bash", profile_sh, "--model", "tiny"], env=env, capture_output=True,
                       text=True)
    expect_exit(p, 2, "nsys", "not installed")
    return 0


def case_ab(binary):
    """scripts/ab.sh: the same binary against itself, interleaved, shows no regression."""
    ab_sh = os.path.join(SCRIPTS, "ab.sh")
    with tempfile.TemporaryDirectory() as tmp:
        suite = write(os.path.join(tmp, "s.suite"),
                      "modes = dp\ngpus = 1\nmodels = small\nsteps = 15\nwarmup = 2\n")
        p = subprocess.run(["bash", ab_sh, binary, binary, "2", suite], capture_output=True,
                           text=True, timeout=300)
        expect(p.returncode == 0 and "| configuration | metric |" in p.stdout, p.stdout + p.stderr)
        expect("**REGRESSION**" not in p.stdout, p.stdout)
        folder = p.stdout.split("Baseline `")[1].split("`")[0]
        runs = sorted(d for d in os.listdir(folder) if d.startswith("run-"))
        expect(runs == ["run-001", "run-002"], f"baseline runs in {folder}: {runs}")
        shutil.rmtree(os.path.dirname(folder))
        p = subprocess.run(["bash", ab_sh, binary], capture_output=True, text=True)
        expect_exit(p, 2, "usage")


# a python3 first on PATH: "venv" has what /usr/bin/python3 has (matplotlib) and
# says when it runs; "bare" sees no site packages (no matplotlib), as a fresh venv
FAKE_PYTHON = {"venv": 'echo "$0 $*" >> "{log}"\nexec /usr/bin/python3 "$@"\n',
               "bare": 'exec /usr/bin/python3 -S "$@"\n'}


def case_bench_python(binary, kind):
    """bench.sh in a copy of scripts/ (its results and plots beside it), a
    python3 of KIND first on PATH: the charts are drawn by the first python3
    with matplotlib, and bench.sh says which."""
    if subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"]).returncode:
        print("skipped: /usr/bin/python3 has no matplotlib (scripts/setup.sh installs it)")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(SCRIPTS, os.path.join(tmp, "scripts"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        bindir, log = os.path.join(tmp, "bin"), os.path.join(tmp, "python.log")
        os.mkdir(bindir)
        fake = write(os.path.join(bindir, "python3"),
                     "#!/bin/sh\n" + FAKE_PYTHON[kind].replace("{log}", log))
        os.chmod(fake, 0o755)
        suite = write(os.path.join(tmp, "s.suite"),
                      "modes = dp\ngpus = 1\nmodels = tiny\nsteps = 2\nwarmup = 0\n")
        env = {**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]}
        env.pop("DPSCALE_REEXEC", None)
        p = subprocess.run(["bash", os.path.join(tmp, "scripts", "bench.sh"), binary, suite,
                            "--backend", "host", "--no-links"],
                           env=env, capture_output=True, text=True, timeout=300)
        expect(p.returncode == 0, f"bench.sh: exit {p.returncode}\n{p.stdout}{p.stderr}")
        drew = fake if kind == "venv" else "/usr/bin/python3"
        expect(f"bench: drawing the charts with {drew}" in p.stdout, p.stdout + p.stderr)
        charts = os.listdir(os.path.join(tmp, "plots", "latest"))
        expect("summary.md" in charts and any(c.endswith(".png") for c in charts),
               f"plots/latest: {charts}")
        if kind == "venv":
            with open(log) as f:
                expect("plot.py" in f.read(), f"{fake} did not run plot.py")


if __name__ == "__main__":
    run_cases(globals())
