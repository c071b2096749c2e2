#!/usr/bin/env python3
"""plot.py on gradient accumulation and half precision (tests/fixtures/accum-host,
figures set by hand): accum N and ddp's --no-sync off drawn as lines of their
own, precisions in panels of their own; summary.md's table by accumulation and
its skipped steps; the diagnosis' all-reduces per optimizer step, what no_sync
saved and dp's replicate and reduce per micro-step; and folders written before
those columns read with the defaults of the accumulation contract.
Usage: test_plot_accum.py FIXTURE CASE | --list (FIXTURE: a results folder);
exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

ACCUM = FIXTURES + "/accum-host"
TESTS = [test("plot accum " + c.replace("_", " "), ACCUM, c, suite=NOSAN, timeout=300)
         for c in ("charts", "summary", "diagnosis", "defaults", "predicted")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import shutil
import sys
import tempfile

from helpers import (FIXTURES as FIXTURE_DIR, copy_fixture, edit, expect, read_table, rows_of,
                     run_cases, write)
from plot_helpers import draw, section
from dpstools import results
from dpstools.folder import Folder
from dpstools.results import COLUMNS, DEFAULTS, InputError

DDP2 = "ddp-small-fp32-sgd-g2-b32-acc2-bk25"
SYNCALL2 = "ddp-small-fp32-sgd-g2-b32-acc2-syncall-bk25"
DP2, DP1 = "dp-small-fp32-sgd-g2-b32-acc2", "dp-small-fp32-sgd-g2-b32"


def copy(fixture, tmp):
    dst = os.path.join(tmp, "res")
    shutil.copytree(fixture, dst)
    return dst


def has(text, *wants, where="summary.md"):
    for want in wants:
        expect(want in text, f"{where} lacks {want!r}:\n{text[:5000]}")


def case_charts(fixture):
    """Each accumulation and ddp's --no-sync off a line of its own on the
    scaling and efficiency charts (fp16 a panel of its own), and a bar of its
    own on phases.png and gpu0_imbalance.png."""
    with tempfile.TemporaryDirectory() as tmp:
        _, texts = draw(copy(fixture, tmp), os.path.join(tmp, "out"))
        for chart in ("scaling.png", "efficiency.png"):
            has(" | ".join(texts[chart]), "dp (weak scaling)", "dp, accum 2 (weak scaling)",
                "ddp (weak scaling)", "ddp, accum 2 (weak scaling)",
                "ddp-syncall, accum 2 (weak scaling)", "small, fp16, sgd", "small, fp32, sgd",
                "-syncall: ddp with --no-sync off", where=chart)
        has(" | ".join(texts["phases.png"]), "ddp-syncall\naccum 2\n2 GPU", "dp\naccum 2\n1 GPU",
            "ddp\n2 GPU", "unscale", where="phases.png")
        has(" | ".join(texts["gpu0_imbalance.png"]), "ddp-syncall\naccum 2\n2 GPU",
            "dp, accum 2", where="gpu0_imbalance.png")


def glance(md):
    """The At a glance table: [{column: cell}]."""
    rows = [l for l in section(md, "At a glance").splitlines() if l.startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in l.strip("|").split(" | ")))) for l in rows[2:]]


def case_summary(fixture):
    """At a glance has a row per accumulation, a column for ddp-syncall and
    ddp's speed-up over it (what no_sync saved); Skipped steps names each
    fp16 configuration with its skipped steps and loss scales."""
    with tempfile.TemporaryDirectory() as tmp:
        md, _ = draw(copy(fixture, tmp), os.path.join(tmp, "out"))
        rows = {(r["precision"], r["accum"], r["GPUs"]): r for r in glance(md)}
        expect(set(rows) == {("fp16", "1", "2"), ("fp32", "1", "1"), ("fp32", "1", "2"),
                             ("fp32", "2", "1"), ("fp32", "2", "2")}, f"At a glance: {rows}")
        acc = rows[("fp32", "2", "2")]
        expect(acc["ddp samples/s"] == f"{32000 / 12.5:.1f}" and
               acc["ddp-syncall samples/s"] == f"{32000 / 14.5:.1f}" and
               acc["ddp speed-up over ddp-syncall"].startswith(f"{14.5 / 12.5:.2f}x [") and
               acc["dp samples/s"] == f"{32000 / 9.5:.1f}", f"At a glance, accum 2: {acc}")
        expect(rows[("fp32", "1", "2")]["ddp-syncall samples/s"] == "-" and
               "ddp-syncall GPU-0 memory ratio" not in acc, f"At a glance: {rows}")
        part = section(md, "Skipped steps")
        has(part, "| dp-small-fp16-sgd-g2-b32 | fp16 | 1 | 4 | 65536 | 32768 |",
            "| ddp-small-fp16-sgd-g2-b32-bk25 | fp16 | 0 | 4 | 65536 | 65536 |",
            "1 timed step skipped over 2 configurations.")
        has(md, "### small, fp32, sgd, accum 2, weak scaling, 2 devices: dp and ddp",
            "### small, fp16, sgd, weak scaling, 2 devices: dp and ddp")


def accum_part(md):
    part = section(md, "Diagnosis")
    expect("### Gradient accumulation\n" in part, f"no Gradient accumulation:\n{part}")
    return part.split("### Gradient accumulation\n", 1)[1].split("\n### ")[0]


def case_diagnosis(fixture):
    """All-reduces per optimizer step from buckets.csv's rows per rank
    (nbuckets with no_sync, N x nbuckets without), one that does not match
    called out; what no_sync saved, with its interval (within noise where it
    holds 1); dp's replicate and reduce per micro-step against accum 1's."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy(fixture, tmp)
        md, _ = draw(folder, os.path.join(tmp, "out"))
        part = accum_part(md)
        has(part, f"{DDP2}: 2 all-reduces per optimizer step (2 buckets in 1 micro-step of 2; "
                  "micro-steps 1 to N-1 under no_sync, the last all-reduces: once the buckets, "
                  "as expected)",
            f"{SYNCALL2}: 4 all-reduces per optimizer step (2 buckets in 2 micro-steps of 2; "
            "every micro-step all-reduces (--no-sync off): 2 x the buckets, as expected)",
            f"no_sync saved 2.000 ms a step ({DDP2} 12.500 ms, {SYNCALL2} with every micro-step "
            f"all-reduced 14.500 ms, 14 % of its step): ddp reaches 1.16x ddp-syncall's "
            f"throughput (95 % interval 1.14–1.18x)",
            f"{DP2}: DataParallel's replicate and reduce ran 2 times per optimizer step",
            f"0.508 ms a step on device 0, 5 % of its step, against 0.254 ms at accum 1 "
            f"({DP1}, 2.00x)", where="the diagnosis")
        expect("g1-b16-acc2" not in part, f"one device diagnosed for accumulation:\n{part}")
        # a micro-step's all-reduces missing, and no_sync within noise
        buckets = os.path.join(folder, "buckets.csv")
        edit(buckets, lambda rows: [r for r in rows if not (r["config_id"] == SYNCALL2 and
                                                             r["micro_step"] == "0")])
        on = [r for r in rows_of(os.path.join(folder, "steps.csv")) if r["config_id"] == DDP2]
        edit(os.path.join(folder, "steps.csv"), lambda rows: [
            dict(r, step_ms=next(o["step_ms"] for o in on if (o["step"], o["rank"]) ==
                                 (r["step"], r["rank"])))
            if r["config_id"] == SYNCALL2 else r for r in rows])
        edit(os.path.join(folder, "runs.csv"), lambda rows: [
            dict(r, step_ms_median="12.5000", samples_per_s="2560.000")
            if r["config_id"] == SYNCALL2 else r for r in rows])
        part = accum_part(draw(folder, os.path.join(tmp, "out2"))[0])
        has(part, f"{SYNCALL2}: 2 all-reduces per optimizer step (2 buckets in 1 micro-step of "
                  "2; every micro-step all-reduces (--no-sync off): 2 x the buckets, expected 4: "
                  "check the run)", "no_sync saved 0.000 ms a step", "which holds 1: within noise",
            where="the diagnosis")
        os.remove(buckets)
        part = accum_part(draw(folder, os.path.join(tmp, "out3"))[0])
        has(part, f"{DDP2}: micro-steps 1 to N-1 under no_sync, the last all-reduces: once the "
                  "buckets per optimizer step (buckets.csv has no rows of it",
            where="the diagnosis")


def case_defaults(fixture):
    """The fixture has every column in dpscale's order; results-host, written
    before accumulation, reads with the contract's defaults (accum 1, no_sync
    on for ddp, micro_steps 1, skipped 0, loss_scale empty, unscale_ms 0,
    buckets' micro_step 0); and a bucket twice in one micro-step is refused."""
    for name in ("runs.csv", "steps.csv", "phases.csv", "devices.csv", "buckets.csv"):
        read_table(os.path.join(fixture, name))
    old = os.path.join(FIXTURE_DIR, "results-host")
    runs = results.read_csv(os.path.join(old, "runs.csv"), COLUMNS["runs.csv"])
    for r in runs:
        want = ("1", "on" if r["mode"] == "ddp" else "", "")
        expect((r["accum"], r["no_sync"], r["skipped_steps"]) == want and
               results.accum(r) == 1 and results.line(r) == results.strategy(r),
               f"{r['config_id']}: accum, no_sync, skipped_steps {r['accum']!r}, "
               f"{r['no_sync']!r}, {r['skipped_steps']!r}")
    steps = results.read_steps(os.path.join(old, "steps.csv"),
                               ["micro_steps", "skipped", "loss_scale", "unscale_ms"])
    for g in steps.of.values():
        v = g.values
        expect(set(v["micro_steps"]) == {1.0} and set(v["skipped"]) == {0.0} and
               all(x != x for x in v["loss_scale"]) and set(v["unscale_ms"]) == {0.0},
               f"steps.csv's defaults: {v}")
    with tempfile.TemporaryDirectory() as tmp:
        old_buckets = os.path.join(tmp, "buckets.csv")
        write(old_buckets, "config_id,rank,bucket,bytes,ready_ms,allreduce_begin_ms,allreduce_ms,"
              "traced_steps\nddp-a,0,0,4096,0.5,0.6,0.2,3\nddp-a,0,1,4096,0.9,1.0,0.2,3\n")
        rows = results.read_csv(old_buckets, COLUMNS["buckets.csv"])
        expect([r["micro_step"] for r in rows] == ["0", "0"], f"buckets.csv: {rows}")
        with open(old_buckets, "a") as f:
            f.write("ddp-a,0,1,4096,0.9,1.0,0.2,3\n")
        refused(lambda: results.read_csv(old_buckets), "ddp-a: rank 0, bucket 1 again")
        folder = copy_fixture("accum-host", tmp, "res")
        with open(os.path.join(folder, "buckets.csv"), "a") as f:
            f.write(f"{SYNCALL2},1,0,1,1052672,0.8100,0.8600,1.1000,3,all-reduce,backward,,,,,\n")
        refused(lambda: Folder(folder), f"{SYNCALL2}: rank 1, micro_step 1, bucket 0, "
                "collective all-reduce, phase backward again")
        expect(DEFAULTS["steps.csv"]["unscale_ms"] == "0", "unscale_ms's default is not 0")


def refused(fn, needle):
    try:
        fn()
    except InputError as e:
        expect(needle in str(e), f"refused, but the message lacks {needle!r}: {e}")
        return
    raise AssertionError(f"not refused: {needle}")


def prediction(mode, n, step, accum="", no_sync=""):
    """A predictions.csv row of the small preset's series at 16 samples per GPU."""
    row = dict.fromkeys(COLUMNS["predictions.csv"], "0")
    row.update(machine="m", workload="w", model="small", precision="fp32", optimizer="sgd",
               source="", mode=mode, ngpus=str(n), nodes="1", batch_per_gpu="16", accum=accum,
               no_sync=no_sync, status="ok", note="", step_ms=f"{step:.4f}",
               samples_per_s=f"{16000 * n / step:.3f}", efficiency="1.0000")
    return row


def case_predicted(fixture):
    """Predictions with accum and no_sync are matched to the measured line of
    the same accumulation and --no-sync (ddp-syncall, accum 2); a
    predictions.csv without those columns is read as accum 1, no_sync on."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy(fixture, tmp)
        preds = [prediction("ddp", 2, 15.95, "2", "off"), prediction("ddp", 2, 11.0, "2", "on"),
                 prediction("dp", 2, 8.5, "1", "")]
        path = os.path.join(tmp, "predictions.csv")
        write(path, "\n".join(",".join(r[c] for c in COLUMNS["predictions.csv"])
                              for r in [dict(zip(COLUMNS["predictions.csv"],
                                                 COLUMNS["predictions.csv"]))] + preds) + "\n")
        md, texts = draw(folder, os.path.join(tmp, "out"), "--predictions", path)
        part = section(md, "Predicted against measured")
        has(part, "| small | fp32 | sgd | ddp-syncall, accum 2 | 2 | m | 15.9500 | 14.5000 | "
                  "+10.00 |", "| small | fp32 | sgd | ddp, accum 2 | 2 | m | 11.0000 | 12.5000 | "
                  "-12.00 |", "| small | fp32 | sgd | dp | 2 | m | 8.5000 | 8.5000 | +0.00 |")
        has(" | ".join(texts["scaling.png"]), "ddp-syncall, accum 2 predicted (m)",
            where="scaling.png")
        old = [c for c in COLUMNS["predictions.csv"] if c not in DEFAULTS["predictions.csv"]]
        write(path, "\n".join(",".join(r[c] for c in old) for r in
                              [dict(zip(old, old)), prediction("ddp", 2, 11.8)]) + "\n")
        (row,) = results.read_predictions(path)
        expect((row["accum"], row["no_sync"], row["unscale_ms"]) == ("1", "on", "0"),
               f"an older predictions.csv: {row}")


if __name__ == "__main__":
    run_cases(globals())
