#!/usr/bin/env python3
"""A sweep's twins: with batch = weak, strong, the configurations that are one
run under two ids (the strong global batch equal to the weak one at a device
count) run once, and every file holds both ids' rows from that run, with
their own config_id and scaling; --dry-run says which run a twin is; one of a
pair alone (--filter, --resume) runs alone; a pair that fails, times out,
is skipped or is killed mid-commit is recorded under both ids, never torn.
Usage: test_twins.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip (meson's
convention)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("twins " + c.replace("_", " "), DPSCALE, c, timeout=420)
         for c in ("run_once", "filter_resume", "failures", "kill_commit")]
TESTS += [test("twins plot", DPSCALE, "plot", suite=NOSAN, timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import re
import signal
import tempfile

from helpers import dpscale, expect, expect_exit, read_table, run_cases, script, write
from test_folder import ROW_FILES, can_strace, check_traces, check_whole, run_traced, stop_at

# dp and ddp on 1 and 2 devices, weak and strong; global_batch 8 is tiny's batch a device, so
# at 1 device the strong configuration is the weak one: 8 configurations, 6 runs
SUITE = ("modes = dp, ddp\ngpus = 1, 2\nbatch = weak, strong\nglobal_batch = 8\nmodels = tiny\n"
         "steps = 3\nwarmup = 0\n")
PAIRS = [("dp-tiny-fp32-sgd-g1-b8", "dp-tiny-fp32-sgd-g1-b8-strong"),
         ("ddp-tiny-fp32-sgd-g1-b8-bk25", "ddp-tiny-fp32-sgd-g1-b8-strong-bk25")]
ALONE = ["dp-tiny-fp32-sgd-g2-b16", "dp-tiny-fp32-sgd-g2-b8-strong",
         "ddp-tiny-fp32-sgd-g2-b16-bk25", "ddp-tiny-fp32-sgd-g2-b8-strong-bk25"]
PROGRESS = re.compile(r"^dpscale: \[(\d+)/(\d+)\] (\S+)(?: = (\S+))? \(elapsed", re.M)


def runs_of(stderr):
    """The runs a sweep's progress lines announce: (index, total, id, twin or None)."""
    return [(int(i), int(n), first, twin or None) for i, n, first, twin in PROGRESS.findall(stderr)]


def rows_by_id(path):
    """A row file's rows, each without its config_id (nor the reader's _path
    and _line), by config_id, in order."""
    out = {}
    for r in read_table(path):
        out.setdefault(r["config_id"], []).append(
            {k: v for k, v in r.items() if k != "config_id" and not k.startswith("_")})
    return out


def check_pair(folder, first, twin):
    """Every row file holds the same rows for first and twin, but runs.csv's
    scaling (weak and strong); their traces, when there, differ only in the id."""
    for name in ROW_FILES:
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        rows = rows_by_id(path)
        a, b = rows.get(first, []), rows.get(twin, [])
        if name == "runs.csv":
            expect(len(a) == len(b) == 1, f"runs.csv: {len(a)} rows of {first}, {len(b)} of {twin}")
            expect((a[0].pop("scaling"), b[0].pop("scaling")) == ("weak", "strong"),
                   f"runs.csv: scaling of {first} and {twin}")
        expect(a == b, f"{name}: {first}'s rows and {twin}'s differ:\n{a}\n{b}")
    traces = [os.path.join(folder, "trace", i + ".json") for i in (first, twin)]
    if any(os.path.exists(t) for t in traces):
        a, b = (json.load(open(t)) for t in traces)
        expect(a["otherData"].pop("config_id") == first and b["otherData"].pop("config_id") == twin,
               f"the traces of {first} and {twin} name other configurations")
        expect(a == b, f"the traces of {first} and {twin} differ beyond their ids")


def case_run_once(binary):
    """6 runs for 8 configurations; both ids of each pair in every file, the
    same figures; --dry-run names the run a twin is written from."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        p = dpscale(binary, "sweep", suite, "--dry-run", out=out, check_rc=0)
        expect("# 8 configurations in 6 runs (2 the same run as another)" in p.stdout,
               f"dry run: {p.stdout}")
        for first, twin in PAIRS:
            expect(re.search(rf"^\s*\d+\s+{twin}\s+same run as {first}\b", p.stdout, re.M),
                   f"dry run does not say {twin} is {first}'s run:\n{p.stdout}")
        p = dpscale(binary, "sweep", suite, "--trace-steps", "2", "--no-links", out=out, check_rc=0)
        got = runs_of(p.stderr)
        expect([(i, n) for i, n, _, _ in got] == [(k, 6) for k in range(1, 7)],
               f"progress lines: {got}\n{p.stderr}")
        expect(sorted((first, twin) for _, _, first, twin in got if twin) == sorted(PAIRS) and
               sorted(first for _, _, first, twin in got if not twin) == sorted(ALONE),
               f"runs: {got}")
        expect("2 strong-scaling configurations were the same run" in p.stderr, p.stderr)
        expect(p.stdout.count(" ok\n") == 8, f"the table's rows:\n{p.stdout}")
        folder = os.path.join(out, "t")
        runs = check_whole(folder)
        every = sorted(ALONE + [i for pair in PAIRS for i in pair])
        expect(sorted(r["config_id"] for r in runs) == every,
               f"runs.csv: {[r['config_id'] for r in runs]}")
        expect(all(r["status"] == "ok" for r in runs), f"runs.csv: {runs}")
        check_traces(folder, runs)
        expect(len(os.listdir(os.path.join(folder, "trace"))) == 8, "a timeline a configuration")
        for first, twin in PAIRS:
            check_pair(folder, first, twin)


def case_filter_resume(binary):
    """One of a pair alone (--filter) runs alone; --resume then runs the
    other alone, and the pairs the folder lacks once each."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        p = dpscale(binary, "sweep", suite, "--filter", "g1-b8-strong", "--no-links", out=out,
                    check_rc=0)
        got = runs_of(p.stderr)
        expect(sorted(first for _, _, first, _ in got) == sorted(t for _, t in PAIRS) and
               not any(twin for _, _, _, twin in got), f"--filter's runs: {got}")
        p = dpscale(binary, "sweep", suite, "--resume", "--dry-run", out=out, check_rc=0)
        expect("# 6 configurations to run; 2 already in" in p.stdout and
               "same run as" not in p.stdout, f"--resume --dry-run:\n{p.stdout}")
        p = dpscale(binary, "sweep", suite, "--resume", "--no-links", out=out, check_rc=0)
        got = runs_of(p.stderr)
        expect(sorted(first for _, _, first, _ in got) == sorted(ALONE + [f for f, _ in PAIRS]) and
               not any(twin for _, _, _, twin in got), f"--resume's runs: {got}\n{p.stderr}")
        # the count is of the entries (those already in the folder too), no two of them one run
        expect(all(n == 8 for _, n, _, _ in got), f"--resume's count: {got}")
        runs = check_whole(os.path.join(out, "t"))
        expect(len(runs) == 8 and all(r["status"] == "ok" for r in runs), f"runs.csv: {runs}")
        # a filter that keeps both of a pair runs it once
        p = dpscale(binary, "sweep", suite, "--filter", "dp-tiny-fp32-sgd-g1-*", "--no-links",
                    out=out, name="both", check_rc=0)
        got = runs_of(p.stderr)
        expect([(first, twin) for _, _, first, twin in got] == [PAIRS[0]], f"runs: {got}")
        check_pair(os.path.join(out, "both"), *PAIRS[0])


def case_failures(binary):
    """A pair whose run fails, times out or cannot run here: both ids get
    the status and the error."""
    with tempfile.TemporaryDirectory() as out:
        # one device: strong's global batch is the weak one's without global_batch
        suite = write(os.path.join(out, "s.suite"),
                      "modes = ddp\ngpus = 1\nbatch = weak, strong\nmodels = tiny\nsteps = 3\n"
                      "warmup = 0\n")
        p = dpscale(binary, "sweep", suite, "--inject-fault", "0:1:exit", "--no-links", out=out,
                    name="fault", check_rc=1)
        expect(len(runs_of(p.stderr)) == 1, f"runs: {runs_of(p.stderr)}")
        expect("# 2 failed" in p.stdout, f"stdout:\n{p.stdout}")
        runs = check_whole(os.path.join(out, "fault"))
        expect([r["status"] for r in runs] == ["error", "error"] and
               runs[0]["error"] == runs[1]["error"] and "rank 0" in runs[0]["error"],
               f"runs.csv: {runs}")
        slow = write(os.path.join(out, "slow.suite"),
                     "modes = dp\ngpus = 1\nbatch = weak, strong\nmodels = medium\n"
                     "steps = 100000\n")
        p = dpscale(binary, "sweep", slow, "--config-timeout", "2", "--no-links", out=out,
                    name="slow", check_rc=1)
        expect(len(runs_of(p.stderr)) == 1, f"runs: {runs_of(p.stderr)}")
        runs = check_whole(os.path.join(out, "slow"))
        expect([r["status"] for r in runs] == ["timeout", "timeout"] and
               runs[0]["error"] == runs[1]["error"] and "--config-timeout 2" in runs[0]["error"],
               f"runs.csv: {runs}")
        expect([r["scaling"] for r in runs] == ["weak", "strong"], f"runs.csv: {runs}")
        big = write(os.path.join(out, "big.suite"),
                    "modes = dp\ngpus = 9\nbatch = weak, strong\nmodels = tiny\n")
        p = dpscale(binary, "sweep", big, out=out, name="big")
        expect_exit(p, 1, "nothing ran", "all 2 configurations")
        runs = check_whole(os.path.join(out, "big"))
        expect([r["status"] for r in runs] == ["skipped", "skipped"] and
               runs[0]["error"] == runs[1]["error"], f"runs.csv: {runs}")


def case_kill_commit(binary):
    """A pair's process killed (SIGKILL) as it writes both ids' rows (stopped
    at its first write to devices.csv: the journal on disk, steps.csv's rows
    of both ids appended): neither id keeps a row of it; the sweep records
    both as killed, once each."""
    if not can_strace():
        return 77
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE.replace("modes = dp, ddp", "modes = dp"))
        folder = os.path.join(out, "t")
        cmd = stop_at("write", os.path.join(os.path.realpath(folder), "devices.csv"),
                      os.path.join(out, "strace.log"))
        cmd += [binary, "sweep", suite, "--trace-steps", "2", "--no-links", "--backend", "host",
                "--out", out, "--name", "t"]
        rc, err = run_traced(cmd, out, lambda pid, sweep: os.kill(pid, signal.SIGKILL))
        expect(rc == 1, f"exit {rc}, expected 1:\n{err}")
        runs = check_whole(folder)
        check_traces(folder, runs)
        status = {r["config_id"]: (r["status"], r["error"]) for r in runs}
        first, twin = PAIRS[0]
        expect(len(runs) == 4 and status[first][0] == "error" and "SIGKILL" in status[first][1] and
               status[first] == status[twin], f"runs.csv: {status}")


def case_plot(binary):
    """plot.py draws a folder with twins, and compare.py reads it."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"), SUITE)
        dpscale(binary, "sweep", suite, "--no-links", out=out, check_rc=0)
        folder = os.path.join(out, "t")
        p = script("plot.py", folder, "--out", os.path.join(out, "charts"))
        expect_exit(p, 0)
        for chart in ("scaling.png", "efficiency.png", "summary.md"):
            expect(os.path.exists(os.path.join(out, "charts", chart)), f"plot.py drew no {chart}")
        p = script("compare.py", folder, folder)
        expect(p.returncode == 0 and PAIRS[0][1] in p.stdout + p.stderr,
               f"compare.py: exit {p.returncode}\n{p.stdout}\n{p.stderr}")


if __name__ == "__main__":
    run_cases(globals())
