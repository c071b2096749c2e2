"""summary.md's diagnosis: why dp (dp, dp-lean) loses to ddp, wins, or is within noise of it.

Read from a results folder's numbers: dp's phases on device 0 alone, ddp's
exposed all-reduce, what device 0 holds beyond the others; with gradient
accumulation (accum N > 1), ddp's all-reduces per optimizer step, what
no_sync saved, and dp's replicate and reduce run once per micro-step; and of
the sharded strategies (zero1, zero2, fsdp), the units whose all-gathers
stall the compute and each against ddp: speed and memory per device."""
import math
from collections import defaultdict

from dpstools.results import integer, line, number, strategy
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
    """(model, precision, optimizer, scaling, accum, n, dp run, ddp run) at the
    largest device count (2 or more: on one device nothing waits) where both
    ran, for each model, precision, optimizer, scaling, accumulation and dp
    variant (dp, dp-lean); ddp with no_sync on (the default)."""
    runs = defaultdict(dict)
    for r in folder.runs:
        key = (r["model"], r["precision"], r["optimizer"], r["scaling"], r["_accum"])
        runs[key][(r["_line"], r["_n"])] = r
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
    model, prec, opt, scaling, n_accum, n, dp, ddp = pair
    serial = serial_phases(folder, dp)
    exposed = phases_of(folder, ddp["config_id"]).get("allreduce_exposed", 0.0)
    name = strategy(dp)
    acc = f", accum {n_accum}" if n_accum > 1 else ""
    lines = [f"### {model}, {prec}, {opt}{acc}, {scaling} scaling, {n} devices: {name} and ddp", "",
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


# ---- gradient accumulation ----------------------------------------------------

def allreduces(folder, run):
    """(all-reduces per optimizer step, buckets, micro-steps that all-reduced)
    of a ddp run from buckets.csv's rows of rank 0 (a row per micro-step and
    bucket all-reduced), or None where buckets.csv has none of it."""
    rows = [b for b in folder.buckets or [] if b["config_id"] == run["config_id"]
            and b["rank"] == "0"]
    if not rows:
        return None
    return len(rows), len({b["bucket"] for b in rows}), len({b["micro_step"] for b in rows})


def allreduce_text(folder, run):
    """How many all-reduces a ddp run with accum N did per optimizer step, and
    what its --no-sync says it should (nbuckets with no_sync, N x nbuckets
    without)."""
    n_accum, off = run["_accum"], run["_line"].endswith("-syncall")
    how = (f"every micro-step all-reduces (--no-sync off): {n_accum} x the buckets" if off else
           "micro-steps 1 to N-1 under no_sync, the last all-reduces: once the buckets")
    found = allreduces(folder, run)
    if found is None:
        return (f"{run['config_id']}: {how} per optimizer step (buckets.csv has no rows of it: "
                f"it records the traced steps, --trace-steps)")
    count, nb, micro = found
    want = n_accum * nb if off else nb
    check = "as expected" if count == want else f"expected {want}: check the run"
    return (f"{run['config_id']}: {plural(count, 'all-reduce')} per optimizer step "
            f"({plural(nb, 'bucket')} in {plural(micro, 'micro-step')} of {n_accum}; {how}, "
            f"{check})")


def plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def twin(folder, run, **change):
    """The configuration that differs from run only where change says (its
    _line or _accum), same model, precision, optimizer, scaling, devices and
    global batch; or None."""
    same = ("model", "precision", "optimizer", "scaling", "_n", "global_batch")
    want = {k: run[k] for k in same + ("_line", "_accum")} | change
    return next((r for r in folder.runs if all(r[k] == v for k, v in want.items())), None)


def no_sync_text(folder, run):
    """What no_sync saved: a ddp run's step time against its twin with
    --no-sync off, with the throughput ratio's interval; None without one."""
    off = twin(folder, run, _line=run["_line"] + "-syncall")
    if off is None:
        return None
    on_ms, off_ms = number(run, "step_ms_median"), number(off, "step_ms_median")
    s = speedup(folder.step_ms, off, run, line)
    verdict = (f"{run['_line']} reaches {s.ratio:.2f}x {off['_line']}'s throughput "
               f"({interval_text(s)}" + (", which holds 1: within noise)" if s.faster == NOISE
                                         else ")"))
    return (f"no_sync saved {off_ms - on_ms:.3f} ms a step ({run['config_id']} {on_ms:.3f} ms, "
            f"{off['config_id']} with every micro-step all-reduced {off_ms:.3f} ms, "
            f"{100 * (off_ms - on_ms) / off_ms:.0f} % of its step): {verdict}")


def dp_accum_text(folder, run):
    """dp with accum N: DataParallel's replicate and reduce once per
    micro-step, their time per optimizer step against accum 1's."""
    ph = phases_of(folder, run["config_id"])
    moved = ph.get("replicate", 0.0) + ph.get("reduce", 0.0)
    step = number(run, "step_ms_median")
    text = (f"{run['config_id']}: DataParallel's replicate and reduce ran {run['_accum']} times "
            f"per optimizer step (its forward replicates the module and its backward reduces "
            f"the gradients onto device 0 in every micro-step): {moved:.3f} ms a step on "
            f"device 0, {100 * moved / step:.0f} % of its step")
    base = twin(folder, run, _accum=1)
    if base is None:
        return text
    ph1 = phases_of(folder, base["config_id"])
    moved1 = ph1.get("replicate", 0.0) + ph1.get("reduce", 0.0)
    ratio = f", {moved / moved1:.2f}x" if moved1 > 0 else ""
    return text + f", against {moved1:.3f} ms at accum 1 ({base['config_id']}{ratio})"


def accum_lines(folder):
    """The diagnosis' "Gradient accumulation" part: each configuration on 2
    or more devices with accum N > 1; [] when none."""
    runs = sorted((r for r in folder.runs if r["_accum"] > 1 and r["_n"] >= 2),
                  key=lambda r: r["config_id"])
    found = []
    for r in runs:
        if r["mode"] == "ddp":
            found.append(allreduce_text(folder, r))
            saved = None if r["_line"].endswith("-syncall") else no_sync_text(folder, r)
            found += [saved] if saved else []
        else:
            found.append(dp_accum_text(folder, r))
    if not found:
        return []
    return ["### Gradient accumulation", "", "With --accum N each optimizer step runs N "
            "micro-batches of batch/N: ddp all-reduces once per step under no_sync (--no-sync "
            "on) or in every micro-step (off, the -syncall configurations; buckets.csv has a "
            "row per rank, micro-step and bucket all-reduced), while DataParallel replicates "
            "and reduces in every micro-step (phases.csv, device 0).", ""] + \
        [f"- {t}." for t in found] + [""]


# ---- sharded strategies ---------------------------------------------------------

SHARDED = ("zero1", "zero2", "fsdp")
BOUND_PCT = 10.0  # exposed all-gathers that take this share of the step or more bind it
UNIT_PCT = 1.0    # a unit is named where its gathers leave this share of the step exposed


def gather_exposure(folder, run):
    """({unit: exposed ms a step}, whether ready_ms equals every gather's
    begin) of a run's all-gathers from rank 0's buckets.csv rows: each
    gather's max(0, begin + duration - ready), ready being when the compute
    stream needed the unit, summed per unit over its gathers and
    micro-steps; None where buckets.csv has no gather of it."""
    rows = [b for b in folder.buckets or [] if b["config_id"] == run["config_id"]
            and b["rank"] == "0" and b.get("collective") == "all-gather"
            and b["allreduce_begin_ms"] and b["allreduce_ms"]]
    if not rows:
        return None
    out = defaultdict(float)
    for b in rows:
        begin, ready = number(b, "allreduce_begin_ms"), number(b, "ready_ms")
        out[integer(b, "bucket")] += max(0.0, begin + number(b, "allreduce_ms") - ready)
    return dict(out), all(b["ready_ms"] == b["allreduce_begin_ms"] for b in rows)


def unit_ranges(units):
    """'units 3-5', 'unit 2', 'units 0-1 and 4' of sorted unit numbers."""
    spans = []
    for u in units:
        if spans and u == spans[-1][1] + 1:
            spans[-1][1] = u
        else:
            spans.append([u, u])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in spans]
    joined = text[0] if len(text) == 1 else ", ".join(text[:-1]) + " and " + text[-1]
    return ("unit " if len(units) == 1 else "units ") + joined


def exposure_text(folder, run, per):
    """The sentence on a sharded run's exposed all-gathers (per: {unit: ms}
    of gather_exposure, or None): their share of the median step, bound at
    BOUND_PCT (whole percents, as shown), naming the units of UNIT_PCT or more."""
    cid, step = run["config_id"], number(run, "step_ms_median")
    if per is None:
        return (f"{cid}: buckets.csv has no all-gather of it (it records the traced steps, "
                f"--trace-steps)")
    total = sum(per.values())
    pct = round(100 * total / step) if step else 0
    if pct < BOUND_PCT:
        return f"{cid}: its all-gathers leave {total:.3f} ms exposed, {pct:.0f} % of the step: " \
            "not what binds it"
    named = sorted(u for u, ms in per.items() if 100 * ms / step >= UNIT_PCT) or \
        sorted(u for u, ms in per.items() if ms > 0)
    rest = total - sum(per[u] for u in named)
    others = f"; the other units' under {UNIT_PCT:.0f} % each" if rest > 0 else ""
    return (f"{cid}: the step is bound by the exposed all-gathers of {unit_ranges(named)}: "
            f"{pct:.0f} % of the step ({total:.3f} ms of {step:.3f} ms{others})")


def wait_text(folder, run):
    """The wait after backward (phases.csv's allreduce_exposed on device 0):
    for the buckets' all-reduce (zero1) or the last units' reduce-scatters."""
    ms = phases_of(folder, run["config_id"]).get("allreduce_exposed", 0.0)
    step = number(run, "step_ms_median")
    what = "all-reduce" if run["mode"] == "zero1" else "reduce-scatters of the last units"
    return (f"It waits {ms:.3f} ms after backward for the {what}, "
            f"{100 * ms / step if step else 0.0:.0f} % of the step")


def peak_bytes(folder, config_id):
    """The largest allocation peak over a configuration's devices (devices.csv)."""
    return max((number(d, "alloc_peak_bytes") for d in folder.devices
                if d["config_id"] == config_id), default=0.0)


def versus_ddp_text(folder, run):
    """A sharded run against ddp on the same model, devices and batch: which
    is faster (the ratio's interval) and the allocation peak per device each
    holds; None without such a ddp run."""
    ddp = twin(folder, run, _line="ddp-lean" if "-lean" in run["_line"] else "ddp")
    if ddp is None:
        return None
    name, s = strategy(run), speedup(folder.step_ms, ddp, run)
    if s.faster == NOISE:
        holds = "" if math.isinf(s.hi) else ", which holds 1"
        pace = (f"{name} and {ddp['_line']} are within noise of each other ({name}'s throughput "
                f"{s.ratio:.2f}x {ddp['_line']}'s, {interval_text(s)}{holds})")
    elif s.faster == name:
        pace = f"{name} reaches {s.ratio:.2f}x {ddp['_line']}'s throughput ({interval_text(s)})"
    else:
        back = speedup(folder.step_ms, run, ddp)
        pace = f"{ddp['_line']} reaches {back.ratio:.2f}x {name}'s throughput ({interval_text(back)})"
    mine, theirs = peak_bytes(folder, run["config_id"]), peak_bytes(folder, ddp["config_id"])
    if not theirs:
        return f"Against {ddp['config_id']}: {pace}"
    saved = theirs - mine
    held = (f"holds {saved / 2 ** 20:.2f} MiB less per device at its peak ({mine / 2 ** 20:.2f} "
            f"MiB against {theirs / 2 ** 20:.2f} MiB, {100 * saved / theirs:.0f} % saved)"
            if saved >= 0 else
            f"holds {-saved / 2 ** 20:.2f} MiB more per device at its peak ({mine / 2 ** 20:.2f} "
            f"MiB against {theirs / 2 ** 20:.2f} MiB)")
    return f"Against {ddp['config_id']}: {pace}; {name} {held}"


def sharded_lines(folder):
    """The diagnosis' "Sharded strategies" part: each zero1, zero2 and fsdp
    configuration on 2 or more devices; [] when none ran."""
    runs = sorted((r for r in folder.runs if r["mode"] in SHARDED and r["_n"] >= 2),
                  key=lambda r: (r["model"], r["_n"], SHARDED.index(r["mode"]), r["config_id"]))
    if not runs:
        return []
    lines = ["### Sharded strategies", "", "For each zero1, zero2 and fsdp configuration on 2 or "
             "more devices: the time its all-gathers keep the compute waiting (rank 0's "
             "buckets.csv: each gather's begin + duration - ready, ready being when the compute "
             "stream needed the unit, at least 0, summed per unit over the traced steps' "
             f"medians), said to bind the step where it makes {BOUND_PCT:.0f} % of the median step or "
             f"more, naming the units whose gathers make {UNIT_PCT:.0f} % of it or more; "
             "the wait after backward (phases.csv's allreduce_exposed on device 0: zero1's "
             "all-reduce, zero2's and fsdp's last reduce-scatters); "
             "then the configuration against ddp on the same model, devices and batch (the "
             "throughput ratio's 95 % interval from steps.csv) and the allocation peak per "
             "device (devices.csv, the largest device's).", ""]
    found = {r["config_id"]: gather_exposure(folder, r) for r in runs}
    if any(f and f[1] for f in found.values()):
        lines += ["In this folder ready_ms equals the gathers' begin (buckets.csv written before "
                  "dpscale timed when the compute needed each unit), so every gather counts as "
                  "exposed: the shares below are upper bounds.", ""]
    for r in runs:
        f = found[r["config_id"]]
        against = versus_ddp_text(folder, r)
        lines.append(f"- {exposure_text(folder, r, f and f[0])}. {wait_text(folder, r)}." +
                     (f" {against}." if against else ""))
    return lines + [""]


def diagnosis(folder):
    """summary.md's "Diagnosis" section; [] when no dp/ddp pair, no
    configuration with accumulation and no sharded one on 2 or more devices ran."""
    found, accum, sharded = pairs(folder), accum_lines(folder), sharded_lines(folder)
    if not found and not accum and not sharded:
        return []
    lines = ["## Diagnosis", ""]
    if found:
        lines += ["For each model and dp variant (dp as DataParallel does it; dp-lean, "
                  "--dp-impl lean) at the largest device count where it and ddp both ran: dp's "
                  "phases that device 0 runs while the other devices wait (from phases.csv), "
                  "against ddp's all-reduce left exposed after backward, and what device 0 "
                  "holds beyond the others (from memory.csv). One mode is said to reach more "
                  "throughput than the other only where the ratio's 95 % interval (from "
                  "steps.csv's step times) excludes 1.", ""]
    for pair in found:
        lines += pair_lines(folder, pair)
    return lines + accum + sharded
