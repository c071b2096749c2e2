#!/usr/bin/python3
"""Where a step lost its time. straggler verdict: culprit.straggler's verdict
on buckets.csv rows computed, as dpscale computes them, from ready times
drawn with fixed seeds (ddp on 2 and 3 ranks, 4 buckets, 60 traced steps,
3 % jitter and, in 1 of 10 of each rank's steps, a burst of 1 to 8 ms, as
another process on its core gives): a rank slowed by 50 % or 200 % (the
rank alternating with the seed) is named in each of 10 seeds; none is
named where a rank is slowed by 10 % (below the 20 % threshold) or not at
all, where a rank's bursts hit 3 of 5 of its steps (late in those, not in
3 of 4), or where a rank slowed by 50 % has buckets of 0.02 to 0.08 ms of
compute (its lateness under the timers' noise, 0.05 ms). straggler: a
live ddp run on 2 ranks with --inject-slowdown 200@1 and one without,
checked for their structure only (each rank's row of every bucket with
its figures, the two ranks' lateness opposite, a latest rank, summary.md's
row naming it or none): on a busy machine a live verdict is a
measurement, printed, not asserted. summary: summary.md's sections read
for their numbers from a run whose partition.csv, phases.csv and
buckets.csv cells were given known values (the partition row, each
phase's min / median / max, the wait and transfer sums and busbw, the
straggler named and then none).
Usage: test_culprit.py DPSCALE straggler_verdict|straggler|summary; exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("culprit straggler verdict", DPSCALE, "straggler_verdict", suite=NOSAN,
              timeout=120),
         test("culprit straggler", DPSCALE, "straggler", suite=NOSAN, timeout=300),
         test("culprit summary", DPSCALE, "summary", suite=NOSAN, timeout=120)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math
import os
import random
import re
import sys
import tempfile

from dpstools import culprit
from dpstools.folder import Folder
from dpstools.stats import median, quantile
from helpers import dpscale, edit, expect, run_cases
from plot_helpers import draw, section

SEEDS = range(10)
STEPS, BUCKETS = 60, 4
BURST_SHARE = 0.10  # of a rank's steps in which another process takes its core
BURSTY_SHARE = 0.60  # a rank late in 3 of 5 steps: fewer than the 3 of 4 of a straggler


def ready_times(rng, ranks, slow_rank, slowdown, bursty_rank=None, unit_ms=1.0):
    """{(rank, step): [ms from the rank's step start to each bucket's ready mark]}:
    bucket i after (i + 1) units of compute, times 1 + slowdown on slow_rank, each
    with 3 % jitter; in BURST_SHARE of a rank's steps (bursty_rank: BURSTY_SHARE) a
    burst of 1 to 8 units from a random bucket on."""
    ready = {}
    for t in range(STEPS):
        for r in range(ranks):
            stretch = 1 + (slowdown if r == slow_rank else 0.0)
            share = BURSTY_SHARE if r == bursty_rank else BURST_SHARE
            burst_at, burst = BUCKETS, 0.0
            if rng.random() < share:
                burst_at, burst = rng.randrange(BUCKETS), rng.uniform(1, 8)
            ready[r, t] = [unit_ms * ((i + 1) * stretch * rng.gauss(1, 0.03) +
                                      (burst if i >= burst_at else 0.0)) for i in range(BUCKETS)]
    return ready


def bucket_rows(ready, ranks):
    """buckets.csv's rows of those ready times, as src/results/step_parts.c and
    results.c compute them: a step's lateness against the other ranks' median,
    its median and 25th percentile over the steps, the median ready time."""
    rows = []
    for r in range(ranks):
        for i in range(BUCKETS):
            late = [ready[r, t][i] - median([ready[q, t][i] for q in range(ranks) if q != r])
                    for t in range(STEPS)]
            rows.append({"config_id": "synthetic", "rank": str(r), "bucket": str(i),
                         "micro_step": "0", "phase": "backward", "collective": "all-reduce",
                         "late_ms": f"{median(late):.4f}",
                         "late_p25_ms": f"{quantile(late, 0.25):.4f}",
                         "ready_step_ms": f"{median([ready[r, t][i] for t in range(STEPS)]):.4f}"})
    return rows


def verdict(seed, ranks, slow_rank=None, slowdown=0.0, bursty_rank=None, unit_ms=1.0):
    """(the rank culprit.straggler names or None, the latest rank's share) of one seed's rows."""
    rows = bucket_rows(ready_times(random.Random(seed), ranks, slow_rank, slowdown,
                                   bursty_rank, unit_ms), ranks)
    rank, _, _, _, share, is_named = culprit.straggler(rows)
    return (rank if is_named else None), share


def case_straggler_verdict(_binary):
    """Each seed's verdict is the planted rank, or none where nothing (or too
    little, or bursts alone) slowed a rank."""
    wrong = []
    for ranks in (2, 3):
        for slowdown, named in ((2.0, True), (0.5, True), (0.1, False), (0.0, False)):
            for seed in SEEDS:
                slow = seed % ranks if slowdown else None
                got, share = verdict(seed, ranks, slow, slowdown)
                if got != (slow if named else None):
                    wrong.append(f"{ranks} ranks, rank {slow} slowed {slowdown:.0%}, seed {seed}: "
                                 f"named {got} (share {share:.3f})")
        for seed in SEEDS:
            got, share = verdict(seed, ranks, bursty_rank=seed % ranks)
            if got is not None:
                wrong.append(f"{ranks} ranks, rank {seed % ranks} in bursts in {BURSTY_SHARE:.0%} "
                             f"of its steps, seed {seed}: named {got} (share {share:.3f}), "
                             f"expected none")
            got, share = verdict(seed, ranks, seed % ranks, 0.5, unit_ms=0.02)
            if got is not None:
                wrong.append(f"{ranks} ranks, rank {seed % ranks} slowed 50 % of 0.02 ms a bucket, "
                             f"seed {seed}: named {got} (share {share:.3f}), expected none under "
                             f"{culprit.STRAGGLER_MIN_MS} ms")
    expect(not wrong, "culprit.straggler on synthetic buckets.csv rows (threshold "
           f"{culprit.STRAGGLER_SHARE:.0%}):\n" + "\n".join(wrong))


RUN = ["run", "--mode", "ddp", "--model", "small", "--gpus", "2", "--steps", "60", "--warmup",
       "2", "--trace-steps", "60"]
FIGURES = ("late_ms", "late_p25_ms", "ready_step_ms")


def live_rows(binary, tmp, name, *extra):
    """A live ddp run's buckets.csv rows of its one configuration, with each
    rank's row of every bucket and its figures."""
    dpscale(binary, *RUN, "--seed", "1", *extra, out=tmp, name=name, check_rc=0)
    by = culprit.bucket_rows(Folder(os.path.join(tmp, name)))
    expect(len(by) == 1, f"{name}: buckets.csv holds configurations {sorted(by)}, expected one")
    (cid, rows), = by.items()
    keys = {r: {(b["micro_step"], b["bucket"], b["phase"]) for b in rows if b["rank"] == r}
            for r in ("0", "1")}
    expect(keys["0"] and keys["0"] == keys["1"],
           f"{name}: buckets.csv's buckets of rank 0 {sorted(keys['0'])} and rank 1 "
           f"{sorted(keys['1'])}, expected the same, at least one")
    empty = [(b["rank"], b["bucket"], c) for b in rows for c in FIGURES if b.get(c) in (None, "")]
    expect(not empty, f"{name}: buckets.csv cells without a figure (rank, bucket, column): {empty}")
    return cid, rows


def expect_opposite(name, rows):
    """On 2 ranks each step's lateness of one rank is minus the other's, and so its median."""
    late = {(b["rank"], b["micro_step"], b["bucket"], b["phase"]): float(b["late_ms"])
            for b in rows}
    off = [(k[1:], v, late[("1",) + k[1:]]) for k, v in late.items() if k[0] == "0" and
           abs(v + late[("1",) + k[1:]]) > 2e-4]
    expect(not off, f"{name}: buckets.csv's late_ms of ranks 0 and 1 not opposite (bucket, "
           f"rank 0, rank 1): {off}")


def case_straggler(binary):
    """Live runs, with rank 1 slowed 200 % and without: their buckets.csv and
    summary.md's straggler row in shape; the verdicts printed, not judged."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("planted", ["--inject-slowdown", "200@1"]), ("clean", [])):
            cid, rows = live_rows(binary, tmp, name, *extra)
            expect_opposite(name, rows)
            rank, late, most, others, share, is_named = culprit.straggler(rows)
            expect(rank in (0, 1) and all(math.isfinite(x) for x in (late, most, others, share)),
                   f"{name}: culprit.straggler gave rank {rank}, figures {late}, {most}, "
                   f"{others}, {share}; expected rank 0 or 1 and finite figures")
            md, _ = draw(os.path.join(tmp, name), os.path.join(tmp, name + "-plots"))
            row = cells(md, culprit.STRAGGLERS, cid)
            want = f"**rank {rank}**" if is_named else "none"
            expect(row[3] == str(rank) and row[-1] == want,
                   f"{name}: summary.md's straggler row {row}, expected latest rank {rank} and "
                   f"verdict {want}")
            print(f"{name}: latest rank {rank}, {most:.3f} ms late in 3 of 4 steps of "
                  f"{others:.3f} ms ({share:.0%}): {'named' if is_named else 'not named'}")


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
    run_cases(globals())
