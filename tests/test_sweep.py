#!/usr/bin/env python3
"""dpscale sweep: every configuration into one folder, failures and timeouts
recorded while the sweep goes on, --resume and --dry-run, what the host
backend cannot run recorded as skipped.
Usage: test_sweep.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail, 77
skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("dp sweep", DPSCALE, "sweep", timeout=300)]
TESTS += [test(c.replace("_", " "), DPSCALE, c, timeout=300)
          for c in ("sweep_failures", "sweep_timeout", "sweep_resume", "sweep_skipped")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from helpers import (dpscale, expect, expect_exit, processes_mentioning, read_folder, read_table,
                     run_cases, write)
from test_folder import wait_for


def case_sweep(binary):
    """The built-in sweep runs every configuration into one folder."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--model", "tiny,small", "--steps", "2", "--warmup", "1",
                out=out, check_rc=0)
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        got = sorted((r["model"], r["mode"], int(r["ngpus"])) for r in runs)
        want = sorted((m, k, g) for m in ("tiny", "small") for k in ("dp", "ddp") for g in (1, 2, 4))
        expect(got == want, f"sweep ran {got}")


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
    """A configuration past --config-timeout is killed before its end,
    recorded, and the sweep goes on to the next, which it kills alike (no
    configuration of medium trains 100 000 steps in 2 s): a row each, in
    order, with no step of either; no process left behind."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp\ngpus = 1, 2\nmodels = medium, tiny\nsteps = 100000\n")
        p = dpscale(binary, "sweep", suite, "--config-timeout", "2", "--filter", "medium",
                    out=out, check_rc=1)
        killed = "the configuration ran past --config-timeout 2 s and was killed"
        expect(p.stdout.count(f"#   timeout: {killed}") == 2 and "# 2 failed" in p.stdout,
               f"the table does not say both were killed at the timeout:\n{p.stdout}")
        runs, _, steps, _, _ = read_folder(os.path.join(out, "t"))
        expect([(r["ngpus"], r["status"], r["error"]) for r in runs] ==
               [("1", "timeout", killed), ("2", "timeout", killed)], f"runs.csv: {runs}")
        expect(all(r["steps"] == "100000" and r["steps_done"] == "0" for r in runs),
               f"runs.csv: steps done of a configuration killed before its end: {runs}")
        expect(not steps, f"steps.csv holds {len(steps)} rows of configurations killed")
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
        p = dpscale(binary, "sweep", suite, "--resume", out=out, name=None)
        expect_exit(p, 0, "4 configurations already in")
        # latest points at a sweep from its start, so a crash leaves it on the crashed sweep
        slow = subprocess.Popen([binary, "sweep", suite, "--steps", "1000000", "--backend",
                                 "host", "--out", out, "--name", "crashed"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        latest = os.path.join(out, "latest")
        try:
            wait_for(lambda: os.readlink(latest) == "crashed",
                     "latest pointing at the running sweep 'crashed'", slow)
        finally:
            slow.kill()
            slow.wait()
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
    """What the host backend cannot run (more devices than it emulates) is
    recorded as skipped, not failed."""
    with tempfile.TemporaryDirectory() as out:
        suite = write(os.path.join(out, "s.suite"),
                      "modes = dp\ngpus = 1, 9\nmodels = tiny\nprecisions = fp32, bf16\nsteps = 2\n")
        dpscale(binary, "sweep", suite, out=out, check_rc=0)
        runs, _, _, _, _ = read_folder(os.path.join(out, "t"))
        got = {(r["precision"], r["ngpus"]): r["status"] for r in runs}
        expect(got == {("fp32", "1"): "ok", ("bf16", "1"): "ok", ("fp32", "9"): "skipped",
                       ("bf16", "9"): "skipped"}, f"{got}")
        # every configuration skipped, here or after --filter: nothing ran, exit 1 saying why
        p = dpscale(binary, "sweep", suite, "--filter", "bf16-sgd-g9", out=out, name="filtered")
        expect_exit(p, 1, "nothing ran", "--filter bf16-sgd-g9")
        runs, _, _, _, _ = read_folder(os.path.join(out, "filtered"))
        expect([r["status"] for r in runs] == ["skipped"], f"{runs}")
        big = write(os.path.join(out, "big.suite"), "modes = dp\ngpus = 9, 10\nmodels = tiny\n")
        p = dpscale(binary, "sweep", big, "--host-devices", "8", out=out, name="big")
        expect_exit(p, 1, "nothing ran", "all 2 configurations", "--gpus 9")
        p = dpscale(binary, "sweep", big, "--host-devices", "8", "--dry-run", out=out, name="dry")
        expect_exit(p, 0)
        p = dpscale(binary, "sweep", os.path.join(out, "missing.suite"), out=out)
        expect_exit(p, 2, "missing.suite: cannot read")


if __name__ == "__main__":
    run_cases(globals())
