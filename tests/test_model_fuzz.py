#!/usr/bin/env python3
"""Random valid model files run for one step: each file a random sequence
of the op kinds and options the format allows (tests/model_writer.py: gemm
with and without weight and bias, grouped and depthwise, convolutions of
an im2col; resample, plain or a window, an im2col, max or average pooling,
with stride, pad and dilation given, left out or given as their defaults;
norm; act of every fn; add; embedding; mul by runs and pixels=; cat of an
op, a tensor and pixels=; attn, causal or not; FORMS below), the first op
of each file (reading the input) of each form in turn, small sizes, inputs
taken from any earlier op, tensors shared by several ops, random saved= and
moved= keys and a random ready order; each run by a random strategy (dp,
ddp, zero1, zero2, fsdp) on 1 to 3 host devices with --check. A file
dpscale refuses, a run that exits non-zero or fails its check, or a
sanitizer's report in its stderr fails, printing the file; the forms'
counts are printed. A dilated max pooling with a window wholly in the
padding is drawn undilated: dpscale refuses such a file, which is not
valid (test_model_matrix.py's windows case checks the refusal).

usage: test_model_fuzz.py DPSCALE SEED COUNT (one generator from SEED draws
the COUNT files in turn: each file the same for a seed and count)"""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("model fuzz", DPSCALE, "1", "60", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import random
import sys
import tempfile

from helpers import dpscale, expect, read_folder, run_case
from model_writer import FNS, KINDS, POOLS, Model, Window, sanitizer_report, stderr_excerpt

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


def divisors(n, most=None):
    return [d for d in range(1, (most or n) + 1) if n % d == 0]


def maybe(rng, value, default):
    """value, or None (the key left out) half the times it is the default."""
    return None if value == default and rng.random() < 0.5 else value


def random_window(rng, pool):
    """A window the grammar allows: a pooling padded by at most half its
    kernel, an average one undilated, the dilated kernel within the padded
    input. A dilated max pooling with a window wholly in the padding is
    undilated instead: dpscale's backward writes its gradient out of bounds
    (test_model_matrix.py's windows case runs such a file)."""
    kernel = (rng.randint(1, 3), rng.randint(1, 3))
    dilation = (1, 1) if pool == "avg" else (rng.randint(1, 2), rng.randint(1, 2))
    pad = tuple(rng.randint(0, k // 2 if pool else 2) for k in kernel)
    h, w = (rng.randint(max(1, d * (k - 1) + 1 - 2 * p), 6) for k, d, p in zip(kernel, dilation, pad))
    stride = (rng.randint(1, 3), rng.randint(1, 3))
    win = Window(rng.randint(1, 4), h, w, kernel, maybe(rng, stride, (1, 1)),
                 maybe(rng, pad, (0, 0)), maybe(rng, dilation, (1, 1)), pool)
    if pool == "max" and not win.all_windows_hold_pixels():
        win.dilation = None
    return win


def add_conv(m, rng, src):
    """A convolution, grouped (depthwise when g is its channels) or not."""
    win = random_window(rng, None)
    g = rng.choice([None, *divisors(win.c)])
    return m.conv(win, (g or 1) * rng.randint(1, 3), g=g, bias=rng.random() < 0.5, src=src)


def add_linear(m, rng, src, grouped):
    """A gemm with weight, its bias half the times; grouped: g= given (1 a
    third of the times); a shared tensor as the weight where shared() gives one."""
    rows, tied = rng.randint(1, 4), shared(m, rng)
    if tied:
        (n, per_group), tied = tied[1], tied[0]
        g = rng.choice(divisors(n)) if grouped else None
        return m.gemm(rows, per_group * (g or 1), n, bias=rng.random() < 0.5, src=src, tied=tied, g=g)
    g = rng.choice([1, 2, 2, 3, 4]) if grouped else None
    k, n = (g or 1) * rng.randint(1, 6), (g or 1) * rng.randint(1, 8)
    return m.gemm(rows, k, n, bias=rng.random() < 0.5, src=src, g=g)


def add_bmm(m, rng, src):
    b = rng.randint(1, 3)
    return m.bmm(b, rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 5), src,
                 b_key=rng.random() < 0.3)


def add_embedding(m, rng, src):
    tied = shared(m, rng)
    if tied:
        (vocab, d), tied = tied[1], tied[0]
        return m.embedding(rng.randint(1, 4), vocab, d, src, tied=tied)
    return m.embedding(rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 8), src)


def add_norm(m, rng, src):
    return m.norm(rng.randint(1, 24), weight=rng.random() < 0.5, bias=rng.random() < 0.5, src=src,
                  rows=rng.randint(1, 3))


def add_mul(m, rng, src, pixels):
    """src times an earlier op's output (or the input): a scale a run of 1
    to 3, or pixels= 1 to 4 pixels of its channels."""
    other = rng.choice(list(m.size))
    if pixels:
        return m.mul(other, src, pixels=rng.randint(1, 4))
    return m.mul(other, src, runs=rng.randint(1, 3))


def add_cat(m, rng, src, operand):
    """src, then an earlier op's output (operand "op"; "pixels": P pixels
    of each, P dividing the other's size) or a tensor's (a shared one a third
    of the times there is one)."""
    if operand == "weight":
        tied = rng.choice(m.tensors) if m.tensors and rng.random() < 0.35 else None
        return m.cat(shape=(1, rng.randint(1, 8)), src=src, tied=tied)
    other = rng.choice(list(m.size))
    pixels = rng.choice(divisors(m.size[other], 4)) if operand == "pixels" else None
    return m.cat(other, src=src, pixels=pixels)


def add_attn(m, rng, src, causal):
    return m.attn(rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 4),
                  causal=1 if causal else rng.choice([None, 0]), src=src)


# Every form of every kind (the kind its first word), each adding one random
# op of that form reading src.
FORMS = {
    "gemm": lambda m, rng, src: add_linear(m, rng, src, grouped=False),
    "gemm g=": lambda m, rng, src: add_linear(m, rng, src, grouped=True),
    "gemm without weight": add_bmm,
    "gemm convolution": add_conv,
    "resample": lambda m, rng, src: m.resample(rng.randint(1, 64), src),
    "resample im2col": lambda m, rng, src: m.window(random_window(rng, None), src),
    **{f"resample {pool} pool": lambda m, rng, src, pool=pool: m.window(random_window(rng, pool), src)
       for pool in POOLS},
    "norm": add_norm,
    **{f"act {fn}": lambda m, rng, src, fn=fn: m.act(fn, src) for fn in FNS},
    "add": lambda m, rng, src: m.add(rng.choice(list(m.size)), src),
    "embedding": add_embedding,
    "mul": lambda m, rng, src: add_mul(m, rng, src, pixels=False),
    "mul pixels=": lambda m, rng, src: add_mul(m, rng, src, pixels=True),
    "cat": lambda m, rng, src: add_cat(m, rng, src, "op"),
    "cat weight=": lambda m, rng, src: add_cat(m, rng, src, "weight"),
    "cat pixels=": lambda m, rng, src: add_cat(m, rng, src, "pixels"),
    "attn": lambda m, rng, src: add_attn(m, rng, src, causal=False),
    "attn causal=1": lambda m, rng, src: add_attn(m, rng, src, causal=True),
}
FORMS_OF = {kind: [f for f in FORMS if f.split()[0] == kind] for kind in KINDS}
assert all(FORMS_OF.values()) and sum(map(len, FORMS_OF.values())) == len(FORMS), \
    f"every kind of model_writer.KINDS needs a form here, every form a kind: {FORMS_OF}"


def add_op(m, rng, form=None):
    """One op of form, or of a random form of a random kind; the form's name."""
    form = form or rng.choice(FORMS_OF[rng.choice(KINDS)])
    FORMS[form](m, rng, source(m, rng))
    return form


def random_model(rng, name, first, forms):
    """A valid model of 1 to 8 random ops, the first of form first (reading
    the input), a gemm head where none has a tensor; each op's form counted
    in forms."""
    m = Model(name, rng.randint(1, 64), rng.randint(2, 6))
    for i in range(rng.randint(1, 8)):
        form = add_op(m, rng, first if i == 0 else None)
        forms[form] = forms.get(form, 0) + 1
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


def run_one(binary, rng, tmp, i, forms):
    """File i, its first op of FORMS' form i (in turn, so that every form
    reads the input in some file of a run of len(FORMS) files or more)."""
    name = f"fuzz{i}"
    text = random_model(rng, name, list(FORMS)[i % len(FORMS)], forms)
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
    modes, forms = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(int(count)):
            mode = run_one(binary, rng, tmp, i, forms)
            modes[mode] = modes.get(mode, 0) + 1
    print(f"{count} random model files (seed {seed}) ran one step with --check: {modes}")
    print("ops of each form: " + ", ".join(f"{form} {forms.get(form, 0)}" for form in FORMS))


if __name__ == "__main__":
    sys.exit(run_case("model fuzz", fuzz, *sys.argv[1:4]))
