"""summary.md's "Bucket size": the DDP bucket cap to use, per family of bucketed runs.

A family is the runs of one series, mode with DDP's buckets (ddp, zero1) and
device count that differ only in bucket_mb. Its table gives the measured
median at each size the folder ran and, from `dpscale predict --from FOLDER
--bucket-mb 1,5,25,100,250` (the binary: $DPSCALE, else build/src/dpscale),
the predicted step time at those sizes and the ones run, and the size
recommended, as the command chooses it (docs/predict.md, "The bucket size").
Every command it prints runs as printed from the folder plot.py ran in: the
binary and the folder by their paths from there, the measurements a
prediction lacks before the prediction, a family's other sizes with the
options of its runs (a model file's from the folder's copy of it,
models/NAME.model). Standard library only.
"""
import os
import shlex
import subprocess
import tempfile

from dpstools.results import BUCKETED, InputError, accum, integer, number, read_predictions
from dpstools.stats import median

USUAL_MB = (1, 5, 25, 100, 250)  # the sizes predicted beside those run (PyTorch's default: 25)
RUN_MB = (1, 25, 100)  # the sizes a family run at one size is offered to run
TIE = 0.01  # sizes within 1 % of the fastest tie, and the smallest wins (BUCKET_TIE)
HERE = os.path.dirname(os.path.abspath(__file__))


def dpscale_binary():
    """$DPSCALE, else the default build's dpscale beside the scripts."""
    return os.environ.get("DPSCALE") or os.path.join(HERE, "..", "..", "build", "src", "dpscale")


def family_key(row):
    """What a run and a prediction of one family share (all but bucket_mb)."""
    no_sync = row.get("no_sync") or "on"
    return (row["model"], row["precision"], row["optimizer"], integer(row, "batch_per_gpu"),
            accum(row), row["mode"], integer(row, "ngpus"), no_sync)


def measured_runs(folder):
    """{family: {bucket_mb: run}}: the ok weak-scaling bucketed runs on 2 or more
    devices that overlap their all-reduces with backward."""
    out = {}
    for r in folder.runs:
        if (r["mode"] in BUCKETED and r["_n"] >= 2 and r.get("scaling") != "strong"
                and r.get("overlap") != "0" and r.get("bucket_mb")):
            out.setdefault(family_key(r), {})[number(r, "bucket_mb")] = r
    return out


def shown(path):
    """A path as a command pasted here takes it: relative to the current
    folder when inside it, else absolute."""
    rel = os.path.relpath(path)
    return rel if not rel.startswith(os.pardir) else os.path.abspath(path)


def command(binary, *words):
    """A command line as summary.md prints it (a shell's quoting)."""
    return " ".join(shlex.quote(w) for w in [shown(binary), *map(str, words)])


def predict_words(folder_path):
    return ["predict", "--from", shown(folder_path), "--bucket-mb",
            ",".join(str(x) for x in USUAL_MB)]


def predicted(folder_path, binary=None):
    """{family: {bucket_mb: step_ms}} from `dpscale predict --from --bucket-mb`,
    or raises InputError with the command's reason."""
    binary = binary or dpscale_binary()
    if not os.access(binary, os.X_OK):
        raise InputError(f"{binary}: no dpscale binary to predict with (build it, or set DPSCALE "
                         f"to its path)")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [binary, *predict_words(folder_path), "--out", tmp, "--name", "p"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no message"
            raise InputError(f"dpscale {' '.join(cmd[1:6])} failed: {why}")
        out = {}
        for p in read_predictions(os.path.join(tmp, "p", "predictions.csv")):
            if p["status"] == "ok" and p["bucket_mb"]:
                out.setdefault(family_key(p), {})[number(p, "bucket_mb")] = number(p, "step_ms")
        return out


def out_words(folder_path):
    """--out PARENT --name NAME of the folder itself."""
    path = os.path.normpath(shown(folder_path))
    return ["--out", os.path.dirname(path) or ".", "--name", os.path.basename(path)]


def measure_commands(folder, binary):
    """The measurements `predict --from` takes the machine from that the
    folder lacks (links.csv, allreduce.csv), as commands into it; none on
    GPUs, whose all-reduce comm-bench does not measure (a --machine file
    is needed there)."""
    if not folder.emulated:
        return []
    have = lambda name: os.path.isfile(os.path.join(folder.path, name))  # noqa: E731
    cmds = []
    if not have("links.csv"):
        cmds.append(command(binary, "links", "--backend", "host", "--gpus", 2,
                            *out_words(folder.path)))
    if not have("allreduce.csv"):
        counts = sorted({r["_n"] for r in folder.runs if r["_n"] >= 2}) or [2]
        cmds.append(command(binary, "comm-bench", "--gpus", ",".join(map(str, counts)),
                            *out_words(folder.path)))
    return cmds


def model_words(folder, run):
    """--model and its shape as the run was given them: a model file from
    the folder's copy, a preset by name, an MLP preset reshaped (runs.csv's
    model NAME:LxWxTxC) with its shape's options."""
    name = run["model"]
    copy = os.path.join(folder.path, "models", name.replace("/", "_") + ".model")
    if os.path.isfile(copy):
        return ["--model", shown(copy)]
    if ":" not in name:
        return ["--model", name]
    return ["--model", name.split(":", 1)[0], "--layers", run["layers"], "--width", run["width"],
            "--tokens", run["tokens"], "--classes", run["classes"]]


def sweep_command(folder, run, binary):
    """A sweep of a family's other sizes (RUN_MB) into the folder, with the
    options of its run, the sizes it holds skipped (--resume)."""
    words = ["sweep", "--backend", run["backend"], "--mode", run["mode"], "--gpus", run["_n"],
             *model_words(folder, run), "--precision", run["precision"], "--optimizer",
             run["optimizer"], "--batch-per-gpu", run["batch_per_gpu"]]
    if run["_accum"] > 1:
        words += ["--accum", run["_accum"]] + (["--no-sync", "off"]
                                               if run.get("no_sync") == "off" else [])
    if run.get("seed") and run["seed"] != "1234":
        words += ["--seed", run["seed"]]
    words += ["--bucket-mb", ",".join(map(str, RUN_MB)), "--steps", run["steps"], "--warmup",
              run["warmup"], "--no-links", *out_words(folder.path), "--resume"]
    return command(binary, *words)


def advise(points):
    """points: [(bucket_mb, measured_ms or None, predicted_ms or None)] ascending.
    Returns (scale, error_pct or None, index recommended, expected times): as
    predict_bucket_advise (src/predict/predict_bucket.c)."""
    both = [(m, p) for _, m, p in points if m is not None and p is not None]
    scale = median([m / p for m, p in both]) if both else 1.0
    error = max(100 * abs(p / m - 1) for m, p in both) if both else None
    expected = [m if m is not None else (p * scale if p is not None else float("inf"))
                for _, m, p in points]
    least = min(expected)
    best = next(i for i, e in enumerate(expected) if e <= least * (1 + TIE))
    return scale, error, best, expected


def spread_pct(run):
    """A run's steps' (p90 - p10) / 2 over its median, %."""
    if not run.get("step_ms_p10") or not run.get("step_ms_p90"):
        return None
    return 100 * (number(run, "step_ms_p90") - number(run, "step_ms_p10")) / 2 / \
        number(run, "step_ms_median")


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def family_lines(key, runs, preds):
    """One family's heading, table and recommendation."""
    model, prec, opt, batch, acc, mode, n, _ = key
    sizes = sorted(set(runs) | set(preds))
    points = [(s, number(runs[s], "step_ms_median") if s in runs else None, preds.get(s))
              for s in sizes]
    scale, error, best, expected = advise(points)
    err = f"± {error:.1f} %" if error is not None else "± n/a (no size run to test it on)"
    lines = [f"### {model}, {mode} on {n} devices ({prec}, {opt}, batch {batch} a device"
             f"{f', accum {acc}' if acc > 1 else ''})", "",
             "| bucket_mb | measured_ms | spread | predicted_ms | expected_ms | |",
             "| --- | --- | --- | --- | --- | --- |"]
    for i, (s, m, p) in enumerate(points):
        sp = spread_pct(runs[s]) if s in runs else None
        lines.append(f"| {s:g} | {fmt(m)} | {fmt(sp, '.1f') + ' %' if sp is not None else '-'} | "
                     f"{fmt(p)} | {fmt(expected[i])} | {'recommended' if i == best else ''} |")
    s, m, p = points[best]
    said = f"measured {m:.3f} ms" if m is not None else f"expected {expected[best]:.3f} ms (not run)"
    lines += ["", f"Recommended: **{s:g} MB**: {said}, predicted {fmt(p)} ms {err}; predictions "
              f"rebased by {scale:.3f} (measured / predicted on the sizes run).", ""]
    return lines


def unpredicted_lines(folder, binary, why):
    """Why nothing was predicted and, where measuring into the folder would
    let it, the commands that do, the prediction last."""
    cmds = measure_commands(folder, binary)
    # its message's commands are placeholders (--out ...): quoted, not set as commands
    lines = [f"No prediction: {why.replace('`', chr(39))}.", ""]
    if cmds:
        lines += ["To predict, measure what it lacks into the folder, then ask again: " +
                  ", then ".join(f"`{c}`" for c in cmds + [command(binary, *predict_words(
                      folder.path))]) + ".", ""]
    elif not folder.emulated:
        lines += ["On GPUs `predict --from` takes the machine from a file (--machine FILE, "
                  "intra_busbw_gbps from nccl-tests' all_reduce_perf: docs/predict.md).", ""]
    return lines


def bucket_lines(folder, binary=None):
    """summary.md's "Bucket size" section; none without a bucketed run on 2 or
    more devices."""
    runs = measured_runs(folder)
    if not runs:
        return []
    binary = binary or dpscale_binary()
    lines = ["## Bucket size", ""]
    try:
        preds, asked = predicted(folder.path, binary), None
    except InputError as e:
        preds, asked = {}, str(e)
    by = f"`{command(binary, *predict_words(folder.path))}`" if asked is None else \
        "dpscale predict --from"
    lines += ["The DDP bucket cap (bucket_mb) to use, per series, mode and device count: the "
              "median step time measured at each size run (spread: (p90 - p10) / 2 of its steps) "
              f"and the step time {by} predicts at "
              f"{', '.join(str(x) for x in USUAL_MB)} MB and at the sizes run. expected_ms is the "
              "measured median where run, else the prediction times the family's measured / "
              "predicted ratio on the sizes run; the recommendation is the lowest expected_ms (a "
              "smaller size within 1 % of it wins). The ± is the model's largest error on the "
              "sizes run (docs/predict.md). Commands run as printed from the folder plot.py "
              "ran in.", ""]
    if asked is not None:
        lines += unpredicted_lines(folder, binary, asked)
    alone = [k for k in sorted(runs) if len(runs[k]) == 1 and not preds.get(k)]
    for key in sorted(runs):
        if key not in alone:
            lines += family_lines(key, runs[key], preds.get(key, {}))
    if alone:
        names = "; ".join(f"{m} {prec} {opt}{f' accum {acc}' if acc > 1 else ''}"
                          f"{' no_sync off' if sync == 'off' else ''}, {mode} on {n} devices"
                          for m, prec, opt, _, acc, mode, n, sync in alone)
        sweeps = ", ".join(f"`{sweep_command(folder, next(iter(runs[k].values())), binary)}`"
                           for k in alone)
        lines += [f"One size run and nothing predicted, so nothing to choose between: {names}. "
                  f"For a recommendation, run other sizes into the folder ({sweeps})"
                  + (", or predict them as above" if asked is not None and
                     measure_commands(folder, binary) else "") + ", and draw it again.", ""]
    return lines
