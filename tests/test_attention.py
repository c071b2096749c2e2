#!/usr/bin/env python3
"""A backend's attention (the attn and attn_bwd ops, run by
tests/attn_check.c) against PyTorch's math attention on the CPU: the host
backend's (src/backend/host_attn.c; suite torch) and the cuda backend's
(kernels/attention.cu, on device 0; suite gpu). The reference is
softmax(q·kᵀ/√d, masked when causal)·v in float64 from the same q, k, v
(rounded to the type under test), its log-sum-exp, and its q, k, v
gradients by autograd from the same output gradient. Each within a bound
times the reference's largest magnitude (at least 1): out 1e-5 in fp32,
and in bf16 and fp16, whose inputs and outputs are rounded, 2 and 0.5
units of the type's last place (2^-7, 2^-10); dqkv 4 times out's bound;
lse, fp32 in every type, 1e-5. The same shapes and bounds for both
backends. Sizes: t = 37 and 130, not multiples of the 64-row tile, causal
and not.

usage: test_attention.py ATTN_CHECK compare host|cuda DTYPE
Exit 77 (skip) without PyTorch, and for cuda when attn_check finds no CUDA
device (it exits 77 saying why)."""
from listing import exit_if_listing, test

ATTN_CHECK = "@attn_check@"
DTYPES = ("f32", "bf16", "f16")
TESTS = [test(f"attention host {dt}", ATTN_CHECK, "compare", "host", dt, suite="torch", timeout=120)
         for dt in DTYPES]
TESTS += [test(f"attention cuda {dt}", ATTN_CHECK, "compare", "cuda", dt, suite="gpu", timeout=120)
          for dt in DTYPES]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import tempfile

from helpers import expect, need_torch, run_cases

# (samples, heads, t, d, causal)
SHAPES = [(2, 3, 37, 16, 0), (2, 3, 37, 16, 1), (1, 2, 130, 64, 1), (1, 1, 5, 8, 0)]
TOLERANCE = {"f32": 1e-5, "bf16": 2.0 ** -6, "f16": 2.0 ** -11}


def torch_reference(qkv, dout, heads, t, d, causal):
    """out, lse and dqkv of PyTorch's math attention in float64."""
    import torch
    x = qkv.double().requires_grad_(True)
    s = x.shape[0]
    q, k, v = (x[:, :, i * heads * d:(i + 1) * heads * d].reshape(s, t, heads, d).transpose(1, 2)
               for i in range(3))
    scores = q @ k.transpose(-2, -1) / d ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(s, t, heads * d)
    out.backward(dout.double())
    return out.detach(), lse.detach(), x.grad


def rounded(x, dt):
    import torch
    kind = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dt]
    return x.to(kind).float()


def one_shape(binary, backend, dt, shape, tmp):
    """Checks attn_check BACKEND's out, lse and dqkv for shape against
    PyTorch's; the reason when attn_check skipped (77: no CUDA device), else None."""
    import torch
    s, heads, t, d, causal = shape
    g = torch.Generator().manual_seed(t * 7 + causal)
    qkv = rounded(torch.randn(s, t, 3 * heads * d, generator=g), dt)
    dout = rounded(torch.randn(s, t, heads * d, generator=g), dt)
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(src, "wb") as f:
        f.write(qkv.numpy().tobytes() + dout.numpy().tobytes())
    p = subprocess.run([binary, backend, *map(str, shape), dt, src, dst], capture_output=True,
                       text=True)
    if p.returncode == 77 and backend == "cuda":
        return p.stderr.strip() or "attn_check exited 77 without a reason"
    expect(p.returncode == 0, f"attn_check {backend} {shape} {dt}: exit {p.returncode} "
                              f"(expected 0): {p.stderr}")
    got = torch.frombuffer(bytearray(open(dst, "rb").read()), dtype=torch.float32)
    n1, nl = s * t * heads * d, s * heads * t
    expect(got.numel() == 4 * n1 + nl, f"attn_check {backend} {shape}: {got.numel()} floats "
                                       f"written, expected {4 * n1 + nl}")
    out, lse, dqkv = got[:n1], got[n1:n1 + nl], got[n1 + nl:]
    want = torch_reference(qkv, dout, heads, t, d, causal)
    for name, a, b in (("out", out, want[0]), ("lse", lse, want[1]), ("dqkv", dqkv, want[2])):
        b = b.reshape(-1).float()
        scale = max(float(b.abs().max()), 1.0)
        tol = TOLERANCE[dt] * scale * (4 if name == "dqkv" else 1)
        if name == "lse":
            tol = 1e-5 * scale  # fp32 in every type
        err = float((a - b).abs().max())
        expect(err <= tol, f"{backend} {dt} {shape}: {name} differs from PyTorch's by {err:.3g} "
                           f"(allowed {tol:.3g})")
    print(f"{backend} {dt} samples={s} heads={heads} t={t} d={d} causal={causal}: out, lse and "
          "dqkv match PyTorch's math attention")
    return None


def case_compare(binary, backend, dt):
    """Every shape of SHAPES on BACKEND (host or cuda) in DT against PyTorch;
    77 without PyTorch, or when attn_check cuda finds no CUDA device."""
    expect(backend in ("host", "cuda") and dt in DTYPES,
           f"compare {backend} {dt}: expected host|cuda and one of {DTYPES}")
    skip = need_torch()
    if skip:
        return skip
    with tempfile.TemporaryDirectory() as tmp:
        for i, shape in enumerate(SHAPES):
            no_device = one_shape(binary, backend, dt, shape, tmp)
            if no_device and i == 0:
                print(f"skipped: no CUDA device for the cuda backend's attention ({no_device})")
                return 77
            expect(not no_device, f"attn_check cuda {shape} {dt}: exit 77 (no device) after "
                                  f"{i} shapes ran on the device: {no_device}")
    return 0


if __name__ == "__main__":
    run_cases(globals())
