#!/usr/bin/env python3
"""dp with tensors of real models' sizes: a weight over DataParallel's
10 MiB coalescing unit is a group alone, and every buffer a group passes
through must hold it. Usage: test_dp_sizes.py DPSCALE CASE; exit 0 pass,
1 fail (meson's convention)."""
from listing import DPSCALE, LONG, exit_if_listing, test

# dp with real models' tensor sizes: a weight over the 10 MiB coalescing unit, every preset
# (a minute on a loaded machine, 3-5 times that in CI's sanitizer build: its hang guard 1200 s)
TESTS = [test("dp sizes " + c.replace("_", " "), DPSCALE, c,
              timeout=1200 if c == "presets" else 300,
              priority=LONG if c == "presets" else 0)
         for c in ("large_tensor", "check_around", "presets")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from helpers import Failure, dpscale, expect, read_folder

MIB10 = 10 << 20


def width_around_10mib(above):
    """The smallest hidden width whose width x width fp32 weight is over
    10 MiB (above), or the largest one at most 10 MiB."""
    w = 1
    while (w + 1) * (w + 1) * 4 <= MIB10:
        w += 1
    return w + 1 if above else w


def run_dp(binary, out, name, *args):
    p = dpscale(binary, "run", "--mode", "dp", *args, out=out, name=name)
    expect(p.returncode == 0, f"dp {' '.join(args)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    runs = read_folder(os.path.join(out, name))[0]
    expect(runs[0]["status"] == "ok", f"dp {' '.join(args)}: {runs[0]['status']}: {runs[0]['error']}")
    return runs[0]


def case_large_tensor(binary):
    """A 11.6 MB weight (width 1700) through dp's default replicate and
    reduce: before, the reduce's staging buffer was 10 MiB and the heap broke."""
    with tempfile.TemporaryDirectory() as out:
        run_dp(binary, out, "t", "--gpus", "2", "--model", "small", "--width", "1700",
               "--tokens", "4", "--steps", "2")


def case_check_around(binary):
    """Weights just above and just below 10 MiB, alone and beside smaller
    tensors, on 2 and 3 devices: the parameters match one device's."""
    with tempfile.TemporaryDirectory() as out:
        for above in (True, False):
            width = width_around_10mib(above)
            for gpus, layers in (("2", "1"), ("3", "2")):
                name = f"w{width}-g{gpus}"
                r = run_dp(binary, out, name, "--gpus", gpus, "--model", "small",
                           "--width", str(width), "--layers", layers, "--tokens", "2",
                           "--classes", "16", "--batch", "6", "--steps", "3", "--warmup", "1",
                           "--check")
                expect(r["check"] == "pass", f"{name}: check {r['check']} ({r['check_max_rel_diff']})")


def presets(binary):
    """The MLP presets' names `dpscale info` lists (the model files' have shapes of their own)."""
    p = subprocess.run([binary, "info", "--backend", "host"], capture_output=True, text=True,
                       timeout=300)
    expect(p.returncode == 0, f"dpscale info: exit {p.returncode}\n{p.stderr}")
    lines = p.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("presets, MLPs:"))
    names = []
    for line in lines[start + 2:]:
        if not line.startswith("  ") or line.lstrip().startswith("("):
            break
        names.append(line.split()[0])
    expect(len(names) >= 6 and "gpt2-mlp" in names, f"MLP presets read from `dpscale info`: {names}")
    return names


def case_presets(binary):
    """Every preset runs one dp step on 2 devices, at one token a sample and
    one hidden layer: each keeps its own tensor shapes (input x hidden,
    hidden x classes), which are what coalescing groups."""
    with tempfile.TemporaryDirectory() as out:
        for name in presets(binary):
            run_dp(binary, out, name, "--gpus", "2", "--model", name, "--tokens", "1",
                   "--layers", "1", "--batch", "2", "--steps", "1", "--warmup", "0", "--trace-steps", "0")


CASES = {"large_tensor": case_large_tensor, "check_around": case_check_around,
         "presets": case_presets}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    try:
        CASES[case](binary)
    except Failure as e:
        print(f"FAIL {case}: {e}")
        return 1
    print(f"ok {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
