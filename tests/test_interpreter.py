#!/usr/bin/env python3
"""`python3 scripts/NAME.py` when the first python3 on PATH lacks numpy,
PyTorch and matplotlib (pyenv's, a virtual environment's): each script that
needs them runs itself again under /usr/bin/python3 (dpstools.interpreter).
The python3 used is the first on PATH where it lacks numpy, else
/usr/bin/python3 -S (no site-packages), as `python3` first on a PATH of the
test's own.
Usage: test_interpreter.py FIXTURE CASE | --list; exit 0 pass, 1 fail, 77 skip."""
from listing import FIXTURES, exit_if_listing, test

TESTS = [test("interpreter scripts " + c, FIXTURES + "/results-host", c, suite="torch",
              timeout=240) for c in ("help", "run")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import glob
import os
import shutil
import subprocess
import sys
import tempfile

from dpstools import interpreter
from helpers import SCRIPTS, expect, expect_exit, missing_modules, run_cases, write

NEEDED = ["numpy", "torch", "matplotlib"]
HERE = os.path.dirname(os.path.abspath(__file__))


def lacking_python3(tmp):
    """TMP/bin holding `python3`: the first python3 on PATH that lacks numpy,
    else /usr/bin/python3 -S; returns the environment with TMP/bin first on
    PATH and tests/ on PYTHONPATH (model_examples), or None to skip."""
    if missing_modules(NEEDED):
        print(f"SKIP: {interpreter.SYSTEM_PYTHON} lacks one of {', '.join(NEEDED)} "
              "(scripts/setup.sh --with-torch installs them)")
        return None
    first = shutil.which("python3")
    lacks = first and subprocess.run([first, "-c", "import numpy"],
                                     capture_output=True).returncode != 0
    how = f'exec "{first}" "$@"' if lacks else f'exec {interpreter.SYSTEM_PYTHON} -S "$@"'
    if not lacks and subprocess.run([interpreter.SYSTEM_PYTHON, "-S", "-c", "import numpy"],
                                    capture_output=True).returncode == 0:
        print("SKIP: no python3 without numpy to run the scripts from")
        return None
    os.makedirs(os.path.join(tmp, "bin"))
    write(os.path.join(tmp, "bin", "python3"), f"#!/bin/sh\n{how}\n")
    os.chmod(os.path.join(tmp, "bin", "python3"), 0o755)
    env = {k: v for k, v in os.environ.items() if k != interpreter.REEXEC_ENV}
    env["PATH"] = os.path.join(tmp, "bin") + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
    print(f"python3: {how}")
    return env


def python3(env, cwd, *args, timeout=120):
    """`python3 ARGS` as a shell runs it, the first python3 on env's PATH."""
    return subprocess.run(["python3", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)


def case_help(fixture):
    """Every script of scripts/ answers --help (its usage, exit 0 or 2) with
    no traceback: its module-level imports need nothing the first python3
    lacks, or it ran again."""
    with tempfile.TemporaryDirectory() as tmp:
        env = lacking_python3(tmp)
        if env is None:
            return 77
        for path in sorted(glob.glob(os.path.join(SCRIPTS, "*.py"))):
            p = python3(env, tmp, path, "--help")
            expect(p.returncode in (0, 2) and "Traceback" not in p.stderr and
                   "No module named" not in p.stderr + p.stdout,
                   f"python3 {os.path.basename(path)} --help: exit {p.returncode}\n{p.stderr}")
    return 0


def case_run(fixture):
    """The README's forms run under the first python3: torch_reference.py
    (ddp over gloo), model_export.py, plot.py; each says it ran again."""
    again = f"running under {interpreter.SYSTEM_PYTHON}"
    with tempfile.TemporaryDirectory() as tmp:
        env = lacking_python3(tmp)
        if env is None:
            return 77
        runs = [
            ["scripts/torch_reference.py", "--mode", "ddp", "--gpus", "2", "--device", "cpu",
             "--model", "tiny", "--steps", "2", "--warmup", "0", "--start-method", "forkserver",
             "--out", tmp, "--name", "t"],
            ["scripts/model_export.py", "model_examples:small_resnet", "--input", "3x8x8",
             "--out", os.path.join(tmp, "m.model")],
            ["scripts/plot.py", fixture, "--out", os.path.join(tmp, "plots")]]
        for args in runs:
            p = python3(env, os.path.dirname(SCRIPTS), *args, timeout=180)
            expect_exit(p, 0, again)
        expect(all(os.path.isfile(os.path.join(tmp, f)) for f in
                   ("t/runs.csv", "m.model", "plots/summary.md")), "a script wrote nothing")
    return 0


if __name__ == "__main__":
    run_cases(globals())
