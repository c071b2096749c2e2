#!/usr/bin/env python3
"""The last test of `meson test` (tests/meson.build: lowest priority, run
alone): its name is the line saying which tests a machine without PyTorch
skips and the command that installs what they need. It exits 77 (SKIP) when
the scripts' interpreter lacks PyTorch or torchvision, or Open MPI's mpirun
is missing, naming what is missing; 0 when all are here. It looks the
modules up without importing them, so it takes a fraction of a second.
Usage: test_without_torch.py; exit 0 all here, 77 something missing."""
import shutil
import sys

from helpers import PYTHON, missing_modules

# what scripts/setup.sh --with-torch installs for the tests against PyTorch and the launchers
# (its list of Debian packages: keep the two together)
NEEDED = [("torch", "python3-torch"), ("torchvision", "python3-torchvision"),
          ("numpy", "python3-numpy")]


def main():
    lacking = missing_modules([module for module, _ in NEEDED])
    missing = [f"{module} ({package})" for module, package in NEEDED if module in lacking]
    if not shutil.which("mpirun"):
        missing.append("mpirun (openmpi-bin)")
    if missing:
        print(f"SKIP: {PYTHON} lacks {', '.join(missing)}: the tests against PyTorch "
              "(suite torch) and the launcher tests skip; scripts/setup.sh --with-torch "
              "installs them")
        return 77
    print("PyTorch, torchvision, numpy and mpirun are here: the tests against PyTorch and the "
          "launcher tests run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
