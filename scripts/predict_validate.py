#!/usr/bin/env python3
"""Published results against `dpscale predict` (issue 16): each case is
predicted from its one-GPU figure (or, where the source gives none, from one
published point taken as the calibration) and the machine files of
bench/predict/, and printed beside the published figure with the error.
The figures are for the issue's note, not assertions.

usage: predict_validate.py DPSCALE [BENCH_DIR]     (BENCH_DIR: bench/predict)

Exit status: 0 printed, 2 bad input (a prediction that did not run).
Standard library only.
"""
import csv
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# PyTorch's DDP benchmark, benchmarks/distributed/ddp/README.md: ResNet-50,
# batch 32 a GPU, s/iteration (p50); 1 GPU without DDP 0.097 is the input.
RESNET = [("ddp", 1, 0.100), ("ddp", 2, 0.103), ("ddp", 4, 0.103), ("ddp", 8, 0.104),
          ("ddp", 16, 0.104)]
# Hugging Face, "Efficient Training on Multiple GPUs": GPT-2 small, two TITAN
# RTX, batch 4 a GPU, train_runtime of 200 steps, s.
GPT2_STEPS = 200
GPT2 = {"ddp-nvlink": 101.9228, "dp-nvlink": 110.5948, "ddp-pcie": 131.4367}


class BadInput(Exception):
    pass


def predict(dpscale, machine, workload, gpus, modes="dp,ddp"):
    """{(mode, ngpus): row} of predictions.csv."""
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([dpscale, "predict", "--machine", machine, "--workload", workload,
                            "--gpus", ",".join(map(str, gpus)), "--modes", modes, "--out", out,
                            "--name", "v"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise BadInput(f"dpscale predict: exit {p.returncode}: {p.stderr.strip()}")
        with open(os.path.join(out, "v", "predictions.csv"), newline="") as f:
            return {(r["mode"], int(r["ngpus"])): r for r in csv.DictReader(f)}


def with_step(workload, step_ms, folder):
    """A copy of the workload file with step_ms_1gpu replaced."""
    lines = []
    with open(workload) as f:
        for line in f:
            key = line.split("=", 1)[0].strip()
            lines.append(f"step_ms_1gpu = {step_ms!r}\n" if key == "step_ms_1gpu" else line)
    path = os.path.join(folder, os.path.basename(workload))
    with open(path, "w") as f:
        f.writelines(lines)
    return path


def calibrate(dpscale, machine, workload, mode, ngpus, target_ms, folder):
    """The step_ms_1gpu whose prediction of (mode, ngpus) is target_ms (bisection:
    the prediction grows with it)."""
    lo, hi = 1e-3, target_ms
    for _ in range(60):
        mid = (lo + hi) / 2
        row = predict(dpscale, machine, with_step(workload, mid, folder), [ngpus], mode)[(mode, ngpus)]
        if row["status"] != "ok":
            raise BadInput(f"calibration: {row['status']} {row['note']}")
        lo, hi = (mid, hi) if float(row["step_ms"]) < target_ms else (lo, mid)
    return (lo + hi) / 2


def line(case, predicted_ms, published_ms, note=""):
    err = 100.0 * (predicted_ms - published_ms) / published_ms
    print(f"  {case:<34} {predicted_ms:10.1f} {published_ms:10.1f} {err:+8.1f} %  {note}")


def resnet(dpscale, bench):
    print("PyTorch DDP benchmark, ResNet-50 b32, DGX-1 V100 + 4x100 Gbit IB "
          "(input: 1 GPU without DDP, 97 ms)")
    rows = predict(dpscale, os.path.join(bench, "dgx1-v100-ib.machine"),
                   os.path.join(bench, "resnet50-b32.workload"), [g for _, g, _ in RESNET], "ddp")
    for mode, g, s in RESNET:
        r = rows[(mode, g)]
        line(f"{mode} {g} GPU{'s' if g > 1 else ''} ({r['nodes']} node{'s' if r['nodes'] != '1' else ''})",
             float(r["step_ms"]), 1000 * s, "goal: within 10 %" if g in (8, 16) else "")


def gpt2(dpscale, bench):
    print(f"Hugging Face GPT-2 small b4, 2x TITAN RTX, ms a step ({GPT2_STEPS} steps; "
          "calibration point: DDP with NVLink)")
    workload = os.path.join(bench, "gpt2-small-b4.workload")
    nvlink, pcie = (os.path.join(bench, f"titan-rtx-{k}.machine") for k in ("nvlink", "pcie"))
    ms = {k: 1000 * v / GPT2_STEPS for k, v in GPT2.items()}
    with tempfile.TemporaryDirectory() as folder:
        step1 = calibrate(dpscale, nvlink, workload, "ddp", 2, ms["ddp-nvlink"], folder)
        calibrated = with_step(workload, step1, folder)
        a = predict(dpscale, nvlink, calibrated, [2])
        b = predict(dpscale, pcie, calibrated, [2], "ddp")
    print(f"  (one GPU's step, calibrated: {step1:.1f} ms)")
    got = {"ddp-nvlink": float(a[("ddp", 2)]["step_ms"]), "dp-nvlink": float(a[("dp", 2)]["step_ms"]),
           "ddp-pcie": float(b[("ddp", 2)]["step_ms"])}
    line("ddp 2 GPUs, NVLink", got["ddp-nvlink"], ms["ddp-nvlink"], "calibration point")
    line("dp 2 GPUs, NVLink", got["dp-nvlink"], ms["dp-nvlink"], "goal: within 10 %")
    line("ddp 2 GPUs, no NVLink (P2P off)", got["ddp-pcie"], ms["ddp-pcie"], "goal: within 10 %")
    order = sorted(got, key=got.get)
    print(f"  order predicted: {' < '.join(order)}; published: ddp-nvlink < dp-nvlink < ddp-pcie "
          f"({'same' if order == ['ddp-nvlink', 'dp-nvlink', 'ddp-pcie'] else 'DIFFERENT'})")


def main(argv):
    if len(argv) not in (2, 3):
        raise BadInput("usage: predict_validate.py DPSCALE [BENCH_DIR]")
    bench = argv[2] if len(argv) == 3 else os.path.join(HERE, "..", "bench", "predict")
    print(f"  {'case':<34} {'predicted':>10} {'published':>10} {'error':>10}")
    resnet(argv[1], bench)
    gpt2(argv[1], bench)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (BadInput, OSError, subprocess.SubprocessError) as e:
        print(f"predict_validate.py: {e}", file=sys.stderr)
        sys.exit(2)
