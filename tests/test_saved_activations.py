#!/usr/bin/env python3
"""The activations dpscale keeps for backward against what PyTorch's
autograd saves for the same module and batch (docs/model-file.md, What
backward keeps).

usage: test_saved_activations.py DPSCALE compare MODEL
  compare MODEL   MODEL (mobilenet_v2 or resnet18, whose max pool keeps
                  its int64 indices, at 3x64x64, or scripts/dpstools/
                  reference_models.py's tiny_gpt and small_gpt, whose
                  attention is scaled_dot_product_attention, an attn op that
                  keeps no t x t scores, or tiny_gpt_eager, matmuls and a
                  softmax) run forward once in
                  training mode on the CPU at batch BATCH under
                  torch.autograd.graph.saved_tensors_hooks, summing the
                  bytes of each distinct storage it saves that is not a
                  parameter; then exported with scripts/model_export.py
                  and stepped once by `dpscale run --backend host` at the
                  same batch: memory.csv's `activations` category (the
                  outputs' arena, model/graph_plan.c) within TOLERANCE of
                  PyTorch's sum
Exit 77 (skip) without PyTorch and torchvision."""
from listing import DPSCALE, exit_if_listing, test

MODELS = ("mobilenet_v2", "resnet18", "tiny_gpt", "small_gpt", "tiny_gpt_eager")
TESTS = [test(f"model saved activations {m}", DPSCALE, "compare", m, suite="torch",
              timeout=600) for m in MODELS]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import sys
import tempfile

from helpers import dpscale, expect, need_torch, read_table, run_cases, script

BATCH = 2
TOLERANCE = 0.05
# (export spec, --input, token ids?)
SPECS = {"mobilenet_v2": ("torchvision.models.mobilenet_v2", "3x64x64", False),
         "resnet18": ("torchvision.models.resnet18", "3x64x64", False),
         "tiny_gpt": ("dpstools.reference_models:tiny_gpt", "16", True),
         "small_gpt": ("dpstools.reference_models:small_gpt", "128", True),
         "tiny_gpt_eager": ("dpstools.reference_models:tiny_gpt_eager", "16", True)}


def torch_saved_bytes(spec, shape, tokens):
    """Bytes of the distinct non-parameter storages autograd saves in one
    training-mode forward of spec's module at BATCH samples."""
    import torch
    from dpstools import model_export
    torch.manual_seed(0)
    model = model_export.load(spec)
    model.train()
    if tokens:
        x = torch.randint(0, model.wte.num_embeddings, (BATCH, *shape))
    else:
        x = torch.randn(BATCH, *shape)
    params = {p.data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        s = t.storage()
        if s.data_ptr() not in params:
            storages[s.data_ptr()] = max(storages.get(s.data_ptr(), 0), s.nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    return sum(storages.values())


def dpscale_activation_bytes(binary, path, tmp):
    """memory.csv's `activations` bytes of one host step at BATCH samples."""
    dpscale(binary, "run", "--model", path, "--batch", str(BATCH), "--steps", "1", "--warmup", "0",
            out=tmp, name="saved", check_rc=0)
    rows = [r for r in read_table(os.path.join(tmp, "saved", "memory.csv"))
            if r["category"] == "activations"]
    expect(len(rows) == 1, f"{path}: memory.csv has {len(rows)} rows of category activations, "
                           "expected one (model/graph.c's outputs' arena)")
    return int(rows[0]["bytes_at_peak"])


def case_compare(binary, model):
    skip = need_torch()
    if skip:
        return skip
    spec, shape, tokens = SPECS[model]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{model}.model")
        args = [spec, "--input", shape, "--out", path] + (["--tokens"] if tokens else [])
        p = script("model_export.py", *args)
        expect(p.returncode == 0, f"model_export.py {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
        ours = dpscale_activation_bytes(binary, path, tmp)
    theirs = torch_saved_bytes(spec, tuple(int(v) for v in shape.split("x")), tokens)
    off = ours / theirs - 1
    print(f"{model}: PyTorch saves {theirs} B at batch {BATCH}, dpscale keeps {ours} B ({off:+.1%})")
    expect(abs(off) <= TOLERANCE,
           f"{model}: dpscale keeps {ours} B of activations at batch {BATCH}, PyTorch's autograd "
           f"saves {theirs} B ({off:+.1%}, more than {TOLERANCE:.0%} apart): see which op kind "
           "keeps what in model/graph_plan.c against docs/model-file.md's table")
    return 0


if __name__ == "__main__":
    run_cases(globals())
