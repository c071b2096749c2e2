#!/usr/bin/env python3
"""What the tests against PyTorch (suite torch) and the launcher tests need
that this machine lacks: PyTorch, torchvision and numpy for the scripts'
interpreter, Open MPI's mpirun. Not a test: meson's configure summary
(tests/meson.build) and scripts/setup.sh print its answer, so a machine
without them is told once which tests skip and how to run them. Looks the
modules up without importing them (an import costs seconds).
Usage: torch_needs.py [PYTHON]; prints the missing ones, each with its
Debian package, comma-separated, or nothing when all are here."""
import importlib.util
import os
import shutil
import subprocess
import sys

# what scripts/setup.sh --with-torch installs for them (its list of Debian packages: keep the two
# together)
NEEDED = [("torch", "python3-torch"), ("torchvision", "python3-torchvision"),
          ("numpy", "python3-numpy")]


def lacking(python, names):
    """The modules of names python lacks."""
    if os.path.realpath(sys.executable) == os.path.realpath(python):
        return [n for n in names if importlib.util.find_spec(n) is None]
    look = ("import importlib.util as u, sys; "
            "print(' '.join(n for n in sys.argv[1:] if u.find_spec(n) is None))")
    try:
        done = subprocess.run([python, "-c", look, *names], capture_output=True, text=True)
    except OSError:
        return list(names)
    return done.stdout.split() if done.returncode == 0 else list(names)


def missing(python):
    """'module (package)' for each one python or the machine lacks."""
    gone = lacking(python, [m for m, _ in NEEDED])
    out = [f"{m} ({p})" for m, p in NEEDED if m in gone]
    if not shutil.which("mpirun"):
        out.append("mpirun (openmpi-bin)")
    return out


if __name__ == "__main__":
    print(", ".join(missing(sys.argv[1] if len(sys.argv) > 1 else
                            os.environ.get("DPSCALE_PYTHON", "/usr/bin/python3"))))
