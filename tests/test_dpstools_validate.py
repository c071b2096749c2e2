#!/usr/bin/env python3
"""scripts/dpstools/validate.py, imported, against a stand-in for `dpscale
predict` whose prediction is known: step_ms = 2 x the workload's
step_ms_1gpu + 100 / the machine's intra_busbw_gbps, on ceil(GPUs / 8)
nodes (status oom where the machine file says oom). files: with_step's
copy of a workload, line's error; predict: the rows by mode and GPU
count, the ResNet-50 lines of bench/predict's files, a failed dpscale;
bisect: calibrate finds the step_ms_1gpu of a target step time, busbw_for
the busbw, an oom prediction stops the calibration.
Usage: test_dpstools_validate.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools validate " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("files", "predict", "bisect")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import io
import os
import stat
import tempfile

from dpstools import validate
from dpstools.results import COLUMNS
from helpers import HERE, expect, run_cases, write

BENCH = os.path.join(os.path.dirname(HERE), "bench", "predict")

# `dpscale predict --machine M --workload W --gpus G,... --modes MODE,... --out OUT --name N`:
# OUT/N/predictions.csv, a row per mode and GPU count (sh and awk: the bisections run it
# a hundred times); anything else exits 3 with its arguments on stderr
FAKE = """#!/bin/sh
[ "$1" = predict ] || {{ echo "not a prediction: $*" >&2; exit 3; }}
shift
modes=dp,ddp
while [ $# -gt 0 ]; do
  case $1 in --machine) m=$2;; --workload) w=$2;; --gpus) g=$2;; --modes) modes=$2;;
    --out) out=$2;; --name) name=$2;; esac
  shift 2
done
mkdir -p "$out/$name"
awk -F= -v gpus="$g" -v modes="$modes" '
FILENAME == ARGV[1] && $1 ~ /^ *intra_busbw_gbps *$/ {{ bw = $2 + 0 }}
FILENAME == ARGV[1] && /oom/ {{ oom = 1 }}
FILENAME == ARGV[2] && $1 ~ /^ *step_ms_1gpu *$/ {{ s = $2 + 0 }}
END {{
  print "{header}"
  nm = split(modes, ms, ","); ng = split(gpus, gs, ",")
  for (i = 1; i <= nm; i++) for (j = 1; j <= ng; j++) {{
    row = "{row}"
    sub(/@MODE@/, ms[i], row); sub(/@NGPUS@/, gs[j], row)
    sub(/@NODES@/, int((gs[j] + 7) / 8), row)
    sub(/@STATUS@/, oom ? "oom" : "ok", row); sub(/@NOTE@/, oom ? "over gpu_mem_gib" : "", row)
    sub(/@STEP@/, sprintf("%.6f", 2 * s + 100 / bw), row)
    print row
  }}
}}' "$m" "$w" > "$out/$name/predictions.csv"
"""


def fake_dpscale(tmp):
    """The stand-in, its predictions.csv every column of dpscale's."""
    cells = {"machine": "m", "workload": "w", "model": "net", "precision": "fp32",
             "optimizer": "sgd", "source": "", "mode": "@MODE@", "ngpus": "@NGPUS@",
             "nodes": "@NODES@", "batch_per_gpu": "4", "max_batch_per_gpu": "", "accum": "1",
             "no_sync": "", "status": "@STATUS@", "note": "@NOTE@", "step_ms": "@STEP@",
             "samples_per_s": "1", "efficiency": "1"}
    cols = COLUMNS["predictions.csv"]
    row = ",".join(cells.get(c, "0") for c in cols)
    path = write(os.path.join(tmp, "dpscale"), FAKE.format(header=",".join(cols), row=row))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def files(tmp, busbw, step_ms, oom=False):
    """(machine, workload) files of the stand-in's two numbers."""
    machine = write(os.path.join(tmp, "t.machine"), f"name = t\nintra_busbw_gbps = {busbw}\n"
                    + ("# oom\n" if oom else ""))
    workload = write(os.path.join(tmp, "t.workload"),
                     f"name = t\nstep_ms_1gpu = {step_ms}   # a comment\nbatch_per_gpu = 4\n")
    return machine, workload


def printed(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue()


def bad_input(fn, *args):
    """BadInput's message of fn(*args); fails when it raises none."""
    try:
        fn(*args)
    except validate.BadInput as e:
        return str(e)
    expect(False, f"{fn.__name__}: no BadInput")


def case_files(fixtures):
    """with_step: a copy in the folder, the key's line replaced (its
    comment too), every other line as it was; a key given: that one; a file
    without the key copied unchanged. line: (predicted - published) /
    published, %, one decimal."""
    workload = os.path.join(BENCH, "gpt2-small-b4.workload")
    with open(workload) as f:
        lines = f.readlines()
    with tempfile.TemporaryDirectory() as tmp:
        copy = validate.with_step(workload, 12.5, tmp)
        expect(copy == os.path.join(tmp, "gpt2-small-b4.workload"), f"the copy: {copy}")
        with open(copy) as f:
            got = f.readlines()
        want = ["step_ms_1gpu = 12.5\n" if l.startswith("step_ms_1gpu =") else l for l in lines]
        expect(got == want and got != lines, "with_step: not the workload with step_ms_1gpu = "
               "12.5 alone changed")
        copy = validate.with_step(workload, 1, tmp, "batch_per_gpu")
        with open(copy) as f:
            got = f.readlines()
        want = ["batch_per_gpu = 1\n" if l.startswith("batch_per_gpu =") else l for l in lines]
        expect(got == want, "with_step batch_per_gpu: another change")
        machine = os.path.join(BENCH, "titan-rtx-pcie.machine")
        with open(machine) as f:
            original = f.read()
        with open(validate.with_step(machine, 3.0, tmp)) as f:
            expect(f.read() == original, "a file without step_ms_1gpu changed")
    got = printed(validate.line, "case", 110.0, 100.0, "a note")
    want = f"  {'case':<34} {110.0:10.1f} {100.0:10.1f} {10.0:+8.1f} %  a note\n"
    expect(got == want, f"line: {got!r}, expected {want!r}")
    got = printed(validate.line, "slow", 45.0, 60.0)
    expect(got.split()[1:4] == ["45.0", "60.0", "-25.0"], f"line -25 %: {got!r}")


def case_predict(fixtures):
    """predict: {(mode, GPUs): row} of each mode and GPU count asked for,
    the stand-in's step time; resnet: a line per published GPU count with
    bench/predict's files (97 ms, 120 GB/s: 2 x 97 + 100 / 120 ms), its
    nodes, its error against the published 100 .. 104 ms; a dpscale that
    fails (exit 3): BadInput with its exit status and stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        dps = fake_dpscale(tmp)
        machine, workload = files(tmp, 4, 10)
        rows = validate.predict(dps, machine, workload, [1, 2, 16])
        expect(sorted(rows) == [("ddp", 1), ("ddp", 2), ("ddp", 16), ("dp", 1), ("dp", 2),
                                ("dp", 16)], f"keys {sorted(rows)}")
        expect(all(float(r["step_ms"]) == 45.0 and r["status"] == "ok" for r in rows.values()),
               f"step_ms {[r['step_ms'] for r in rows.values()]}, expected 2 x 10 + 100 / 4")
        expect(rows[("dp", 16)]["nodes"] == "2" and rows[("dp", 2)]["nodes"] == "1", "nodes")
        expect(sorted(validate.predict(dps, machine, workload, [8], "ddp")) == [("ddp", 8)],
               "--modes ddp")
        got = printed(validate.resnet, dps, BENCH).splitlines()
        step = 2 * 97 + 100 / 120
        want = [(f"ddp {g} GPU{'s' if g > 1 else ''} ({n} node{'s' if n > 1 else ''})", pub,
                 "goal: within 10 %" if g >= 8 else "")
                for g, n, pub in [(1, 1, 100), (2, 1, 103), (4, 1, 103), (8, 1, 104), (16, 2, 104)]]
        want = [f"  {case:<34} {step:10.1f} {pub:10.1f} {100 * (step - pub) / pub:+8.1f} %  {note}"
                for case, pub, note in want]
        expect(got[0].startswith("PyTorch DDP benchmark, ResNet-50 b32") and got[1:] == want,
               "resnet:\n" + "\n".join(got) + "\nexpected:\n" + "\n".join(want))
        why = bad_input(validate.run, dps, "sweep", "--gpus", "2")
        expect(why.startswith("dpscale sweep --gpus 2: exit 3: not a prediction: sweep --gpus 2"),
               f"a failed dpscale: {why!r}")


def case_bisect(fixtures):
    """calibrate: ddp on 2 GPUs predicted 60 ms at 5 GB/s (2 s + 20 = 60):
    step_ms_1gpu 20; busbw_for: 40 ms with step_ms_1gpu 10 (20 + 100 / b =
    40): 5 GB/s; a calibration whose prediction is oom: BadInput naming it."""
    with tempfile.TemporaryDirectory() as tmp:
        dps = fake_dpscale(tmp)
        machine, workload = files(tmp, 5, 480)
        folder = os.path.join(tmp, "work")
        os.makedirs(folder)
        got = validate.calibrate(dps, machine, workload, "ddp", 2, 60.0, folder)
        expect(abs(got - 20.0) < 1e-6, f"calibrate: {got}, expected 20")
        machine, workload = files(tmp, 77, 10)
        got = validate.busbw_for(dps, machine, workload, 40.0, folder)
        expect(abs(got - 5.0) < 1e-6, f"busbw_for: {got}, expected 5")
        with open(os.path.join(folder, "probe.machine")) as f:
            probe = f.read()
        expect(probe.count("intra_busbw_gbps") == 1 and "= 77" not in probe,
               f"the probe keeps the machine's busbw:\n{probe}")
        machine, workload = files(tmp, 5, 480, oom=True)
        why = bad_input(validate.calibrate, dps, machine, workload, "ddp", 2, 60.0, folder)
        expect(why == "calibration: oom over gpu_mem_gib", f"oom: {why!r}")


if __name__ == "__main__":
    run_cases(globals())
