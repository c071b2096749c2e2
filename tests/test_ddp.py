#!/usr/bin/env python3
"""ddp (DistributedDataParallel), one process a rank: training as one device
does under every bucket and overlap option, balanced memory and the ring's
bytes, the torch and lean losses, out of memory, a rank that exits or hangs,
SIGINT to the parent; and devices outnumbering the cores (oversubscribed).
Usage: test_ddp.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail, 77
skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

# [gpus, optimizer, batch, extra options...]
CHECKS = [["1", "sgd", "8"], ["2", "sgd", "8"], ["3", "sgd", "10"], ["4", "sgd", "10"],
          ["2", "adamw", "7"], ["4", "adamw", "6"],
          ["3", "sgd", "7", "--no-overlap"], ["4", "adamw", "9", "--grad-as-bucket-view"],
          ["3", "sgd", "10", "--bucket-mb", "0.0001", "--first-bucket-mb", "0.0001"],
          ["4", "sgd", "10", "--bucket-mb", "1000", "--first-bucket-mb", "1000"],
          ["2", "adamw", "5", "--bucket-mb", "0.01", "--first-bucket-mb", "0.002", "--no-overlap"],
          ["3", "adamw", "7", "--ddp-impl", "lean"]]
HANG_S = 300  # a hang guard: far above any run here on a busy machine under ASan
# no case bounds a time; meson's timeouts guard a hang only, a case's runs one after another
TESTS = [test(f"ddp check gpus={c[0]} {c[1]} batch={c[2]} {' '.join(c[3:])}".strip(), DPSCALE,
              "ddp_check", *c, timeout=HANG_S) for c in CHECKS]
TESTS += [test("ddp balance", DPSCALE, "ddp_balance", timeout=2 * HANG_S),
          test("ddp ddp_impl", DPSCALE, "ddp_impl", timeout=3 * HANG_S),
          test("ddp oom", DPSCALE, "ddp_oom", timeout=HANG_S),
          test("ddp fault exit", DPSCALE, "fault", "exit", timeout=HANG_S + 60),
          test("ddp fault hang", DPSCALE, "fault", "hang", timeout=HANG_S + 60),
          test("ddp interrupt", DPSCALE, "interrupt", timeout=3 * HANG_S),
          test("oversubscribed", DPSCALE, "oversubscribed", timeout=4 * HANG_S)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from helpers import (Failure, dpscale, dpsresults, expect, expect_exit, memory_at_peak,
                     processes_mentioning, read_folder, run_cases, script, write)
import test_dp  # case_check: dp's --check, in ddp mode


def case_ddp_check(binary, ngpus, optimizer, batch, *extra):
    return test_dp.case_check(binary, ngpus, optimizer, batch, *extra, mode="ddp")


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


def shm_files():
    """/dev/shm's files, less the regions of ranks under a launcher
    (dpscale-*: the launch tests, which may run meanwhile, check their own),
    Python multiprocessing's semaphores (sem.mp-*) and torch.multiprocessing's
    shared tensors (torch_*: PyTorch's tests, run meanwhile, make both; dpscale
    makes neither). Only where the run cannot have a /dev/shm of its own."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if not n.startswith(("dpscale-", "sem.mp-", "torch_"))}


# dpscale in a mount namespace of its own with a fresh /dev/shm, whose names
# it left there written to $DPSCALE_SHM_LEFT: other tests' files, made
# meanwhile in the machine's /dev/shm, cannot be taken for its leftovers
PRIVATE_SHM = """#!/bin/sh
[ -n "$DPSCALE_SHM_NS" ] || DPSCALE_SHM_NS=1 exec unshare -m --propagation private "$0" "$@"
mount -t tmpfs dpscale-test-shm /dev/shm || exit 125
"$DPSCALE_SHM_BINARY" "$@"
rc=$?
ls -A /dev/shm >"$DPSCALE_SHM_LEFT"
exit $rc
"""


def private_shm(binary, tmp):
    """(wrapper, env) that run BINARY with a /dev/shm of its own (root, with
    unshare), or None where the machine cannot."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return None
    wrapper = os.path.join(tmp, "private-shm.sh")
    with open(wrapper, "w") as f:
        f.write(PRIVATE_SHM)
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, DPSCALE_SHM_BINARY=os.path.abspath(binary),
               DPSCALE_SHM_LEFT=os.path.join(tmp, "shm-left"))
    env.pop("DPSCALE_SHM_NS", None)
    probe = subprocess.run([wrapper, "--version"], capture_output=True, text=True, env=env,
                           timeout=HANG_S)
    return (wrapper, env) if probe.returncode == 0 else None


def shm_left(private, before):
    """The /dev/shm names the run left: its own /dev/shm's, or the machine's
    new ones less shm_files()'s exceptions."""
    if private:
        with open(private[1]["DPSCALE_SHM_LEFT"]) as f:
            return set(f.read().split())
    return shm_files() - before


# --timeout of a rank that exits (the parent reaps it: no timeout may end the group), and
# of one that hangs (the timeout ends it: far above a step or set-up of these ranks)
FAULT_TIMEOUT = {"exit": str(2 * HANG_S), "hang": "20"}


def case_fault(binary, kind):
    """A rank that exits or hangs at step 3 ends the group: exit 1, the
    status (error for the exit, the parent reaping the rank with no timeout
    in reach; timeout for the hang) naming rank 1 and step 3; no process
    left (the parent reaps its ranks before it exits) and no shared memory."""
    with tempfile.TemporaryDirectory(prefix="dpscale-fault-") as out:
        private = private_shm(binary, out)
        before = shm_files()
        args = ["run", "--mode", "ddp", "--model", "tiny", "--gpus", "4", "--steps", "20",
                "--inject-fault", f"1:3:{kind}", "--timeout", FAULT_TIMEOUT[kind]]
        try:
            dpscale(private[0] if private else binary, *args, out=out, check_rc=1,
                    timeout=HANG_S, env=private[1] if private else None)
        except subprocess.TimeoutExpired:
            raise Failure(f"dpscale {' '.join(args)}: hung, still running after {HANG_S} s") \
                from None
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        want = "error" if kind == "exit" else "timeout"
        r = runs[0]
        expect(r["status"] == want, f"status {r['status']}, expected {want}: {r['error']}")
        expect("rank 1" in r["error"] or "1 (forward)" in r["error"], f"error: {r['error']}")
        expect("step 3" in r["error"], f"error does not name step 3: {r['error']}")
        left = processes_mentioning(out)
        expect(not left, f"processes left behind: {left}")
        left_shm = shm_left(private, before)
        expect(not left_shm, f"shared memory left behind: {left_shm}")


def wait_until(cond, what, p):
    """Polls cond() while p runs; fails if p ends first, or as hung past HANG_S."""
    end = time.monotonic() + HANG_S
    while not cond():
        expect(p.poll() is None, f"{what}: dpscale ended first: exit {p.returncode}")
        expect(time.monotonic() < end, f"{what}: hung, not so after {HANG_S} s")
        time.sleep(0.02)


def interrupt_once(binary, top, delay):
    """One try of case_interrupt, SIGINT `delay` s after the ranks started:
    True, or where the signal came instead (before a step ended)."""
    out = os.path.join(top, f"try{delay:g}")
    cmd = [binary, "run", "--backend", "host", "--mode", "ddp", "--model", "small",
           "--gpus", "3", "--steps", "1000000", "--warmup", "0", "--out", out, "--name", "t"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: len(processes_mentioning(out)) >= 4, "the parent and its 3 ranks", p)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        _, stderr = p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Failure(f"dpscale still running {HANG_S} s after SIGINT: hung") from None
    expect(p.returncode == 130, f"exit {p.returncode}, expected 130\n{stderr}")
    runs, _, steps, _, _ = read_folder(os.path.join(out, "t"))
    expect(not processes_mentioning(out), "processes left behind")
    at = re.fullmatch(r"interrupted by SIGINT (during step (\d+)|in set-up, before step 0)",
                      runs[0]["error"])
    expect(runs[0]["status"] == "error" and at, f"runs: {runs}")
    done, cid = int(runs[0]["steps_done"]), runs[0]["config_id"]
    most = int(at[2]) + 1 if at[2] is not None else 0  # in set-up: no step done
    kept = sorted((int(s["step"]), int(s["rank"])) for s in steps if s["config_id"] == cid)
    # rank 0 in step N has done N steps (N + 1 if it ended N as the signal came), the
    # slowest rank (which counts) no more
    expect(kept == [(k, r) for k in range(done) for r in range(3)] and done <= most,
           f"{runs[0]['error']!r}, {done} steps done, steps.csv's (step, rank) {kept}: the "
           f"steps done by every rank, none after the step the signal came in")
    return True if done > 0 else f"before a step ended: {runs[0]['error']!r}"


def case_interrupt(binary):
    """SIGINT to the parent: it ends its ranks, the files hold the
    interrupted run (its row names the step, steps.csv holds the steps
    every rank did, none after it), exit 130, the ranks reaped. A try whose
    signal came before any step ended is checked and tried again later,
    under a hang guard."""
    with tempfile.TemporaryDirectory(prefix="dpscale-int-") as out:
        began, delay = time.monotonic(), 2.0
        while (missed := interrupt_once(binary, out, delay)) is not True:
            print(f"the SIGINT {delay:g} s in came {missed}; again, later")
            expect(time.monotonic() - began < HANG_S,
                   f"hung: {HANG_S} s of tries and no step ended before the SIGINT")
            delay *= 2


def case_ddp_oom(binary):
    """A rank out of memory: status oom naming the rank and its device."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "run", "--mode", "ddp", "--model", "small", "--gpus", "2",
                "--steps", "2", "--device-mem", "3M", out=out, check_rc=1)
        runs, devices, _, _, _ = read_folder(os.path.join(out, "t"))
        err = runs[0]["error"]
        expect(runs[0]["status"] == "oom", f"status {runs[0]['status']}: {err}")
        expect("rank" in err and "device" in err and "out of memory" in err, f"error: {err}")


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
                            out, "--name", "over"], capture_output=True, text=True,
                           timeout=HANG_S)
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
                           timeout=HANG_S)
        expect_exit(p, 0)
        expect("-g2-" in p.stdout and "-g4-" not in p.stdout,
               f"gpus = all on one core should stop at 2:\n{p.stdout}")
        p = subprocess.run([binary, "run", "--backend", "host", "--mode", "ddp", "--gpus", "2",
                            "--model", "tiny", "--steps", "2", "--out", out, "--name", "fits"],
                           capture_output=True, text=True, timeout=HANG_S)
        fits = dpsresults.read_meta(os.path.join(out, "fits"))
        cores = len(os.sched_getaffinity(0))
        expect((fits.get("oversubscribed") is None) == (cores >= 2),
               f"2 devices on {cores} cores: oversubscribed {fits.get('oversubscribed')!r}")


if __name__ == "__main__":
    run_cases(globals())
