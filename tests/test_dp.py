#!/usr/bin/env python3
"""dp (DataParallel) on the host backend's devices: training as one device
does (--check), the loss falling, device 0's extra memory and bytes, the
replicas' phases, the torch and lean variants, out of memory on device 0; and
the command line's refusals, --backend cuda without CUDA, info's versions.
Usage: test_dp.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail, 77
skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

CHECKS = [("1", "sgd", "8"), ("2", "sgd", "8"), ("3", "sgd", "10"), ("4", "sgd", "10"),
          ("4", "sgd", "5"), ("2", "adamw", "7"), ("3", "adamw", "10"), ("4", "adamw", "6")]
TESTS = [test(f"dp check gpus={g} {o} batch={b}", DPSCALE, "check", g, o, b, timeout=300)
         for g, o, b in CHECKS]
TESTS += [test("dp learns gpus=3", DPSCALE, "learns", "3", timeout=300)]
TESTS += [test(f"dp {c}", DPSCALE, c, timeout=300)
          for c in ("imbalance", "replica_phases", "dp_impl", "oom", "bad_input", "cuda_absent",
                    "info", "shared_device", "loss_tensors")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import shutil
import subprocess
import sys
import tempfile

from helpers import (dpscale, dpsresults, expect, expect_exit, memory_at_peak, read_folder,
                     run_cases, write)


def case_check(binary, ngpus, optimizer, batch, *extra, mode="dp"):
    """N devices train exactly as one device does (--check)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--mode", mode, "--model", "tiny", "--gpus", ngpus,
                "--optimizer", optimizer, "--batch", batch, "--steps", "6", "--warmup", "2",
                "--check", *extra, out=out, check_rc=0)
        runs, devices, steps, phases, _ = read_folder(os.path.join(out, "t"))
        r = runs[0]
        expect(r["status"] == "ok", f"status {r['status']}: {r['error']}")
        expect(r["check"] == "pass", f"check {r['check']} ({r['check_max_rel_diff']})")
        tol = 1e-4 if optimizer == "adamw" else 1e-5
        expect(float(r["check_max_rel_diff"]) <= tol, f"max relative difference above {tol}")
        if mode == "dp":  # torch.chunk: devices past the last chunk do nothing
            size = -(-int(batch) // int(ngpus))
            used = -(-int(batch) // size)
            for d in devices[used:]:
                expect(int(d["alloc_peak_bytes"]) == 0, f"idle device {d['device']} allocated")
        else:
            expect(len(steps) == 6 * int(ngpus), f"steps.csv: {len(steps)} rows")
            if int(ngpus) > 1:
                expect(float(r["busbw_gbps"]) > 0 and float(r["algbw_gbps"]) > 0, "no bandwidth")


def case_learns(binary, ngpus):
    """Training works: the loss falls clearly over 40 steps (AdamW)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "tiny", "--gpus", ngpus, "--optimizer", "adamw",
                "--lr", "0.01", "--steps", "40", "--warmup", "0", out=out, check_rc=0)
        r = read_folder(os.path.join(out, "t"))[0][0]
        first, last = float(r["loss_first"]), float(r["loss_last"])
        expect(last < 0.92 * first, f"loss {first} -> {last}: did not fall by 8 %")


# The N x C tensors of nn.CrossEntropyLoss(logits.float()) at PyTorch 2.x's peak, inside
# log_softmax's backward (docs/method.md, "The loss's tensors"): (bytes an element, category)
# on device 0, by precision, for dp over one device and ddp's rank.
LOSS_PEAK = {
    "fp32": {(4, "logits"), (4, "log-probabilities"), (4, "log-probabilities gradient"),
             (4, "logits gradient")},
    "bf16": {(2, "autocast logits, then their gradient"), (4, "log-probabilities"),
             (4, "log-probabilities gradient"), (4, "loss's fp32 logits, then their gradient")},
}


def case_loss_tensors(binary):
    """Device 0 holds the loss's N x C tensors that PyTorch holds at its peak, of the same types
    and no others (no gather at one device, the fp32 cast's buffer reused for its gradient under
    autocast); documented in docs/method.md with PyTorch's sources; dp over two devices adds the
    gathered half logits only."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "method.md")).read()
    with tempfile.TemporaryDirectory() as out:
        for prec, want in LOSS_PEAK.items():
            for mode, gpus in (("dp", "1"), ("ddp", "1"), ("dp", "2")):
                name = f"{mode}{gpus}-{prec}"
                dpscale(binary, "run", "--mode", mode, "--gpus", gpus, "--model", "small",
                        "--classes", "999", "--precision", prec, "--steps", "1", "--warmup", "0",
                        out=out, name=name, check_rc=0)
                mem = memory_at_peak(os.path.join(out, name))
                cats = next(c for (cid, dev), c in mem.items() if dev == "0")
                nc = 16 * 16 * 999 * (1 if mode == "ddp" else int(gpus))  # rows x classes (odd)
                held = {(b // nc, c) for c, b in cats.items() if b >= nc and b % nc == 0}
                expected = set(want)
                if mode == "dp" and gpus == "2":  # device 0's replica writes into the gathered
                    expected = {(e, "gathered logits" if c == "logits" else c) for e, c in want}
                    if prec != "fp32":
                        expected -= {(2, "autocast logits, then their gradient")}
                        expected |= {(2, "gathered half logits, then their gradient")}
                expect(held == expected, f"{name}: device 0's N x C buffers {sorted(held)}, "
                       f"PyTorch's at its peak {sorted(expected)}")
        for _, c in set().union(*LOSS_PEAK.values()):
            expect(f"`{c}`" in doc, f"docs/method.md's loss table does not name `{c}`")


def case_shared_device(binary):
    """--devices 0,0 on a backend of one device: two dp replicas on it, trained as one device
    does, its memory the two replicas' and device 0's own; ddp's ranks cannot share it."""
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "run", "--host-devices", "1", "--mode", "dp", "--devices", "0,0",
                    "--model", "tiny", "--steps", "4", "--warmup", "1", "--check", out=out,
                    check_rc=0)
        r = read_folder(os.path.join(out, "t"))[0][0]
        expect(r["status"] == "ok" and r["check"] == "pass", f"{r['status']} {r['check']}: {r['error']}")
        expect("several replicas share" in p.stderr, f"no warning that replicas share a device: {p.stderr}")
        p = dpscale(binary, "run", "--host-devices", "1", "--mode", "ddp", "--devices", "0,0",
                    "--model", "tiny", "--steps", "2", out=out, name="ddp")
        expect(p.returncode == 2 and "device 0 is listed twice (only dp" in p.stderr,
               f"ddp on --devices 0,0: exit {p.returncode}, {p.stderr.strip()}")
        p = dpscale(binary, "run", "--host-devices", "1", "--devices", "0,1", "--model", "tiny",
                    out=out, name="missing")
        expect(p.returncode == 2 and "--gpus 2: the host backend has 1 device" in p.stderr,
               f"--devices 0,1 on one device: exit {p.returncode}, {p.stderr.strip()}")


def case_imbalance(binary):
    """Device 0 holds the batch, the gathered logits and the optimizer state."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "small", "--gpus", "4", "--steps", "3",
                "--optimizer", "adamw", out=out, check_rc=0)
        _, devices, _, phases, _ = read_folder(os.path.join(out, "t"))
        peaks = [int(d["alloc_peak_bytes"]) for d in devices]
        expect(all(peaks[0] > p for p in peaks[1:]), f"device 0 not above the others: {peaks}")
        expect(all(p > 0 for p in peaks), f"a device allocated nothing: {peaks}")
        sent = [float(d["p2p_sent_bytes_per_step"]) for d in devices]
        expect(sent[0] > max(sent[1:]), f"device 0 does not send the most: {sent}")
        rep = [p for p in phases if p["phase"] == "replicate" and p["device"] == "1"]
        expect(rep and float(rep[0]["bytes_per_step"]) > 0, "replicate moved no bytes to device 1")


def case_replica_phases(binary, backend="host"):
    """Each replica's phases hold its own work, not its waits on device 0: its forward begins
    after device 0's replicate ends, its backward after device 0's loss and after it received
    its rows of the logits' gradient, which are its scatter's second part (bytes and time).
    The host backend does its work as it is issued, so there the order holds by construction
    (outside strict mode, whose streams run on workers of their own, each phase placed by its
    worker's clock); `replica_phases cuda` runs three replicas on GPU 0's streams, where it
    is what is tested."""
    devices = ["--devices", "0,0,0"] if backend == "cuda" else ["--gpus", "3"]
    env = dict(os.environ, DPSCALE_STRICT="0") if backend == "host" else None
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "small", *devices, "--steps", "2", "--warmup", "1",
                "--trace-steps", "1", out=out, backend=backend, check_rc=0, env=env)
        folder = os.path.join(out, "t")
        runs, _, _, phases, _ = read_folder(folder)
        with open(os.path.join(folder, "trace", runs[0]["config_id"] + ".json")) as f:
            trace = json.load(f)["traceEvents"]
        span = {(e["pid"] - 1, e["name"]): (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
                for e in trace if e["ph"] == "X" and e.get("cat") == "phase"}
        tol = 0.1 if backend == "host" else 0.005  # ms: streams placed by the host's clock
        for d in (1, 2):
            for phase, after, what in (("forward", "replicate", "device 0's replicate"),
                                       ("backward", "loss", "device 0's loss")):
                begin, end = span[(d, phase)][0], span[(0, after)][1]
                expect(begin >= end - tol, f"device {d}'s {phase} begins at {begin:.3f} ms, "
                       f"before {what} ends ({end:.3f} ms): it counts its wait")
        rows, classes, width, f32 = 16 * 16, 128, 256, 4  # small: 16 samples x 16 tokens a device
        got = {(p["device"], p["phase"]): float(p["bytes_per_step"]) for p in phases}
        chunk = rows * (width + classes) * f32  # its input chunk, then its logits gradient rows
        for d in ("1", "2"):
            expect(got[(d, "scatter")] == chunk and got[(d, "backward")] == 0,
                   f"device {d}: scatter {got[(d, 'scatter')]} B, backward {got[(d, 'backward')]} B; "
                   f"{chunk} and 0 expected")
        expect(got[("0", "scatter")] == 2 * chunk, f"device 0's scatter: {got[('0', 'scatter')]} B")


def case_dp_impl(binary):
    """dp as DataParallel does it holds, on device 0, what the lean variant does not: the
    log-probabilities and their gradient (n x C each), the reduce's output (one parameter-sized
    buffer) and a coalescing buffer; the replicas are the same, and so is the training."""
    with tempfile.TemporaryDirectory() as out:
        args = ["run", "--model", "small", "--gpus", "3", "--steps", "3", "--check"]
        dpscale(binary, *args, out=out, name="torch", check_rc=0)
        dpscale(binary, *args, "--dp-impl", "lean", out=out, name="lean", check_rc=0)
        runs_t, dev_t, _, _, _ = read_folder(os.path.join(out, "torch"))
        runs_l, dev_l, _, _, _ = read_folder(os.path.join(out, "lean"))
        expect(runs_l[0]["config_id"].startswith("dp-lean-"), runs_l[0]["config_id"])
        expect(runs_t[0]["check"] == runs_l[0]["check"] == "pass", "a --check failed")
        expect(runs_t[0]["loss_last"] == runs_l[0]["loss_last"],
               f"losses differ: {runs_t[0]['loss_last']} {runs_l[0]['loss_last']}")
        params, rows = int(runs_t[0]["params"]), int(runs_t[0]["global_batch"]) * 16
        classes, f32 = 128, 4  # the small preset: 16 tokens, 128 classes
        extra = int(dev_t[0]["alloc_peak_bytes"]) - int(dev_l[0]["alloc_peak_bytes"])
        least = (2 * rows * classes + params) * f32
        expect(extra >= least, f"device 0 holds {extra} more bytes, at least {least} expected")
        cats_t = memory_at_peak(os.path.join(out, "torch"))[(runs_t[0]["config_id"], "0")]
        cats_l = memory_at_peak(os.path.join(out, "lean"))[(runs_l[0]["config_id"], "0")]
        for what, size in (("log-probabilities", rows * classes * f32),
                           ("log-probabilities gradient", rows * classes * f32),
                           ("reduce output", params * f32)):
            expect(cats_t.get(what) == size and what not in cats_l,
                   f"device 0's {what}: {cats_t.get(what)} with torch, {cats_l.get(what)} lean; "
                   f"{size} expected with torch only")
        # as DataParallel frees a replica's output after the gather, a replica's logits and their
        # gradient share one buffer, and device 0's replica's live in device 0's logits gradient
        chunk = rows // 3 * classes * f32
        for impl, runs in (("torch", runs_t), ("lean", runs_l)):
            cats = memory_at_peak(os.path.join(out, impl))
            on0 = [c for c in cats[(runs[0]["config_id"], "0")] if "replica logits" in c]
            expect(not on0, f"{impl}: device 0 holds its replica's logits apart: {on0}")
            for d in ("1", "2"):
                got = cats[(runs[0]["config_id"], d)]
                expect(got.get("replica logits, then their gradient") == chunk and
                       not any("gradient chunk" in c for c in got),
                       f"{impl}: device {d}'s logits and their gradient: {got}; one buffer of "
                       f"{chunk} B expected")
        others = [int(t["alloc_peak_bytes"]) - int(l["alloc_peak_bytes"])
                  for t, l in zip(dev_t[1:], dev_l[1:])]
        expect(all(0 < o <= min(params * f32, 10 << 20) for o in others),
               f"replicas' extra is not one coalescing buffer: {others}")


def case_oom(binary):
    """A capacity that fits every device but device 0 gives status oom naming device 0."""
    with tempfile.TemporaryDirectory() as out:
        args = ["run", "--model", "small", "--gpus", "3", "--steps", "2"]
        dpscale(binary, *args, out=out, name="free", check_rc=0)
        _, devices, _, _, _ = read_folder(os.path.join(out, "free"))
        peaks = [int(d["alloc_peak_bytes"]) for d in devices]
        cap = (peaks[0] + max(peaks[1:])) // 2
        p = dpscale(binary, *args, "--device-mem", str(cap), out=out, name="capped", check_rc=1)
        runs, devices, steps, _, _ = read_folder(os.path.join(out, "capped"))
        expect(len(runs) == 1 and runs[0]["status"] == "oom", f"runs.csv: {runs}")
        expect("device 0" in runs[0]["error"], f"error does not name device 0: {runs[0]['error']}")
        expect("out of memory" in p.stdout, "the table does not show the out-of-memory")
        expect(not steps, "steps.csv has rows for a configuration that never stepped")
        expect(int(devices[0]["alloc_peak_bytes"]) <= cap, "device 0 went past its capacity")


BAD_INPUTS = [
    (["run", "--bogus"], "--bogus"),
    (["run", "--lr", "1e-300"], "--lr"),
    (["sweep", ""], "sweep ''"),
    (["run", "--gpus"], "--gpus"),
    (["run", "--gpus", "x"], "--gpus"),
    (["run", "--gpus", "0"], "--gpus"),
    (["run", "--gpus", "-2"], "--gpus"),
    (["run", "--gpus", "18446744073709551617"], "--gpus"),
    (["run", "--gpus", "9"], "--gpus 9"),
    (["run", "--devices", "0,8"], "--devices"),
    (["run", "--mode", "ddp", "--devices", "1,1"], "--devices: device 1 is listed twice"),
    (["run", "--model", "huge"], "--model"),
    (["run", "--precision", "fp16", "--scaler", "off"], "--precision fp16 --scaler off"),
    (["run", "--steps", "99999999999"], "--steps"),
    (["run", "--batch", "0"], "--batch"),
    (["run", "--device-mem", "lots"], "--device-mem"),
    (["run", "--optimizer", "lion"], "--optimizer"),
    (["run", "--width", "0"], "--width"),
    (["run", "--batch", "16777216", "--tokens", "1048576"], "--batch"),
    (["frobnicate"], "frobnicate"),
    (["run", "--mode", "ddp", "--gpus", "4", "--batch", "3"], "--batch 3"),
    (["run", "--mode", "ddp", "--gpus", "2", "--inject-fault", "2:1:exit"], "--inject-fault"),
    (["run", "--mode", "ddp", "--inject-fault", "0:99:exit", "--steps", "5"], "--inject-fault"),
    (["run", "--inject-fault", "0:1:exit"], "--inject-fault"),
    (["run", "--profile-steps", "2:99", "--steps", "5"], "--profile-steps 2:99"),
    (["run", "--dp-comm", "nccl"], "--dp-comm nccl"),
    (["run", "--dp-comm", "mpi"], "--dp-comm mpi"),
    (["sweep", "--gpus", "1,1"], "--gpus 1,1: listed twice: '1'"),
    (["sweep", "--model", "tiny,tiny", "--mode", "dp"], "--model tiny,tiny: listed twice: 'tiny'"),
    (["run", "--model", ",tiny"], "--model ,tiny: empty entry in the list"),
    (["sweep", "--gpus", ",1"], "--gpus ,1: empty entry in the list"),
    (["links", "--dry-run"], "--dry-run: not an option of `dpscale links` (only of run and sweep)"),
    (["info", "--inject-fault", "1:1:exit"], "--inject-fault: not an option of `dpscale info`"),
    (["sweep", "--save-params", "p.npy"], "--save-params: not an option of `dpscale sweep`"),
    (["links", "--sizes", "1M,2M"], "--sizes 1M,2M: one value for `dpscale links`"),
]


# suite files refused as the command line refuses the same lists: (text, message)
BAD_SUITES = [
    ("models = tiny\ngpus = 1, 1\n", ":2: gpus = 1, 1: listed twice: '1'"),
    ("models = tiny, tiny\n", ":1: models = tiny, tiny: listed twice: 'tiny'"),
    ("models = ,tiny\n", ":1: models = ,tiny: empty entry in the list"),
]


def case_bad_input(binary):
    """Each bad value: exit 2, one line naming the option, no files written."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        for args, needle in BAD_INPUTS:
            p = dpscale(binary, *args, "--host-devices", "8", out=out)
            lines = [l for l in p.stderr.splitlines() if not l.startswith("dpscale: backend auto")]
            expect(p.returncode == 2, f"{args}: exit {p.returncode}, expected 2 ({p.stderr})")
            expect(len(lines) == 1 and needle in lines[0], f"{args}: stderr {p.stderr!r}")
            expect("Segmentation" not in p.stderr and p.stdout == "", f"{args}: output {p.stdout!r}")
            expect(not os.path.exists(out), f"{args}: created {out}")
        for text, needle in BAD_SUITES:
            p = dpscale(binary, "sweep", write(os.path.join(tmp, "bad.suite"), text), out=out)
            expect_exit(p, 2, "bad.suite" + needle)
            expect(p.stdout == "" and not os.path.exists(out), f"{text!r}: output {p.stdout!r}")
        # bytes that are not UTF-8: refused in a folder name, escaped in meta.json
        p = subprocess.run([binary, "run", "--backend", "host", "--out", out, "--name",
                            os.fsdecode(b"caf\xe9")], capture_output=True)
        expect(p.returncode == 2 and b"valid UTF-8" in p.stderr, f"--name caf\\xe9: {p}")
        npy = os.fsdecode(os.path.join(os.fsencode(tmp), b"p\xe9.npy"))
        p = subprocess.run([binary, "run", "--backend", "host", "--model", "tiny", "--steps", "1",
                            "--save-params", npy, "--out", out, "--name", "latin1"],
                           capture_output=True)
        expect(p.returncode == 0, f"--save-params with a Latin-1 name: {p}")
        meta = dpsresults.read_meta(os.path.join(out, "latin1"))
        expect(any("\ufffd" in a for a in meta["command_line"]), f"meta.json: {meta['command_line']}")
        shutil.rmtree(out)
        # an output folder that cannot be written
        blocker = os.path.join(tmp, "file")
        open(blocker, "w").close()
        p = dpscale(binary, "run", "--steps", "1", out=os.path.join(blocker, "sub"))
        expect(p.returncode == 2 and "--out" in p.stderr, f"unwritable --out: {p.returncode} {p.stderr}")


def case_cuda_absent(binary):
    """Without a GPU, --backend cuda fails clearly (exit 1) and auto falls back."""
    p = subprocess.run([binary, "info", "--backend", "cuda"], capture_output=True, text=True)
    if p.returncode == 0:
        return 77  # a GPU and a CUDA backend are present: nothing to test here
    expect(p.returncode == 1, f"--backend cuda: exit {p.returncode}")
    expect("--backend cuda" in p.stderr and "host" in p.stderr, f"message: {p.stderr!r}")
    p = subprocess.run([binary, "info"], capture_output=True, text=True)
    expect(p.returncode == 0 and "backend: host" in p.stdout, f"auto: {p.stdout!r} {p.stderr!r}")
    return 0


def case_info(binary):
    """dpscale info lists every version that meta.json records, one field a line."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "tiny", "--steps", "1", out=out, check_rc=0)
        meta = read_folder(os.path.join(out, "t"))[4]
    p = subprocess.run([binary, "info", "--backend", "host"], capture_output=True, text=True)
    expect_exit(p, 0)
    lines = p.stdout.split("versions:\n", 1)[-1].splitlines()
    expect(meta["versions"]["blas"], f"meta.json names no BLAS: {meta['versions']}")
    # the host backend runs a model file's convolutions as their im2col GEMMs
    expect(meta["versions"]["conv"] == "im2col-gemm (the host backend)",
           f"meta.json's conv path: {meta['versions'].get('conv')!r}")
    for key in dpsresults.VERSIONS:
        value = meta["versions"][key]
        expect(not value or any(l.startswith("  ") and l.endswith(" " + value) for l in lines),
               f"info does not list {key} {value!r}:\n{p.stdout}")


if __name__ == "__main__":
    run_cases(globals())
