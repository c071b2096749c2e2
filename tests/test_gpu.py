#!/usr/bin/env python3
"""On a GPU: dp and ddp train as one device does, in fp32 and bf16, and two
replicas on one GPU; skipped (77) without one.
Usage: test_gpu.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail, 77
skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("gpu " + " ".join(c), DPSCALE, "gpu", *c, suite="gpu", timeout=600)
         for c in (["dp", "fp32"], ["dp", "bf16"], ["ddp", "fp32"], ["ddp", "bf16"],
                   ["dp", "fp32", "0,0"])]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from helpers import dpscale, expect, read_folder, run_cases


def case_gpu(binary, mode, precision, *devices):
    """On a GPU: dp/ddp train as one device does (--check). Skipped (77) without one."""
    p = subprocess.run([binary, "info", "--backend", "cuda"], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"skipped: no CUDA device ({p.stderr.strip()})")
        return 77
    with tempfile.TemporaryDirectory() as out:
        extra = ["--devices", devices[0]] if devices else []
        dpscale(binary, "run", "--mode", mode, "--precision", precision, "--model", "small",
                "--steps", "6", "--check", *extra, out=out, backend="cuda", check_rc=0,
                timeout=600)
        runs, devs, _, _, _ = read_folder(os.path.join(out, "t"))
        expect(runs[0]["check"] == "pass", f"check {runs[0]['check_max_rel_diff']}")
        expect(int(devs[0]["device_peak_bytes"]) >= int(devs[0]["alloc_peak_bytes"]) > 0,
               "device_peak_bytes (context included) below the harness's own allocations")
    return 0


if __name__ == "__main__":
    sys.exit(run_cases(globals()))
