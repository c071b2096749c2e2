#!/usr/bin/env python3
"""Every op kind a model file allows, run by dp, ddp and fsdp with --check
on 2 host devices: a run that exits non-zero, fails its check or prints a
sanitizer's report fails (under the ASan/UBSan build, a buffer an op
overruns is caught here, as the columns buffer was for a GEMM's bias).

usage: test_model_matrix.py DPSCALE CASE
  ops       one generated file (tests/model_writer.py) per op variant: gemm
            with weight and bias, weight alone, without weight (b 1 and 3),
            resample, norm with weight and bias, either, neither, each act
            fn, add, embedding; the variant is the model's first op (reading
            the input) and its last (writing the logits), the widest of its
            kind in the file; 1 and 7 samples a device, dp, ddp and fsdp
  exported  the file e1 (two biased gemms, no norm, no embedding), and
            model_export.py's files of an MLP (Flatten, Linear(3072, 256),
            ReLU, Linear(256, 10)), a small CNN (tests/model_examples.py) and
            torchvision's resnet18 on 3x32x32 (fewer modes and samples: its
            size); the exported ones are skipped, saying so, without PyTorch"""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("model matrix " + c, DPSCALE, c, timeout=400) for c in ("ops", "exported")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from helpers import HERE, PYTHON, SCRIPTS, Failure, dpscale, expect, missing_modules, read_folder, \
    run_cases
from model_writer import FNS, Model, sanitizer_report, stderr_excerpt

MODES = ("dp", "ddp", "fsdp")
CLASSES = 4
E1 = """dpscale-model 1
name e1
input 3072
classes 10
tensor 1.weight 256x3072 ready=3
tensor 1.bias 256 ready=2
tensor 3.weight 10x256 ready=1
tensor 3.bias 10 ready=0
op gemm 1 m=1 k=3072 n=256 weight=1.weight bias=1.bias saved=12288
op gemm 3 m=1 k=256 n=10 weight=3.weight bias=3.bias
"""


def run_file(binary, path, tmp, mode, per_device):
    """`dpscale run` of a model file on 2 host devices, one step with --check:
    exit 0, the check passing, no sanitizer report."""
    label = f"{os.path.basename(path)} --mode {mode} --batch-per-gpu {per_device}"
    p = dpscale(binary, "run", "--model", path, "--mode", mode, "--gpus", "2", "--host-devices",
                "2", "--batch-per-gpu", str(per_device), "--steps", "1", "--warmup", "0",
                "--check", "--no-nvml", out=tmp, name=f"{os.path.basename(path)}-{mode}-{per_device}")
    report = sanitizer_report(p.stderr)
    expect(p.returncode == 0 and not report,
           f"{label}: exit {p.returncode}{', ' + report if report else ''}\n{stderr_excerpt(p.stderr)}")
    runs = read_folder(os.path.join(tmp, f"{os.path.basename(path)}-{mode}-{per_device}"))[0]
    expect(len(runs) == 1 and runs[0]["status"] == "ok" and runs[0]["check"] == "pass",
           f"{label}: status {runs[0]['status']}, check {runs[0]['check']}: {runs[0]['error']}")


def run_all(binary, path, tmp, modes=MODES, per_device=(1, 7)):
    for mode in modes:
        for n in per_device:
            run_file(binary, path, tmp, mode, n)
    print(f"{os.path.basename(path)}: {', '.join(modes)} at {per_device} samples a device: pass")


# Each variant: the input it reads as the first op, and how it is added
# (m: the Model, src: the op it reads, other: an earlier op, for add). Its
# widths exceed those of the other ops of its file, so that the buffers
# sized by the widest op of a kind are sized by it; its outputs are rows of
# CLASSES, so that it can be last.
VARIANTS = {
    "gemm": (30, lambda m, src, other: m.gemm(3, 10, 24, src=src)),
    "gemm-nobias": (30, lambda m, src, other: m.gemm(3, 10, 24, bias=False, src=src)),
    "gemm-noweight": (72, lambda m, src, other: m.bmm(1, 4, 6, 8, src=src)),
    "gemm-noweight-b3": (216, lambda m, src, other: m.bmm(3, 4, 6, 8, src=src)),
    "resample": (36, lambda m, src, other: m.resample(40, src)),
    "norm": (48, lambda m, src, other: m.norm(24, src=src, rows=2)),
    "norm-weight": (48, lambda m, src, other: m.norm(24, bias=False, src=src, rows=2)),
    "norm-bias": (48, lambda m, src, other: m.norm(24, weight=False, src=src, rows=2)),
    "norm-plain": (48, lambda m, src, other: m.norm(24, weight=False, bias=False, src=src, rows=2)),
    "add": (36, lambda m, src, other: m.add(other, src=m.fit(src, m.size[other]))),
    "embedding": (24, lambda m, src, other: m.embedding(3, 5, 8, src=src)),
}
VARIANTS.update({f"act-{fn}": (36, lambda m, src, other, fn=fn: m.act(fn, src=m.fit(src, 36)))
                 for fn in FNS})


def variant_file(name):
    """The variant's model: it first (on the input), a narrow gemm where the
    file has no tensor yet, it last (from the gemm's or its first output)."""
    input_elems, add = VARIANTS[name]
    m = Model(name, input_elems, CLASSES)
    first = add(m, "input", "input")
    expect(m.ops[0][1] == first, f"{name}: a resample before the variant: {m.ops}")
    if not m.tensors:
        m.gemm(2, 6, 4, bias=False)
    last = add(m, m.last, first)
    expect(m.last == last and m.size[last] % CLASSES == 0,
           f"{name}: the variant's {m.size[last]} outputs are not rows of {CLASSES}")
    return m.text()


def case_ops(binary):
    with tempfile.TemporaryDirectory() as tmp:
        for name in VARIANTS:
            path = os.path.join(tmp, name + ".model")
            with open(path, "w") as f:
                f.write(variant_file(name))
            run_all(binary, path, tmp)


def export(spec, shape, out):
    """model_export.py SPEC --input SHAPE --out OUT, tests/ importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SCRIPTS, HERE]))
    p = subprocess.run([PYTHON, os.path.join(SCRIPTS, "model_export.py"), spec, "--input", shape,
                        "--out", out], capture_output=True, text=True, env=env, timeout=240)
    if p.returncode != 0:
        raise Failure(f"model_export.py {spec} --input {shape}: exit {p.returncode}\n{p.stderr}")
    return out


def case_exported(binary):
    with tempfile.TemporaryDirectory() as tmp:
        e1 = os.path.join(tmp, "e1.model")
        with open(e1, "w") as f:
            f.write(E1)
        run_all(binary, e1, tmp)
        missing = missing_modules(["torch", "torchvision"])
        if missing:
            print(f"skipped: the exported MLP, CNN and resnet18: {PYTHON} lacks "
                  f"{', '.join(missing)} (scripts/setup.sh --with-torch installs them)")
            return 0
        run_all(binary, export("model_examples:mlp", "3x32x32", os.path.join(tmp, "mlp.model")),
                tmp)
        run_all(binary, export("model_examples:small_cnn", "3x16x16",
                               os.path.join(tmp, "cnn.model")), tmp)
        resnet = export("torchvision.models.resnet18", "3x32x32", os.path.join(tmp, "resnet18.model"))
        run_all(binary, resnet, tmp, modes=("ddp", "fsdp"), per_device=(1,))
        run_file(binary, resnet, tmp, "dp", 2)
    return 0


if __name__ == "__main__":
    sys.exit(run_cases(globals()))
