#!/usr/bin/env python3
"""On a GPU: dp and ddp train as one device does, in fp32 and bf16, and two
replicas on one GPU; the GPU's losses follow the host backend's, with each
Linear's bias in cuBLASLt's epilogue or unfused, and memory.csv holds
cuBLAS's workspace; skipped (77) without one.
Usage: test_gpu.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail, 77
skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("gpu " + " ".join(c), DPSCALE, "gpu", *c, suite="gpu", timeout=600)
         for c in (["dp", "fp32"], ["dp", "bf16"], ["ddp", "fp32"], ["ddp", "bf16"],
                   ["dp", "fp32", "0,0"])] + \
        [test("gpu host " + " ".join(c), DPSCALE, "host", *c, suite="gpu", timeout=600)
         for c in (["dp", "fp32"], ["dp", "bf16"], ["ddp", "fp16"], ["dp", "bf16", "unfused"],
                   ["dp", "fp32", "unfused"], ["dp", "bf16", "odd"], ["ddp", "fp32", "odd", "lean"],
                   ["dp", "bf16", "odd", "lean"])]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from helpers import (compare_losses, dpscale, expect, losses, memory_at_peak, missing_modules,
                     read_folder, run_cases)


def no_gpu(binary):
    """Why there is no CUDA device to run on (said), or None."""
    p = subprocess.run([binary, "info", "--backend", "cuda"], capture_output=True, text=True)
    if p.returncode == 0:
        return None
    print(f"skipped: no CUDA device ({p.stderr.strip()})")
    return p.stderr.strip() or "no CUDA device"


def case_gpu(binary, mode, precision, *devices):
    """On a GPU: dp/ddp train as one device does (--check). Skipped (77) without one."""
    if no_gpu(binary):
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


def case_host(binary, mode, precision, *how):
    """On a GPU: every step's loss within the precision's tolerance of the
    host backend's for the same configuration (torch_model's LOSS_TOL*: the
    GPU's sums in other orders, as against PyTorch), each Linear an addmm
    through cuBLASLt's bias epilogue or, with `unfused`, as PyTorch's
    unfused addmm (DPSCALE_UNFUSED_BIAS=1); with `odd`, 1001 classes (the
    loss's rows off 16-byte boundaries: its kernels' scalar head and tail),
    with `lean`, the fused loss (xent); the GPU's memory.csv holds one
    cuBLAS workspace of PyTorch's size and no fp32 GEMM output. Skipped (77)
    without a GPU or numpy."""
    if no_gpu(binary) or missing_modules(["numpy"]):
        return 77
    from dpstools.torch_model import LOSS_TOL, LOSS_TOL_BF16, LOSS_TOL_FP16
    tol = {"fp32": LOSS_TOL, "bf16": LOSS_TOL_BF16, "fp16": LOSS_TOL_FP16}[precision]
    os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    if "unfused" in how:
        os.environ["DPSCALE_UNFUSED_BIAS"] = "1"
    curves = {}
    extra = (["--classes", "1001"] if "odd" in how else []) + \
        ([f"--{mode}-impl", "lean"] if "lean" in how else [])
    with tempfile.TemporaryDirectory() as out:
        for backend in ("cuda", "host"):
            dpscale(binary, "run", "--mode", mode, "--precision", precision, "--model", "small",
                    "--steps", "6", *extra, out=out, name=backend, backend=backend, check_rc=0,
                    timeout=600)
            curves[backend] = losses(os.path.join(out, backend))[1]
        cats = next(iter(memory_at_peak(os.path.join(out, "cuda")).values()))
    worst, k = compare_losses(curves["cuda"], curves["host"], f"{mode} {precision}")
    expect(worst <= tol, f"{mode} {precision} {' '.join(how)}: step {k}'s loss "
           f"{curves['cuda'][k]} on the GPU, {curves['host'][k]} on the host: relative "
           f"difference {worst:.3g} over {tol:g}")
    ws = cats.get("cuBLAS workspace")
    expect(ws in (33554432, 8519680), f"memory.csv's cuBLAS workspace: {ws} bytes, expected "
           "PyTorch's 32 MiB (compute capability 9, 10, 12) or 8 MiB + 128 KiB")
    expect("autocast GEMM output" not in cats, f"memory.csv still has an fp32 GEMM output: {cats}")
    return 0


if __name__ == "__main__":
    run_cases(globals())
