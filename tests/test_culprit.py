#!/usr/bin/python3
"""Where a step lost its time. straggler: a rank slowed alone
(--inject-slowdown 200@RANK, RANK alternating with the seed) is named the
straggler in at least 9 of 10 seeded runs of ddp on 2 ranks (small model,
60 timed steps, all traced), and 10 runs without a planted slowdown name
none (it runs alone: another test's load on one core would make a real
straggler). summary: summary.md's sections read for their numbers from a
run whose partition.csv, phases.csv and buckets.csv cells were given known
values (the partition row, each phase's min / median / max, the wait and
transfer sums and busbw, the straggler named and then none).
Usage: test_culprit.py DPSCALE straggler|summary; exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("culprit straggler", DPSCALE, "straggler", suite=NOSAN, timeout=300,
              parallel=False),
         test("culprit summary", DPSCALE, "summary", suite=NOSAN, timeout=120)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import re
import sys
import tempfile

from dpstools import culprit
from dpstools.folder import Folder
from helpers import dpscale, edit, expect, run_cases
from plot_helpers import draw, section

RUN = ["run", "--mode", "ddp", "--model", "small", "--gpus", "2", "--steps", "60", "--warmup",
       "2", "--trace-steps", "60"]
RUNS = 10


def named(binary, tmp, seed, planted):
    """(named rank or None, its lateness in 3 of 4 steps, the others' time to the
    buckets, ms) of one seeded run."""
    name = f"s{seed}-{planted}"
    slow = ["--inject-slowdown", f"200@{planted}"] if planted is not None else []
    dpscale(binary, *RUN, "--seed", str(seed), *slow, out=tmp, name=name, check_rc=0)
    folder = Folder(os.path.join(tmp, name))
    (cid, rows), = culprit.bucket_rows(folder).items()
    rank, _, most, others, _, is_named = culprit.straggler(rows)
    return (rank if is_named else None), most, others


def case_straggler(binary):
    with tempfile.TemporaryDirectory() as tmp:
        planted = [(s % 2, named(binary, tmp, s, s % 2)) for s in range(RUNS)]
        clean = [named(binary, tmp, s, None) for s in range(RUNS)]
    hits = sum(rank == want for want, (rank, _, _) in planted)
    report = "; ".join(f"planted {w}: named {r} ({late:.2f} ms late of {others:.2f})"
                       for w, (r, late, others) in planted)
    expect(hits >= RUNS - 1, f"the planted rank named in {hits} of {RUNS} runs: {report}")
    wrong = [(r, late, others) for r, late, others in clean if r is not None]
    expect(not wrong, f"{len(wrong)} of {RUNS} runs without a slowdown named a straggler: {wrong}")


def cells(md, title, first):
    """The cells of the row of section `title` whose first cell is `first`."""
    for row in section(md, title).splitlines():
        c = [x.strip() for x in row.strip().strip("|").split("|")]
        if c and c[0] == first:
            return c
    expect(False, f"section {title}: no row {first!r}:\n{section(md, title)}")


def known_folder(binary, tmp):
    """A ddp run on 3 ranks with 5 buckets, its cells set to known values: the
    partition of each rank, forward's median on each device (3, 5, 4 ms), each
    bucket's transfer (1 ms), wait (rank r: 2 - r ms) and lateness (rank 2: 3 ms
    later than the others, which are 1 and 2 ms early; in 3 of 4 steps 2.5 ms;
    every rank's bucket ready 10 ms after its step began), the step's median 20 ms."""
    dpscale(binary, "run", "--mode", "ddp", "--model", "small", "--gpus", "3", "--steps", "3",
            "--warmup", "1", "--bucket-mb", "0.01", "--first-bucket-mb", "0.01", out=tmp, name="k",
            check_rc=0)
    k = os.path.join(tmp, "k")
    part = {"step_ms": "20", "compute_ms": "10", "overlap_ms": "2", "comm_exposed_ms": "3",
            "copies_ms": "1", "wait_peer_ms": "4", "idle_host_ms": "0"}
    edit(os.path.join(k, "partition.csv"), lambda rows: [{**r, **part} for r in rows])
    fwd = {"0": "3", "1": "5", "2": "4"}
    edit(os.path.join(k, "phases.csv"), lambda rows: [
        {**r, "median_ms": fwd[r["device"]]} if r["phase"] == "forward" else r for r in rows])
    late, p25 = {"0": "-1", "1": "-2", "2": "3"}, {"0": "-1.5", "1": "-2.5", "2": "2.5"}
    edit(os.path.join(k, "buckets.csv"), lambda rows: [
        {**r, "transfer_ms": "1", "wait_ms": str(2 - int(r["rank"])), "late_ms": late[r["rank"]],
         "late_p25_ms": p25[r["rank"]], "ready_step_ms": "10"} for r in rows])
    edit(os.path.join(k, "runs.csv"), lambda rows: [{**r, "step_ms_median": "20"} for r in rows])
    return k


def case_summary(binary):
    with tempfile.TemporaryDirectory() as tmp:
        k = known_folder(binary, tmp)
        folder = Folder(k)
        cid = folder.runs[0]["config_id"]
        buckets = [b for b in folder.buckets if b["rank"] == "0"]
        expect(len(buckets) == 5, f"buckets.csv: {len(buckets)} buckets of rank 0, expected 5")
        md, _ = draw(k, os.path.join(tmp, "plots"))
        row = cells(md, culprit.PARTITION, cid)
        expect(row[1:] == ["0", "20", "10 (50 %)", "2 (10 %)", "3 (15 %)", "1 (5 %)", "4 (20 %)",
                           "0 (0 %)"], f"partition row {row}")
        head = [c.strip() for c in section(md, culprit.ACROSS).split("\n| configuration |")[1]
                .split("\n")[0].strip(" |").split("|")]
        row = cells(md, culprit.ACROSS, cid)
        expect(row[1 + head.index("forward")] == "3 / 4 / 5 @1", f"forward across ranks: {row}")
        row = cells(md, culprit.WAITING, cid)
        nbytes = sum(int(b["bytes"]) for b in buckets)
        bus = 2 * 2 / 3 * nbytes / 5e-3 / 1e9
        expect(row[1:6] == ["all-reduce (backward)", "5", f"{nbytes / 2**20:.3g} MiB", "5",
                            "0 / 5 / 10"] and row[6] == f"{bus:.3g}", f"waiting row {row}, "
               f"expected 5 ms transfer, waits 0 / 5 / 10, busbw {bus:.3g}")
        row = cells(md, culprit.STRAGGLERS, cid)
        expect(row[3:] == ["2", "3", "2.5", "10", "25 %", "15", "**rank 2**"],
               f"straggler row {row}")
        edit(os.path.join(k, "buckets.csv"), lambda rows: [  # late in a burst, not in most steps
            {**r, "late_p25_ms": "1.5" if r["rank"] == "2" else "-0.75"} for r in rows])
        md, _ = draw(k, os.path.join(tmp, "plots2"))
        row = cells(md, culprit.STRAGGLERS, cid)
        expect(row[3:] == ["2", "3", "1.5", "10", "15 %", "15", "none"], f"straggler row below the "
               f"threshold {row}")
        expect(re.search(r"that share is at least 20 %", md), "the threshold is not stated")


if __name__ == "__main__":
    sys.exit(run_cases(globals()))
