#!/usr/bin/env python3
"""scripts/dpstools/diagnose.py, imported, on folders the test writes with
known phases, step times and memory (tests/tiny_folder.py) and on
results-host, mixed-host and accum-host. pairs: dp and dp-lean each paired
with ddp at the largest device count of 2 or more, per model, scaling and
accumulation. verdict: dp bound by a serial phase of device 0 (the reduce,
30 % of its step), dp-lean within noise of ddp, dp faster with ddp's
exposed all-reduce the gap, ddp faster with device 0's phases explaining
less than a quarter of the gap (the rest waiting); each sentence's ratio,
interval and shares from the step times given (4 a side: the interval from
the smallest to the largest ratio of steps). memory: what device 0 holds
beyond the others' mean, by kind (by category in older folders), and the
section of a pair. accum: accum-host's all-reduces per optimizer step
against what --no-sync says, what no_sync saved, dp's replicate and reduce
at accum 2 against accum 1 (the fixture's numbers read here); buckets.csv
absent or short; no twin. sharded: each sharded run's exposed all-gathers
(rank 0's, summed per unit), the units named, the wait after backward,
against ddp (slower, faster, within noise) with its peak memory, the note
where ready_ms equals every gather's begin. none: one device, or dp's runs
on 2 and 4 devices failed (mixed-host): no diagnosis.
Usage: test_dpstools_diagnose.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools diagnose " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("pairs", "verdict", "memory", "accum", "sharded", "none")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import tempfile

from dpstools import diagnose
from dpstools.folder import Folder
from helpers import copy_fixture, edit, expect, rows_of, run_cases
from tiny_folder import MiB, run, write_folder

SLOW, FAST = [9.8, 9.9, 10.1, 10.2], [4.9, 4.95, 5.05, 5.1]  # medians 10 and 5 ms
LEAN = [5.0, 5.1, 5.2, 5.3]  # median 5.15 ms: within noise of FAST
SERIAL = {"replicate": 1.0, "scatter": 0.5, "forward": 2.0, "gather": 0.5, "loss": 0.5,
          "backward": 2.0, "reduce": 3.0, "optimizer": 0.5}  # dp-m-g2's device 0: 6 ms alone
DDP = {"forward": 2.0, "backward": 2.0, "allreduce": 1.5, "allreduce_exposed": 0.5,
       "loss": 0.5, "optimizer": 0.5}


def pairs_folder(tmp):
    """Model m: dp (10 ms, bound by its reduce), dp-lean (5.15 ms) and ddp
    (5 ms) on 2 devices, dp and ddp on 1; model n: dp 5 ms, ddp 10 ms with
    4 ms of exposed all-reduce; model w: dp 10 ms, ddp 5 ms, dp's device 0
    1.5 ms longer in its phases; model s on one device only."""
    one = {0: {"forward": 2.0, "backward": 2.0}}
    runs = [run("dp-m-g1", 1, SLOW, phases=one), run("ddp-m-g1", 1, FAST, phases=one),
            run("dp-m-g2", 2, SLOW, phases={0: SERIAL, 1: {"forward": 2.0, "backward": 2.0}}),
            run("dp-lean-m-g2", 2, LEAN, phases={0: {"replicate": 0.25, "forward": 2.0,
                                                     "backward": 2.0, "reduce": 0.5}}),
            run("ddp-m-g2", 2, FAST, phases={0: DDP, 1: DDP}),
            run("dp-n-g2", 2, FAST, model="n", phases={0: {"forward": 2.0, "backward": 2.0,
                                                           "replicate": 0.2, "reduce": 0.3}}),
            run("ddp-n-g2", 2, SLOW, model="n", phases={0: {"forward": 2.0, "backward": 2.0,
                                                            "allreduce": 4.5,
                                                            "allreduce_exposed": 4.0}}),
            run("dp-w-g2", 2, SLOW, model="w", phases={0: {"forward": 2.0, "backward": 2.0,
                                                           "reduce": 1.0, "replicate": 0.5}}),
            run("ddp-w-g2", 2, FAST, model="w", phases={0: {"forward": 2.0, "backward": 2.0,
                                                            "allreduce_exposed": 0.25}}),
            run("dp-s-g1", 1, SLOW, model="s"), run("ddp-s-g1", 1, FAST, model="s")]
    memory = [mem("dp-m-g2", 0, "parameters", "parameters", 2 * MiB),
              mem("dp-m-g2", 0, "gradients", "gradients", MiB),
              mem("dp-m-g2", 0, "reduce staging", "communication", MiB // 2),
              mem("dp-m-g2", 1, "parameters", "parameters", MiB),
              mem("dp-m-g2", 1, "gradients", "gradients", MiB),
              mem("dp-w-g2", 0, "parameters", "", MiB),  # an older folder's: no kind
              mem("dp-w-g2", 0, "staging", "", MiB // 4),
              mem("dp-w-g2", 1, "parameters", "", MiB)]
    return Folder(write_folder(os.path.join(tmp, "pairs"), runs, memory=memory))


def mem(cid, device, category, kind, nbytes):
    return {"config_id": cid, "device": device, "category": category, "kind": kind,
            "bytes_at_peak": nbytes}


def ids(found):
    return [(*p[:6], p[6]["config_id"], p[7]["config_id"]) for p in found]


def case_pairs(fixtures):
    """The pairs of the folder written here (m's dp and dp-lean at 2 devices,
    not 1; n, w; s has none) and of results-host (4 devices each)."""
    with tempfile.TemporaryDirectory() as tmp:
        got = ids(diagnose.pairs(pairs_folder(tmp)))
    key = ("fp32", "sgd", "weak", 1, 2)
    want = [("m", *key, "dp-m-g2", "ddp-m-g2"), ("m", *key, "dp-lean-m-g2", "ddp-m-g2"),
            ("n", *key, "dp-n-g2", "ddp-n-g2"), ("w", *key, "dp-w-g2", "ddp-w-g2")]
    expect(got == want, f"pairs {got}, expected {want}")
    got = ids(diagnose.pairs(Folder(os.path.join(fixtures, "results-host"))))
    want = [(m, "fp32", "sgd", sc, 1, 4, f"dp-{m}-fp32-sgd-g4-b{b}{s}",
             f"ddp-{m}-fp32-sgd-g4-b{b}{s}-bk25")
            for m, b in (("small", 64), ("tiny", 32))
            for sc, s in (("strong", "-strong"), ("weak", ""))]
    expect(got == want, f"results-host's pairs {got}, expected {want}")


def verdicts(folder):
    """{dp's config_id: the verdict of its pair}."""
    out = {}
    for p in diagnose.pairs(folder):
        dp, ddp = p[6], p[7]
        serial = diagnose.serial_phases(folder, dp)
        exposed = diagnose.phases_of(folder, ddp["config_id"]).get("allreduce_exposed", 0.0)
        out[dp["config_id"]] = diagnose.verdict(folder, dp, ddp, serial, exposed)
    return out


def case_verdict(fixtures):
    """Each pair's sentence; serial_phases, gaps and the pair's table."""
    iv = f"95 % interval {min(SLOW) / max(FAST):.2f}–{max(SLOW) / min(FAST):.2f}x"
    expect(iv == "95 % interval 1.92–2.08x", f"the test's own interval {iv}")
    exposed = "ddp's exposed all-reduce: 0.500 ms, 10 % of its step"
    want = {
        "dp-m-g2": f"ddp reaches 2.00x dp's throughput ({iv}): dp is bound by the reduce of the "
                   f"gradients onto device 0: 30 % of the step (3.000 ms of 10.000 ms); device 0 "
                   f"works alone 60 % of dp's step; {exposed}.",
        "dp-lean-m-g2": f"dp-lean and ddp are within noise of each other: ddp's throughput is "
                        f"{5.15 / 5:.2f}x dp-lean's (95 % interval {min(LEAN) / max(FAST):.2f}–"
                        f"{max(LEAN) / min(FAST):.2f}x, which holds 1), so neither is faster; "
                        f"{exposed}; dp-lean's device 0 works alone "
                        f"{100 * 0.75 / 5.15:.0f} % of its step.",
        "dp-n-g2": f"dp reaches 2.00x ddp's throughput ({iv}): ddp's step is 5.000 ms longer, "
                   f"the largest part in its exposed all-reduce (+4.000 ms on device 0); ddp's "
                   f"exposed all-reduce: 4.000 ms, 40 % of its step, while dp's device 0 works "
                   f"alone 10 % of its step.",
        "dp-w-g2": f"ddp reaches 2.00x dp's throughput ({iv}): dp's step is 5.000 ms longer, of "
                   f"which device 0's phases account for 1.500 ms (the most: its reduce, "
                   f"+1.000 ms); the rest is device 0 waiting for the other devices; device 0 "
                   f"works alone 15 % of dp's step; ddp's exposed all-reduce: 0.250 ms, 5 % of "
                   f"its step."}
    with tempfile.TemporaryDirectory() as tmp:
        folder = pairs_folder(tmp)
        got = verdicts(folder)
        for cid in want:
            expect(got.get(cid) == want[cid], f"{cid}:\n{got.get(cid)}\nexpected\n{want[cid]}")
        runs = {r["config_id"]: r for r in folder.runs}
        serial = diagnose.serial_phases(folder, runs["dp-m-g2"])
        want_serial = [("reduce", 3.0, 30.0), ("replicate", 1.0, 10.0), ("scatter", 0.5, 5.0),
                       ("gather", 0.5, 5.0), ("loss", 0.5, 5.0), ("optimizer", 0.5, 5.0)]
        expect(serial == want_serial, f"serial_phases {serial}, expected {want_serial}")
        gaps = diagnose.gaps(folder, runs["ddp-n-g2"], runs["dp-n-g2"])
        expect(gaps == [("allreduce_exposed", 4.0), ("forward", 0.0), ("backward", 0.0)],
               f"gaps of ddp over dp (the all-reduce beside backward left out): {gaps}")
        expect(diagnose.gaps(folder, runs["ddp-s-g1"], runs["dp-s-g1"]) == [("step", 0.0)],
               "gaps without phases")
        lines = diagnose.pair_lines(folder, diagnose.pairs(folder)[0])
        want_lines = ["### m, fp32, sgd, weak scaling, 2 devices: dp and ddp", "",
                      want["dp-m-g2"], "", "| dp phase on device 0 alone | ms | % of dp's step |",
                      "| --- | --- | --- |", "| reduce | 3.000 | 30.0 |",
                      "| replicate | 1.000 | 10.0 |", "| scatter | 0.500 | 5.0 |",
                      "| gather | 0.500 | 5.0 |", "| loss | 0.500 | 5.0 |",
                      "| optimizer | 0.500 | 5.0 |", "| all of them | 6.000 | 60.0 |", ""]
        expect(lines[:len(want_lines)] == want_lines,
               "pair_lines:\n" + "\n".join(lines) + "\nexpected\n" + "\n".join(want_lines))


def case_memory(fixtures):
    """dp-m-g2's device 0: 1 MiB more parameters, 0.5 MiB of staging (kind
    communication), gradients as the others; an older folder's categories
    without kind; a run without memory rows; the pair's sentence."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = pairs_folder(tmp)
        got = diagnose.memory_extra(folder, "dp-m-g2")
        want = [("parameters", 1.0, ["parameters"]), ("communication", 0.5, ["reduce staging"])]
        expect(got == want, f"memory_extra {got}, expected {want}")
        expect(diagnose.memory_extra(folder, "dp-m-g2", top=1) == want[:1], "top=1")
        got = diagnose.memory_extra(folder, "dp-w-g2")
        expect(got == [("staging", 0.25, ["staging"])], f"by category: {got}")
        expect(diagnose.memory_extra(folder, "ddp-m-g2") == [], "no memory rows: extra found")
        lines = diagnose.pair_lines(folder, diagnose.pairs(folder)[0])
        want = ("dp's device 0 holds more than the others' mean at its peak: parameters "
                "(1.00 MiB), communication (0.50 MiB: reduce staging).")
        expect(lines[-2:] == [want, ""], f"pair_lines' memory: {lines[-2:]}")
        lines = diagnose.pair_lines(folder, diagnose.pairs(folder)[2])  # n: no memory.csv rows
        expect(not any("holds more" in l for l in lines), f"dp-n-g2: {lines}")


def fixture_numbers(folder):
    """accum-host's runs.csv step medians, rank 0's step times and device 0's
    phases, read with csv."""
    med = {r["config_id"]: float(r["step_ms_median"]) for r in rows_of(
        os.path.join(folder, "runs.csv")) if r["step_ms_median"]}
    times, phases = {}, {}
    for r in rows_of(os.path.join(folder, "steps.csv")):
        if r["rank"] == "0":
            times.setdefault(r["config_id"], []).append(float(r["step_ms"]))
    for r in rows_of(os.path.join(folder, "phases.csv")):
        if r["device"] == "0":
            phases.setdefault(r["config_id"], {})[r["phase"]] = float(r["median_ms"])
    return med, times, phases


ON, OFF = "ddp-small-fp32-sgd-g2-b32-acc2-bk25", "ddp-small-fp32-sgd-g2-b32-acc2-syncall-bk25"
DP2, DP1 = "dp-small-fp32-sgd-g2-b32-acc2", "dp-small-fp32-sgd-g2-b32"
HOW_ON = "micro-steps 1 to N-1 under no_sync, the last all-reduces: once the buckets"
HOW_OFF = "every micro-step all-reduces (--no-sync off): 2 x the buckets"


def case_accum(fixtures):
    """accum_lines of accum-host (2 buckets; no_sync on: 2 all-reduces in
    micro-step 1; off: 4 in 2), what no_sync saved, dp's replicate and
    reduce; a copy without buckets.csv, one with a row of the syncall run
    gone (3, expected 4), one without dp's accum 1 twin."""
    acc = os.path.join(fixtures, "accum-host")
    med, times, ph = fixture_numbers(acc)
    saved = med[OFF] - med[ON]
    lo, hi = min(times[OFF]) / max(times[ON]), max(times[OFF]) / min(times[ON])
    ratio = (32 / med[ON]) / (32 / med[OFF])
    moved = {c: ph[c]["replicate"] + ph[c]["reduce"] for c in (DP1, DP2)}
    want = [f"- {ON}: 2 all-reduces per optimizer step (2 buckets in 1 micro-step of 2; "
            f"{HOW_ON}, as expected).",
            f"- no_sync saved {saved:.3f} ms a step ({ON} {med[ON]:.3f} ms, {OFF} with every "
            f"micro-step all-reduced {med[OFF]:.3f} ms, {100 * saved / med[OFF]:.0f} % of its "
            f"step): ddp reaches {ratio:.2f}x ddp-syncall's throughput (95 % interval "
            f"{lo:.2f}–{hi:.2f}x" + (", which holds 1: within noise)." if lo <= 1 <= hi
                                     else ")."),
            f"- {OFF}: 4 all-reduces per optimizer step (2 buckets in 2 micro-steps of 2; "
            f"{HOW_OFF}, as expected).",
            f"- {DP2}: DataParallel's replicate and reduce ran 2 times per optimizer step (its "
            f"forward replicates the module and its backward reduces the gradients onto device "
            f"0 in every micro-step): {moved[DP2]:.3f} ms a step on device 0, "
            f"{100 * moved[DP2] / med[DP2]:.0f} % of its step, against {moved[DP1]:.3f} ms at "
            f"accum 1 ({DP1}, {moved[DP2] / moved[DP1]:.2f}x)."]
    got = diagnose.accum_lines(Folder(acc))
    expect(got[0] == "### Gradient accumulation" and got[4:] == want + [""],
           "accum_lines:\n" + "\n".join(got) + "\nexpected\n" + "\n".join(want))
    with tempfile.TemporaryDirectory() as tmp:
        bare = copy_fixture("accum-host", tmp, "bare")
        os.remove(os.path.join(bare, "buckets.csv"))
        edit(os.path.join(bare, "runs.csv"), lambda rows: [r for r in rows
                                                           if r["config_id"] != DP1])
        folder = Folder(bare)
        runs = {r["config_id"]: r for r in folder.runs}
        got = diagnose.allreduce_text(folder, runs[OFF])
        expect(got == f"{OFF}: {HOW_OFF} per optimizer step (buckets.csv has no rows of it: it "
                      f"records the traced steps, --trace-steps)", f"no buckets.csv: {got!r}")
        got = diagnose.dp_accum_text(folder, runs[DP2])
        expect(got.endswith(f"{100 * moved[DP2] / med[DP2]:.0f} % of its step"),
               f"no accum 1 twin: {got!r}")
        short = copy_fixture("accum-host", tmp, "short")
        edit(os.path.join(short, "buckets.csv"), lambda rows: [
            r for r in rows if (r["config_id"], r["rank"], r["bucket"], r["micro_step"]) !=
            (OFF, "0", "1", "1")])
        folder = Folder(short)
        got = diagnose.allreduce_text(folder, {r["config_id"]: r for r in folder.runs}[OFF])
        expect(got == f"{OFF}: 3 all-reduces per optimizer step (2 buckets in 2 micro-steps of "
                      f"2; {HOW_OFF}, expected 4: check the run)", f"a row gone: {got!r}")
        expect(diagnose.no_sync_text(folder, {r["config_id"]: r for r in folder.runs}[
            "ddp-small-fp32-sgd-g2-b32-bk25"]) is None, "no syncall twin: no_sync_text")
    for n, word, want in ((1, "bucket", "1 bucket"), (2, "bucket", "2 buckets"),
                          (0, "all-reduce", "0 all-reduces")):
        expect(diagnose.plural(n, word) == want, f"plural({n}, {word!r})")


def gather(cid, unit, ready, begin, ms, rank=0, phase="forward", collective="all-gather"):
    return {"config_id": cid, "rank": rank, "bucket": unit, "micro_step": 0, "bytes": 4096,
            "ready_ms": ready, "allreduce_begin_ms": begin, "allreduce_ms": ms,
            "traced_steps": 3, "collective": collective, "phase": phase}


def sharded_folder(tmp):
    """ddp (5 ms, 4 MiB a device), zero1 within noise of it (5 MiB), zero2
    faster (4 ms, 2 MiB, 0.05 ms of gathers exposed), fsdp slower (6 ms, 3
    MiB; units 0 and 1 exposed 0.5 and 0.6 ms, unit 3 0.03 ms) on 2 devices;
    fsdp of model x without a ddp twin, every gather ready as it began."""
    runs = [run("ddp-m-g2", 2, FAST, peaks=[4 * MiB] * 2),
            run("zero1-m-g2", 2, [4.7, 4.9, 5.1, 5.2], peaks=[5 * MiB, 9 * MiB // 2],
                phases={0: {"allreduce_exposed": 0.5}}),
            run("zero2-m-g2", 2, [3.9, 3.95, 4.05, 4.1], peaks=[2 * MiB] * 2),
            run("fsdp-m-g2", 2, [5.9, 5.95, 6.05, 6.1], peaks=[3 * MiB, 5 * MiB // 2],
                phases={0: {"allreduce_exposed": 0.3}}),
            run("fsdp-m-g1", 1, FAST),
            run("fsdp-x-g2", 2, FAST, model="x")]
    buckets = [gather("fsdp-m-g2", 0, 0.5, 0.0, 1.0), gather("fsdp-m-g2", 1, 1.5, 1.0, 1.0),
               gather("fsdp-m-g2", 2, 3.0, 2.0, 0.5), gather("fsdp-m-g2", 3, 3.5, 3.5, 0.03),
               gather("fsdp-m-g2", 1, 4.0, 3.9, 0.2, phase="backward"),
               gather("fsdp-m-g2", 0, 0.0, 0.0, 5.0, rank=1),  # rank 1's: not counted
               gather("fsdp-m-g2", 0, 0.0, 0.0, 5.0, collective="reduce-scatter",
                      phase="backward"),
               gather("zero2-m-g2", 0, 1.0, 0.8, 0.25),
               gather("fsdp-x-g2", 0, 0.0, 0.0, 0.5), gather("fsdp-x-g2", 1, 1.0, 1.0, 0.5),
               gather("fsdp-x-g2", 2, 2.0, 2.0, 0.5)]
    return Folder(write_folder(os.path.join(tmp, "sharded"), runs, buckets=buckets))


def case_sharded(fixtures):
    """gather_exposure, unit_ranges, and each line of sharded_lines."""
    wait = "It waits {:.3f} ms after backward for the {}, {:.0f} % of the step"
    last = "reduce-scatters of the last units"
    want = [
        "- zero1-m-g2: buckets.csv has no all-gather of it (it records the traced steps, "
        "--trace-steps). " + wait.format(0.5, "all-reduce", 10) + ". Against ddp-m-g2: zero1 "
        f"and ddp are within noise of each other (zero1's throughput 1.00x ddp's, 95 % "
        f"interval {4.9 / 5.2:.2f}–{5.1 / 4.7:.2f}x, which holds 1); zero1 holds 1.00 MiB more "
        f"per device at its peak (5.00 MiB against 4.00 MiB).",
        "- zero2-m-g2: its all-gathers leave 0.050 ms exposed, 1 % of the step: not what binds "
        "it. " + wait.format(0, last, 0) + ". Against ddp-m-g2: zero2 reaches 1.25x ddp's "
        f"throughput (95 % interval {4.9 / 4.1:.2f}–{5.1 / 3.9:.2f}x); zero2 holds 2.00 MiB less "
        f"per device at its peak (2.00 MiB against 4.00 MiB, 50 % saved).",
        "- fsdp-m-g2: the step is bound by the exposed all-gathers of units 0-1: "
        f"{100 * 1.13 / 6:.0f} % of the step (1.130 ms of 6.000 ms; the other units' under 1 % "
        "each). " + wait.format(0.3, last, 5) + ". Against ddp-m-g2: ddp reaches 1.20x fsdp's "
        f"throughput (95 % interval {5.9 / 5.1:.2f}–{6.1 / 4.9:.2f}x); fsdp holds 1.00 MiB less "
        f"per device at its peak (3.00 MiB against 4.00 MiB, 25 % saved).",
        "- fsdp-x-g2: the step is bound by the exposed all-gathers of units 0-2: 30 % of the "
        "step (1.500 ms of 5.000 ms). " + wait.format(0, last, 0) + "."]
    note = "In this folder ready_ms equals the gathers' begin"
    with tempfile.TemporaryDirectory() as tmp:
        folder = sharded_folder(tmp)
        runs = {r["config_id"]: r for r in folder.runs}
        per, ready = diagnose.gather_exposure(folder, runs["fsdp-m-g2"])
        want_per = {0: 0.5, 1: 0.6, 2: 0.0, 3: 0.03}
        expect(sorted(per) == sorted(want_per) and not ready and
               all(abs(per[u] - want_per[u]) < 1e-9 for u in per),
               f"fsdp-m-g2's exposure {per}, ready {ready}, expected {want_per}")
        expect(diagnose.gather_exposure(folder, runs["fsdp-x-g2"]) == ({0: 0.5, 1: 0.5, 2: 0.5},
                                                                      True), "fsdp-x-g2")
        expect(diagnose.gather_exposure(folder, runs["zero1-m-g2"]) is None, "zero1: gathers")
        got = diagnose.sharded_lines(folder)
        bullets = [l for l in got if l.startswith("- ")]
        expect(got[0] == "### Sharded strategies" and bullets == want and
               sum(l.startswith(note) for l in got) == 1,
               "sharded_lines:\n" + "\n".join(got) + "\nexpected\n" + "\n".join(want))
        expect(diagnose.diagnosis(folder) == ["## Diagnosis", ""] + got,
               "diagnosis of sharded runs alone")
        expect(diagnose.peak_bytes(folder, "fsdp-m-g2") == 3 * MiB and
               diagnose.peak_bytes(folder, "none") == 0.0, "peak_bytes")
    for units, want in (([2], "unit 2"), ([3, 4, 5], "units 3-5"), ([0, 1, 4], "units 0-1 and 4"),
                        ([0, 2, 4], "units 0, 2 and 4"), ([1, 2, 5, 7, 8], "units 1-2, 5 and 7-8")):
        got = diagnose.unit_ranges(units)
        expect(got == want, f"unit_ranges({units}): {got!r}, expected {want!r}")


def case_none(fixtures):
    """No pair, accumulation or sharded run on 2 or more devices: []. The
    folder's s model on one device; mixed-host, whose dp runs on 2 and 4
    devices ran out of memory; a folder of one device only."""
    with tempfile.TemporaryDirectory() as tmp:
        one = write_folder(os.path.join(tmp, "one"), [
            run("dp-s-g1", 1, SLOW), run("ddp-s-g1", 1, FAST),
            run("fsdp-s-g1", 1, FAST), run("dp-s-g1-acc2", 1, SLOW, accum=2)])
        folder = Folder(one)
        expect(diagnose.pairs(folder) == [] and diagnose.diagnosis(folder) == [],
               f"one device: {diagnose.diagnosis(folder)}")
    mixed = Folder(os.path.join(fixtures, "mixed-host"))
    expect(len(mixed.failed) == 8 and diagnose.diagnosis(mixed) == [],
           f"mixed-host: {len(mixed.failed)} failed, {diagnose.diagnosis(mixed)}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = pairs_folder(tmp)
        got = diagnose.diagnosis(folder)
        heads = [l for l in got if l.startswith("#")]
        expect(heads == ["## Diagnosis"] + [f"### {m}, fp32, sgd, weak scaling, 2 devices: {v} "
                                             f"and ddp" for m, v in (("m", "dp"), ("m", "dp-lean"),
                                                                     ("n", "dp"), ("w", "dp"))],
               f"the diagnosis' sections: {heads}")


if __name__ == "__main__":
    run_cases(globals())
