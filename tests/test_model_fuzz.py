#!/usr/bin/env python3
"""Random valid model files run for one step: each file a random sequence
of the op kinds the format allows (tests/model_writer.py), small sizes,
inputs taken from any earlier op, tensors shared by several ops, random
saved= and moved= keys and a random ready order; each run by a random
strategy (dp, ddp, zero1, zero2, fsdp) on 1 to 3 host devices with --check.
A file dpscale refuses, a run that exits non-zero or fails its check, or a
sanitizer's report in its stderr fails, printing the file.

usage: test_model_fuzz.py DPSCALE SEED COUNT"""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("model fuzz", DPSCALE, "1", "60", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import random
import sys
import tempfile

from helpers import dpscale, expect, read_folder, run_case
from model_writer import FNS, KINDS, Model, sanitizer_report, stderr_excerpt

MODES = ("dp", "ddp", "zero1", "zero2", "fsdp")


def source(m, rng):
    """The op a new op reads: mostly the last, else any earlier op or the input."""
    return m.last if rng.random() < 0.7 else rng.choice(list(m.size))


def shared(m, rng):
    """An existing two-dimensional tensor (a gemm's weight, an embedding's
    table) a third of the times there is one, for another op to name too (tied
    weights: GPT-2's head reads its token embedding), else None."""
    two = [(t, s) for t, s in m.tensors if len(s) == 2]
    return rng.choice(two) if two and rng.random() < 0.35 else None


def add_gemm(m, rng, src):
    if rng.random() < 0.25:
        return m.bmm(rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 5), src)
    rows, k, n = rng.randint(1, 4), rng.randint(1, 12), rng.randint(1, 24)
    tied = shared(m, rng)
    if tied:
        (n, k), tied = tied[1], tied[0]
    return m.gemm(rows, k, n, bias=rng.random() < 0.5, src=src, tied=tied)


def add_embedding(m, rng, src):
    tied = shared(m, rng)
    if tied:
        (vocab, d), tied = tied[1], tied[0]
        return m.embedding(rng.randint(1, 4), vocab, d, src, tied=tied)
    return m.embedding(rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 8), src)


def add_op(m, rng):
    """One random op of a random kind."""
    kind, src = rng.choice(KINDS), source(m, rng)
    if kind == "gemm":
        return add_gemm(m, rng, src)
    if kind == "resample":
        return m.resample(rng.randint(1, 64), src)
    if kind == "norm":
        return m.norm(rng.randint(1, 24), weight=rng.random() < 0.5, bias=rng.random() < 0.5,
                      src=src, rows=rng.randint(1, 3))
    if kind == "act":
        return m.act(rng.choice(FNS), src)
    if kind == "add":
        return m.add(rng.choice(list(m.size)), src)
    return add_embedding(m, rng, src)


def random_model(rng, name):
    """A valid model of 1 to 8 random ops, a gemm head where none has a tensor."""
    m = Model(name, rng.randint(1, 64), rng.randint(2, 6))
    for _ in range(rng.randint(1, 8)):
        add_op(m, rng)
    if not m.tensors:
        m.gemm(1, m.size[m.last], m.classes, bias=rng.random() < 0.5)
    m.rows_of_classes(rng.randint(1, 3))
    for _, _, keys in m.ops:
        if rng.random() < 0.3:
            keys["saved"] = rng.randint(0, 4096)
        if rng.random() < 0.3:
            keys["moved"] = rng.randint(0, 4096)
    ready = list(range(len(m.tensors)))
    rng.shuffle(ready)
    return m.text(ready)


def run_one(binary, rng, tmp, i):
    name = f"fuzz{i}"
    text = random_model(rng, name)
    path = os.path.join(tmp, name + ".model")
    with open(path, "w") as f:
        f.write(text)
    gpus = rng.randint(1, 3)
    mode, batch = rng.choice(MODES), rng.randint(gpus, 9)
    label = f"{name} --mode {mode} --gpus {gpus} --batch {batch}"
    p = dpscale(binary, "run", "--model", path, "--mode", mode, "--gpus", str(gpus),
                "--host-devices", "3", "--batch", str(batch), "--steps", "1", "--warmup", "0",
                "--check", "--no-nvml", out=tmp, name=name)
    report = sanitizer_report(p.stderr)
    expect(p.returncode == 0 and not report,
           f"{label}: exit {p.returncode}{', ' + report if report else ''}\n{stderr_excerpt(p.stderr)}\n"
           f"the file:\n{text}")
    run = read_folder(os.path.join(tmp, name))[0][0]
    expect(run["status"] == "ok" and run["check"] == "pass",
           f"{label}: status {run['status']}, check {run['check']}: {run['error']}\nthe file:\n{text}")
    return mode


def fuzz(binary, seed, count):
    rng = random.Random(int(seed))
    modes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(int(count)):
            mode = run_one(binary, rng, tmp, i)
            modes[mode] = modes.get(mode, 0) + 1
    print(f"{count} random model files (seed {seed}) ran one step with --check: {modes}")


if __name__ == "__main__":
    sys.exit(run_case("model fuzz", fuzz, *sys.argv[1:4]))
