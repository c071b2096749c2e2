"""summary.md's diagnosis: why dp (dp, dp-lean) loses to ddp, wins, or is within noise of it.

Read from a results folder's numbers: dp's phases on device 0 alone, ddp's
exposed all-reduce, what device 0 holds beyond the others."""
from collections import defaultdict

from dpstools.results import integer, number, strategy
from dpstools.speedup import NOISE, interval_text, speedup

# dp's work that device 0 does alone while the others wait, in step order
DP_SERIAL = ["replicate", "scatter", "gather", "loss", "reduce", "optimizer"]
# phases that run beside the step's critical path (ddp's all-reduce during backward)
OVERLAPPED = {"allreduce"}
NAME = {"allreduce_exposed": "exposed all-reduce"}
WHAT = {
    "replicate": "the replication of the parameters from device 0",
    "scatter": "the scatter of the batch from device 0",
    "gather": "the gather of the outputs onto device 0",
    "loss": "the loss on device 0",
    "reduce": "the reduce of the gradients onto device 0",
    "optimizer": "the optimizer step on device 0",
}


def phases_of(folder, config_id, device=0):
    """{phase: median ms} of one device of one configuration."""
    return {p["phase"]: number(p, "median_ms") for p in folder.phases
            if p["config_id"] == config_id and integer(p, "device") == device}


def pairs(folder):
    """(model, precision, optimizer, scaling, n, dp run, ddp run) at the largest
    device count (2 or more: on one device nothing waits) where both ran, for
    each model, precision, optimizer, scaling and dp variant (dp, dp-lean)."""
    runs = defaultdict(dict)
    for r in folder.runs:
        key = (r["model"], r["precision"], r["optimizer"], r["scaling"])
        runs[key][(strategy(r), r["_n"])] = r
    out = []
    for key, got in sorted(runs.items()):
        for variant in ("dp", "dp-lean"):
            both = [n for (m, n) in got if m == variant and n >= 2 and ("ddp", n) in got]
            if both:
                n = max(both)
                out.append((*key, n, got[(variant, n)], got[("ddp", n)]))
    return out


def memory_extra(folder, config_id, top=3):
    """[(what, MiB, [categories])] that device 0 holds beyond the mean of the
    other devices at their allocation peaks (memory.csv), grouped by kind
    (older folders: by category), largest first; the categories are device
    0's of that kind."""
    per = defaultdict(lambda: defaultdict(float))
    names = defaultdict(list)
    for m in folder.memory or []:
        if m["config_id"] != config_id:
            continue
        what, d = m.get("kind") or m["category"], integer(m, "device")
        per[d][what] += number(m, "bytes_at_peak")
        if d == 0:
            names[what].append(m["category"])
    others = [d for d in per if d != 0]
    if 0 not in per or not others:
        return []
    kinds = set(per[0]) | {k for d in others for k in per[d]}
    extra = [(k, (per[0][k] - sum(per[d][k] for d in others) / len(others)) / 2 ** 20, names[k])
             for k in kinds]
    return sorted([e for e in extra if e[1] > 0], key=lambda e: -e[1])[:top]


def serial_phases(folder, run):
    """[(phase, ms, % of the step)] of dp's device-0 serial phases, largest first."""
    step = number(run, "step_ms_median")
    ph = phases_of(folder, run["config_id"])
    rows = [(p, ph[p], 100 * ph[p] / step) for p in DP_SERIAL if ph.get(p, 0) > 0]
    return sorted(rows, key=lambda r: -r[1])


def gaps(folder, slow, fast):
    """[(phase, ms)] that device 0 of the slower run spends beyond the faster
    run's device 0, largest first (phases off the critical path left out)."""
    a, b = phases_of(folder, slow["config_id"]), phases_of(folder, fast["config_id"])
    return sorted(((p, a[p] - b.get(p, 0.0)) for p in a if p not in OVERLAPPED),
                  key=lambda g: -g[1]) or [("step", 0.0)]


def verdict(folder, dp, ddp, serial, exposed_ms):
    """The one sentence naming the bottleneck: the phase where the slower
    mode's device 0 spends the most time beyond the faster one's, named as
    what binds dp when it is one of dp's serial phases; where the throughput
    ratio's interval holds 1, that neither is faster."""
    s = speedup(folder.step_ms, dp, ddp)
    name = strategy(dp)
    dp_step, ddp_step = number(dp, "step_ms_median"), number(ddp, "step_ms_median")
    alone = sum(r[2] for r in serial)
    exposed = (f"ddp's exposed all-reduce: {exposed_ms:.3f} ms, "
               f"{100 * exposed_ms / ddp_step:.0f} % of its step")
    if s.faster == NOISE:
        return (f"{name} and ddp are within noise of each other: ddp's throughput is "
                f"{s.ratio:.2f}x {name}'s ({interval_text(s)}, which holds 1), so neither is "
                f"faster; {exposed}; {name}'s device 0 works alone {alone:.0f} % of its step.")
    if s.faster == "ddp":
        lead = f"ddp reaches {s.ratio:.2f}x {name}'s throughput ({interval_text(s)})"
        found, slower, longer = gaps(folder, dp, ddp), name, dp_step - ddp_step
        aside = f"device 0 works alone {alone:.0f} % of {name}'s step; {exposed}"
    else:
        back = speedup(folder.step_ms, ddp, dp)
        lead = f"{name} reaches {back.ratio:.2f}x ddp's throughput ({interval_text(back)})"
        found, slower, longer = gaps(folder, ddp, dp), "ddp", ddp_step - dp_step
        aside = f"{exposed}, while {name}'s device 0 works alone {alone:.0f} % of its step"
    phase, gap = found[0]
    if gap < 0.25 * longer:  # device 0's own phases do not explain the longer step
        explained = sum(g for _, g in found if g > 0)
        return (f"{lead}: {slower}'s step is {longer:.3f} ms longer, of which device 0's phases "
                f"account for {explained:.3f} ms (the most: its {NAME.get(phase, phase)}, "
                f"+{gap:.3f} ms); the rest is device 0 waiting for the other devices; {aside}.")
    if slower == name and phase in DP_SERIAL:
        pct = 100 * phases_of(folder, dp["config_id"])[phase] / dp_step
        return (f"{lead}: {name} is bound by {WHAT[phase]}: {pct:.0f} % of the step "
                f"({phases_of(folder, dp['config_id'])[phase]:.3f} ms of {dp_step:.3f} ms); "
                f"{aside}.")
    return (f"{lead}: {slower}'s step is {longer:.3f} ms longer, the largest part in its "
            f"{NAME.get(phase, phase)} (+{gap:.3f} ms on device 0); {aside}.")


def pair_lines(folder, pair):
    model, prec, opt, scaling, n, dp, ddp = pair
    serial = serial_phases(folder, dp)
    exposed = phases_of(folder, ddp["config_id"]).get("allreduce_exposed", 0.0)
    name = strategy(dp)
    lines = [f"### {model}, {prec}, {opt}, {scaling} scaling, {n} devices: {name} and ddp", "",
             verdict(folder, dp, ddp, serial, exposed), ""]
    if serial:
        total = sum(r[1] for r in serial)
        lines += [f"| {name} phase on device 0 alone | ms | % of {name}'s step |",
                  "| --- | --- | --- |"]
        lines += [f"| {p} | {ms:.3f} | {pct:.1f} |" for p, ms, pct in serial]
        lines += [f"| all of them | {total:.3f} | "
                  f"{100 * total / number(dp, 'step_ms_median'):.1f} |", ""]
    extra = memory_extra(folder, dp["config_id"])
    if extra:
        held = ", ".join(f"{k} ({mib:.2f} MiB" + (f": {', '.join(c)})" if c and c != [k] else ")")
                         for k, mib, c in extra)
        lines += [f"{name}'s device 0 holds more than the others' mean at its peak: {held}.", ""]
    return lines


def diagnosis(folder):
    """summary.md's "Diagnosis" section; [] when no dp/ddp pair ran."""
    found = pairs(folder)
    if not found:
        return []
    lines = ["## Diagnosis", "", "For each model and dp variant (dp as DataParallel does it; "
             "dp-lean, --dp-impl lean) at the largest device count where it and ddp both ran: "
             "dp's phases that device 0 runs while the other devices wait (from phases.csv), "
             "against ddp's all-reduce left exposed after backward, and what device 0 holds "
             "beyond the others (from memory.csv). One mode is said to reach more throughput "
             "than the other only where the ratio's 95 % interval (from steps.csv's step "
             "times) excludes 1.", ""]
    for pair in found:
        lines += pair_lines(folder, pair)
    return lines
