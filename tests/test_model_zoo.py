#!/usr/bin/env python3
"""torchvision's classification models as model files: every builder of
torchvision.models (a public function taking `weights`) exported by
scripts/model_export.py at a small input, with the outcome ZOO expects,
"runs" (exported, read by dpscale) or a refusal (exit 2 from the script)
naming the module, its class and what to do; a builder ZOO does not list,
or one it lists that torchvision lacks, fails.

usage: test_model_zoo.py DPSCALE CASE
  export    every builder but the slowest to export (SLOW: the largest of
            each family, whose smallest shows its modules): its outcome;
            each act fn in modules and functions; grouped and depthwise
            convolutions' GEMM FLOPs within 1 % of a count on the modules
  run       a representative subset (RUN): one step of dp, ddp and fsdp with
            --check on 2 host devices at batch 2, googlenet built without
            its auxiliary outputs, as its refusal says to build it, and
            torchvision's VisionTransformer and ConvNeXt at a small width and
            depth (ViT-B/32's and ConvNeXt-T's modules)
  all       every builder exported, and every one that runs stepped as `run`
            steps the subset, but for a mode dpscale refuses for want of host
            memory (ViT-H/14 and RegNetY-128GF's ddp need about 30 GiB),
            noted: minutes to an hour; skipped (77) unless DPSCALE_SLOW=1
            (`DPSCALE_SLOW=1 meson test -C build 'model zoo all'`)
Exit 77 (skip) without PyTorch or torchvision (scripts/setup.sh --with-torch)."""
from listing import DPSCALE, LONG, exit_if_listing, test

TESTS = [test("model zoo export", DPSCALE, "export", suite="torch", timeout=900,
              priority=LONG),
         test("model zoo run", DPSCALE, "run", suite="torch", timeout=900, priority=LONG),
         test("model zoo all", DPSCALE, "all", suite="slow", timeout=7200, parallel=False)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
import time

from helpers import PYTHON, dpscale, expect, run_cases
from test_model_file import file_flops, hooked_flops

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORT = os.path.join(REPO, "scripts", "model_export.py")
try:
    import torch
    import torchvision
    from torch import nn
    from dpstools import model_export
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh --with-torch installs PyTorch and torchvision)")
    sys.exit(77)

CNN = "3x32x32"
VIT = "3x224x224"  # a ViT's image size is fixed by its builder
RUNS = "runs"
AUX = "refused: its forward returns {}Outputs, not one tensor of logits"
SWIN = ("refused: shifted_window_attention is not a function the exporter maps (called by "
        "ShiftedWindowAttention)")
SWIN2 = ("refused: _get_relative_position_bias is not a function the exporter maps (called by "
         "ShiftedWindowAttentionV2)")
# builder: (input, expected outcome); docs/model-file.md's table says the same
ZOO = {
    "alexnet": ("3x64x64", RUNS),  # its three max pools need 63 pixels
    **{f"convnext_{s}": (CNN, RUNS) for s in ("tiny", "small", "base", "large")},
    **{f"densenet{d}": (CNN, RUNS) for d in (121, 161, 169, 201)},
    **{f"efficientnet_b{i}": (CNN, RUNS) for i in range(8)},
    **{f"efficientnet_v2_{s}": (CNN, RUNS) for s in ("s", "m", "l")},
    "googlenet": (CNN, AUX.format("GoogLeNet")),
    "inception_v3": ("3x299x299", AUX.format("Inception")),  # its auxiliary head needs 299
    "maxvit_t": (VIT, "refused: einsum is not a function the exporter maps (called by "
                      "RelativePositionalMultiHeadAttention)"),
    **{f"mnasnet{s}": (CNN, RUNS) for s in ("0_5", "0_75", "1_0", "1_3")},
    "mobilenet_v2": (CNN, RUNS), "mobilenet_v3_large": (CNN, RUNS),
    "mobilenet_v3_small": (CNN, RUNS),
    **{f"regnet_{k}_{s}": (CNN, RUNS) for k in "xy"
       for s in ("400mf", "800mf", "1_6gf", "3_2gf", "8gf", "16gf", "32gf")},
    "regnet_y_128gf": (CNN, RUNS),
    **{f"resnet{d}": (CNN, RUNS) for d in (18, 34, 50, 101, 152)},
    "resnext50_32x4d": (CNN, RUNS), "resnext101_32x8d": (CNN, RUNS),
    "resnext101_64x4d": (CNN, RUNS),
    **{f"shufflenet_v2_x{s}": (CNN, RUNS) for s in ("0_5", "1_0", "1_5", "2_0")},
    "squeezenet1_0": (CNN, RUNS), "squeezenet1_1": (CNN, RUNS),
    **{f"swin_{s}": (CNN, SWIN) for s in "tsb"},
    **{f"swin_v2_{s}": (CNN, SWIN2) for s in "tsb"},
    **{f"vgg{d}{bn}": (CNN, RUNS) for d in (11, 13, 16, 19) for bn in ("", "_bn")},
    **{f"vit_{s}": (VIT, RUNS) for s in ("b_16", "b_32", "l_16", "l_32", "h_14")},
    "wide_resnet50_2": (CNN, RUNS), "wide_resnet101_2": (CNN, RUNS),
}
# the slowest to build and export, `all` alone: each over 100 M parameters, a ViT-L/H at 224,
# or a family's larger members (VGG's classifier alone is 120 M), whose modules its smallest
# member, which `export` exports, has
SLOW = {"regnet_y_128gf", "regnet_y_32gf", "regnet_x_32gf", "regnet_y_16gf", "regnet_x_16gf",
        "vit_l_16", "vit_l_32", "vit_h_14", "convnext_large", "efficientnet_v2_l",
        *(f"vgg{d}{bn}" for d in (13, 16, 19) for bn in ("", "_bn")), "vit_b_16",
        "wide_resnet101_2", "resnext101_32x8d", "resnext101_64x4d", "resnet152", "convnext_base",
        "efficientnet_b6", "efficientnet_b7"}
# stepped by `run`: every kind of op and act the zoo needs, each builder small
# (grouped convolutions: regnet_y_400mf's, as resnext50_32x4d's)
RUN = ["resnet18", "mobilenet_v2", "mobilenet_v3_small", "mnasnet0_5", "efficientnet_b0",
       "regnet_y_400mf", "densenet121", "shufflenet_v2_x0_5", "squeezenet1_1"]
# and ViT-B/32's and ConvNeXt-T's modules (torchvision's VisionTransformer and ConvNeXt) at a
# small width and depth: their 88 M and 28 M parameters would take `run` a minute and 30 s;
# `export` exports the builders themselves
VIT_SMALL = dict(image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64,
                 mlp_dim=128)
CONVNEXT_SMALL = ((24, 48, 1), (48, None, 1))  # ConvNeXt-T's: (96, 192, 3) ... (768, None, 3)
MODES = ("dp", "ddp", "fsdp")
GROUPED = ("mobilenet_v3_small", "resnext50_32x4d", "regnet_y_400mf")  # FLOPs checked


def builders():
    """torchvision.models' classification builders: its public functions taking weights."""
    m = torchvision.models
    return sorted(n for n in dir(m) if not n.startswith("_") and inspect.isfunction(getattr(m, n))
                  and "weights" in inspect.signature(getattr(m, n)).parameters)


def shape_of(text):
    return tuple(int(d) for d in text.split("x"))


# torch.nn.init's fills, which the builders call through the module (nn.init.X)
INITS = ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_",
         "xavier_uniform_", "xavier_normal_", "constant_", "ones_", "zeros_", "orthogonal_")


@contextlib.contextmanager
def zero_fills():
    """Every torch.nn.init fill made a zero fill while a model is built: a
    model file holds its parameters' shapes, not their values (dpscale draws
    its own), and the random fills are half of exporting a large builder.
    The exporter's trace and backward (for the ready order) read no value;
    zeros keep them finite."""
    saved = {n: getattr(nn.init, n) for n in INITS}

    def zero(tensor, *args, **kwargs):
        with torch.no_grad():
            return tensor.zero_()
    try:
        for n in INITS:
            setattr(nn.init, n, zero)
        yield
    finally:
        for n, f in saved.items():
            setattr(nn.init, n, f)


def build(name, **kwargs):
    torch.manual_seed(0)
    with zero_fills():
        return getattr(torchvision.models, name)(**kwargs)


def export(name, tmp, **kwargs):
    """(outcome, path): "runs" and the file, or "refused: MESSAGE" and None."""
    model = build(name, **kwargs)
    try:
        lines = model_export.model_file(name, f"torchvision.models.{name}", model,
                                        shape_of(ZOO[name][0]))
    except model_export.ExportError as e:
        return f"refused: {e}", None
    path = os.path.join(tmp, name + ".model")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return RUNS, path


def check_outcome(binary, name, tmp):
    """name's export against ZOO; its file read by dpscale info. The file's path or None."""
    t = time.time()
    got, path = export(name, tmp)
    want = ZOO[name][1]
    if want == RUNS:
        expect(got == RUNS, f"{name}: {got}; ZOO expects it to run")
        r = subprocess.run([binary, "info", "--model", path], capture_output=True, text=True)
        expect(r.returncode == 0, f"{name}: dpscale info --model refuses its file: {r.stderr}")
    else:
        expect(got.startswith("refused: ") and want[len("refused: "):] in got,
               f"{name}: {got[:400]}; ZOO expects '{want}'")
    print(f"{name}: {got[:160]} ({time.time() - t:.1f} s)", flush=True)
    return path


def check_listed():
    have = builders()
    expect(set(have) == set(ZOO), f"torchvision's builders and ZOO differ: not in ZOO "
           f"{sorted(set(have) - set(ZOO))}, not in torchvision {sorted(set(ZOO) - set(have))}")
    expect(set(RUN) <= {n for n, (_, o) in ZOO.items() if o == RUNS}, "RUN names a refused model")


def step(binary, path, tmp, what, memory_bound=False):
    """One step of dp, ddp and fsdp with --check on 2 host devices at batch 2;
    memory_bound: a mode dpscale refuses for this machine's host memory
    (before allocating) is noted, not failed."""
    for mode in MODES:
        t = time.time()
        r = dpscale(binary, "run", "--model", path, "--mode", mode, "--gpus", "2", "--batch", "2",
                    "--steps", "1", "--warmup", "0", "--check", out=tmp, name=f"{what}-{mode}",
                    timeout=1800)
        refused = re.search(r"oom: (host memory: this configuration needs about [0-9.]+ GiB)", r.stdout)
        if memory_bound and r.returncode != 0 and refused:
            print(f"{what}: {mode} not stepped here: {refused.group(1)}", flush=True)
            continue
        expect(r.returncode == 0 and " pass " in r.stdout,
               f"{what}: {mode} --check on 2 host devices: exit {r.returncode}\n{r.stdout}\n"
               f"{r.stderr}")
        print(f"{what}: {mode} --check passes ({time.time() - t:.1f} s)", flush=True)


class Acts(nn.Module):
    """Every act the exporter maps, as modules and as functions."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.mods = nn.Sequential(nn.ReLU6(), nn.SiLU(), nn.Hardswish(), nn.Hardsigmoid(),
                                  nn.Mish())

    def forward(self, x):
        f = nn.functional
        x = self.mods(self.fc(x))
        return f.mish(f.hardsigmoid(f.hardswish(f.silu(f.relu6(x)))))


def check_acts():
    lines = model_export.model_file("acts", "acts", Acts(), (8,))
    fns = [w[3:] for line in lines if line.startswith("op act ") for w in line.split()
           if w.startswith("fn=")]
    want = ["relu6", "silu", "hardswish", "hardsigmoid", "mish"] * 2
    expect(fns == want, f"the acts' fns are {fns}, expected {want}")


def check_grouped_flops():
    for name in GROUPED:
        model = build(name)
        shape = shape_of(ZOO[name][0])
        lines = model_export.model_file(name, name, model, shape)
        flops, hooked = file_flops(lines), hooked_flops(model, shape)
        expect(abs(flops / hooked - 1) < 0.01, f"{name}: {flops:.4g} GEMM FLOPs in the file, "
               f"{hooked:.4g} counted on the module")


def case_export(binary):
    check_listed()
    check_acts()
    check_grouped_flops()
    with tempfile.TemporaryDirectory(prefix="dpscale-zoo-") as tmp:
        for name in sorted(set(ZOO) - SLOW):
            path = check_outcome(binary, name, tmp)
            if path:
                os.remove(path)
    r = subprocess.run([PYTHON, EXPORT, "torchvision.models.swin_t", "--input", CNN],
                       capture_output=True, text=True, env={**os.environ,
                       "PYTHONPATH": os.path.dirname(EXPORT)})
    expect(r.returncode == 2 and SWIN[len("refused: "):] in r.stderr and
           "Traceback" not in r.stderr,
           f"model_export.py swin_t: exit {r.returncode}, {r.stderr.strip()}")
    return 0


def small_module(name, model, tmp, shape):
    """MODEL, built under zero_fills, exported as NAME on an input of SHAPE; its file's path."""
    lines = model_export.model_file(name, f"torchvision.models.{type(model).__name__}", model,
                                    shape)
    path = os.path.join(tmp, name + ".model")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def small_modules(tmp):
    """torchvision's VisionTransformer as VIT_SMALL says and its ConvNeXt as
    CONVNEXT_SMALL says, exported: [(name, path)]."""
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt
    torch.manual_seed(0)
    with zero_fills():
        vit = torchvision.models.VisionTransformer(**VIT_SMALL)
        convnext = ConvNeXt([CNBlockConfig(*c) for c in CONVNEXT_SMALL])
    side = VIT_SMALL["image_size"]
    return [("vit-small", small_module("vit-small", vit, tmp, (3, side, side))),
            ("convnext-small", small_module("convnext-small", convnext, tmp, shape_of(CNN)))]


def case_run(binary):
    check_listed()
    with tempfile.TemporaryDirectory(prefix="dpscale-zoo-") as tmp:
        for name in RUN:
            step(binary, check_outcome(binary, name, tmp), tmp, name)
        got, path = export("googlenet", tmp, aux_logits=False, init_weights=True)
        expect(got == RUNS, f"googlenet(aux_logits=False): {got}")
        step(binary, path, tmp, "googlenet-noaux")
        for name, path in small_modules(tmp):
            step(binary, path, tmp, name)
    return 0


def case_all(binary):
    if os.environ.get("DPSCALE_SLOW") != "1":
        print("skipped: every builder of the zoo takes minutes to an hour; "
              "DPSCALE_SLOW=1 meson test -C build 'model zoo all' runs it")
        return 77
    check_listed()
    with tempfile.TemporaryDirectory(prefix="dpscale-zoo-") as tmp:
        for name in sorted(ZOO):
            path = check_outcome(binary, name, tmp)
            if path:
                step(binary, path, tmp, name, memory_bound=True)
                os.remove(path)
    return 0


if __name__ == "__main__":
    run_cases(globals())
