#!/usr/bin/env python3
"""The shell scripts around the binary: scripts/ab.sh, the same binary against
itself interleaved, and scripts/profile.sh without Nsight Systems.
Usage: test_wrappers.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail,
77 skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("profile sh", DPSCALE, "profile_sh", timeout=300),
         # timings compared: alone, so that other tests do not load the machine meanwhile
         test("ab", DPSCALE, "ab", timeout=300, parallel=False)]
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


if __name__ == "__main__":
    sys.exit(run_cases(globals()))
