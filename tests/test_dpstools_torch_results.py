#!/usr/bin/env python3
"""dpstools.torch_results, the PyTorch reference's results folder, on the
reports of three CPU ranks made up here with known figures (3 timed steps
after 1 warm-up step, 2 buckets each). ids: config_id's suffixes (-accN,
-syncall, -bk, -stockloss, -tf32on/off), fmt and fmt_scale (empty for
None, nan and inf; nine decimals for a scale), conv_path's cuDNN version
words, and meta.json's notes (accumulation, precision, --module) and its
tf32 and module objects. rows: the rows Gathered makes: a step's time its
slowest rank's, the loss the ranks' sums over batch x rows, each phase's
median, mean and share, the devices' peaks, and runs.csv's medians,
quantiles, rates and the all-reduce bandwidth from the buckets' spans
(the last rank's completion less the last rank's hand-over), none when
the ranks timed other numbers of buckets or without ddp. check:
check_folder refuses dpscale's folder (tests/fixtures/results-host) and
a file with other columns, and takes an empty folder and write_rows's
files; write_rows writes its header once. folder: write_results writes
steps, devices, phases and runs.csv with every column in dpscale's order
(read back by tests/helpers.py's read_folder) and meta.json's fields
(backend torch, this invocation, the CPU, the versions, tf32), the final
parameters, and appends a second configuration's run under one header.
Usage: test_dpstools_torch_results.py RESULTS_FIXTURE CASE; exit 0 pass, 1 fail, 77 skip
(folder, without PyTorch)."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test(f"dpstools torch_results {c}", FIXTURES + "/results-host", c, suite=NOSAN,
              timeout=300) for c in ("ids", "rows", "check")]
TESTS += [test("dpstools torch_results folder", FIXTURES + "/results-host", "folder",
               suite="torch", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import json
import math
import os
import re
import tempfile
from types import SimpleNamespace

from dpstools import torch_results
from dpstools.results import COLUMNS, META_KEYS, OPTIONAL_COLUMNS, PHASES, VERSIONS
from dpstools.torch_model import BUCKET_MB
from helpers import copy_fixture, expect, need_torch, read_folder, run_cases, write

RANKS, WARMUP, STEPS, BATCH, ROWS = 3, 1, 3, 4, 4
PARAMS, FLOPS, TOKENS = 1_000_000, 5e6, 4
STEP_MS = [[10, 12, 14], [11, 9, 20], [5, 5, 5]]  # each rank's timed steps
FORWARD_MS = [[2, 4, 3], [1, 1, 1], [6, 6, 6]]
LOSS_SUMS = [[8, 6, 4, 2], [8, 10, 4, 6], [0, 0, 0, 0]]  # warm-up step first
ALLOC_PEAK, BASE = [100, 300, 200], 900
# (hand-over, completion) of each bucket, ms, the same every step
SPANS = [[(1.0, 3.0), (4.0, 5.0)], [(2.0, 3.5), (4.5, 5.0)], [(1.5, 2.0), (3.0, 4.0)]]


class Spec:
    """A model as Gathered asks about it: rows a sample, parameters, its runs.csv columns."""
    rows, params = ROWS, PARAMS

    def columns(self):
        return {"model": "tiny", "layers": 2, "width": 8, "tokens": TOKENS, "classes": 3,
                "params": PARAMS}

    def fwd_flops(self):
        return FLOPS


def arguments(tmp="", **changes):
    a = dict(mode="ddp", model="tiny", precision="fp32", optimizer="sgd", gpus=RANKS,
             batch=BATCH, accum=1, no_sync="on", ddp_loss="global", tf32="default",
             device="cpu", steps=STEPS, warmup=WARMUP, lr=0.01, seed=7,
             start_time="2025-01-02T03:04:05Z", command_line=["torch_reference.py", "--gpus", "3"],
             out=tmp, name="t", save_params=os.path.join(tmp, "params.npy"), init_scale=65536.0,
             growth_interval=2000, module=None, model_file=None)
    a.update(changes)
    return SimpleNamespace(**a)


def report(r, spans=None):
    """Rank r's report as torch_train.Rank.report makes it on the CPU."""
    phases = [{**dict.fromkeys(PHASES, 0.0), "forward": float(FORWARD_MS[r][k]), "backward": 1.0}
              for k in range(STEPS)]
    return {"rank": r, "devices": [{"index": r, "name": "cpu (CPU, 1 thread)",
                                    "alloc_peak_bytes": ALLOC_PEAK[r],
                                    "device_peak_bytes": 1000 + r, "capacity_bytes": "",
                                    "base_bytes": BASE}],
            "step_ms": [float(x) for x in STEP_MS[r]], "phases": phases,
            "device_phases": [{} for _ in range(STEPS)], "busy": [],
            "loss_sums": [float(x) for x in LOSS_SUMS[r]],
            "scales": [None] * (WARMUP + STEPS), "skipped": [False] * (WARMUP + STEPS),
            "allreduce_spans": [spans or SPANS[r]] * STEPS, "load_bytes": 64}


def reports():
    return [report(r) for r in reversed(range(RANKS))]  # gathered in any order


# ---- what the figures above give, worked out by hand -----------------------------------

STEP = [11.0, 12.0, 20.0]  # each step's slowest rank
LOSS = [1.0, 1.0, 0.5, 0.5]  # the ranks' sums over BATCH * ROWS = 16
MEDIAN, MEAN = 12.0, 43 / 3
STDEV = math.sqrt(((11 - MEAN) ** 2 + (12 - MEAN) ** 2 + (20 - MEAN) ** 2) / 2)
P10, P90 = 11 + 0.2 * (12 - 11), 12 + 0.8 * (20 - 12)  # sorted [11, 12, 20] at 0.2 and 1.8
ALLREDUCE_MS = (3.5 - 2.0) + (5.0 - 4.5)
ALGBW = PARAMS * 4 / (ALLREDUCE_MS * 1e-3) / 1e9  # 2 GB/s
BUSBW = ALGBW * 2 * (RANKS - 1) / RANKS
CID = f"ddp-tiny-fp32-sgd-g3-b4-bk{BUCKET_MB}"


def expect_equal(got, want, what):
    expect(got == want, f"{what}: {got!r}, expected {want!r}")


def case_ids(_):
    ids = {(): CID, (("accum", 2),): CID.replace("-b4-", "-b4-acc2-"),
           (("accum", 2), ("no_sync", "off")): CID.replace("-b4-", "-b4-acc2-syncall-"),
           (("no_sync", "off"),): CID,  # -syncall only with micro-steps
           (("ddp_loss", "stock"),): CID + "-stockloss",
           (("tf32", "on"),): CID + "-tf32on", (("tf32", "off"),): CID + "-tf32off",
           (("tf32", "on"), ("precision", "bf16")): CID.replace("fp32", "bf16"),
           (("mode", "dp"), ("accum", 3)): "dp-tiny-fp32-sgd-g3-b4-acc3"}
    for changes, want in ids.items():
        expect_equal(torch_results.config_id(arguments(**dict(changes))), want,
                     f"config_id with {dict(changes)}")
    for x, d, want in ((None, 2, ""), (float("nan"), 2, ""), (float("inf"), 2, ""),
                       (1.23456, 2, "1.23"), (2, 3, "2.000"), (-0.5, 1, "-0.5")):
        expect_equal(torch_results.fmt(x, d), want, f"fmt({x}, {d})")
    expect_equal(torch_results.fmt_scale(None), "", "fmt_scale(None)")
    expect_equal(torch_results.fmt_scale(2.0 ** -30), "0.000000001", "fmt_scale(2^-30)")
    expect_equal(torch_results.fmt_scale(65536.0), "65536.000000000", "fmt_scale(65536)")
    for version, want in ((90100, "cudnn 9.1.0"), (8902, "cudnn 8.9.2"), (90300, "cudnn 9.3.0")):
        cudnn = SimpleNamespace(is_available=lambda: True, version=lambda v=version: v)
        fake = SimpleNamespace(backends=SimpleNamespace(cudnn=cudnn))
        expect_equal(torch_results.conv_path(fake, True), want, f"conv_path, cuDNN {version}")
        expect_equal(torch_results.conv_path(fake, False), "PyTorch's CPU convolutions",
                     "conv_path on the CPU")
    notes = {(): "", (("accum", 2),): "; 2 micro-steps a step, all but the last under no_sync()",
             (("accum", 2), ("no_sync", "off")): "; 2 micro-steps a step, every micro-step "
                                                 "all-reduced",
             (("accum", 2), ("mode", "dp")): "; 2 micro-steps a step",
             (("precision", "bf16"),): "; bf16: dpscale's autocast maths cast by hand "
                                       "(torch_model.autocast_bf16)",
             (("precision", "fp16"),): "; fp16: torch.autocast and GradScaler(init_scale=65536, "
                                       "growth_interval=2000)"}
    for changes, want in notes.items():
        expect_equal(torch_results.precision_note(arguments(**dict(changes)), False), want,
                     f"precision_note with {dict(changes)}")
    expect_equal(torch_results.module_note(arguments()), "", "module_note without --module")
    expect_equal(torch_results.module_note(arguments(module="m:f", model_file="a.model")),
                 "; the nn.Module m:f itself (its own ops), from dpscale's initial parameters "
                 "of a.model", "module_note with a model file")
    expect_equal(torch_results.module_meta(arguments()), {}, "module_meta without --module")
    expect_equal(torch_results.module_meta(arguments(module="m:f")),
                 {"module": {"spec": "m:f", "model_file": ""}}, "module_meta without a file")
    for mode, cudnn, matmul in (("default", True, False), ("on", True, True),
                                ("off", False, False)):
        tf32 = torch_results.tf32_meta(arguments(tf32=mode, device="cuda"))["tf32"]
        expect_equal((tf32["mode"], tf32["cudnn_allow_tf32"], tf32["cuda_matmul_allow_tf32"]),
                     (mode, cudnn, matmul), f"tf32_meta --tf32 {mode}")


def by_key(rows, *cols):
    """{(its cells of cols, as text): row}."""
    return {tuple(str(r[c]) for c in cols): r for r in rows}


def check_steps(rows):
    expect_equal(len(rows), STEPS * RANKS, "steps.csv rows")
    step = by_key(rows, "step", "rank")
    for k in range(STEPS):
        for n in range(RANKS):
            r = {c: str(v) for c, v in step[(str(k), str(n))].items()}
            want = {"config_id": CID, "device_index": str(n), "step_ms": f"{STEP[k]:.4f}",
                    "rank_step_ms": f"{STEP_MS[n][k]:.4f}", "loss": f"{LOSS[WARMUP + k]:.6f}",
                    "micro_steps": "1", "skipped": "0", "loss_scale": "",
                    "forward_ms": f"{FORWARD_MS[n][k]:.4f}", "backward_ms": "1.0000",
                    "load_ms": "0.0000"}
            got = {c: r[c] for c in want}
            expect_equal(got, want, f"steps.csv step {k} rank {n}")


def check_phases(rows):
    expect_equal(len(rows), RANKS * len(PHASES), "phases.csv rows")
    phase = by_key(rows, "device", "phase")
    for n in range(RANKS):
        f = sorted(FORWARD_MS[n])
        r = {c: str(v) for c, v in phase[(str(n), "forward")].items()}
        want = {"median_ms": f"{f[1]:.4f}", "mean_ms": f"{sum(f) / 3:.4f}",
                "share_of_step": f"{f[1] / MEDIAN:.4f}", "bytes_per_step": "",
                "achieved_gbps": "", "python_overhead_ms": ""}
        expect_equal({c: r[c] for c in want}, want, f"phases.csv device {n} forward")
        load = {c: str(phase[(str(n), "load")][c]) for c in ("median_ms", "bytes_per_step")}
        expect_equal(load, {"median_ms": "0.0000", "bytes_per_step": ""},
                     f"phases.csv device {n} load (on the CPU a view: no bytes)")


def check_devices(rows):
    expect_equal(len(rows), RANKS, "devices.csv rows")
    for n, r in enumerate(rows):
        got = {c: str(r[c]) for c in ("device", "device_index", "alloc_peak_bytes",
                                      "device_peak_bytes", "capacity_bytes",
                                      "h2d_bytes_per_step", "device_base_bytes",
                                      "device_peak_over_base_bytes")}
        want = {"device": str(n), "device_index": str(n), "alloc_peak_bytes": str(ALLOC_PEAK[n]),
                "device_peak_bytes": str(1000 + n), "capacity_bytes": "",
                "h2d_bytes_per_step": "", "device_base_bytes": str(BASE),
                "device_peak_over_base_bytes": str(1000 + n - BASE)}
        expect_equal(got, want, f"devices.csv device {n}")


RUN = {"config_id": CID, "status": "ok", "backend": "torch", "mode": "ddp", "ngpus": "3",
       "devices": "0 1 2", "model": "tiny", "tokens": str(TOKENS), "params": str(PARAMS),
       "lr": "0.010000", "global_batch": "4", "batch_per_gpu": "2", "bucket_mb": f"{BUCKET_MB:.3f}",
       "overlap": "1", "accum": "1", "no_sync": "on", "skipped_steps": "", "steps": "3",
       "steps_done": "3", "warmup": "1", "step_ms_median": f"{MEDIAN:.4f}",
       "step_ms_p10": f"{P10:.4f}", "step_ms_p90": f"{P90:.4f}", "step_ms_mean": f"{MEAN:.4f}",
       "step_ms_stdev": f"{STDEV:.4f}", "samples_per_s": f"{BATCH / (MEDIAN * 1e-3):.3f}",
       "tokens_per_s": f"{TOKENS * BATCH / (MEDIAN * 1e-3):.1f}",
       "model_tflops": f"{3 * FLOPS * BATCH / (MEDIAN * 1e-3) / 1e12:.6f}",
       "loss_first": f"{LOSS[0]:.6f}", "loss_last": f"{LOSS[-1]:.6f}",
       "gpu0_alloc_peak_bytes": "100", "max_other_alloc_peak_bytes": "300",
       "algbw_gbps": f"{ALGBW:.3f}", "busbw_gbps": f"{BUSBW:.3f}",
       "start_time": "2025-01-02T03:04:05Z"}


def check_run(row):
    got = {c: str(row[c]) for c in RUN}
    wrong = {c: (got[c], RUN[c]) for c in RUN if got[c] != RUN[c]}
    expect(not wrong, f"runs.csv: (written, expected) {wrong}")
    expect(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", str(row["end_time"])),
           f"runs.csv end_time {row['end_time']!r}")


def case_rows(_):
    g = torch_results.Gathered(arguments(), Spec(), reports())
    expect_equal(g.step_ms, STEP, "each step's time (its slowest rank's)")
    expect_equal(g.loss, LOSS, "each step's loss")
    check_steps(g.steps_rows())
    check_phases(g.phases_rows())
    check_devices(g.devices_rows())
    check_run(g.run_row())
    expect_equal(g.allreduce_span_ms(0), ALLREDUCE_MS, "all-reduce span of step 0")
    uneven = [report(0), report(1, spans=[(2.0, 3.5)]), report(2)]
    g = torch_results.Gathered(arguments(), Spec(), uneven)
    expect_equal((g.allreduce_span_ms(0), g.bandwidth()), (None, (None, None)),
                 "span and bandwidth of ranks that timed other numbers of buckets")
    g = torch_results.Gathered(arguments(mode="dp"), Spec(), reports())
    expect_equal(g.bandwidth(), (None, None), "dp's bandwidth (no all-reduce)")
    g = torch_results.Gathered(arguments(precision="fp16"), Spec(), reports())
    expect_equal(g.skipped_steps(), 0, "fp16's skipped steps (none skipped)")


def expect_usage(folder, needle):
    try:
        torch_results.check_folder(folder)
    except torch_results.Usage as e:
        expect(needle in str(e), f"check_folder({folder}): {e}; expected {needle!r} in it")
        return
    expect(False, f"check_folder({folder}) took it; expected a refusal with {needle!r}")


def case_check(fixture):
    with tempfile.TemporaryDirectory() as tmp:
        expect_usage(copy_fixture(fixture, tmp, "dpscale"), "backend host")
        mine = os.path.join(tmp, "mine")
        os.makedirs(mine)
        torch_results.check_folder(mine)  # nothing there yet
        write(os.path.join(mine, "runs.csv"), "")  # empty: as if never written
        torch_results.check_folder(mine)
        torch_results.write_rows(mine, "phases.csv", [{"config_id": "a", "device": 0}])
        torch_results.write_rows(mine, "phases.csv", [{"config_id": "b", "phase": "load"}])
        with open(os.path.join(mine, "phases.csv"), newline="") as f:
            lines = list(csv.reader(f))
        want_head = COLUMNS["phases.csv"] + ["python_overhead_ms"]
        expect_equal(lines[0], want_head, "phases.csv's header")
        blank = [""] * len(want_head)
        expect_equal(lines[1:], [["a", "0"] + blank[2:], ["b", "", "load"] + blank[3:]],
                     "phases.csv's rows (each column's cell, empty where not given)")
        torch_results.check_folder(mine)
        write(os.path.join(mine, "steps.csv"), ",".join(COLUMNS["steps.csv"][:-1]) + "\n")
        expect_usage(mine, "columns differ")


def case_folder(fixture):
    skip = need_torch()
    if skip:
        return skip
    import numpy as np
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        args = arguments(tmp)
        torch_results.write_results(args, Spec(), reports(), np.arange(3.0))
        folder = os.path.join(tmp, "t")
        for name in ("steps.csv", "devices.csv", "phases.csv", "runs.csv"):
            with open(os.path.join(folder, name), newline="") as f:
                head = next(csv.reader(f))
            expect_equal(head, COLUMNS[name] + OPTIONAL_COLUMNS.get(name, []), f"{name}'s header")
        runs, devices, steps, phases, meta = read_folder(folder, torch=True)
        check_steps(list(steps))
        check_devices(list(devices))
        check_phases(list(phases))
        check_run(list(runs)[0])
        with open(os.path.join(folder, "meta.json")) as f:
            meta = json.load(f)
        expect(set(META_KEYS) <= set(meta), f"meta.json lacks {set(META_KEYS) - set(meta)}")
        got = {k: meta[k] for k in ("dpscale_version", "command_line", "start_time", "backend",
                                    "emulated", "topology", "tf32")}
        want = {"dpscale_version": "torch_reference.py", "command_line": args.command_line,
                "start_time": args.start_time, "backend": "torch", "emulated": False,
                "topology": "", "tf32": {**meta["tf32"], "mode": "default",
                                         "cudnn_allow_tf32": True, "cuda_matmul_allow_tf32": False}}
        expect_equal(got, want, "meta.json")
        expect("module" not in meta, "meta.json has a module without --module")
        versions = meta["versions"]
        expect(set(VERSIONS) <= set(versions) and versions["torch"] == torch.__version__ and
               versions["runtime"] == "" and versions["conv"] == "PyTorch's CPU convolutions",
               f"meta.json versions {versions}")
        expect(len(meta["devices"]) == 1, f"meta.json devices {meta['devices']}, expected the CPU")
        dev = meta["devices"][0]
        expect(dev["index"] == 0 and dev["memory_bytes"] == 0 and
               dev["name"].endswith(f"(CPU, {os.cpu_count()} cores)"), f"meta.json devices {dev}")
        expect(meta["note"].startswith(f"PyTorch {torch.__version__} on the CPU: "
                                       "DistributedDataParallel over gloo, ddp loss: global") and
               meta["note"].endswith("; one process per rank with one thread"),
               f"meta.json note {meta['note']!r}")
        expect_equal(sorted(meta["memory"]), ["alloc_peak_bytes", "device_base_bytes",
                                              "device_peak_bytes"], "meta.json memory's keys")
        expect(os.path.exists(args.save_params), f"no {args.save_params}")
        expect_equal(np.load(args.save_params).tolist(), [0.0, 1.0, 2.0], "the saved parameters")
        expect(not os.path.exists(os.path.join(folder, "torch_ops.csv")),
               "torch_ops.csv written without ops in the reports")
        torch_results.write_results(arguments(tmp, batch=8), Spec(), reports(), None)
        with open(os.path.join(folder, "runs.csv"), newline="") as f:
            ids = [r["config_id"] for r in csv.DictReader(f)]
        expect_equal(ids, [CID, CID.replace("-b4-", "-b8-")], "runs.csv after a second run")
        torch_results.check_folder(folder)


if __name__ == "__main__":
    run_cases(globals())
