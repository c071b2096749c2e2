#!/usr/bin/env python3
"""scripts/dpstools/tracediff.py, imported, on accum-host's ddp on 2 ranks
(CID) against copies with known changes. phases: each rank's phase medians
(the fixture's steps.csv read here, medians taken here), a side of two runs
pooled; breakdown: rank 1's backward 3 ms longer and rank 0's forward 1 ms,
the step 3 ms longer: the step's change, the phases by change with their
share, the phase that lost most, its markdown; buckets: the collectives'
medians, bucket 1's all-reduce 0.4 ms longer on rank 1 and bucket 0 ready
0.2 ms later on rank 0 named, the collectives' names, a side without
buckets.csv; select: the configurations broken down (failed ones never),
a steps.csv without a phase column reported, not raised.
Usage: test_dpstools_tracediff.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools tracediff " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("phases", "breakdown", "buckets", "select")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import os
import shutil
import statistics
import tempfile

from dpstools import tracediff
from dpstools.judge import Results
from dpstools.results import PHASES
from helpers import copy_fixture, edit, expect, rows_of, run_cases

CID = "ddp-small-fp32-sgd-g2-b32-bk25"  # accum-host: 4 steps on ranks 0 and 1, 2 buckets


def close(a, b, tol=1e-6):
    return a is not None and b is not None and abs(a - b) <= tol


def medians_of(folders):
    """{rank: {phase: median}} of CID's steps.csv rows in folders, pooled."""
    samples = {}
    for folder in folders:
        for r in rows_of(os.path.join(folder, "steps.csv")):
            if r["config_id"] == CID:
                for ph in PHASES:
                    samples.setdefault(int(r["rank"]), {}).setdefault(ph, []).append(
                        float(r[ph + "_ms"]))
    return {rank: {ph: statistics.median(xs) for ph, xs in by.items()}
            for rank, by in samples.items()}


def slowed(tmp, name, fixture="accum-host"):
    """A copy of the fixture: CID's step 3 ms longer, rank 1's backward 3 ms
    and rank 0's forward 1 ms; bucket 1's all-reduce on rank 1 1.1 -> 1.5 ms,
    bucket 0 ready on rank 0 0.8 -> 1.0 ms."""
    folder = copy_fixture(fixture, tmp, name)

    def add(r, col, ms):
        r[col] = f"{float(r[col]) + ms:.4f}"

    def steps(rows):
        for r in rows:
            if r["config_id"] == CID:
                add(r, "step_ms", 3)
                add(r, "backward_ms" if r["rank"] == "1" else "forward_ms", 3 if r["rank"] == "1"
                    else 1)
        return rows

    def buckets(rows):
        for r in rows:
            if r["config_id"] == CID and (r["bucket"], r["rank"]) == ("1", "1"):
                r["allreduce_ms"] = "1.5000"
            if r["config_id"] == CID and (r["bucket"], r["rank"]) == ("0", "0"):
                r["ready_ms"] = "1.0000"
        return rows
    edit(os.path.join(folder, "steps.csv"), steps)
    edit(os.path.join(folder, "buckets.csv"), buckets)
    return folder


def case_phases(fixtures):
    """phase_medians: every phase's median on each rank as taken here (rank
    1's backward: 4.4620 and 4.4704 of 4.4300 .. 4.5698, 4.4662); a side of
    two runs (the fixture, its slowed copy) the median of the 8 samples; an
    empty cell left out of its median."""
    accum = os.path.join(fixtures, "accum-host")
    got = tracediff.Side(Results(accum)).phase_medians(CID)
    want = medians_of([accum])
    expect(close(want[1]["backward"], 4.4662), f"the test's own median {want[1]['backward']}")
    expect(sorted(got) == [0, 1], f"ranks {sorted(got)}")
    bad = [(r, ph, got[r].get(ph), x) for r in want for ph, x in want[r].items()
           if not close(got[r].get(ph), x)]
    expect(not bad, f"(rank, phase, phase_medians, expected): {bad}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = os.path.join(tmp, "runs")
        os.makedirs(runs)
        shutil.copytree(accum, os.path.join(runs, "run-001"))
        slowed(runs, "run-002")
        side = tracediff.Side(Results(runs))
        got = side.phase_medians(CID)
        want = medians_of([os.path.join(runs, "run-001"), os.path.join(runs, "run-002")])
        expect(close(want[1]["backward"], (4.5698 + 7.4300) / 2), "pooled median by hand")
        bad = [(r, ph, got[r].get(ph), x) for r in want for ph, x in want[r].items()
               if not close(got[r].get(ph), x)]
        expect(not bad, f"pooled: (rank, phase, phase_medians, expected): {bad}")
        gap = copy_fixture("accum-host", tmp, "gap")  # rank 0's optimizer_ms of step 3 empty
        edit(os.path.join(gap, "steps.csv"), lambda rows: [
            {**r, "optimizer_ms": ""} if (r["config_id"], r["step"], r["rank"]) == (CID, "3", "0")
            else r for r in rows])
        got = tracediff.Side(Results(gap)).phase_medians(CID)[0]["optimizer"]
        expect(close(got, 0.0971), f"an empty cell left out: {got}, expected the median of "
               f"0.0971, 0.0915, 0.1274")


def case_breakdown(fixtures):
    """breakdown: the step 12.0 -> 15.0 ms (+25 %); backward first (+3 ms on
    rank 1, 100 % of the change), forward (+1 ms on rank 0, 33 %), the
    unchanged phases after (rank 0, the lowest, on ties), the phases at 0 on
    both sides left out, allreduce (overlapped) last; backward lost most.
    markdown and lost_line say so."""
    accum = os.path.join(fixtures, "accum-host")
    base = medians_of([accum])
    with tempfile.TemporaryDirectory() as tmp:
        b = tracediff.breakdown(tracediff.Side(Results(accum)),
                                tracediff.Side(Results(slowed(tmp, "cur"))), CID)
    expect(b["unit"] == "rank" and close(b["base_step_ms"], 12.0) and
           close(b["new_step_ms"], 15.0) and close(b["delta_ms"], 3.0) and
           close(b["delta_pct"], 25.0) and b["notes"] == [],
           f"the step: {({k: b[k] for k in ('unit', 'base_step_ms', 'new_step_ms', 'delta_ms')})}")
    names = [r["phase"] for r in b["phases"]]
    want = ["backward", "forward", "load", "loss", "allreduce_exposed", "optimizer", "allreduce"]
    expect(names == want, f"phases {names}, expected {want}")
    back, fwd = b["phases"][0], b["phases"][1]
    expect(back["rank"] == 1 and close(back["delta_ms"], 3.0) and close(back["share_pct"], 100.0)
           and close(back["base_ms"], base[1]["backward"]) and
           close(back["new_ms"], base[1]["backward"] + 3), f"backward {back}")
    expect(fwd["rank"] == 0 and close(fwd["delta_ms"], 1.0) and close(fwd["share_pct"], 100 / 3)
           and close(fwd["base_ms"], base[0]["forward"]), f"forward {fwd}")
    rest = b["phases"][2:]
    expect(all(r["rank"] == 0 and r["delta_ms"] == 0 and r["share_pct"] == 0 for r in rest) and
           [r["overlapped"] for r in rest] == [False] * 4 + [True], f"unchanged phases {rest}")
    expect(b["lost"]["phase"] == "backward" and b["lost"]["rank"] == 1 and
           close(b["lost"]["delta_ms"], 3.0), f"lost {b['lost']}")
    expect(tracediff.lost_line(b) == "lost most in: backward (+3.000 ms on rank 1)",
           tracediff.lost_line(b))
    expect(tracediff.lost_line({"lost": None}) == "lost most in: nothing (no phase is slower)",
           "no phase slower")
    md = tracediff.markdown([b, {"config": "x", "error": "steps.csv: no column y"}])
    for needle in (f"#### {CID}: step 12.000 → 15.000 ms (+3.000 ms, +25.0 %)",
                   f"| backward | {base[1]['backward']:.3f} | {base[1]['backward'] + 3:.3f} | "
                   f"+3.000 | 100 % | 1 |",
                   f"| forward | {base[0]['forward']:.3f} | {base[0]['forward'] + 1:.3f} | "
                   f"+1.000 | 33 % | 0 |",
                   "| allreduce (overlaps backward) |", "| phase | base ms | new ms | Δ ms | "
                   "% of Δ | rank |", "#### x\n\nno breakdown: steps.csv: no column y",
                   "lost most in: backward (+3.000 ms on rank 1)"):
        expect(needle in md, f"markdown lacks {needle!r}:\n{md}")
    expect(tracediff.markdown([]) == "", "no breakdowns: a section")
    expect(tracediff.fmt_share(None) == "-" and tracediff.fmt_share(33.4) == "33 %", "fmt_share")


def case_buckets(fixtures):
    """bucket_medians: each collective's figures on each rank (rank 0 of a
    one-rank run: ready_ms alone), two runs' medians; bucket_line names bucket 1's all-reduce
    (+0.4 ms, rank 1) and bucket 0 (ready +0.2 ms, rank 0); the collectives'
    names; one side or neither with buckets.csv."""
    accum = os.path.join(fixtures, "accum-host")
    side = tracediff.Side(Results(accum))
    got = side.bucket_medians(CID)
    k0, k1 = ("all-reduce", "backward", 0, 0), ("all-reduce", "backward", 1, 0)
    want = {k0: {0: {"ready_ms": 0.8, "allreduce_begin_ms": 0.85, "allreduce_ms": 1.1},
                 1: {"ready_ms": 0.81, "allreduce_begin_ms": 0.86, "allreduce_ms": 1.1}},
            k1: {0: {"ready_ms": 2.4, "allreduce_begin_ms": 2.45, "allreduce_ms": 1.1},
                 1: {"ready_ms": 2.41, "allreduce_begin_ms": 2.46, "allreduce_ms": 1.1}}}
    expect(got == want, f"bucket_medians {got}, expected {want}")
    one = side.bucket_medians("ddp-small-fp32-sgd-g1-b16-bk25")
    expect(one == {k0: {0: {"ready_ms": 0.8}}, k1: {0: {"ready_ms": 2.4}}}, f"one rank: {one}")
    with tempfile.TemporaryDirectory() as tmp:
        cur = tracediff.Side(Results(slowed(tmp, "cur"))).bucket_medians(CID)
        runs = os.path.join(tmp, "runs")
        os.makedirs(runs)
        shutil.copytree(accum, os.path.join(runs, "run-001"))
        slowed(runs, "run-002")
        pooled = tracediff.Side(Results(runs)).bucket_medians(CID)
    expect(close(pooled[k1][1]["allreduce_ms"], (1.1 + 1.5) / 2) and
           close(pooled[k0][0]["ready_ms"], (0.8 + 1.0) / 2) and
           close(pooled[k0][1]["ready_ms"], 0.81), f"two runs pooled: {pooled}")
    line = tracediff.bucket_line(got, cur, "rank")
    expect(line == "buckets (2 all-reduces): bucket 1's all-reduce grew most: +0.400 ms "
                   "(1.100 → 1.500 ms, rank 1); bucket 0 became ready +0.200 ms later "
                   "(0.800 → 1.000 ms after backward began, rank 0)", f"bucket_line {line!r}")
    changes = {(k[2], c): (r, round(d, 6)) for k, c, r, _, _, d in
               tracediff.bucket_changes(got, cur)}
    expect(changes == {(0, "ready_ms"): (0, 0.2), (0, "allreduce_begin_ms"): (0, 0.0),
                       (0, "allreduce_ms"): (0, 0.0), (1, "ready_ms"): (0, 0.0),
                       (1, "allreduce_begin_ms"): (0, 0.0), (1, "allreduce_ms"): (1, 0.4)},
           f"bucket_changes {changes}")
    expect(tracediff.bucket_line(got, got, "rank") == "buckets (2 all-reduces): no collective "
           "took longer or became ready later", "unchanged buckets")
    expect(tracediff.bucket_line(None, None, "rank") is None, "no buckets: a line")
    line = tracediff.bucket_line(None, got, "rank")
    expect(line.startswith("buckets: only the current run has buckets.csv rows for this "
                           "configuration (2 collective(s))"), f"one side: {line!r}")
    ci = tracediff.Side(Results(os.path.join(fixtures, "ci-host")))
    expect(ci.bucket_medians(CID) is None, "ci-host has no buckets.csv")
    for key, name in [(("all-reduce", "backward", 2, 0), "bucket 2's all-reduce"),
                      (("all-reduce", "backward", 2, 1), "bucket 2's all-reduce, micro-step 1"),
                      (("all-gather", "forward", 3, 0), "unit 3's all-gather (forward)"),
                      (("all-gather", None, 3, 0), "unit 3's all-gather"),
                      (("reduce-scatter", "backward", 1, 0), "unit 1's reduce-scatter")]:
        expect(tracediff.collective_name(key) == name, f"{key}: {tracediff.collective_name(key)}")
    expect(tracediff.ready_name(("all-reduce", "backward", 2, 0)) == "bucket 2" and
           tracediff.ready_name(("all-reduce", "backward", 2, 1)) ==
           "bucket 2's all-reduce, micro-step 1", "ready_name")
    expect(tracediff.worst({2: 3.0, 0: 1.0, 1: 3.0}, True) == (1, 3.0) and
           tracediff.worst({2: -1.0, 0: -1.0, 1: 0.5}, False) == (0, -1.0), "worst")


def case_select(fixtures):
    """select: 'all' every configuration both sides ran ok (mixed-host's oom
    and skipped ones never, nor one failed on either side), 'slower' those
    whose step_ms is REGRESSION or WARN and grew, 'none' none; breakdowns:
    a configuration whose steps.csv lacks backward_ms gets an error naming
    it, the others their breakdown."""
    mixed = Results(os.path.join(fixtures, "mixed-host"))
    with open(os.path.join(fixtures, "mixed-host", "runs.csv"), newline="") as f:
        runs = list(csv.DictReader(f))
    ok = sorted(r["config_id"] for r in runs if r["status"] == "ok")
    expect(len(ok) < len(runs), "mixed-host: no failed configuration")
    got = tracediff.select([], mixed, mixed, "all")
    expect(got == ok, f"select all {got}, expected {ok}")
    a, b, c, d = ok[:4]
    rows = [{"config": a, "metric": "step_ms", "status": "REGRESSION", "delta_pct": 5.0},
            {"config": b, "metric": "step_ms", "status": "WARN", "delta_pct": 2.0},
            {"config": c, "metric": "step_ms", "status": "REGRESSION", "delta_pct": -5.0},
            {"config": d, "metric": "samples_per_s", "status": "REGRESSION", "delta_pct": 5.0},
            {"config": d, "metric": "step_ms", "status": "SAME", "delta_pct": 0.0}]
    failed = next(r["config_id"] for r in runs if r["status"] != "ok")
    rows.append({"config": failed, "metric": "step_ms", "status": "REGRESSION", "delta_pct": 9.0})
    expect(tracediff.select(rows, mixed, mixed, "slower") == sorted([a, b]),
           f"select slower {tracediff.select(rows, mixed, mixed, 'slower')}")
    expect(tracediff.select(rows, mixed, mixed, "none") == [], "select none")
    with tempfile.TemporaryDirectory() as tmp:  # a's run failed on one side
        broken = copy_fixture("mixed-host", tmp, "broken")
        edit(os.path.join(broken, "runs.csv"), lambda rs: [
            {**r, "status": "error", "error": "a failure"} if r["config_id"] == a else r
            for r in rs])
        edit(os.path.join(broken, "steps.csv"), lambda rs: [r for r in rs
                                                            if r["config_id"] != a])
        broken = Results(broken)
        for base, cur in ((broken, mixed), (mixed, broken)):
            got = tracediff.select(rows, base, cur, "all")
            expect(got == [c for c in ok if c != a], f"{a} failed on one side: {got}")
    accum = os.path.join(fixtures, "accum-host")
    with tempfile.TemporaryDirectory() as tmp:
        cur = copy_fixture("accum-host", tmp, "cur")
        edit(os.path.join(cur, "steps.csv"), lambda rs: [
            {k: v for k, v in r.items() if k != "backward_ms"} for r in rs])
        got = tracediff.breakdowns([], Results(accum), Results(cur), "all")
    n = len(rows_of(os.path.join(accum, "runs.csv")))
    errors = [x for x in got if "error" in x]
    expect(len(got) == n and len(errors) == n and
           all("backward_ms" in x["error"] for x in errors),
           f"steps.csv without backward_ms: {len(got)} breakdowns of {n}, {errors[:1]}")
    got = tracediff.breakdowns([], Results(accum), Results(accum), "all")
    expect(len(got) == n and all("error" not in x and x["lost"] is None for x in got),
           f"accum-host against itself: {[x.get('error') or x['lost'] for x in got]}")


if __name__ == "__main__":
    run_cases(globals())
