#!/usr/bin/python3
"""plot.py on a sweep of ddp, zero1, zero2 and fsdp (small, SGD and AdamW, 1, 2
and 4 devices, --trace-steps 2) on the host backend: summary.md's model
states against the ZeRO formulas equal memory.csv's bytes and the formula
this file works out; the diagnosis names the units whose all-gathers stall
the step, with their share, where buckets.csv is given a known exposure, and
sets each sharded strategy against ddp; every chart draws the strategies.
A folder of dp and ddp alone (tests/fixtures/results-host) keeps its summary
and titles without them. memory.png keeps one colour a kind on every panel;
every chart one colour a strategy and phases.png one a phase, read from the
figures of a folder whose panels draw different strategies.
Usage: test_plot_sharded.py DPSCALE states|diagnosis|charts|absent|colours|chart_colours;
exit 0 pass, 1 fail."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("plot sharded " + c, DPSCALE, c, suite=NOSAN, timeout=600)
         for c in ("states", "diagnosis", "charts", "absent", "colours", "chart_colours")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import collections
import os
import re
import sys
import tempfile

from helpers import FIXTURES, dpscale, edit, expect, png_size, rows_of, run_cases, set_cells
import plot  # scripts/plot.py (scripts/ is on PYTHONPATH)
from plot_helpers import draw, section

MODES = ("ddp", "zero1", "zero2", "fsdp")
SHARD = {"ddp": 0, "zero1": 1, "zero2": 2, "fsdp": 3}  # core/strategy.h's levels
OPT_BYTES = {"sgd": 4, "adamw": 8}  # optimizer state a parameter: momentum; AdamW's two moments
STATES = "Model states against the ZeRO formulas"
FSDP4, DDP4 = "fsdp-small-fp32-adamw-g4-b64", "ddp-small-fp32-adamw-g4-b64-bk25"


def sweep(binary, tmp, optimizers="sgd, adamw", steps=3):
    suite = os.path.join(tmp, "s.suite")
    with open(suite, "w") as f:
        f.write(f"modes = {', '.join(MODES)}\ngpus = 1, 2, 4\nmodels = small\n"
                f"optimizers = {optimizers}\nsteps = {steps}\nwarmup = 1\n")
    out = os.path.join(tmp, "res")
    p = dpscale(binary, "sweep", suite, "--host-devices", "4", "--no-links", "--trace-steps",
                "2", out=out, name="s", timeout=300)
    expect(p.returncode == 0, f"sweep exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr}")
    return os.path.join(out, "s")


def state_table(md):
    """{(config_id, device): [cells]} of the model-states table, a row per device."""
    out = {}
    for line in section(md, STATES).splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if not line.startswith("| ") or len(cells) != 7 or cells[0] in ("configuration", "---"):
            continue
        devs = cells[2]
        if "–" in devs:
            a, b = devs.split("–")
            devs = range(int(a), int(b) + 1)
        else:
            devs = [int(d) for d in devs.split(", ")]
        for d in devs:
            out[(cells[0], d)] = cells
    return out


def formula(run):
    """(bytes, expression) per kind, worked out here from core/strategy.h's rule."""
    p, n, level = int(run["params"]), int(run["ngpus"]), SHARD[run["mode"]]
    out = []
    for per, at in ((4, 3), (4, 2), (OPT_BYTES[run["optimizer"]], 1)):
        split = n > 1 and level >= at
        out.append((per * p // n if split else per * p, f"{per}P/{n}" if split else f"{per}P"))
    return out


def case_states(binary):
    """Every configuration's every device in the section: parameters,
    gradients and optimizer state as memory.csv sums them, the formula's
    bytes and expression, and what lies beyond it named with memory.csv's
    bytes (fsdp's gathered units, zero2's and fsdp's unit gradients, ddp's
    buckets as communication)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = sweep(binary, tmp)
        md, _ = draw(folder, os.path.join(tmp, "out"))
        table = state_table(md)
        runs = {r["config_id"]: r for r in rows_of(os.path.join(folder, "runs.csv"))}
        kinds, cats = collections.Counter(), collections.Counter()
        for m in rows_of(os.path.join(folder, "memory.csv")):
            key = (m["config_id"], int(m["device"]))
            kinds[key + (m["kind"],)] += int(m["bytes_at_peak"])
            cats[key + (m["category"],)] += int(m["bytes_at_peak"])
        devices = {(m["config_id"], int(m["device"])) for m in rows_of(
            os.path.join(folder, "memory.csv"))}
        expect(len(runs) == 24 and len(devices) == 2 * 4 * 7,
               f"{len(runs)} configurations, {len(devices)} devices: expected 24 and 56")
        expect(set(table) == devices, f"the section's devices {sorted(set(table) ^ devices)} "
               f"differ from memory.csv's")
        for (cid, dev), cells in sorted(table.items()):
            run = runs[cid]
            expect(cells[1] == f"{int(run['params']):,}", f"{cid}: P {cells[1]}")
            for kind, cell, (want, expr) in zip(("parameters", "gradients", "optimizer state"),
                                                cells[3:6], formula(run)):
                got = kinds[(cid, dev, kind)]
                expect(cell == f"{got:,} / {want:,} ({expr})",
                       f"{cid} device {dev} {kind}: {cell!r}, expected {got:,} / {want:,} ({expr})")
            beyond = cells[6]
            mode = run["mode"]
            gathered, unit_grads = cats[(cid, dev, "gathered unit parameters")], \
                cats[(cid, dev, "unit gradients")]
            expect((mode == "fsdp") == (gathered > 0) and
                   (mode in ("zero2", "fsdp")) == (unit_grads > 0),
                   f"{cid} device {dev}: memory.csv's units in flight {gathered}, {unit_grads}")
            if gathered:
                expect(f"parameters +{gathered:,}: gathered unit parameters {gathered:,}" in beyond,
                       f"{cid} device {dev}: beyond {beyond!r} lacks the gathered units")
            if unit_grads:
                expect(f"gradients +{unit_grads:,}: unit gradients {unit_grads:,}" in beyond,
                       f"{cid} device {dev}: beyond {beyond!r} lacks the unit gradients")
            if mode in ("ddp", "zero1"):
                buckets = cats[(cid, dev, "gradient buckets")]
                expect(beyond == f"none (gradient buckets {buckets:,}: communication, not "
                       f"model state)", f"{cid} device {dev}: beyond {beyond!r}")
            expect("not explained" not in beyond, f"{cid} device {dev}: {beyond!r}")
        expect("stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N" in md,
               "the section does not name the ZeRO paper's mixed-precision formulas")


def set_steps(folder, cid, ms):
    """Every step of cid takes `ms` (steps.csv), runs.csv's statistics to match."""
    edit(os.path.join(folder, "steps.csv"), lambda rows: [
        dict(r, step_ms=f"{ms:.4f}", rank_step_ms=f"{ms:.4f}") if r["config_id"] == cid else r
        for r in rows])
    run = next(r for r in rows_of(os.path.join(folder, "runs.csv")) if r["config_id"] == cid)
    cells = {c: f"{ms:.4f}" for c in ("step_ms_median", "step_ms_p10", "step_ms_p90",
                                      "step_ms_mean")}
    cells["samples_per_s"] = f"{int(run['global_batch']) * 1000 / ms:.3f}"
    edit(os.path.join(folder, "runs.csv"),
         lambda rows: [dict(r, **cells) if r["config_id"] == cid else r for r in rows])


def expose(folder, cid, ms_by_unit):
    """Rank 0's all-gathers of cid: each of a unit in ms_by_unit begins when
    the unit is needed and takes that long (all exposed); every other one
    ends 0.5 ms before the unit is needed (none exposed)."""
    def fix(r):
        if r["config_id"] != cid or r["rank"] != "0" or r["collective"] != "all-gather":
            return r
        begin, ms = float(r["allreduce_begin_ms"]), ms_by_unit.get(int(r["bucket"]))
        if ms is not None:
            return dict(r, ready_ms=f"{begin:.4f}", allreduce_ms=f"{ms:.4f}")
        return dict(r, ready_ms=f"{begin + float(r['allreduce_ms']) + 0.5:.4f}")
    edit(os.path.join(folder, "buckets.csv"), lambda rows: [fix(r) for r in rows])


def gathers(folder, cid):
    """{unit: all-gathers of rank 0 of cid}."""
    return collections.Counter(int(r["bucket"]) for r in rows_of(os.path.join(folder, "buckets.csv"))
                               if r["config_id"] == cid and r["rank"] == "0"
                               and r["collective"] == "all-gather")


def peak_mib(folder, cid):
    return max(int(d["alloc_peak_bytes"]) for d in rows_of(os.path.join(folder, "devices.csv"))
               if d["config_id"] == cid) / 2 ** 20


def case_diagnosis(binary):
    """fsdp on 4 devices given 1 ms of exposure in each gather of units 2 and 3
    (forward and backward: 4 ms) in a 20 ms step: bound by units 2-3, 20 %;
    then 0.2 ms each (4 %): not bound; then units 0 and 3. Against ddp with
    10 ms steps: ddp 2.00x faster, fsdp's peak per device below ddp's by the
    difference devices.csv holds; the wait after backward, 3 ms, 15 %."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = sweep(binary, tmp, optimizers="adamw", steps=5)  # 5: the ratio's interval
        count = gathers(folder, FSDP4)
        expect(count[2] == 2 and count[3] == 2, f"{FSDP4}: gathers per unit {dict(count)}, "
               "expected forward and backward")
        set_steps(folder, FSDP4, 20.0)
        set_steps(folder, DDP4, 10.0)
        set_cells(os.path.join(folder, "phases.csv"),
                  {"config_id": FSDP4, "device": "0", "phase": "allreduce_exposed"},
                  {"median_ms": "3.0000"})
        wait = (" It waits 3.000 ms after backward for the reduce-scatters of the last units, "
                "15 % of the step.")
        mine, ddp = peak_mib(folder, FSDP4), peak_mib(folder, DDP4)
        for n, (units, ms, want) in enumerate([
                ({2: 1.0, 3: 1.0}, 4.0, f"- {FSDP4}: the step is bound by the exposed "
                 "all-gathers of units 2-3: 20 % of the step (4.000 ms of 20.000 ms)."),
                ({2: 0.2, 3: 0.2}, 0.8, f"- {FSDP4}: its all-gathers leave 0.800 ms exposed, "
                 "4 % of the step: not what binds it."),
                ({0: 1.5, 3: 1.5}, 6.0, f"- {FSDP4}: the step is bound by the exposed "
                 "all-gathers of units 0 and 3: 30 % of the step (6.000 ms of 20.000 ms).")]):
            expose(folder, FSDP4, units)
            md, _ = draw(folder, os.path.join(tmp, f"out{n}"))
            part = section(md, "Diagnosis").split("### Sharded strategies\n", 1)
            expect(len(part) == 2, f"the diagnosis has no sharded part:\n{md[-3000:]}")
            line = next((l for l in part[1].splitlines() if l.startswith(f"- {FSDP4}:")), "")
            expect(line.startswith(want + wait),
                   f"{FSDP4}: {line!r}, expected it to begin {want + wait!r}")
            against = (f" Against {DDP4}: ddp reaches 2.00x fsdp's throughput (95 % interval "
                       f"2.00–2.00x); fsdp holds {ddp - mine:.2f} MiB less per device at its "
                       f"peak ({mine:.2f} MiB against {ddp:.2f} MiB, "
                       f"{100 * (ddp - mine) / ddp:.0f} % saved).")
            expect(line.endswith(against), f"{FSDP4}: {line!r}, expected it to end {against!r}")
        for mode in ("zero1", "zero2"):
            expect(f"- {mode}-small-fp32-adamw-g2-b32" in part[1] and
                   f"- {mode}-small-fp32-adamw-g4-b64" in part[1],
                   f"the sharded part lacks {mode}'s configurations:\n{part[1]}")


def case_charts(binary):
    """Every chart rendered (PNG, its size) with every strategy in it: the
    scaling and efficiency lines, the phase bars with the sharded runs'
    exposed collectives named apart, memory.png's bars per device with the
    units in flight."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = sweep(binary, tmp, optimizers="adamw")
        out = os.path.join(tmp, "png")
        expect(plot.main([folder, "--out", out]) == 0, "plot.py failed")
        for name in ("scaling", "efficiency", "gpu0_imbalance", "phases", "memory"):
            path = os.path.join(out, name + ".png")
            expect(os.path.exists(path), f"{name}.png missing")
            w, h = png_size(path)
            expect(400 <= w <= 4000 and 300 <= h <= 4000, f"{name}.png is {w}x{h}")
            expect(os.path.getsize(path) > 15000, f"{name}.png is only {os.path.getsize(path)} B")
        _, texts = draw(folder, os.path.join(tmp, "out"))
        for chart in ("scaling.png", "efficiency.png"):
            text = " | ".join(texts[chart])
            for mode in MODES:
                expect(f"{mode} (weak scaling)" in texts[chart], f"{chart} lacks {mode}: {text}")
            expect("FSDP FULL_SHARD (fsdp)" in text and "DataParallel (dp) vs" not in text,
                   f"{chart}'s title: {text}")
        phases = texts["phases.png"]
        for mode in MODES:
            expect(f"{mode}\n4 GPU" in phases, f"phases.png has no bar of {mode} at 4 GPUs")
        expect("collectives_exposed (reduce-scatters)" in phases and "allreduce_exposed" in phases,
               f"phases.png's legend: {phases}")
        memory = texts["memory.png"]
        for mode in MODES:
            for d in range(4):
                expect(f"{mode}\nGPU {d}\nof 4" in memory, f"memory.png has no bar {mode} GPU {d}")
        for label in ("parameters: gathered unit parameters (in flight)",
                      "gradients: unit gradients (in flight)", "optimizer state", "communication"):
            expect(label in memory, f"memory.png's legend lacks {label!r}: {memory}")


def case_absent(_):
    """dp and ddp alone: no model-state section, no sharded part in the
    diagnosis, the scaling charts titled dp vs ddp, no collectives on phases.png."""
    with tempfile.TemporaryDirectory() as tmp:
        md, texts = draw(os.path.join(FIXTURES, "results-host"), os.path.join(tmp, "out"))
        expect(f"## {STATES}" not in md and "### Sharded strategies" not in md,
               f"summary.md of dp and ddp speaks of sharding:\n{md[:4000]}")
        for chart in ("scaling.png", "efficiency.png"):
            text = " | ".join(texts[chart])
            expect("DataParallel (dp) vs DistributedDataParallel (ddp)" in text and
                   "upper bound on DataParallel" in text, f"{chart}'s title: {text}")
        expect("collectives_exposed (reduce-scatters)" not in texts["phases.png"],
               f"phases.png names sharded collectives: {texts['phases.png']}")


def case_colours(binary):
    """memory.png keeps one colour a kind on every panel, whatever the order
    each panel stacks them in: two panels whose kinds rank the other way
    round, a unit in flight in its kind's colour, hatched."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dpstools import charts
    from dpstools.folder import Folder
    folder = Folder(os.path.join(FIXTURES, "results-host"))
    flight = "gradients: unit gradients (in flight)"
    data = {("a", "fp32"): [("x", {"parameters": 10.0, "communication": 1.0, "gradients": 3.0})],
            ("b", "fp32"): [("y", {"communication": 10.0, "parameters": 1.0, flight: 2.0,
                                   "gradients": 0.5})]}
    figs = captured(lambda: charts.plot_memory(plt, folder, "unused", data))
    seen = collections.defaultdict(set)
    for ax in figs["memory.png"].axes:
        for bars in ax.containers:
            patch = bars.patches[0]
            seen[bars.get_label()].add((tuple(patch.get_facecolor()), patch.get_hatch()))
    for label in ("parameters", "communication", "gradients"):
        expect(len(seen[label]) == 1, f"memory.png: {label} drawn as {seen[label]}")
    want = matplotlib.colors.to_rgba(charts.KIND_COLOR["gradients"])
    expect(seen[flight] == {(want, "//")} and seen["gradients"] == {(want, None)},
           f"memory.png: gradients {seen['gradients']}, in flight {seen[flight]}")


def two_panel_sweep(binary, tmp):
    """small under dp, ddp and zero2 (weak and strong), tiny under ddp and
    zero2 alone, in one folder: each chart's panels draw other strategies,
    and phases.png's tiny panel lacks dp's phases, so a colour given by a
    series' place in its panel would move."""
    out = os.path.join(tmp, "res")
    for name, text in (("small", "modes = dp, ddp, zero2\nbatch = weak, strong\nmodels = small\n"),
                       ("tiny", "modes = ddp, zero2\nmodels = tiny\n")):
        suite = os.path.join(tmp, name + ".suite")
        with open(suite, "w") as f:
            f.write(text + "gpus = 1, 2\nsteps = 2\nwarmup = 1\n")
        p = dpscale(binary, "sweep", suite, "--host-devices", "2", "--no-links",
                    "--trace-steps", "1", out=out, name="s", timeout=300)
        expect(p.returncode == 0, f"sweep {name}: exit {p.returncode}:\n{p.stdout[-3000:]}\n"
                                  f"{p.stderr}")
    return os.path.join(out, "s")


def drawn_figures(folder):
    """{chart: its matplotlib figure} of every chart plot.py draws of a folder."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dpstools import charts
    from dpstools.folder import Folder
    return captured(lambda: charts.draw(plt, Folder(folder), "unused"))


def captured(draw):
    """{chart: its matplotlib figure} of what draw() saves, kept instead of written."""
    from dpstools import charts
    figs = {}

    def keep(_plt, fig, _out, name):
        figs[name] = fig
        return name
    saved, charts.save = charts.save, keep
    try:
        draw()
    finally:
        charts.save = saved
    return figs


def colour_of(artist):
    """An artist's colour as RGBA: a line's colour, a bar's (a legend patch's) face."""
    from matplotlib.colors import to_rgba
    if hasattr(artist, "get_facecolor") and not hasattr(artist, "get_xdata"):
        return tuple(to_rgba(artist.get_facecolor()))
    return tuple(to_rgba(artist.get_color()))


def strategy_of(label):
    """The strategy a label names first ('zero2 (weak scaling)', 'dp\\n2 GPU'), or None."""
    from dpstools import charts
    m = re.match(r"[a-z0-9-]+", label)
    return m.group(0) if m and m.group(0) in charts.MODE_COLOR else None


def chart_colours(figs):
    """({strategy: {colour: [where]}}, {phase: {colour: [where]}}): every
    labelled line, bar and legend entry of the figures."""
    from dpstools import charts
    modes = collections.defaultdict(lambda: collections.defaultdict(list))
    phases = collections.defaultdict(lambda: collections.defaultdict(list))

    def note(chart, where, label, artist):
        if chart == "phases.png":  # the sharded runs' exposed wait: the same phase, hatched
            ph = "allreduce_exposed" if label == charts.EXPOSED_SHARDED else label
            phases[ph][colour_of(artist)].append(where)
        elif strategy_of(label):
            modes[strategy_of(label)][colour_of(artist)].append(where)
    for chart, fig in figs.items():
        if chart == "memory.png":  # its kinds: the `colours` case
            continue
        for i, ax in enumerate(fig.axes):
            where = f"{chart} panel {i} ({ax.get_title()})"
            for line in ax.get_lines():
                note(chart, where, line.get_label(), line)
            ticks = [t.get_text() for t in ax.get_xticklabels()]
            for k, bars in enumerate(ax.containers):
                # gpu0_imbalance.png's bars: a tick a run, its strategy first
                label = ticks[k] if chart == "gpu0_imbalance.png" else bars.get_label()
                for patch in bars.patches:
                    note(chart, where, label, patch)
            legend = ax.get_legend()
            if legend:
                handles = getattr(legend, "legend_handles", None) or legend.legendHandles
                for text, handle in zip(legend.get_texts(), handles):
                    note(chart, where + " legend", text.get_text(), handle)
    return modes, phases


def case_chart_colours(binary):
    """Each strategy has one colour (charts.MODE_COLOR's) in every chart and
    panel that draws it (scaling and efficiency lines, the imbalance bars
    and ratio lines, their legends), each phase one in every panel of
    phases.png and its legends (the sharded runs' exposed wait in
    allreduce_exposed's, hatched), read from the figures; no two strategies
    and no two phases share one."""
    from matplotlib.colors import to_rgba
    from dpstools import charts
    with tempfile.TemporaryDirectory() as tmp:
        figs = drawn_figures(two_panel_sweep(binary, tmp))
    modes, phases = chart_colours(figs)
    expect(set(modes) == {"dp", "ddp", "zero2"}, f"strategies read from the charts: {set(modes)}")
    for mode, seen in modes.items():
        expect(len(seen) == 1, f"{mode} drawn in {len(seen)} colours: "
               + "; ".join(f"{c} in {sorted(set(w))[:3]}" for c, w in seen.items()))
        expect(set(seen) == {to_rgba(charts.MODE_COLOR[mode])},
               f"{mode}: {set(seen)}, not charts.MODE_COLOR's {charts.MODE_COLOR[mode]}")
        places = {w.split(" ")[0] for w in next(iter(seen.values()))}
        expect(places >= {"scaling.png", "efficiency.png", "gpu0_imbalance.png"},
               f"{mode} found only in {sorted(places)}")
    expect({"replicate", "reduce", "backward", "allreduce_exposed"} <= set(phases),
           f"phases read from phases.png: {sorted(phases)}")
    for ph, seen in phases.items():
        expect(len(seen) == 1, f"phase {ph} drawn in {len(seen)} colours: "
               + "; ".join(f"{c} in {sorted(set(w))[:3]}" for c, w in seen.items()))
        panels = {w.split(" legend")[0] for w in next(iter(seen.values()))}
        if ph in ("forward", "backward"):
            expect(len(panels) == 2, f"phase {ph} found in {sorted(panels)}, not both panels")
    for what, seen in (("strategies", modes), ("phases", phases)):
        colours = [next(iter(s)) for s in seen.values()]
        expect(len(set(colours)) == len(colours), f"{what} sharing a colour: "
               f"{ {k: next(iter(s)) for k, s in seen.items()} }")


if __name__ == "__main__":
    run_cases(globals())
