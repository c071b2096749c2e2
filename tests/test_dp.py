#!/usr/bin/env python3
"""Integration tests: run the dpscale binary on the host backend and read
its results folder. Usage: integration.py DPSCALE CASE [ARGS...]; exit 0
pass, 1 fail, 77 skip (meson's convention). Standard library only."""
import csv
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

from helpers import (SCRIPTS, Failure, copy_fixture, dpscale, dpsresults, expect, expect_exit, memory_at_peak,
                     png_size, read_folder, read_table, run_case, script, write)


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


def case_ddp_check(binary, ngpus, optimizer, batch, *extra):
    return case_check(binary, ngpus, optimizer, batch, *extra, mode="ddp")


def case_ddp_balance(binary):
    """ddp's ranks hold the same memory; dp's device 0 holds more than ddp's rank 0."""
    with tempfile.TemporaryDirectory() as out:
        for mode in ("dp", "ddp"):
            dpscale(binary, "run", "--mode", mode, "--model", "small", "--gpus", "4",
                    "--steps", "2", "--optimizer", "adamw", out=out, name=mode, check_rc=0)
        _, ddp_dev, _, _, _ = read_folder(os.path.join(out, "ddp"))
        _, dp_dev, _, _, _ = read_folder(os.path.join(out, "dp"))
        peaks = [int(d["alloc_peak_bytes"]) for d in ddp_dev]
        expect(max(peaks) == min(peaks) > 0, f"ddp peaks not balanced: {peaks}")
        expect(int(dp_dev[0]["alloc_peak_bytes"]) > peaks[0], "dp's device 0 not above ddp's")
        sent = [float(d["p2p_sent_bytes_per_step"]) for d in ddp_dev]
        # the ring sends 2 (n-1)/n of the gradient bytes per rank
        params = 296064 * 4
        for s in sent:
            expect(abs(s - 2 * 3 / 4 * params) < 64, f"ring bytes {s}, expected {1.5 * params}")


def processes_mentioning(text):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def shm_files():
    """/dev/shm's files, less the regions of ranks under a launcher
    (dpscale-*: the launch tests, which may run meanwhile, check their own)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if not n.startswith("dpscale-")}


def case_fault(binary, kind):
    """A rank that exits or hangs ends the group: exit 1, status, nothing left behind."""
    with tempfile.TemporaryDirectory(prefix="dpscale-fault-") as out:
        before = shm_files()
        t0 = time.monotonic()
        dpscale(binary, "run", "--mode", "ddp", "--model", "tiny", "--gpus", "4",
                "--steps", "20", "--inject-fault", f"1:3:{kind}", "--timeout", "2",
                out=out, check_rc=1)
        took = time.monotonic() - t0
        expect(took < 20, f"the group took {took:.1f} s to end")
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        want = "error" if kind == "exit" else "timeout"
        r = runs[0]
        expect(r["status"] == want, f"status {r['status']}, expected {want}: {r['error']}")
        expect("rank 1" in r["error"] or "1 (forward)" in r["error"], f"error: {r['error']}")
        expect("step 3" in r["error"], f"error does not name step 3: {r['error']}")
        time.sleep(0.2)
        left = processes_mentioning(out)
        expect(not left, f"processes left behind: {left}")
        expect(shm_files() <= before, f"shared memory left behind: {shm_files() - before}")


def case_interrupt(binary):
    """SIGINT to the parent: the ranks end, the files hold the interrupted run, exit 130."""
    with tempfile.TemporaryDirectory(prefix="dpscale-int-") as out:
        cmd = [binary, "run", "--backend", "host", "--mode", "ddp", "--model", "small",
               "--gpus", "3", "--steps", "1000000", "--warmup", "0", "--out", out, "--name", "t"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while len(processes_mentioning(out)) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # a few steps, even in a sanitizer build on a loaded machine
        p.send_signal(signal.SIGINT)
        try:
            stdout, stderr = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            raise Failure("dpscale did not end within 15 s of SIGINT")
        expect(p.returncode == 130, f"exit {p.returncode}, expected 130\n{stderr}")
        runs, _, steps, _, meta = read_folder(os.path.join(out, "t"))
        expect(runs[0]["status"] == "error" and "SIGINT" in runs[0]["error"], f"runs: {runs}")
        expect(int(runs[0]["steps_done"]) > 0 and steps, "no step of the interrupted run was kept")
        time.sleep(0.2)
        expect(not processes_mentioning(out), "processes left behind")


def case_ddp_oom(binary):
    """A rank out of memory: status oom naming the rank and its device."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--mode", "ddp", "--model", "small", "--gpus", "2",
                "--steps", "2", "--device-mem", "3M", out=out, check_rc=1)
        runs, devices, _, _, _ = read_folder(os.path.join(out, "t"))
        err = runs[0]["error"]
        expect(runs[0]["status"] == "oom", f"status {runs[0]['status']}: {err}")
        expect("rank" in err and "device" in err and "out of memory" in err, f"error: {err}")


def case_learns(binary, ngpus):
    """Training works: the loss falls clearly over 40 steps (AdamW)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "tiny", "--gpus", ngpus, "--optimizer", "adamw",
                "--lr", "0.01", "--steps", "40", "--warmup", "0", out=out, check_rc=0)
        r = read_folder(os.path.join(out, "t"))[0][0]
        first, last = float(r["loss_first"]), float(r["loss_last"])
        expect(last < 0.92 * first, f"loss {first} -> {last}: did not fall by 8 %")


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
    The host backend does its work as it is issued, so there the order holds by construction;
    `replica_phases cuda` runs three replicas on GPU 0's streams, where it is what is tested."""
    devices = ["--devices", "0,0,0"] if backend == "cuda" else ["--gpus", "3"]
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--model", "small", *devices, "--steps", "2", "--warmup", "1",
                "--trace-steps", "1", out=out, backend=backend, check_rc=0)
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


def case_ddp_impl(binary):
    """ddp's loss as nn.CrossEntropyLoss runs it under DDP holds, on every rank, what the fused
    one (--ddp-impl lean, configurations ddp-lean-...) does not: the log-probabilities and their
    gradient, rows x C each; both train as one device does, to the same loss. A suite's ddp_impl
    list multiplies ddp's configurations only, dp_impl dp's only."""
    with tempfile.TemporaryDirectory() as out:
        args = ["run", "--mode", "ddp", "--model", "small", "--gpus", "3", "--batch", "7",
                "--steps", "3", "--check"]
        dpscale(binary, *args, out=out, name="torch", check_rc=0)
        dpscale(binary, *args, "--ddp-impl", "lean", out=out, name="lean", check_rc=0)
        runs_t = read_folder(os.path.join(out, "torch"))[0]
        runs_l = read_folder(os.path.join(out, "lean"))[0]
        cid_t, cid_l = runs_t[0]["config_id"], runs_l[0]["config_id"]
        expect(cid_t == "ddp-small-fp32-sgd-g3-b7-bk25" and cid_l == "ddp-lean-small-fp32-sgd-g3-b7-bk25",
               f"config ids {cid_t}, {cid_l}")
        expect(runs_t[0]["check"] == runs_l[0]["check"] == "pass", "a --check failed")
        lt, ll = float(runs_t[0]["loss_last"]), float(runs_l[0]["loss_last"])
        expect(abs(lt - ll) <= 1e-5 * abs(lt), f"losses differ: {lt} (torch) {ll} (lean)")
        cats_t = memory_at_peak(os.path.join(out, "torch"))
        cats_l = memory_at_peak(os.path.join(out, "lean"))
        classes, f32 = 128, 4  # the small preset: 16 tokens, 128 classes
        for rank, samples in enumerate((3, 2, 2)):  # numpy.array_split of 7 over 3
            size = samples * 16 * classes * f32
            t, l = cats_t[(cid_t, str(rank))], cats_l[(cid_l, str(rank))]
            for what in ("log-probabilities", "log-probabilities gradient"):
                expect(t.get(what) == size and what not in l,
                       f"rank {rank}'s {what}: {t.get(what)} with torch, {l.get(what)} lean; "
                       f"{size} expected with torch only")
        suite = os.path.join(out, "impls.suite")
        write(suite, "modes = dp, ddp\ngpus = 2\nmodels = tiny\ndp_impl = torch, lean\n"
                     "ddp_impl = torch, lean\n")
        p = dpscale(binary, "sweep", suite, "--dry-run", out=out, name="s", check_rc=0)
        listed = sorted(re.findall(r"^\s*\d+\s+(\S+)", p.stdout, re.M))
        expect(listed == ["ddp-lean-tiny-fp32-sgd-g2-b16-bk25", "ddp-tiny-fp32-sgd-g2-b16-bk25",
                          "dp-lean-tiny-fp32-sgd-g2-b16", "dp-tiny-fp32-sgd-g2-b16"],
               f"the suite's configurations: {listed}\n{p.stdout}")


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
    (["run", "--devices", "1,1"], "--devices"),
    (["run", "--model", "huge"], "--model"),
    (["run", "--precision", "bf16"], "--precision bf16"),
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
    for key in dpsresults.VERSIONS:
        value = meta["versions"][key]
        expect(not value or any(l.startswith("  ") and l.endswith(" " + value) for l in lines),
               f"info does not list {key} {value!r}:\n{p.stdout}")


def case_gpu(binary, mode, precision, *devices):
    """On a GPU: dp/ddp train as one device does (--check). Skipped (77) without one."""
    p = subprocess.run([binary, "info", "--backend", "cuda"], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"skipped: no CUDA device ({p.stderr.strip()})")
        return 77
    with tempfile.TemporaryDirectory() as out:
        extra = ["--devices", devices[0]] if devices else []
        dpscale(binary, "run", "--mode", mode, "--precision", precision, "--model", "small",
                "--steps", "6", "--check", *extra, out=out, backend="cuda", check_rc=0,
                timeout=600)
        runs, devs, _, _, _ = read_folder(os.path.join(out, "t"))
        expect(runs[0]["check"] == "pass", f"check {runs[0]['check_max_rel_diff']}")
        expect(int(devs[0]["device_peak_bytes"]) >= int(devs[0]["alloc_peak_bytes"]) > 0,
               "device_peak_bytes (context included) below the harness's own allocations")
    return 0


def case_sweep(binary):
    """The built-in sweep runs every configuration into one folder."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--model", "tiny,small", "--steps", "2", "--warmup", "1",
                out=out, check_rc=0)
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        got = sorted((r["model"], r["mode"], int(r["ngpus"])) for r in runs)
        want = sorted((m, k, g) for m in ("tiny", "small") for k in ("dp", "ddp") for g in (1, 2, 4))
        expect(got == want, f"sweep ran {got}")


def case_comm_bench(binary):
    """comm-bench times and checks the host all-reduce for every size and rank count."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "comm-bench", "--gpus", "2,3", "--sizes", "4,1M", "--steps", "2",
                "--warmup", "1", out=out, backend=None, check_rc=0, timeout=120)
        rows = read_table(os.path.join(out, "t", "allreduce.csv"))
        got = sorted((int(r["nranks"]), int(r["bytes"])) for r in rows)
        expect(got == [(2, 4), (2, 1 << 20), (3, 4), (3, 1 << 20)], f"rows {got}")
        for r in rows:
            expect(r["check"] == "pass" and float(r["time_us"]) > 0, f"row {r}")
            algbw = int(r["bytes"]) / (float(r["time_us"]) * 1e-6) / 1e9
            expect(abs(float(r["algbw_gbps"]) - algbw) <= 0.01 * algbw + 1e-3, f"algbw {r}")
            n = int(r["nranks"])
            expect(abs(float(r["busbw_gbps"]) - float(r["algbw_gbps"]) * 2 * (n - 1) / n) < 2e-3,
                   f"busbw {r}")


def comm_bench_fails(binary, out, name, *args, rc=1):
    """comm-bench ARGS fails with rc in one line, within 20 s; returns (stdout, that line)."""
    t0 = time.monotonic()
    p = dpscale(binary, "comm-bench", "--sizes", "64K", *args, out=out, name=name, backend=None,
                timeout=60)
    took = time.monotonic() - t0
    expect(p.returncode == rc, f"{args}: exit {p.returncode}, expected {rc}\n{p.stderr}")
    lines = p.stderr.splitlines()
    expect(len(lines) == 1, f"{args}: expected one line on stderr, got {p.stderr!r}")
    expect(took < 20, f"{args}: took {took:.1f} s to end")
    return p.stdout, lines[0]


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except OSError:
            pass
    return found


def case_comm_bench_faults(binary):
    """A comm-bench rank that exits, hangs or is killed: which rank and how, one line, no results line."""
    with tempfile.TemporaryDirectory() as out:
        stdout, err = comm_bench_fails(binary, out, "exit", "--gpus", "3", "--steps", "1000",
                                       "--inject-fault", "1:4:exit")
        expect("comm-bench with 3 ranks: rank 1 exited with status 3 during step 4 (injected by "
               "--inject-fault 1:4:exit)" in err, err)
        expect("# results in" not in stdout and not os.path.exists(os.path.join(out, "exit", "allreduce.csv")),
               f"results announced or written: {stdout}")
        stdout, err = comm_bench_fails(binary, out, "hang", "--gpus", "3", "--steps", "1000",
                                       "--inject-fault", "2:3:hang", "--timeout", "1")
        expect("step 3 exceeded --timeout 1 s" in err and "ranks not in a collective: 2" in err and
               "waiting in a collective: 0, 1" in err, err)
        expect("injected by --inject-fault 2:3:hang" in err, err)
        # the fault applies where its rank exists: 2 ranks run and are written, 3 fail
        stdout, err = comm_bench_fails(binary, out, "some", "--gpus", "2,3", "--steps", "2",
                                       "--inject-fault", "2:1:exit")
        rows = read_table(os.path.join(out, "some", "allreduce.csv"))
        expect([r["nranks"] for r in rows] == ["2"] and "# results in" in stdout, f"{rows} {stdout}")
        _, err = comm_bench_fails(binary, out, "bad", "--gpus", "2", "--inject-fault", "2:1:exit", rc=2)
        expect("--inject-fault 2:1:exit: comm-bench has ranks 0..1" in err, err)
        _, err = comm_bench_fails(binary, out, "bad", "--steps", "2", "--warmup", "1", "--inject-fault",
                                  "1:3:exit", rc=2)
        expect("--inject-fault 1:3:exit: comm-bench has steps 0..2" in err, err)
        if not sanitized(binary):  # a rank's own message: out of memory for its buffer
            limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # noqa: E731
            p = subprocess.run([binary, "comm-bench", "--gpus", "2", "--sizes", "16G", "--out", out,
                                "--name", "oom"], capture_output=True, text=True, timeout=60,
                               preexec_fn=limit)
            expect(p.returncode == 1 and len(p.stderr.splitlines()) == 1 and
                   "comm-bench with 2 ranks: rank " in p.stderr and "out of host memory" in p.stderr,
                   f"exit {p.returncode}: {p.stderr!r}")
        # a rank killed from outside
        cmd = [binary, "comm-bench", "--gpus", "3", "--sizes", "64K", "--steps", "10000000",
               "--out", out, "--name", "killed"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 20
        while len(children(p.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        ranks = sorted(children(p.pid))
        expect(len(ranks) == 3, f"ranks {ranks}")
        os.kill(ranks[1], signal.SIGKILL)
        stdout, stderr = p.communicate(timeout=20)
        expect(p.returncode == 1 and stderr.splitlines() == [stderr.strip()], f"{p.returncode} {stderr!r}")
        expect("rank 1 was killed by signal 9 (SIGKILL)" in stderr and "# results in" not in stdout,
               f"{stderr} {stdout}")


def case_links(binary):
    """dpscale links on the host backend: every path measured, verified, in links.csv."""
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "links", "--gpus", "3", "--sizes", "1M", "--steps", "3", out=out,
                    check_rc=0)
        expect("d2d_write (GB/s)" in p.stdout and "emulated" in p.stdout, p.stdout)
        rows = read_table(os.path.join(out, "t", "links.csv"))
        got = sorted((r["method"], r["src"], r["dst"]) for r in rows)
        devs = ["dev0", "dev1", "dev2"]
        want = sorted([("h2d", "host", d) for d in devs] + [("d2h", d, "host") for d in devs] +
                      [(m, a, b) for m in ("d2d_write", "d2d_read", "latency", "d2d_nopeer")
                       for a in devs for b in devs if a != b] +
                      [("d2d_bidir", a, b) for i, a in enumerate(devs) for b in devs[i + 1:]])
        expect(got == want, f"rows {got}")
        for r in rows:
            if r["method"] == "d2d_nopeer":  # the host backend has no peer access to switch off
                expect(r["status"].startswith("WAIVED") and r["bw_gbps"] == "", f"{r}")
                continue
            expect(r["status"] == "ok", f"{r}")
            v = r["latency_us"] if r["method"] == "latency" else r["bw_gbps"]
            expect(float(v) > 0, f"{r}")
        p = dpscale(binary, "links", "--gpus", "9", out=out, name="x")
        expect_exit(p, 2, "--gpus 9")
        links_out_of_memory(binary, out)
        links_sizes(binary, out)


def links_sizes(binary, out):
    """--link-min-bytes/--link-max-bytes/--link-factor: every path at every size (nccl-tests'
    -b/-e/-f, the maximum itself included), the latency once a direction."""
    p = dpscale(binary, "links", "--gpus", "2", "--link-min-bytes", "4K", "--link-max-bytes",
                "600K", "--link-factor", "4", "--steps", "3", out=out, name="sizes", check_rc=0)
    expect("GB/s by copy size" in p.stdout, p.stdout)
    rows = read_table(os.path.join(out, "sizes", "links.csv"))
    sizes = defaultdict(list)
    for r in rows:
        sizes[(r["method"], r["src"], r["dst"])].append(int(r["bytes"]))
    want = [4096, 16384, 65536, 262144, 614400]
    for path, got in sorted(sizes.items()):
        expect(sorted(got) == ([4] if path[0] == "latency" else want), f"{path}: sizes {got}")
    expect(len(sizes) == 2 + 2 + 2 * 4 + 1, f"paths {sorted(sizes)}")
    p = dpscale(binary, "links", "--link-min-bytes", "1M", "--link-max-bytes", "64K", out=out,
                name="bad")
    expect_exit(p, 2, "--link-min-bytes 1M is above --link-max-bytes 64K")


def sanitized(binary):
    """Whether the binary is built with AddressSanitizer (which an address-space limit breaks)."""
    with open(binary, "rb") as f:
        return b"libasan" in f.read()


def links_out_of_memory(binary, out):
    """links without the memory for its host buffers names the host, not a device -1."""
    if sanitized(binary):
        return
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # noqa: E731
    p = subprocess.run([binary, "links", "--backend", "host", "--gpus", "2", "--sizes", "16G",
                        "--out", out, "--name", "oom"], capture_output=True, text=True,
                       timeout=120, preexec_fn=limit)
    expect_exit(p, 1, "pinned host memory", "16.00 GiB")
    expect("device -1" not in p.stderr, f"stderr names device -1: {p.stderr}")


def case_profile_sh(binary):
    """scripts/profile.sh without Nsight Systems says so and exits 2."""
    profile_sh = os.path.join(SCRIPTS, "profile.sh")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "DPSCALE": binary}
    if subprocess.run(["sh", "-c", "command -v nsys"], env=env, capture_output=True).returncode == 0:
        return 77  # nsys is here: nothing to test
    p = subprocess.run(["bash", profile_sh, "--model", "tiny"], env=env, capture_output=True,
                       text=True)
    expect_exit(p, 2, "nsys", "not installed")
    return 0


def case_ab(binary):
    """scripts/ab.sh: the same binary against itself, interleaved, shows no regression."""
    ab_sh = os.path.join(SCRIPTS, "ab.sh")
    with tempfile.TemporaryDirectory() as tmp:
        suite = write(os.path.join(tmp, "s.suite"),
                      "modes = dp\ngpus = 1\nmodels = small\nsteps = 15\nwarmup = 2\n")
        p = subprocess.run(["bash", ab_sh, binary, binary, "2", suite], capture_output=True,
                           text=True, timeout=300)
        expect(p.returncode == 0 and "| configuration | metric |" in p.stdout, p.stdout + p.stderr)
        expect("**REGRESSION**" not in p.stdout, p.stdout)
        folder = p.stdout.split("Baseline `")[1].split("`")[0]
        runs = sorted(d for d in os.listdir(folder) if d.startswith("run-"))
        expect(runs == ["run-001", "run-002"], f"baseline runs in {folder}: {runs}")
        shutil.rmtree(os.path.dirname(folder))
        p = subprocess.run(["bash", ab_sh, binary], capture_output=True, text=True)
        expect_exit(p, 2, "usage")


def case_sweep_failures(binary):
    """A suite with an out-of-memory and an injected fault finishes and keeps every row."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp, ddp\ngpus = 1, 2, 4\nbatch = strong\nmodels = small\n"
                      "steps = 2\nwarmup = 1\n")
        dpscale(binary, "sweep", suite, out=out, name="free", check_rc=0)
        runs, devices, _, _, _ = read_folder(os.path.join(out, "free"))
        peak = {}
        for d in devices:
            peak[d["config_id"]] = max(peak.get(d["config_id"], 0), int(d["alloc_peak_bytes"]))
        g1 = min(peak[r["config_id"]] for r in runs if r["ngpus"] == "1")
        rest = max(peak[r["config_id"]] for r in runs if r["ngpus"] != "1")
        expect(rest < g1, f"precondition: 1-GPU peaks {g1} not above the others {rest}")
        cap = (g1 + rest) // 2
        dpscale(binary, "sweep", suite, "--device-mem", str(cap), "--inject-fault", "3:1:exit",
                out=out, name="faulty", check_rc=1)
        runs, _, steps, _, _ = read_folder(os.path.join(out, "faulty"))
        status = {(r["mode"], r["ngpus"]): r["status"] for r in runs}
        want = {("dp", "1"): "oom", ("ddp", "1"): "oom", ("dp", "2"): "ok", ("ddp", "2"): "ok",
                ("dp", "4"): "ok", ("ddp", "4"): "error"}
        expect(status == want, f"statuses {status}")
        fault = [r for r in runs if r["status"] == "error"][0]
        expect("rank 3" in fault["error"] and "step 1" in fault["error"], f"error: {fault['error']}")
        expect(len(steps) == 2 * (2 + 2 + 4), f"steps.csv kept {len(steps)} rows")  # the ok ones


def case_sweep_timeout(binary):
    """A configuration past --config-timeout is killed, recorded, and the sweep goes on."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp\ngpus = 1\nmodels = medium, tiny\nsteps = 100000\n")
        t0 = time.monotonic()
        dpscale(binary, "sweep", suite, "--config-timeout", "2", "--filter", "medium",
                out=out, check_rc=1)
        expect(time.monotonic() - t0 < 30, "the sweep did not end soon after the timeout")
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        expect(len(runs) == 1 and runs[0]["status"] == "timeout", f"runs {runs}")
        expect("--config-timeout 2" in runs[0]["error"], f"error {runs[0]['error']}")
        expect(not processes_mentioning(out), "processes left behind")


def case_sweep_resume(binary):
    """--resume skips configurations already in the folder; --dry-run runs nothing."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp, ddp\ngpus = 1, 2\nmodels = tiny\nsteps = 2\nwarmup = 0\n")
        p = dpscale(binary, "sweep", suite, "--dry-run", out=out, check_rc=0)
        expect("4 configurations" in p.stdout and not os.path.exists(os.path.join(out, "t")),
               f"dry run: {p.stdout}")
        dpscale(binary, "sweep", suite, "--filter", "g1", out=out, check_rc=0)
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        expect(sorted(r["config_id"] for r in runs) == ["ddp-tiny-fp32-sgd-g1-b8-bk25",
                                                        "dp-tiny-fp32-sgd-g1-b8"], f"{runs}")
        p = dpscale(binary, "sweep", suite, "--resume", out=out, check_rc=0)
        expect("2 configurations already in" in p.stderr, f"stderr: {p.stderr}")
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        ids = [r["config_id"] for r in runs]
        expect(len(ids) == 4 and len(set(ids)) == 4, f"runs after --resume: {ids}")
        links = read_table(os.path.join(out, "t", "links.csv"))
        # measured once, by the first sweep, over the one device its filtered runs used, from
        # 4 KiB up to the largest copy of its configurations (tiny's batch: 8 KiB)
        paths = sorted((r["method"], r["src"], r["dst"], r["bytes"]) for r in links)
        expect(paths == [("d2h", "dev0", "host", "4096"), ("d2h", "dev0", "host", "8192"),
                         ("h2d", "host", "dev0", "4096"), ("h2d", "host", "dev0", "8192")],
               f"the sweep's link matrix: {paths}")
        # --resume without --name continues OUT/latest
        p = dpscale(binary, "sweep", suite, "--resume", out=out, name=None, timeout=120)
        expect_exit(p, 0, "4 configurations already in")
        # latest points at a sweep from its start, so a crash leaves it on the crashed sweep
        slow = subprocess.Popen([binary, "sweep", suite, "--steps", "1000000", "--backend",
                                 "host", "--out", out, "--name", "crashed"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        latest = os.path.join(out, "latest")
        deadline = time.monotonic() + 30
        while os.readlink(latest) != "crashed" and time.monotonic() < deadline:
            time.sleep(0.1)
        pointed = os.readlink(latest)
        slow.kill()
        slow.wait()
        expect(pointed == "crashed", f"latest points at {pointed} while the sweep 'crashed' runs")
        # a latest that leaves --out, or none: --resume refuses; --name latest is refused
        os.remove(latest)
        p = dpscale(binary, "sweep", suite, "--resume", out=out, name=None)
        expect_exit(p, 2, "missing or not a link")
        os.symlink("../elsewhere", latest)
        p = dpscale(binary, "sweep", suite, "--resume", out=out, name=None)
        expect_exit(p, 2, "not at a folder directly under")
        p = dpscale(binary, "sweep", suite, out=out, name="latest")
        expect_exit(p, 2, "--name latest")


def case_sweep_skipped(binary):
    """What the host backend cannot run (bf16) is recorded as skipped, not failed."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp\ngpus = 1\nmodels = tiny\nprecisions = fp32, bf16\nsteps = 2\n")
        dpscale(binary, "sweep", suite, out=out, check_rc=0)
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        got = {r["precision"]: r["status"] for r in runs}
        expect(got == {"fp32": "ok", "bf16": "skipped"}, f"{got}")
        # every configuration skipped, here or after --filter: nothing ran, exit 1 saying why
        p = dpscale(binary, "sweep", suite, "--filter", "bf16", out=out, name="filtered")
        expect_exit(p, 1, "nothing ran", "--filter bf16", "bf16")
        runs, _, _, _, _ = read_folder(os.path.join(out, "filtered"))
        expect([r["status"] for r in runs] == ["skipped"], f"{runs}")
        big = write(os.path.join(out, "big.suite"), "modes = dp\ngpus = 9, 10\nmodels = tiny\n")
        p = dpscale(binary, "sweep", big, "--host-devices", "8", out=out, name="big")
        expect_exit(p, 1, "nothing ran", "all 2 configurations", "--gpus 9")
        p = dpscale(binary, "sweep", big, "--host-devices", "8", "--dry-run", out=out, name="dry")
        expect_exit(p, 0)
        p = dpscale(binary, "sweep", os.path.join(out, "missing.suite"), out=out)
        expect_exit(p, 2, "missing.suite: cannot read")


def set_cells(path, match, values):
    """Rewrites the rows of a CSV whose cells match `match` ({col: value})
    with `values` ({col: value})."""
    lines = open(path).read().splitlines()
    head = lines[0].split(",")
    for k, line in enumerate(lines[1:], 1):
        cells = line.split(",")
        if all(cells[head.index(c)] == v for c, v in match.items()):
            for c, v in values.items():
                cells[head.index(c)] = str(v)
            lines[k] = ",".join(cells)
    write(path, "\n".join(lines) + "\n")


def case_diagnosis(fixture):
    """summary.md names the bottleneck from the numbers: a folder where dp's
    reduce onto device 0 takes 41 % of its step and ddp is 1.5x faster, and
    where dp's device 0 holds 3 MiB of gathered logits and 1 MiB of loss
    buffers more than the others; and the reverse case names ddp's exposed
    all-reduce."""
    dp, ddp = "dp-small-fp32-sgd-g4-b64", "ddp-small-fp32-sgd-g4-b64-bk25"
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture(fixture, tmp, "res")
        runs = os.path.join(folder, "runs.csv")
        set_cells(runs, {"config_id": dp}, {"step_ms_median": "10.0", "samples_per_s": "1000"})
        set_cells(runs, {"config_id": ddp}, {"step_ms_median": "6.0", "samples_per_s": "1500"})
        steps = os.path.join(folder, "steps.csv")  # the step times the ratio's interval reads
        set_cells(steps, {"config_id": dp}, {"step_ms": "10.0", "rank_step_ms": "10.0"})
        set_cells(steps, {"config_id": ddp}, {"step_ms": "6.6667", "rank_step_ms": "6.6667"})
        phases = os.path.join(folder, "phases.csv")
        set_cells(phases, {"config_id": dp, "device": "0", "phase": "reduce"}, {"median_ms": "4.1"})
        set_cells(phases, {"config_id": ddp, "device": "0", "phase": "allreduce_exposed"},
                  {"median_ms": "0.6"})
        rows = ["config_id,device,device_index,category,bytes_at_peak"]
        for d in range(4):
            rows.append(f"{dp},{d},{d},parameters,{2 ** 20}")
        rows += [f"{dp},0,0,gathered logits,{3 * 2 ** 20}", f"{dp},0,0,loss buffers,{2 ** 20}"]
        write(os.path.join(folder, "memory.csv"), "\n".join(rows) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out"))
        expect_exit(p, 0)
        md = open(os.path.join(tmp, "out", "summary.md")).read()
        for want in ["## At a glance",
                     "| small | fp32 | weak | 4 | 1000.0 | 1500.0 | ddp | 1.50x [1.50, 1.50] |",
                     "### small, fp32, sgd, weak scaling, 4 devices: dp and ddp",
                     "ddp reaches 1.50x dp's throughput (95 % interval 1.50–1.50x): dp is bound "
                     "by the reduce of the gradients onto device 0: 41 % of the step (4.100 ms "
                     "of 10.000 ms); ",
                     "ddp's exposed all-reduce: 0.600 ms, 10 % of its step.",
                     "| reduce | 4.100 | 41.0 |",
                     "dp's device 0 holds more than the others' mean at its peak: gathered "
                     "logits (3.00 MiB), loss buffers (1.00 MiB)."]:
            expect(want in md, f"summary.md lacks {want!r}:\n{md[:4000]}")
        set_cells(runs, {"config_id": ddp}, {"step_ms_median": "20.0", "samples_per_s": "500"})
        set_cells(steps, {"config_id": ddp}, {"step_ms": "20.0", "rank_step_ms": "20.0"})
        set_cells(phases, {"config_id": ddp, "device": "0", "phase": "allreduce_exposed"},
                  {"median_ms": "9.5"})
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out2"))
        expect_exit(p, 0)
        md = open(os.path.join(tmp, "out2", "summary.md")).read()
        want = ("dp reaches 2.00x ddp's throughput (95 % interval 2.00–2.00x): ddp's step is "
                "10.000 ms longer, the largest part in its exposed all-reduce (+9.500 ms on "
                "device 0)")
        expect(want in md, f"summary.md lacks {want!r}:\n{md[:4000]}")


def case_oversubscribed(binary):
    """Emulated devices that outnumber the cores (2 on the one core taskset
    allows) are said to be so in the run's table, meta.json and every chart
    title; a suite's `gpus = all` stops at 2."""
    taskset = shutil.which("taskset")
    if not taskset:
        print("SKIP: no taskset (util-linux)")
        return 77
    with tempfile.TemporaryDirectory() as out:
        note = "oversubscribed: 2 devices on 1 core: scaling beyond 1 reflects the CPU"
        p = subprocess.run([taskset, "-c", "0", binary, "run", "--backend", "host", "--mode",
                            "ddp", "--gpus", "2", "--model", "tiny", "--steps", "3", "--out",
                            out, "--name", "over"], capture_output=True, text=True, timeout=120)
        expect_exit(p, 0)
        expect(f"# {note}" in p.stdout, f"the table does not say {note!r}:\n{p.stdout}")
        meta = dpsresults.read_meta(os.path.join(out, "over"))
        expect(meta.get("host_cores") == 1 and meta.get("oversubscribed") == note,
               f"meta.json: host_cores {meta.get('host_cores')}, oversubscribed "
               f"{meta.get('oversubscribed')!r}")
        p = script("plot.py", os.path.join(out, "over"), "--out", os.path.join(out, "charts"))
        expect_exit(p, 0)
        md = open(os.path.join(out, "charts", "summary.md")).read()
        expect(note in md.splitlines()[2], f"summary.md's label lacks the note:\n{md[:600]}")
        suite = os.path.join(out, "all.suite")
        write(suite, "modes = ddp\ngpus = all\nmodels = tiny\nsteps = 2\n")
        p = subprocess.run([taskset, "-c", "0", binary, "sweep", suite, "--backend", "host",
                            "--dry-run", "--out", out], capture_output=True, text=True,
                           timeout=60)
        expect_exit(p, 0)
        expect("-g2-" in p.stdout and "-g4-" not in p.stdout,
               f"gpus = all on one core should stop at 2:\n{p.stdout}")
        p = subprocess.run([binary, "run", "--backend", "host", "--mode", "ddp", "--gpus", "2",
                            "--model", "tiny", "--steps", "2", "--out", out, "--name", "fits"],
                           capture_output=True, text=True, timeout=120)
        fits = dpsresults.read_meta(os.path.join(out, "fits"))
        cores = len(os.sched_getaffinity(0))
        expect((fits.get("oversubscribed") is None) == (cores >= 2),
               f"2 devices on {cores} cores: oversubscribed {fits.get('oversubscribed')!r}")


def case_plot(fixture):
    """plot.py draws every chart from a results folder and refuses malformed ones."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture(fixture, tmp, "res")
        write(os.path.join(folder, "links.csv"),  # a links matrix, to draw links.png too
              "src,dst,method,bytes,bw_gbps,latency_us,status\nhost,dev0,h2d,1048576,10.5,,ok\n"
              "dev0,dev1,d2d_write,1048576,20.1,,ok\ndev1,dev0,d2d_write,1048576,19.9,,ok\n"
              "dev0,dev1,latency,4,,3.0,ok\n")
        rows = ["config_id,device,device_index,category,bytes_at_peak"]
        for d in dpsresults.read_csv(os.path.join(folder, "devices.csv"), ["alloc_peak_bytes"]):
            half = int(d["alloc_peak_bytes"]) // 2
            rows += [f"{d['config_id']},{d['device']},{d['device']},parameters,{half}",
                     f"{d['config_id']},{d['device']},{d['device']},gradients,"
                     f"{int(d['alloc_peak_bytes']) - half}"]
        write(os.path.join(folder, "memory.csv"), "\n".join(rows) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out"))
        expect_exit(p, 0)
        for name in ("scaling", "efficiency", "gpu0_imbalance", "phases", "links", "memory"):
            path = os.path.join(tmp, "out", name + ".png")
            expect(os.path.exists(path), f"{name}.png missing")
            w, h = png_size(path)
            expect(400 <= w <= 4000 and 300 <= h <= 4000, f"{name}.png is {w}x{h}")
            expect(os.path.getsize(path) > 15000, f"{name}.png is only {os.path.getsize(path)} B")
        md = open(os.path.join(tmp, "out", "summary.md")).read()
        expect("emulated" in md and "![scaling](scaling.png)" in md and "| small | fp32 | weak | 4 |" in md,
               "summary.md lacks the table, the label or the links")
        # malformed folders: exit 2 with the file named
        runs = open(os.path.join(folder, "runs.csv")).read().splitlines()
        header = runs[0].split(",")
        col = header.index("samples_per_s")
        write(os.path.join(folder, "runs.csv"),
              "\n".join(",".join(c for i, c in enumerate(l.split(",")) if i != col) for l in runs) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out2"))
        expect_exit(p, 2, "runs.csv:1: missing column(s) samples_per_s")
        bad = runs[:]
        cells = bad[1].split(",")
        cells[col] = "fast"
        bad[1] = ",".join(cells)
        write(os.path.join(folder, "runs.csv"), "\n".join(bad) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out3"))
        expect_exit(p, 2, "runs.csv:2: column samples_per_s is not a number")
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        p = script("plot.py", empty, "--out", os.path.join(tmp, "out4"))
        expect_exit(p, 2, "runs.csv: no such file")


def case_predict(binary):
    """dpscale predict: the table, predictions.csv written whole, and FILE:LINE refusals (exit 2)."""
    bench = os.path.join(os.path.dirname(SCRIPTS), "bench", "predict")
    machine, workload = (os.path.join(bench, f) for f in ("dgx1-v100-ib.machine", "resnet50-b32.workload"))
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([binary, "predict", "--machine", machine, "--workload", workload, "--gpus",
                            "1,8,16,64", "--out", out, "--name", "p"], capture_output=True, text=True)
        expect_exit(p, 0)
        expect("ddp      8" in p.stdout and "skipped" in p.stdout, f"table: {p.stdout!r}")
        with open(os.path.join(out, "p", "predictions.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        expect(len(rows) == 8 and os.listdir(os.path.join(out, "p")) == ["predictions.csv"], f"{rows}")
        by = {(r["mode"], r["ngpus"]): r for r in rows}
        expect(by[("dp", "16")]["status"] == "skipped" and by[("ddp", "16")]["status"] == "ok", f"{by}")
        expect(float(by[("dp", "1")]["step_ms"]) == 97.0, f"dp on one device: {by[('dp', '1')]}")
        ddp8 = by[("ddp", "8")]
        expect(int(ddp8["nbuckets"]) > 2 and 97 < float(ddp8["step_ms"]) < 110, f"{ddp8}")
        ddp64 = by[("ddp", "64")]  # 8 nodes of 8, past the file's nodes = 2: predicted, noted
        expect(ddp64["status"] == "ok" and ddp64["nodes"] == "8" and
               float(ddp64["step_ms"]) > float(ddp8["step_ms"]) and
               "more than the machine file's nodes = 2" in ddp64["note"], f"{ddp64}")
        bad = os.path.join(out, "bad.machine")
        with open(bad, "w") as f:
            f.write("gpus_per_node = 8\nintra_busbw_gbps = fast\n")
        p = subprocess.run([binary, "predict", "--machine", bad, "--workload", workload, "--gpus", "2"],
                           capture_output=True, text=True)
        expect_exit(p, 2, f"{bad}:2: intra_busbw_gbps = fast: expected a number")
        p = subprocess.run([binary, "predict", "--machine", machine, "--workload", workload],
                           capture_output=True, text=True)
        expect_exit(p, 2, "predict needs --gpus LIST")


def read_keyfile(path):
    """{key: value} of a `key = value` file (a calibration file), comments left out."""
    with open(path) as f:
        lines = [l.split("#", 1)[0].strip() for l in f]
    return dict(l.split(" = ", 1) for l in lines if l)


def predict_rows(path):
    """predictions.csv, read strictly, by (source, mode, ngpus)."""
    return {(r["source"], r["mode"], r["ngpus"]): r for r in read_table(path)}


def case_predict_from(binary):
    """predict --from a folder of one- and two-device runs and its comm-bench: a
    workload per series, profiled by its fastest one-device row; --calibrate
    fits the constants, --calibration reads them back; refusals exit 2."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "dp,ddp", "--gpus", "1,2", "--model", "tiny,small", "--steps",
                "4", "--warmup", "1", "--no-nvtx", out=out, name="r", check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "1,2"], capture_output=True,
                           text=True)
        expect_exit(p, 2, f"{folder}/allreduce.csv: missing or empty (run `dpscale comm-bench")
        dpscale(binary, "comm-bench", "--gpus", "2", "--sizes", "64K,1M", out=out, name="r",
                check_rc=0, backend=None)
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "1,2,300", "--out", out,
                            "--name", "p"], capture_output=True, text=True)
        expect_exit(p, 0)
        runs = {r["config_id"]: r for r in read_table(os.path.join(folder, "runs.csv"))}
        rows = predict_rows(os.path.join(out, "p", "predictions.csv"))
        sources = {k[0] for k in rows}
        expect(len(sources) == 2 and len(rows) == 12, f"two series, 3 counts, 2 modes: {sorted(rows)}")
        for src in sources:
            one = [r for r in runs.values() if r["ngpus"] == "1" and r["model"] == runs[src]["model"]
                   and r["scaling"] != "strong"]
            fastest = min(one, key=lambda r: float(r["step_ms_median"]))
            expect(src == fastest["config_id"], f"profile {src}, fastest {fastest['config_id']}")
            dp1 = rows[(src, "dp", "1")]
            expect(abs(float(dp1["step_ms"]) - float(fastest["step_ms_median"])) < 1e-3 and
                   dp1["model"] == fastest["model"], f"{dp1}")
            expect(rows[(src, "ddp", "300")]["status"] == "skipped" and
                   "300 devices need 150 nodes of 2" in rows[(src, "ddp", "300")]["note"], f"{rows}")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        cal = os.path.join(out, "c", "calibration.txt")
        consts = read_keyfile(cal)
        expect(set(consts) == {"bus_eff", "base_latency_us", "bucket_overhead_us", "sync_ms",
                               "dp_sync_ms", "compute_scale", "overlap_eff"}, f"{consts}")
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "2", "--calibration", cal,
                            "--out", out, "--name", "p2"], capture_output=True, text=True)
        expect_exit(p, 0)
        for r in predict_rows(os.path.join(out, "p2", "predictions.csv")).values():
            applied = {"sync_ms": consts["dp_sync_ms" if r["mode"] == "dp" else "sync_ms"]}
            for k, v in {**consts, **applied}.items():
                expect(abs(float(r[k]) - float(v)) < 1e-3, f"{k}: {r[k]} in predictions, {v} in {cal}")
        for args, needle in [(["--from", out + "/none", "--gpus", "2"], "runs.csv: missing or empty"),
                             (["--from", folder, "--workload", cal, "--gpus", "2"], "not both"),
                             (["--calibrate", folder, "--gpus", "2"], "--calibrate DIR fits constants only"),
                             (["--from", folder, "--gpus", "2", "--calibration", folder + "/runs.csv"],
                              "runs.csv:1: expected key = value")]:
            p = subprocess.run([binary, "predict", *args], capture_output=True, text=True)
            expect_exit(p, 2, needle)
        p = subprocess.run([binary, "run", "--gpus", "300"], capture_output=True, text=True)
        expect_exit(p, 2, "--gpus 300")


def case_predict_calibrate(binary):
    """--calibrate on a folder whose links, all-reduce, backward and buckets are
    set by hand: bus_eff from the all-reduce after backward, bucket_overhead_us
    from its wait to begin, overlap_eff from the one beside backward, each the
    figure the model's alpha-beta ring gives (busbw 1 GB/s, 2 us a ring step,
    NCCL's 8.4 us base)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "ddp", "--gpus", "1,2", "--model", "tiny", "--first-bucket-mb",
                "0.0198", "--bucket-mb", "1", "--steps", "4", "--warmup", "1", out=out, name="r",
                check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        g2 = next(r["config_id"] for r in read_table(os.path.join(folder, "runs.csv")) if r["ngpus"] == "2")
        write(os.path.join(folder, "links.csv"), "src,dst,method,bytes,bw_gbps,latency_us,status,backend,emulated\n"
              "host,dev0,h2d,1048576,10.0,,ok,host,1\ndev0,dev1,d2d_write,1048576,5.0,,ok,host,1\n"
              "dev0,dev1,latency,4,,2.0,ok,host,1\n")
        write(os.path.join(folder, "allreduce.csv"), "backend,method,nranks,bytes,time_us,algbw_gbps,busbw_gbps,check\n"
              "host,ring-shm,2,1048576,1048.6,1.0,1.0,pass\n")
        set_cells(os.path.join(folder, "phases.csv"), {"config_id": g2, "phase": "backward"},
                  {"median_ms": "10.0", "mean_ms": "10.0"})
        lat = (8.4 + 2 * 2.0) / 1000                      # ms: base + 2 ring steps
        full0, full1 = 20800 / 1e6 + lat, 16640 / 1e6 + lat  # ms at 1 GB/s, 2(n-1)/n = 1
        ms1 = full1 / 0.5                                   # after backward at half the bus
        busy0 = full0 / (0.25 * 0.5)                        # beside it at a quarter of that
        ms0 = busy0 + 0.3 - (1.5 - 1.0)                     # started at ready 1.0, began at 1.5
        rows = [f"{g2},{rank},0,20800,1.0,1.5,{ms0:.6f},3\n{g2},{rank},1,16640,9.9,10.2,{ms1:.6f},3"
                for rank in (0, 1)]
        with open(os.path.join(folder, "buckets.csv")) as f:
            keep = [l for l in f.read().splitlines() if not l.startswith(g2 + ",")]
        write(os.path.join(folder, "buckets.csv"), "\n".join(keep + rows) + "\n")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        cal = os.path.join(out, "c", "calibration.txt")
        got = {k: float(v) for k, v in read_keyfile(cal).items()}
        for key, want, tol in [("bus_eff", 0.5, 1e-3), ("overlap_eff", 0.25, 1e-3),
                               ("bucket_overhead_us", 300.0, 0.5)]:
            expect(abs(got[key] - want) <= tol, f"{key} = {got[key]}, expected {want}: {got}")
        # one ddp row, one constant (sync_ms) fitted to its step: its error is n/a, not +0.0 %
        g2_line = next(l for l in p.stdout.splitlines() if l.strip().startswith(g2))
        expect(g2_line.endswith("n/a") and "bus_eff" not in p.stderr, f"{p.stdout}{p.stderr}")
        with open(cal) as f:
            text = f.read()
        expect("# note: ddp's error is n/a: 1 step time, 1 constant (sync_ms) fitted to it" in text and
               "bus_eff = 0.5000" in text and "# 1 point: all-reduces after backward" in text, text)
        # the all-reduce after backward 1.8 x faster than the bus allows: held to 1, warned of
        after = ms1 * 0.5 / 1.8
        write(os.path.join(folder, "buckets.csv"), "\n".join(keep + [r.replace(f"{ms1:.6f}", f"{after:.6f}")
                                                                     for r in rows]) + "\n")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        warned = "bus_eff = 1.8, fitted to 1 point (all-reduces after backward in buckets.csv), " \
                 "is outside its range (0, 1]: held to 1; the all-reduces ran faster than"
        expect(f"dpscale: calibration warning: {warned}" in p.stderr and "comm-bench" in p.stderr,
               p.stderr)
        with open(cal) as f:
            text = f.read()
        expect(f"# warning: {warned}" in text and read_keyfile(cal)["bus_eff"] == "1.0000", text)
        # without buckets.csv, bus_eff and sync_ms both from the one ddp step time
        os.remove(os.path.join(folder, "buckets.csv"))
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        warned = "ddp: 2 constants (bus_eff and sync_ms) fitted to 1 step time: any split between them"
        expect(f"dpscale: calibration warning: {warned}" in p.stderr and "--gpus 1,2,4" in p.stderr,
               p.stderr)
        with open(cal) as f:
            expect(f"# warning: {warned}" in f.read(), cal)


CASES = {"gpu": case_gpu, "info": case_info, "links": case_links, "comm_bench_faults": case_comm_bench_faults, "profile_sh": case_profile_sh, "ab": case_ab, "check": case_check, "comm_bench": case_comm_bench, "plot": case_plot, "diagnosis": case_diagnosis, "oversubscribed": case_oversubscribed,
         "sweep_failures": case_sweep_failures, "sweep_timeout": case_sweep_timeout,
         "sweep_resume": case_sweep_resume, "sweep_skipped": case_sweep_skipped, "ddp_check": case_ddp_check, "ddp_balance": case_ddp_balance,
         "fault": case_fault, "interrupt": case_interrupt, "ddp_oom": case_ddp_oom,
         "learns": case_learns, "imbalance": case_imbalance, "dp_impl": case_dp_impl, "oom": case_oom,
         "replica_phases": case_replica_phases, "ddp_impl": case_ddp_impl,
         "bad_input": case_bad_input, "predict": case_predict, "predict_from": case_predict_from, "predict_calibrate": case_predict_calibrate, "cuda_absent": case_cuda_absent, "sweep": case_sweep}


def main():
    binary, case, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    return run_case(" ".join([case, *args]), CASES[case], binary, *args)


if __name__ == "__main__":
    sys.exit(main())
