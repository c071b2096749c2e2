#!/usr/bin/env python3
"""Gradient accumulation and half precision on the host backend: --check
over the whole matrix, ddp's all-reduces per optimizer step as buckets.csv
and the trace record them, the records of micro-steps, and what is refused.
(PyTorch's losses and GradScaler's sequence: test_accum_reference.py.)

usage: test_accum.py DPSCALE CASE
  check       dp and ddp on 1 to 4 devices, --accum 1 and 4, fp32, bf16 and
              fp16, SGD and AdamW: every --check passing (96 configurations)
  allreduces  ddp on 2 ranks, --accum 4, several buckets: one all-reduce a
              bucket per optimizer step under no_sync, 4 without it
              (--no-sync off), in buckets.csv (micro_step) and in the trace
  records     steps.csv's micro_steps and runs.csv's accum and no_sync; the
              trace's phases a micro-step each, dp's replicate and reduce 4
              times a step; --accum 4 trains as --accum 1 on the same samples
  refused     a batch that does not split, --no-sync off with dp or one
              micro-step, fp16 without its scaler or with a scale fp32 cannot
              hold, --inject-overflow without a scaler or past the run, half
              precision with a model file, an added sweep repeating a run with
              other steps: exit 2 saying what and what to do"""
from listing import DPSCALE, FIXTURES, LONG, exit_if_listing, test

# hang guards: check's sweep of 96 configurations takes a minute on a loaded machine, and
# 3-5 times that in CI's sanitizer build
TESTS = [test("accum " + c, DPSCALE, c, timeout=1200 if c == "check" else 300,
              priority=LONG if c == "check" else 0)
         for c in ("check", "allreduces", "records", "refused")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import csv
import json
import os
import tempfile

from helpers import dpscale, expect, expect_exit, losses, read_folder, rel_diff, run_cases

SMALL_FILE = os.path.join(FIXTURES, "models", "small-resnet.model")


def case_check(binary):
    with tempfile.TemporaryDirectory() as tmp:
        suite = os.path.join(tmp, "m.suite")
        with open(suite, "w") as f:
            f.write("modes = dp, ddp\ngpus = 1, 2, 3, 4\nmodels = tiny\naccum = 1, 4\n"
                    "precisions = fp32, bf16, fp16\noptimizers = sgd, adamw\nglobal_batch = 48\n"
                    "batch = strong\nsteps = 2\nwarmup = 1\n")
        out = os.path.join(tmp, "res")
        p = dpscale(binary, "sweep", suite, "--host-devices", "4", "--check", "--no-links",
                    out=out, name="s", timeout=1100)
        expect(p.returncode == 0, f"sweep exit {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr}")
        runs = read_folder(os.path.join(out, "s"))[0]
        expect(len(runs) == 96, f"{len(runs)} configurations, expected 96")
        for r in runs:
            expect(r["status"] == "ok" and r["check"] == "pass",
                   f"{r['config_id']}: status {r['status']}, check {r['check']} "
                   f"({r['check_max_rel_diff']}): {r['error']}")
        seen = {(r["mode"], r["accum"], r["precision"]) for r in runs}
        expect(len(seen) == 12, f"{sorted(seen)}")


def bucket_rows(folder):
    with open(os.path.join(folder, "buckets.csv")) as f:
        return list(csv.DictReader(f))


def trace_events(folder):
    names = os.listdir(os.path.join(folder, "trace"))
    return json.load(open(os.path.join(folder, "trace", names[0])))["traceEvents"]


def case_allreduces(binary):
    """tiny's 9k parameters in buckets of at most 4 KiB: three buckets."""
    with tempfile.TemporaryDirectory() as out:
        got = {}
        for sync in ("on", "off"):
            p = dpscale(binary, "run", "--mode", "ddp", "--gpus", "2", "--model", "tiny", "--batch",
                        "16", "--accum", "4", "--no-sync", sync, "--bucket-mb", "0.004",
                        "--first-bucket-mb", "0.004", "--steps", "3", "--warmup", "1",
                        "--trace-steps", "2", out=out, name=sync)
            expect(p.returncode == 0, f"--no-sync {sync}: exit {p.returncode}:\n{p.stderr}")
            folder = os.path.join(out, sync)
            rows = bucket_rows(folder)
            for rank in ("0", "1"):
                mine = [r for r in rows if r["rank"] == rank]
                got[sync, rank] = (len({r["bucket"] for r in mine}), len(mine),
                                   sorted({int(r["micro_step"]) for r in mine}))
            ends = [e for e in trace_events(folder) if e.get("cat") == "allreduce"]
            per_rank_step = {}
            for e in ends:
                key = (e["pid"], e["args"]["step"])
                per_rank_step[key] = per_rank_step.get(key, 0) + 1
            got[sync, "trace"] = sorted(set(per_rank_step.values()))
        nbk = got["on", "0"][0]
        expect(nbk >= 3, f"{nbk} buckets: the test needs several")
        for rank in ("0", "1"):
            expect(got["on", rank] == (nbk, nbk, [3]),
                   f"no_sync, rank {rank}: (buckets, all-reduces, micro-steps) {got['on', rank]}, "
                   f"expected ({nbk}, {nbk}, [3]): one all-reduce a bucket, in the last micro-step")
            expect(got["off", rank] == (nbk, 4 * nbk, [0, 1, 2, 3]),
                   f"--no-sync off, rank {rank}: {got['off', rank]}, expected ({nbk}, {4 * nbk}, "
                   "[0, 1, 2, 3]): every micro-step all-reduces every bucket")
        expect(got["on", "trace"] == [nbk] and got["off", "trace"] == [4 * nbk],
               f"all-reduces a traced step and rank: no_sync {got['on', 'trace']}, without "
               f"{got['off', 'trace']}; expected [{nbk}] and [{4 * nbk}]")


def case_records(binary):
    with tempfile.TemporaryDirectory() as out:
        base = ["--gpus", "2", "--model", "tiny", "--batch", "16", "--steps", "3", "--warmup", "1",
                "--trace-steps", "1"]
        for mode in ("dp", "ddp"):
            for accum in ("1", "4"):
                p = dpscale(binary, "run", "--mode", mode, *base, "--accum", accum, out=out,
                            name=f"{mode}{accum}")
                expect(p.returncode == 0, f"{mode} --accum {accum}: exit {p.returncode}:\n{p.stderr}")
            one, four = (os.path.join(out, f"{mode}{a}") for a in ("1", "4"))
            runs, _, steps, _, _ = read_folder(four)
            expect(runs[0]["accum"] == "4" and runs[0]["no_sync"] == ("on" if mode == "ddp" else ""),
                   f"{mode}: runs.csv accum {runs[0]['accum']!r}, no_sync {runs[0]['no_sync']!r}")
            expect(runs[0]["config_id"].endswith("-acc4") or "-acc4-" in runs[0]["config_id"],
                   runs[0]["config_id"])
            expect({s["micro_steps"] for s in steps} == {"4"}, f"{mode}: micro_steps "
                   f"{sorted({s['micro_steps'] for s in steps})}")
            a, b = losses(one)[1], losses(four)[1]
            worst = max(rel_diff(x, y) for x, y in zip(a, b))
            expect(len(a) == len(b) and worst <= 1e-5,
                   f"{mode}: --accum 4's losses {b} against --accum 1's {a}: {worst:.3g}")
            forward = [e for e in trace_events(four) if e.get("name") == "forward"]
            micro = sorted({e["args"]["micro_step"] for e in forward})
            expect(micro == [0, 1, 2, 3], f"{mode}: the trace's forward slices' micro-steps {micro}")
            if mode == "dp":
                moves = [e for e in trace_events(four) if e.get("name") in ("replicate", "reduce")
                         and e["pid"] == forward[0]["pid"]]
                expect(len(moves) >= 8, f"dp --accum 4: {len(moves)} replicate and reduce slices "
                       "on device 0 in a traced step; DataParallel runs both every micro-step")


def case_refused(binary):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "res")
        cases = [
            (["--gpus", "2", "--batch", "12", "--accum", "4"],
             ["--batch 12 --gpus 2 --accum 4", "multiple of 8", "for example 16"]),
            (["--mode", "dp", "--accum", "2", "--no-sync", "off"], ["--no-sync", "DDP's buckets (ddp, zero1)", "--mode ddp"]),
            (["--mode", "ddp", "--no-sync", "off"], ["--no-sync off", "add --accum N"]),
            (["--precision", "fp16", "--scaler", "off"], ["--scaler off", "dynamic loss scaling"]),
            (["--inject-overflow", "1"], ["--inject-overflow", "--precision fp16 or --scaler on"]),
            (["--precision", "fp16", "--steps", "2", "--warmup", "1", "--inject-overflow", "3"],
             ["--inject-overflow 3", "steps 0..2"]),
            (["--precision", "fp16", "--init-scale", "1e-46"], ["--init-scale 1e-46", "too small"]),
        ]
        for args, needles in cases:
            if "--steps" not in args:
                args = args + ["--steps", "1"]
            p = dpscale(binary, "run", "--model", "tiny", *args, out=out)
            expect_exit(p, 2, *needles)
            expect(not os.path.exists(out), f"{args}: wrote {out}")
        suite = os.path.join(tmp, "twice.suite")  # an added sweep's run the main one has, other steps
        with open(suite, "w") as f:
            f.write("models = tiny\ngpus = 2\nsteps = 3\n[+ longer]\nsteps = 4\n")
        p = dpscale(binary, "sweep", suite, out=out)
        expect_exit(p, 2, "[+ longer]", "dp-tiny-fp32-sgd-g2-b16 is in the sweep already")
        expect(not os.path.exists(out), f"{suite}: wrote {out}")


if __name__ == "__main__":
    run_cases(globals())
