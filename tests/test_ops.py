#!/usr/bin/python3
"""ops.csv: the last timed step timed op by op. run: dp and ddp on the host
backend, an MLP preset and a model file (gemm, norm, act, add, embedding,
resample), each write rows whose kinds are the model's (the file's kinds,
or linear and gelu), loss and optimizer; their ms sum to at most 1.2 times
the traced step's step_ms and, on one device (no copies or collectives
beside), at least half of it; the results reader accepts the folder and
summary.md shows the per-op table with each configuration.
Usage: test_ops.py DPSCALE run; exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("ops run", DPSCALE, "run", suite=NOSAN, timeout=300, parallel=False)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import subprocess
import tempfile

from dpstools import results as dpsresults
from dpstools.op_table import TITLE
from helpers import PYTHON, SCRIPTS, dpscale, expect, read_folder, read_table, run_cases
from model_writer import ops_mix_file

COMMON = ["--steps", "3", "--warmup", "1", "--batch", "64"]


def check_config(rows, run, kinds):
    """One configuration's ops.csv rows against its run."""
    cid = run["config_id"]
    expect(rows, f"ops.csv: no row of {cid}")
    seen = {(r["kind"], r["direction"]) for r in rows}
    want = {(k, d) for k in kinds for d in ("forward", "backward")}
    want |= {("loss", "forward"), ("optimizer", "update")}
    expect(want <= seen, f"ops.csv: {cid} lacks {sorted(want - seen)}; has {sorted(seen)}")
    expect({r["kind"] for r in rows} <= kinds | {"loss", "optimizer"},
           f"ops.csv: {cid} has kinds outside the model's: {sorted(seen)}")
    step = float(rows[0]["step_ms"])
    total = sum(float(r["ms"]) for r in rows)
    expect(total <= 1.2 * step + 0.01, f"ops.csv: {cid}: ops {total:.4f} ms over a "
           f"{step:.4f} ms step")
    if run["ngpus"] == "1":
        expect(total >= 0.5 * step, f"ops.csv: {cid}: ops {total:.4f} ms, under half the "
               f"{step:.4f} ms step on one device")
    gemms = [r for r in rows if r["kind"] in ("gemm", "linear")]
    expect(all(float(r["flop"]) > 0 for r in gemms), f"ops.csv: {cid}: a GEMM without FLOP")


def check_folder(folder, file_kinds):
    """A folder of one configuration: read and checked, its ops.csv's rows,
    and summary.md's per-op table naming it."""
    runs_rows, _, _, _, _ = read_folder(folder)
    ops = dpsresults.by_config(read_table(os.path.join(folder, "ops.csv")))
    for r in runs_rows:
        kinds = {"linear", "gelu"} if r["model"] == "small" else file_kinds
        check_config(ops.get(r["config_id"], []), r, kinds)
    out = folder + "-plots"
    p = subprocess.run([PYTHON, os.path.join(SCRIPTS, "plot.py"), folder, "--out", out],
                       capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0, f"plot.py: exit {p.returncode}: {p.stderr[-2000:]}")
    with open(os.path.join(out, "summary.md")) as f:
        summary = f.read()
    expect(f"## {TITLE}" in summary, f"summary.md has no section {TITLE}")
    section = summary.split(f"## {TITLE}")[1].split("\n## ")[0]
    for r in runs_rows:
        expect(f"| {r['config_id']} |" in section,
               f"summary.md's {TITLE} has no row of {r['config_id']}")


def case_run(binary):
    with tempfile.TemporaryDirectory() as tmp:
        path, file_kinds = ops_mix_file(tmp)
        runs = [("dp", "1", "small"), ("ddp", "2", "small"), ("ddp", "1", path),
                ("dp", "2", path)]
        for i, (mode, gpus, model) in enumerate(runs):
            dpscale(binary, "run", "--mode", mode, "--gpus", gpus, "--model", model, *COMMON,
                    out=tmp, name=f"f{i}", check_rc=0)
            check_folder(os.path.join(tmp, f"f{i}"), file_kinds)
    return 0


if __name__ == "__main__":
    run_cases(globals())
