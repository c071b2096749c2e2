#!/usr/bin/env python3
"""SIGINT and SIGTERM by the two-signal rule (docs/usage.md, exit status):
the first ends the configuration after its step (cut short if it runs 5 s
more), the second ends the step that runs at once, its row written with the
steps before it, exit 130; in dp's process, in a sweep's child, in ddp's
parent and its ranks, in ranks a launcher started; a SIGINT while a sweep
measures its links; no shared region left by a rank 0 killed under a
launcher. No case bounds a time: what each asserts is the run's own record,
runs.csv's row naming the step the signals reached and how it ended (cut
short, with no steps.csv row of it or after it), the exit status, the
handler's message, the files written or not and the processes left. Where
the signals are meant for a long step, the run's row says which step they
reached; a run they reached before it (in its set-up, or in a step that
ended on its own) is checked as well and tried again, signalled later, under
a hang guard. Usage: test_signals.py DPSCALE CASE; exit 0 pass, 1 fail, 77
skip."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a hang guard: far above any wait here on a busy machine under ASan
# dp, a sweep (once, twice), ddp's parent and ranks, ranks under a launcher, the link
# matrix; a rank 0 killed under a launcher leaves no region. None is timed, so each may
# run beside other tests; meson's timeout guards a hang only: the tries (HANG_S in all),
# a last run and its end
TESTS = [test("signals " + c.replace("_", " "), DPSCALE, c, timeout=3 * HANG_S)
         for c in ("dp_twice", "sweep_once", "sweep_twice", "ddp_twice", "launcher_twice",
                   "rank0_killed", "links_interrupt")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from helpers import Failure, expect, free_port, read_folder, run_case
from helpers import children, processes_mentioning

NEVER_S = 2 * HANG_S  # a --timeout no case may reach: the hang guard fires first
# about 2 s a step on one core unstretched, 11 times that from the second step on,
# stretched by --inject-slowdown 1000: a spin that a second signal (or the first's
# grace) ends at once, between GEMMs of a few tenths of a second, so that a step cut
# short ends long before the handler's own graces, however slow the machine
SLOW = ["--model", "small", "--batch", "2048", "--inject-slowdown", "1000"]
# runs.csv's error for a step cut short by the two-signal rule (warm-up 0: every step
# before it is timed, and kept)
CUT = re.compile(r"interrupted by SIGINT during step (\d+), which (a second signal|the "
                 r"signal's 5 s grace) cut short \(the (\d+) timed steps? before it kept\)")
# ... and for the first signal in a step that then ended on its own: the run stops there
BEFORE = re.compile(r"interrupted by SIGINT before step (\d+)$")
# ... and for signals that came before the first step began (a machine slower than the
# case's delay): its set-up cut short, no step run
SETUP = re.compile(r"(rank \d+: )?interrupted by SIGINT in set-up, before step 0, which "
                   r"(a second signal|the signal's 5 s grace) cut short$")


def start(binary, *args, env=None, log=None):
    """dpscale in a session of its own (its ranks share its process group);
    its standard error into the file `log` when one is given. Outside strict
    mode: there a step cut short by a second signal is recorded as strict
    mode's asynchronous error of the GEMM it stopped, not as the cut step."""
    env = dict(env or os.environ, DPSCALE_STRICT="0")
    return subprocess.Popen([binary, *args], stdout=subprocess.PIPE,
                            stderr=log or subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def finish(p, what):
    """Waits for p (its stdout and stderr); fails as hung past HANG_S."""
    try:
        return p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise Failure(f"{what}: hung, still running after {HANG_S} s") from None


def wait_until(cond, what, alive):
    """Polls cond() until it holds; fails when alive() turns false first
    (saying what alive() gives back), or as hung past HANG_S."""
    end = time.monotonic() + HANG_S
    while not cond():
        gone = alive()
        expect(gone is True, f"{what}: never happened: {gone}")
        expect(time.monotonic() < end, f"{what}: hung, not so after {HANG_S} s")
        time.sleep(0.02)


def running(*procs):
    """alive() for wait_until: True while every process runs."""
    def check():
        ended = [f"exit {p.returncode}" for p in procs if p.poll() is not None]
        return True if not ended else f"a process ended first ({', '.join(ended)})"
    return check


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


def until_reached(attempt, first_delay, what):
    """Runs attempt(delay), the signals sent `delay` s into the run, the
    delay doubling, until it returns True: its row says the signals reached
    the step they are meant for, and every expectation held. It returns why
    not otherwise (where the signals came instead, by the row, itself
    checked); past HANG_S of tries the case fails as hung."""
    began, delay = time.monotonic(), first_delay
    while True:
        missed = attempt(delay)
        if missed is True:
            return
        print(f"{what}: the signals {delay:.1f} s in came {missed}; again, later")
        expect(time.monotonic() - began < HANG_S,
               f"{what}: hung: {HANG_S} s of tries and the signals never reached the step "
               f"meant (the last, {delay:.1f} s in, came {missed})")
        delay *= 2


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


def steps_done(folder, row, steps, nranks):
    """runs.csv's steps_done of row's configuration, steps.csv holding
    exactly those steps of every rank, none after them."""
    done = int(row["steps_done"])
    mine = sorted((int(s["step"]), int(s["rank"])) for s in steps
                  if s["config_id"] == row["config_id"])
    want = [(k, r) for k in range(done) for r in range(nranks)]
    expect(mine == want, f"{folder}: steps.csv's (step, rank) {mine} for {row['config_id']}; "
           f"expected {want}: its {done} steps done, every rank's, none after them")
    return done


def read_cut(folder, row, steps, nranks, causes=("a second signal",)):
    """(the step the signals cut short, None) by row's error, the steps
    before it kept and none of it; or (None, where the signals came
    instead): in set-up, before any step (SETUP); in a step that then ended
    on its own, the run stopped after it (BEFORE); the step cut short by
    another cause (the first signal's grace before a second came); or, with
    ranks, at a step's end, one rank a step behind another; each checked
    too."""
    done, error = steps_done(folder, row, steps, nranks), row["error"]
    if SETUP.search(error):
        expect(done == 0, f"{folder}: {error!r} with {done} steps done")
        return None, f"in its set-up, before step 0: {error!r}"
    before = BEFORE.search(error)
    if before:
        expect(done == int(before[1]), f"{folder}: {error!r} with {done} steps done")
        return None, f"in a step that then ended on its own: {error!r}"
    cut = CUT.search(error)
    expect(cut, f"{folder}: runs.csv's error {error!r}: not a step cut short, nor a stop "
           f"before a step")
    step, kept = int(cut[1]), int(cut[3])
    expect(kept == step, f"{folder}: {error!r}: {kept} steps kept before step {step} "
           f"(warm-up 0: every step before it)")
    if cut[2] not in causes:  # the first's grace ran out before the second signal came
        expect(done == kept, f"{folder}: {error!r}, yet {done} steps done")
        return None, f"cut short by {cut[2]}, not by {' or '.join(causes)}: {error!r}"
    if done == kept:
        return step, None
    expect(nranks > 1 and done == kept - 1,
           f"{folder}: {error!r}, yet {done} steps done: the steps kept are those before it")
    return None, f"at a step's end, a rank {done} steps in: {error!r}"


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
    """None of the run's processes outlives it: each parent reaps its
    children (a sweep its configuration's, ddp's parent its ranks) before
    it exits, and the caller has reaped the parent."""
    left = processes_mentioning(out)
    expect(not left, f"processes left behind: {left}")


def case_dp_twice(binary):
    """dp in one process: SIGINT twice in a long step (after one kept): the
    second cuts it short at once, so runs.csv's row says so and steps.csv
    holds the steps before it, none of it or after it; exit 130, and the
    handler says it was interrupted twice."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        t0 = time.monotonic()  # set-up and one unstretched step, with the process's start
        p = start(binary, "run", "--mode", "dp", "--gpus", "1", *SLOW, "--steps", "1",
                  "--warmup", "0", "--out", out, "--name", "calibrate")
        finish(p, "the one-step run")
        one = time.monotonic() - t0
        print(f"dp: the one-step run took {one:.1f} s")

        def attempt(delay):
            folder = os.path.join(out, f"try{delay:g}", "t")
            p = start(binary, "run", "--mode", "dp", "--gpus", "1", *SLOW, "--steps", "1000",
                      "--warmup", "0", "--out", os.path.dirname(folder), "--name", "t")
            time.sleep(delay)
            if p.poll() is not None:
                raise Failure(f"dpscale ended before the signals (1000 steps of seconds each): "
                              f"exit {p.returncode}" + why_ended(folder, p.stderr.read()))
            twice([p])
            _, err = finish(p, "dpscale after the second SIGINT")
            expect(p.returncode == 130 and "dpscale: interrupted by SIGINT twice" in err,
                   f"exit {p.returncode}, expected 130 and the handler's 'interrupted by "
                   f"SIGINT twice'" + why_ended(folder, err))
            row, steps = check_interrupted_row(folder)
            step, missed = read_cut(folder, row, steps, 1)
            if missed or step == 0:
                return missed or f"in the first step, with none before it: {row['error']!r}"
            print(f"dp: {row['error']}")
            return True

        # in the second step, which lasts about 11 times the first
        until_reached(attempt, 1.5 * one + 1.0, "dp")


def sweep(binary, out, log):
    """A sweep of tiny then small (SLOW), started; returns once its second
    configuration began (its plain progress line on stderr, in `log`)."""
    p = start(binary, "sweep", "--mode", "dp", "--gpus", "1", "--model", "tiny,small",
              *SLOW[2:], "--steps", "20", "--warmup", "0", "--no-links", "--out", out,
              "--name", "s", log=log)
    wait_until(lambda: "[2/2]" in text_of(log.name), "the sweep's second configuration",
               running(p))
    return p


def text_of(path):
    with open(path) as f:
        return f.read()


def sweep_attempt(binary, out, send, causes):
    """A try of a sweep signalled by send(p) in small's run: exit 130, the
    handler's message, small's row the last, its step cut short by one of
    causes, no process left; True, or where the signals came instead."""
    def attempt(delay):
        folder = os.path.join(out, f"s{delay:g}")
        os.makedirs(folder)
        with open(os.path.join(folder, "stderr.log"), "w+") as log:
            p = sweep(binary, folder, log)
            time.sleep(delay)
            expect(p.poll() is None, f"the sweep ended before the signals (small's 20 steps of "
                   f"seconds each): exit {p.returncode}" + why_ended(os.path.join(folder, "s")))
            send(p)
            finish(p, "the sweep")
            log.seek(0)
            err = log.read()
        where = os.path.join(folder, "s")
        expect(p.returncode == 130 and "dpscale: interrupted by SIGINT" in err,
               f"exit {p.returncode}, expected 130 and the handler's 'interrupted by SIGINT'"
               + why_ended(where, err))
        row, steps = check_interrupted_row(where)
        expect(row["config_id"].startswith("dp-small"),
               f"the last row is not the small configuration's: {row}")
        no_processes_left(folder)
        _, missed = read_cut(where, row, steps, 1, causes)
        if missed:
            return missed
        print(f"sweep: {row['error']}")
        return True
    return attempt


def case_sweep_once(binary):
    """One SIGINT to the sweep's process group (a terminal's ^C, or what
    `timeout` passes on before it ignores the signal itself) during a long
    step of its second configuration: the step is cut short, by the
    signal's grace (DPS_STEP_GRACE_S) or by the sweep passing the signal
    on (a second one where it came over 0.1 s after the first), not run
    to its end; the row says so, the steps before it kept; exit 130."""
    def once(p):
        os.killpg(p.pid, signal.SIGINT)

    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        until_reached(sweep_attempt(binary, out, once,
                                    ("the signal's 5 s grace", "a second signal")),
                      4.0, "sweep, one SIGINT")


def case_sweep_twice(binary):
    """A sweep: the second SIGINT reaches the running configuration's
    process, which cuts its step short and writes its row (the steps
    before it kept, none of it); exit 130."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        until_reached(sweep_attempt(binary, out, lambda p: twice([p]), ("a second signal",)),
                      2.0, "sweep, two SIGINTs")


def case_ddp_twice(binary):
    """ddp's parent and its ranks (one process group, as a terminal's ^C
    reaches them) get SIGINT twice during a step: the parent ends its ranks
    at the first, so the row names that step and holds only the steps
    before it (none of it: the ranks did not run it to its end); exit 130;
    the ranks reaped before the parent exits, none left."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        def attempt(delay):
            mine = os.path.join(out, f"try{delay:g}")
            folder = os.path.join(mine, "t")
            p = start(binary, "run", "--mode", "ddp", "--gpus", "2", *SLOW, "--steps", "100",
                      "--warmup", "0", "--out", mine, "--name", "t")
            wait_until(lambda: len(processes_mentioning(mine)) >= 3, "ddp's two ranks",
                       running(p))
            time.sleep(delay)
            twice([p], group=True)
            _, err = finish(p, "ddp after the SIGINTs")
            expect(p.returncode == 130,
                   f"exit {p.returncode}, expected 130" + why_ended(folder, err))
            row, steps = check_interrupted_row(folder)
            no_processes_left(mine)
            at = re.fullmatch(r"interrupted by SIGINT (during step (\d+)|in set-up, before "
                              r"step 0)", row["error"])
            expect(at, f"{folder}: runs.csv's error {row['error']!r}, expected 'interrupted "
                   f"by SIGINT during step N' or '... in set-up, before step 0'")
            if at[2] is None:
                expect(steps_done(folder, row, steps, 2) == 0, f"{folder}: steps done in set-up")
                return f"in the ranks' set-up: {row['error']!r}"
            # rank 0 in step N has done N steps, the others N - 1 or N (the slowest counts), and
            # N + 1 only where it ended N between its beat and the parent's SIGKILL
            step, done = int(at[2]), steps_done(folder, row, steps, 2)
            expect(step - 1 <= done <= step + 1, f"{folder}: {row['error']!r}, yet {done} steps "
                   f"done: ranks that ran on after the signal, or behind by more than a step")
            if done != step:
                return f"at a step's end, {done} steps done: {row['error']!r}"
            print(f"ddp: {row['error']}")
            return True

        until_reached(attempt, 2.0, "ddp")


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


def wait_mapped(ranks, port):
    wait_until(lambda: all(mapped(r.pid, port) for r in ranks),
               "both ranks mapping their shared region", running(*ranks))


def case_launcher_twice(binary):
    """Two ranks under a launcher (its variables), SIGINT twice to each as
    torchrun or a terminal sends it, during a long step: the second cuts it
    short, rank 0's row says so and holds the steps before it (none of it),
    both exit 130, rank 1 saying its step was cut or its collective ended,
    no region is left in /dev/shm."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as top:
        def attempt(delay):
            out, port = os.path.join(top, f"try{delay:g}"), free_port()
            folder = os.path.join(out, "t")
            ranks = start_ranks(binary, out, port, *SLOW, "--steps", "100", "--warmup", "0",
                                "--timeout", str(NEVER_S))
            wait_mapped(ranks, port)
            time.sleep(delay)
            twice(ranks)
            ends = [finish(r, f"rank {k}") for k, r in enumerate(ranks)]
            for k, r in enumerate(ranks):
                expect(r.returncode == 130, f"rank {k}: exit {r.returncode}, expected 130\n"
                       f"{ends[k][1][-2000:]}")
            row, steps = check_interrupted_row(folder)
            no_processes_left(out)
            expect(not regions(port), f"shared regions left in /dev/shm: {regions(port)}")
            if "collective aborted" in row["error"]:  # the first signal, in a collective
                return f"before a long step: {row['error']!r}"
            step, missed = read_cut(folder, row, steps, 2)
            if missed:
                return missed
            # rank 1 cut its own step, or rank 0 cut its step first and ended the collective
            # rank 1 waited in (which of the two is the scheduler's business)
            cut = f"rank 1: interrupted by SIGINT during step {step}, which a second signal"
            aborted = "rank 1: collective aborted"
            expect(cut in ends[1][1] or aborted in ends[1][1],
                   f"rank 1 says neither {cut!r} nor {aborted!r}:\n{ends[1][1][-2000:]}")
            print(f"launcher: {row['error']}")
            return True

        until_reached(attempt, 2.0, "launcher")


def case_rank0_killed(binary):
    """Rank 0 under a launcher removes its region's name once both ranks
    have mapped it; killed by SIGKILL after that (the OOM killer, a
    launcher's escalation), it leaves nothing in /dev/shm, and the other
    rank ends (exit 1), not left waiting for it."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        ranks = start_ranks(binary, out, port, "--model", "small", "--steps", "100000",
                            "--warmup", "0", "--timeout", str(NEVER_S))
        wait_mapped(ranks, port)
        wait_until(lambda: not regions(port), "rank 0 removing its region's name",
                   running(*ranks))
        ranks[0].kill()
        ends = [finish(r, f"rank {k} after rank 0's SIGKILL") for k, r in enumerate(ranks)]
        expect(ranks[0].returncode == -signal.SIGKILL and ranks[1].returncode == 1,
               f"rank 0 exit {ranks[0].returncode}, rank 1 exit {ranks[1].returncode}; expected "
               f"-9 and 1\n{ends[1][1][-2000:]}")
        expect(not regions(port), f"shared regions left in /dev/shm: {regions(port)}")


def case_links_interrupt(binary):
    """SIGINT while a sweep measures its link matrix (in a child process
    of its own, after meta.json's first writing and before any
    configuration): the sweep ends that child, stops with meta.json's end
    time, says it was interrupted, exits 130, writes no links.csv and runs
    nothing (no warm-up, no runs.csv)."""
    with tempfile.TemporaryDirectory(prefix="dpscale-sig-") as out:
        folder = os.path.join(out, "s")
        p = start(binary, "sweep", "--mode", "dp", "--gpus", "1,2", "--model", "tiny",
                  "--steps", "2", "--link-max-bytes", "1G", "--out", out, "--name", "s")
        # the child before meta.json is the backend's CUDA probe, before the handlers
        wait_until(lambda: os.path.exists(os.path.join(folder, "meta.json")) and children(p.pid),
                   "the sweep's link-matrix process", running(p))
        p.send_signal(signal.SIGINT)
        _, err = finish(p, "the sweep after SIGINT")
        expect(p.returncode == 130, f"exit {p.returncode}, expected 130\n{err}")
        expect("interrupted by SIGINT" in err, f"stderr does not say it was interrupted:\n{err}")
        expect(end_time(folder), f"{folder}/meta.json has no end time")
        written = [n for n in ("links.csv", "runs.csv") if os.path.exists(os.path.join(folder, n))]
        expect(not written and "warm-up" not in err,
               f"the sweep went on after the SIGINT: {written} written:\n{err}")
        no_processes_left(out)


CASES = {"dp_twice": case_dp_twice, "sweep_once": case_sweep_once, "sweep_twice": case_sweep_twice,
         "ddp_twice": case_ddp_twice, "launcher_twice": case_launcher_twice,
         "rank0_killed": case_rank0_killed, "links_interrupt": case_links_interrupt}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
