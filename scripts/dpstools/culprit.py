"""summary.md's sections that find where a step lost its time: the step's
partition per rank (partition.csv), every phase across ranks (phases.csv:
min, median, max, Megatron's minmax), each collective's waiting vs moving
beside its link (buckets.csv, links.csv), and the straggler the buckets'
ready marks point at (buckets.csv's late_ms). Standard library only.
"""
import math
from collections import defaultdict

from dpstools.folder import PHASE_ORDER, at_size, link_curves, run_label
from dpstools.results import integer, number
from dpstools.stats import median

PARTS = [("compute_ms", "compute"), ("overlap_ms", "overlap"),
         ("comm_exposed_ms", "exposed comm."), ("copies_ms", "copies"),
         ("wait_peer_ms", "waiting for a peer"), ("idle_host_ms", "host gaps")]
# A rank is a straggler when its buckets are ready later than the other ranks' in 3
# of 4 traced steps (late_p25_ms) by at least this share of the time the other ranks
# took from their step's start to those buckets (ready_step_ms), medians over its
# buckets, and by at least STRAGGLER_MIN_MS (below it, the timers' noise).
STRAGGLER_SHARE = 0.20
STRAGGLER_MIN_MS = 0.05
# busbw's factor over algbw (nccl-tests' convention), by collective, on n ranks.
BUS_FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "reduce-scatter": lambda n: (n - 1) / n,
              "all-gather": lambda n: (n - 1) / n}
PARTITION = "Where the step goes"
ACROSS = "Phases across ranks"
WAITING = "Waiting vs moving"
STRAGGLERS = "Stragglers"


def runs_by_id(folder):
    return {r["config_id"]: r for r in folder.runs}


def ms(x):
    return "–" if x is None or math.isnan(x) else f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"


def partition_lines(folder):
    """One row per configuration and rank: each part in ms and its share of the step."""
    runs = runs_by_id(folder)
    rows = [p for p in folder.partition or [] if p["config_id"] in runs]
    if not rows:
        return []
    lines = [f"## {PARTITION}", "",
             "Each rank's step (partition.csv: means over the timed steps, from the events that "
             "time the phases) in parts that sum to the step: compute with no collective "
             "beside it, compute overlapped by a collective, communication exposed after "
             "backward (it includes waiting inside a collective for the last peer: see "
             f"{WAITING}), copies, waiting for a peer (ddp: for the slowest rank to end the "
             "step; dp: a replica waiting for device 0's gather, loss and optimizer), and host "
             "gaps (the device had no phase).", "",
             "| configuration | rank | step ms | " + " | ".join(t for _, t in PARTS) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " |"]
    for p in sorted(rows, key=lambda p: (p["config_id"], integer(p, "rank"))):
        step = number(p, "step_ms")
        cells = [f"{ms(number(p, c))} ({100 * number(p, c) / step:.0f} %)" if step > 0 else
                 ms(number(p, c)) for c, _ in PARTS]
        lines.append(f"| {p['config_id']} | {p['rank']} | {ms(step)} | " + " | ".join(cells) + " |")
    return lines + [""]


def phase_spread(folder):
    """{config_id: {phase: (min, median, max, the slowest device)}} of phases.csv's
    per-device medians, for the phases that took time on some device."""
    by = defaultdict(lambda: defaultdict(list))
    for p in folder.phases:
        if p["median_ms"] != "":  # empty: a configuration with no step timed
            by[p["config_id"]][p["phase"]].append((number(p, "median_ms"), integer(p, "device")))
    out = {}
    for cid, phases in by.items():
        out[cid] = {ph: (min(v for v, _ in xs), median([v for v, _ in xs]), max(xs)[0], max(xs)[1])
                    for ph, xs in phases.items() if max(v for v, _ in xs) > 0}
    return out


def across_lines(folder):
    """One row per configuration on 2 devices or more: each phase's min, median and
    max over the devices (ranks), and the device of the max."""
    runs = runs_by_id(folder)
    spread = {c: v for c, v in phase_spread(folder).items() if c in runs and runs[c]["_n"] > 1}
    if not spread:
        return []
    order = [ph for ph in PHASE_ORDER + ["allreduce"] if any(ph in v for v in spread.values())]
    lines = [f"## {ACROSS}", "",
             "Each phase's median time (phases.csv) over the devices or ranks of a "
             "configuration: min / median / max ms, and the device of the max after '@' "
             "(allreduce: the collectives' whole time, overlapped or not). A max far above the "
             "median is one device's slow phase.", "",
             "| configuration | " + " | ".join(order) + " |",
             "| --- | " + " | ".join("---" for _ in order) + " |"]
    for cid in sorted(spread):
        cells = []
        for ph in order:
            lo, mid, hi, at = spread[cid].get(ph, (None,) * 4)
            cells.append("–" if lo is None else f"{ms(lo)} / {ms(mid)} / {ms(hi)} @{at}")
        lines.append(f"| {cid} | " + " | ".join(cells) + " |")
    return lines + [""]


def bucket_rows(folder):
    """{config_id: [buckets.csv rows with a wait, transfer and lateness]}."""
    out = defaultdict(list)
    for b in folder.buckets or []:
        if b.get("transfer_ms") not in (None, "") and b.get("wait_ms") not in (None, ""):
            out[b["config_id"]].append(b)
    return out


def link_gbps(folder, size):
    """The measured GB/s between two devices at a ring chunk of `size` bytes, or None."""
    pts = link_curves(folder).get(("d2d_write", "dev0", "dev1"))
    return at_size(pts, size) if pts and size > 0 else None


def waiting(run, rows):
    """[(collective, phase, count, bytes, transfer ms, (min, median, max) wait ms over
    ranks, busbw GB/s)] of a configuration's traced collectives, each a step's sum."""
    groups = defaultdict(lambda: defaultdict(list))
    for b in rows:
        groups[(b["collective"], b["phase"])][integer(b, "rank")].append(b)
    out = []
    for (coll, phase), ranks in sorted(groups.items()):
        first = ranks[min(ranks)]
        nbytes = sum(integer(b, "bytes") for b in first)
        transfer = sum(number(b, "transfer_ms") for b in first)
        waits = [sum(number(b, "wait_ms") for b in bs) for bs in ranks.values()]
        n = run["_n"]
        bus = BUS_FACTOR[coll](n) * nbytes / (transfer * 1e-3) / 1e9 if transfer > 0 else None
        out.append((coll, phase, len(first), nbytes, transfer,
                    (min(waits), median(waits), max(waits)), bus))
    return out


def waiting_lines(folder):
    runs, by = runs_by_id(folder), bucket_rows(folder)
    body = []
    for cid in sorted(by):
        r = runs.get(cid)
        if not r or r["_n"] < 2:
            continue
        for coll, phase, count, nbytes, transfer, (lo, mid, hi), bus in waiting(r, by[cid]):
            link = link_gbps(folder, nbytes / count / r["_n"])
            share = f"{100 * bus / link:.0f} %" if bus and link else "–"
            body.append(f"| {cid} | {coll} ({phase}) | {count} | {nbytes / 2**20:.3g} MiB | "
                        f"{ms(transfer)} | {ms(lo)} / {ms(mid)} / {ms(hi)} | "
                        f"{'–' if bus is None else f'{bus:.3g}'} | "
                        f"{'–' if link is None else f'{link:.3g}'} | {share} |")
    if not body:
        return []
    return [f"## {WAITING}", "",
            "Each traced step's collectives (buckets.csv, medians over the traced steps, summed "
            "over a step's buckets or units) split into the transfer and each rank's wait for "
            "the last peer to arrive. Ranks leave a collective together, so the rank that "
            "arrived last ran it the shortest: its time is the transfer, another rank's excess "
            "is its wait. busbw: the transfer's bus bandwidth (nccl-tests' convention: "
            "2(n-1)/n of the bytes over the time for all-reduce, (n-1)/n for reduce-scatter and "
            "all-gather), beside the link between two devices (links.csv, at the ring's chunk "
            "size; – where the folder has no links.csv).", "",
            "| configuration | collective | a step | bytes | transfer ms | wait ms (min / median "
            "/ max rank) | busbw GB/s | link GB/s | busbw / link |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + body + [""]


def straggler(rows):
    """(rank, its lateness ms, the lateness it reached in 3 of 4 traced steps, the
    other ranks' time to the same buckets, that lateness as a share of it, named) of a
    configuration's buckets.csv rows: the rank whose gradient buckets were ready latest
    against the other ranks' in most steps (medians over its buckets of late_ms,
    late_p25_ms, and of the other ranks' median ready_step_ms), named a straggler when
    the share passes the threshold; None without those figures."""
    cols = ("late_ms", "late_p25_ms", "ready_step_ms")
    by = defaultdict(dict)  # rank -> bucket -> row
    for b in rows:
        if b["collective"] != "all-gather" and all(b.get(c) not in (None, "") for c in cols):
            by[integer(b, "rank")][(b["micro_step"], b["bucket"], b["phase"])] = b
    if len(by) < 2:
        return None
    scores = {}
    for r, mine in by.items():
        late, most, others = [], [], []
        for key, b in mine.items():
            ready = [number(o[key], "ready_step_ms") for q, o in by.items() if q != r and key in o]
            if ready:
                late.append(number(b, "late_ms"))
                most.append(number(b, "late_p25_ms"))
                others.append(median(ready))
        if others:
            scores[r] = (median(late), median(most), median(others))
    if len(scores) < 2:
        return None
    share = {r: most / others if others > 0 else 0.0 for r, (_, most, others) in scores.items()}
    rank = max(share, key=lambda r: share[r])
    late, most, others = scores[rank]
    named = share[rank] >= STRAGGLER_SHARE and most >= STRAGGLER_MIN_MS
    return rank, late, most, others, share[rank], named


def straggler_lines(folder):
    runs, by = runs_by_id(folder), bucket_rows(folder)
    body = []
    for cid in sorted(by):
        r = runs.get(cid)
        found = straggler(by[cid]) if r else None
        if not found:
            continue
        rank, late, most, others, share, named = found
        waits = sum(number(b, "wait_ms") for b in by[cid] if integer(b, "rank") != rank and
                    b["collective"] != "all-gather")
        verdict = f"**rank {rank}**" if named else "none"
        body.append(f"| {cid} | {run_label(r, ' ')} | {r['_n']} | {rank} | {late:.3g} | "
                    f"{most:.3g} | {others:.3g} | {100 * share:.0f} % | {ms(waits)} | "
                    f"{verdict} |")
    if not body:
        return []
    return [f"## {STRAGGLERS}", "",
            "A rank that computes slower than the others makes them wait in every collective, "
            "so every rank's backward and step read the same and per-rank phase times cannot "
            "show it. The buckets' ready marks still do: each traced step, how much later than "
            "the other ranks' median a rank's bucket was ready, each after its own step began "
            "(buckets.csv's late_ms, its median over the traced steps, and late_p25_ms, the "
            "lateness the rank reached in 3 of 4 of them), against the time the other ranks "
            "took from their step's start to the same bucket (ready_step_ms). The latest rank "
            "is the one with the largest such share in 3 of 4 steps (the median over its "
            "buckets); it is named a straggler when that share is at least "
            f"{100 * STRAGGLER_SHARE:.0f} % and the lateness at least {STRAGGLER_MIN_MS} ms, "
            "so a burst of a few slow steps (another process on its core) is not a straggler. "
            "The others' wait: what the other ranks waited for the last peer in these "
            "collectives, summed (ms a step, buckets.csv's wait_ms).", "",
            "| configuration | strategy | ranks | latest rank | its lateness ms | in 3 of 4 steps "
            "ms | the others' time to the buckets ms | late by | the others' wait ms | "
            "straggler |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"] + body + [""]


def lines(folder):
    """summary.md's sections of this module, in order."""
    return (partition_lines(folder) + across_lines(folder) + waiting_lines(folder) +
            straggler_lines(folder))
