#!/usr/bin/env python3
"""A model file on dpscale's host backend against PyTorch running the
original module on the CPU, one device, one thread each, in interleaved
rounds (the order alternates every round): the median step time of each and
how the step divides into forward, loss, backward and optimizer.

  dev/model_vs_torch.py [--model resnet50] [--module torchvision.models.resnet50]
                        [--input 3x224x224] [--batch 4] [--steps 4] [--rounds 3]

dpscale: `dpscale run --backend host --gpus 1 --model MODEL` (its steps.csv's
phases); PyTorch: MODULE() with torch.set_num_threads(1) and SGD with momentum,
each phase timed on the host clock (the CPU runs it synchronously). Both
train on random data; the model file's maths is dpscale's own (docs/model-file.md),
so the losses differ and only the times compare.
"""
import argparse
import csv
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("forward", "loss", "backward", "optimizer")


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="dpscale's preset or model file")
    ap.add_argument("--module", default="torchvision.models.resnet50",
                    help="MODULE.FUNCTION returning the nn.Module PyTorch runs")
    ap.add_argument("--input", default="3x224x224", help="one sample's input shape")
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dpscale", default=os.path.join(ROOT, "build", "src", "dpscale"))
    ap.add_argument("--torch-side", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def torch_side(a):
    """One PyTorch run: a JSON line per timed step, {phase: ms, "step": ms}."""
    import torch
    torch.set_num_threads(1)
    mod, fn = a.module.rsplit(".", 1)
    model = getattr(importlib.import_module(mod), fn)()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    shape = [a.batch] + [int(d) for d in a.input.split("x")]
    for step in range(a.warmup + a.steps):
        x, y = torch.rand(shape) * 2 - 1, torch.randint(0, a.classes, (a.batch,))
        t = [time.perf_counter()]
        opt.zero_grad(set_to_none=True)
        out = model(x)
        t.append(time.perf_counter())
        loss = loss_fn(out, y)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        opt.step()
        t.append(time.perf_counter())
        if step >= a.warmup:
            ms = {p: (t[i + 1] - t[i]) * 1e3 for i, p in enumerate(PHASES)}
            ms["step"] = (t[-1] - t[0]) * 1e3
            print(json.dumps(ms), flush=True)


def run_torch(a):
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    args = [sys.executable, os.path.abspath(__file__), "--torch-side", "--module", a.module,
            "--input", a.input, "--classes", str(a.classes), "--batch", str(a.batch),
            "--steps", str(a.steps), "--warmup", str(a.warmup)]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def run_dpscale(a, tmp, k):
    name = f"r{k}"
    subprocess.run([a.dpscale, "run", "--backend", "host", "--gpus", "1", "--model", a.model,
                    "--batch", str(a.batch), "--steps", str(a.steps), "--warmup", str(a.warmup),
                    "--no-nvml", "--out", tmp, "--name", name], check=True, capture_output=True)
    with open(os.path.join(tmp, name, "steps.csv")) as f:
        return [dict({p: float(r[p + "_ms"]) for p in PHASES}, step=float(r["step_ms"]))
                for r in csv.DictReader(f)]


def table(sides):
    print(f"| side | step ms | " + " | ".join(f"{p} ms (share)" for p in PHASES) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in PHASES) + " |")
    for name, steps in sides.items():
        step = statistics.median(s["step"] for s in steps)
        cells = []
        for p in PHASES:
            ms = statistics.median(s[p] for s in steps)
            cells.append(f"{ms:.1f} ({ms / step:.1%})")
        print(f"| {name} | {step:.1f} | " + " | ".join(cells) + " |")


def main(argv):
    a = parse(argv)
    if a.torch_side:
        torch_side(a)
        return 0
    sides = {"dpscale": [], "torch": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.rounds):
            order = ("dpscale", "torch") if k % 2 == 0 else ("torch", "dpscale")
            for side in order:
                steps = run_dpscale(a, tmp, k) if side == "dpscale" else run_torch(a)
                sides[side] += steps
                print(f"round {k} {side}: " + ", ".join(f"{s['step']:.0f}" for s in steps) + " ms",
                      file=sys.stderr)
    table(sides)
    ratio = statistics.median(s["step"] for s in sides["dpscale"]) / \
        statistics.median(s["step"] for s in sides["torch"])
    print(f"\ndpscale / torch, median step: {ratio:.2f} ({a.model} and {a.module}, batch {a.batch}, "
          f"{a.rounds} rounds of {a.steps} steps, one thread each)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
