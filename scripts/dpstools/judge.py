"""Two dpscale results judged against each other: per configuration and metric, a status.

The two sides (Results: a results folder, or a folder of several runs of
one suite), their per-step samples, and the judgement of each metric:
paired rounds (the shift's interval, stats.paired_shift) where both sides
are folders of the same rounds, otherwise medians, noise and the U test
against a threshold widened by the baseline's drift; memory by a static
rule. Then the verdict of the whole comparison. compare.py's work, and the
gate's through it (report writes what this decides). Standard library only.
"""
import math
import os

from dpstools import stats
from dpstools.results import (InputError, by_config, integer, number, read_folder, read_meta,
                              versions)
from dpstools.stats import HIGHER, LOWER, mann_whitney, median, noise

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
                "device count": len(devs), "driver": driver_of(self.meta)}

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


def driver_of(meta):
    """A meta.json's CUDA driver, 'none' where there is none however it was
    recorded: a build without CUDA writes '', one with CUDA on a machine
    without a driver 'none'."""
    return versions(meta)["driver"] or "none"


def slowest_ranks(rows):
    """[(step_ms, allreduce_ms)] per step in step order, each its slowest
    rank's, of one configuration's steps.csv rows (results.StepRows; an
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

    def ok_parts(self, cid):
        """The runs (RunFolder) that ran a configuration ok."""
        return [p for p in self.parts if cid in p.runs and p.runs[cid]["status"] == "ok"]

    def samples(self, cid, metric):
        return [x for p in self.ok_parts(cid) for x in p.samples(cid, metric)]

    def drift(self, cid, metric):
        """Relative spread of the per-run medians (0 with one run)."""
        meds = [median(v) for v in (p.samples(cid, metric) for p in self.ok_parts(cid)) if v]
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
    s = stats.paired_shift(b_rounds, h_rounds, direction, confidence)
    p = stats.rounds_u_test(b_rounds, h_rounds)
    status = stats.decide(s, opts.threshold, p, opts.alpha / family)
    est, lo, hi = raw_interval(s, direction)
    b_all = [x for r in b_rounds for x in r]
    h_all = [x for r in h_rounds for x in r]
    row = {"base": median(b_all), "new": median(h_all), "delta_pct": est, "lo_pct": lo,
           "hi_pct": hi, "p": p, "noise": max(noise(b_all), noise(h_all)),
           "threshold": opts.threshold, "rounds": s.rounds, "confidence": confidence,
           "status": status}
    if status == stats.NOISY:
        need = stats.rounds_needed(s, opts.threshold, confidence)
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
    for cid in sorted(set(base.runs) & set(cur.runs)):  # one name, another model
        was, now = base.runs[cid].get("params"), cur.runs[cid].get("params")
        if was and now and was != now:
            why.append(f"{cid} has {was} parameters in the baseline and {now} now: another "
                       f"model under the same name (resnet50, gpt2 and bert-large were MLPs "
                       f"before they were model files: their MLPs are the -mlp presets)")
            break
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
