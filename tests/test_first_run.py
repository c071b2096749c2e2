#!/usr/bin/env python3
"""What a new user's first commands meet: mistakes refused with exit 2, the
host memory a configuration needs known (and refused) before it allocates,
--dry-run's estimates, and --resume continuing the folder's own set.
Usage: test_first_run.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, FIXTURES, exit_if_listing, test

# a new user's first commands: mistakes refused, host memory estimated and refused, --resume's plan
TESTS = [test("first run " + c.replace("_", " "), DPSCALE, c, timeout=300)
         for c in ("mistakes", "estimate", "host_memory", "resume_plan", "warm_up", "outlook")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import calendar
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

from helpers import Failure, dpscale, expect, expect_exit, read_folder

# (arguments, what stderr must say): each refused with exit 2 and nothing written
MISTAKES = [
    (["run", "--gpus", "4", "--batch", "2"], "--batch 2 on 4 devices"),
    (["run", "--gpus", "4", "--batch", "64", "--batch-per-gpu", "16"],
     "--batch 64 and --batch-per-gpu 16: give one"),
    (["run", "--mode", "ddp", "--dp-impl", "lean"], "--dp-impl: only the one-process strategy (dp) reads it"),
    (["run", "--mode", "ddp", "--dp-comm", "p2p"], "--dp-comm: only the one-process strategy (dp) reads it"),
    (["run", "--bucket-mb", "10"], "--bucket-mb: only the strategies with DDP's buckets (ddp, zero1) read it"),
    (["run", "--first-bucket-mb", "2"], "--first-bucket-mb: only the strategies with DDP's buckets (ddp, zero1) read it"),
    (["run", "--no-overlap"], "--no-overlap: only the strategies with DDP's buckets (ddp, zero1) read it"),
    (["sweep", "--mode", "dp", "--grad-as-bucket-view"],
     "--grad-as-bucket-view: only the strategies with DDP's buckets (ddp, zero1) read it"),
    (["sweep", "--mode", "ddp", "--dp-impl", "lean"], "--dp-impl: only the one-process strategy (dp) reads it"),
    (["run", "--ddp-impl", "lean"], "--ddp-impl: only the strategies of a process a device read it"),
]


def case_mistakes(binary):
    """Each mistake: exit 2, one line naming the option and what to do, no folder."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        for args, needle in MISTAKES:
            p = dpscale(binary, *args, "--model", "tiny", "--steps", "1", out=out)
            expect_exit(p, 2, needle)
            expect(not os.path.exists(out), f"{args}: created {out}")
        # an option of one mode in a sweep of both applies to that mode's configurations
        p = dpscale(binary, "sweep", "--mode", "dp,ddp", "--gpus", "2", "--model", "tiny",
                    "--bucket-mb", "5", "--dry-run", out=out, check_rc=0)
        expect("ddp-tiny-fp32-sgd-g2-b16-bk5" in p.stdout and "dp-tiny-fp32-sgd-g2-b16 " in p.stdout,
               f"sweep --mode dp,ddp --bucket-mb 5:\n{p.stdout}")


def dry_run_bytes(binary, *args):
    """{config id: the devices' bytes} of `run/sweep --dry-run` (from
    "host 14.10 MiB (devices 12.34 MiB)")."""
    with tempfile.TemporaryDirectory() as tmp:
        p = dpscale(binary, *args, "--dry-run", out=tmp, check_rc=0)
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
    found = {}
    for m in re.finditer(r"^\s*\d+\s+(\S+)\s+host\s+[\d.]+ \w+ \(devices ([\d.]+) (\w+)\)",
                         p.stdout, re.M):
        found[m.group(1)] = float(m.group(2)) * units[m.group(3)]
    expect(found, f"no estimate in --dry-run's output:\n{p.stdout}")
    return found, p.stdout


ESTIMATED = [
    ["--mode", "dp", "--gpus", "3", "--model", "small", "--batch", "7"],
    ["--mode", "dp", "--gpus", "2", "--model", "small", "--width", "1700", "--layers", "1",
     "--tokens", "2", "--optimizer", "adamw"],
    ["--mode", "dp", "--dp-impl", "lean", "--gpus", "4", "--model", "small"],
    ["--mode", "ddp", "--gpus", "3", "--model", "small", "--batch", "10"],
    ["--mode", "ddp", "--gpus", "2", "--model", "small", "--grad-as-bucket-view",
     "--optimizer", "adamw"],
    ["--mode", "ddp", "--ddp-impl", "lean", "--gpus", "3", "--model", "small", "--batch", "7"],
    ["--mode", "dp", "--gpus", "3", "--model", os.path.join(FIXTURES, "models", "small-resnet.model"),
     "--batch", "7"],
    ["--mode", "ddp", "--gpus", "3", "--model", os.path.join(FIXTURES, "models", "tagger.model"),
     "--batch", "10", "--optimizer", "adamw"],
]


def case_estimate(binary):
    """--dry-run's estimate of the devices holds what the run's devices then allocate
    (devices.csv's peaks, exact on the host backend), and not much more;
    it shows a compute time too."""
    with tempfile.TemporaryDirectory() as out:
        for i, args in enumerate(ESTIMATED):
            est, text = dry_run_bytes(binary, "run", *args, "--steps", "2")
            expect("compute" in text and "GFLOP/s" in text, f"no time estimate:\n{text}")
            dpscale(binary, "run", *args, "--steps", "2", "--warmup", "1", out=out,
                    name=f"e{i}", check_rc=0)
            runs, devices, _, _, _ = read_folder(os.path.join(out, f"e{i}"))
            measured = sum(int(d["alloc_peak_bytes"]) for d in devices)
            got = est[runs[0]["config_id"]]
            expect(measured <= got * 1.005 <= measured * 1.15 + (2 << 20),
                   f"{' '.join(args)}: estimated {got:.0f} B, the devices allocated {measured} B")


def sanitized(binary):
    with open(binary, "rb") as f:
        return b"libasan" in f.read()


def case_host_memory(binary):
    """A configuration larger than the memory this process may take is
    refused before it allocates: an oom row naming the estimate, what is
    available and a --tokens that fits, which then runs."""
    if sanitized(binary):
        print("skipped: AddressSanitizer's shadow memory breaks an RLIMIT_DATA limit")
        return 77
    limit = 1 << 30
    cap = lambda: resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))  # noqa: E731
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "run", "--backend", "host", "--model", "small", "--tokens", "16384",
               "--gpus", "2", "--steps", "1", "--warmup", "0", "--out", out, "--name", "big"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=cap)
        expect(p.returncode == 1, f"exit {p.returncode}, expected 1\n{p.stdout}\n{p.stderr}")
        runs = read_folder(os.path.join(out, "big"))[0]
        error = runs[0]["error"]
        expect(runs[0]["status"] == "oom" and error in p.stdout,
               f"status {runs[0]['status']}: {error}\n{p.stdout}")
        for needle in ("host memory: this configuration needs about", "is available", "refused"):
            expect(needle in error, f"{needle!r} not in the error: {error}")
        tokens = re.search(r"--tokens (\d+) fits", error)
        expect(tokens and int(tokens.group(1)) < 16384, f"no smaller --tokens offered: {error}")
        cmd = cmd[:7] + [tokens.group(1)] + cmd[8:-1] + ["fits"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, preexec_fn=cap)
        expect(p.returncode == 0, f"the --tokens offered: exit {p.returncode}\n{p.stderr}")
    return 0


def case_resume_plan(binary):
    """sweep --resume without its lists continues the folder's own set, and
    --resume --dry-run lists only what is left to run."""
    with tempfile.TemporaryDirectory() as out:
        plan = ["sweep", "--mode", "dp,ddp", "--gpus", "1,2", "--model", "tiny", "--steps", "1",
                "--warmup", "0", "--no-links"]
        dpscale(binary, *plan, out=out, name="s", check_rc=0)
        runs_csv = os.path.join(out, "s", "runs.csv")
        with open(runs_csv) as f:  # as if the sweep had died before its 2-device rows
            lines = f.readlines()
        with open(runs_csv, "w") as f:
            f.writelines(line for line in lines if "-g2-" not in line)
        p = dpscale(binary, "sweep", "--resume", "--dry-run", out=out, name="s", check_rc=0)
        listed = re.findall(r"^\s*\d+\s+(\S+)", p.stdout, re.M)
        expect(sorted(listed) == ["ddp-tiny-fp32-sgd-g2-b16-bk25", "dp-tiny-fp32-sgd-g2-b16"],
               f"--resume --dry-run listed {listed}:\n{p.stdout}")
        expect("2 already in" in p.stdout, f"--dry-run does not say what the folder holds:\n{p.stdout}")
        dpscale(binary, "sweep", "--resume", out=out, name="s", check_rc=0)
        dpscale(binary, "sweep", "--resume", out=out, name="s", check_rc=0)  # the plan kept
        runs = read_folder(os.path.join(out, "s"))[0]
        ids = sorted(r["config_id"] for r in runs)
        expect(len(ids) == 4 and all("tiny" in i for i in ids), f"runs.csv holds {ids}")


def case_warm_up(binary):
    """A sweep warms a process on its first configuration to run (two steps,
    untimed, nothing written) before the first timed one; --resume warms on
    the first it will run."""
    with tempfile.TemporaryDirectory() as out:
        args = ["sweep", "--mode", "dp,ddp", "--gpus", "1", "--model", "tiny", "--steps", "1",
                "--warmup", "0", "--no-links"]
        p = dpscale(binary, *args, "--filter", "dp-*", out=out, name="s", check_rc=0)
        warm = p.stderr.find("warm-up: dp-tiny-fp32-sgd-g1-b8, two steps untimed")
        first = p.stderr.find("[1/1]")
        expect(0 <= warm < first, f"no warm-up before the first configuration:\n{p.stderr}")
        p = dpscale(binary, *args, "--resume", out=out, name="s", check_rc=0)
        expect("warm-up: ddp-tiny-fp32-sgd-g1-b8-bk25" in p.stderr, f"--resume:\n{p.stderr}")
        runs = read_folder(os.path.join(out, "s"))[0]
        expect(len(runs) == 2, f"runs.csv: {[r['config_id'] for r in runs]}")


# a suite of two configurations in seconds; the outlook case's sweeps
OUTLOOK_SUITE = "modes = dp, ddp\ngpus = 1\nmodels = tiny\nsteps = 1\nwarmup = 0\n"


def auto_sweep(binary, *args, out, name, charts=None):
    """`sweep ARGS` under --backend auto, as a first command meets it (with
    DPSCALE_CHARTS as scripts/bench.sh sets it); None where auto does not take
    the host backend (a GPU machine)."""
    env = dict(os.environ)
    env.pop("DPSCALE_CHARTS", None)
    if charts:
        env["DPSCALE_CHARTS"] = charts
    cmd = [binary, "sweep", *args, "--no-links", "--out", out, "--name", name]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    expect(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    first = (p.stderr.splitlines() or [""])[0]
    return first if "taking the host backend" in first else None


def case_outlook(binary):
    """Where --backend auto takes the host backend, a sweep's first line also
    says how long it will take (its last run's time here, or without one its
    GEMMs' time at a rate measured now) and, under
    scripts/bench.sh (DPSCALE_CHARTS), where the charts will be."""
    with tempfile.TemporaryDirectory() as tmp:
        suite, out = os.path.join(tmp, "two.suite"), os.path.join(tmp, "res")
        with open(suite, "w") as f:
            f.write(OUTLOOK_SUITE)
        first = auto_sweep(binary, suite, out=out, name="first", charts="plots/first")
        if first is None:
            print("SKIP: --backend auto takes a GPU here, not the host backend")
            return 77
        gemms = (r"; this sweep: 2 configurations, their GEMMs alone about [0-9.]+ (s|min) here "
                 r"\(at [0-9]+ GFLOP/s a device, measured now; set-up, the other ops and copies "
                 r"not counted\)")
        expect(re.search(r"^dpscale: backend auto: .*; taking the host backend \(emulated devices "
                         r"on the CPU\)" + gemms + r", charts in plots/first/ at its end$", first),
               f"the first sweep's first line:\n{first}")
        # the last run of the suite, made to have taken 90 s: the next one expects that
        meta = os.path.join(out, "first", "meta.json")
        with open(meta) as f:
            text = f.read()
        end = re.search(r'"end_time": "([^"]+)"', text).group(1)
        start = time.strftime("%Y-%m-%dT%H:%M:%SZ",
                              time.gmtime(calendar.timegm(time.strptime(end, "%Y-%m-%dT%H:%M:%SZ")) - 90))
        with open(meta, "w") as f:
            f.write(re.sub(r'"start_time": "[^"]+"', f'"start_time": "{start}"', text))
        line = auto_sweep(binary, suite, out=out, name="second", charts="plots/second")
        expect(line.endswith("; this sweep: 2 configurations, about 1.5 min here (its last run, first, "
                             "took that), charts in plots/second/ at its end"),
               f"the second sweep's first line, after a run of 90 s:\n{line}")
        # one of the two (--filter): the last run had more, so its time is not this one's
        line = auto_sweep(binary, suite, "--filter", "dp-*", out=out, name="third")
        expect(re.search(gemms.replace("2 configurations", "1 configuration") + "$", line),
               f"a sweep of one configuration of a suite whose last run had two:\n{line}")
        # a dry run plans nothing to wait for: the line is the backend's alone
        line = auto_sweep(binary, suite, "--dry-run", out=out, name="fourth")
        expect(line.endswith("(emulated devices on the CPU)"), f"--dry-run's first line:\n{line}")


CASES = {"outlook": case_outlook, "warm_up": case_warm_up, "mistakes": case_mistakes, "estimate": case_estimate, "host_memory": case_host_memory,
         "resume_plan": case_resume_plan}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    try:
        rc = CASES[case](binary) or 0
    except Failure as e:
        print(f"FAIL {case}: {e}")
        return 1
    print(f"{'skip' if rc == 77 else 'ok'} {case}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
