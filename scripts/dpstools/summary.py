"""plot.py's summary.md: at a glance, failures, diagnosis, where the time goes, predictions, links.

The text beside the charts (charts), which it links, and link_use.csv (the
rows behind its Link use table). Standard library only.
"""
import csv
import math
import os
from collections import defaultdict

from dpstools.buckets_advice import bucket_lines
from dpstools import culprit, op_table
from dpstools.diagnose import diagnosis
from dpstools.folder import (FAILED, LINES, PHASE_ORDER, any_accum, at_size, cannot_write,
                             fmt_bytes, gpu0_ratio, link_curves, peaks_by_config, run_label,
                             scaler_runs, series)
from dpstools.predicted import (against_measured, oom_lines, prediction_sources,
                                predictions_table)
from dpstools.results import integer, line, number
from dpstools.speedup import ONE_DEVICE, SAME_STEP, speedup
from dpstools.stats import median

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
    chunks of a bucket / n (bucket: bucket_mb, at most the parameters). With accum N all
    but the all-reduce do so in each of the N micro-steps."""
    if phase == "allreduce":
        n = run["_n"]
        params = 4 * float(run.get("params") or 0) or per_step * n / (4 * max(1, n - 1))
        bucket = float(run.get("bucket_mb") or 25) * 2**20 or params
        return min(bucket, params) / n
    per_micro = per_step / run["_accum"]
    if phase in ("replicate", "reduce"):
        return per_micro / max(1, math.ceil(per_micro / DP_GROUP_BYTES))
    return per_micro


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
        rows.append({"config_id": p["config_id"], "mode": run_label(r, " "), "ngpus": n,
                     "device": i,
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
    (python_overhead_ms: event time minus busy device time, GPUs only)."""
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
    lines += module_lines(torch_folder, [(cid, mine[cid], theirs[cid]) for cid in common])
    lines += ["Median times on device 0 (ms). PyTorch's Python overhead: how long its device "
              "waited for Python in a phase, the phase's time less the time the device was busy "
              "in it (measured on GPUs only). PyTorch's dp "
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


def module_lines(torch_folder, pairs):
    """With a folder of torch_reference.py --module (meta.json's "module"):
    per configuration in both, the step of the user's nn.Module as PyTorch
    runs it beside the step of dpscale's model of it (its model file)."""
    module = torch_folder.meta.get("module")
    if not isinstance(module, dict) or not pairs:
        return []
    lines = [f"The PyTorch folder ran the nn.Module {module.get('spec', '?')} itself, its own ops "
             f"and Python, beside dpscale's model of it (the model file "
             f"{module.get('model_file') or 'exported from it'}); median step times:", ""]
    for cid, mine, theirs in pairs:
        a, b = number(mine, "step_ms_median"), number(theirs, "step_ms_median")
        ratio = f" (PyTorch / dpscale {b / a:.2f})" if a else ""
        lines.append(f"- {cid}: PyTorch itself: {b:.4f} ms; dpscale's model of it: {a:.4f} ms"
                     f"{ratio}.")
    return lines + [""]


def write_predicted(folder, out, charts, preds, paths):
    """summary.md of a folder of predictions alone (predicted.Predicted)."""
    lines = [f"# dpscale predictions: {os.path.basename(os.path.abspath(folder.path))}", "",
             f"{folder.label()}.", "", prediction_sources(paths) + " Weak scaling: the batch "
             "per GPU is fixed; efficiency: one device's step over this step.", "",
             "## Predicted", ""] + predictions_table(preds) + [""] + oom_lines(preds)
    lines += [f"![{os.path.splitext(c)[0]}]({c})" for c in charts]
    return write_lines(out, lines)


def write_lines(out, lines):
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
    """The lines the At a glance table has columns for: dp and ddp, and the
    lean variants and ddp with --no-sync off (-syncall) where the folder has
    them."""
    ran = {r["_line"] for r in folder.runs}
    return [s for s in LINES if s in ran or s in ("dp", "ddp")]


def best_cell(folder, at):
    """The fastest strategy of a row (at: strategy -> point or None), where its
    throughput beats every other's by an interval above 1; otherwise why none."""
    ran = [m for m in at if at[m]]
    if len(ran) < 2:
        return "-"
    top = max(ran, key=lambda m: at[m][1])
    told = {m: speedup(folder.step_ms, at[m][2], at[top][2], line).faster for m in ran if m != top}
    if ONE_DEVICE in told.values():
        return f"- ({ONE_DEVICE})"
    tied = [m for m in told if told[m] != top]
    return top if not tied else "within noise: " + ", ".join(m for m in ran if m == top or m in tied)


def speedup_cell(folder, a, b):
    """b's throughput over a's with its interval; '-' where one did not run."""
    if not a or not b:
        return "-"
    s = speedup(folder.step_ms, a[2], b[2], line)
    if s.faster == ONE_DEVICE:
        return f"- ({ONE_DEVICE})"
    span = "[no interval]" if math.isinf(s.hi) else f"[{s.lo:.2f}, {s.hi:.2f}]"
    return f"{s.ratio:.2f}x {span}" + (", within noise" if s.faster not in LINES else "")


def memory_cell(peaks, pt):
    """A dp run's device-0 allocation peak over the mean of its other devices."""
    ratio = gpu0_ratio([peaks[pt[2]["config_id"]][k] for k in sorted(peaks[pt[2]["config_id"]])]) \
        if pt else None
    return f"{ratio:.2f}" if ratio else "-"


def memory_lines(cols):
    """The lines with a GPU-0 memory ratio column: all but ddp's no_sync ones."""
    return [m for m in cols if m != "ddp" and not m.endswith("-syncall")]


def glance_row(folder, peaks, row, per, cols):
    """One "At a glance" row (row: model, precision[, accum], scaling, n): each
    line of cols at n GPUs of a series' accumulation and scaling."""
    n = row[-1]
    at = {m: per.get(m, {}).get(n) for m in cols}
    dps = [m for m in cols if m != "ddp"]
    cells = [f"{at[m][1]:.1f}" if at[m] else "-" for m in cols] + [best_cell(folder, at)]
    cells += [speedup_cell(folder, at[m], at["ddp"]) for m in dps]
    base = {m: per.get(m, {}).get(1) for m in cols}
    cells += [f"{at[m][1] / (n * base[m][1]):.2f}" if at[m] and base[m] else "-" for m in cols]
    cells += [memory_cell(peaks, at[m]) for m in memory_lines(cols)]
    return "| " + " | ".join([*map(str, row[:-1]), str(n)] + cells) + " |"


def glance_table(folder):
    """summary.md's "At a glance": per model, precision, accumulation (where a
    configuration accumulates), scaling and GPU count, each line's samples/s,
    the best, ddp's speed-up, the efficiencies."""
    peaks, cols = peaks_by_config(folder), glance_strategies(folder)
    dps = [m for m in cols if m != "ddp"]
    accums = any_accum(folder)
    head = ["model", "precision"] + (["accum"] if accums else []) + ["scaling", "GPUs"] + \
        [f"{m} samples/s" for m in cols] + ["best"] + [f"ddp speed-up over {m}" for m in dps] + \
        [f"{m} efficiency" for m in cols] + [f"{m} GPU-0 memory ratio" for m in memory_lines(cols)]
    lines = ["## At a glance", "", "| " + " | ".join(head) + " |",
             "|" + " --- |" * len(head)]
    for key, modes in sorted(series(folder).items()):
        for n_accum in sorted({a for _, a, _ in modes}):
            for scaling in ("weak", "strong"):
                per = {m: {p[0]: p for p in pts} for (m, a, sc), pts in modes.items()
                       if sc == scaling and a == n_accum}
                row = (key[0], key[1]) + ((n_accum,) if accums else ()) + (scaling,)
                for n in sorted({n for d in per.values() for n in d}):
                    lines.append(glance_row(folder, peaks, row + (n,), per, cols))
    if accums:
        lines += ["", "accum: micro-batches per optimizer step (--accum); a row's samples/s are "
                  "per optimizer step of the whole batch. ddp-syncall: ddp with --no-sync off, "
                  "every micro-step all-reduced (ddp's speed-up over it is what no_sync saves)."]
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


SKIPPED = "Skipped steps"  # summary.md's section of the GradScaler's skipped steps


def scale_text(x):
    return "-" if x is None else f"{x:g}"


def scaler_lines(folder):
    """summary.md's section on the configurations with a GradScaler (fp16):
    each one's timed steps skipped for inf or NaN gradients and its loss
    scale at the first and last timed step; [] when none has a scaler."""
    rows = scaler_runs(folder)
    if not rows:
        return []
    lines = [f"## {SKIPPED}", "", "Configurations with a GradScaler (fp16): a step whose "
             "gradients hold inf or NaN once unscaled is skipped (no optimizer step) and the "
             "loss scale halved; the scale doubles after --growth-interval clean steps "
             "(runs.csv's skipped_steps, steps.csv's skipped and loss_scale).", "",
             "| configuration | precision | skipped steps | timed steps | loss scale, first "
             "timed step | loss scale, last |", "| --- | --- | --- | --- | --- | --- |"]
    for r, skipped, steps, first, last in sorted(rows, key=lambda x: x[0]["config_id"]):
        lines.append(f"| {r['config_id']} | {r['precision']} | {skipped} | {steps} | "
                     f"{scale_text(first)} | {scale_text(last)} |")
    total = sum(x[1] for x in rows)
    lines += ["", f"{total} timed step{'' if total == 1 else 's'} skipped over {len(rows)} "
              f"configuration{'' if len(rows) == 1 else 's'}." if total else
              "No timed step was skipped.", ""]
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


# ---- model states against the ZeRO formulas ----------------------------------

STATES = "Model states against the ZeRO formulas"  # summary.md's section
STATE_KINDS = ("parameters", "gradients", "optimizer state")
# What each strategy shards over its N ranks (core/strategy.h's shard: 1 the optimizer
# state, 2 also the gradients, 3 also the parameters), and the level that shards each kind.
SHARD = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3}
SHARDED_AT = {"parameters": 3, "gradients": 2, "optimizer state": 1}
# Optimizer-state bytes per parameter in fp32: SGD's momentum, AdamW's two moments.
OPT_BYTES = {"sgd": 4, "adamw": 8}
# memory.csv's categories of a model-state kind that the formula leaves out: the units in
# flight (their reason), and the kind ddp's buckets are counted in instead.
IN_FLIGHT = {"gathered unit parameters": "two units gathered: the current and the prefetched",
             "unit gradients": "two units' gradients before their reduce-scatter"}
# The model-state kind of each unit in flight: beyond_text counts it against that kind alone.
IN_FLIGHT_KIND = {"gathered unit parameters": "parameters", "unit gradients": "gradients"}
# Other buffers of a model-state kind that no formula counts: their kind and what they hold.
OTHER_STATES = {
    "autocast parameters": ("parameters", "the half-precision copy autocast casts each forward"),
    "replica parameters": ("parameters", "dp's replicas on the other devices"),
    "autocast parameter gradients": ("gradients", "a layer's gradients in the half type before "
                                                  "they widen"),
    "micro-step gradients": ("gradients", "--accum: a later micro-step's before they are added"),
    "accumulated gradients": ("gradients", "--accum: the micro-steps' sum"),
}
BUCKETS = "gradient buckets"


def state_formula(run):
    """{kind: (bytes, expression)} of dpscale's formula for a run's devices
    (core/strategy.h's dps_strategy_state_bytes): 4P, 4P and opt_bytes·P,
    each over N where the strategy shards it; None for a mode or optimizer
    it has no row for."""
    per = {"parameters": 4, "gradients": 4, "optimizer state": OPT_BYTES.get(run["optimizer"])}
    if run["mode"] not in SHARD or per["optimizer state"] is None or not run.get("params"):
        return None
    p, n = integer(run, "params"), run["_n"]
    out = {}
    for kind in STATE_KINDS:
        split = n > 1 and SHARD[run["mode"]] >= SHARDED_AT[kind]
        out[kind] = (per[kind] * p / n if split else per[kind] * p,
                     f"{per[kind]}P/{n}" if split else f"{per[kind]}P")
    return out


def states_by_device(folder, config_id):
    """{device: ({kind: bytes}, {category: bytes})} of a configuration's
    model-state kinds and its categories at each device's peak (memory.csv)."""
    out = defaultdict(lambda: (defaultdict(int), defaultdict(int)))
    for m in folder.memory or []:
        if m["config_id"] == config_id:
            kinds, cats = out[integer(m, "device")]
            cats[m["category"]] += integer(m, "bytes_at_peak")
            if m.get("kind") in STATE_KINDS:
                kinds[m["kind"]] += integer(m, "bytes_at_peak")
    return out


def beyond_text(kinds, cats, formula, n):
    """What a device holds beyond the formula, kind by kind, and why: the
    units in flight, the buffers of autocast and accumulation (OTHER_STATES),
    a shard's rounding to whole elements (within 4 bytes a rank), or
    unexplained; ddp's buckets named as communication."""
    parts = []
    for kind in STATE_KINDS:
        extra = kinds.get(kind, 0) - formula[kind][0]
        flight = [c for c in IN_FLIGHT if cats.get(c) and IN_FLIGHT_KIND[c] == kind]
        flight += [c for c, (k, _) in OTHER_STATES.items() if cats.get(c) and k == kind]
        why = [f"{c} {cats[c]:,} ({IN_FLIGHT[c] if c in IN_FLIGHT else OTHER_STATES[c][1]})"
               for c in flight]
        rest = extra - sum(cats[c] for c in flight)
        if abs(rest) >= 1 and abs(rest) <= 4 * n:
            why.append(f"{rest:+,.0f} the shard's rounding to whole elements")
        elif abs(rest) >= 1:
            why.append(f"{rest:+,.0f} not explained")
        if abs(extra) >= 1:
            parts.append(f"{kind} {extra:+,.0f}: " + "; ".join(why))
    text = "; ".join(parts) or "none"
    if cats.get(BUCKETS):
        text += f" ({BUCKETS} {cats[BUCKETS]:,}: communication, not model state)"
    return text


def device_ranges(devs):
    """'0–3' for a run of contiguous devices, '0, 2' otherwise."""
    return f"{devs[0]}–{devs[-1]}" if len(devs) > 2 and devs[-1] - devs[0] == len(devs) - 1 \
        else ", ".join(map(str, devs))


def state_rows(folder, run):
    """A configuration's table rows: one per set of devices holding the same."""
    formula = state_formula(run)
    per = states_by_device(folder, run["config_id"])
    if formula is None or not any(k for k, _ in per.values()):
        return []
    cells = defaultdict(list)
    for d in sorted(per):
        kinds, cats = per[d]
        row = tuple(f"{kinds.get(k, 0):,} / {formula[k][0]:,.0f} ({formula[k][1]})"
                    for k in STATE_KINDS)
        cells[row + (beyond_text(kinds, cats, formula, run["_n"]),)].append(d)
    return [f"| {run['config_id']} | {integer(run, 'params'):,} | {device_ranges(devs)} | "
            f"{' | '.join(row)} |" for row, devs in sorted(cells.items(), key=lambda c: c[1])]


def model_state_lines(folder):
    """summary.md's section on the sharded strategies' model states: per
    configuration (ddp's beside them) and device, memory.csv's parameters,
    gradients and optimizer state at the peak against dpscale's formula;
    [] when no sharded configuration ran."""
    if not any(SHARD.get(r["mode"], 0) for r in folder.runs):
        return []
    rows = []
    for r in sorted(folder.runs, key=lambda r: (r["model"], r["_n"], list(SHARD).index(
            r["mode"]) if r["mode"] in SHARD else 9, r["config_id"])):
        rows += state_rows(folder, r)
    if not rows:
        return [f"## {STATES}", "", "memory.csv has no model-state kinds of these "
                "configurations: nothing to set against the formulas.", ""]
    return [f"## {STATES}", "", "Bytes each device holds at its allocation peak (memory.csv, "
            "summed by kind) against dpscale's formula for fp32 training (core/strategy.h): "
            "parameters 4P, gradients 4P, optimizer state kP (SGD's momentum k = 4, AdamW's two "
            "moments k = 8), each over N where the strategy shards it: zero1 the optimizer "
            "state, zero2 also the gradients, fsdp also the parameters. The ZeRO paper's "
            "figures are for mixed-precision Adam (2P fp16 parameters, 2P fp16 gradients, 12P "
            "fp32 copy and moments: stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N), "
            "which dpscale does not train with. Beyond the formula: the units in flight, fsdp's "
            "two gathered units (the current and the prefetched) and zero2's and fsdp's two "
            "units' gradients before their reduce-scatter; ddp's and zero1's gradient buckets "
            "are communication, not model state. Bytes: measured / the formula's.", "",
            "| configuration | P | devices | parameters: measured / formula | gradients: "
            "measured / formula | optimizer state: measured / formula | beyond the formula |",
            "| --- | --- | --- | --- | --- | --- | --- |"] + rows + [""]


def write(folder, out, charts, torch_folder=None, preds=(), pred_paths=()):
    """OUT/summary.md of a results folder (and link_use.csv where a phase crosses a
    measured link), linking the charts named; returns its path."""
    lines = summary_intro(folder) + failed_lines(folder) + glance_table(folder)
    lines += scaler_lines(folder) + model_state_lines(folder) + diagnosis(folder)
    lines += culprit.lines(folder)
    lines += op_table.lines(folder, torch_folder)
    if pred_paths:
        lines += against_measured(folder, preds, pred_paths)
    lines += bucket_lines(folder)
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
    return write_lines(out, lines)
