#!/usr/bin/env python3
"""scripts/dpstools/speedup.py, imported, on runs.csv rows and step times
the test gives. steps: step_times keeps rank 0's step times in step order
(ci-host's steps.csv read here with csv; a configuration without rank 0
rows left out, no steps.csv: none). interval: b's throughput over a's with
the Mann-Whitney interval of a's step times over b's: with 4 steps a side
(P(U = 0) = 1/70 under 2.5 %, P(U <= 1) = 2/70 above) the interval runs
from the smallest ratio of a step of a over one of b to the largest, with
5 steps a side from the c-th smallest to the c-th largest, c found by
counting U over every ranking of 10 steps; the global batches' ratio scales
it; its text. faster: the side named faster where the interval excludes 1
(by a name function given), within noise where it holds 1, no name at one
device. few: 3 steps a side (P(U = 0) = 1/20) and a side without steps give
no interval, and say why.
Usage: test_dpstools_speedup.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools speedup " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("steps", "interval", "faster", "few")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import itertools
import math
import os
import tempfile
from statistics import median

from dpstools import speedup
from dpstools.results import read_steps
from helpers import expect, run_cases, write

DP, DDP = [9.8, 9.9, 10.1, 10.2], [4.9, 4.95, 5.05, 5.1]  # step times, ms


def row(cid, mode, n, batch, times):
    """A runs.csv row as the readers give it: samples/s the batch over the median step."""
    step = median(times)
    return {"config_id": cid, "mode": mode, "ngpus": str(n), "global_batch": str(batch),
            "samples_per_s": f"{batch / step * 1e3:.6f}", "_path": "runs.csv", "_line": 2}


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


def case_steps(fixtures):
    """step_times of ci-host's steps.csv: per configuration its rank 0 step_ms,
    in file (step) order, read here with csv; a steps.csv whose
    configuration has rank 1 rows only: left out; None: {}."""
    path = os.path.join(fixtures, "ci-host", "steps.csv")
    want = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["rank"] == "0":
                want.setdefault(r["config_id"], []).append(float(r["step_ms"]))
    got = speedup.step_times(read_steps(path, ["step_ms"]))
    expect(got == want, f"step_times of ci-host: {got}, expected {want}")
    expect(len(want) == 4 and all(len(v) == 30 for v in want.values()),
           f"ci-host: {len(want)} configurations, {[len(v) for v in want.values()]} steps")
    with tempfile.TemporaryDirectory() as tmp:
        path = write(os.path.join(tmp, "steps.csv"),
                     "config_id,step,rank,step_ms\nx,0,1,2.5\nx,1,1,3.5\n"
                     "y,0,0,1.5\ny,0,1,1.75\ny,1,0,1.25\ny,1,1,1.5\n")
        got = speedup.step_times(read_steps(path, ["step_ms"]))
    expect(got == {"y": [1.5, 1.25]}, f"rank 1 only, and two ranks: {got}")
    expect(speedup.step_times(None) == {}, "no steps.csv: times found")


def case_interval(fixtures):
    """4 steps a side: [min a / max b, max a / min b] times b's batch over
    a's; 5 a side: the c-th smallest and largest ratio, c from U's exact
    distribution counted here; interval_text."""
    a, b = row("dp-m-g2", "dp", 2, 16, DP), row("ddp-m-g2", "ddp", 2, 16, DDP)
    s = speedup.speedup({"dp-m-g2": DP, "ddp-m-g2": DDP}, a, b)
    want = (2.0, min(DP) / max(DDP), max(DP) / min(DDP), (4, 4))
    expect(close(s.ratio, want[0]) and close(s.lo, want[1]) and close(s.hi, want[2]) and
           s.steps == want[3], f"4 steps a side: {s}, expected {want}")
    text = speedup.interval_text(s)
    expect(text == "95 % interval 1.92–2.08x", f"interval_text {text!r}")
    big = row("ddp-m-g2-b32", "ddp", 2, 32, DP)  # the same steps, twice the batch
    s = speedup.speedup({"dp-m-g2": DP, "ddp-m-g2-b32": DP}, a, big)
    want = (2.0, 2 * min(DP) / max(DP), 2 * max(DP) / min(DP))
    expect(close(s.ratio, want[0]) and close(s.lo, want[1]) and close(s.hi, want[2]),
           f"twice the batch: {s}, expected {want}")
    ta, tb = [10.0, 10.3, 10.7, 11.2, 11.8], [5.0, 5.15, 5.4, 5.7, 6.1]
    c = u_cut_by_counting(5, 5, 0.95)
    d = sorted(x / y for x in ta for y in tb)
    s = speedup.speedup({"a": ta, "b": tb}, row("a", "dp", 2, 16, ta), row("b", "ddp", 2, 16, tb))
    expect(c == 3 and close(s.lo, d[c - 1]) and close(s.hi, d[-c]) and s.steps == (5, 5),
           f"5 steps a side: c {c} (expected 3), {s}, expected [{d[c - 1]}, {d[-c]}]")


def u_cut_by_counting(m, n, confidence):
    """The largest c with P(U < c) <= (1 - confidence) / 2, U the pairs (x
    of a, y of b) with x above y, over every equally likely ranking of m + n
    steps of which m are a's."""
    us = [sum(p - k for k, p in enumerate(pos)) for pos in itertools.combinations(range(m + n), m)]
    tail = (1 - confidence) / 2 * len(us)
    return max(c for c in range(m * n + 1) if sum(u < c for u in us) <= tail)


def case_faster(fixtures):
    """ddp's steps half dp's: ddp faster; asked the other way, the ratio
    0.5 and ddp still the faster (a's name); a name function given: its
    name; overlapping steps: within noise; either side on one device: one
    device, the ratio still given."""
    a, b = row("dp-m-g2", "dp", 2, 16, DP), row("ddp-m-g2", "ddp", 2, 16, DDP)
    times = {"dp-m-g2": DP, "ddp-m-g2": DDP}
    s = speedup.speedup(times, a, b)
    expect(s.faster == "ddp", f"ddp's interval above 1: faster {s.faster!r}")
    s = speedup.speedup(times, b, a)
    expect(close(s.ratio, 0.5) and close(s.hi, max(DDP) / min(DP)) and s.faster == "ddp",
           f"asked the other way: {s}")
    s = speedup.speedup(times, a, b, name=lambda r: r["config_id"])
    expect(s.faster == "ddp-m-g2", f"by config_id: {s.faster!r}")
    lean = row("dp-lean-m-g2", "dp", 2, 16, DDP)
    s = speedup.speedup({"dp-m-g2": DP, "dp-lean-m-g2": DDP}, a, lean)
    expect(s.faster == "dp-lean", f"the default name, the strategy: {s.faster!r}")
    near = [9.0, 9.6, 10.4, 11.0]
    s = speedup.speedup({"dp-m-g2": DP, "ddp-m-g2": near}, a, row("ddp-m-g2", "ddp", 2, 16, near))
    expect(s.faster == speedup.NOISE and close(s.lo, min(DP) / max(near)) and s.lo < 1 < s.hi,
           f"overlapping steps: {s}")
    for n_a, n_b in ((1, 2), (2, 1), (1, 1)):
        s = speedup.speedup(times, row("dp-m-g2", "dp", n_a, 16, DP),
                            row("ddp-m-g2", "ddp", n_b, 16, DDP))
        expect(s.faster == speedup.ONE_DEVICE and close(s.ratio, 2.0) and s.lo > 1,
               f"{n_a} and {n_b} devices: {s}")


def case_few(fixtures):
    """3 steps a side: no interval (0, inf), within noise, 'too few steps';
    one side without steps: 'steps.csv lacks their steps'."""
    a, b = row("dp-m-g2", "dp", 2, 16, DP[:3]), row("ddp-m-g2", "ddp", 2, 16, DDP[:3])
    s = speedup.speedup({"dp-m-g2": DP[:3], "ddp-m-g2": DDP[:3]}, a, b)
    expect(s.lo == 0 and math.isinf(s.hi) and s.steps == (3, 3) and s.faster == speedup.NOISE,
           f"3 steps a side: {s}")
    text = speedup.interval_text(s)
    expect(text == "no interval: too few steps", f"3 steps a side: {text!r}")
    s = speedup.speedup({"ddp-m-g2": DDP}, a, b)
    expect(s.steps == (0, 4) and math.isinf(s.hi) and s.faster == speedup.NOISE and
           close(s.ratio, 2.0), f"no steps of a: {s}")
    text = speedup.interval_text(s)
    expect(text == "no interval: steps.csv lacks their steps", f"no steps of a: {text!r}")


if __name__ == "__main__":
    run_cases(globals())
