#!/usr/bin/python3
"""plot.py with `dpscale predict`'s predictions.csv: the file as dpscale writes
it against dpsresults' schema; predictions of the results-host fixture's tiny
series drawn beside it, summary.md's "Predicted against measured" errors
checked against the two files; a folder of predictions alone drawn; malformed
predictions refused (exit 2, file:line). Each case runs `dpscale predict` on
a small machine and workload file (no benchmark).
Usage: test_plot_predict.py schema|errors|alone|refuse DPSCALE; exit 0 pass, 1 fail."""
from listing import DPSCALE, exit_if_listing, test

# plot.py with dpscale predict's predictions.csv: the file against dpsresults' schema, the
# fixture's errors in summary.md, a folder of predictions alone, broken predictions refused
TESTS = [test("plot predict " + c, c, DPSCALE, suite="scripts", timeout=600)
         for c in ("schema", "errors", "alone", "refuse")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import shutil
import sys
import tempfile

from helpers import (copy_fixture, dpscale, edit, expect, expect_exit, png_size, read_table, rows_of, run_case,
                     script, write)
from dpstools import results as dpsresults

# The fixture's tiny series: fp32, sgd, weak scaling at 8 samples a GPU on 1, 2 and 4 devices.
WORKLOAD = """name = tiny
params = 50000
bytes_per_grad = 4
step_ms_1gpu = 0.2
batch_per_gpu = 8
optimizer = sgd
"""
MACHINE = "name = box\ngpus_per_node = 8\nintra_busbw_gbps = 20\n"
GPUS = "1,2,4,8"
OOM = ("ddp", "8")  # set to oom in the predictions: a point the fixture did not measure


def predict(binary, tmp, workload=WORKLOAD, name="pred"):
    """The folder of `dpscale predict` on MACHINE and a workload, ddp on 8 GPUs set to oom."""
    files = [write(os.path.join(tmp, f), text) for f, text in
             (("box.machine", MACHINE), (name + ".workload", workload))]
    dpscale(binary, "predict", "--machine", files[0], "--workload", files[1], "--gpus", GPUS,
            out=tmp, name=name, backend=None, check_rc=0, timeout=300)
    folder = os.path.join(tmp, name)
    edit(os.path.join(folder, "predictions.csv"),
         lambda rows: [dict(r, status="oom") if (r["mode"], r["ngpus"]) == OOM else r
                       for r in rows])
    return folder


def section(md, title):
    """The lines of summary.md's section `## title`, up to the next section or chart."""
    expect(f"## {title}\n" in md, f"summary.md has no section {title!r}:\n{md}")
    part = md.split(f"## {title}\n", 1)[1]
    return [l for l in part.split("\n## ")[0].split("\n![")[0].splitlines()]


def table(lines):
    """The first markdown table in lines: [{header: cell}]."""
    rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines
            if l.startswith("|")]
    expect(len(rows) >= 2, f"no table in {lines}")
    return [dict(zip(rows[0], r)) for r in rows[2:]]


def charts(out, names):
    for name in names:
        path = os.path.join(out, name)
        expect(os.path.exists(path), f"{name} missing in {out}")
        w, h = png_size(path)
        expect(400 <= w <= 6000 and 300 <= h <= 6000, f"{name} is {w}x{h}")


def expected_errors(results, pred_csv):
    """{(mode, GPUs): (predicted ms, measured ms, error %)} from the files: each ok
    prediction with a weak-scaling run of its model, precision, optimizer, mode,
    GPU count and batch per GPU."""
    runs = {(r["model"], r["precision"], r["optimizer"], r["mode"], r["ngpus"],
             int(r["global_batch"]) // int(r["ngpus"])): r
            for r in rows_of(os.path.join(results, "runs.csv"))
            if r["status"] == "ok" and r["scaling"] == "weak"}
    out = {}
    for p in rows_of(pred_csv):
        r = runs.get((p["model"], p["precision"], p["optimizer"], p["mode"], p["ngpus"],
                      int(p["batch_per_gpu"])))
        if p["status"] == "ok" and r:
            pred, meas = float(p["step_ms"]), float(r["step_ms_median"])
            out[(p["mode"], p["ngpus"])] = (pred, meas, 100 * (pred - meas) / meas)
    return out


def check_errors(md, want):
    lines = section(md, "Predicted against measured")
    rows = table(lines)
    got = {(r["mode"], r["GPUs"]): r for r in rows}
    expect(set(got) == set(want) and len(rows) == len(want),
           f"rows {[(r['mode'], r['GPUs']) for r in rows]}, expected {sorted(want)}")
    for k, (pred, meas, err) in want.items():
        r = got[k]
        expect(r["model"] == "tiny" and r["precision"] == "fp32" and r["machine"] == "box", f"{r}")
        expect(abs(float(r["predicted step ms"]) - pred) <= 5e-5 and
               abs(float(r["measured step ms"]) - meas) <= 5e-5 and
               abs(float(r["error %"]) - err) <= 0.005 + 1e-9,
               f"{k}: {r}, expected predicted {pred}, measured {meas}, error {err:+.4f} %")
    worst = max(want.values(), key=lambda v: abs(v[2]))[2]
    text = "\n".join(lines)
    expect(f"Largest error: {worst:+.2f} %" in text, f"no largest error {worst:+.2f} %:\n{text}")
    expect(f"{OOM[0]} on {OOM[1]} GPUs" in text and "out of memory" in text,
           f"the predicted out-of-memory point is not named:\n{text}")


def case_schema(binary):
    """predictions.csv as dpscale writes it: dpsresults' columns in their order, read whole."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(predict(binary, tmp), "predictions.csv")
        rows = read_table(path)
        table = dpsresults.read_predictions(path)
        expect(len(rows) == len(table) == 8, f"{len(table)} rows, expected 8")
        expect({r["model"] for r in table} == {"tiny"} and {r["source"] for r in table} == {""},
               "a workload file's predictions name its series by the workload")


def case_errors(binary):
    """The fixture with --predictions, and with its own predictions.csv: the tiny series'
    errors in summary.md as the files give them, charts drawn; a prediction of the same
    series at another batch per GPU set beside nothing; none without predictions."""
    with tempfile.TemporaryDirectory() as tmp:
        results = copy_fixture("results-host", tmp, "res")
        pred = predict(binary, tmp)
        other = predict(binary, tmp, WORKLOAD.replace("batch_per_gpu = 8", "batch_per_gpu = 16"),
                        name="pred16")
        want = expected_errors(results, os.path.join(pred, "predictions.csv"))
        expect(len(want) == 6, f"the fixture's tiny series matches {len(want)} points, not 6")
        expect(not expected_errors(results, os.path.join(other, "predictions.csv")),
               "the batch of 16 per GPU matches a measured point")
        out = os.path.join(tmp, "out")
        expect_exit(script("plot.py", results, "--predictions", pred, "--predictions", other,
                           "--out", out), 0)
        md = open(os.path.join(out, "summary.md")).read()
        check_errors(md, want)
        charts(out, ["scaling.png", "efficiency.png", "gpu0_imbalance.png", "phases.png"])
        # the results folder's own predictions.csv, named again by --predictions: read once
        shutil.copy(os.path.join(pred, "predictions.csv"), results)
        own = os.path.join(tmp, "own")
        expect_exit(script("plot.py", results, "--predictions", results, "--out", own), 0)
        md = open(os.path.join(own, "summary.md")).read()
        check_errors(md, want)
        os.remove(os.path.join(results, "predictions.csv"))
        bare = os.path.join(tmp, "bare")
        expect_exit(script("plot.py", results, "--out", bare), 0)
        md = open(os.path.join(bare, "summary.md")).read()
        expect("Predicted against measured" not in md, "a section of predictions with none")


def case_alone(binary):
    """A folder of predictions alone: scaling, efficiency and a summary.md listing each;
    a folder with neither runs.csv nor predictions.csv is still refused."""
    with tempfile.TemporaryDirectory() as tmp:
        pred = predict(binary, tmp)
        out = os.path.join(tmp, "out")
        p = script("plot.py", pred, "--out", out)
        expect_exit(p, 0)
        charts(out, ["scaling.png", "efficiency.png"])
        expect(not os.path.exists(os.path.join(out, "phases.png")), "phases.png of nothing measured")
        md = open(os.path.join(out, "summary.md")).read()
        rows = table(section(md, "Predicted"))
        expect(len(rows) == len(rows_of(os.path.join(pred, "predictions.csv"))),
               f"{len(rows)} predictions listed")
        oom = [r for r in rows if (r["mode"], r["GPUs"]) == OOM]
        expect(len(oom) == 1 and oom[0]["status"] == "oom", f"{oom}")
        expect("![scaling](scaling.png)" in md, "summary.md does not show the charts")
        os.mkdir(os.path.join(tmp, "empty"))
        expect_exit(script("plot.py", os.path.join(tmp, "empty"), "--out", out), 2,
                    "runs.csv: no such file")


def cell(col, value, row=0):
    return lambda rows: [dict(r, **{col: value}) if i == row else r for i, r in enumerate(rows)]


FIX = "restore the file as dpscale predict wrote it"
BROKEN = [  # (what, edit of the rows, what stderr must hold)
    ("step_ms not a number", cell("step_ms", "fast", 1),
     ["predictions.csv:3: column step_ms is not a number: 'fast'", FIX]),
    ("ngpus 0", cell("ngpus", "0"), ["predictions.csv:2: column ngpus is below 1"]),
    ("an unknown status", cell("status", "maybe"), ["predictions.csv:2: column status is not one "
                                                    "of ok, oom, skipped"]),
    ("an unknown mode", cell("mode", "tp", 2), ["predictions.csv:4: column mode is not one of"]),
    ("no machine", cell("machine", ""), ["predictions.csv:2: column machine is empty"]),
    ("ok without a step", cell("step_ms", "", 3),
     ["predictions.csv:5: column step_ms is empty, but status is ok"]),
    ("skipped with figures", cell("status", "skipped"),
     ["predictions.csv:2: column step_ms holds '", "but status is skipped"]),
    ("a prediction twice", lambda rows: rows + rows[:1],
     ["predictions.csv:10: box: workload tiny, mode dp, ngpus 1, accum 1 again (first at line 2)"]),
    ("a column missing", lambda rows: [{k: v for k, v in r.items() if k != "sync_ms"} for r in rows],
     ["predictions.csv:1: missing column(s) sync_ms"]),
]


def refused(template, tmp, what, fn, needles, given):
    """Why plot.py did not refuse a broken copy of template's predictions.csv (given
    with --predictions, else the results folder's own) with exit 2 and one line
    holding needles, or None."""
    work = tempfile.mkdtemp(dir=tmp)
    pred = os.path.join(work, "pred")
    os.mkdir(pred)
    shutil.copy(os.path.join(template, "predictions.csv"), pred)
    edit(os.path.join(pred, "predictions.csv"), fn)
    results = copy_fixture("results-host", work, "res")
    if given:
        args = [results, "--predictions", os.path.join(pred, "predictions.csv")]
    else:
        shutil.copy(os.path.join(pred, "predictions.csv"), results)
        args = [results]
    p = script("plot.py", *args, "--out", os.path.join(work, "out"))
    lines = p.stderr.strip().splitlines()
    if p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr and \
            all(n in p.stderr for n in needles):
        return None
    return f"{what} ({'--predictions' if given else 'in the folder'}): exit {p.returncode}, " \
           f"expected 2 with {needles} in one line:\n    " + "\n    ".join(lines[-4:])


def case_refuse(binary):
    """Broken predictions, given with --predictions or in the results folder, and
    --predictions naming what holds none: exit 2, one line naming file:line."""
    with tempfile.TemporaryDirectory() as tmp:
        template = predict(binary, tempfile.mkdtemp(dir=tmp))
        bad = [why for what, fn, needles in BROKEN for given in (True, False)
               for why in [refused(template, tmp, what, fn, needles, given)] if why]
        results = copy_fixture("results-host", tmp, "res")
        for arg, needle in ((tmp, f"--predictions {tmp}: no predictions.csv in this folder"),
                            (os.path.join(tmp, "none.csv"), "no such file")):
            p = script("plot.py", results, "--predictions", arg, "--out", os.path.join(tmp, "o"))
            if p.returncode != 2 or needle not in p.stderr:
                bad.append(f"--predictions {arg}: exit {p.returncode}: {p.stderr.strip()}")
        expect(not bad, f"{len(bad)} broken predictions not refused as they should be:\n" +
               "\n".join(bad))


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(run_case(" ".join(sys.argv[1:2]), CASES[sys.argv[1]], *sys.argv[2:]))
