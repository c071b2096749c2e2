"""Where a slower step lost its time: a configuration of two results, by phase and by bucket.

compare.py's breakdown beside judge's verdict. The step time's change (the
median of steps.csv's step_ms, the slowest rank's); each phase's change in
its per-rank medians (steps.csv's <phase>_ms), on the rank (dp: device)
where it changed most, sorted by that change, with its share of the step's;
the collectives of buckets.csv (when each bucket became ready, when its
collective began, how long it ran) that grew most; and the phase that lost
most. A side of several runs pools their samples. Standard library only.
"""
import math
import os

from dpstools.results import PHASES, InputError, by_config, number, read_csv, read_steps
from dpstools.stats import median

# ddp's (and the sharded strategies') collectives run under backward: their time is
# not the step's, what is left of it after backward is allreduce_exposed.
OVERLAPPED = {"allreduce"}
# A change smaller than this (ms) is the CSV's rounding (4 decimals), not a change.
EPS_MS = 0.0005
# steps.csv's phase columns: judge keeps only what it judges (its readers' peak memory
# on a 1M-row folder is bounded), so the breakdown reads these itself, when asked for.
PHASE_COLS = [p + "_ms" for p in PHASES]
BUCKET_COLS = ["config_id", "rank", "bucket", "micro_step", "ready_ms", "allreduce_begin_ms",
               "allreduce_ms", "collective", "phase"]
# buckets.csv's figures: when the bucket was ready, when its collective began, its time.
BUCKET_FIGURES = ("ready_ms", "allreduce_begin_ms", "allreduce_ms")


class Side:
    """One side of a comparison (judge.Results) as the breakdown reads it:
    its runs' steps.csv phase columns and buckets.csv (absent: None), each
    read once, when first asked for; the step times are judge's."""

    def __init__(self, results):
        self.results = results
        self.steps, self.buckets = {}, {}

    def parts(self, cid):
        return self.results.ok_parts(cid)

    def step_rows(self, part):
        if part.folder not in self.steps:
            self.steps[part.folder] = read_steps(os.path.join(part.folder, "steps.csv"),
                                                 PHASE_COLS).of
        return self.steps[part.folder]

    def bucket_rows(self, part):
        if part.folder not in self.buckets:
            path = os.path.join(part.folder, "buckets.csv")
            self.buckets[part.folder] = (by_config(read_csv(path, BUCKET_COLS))
                                         if os.path.exists(path) else None)
        return self.buckets[part.folder]

    def mode(self, cid):
        return self.results.runs[cid]["mode"]

    def phase_medians(self, cid):
        """{rank: {phase: median ms}} of the per-rank samples, pooled over the runs."""
        samples = {}
        for p in self.parts(cid):
            rows = self.step_rows(p).get(cid)
            if not rows:
                continue
            for ph in PHASES:
                for rank, x in zip(rows.rank, rows.values[ph + "_ms"]):
                    if not math.isnan(x):
                        samples.setdefault(rank, {}).setdefault(ph, []).append(x)
        return {r: {ph: median(xs) for ph, xs in by_ph.items()} for r, by_ph in samples.items()}

    def bucket_medians(self, cid):
        """{(collective, phase, bucket, micro_step): {rank: {figure: ms or None}}},
        the median over the runs; None where no run has buckets.csv."""
        files = [self.bucket_rows(p) for p in self.parts(cid)]
        if all(f is None for f in files):
            return None
        pooled = {}
        for f in files:
            for r in (f or {}).get(cid, []):
                key = (r["collective"], r["phase"], int(r["bucket"]), int(r["micro_step"] or 0))
                fig = pooled.setdefault(key, {}).setdefault(int(r["rank"]), {})
                for c in BUCKET_FIGURES:
                    x = number(r, c, allow_empty=True)
                    if x is not None:
                        fig.setdefault(c, []).append(x)
        return {k: {rank: {c: median(xs) for c, xs in fig.items()} for rank, fig in ranks.items()}
                for k, ranks in pooled.items()}


def worst(changes, slower):
    """(rank, change) of {rank: change} that moved most the step's way (the
    largest growth when the step grew, else the largest drop); lowest rank on ties."""
    pick = max if slower else min
    rank = pick(sorted(changes), key=lambda r: changes[r])
    return rank, changes[rank]


def phase_rows(base, new, ranks, step_delta):
    """Each phase that ran on either side: its change on the rank where it
    changed most, sorted by that change (the step's way first)."""
    slower = step_delta >= 0
    rows = []
    for ph in PHASES:
        if not any(base[r].get(ph, 0.0) or new[r].get(ph, 0.0) for r in ranks):
            continue
        changes = {r: new[r].get(ph, 0.0) - base[r].get(ph, 0.0) for r in ranks}
        rank, d = worst(changes, slower)
        rows.append({"phase": ph, "rank": rank, "base_ms": base[rank].get(ph, 0.0),
                     "new_ms": new[rank].get(ph, 0.0), "delta_ms": d,
                     "share_pct": 100.0 * d / step_delta if abs(step_delta) > EPS_MS else None,
                     "overlapped": ph in OVERLAPPED})
    rows.sort(key=lambda r: (r["overlapped"], -r["delta_ms"] if slower else r["delta_ms"]))
    return rows


def collective_name(key):
    """'bucket 2's all-reduce', 'unit 1's all-gather (forward)', with its micro-step past 0."""
    collective, phase, bucket, micro = key
    what = "bucket" if collective == "all-reduce" else "unit"
    default = "backward" if collective != "all-gather" else None
    return (f"{what} {bucket}'s {collective}" + (f" ({phase})" if phase != default else "")
            + (f", micro-step {micro}" if micro else ""))


def ready_name(key):
    """What became ready: a bucket (of its all-reduce), or a unit's collective."""
    return f"bucket {key[2]}" if key[0] == "all-reduce" and not key[3] else collective_name(key)


def bucket_changes(base, new):
    """[(key, figure, rank, base ms, new ms, change)]: each collective's
    figure on the rank where it grew most, of the collectives and ranks both
    sides have."""
    out = []
    for key in sorted(set(base) & set(new)):
        ranks = sorted(set(base[key]) & set(new[key]))
        for c in BUCKET_FIGURES:
            had = {r: (base[key][r][c], new[key][r][c]) for r in ranks
                   if c in base[key][r] and c in new[key][r]}
            if had:
                rank, d = worst({r: b - a for r, (a, b) in had.items()}, True)
                out.append((key, c, rank, had[rank][0], had[rank][1], d))
    return out


def bucket_line(base, new, unit):
    """The breakdown's line on the buckets (None where neither side has any)."""
    if not base and not new:
        return None
    if not base or not new:
        which, n = ("the current run", len(new)) if new else ("the baseline", len(base))
        return (f"buckets: only {which} has buckets.csv rows for this configuration ({n} "
                f"collective(s)); not compared (record both with --trace-steps)")
    keys = set(base) | set(new)
    kinds = sorted({k[0] for k in keys})
    head = f"buckets ({len(keys)} {'/'.join(kinds)}{'s' if len(keys) > 1 else ''}"
    notes = []
    if set(base) != set(new):
        notes.append(f"{len(base)} in the baseline, {len(new)} now (another --bucket-mb or "
                     f"model?): compared where both have them")
    changes = bucket_changes(base, new)
    longer = max((c for c in changes if c[1] == "allreduce_ms"), key=lambda c: c[5],
                 default=None)
    later = max((c for c in changes if c[1] == "ready_ms"), key=lambda c: c[5], default=None)
    said = []
    if longer and longer[5] > EPS_MS:
        k, _, r, a, b, d = longer
        said.append(f"{collective_name(k)} grew most: +{d:.3f} ms ({a:.3f} → {b:.3f} ms, "
                    f"{unit} {r})")
    if later and later[5] > EPS_MS:
        k, _, r, a, b, d = later
        said.append(f"{ready_name(k)} became ready +{d:.3f} ms later ({a:.3f} → "
                    f"{b:.3f} ms after backward began, {unit} {r})")
    if not said:
        said.append("no collective took longer or became ready later")
    return head + ("; " + "; ".join(notes) if notes else "") + "): " + "; ".join(said)


def breakdown(base, cur, cid):
    """The breakdown of one configuration that both sides (Side) ran ok:
    a dict of the step's change, the phases (phase_rows), the buckets' line,
    the phase that lost most, and notes on what differs between the sides."""
    unit = "device" if cur.mode(cid) == "dp" else "rank"
    sb, sn = base.results.samples(cid, "step_ms"), cur.results.samples(cid, "step_ms")
    mb, mn = median(sb), median(sn)
    out = {"config": cid, "unit": unit, "base_step_ms": mb, "new_step_ms": mn,
           "delta_ms": mn - mb, "delta_pct": 100.0 * (mn / mb - 1.0) if mb else None,
           "notes": [], "phases": [], "buckets": None, "lost": None}
    if base.mode(cid) != cur.mode(cid):
        out["notes"].append(f"modes differ: {base.mode(cid)} in the baseline, {cur.mode(cid)} "
                            f"now; their phases compared as they are")
    pb, pn = base.phase_medians(cid), cur.phase_medians(cid)
    ranks = sorted(set(pb) & set(pn))
    if set(pb) != set(pn):
        both = ", ".join(map(str, ranks)) or "none"
        out["notes"].append(f"{unit} counts differ: {len(pb)} in the baseline, {len(pn)} now; "
                            f"phases compared on the {unit}s both have ({both})")
    if ranks:
        out["phases"] = phase_rows(pb, pn, ranks, out["delta_ms"])
    out["buckets"] = bucket_line(base.bucket_medians(cid), cur.bucket_medians(cid), unit)
    lost = [r for r in out["phases"] if not r["overlapped"] and r["delta_ms"] > EPS_MS]
    if lost:
        top = max(lost, key=lambda r: r["delta_ms"])
        out["lost"] = {"phase": top["phase"], "delta_ms": top["delta_ms"], "rank": top["rank"]}
    return out


def lost_line(b):
    """'lost most in: PHASE (+X ms on rank R)', or that no phase is slower."""
    lost = b["lost"]
    if not lost:
        return "lost most in: nothing (no phase is slower)"
    why = (": a wait for the collectives, behind a slower rank or a slower collective"
           if lost["phase"] == "allreduce_exposed" else "")
    return (f"lost most in: {lost['phase']} (+{lost['delta_ms']:.3f} ms on {b['unit']} "
            f"{lost['rank']}){why}")


def fmt_share(p):
    return "-" if p is None else f"{p:.0f} %"


def markdown(breakdowns):
    """The breakdowns as a report section: a heading and table a configuration."""
    if not breakdowns:
        return ""
    out = ["", "### Where the time went", "",
           "Per configuration: the step time's median, then each phase's median on the rank "
           "(dp: device) where it changed most, by its change; % of Δ is its share of the step "
           "time's change (phases overlap across ranks, so the shares need not add to 100).", ""]
    for b in breakdowns:
        if b.get("error"):
            out += [f"#### {b['config']}", "", f"no breakdown: {b['error']}", ""]
            continue
        pct = "" if b["delta_pct"] is None else f", {b['delta_pct']:+.1f} %"
        out += [f"#### {b['config']}: step {b['base_step_ms']:.3f} → {b['new_step_ms']:.3f} ms "
                f"({b['delta_ms']:+.3f} ms{pct})", ""]
        out += [f"> note: {n}" for n in b["notes"]] + ([""] if b["notes"] else [])
        if b["phases"]:
            out += [f"| phase | base ms | new ms | Δ ms | % of Δ | {b['unit']} |",
                    "| --- | --- | --- | --- | --- | --- |"]
            for r in b["phases"]:
                name = r["phase"] + (" (overlaps backward)" if r["overlapped"] else "")
                out.append(f"| {name} | {r['base_ms']:.3f} | {r['new_ms']:.3f} | "
                           f"{r['delta_ms']:+.3f} | {fmt_share(r['share_pct'])} | {r['rank']} |")
            out.append("")
        if b["buckets"]:
            out += [b["buckets"], ""]
        out += [lost_line(b), ""]
    return "\n".join(out)


def select(rows, base, cur, which):
    """The configurations to break down: both sides ran them ok; 'slower':
    those whose step time was judged worse (REGRESSION or WARN), 'all': every
    one, 'none': none."""
    if which == "none":
        return []
    both = sorted(c for c in set(base.runs) & set(cur.runs)
                  if base.runs[c]["status"] == "ok" and cur.runs[c]["status"] == "ok")
    if which == "all":
        return both
    slower = {r["config"] for r in rows if r["metric"] == "step_ms"
              and r["status"] in ("REGRESSION", "WARN") and (r["delta_pct"] or 0) > 0}
    return [c for c in both if c in slower]


def breakdowns(rows, base, cur, which="slower"):
    """The breakdown of each configuration select picks (base, cur:
    judge.Results); a configuration whose files lack what it needs says why
    instead of failing the comparison."""
    sb, sc = Side(base), Side(cur)
    out = []
    for cid in select(rows, base, cur, which):
        try:
            out.append(breakdown(sb, sc, cid))
        except InputError as e:
            out.append({"config": cid, "error": str(e)})
    return out
