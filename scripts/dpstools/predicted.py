"""`dpscale predict`'s predictions on the charts and in summary.md, beside what was measured.

Which predictions.csv files, their rows, the chart panel each is drawn in,
the step-time errors against measured points, and summary.md's tables of
them. Standard library only.
"""
import os
from collections import defaultdict

from dpstools.results import InputError, accum, integer, line, number, read_predictions

PREDICTIONS = "predictions.csv"


class Predicted:
    """A folder that holds predictions.csv and no runs.csv: nothing measured,
    the predictions drawn alone."""
    runs = []
    failed = []
    emulated = False

    def __init__(self, path, preds):
        self.path = path
        self.machines = sorted({p["machine"] for p in preds})

    def ranks_per_node(self):
        return None

    def label(self):
        return f"predicted by dpscale predict for {', '.join(self.machines)}, nothing measured"


def predictions_only(path):
    """Whether a results folder holds predictions.csv and no runs.csv."""
    return not os.path.lexists(os.path.join(path, "runs.csv")) and \
        os.path.isfile(os.path.join(path, PREDICTIONS))


def prediction_files(results, given):
    """The predictions.csv files to draw: each --predictions (a file, or a
    folder holding one), then RESULTS_DIR's own; each once."""
    paths = []
    for g in given:
        path = os.path.join(g, PREDICTIONS) if os.path.isdir(g) else g
        if not os.path.isfile(path):
            raise InputError(f"--predictions {g}: " + (
                f"no {PREDICTIONS} in this folder" if os.path.isdir(g) else "no such file") +
                "; give a predictions.csv, or the folder dpscale predict --out DIR --name NAME "
                "wrote it in")
        paths.append(path)
    own = os.path.join(results, PREDICTIONS)
    if os.path.isfile(own):
        paths.append(own)
    unique = {}
    for path in paths:
        unique.setdefault(os.path.realpath(path), path)
    return list(unique.values())


def read_all_predictions(paths):
    """Every row of the predictions files, each with _key (model, precision,
    optimizer), _n, _b (batch per GPU), _accum, _line (results.line) and, unless
    skipped, _step, _sps, _eff."""
    rows = []
    for path in paths:
        for r in read_predictions(path):
            r["_key"] = (r["model"], r["precision"], r["optimizer"])
            r["_n"], r["_b"] = integer(r, "ngpus"), integer(r, "batch_per_gpu")
            r["_accum"], r["_line"] = accum(r), line(r)
            if r["status"] != "skipped":
                r["_step"], r["_sps"] = number(r, "step_ms"), number(r, "samples_per_s")
                r["_eff"] = number(r, "efficiency")
            rows.append(r)
    return rows


def is_weak(run):
    return (run["scaling"] or "weak") == "weak"


def weak_batch(run):
    """A weak-scaling run's batch per GPU: its global batch over its GPUs."""
    return integer(run, "global_batch") // run["_n"]


def panel_of(folder, pred):
    """The panel a prediction is drawn in: its series' (model, precision,
    optimizer) where that series was measured (weak scaling) at its batch per
    GPU, else a panel of its own: (model, precision, optimizer, batch per GPU)."""
    measured = any(is_weak(r) and (r["model"], r["precision"], r["optimizer"]) == pred["_key"]
                   and weak_batch(r) == pred["_b"] for r in folder.runs)
    return pred["_key"] if measured else pred["_key"] + (pred["_b"],)


def predicted_lines(folder, preds):
    """panel -> (line, accum, machine, source) -> [rows] by GPU count: the
    predictions to draw (ok and oom), each panel a key of series() or a
    predicted one (panel_of)."""
    out = defaultdict(lambda: defaultdict(list))
    for p in preds:
        if p["status"] != "skipped":
            out[panel_of(folder, p)][(p["_line"], p["_accum"], p["machine"], p["source"])].append(p)
    for lines in out.values():
        for pts in lines.values():
            pts.sort(key=lambda p: p["_n"])
    return out


def prediction_errors(folder, preds):
    """[(prediction, measured run, error %)] for each ok prediction whose series,
    line (mode, ddp's no_sync), accumulation, GPU count and batch per GPU were
    measured (weak scaling): the step time's error, (predicted - measured
    median) / measured median."""
    measured = defaultdict(list)
    for r in folder.runs:
        if is_weak(r):
            measured[(r["model"], r["precision"], r["optimizer"], r["_line"], r["_accum"],
                      r["_n"], weak_batch(r))].append(r)
    out = []
    for p in preds:
        if p["status"] == "ok":
            for r in measured.get(p["_key"] + (p["_line"], p["_accum"], p["_n"], p["_b"]), []):
                m = number(r, "step_ms_median")
                out.append((p, r, 100.0 * (p["_step"] - m) / m))
    return out


def series_name(p):
    return f"{p['model']}, {p['precision']}, {p['optimizer']}"


def mode_name(p):
    """A prediction's line and its accumulation where it has one: 'ddp-syncall, accum 4'."""
    return p["_line"] + (f", accum {p['_accum']}" if p["_accum"] > 1 else "")


def oom_lines(preds):
    """The sentence naming the predicted out-of-memory points, or none."""
    oom = [p for p in preds if p["status"] == "oom"]
    if not oom:
        return []
    return ["Predicted out of memory (▼ on the charts): " + "; ".join(
        f"{mode_name(p)} on {p['_n']} GPUs ({series_name(p)}, batch {p['_b']} per GPU, "
        f"{p['machine']})" for p in sorted(oom, key=lambda p: (p["_key"], p["_line"], p["_accum"],
                                                               p["_n"])))
        + ".", ""]


def prediction_sources(paths):
    return "Predictions: " + ", ".join(f"`{p}`" for p in paths) + "."


def against_measured(folder, preds, paths):
    """summary.md's "Predicted against measured": each ok prediction beside the
    measured point of its series, mode, GPU count and batch per GPU, the
    largest error, the predicted out-of-memory points."""
    errors = sorted(prediction_errors(folder, preds),
                    key=lambda e: (e[0]["_key"], e[0]["_line"], e[0]["_accum"], e[0]["_n"],
                                   e[0]["machine"]))
    lines = ["## Predicted against measured", "", prediction_sources(paths) + " Each predicted "
             "step time (status ok) beside the measured median of the same model, precision, "
             "optimizer, mode (ddp's no_sync), accumulation, GPU count and batch per GPU (weak "
             "scaling); error = (predicted - measured) / measured.", ""]
    if not errors:
        lines += ["No prediction has a measured point of its series, mode, GPU count and batch "
                  "per GPU: nothing to set side by side.", ""]
        return lines + oom_lines(preds)
    lines += ["| model | precision | optimizer | mode | GPUs | machine | predicted step ms | "
              "measured step ms | error % |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p, r, err in errors:
        lines.append(f"| {p['model']} | {p['precision']} | {p['optimizer']} | {mode_name(p)} | "
                     f"{p['_n']} | {p['machine']} | {p['_step']:.4f} | "
                     f"{number(r, 'step_ms_median'):.4f} | {err:+.2f} |")
    p, r, err = max(errors, key=lambda e: abs(e[2]))
    lines += ["", f"Largest error: {err:+.2f} %, {mode_name(p)} on {p['_n']} GPUs "
              f"({series_name(p)}, {p['machine']}): predicted {p['_step']:.4f} ms a step, "
              f"measured {number(r, 'step_ms_median'):.4f} ms ({r['config_id']}).", ""]
    return lines + oom_lines(preds)


def predictions_table(preds):
    """Every prediction, for a folder of predictions alone."""
    lines = ["| model | precision | optimizer | batch per GPU | mode | GPUs | nodes | machine | "
             "status | step ms | samples/s | efficiency | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in sorted(preds, key=lambda p: (p["_key"], p["_b"], p["machine"], p["_line"],
                                          p["_accum"], p["_n"])):
        figs = (f"{p['_step']:.4f} | {p['_sps']:.1f} | {p['_eff']:.3f}"
                if p["status"] != "skipped" else "- | - | -")
        lines.append(f"| {p['model']} | {p['precision']} | {p['optimizer']} | {p['_b']} | "
                     f"{mode_name(p)} | {p['_n']} | {p['nodes']} | {p['machine']} | "
                     f"{p['status']} | {figs} | {p['note']} |")
    return lines
