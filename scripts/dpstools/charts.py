"""plot.py's charts: scaling, efficiency, GPU-0 imbalance, phases, links, memory.

Each drawn with matplotlib's pyplot (the caller's, Agg) into --out and named
by save; predictions (predicted) drawn beside the measured series; each
chart counts the configurations it leaves out because they did not end ok.
"""
import math
import os
import textwrap
from collections import defaultdict

from dpstools.folder import (FAILED, LINES, PHASE_ORDER, any_accum, cannot_write, fmt_bytes,
                             gpu0_ratio, line_label, link_curves, peaks_by_config, run_label,
                             series)
from dpstools.predicted import panel_of, prediction_errors, predicted_lines
from dpstools.results import InputError, integer, number
from dpstools.summary import IN_FLIGHT

# A line's colour (results.line: the strategy, ddp with --no-sync off apart) and its
# marker by accumulation (accum N: N micro-batches per optimizer step).
MODE_COLOR = {"dp": "#d62728", "dp-lean": "#ff9896", "ddp": "#1f77b4", "ddp-lean": "#aec7e8",
              "ddp-syncall": "#2ca02c", "ddp-lean-syncall": "#98df8a",
              "zero1": "#9467bd", "zero1-lean": "#c5b0d5", "zero1-syncall": "#8c564b",
              "zero1-lean-syncall": "#c49c94", "zero2": "#ff7f0e", "zero2-lean": "#ffbb78",
              "fsdp": "#17becf", "fsdp-lean": "#9edae5"}
ACCUM_MARKER = {1: "o", 2: "s", 4: "^", 8: "D", 16: "v"}
ACCUM_NOTE = ("accum N: N micro-batches per optimizer step (marker ○ 1, □ 2, △ 4, ◇ 8); "
              "-syncall: ddp with --no-sync off, every micro-step all-reduced")


def accum_marker(n_accum):
    return ACCUM_MARKER.get(n_accum, "P")


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


def title_lines(fig, lines):
    """A figure's title of several lines, each wrapped to the figure's width."""
    width = int(fig.get_figwidth() * 11)  # characters a line holds at the title's size
    fig.suptitle("\n".join(textwrap.fill(t, width) for t in lines if t))


# A strategy as the scaling charts' titles name it (results.MODE's words).
MODE_NAME = {"dp": "DataParallel (dp)", "ddp": "DistributedDataParallel (ddp)",
             "zero1": "ZeRO-1 (zero1)", "zero2": "ZeRO-2 (zero2)", "fsdp": "FSDP FULL_SHARD (fsdp)"}


def strategies_title(folder):
    """'DataParallel (dp) vs DistributedDataParallel (ddp)', or the
    strategies the folder ran, in results.MODE's order."""
    ran = {r["mode"] for r in folder.runs}
    if ran <= {"dp", "ddp"}:
        return "DataParallel (dp) vs DistributedDataParallel (ddp)"
    names = [MODE_NAME[m] for m in MODE_NAME if m in ran]
    return ", ".join(names[:-1]) + " and " + names[-1]


def dp_note(folder):
    """DP_NOTE where dp ran, else nothing."""
    return [DP_NOTE] if any(r["mode"] == "dp" for r in folder.runs) else []


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
    for name, n_accum, machine, source in lines:
        sources[(name, n_accum, machine)].add(source)
    for (mode, n_accum, machine, source), rows in sorted(lines.items()):
        color = MODE_COLOR.get(mode, "gray")
        name = f"{line_label(mode, n_accum)} predicted ({machine}" + (
            f", from {source})" if len(sources[(mode, n_accum, machine)]) > 1 else ")")
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
                    color=MODE_COLOR.get(p["_line"], "gray"))


def ideal_line(ax, ns, base, mode):
    """Linear scaling from one GPU's throughput, dotted in the mode's colour."""
    ax.plot(ns, [base * n for n in ns], ":", color=MODE_COLOR.get(mode, "gray"), alpha=0.5,
            linewidth=1)


def draw_measured(ax, lines, efficiency):
    """A panel's measured lines ((line, accum, scaling) -> [(n, samples/s)]):
    throughput with each line's ideal, or efficiency where the line has one
    GPU (of the same line and accum); returns the labels of the lines left
    out for want of one GPU."""
    left_out = []
    for (mode, n_accum, scaling), pts in sorted(lines.items(), key=lambda kv: (
            LINES.index(kv[0][0]) if kv[0][0] in LINES else len(LINES), kv[0])):
        ns = [p[0] for p in pts]
        base = next((p[1] for p in pts if p[0] == 1), None)
        label = line_label(mode, n_accum, scaling)
        if efficiency and base is None:
            left_out.append(label)
            continue
        if efficiency:
            ys = [p[1] / (p[0] * base) for p in pts]
        else:
            ys = [p[1] for p in pts]
            if base is not None:
                ideal_line(ax, ns, base, mode)
        ax.plot(ns, ys, style(scaling), marker=accum_marker(n_accum),
                color=MODE_COLOR.get(mode, "gray"), label=label)
    return left_out


def draw_predicted_ideal(ax, predicted):
    """Predictions alone in a panel: each mode's ideal from its one predicted GPU."""
    for (mode, _, _, _), rows in sorted(predicted.items()):
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
    notes = dp_note(folder) + (["; ".join(pred)] if pred else [])
    notes += [ACCUM_NOTE] if folder.runs and any_accum(folder) else []
    notes += [f"no 1-GPU run, so no efficiency: {'; '.join(left_out)}"] if left_out else []
    notes += [not_drawn(folder)] if folder.failed else []
    title_lines(fig, [f"{what}: {strategies_title(folder)}", folder.label()] + notes)
    return save(plt, fig, out, "efficiency.png" if efficiency else "scaling.png")



def imbalance_rows(folder):
    """[(model, precision, n, (line, accum), [peaks per device])] for weak-scaling ok runs."""
    peaks = peaks_by_config(folder)
    rows = []
    for r in folder.runs:
        p = peaks.get(r["config_id"])
        if p and (r["scaling"] or "weak") == "weak":
            rows.append((r["model"], r["precision"], r["_n"], (r["_line"], r["_accum"]),
                         [p[k] for k in sorted(p)]))
    return sorted(rows)


def drawn_lines(rows):
    """The (line, accum) pairs of imbalance_rows, in LINES' order, then by accum."""
    return sorted({r[3] for r in rows}, key=lambda la: (LINES.index(la[0]), la[1]))



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
            for mode in drawn_lines(mine):
                for m2, p2, n2, mode2, peaks in mine:
                    if n2 != n or mode2 != mode:
                        continue
                    xs = [x + i * 0.8 / len(peaks) for i in range(len(peaks))]
                    bars = ax.bar(xs, [p / 2**20 for p in peaks], width=0.8 / len(peaks),
                                  color=MODE_COLOR[mode[0]], edgecolor="black", linewidth=0.4)
                    bars[0].set_hatch("//")
                    ticks.append(x + 0.4 - 0.4 / len(peaks))
                    labels.append(f"{line_label(*mode, None).replace(', ', chr(10))}\n{n} GPU")
                    x += 1.0
            x += 0.5
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("allocation peak per device (MiB)")
        ax.set_title(f"{model}, {prec}: memory per device (hatched: device 0)")
        ax.grid(axis="y", alpha=0.3)
        for mode in drawn_lines(mine):
            pts = [(r[2], gpu0_ratio(r[4])) for r in mine if r[3] == mode and gpu0_ratio(r[4])]
            if pts:
                ax2.plot([p[0] for p in pts], [p[1] for p in pts], marker=accum_marker(mode[1]),
                         color=MODE_COLOR[mode[0]], label=line_label(*mode, None))
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
    by what it holds (memory.csv's kind, or its category in older folders; the
    sharded strategies' units in flight apart from their kind's shard), for
    each strategy at its largest GPU count (weak scaling), dp beside ddp."""
    cats = defaultdict(lambda: defaultdict(lambda: defaultdict(float)))
    for m in folder.memory:
        what = m.get("kind") or m["category"]
        if m.get("kind") and m["category"] in IN_FLIGHT:
            what = f"{m['kind']}: {m['category']} (in flight)"
        cats[m["config_id"]][integer(m, "device")][what] += number(m, "bytes_at_peak") / 2**20
    widest = {}
    for r in folder.runs:
        key = (r["model"], r["precision"], r["_line"], r["_accum"])
        if (r["scaling"] or "weak") == "weak" and r["config_id"] in cats and \
                r["_n"] >= widest.get(key, (0,))[0]:
            widest[key] = (r["_n"], r["config_id"])
    out = defaultdict(list)
    order = sorted(widest.items(), key=lambda w: (w[0][:2], w[0][2] != "dp", LINES.index(w[0][2]),
                                                  w[0][3]))
    for (model, prec, strat, n_accum), (n, cid) in order:
        name = line_label(strat, n_accum).replace(", ", "\n")
        out[(model, prec)] += [(f"{name}\nGPU {d}\nof {n}", dict(cats[cid][d]))
                               for d in sorted(cats[cid])]
    return out


# One colour a memory kind (memory.csv's kind, be_mem_kind's words) on every panel; a
# sharded unit in flight in its kind's colour, hatched; any other label a colour of its
# own name, the same wherever it is drawn.
KIND_COLOR = {"parameters": "#1f77b4", "gradients": "#ff7f0e", "optimizer state": "#2ca02c",
              "activations": "#d62728", "inputs": "#9467bd", "outputs": "#8c564b",
              "loss buffers": "#e377c2", "communication": "#17becf", "workspace": "#bcbd22",
              "other": "#c7c7c7"}


def memory_style(plt, label):
    """(colour, hatch) of a memory bar's label, the same on every panel."""
    kind = label.split(":")[0]
    if kind in KIND_COLOR:
        return KIND_COLOR[kind], "//" if label != kind else None
    index = sum(label.encode()) % 20  # a stable colour of the name, not of its place
    return plt.cm.tab20(index), None


def plot_memory(plt, folder, out, data):
    """Each device's allocation peak, stacked by what it holds (data: memory_bars)."""
    fig, axes = grid(plt, len(data), width=max(8.0, 0.6 * max(map(len, data.values()))),
                     height=5.0)
    for ax, ((model, prec), bars) in zip(axes, sorted(data.items())):
        totals = defaultdict(float)
        for _, cats in bars:
            for c, mib in cats.items():
                totals[c] += mib
        order = sorted(totals, key=totals.get, reverse=True)
        shown = order[:19]
        for i, (label, cats) in enumerate(bars):
            bottom = 0.0
            for c in shown + ["other"]:
                mib = cats.get(c, 0.0) if c != "other" else sum(
                    v for k, v in cats.items() if k not in shown)
                color, hatch = memory_style(plt, c)
                ax.bar(i, mib, bottom=bottom, color=color, hatch=hatch, edgecolor="black",
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
    title_lines(fig, ["Memory by what it holds, per device (memory.csv)", folder.label()] +
                dp_note(folder) + [not_drawn(folder)])
    return save(plt, fig, out, "memory.png")


# The strategies whose step ends waiting for all-reduces (ddp's buckets; zero1 keeps them)
# and those whose wait is for the last units' reduce-scatters, which phases.csv times as
# allreduce_exposed too: the phase chart names the collectives apart.
ALLREDUCE_MODES = ("dp", "ddp", "zero1")
EXPOSED = "allreduce_exposed"
EXPOSED_SHARDED = "collectives_exposed (reduce-scatters)"


def phase_series(runs):
    """The phase chart's series: PHASE_ORDER, the exposed wait named by its
    collectives for the sharded runs (zero2, fsdp) apart from ddp's all-reduce;
    (name, phase, the runs it is drawn for)."""
    sharded = [r for r in runs if r["mode"] not in ALLREDUCE_MODES]
    out = []
    for ph in PHASE_ORDER:
        if ph == EXPOSED and sharded:
            out += [(ph, ph, [r for r in runs if r["mode"] in ALLREDUCE_MODES]),
                    (EXPOSED_SHARDED, ph, sharded)]
        else:
            out.append((ph, ph, runs))
    return out


def phase_color(cmap, i):
    """tab10's colours, then greys: no two phases alike."""
    return cmap(i) if i < 10 else str(0.35 + 0.15 * (i - 10))


def plot_phases(plt, folder, out):
    med = defaultdict(dict)
    drawn = {r["config_id"] for r in folder.runs}
    for p in folder.phases:
        if p["device"] == "0" and p["config_id"] in drawn:
            med[p["config_id"]][p["phase"]] = number(p, "median_ms")
    keys = sorted({(r["model"], r["precision"]) for r in folder.runs})
    fig, axes = grid(plt, len(keys), width=6.0, height=4.4)
    cmap = plt.get_cmap("tab10")
    sharded = any(r["mode"] not in ALLREDUCE_MODES for r in folder.runs)
    for ax, (model, prec) in zip(axes, keys):
        runs = sorted((r for r in folder.runs if r["model"] == model and r["precision"] == prec
                       and (r["scaling"] or "weak") == "weak"),
                      key=lambda r: (r["_n"], LINES.index(r["_line"]), r["_accum"]))
        bottoms = [0.0] * len(runs)
        for name, ph, mine in phase_series(runs):
            vals = [med[r["config_id"]].get(ph, 0.0) if r in mine else 0.0 for r in runs]
            if any(vals):
                ax.bar(range(len(runs)), vals, bottom=bottoms, label=name,
                       color=phase_color(cmap, PHASE_ORDER.index(ph)),
                       hatch="//" if name == EXPOSED_SHARDED else None)
                bottoms = [b + v for b, v in zip(bottoms, vals)]
        ax.set_xticks(range(len(runs)))
        ax.set_xticklabels([f"{run_label(r, chr(10))}\n{r['_n']} GPU" for r in runs], fontsize=8)
        ax.set_ylabel("median time on device 0 (ms)")
        ax.set_title(f"{model}, {prec}: where a step's time goes")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    what = ("the collectives (ddp's all-reduce, zero2's and fsdp's reduce-scatters) overlap "
            "backward" if sharded else "ddp's all-reduce overlaps backward")
    title_lines(fig, [f"Phases of a step (device 0; {what}, only the exposed part is stacked)",
                      folder.label(), not_drawn(folder)])
    return save(plt, fig, out, "phases.png")



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


def draw(plt, folder, out, preds=()):
    """Every chart of a results folder (links and memory where it has them);
    returns the paths written."""
    drawn = [plot_scaling(plt, folder, out, preds=preds),
             plot_scaling(plt, folder, out, efficiency=True, preds=preds),
             plot_imbalance(plt, folder, out), plot_phases(plt, folder, out)]
    if folder.links:
        drawn.append(plot_links(plt, folder, out))
    bars = memory_bars(folder) if folder.memory else None
    if bars:
        drawn.append(plot_memory(plt, folder, out, bars))
    return drawn


def draw_predicted(plt, folder, out, preds):
    """The charts of a folder of predictions alone (predicted.Predicted):
    scaling and efficiency; returns the paths written."""
    return [plot_scaling(plt, folder, out, preds=preds),
            plot_scaling(plt, folder, out, efficiency=True, preds=preds)]
