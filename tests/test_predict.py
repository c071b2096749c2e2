#!/usr/bin/env python3
"""dpscale predict: from machine and workload files, --from a results folder,
--calibrate's constants fitted and read back, --measure's one command against
the seven it stands for and on a model file, refusals.
Usage: test_predict.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1 fail,
77 skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("predict", DPSCALE, "predict", timeout=300),
         test("predict from", DPSCALE, "predict_from", timeout=300),
         test("predict calibrate", DPSCALE, "predict_calibrate", timeout=300),
         test("predict sharded", DPSCALE, "predict_sharded", timeout=300),
         test("predict sharded from", DPSCALE, "predict_sharded_from", timeout=300),
         test("predict measure", DPSCALE, "predict_measure", timeout=300),
         test("predict measure file", DPSCALE, "predict_measure_file", timeout=900)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import os
import subprocess
import sys
import tempfile

from dpstools import results as dpsresults
from helpers import (FIXTURES, SCRIPTS, dpscale, expect, expect_exit, read_table, run_cases,
                     set_cells, write)


def case_predict(binary):
    """dpscale predict: the table, predictions.csv written whole, and FILE:LINE refusals (exit 2)."""
    bench = os.path.join(os.path.dirname(SCRIPTS), "bench", "predict")
    machine, workload = (os.path.join(bench, f) for f in ("dgx1-v100-ib.machine", "resnet50-b32.workload"))
    with tempfile.TemporaryDirectory() as out:
        p = subprocess.run([binary, "predict", "--machine", machine, "--workload", workload, "--gpus",
                            "1,8,16,64", "--out", out, "--name", "p"], capture_output=True, text=True)
        expect_exit(p, 0)
        expect("ddp      8" in p.stdout and "skipped" in p.stdout, f"table: {p.stdout!r}")
        with open(os.path.join(out, "p", "predictions.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
        expect(len(rows) == 8 and os.listdir(os.path.join(out, "p")) == ["predictions.csv"], f"{rows}")
        by = {(r["mode"], r["ngpus"]): r for r in rows}
        expect(by[("dp", "16")]["status"] == "skipped" and by[("ddp", "16")]["status"] == "ok", f"{by}")
        expect(float(by[("dp", "1")]["step_ms"]) == 97.0, f"dp on one device: {by[('dp', '1')]}")
        ddp8 = by[("ddp", "8")]
        expect(int(ddp8["nbuckets"]) > 2 and 97 < float(ddp8["step_ms"]) < 110, f"{ddp8}")
        ddp64 = by[("ddp", "64")]  # 8 nodes of 8, past the file's nodes = 2: predicted, noted
        expect(ddp64["status"] == "ok" and ddp64["nodes"] == "8" and
               float(ddp64["step_ms"]) > float(ddp8["step_ms"]) and
               "more than the machine file's nodes = 2" in ddp64["note"], f"{ddp64}")
        bad = os.path.join(out, "bad.machine")
        with open(bad, "w") as f:
            f.write("gpus_per_node = 8\nintra_busbw_gbps = fast\n")
        p = subprocess.run([binary, "predict", "--machine", bad, "--workload", workload, "--gpus", "2"],
                           capture_output=True, text=True)
        expect_exit(p, 2, f"{bad}:2: intra_busbw_gbps = fast: expected a number")
        p = subprocess.run([binary, "predict", "--machine", machine, "--workload", workload],
                           capture_output=True, text=True)
        expect_exit(p, 2, "predict needs --gpus LIST")


def read_keyfile(path):
    """{key: value} of a `key = value` file (a calibration file), comments left out."""
    with open(path) as f:
        lines = [l.split("#", 1)[0].strip() for l in f]
    return dict(l.split(" = ", 1) for l in lines if l)


def predict_rows(path):
    """predictions.csv, read strictly, by (source, mode, ngpus)."""
    return {(r["source"], r["mode"], r["ngpus"]): r for r in read_table(path)}


def case_predict_from(binary):
    """predict --from a folder of one- and two-device runs and its comm-bench: a
    workload per series, profiled by its fastest one-device row; --calibrate
    fits the constants, --calibration reads them back; refusals exit 2."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "dp,ddp", "--gpus", "1,2", "--model", "tiny,small", "--steps",
                "4", "--warmup", "1", "--no-nvtx", out=out, name="r", check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "1,2"], capture_output=True,
                           text=True)
        expect_exit(p, 2, f"{folder}/allreduce.csv: missing or empty (run `dpscale comm-bench")
        dpscale(binary, "comm-bench", "--gpus", "2", "--sizes", "64K,1M", out=out, name="r",
                check_rc=0, backend=None)
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "1,2,300", "--out", out,
                            "--name", "p"], capture_output=True, text=True)
        expect_exit(p, 0)
        runs = {r["config_id"]: r for r in read_table(os.path.join(folder, "runs.csv"))}
        rows = predict_rows(os.path.join(out, "p", "predictions.csv"))
        sources = {k[0] for k in rows}
        expect(len(sources) == 2 and len(rows) == 12, f"two series, 3 counts, 2 modes: {sorted(rows)}")
        for src in sources:
            one = [r for r in runs.values() if r["ngpus"] == "1" and r["model"] == runs[src]["model"]
                   and r["scaling"] != "strong"]
            fastest = min(one, key=lambda r: float(r["step_ms_median"]))
            expect(src == fastest["config_id"], f"profile {src}, fastest {fastest['config_id']}")
            dp1 = rows[(src, "dp", "1")]
            expect(abs(float(dp1["step_ms"]) - float(fastest["step_ms_median"])) < 1e-3 and
                   dp1["model"] == fastest["model"], f"{dp1}")
            expect(rows[(src, "ddp", "300")]["status"] == "skipped" and
                   "300 devices need 150 nodes of 2" in rows[(src, "ddp", "300")]["note"], f"{rows}")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        cal = os.path.join(out, "c", "calibration.txt")
        consts = read_keyfile(cal)
        expect(set(consts) == {"bus_eff", "base_latency_us", "bucket_overhead_us", "sync_ms",
                               "dp_sync_ms", "compute_scale", "overlap_eff"}, f"{consts}")
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "2", "--calibration", cal,
                            "--out", out, "--name", "p2"], capture_output=True, text=True)
        expect_exit(p, 0)
        for r in predict_rows(os.path.join(out, "p2", "predictions.csv")).values():
            applied = {"sync_ms": consts["dp_sync_ms" if r["mode"] == "dp" else "sync_ms"]}
            for k, v in {**consts, **applied}.items():
                expect(abs(float(r[k]) - float(v)) < 1e-3, f"{k}: {r[k]} in predictions, {v} in {cal}")
        for args, needle in [(["--from", out + "/none", "--gpus", "2"], "runs.csv: missing or empty"),
                             (["--from", folder, "--workload", cal, "--gpus", "2"], "not both"),
                             (["--calibrate", folder, "--gpus", "2"], "--calibrate DIR fits constants only"),
                             (["--from", folder, "--gpus", "2", "--calibration", folder + "/runs.csv"],
                              "runs.csv:1: expected key = value")]:
            p = subprocess.run([binary, "predict", *args], capture_output=True, text=True)
            expect_exit(p, 2, needle)
        p = subprocess.run([binary, "run", "--gpus", "300"], capture_output=True, text=True)
        expect_exit(p, 2, "--gpus 300")


def case_predict_calibrate(binary):
    """--calibrate on a folder whose links, all-reduce, backward and buckets are
    set by hand: bus_eff from the all-reduce after backward, bucket_overhead_us
    from its wait to begin, overlap_eff from the one beside backward, each the
    figure the model's alpha-beta ring gives (busbw 1 GB/s, 2 us a ring step,
    NCCL's 8.4 us base)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "ddp", "--gpus", "1,2", "--model", "tiny", "--first-bucket-mb",
                "0.0198", "--bucket-mb", "1", "--steps", "4", "--warmup", "1", out=out, name="r",
                check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        g2 = next(r["config_id"] for r in read_table(os.path.join(folder, "runs.csv")) if r["ngpus"] == "2")
        write(os.path.join(folder, "links.csv"), "src,dst,method,bytes,bw_gbps,latency_us,status,backend,emulated\n"
              "host,dev0,h2d,1048576,10.0,,ok,host,1\ndev0,dev1,d2d_write,1048576,5.0,,ok,host,1\n"
              "dev0,dev1,latency,4,,2.0,ok,host,1\n")
        write(os.path.join(folder, "allreduce.csv"), "backend,method,nranks,bytes,time_us,algbw_gbps,busbw_gbps,check\n"
              "host,ring-shm,2,1048576,1048.6,1.0,1.0,pass\n")
        set_cells(os.path.join(folder, "phases.csv"), {"config_id": g2, "phase": "backward"},
                  {"median_ms": "10.0", "mean_ms": "10.0"})
        lat = (8.4 + 2 * 2.0) / 1000                      # ms: base + 2 ring steps
        full0, full1 = 20800 / 1e6 + lat, 16640 / 1e6 + lat  # ms at 1 GB/s, 2(n-1)/n = 1
        ms1 = full1 / 0.5                                   # after backward at half the bus
        busy0 = full0 / (0.25 * 0.5)                        # beside it at a quarter of that
        ms0 = busy0 + 0.3 - (1.5 - 1.0)                     # started at ready 1.0, began at 1.5
        rest = ",,,,,"  # wait_ms .. ready_step_ms: not read by the calibration
        rows = [f"{g2},{rank},0,0,20800,1.0,1.5,{ms0:.6f},3,all-reduce,backward{rest}\n"
                f"{g2},{rank},1,0,16640,9.9,10.2,{ms1:.6f},3,all-reduce,backward{rest}"
                for rank in (0, 1)]
        with open(os.path.join(folder, "buckets.csv")) as f:
            keep = [l for l in f.read().splitlines() if not l.startswith(g2 + ",")]
        write(os.path.join(folder, "buckets.csv"), "\n".join(keep + rows) + "\n")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        cal = os.path.join(out, "c", "calibration.txt")
        got = {k: float(v) for k, v in read_keyfile(cal).items()}
        for key, want, tol in [("bus_eff", 0.5, 1e-3), ("overlap_eff", 0.25, 1e-3),
                               ("bucket_overhead_us", 300.0, 0.5)]:
            expect(abs(got[key] - want) <= tol, f"{key} = {got[key]}, expected {want}: {got}")
        # one ddp row, one constant (sync_ms) fitted to its step: its error is n/a, not +0.0 %
        g2_line = next(l for l in p.stdout.splitlines() if l.strip().startswith(g2))
        expect(g2_line.endswith("n/a") and "bus_eff" not in p.stderr, f"{p.stdout}{p.stderr}")
        with open(cal) as f:
            text = f.read()
        expect("# note: ddp's error is n/a: 1 step time, 1 constant (sync_ms) fitted to it" in text and
               "bus_eff = 0.5000" in text and "# 1 point: all-reduces after backward" in text, text)
        # the all-reduce after backward 1.8 x faster than the bus allows: held to 1, warned of
        after = ms1 * 0.5 / 1.8
        write(os.path.join(folder, "buckets.csv"), "\n".join(keep + [r.replace(f"{ms1:.6f}", f"{after:.6f}")
                                                                     for r in rows]) + "\n")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        warned = "bus_eff = 1.8, fitted to 1 point (all-reduces after backward in buckets.csv), " \
                 "is outside its range (0, 1]: held to 1; the all-reduces ran faster than"
        expect(f"dpscale: calibration warning: {warned}" in p.stderr and "comm-bench" in p.stderr,
               p.stderr)
        with open(cal) as f:
            text = f.read()
        expect(f"# warning: {warned}" in text and read_keyfile(cal)["bus_eff"] == "1.0000", text)
        # without buckets.csv, bus_eff and sync_ms both from the one ddp step time
        os.remove(os.path.join(folder, "buckets.csv"))
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        warned = "ddp: 2 constants (bus_eff and sync_ms) fitted to 1 step time: any split between them"
        expect(f"dpscale: calibration warning: {warned}" in p.stderr and "--gpus 1,2,4" in p.stderr,
               p.stderr)
        with open(cal) as f:
            expect(f"# warning: {warned}" in f.read(), cal)


# A 100M-parameter model in 24 units (AdamW: 8 bytes of state a parameter) at 16
# samples a device, each sample's activations 100 MB: ddp holds 2 GB of model
# states and 1.6 GB of activations, fsdp on 8 devices a tenth of the states.
SHARDED_WORKLOAD = """name = big
params = 100000000
units = 24
step_ms_1gpu = 300
batch_per_gpu = 16
activation_bytes_per_sample = 100000000
optimizer = adamw
"""
SHARDED_MACHINE = "name = box\ngpus_per_node = 8\nintra_busbw_gbps = 100\n"
SHARDED = ("ddp", "zero1", "zero2", "fsdp")


def predict_sharded(binary, out, name, gib, workload=SHARDED_WORKLOAD, gpus="1,8"):
    """predictions.csv of every strategy of a process a device, by (mode, ngpus), and stdout."""
    files = [write(os.path.join(out, f), text) for f, text in
             ((name + ".machine", SHARDED_MACHINE + (f"gpu_mem_gib = {gib}\n" if gib else "")), (name + ".workload", workload))]
    p = subprocess.run([binary, "predict", "--machine", files[0], "--workload", files[1], "--gpus",
                        gpus, "--modes", ",".join(SHARDED), "--out", out, "--name", name],
                       capture_output=True, text=True)
    expect_exit(p, 0)
    table = dpsresults.read_predictions(os.path.join(out, name, "predictions.csv"))
    return {(r["mode"], r["ngpus"]): r for r in table}, p.stdout


def case_predict_sharded(binary):
    """--modes zero1,zero2,fsdp: the collectives' bytes (zero1 = ddp + an all-gather of the
    parameters, 1.5 x ddp's ring traffic; fsdp's about 1.5 x too), memory by the ZeRO
    formulas, and the fit point: on 2.5 GiB devices ddp is out of memory at 16 samples
    and fits 6, fsdp on 8 devices fits 24; without units, a sharded row is skipped."""
    G = 4 * 100000000
    with tempfile.TemporaryDirectory() as out:
        by, stdout = predict_sharded(binary, out, "p", 2.5)
        ddp, zero1, zero2, fsdp = (by[(m, "8")] for m in SHARDED)
        num = lambda r, k: float(r[k])  # noqa: E731
        expect(num(ddp, "allreduce_bytes") == G and num(ddp, "all_gather_bytes") == 0, f"{ddp}")
        expect(num(zero1, "allreduce_bytes") == G and num(zero1, "all_gather_bytes") == G and
               abs(num(zero1, "comm_bytes_per_step") / num(ddp, "comm_bytes_per_step") - 1.5) < 1e-6,
               f"zero1 is ddp plus an all-gather of the parameters: {zero1}")
        expect(num(zero2, "reduce_scatter_bytes") == G and num(zero2, "allreduce_bytes") == 0 and
               abs(num(zero2, "comm_bytes_per_step") / num(ddp, "comm_bytes_per_step") - 1) < 1e-6,
               f"zero2 moves ddp's bytes: {zero2}")
        ratio = num(fsdp, "comm_bytes_per_step") / num(ddp, "comm_bytes_per_step")
        expect(1.4 < ratio <= 1.5 and num(fsdp, "nunits") == 24 and
               num(fsdp, "all_gather_bytes") > 1.9 * G, f"fsdp moves {ratio:.3f} x ddp's: {fsdp}")
        # the post-step all-gather is exposed: zero1's step is ddp's and more
        expect(num(zero1, "step_ms") > num(ddp, "step_ms") and
               num(zero1, "optimizer_ms") > num(ddp, "optimizer_ms") / 8, f"{zero1}\n{ddp}")
        # memory: ddp 3 x 4P + 8P of AdamW; fsdp 4P/8 twice, 4 units, 8P/8; activations alike
        act = 16 * 100000000
        for r, states in ((ddp, 3 * G + 2 * G), (zero1, 3 * G + 2 * G / 8),
                          (zero2, G + G / 8 + 2 * G / 24 + 2 * G / 8),
                          (fsdp, 2 * G / 8 + 4 * G / 24 + 2 * G / 8)):
            expect(abs(num(r, "gpu0_mem_bytes") - states - act) < 1e6, f"{r['mode']}: {r}")
        expect(ddp["status"] == "oom" and "batch_per_gpu 6 fits" in ddp["note"] and
               ddp["max_batch_per_gpu"] == "6", f"ddp on 2.5 GiB: {ddp}")
        expect(fsdp["status"] == "ok" and fsdp["max_batch_per_gpu"] == "24", f"fsdp: {fsdp}")
        fits = {l.split()[0]: l.split()[9] for l in stdout.splitlines()
                if l.split() and l.split()[0] in SHARDED and l.split()[1] == "8"}
        expect(fits["ddp"] == "6" and fits["fsdp"] == fsdp["max_batch_per_gpu"],
               f"the table's max_batch: {fits}\n{stdout}")
        # without units or tensors, the sharded strategies have nothing to shard by
        bare = SHARDED_WORKLOAD.replace("units = 24\n", "")
        by, _ = predict_sharded(binary, out, "bare", 0, bare, "8")
        expect(by[("ddp", "8")]["status"] == "ok" and by[("ddp", "8")]["max_batch_per_gpu"] == "" and
               all(by[(m, "8")]["status"] == "skipped" and "units = N" in by[(m, "8")]["note"]
                   for m in SHARDED[1:]), f"{by}")


def case_predict_sharded_from(binary):
    """predict --from a folder of ddp, zero1 and fsdp runs on 1 and 2 devices: each run
    read with its strategy, every sharded strategy predicted, each one's memory against
    what the host backend allocated (devices.csv), and --calibrate fitting no constant to
    the sharded rows (no dp run: dp_sync_ms stays the default)."""
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "ddp,zero1,fsdp", "--gpus", "1,2", "--model", "small",
                "--steps", "4", "--warmup", "1", "--no-nvtx", out=out, name="r", check_rc=0,
                backend=None)
        for cmd in (["links", "--gpus", "2"], ["comm-bench", "--gpus", "2", "--sizes", "64K,1M"]):
            dpscale(binary, *cmd, out=out, name="r", check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        p = subprocess.run([binary, "predict", "--from", folder, "--gpus", "1,2", "--modes",
                            ",".join(SHARDED), "--out", out, "--name", "p"], capture_output=True,
                           text=True)
        expect_exit(p, 0)
        rows = {(r["mode"], r["ngpus"]): r
                for r in dpsresults.read_predictions(os.path.join(out, "p", "predictions.csv"))}
        expect(len(rows) == 8 and all(r["status"] == "ok" for r in rows.values()), f"{rows}")
        runs = read_table(os.path.join(folder, "runs.csv"))
        peak = {}
        for d in read_table(os.path.join(folder, "devices.csv")):
            peak[d["config_id"]] = max(peak.get(d["config_id"], 0), int(d["alloc_peak_bytes"]))
        for run in runs:
            got, want = float(rows[(run["mode"], run["ngpus"])]["gpu0_mem_bytes"]), peak[run["config_id"]]
            expect(abs(got / want - 1) < 0.25, f"{run['config_id']}: {got:.0f} B predicted, "
                   f"{want} B allocated")
        two = {r["mode"]: float(rows[(r["mode"], "2")]["gpu0_mem_bytes"]) for r in runs}
        expect(two["fsdp"] < two["zero1"] < two["ddp"], f"memory on 2 devices: {two}")
        p = subprocess.run([binary, "predict", "--calibrate", folder, "--out", out, "--name", "c"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        cal = os.path.join(out, "c", "calibration.txt")
        with open(cal) as f:
            text = f.read()
        listed = {l.split()[2] for l in text.splitlines() if l.startswith("# ") and "-g2-" in l}
        expect(listed == {"ddp", "zero1", "fsdp"} and "dp_sync_ms = 0.0000" in text and
               "2 rows of the sharded strategies (zero1, fsdp) fitted no constant" in text,
               f"calibration read the runs' strategies: {listed}\n{text}")


# predict --measure's seven commands (docs/predict.md), as each line it prints begins
MEASURE_STEPS = ["sweep --gpus 1,2 --model medium --layers 4 --width 768", "comm-bench --gpus 2",
                 "predict --calibrate", "sweep --gpus 1 --model tiny", "links --gpus 2",
                 "comm-bench --gpus 2", "predict --from"]


def measure(binary, out, *extra):
    """dpscale predict --measure of tiny into OUT/m: its step lines (exit 0 expected)."""
    p = subprocess.run([binary, "predict", "--measure", "--model", "tiny", "--gpus", "1,2",
                        "--steps", "2", "--warmup", "0", "--out", out, "--name", "m", *extra],
                       capture_output=True, text=True, timeout=240)
    expect_exit(p, 0)
    lines = [l for l in p.stdout.splitlines() if l.startswith("# measure ")]
    expect(len(lines) == 7, f"seven step lines:\n{p.stdout}")
    for k, (line, want) in enumerate(zip(lines, MEASURE_STEPS), 1):
        expect(line.startswith(f"# measure {k}/7") and f"dpscale {want}" in line.replace(" --resume", ""),
               f"step {k} names `dpscale {want}`: {line}")
    expect("ddp      2" in p.stdout and "predictions.csv in" in p.stdout, f"the table:\n{p.stdout}")
    return lines


def cells(path):
    """predictions.csv's rows, their cells alone (not where they were read)."""
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in read_table(path)]


def case_predict_measure(binary):
    """predict --measure: the seven commands run into one folder, each printed, then the
    predictions, which equal the seven-step form's on the same measured folders; run again,
    it measures nothing; its options without --measure, and --from with it, are refused."""
    with tempfile.TemporaryDirectory() as out:
        lines = measure(binary, out)
        folder = os.path.join(out, "m")
        expect(all(os.path.isfile(os.path.join(folder, f)) for f in
                   ("cal/runs.csv", "cal/allreduce.csv", "calibration/calibration.txt", "mine/runs.csv",
                    "mine/links.csv", "mine/allreduce.csv", "p/predictions.csv")), f"{lines}")
        # the seven-step form's arithmetic on the folders measured: steps 3 and 7
        for args in (["--calibrate", f"{folder}/cal", "--out", out, "--name", "c"],
                     ["--from", f"{folder}/mine", "--gpus", "1,2", "--calibration",
                      f"{out}/c/calibration.txt", "--out", out, "--name", "p"]):
            expect_exit(subprocess.run([binary, "predict", *args], capture_output=True, text=True), 0)
        by_hand, one = (cells(os.path.join(d, "p", "predictions.csv")) for d in (out, folder))
        expect(len(one) == 4 and one == by_hand, f"--measure {one}\nby hand {by_hand}")
        again = measure(binary, out)
        expect(all("skipped" in again[k] for k in (1, 4, 5)) and
               all("--resume" in again[k] for k in (0, 3)), "measured again:\n" + "\n".join(again))
        expect(cells(os.path.join(folder, "p", "predictions.csv")) == one, "predicted again")
        machine = os.path.join(os.path.dirname(SCRIPTS), "bench", "predict", "dgx1-v100-ib.machine")
        lines = measure(binary, out, "--machine", machine)
        expect(all(f"--machine {machine} " in lines[k] for k in (2, 6)), "\n".join(lines))
        for args, needle in [(["--model", "tiny", "--from", folder, "--gpus", "2"],
                              "--model: predict reads it only with --measure"),
                             (["--measure", "--from", folder, "--gpus", "2"], "--from: not with --measure"),
                             (["--measure", "--model", "tiny"], "predict --measure needs --gpus LIST")]:
            expect_exit(subprocess.run([binary, "predict", *args], capture_output=True, text=True), 2,
                        needle)


def case_predict_measure_file(binary):
    """predict --measure --model FILE: a file it cannot read, or an option a
    model file does not take, refused before anything is measured; a small
    file measured and predicted on 1 to 8 devices of a machine file, from the
    folder's copy of it; another file of the same name refused in that folder."""
    binary = os.path.abspath(binary)  # run from the model's folder
    machine = os.path.join(os.path.dirname(SCRIPTS), "bench", "predict", "dgx1-v100-ib.machine")
    with tempfile.TemporaryDirectory() as out:
        model = os.path.join(out, "enc.model")
        with open(os.path.join(FIXTURES, "models", "small-resnet.model")) as f:
            text = f.read()
        write(model, text)
        write(os.path.join(out, "bad.model"), text.replace("classes 10", "classes ten"))
        base = [binary, "predict", "--measure", "--gpus", "1,2,4,8", "--steps", "2", "--warmup", "0",
                "--machine", machine, "--out", out]
        for extra, needle in ((["--model", "bad.model"], "bad.model:5: classes=ten"),):
            p = subprocess.run(base + extra + ["--name", "refused"], capture_output=True, text=True,
                               timeout=300, cwd=out)
            expect_exit(p, 2, "the model's runs (step 4/7) would fail, so nothing was measured", needle)
            expect("# measure 1/7" not in p.stdout and
                   os.listdir(os.path.join(out, "refused")) == ["measure.log"], f"{extra}: measured")
        p = subprocess.run(base + ["--model", "enc.model", "--name", "m"], capture_output=True,
                           text=True, timeout=600, cwd=out)
        expect_exit(p, 0)
        expect(sum(l.startswith("# measure ") for l in p.stdout.splitlines()) == 7, p.stdout)
        rows = predict_rows(os.path.join(out, "m", "p", "predictions.csv"))
        got = sorted((m, int(n)) for (_, m, n), r in rows.items() if r["status"] == "ok")
        expect(got == [(m, n) for m in ("ddp", "dp") for n in (1, 2, 4, 8)] and
               all(r["model"] == "small-resnet" for r in rows.values()), f"predicted {got}")
        expect(os.listdir(os.path.join(out, "m", "mine", "models")) == ["small-resnet.model"],
               "the model's folder keeps its file")
        write(model, text.replace("dpscale-model 1", "dpscale-model 1\n# edited"))
        p = dpscale(binary, "run", "--model", model, "--gpus", "2", "--steps", "1", "--warmup", "0",
                    out=os.path.join(out, "m"), name="mine")
        expect_exit(p, 2, "mine/models/small-resnet.model: the folder's configurations of "
                    "small-resnet trained another file")


if __name__ == "__main__":
    run_cases(globals())
