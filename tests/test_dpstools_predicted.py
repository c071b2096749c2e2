#!/usr/bin/env python3
"""scripts/dpstools/predicted.py, imported, on a predictions.csv the test
writes for results-host's tiny model (dp on 1 and 2 GPUs, batch 8 a GPU,
measured 0.2378 and 0.4408 ms; a 4-GPU point out of memory, a skipped
ddp, batches with no weak-scaling run, a second machine, ddp with
--no-sync off). files: which predictions.csv files are drawn, a folder of
predictions alone; read: each row's derived fields, a missing column;
panels: the panel and line each prediction is drawn in; measured: the
errors against the measured medians, summary.md's table, largest error
and out-of-memory sentence, predictions_table, none measured.
Usage: test_dpstools_predicted.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools predicted " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("files", "read", "panels", "measured")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import os
import tempfile

from dpstools import predicted
from dpstools.folder import Folder
from dpstools.results import COLUMNS, InputError
from helpers import expect, run_cases, write

SERIES = ("tiny", "fp32", "sgd")
# (machine, mode, no_sync, accum, GPUs, batch per GPU, status, step_ms)
PREDICTIONS = [("m1", "dp", "", 1, 4, 8, "oom", 0.9),  # first: the lines sort by GPU count
               ("m1", "dp", "", 1, 1, 8, "ok", 0.25),
               ("m1", "dp", "", 1, 2, 8, "ok", 0.4),
               ("m1", "ddp", "on", 1, 2, 8, "skipped", None),
               ("m1", "dp", "", 1, 2, 24, "ok", 1.0),  # no run at 24 a GPU
               ("m1", "dp", "", 1, 4, 16, "ok", 0.7),  # 16 a GPU only in strong scaling
               ("m1", "ddp", "off", 2, 2, 8, "ok", 0.5),  # not measured: no accumulation run
               ("m2", "dp", "", 1, 1, 8, "ok", 0.24)]
MEASURED = {1: 0.2378, 2: 0.4408}  # results-host's dp-tiny-fp32-sgd-g{1,2}-b* medians


def prediction_row(machine, mode, no_sync, acc, n, b, status, step):
    cells = {c: "" if status == "skipped" else "0" for c in COLUMNS["predictions.csv"]}
    figures = {} if status == "skipped" else {
        "step_ms": f"{step:.4f}", "samples_per_s": f"{n * b / step * 1e3:.3f}",
        "efficiency": "0.900"}
    cells.update(machine=machine, workload=f"tiny-b{b}", model="tiny", precision="fp32",
                 optimizer="sgd", source="", mode=mode, ngpus=str(n), nodes="1",
                 batch_per_gpu=str(b), max_batch_per_gpu="", accum=str(acc), no_sync=no_sync,
                 status=status, note="over gpu_mem_gib" if status == "oom" else "", **figures)
    return cells


def write_predictions(path, rows=PREDICTIONS, drop=()):
    cols = [c for c in COLUMNS["predictions.csv"] if c not in drop]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(prediction_row(*p) for p in rows)
    return path


def read(tmp):
    path = write_predictions(os.path.join(tmp, "pred", "predictions.csv"))
    return path, predicted.read_all_predictions([path])


def input_error(fn, *args):
    try:
        fn(*args)
    except InputError as e:
        return str(e)
    expect(False, f"{fn.__name__}: no InputError")


def case_files(fixtures):
    """predictions_only: predictions.csv without runs.csv (not results-host,
    not a folder of both); prediction_files: each --predictions (a folder
    or its file) once, then the folder's own; a folder without one, a
    missing file refused; Predicted's machines and label."""
    results = os.path.join(fixtures, "results-host")
    with tempfile.TemporaryDirectory() as tmp:
        alone = os.path.dirname(write_predictions(os.path.join(tmp, "alone", "predictions.csv")))
        expect(predicted.predictions_only(alone), "predictions alone: not predictions_only")
        expect(not predicted.predictions_only(results), "results-host is predictions_only")
        both = os.path.join(tmp, "both")
        write_predictions(os.path.join(both, "predictions.csv"))
        write(os.path.join(both, "runs.csv"), "config_id\n")
        expect(not predicted.predictions_only(both), "a folder with runs.csv is predictions_only")
        own = os.path.join(both, "predictions.csv")
        again = os.path.join(alone, ".", "predictions.csv")  # the first, by another path
        got = predicted.prediction_files(both, [alone, again, own])
        want = [os.path.join(alone, "predictions.csv"), own]
        expect(got == want, f"prediction_files {got}, expected {want}")
        expect(predicted.prediction_files(results, []) == [], "results-host has predictions")
        why = input_error(predicted.prediction_files, results, [results])
        expect("no predictions.csv in this folder" in why, f"a folder without one: {why}")
        why = input_error(predicted.prediction_files, results, [os.path.join(tmp, "x.csv")])
        expect("no such file" in why, f"a missing file: {why}")
        _, preds = read(tmp)
        p = predicted.Predicted(alone, preds)
        expect(p.machines == ["m1", "m2"] and p.runs == [] and p.ranks_per_node() is None and
               p.label() == "predicted by dpscale predict for m1, m2, nothing measured",
               f"Predicted: {p.machines}, {p.label()!r}")


def case_read(fixtures):
    """read_all_predictions: each row with its series, GPU count, batch per
    GPU, accumulation, line (ddp with --no-sync off: ddp-syncall), and the
    figures where not skipped; mode_name; a file without step_ms refused."""
    with tempfile.TemporaryDirectory() as tmp:
        path, preds = read(tmp)
        expect(len(preds) == len(PREDICTIONS), f"{len(preds)} rows")
        for p, (machine, mode, no_sync, acc, n, b, status, step) in zip(preds, PREDICTIONS):
            line = mode + ("-syncall" if no_sync == "off" else "")
            got = (p["_key"], p["_n"], p["_b"], p["_accum"], p["_line"], p.get("_step"))
            want = (SERIES, n, b, acc, line, step)
            expect(got == want, f"{machine} {mode} {n}: {got}, expected {want}")
            if status != "skipped":
                expect(abs(p["_sps"] - n * b / step * 1e3) < 1e-3 and p["_eff"] == 0.9,
                       f"{machine} {mode} {n}: samples/s {p['_sps']}, efficiency {p['_eff']}")
        names = [predicted.mode_name(p) for p in preds]
        expect(names[1] == "dp" and names[6] == "ddp-syncall, accum 2", f"mode_name {names}")
        expect(predicted.series_name(preds[1]) == "tiny, fp32, sgd", "series_name")
        bad = write_predictions(os.path.join(tmp, "bad", "predictions.csv"), drop=("step_ms",))
        why = input_error(predicted.read_all_predictions, [path, bad])
        expect("step_ms" in why, f"no step_ms column: {why}")


def case_panels(fixtures):
    """panel_of: batch 8 a GPU is the measured weak series' panel, 24 and 16
    (16 only in strong scaling) each a panel of their own; predicted_lines:
    the skipped point left out, each (line, accum, machine, source) by GPU
    count."""
    folder = Folder(os.path.join(fixtures, "results-host"))
    with tempfile.TemporaryDirectory() as tmp:
        _, preds = read(tmp)
    panels = [predicted.panel_of(folder, p) for p in preds]
    want = [SERIES] * 4 + [SERIES + (24,), SERIES + (16,), SERIES, SERIES]
    expect(panels == want, f"panel_of {panels}, expected {want}")
    lines = predicted.predicted_lines(folder, preds)
    got = {panel: {k: [p["_n"] for p in pts] for k, pts in by.items()}
           for panel, by in lines.items()}
    want = {SERIES: {("dp", 1, "m1", ""): [1, 2, 4], ("ddp-syncall", 2, "m1", ""): [2],
                     ("dp", 1, "m2", ""): [1]},
            SERIES + (24,): {("dp", 1, "m1", ""): [2]},
            SERIES + (16,): {("dp", 1, "m1", ""): [4]}}
    expect(got == want, f"predicted_lines {got}, expected {want}")
    expect([p["_n"] for p in lines[SERIES][("dp", 1, "m1", "")]] == [1, 2, 4], "by GPU count")


def case_measured(fixtures):
    """prediction_errors: the ok dp points at 1 and 2 GPUs, batch 8 (both
    machines) against 0.2378 and 0.4408 ms: +5.13 %, -9.26 %, +0.93 %;
    against_measured: their table, the largest error (-9.26 %, dp on 2
    GPUs), the 4-GPU point out of memory; predictions_table: every row by
    batch, machine, line and GPUs, the skipped one without figures; a
    folder with no matching run: said so."""
    folder = Folder(os.path.join(fixtures, "results-host"))
    with tempfile.TemporaryDirectory() as tmp:
        path, preds = read(tmp)
    errors = predicted.prediction_errors(folder, preds)
    got = sorted((p["machine"], p["_n"], r["config_id"], round(e, 6)) for p, r, e in errors)
    pct = {(m, n): 100 * (step - MEASURED[n]) / MEASURED[n]
           for m, n, step in [("m1", 1, 0.25), ("m1", 2, 0.4), ("m2", 1, 0.24)]}
    want = sorted([("m1", 1, "dp-tiny-fp32-sgd-g1-b8", round(pct[("m1", 1)], 6)),
                   ("m1", 2, "dp-tiny-fp32-sgd-g2-b16", round(pct[("m1", 2)], 6)),
                   ("m2", 1, "dp-tiny-fp32-sgd-g1-b8", round(pct[("m2", 1)], 6))])
    expect(got == want, f"prediction_errors {got}, expected {want}")
    expect(abs(pct[("m1", 2)] - (-9.2559)) < 1e-3, f"the test's own error {pct[('m1', 2)]}")
    md = "\n".join(predicted.against_measured(folder, preds, [path]))
    rows = [l for l in md.splitlines() if l.startswith("| tiny |")]
    want = [f"| tiny | fp32 | sgd | dp | 1 | m1 | 0.2500 | 0.2378 | {pct[('m1', 1)]:+.2f} |",
            f"| tiny | fp32 | sgd | dp | 1 | m2 | 0.2400 | 0.2378 | {pct[('m2', 1)]:+.2f} |",
            f"| tiny | fp32 | sgd | dp | 2 | m1 | 0.4000 | 0.4408 | {pct[('m1', 2)]:+.2f} |"]
    expect(rows == want, f"against_measured's rows {rows}, expected {want}")
    for needle in (f"Predictions: `{path}`.",
                   "Largest error: -9.26 %, dp on 2 GPUs (tiny, fp32, sgd, m1): predicted "
                   "0.4000 ms a step, measured 0.4408 ms (dp-tiny-fp32-sgd-g2-b16).",
                   "Predicted out of memory (▼ on the charts): dp on 4 GPUs (tiny, fp32, sgd, "
                   "batch 8 per GPU, m1)."):
        expect(needle in md, f"against_measured lacks {needle!r}:\n{md}")
    table = predicted.predictions_table(preds)
    expect(len(table) == 2 + len(PREDICTIONS), f"predictions_table: {len(table)} lines")
    skipped = [l for l in table if "| skipped |" in l]
    expect(len(skipped) == 1 and "| skipped | - | - | - |" in skipped[0], f"skipped: {skipped}")
    order = [tuple(c.strip() for c in l.strip("|").split("|"))[3:6] + (l.split("|")[8].strip(),)
             for l in table[2:]]
    want = [("8", "ddp", "2", "m1"), ("8", "ddp-syncall, accum 2", "2", "m1"),
            ("8", "dp", "1", "m1"), ("8", "dp", "2", "m1"), ("8", "dp", "4", "m1"),
            ("8", "dp", "1", "m2"), ("16", "dp", "4", "m1"), ("24", "dp", "2", "m1")]
    expect(order == want, f"predictions_table's order {order}, expected {want}")
    expect(table[4] == "| tiny | fp32 | sgd | 8 | dp | 1 | 1 | m1 | ok | 0.2500 | 32000.0 | "
                       "0.900 |  |", f"dp on 1 GPU's row {table[4]!r}")
    expect(table[6] == f"| tiny | fp32 | sgd | 8 | dp | 4 | 1 | m1 | oom | 0.9000 | "
                       f"{4 * 8 / 0.9 * 1e3:.1f} | 0.900 | over gpu_mem_gib |",
           f"the out-of-memory row {table[6]!r}")
    alone = [p for p in preds if p["_b"] == 24 or p["status"] == "skipped"]
    md = predicted.against_measured(folder, alone, [path])
    expect(any(l.startswith("No prediction has a measured point") for l in md) and
           not any(l.startswith("Predicted out of memory") for l in md),
           f"nothing measured:\n{md}")
    expect(predicted.oom_lines(alone) == [], "oom_lines without an oom point")


if __name__ == "__main__":
    run_cases(globals())
