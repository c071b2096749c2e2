#!/usr/bin/env python3
"""The bucket size to use: `dpscale predict --from DIR --bucket-mb LIST` on a
folder that ran ddp at two bucket caps, its table against runs.csv and
predictions.csv, and summary.md's "Bucket size" section against both; a
folder of one cap and no link figures (tests/fixtures/results-host)
names its families in one line, with the commands that would advise; a
model file's folder: every command its summary.md prints runs as printed,
and the folder, moved away from the file it ran, is still advised on.
Usage: test_buckets.py DPSCALE CASE | --list; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("buckets advice", DPSCALE, "advice", suite=NOSAN, timeout=600),
         test("buckets one size", DPSCALE, "one_size", suite=NOSAN, timeout=300),
         test("buckets model file", DPSCALE, "model_file", suite=NOSAN, timeout=600)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

from helpers import FIXTURES, SCRIPTS, dpscale, expect, expect_exit, read_table, run_cases

SIZES = (1.0, 5.0, 25.0)
ROW = re.compile(r"^\s*([\d.]+)\s+([\d.]+)\s+(±[\d.]+ %|n/a)\s+([\d.]+|-)\s+(±[\d.]+ %|n/a)\s+"
                 r"([\d.]+)\s+(measured|predicted x scale)$")


def table(stdout):
    """{bucket_mb: (predicted, measured or None, expected)} and the recommended size."""
    rows = {}
    for l in stdout.splitlines():
        m = ROW.match(l)
        if m:
            rows[float(m[1])] = (float(m[2]), None if m[4] == "-" else float(m[4]), float(m[6]))
    rec = re.search(r"^# recommended bucket_mb = ([\d.]+) for ", stdout, re.M)
    expect(rec is not None, f"no recommendation line: {stdout}")
    return rows, float(rec[1])


PRED_ROUND = 5e-5  # predictions.csv's 4 decimals: dpscale judged the unrounded predictions


def advised(points):
    """The sizes the rule may pick on the numbers, and the scale and the
    uncertainty of each expected time (its predictions known to PRED_ROUND).
    The rule: the lowest expected (measured where run, else predicted x the
    median measured / predicted), the smallest within 1 %. A size is a
    possible pick when its expected time may be within 1 % of the lowest and
    no smaller size's surely is; numbers clear of the 1 % (nearly always)
    leave one size."""
    ran = [(p, m) for _, p, m in points if m is not None]
    scale = statistics.median(m / p for p, m in ran)
    scale_unc = max(m * PRED_ROUND / p ** 2 for p, m in ran)  # of a ratio m / p, so of their median
    expected = [(s, m if m is not None else p * scale) for s, p, m in points]
    unc = {s: 0.0 if m is not None else scale * PRED_ROUND + p * scale_unc for s, p, m in points}
    least = min(e for _, e in expected)
    slack = 1.01 * max(unc.values()) + 1e-9  # the lowest's own uncertainty
    possible = []
    for s, e in expected:
        if e - least * 1.01 <= unc[s] + slack:
            possible.append(s)
        if e - least * 1.01 < -(unc[s] + slack):
            break  # surely within 1 %: no larger size is picked
    return possible, scale, unc


def measured(folder):
    """{bucket_mb: step_ms_median} of the 2-device ddp runs."""
    return {float(r["bucket_mb"]): float(r["step_ms_median"])
            for r in read_table(os.path.join(folder, "runs.csv")) if r["ngpus"] == "2"}


def check_command(binary, out, folder, runs):
    p = subprocess.run([binary, "predict", "--from", folder, "--bucket-mb", "1,5,25", "--out", out,
                        "--name", "p"], capture_output=True, text=True)
    expect_exit(p, 0)
    rows, rec = table(p.stdout)
    preds = {float(r["bucket_mb"]): float(r["step_ms"])
             for r in read_table(os.path.join(out, "p", "predictions.csv"))}
    expect(set(rows) == set(SIZES) == set(preds), f"sizes: table {sorted(rows)}, csv {sorted(preds)}")
    for s in SIZES:
        pred, meas, _ = rows[s]
        expect(abs(pred - preds[s]) < 1e-3, f"{s} MB: table {pred}, predictions.csv {preds[s]}")
        want = runs.get(s)
        expect((meas is None) == (want is None) and (want is None or abs(meas - want) < 1e-3),
               f"{s} MB: measured {meas} in the table, {want} in runs.csv")
    picks, scale, unc = advised([(s, preds[s], runs.get(s)) for s in SIZES])
    expect(rec in picks, f"recommended {rec}, the rule on the numbers picks {picks}")
    # the table's 3 decimals, and what the predictions' rounding leaves open
    expect(abs(rows[5.0][2] - preds[5.0] * scale) <= 5e-4 + unc[5.0] + 1e-9,
           f"5 MB expected {rows[5.0][2]}, predicted {preds[5.0]} x scale {scale:.6f}")
    err = max(100 * abs(preds[s] / runs[s] - 1) for s in runs)
    err_unc = max(100 * PRED_ROUND / runs[s] for s in runs)
    said = re.search(r"^# recommended bucket_mb = .* ±([\d.]+) %$", p.stdout, re.M)
    expect(said and abs(float(said[1]) - err) <= 0.05 + err_unc + 1e-9,
           f"uncertainty {said and said[1]} % in the recommendation, the numbers give {err:.4f} %:\n"
           f"{p.stdout}")
    return preds, rec


def summary_rows(path):
    """summary.md's Bucket size table: {bucket_mb: (measured, predicted, recommended)}."""
    with open(path) as f:
        text = f.read()
    expect("## Bucket size" in text, f"no Bucket size section in {path}")
    section = text.split("## Bucket size", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for l in section.splitlines():
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"[\d.]+", cells[0]):
            num = lambda c: None if c == "-" else float(c)
            rows[float(cells[0])] = (num(cells[1]), num(cells[3]), cells[5] == "recommended")
    return rows, section


def case_advice(binary):
    with tempfile.TemporaryDirectory() as out:
        dpscale(binary, "sweep", "--mode", "ddp", "--gpus", "1,2", "--bucket-mb", "1,25",
                "--model", "small", "--steps", "4", "--warmup", "1", "--no-nvtx", out=out,
                name="r", check_rc=0)
        dpscale(binary, "comm-bench", "--gpus", "2", out=out, name="r", check_rc=0, backend=None)
        folder = os.path.join(out, "r")
        runs = measured(folder)
        expect(set(runs) == {1.0, 25.0}, f"sweep --bucket-mb 1,25 ran {sorted(runs)}")
        preds, rec = check_command(binary, out, folder, runs)
        env = dict(os.environ, DPSCALE=binary)
        p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "plot.py"), folder, "--out",
                            os.path.join(out, "plots")], capture_output=True, text=True, env=env)
        expect_exit(p, 0)
        rows, section = summary_rows(os.path.join(out, "plots", "summary.md"))
        expect({1.0, 5.0, 25.0, 100.0, 250.0} <= set(rows), f"summary sizes {sorted(rows)}")
        for s, (m, pr, _) in rows.items():
            expect((m is None) == (s not in runs) and (m is None or abs(m - runs[s]) < 1e-3),
                   f"summary {s} MB measured {m}, runs.csv {runs.get(s)}")
            expect(s not in preds or abs(pr - preds[s]) < 1e-3, f"summary {s} MB predicted {pr}")
        picked = [s for s, (_, _, r) in rows.items() if r]
        expect(len(picked) == 1 and f"Recommended: **{picked[0]:g} MB**" in section,
               f"summary recommends {picked}: {section}")
        p = subprocess.run([binary, "predict", "--bucket-mb", "1,25", "--gpus", "2"],
                           capture_output=True, text=True)
        expect_exit(p, 2, "--bucket-mb LIST advises on a results folder's runs: give --from DIR")



def case_one_size(binary):
    from dpstools import buckets_advice
    from dpstools.folder import Folder
    text = "\n".join(buckets_advice.bucket_lines(Folder(os.path.join(FIXTURES, "results-host")),
                                                binary))
    expect("No prediction: " in text and "links.csv: missing" in text and "### " not in text,
           f"a folder without links.csv: {text}")
    expect("nothing to choose between: small fp32 sgd, ddp on 2 devices; small fp32 sgd, ddp on "
           "4 devices; tiny fp32 sgd, ddp on 2 devices; tiny fp32 sgd, ddp on 4 devices." in text and "--bucket-mb 1,5,25,100,250" in text, f"the families: {text}")


def summary_commands(binary, cwd, folder):
    """plot.py FOLDER from cwd: the dpscale commands summary.md prints (its
    backticked spans that start with the binary), in order, and the text."""
    env = dict(os.environ, DPSCALE=binary)
    p = subprocess.run([sys.executable, os.path.join(SCRIPTS, "plot.py"), folder, "--out",
                        "plots"], capture_output=True, text=True, env=env, cwd=cwd)
    expect_exit(p, 0)
    with open(os.path.join(cwd, "plots", "summary.md")) as f:
        text = f.read()
    spans = re.findall(r"`([^`]+)`", text)
    return [c for c in spans if os.path.basename(shlex.split(c)[0]) == "dpscale"], text


def paste(cmds, cwd):
    """Each command as a user pastes it, in cwd: every one exits 0."""
    for c in cmds:
        p = subprocess.run(["bash", "-c", c], capture_output=True, text=True, cwd=cwd, timeout=300)
        expect(p.returncode == 0, f"`{c}` pasted: exit {p.returncode}\n{p.stdout}\n{p.stderr}")


def case_model_file(binary):
    """A model file's ddp runs at one size, nothing measured beside them:
    summary.md's commands (links, comm-bench, the prediction, a sweep of other
    sizes from the folder's copy of the file) each exit 0 as printed; drawn
    again, the family has a recommendation, whose command runs too; then the
    file gone and the folder moved, predict --bucket-mb still reads it."""
    binary = os.path.abspath(binary)  # the commands run in another folder
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "enc.model")
        shutil.copy(os.path.join(FIXTURES, "models", "small-resnet.model"), model)
        dpscale(binary, "sweep", "--mode", "ddp", "--gpus", "1,2", "--model", model, "--steps",
                "3", "--warmup", "1", "--no-links", "--no-nvtx", out=tmp, name="r", check_rc=0)
        cmds, text = summary_commands(binary, tmp, "r")
        said = " ".join(cmds)
        expect(len(cmds) == 4 and all(w in said for w in (" links ", " comm-bench ",
                                                          " predict --from r ", " sweep ")) and
               "--model r/models/small-resnet.model" in said, f"the commands: {cmds}\n{text}")
        paste(cmds, tmp)
        cmds, text = summary_commands(binary, tmp, "r")
        rows, section = summary_rows(os.path.join(tmp, "plots", "summary.md"))
        expect({1.0, 25.0, 100.0} <= {s for s, (m, _, _) in rows.items() if m is not None} and
               "Recommended: **" in section, f"sizes run from the summary's sweep: {section}")
        expect(len(cmds) == 1 and " predict --from r " in cmds[0], f"the commands: {cmds}")
        paste(cmds, tmp)
        os.remove(model)
        moved = os.path.join(tmp, "elsewhere", "r")
        shutil.move(os.path.join(tmp, "r"), moved)
        p = subprocess.run([binary, "predict", "--from", moved, "--bucket-mb", "1,5,25"],
                           capture_output=True, text=True)
        expect_exit(p, 0)
        expect("# recommended bucket_mb = " in p.stdout, f"advice: {p.stdout}")
        shutil.rmtree(os.path.join(moved, "models"))
        p = subprocess.run([binary, "predict", "--from", moved, "--bucket-mb", "1,5,25"],
                           capture_output=True, text=True)
        expect_exit(p, 2, "ran the model file 'small-resnet'", "models/small-resnet.model, the "
                    "copy of it a run keeps", "or run the configuration again")


if __name__ == "__main__":
    run_cases(globals())
