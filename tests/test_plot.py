#!/usr/bin/env python3
"""scripts/plot.py on the fixture folder: every chart drawn, malformed folders
refused, and summary.md's diagnosis of the bottleneck from the numbers.
Usage: test_plot.py FIXTURE CASE | --list (FIXTURE: a results folder); exit 0
pass, 1 fail, 77 skip (meson's convention)."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

HOST = FIXTURES + "/results-host"
TESTS = [test("plot", HOST, "plot", suite=NOSAN, timeout=300),
         test("diagnosis", HOST, "diagnosis", suite=NOSAN, timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import sys
import tempfile

from helpers import (copy_fixture, dpsresults, expect, expect_exit, png_size, run_cases, script,
                     set_cells, write)


def case_diagnosis(fixture):
    """summary.md names the bottleneck from the numbers: a folder where dp's
    reduce onto device 0 takes 41 % of its step and ddp is 1.5x faster, and
    where dp's device 0 holds 3 MiB of gathered logits and 1 MiB of loss
    buffers more than the others; and the reverse case names ddp's exposed
    all-reduce."""
    dp, ddp = "dp-small-fp32-sgd-g4-b64", "ddp-small-fp32-sgd-g4-b64-bk25"
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture(fixture, tmp, "res")
        runs = os.path.join(folder, "runs.csv")
        set_cells(runs, {"config_id": dp}, {"step_ms_median": "10.0", "samples_per_s": "1000"})
        set_cells(runs, {"config_id": ddp}, {"step_ms_median": "6.0", "samples_per_s": "1500"})
        steps = os.path.join(folder, "steps.csv")  # the step times the ratio's interval reads
        set_cells(steps, {"config_id": dp}, {"step_ms": "10.0", "rank_step_ms": "10.0"})
        set_cells(steps, {"config_id": ddp}, {"step_ms": "6.6667", "rank_step_ms": "6.6667"})
        phases = os.path.join(folder, "phases.csv")
        set_cells(phases, {"config_id": dp, "device": "0", "phase": "reduce"}, {"median_ms": "4.1"})
        set_cells(phases, {"config_id": ddp, "device": "0", "phase": "allreduce_exposed"},
                  {"median_ms": "0.6"})
        rows = ["config_id,device,device_index,category,bytes_at_peak"]
        for d in range(4):
            rows.append(f"{dp},{d},{d},parameters,{2 ** 20}")
        rows += [f"{dp},0,0,gathered logits,{3 * 2 ** 20}", f"{dp},0,0,loss buffers,{2 ** 20}"]
        write(os.path.join(folder, "memory.csv"), "\n".join(rows) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out"))
        expect_exit(p, 0)
        md = open(os.path.join(tmp, "out", "summary.md")).read()
        for want in ["## At a glance",
                     "| small | fp32 | weak | 4 | 1000.0 | 1500.0 | ddp | 1.50x [1.50, 1.50] |",
                     "### small, fp32, sgd, weak scaling, 4 devices: dp and ddp",
                     "ddp reaches 1.50x dp's throughput (95 % interval 1.50–1.50x): dp is bound "
                     "by the reduce of the gradients onto device 0: 41 % of the step (4.100 ms "
                     "of 10.000 ms); ",
                     "ddp's exposed all-reduce: 0.600 ms, 10 % of its step.",
                     "| reduce | 4.100 | 41.0 |",
                     "dp's device 0 holds more than the others' mean at its peak: gathered "
                     "logits (3.00 MiB), loss buffers (1.00 MiB)."]:
            expect(want in md, f"summary.md lacks {want!r}:\n{md[:4000]}")
        set_cells(runs, {"config_id": ddp}, {"step_ms_median": "20.0", "samples_per_s": "500"})
        set_cells(steps, {"config_id": ddp}, {"step_ms": "20.0", "rank_step_ms": "20.0"})
        set_cells(phases, {"config_id": ddp, "device": "0", "phase": "allreduce_exposed"},
                  {"median_ms": "9.5"})
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out2"))
        expect_exit(p, 0)
        md = open(os.path.join(tmp, "out2", "summary.md")).read()
        want = ("dp reaches 2.00x ddp's throughput (95 % interval 2.00–2.00x): ddp's step is "
                "10.000 ms longer, the largest part in its exposed all-reduce (+9.500 ms on "
                "device 0)")
        expect(want in md, f"summary.md lacks {want!r}:\n{md[:4000]}")


def case_plot(fixture):
    """plot.py draws every chart from a results folder and refuses malformed ones."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = copy_fixture(fixture, tmp, "res")
        write(os.path.join(folder, "links.csv"),  # a links matrix, to draw links.png too
              "src,dst,method,bytes,bw_gbps,latency_us,status\nhost,dev0,h2d,1048576,10.5,,ok\n"
              "dev0,dev1,d2d_write,1048576,20.1,,ok\ndev1,dev0,d2d_write,1048576,19.9,,ok\n"
              "dev0,dev1,latency,4,,3.0,ok\n")
        rows = ["config_id,device,device_index,category,bytes_at_peak"]
        for d in dpsresults.read_csv(os.path.join(folder, "devices.csv"), ["alloc_peak_bytes"]):
            half = int(d["alloc_peak_bytes"]) // 2
            rows += [f"{d['config_id']},{d['device']},{d['device']},parameters,{half}",
                     f"{d['config_id']},{d['device']},{d['device']},gradients,"
                     f"{int(d['alloc_peak_bytes']) - half}"]
        write(os.path.join(folder, "memory.csv"), "\n".join(rows) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out"))
        expect_exit(p, 0)
        for name in ("scaling", "efficiency", "gpu0_imbalance", "phases", "links", "memory"):
            path = os.path.join(tmp, "out", name + ".png")
            expect(os.path.exists(path), f"{name}.png missing")
            w, h = png_size(path)
            expect(400 <= w <= 4000 and 300 <= h <= 4000, f"{name}.png is {w}x{h}")
            expect(os.path.getsize(path) > 15000, f"{name}.png is only {os.path.getsize(path)} B")
        md = open(os.path.join(tmp, "out", "summary.md")).read()
        expect("emulated" in md and "![scaling](scaling.png)" in md and "| small | fp32 | weak | 4 |" in md,
               "summary.md lacks the table, the label or the links")
        # malformed folders: exit 2 with the file named
        runs = open(os.path.join(folder, "runs.csv")).read().splitlines()
        header = runs[0].split(",")
        col = header.index("samples_per_s")
        write(os.path.join(folder, "runs.csv"),
              "\n".join(",".join(c for i, c in enumerate(l.split(",")) if i != col) for l in runs) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out2"))
        expect_exit(p, 2, "runs.csv:1: missing column(s) samples_per_s")
        bad = runs[:]
        cells = bad[1].split(",")
        cells[col] = "fast"
        bad[1] = ",".join(cells)
        write(os.path.join(folder, "runs.csv"), "\n".join(bad) + "\n")
        p = script("plot.py", folder, "--out", os.path.join(tmp, "out3"))
        expect_exit(p, 2, "runs.csv:2: column samples_per_s is not a number")
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        p = script("plot.py", empty, "--out", os.path.join(tmp, "out4"))
        expect_exit(p, 2, "runs.csv: no such file")


if __name__ == "__main__":
    run_cases(globals())
