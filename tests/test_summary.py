#!/usr/bin/python3
"""What plot.py's summary.md and charts say of a results folder beyond its
numbers: every configuration that did not end ok named, and counted on each
chart that leaves it out; dp's lean variant named apart from dp in the table,
the diagnosis and phases.png; no mode called faster or best at one device
or where the ratio's interval holds 1. Runs on copies of tests/fixtures.
Usage: test_summary.py failed|left_out|lean|one_device|noise; exit 0 pass, 1 fail."""
from listing import NOSAN, exit_if_listing, test

# summary.md and the charts: failed configurations named, dp's variants apart, noise not a result
TESTS = [test("summary " + c.replace("_", " "), c, suite=NOSAN, timeout=300)
         for c in ("failed", "left_out", "lean", "one_device", "noise")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import sys
import tempfile
from statistics import median

from helpers import copy_fixture, edit, expect, rows_of, run_case
from plot_helpers import draw, section
from dpstools.results import strategy

CHARTS = ("scaling.png", "efficiency.png", "gpu0_imbalance.png", "phases.png")
FAILED = "Failed configurations"  # summary.md's section of the configurations not drawn
MODES = ("dp", "dp-lean", "ddp")


def set_run(folder, cid, **cells):
    edit(os.path.join(folder, "runs.csv"),
         lambda rows: [dict(r, **cells) if r["config_id"] == cid else r for r in rows])


def set_steps(folder, cid, times):
    """Gives configuration cid the step times `times` (ms, one per step) in
    steps.csv, and runs.csv the statistics and samples/s that follow."""
    edit(os.path.join(folder, "steps.csv"), lambda rows: [
        dict(r, step_ms=f"{times[int(r['step'])]:.4f}", rank_step_ms=f"{times[int(r['step'])]:.4f}")
        if r["config_id"] == cid else r for r in rows])
    run = next(r for r in rows_of(os.path.join(folder, "runs.csv")) if r["config_id"] == cid)
    ms = median(times)
    set_run(folder, cid, step_ms_median=f"{ms:.4f}", step_ms_p10=f"{min(times):.4f}",
            step_ms_p90=f"{max(times):.4f}", step_ms_mean=f"{sum(times) / len(times):.4f}",
            samples_per_s=f"{int(run['global_batch']) * 1000 / ms:.3f}")


def step_times(folder, cid):
    """Rank 0's step times of a configuration, in step order."""
    rows = [r for r in rows_of(os.path.join(folder, "steps.csv"))
            if r["config_id"] == cid and r["rank"] == "0"]
    return [float(r["step_ms"]) for r in sorted(rows, key=lambda r: int(r["step"]))]


def glance(md):
    """The At a glance table: [{column: cell}]."""
    rows = [l for l in section(md, "At a glance").splitlines() if l.startswith("|")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in l.strip("|").split(" | ")))) for l in rows[2:]]


def glance_row(md, model, scaling, n):
    found = [r for r in glance(md) if (r["model"], r["scaling"], r["GPUs"]) == (model, scaling, n)]
    expect(len(found) == 1, f"At a glance: {len(found)} rows for {model} {scaling} {n}:\n"
           f"{section(md, 'At a glance')}")
    return found[0]


def diagnosed(md, heading):
    """The diagnosis of one pair: its ### section's text."""
    part = section(md, "Diagnosis")
    expect(f"### {heading}\n" in part, f"the diagnosis has no {heading!r}:\n{part}")
    return part.split(f"### {heading}\n", 1)[1].split("\n### ")[0]


def case_failed():
    """mixed-host's oom and skipped configurations: each named in summary.md
    with its status and error, and counted on every chart."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture("mixed-host", tmp, "res")
        failed = [r for r in rows_of(os.path.join(folder, "runs.csv")) if r["status"] != "ok"]
        expect(failed, "mixed-host has no failed configuration to name")
        md, texts = draw(folder, os.path.join(tmp, "out"))
        part = section(md, FAILED)
        for r in failed:
            want = f"| {r['config_id']} | {r['status']} |"
            line = next((l for l in part.splitlines() if l.startswith(want)), None)
            expect(line and r["error"][:60] in line,
                   f"{FAILED} lacks {want} with its error {r['error'][:60]!r}:\n{part}")
        note = f"{len(failed)} configurations not drawn"
        for chart in CHARTS + ("memory.png",):
            expect(any(note in t and FAILED in t for t in texts[chart]),
                   f"{chart} does not say {note!r}: {texts[chart][:3]}")
        expect(note not in " ".join(texts["links.png"]), "links.png counts configurations")


def case_left_out():
    """A 1-GPU configuration that failed with a long error of two lines: its
    error on one line of the table, cut, its pipe escaped; the efficiency
    chart says the series it cannot draw without it."""
    cid = "dp-tiny-fp32-sgd-g1-b8"
    error = "rank 0: step 3 | died\nsecond line " + "x" * 400
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture("results-host", tmp, "res")
        set_run(folder, cid, status="error", error=error)
        md, texts = draw(folder, os.path.join(tmp, "out"))
        line = next((l for l in section(md, FAILED).splitlines()
                     if l.startswith(f"| {cid} | error |")), "")
        expect("rank 0: step 3 \\| died second line xxx" in line and line.endswith("… |")
               and len(line) < 300, f"{FAILED}: the error is not one cut line: {line!r}")
        expect(cid not in section(md, "At a glance") and "1 configuration that did not end ok"
               in md, f"At a glance does not send the reader to {FAILED}")
        want = "no 1-GPU run, so no efficiency: tiny, fp32, sgd: dp (weak scaling)"
        expect(any(want in t for t in texts["efficiency.png"]),
               f"efficiency.png does not say {want!r}: {texts['efficiency.png'][:3]}")
        expect(not any("no efficiency" in t for t in texts["scaling.png"]),
               "scaling.png says a line is missing that it draws")


def add_lean(folder):
    """A dp-lean copy of every dp configuration in every file, its step and
    phase times half of dp's (so twice dp's samples/s)."""
    lean = {}

    def copies(rows, half):
        out = list(rows)
        for r in rows:
            if r["config_id"].startswith("dp-"):
                cid = "dp-lean-" + r["config_id"][3:]
                lean[r["config_id"]] = cid
                out.append(dict(r, config_id=cid, **{c: f"{float(r[c]) / 2:.4f}" for c in half
                                                     if r[c]}))
        return out
    times = ["step_ms_median", "step_ms_p10", "step_ms_p90", "step_ms_mean"]
    edit(os.path.join(folder, "runs.csv"), lambda rows: [
        dict(r, samples_per_s=f"{2 * float(r['samples_per_s']):.3f}")
        if r["config_id"].startswith("dp-lean-") else r for r in copies(rows, times)])
    edit(os.path.join(folder, "steps.csv"), lambda rows: copies(rows, ["step_ms", "rank_step_ms"]))
    edit(os.path.join(folder, "devices.csv"), lambda rows: copies(rows, []))
    edit(os.path.join(folder, "phases.csv"), lambda rows: copies(rows, ["median_ms"]))
    return lean


def reduce_ms(folder, cid):
    return next(float(p["median_ms"]) for p in rows_of(os.path.join(folder, "phases.csv"))
                if (p["config_id"], p["device"], p["phase"]) == (cid, "0", "reduce"))


def case_lean():
    """dp-lean beside dp: a column of its own in At a glance, a diagnosis of
    its own (dp's keeps dp's numbers), its own bars on phases.png; ddp-lean
    is a line of its own too."""
    for cid, mode, want in (("ddp-lean-tiny-fp32-sgd-g2-b16-bk25", "ddp", "ddp-lean"),
                            ("ddp-tiny-fp32-sgd-g2-b16-bk25", "ddp", "ddp"),
                            ("dp-lean-tiny-fp32-sgd-g2-b16", "dp", "dp-lean")):
        got = strategy({"config_id": cid, "mode": mode})
        expect(got == want, f"strategy of {cid}: {got}, expected {want}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture("results-host", tmp, "res")
        add_lean(folder)
        md, texts = draw(folder, os.path.join(tmp, "out"))
        row = glance_row(md, "small", "weak", "4")
        dp = float(row["dp samples/s"])
        expect(abs(float(row.get("dp-lean samples/s", "nan")) - 2 * dp) < 0.2 and
               "ddp speed-up over dp-lean" in row, f"At a glance has no dp-lean columns: {row}")
        for name, cid, scale in (("dp", "dp-small-fp32-sgd-g4-b64", 1),
                                 ("dp-lean", "dp-small-fp32-sgd-g4-b64", 0.5)):
            part = diagnosed(md, f"small, fp32, sgd, weak scaling, 4 devices: {name} and ddp")
            want = f"| reduce | {scale * reduce_ms(folder, cid):.3f} |"
            expect(want in part and f"| {name} phase on device 0 alone |" in part,
                   f"{name}'s diagnosis lacks {want!r}:\n{part}")
        ticks = [t for t in texts["phases.png"] if t.endswith(" GPU")]
        for name in MODES:
            expect(f"{name}\n4 GPU" in ticks, f"phases.png has no bar labelled {name}: {ticks}")
        expect(any("dp-lean (weak scaling)" == t for t in texts["scaling.png"]),
               "scaling.png has no dp-lean line")


def case_one_device():
    """At one device no mode is best and no speed-up is given (the fixture's
    ddp has more samples/s there than dp), and summary.md says why."""
    with tempfile.TemporaryDirectory() as tmp:
        md, _ = draw(copy_fixture("results-host", tmp, "res"), os.path.join(tmp, "out"))
        ones = [r for r in glance(md) if r["GPUs"] == "1"]
        expect(ones, "At a glance has no row at one device")
        for r in ones:
            expect(r["best"] not in MODES and "x" not in r["ddp speed-up over dp"],
                   f"At one device a mode is called best or faster: {r}")
        expect("At one device dp and ddp run the same step" in md,
               "summary.md does not say that one device runs the same step in both modes")


def case_noise():
    """ddp's 4-device step times overlapping dp's (a ratio of 1.03): within
    noise in the table and the diagnosis; the same times halved: ddp is
    named, and its speed-up given."""
    dp, ddp = "dp-small-fp32-sgd-g4-b64", "ddp-small-fp32-sgd-g4-b64-bk25"
    heading = "small, fp32, sgd, weak scaling, 4 devices: dp and ddp"
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture("results-host", tmp, "res")
        times = step_times(folder, dp)
        set_steps(folder, ddp, [t / 1.03 for t in times[1:] + times[:1]])
        md, _ = draw(folder, os.path.join(tmp, "out"))
        row = glance_row(md, "small", "weak", "4")
        expect(row["best"].startswith("within noise") and
               row["ddp speed-up over dp"].endswith("within noise"),
               f"overlapping step times are called a result: {row}")
        part = diagnosed(md, heading)
        expect("within noise" in part.splitlines()[1] and "reaches" not in part and
               "neither is faster" in part, f"the diagnosis calls noise a result:\n{part}")
        set_steps(folder, ddp, [t / 2 for t in times])
        md, _ = draw(folder, os.path.join(tmp, "out2"))
        row = glance_row(md, "small", "weak", "4")
        expect(row["best"] == "ddp" and row["ddp speed-up over dp"].startswith("2.0"),
               f"ddp twice as fast is not named: {row}")
        expect(diagnosed(md, heading).splitlines()[1].startswith("ddp reaches 2.0"),
               f"the diagnosis does not name ddp:\n{diagnosed(md, heading)}")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[1], CASES[sys.argv[1]]))
