#!/usr/bin/env python3
"""--tf32 default|on|off: which fp32 GEMMs multiply in TF32, as PyTorch's
cudnn.allow_tf32 (convolutions) and cuda.matmul.allow_tf32 (Linears and
matmuls) choose.

usage: test_tf32.py DPSCALE CASE [ARGS...]
  options   --tf32's words and refusals; config ids (-tf32on, -tf32off for
            fp32 alone); meta.json's tf32 for each mode, read back by
            dpstools.results
  host      on the host backend, the final parameters of an exported
            residual conv net (tests/fixtures/models/small-resnet.model)
            after 3 steps, byte for byte: on, off and default all differ;
            with its Linear renamed a convolution (its resample
            fc.im2col) default is on; with its convolutions' resamples
            renamed default is off
  torch MODE GPUS
            torch_reference.py --tf32 against dpscale for the same file in
            each mode (and the all-convolution copy in default): every
            step's loss within LOSS_TOL, and dpscale's final parameters
            nearest PyTorch's of the same mode, by a factor of NEAREST over
            any other mode's
Exit 77 (skip) without PyTorch for torch (scripts/setup.sh --with-torch)."""
from listing import DPSCALE, FIXTURES, exit_if_listing, test

TESTS = [test("tf32 options", DPSCALE, "options", timeout=600),
         test("tf32 host", DPSCALE, "host", timeout=600),
         test("tf32 torch dp", DPSCALE, "torch", "dp", "1", suite="torch", timeout=300),
         test("tf32 torch ddp", DPSCALE, "torch", "ddp", "2", suite="torch", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import sys
import tempfile

from helpers import (compare_losses, dpscale, expect, expect_exit, losses, need_torch,
                     run_cases, torch_ref, write)
from dpstools import results as dpsresults

SMALL_RESNET = os.path.join(FIXTURES, "models", "small-resnet.model")
MODES = ["default", "on", "off"]
FLAGS = {"default": (True, False), "on": (True, True), "off": (False, False)}
# dpscale's parameters after the steps are NEAREST times nearer PyTorch's of
# the same --tf32 than any other mode's (mean |difference|); measured: the
# same mode 3e-9 to 9e-8 apart, two modes 2e-6 to 3.5e-6.
NEAREST = 5
# and at most this far from them (the all-convolution copy has no other mode
# to be nearer than: its Linear taken for one only in dpscale is 2e-6 off)
SAME_TOL = 5e-7
COMMON = ["--batch", "6", "--steps", "3", "--warmup", "1", "--lr", "0.1"]


def variant(tmp, name, renames, before=None):
    """small-resnet.model with op names replaced (old -> new, whole words),
    and before[NAME]'s line put before op NAME."""
    with open(SMALL_RESNET) as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        words = line.split()
        if before and len(words) > 2 and words[0] == "op" and words[2] in before:
            out.append(before[words[2]])
        for old, new in renames.items():
            words = [new if w == old else
                     w.split("=")[0] + "=" + new if "=" in w and w.split("=", 1)[1] == old else w
                     for w in words]
        out.append(" ".join(words))
    return write(os.path.join(tmp, name + ".model"), "\n".join(out) + "\n")


# the Linear fc made a 1x1 convolution: its input, the pooling's 8 channels of
# one pixel, through an im2col of a 1x1 window (the pooling is exported with
# its window, so fc reads it directly)
ALL_CONV = {"fc": "op resample fc.im2col n=8 window=8x1x1 kernel=1x1 stride=1x1 pad=0x0 "
                  "dilation=1x1"}
NO_CONV = {"conv1.im2col": "conv1.cols", "conv2.im2col": "conv2.cols"}


def case_options(binary):
    with tempfile.TemporaryDirectory(prefix="dpscale-tf32-") as tmp:
        p = dpscale(binary, "run", "--tf32", "maybe", out=tmp)
        expect_exit(p, 2, "--tf32 maybe: expected one of: default, on, off")
        p = dpscale(binary, "info", "--tf32", "on", out=tmp, backend=None, name=None)
        expect_exit(p, 2, "--tf32: not an option of `dpscale info`")
        p = dpscale(binary, "--help", out=tmp, backend=None, name=None)
        expect("--tf32 default|on|off" in p.stdout and "[default default] {run, sweep}" in p.stdout,
               f"--help has no --tf32 line for run and sweep:\n{p.stdout}")
        for mode in MODES:
            dpscale(binary, "run", "--model", SMALL_RESNET, "--steps", "1", "--warmup", "0",
                    "--tf32", mode, out=tmp, name=mode, check_rc=0)
            folder = os.path.join(tmp, mode)
            cid, _ = losses(folder)
            want = "dp-small-resnet-fp32-sgd-g1-b8" + ("" if mode == "default" else "-tf32" + mode)
            expect(cid == want, f"--tf32 {mode}: config_id {cid}, expected {want}")
            meta = dpsresults.read_meta(folder, required=["tf32"])
            cudnn, matmul = FLAGS[mode]
            got = meta["tf32"]
            expect((got["mode"], got["cudnn_allow_tf32"], got["cuda_matmul_allow_tf32"]) ==
                   (mode, cudnn, matmul), f"--tf32 {mode}: meta.json's tf32 is {got}")
        p = dpscale(binary, "run", "--precision", "bf16", "--tf32", "on", "--dry-run", out=tmp,
                    check_rc=0)
        expect("dp-small-bf16-sgd-g1-b16 " in p.stdout,
               f"bf16 with --tf32 on: its id should carry no -tf32on (no effect):\n{p.stdout}")
        p = dpscale(binary, "sweep", "--tf32", "off", "--gpus", "1,2", "--dry-run", out=tmp,
                    check_rc=0)
        ids = [w for w in p.stdout.split() if w.startswith(("dp-", "ddp-"))]
        expect(len(ids) == 4 and all(i.endswith("-tf32off") for i in ids),
               f"sweep --tf32 off: every configuration's id ends in -tf32off:\n{p.stdout}")
        bad = os.path.join(tmp, "default", "meta.json")
        with open(bad) as f:
            meta = json.load(f)
        meta["tf32"]["mode"] = "sometimes"
        write(bad, json.dumps(meta))
        try:
            dpsresults.read_meta(os.path.dirname(bad))
            expect(False, f"{bad}: tf32.mode 'sometimes' read without a complaint")
        except dpsresults.InputError as e:
            expect("tf32.mode" in str(e), f"{bad}: the refusal names another key: {e}")
    return 0


def final_params(binary, tmp, path, mode, *extra):
    """The bytes of dpscale's final parameters of path under --tf32 mode."""
    name = f"{os.path.basename(path)[:-len('.model')]}-{mode}"
    npy = os.path.join(tmp, name + ".npy")
    dpscale(binary, "run", "--model", path, *COMMON, "--tf32", mode, "--save-params", npy,
            *extra, out=tmp, name=name, check_rc=0)
    with open(npy, "rb") as f:
        return f.read()


def case_host(binary):
    with tempfile.TemporaryDirectory(prefix="dpscale-tf32-") as tmp:
        p = {m: final_params(binary, tmp, SMALL_RESNET, m) for m in MODES}
        expect(len(set(p.values())) == 3, "small-resnet: --tf32 default, on and off do not give "
               "three different parameter sets: the host backend's TF32 rounding is not applied "
               "as the mode says")
        conv = {m: final_params(binary, tmp, variant(tmp, "all-conv", {}, ALL_CONV), m) for m in MODES}
        expect(conv["default"] == conv["on"] != conv["off"],
               "every gemm a convolution: --tf32 default is not on (the Linear fc, its input "
               "named fc.im2col, is not taken for a convolution)")
        lin = {m: final_params(binary, tmp, variant(tmp, "no-conv", NO_CONV), m) for m in MODES}
        expect(lin["default"] == lin["off"] != lin["on"],
               "no gemm a convolution: --tf32 default is not off (a gemm after a resample not "
               "named NAME.im2col is taken for a convolution)")
        expect(lin["off"] == p["off"], "--tf32 off: renaming ops changed fp32's results")
    return 0


def mean_diff(a, b):
    return float(abs(a - b).mean() / abs(b).mean())


def case_torch(binary, mode, gpus):
    skip = need_torch()
    if skip:
        return skip
    import numpy as np
    with tempfile.TemporaryDirectory(prefix="dpscale-tf32-") as tmp:
        common = ["--mode", mode, "--gpus", gpus, *COMMON]
        runs = [(SMALL_RESNET, m) for m in MODES] + \
            [(variant(tmp, "all-conv", {}, ALL_CONV), "default")]
        mine, ref = {}, {}
        for path, m in runs:
            key = (os.path.basename(path), m)
            name = f"{key[0][:-len('.model')]}-{m}"
            for who, out in (("d", mine), ("t", ref)):
                npy = os.path.join(tmp, f"{name}-{who}.npy")
                args = [*common, "--model", path, "--tf32", m, "--save-params", npy]
                if who == "d":
                    dpscale(binary, "run", *args, out=tmp, name=name + "-d", check_rc=0)
                else:
                    torch_ref(binary, *args, out=tmp, name=name + "-t")
                out[key] = (losses(os.path.join(tmp, f"{name}-{who}")), np.load(npy))
            (cid, d_loss), _ = mine[key]
            (tcid, t_loss), t_meta = ref[key][0], dpsresults.read_meta(
                os.path.join(tmp, name + "-t"), required=["tf32"])
            expect(tcid == cid, f"PyTorch's config_id {tcid} is not dpscale's {cid}")
            expect(t_meta["tf32"]["mode"] == m and
                   (t_meta["tf32"]["cudnn_allow_tf32"],
                    t_meta["tf32"]["cuda_matmul_allow_tf32"]) == FLAGS[m],
                   f"{cid}: torch_reference.py's meta.json tf32 is {t_meta['tf32']}")
            worst, k = compare_losses(d_loss, t_loss, cid)
            expect(worst <= 1e-5, f"{cid}: step {k}'s loss is {d_loss[k]} in dpscale and "
                   f"{t_loss[k]} in PyTorch, relative difference {worst:.3g} > 1e-5")
        for key in mine:
            d = mine[key][1]
            same = mean_diff(d, ref[key][1])
            others = {o: mean_diff(d, ref[o][1]) for o in ref if o != key and o[0] == key[0]}
            print(f"{key}: PyTorch's of the same mode {same:.3g} apart, others {others}")
            expect(same <= SAME_TOL,
                   f"{key}: dpscale's final parameters are {same:.3g} (mean |difference| / mean "
                   f"|p|) from PyTorch's of the same --tf32, above {SAME_TOL}: "
                   f"{'torch_graph.is_conv is not model_file_is_conv' if 'conv' in key[0] else 'a gemm differs'}")
            for o, apart in others.items():
                expect(apart >= NEAREST * same,
                       f"{key}: dpscale's final parameters are {same:.3g} from PyTorch's of the "
                       f"same --tf32 and {apart:.3g} from {o}'s: torch_graph's TF32 emulation "
                       f"does not follow the host backend's")
    return 0


if __name__ == "__main__":
    run_cases(globals())
