#!/usr/bin/env python3
"""Every op kind and option a model file allows, run by dp, ddp and fsdp
with --check on 2 host devices: a run that exits non-zero, fails its check
or prints a sanitizer's report fails (under the ASan/UBSan build, a buffer
an op overruns is caught here, as the columns buffer was for a GEMM's bias).

usage: test_model_matrix.py DPSCALE CASE
  ops       one generated file (tests/model_writer.py) per op variant: gemm
            with weight and bias, weight alone, without weight (b 1 and 3),
            grouped (g=2 with bias, g=k without), resample, norm with weight
            and bias, either, neither, add, embedding; the variant is the
            model's first op (reading the input) and its last (writing the
            logits), the widest of its kind in the file; 1 and 7 samples a
            device, dp, ddp and fsdp
  acts      the same for an act of each fn the grammar names
  windows   the same for windowed resamples: convolutions (an im2col named
            NAME.im2col read by the gemm NAME) with and without bias, grouped
            and depthwise, an im2col no gemm reads, max and average pooling;
            stride, pad and dilation given, left out and given as defaults;
            the im2col of the first reads the input; and a dilated max
            pooling whose window holds no pixel (all padding: -inf out in
            PyTorch's) refused at its line with the reason
  mul_cat_attn  the same for mul (a scale a run, pixels=), cat (from=, a
            tensor's weight=, pixels=) and attn (causal 0 and 1); the pixel
            mul's first reads the input as its scale (as op 0 it is refused)
  refused   each combination the grammar refuses by design (a bias on a kind
            that takes none, g= or a bias on a gemm without weight, b= on one
            with, the pixel mul as op 0, pixels= on a cat of a tensor, cat
            with both operands, a convolution of a pooling, a grouped gemm of
            an im2col not its own, a grouped convolution that does not split
            its channels, a dilated average pooling, a pooling padded past
            half its kernel, causal=2, window keys without window=) exits 2
            naming the file, the op's line and the reason, writing no run;
            an unknown kind, fn and pool are refused listing the grammar's,
            which must be tests/model_writer.py's KINDS, FNS and POOLS, and
            each kind's refusal of a key lists the keys it takes: KEYS
  exported  the file e1 (two biased gemms, no norm, no embedding), and
            model_export.py's files of an MLP (Flatten, Linear(3072, 256),
            ReLU, Linear(256, 10)), a small CNN (tests/model_examples.py) and
            torchvision's resnet18 on 3x32x32 (fewer modes and samples: its
            size); the exported ones are skipped, saying so, without PyTorch"""
from listing import DPSCALE, exit_if_listing, test

CASES = ("ops", "acts", "windows", "mul_cat_attn", "refused", "exported")
TESTS = [test("model matrix " + c.replace("_", " "), DPSCALE, c, timeout=120 if c == "refused" else 400)
         for c in CASES]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import tempfile

from helpers import HERE, PYTHON, SCRIPTS, Failure, dpscale, expect, missing_modules, read_folder, \
    run_cases
from model_writer import FNS, KEYS, KINDS, POOLS, Model, Window, sanitizer_report, stderr_excerpt

MODES = ("dp", "ddp", "fsdp")
CLASSES = 4
HOWTO = "(docs/model-file.md)"  # the end of most of the parser's refusals
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


def run_args(path, mode, per_device):
    return ["run", "--model", path, "--mode", mode, "--gpus", "2", "--host-devices", "2",
            "--batch-per-gpu", str(per_device), "--steps", "1", "--warmup", "0", "--check",
            "--no-nvml"]


def run_file(binary, path, tmp, mode, per_device):
    """`dpscale run` of a model file on 2 host devices, one step with --check:
    exit 0, the check passing, no sanitizer report."""
    label = f"{os.path.basename(path)} --mode {mode} --batch-per-gpu {per_device}"
    name = f"{os.path.basename(path)}-{mode}-{per_device}"
    p = dpscale(binary, *run_args(path, mode, per_device), out=tmp, name=name)
    report = sanitizer_report(p.stderr)
    expect(p.returncode == 0 and not report,
           f"{label}: exit {p.returncode}{', ' + report if report else ''}\n{stderr_excerpt(p.stderr)}")
    runs = read_folder(os.path.join(tmp, name))[0]
    expect(len(runs) == 1 and runs[0]["status"] == "ok" and runs[0]["check"] == "pass",
           f"{label}: status {runs[0]['status']}, check {runs[0]['check']}: {runs[0]['error']}")


def run_all(binary, path, tmp, modes=MODES, per_device=(1, 7)):
    for mode in modes:
        for n in per_device:
            run_file(binary, path, tmp, mode, n)
    print(f"{os.path.basename(path)}: {', '.join(modes)} at {per_device} samples a device: pass")


# Each variant: the input it reads as the first op, and how it is added
# (m: the Model, src: the op it reads, other: an earlier op, for the kinds
# of two operands). Its widths exceed those of the other ops of its kind in
# its file (a window's: those of the other windowed resamples; the plain
# ones fit() puts in are no window), so that the buffers sized by the widest
# op of a kind are sized by it; its outputs are rows of CLASSES, so that it
# can be last.
OPS = {
    "gemm": (30, lambda m, src, other: m.gemm(3, 10, 24, src=src)),
    "gemm-nobias": (30, lambda m, src, other: m.gemm(3, 10, 24, bias=False, src=src)),
    "gemm-noweight": (72, lambda m, src, other: m.bmm(1, 4, 6, 8, src=src)),
    "gemm-noweight-b3": (216, lambda m, src, other: m.bmm(3, 4, 6, 8, src=src)),
    "gemm-g2": (36, lambda m, src, other: m.gemm(3, 12, 24, g=2, src=src)),
    "gemm-g12-nobias": (36, lambda m, src, other: m.gemm(3, 12, 24, g=12, bias=False, src=src)),
    "resample": (36, lambda m, src, other: m.resample(40, src)),
    "norm": (48, lambda m, src, other: m.norm(24, src=src, rows=2)),
    "norm-weight": (48, lambda m, src, other: m.norm(24, bias=False, src=src, rows=2)),
    "norm-bias": (48, lambda m, src, other: m.norm(24, weight=False, src=src, rows=2)),
    "norm-plain": (48, lambda m, src, other: m.norm(24, weight=False, bias=False, src=src, rows=2)),
    "add": (36, lambda m, src, other: m.add(other, src=m.fit(src, m.size[other]))),
    "embedding": (24, lambda m, src, other: m.embedding(3, 5, 8, src=src)),
}
ACTS = {f"act-{fn}": (36, lambda m, src, other, fn=fn: m.act(fn, src=m.fit(src, 36))) for fn in FNS}
# Windows: c x h x w, kernel, stride, pad, dilation; out_pixels x cols a sample.
CONV = Window(2, 4, 4, (3, 3), pad=(1, 1))                                   # 16 x 18
CONV_ODD = Window(3, 5, 4, (3, 2), stride=(2, 1), pad=(1, 0), dilation=(1, 2))  # 6 x 18
CONV_G2 = Window(4, 3, 3, (2, 2), stride=(1, 1), pad=(0, 0), dilation=(1, 1))   # 4 x 16
DEPTHWISE = Window(4, 5, 5, (3, 3), stride=(2, 2), pad=(1, 1))               # 9 x 36
IM2COL = Window(2, 3, 3, (2, 2))                                             # 4 x 8
MAX_POOL = Window(4, 5, 5, (3, 3), stride=(2, 2), pad=(1, 1), dilation=(1, 2), pool="max")  # 6 x 4
AVG_POOL = Window(4, 4, 4, (2, 2), stride=(2, 2), pad=(1, 1), pool="avg")    # 9 x 4


def volume(win):
    return win.c * win.h * win.w


WINDOWS = {
    "conv": (volume(CONV), lambda m, src, other: m.conv(CONV, 4, src=src)),
    "conv-nobias": (volume(CONV_ODD), lambda m, src, other: m.conv(CONV_ODD, 8, bias=False, src=src)),
    "conv-g2": (volume(CONV_G2), lambda m, src, other: m.conv(CONV_G2, 4, g=2, src=src)),
    "conv-depthwise": (volume(DEPTHWISE), lambda m, src, other: m.conv(DEPTHWISE, 4, g=4, src=src)),
    "im2col": (volume(IM2COL), lambda m, src, other: m.window(IM2COL, src)),
    "pool-max": (volume(MAX_POOL), lambda m, src, other: m.window(MAX_POOL, src)),
    "pool-avg": (volume(AVG_POOL), lambda m, src, other: m.window(AVG_POOL, src)),
}


def pixel_mul(m, src, other):
    """A mul of 3 pixels of other's channels; as the first, the input is
    its scale and a gemm of the input its 3 pixels."""
    if src == "input":
        src = m.gemm(1, m.input, 3 * m.input, bias=False, src="input")
    return m.mul(other, src=src, pixels=3)


MUL_CAT_ATTN = {
    "mul": (24, lambda m, src, other: m.mul(other, src=src, runs=1 if src == other else 2)),
    "mul-pixels": (12, pixel_mul),
    "cat": (12, lambda m, src, other: m.cat(other, src=src)),
    "cat-weight": (12, lambda m, src, other: m.cat(shape=(1, 8), src=src)),
    "cat-pixels": (12, lambda m, src, other: m.cat(other, src=src, pixels=4)),
    "attn": (36, lambda m, src, other: m.attn(2, 3, 2, src=src)),
    "attn-causal": (36, lambda m, src, other: m.attn(1, 4, 3, causal=1, src=src)),
}


def variant_file(name, input_elems, add):
    """The variant's model: it first (reading the input, no resample before
    it), a narrow gemm where the file has no tensor yet, it last (from the
    gemm's or its first output)."""
    m = Model(name, input_elems, CLASSES)
    first = add(m, "input", "input")
    expect(m.reads_input(first) and not m.fitted,
           f"{name}: the variant's first op {first} does not read the input, or a resample comes "
           f"before it: {m.ops}")
    if not m.tensors:
        m.gemm(2, 6, 4, bias=False)
    last = add(m, m.last, first)
    expect(m.last == last and m.size[last] % CLASSES == 0,
           f"{name}: the variant's {m.size[last]} outputs are not rows of {CLASSES}")
    return m.text()


def run_variants(binary, variants):
    with tempfile.TemporaryDirectory() as tmp:
        for name, (input_elems, add) in variants.items():
            path = os.path.join(tmp, name + ".model")
            with open(path, "w") as f:
                f.write(variant_file(name, input_elems, add))
            run_all(binary, path, tmp)


def case_ops(binary):
    run_variants(binary, OPS)


def case_acts(binary):
    run_variants(binary, ACTS)


# A dilated max pooling whose only window falls between the input's pixels,
# wholly in the padding: refused at its line.
EMPTY_POOL = Window(2, 1, 1, (1, 2), pad=(0, 1), dilation=(1, 2), pool="max")
# its one window reads columns -1 and 1 of a 1-column input: its max would be
# -inf and its backward's index outside the input, so the file is refused
EMPTY_POOL_REFUSED = ("pool=max: the window of output column 0 lies wholly in the padding "
                      "(kernel 1x2, stride 1x1, pad 0x1, dilation 1x2 on 1x1 pixels), where "
                      "max_pool2d has no element to take: give a smaller pad= or dilation=")


def case_windows(binary):
    run_variants(binary, WINDOWS)
    expect(not EMPTY_POOL.all_windows_hold_pixels() and MAX_POOL.all_windows_hold_pixels(),
           "EMPTY_POOL must have a window wholly in the padding, MAX_POOL none")
    empty = Model("pool-max-empty-window", EMPTY_POOL.c, 2)
    empty.gemm(1, EMPTY_POOL.c, EMPTY_POOL.c, bias=False, src="input")
    with tempfile.TemporaryDirectory() as tmp:
        expect_refused(binary, tmp, empty, empty.window(EMPTY_POOL), EMPTY_POOL_REFUSED)


def case_mul_cat_attn(binary):
    run_variants(binary, MUL_CAT_ATTN)


def with_key(m, op, key, value):
    """Op op's line given key=value too (a tensor's name for weight and bias)."""
    keys = next(keys for _, name, keys in m.ops if name == op)
    keys[key] = value
    return op


def refused_key(kind):
    """A kind's op given a key it does not take: bias where it takes none,
    else a key of another kind (pixels= on a gemm, g= on a norm)."""
    m = Model(f"{kind}-refused-key", 36, CLASSES)
    ops = {"gemm": lambda: m.gemm(3, 12, 6, src="input"), "resample": lambda: m.resample(40, "input"),
           "norm": lambda: m.norm(12, src="input"), "act": lambda: m.act("relu", "input"),
           "add": lambda: m.add("input", "input"), "embedding": lambda: m.embedding(3, 5, 12, "input"),
           "mul": lambda: m.mul("input", "input"), "cat": lambda: m.cat("input", src="input"),
           "attn": lambda: m.attn(2, 3, 2, src="input")}
    op = ops[kind]()
    key = "bias" if "bias" not in KEYS[kind].split() else "pixels" if kind == "gemm" else "g"
    with_key(m, op, key, m.tensor((m.size[op],)) if key == "bias" else 2)
    return m, op, f"a {kind} op takes no key '{key}' (it takes {KEYS[kind]}, in, saved, moved)"


def refused_gemms():
    noweight_bias = Model("gemm-noweight-bias", 72, CLASSES)
    op = noweight_bias.bmm(1, 4, 6, 8, src="input")
    with_key(noweight_bias, op, "bias", noweight_bias.tensor((8,)))
    noweight_g = Model("gemm-noweight-g2", 72, CLASSES)
    with_key(noweight_g, noweight_g.bmm(1, 4, 6, 8, src="input"), "g", 2)
    weight_b = Model("gemm-b3", 30, CLASSES)
    with_key(weight_b, weight_b.gemm(3, 10, 24, src="input"), "b", 3)
    return [(noweight_bias, op, "a gemm without weight takes no bias"),
            (noweight_g, "gem0", "g= is for a gemm with weight"),
            (weight_b, "gem0", "b= is for a gemm without weight")]


def refused_operands():
    pixel_mul = Model("mul-pixels-first", 36, CLASSES)
    pixel_mul.op("mul", {"from": "input", "pixels": 3}, "input")
    weight_cat = Model("cat-weight-pixels", 12, CLASSES)
    weight_cat.cat(shape=(1, 8), src="input", pixels=2)
    both_cat = Model("cat-from-weight", 12, CLASSES)
    with_key(both_cat, both_cat.cat("input", src="input"), "weight", both_cat.tensor((1, 8)))
    causal = Model("attn-causal2", 36, CLASSES)
    causal.attn(2, 3, 2, causal=2, src="input")
    return [(pixel_mul, "mul0", "mul pixels=3: its input's 36 elements are not 3 pixels of the 36 "
             "channels the input scales; give pixels= the input's pixels (H·W)"),
            (weight_cat, "cat0", "cat pixels= is for a cat with from=OP, not weight=T"),
            (both_cat, "cat0", "a cat op needs from=OP or weight=T, one of them"),
            (causal, "att0", "causal=2: expected a whole number from 0 to 1")]


def refused_windows():
    pool_conv = Model("conv-of-pool", 36, CLASSES)
    pool = Window(4, 3, 3, (2, 2), pool="max")
    pool_conv.window(pool, "input", name="conv0.im2col")
    pool_conv.gemm(pool.out_pixels(), pool.cols(), 4, name="conv0")
    other_im2col = Model("grouped-gemm-of-im2col", 36, CLASSES)
    other_im2col.window(CONV_G2, "input")
    other_im2col.op("gemm", {"m": 4, "k": 16, "n": 4, "g": 2, "weight": other_im2col.tensor((4, 8))})
    channels = Model("conv-g2-of-3-channels", 27, CLASSES)
    three = Window(3, 3, 3, (2, 2))
    channels.window(three, "input", name="conv0.im2col")
    channels.gemm(three.out_pixels(), three.cols(), 4, g=2, name="conv0")
    avg = Model("pool-avg-dilated", 64, CLASSES)
    avg.window(Window(4, 4, 4, (2, 2), dilation=(2, 1), pool="avg"), "input")
    padded = Model("pool-max-padded", 64, CLASSES)
    padded.window(Window(4, 4, 4, (3, 3), pad=(2, 1), pool="max"), "input")
    no_window = Model("window-keys-alone", 36, CLASSES)
    no_window.op("resample", {"n": 36, "kernel": "2x2", "pool": "max"}, "input")
    return [(pool_conv, "conv0", "gemm conv0 reads conv0.im2col, a pooling: a convolution's "
             "im2col has no pool="),
            (other_im2col, "gem1", "gemm gem1 g=2 reads the im2col res0: a grouped convolution's "
             "im2col is named after its gemm, gem1.im2col, so that it orders its columns group "
             "by group"),
            (channels, "conv0", "gemm conv0 g=2: its im2col conv0.im2col has c=3 channels, which "
             "g groups do not split evenly; give g a divisor of c"),
            (avg, "res0", "pool=avg takes no dilation (avg_pool2d has none)"),
            (padded, "res0", "pad=2x1: a pooling's padding is at most half its kernel 3x3, as "
             "PyTorch's"),
            (no_window, "res0", "kernel=, stride=, pad=, dilation= and pool= describe a window: "
             "give window=CxHxW too")]


def refused_words():
    """An unknown kind, fn and pool: the parser lists the ones it knows."""
    kind = Model("kind-unknown", 36, CLASSES)
    kind.op("conv2d", {"n": 36}, "input")
    fn = Model("fn-unknown", 36, CLASSES)
    fn.act("swish", "input")
    pool = Model("pool-unknown", 64, CLASSES)
    pool.window(Window(4, 4, 4, (2, 2), pool="min"), "input")
    return [(kind, "con0", f"op kind conv2d: expected one of {', '.join(KINDS)}"),
            (fn, "act0", f"fn=swish: expected one of {', '.join(FNS)}"),
            (pool, "res0", f"pool=min: expected {' or '.join(POOLS)} (none: an im2col)")]


def refused_files():
    """(model, the refused op, the parser's reason) of every combination refused by design."""
    return ([refused_key(kind) for kind in KINDS] + refused_gemms() + refused_operands() +
            refused_windows() + refused_words())


def expect_refused(binary, tmp, m, op, reason):
    """`dpscale run` of the matrix refuses m's file: exit 2, a line of
    stderr FILE:LINE: and the reason (the whole line, but for the pointer to
    the docs), no run in the results folder, no sanitizer report."""
    path = os.path.join(tmp, m.name + ".model")
    with open(path, "w") as f:
        f.write(m.text())
    p = dpscale(binary, *run_args(path, "dp", 1), out=tmp, name=m.name)
    said = f"{path}:{m.line_of(op)}: {reason}"
    lines = [line.removeprefix("dpscale: ") for line in p.stderr.splitlines()]
    report = sanitizer_report(p.stderr)
    expect(p.returncode == 2 and (said in lines or f"{said} {HOWTO}" in lines) and not report,
           f"{m.name}: exit {p.returncode}, expected 2 with '{said}' on stderr"
           f"{', ' + report if report else ''}:\n{stderr_excerpt(p.stderr)}\nthe file:\n{m.text()}")
    expect(not os.path.exists(os.path.join(tmp, m.name, "runs.csv")),
           f"{m.name}: refused, yet {os.path.join(tmp, m.name, 'runs.csv')} was written")


def case_refused(binary):
    with tempfile.TemporaryDirectory() as tmp:
        refused = refused_files()
        for m, op, reason in refused:
            expect_refused(binary, tmp, m, op, reason)
        print(f"{len(refused)} files of combinations refused by design: exit 2 with their line and "
              f"reason")


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
    run_cases(globals())
