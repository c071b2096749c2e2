"""`dpscale predict` held against published results and against this machine's, printed.

predict_validate.py's work: each published case predicted from its one-GPU
figure (or calibrated to one published point) and the machine files of
bench/predict/, and on this machine (host) the constants fitted to a
calibration folder, another shape predicted from its one-device run and
then measured. A line per case: predicted, published or measured, error.
"""
import os
import subprocess
import tempfile

from dpstools import results

# PyTorch's DDP benchmark, benchmarks/distributed/ddp/README.md: ResNet-50,
# batch 32 a GPU, s/iteration (p50); 1 GPU without DDP 0.097 is the input.
RESNET = [("ddp", 1, 0.100), ("ddp", 2, 0.103), ("ddp", 4, 0.103), ("ddp", 8, 0.104),
          ("ddp", 16, 0.104)]
# The same README's A/B of DDP's bucket cap ("How to diff": baseline
# bucket_cap_mb=25, the default, against test bucket_cap_mb=1, "on 8 DGX
# machines with V100 GPUs"), ResNet-50 b32: the test's p75 s/iteration and
# its ex/sec change against the baseline, %, by GPU count.
RESNET_BUCKET_1MB = [(1, 0.101, -0.3), (2, 0.104, -1.0), (4, 0.105, -1.6), (8, 0.107, -2.6),
                     (16, 0.108, -3.8)]
# Hugging Face, "Efficient Training on Multiple GPUs": GPT-2 small, two TITAN
# RTX, batch 4 a GPU, train_runtime of 200 steps, s.
GPT2_STEPS = 200
GPT2 = {"ddp-nvlink": 101.9228, "dp-nvlink": 110.5948, "ddp-pcie": 131.4367}


class BadInput(Exception):
    """A prediction or a run that did not complete: exit 2 with the message."""


def predict(dpscale, machine, workload, gpus, modes="dp,ddp"):
    """{(mode, ngpus): row} of predictions.csv."""
    with tempfile.TemporaryDirectory() as out:
        run(dpscale, "predict", "--machine", machine, "--workload", workload, "--gpus",
            ",".join(map(str, gpus)), "--modes", modes, "--out", out, "--name", "v")
        table = results.read_predictions(os.path.join(out, "v", "predictions.csv"))
        return {(r["mode"], int(r["ngpus"])): r for r in table}


def with_step(workload, step_ms, folder, key_set="step_ms_1gpu"):
    """A copy of the workload file with step_ms_1gpu (or key_set) replaced."""
    lines = []
    with open(workload) as f:
        for line in f:
            key = line.split("=", 1)[0].strip()
            lines.append(f"{key_set} = {step_ms!r}\n" if key == key_set else line)
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


def resnet_buckets(dpscale, bench):
    """The README's bucket A/B: ResNet-50 at bucket_mb 1 against 25, the same
    machine and workload files (nothing fitted to the A/B)."""
    print("PyTorch DDP benchmark, bucket_cap_mb 1 against 25 (the A/B of its README), ResNet-50 "
          "b32, p75 at 1 MB")
    machine, workload = (os.path.join(bench, "dgx1-v100-ib.machine"),
                         os.path.join(bench, "resnet50-b32.workload"))
    gpus = [g for g, _, _ in RESNET_BUCKET_1MB]
    at25 = predict(dpscale, machine, workload, gpus, "ddp")
    with tempfile.TemporaryDirectory() as folder:
        at1 = predict(dpscale, machine, with_step(workload, 1, folder, "bucket_mb"), gpus, "ddp")
    for g, s, change in RESNET_BUCKET_1MB:
        one, base = float(at1[("ddp", g)]["step_ms"]), float(at25[("ddp", g)]["step_ms"])
        ours = 100.0 * (base / one - 1.0)  # ex/sec change, as diff.py's
        line(f"ddp {g} GPU{'s' if g > 1 else ''} bucket 1 MB", one, 1000 * s,
             f"ex/s 1 vs 25 MB: predicted {ours:+.1f} %, published {change:+.1f} %")


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
        need = busbw_for(dpscale, pcie, calibrated, ms["ddp-pcie"], folder)
    print(f"  (one GPU's step, calibrated: {step1:.1f} ms)")
    got = {"ddp-nvlink": float(a[("ddp", 2)]["step_ms"]), "dp-nvlink": float(a[("dp", 2)]["step_ms"]),
           "ddp-pcie": float(b[("ddp", 2)]["step_ms"])}
    line("ddp 2 GPUs, NVLink", got["ddp-nvlink"], ms["ddp-nvlink"], "calibration point")
    line("dp 2 GPUs, NVLink", got["dp-nvlink"], ms["dp-nvlink"], "goal: within 10 %")
    line("ddp 2 GPUs, no NVLink (P2P off)", got["ddp-pcie"], ms["ddp-pcie"], "goal: within 10 %")
    order = sorted(got, key=got.get)
    print(f"  order predicted: {' < '.join(order)}; published: ddp-nvlink < dp-nvlink < ddp-pcie "
          f"({'same' if order == ['ddp-nvlink', 'dp-nvlink', 'ddp-pcie'] else 'DIFFERENT'})")
    print(f"  (the published ddp without NVLink needs an all-reduce busbw of {need:.2f} GB/s in the "
          f"model; titan-rtx-pcie.machine estimates 5)")


def busbw_for(dpscale, machine, workload, target_ms, folder):
    """The intra_busbw_gbps at which ddp on 2 devices of machine takes target_ms
    (bisection: the step falls as the bandwidth grows)."""
    lo, hi = 0.05, 1000.0
    with open(machine) as f:
        text = [l for l in f if l.split("=", 1)[0].strip() not in ("intra_busbw_gbps", "p2p_gbps")]
    path = os.path.join(folder, "probe.machine")
    for _ in range(50):
        mid = (lo * hi) ** 0.5
        with open(path, "w") as f:
            f.writelines(text + [f"intra_busbw_gbps = {mid!r}\n"])
        ms = float(predict(dpscale, path, workload, [2], "ddp")[("ddp", 2)]["step_ms"])
        lo, hi = (lo, mid) if ms < target_ms else (mid, hi)
    return (lo * hi) ** 0.5


def run(dpscale, *args):
    p = subprocess.run([dpscale, *args], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise BadInput(f"dpscale {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p.stdout


# The host runs: the calibration shape and the validated one (medium).
CAL_SHAPE = ["--model", "medium", "--layers", "4", "--width", "768"]
VAL_SHAPE = ["--model", "medium"]
HOST_STEPS = ["--steps", "15", "--warmup", "3", "--no-nvtx"]


def host(dpscale, keep):
    print("This machine, host backend: calibrated on medium 4x768 (1 and 2 devices), "
          "validated on medium 8x1024 (predicted from its 1-device run, then measured)")
    out = keep or tempfile.mkdtemp(prefix="predict-host-")
    val = os.path.join(out, "val")
    calibration = host_calibrate(dpscale, out)
    pred = host_predict(dpscale, out, calibration)
    run(dpscale, "sweep", "--mode", "dp,ddp", "--gpus", "2", *VAL_SHAPE, *HOST_STEPS, "--no-links",
        "--out", out, "--name", "val")
    got = {r["mode"]: float(r["step_ms_median"])
           for r in results.read_csv(os.path.join(val, "runs.csv"))
           if r["ngpus"] == "2" and r["status"] == "ok"}
    for mode in ("dp", "ddp"):
        if mode in pred and mode in got:
            line(f"{mode} 2 devices, medium", pred[mode], got[mode], "goal: within 15 % (measured)")
    print(f"  (folders in {out}; draw with: scripts/plot.py {val} --predictions {out}/pred)")


def host_calibrate(dpscale, out):
    """The calibration shape on 1 and 2 devices and its all-reduce, fitted;
    returns the calibration file."""
    cal = os.path.join(out, "cal")
    run(dpscale, "sweep", "--mode", "dp,ddp", "--gpus", "1,2", *CAL_SHAPE, *HOST_STEPS, "--out", out,
        "--name", "cal")
    run(dpscale, "comm-bench", "--gpus", "2", "--out", out, "--name", "cal")
    print("  " + run(dpscale, "predict", "--calibrate", cal, "--out", out, "--name", "calibration")
          .replace("\n", "\n  ").rstrip())
    return os.path.join(out, "calibration", "calibration.txt")


def host_predict(dpscale, out, calibration):
    """The validated shape on one device, with the machine's links and
    all-reduce (the sweep's own link matrix left out: one measurement of each
    link); its 2-device {mode: step_ms} predicted from that folder."""
    run(dpscale, "sweep", "--mode", "dp,ddp", "--gpus", "1", *VAL_SHAPE, *HOST_STEPS, "--no-links",
        "--out", out, "--name", "val")
    run(dpscale, "links", "--gpus", "2", "--out", out, "--name", "val")
    run(dpscale, "comm-bench", "--gpus", "2", "--out", out, "--name", "val")
    run(dpscale, "predict", "--from", os.path.join(out, "val"), "--gpus", "2", "--calibration",
        calibration, "--out", out, "--name", "pred")
    table = results.read_predictions(os.path.join(out, "pred", "predictions.csv"))
    return {r["mode"]: float(r["step_ms"]) for r in table if r["status"] == "ok"}
