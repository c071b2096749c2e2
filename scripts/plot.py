#!/usr/bin/python3
"""Charts of a dpscale results folder: scaling, efficiency, GPU-0 imbalance,
phases, links, and a summary.md that links them and names every
configuration that did not end ok (each chart counts those it leaves out).

usage: plot.py RESULTS_DIR [--out DIR] [--torch TORCH_DIR] [--predictions PRED ...]
       (default DIR: plots/<folder name>)

--torch: a scripts/torch_reference.py folder of the same configurations;
summary.md then sets PyTorch's step and phase times (and, from GPUs, its
Python overhead per phase) beside dpscale's.

--predictions (repeatable): a predictions.csv of `dpscale predict`, or a
folder holding one; RESULTS_DIR's own predictions.csv is read too. The
scaling and efficiency charts draw each predicted series (status ok) dash-
dotted with x markers, beside the measured weak scaling of the same model,
precision, optimizer and batch per GPU (a panel of its own where none was
measured), predicted out-of-memory points as triangles at the bottom; where a
measured point matches, the scaling chart and summary.md's "Predicted
against measured" give the step time's error. A RESULTS_DIR that holds
predictions.csv and no runs.csv is drawn as predictions alone (scaling,
efficiency, summary.md).

Reads columns by name through dpsresults.py; a folder or predictions file it
refuses, or an --out that cannot be written, is exit 2. Runs under Debian's
/usr/bin/python3 with python3-matplotlib.
"""
import argparse
import csv
import math
import os
import sys
import textwrap
from collections import defaultdict
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from dpsresults import InputError, integer, number, read_folder, read_meta, strategy  # noqa: E402
from diagnose import diagnosis  # noqa: E402
from speedup import ONE_DEVICE, SAME_STEP, speedup, step_times  # noqa: E402
from predicted import (Predicted, against_measured, oom_lines, panel_of,  # noqa: E402
                       prediction_errors, prediction_files, prediction_sources, predicted_lines,
                       predictions_only, predictions_table, read_all_predictions)

RUNS_COLS = ["config_id", "status", "backend", "mode", "ngpus", "model", "precision",
             "optimizer", "global_batch", "scaling", "samples_per_s", "step_ms_median"]
DEVICES_COLS = ["config_id", "device", "alloc_peak_bytes"]
PHASES_COLS = ["config_id", "device", "phase", "median_ms"]
LINKS_COLS = ["src", "dst", "method", "bytes", "bw_gbps", "status"]
MEMORY_COLS = ["config_id", "device", "category", "bytes_at_peak"]
STEPS_COLS = ["config_id", "step", "rank", "step_ms"]
PHASE_ORDER = ["load", "replicate", "scatter", "forward", "gather", "loss", "backward",
               "reduce", "allreduce_exposed", "optimizer"]
MODE_COLOR = {"dp": "#d62728", "dp-lean": "#ff9896", "ddp": "#1f77b4", "ddp-lean": "#aec7e8"}
STRATEGIES = ("dp", "dp-lean", "ddp", "ddp-lean")  # strategy()'s names, in the order drawn
FAILED = "Failed configurations"  # summary.md's section of the configurations not drawn


class Folder:
    def __init__(self, path):
        self.path = path
        files = read_folder(path, {"runs.csv": RUNS_COLS, "devices.csv": DEVICES_COLS,
                                   "phases.csv": PHASES_COLS, "links.csv": LINKS_COLS,
                                   "memory.csv": MEMORY_COLS, "steps.csv": STEPS_COLS},
                            optional=("links.csv", "memory.csv", "steps.csv"))
        self.runs_path = files["runs.csv"].path
        self.runs = [r for r in files["runs.csv"] if r["status"] == "ok"]
        self.failed = [r for r in files["runs.csv"] if r["status"] != "ok"]
        if not self.runs:
            raise InputError(f"{self.runs_path}: no configuration with status ok to draw")
        for r in self.runs:
            r["_n"] = integer(r, "ngpus")
            r["_sps"] = number(r, "samples_per_s")
        self.devices = files["devices.csv"]
        self.phases = files["phases.csv"]
        self.links = files["links.csv"]
        self.memory = files["memory.csv"]
        self.step_ms = step_times(files["steps.csv"])
        self.meta = read_meta(path)
        devs = self.meta.get("devices") or [{}]
        self.device = devs[0].get("name", "unknown device")
        self.backend = self.meta.get("backend", self.runs[0]["backend"])
        self.emulated = bool(self.meta.get("emulated")) or self.backend == "host"

    def nodes(self):
        """The launcher's nodes (meta.json's launch.nodes: host, address,
        ranks), [] when dpscale forked its ranks on one host."""
        launch = self.meta.get("launch")
        nodes = launch.get("nodes") if isinstance(launch, dict) else None
        return nodes if isinstance(nodes, list) else []

    def ranks_per_node(self):
        """Ranks on the fullest node when the run spans nodes, else None."""
        nodes = self.nodes()
        return max(len(n.get("ranks", [])) for n in nodes) if len(nodes) > 1 else None

    def label(self):
        if self.emulated:
            text = (f"{self.backend} backend, emulated devices on "
                    f"{self.device.replace('emulated device on ', '')}")
            over = self.meta.get("oversubscribed")
            return f"{text}; {over}" if isinstance(over, str) and over else text
        return f"{self.device}, {self.backend} backend"


def series(folder):
    """(model, precision, optimizer) -> (mode, scaling) -> sorted [(n, samples/s, row)]."""
    out = defaultdict(lambda: defaultdict(list))
    for r in folder.runs:
        key = (r["model"], r["precision"], r["optimizer"])
        out[key][(strategy(r), r["scaling"] or "weak")].append((r["_n"], r["_sps"], r))
    for lines in out.values():
        for pts in lines.values():
            pts.sort(key=lambda p: p[0])
    return out


def save(plt, fig, out, name):
    """Lays out, writes out/name and closes the figure; returns the path."""
    fig.tight_layout()
    path = os.path.join(out, name)
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise cannot_write(path, e) from None
    finally:
        plt.close(fig)
    return path


def cannot_write(path, e):
    return InputError(f"{path}: cannot write: {e.strerror}; give --out a folder you may write in")


def make_folder(out):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot make the folder: {e.strerror}; give --out a "
                         f"folder (not a file) you may write in") from None


def grid(plt, n, width=5.2, height=4.0):
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


# What a C harness leaves out of DataParallel, said wherever dp is drawn.
DP_NOTE = "dp: no Python overhead, an upper bound on DataParallel's throughput"


def not_drawn(folder):
    """A chart's note on the configurations it leaves out because they did not
    end ok, counted by status; '' when every one did."""
    if not folder.failed:
        return ""
    count = defaultdict(int)
    for r in folder.failed:
        count[r["status"]] += 1
    n = len(folder.failed)
    return (f"{n} configuration{'s' if n > 1 else ''} not drawn "
            f"({', '.join(f'{c} {st}' for st, c in sorted(count.items()))}): see summary.md, "
            f"{FAILED}")


def with_not_drawn(title, folder):
    """A chart's title with not_drawn's note as its last line."""
    note = not_drawn(folder)
    return f"{title}\n{note}" if note else title


def style(scaling):
    return "-" if scaling == "weak" else "--"


# Predictions: dash-dotted with x markers (measured: weak solid, strong dashed, ideal dotted).
PRED_STYLE, PRED_MARKER = "-.", "x"
PRED_NOTE = "dash-dot ×: dpscale predict (▼: out of memory)"
PRED_ERROR_NOTE = "%: predicted step time against measured"


def plot_predicted(ax, lines, errors, efficiency):
    """A panel's predictions (predicted_lines' (mode, machine, source) -> rows):
    ok rows as a line, oom rows as triangles at the axis' bottom; on the
    scaling chart each point's error against its measured point beside it."""
    sources = defaultdict(set)
    for mode, machine, source in lines:
        sources[(mode, machine)].add(source)
    for (mode, machine, source), rows in sorted(lines.items()):
        color = MODE_COLOR.get(mode, "gray")
        name = f"{mode} predicted ({machine}" + (
            f", from {source})" if len(sources[(mode, machine)]) > 1 else ")")
        ok = [r for r in rows if r["status"] == "ok"]
        if ok:
            ax.plot([r["_n"] for r in ok], [r["_eff" if efficiency else "_sps"] for r in ok],
                    PRED_STYLE, marker=PRED_MARKER, markersize=7, color=color, label=name)
        oom = [r["_n"] for r in rows if r["status"] == "oom"]
        if oom:
            ax.plot(oom, [0.03] * len(oom), "v", color=color, markersize=8, linestyle="none",
                    transform=ax.get_xaxis_transform(), clip_on=False,
                    label=f"{name}: out of memory")
    if efficiency:
        return
    for p, _, err in errors:
        ax.annotate(f"{err:+.1f} %", (p["_n"], p["_sps"]), textcoords="offset points",
                    xytext=(5, -11 if p["mode"] == "dp" else 5), fontsize=7,
                    color=MODE_COLOR.get(p["mode"], "gray"))


def ideal_line(ax, ns, base, mode):
    """Linear scaling from one GPU's throughput, dotted in the mode's colour."""
    ax.plot(ns, [base * n for n in ns], ":", color=MODE_COLOR.get(mode, "gray"), alpha=0.5,
            linewidth=1)


def draw_measured(ax, lines, efficiency):
    """A panel's measured lines ((mode, scaling) -> [(n, samples/s)]): throughput
    with each line's ideal, or efficiency where the line has one GPU; returns
    the labels of the lines left out for want of one GPU."""
    left_out = []
    for (mode, scaling), pts in sorted(lines.items()):
        ns = [p[0] for p in pts]
        base = next((p[1] for p in pts if p[0] == 1), None)
        if efficiency and base is None:
            left_out.append(f"{mode} ({scaling} scaling)")
            continue
        if efficiency:
            ys = [p[1] / (p[0] * base) for p in pts]
        else:
            ys = [p[1] for p in pts]
            if base is not None:
                ideal_line(ax, ns, base, mode)
        ax.plot(ns, ys, style(scaling), marker="o", color=MODE_COLOR.get(mode, "gray"),
                label=f"{mode} ({scaling} scaling)")
    return left_out


def draw_predicted_ideal(ax, predicted):
    """Predictions alone in a panel: each mode's ideal from its one predicted GPU."""
    for (mode, _, _), rows in sorted(predicted.items()):
        base = next((r["_sps"] for r in rows if r["_n"] == 1 and r["status"] == "ok"), None)
        if base is not None:
            ideal_line(ax, [r["_n"] for r in rows], base, mode)


def finish_panel(ax, folder, key, lines, predicted, efficiency):
    """A scaling panel's reference lines, axes, title and legend."""
    if efficiency:
        ax.axhline(1.0, color="gray", linestyle=":", linewidth=1, label="ideal")
        ax.set_ylabel("scaling efficiency (ratio)")
        ax.set_ylim(bottom=0)
    else:
        ax.plot([], [], ":", color="gray", label="ideal (linear from 1 GPU)")
        ax.set_ylabel("throughput (samples/s)")
    per_node = folder.ranks_per_node()
    if per_node:
        ax.axvline(per_node + 0.5, color="black", linestyle="--", linewidth=1,
                   label=f"node boundary ({per_node} rank{'s' if per_node > 1 else ''} a node)")
    ax.set_xlabel("GPUs (count)")
    ax.set_xticks(sorted({p[0] for pts in lines.values() for p in pts} |
                         {r["_n"] for rows in predicted.get(key, {}).values() for r in rows}))
    model, prec, opt = key[:3]
    ax.set_title(f"{model}, {prec}, {opt}" + (
        f" (predicted, batch {key[3]} per GPU)" if len(key) > 3 else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 if key in predicted else 8)


def plot_scaling(plt, folder, out, efficiency=False, preds=()):
    data = series(folder)
    predicted = predicted_lines(folder, preds)
    errors = prediction_errors(folder, preds)
    keys = sorted(set(data) | set(predicted))
    fig, axes = grid(plt, len(keys))
    left_out = []
    for ax, key in zip(axes, keys):
        lines = data.get(key, {})
        left_out += [f"{', '.join(key)}: {line}" for line in draw_measured(ax, lines, efficiency)]
        if not lines and not efficiency:
            draw_predicted_ideal(ax, predicted.get(key, {}))
        plot_predicted(ax, predicted.get(key, {}),
                       [e for e in errors if panel_of(folder, e[0]) == key], efficiency)
        finish_panel(ax, folder, key, lines, predicted, efficiency)
    what = "Scaling efficiency = throughput(n) / (n · throughput(1))" if efficiency else "Throughput"
    pred = ([PRED_NOTE] if predicted else []) + ([PRED_ERROR_NOTE] if errors and not efficiency else [])
    notes = ([DP_NOTE] if folder.runs else []) + (["; ".join(pred)] if pred else [])
    notes += [f"no 1-GPU run, so no efficiency: {'; '.join(left_out)}"] if left_out else []
    notes += [not_drawn(folder)] if folder.failed else []
    lines = [f"{what}: DataParallel (dp) vs DistributedDataParallel (ddp)", folder.label()] + notes
    width = int(fig.get_figwidth() * 11)  # characters a line holds at the title's size
    fig.suptitle("\n".join(textwrap.fill(t, width) for t in lines))
    return save(plt, fig, out, "efficiency.png" if efficiency else "scaling.png")


def peaks_by_config(folder):
    peaks = defaultdict(dict)
    for d in folder.devices:
        peaks[d["config_id"]][integer(d, "device")] = number(d, "alloc_peak_bytes")
    return peaks


def imbalance_rows(folder):
    """[(model, precision, n, mode, [peaks per device])] for weak-scaling ok runs."""
    peaks = peaks_by_config(folder)
    rows = []
    for r in folder.runs:
        p = peaks.get(r["config_id"])
        if p and (r["scaling"] or "weak") == "weak":
            rows.append((r["model"], r["precision"], r["_n"], strategy(r), [p[k] for k in sorted(p)]))
    return sorted(rows)


def gpu0_ratio(peaks):
    if len(peaks) < 2:
        return None
    others = [p for p in peaks[1:] if p > 0]
    return peaks[0] / (sum(others) / len(others)) if others else None


def plot_imbalance(plt, folder, out):
    rows = imbalance_rows(folder)
    models = sorted({(m, p) for m, p, _, _, _ in rows})
    if not models:
        raise InputError(f"{folder.runs_path}: no weak-scaling configuration with device rows")
    fig, axes = plt.subplots(len(models), 2, figsize=(13, 4.2 * len(models)), squeeze=False)
    for (model, prec), (ax, ax2) in zip(models, axes):
        mine = [r for r in rows if r[0] == model and r[1] == prec]
        x = 0.0
        ticks, labels = [], []
        for n in sorted({r[2] for r in mine}):
            for mode in STRATEGIES:
                for m2, p2, n2, mode2, peaks in mine:
                    if n2 != n or mode2 != mode:
                        continue
                    xs = [x + i * 0.8 / len(peaks) for i in range(len(peaks))]
                    bars = ax.bar(xs, [p / 2**20 for p in peaks], width=0.8 / len(peaks),
                                  color=MODE_COLOR[mode], edgecolor="black", linewidth=0.4)
                    bars[0].set_hatch("//")
                    ticks.append(x + 0.4 - 0.4 / len(peaks))
                    labels.append(f"{mode}\n{n} GPU")
                    x += 1.0
            x += 0.5
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("allocation peak per device (MiB)")
        ax.set_title(f"{model}, {prec}: memory per device (hatched: device 0)")
        ax.grid(axis="y", alpha=0.3)
        for mode in STRATEGIES:
            pts = [(r[2], gpu0_ratio(r[4])) for r in mine if r[3] == mode and gpu0_ratio(r[4])]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                         color=MODE_COLOR[mode], label=mode)
        ax2.axhline(1.0, color="gray", linestyle=":", linewidth=1, label="balanced")
        ax2.set_xticks(sorted({r[2] for r in mine if r[2] > 1}) or [1])
        ax2.set_xlabel("GPUs (count)")
        ax2.set_ylabel("device 0 peak / mean of the others (ratio)")
        ax2.set_title(f"{model}, {prec}: GPU-0 imbalance")
        ax2.grid(alpha=0.3)
        ax2.legend(fontsize=8)
    fig.suptitle(with_not_drawn(f"Per-device memory (harness allocation peaks)\n{folder.label()}",
                                folder))
    return save(plt, fig, out, "gpu0_imbalance.png")


def memory_bars(folder):
    """(model, precision) -> [(label, {kind: MiB})]: each device's allocation peak
    by what it holds (memory.csv's kind, or its category in older folders), for
    each strategy at its largest GPU count (weak scaling), dp beside ddp."""
    cats = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for m in folder.memory:
        what = m.get("kind") or m["category"]
        cats[m["config_id"]][integer(m, "device")][what] += number(m, "bytes_at_peak") / 2**20
    widest = {}
    for r in folder.runs:
        key = (r["model"], r["precision"], strategy(r))
        if (r["scaling"] or "weak") == "weak" and r["config_id"] in cats and \
                r["_n"] >= widest.get(key, (0,))[0]:
            widest[key] = (r["_n"], r["config_id"])
    out = defaultdict(list)
    for (model, prec, strat), (n, cid) in sorted(widest.items(),
                                                 key=lambda w: (w[0][:2], w[0][2] != "dp")):
        out[(model, prec)] += [(f"{strat}\nGPU {d}\nof {n}", dict(cats[cid][d]))
                               for d in sorted(cats[cid])]
    return out


def plot_memory(plt, folder, out, data):
    """Each device's allocation peak, stacked by what it holds (data: memory_bars)."""
    fig, axes = grid(plt, len(data), width=8.0, height=5.0)
    for ax, ((model, prec), bars) in zip(axes, sorted(data.items())):
        totals = defaultdict(float)
        for _, cats in bars:
            for c, mib in cats.items():
                totals[c] += mib
        order = sorted(totals, key=totals.get, reverse=True)
        shown = order[:19]
        for i, (label, cats) in enumerate(bars):
            bottom = 0.0
            for j, c in enumerate(shown + ["other"]):
                mib = cats.get(c, 0.0) if c != "other" else sum(
                    v for k, v in cats.items() if k not in shown)
                ax.bar(i, mib, bottom=bottom, color=plt.cm.tab20(j % 20), edgecolor="black",
                       linewidth=0.3, label=c if i == 0 else None)
                bottom += mib
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], fontsize=8)
        ax.set_ylim(0, 1.08 * max(sum(c.values()) for _, c in bars))
        ax.set_ylabel("allocation peak (MiB)")
        ax.set_title(f"{model}, {prec}: what each device holds at its peak")
        ax.grid(axis="y", alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles[::-1], labels[::-1], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(with_not_drawn(f"Memory by what it holds, per device (memory.csv)\n"
                                f"{folder.label()}\n{DP_NOTE}", folder))
    return save(plt, fig, out, "memory.png")


def plot_phases(plt, folder, out):
    med = defaultdict(dict)
    drawn = {r["config_id"] for r in folder.runs}
    for p in folder.phases:
        if p["device"] == "0" and p["config_id"] in drawn:
            med[p["config_id"]][p["phase"]] = number(p, "median_ms")
    keys = sorted({(r["model"], r["precision"]) for r in folder.runs})
    fig, axes = grid(plt, len(keys), width=6.0, height=4.4)
    cmap = plt.get_cmap("tab10")
    for ax, (model, prec) in zip(axes, keys):
        runs = sorted((r for r in folder.runs if r["model"] == model and r["precision"] == prec
                       and (r["scaling"] or "weak") == "weak"),
                      key=lambda r: (r["_n"], STRATEGIES.index(strategy(r))))
        bottoms = [0.0] * len(runs)
        for i, ph in enumerate(PHASE_ORDER):
            vals = [med[r["config_id"]].get(ph, 0.0) for r in runs]
            if any(vals):
                ax.bar(range(len(runs)), vals, bottom=bottoms, color=cmap(i % 10), label=ph)
                bottoms = [b + v for b, v in zip(bottoms, vals)]
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([f"{strategy(r)}\n{r['_n']} GPU" for r in runs], fontsize=8)
        ax.set_ylabel("median time on device 0 (ms)")
        ax.set_title(f"{model}, {prec}: where a step's time goes")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(with_not_drawn(f"Phases of a step (device 0; ddp's all-reduce overlaps backward, "
                                f"only its exposed part is stacked)\n{folder.label()}", folder))
    return save(plt, fig, out, "phases.png")


def link_curves(folder):
    """(method, src, dst) -> [(bytes, GB/s)] ascending: each path's measured sizes."""
    curves = defaultdict(list)
    for r in folder.links or []:
        if r["status"] == "ok" and r.get("bw_gbps"):
            curves[(r["method"], r["src"], r["dst"])].append(
                (integer(r, "bytes"), number(r, "bw_gbps")))
    for pts in curves.values():
        pts.sort()
    return curves


LINK_METHODS = ["h2d", "d2h", "d2d_write", "d2d_read", "d2d_bidir", "d2d_nopeer"]


def plot_links(plt, folder, out):
    """Bandwidth against copy size (log x), one panel per method, a line per path."""
    from matplotlib.ticker import FuncFormatter
    curves = link_curves(folder)
    methods = [m for m in LINK_METHODS if any(k[0] == m for k in curves)]
    methods += sorted({k[0] for k in curves} - set(methods))
    fig, axes = grid(plt, max(len(methods), 1), width=5.4, height=4.0)
    for ax, method in zip(axes, methods):
        paths = sorted(k for k in curves if k[0] == method)
        for _, src, dst in paths:
            pts = curves[(method, src, dst)]
            arrow = "↔" if method.endswith("bidir") else "→"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                    label=f"{src}{arrow}{dst}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: fmt_bytes(x)))
        ax.set_xlabel("copy size (log scale)")
        ax.set_ylabel("bandwidth (GB/s)")
        ax.set_title(f"{method}: median of samples per size")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=2 if len(paths) > 6 else 1)
    where = ("emulated devices: memcpy on the CPU, small copies stay in its caches"
             if folder.emulated else "copies timed by events on their stream")
    fig.suptitle(f"Link bandwidth against copy size ({where})\n{folder.label()}")
    return save(plt, fig, out, "links.png")


PHASE_LINK = {  # phase -> (method, source, destination) of the link it crosses, device i > 0
    "load": ("h2d", "host", "dev0"), "replicate": ("d2d_write", "dev0", "dev{i}"),
    "scatter": ("d2d_write", "dev0", "dev{i}"), "gather": ("d2d_write", "dev{i}", "dev0"),
    "reduce": ("d2d_write", "dev{i}", "dev0"), "allreduce": ("d2d_write", "dev{i}", "dev{j}"),
}
DP_GROUP_BYTES = 10 << 20  # dp's replicate and reduce: groups of at most 10 MiB (DP_COALESCE_BYTES)
# Why a phase can read above its link's figure, by backend.
OVER_REASON = {True: "the copy stayed in cache",
               False: "NCCL's SM-driven copies outran the copy engine the link was measured with"}


def copy_bytes(phase, per_step, run):
    """The bytes of one copy of a phase, from its bytes per step on a device i > 0 (device
    0 for load): load (the batch; the labels' copy aside), scatter and gather move one
    copy a step; replicate and reduce one per 10 MiB group; ddp's ring all-reduce moves
    chunks of a bucket / n (bucket: bucket_mb, at most the parameters)."""
    if phase in ("replicate", "reduce"):
        return per_step / max(1, math.ceil(per_step / DP_GROUP_BYTES))
    if phase == "allreduce":
        n = run["_n"]
        params = 4 * float(run.get("params") or 0) or per_step * n / (4 * max(1, n - 1))
        bucket = float(run.get("bucket_mb") or 25) * 2**20 or params
        return min(bucket, params) / n
    return per_step


def at_size(pts, size):
    """A path's GB/s at `size`: log-linear between the measured sizes around it, the
    nearest measured size outside them."""
    if size <= pts[0][0]:
        return pts[0][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:]):
        if size <= s1:
            t = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + t * (b1 - b0)
    return pts[-1][1]


def link_use(folder):
    """One dict per (config, device, phase) that moves bytes over a measured link: its
    achieved GB/s beside the link's figure at the size of the phase's copies."""
    curves = link_curves(folder)
    runs = {r["config_id"]: r for r in folder.runs}
    rows = []
    for p in folder.phases:
        r = runs.get(p["config_id"])
        if not r or p["phase"] not in PHASE_LINK or not p.get("achieved_gbps") or \
                not p.get("bytes_per_step"):
            continue
        i, n = integer(p, "device"), r["_n"]
        if (p["phase"] != "load") == (i == 0):
            continue
        method, src, dst = PHASE_LINK[p["phase"]]
        key = (method, src.format(i=i, j=(i + 1) % n), dst.format(i=i, j=(i + 1) % n))
        if key not in curves:
            continue
        size = copy_bytes(p["phase"], number(p, "bytes_per_step"), r)
        achieved, link = number(p, "achieved_gbps"), at_size(curves[key], size)
        rows.append({"config_id": p["config_id"], "mode": strategy(r), "ngpus": n, "device": i,
                     "phase": p["phase"], "copy_bytes": round(size), "achieved_gbps": achieved,
                     "link": "{}:{}:{}".format(*key), "link_gbps": link,
                     "share_pct": 100 * achieved / link})
    return rows


def share_text(pct, emulated):
    """A share as summary.md shows it: above 100 % flagged with its reason."""
    text = f"{pct:.0f} %" if pct >= 10 else f"{pct:.2g} %"
    return text if pct <= 100 else f"⚠ {text}: {OVER_REASON[emulated]}"


def link_use_table(use, emulated):
    """summary.md's lines: one row per mode, device count and phase."""
    groups = defaultdict(list)
    for u in use:
        groups[(u["mode"], u["ngpus"], u["phase"])].append(u)
    order = {ph: k for k, ph in enumerate(PHASE_ORDER + ["allreduce"])}
    lines = ["| mode | GPUs | phase | configurations | copy size | median share | "
             "lowest share | above 100 % (device rows) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (mode, n, ph), us in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1],
                                                                    order.get(g[0][2], 99))):
        shares = sorted(u["share_pct"] for u in us)
        sizes = sorted(u["copy_bytes"] for u in us)
        size = fmt_bytes(sizes[0]) + ("" if sizes[0] == sizes[-1] else f"–{fmt_bytes(sizes[-1])}")
        over = sum(s > 100 for s in shares)
        lines.append(f"| {mode} | {n} | {ph} | {len({u['config_id'] for u in us})} | {size} | "
                     f"{share_text(median(shares), emulated)} | "
                     f"{share_text(shares[0], emulated)} | {over} of {len(shares)} |")
    return lines


def fmt_bytes(b):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


LINK_USE_COLS = ["config_id", "mode", "ngpus", "device", "phase", "copy_bytes", "achieved_gbps",
                 "link", "link_gbps", "share_pct"]


def write_link_use(use, out, emulated):
    """link_use.csv: every configuration's row behind summary.md's Link use table."""
    path = os.path.join(out, "link_use.csv")
    try:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(LINK_USE_COLS + ["flag"])
            for u in use:
                w.writerow([f"{u[c]:.3f}" if isinstance(u[c], float) else u[c]
                            for c in LINK_USE_COLS] +
                           [OVER_REASON[emulated] if u["share_pct"] > 100 else ""])
    except OSError as e:
        raise cannot_write(path, e) from None
    return path


def beside_torch(folder, torch_folder):
    """summary.md's lines for a PyTorch folder of the same configurations:
    per configuration in both (by config_id), the median step time, then
    per phase device 0's median time in each and PyTorch's Python overhead
    (python_overhead_ms: host time minus busy device time, GPUs only)."""
    def phases(f):
        out = defaultdict(dict)
        drawn = {r["config_id"] for r in f.runs}
        for p in f.phases:
            if p["device"] == "0" and p["config_id"] in drawn:
                oh = number(p, "python_overhead_ms", allow_empty=True) \
                    if "python_overhead_ms" in p else None
                out[p["config_id"]][p["phase"]] = (number(p, "median_ms"), oh)
        return out
    mine = {r["config_id"]: r for r in folder.runs}
    theirs = {r["config_id"]: r for r in torch_folder.runs}
    common = sorted(set(mine) & set(theirs))
    lines = ["## Beside PyTorch", "",
             f"`{torch_folder.path}`: {torch_folder.label()}; "
             f"{torch_folder.meta.get('note', '')}.", ""]
    if not common:
        return lines + ["No configuration in common (config_id): nothing to set side by side.",
                        ""]
    pm, pt = phases(folder), phases(torch_folder)
    lines += ["Median times on device 0 (ms). PyTorch's Python overhead: a phase's host time "
              "minus the time its device was busy in it (measured on GPUs only). PyTorch's dp "
              "reduces the gradients inside backward, so its reduce is 0.", "",
              "| configuration | phase | dpscale | PyTorch | PyTorch / dpscale | "
              "PyTorch Python overhead |", "| --- | --- | --- | --- | --- | --- |"]
    for cid in common:
        a, b = number(mine[cid], "step_ms_median"), number(theirs[cid], "step_ms_median")
        lines.append(f"| {cid} | step | {a:.4f} | {b:.4f} | {b / a:.2f} | - |" if a
                     else f"| {cid} | step | {a:.4f} | {b:.4f} | - | - |")
        for ph in PHASE_ORDER + ["allreduce"]:
            x, _ = pm[cid].get(ph, (0.0, None))
            y, oh = pt[cid].get(ph, (0.0, None))
            if x or y or oh:
                lines.append(f"| {cid} | {ph} | {x:.4f} | {y:.4f} | "
                             f"{f'{y / x:.2f}' if x else '-'} | "
                             f"{'-' if oh is None else f'{oh:.4f}'} |")
    return lines + [""]


def summary_predicted(folder, out, charts, preds, paths):
    """summary.md of a folder of predictions alone."""
    lines = [f"# dpscale predictions: {os.path.basename(os.path.abspath(folder.path))}", "",
             f"{folder.label()}.", "", prediction_sources(paths) + " Weak scaling: the batch "
             "per GPU is fixed; efficiency: one device's step over this step.", "",
             "## Predicted", ""] + predictions_table(preds) + [""] + oom_lines(preds)
    lines += [f"![{os.path.splitext(c)[0]}]({c})" for c in charts]
    return write_summary(out, lines)


def write_summary(out, lines):
    path = os.path.join(out, "summary.md")
    try:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as e:
        raise cannot_write(path, e) from None
    return path


def summary_intro(folder):
    """summary.md's title and what the reader must know first: emulated
    devices, the nodes ddp ran on, dp's missing Python overhead."""
    lines = [f"# dpscale results: {os.path.basename(os.path.abspath(folder.path))}", "",
             f"{folder.label()}.", ""]
    if folder.emulated:
        lines += ["Host backend: devices are emulated on the CPU, so these timings describe "
                  "the CPU, not a GPU.", ""]
    nodes = folder.nodes()
    if nodes:
        launch = folder.meta["launch"]
        where = ", ".join(f"{n.get('host')} (ranks {', '.join(map(str, n.get('ranks', [])))})"
                          for n in nodes)
        link = {"gloo": "Gloo over TCP", "shm": "the shared-memory ring", "nccl": "NCCL"}.get(
            launch.get("collectives"), launch.get("collectives", "unknown collectives"))
        lines += [f"ddp's ranks ran on {len(nodes)} node{'s' if len(nodes) > 1 else ''} under "
                  f"{launch.get('launcher')}: {where}; gradients moved with {link}.", ""]
    return lines + ["dp has no Python overhead: its figures are an upper bound on DataParallel's "
                    "throughput, which also pays Python (threads started per forward, module "
                    "replication, per-op dispatch under the GIL), worst at small batches; "
                    "scripts/torch_reference.py measures it where PyTorch runs.", ""]


def glance_strategies(folder):
    """The strategies the At a glance table has columns for: dp and ddp, and
    dp's lean variant where the folder has it."""
    ran = {strategy(r) for r in folder.runs}
    return [s for s in STRATEGIES if s in ran or not s.endswith("-lean")]


def best_cell(folder, at):
    """The fastest strategy of a row (at: strategy -> point or None), where its
    throughput beats every other's by an interval above 1; otherwise why none."""
    ran = [m for m in at if at[m]]
    if len(ran) < 2:
        return "-"
    top = max(ran, key=lambda m: at[m][1])
    told = {m: speedup(folder.step_ms, at[m][2], at[top][2]).faster for m in ran if m != top}
    if ONE_DEVICE in told.values():
        return f"- ({ONE_DEVICE})"
    tied = [m for m in told if told[m] != top]
    return top if not tied else "within noise: " + ", ".join(m for m in ran if m == top or m in tied)


def speedup_cell(folder, a, b):
    """b's throughput over a's with its interval; '-' where one did not run."""
    if not a or not b:
        return "-"
    s = speedup(folder.step_ms, a[2], b[2])
    if s.faster == ONE_DEVICE:
        return f"- ({ONE_DEVICE})"
    span = "[no interval]" if math.isinf(s.hi) else f"[{s.lo:.2f}, {s.hi:.2f}]"
    return f"{s.ratio:.2f}x {span}" + (", within noise" if s.faster not in STRATEGIES else "")


def memory_cell(peaks, pt):
    """A dp run's device-0 allocation peak over the mean of its other devices."""
    ratio = gpu0_ratio([peaks[pt[2]["config_id"]][k] for k in sorted(peaks[pt[2]["config_id"]])]) \
        if pt else None
    return f"{ratio:.2f}" if ratio else "-"


def glance_row(folder, peaks, row, per, cols):
    """One "At a glance" row (row: model, precision, scaling, n): each strategy
    of cols at n GPUs of a series' scaling."""
    n = row[3]
    at = {m: per.get(m, {}).get(n) for m in cols}
    dps = [m for m in cols if m != "ddp"]
    cells = [f"{at[m][1]:.1f}" if at[m] else "-" for m in cols] + [best_cell(folder, at)]
    cells += [speedup_cell(folder, at[m], at["ddp"]) for m in dps]
    base = {m: per.get(m, {}).get(1) for m in cols}
    cells += [f"{at[m][1] / (n * base[m][1]):.2f}" if at[m] and base[m] else "-" for m in cols]
    cells += [memory_cell(peaks, at[m]) for m in dps]
    return "| " + " | ".join([*row[:3], str(n)] + cells) + " |"


def glance_table(folder):
    """summary.md's "At a glance": per model, precision, scaling and GPU count,
    each strategy's samples/s, the best, ddp's speed-up, the efficiencies."""
    peaks, cols = peaks_by_config(folder), glance_strategies(folder)
    dps = [m for m in cols if m != "ddp"]
    head = ["model", "precision", "scaling", "GPUs"] + [f"{m} samples/s" for m in cols] + \
        ["best"] + [f"ddp speed-up over {m}" for m in dps] + [f"{m} efficiency" for m in cols] + \
        [f"{m} GPU-0 memory ratio" for m in dps]
    lines = ["## At a glance", "", "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    for key, modes in sorted(series(folder).items()):
        for scaling in ("weak", "strong"):
            per = {m: {p[0]: p for p in pts} for (m, sc), pts in modes.items() if sc == scaling}
            for n in sorted({n for d in per.values() for n in d}):
                lines.append(glance_row(folder, peaks, (key[0], key[1], scaling, n), per, cols))
    lines += ["", "Efficiency: throughput(n) / (n · throughput(1)) of the same mode. GPU-0 "
              "memory ratio: dp's device 0 allocation peak over the mean of the other devices. "
              "Speed-up: ddp's samples/s over dp's, [its 95 % interval] from steps.csv's step "
              "times (the two-sample Hodges–Lehmann estimate with Mann–Whitney's interval). "
              "Best: the fastest mode, named only where its interval against every other mode "
              "lies above 1; \"within noise\" names the modes it cannot be told from. " +
              SAME_STEP, ""]
    if folder.failed:
        lines += [f"Not in this table or the charts: {len(folder.failed)} configuration"
                  f"{'s' if len(folder.failed) > 1 else ''} that did not end ok (see {FAILED}).",
                  ""]
    return lines


def cell_text(text, most=160):
    """A runs.csv cell fit for one markdown table cell: one line, at most
    `most` characters (cut with …), pipes escaped."""
    one = " ".join(text.split())
    one = one if len(one) <= most else one[:most - 1].rstrip() + "…"
    return one.replace("|", "\\|") or "-"


def failed_lines(folder):
    """summary.md's section naming every configuration that did not end ok,
    with its status, the steps it did and its error; [] when every one did."""
    if not folder.failed:
        return []
    one = len(folder.failed) == 1
    lines = [f"## {FAILED}", "", f"{len(folder.failed)} configuration{'' if one else 's'} did "
             f"not end ok; no chart or table here draws {'it' if one else 'them'} (runs.csv has "
             f"the whole error).", "",
             "| configuration | status | steps done | error |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['config_id']} | {r['status']} | {r['steps_done'] or '-'} of {r['steps']} | "
              f"{cell_text(r['error'])} |" for r in folder.failed]
    return lines + [""]


def summary(folder, out, charts, torch_folder=None, preds=(), pred_paths=()):
    lines = summary_intro(folder) + failed_lines(folder) + glance_table(folder)
    lines += diagnosis(folder)
    if pred_paths:
        lines += against_measured(folder, preds, pred_paths)
    use = link_use(folder)
    if use:
        write_link_use(use, out, folder.emulated)
        lines += ["## Link use", "", "Achieved bandwidth of each phase that moves bytes (bytes "
                  "counted by dpscale / median phase time) as a share of the link it crosses, "
                  "taken at the size of the phase's copies (its bytes per step over its copies: "
                  "one a step for load, scatter and gather, one per 10 MiB group for replicate "
                  "and reduce, a bucket / n ring chunk for all-reduce), interpolated "
                  "log-linearly between the sizes links.csv measured (the nearest measured "
                  "size outside them). One row per mode, device count and phase over its "
                  "configurations; ⚠ marks a share above 100 % with its reason. Every "
                  "configuration's row: [link_use.csv](link_use.csv); the links by size: "
                  "[links.png](links.png).", ""]
        lines += link_use_table(use, folder.emulated)
        lines.append("")
    if torch_folder:
        lines += beside_torch(folder, torch_folder)
    lines += [f"![{os.path.splitext(c)[0]}]({c})" for c in charts]
    return write_summary(out, lines)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder (results/<name>)")
    ap.add_argument("--out", help="where to write the charts (default: plots/<name>)")
    ap.add_argument("--reference", "--torch", dest="torch", metavar="TORCH_DIR",
                    help="a torch_reference.py folder to set beside this one in summary.md "
                         "(--torch is the same)")
    ap.add_argument("--predictions", action="append", default=[], metavar="PRED",
                    help="a predictions.csv of dpscale predict, or a folder holding one, to "
                         "draw beside the measurements (repeatable; RESULTS_DIR's own "
                         "predictions.csv is read too)")
    args = ap.parse_args(argv)
    try:
        if not os.path.isdir(args.results):
            raise InputError(f"{args.results}: not a folder")
        pred_paths = prediction_files(args.results, args.predictions)
        preds = read_all_predictions(pred_paths)
        if predictions_only(args.results):
            return plot_predictions_only(args, preds, pred_paths)
        folder = Folder(args.results)
        torch_folder = None
        if args.torch:
            if not os.path.isdir(args.torch):
                raise InputError(f"--torch {args.torch}: not a folder")
            torch_folder = Folder(args.torch)
        plt, out = start(args)
        charts = [plot_scaling(plt, folder, out, preds=preds),
                  plot_scaling(plt, folder, out, efficiency=True, preds=preds),
                  plot_imbalance(plt, folder, out), plot_phases(plt, folder, out)]
        if folder.links:
            charts.append(plot_links(plt, folder, out))
        bars = memory_bars(folder) if folder.memory else None
        if bars:
            charts.append(plot_memory(plt, folder, out, bars))
        charts = [os.path.basename(c) for c in charts]
        summary(folder, out, charts, torch_folder, preds, pred_paths)
    except (InputError, ImportError) as e:
        return refused(e)
    return done(out, charts)


def start(args):
    """matplotlib's pyplot (Agg) and the --out folder, made."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    name = os.path.basename(os.path.realpath(args.results))
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", name)
    make_folder(out)
    return plt, out


def plot_predictions_only(args, preds, pred_paths):
    """A folder of predictions alone: scaling, efficiency and summary.md
    (main refuses what this raises)."""
    if not any(p["status"] == "ok" for p in preds):
        raise InputError(f"{', '.join(pred_paths)}: no prediction with status ok to draw")
    folder = Predicted(args.results, preds)
    plt, out = start(args)
    charts = [os.path.basename(c) for c in (
        plot_scaling(plt, folder, out, preds=preds),
        plot_scaling(plt, folder, out, efficiency=True, preds=preds))]
    summary_predicted(folder, out, charts, preds, pred_paths)
    return done(out, charts)


def refused(e):
    """Exit 2, with the reason on stderr."""
    if isinstance(e, ImportError):
        print(f"plot.py: {e}: install python3-matplotlib (scripts/setup.sh does) and run "
              f"with /usr/bin/python3", file=sys.stderr)
    else:
        print(f"plot.py: {e}", file=sys.stderr)
    return 2


def done(out, charts):
    print(f"plot.py: charts in {os.path.normpath(out)}: {', '.join(charts)}, summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
