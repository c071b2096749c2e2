#!/usr/bin/env python3
"""torch_ops.csv: PyTorch's own per-op breakdown of one step (dpstools.torch_ops)
beside dpscale's ops.csv.

usage: test_torch_ops.py DPSCALE CASE [ARGS...]
  names             ATen ops and autograd nodes to dpscale's kinds (needs
                    nothing but the package)
  negative_self     op_rows on a synthetic profiler trace whose ops have
                    children with negative self times (as the profiler gives
                    on a busy machine): each counted as 0, every other event's
                    self time in its kind's row (needs nothing but the package)
  run MODE GPUS     dpscale (host backend) and torch_reference.py on the CPU, a
                    model file of six kinds and the small MLP preset: PyTorch's
                    rows have those kinds forward and backward, loss and
                    optimizer, kinds of the known set only, each a time of 0 or
                    more, some time in all, the profiled step (the one after the
                    timed ones) on every row, a FLOP count on the gemms; the
                    results reader takes the folder; summary.md's per-op table
                    (plot.py --torch) has PyTorch's column with a time for each
                    of dpscale's top kinds. Times are only read for their shape:
                    on a busy machine their ratios are chance
  real_modules      dpstools.real_modules (the device check's transformers models)
                    under torch_reference.py --module on the CPU, its tiny GPT-2
                    and BERT built on a stand-in of transformers' four classes
                    (their keyword arguments and forward's), where transformers
                    itself is not installed: their logits as rows, the run ok
Exit 77 (skip) without PyTorch for run and real_modules (scripts/setup.sh --with-torch)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("torch ops names", DPSCALE, "names", suite=NOSAN),
         test("torch ops negative self", DPSCALE, "negative_self", suite=NOSAN)]
TESTS += [test(f"torch ops run {m} {g}", DPSCALE, "run", m, g, suite="torch", timeout=300,
               parallel=False) for m, g in (("dp", "1"), ("ddp", "2"))]
TESTS += [test("torch real modules", DPSCALE, "real_modules", suite="torch", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math
import os
import subprocess
import tempfile
from types import SimpleNamespace

from dpstools import results as dpsresults
from dpstools import torch_ops
from dpstools.op_table import TITLE
from helpers import (PYTHON, SCRIPTS, dpscale, expect, need_torch, read_table, run_cases,
                     torch_ref, write)
from model_writer import ops_mix_file

COMMON = ["--steps", "3", "--warmup", "1", "--batch", "64"]
PROFILED_STEP = 4  # torch_train.Rank.profiled_step: the one after warm-up and timed steps
KNOWN = {"gemm", "attention", "norm", "act", "embedding", "add", "mul", "cat", "resample",
         "cast", "loss", "optimizer", "other"}
NAMES = {"aten::addmm": "gemm", "aten::linear": "gemm", "aten::convolution": "gemm",
         "aten::cudnn_convolution": "gemm", "aten::_convolution": "gemm",
         "aten::convolution_backward": "gemm", "AddmmBackward0": "gemm",
         "ConvolutionBackward0": "gemm", "aten::bmm": "gemm", "aten::matmul": "gemm",
         "aten::native_layer_norm": "norm", "aten::cudnn_batch_norm": "norm",
         "NativeLayerNormBackward0": "norm", "aten::native_batch_norm_backward": "norm",
         "aten::relu_": "act", "aten::gelu": "act", "aten::_softmax": "act",
         "GeluBackward0": "act", "aten::threshold_backward": "act", "aten::hardtanh": "act",
         "aten::add_": "add", "aten::add": "add", "aten::embedding": "embedding",
         "aten::embedding_dense_backward": "embedding", "aten::mul": "mul", "aten::cat": "cat",
         "aten::max_pool2d_with_indices": "resample", "aten::adaptive_avg_pool2d": "resample",
         "aten::clone": "resample", "aten::copy_": "resample",
         "aten::cross_entropy_loss": "loss", "aten::_log_softmax": "loss",
         "aten::nll_loss_forward": "loss", "NllLossBackward0": "loss",
         "aten::_to_copy": "cast", "aten::empty": None, "aten::t": None, "aten::view": None,
         "torch::autograd::AccumulateGrad": None}


def case_names(_binary):
    wrong = {n: (torch_ops.aten_kind(n), k) for n, k in NAMES.items()
             if torch_ops.aten_kind(n) != k}
    expect(not wrong, f"torch_ops.aten_kind: (got, want) {wrong}")
    return 0


class Event:
    """A torch.profiler FunctionEvent as op_rows reads it, on one thread."""

    def __init__(self, name, start, self_us, parent=None, seq=-1, flops=0):
        self.name, self.self_cpu_time_total, self.self_cuda_time_total = name, self_us, 0.0
        self.time_range = SimpleNamespace(start=start)
        self.sequence_nr, self.thread, self.fwd_thread = seq, 1, 1
        self.flops, self.input_shapes = flops, [[4, 8], [8, 16]]
        self.cpu_parent, self.cpu_children = parent, []
        if parent:
            parent.cpu_children.append(self)


def negative_trace():
    """A step of Linear, ReLU, the loss, their backward and SGD, the profiler's
    events with self times in µs; the addmm under linear, the mm under its
    backward node and the add_ under the optimizer's step below 0."""
    node = "autograd::engine::evaluate_function: "
    linear = Event("aten::linear", 0, 4)
    loss = Event("dpscale::loss", 6, 1)
    mm_node = Event(node + "AddmmBackward0", 10, 1, seq=10)
    step = Event("Optimizer.step#SGD.step", 20, 5)
    return [linear, Event("aten::addmm", 1, -3, linear, seq=10, flops=1024),
            Event("aten::relu", 5, 2, seq=11), loss,
            Event("aten::cross_entropy_loss", 7, 6, loss, seq=12),
            mm_node, Event("aten::mm", 11, -2, mm_node),
            Event(node + "ThresholdBackward0", 12, 3, seq=11),
            step, Event("aten::add_", 21, -1, step)]


def case_negative_self(_binary):
    """A negative self time is counted as 0: each kind's ms is its events'
    self times with those below 0 left out, never below 0."""
    rows = torch_ops.op_rows(negative_trace(), False, 0.05, 4, "synthetic")
    got = {(r["kind"], r["direction"]): float(r["ms"]) for r in rows}
    want = {("gemm", "forward"): 0.004, ("act", "forward"): 0.002, ("loss", "forward"): 0.007,
            ("gemm", "backward"): 0.001, ("act", "backward"): 0.003,
            ("optimizer", "update"): 0.005}
    expect(got == want, f"torch_ops.op_rows on a trace with negative self times: ms {got}, "
           f"expected {want} (each negative self time counted as 0)")
    return 0


def check_rows(rows, kinds, step):
    """One configuration's torch_ops.csv rows: its kinds, each row's time 0 or
    more and some time in all, the profiled step (STEP, after the timed ones) and
    its time on every row, the gemms' FLOP."""
    cid = rows[0]["config_id"] if rows else "?"
    seen = {(r["kind"], r["direction"]) for r in rows}
    want = {(k, d) for k in kinds for d in ("forward", "backward")}
    want |= {("loss", "forward"), ("optimizer", "update")}
    expect(want <= seen, f"torch_ops.csv: {cid} lacks {sorted(want - seen)}; has {sorted(seen)}")
    expect({r["kind"] for r in rows} <= KNOWN,
           f"torch_ops.csv: {cid}: kinds outside {sorted(KNOWN)}: {sorted(seen)}")
    times = {(r["kind"], r["direction"]): float(r["ms"]) for r in rows}
    bad = {k: v for k, v in times.items() if not (math.isfinite(v) and v >= 0)}
    expect(not bad and sum(times.values()) > 0,
           f"torch_ops.csv: {cid}: ms below 0 or not a number {bad}, or no time at all: {times}")
    steps = {(r["step"], r["step_ms"]) for r in rows}
    expect(len(steps) == 1 and int(rows[0]["step"]) == step and float(rows[0]["step_ms"]) > 0,
           f"torch_ops.csv: {cid}: (step, step_ms) {sorted(steps)}, expected step {step} "
           f"(after the timed ones) with some time, one on every row")
    gemms = [r for r in rows if r["kind"] == "gemm"]
    expect(all(float(r["flop"]) > 0 for r in gemms), f"torch_ops.csv: {cid}: a gemm without FLOP")


def check_summary(tmp, mine, theirs, cid):
    """plot.py MINE --torch THEIRS: the per-op table with PyTorch's column, a
    time on each of the configuration's top kinds."""
    out = os.path.join(tmp, "plots")
    p = subprocess.run([PYTHON, os.path.join(SCRIPTS, "plot.py"), mine, "--torch", theirs,
                        "--out", out], capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, f"plot.py: exit {p.returncode}: {p.stderr[-2000:]}")
    with open(os.path.join(out, "summary.md")) as f:
        section = f.read().split(f"## {TITLE}")[-1].split("\n## ")[0]
    expect("| PyTorch ms |" in section, f"summary.md's {TITLE} has no PyTorch column:\n{section}")
    rows = [line for line in section.splitlines() if line.startswith(f"| {cid} |")]
    kinds = [line for line in rows if line.split(" | ")[2].endswith(("forward", "backward"))]
    expect(kinds, f"summary.md's {TITLE}: no op kind row of {cid}:\n{section}")
    for line in kinds:
        cell = line.rstrip(" |").split(" | ")[-1]
        expect(cell.replace(".", "", 1).isdigit(), f"summary.md: PyTorch's cell {cell!r} in "
               f"{line!r}")


def case_run(binary, mode, gpus):
    skip = need_torch()
    if skip:
        return skip
    with tempfile.TemporaryDirectory() as tmp:
        path, file_kinds = ops_mix_file(tmp)
        for i, (model, kinds) in enumerate([(path, file_kinds), ("small", {"gemm", "act"})]):
            args = ["--mode", mode, "--gpus", gpus, "--model", model, *COMMON]
            dpscale(binary, "run", *args, out=tmp, name=f"d{i}", check_rc=0)
            torch_ref(binary, *args, out=tmp, name=f"t{i}")
            folder = os.path.join(tmp, f"t{i}")
            dpsresults.read_folder(folder, {"runs.csv": [], "torch_ops.csv": []})
            run = read_table(os.path.join(folder, "runs.csv"))[0]
            rows = read_table(os.path.join(folder, torch_ops.FILE))
            expect(rows and all(r["config_id"] == run["config_id"] for r in rows),
                   f"{folder}/{torch_ops.FILE}: no rows, or not of {run['config_id']}")
            check_rows(rows, kinds, PROFILED_STEP)
            check_summary(tmp, os.path.join(tmp, f"d{i}"), folder, run["config_id"])
    return 0


# transformers' classes as dpstools.real_modules calls them: the configurations' keyword
# arguments and the forwards' (GPT-2's takes use_cache, BERT's does not), an embedding and a
# head inside, the logits on an output object
STAND_IN = """
import torch
class _Out:
    def __init__(self, logits):
        self.logits = logits
class GPT2Config:
    def __init__(self, vocab_size, n_positions, n_embd, n_layer, n_head, resid_pdrop,
                 embd_pdrop, attn_pdrop):
        assert resid_pdrop == embd_pdrop == attn_pdrop == 0.0
        self.vocab, self.d = vocab_size, n_embd
class BertConfig:
    def __init__(self, vocab_size, max_position_embeddings, hidden_size, num_hidden_layers,
                 num_attention_heads, intermediate_size, hidden_act, hidden_dropout_prob,
                 attention_probs_dropout_prob):
        assert hidden_dropout_prob == attention_probs_dropout_prob == 0.0
        self.vocab, self.d = vocab_size, hidden_size
class _Model(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = torch.nn.Embedding(cfg.vocab, cfg.d)
        self.head = torch.nn.Linear(cfg.d, cfg.vocab)
class GPT2LMHeadModel(_Model):
    def forward(self, input_ids=None, use_cache=None, return_dict=None):
        assert use_cache is False and return_dict
        return _Out(self.head(self.wte(input_ids)))
class BertForMaskedLM(_Model):
    def forward(self, input_ids=None, return_dict=None):
        assert return_dict
        return _Out(self.head(self.wte(input_ids)))
"""


def case_real_modules(binary):
    skip = need_torch()
    if skip:
        return skip
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if subprocess.run([PYTHON, "-c", "import transformers"], capture_output=True).returncode:
            os.makedirs(os.path.join(tmp, "transformers"))
            write(os.path.join(tmp, "transformers", "__init__.py"), STAND_IN)
            env["PYTHONPATH"] = tmp + os.pathsep + env.get("PYTHONPATH", "")
        for fn in ("tiny_gpt2_lm", "tiny_bert_mlm"):
            p = subprocess.run([PYTHON, os.path.join(SCRIPTS, "torch_reference.py"), "--device",
                                "cpu", "--dpscale", binary, "--module",
                                f"dpstools.real_modules:{fn}", "--input", "16", "--tokens",
                                "--batch", "2", "--steps", "2", "--warmup", "1", "--out", tmp,
                                "--name", fn], capture_output=True, text=True, timeout=240,
                               env=env)
            expect(p.returncode == 0, f"torch_reference.py --module dpstools.real_modules:{fn}: "
                   f"exit {p.returncode}: {p.stderr[-2000:]}")
            run = read_table(os.path.join(tmp, fn, "runs.csv"))[0]
            expect(run["status"] == "ok" and run["classes"] == "512" and run["tokens"] == "16",
                   f"{fn}: runs.csv status {run['status']}, {run['tokens']} rows of "
                   f"{run['classes']} classes a sample, not 16 of 512")
    return 0


if __name__ == "__main__":
    run_cases(globals())
