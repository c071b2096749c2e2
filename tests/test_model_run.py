#!/usr/bin/env python3
"""Model files run by dp and ddp (`--model FILE`, a suite's `models = FILE`):
their --check against one device on 1 to 4 devices with SGD and AdamW, DDP's
real buckets in buckets.csv and the trace, and what is refused with a model
file. The fixtures (tests/fixtures/models/) are exported by
scripts/model_export.py from tests/model_examples.py and
dpstools.reference_models (their first lines say how).

usage: test_model_run.py DPSCALE CASE
  check     a suite naming two model files from its folder (a residual conv
            net, a small GPT with tied weights): dp and ddp on 1, 2, 3 and 4
            devices, SGD and AdamW, every --check passing, runs.csv naming
            the file's model and its parameters
  buckets   resnet50 (bench/models/) under ddp on 2 ranks: buckets.csv holds
            `dpscale info --model`'s buckets, bytes in order, on each rank, and
            the trace a ready mark for each
  refused   bf16, --layers, --gemm-ref, a bad line, a missing file, a suite
            naming a bad file, two files of one name: exit 2 with what and where
  predict   predict --from a folder of a model file that no preset names:
            read from the folder's copy of the file (models/NAME.model), and
            without it refused, naming the file's model; of a preset's file
            (DPSCALE_MODELS): one device's memory within a quarter of the run's
  host_memory  a model file's batch over the memory this process may take:
            refused before allocating, offering a --batch (no --tokens) that fits
  loss_memory  tiny-gpt under dp on one device in fp32 and bf16: no gathered
            logits (DataParallel calls the module directly), the loss's
            buffers those of docs/method.md's table (under autocast the fp32
            logits and their gradient one buffer), and of the MLP preset's"""
from listing import DPSCALE, FIXTURES, exit_if_listing, test

TESTS = [test("model run " + c, DPSCALE, c, timeout=600)
         for c in ("check", "buckets", "refused", "predict", "host_memory", "loss_memory")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

from helpers import dpscale, expect, expect_exit, read_folder, run_cases

MODELS = os.path.join(FIXTURES, "models")
RESNET50 = os.path.join(FIXTURES, "..", "..", "bench", "models", "resnet50.model")
PARAMS = {"small-resnet": None, "tiny-gpt": None}


def info_params(binary, path):
    """The parameters `dpscale info --model` counts in a file."""
    out = subprocess.run([binary, "info", "--model", path], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"(\d+) parameters", out).group(1))


def case_check(binary):
    with tempfile.TemporaryDirectory() as tmp:
        for name in PARAMS:
            shutil.copy(os.path.join(MODELS, name + ".model"), tmp)
        suite = os.path.join(tmp, "files.suite")
        with open(suite, "w") as f:
            f.write("modes = dp, ddp\ngpus = 1, 2, 3, 4\nmodels = small-resnet.model, "
                    "tiny-gpt.model\noptimizers = sgd, adamw\nglobal_batch = 6\nbatch = strong\n"
                    "steps = 2\nwarmup = 1\n")
        out = os.path.join(tmp, "res")
        p = dpscale(binary, "sweep", suite, "--host-devices", "4", "--check", "--no-links", out=out,
                    name="s", timeout=540)
        expect(p.returncode == 0, f"sweep exit {p.returncode}:\n{p.stdout}\n{p.stderr}")
        runs = read_folder(os.path.join(out, "s"))[0]
        expect(len(runs) == 32, f"{len(runs)} configurations, expected 32")
        for r in runs:
            want = info_params(binary, os.path.join(tmp, r["model"] + ".model"))
            expect(r["status"] == "ok" and r["check"] == "pass",
                   f"{r['config_id']}: status {r['status']}, check {r['check']}: {r['error']}")
            expect(int(r["params"]) == want, f"{r['config_id']}: params {r['params']}, the file {want}")


def info_buckets(binary, path):
    out = subprocess.run([binary, "info", "--model", path, "--bucket-mb", "25"],
                         capture_output=True, text=True, check=True).stdout
    return [int(m.group(1)) for m in re.finditer(r"^\s+\d+\s+\d+\s+(\d+)\s", out, re.M)]


def case_buckets(binary):
    want = info_buckets(binary, RESNET50)
    expect(len(want) == 5, f"info --model resnet50: {want}")
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "run", "--model", "resnet50", "--mode", "ddp", "--gpus", "2", "--batch",
                    "2", "--steps", "1", "--warmup", "1", "--trace-steps", "1", "--no-nvml",
                    out=out, name="r", timeout=540)
        expect(p.returncode == 0, f"exit {p.returncode}:\n{p.stderr}")
        folder = os.path.join(out, "r")
        runs = read_folder(folder)[0]
        expect(runs[0]["model"] == "resnet50" and runs[0]["params"] == "25557032", f"{runs[0]}")
        with open(os.path.join(folder, "buckets.csv")) as f:
            rows = list(csv.DictReader(f))
        for rank in ("0", "1"):
            got = [int(r["bytes"]) for r in rows if r["rank"] == rank]
            expect(got == want, f"rank {rank}'s buckets {got}, info --model's {want}")
        traces = [os.path.join(folder, "trace", n) for n in os.listdir(os.path.join(folder, "trace"))]
        events = json.load(open(traces[0]))["traceEvents"]
        ready = {e["name"] for e in events if e.get("cat") == "bucket_ready"}
        expect(ready == {f"bucket {b} ready" for b in range(len(want))}, f"ready marks {sorted(ready)}")


def bad_file(tmp):
    path = os.path.join(tmp, "bad.model")
    with open(os.path.join(MODELS, "small-resnet.model")) as f:
        lines = f.read().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("op "))
    lines[at] = "op conv3d c1 m=4"
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path, at + 1


def case_refused(binary):
    small = os.path.join(MODELS, "small-resnet.model")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        bad, line = bad_file(tmp)
        same = os.path.join(tmp, "same-name.model")  # another file, the same `name` line
        shutil.copy(small, same)
        suite = os.path.join(tmp, "bad.suite")
        with open(suite, "w") as f:
            f.write("models = small, bad.model\n")
        cases = [
            (["run", "--model", small, "--layers", "3"], ["--layers", "whose shapes are its own"]),
            (["run", "--model", small, "--gemm-ref"], ["--gemm-ref", "model file"]),
            (["run", "--model", bad], [f"{bad}:{line}:"]),
            (["run", "--model", os.path.join(tmp, "none.model")], ["none.model"]),
            (["run", "--model", "nonesuch"], ["unknown preset", "model file's path"]),
            (["sweep", suite], [f"{suite}: models = bad.model", f"{bad}:{line}:"]),
            (["sweep", "--model", f"{small},{same}", "--dry-run"],
             [small, same, "are both configuration dp-small-resnet-fp32-sgd-g1-b8"]),
        ]
        for args, needles in cases:
            p = dpscale(binary, *args, "--steps", "1", out=out)
            expect_exit(p, 2, *needles)
            expect(not os.path.exists(out), f"{args}: wrote {out}")


def predict_from(binary, folder, env=None, out=None):
    machine = os.path.join(FIXTURES, "..", "..", "bench", "predict", "dgx1-v100-ib.machine")
    where = ["--out", out, "--name", "pr"] if out else []
    return subprocess.run([binary, "predict", "--from", folder, "--machine", machine, "--gpus",
                           "1,8", *where], capture_output=True, text=True, timeout=120, env=env)


def case_predict(binary):
    with tempfile.TemporaryDirectory() as out:
        sweep = ["sweep", "--mode", "dp,ddp", "--gpus", "1,2", "--steps", "2", "--warmup", "1",
                 "--no-links"]
        p = dpscale(binary, *sweep, "--model", os.path.join(MODELS, "tiny-gpt.model"), out=out,
                    name="g")
        expect(p.returncode == 0, f"sweep exit {p.returncode}:\n{p.stderr}")
        expect(os.listdir(os.path.join(out, "g", "models")) == ["tiny-gpt.model"],
               "the folder keeps a copy of the model file it ran")
        expect_exit(predict_from(binary, os.path.join(out, "g")), 0)
        shutil.rmtree(os.path.join(out, "g", "models"))
        expect_exit(predict_from(binary, os.path.join(out, "g")), 2, "ran the model file 'tiny-gpt'",
                    "g/models/tiny-gpt.model, the copy of it a run keeps")
        # the same file as the gpt2 preset's (DPSCALE_MODELS): one device's memory predicted
        # within a quarter of what the run allocated (parameters, gradients, momentum, activations)
        models = os.path.join(out, "models")
        os.mkdir(models)
        shutil.copy(os.path.join(MODELS, "tiny-gpt.model"), os.path.join(models, "gpt2.model"))
        env = dict(os.environ, DPSCALE_MODELS=models)
        p = subprocess.run([binary, *sweep, "--model", "gpt2", "--batch-per-gpu", "2", "--backend",
                            "host", "--out", out, "--name", "p"], capture_output=True, text=True,
                           timeout=300, env=env)
        expect(p.returncode == 0, f"sweep of the gpt2 preset: exit {p.returncode}:\n{p.stderr}")
        p = predict_from(binary, os.path.join(out, "p"), env, out)
        expect(p.returncode == 0, f"predict --from: exit {p.returncode}:\n{p.stderr}")
        with open(os.path.join(out, "pr", "predictions.csv")) as f:
            predicted = {(r["mode"], r["ngpus"]): float(r["gpu0_mem_bytes"]) for r in csv.DictReader(f)}
        with open(os.path.join(out, "p", "devices.csv")) as f:
            measured = {r["config_id"]: float(r["alloc_peak_bytes"]) for r in csv.DictReader(f)}
        for mode, cid in (("dp", "dp-gpt2-fp32-sgd-g1-b2"), ("ddp", "ddp-gpt2-fp32-sgd-g1-b2-bk25")):
            got, want = predicted[(mode, "1")], measured[cid]
            expect(abs(got / want - 1) < 0.25, f"{mode} on 1 device: {got:.0f} B predicted, {want:.0f} B allocated")


def case_host_memory(binary):
    with open(binary, "rb") as f:
        if b"libasan" in f.read():
            print("skipped: AddressSanitizer's shadow memory breaks an RLIMIT_DATA limit")
            return 77
    limit = 1 << 30
    cap = lambda: resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))  # noqa: E731
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "run", "--backend", "host", "--model", os.path.join(MODELS, "tiny-gpt.model"),
               "--mode", "ddp", "--gpus", "2", "--batch", "32768", "--steps", "1", "--warmup", "0",
               "--out", out, "--name", "big"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=cap)
        fits = re.search(r"--batch (\d+) fits", p.stdout)
        expect(p.returncode == 1 and fits and "--tokens" not in p.stdout,
               f"exit {p.returncode}, expected 1 offering a --batch alone:\n{p.stdout}{p.stderr}")
        cmd[cmd.index("32768")] = fits.group(1)
        p = subprocess.run(cmd[:-1] + ["fits"], capture_output=True, text=True, timeout=300,
                           preexec_fn=cap)
        expect(p.returncode == 0, f"the --batch offered: exit {p.returncode}\n{p.stderr}")


def logit_shape(binary, path):
    """(rows, classes) of a sample's logits, as `dpscale info --model` says."""
    out = subprocess.run([binary, "info", "--model", path], capture_output=True, text=True,
                         check=True).stdout
    return tuple(int(v) for v in re.search(r"(\d+) x (\d+) logits a sample", out).groups())


def loss_buffers(binary, out, model, prec, batch):
    """Device 0's memory.csv rows of a dp run on one device: {category: bytes}."""
    name = f"{os.path.basename(model).split('.')[0]}-{prec}"
    dpscale(binary, "run", "--model", model, "--mode", "dp", "--gpus", "1", "--batch", str(batch),
            "--precision", prec, "--steps", "1", "--warmup", "0", out=out, name=name, check_rc=0)
    with open(os.path.join(out, name, "memory.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["device_index"] == "0"]
    return {r["category"]: int(r["bytes_at_peak"]) for r in rows}, \
        {r["category"] for r in rows if r["kind"] == "loss buffers"}


def case_loss_memory(binary):
    model = os.path.join(MODELS, "tiny-gpt.model")
    rows, classes = logit_shape(binary, model)
    batch = 4
    n = batch * rows
    nc = n * classes * 4
    for prec in ("fp32", "bf16"):
        with tempfile.TemporaryDirectory() as out:
            held, loss = loss_buffers(binary, out, model, prec, batch)
            _, preset_loss = loss_buffers(binary, out, "tiny", prec, 2)
        gathered = [c for c in held if "gathered" in c]
        expect(not gathered, f"{prec}: dp on one device holds {gathered}: DataParallel calls the "
               "module directly, nothing is gathered (strategies/dp.c, alloc_loss_logits)")
        want = {"log-probabilities": nc, "log-probabilities gradient": nc, "per-token loss": 4 * n}
        if prec == "fp32":
            want.update({"logits": nc, "logits gradient": nc})
        else:  # logits.float() freed once read: its gradient takes its buffer
            want.update({"autocast logits": nc // 2, "loss's fp32 logits, then their gradient": nc})
        got = {c: held.get(c) for c in want}
        expect(got == want, f"{prec}: the loss's buffers {got}, docs/method.md's table says {want}")
        for extra in ("logits gradient", "loss's fp32 logits") if prec != "fp32" else ():
            expect(extra not in held, f"{prec}: a separate `{extra}` beside the fp32 logits' one buffer")
        expect(loss == preset_loss, f"{prec}: the file's loss buffers {sorted(loss)}, the MLP "
               f"preset's {sorted(preset_loss)}")


if __name__ == "__main__":
    run_cases(globals())
