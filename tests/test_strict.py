#!/usr/bin/env python3
"""Strict mode of the host backend (--strict, DPSCALE_STRICT=1): the
defects planted by DPSCALE_TEST_PLANT (a test-only hook, src/core/util.c's
dps_test_plant) each caught at its first occurrence (the run stops there:
no step after it written, runs.csv's error the first fault) and reported
naming the ops, streams and allocation; every mode trains as one device
does under it, model files too; its asynchronous streams give every step's
loss that the synchronous host backend gives; meta.json and the table say
the run was strict. No case bounds a run's time: CI runs them under
ASan/UBSan, several times slower, and HANG_S only guards against a hang.
Usage: test_strict.py DPSCALE CASE | --list; exit 0 pass, 1 fail."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a dpscale run's hang guard: far above its time under ASan on a busy machine
PLANTS = ["graph_null_stream", "ddp_no_bucket_wait", "dp_gather_unwaited", "free_while_read",
          "dp_foreign_params"]
TESTS = [test(f"strict plant {p}", DPSCALE, "plant", p, timeout=2 * HANG_S + 60)
         for p in PLANTS]
# meson's timeouts guard against a hang only: several runs each, none near them
TESTS += [test(f"strict clean {m}", DPSCALE, "clean", m, timeout=2 * HANG_S)
          for m in ("dp", "ddp", "zero1", "zero2", "fsdp")]
TESTS += [test("strict model file", DPSCALE, "model_file", timeout=2 * HANG_S),
          test("strict meta", DPSCALE, "meta", timeout=HANG_S),
          test("strict async losses", DPSCALE, "async_losses", timeout=2 * HANG_S)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import os
import subprocess
import sys
import tempfile

from dpstools import results as dpsresults
from helpers import Failure, dpscale, expect, read_folder, run_cases

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "models")
TINY_GPT = os.path.join(MODELS, "tiny-gpt.model")

# Each plant: its run's options, and what the report must name (both ops,
# the streams, the allocation's label).
PLANT_RUNS = {
    "graph_null_stream": (["--model", TINY_GPT, "--gpus", "1"],
                          ["strict mode: memset0 called with no stream (NULL)"]),
    "ddp_no_bucket_wait": (["--mode", "ddp", "--model", "tiny", "--gpus", "2"],
                           ["race on device", "\"gradient buckets\"", "all-reduce on stream",
                            "\"collectives\"", "copy on stream", "\"compute-"]),
    "dp_gather_unwaited": (["--model", "tiny", "--gpus", "2"],
                           ["race on device 1's allocation", "gemm_bias on stream",
                            "\"compute-1\" of device 1 wrote", "copy on stream",
                            "\"compute-0\" of device 0 reads"]),
    "free_while_read": (["--model", "tiny", "--gpus", "1", "--gemm-ref"],
                        ["host_free of pinned host allocation", "may still read it (copy"]),
    "dp_foreign_params": (["--model", "tiny", "--gpus", "2"],
                          ["gemm_bias on stream", "of device 1", "lies in device 0's allocation",
                           "\"parameters\""]),
}


def strict_env(plant=None):
    env = dict(os.environ, DPSCALE_STRICT="1")
    env.pop("DPSCALE_TEST_PLANT", None)
    if plant:
        env["DPSCALE_TEST_PLANT"] = plant
    return env


# Where each plant's defect first occurs, and so where strict mode must stop the run:
# in the first (warm-up) step, or in --gemm-ref's reference after the training steps.
IN_FIRST_STEP = {"graph_null_stream", "ddp_no_bucket_wait", "dp_gather_unwaited",
                 "dp_foreign_params"}


def run_strict(cmd, env):
    """A run of cmd under the hang guard; a run past it fails the test as hung."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, env=env)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)}: hung, still running after {HANG_S} s") from None


def only_run(folder):
    """The one runs.csv row of a results folder."""
    runs = dpsresults.read_csv(os.path.join(folder, "runs.csv"),
                               ["status", "error", "steps_done", "gemm_ref_tflops",
                                "batch_per_gpu", "tokens", "width"])
    expect(len(runs) == 1, f"{folder}/runs.csv: {len(runs)} rows, expected 1")
    return runs[0]


def step_rows(folder):
    path = os.path.join(folder, "steps.csv")
    return list(dpsresults.read_csv(path, ["step"])) if os.path.exists(path) else []


def expect_stopped_in_first_step(folder, plant):
    """The fault ended training in its first step: no step done, no steps.csv row."""
    run, steps = only_run(folder), step_rows(folder)
    expect(run["steps_done"] == "0" and not steps,
           f"{plant}: {folder}: steps_done {run['steps_done']} and steps "
           f"{sorted({s['step'] for s in steps})} in steps.csv, expected the run stopped in its "
           f"first step (steps_done 0, no steps.csv row)")


def expect_stopped_in_first_fill(folder, text, stderr):
    """free_while_read: training ended (every step written), then the GEMM
    reference stopped at its first operand's fill (x: rows x width floats,
    bytes [0, that)), said once on stderr as it happened, with no GEMM figure."""
    run, steps = only_run(folder), step_rows(folder)
    expect(run["steps_done"] == "2" and len(steps) == 2 and run["gemm_ref_tflops"] == "",
           f"free_while_read: {folder}: steps_done {run['steps_done']}, {len(steps)} steps.csv "
           f"rows, gemm_ref_tflops {run['gemm_ref_tflops']!r}; expected 2, 2 and none")
    first = 4 * int(run["batch_per_gpu"]) * int(run["tokens"]) * int(run["width"])
    expect(f"bytes [0, {first})" in text,
           f"free_while_read: the report does not name the first fill's copy, bytes [0, {first}):\n"
           f"{text}")
    said = stderr.count("dpscale: strict mode: host_free")
    expect(said == 1, f"free_while_read: the fault said {said} times on stderr, expected once:\n"
           f"{stderr}")


def case_plant(binary, plant):
    """The planted defect fails the run at its first occurrence, reported as strict mode
    names it; without the plant the same run passes."""
    args, needles = PLANT_RUNS[plant]
    with tempfile.TemporaryDirectory() as out:
        cmd = [binary, "run", "--backend", "host", "--steps", "2", "--warmup", "1", *args,
               "--out", out, "--name", "t"]
        p = run_strict(cmd, strict_env(plant))
        text = p.stdout + p.stderr
        expect(p.returncode == 1, f"{plant}: exit {p.returncode}, expected 1:\n{text}")
        for n in needles:
            expect(n in text, f"{plant}: {n!r} not in the report:\n{text}")
        folder = os.path.join(out, "t")
        run = only_run(folder)
        expect(run["status"] == "error" and needles[0] in run["error"],
               f"{plant}: {folder}/runs.csv: status {run['status']}, error {run['error']!r}; "
               f"expected error with {needles[0]!r}")
        if plant in IN_FIRST_STEP:
            expect_stopped_in_first_step(folder, plant)
        else:
            expect_stopped_in_first_fill(folder, text, p.stderr)
        clean = run_strict(cmd[:-1] + ["clean"], strict_env())
        expect(clean.returncode == 0, f"{plant}: without the plant: exit {clean.returncode}:\n"
               f"{clean.stdout}{clean.stderr}")


def check_runs(out, what):
    runs = read_folder(os.path.join(out, "t"))[0]
    for r in runs:
        expect(r["status"] == "ok", f"{what}: status {r['status']}: {r['error']}")
        expect(r["check"] == "pass", f"{what}: check {r['check']}")


def case_clean(binary, mode):
    """Every mode trains as one device does under --strict, with nothing reported."""
    with tempfile.TemporaryDirectory() as out:
        for gpus in ("2", "3"):
            p = dpscale(binary, "run", "--strict", "--mode", mode, "--model", "tiny", "--gpus", gpus,
                        "--steps", "3", "--warmup", "1", "--check", out=out, name="t" + gpus,
                        check_rc=0)
            expect("strict mode:" not in p.stderr, f"{mode} gpus={gpus}: {p.stderr}")
        acc = dpscale(binary, "run", "--strict", "--mode", mode, "--model", "tiny", "--gpus", "2",
                      "--accum", "2", "--steps", "2", "--warmup", "1", "--check", out=out,
                      name="t", check_rc=0)
        expect("strict mode:" not in acc.stderr, f"{mode} --accum 2: {acc.stderr}")
        check_runs(out, mode)


def case_model_file(binary):
    """Model files, fp32 and bf16, dp and ddp, under --strict."""
    with tempfile.TemporaryDirectory() as out:
        for mode in ("dp", "ddp"):
            for prec in ("fp32", "bf16"):
                dpscale(binary, "run", "--strict", "--mode", mode, "--model", TINY_GPT, "--gpus",
                        "2", "--precision", prec, "--steps", "2", "--warmup", "1", out=out,
                        name=f"{mode}-{prec}", check_rc=0)


def case_async_losses(binary):
    """Strict mode's streams run on their own threads; every step's loss (which
    the host reads from pinned memory) and the final parameters are as a plain
    run's: the strategies synchronise before reading what their streams wrote."""
    cases = (("dp", []), ("ddp", ["--accum", "2"]), ("fsdp", ["--model", "small"]),
             ("ddp", ["--model", TINY_GPT, "--precision", "bf16"]),
             ("zero2", ["--model", "small", "--accum", "2"]))
    with tempfile.TemporaryDirectory() as out:
        for i, (mode, more) in enumerate(cases):
            args = ["run", "--mode", mode, "--model", "tiny", "--gpus", "3", "--steps", "4",
                    "--warmup", "1", *more]
            losses, params = {}, {}
            for kind, extra in (("plain", []), ("strict", ["--strict"])):
                name = f"{i}-{kind}"
                npy = os.path.join(out, name + ".npy")
                dpscale(binary, *args, *extra, "--save-params", npy, out=out, name=name,
                        check_rc=0)
                steps = read_folder(os.path.join(out, name))[2]
                losses[kind] = [(r["step"], r["rank"], r["loss"]) for r in steps]
                with open(npy, "rb") as f:
                    params[kind] = f.read()
            expect(losses["plain"] == losses["strict"], f"{mode} {more}: losses differ:\n"
                   f"plain  {losses['plain']}\nstrict {losses['strict']}")
            expect(params["plain"] == params["strict"], f"{mode} {more}: final parameters differ")


def case_meta(binary):
    """meta.json records strict mode; the table says its timings are not representative."""
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "run", "--strict", "--model", "tiny", "--steps", "1", "--warmup", "0",
                    out=out, check_rc=0)
        with open(os.path.join(out, "t", "meta.json")) as f:
            expect(json.load(f).get("strict") is True, "meta.json: strict is not true")
        expect("timings are not representative" in p.stdout, f"table header:\n{p.stdout}")
        plain = dpscale(binary, "run", "--model", "tiny", "--steps", "1", "--warmup", "0",
                        out=out, name="plain", check_rc=0,
                        env=dict(os.environ, DPSCALE_STRICT="0"))
        with open(os.path.join(out, "plain", "meta.json")) as f:
            expect(json.load(f).get("strict") is False, "meta.json: strict is not false")
        expect("not representative" not in plain.stdout, "a plain run's table says strict")


if __name__ == "__main__":
    run_cases(globals())
