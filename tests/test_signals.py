#!/usr/bin/env python3
"""SIGINT and SIGTERM by the two-signal rule (docs/usage.md, exit status):
the first ends the configuration after its step (cut short if it runs 5 s
more), the second ends the step that runs at once, its row written with the steps before it, exit 130; in
dp's process, in a sweep's child, in ddp's parent and its ranks, in ranks a
launcher started; a SIGINT while a sweep measures its links; no shared
region left by a rank 0 killed under a launcher. Steps last far longer than
the bounds checked (a second SIGINT ends the process within 5 s, where the
step would take 15 s or more), so only generous bounds are timed. Usage:
test_signals.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, exit_if_listing, test

# dp, a sweep (once, twice), ddp's parent and ranks, ranks under a launcher, the link
# matrix; a rank 0 killed under a launcher leaves no region (alone: each times its ending)
TESTS = [test("signals " + c.replace("_", " "), DPSCALE, c, timeout=300, parallel=False)
         for c in ("dp_twice", "sweep_once", "sweep_twice", "ddp_twice", "launcher_twice",
                   "rank0_killed", "links_interrupt")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from helpers import Failure, expect, free_port, read_folder, run_case
from helpers import processes_mentioning

PROMPT_S = 5.0  # a second SIGINT ends the process within this
# dp on one device: about 2 s a step unstretched, 11 times that stretched by
# --inject-slowdown 1000 from the second step on (the spin counts as device work)
SLOW_DP = ["--mode", "dp", "--gpus", "1", "--model", "small", "--batch", "2048",
           "--inject-slowdown", "1000"]
# a step of GEMMs of about 1 s each, 15 s or more in all on one core
LONG_STEP = ["--model", "medium", "--batch", "512", "--tokens", "32"]


def start(binary, *args, env=None):
    """dpscale in a session of its own (its ranks share its process group)."""
    return subprocess.Popen([binary, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def finish(p, what, within):
    """Waits for p up to `within` s; (stdout, stderr, seconds taken)."""
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Failure(f"{what} did not end within {within:g} s")
    return out, err, time.monotonic() - t0


def twice(procs, gap=1.0, group=False):
    """SIGINT to every process (or its process group), and again `gap` s later."""
    for k in range(2):
        if k:
            time.sleep(gap)
        for p in procs:
            try:
                if group:
                    os.killpg(p.pid, signal.SIGINT)
                else:
                    p.send_signal(signal.SIGINT)
            except ProcessLookupError:  # it ended after the first
                pass


def end_time(folder):
    with open(os.path.join(folder, "meta.json")) as f:
        return json.load(f).get("end_time", "")


def check_interrupted_row(folder, needle="SIGINT"):
    """The folder reads, holds one error row naming the signal, and meta.json's end time."""
    runs, _, steps, _, _ = read_folder(folder)
    expect(len(runs) >= 1 and runs[-1]["status"] == "error" and needle in runs[-1]["error"],
           f"runs.csv: {runs}")
    expect(end_time(folder), f"{folder}/meta.json has no end time")
    return runs[-1], steps


def why_ended(folder, err=""):
    """What a run that ended too soon or with the wrong status said: the
    error of runs.csv's last row (where there is one) and its stderr's tail."""
    path = os.path.join(folder, "runs.csv")
    row = ""
    if os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
        row = lines[-1] if len(lines) > 1 else ""
    return f"\n  runs.csv's last row: {row or '(none)'}\n  stderr: {err[-2000:]}"


def no_processes_left(out):
    time.sleep(0.3)
    left = processes_mentioning(out)
    expect(not left, f"processes left behind: {left}")


def case_dp_twice(binary):
    """dp in one process: the second SIGINT during a long step ends it at
    once (not at the step's end), the steps before it are in the row, exit 130."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        t0 = time.monotonic()  # set-up and one unstretched step, with the process's start
        p = start(binary, "run", *SLOW_DP, "--steps", "1", "--warmup", "0", "--out", out,
                  "--name", "calibrate")
        finish(p, "the one-step run", 120)
        one = time.monotonic() - t0
        p = start(binary, "run", *SLOW_DP, "--steps", "1000", "--warmup", "0", "--out", out,
                  "--name", "t")
        time.sleep(1.5 * one + 1.0)  # in the second step, which lasts about 11 times the first
        expect(p.poll() is None, f"dpscale ended before the signals: exit {p.returncode}")
        twice([p])
        _, err, took = finish(p, "dpscale after the second SIGINT", 60)
        expect(took < PROMPT_S, f"ended {took:.1f} s after the second SIGINT (the step was cut "
               f"short only at its end?)")
        expect(p.returncode == 130, f"exit {p.returncode}, expected 130\n{err}")
        row, steps = check_interrupted_row(os.path.join(out, "t"), "cut short")
        expect(int(row["steps_done"]) >= 1 and steps, f"no step kept: {row}")
        print(f"dp: one step's run {one:.1f} s; ended {took:.2f} s after the second SIGINT, "
              f"{row['steps_done']} step(s) kept")


def start_long_sweep(binary, out):
    """A sweep of tiny then medium, in the medium configuration's first step
    (15 s or more) when it returns."""
    p = start(binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny,medium",
              "--batch", "512", "--tokens", "32", "--steps", "3", "--warmup", "0",
              "--no-links", "--out", out, "--name", "s")
    deadline = time.monotonic() + 120
    seen = ""
    while "[2/2]" not in seen and time.monotonic() < deadline and p.poll() is None:
        seen = p.stderr.readline()  # one plain line per configuration
    expect("[2/2]" in seen, f"the sweep never began its second configuration ({seen!r})")
    time.sleep(3.0)  # its set-up done, in its first step
    if p.poll() is not None:
        raise Failure(f"the sweep ended before the signals: exit {p.returncode}"
                      + why_ended(os.path.join(out, "s"), p.stderr.read()))
    return p


def end_long_sweep(p, out, after, within):
    """The sweep ends within `within` s `after` the signals, exit 130, the
    medium configuration's row written, no process left."""
    _, err, took = finish(p, f"the sweep after {after}", 60)
    expect(took < within, f"ended {took:.1f} s after {after}, not within {within:g} s")
    expect(p.returncode == 130,
           f"exit {p.returncode}, expected 130" + why_ended(os.path.join(out, "s"), err))
    row, _ = check_interrupted_row(os.path.join(out, "s"))
    expect(row["config_id"].startswith("dp-medium"),
           f"the last row is not the medium configuration's: {row}")
    no_processes_left(out)
    print(f"sweep: ended {took:.2f} s after {after}: {row['error']}")


def case_sweep_once(binary):
    """One SIGINT to the sweep's process group (a terminal's ^C, or what
    `timeout` passes on before it ignores the signal itself) during a long
    step: the step is cut short at the latest DPS_STEP_GRACE_S (5 s) after
    it, the row written; exit 130."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        p = start_long_sweep(binary, out)
        os.killpg(p.pid, signal.SIGINT)
        # cut short, or before step 0 where the set-up outlasted the signal
        end_long_sweep(p, out, "one SIGINT", 5.0 + PROMPT_S)


def case_sweep_twice(binary):
    """A sweep: the second SIGINT reaches the running configuration's
    process, which ends its long step at once and writes its row; exit 130."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        p = start_long_sweep(binary, out)
        twice([p])
        end_long_sweep(p, out, "the second SIGINT", PROMPT_S)


def case_ddp_twice(binary):
    """ddp's parent and its ranks (one process group, as a terminal's ^C
    reaches them) get SIGINT twice during a long step: every process ends
    within a few seconds, the row is written, exit 130, nothing left."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        p = start(binary, "run", "--mode", "ddp", "--gpus", "2", *LONG_STEP, "--steps", "100",
                  "--warmup", "0", "--out", out, "--name", "t")
        deadline = time.monotonic() + 60
        while len(processes_mentioning(out)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)
        t0 = time.monotonic()
        twice([p], group=True)
        _, err, _ = finish(p, "ddp after the second SIGINT", 60)
        took = time.monotonic() - t0
        expect(took < PROMPT_S + 1.0, f"ended {took:.1f} s after the first SIGINT"
               + why_ended(os.path.join(out, "t"), err))
        expect(p.returncode == 130,
               f"exit {p.returncode}, expected 130" + why_ended(os.path.join(out, "t"), err))
        check_interrupted_row(os.path.join(out, "t"))
        no_processes_left(out)
        print(f"ddp: ended {took:.2f} s after the first SIGINT")


def launcher_env(rank, size, port):
    """Open MPI's variables for rank `rank` of `size` on this host."""
    return dict(os.environ, MASTER_ADDR="127.0.0.1", DPSCALE_PORT=str(port),
                OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(size),
                OMPI_COMM_WORLD_LOCAL_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_SIZE=str(size))


def start_ranks(binary, out, port, *args):
    return [start(binary, "run", "--mode", "ddp", "--backend", "host", *args, "--out", out,
                  "--name", "t", env=launcher_env(r, 2, port)) for r in range(2)]


def regions(port):
    return {n for n in os.listdir("/dev/shm") if n.startswith(f"dpscale-{port}-")}


def mapped(pid, port):
    """Whether process pid maps the port's named region."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f"/dpscale-{port}-" in f.read()
    except OSError:
        return False


def wait_mapped(ranks, port, within=60):
    deadline = time.monotonic() + within
    while not all(mapped(r.pid, port) for r in ranks):
        expect(time.monotonic() < deadline and all(r.poll() is None for r in ranks),
               "the ranks never both mapped their shared region")
        time.sleep(0.05)


def case_launcher_twice(binary):
    """Two ranks under a launcher (its variables), SIGINT twice to each as
    torchrun or a terminal sends it, during a long step: both end within a
    few seconds, rank 0 writes the interrupted row, both exit 130, no
    region is left in /dev/shm."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        ranks = start_ranks(binary, out, port, *LONG_STEP, "--steps", "100", "--warmup", "0",
                            "--timeout", "120")
        wait_mapped(ranks, port)
        time.sleep(3.0)  # in the first step: 15 s or more
        twice(ranks)
        t0 = time.monotonic()
        ends = [finish(r, f"rank {k} after the second SIGINT", 60) for k, r in enumerate(ranks)]
        took = time.monotonic() - t0
        expect(took < PROMPT_S, f"the ranks ended {took:.1f} s after the second SIGINT")
        for k, r in enumerate(ranks):
            expect(r.returncode == 130, f"rank {k}: exit {r.returncode}, expected 130\n"
                   f"{ends[k][1][-2000:]}")
        row, _ = check_interrupted_row(os.path.join(out, "t"))
        no_processes_left(out)
        expect(not regions(port), f"shared regions left in /dev/shm: {regions(port)}")
        print(f"launcher: both ranks ended {took:.2f} s after the second SIGINT: {row['error']}")


def case_rank0_killed(binary):
    """Rank 0 under a launcher killed by SIGKILL (the OOM killer, a
    launcher's escalation) once both ranks have mapped their region: the
    other rank ends and nothing is left in /dev/shm."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        ranks = start_ranks(binary, out, port, "--model", "small", "--steps", "100000",
                            "--warmup", "0", "--timeout", "10")
        wait_mapped(ranks, port)
        time.sleep(1.0)
        ranks[0].kill()
        for k, r in enumerate(ranks):
            finish(r, f"rank {k} after rank 0's SIGKILL", 60)
        expect(not regions(port), f"shared regions left in /dev/shm: {regions(port)}")


def case_links_interrupt(binary):
    """SIGINT while a sweep measures its link matrix: the sweep stops with
    meta.json's end time, says it was interrupted, exits 130, runs nothing."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        p = start(binary, "sweep", "--mode", "dp", "--gpus", "1,2", "--model", "tiny",
                  "--steps", "2", "--link-max-bytes", "1G", "--out", out, "--name", "s")
        time.sleep(1.0)
        expect(p.poll() is None, f"the sweep ended before the signal: exit {p.returncode}")
        p.send_signal(signal.SIGINT)
        _, err, took = finish(p, "the sweep after SIGINT", 30)
        expect(p.returncode == 130, f"exit {p.returncode}, expected 130\n{err}")
        expect("interrupted by SIGINT" in err, f"stderr does not say it was interrupted:\n{err}")
        folder = os.path.join(out, "s")
        expect(end_time(folder), f"{folder}/meta.json has no end time")
        expect(not os.path.exists(os.path.join(folder, "runs.csv")),
               "configurations ran after the SIGINT (runs.csv was written)")
        no_processes_left(out)
        print(f"links: ended {took:.2f} s after SIGINT")


CASES = {"dp_twice": case_dp_twice, "sweep_once": case_sweep_once, "sweep_twice": case_sweep_twice,
         "ddp_twice": case_ddp_twice, "launcher_twice": case_launcher_twice,
         "rank0_killed": case_rank0_killed, "links_interrupt": case_links_interrupt}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
