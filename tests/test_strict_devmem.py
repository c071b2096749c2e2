#!/usr/bin/env python3
"""Strict device memory (DPSCALE_STRICT=1, backend/host_devmem.h): the host
backend's devices as memory the harness cannot touch, as a GPU's. The
planted defect DPSCALE_TEST_PLANT=host_read makes dp read the loss from
device memory on the host instead of copying it (strategies/dp_loss.c):
strict mode must end that run at its first read (the first micro-step's
loss, 0 bytes into it), said once naming the allocation, before anything
of the run's results is written; without strict mode the same run must
pass unnoticed, since the host backend's
devices are then host memory; that gap is what strict mode closes and why
this test exists. The modes' runs with --check pass under strict mode.
No case bounds a run's time (CI runs them under ASan, several times
slower): HANG_S guards against a hang only.
Usage: test_strict_devmem.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, exit_if_listing, test

MODES = ("dp", "ddp", "zero1", "fsdp")
HANG_S = 300  # a run's hang guard; meson's timeout above it
TESTS = [test("strict devmem plant", DPSCALE, "plant", timeout=HANG_S + 60),
         test("strict devmem plant unnoticed", DPSCALE, "plant_unnoticed", timeout=HANG_S + 60)]
TESTS += [test("strict devmem " + m, DPSCALE, m, timeout=HANG_S + 60) for m in MODES]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import sys
import tempfile

from dpstools import results as dpsresults
from helpers import Failure, expect, expect_exit, run_case

RUN = ["run", "--backend", "host", "--model", "tiny", "--gpus", "2", "--warmup", "1",
       "--steps", "2"]
DEVMEM_EXIT = 70  # host_devmem.h's HOST_DEVMEM_EXIT


def run(binary, out, name, *extra, strict=True, plant=False):
    env = dict(os.environ, DPSCALE_STRICT="1" if strict else "0")
    env.pop("DPSCALE_TEST_PLANT", None)
    if plant:
        env["DPSCALE_TEST_PLANT"] = "host_read"
    cmd = [binary, *RUN, *extra, "--out", out, "--name", name]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, env=env)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)}: hung, still running after {HANG_S} s") from None


def case_plant(binary):
    """The first host read of the loss ends the process: exit 70, one report
    naming the first micro-step's loss, and none of the run's results written
    (meta.json without an end, no runs.csv or steps.csv)."""
    with tempfile.TemporaryDirectory() as out:
        p = run(binary, out, "plant", plant=True)
        expect_exit(p, DEVMEM_EXIT, "the host dereferenced a device pointer",
                    "0 bytes into device 0's \"loss\"", "copy it to host memory first")
        first = p.stderr.index("dereferenced")
        expect("Traceback" not in p.stderr[:first], p.stderr)
        said = p.stderr.count("dereferenced a device pointer")
        expect(said == 1, f"the host read reported {said} times, expected once:\n{p.stderr}")
        folder = os.path.join(out, "plant")
        written = sorted(f for f in ("runs.csv", "steps.csv")
                         if os.path.exists(os.path.join(folder, f)))
        meta = dpsresults.read_meta(folder, required=["end_time"])
        expect(not written and meta["end_time"] == "",
               f"{folder}: {written} written and meta.json's end_time {meta['end_time']!r}; "
               f"expected the run ended at its first host read, before any result")


def case_plant_unnoticed(binary):
    """Without strict mode the same run reads host memory and ends every step."""
    with tempfile.TemporaryDirectory() as out:
        p = run(binary, out, "plant", strict=False, plant=True)
        expect_exit(p, 0)
        expect("device pointer" not in p.stderr, p.stderr)
        runs = dpsresults.read_csv(os.path.join(out, "plant", "runs.csv"), ["steps_done"])
        expect([r["steps_done"] for r in runs] == ["2"],
               f"{out}/plant/runs.csv: steps_done {[r['steps_done'] for r in runs]}, expected [2]")


def mode_case(mode):
    def case(binary):
        with tempfile.TemporaryDirectory() as out:
            p = run(binary, out, mode, "--mode", mode, "--check")
            expect_exit(p, 0)
            row = [l for l in p.stdout.splitlines() if l.strip().startswith(mode + " ")]
            expect(len(row) == 1 and " pass " in row[0], f"no passing check:\n{p.stdout}")
    return case


for _m in MODES:
    globals()["case_" + _m] = mode_case(_m)

if __name__ == "__main__":
    binary, case = sys.argv[1], sys.argv[2]
    sys.exit(run_case(case, globals()["case_" + case], binary))
