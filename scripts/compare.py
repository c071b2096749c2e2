#!/usr/bin/env python3
"""Compares two dpscale results and says which differences are regressions
and which are noise.

BASELINE and CURRENT are results folders (or their runs.csv / steps.csv);
BASELINE may also be a folder of several runs of the same suite, whose
run-to-run drift then widens the threshold.
Per configuration (matched by config_id) and metric: medians of the raw
per-step samples, noise = IQR / median, an exact two-sided Mann-Whitney U
test (normal approximation with tie correction for large samples), the
ratio new / base. Memory (nearly deterministic) uses a static rule instead.
The report's first line gives the verdict: REGRESSION, INCONCLUSIVE (a
step time undecided: paired rounds' WARN or NOISY, or else NOISY) or PASS.
Exit status: 0 pass, warn or inconclusive, 1 regression, 2 bad input (the
gate, regress.py, exits 3 for inconclusive). Standard library only;
matplotlib for --plot, from /usr/bin/python3 (this script runs itself again
under it when the Python running it has none).
"""
import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
from xml.sax.saxutils import escape, quoteattr

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from dpsresults import (InputError, by_config, integer, number, read_folder,  # noqa: E402
                        read_meta, versions)
import shift  # noqa: E402

LOWER, HIGHER = "lower", "higher"
METRICS = [("step_ms", LOWER), ("samples_per_s", HIGHER), ("busbw_gbps", HIGHER)]
# The harness's own allocation peak: a device's whole used memory (context,
# libraries' workspaces, other processes) is reported but not judged.
MEMORY = ["alloc_peak_bytes"]
RUNS_COLS = ["config_id", "status", "mode", "ngpus", "global_batch", "params", "backend",
             "precision", "steps_done"]
STEPS_COLS = ["config_id", "step", "rank", "step_ms", "allreduce_ms"]
DEVICES_COLS = ["config_id", "device", "alloc_peak_bytes", "device_peak_bytes"]
MEM_REL, MEM_ABS = 0.02, 64 << 20
NOISY = 0.10
# Debian's Python, which has python3-matplotlib (scripts/setup.sh installs it).
PLOT_PYTHON = "/usr/bin/python3"
# Set when compare.py has run itself again under PLOT_PYTHON, so it does not loop.
REEXEC_ENV = "DPSCALE_COMPARE_REEXEC"


# ---- statistics -------------------------------------------------------------

def median(xs):
    s = sorted(xs)
    n = len(s)
    return (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])) if n else float("nan")


def quantile(xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def noise(xs):
    m = median(xs)
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / abs(m) if xs and m else float("nan")


def ranks(values):
    """Mid-ranks (1-based) of values, and the tie groups' sizes."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1.0
        ties.append(j - i + 1)
        i = j + 1
    return r, ties


def mann_whitney(a, b, exact_limit=20):
    """Two-sided Mann-Whitney U test: (U of a, p). Exact distribution by
    enumeration (dynamic programming over rank sums) when both samples are
    small and untied; otherwise the normal approximation with tie
    correction and continuity correction."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    r, ties = ranks(list(a) + list(b))
    r1 = sum(r[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2.0
    u = min(u1, n1 * n2 - u1)
    if n1 <= exact_limit and n2 <= exact_limit and all(t == 1 for t in ties):
        # count[k] = number of ways n1 of the n1+n2 ranks give U = k
        counts = exact_u_counts(n1, n2)
        total = sum(counts)
        p = 2.0 * sum(counts[: int(u) + 1]) / total
        return u1, min(1.0, p)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    tie_term = sum(t ** 3 - t for t in ties) / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term)
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return u1, min(1.0, p)


def exact_u_counts(n1, n2):
    """Number of arrangements giving each U value, by the recurrence
    f(n1, n2, u) = f(n1 - 1, n2, u - n2) + f(n1, n2 - 1, u)."""
    table = {}

    def f(i, j):
        if (i, j) in table:
            return table[(i, j)]
        if i == 0 or j == 0:
            res = [1]
        else:
            a = f(i - 1, j)
            b = f(i, j - 1)
            res = [0] * (i * j + 1)
            for u, c in enumerate(b):
                res[u] += c
            for u, c in enumerate(a):
                res[u + j] += c
        table[(i, j)] = res
        return res

    return f(n1, n2)


# ---- input ------------------------------------------------------------------

class RunFolder:
    """One results folder: its runs, raw per-step samples and memory."""

    def __init__(self, folder):
        self.folder = folder
        files = read_folder(folder, {"runs.csv": RUNS_COLS, "steps.csv": STEPS_COLS,
                                     "devices.csv": DEVICES_COLS})
        runs = files["runs.csv"]
        if not runs:
            raise InputError(f"{runs.path}: no configuration rows")
        self.runs = {r["config_id"]: r for r in runs}
        self.steps = files["steps.csv"].of
        self.devices = by_config(files["devices.csv"])
        self.meta = read_meta(folder, missing_ok=True)
        self.cache = {}

    def machine(self):
        """What must be equal for two folders to be comparable."""
        devs = self.meta.get("devices") or []
        first = next(iter(self.runs.values()))
        return {"backend": self.meta.get("backend", first["backend"]),
                "device": devs[0].get("name", "") if devs else "",
                "device count": len(devs), "driver": versions(self.meta)["driver"]}

    def samples(self, cid, metric):
        """Per-step samples of a metric (one per step: the slowest rank's),
        read once: pooling, drift and paired rounds all ask for them."""
        key = (cid, metric)
        if key not in self.cache:
            self.cache[key] = self.read_samples(cid, metric)
        return self.cache[key]

    def read_samples(self, cid, metric):
        run = self.runs[cid]
        vals = slowest_ranks(self.steps.get(cid))
        if metric == "step_ms":
            return [v[0] for v in vals]
        if metric == "samples_per_s":
            batch = number(run, "global_batch")
            return [batch / (v[0] * 1e-3) for v in vals if v[0] > 0]
        n = integer(run, "ngpus")
        if run["mode"] != "ddp" or n < 2:
            return []
        nbytes = number(run, "params") * 4
        return [nbytes / (v[1] * 1e-3) / 1e9 * 2 * (n - 1) / n for v in vals if v[1] > 0]

    def memory(self, cid, col):
        return {integer(d, "device"): number(d, col)
                for d in self.devices.get(cid, [])}


def slowest_ranks(rows):
    """[(step_ms, allreduce_ms)] per step in step order, each its slowest
    rank's, of one configuration's steps.csv rows (dpsresults.StepRows; an
    empty allreduce_ms counts as 0)."""
    by_step = {}
    if rows:
        values = rows.values
        for step, t, ar in zip(rows.step, values["step_ms"], values["allreduce_ms"]):
            ar = 0.0 if math.isnan(ar) else ar
            prev = by_step.get(step, (0.0, 0.0))
            by_step[step] = (max(prev[0], t), max(prev[1], ar))
    return [by_step[k] for k in sorted(by_step)]


# The files that stand for their folder on the command line.
RESULTS_FILES = ("runs.csv", "steps.csv", "devices.csv", "phases.csv")


class Results:
    """One side of the comparison: a results folder, or a folder of several
    (a baseline recorded more than once). Samples of several runs are
    pooled, and the spread of their medians measures how much the machine
    drifts from run to run, which the samples of one run cannot show."""

    def __init__(self, arg):
        if not os.path.exists(arg):
            raise InputError(f"{arg}: no such folder or file")
        if not os.path.isdir(arg) and os.path.basename(arg) not in RESULTS_FILES:
            raise InputError(f"{arg}: not a results folder (nor one of its "
                             f"{', '.join(RESULTS_FILES)})")
        folder = arg if os.path.isdir(arg) else os.path.dirname(os.path.abspath(arg))
        self.folder = folder
        self.pooled = not os.path.exists(os.path.join(folder, "runs.csv"))  # a folder of runs
        if not self.pooled:
            self.parts = [RunFolder(folder)]
        else:
            subs = sorted(d for d in os.listdir(folder)  # run folders, not the `latest` link
                          if not os.path.islink(os.path.join(folder, d))
                          and os.path.exists(os.path.join(folder, d, "runs.csv")))
            if not subs:
                raise InputError(f"{folder}/runs.csv: no such file (nor any run folder inside)")
            self.parts = [RunFolder(os.path.join(folder, d)) for d in subs]
        self.newest = self.parts[-1]
        self.runs = {}
        for part in self.parts:
            self.runs.update(part.runs)
        self.meta = self.newest.meta

    def machine(self):
        return self.newest.machine()

    def _ok(self, cid):
        return [p for p in self.parts if cid in p.runs and p.runs[cid]["status"] == "ok"]

    def samples(self, cid, metric):
        return [x for p in self._ok(cid) for x in p.samples(cid, metric)]

    def drift(self, cid, metric):
        """Relative spread of the per-run medians (0 with one run)."""
        meds = [median(v) for v in (p.samples(cid, metric) for p in self._ok(cid)) if v]
        if len(meds) < 2:
            return 0.0
        return (max(meds) - min(meds)) / median(meds)

    def memory(self, cid, col):
        return self.newest.memory(cid, col)

    def round_names(self):
        return [os.path.basename(p.folder) for p in self.parts] if self.pooled else []


def rounds_of(base, cur, cid, metric):
    """(base, head) samples of each round both ran (paired folders of runs)."""
    pairs = []
    for bp, cp in zip(base.parts, cur.parts):
        ok = all(cid in p.runs and p.runs[cid]["status"] == "ok" for p in (bp, cp))
        b, h = (bp.samples(cid, metric), cp.samples(cid, metric)) if ok else ([], [])
        if b and h:
            pairs.append((b, h))
    return [b for b, _ in pairs], [h for _, h in pairs]


# ---- judgement --------------------------------------------------------------

def judge_timing(base, new, direction, alpha, fail_above, drift=0.0):
    mb, mn = median(base), median(new)
    nz = max(noise(base), noise(new))
    _, p = mann_whitney(base, new)
    worse = mn / mb if direction == LOWER else mb / mn
    thresh = max(0.05, 2.0 * nz, drift)
    if p < alpha and worse > 1.0 + thresh and worse > 1.0 + fail_above:
        status = "REGRESSION"
    elif nz > NOISY and not (mb == mn and p >= 0.999):  # identical samples are SAME
        status = "NOISY"
    elif p < alpha and worse > 1.0:
        status = "WARN"
    elif p < alpha and worse < 1.0 - thresh:
        status = "IMPROVED"
    else:
        status = "SAME"
    return {"base": mb, "new": mn, "delta_pct": (mn / mb - 1.0) * 100.0, "p": p, "noise": nz,
            "threshold": thresh, "status": status}


def raw_interval(s, direction):
    """The shift as the metric's own change: (estimate, lo, hi) in %."""
    if direction == LOWER:
        return 100 * s.estimate, 100 * s.lo, 100 * s.hi
    inv = (lambda x: 100 * (1.0 / (1.0 + x) - 1.0) if x > -1 else math.inf)
    return inv(s.estimate), inv(s.hi), inv(s.lo)


# Metrics whose rows are separate evidence: samples/s is the batch over the
# step time, the same measurement as step_ms, so it widens no interval.
FAMILY_METRICS = ("step_ms", "busbw_gbps")


def paired_family(base, cur):
    """How many rows paired rounds decide together: each a chance of a false
    REGRESSION, so each interval is drawn at the report's --confidence
    divided among them (Bonferroni), and identical code is flagged in at
    most 1 - confidence of reports, not of rows."""
    n = 0
    for cid in set(base.runs) & set(cur.runs):
        if all(side.runs[cid]["status"] == "ok" for side in (base, cur)):
            n += sum(bool(rounds_of(base, cur, cid, m)[0]) for m in FAMILY_METRICS)
    return max(n, 1)


def judge_paired(b_rounds, h_rounds, direction, opts, family=1):
    """The shift of paired rounds, its interval (at the confidence left to
    one of `family` rows), and the decision on it."""
    confidence = 1.0 - (1.0 - opts.confidence) / family
    s = shift.paired_shift(b_rounds, h_rounds, direction, confidence)
    p = shift.rounds_u_test(b_rounds, h_rounds)
    status = shift.decide(s, opts.threshold, p, opts.alpha / family)
    est, lo, hi = raw_interval(s, direction)
    b_all = [x for r in b_rounds for x in r]
    h_all = [x for r in h_rounds for x in r]
    row = {"base": median(b_all), "new": median(h_all), "delta_pct": est, "lo_pct": lo,
           "hi_pct": hi, "p": p, "noise": max(noise(b_all), noise(h_all)),
           "threshold": opts.threshold, "rounds": s.rounds, "confidence": confidence,
           "status": status}
    if status == shift.NOISY:
        need = shift.rounds_needed(s, opts.threshold, confidence)
        row["rounds_needed"] = need
        row["detail"] = (f"needs about {need} rounds to decide" if need <= 1000 else
                         "at the threshold: more rounds will not decide it")
    return row


def judge_memory(base, new):
    delta = new - base
    if delta > MEM_REL * base or delta > MEM_ABS:
        status = "REGRESSION"
    elif -delta > MEM_REL * base:
        status = "IMPROVED"
    else:
        status = "SAME"
    return {"base": base, "new": new, "delta_pct": (new / base - 1.0) * 100.0 if base else 0.0,
            "p": None, "noise": None, "threshold": MEM_REL, "status": status}


def compare(base, cur, opts, paired):
    rows = []
    family = paired_family(base, cur) if paired else 1

    def add(cid, metric, **kw):
        rows.append(dict(config=cid, metric=metric, **kw))

    for cid in sorted(set(base.runs) | set(cur.runs)):
        if cid not in cur.runs:
            add(cid, "configuration", base=None, new=None, delta_pct=None, p=None, noise=None,
                threshold=None, status="MISSING")
            continue
        if cid not in base.runs:
            add(cid, "configuration", base=None, new=None, delta_pct=None, p=None, noise=None,
                threshold=None, status="NEW")
            continue
        if cur.runs[cid]["status"] != "ok":
            st = "FAILED" if base.runs[cid]["status"] == "ok" else "SAME"
            add(cid, "status", base=base.runs[cid]["status"], new=cur.runs[cid]["status"],
                delta_pct=None, p=None, noise=None, threshold=None, status=st,
                detail=cur.runs[cid].get("error", ""))
            continue
        if base.runs[cid]["status"] != "ok":
            add(cid, "status", base=base.runs[cid]["status"], new="ok", delta_pct=None, p=None,
                noise=None, threshold=None, status="NEW")
            continue
        for metric, direction in METRICS:
            b, n = base.samples(cid, metric), cur.samples(cid, metric)
            if not b and not n:
                continue
            if not b or not n:
                add(cid, metric, base=median(b) if b else None, new=median(n) if n else None,
                    delta_pct=None, p=None, noise=None, threshold=None, status="MISSING")
                continue
            if paired:
                br, hr = rounds_of(base, cur, cid, metric)
                if br:
                    add(cid, metric, **judge_paired(br, hr, direction, opts, family))
                    continue
            add(cid, metric, **judge_timing(b, n, direction, opts.alpha, opts.fail_above,
                                            base.drift(cid, metric)))
        for col in MEMORY:
            mb, mn = base.memory(cid, col), cur.memory(cid, col)
            for dev in sorted(set(mb) | set(mn)):
                name = f"{col}[{dev}]"
                if dev not in mb or dev not in mn:
                    add(cid, name, base=mb.get(dev), new=mn.get(dev), delta_pct=None, p=None,
                        noise=None, threshold=None, status="MISSING")
                elif mb[dev] > 0 or mn[dev] > 0:
                    add(cid, name, **judge_memory(mb[dev], mn[dev]))
    return rows


def check_comparable(base, cur, force):
    why = []
    mb, mc = base.machine(), cur.machine()
    for k in mb:
        if mb[k] != mc[k]:
            why.append(f"{k} differs: {mb[k]!r} in the baseline, {mc[k]!r} now")
    pb = {r["precision"] for r in base.runs.values()}
    pc = {r["precision"] for r in cur.runs.values()}
    if pb != pc:
        why.append(f"precisions differ: {sorted(pb)} in the baseline, {sorted(pc)} now")
    if why and not force:
        raise InputError("refusing to compare results of different machines or setups: "
                         + "; ".join(why) + " (use --force to compare anyway)")
    return why


def recorded_by(meta):
    """'dpscale 0.1.0 (c338c34)': the version that wrote a folder's meta.json."""
    if not meta.get("dpscale_version"):
        return None
    return f"dpscale {meta['dpscale_version']} ({meta.get('git_describe', '?')})"


def version_warnings(base, cur, paired):
    """Warnings when the baseline was recorded by another dpscale than the
    current run (not for paired rounds, whose base and head differ by
    design): a change of memory is then the code's, not necessarily this
    change's."""
    if paired:
        return []
    mine = recorded_by(cur.meta)
    theirs = sorted({v for v in (recorded_by(p.meta) for p in base.parts) if v})
    if not mine or not theirs or theirs == [mine]:
        return []
    return [f"the baseline was recorded by {', '.join(theirs)}, the current run by {mine}: "
            f"differences may come from every change between them; if the baseline is stale, "
            f"record it again with the current code (scripts/regress.sh BUILD/src/dpscale "
            f"--update-baseline, bench/baselines/README.md)"]


# ---- output -----------------------------------------------------------------

ORDER = {"FAILED": 0, "REGRESSION": 1, "MISSING": 2, "WARN": 3, "NOISY": 4, "NEW": 5,
         "IMPROVED": 6, "SAME": 7}


UNDECIDED = ("WARN", "NOISY")
BAD = ("REGRESSION", "FAILED", "MISSING")


def undecided(rows, paired):
    """Configurations whose step time paired rounds have not decided yet."""
    return sum(r["metric"] == "step_ms" and r["status"] in UNDECIDED for r in rows) if paired else 0


def verdict(rows, base, paired, stopped=None):
    """(word, line) of the report's first line: REGRESSION; INCONCLUSIVE
    where a step time is not decided (paired rounds: WARN or NOISY, stopped
    says why no more rounds were run; otherwise NOISY); or PASS."""
    bad = sorted({r["config"] for r in rows if r["status"] in BAD})
    if bad:
        return "REGRESSION", f"REGRESSION in {len(bad)} configuration(s)"
    steps = [r for r in rows if r["metric"] == "step_ms"]
    n = undecided(rows, paired) if paired else sum(r["status"] == "NOISY" for r in steps)
    if not n:
        return "PASS", "PASS"
    if paired:
        why = f"undecided after {len(base.parts)} round(s)" + (f"; stopped: {stopped}"
                                                               if stopped else "")
    else:
        why = f"too noisy to judge (noise above {100 * NOISY:.0f} %)"
    return "INCONCLUSIVE", f"INCONCLUSIVE: {n} of {len(steps)} configuration(s) {why}"


def summary(rows, base, cur, warned, paired, stopped=None):
    """The JSON report: the verdict, the rows, and for a gate adding rounds,
    how many configurations are undecided (their step time WARN or NOISY)
    and the most rounds one of them asks for."""
    steps = [r for r in rows if r["metric"] == "step_ms"]
    needs = [r["rounds_needed"] for r in steps if r.get("rounds_needed")]
    word, line = verdict(rows, base, paired, stopped)
    return {"verdict": word, "verdict_line": line, "baseline": base.folder,
            "current": cur.folder, "warnings": warned,
            "paired": paired, "rounds": len(base.parts) if paired else None,
            "undecided": undecided(rows, paired),
            "rounds_needed": max(needs) if needs else None, "rows": rows}


def fmt(v, digits=4):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if abs(v) >= 1e6:
        return f"{v:.4g}"
    return f"{v:.{digits}g}"


def how(base, paired, rows):
    """One line on how the rows were judged."""
    if paired:
        r = next((r for r in rows if r.get("rounds")), None)
        return (f"Paired rounds ({len(base.parts)}): Δ is the shift of head's median over base's "
                f"with its {100 * r['confidence']:.2f} % interval (the report's confidence "
                f"shared among the rows it decides); REGRESSION when the whole interval is worse "
                f"than {100 * r['threshold']:.0f} %." if r else
                f"Paired rounds ({len(base.parts)}).")
    m = base.meta
    by = f" by {recorded_by(m)}" if recorded_by(m) else ""
    return (f"Baseline recorded {m.get('start_time', '?')} on {m.get('host', '?')}{by}; not run "
            f"beside the current one, so the machine's drift since widens the threshold.")


def delta(r):
    if r["delta_pct"] is None:
        return "-"
    if r.get("lo_pct") is None:
        return f"{r['delta_pct']:+.1f}"
    lo = "-inf" if r["lo_pct"] == -math.inf else f"{r['lo_pct']:+.1f}"
    hi = "+inf" if r["hi_pct"] == math.inf else f"{r['hi_pct']:+.1f}"
    return f"{r['delta_pct']:+.1f} [{lo}, {hi}]"


def markdown(rows, base, cur, warned, paired=False, stopped=None):
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    out = [f"## dpscale performance comparison: {verdict(rows, base, paired, stopped)[1]}", "",
           f"Baseline `{base.folder}`, current `{cur.folder}`. {how(base, paired, rows)}", "",
           ", ".join(f"{counts[k]} {k.lower()}" for k in sorted(counts, key=ORDER.get)) + ".", ""]
    out += [f"> warning: {w}" for w in warned]
    out += ["| configuration | metric | base | new | Δ % | p | noise | status |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (ORDER[r["status"]], r["config"], r["metric"])):
        d = delta(r)
        p = "-" if r["p"] is None else f"{r['p']:.2g}"
        nz = "-" if r["noise"] is None else f"{100 * r['noise']:.1f} %"
        st = f"**{r['status']}**" if r["status"] in ("REGRESSION", "FAILED") else r["status"]
        st += f" ({r['detail']})" if r.get("rounds_needed") else ""
        out.append(f"| {r['config']} | {r['metric']} | {fmt(r['base'])} | {fmt(r['new'])} | {d} "
                   f"| {p} | {nz} | {st} |")
    return "\n".join(out) + "\n"


def junit(rows):
    fails = sum(r["status"] in BAD for r in rows)
    skips = sum(r["status"] == "NOISY" for r in rows)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites><testsuite name="dpscale.compare" tests="{len(rows)}" failures="{fails}" '
           f'skipped="{skips}">']
    for r in rows:
        name = quoteattr(r["metric"])
        out.append(f'  <testcase classname={quoteattr(r["config"])} name={name}>')
        msg = (f"{r['status']}: base {fmt(r['base'])}, new {fmt(r['new'])}"
               + ("" if r["delta_pct"] is None else f" ({delta(r)} %)")
               + ("" if r["p"] is None else f", p = {r['p']:.2g}")
               + ("" if r["noise"] is None else f", noise {100 * r['noise']:.1f} %")
               + (f": {r['detail']}" if r.get("detail") else ""))
        if r["status"] in BAD:
            out.append(f'    <failure message={quoteattr(msg)}>{escape(msg)}</failure>')
        elif r["status"] == "NOISY":
            out.append(f'    <skipped message={quoteattr(msg)}/>')
        else:
            out.append(f'    <system-out>{escape(msg)}</system-out>')
        out.append("  </testcase>")
    out.append("</testsuite></testsuites>")
    return "\n".join(out) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    timing = [r for r in rows if r["metric"] == "step_ms" and r["base"] and r["new"]]
    if not timing:
        raise InputError("--plot: no configuration with step times on both sides")
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(timing) + 2), 4.5))
    xs = range(len(timing))
    ratios = [1 + r["delta_pct"] / 100 if r.get("lo_pct") is not None else r["new"] / r["base"]
              for r in timing]
    colors = {"REGRESSION": "#d62728", "WARN": "#ff7f0e", "IMPROVED": "#2ca02c",
              "NOISY": "#9467bd", "SAME": "#1f77b4"}
    for x, r, ratio in zip(xs, timing, ratios):
        band = r["threshold"]
        ax.fill_between([x - 0.35, x + 0.35], 1 - band, 1 + band, color="gray", alpha=0.2)
        ax.plot([x], [ratio], "o", color=colors.get(r["status"], "black"))
        if r.get("lo_pct") is not None and math.isfinite(r["lo_pct"]) and math.isfinite(r["hi_pct"]):
            ax.plot([x, x], [1 + r["lo_pct"] / 100, 1 + r["hi_pct"] / 100], "-",
                    color=colors.get(r["status"], "black"), linewidth=1.5)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["config"] for r in timing], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median step time, new / base (ratio)")
    ax.set_title("Step time against the baseline (grey: threshold; bars: the shift's interval)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise InputError(f"--plot {path}: cannot write: {e.strerror}; give a file in a folder "
                         f"that exists and is writable") from None
    finally:
        plt.close(fig)


def plot_python(argv):
    """--plot needs matplotlib. A Python without it (a python3 on PATH other
    than Debian's) runs the whole command again under PLOT_PYTHON when that
    one has it; else the command is refused before anything is written."""
    if importlib.util.find_spec("matplotlib"):
        return
    here = f"{sys.executable or 'this Python'} (Python {sys.version.split()[0]})"
    if not os.environ.get(REEXEC_ENV) and os.access(PLOT_PYTHON, os.X_OK) and subprocess.run(
            [PLOT_PYTHON, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        print(f"compare.py: --plot: {here} has no matplotlib; running under {PLOT_PYTHON}",
              file=sys.stderr, flush=True)
        os.execve(PLOT_PYTHON, [PLOT_PYTHON, os.path.realpath(__file__), *argv],
                  {**os.environ, REEXEC_ENV: "1"})
    raise InputError(f"--plot needs matplotlib: {here} has none, nor has "
                     f"{PLOT_PYTHON}; install it (apt-get install python3-matplotlib, or "
                     f"scripts/setup.sh) and run {PLOT_PYTHON} {os.path.realpath(__file__)} ..., "
                     f"or leave out --plot")


def option_number(least, most=math.inf, open_ends=False):
    """An argparse type: a finite number in [least, most] (open_ends: in (least, most))."""
    def parse(text):
        try:
            x = float(text)
        except ValueError:
            x = math.nan
        inside = least < x < most if open_ends else least <= x <= most
        if not (math.isfinite(x) and inside):
            ends = f"above {least:g} and below {most:g}" if open_ends else f"at least {least:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: give a finite number {ends}")
        return x
    return parse


def write_file(option, path, text, mode="w"):
    try:
        with open(path, mode) as f:
            f.write(text)
    except OSError as e:
        raise InputError(f"{option} {path}: cannot write: {e.strerror}; give a file in a "
                         f"folder that exists and is writable") from None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baseline")
    ap.add_argument("current")
    ap.add_argument("--alpha", type=option_number(0, 1, open_ends=True), default=0.01,
                    help="significance level, in (0, 1) (0.01)")
    ap.add_argument("--fail-above", type=option_number(0), default=0.10,
                    help="a regression must also be worse than this fraction (0.10)")
    ap.add_argument("--threshold", type=option_number(0, 1, open_ends=True), default=0.03,
                    help="paired rounds: a shift whose whole interval is above this fraction "
                         "is a regression (0.03)")
    ap.add_argument("--confidence", type=option_number(0, 1, open_ends=True), default=0.95,
                    help="paired rounds: the confidence of the whole report (0.95), shared "
                         "among the step-time and busbw rows (Bonferroni)")
    ap.add_argument("--markdown", help="write the Markdown table here too")
    ap.add_argument("--junit", help="write JUnit XML here")
    ap.add_argument("--json", help="write JSON here")
    ap.add_argument("--plot", help="draw base against new (PNG; needs matplotlib: run under "
                                   f"{PLOT_PYTHON} if the Python running compare.py has none)")
    ap.add_argument("--stopped", metavar="WHY",
                    help="why the rounds stopped (the gate's), for an inconclusive report's "
                         "first line")
    ap.add_argument("--warn-only", action="store_true", help="exit 0 even on a regression")
    ap.add_argument("--force", action="store_true", help="compare different machines anyway")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        if args.plot:
            plot_python(argv)
        base, cur = Results(args.baseline), Results(args.current)
        mine = os.path.realpath(cur.newest.folder)
        if base.pooled and any(os.path.realpath(p.folder) == mine for p in base.parts):
            raise InputError(f"{args.baseline}: the baseline holds the current run "
                             f"{cur.newest.folder} itself; give a baseline without it")
        warned = check_comparable(base, cur, args.force)
        paired = bool(base.round_names()) and base.round_names() == cur.round_names()
        warned += version_warnings(base, cur, paired)
        rows = compare(base, cur, args, paired)
        md = markdown(rows, base, cur, warned, paired, args.stopped)
        sys.stdout.write(md)
        if args.markdown:
            write_file("--markdown", args.markdown, md)
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            write_file("GITHUB_STEP_SUMMARY", os.environ["GITHUB_STEP_SUMMARY"], md, "a")
        if args.junit:
            write_file("--junit", args.junit, junit(rows))
        if args.json:
            write_file("--json", args.json, json.dumps(
                summary(rows, base, cur, warned, paired, args.stopped), indent=1, default=str))
        if args.plot:
            plot(rows, args.plot)
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    except ImportError as e:  # matplotlib imports, but not its parts
        print(f"compare.py: --plot: {e}: reinstall python3-matplotlib (scripts/setup.sh) and run "
              f"under {PLOT_PYTHON}", file=sys.stderr)
        return 2
    bad = any(r["status"] in BAD for r in rows)
    return 1 if bad and not args.warn_only else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
