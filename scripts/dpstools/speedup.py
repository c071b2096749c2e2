"""Whether one configuration's throughput beats another's, with its interval.

For summary.md (its At a glance table, diagnose's verdicts): the ratio of
their samples/s with a 95 % interval from steps.csv's per-step times, and
the rule for saying "faster": more than one device and an interval that
excludes 1."""
import math
from collections import namedtuple

from dpstools import stats
from dpstools.results import integer, number, strategy

CONFIDENCE = 0.95
ONE_DEVICE, NOISE = "one device", "within noise"
# ratio: b's samples/s over a's; lo, hi: its interval (0, inf when unknown);
# steps: how many step times each side had; faster: a's or b's name, ONE_DEVICE or NOISE
Speedup = namedtuple("Speedup", "ratio lo hi steps faster")
SAME_STEP = ("At one device dp and ddp run the same step (one replica: no scatter, no "
             "replicate, no collective), so a difference there is noise, not a result: no mode "
             "is named faster or best.")


def step_times(steps):
    """{config_id: [step_ms, one per step]} of steps.csv (results.Steps,
    or None) from rank 0's rows: a step's time is its slowest rank's,
    written on every rank's row."""
    out = {}
    for cid, rows in (steps.of.items() if steps else ()):
        times = [t for rank, t in zip(rows.rank, rows.values["step_ms"]) if rank == 0]
        if times:
            out[cid] = times
    return out


def speedup(times, a, b, name=strategy):
    """b's throughput over a's (runs.csv rows of ok configurations), its
    interval (the two-sample Hodges-Lehmann interval of a's step times over
    b's, scaled by the ratio of their global batches) and which is faster,
    by name(row) (default: its strategy)."""
    ratio = number(b, "samples_per_s") / number(a, "samples_per_s")
    ta, tb = times.get(a["config_id"], []), times.get(b["config_id"], [])
    _, lo, hi = stats.two_sample_log_interval(ta, tb, CONFIDENCE) if ta and tb \
        else (0.0, -math.inf, math.inf)
    batch = math.log(integer(b, "global_batch") / integer(a, "global_batch"))
    lo, hi = math.exp(lo + batch), math.exp(hi + batch)
    if min(integer(a, "ngpus"), integer(b, "ngpus")) < 2:
        faster = ONE_DEVICE
    elif lo > 1:
        faster = name(b)
    elif hi < 1:
        faster = name(a)
    else:
        faster = NOISE
    return Speedup(ratio, lo, hi, (len(ta), len(tb)), faster)


def interval_text(s):
    """'95 % interval 1.31–1.72x', or why there is none."""
    if math.isinf(s.hi):
        return ("no interval: too few steps" if min(s.steps) else
                "no interval: steps.csv lacks their steps")
    return f"{100 * CONFIDENCE:.0f} % interval {s.lo:.2f}–{s.hi:.2f}x"

