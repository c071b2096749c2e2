"""The Python a script of scripts/ runs under: Debian's /usr/bin/python3,
which has what scripts/setup.sh installs (python3-numpy, -torch,
-matplotlib), when the one running it lacks a package it needs.

`python3 scripts/NAME.py` takes the first python3 on PATH, often another
(pyenv's, a virtual environment's) without those packages. reexec() looks
the modules up without importing them and, where SYSTEM_PYTHON has some
this one lacks and lacks none this one has, runs the whole command again
under it (once: REEXEC_ENV marks the second run), saying so on stderr;
otherwise the script goes on, told what is still missing. Standard library
only, so that it runs under any Python.
"""
import importlib.util
import os
import subprocess
import sys

SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with the packages scripts/setup.sh installs
REEXEC_ENV = "DPSCALE_REEXEC"  # set in the environment of the run again, so it does not loop

# the modules, looked up by SYSTEM_PYTHON without importing them: exit 0 when all are there
_LOOKUP = "import importlib.util, sys; sys.exit(sum(importlib.util.find_spec(m) is None " \
          "for m in sys.argv[1:]))"


def lacking(modules):
    """The modules this Python cannot import (found by name, not imported)."""
    out = []
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(m)
    return out


def system_lacking(modules):
    """The modules SYSTEM_PYTHON lacks; all of them when it cannot run."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return list(modules)
    return [m for m in modules
            if subprocess.run([SYSTEM_PYTHON, "-c", _LOOKUP, m], capture_output=True,
                              timeout=60).returncode != 0]


def here():
    """This Python, as a message names it."""
    return f"{sys.executable or 'this Python'} (Python {sys.version.split()[0]})"


def reexec(modules, script, argv, prog=None):
    """Returns the modules still missing when this Python has them all or
    SYSTEM_PYTHON is no better; otherwise replaces this process by
    `SYSTEM_PYTHON script argv` (the environment kept, REEXEC_ENV added)."""
    missing = lacking(modules)
    if not missing or os.environ.get(REEXEC_ENV):
        return missing
    theirs = system_lacking(modules)
    if not set(theirs) < set(missing):  # not strictly better
        return missing
    name = prog or os.path.basename(script)
    print(f"{name}: {here()} has no {', '.join(missing)}; running under {SYSTEM_PYTHON}",
          file=sys.stderr, flush=True)
    os.execve(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.realpath(script), *argv],
              {**os.environ, REEXEC_ENV: "1"})
    return missing  # not reached


def install_hint(missing, script):
    """What to install for the modules (Debian's packages) and how to run script then."""
    pkgs = " ".join(f"python3-{m}" for m in missing)
    torch = " --with-torch" if {"torch", "torchvision", "numpy"} & set(missing) else ""
    return (f"install {pkgs} (scripts/setup.sh{torch} does) and run {SYSTEM_PYTHON} "
            f"{os.path.relpath(os.path.realpath(script))}")
