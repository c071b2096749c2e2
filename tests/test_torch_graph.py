#!/usr/bin/env python3
"""A model file in PyTorch (scripts/dpstools/torch_graph.py, behind
torch_reference.py --model FILE): the reader against dpscale's, each op
against its definition, the module's gradients against central differences,
and the loss of every step and the final parameters against `dpscale run
--model FILE` on the host backend.

usage: test_torch_graph.py DPSCALE CASE [ARGS...]
  reader        the presets' files with dpscale's parameter counts; a
                hand-written file of every kind of op, and broken copies of
                it, accepted or refused at the same line as dpscale info
                --model; the flat layout, initialisation and batches;
                torch_reference.py's refusals of a model file (numpy only)
  ops           the hand-written file's ops against their definitions (numpy,
                float64); the module's gradients against central differences
                (float64) for it and for an exported residual conv net and
                GPT; each module's parameters are its file's
  fidelity MODE GPUS OPT BATCH
                dpscale run --model FILE --backend host and torch_reference.py
                --model FILE --device cpu for those three files, 3 steps
                after 1 of warm-up at the default learning rates: every
                step's loss within LOSS_TOL, the final parameters within the
                preset test's tolerances
Exit 77 (skip) without numpy, or without PyTorch for ops and fidelity
(scripts/setup.sh --with-torch installs python3-torch)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

# fidelity's [mode, gpus, optimizer, global batch]: ddp's 5 samples on 2 ranks are uneven shards
FIDELITY = [["dp", "1", "sgd", "4"], ["dp", "1", "adamw", "4"],
            ["ddp", "2", "sgd", "5"], ["ddp", "2", "adamw", "5"]]
TESTS = [test("torch graph reader", DPSCALE, "reader", suite=NOSAN, timeout=600),
         test("torch graph ops", DPSCALE, "ops", suite="torch", timeout=300)]
TESTS += [test("torch graph fidelity " + " ".join(c), DPSCALE, "fidelity", *c, suite="torch",
               timeout=300) for c in FIDELITY]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math
import os
import re
import subprocess
import sys
import tempfile

from helpers import (compare_losses, dpscale, expect, expect_exit, losses, need_torch,
                     params_diff, run_cases, torch_ref, write)

try:
    import numpy as np
    from dpstools import torch_graph, torch_model
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy)")
    sys.exit(77)


def gelu(v):
    return 0.5 * v * (1 + math.erf(v / math.sqrt(2)))


def sigmoid(v):
    return 1 / (1 + math.exp(-v))


# Each act fn by its definition (softmax: GELU, as model/graph.c runs it).
ACT = {"relu": lambda v: max(v, 0.0), "gelu": gelu, "softmax": gelu, "tanh": math.tanh,
       "sigmoid": sigmoid, "relu6": lambda v: min(max(v, 0.0), 6.0),
       "silu": lambda v: v * sigmoid(v), "hardswish": lambda v: v * min(max(v + 3, 0.0), 6.0) / 6,
       "hardsigmoid": lambda v: min(max(v + 3, 0.0), 6.0) / 6,
       "mish": lambda v: v * math.tanh(math.log1p(math.exp(v)))}

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every kind of op and key: an embedding whose table (10 elements) is shorter
# than its output (12), a gemm with and without bias, an act whose fn is not
# GELU, norms without bias and without weight, a resample that repeats (16 ->
# 20) and one that cuts (12 -> 6), a gemm without weight over b = 2, a
# residual from the input, a weight read by two ops (w1), a gemm of g = 2 groups,
# a mul scaling runs of 3 by another op's 4 elements, a cat of an op's output and
# one of a tensor.
HAND = """dpscale-model 1
name hand
input 12
classes 3
tensor emb 5x2 ready=5
tensor w1 4x3 ready=3
tensor b1 4 ready=4
tensor g 2 ready=2
tensor nb 4 ready=1
tensor w2 6x4 ready=0
tensor wg 6x2 ready=6
tensor bg 6 ready=7
tensor ctw 2 ready=8
op embedding e m=6 weight=emb
op gemm g1 m=4 k=3 n=4 weight=w1 bias=b1
op act a1 fn=tanh
op norm n1 c=2 weight=g
op norm n2 c=4 bias=nb
op resample r1 n=20
op gemm mm m=2 k=2 n=3 b=2
op add ad from=input
op resample r2 n=6
op gemm tie m=2 k=3 n=4 weight=w1
op gemm gg m=2 k=4 n=6 g=2 weight=wg bias=bg
op resample s1 in=tie n=4
op mul sc in=gg from=s1
op cat ct from=s1
op cat cw weight=ctw
op resample r3 n=8
op gemm out m=2 k=4 n=6 weight=w2
"""
# Broken copies of HAND: (what, line replaced, its replacement; None deletes it)
BROKEN = [("a ready value twice", "tensor nb 4 ready=1", "tensor nb 4 ready=2"),
          ("a weight of the wrong size", "op gemm g1 m=4 k=3 n=4 weight=w1 bias=b1",
           "op gemm g1 m=4 k=3 n=5 weight=w1 bias=b1"),
          ("no resample between sizes", "op resample r1 n=20", None),
          ("a key its kind does not take", "op act a1 fn=tanh", "op act a1 fn=tanh c=2"),
          ("an unknown fn", "op act a1 fn=tanh", "op act a1 fn=swish"),
          ("outputs not rows of classes", "classes 3", "classes 5"),
          ("a tensor no op names", "tensor w2 6x4 ready=0", "tensor w2 6x4 ready=0\n"
                                                            "tensor spare 3 ready=9"),
          ("an embedding table of one dimension", "tensor emb 5x2 ready=5",
           "tensor emb 10 ready=5"),
          ("an unknown op", "op add ad from=input", "op add ad from=nope"),
          ("a gemm without weight with a bias", "op gemm mm m=2 k=2 n=3 b=2",
           "op gemm mm m=2 k=2 n=3 b=2 bias=b1"),
          ("groups that do not divide n", "op gemm gg m=2 k=4 n=6 g=2 weight=wg bias=bg",
           "op gemm gg m=2 k=4 n=6 g=4 weight=wg bias=bg"),
          ("a mul whose scale does not divide its input", "op resample s1 in=tie n=4",
           "op resample s1 in=tie n=5"),
          ("a cat with both operands", "op cat cw weight=ctw", "op cat cw weight=ctw from=s1"),
          ("no format record", "dpscale-model 1", None),
          ("an unknown record", "name hand", "title hand")]
# The presets' files and their parameters (docs/model-file.md)
PRESET_PARAMS = {"resnet50": 25557032, "gpt2": 124439808, "bert-large": 335174458}
SEED = 1234
# Final parameters, dpscale's against PyTorch's (max |diff| / max |p|), at
# the default learning rates: test_torch_reference.py's tolerances. AdamW's
# division by each update's running RMS turns the rounding of near-zero
# gradients into updates of up to the learning rate: measured on the GPT,
# 7.4e-6 at the default 1e-3, 5.8e-5 at FIDELITY_LR's 1e-2, too near 1e-4.
PARAMS_TOL = {"sgd": torch_model.LOSS_TOL, "adamw": 1e-4}


def hand_file(tmp, text=HAND, name="hand"):
    return write(os.path.join(tmp, name + ".model"), text)


def refused_line(text):
    """The line number of a `FILE:LINE: what` refusal."""
    m = re.search(r"\.model:(\d+): ", text)
    return int(m.group(1)) if m else None


def dpscale_info(binary, path):
    return subprocess.run([binary, "info", "--model", path], capture_output=True, text=True,
                          timeout=300)


def check_presets(binary):
    """The presets' files: dpscale's parameter counts and rows."""
    for name, params in PRESET_PARAMS.items():
        path = os.path.join(REPO, "bench", "models", name + ".model")
        g = torch_graph.read(path)
        summary = dpscale_info(binary, path).stdout
        expect(g.params == params and f"{len(g.tensors)} tensors, {params} parameters" in summary
               and f"{len(g.ops)} ops" in summary and f"{g.rows} x {g.classes} logits" in summary,
               f"{name}: torch_graph reads {len(g.tensors)} tensors, {g.params} parameters, "
               f"{len(g.ops)} ops, {g.rows} rows; dpscale info says:\n{summary}")


def check_broken(binary, tmp):
    """Each broken copy of HAND refused at the line dpscale refuses it."""
    for what, old, new in BROKEN:
        expect(old in HAND.splitlines(), f"BROKEN: {old!r} is not a line of HAND")
        text = HAND.replace(old + "\n", "" if new is None else new + "\n", 1)
        path = hand_file(tmp, text, "broken")
        p = dpscale_info(binary, path)
        expect(p.returncode == 2, f"{what}: dpscale info --model exits {p.returncode}:\n{p.stderr}")
        try:
            torch_graph.read(path)
            mine = "accepted"
        except torch_graph.ModelFileError as e:
            mine = str(e)
        expect(refused_line(mine) == refused_line(p.stderr) is not None,
               f"{what}: torch_graph: {mine}\ndpscale: {p.stderr.strip()}")


def check_layout(g):
    """The flat buffer in the reverse of ready order; graph_init_params' values; batches."""
    expect([g.tensors[t].ready for t in g.order] == list(range(len(g.tensors)))[::-1],
           f"layout order {g.order}")
    flat = g.init(SEED)
    at = 0
    for t in g.order:  # each tensor contiguous, bound / sqrt(fan-in) * U(seed, 2**40 + t, i)
        ts = g.tensors[t]
        fan_in = ts.numel // ts.dims[0] if len(ts.dims) > 1 else ts.numel
        want = np.float32(1) / np.sqrt(np.float32(fan_in)) * \
            torch_model.uniform(SEED, (1 << 40) + t, np.arange(ts.numel))
        expect(np.array_equal(flat[at:at + ts.numel], want), f"tensor {ts.name}'s values")
        at += ts.numel
    expect(np.array_equal(g.join(g.split(flat)), flat), "split and join")
    x, y = g.batch(SEED, 3, 5)
    xs, ys = g.batch(SEED, 3, 2, sample0=3)
    expect(np.array_equal(xs, x[3:]) and np.array_equal(ys, y[3 * g.rows:]),
           "samples 3 and 4 of a batch are not sample0=3's")
    expect(x.shape == (5, 12) and x[1, 2] == torch_model.uniform(SEED, 2 + (3 << 8), [14])[0],
           f"inputs {x.shape}")
    u = torch_model.uniform(SEED, 3 + (3 << 8), np.arange(20)).astype(np.float64)
    expect(np.array_equal(y, np.minimum(np.floor((u + 1) * 0.5 * 3), 2).astype(np.int64)),
           f"labels {y}")


def check_refusals(binary, tmp):
    """torch_reference.py refuses, before PyTorch, a model file it cannot use."""
    cases = [(["--model", os.path.join(tmp, "absent.model")], "cannot read the model file"),
             (["--model", hand_file(tmp, HAND.replace("classes 3", "classes 5"), "bad")],
              "bad.model:30: the last op's output")]
    for args, needle in cases:
        p = torch_ref(binary, *args, out=tmp, name="refused", check_rc=None)
        expect_exit(p, 2, needle)


def case_reader(binary):
    check_presets(binary)
    with tempfile.TemporaryDirectory(prefix="dpscale-graph-") as tmp:
        path = hand_file(tmp)
        expect(dpscale_info(binary, path).returncode == 0, "dpscale info refuses HAND")
        g = torch_graph.read(path)
        expect((g.params, g.rows, [o.out_elems for o in g.ops]) ==
               (76, 4, [12, 16, 16, 16, 16, 20, 12, 12, 6, 8, 12, 4, 12, 16, 18, 8, 12]),
               f"hand: {g.params} parameters, {g.rows} rows, {[o.out_elems for o in g.ops]}")
        expect(g.columns() == {"model": "hand", "layers": 17, "width": 3, "tokens": 4,
                               "classes": 3, "params": 76}, f"columns {g.columns()}")
        check_layout(g)
        check_broken(binary, tmp)
        check_refusals(binary, tmp)
    return 0


# ---- ops: needs PyTorch ----

def reference_forward(g, w, x):
    """HAND's ops from their definitions (docs/model-file.md), one sample at a
    time in float64: w the tensors (file order), x [samples, input]."""
    out = []
    for xs in x:
        outs = []
        for op in g.ops:
            outs.append(reference_op(op, w, xs, outs))
        out.append(outs[-1])
    return np.array(out).reshape(-1, g.classes)


def reference_op(op, w, xs, outs):
    a = xs if op.inp == torch_graph.INPUT else outs[op.inp]
    if op.kind == "gemm" and op.weight >= 0:  # group c // (n/g) reads its k/g columns
        kg, ng = op.k // op.g, op.n // op.g
        W = w[op.weight].reshape(op.n, kg)
        bias = w[op.bias] if op.bias >= 0 else np.zeros(op.n)
        return np.array([sum(a[r * op.k + c // ng * kg + i] * W[c, i] for i in range(kg)) +
                         bias[c] for r in range(op.m) for c in range(op.n)])
    if op.kind == "gemm":
        A = a[:op.b * op.m * op.k].reshape(op.b, op.m, op.k)
        B = a[op.b * op.m * op.k:].reshape(op.b, op.k, op.n)
        return np.concatenate([A[j] @ B[j] for j in range(op.b)], axis=None)
    if op.kind == "resample":
        return np.array([a[i % len(a)] for i in range(op.n)])
    if op.kind == "norm":
        gamma = w[op.weight] if op.weight >= 0 else np.ones(op.c)
        beta = w[op.bias] if op.bias >= 0 else np.zeros(op.c)
        return np.array([a[i] * gamma[i % op.c] + beta[i % op.c] for i in range(len(a))])
    if op.kind == "act":
        return np.array([ACT[op.fn](float(v)) for v in a])
    if op.kind == "add":
        return a + (xs if op.frm == torch_graph.INPUT else outs[op.frm])
    if op.kind == "cat":
        other = w[op.weight].ravel() if op.weight >= 0 else (
            xs if op.frm == torch_graph.INPUT else outs[op.frm])
        return np.concatenate([a, other])
    if op.kind == "mul":
        s = xs if op.frm == torch_graph.INPUT else outs[op.frm]
        return np.array([a[i] * s[i // (len(a) // len(s))] for i in range(len(a))])
    table = w[op.weight].ravel()  # embedding
    return np.array([a[j] + table[j % len(table)] for j in range(len(a))])


def loss_of(torch, module, x, y):
    return torch.nn.functional.cross_entropy(module(x), y)


def check_gradients(torch, what, g, samples=3, h=1e-6, directions=3):
    """d loss along random directions of all the parameters: autograd's
    against central differences, float64 (h small enough that no ReLU's
    input crosses 0 within it: small_resnet's, its global pooling a real
    average, has one within 1e-5 at this seed)."""
    module = g.module(torch, g.init(SEED)).double()
    expect(sum(p.numel() for p in module.parameters()) == g.params and
           np.array_equal(g.flat(module), g.init(SEED)),
           f"{what}: the module's parameters are not the file's {g.params}")
    x, y = (torch.from_numpy(a) for a in g.batch(SEED, 0, samples))
    x = x.double()
    loss_of(torch, module, x, y).backward()
    params = list(module.parameters())
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for _ in range(directions):
        v = [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params]
        auto = sum(float((p.grad * d).sum()) for p, d in zip(params, v))
        with torch.no_grad():
            for p, d in zip(params, v):
                p += h * d
            up = float(loss_of(torch, module, x, y))
            for p, d in zip(params, v):
                p -= 2 * h * d
            down = float(loss_of(torch, module, x, y))
            for p, d in zip(params, v):
                p += h * d
        worst = max(worst, abs((up - down) / (2 * h) - auto) / abs(auto))
    print(f"{what}: {g.params} parameters, {len(g.ops)} ops; directional derivatives within "
          f"{worst:.3g} of central differences")
    expect(worst < 1e-6, f"{what}: autograd's directional derivative differs from central "
           f"differences by {worst:.3g} (relative)")


def export(tmp, name):
    """A model file of tests/model_examples.py's small_resnet (input 3x8x8)
    or a small GPT of dpstools.reference_models (16 tokens); its path."""
    from dpstools import model_export, reference_models
    import model_examples
    if name == "small_resnet":
        lines = model_export.model_file(name, "model_examples.small_resnet",
                                        model_examples.small_resnet(), (3, 8, 8))
    else:
        lines = model_export.model_file(name, "dpstools.reference_models:tiny_gpt",
                                        reference_models.tiny_gpt(), (16,), integer_input=True)
    return write(os.path.join(tmp, name + ".model"), "\n".join(lines) + "\n")


def case_ops(binary):
    skip = need_torch()
    if skip:
        return skip
    import torch
    with tempfile.TemporaryDirectory(prefix="dpscale-graph-") as tmp:
        g = torch_graph.read(hand_file(tmp))
        flat = g.init(SEED)
        x, _ = g.batch(SEED, 0, 3)
        module = g.module(torch, flat).double()
        got = module(torch.from_numpy(x).double()).detach().numpy()
        want = reference_forward(g, [a.astype(np.float64) for a in g.split(flat)],
                                 x.astype(np.float64))
        diff = float(np.abs(got - want).max())
        expect(got.shape == want.shape == (3 * g.rows, g.classes) and diff < 1e-12,
               f"hand: the module's logits {got.shape} differ from the ops' definitions by "
               f"{diff:.3g}")
        check_gradients(torch, "hand", g)
        for name in ("small_resnet", "tiny_gpt"):
            check_gradients(torch, name, torch_graph.read(export(tmp, name)))
    return 0


def case_fidelity(binary, mode, gpus, optimizer, batch):
    """The loss of every step within LOSS_TOL between dpscale's host backend
    and PyTorch on the CPU, and the final parameters, for each file."""
    skip = need_torch()
    if skip:
        return skip
    with tempfile.TemporaryDirectory(prefix="dpscale-graph-") as tmp:
        for path in (hand_file(tmp), export(tmp, "small_resnet"), export(tmp, "tiny_gpt")):
            fidelity(binary, tmp, path, optimizer,
                     ["--mode", mode, "--gpus", gpus, "--model", path, "--optimizer", optimizer,
                      "--batch", batch, "--steps", "3", "--warmup", "1"])
    return 0


def fidelity(binary, tmp, path, optimizer, common):
    name = os.path.basename(path)[:-len(".model")]
    mine_params, ref_params = (os.path.join(tmp, f"{name}-{who}.npy") for who in ("d", "t"))
    dpscale(binary, "run", *common, "--save-params", mine_params, out=tmp, name=name + "-d",
            check_rc=0)
    cid, mine = losses(os.path.join(tmp, name + "-d"))
    torch_ref(binary, *common, "--save-params", ref_params, out=tmp, name=name + "-t")
    tcid, ref = losses(os.path.join(tmp, name + "-t"))
    expect(tcid == cid, f"PyTorch's config_id {tcid} is not dpscale's {cid}")
    worst, k = compare_losses(mine, ref, cid)
    d = params_diff(np.load(mine_params), np.load(ref_params))
    print(f"{cid}: losses {mine} (dpscale) and {ref} (PyTorch): largest relative difference "
          f"{worst:.3g} (step {k}); final parameters {d:.3g} apart")
    expect(worst <= torch_model.LOSS_TOL,
           f"{cid}: step {k}'s loss is {mine[k]} in dpscale and {ref[k]} in PyTorch, relative "
           f"difference {worst:.3g} > {torch_model.LOSS_TOL}: {name}'s ops differ (step 0: "
           f"forward; later steps: backward or the optimizer)")
    tol = PARAMS_TOL[optimizer]
    expect(d <= tol, f"{cid}: dpscale's final parameters are {d:.3g} (max |diff| / max |p|) "
           f"away from PyTorch's, above {tol}: a gradient differs")


if __name__ == "__main__":
    run_cases(globals())
