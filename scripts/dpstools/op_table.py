"""summary.md's "Where the step goes, per op": each configuration's op kinds
by time in its traced step (ops.csv), with their share of that step and
their rates. Standard library only."""
from collections import defaultdict

from dpstools.results import number

TITLE = "Where the step goes, per op"
TOP = 5  # op kinds shown per configuration


def rate(row, col):
    """A rate's cell as text, '–' where the kind has none."""
    return f"{float(row[col]):.3g}" if row[col] else "–"


def config_rows(config_id, rows):
    """The table's rows of one configuration: its TOP kinds by ms, then the
    rest of its ops and what no op covered."""
    step = number(rows[0], "step_ms")
    rows = sorted(rows, key=lambda r: -number(r, "ms"))
    out = []
    for r in rows[:TOP]:
        ms = number(r, "ms")
        share = f"{100 * ms / step:.1f} %" if step > 0 else "–"
        out.append(f"| {config_id} | {step:.3f} | {r['kind']} {r['direction']} | {r['calls']} | "
                   f"{ms:.3f} | {share} | {rate(r, 'tflops')} | {rate(r, 'gbps')} |")
    if step <= 0:
        return out
    rest = sum(number(r, "ms") for r in rows[TOP:])
    if rows[TOP:]:
        out.append(f"| {config_id} | {step:.3f} | {len(rows) - TOP} more kinds | "
                   f"{sum(int(r['calls']) for r in rows[TOP:])} | {rest:.3f} | "
                   f"{100 * rest / step:.1f} % | – | – |")
    left = max(step - sum(number(r, "ms") for r in rows), 0.0)
    out.append(f"| {config_id} | {step:.3f} | not in an op (copies, collectives, gaps) | – | "
               f"{left:.3f} | {100 * left / step:.1f} % | – | – |")
    return out


def lines(folder):
    """The section's lines; [] when the folder has no ops.csv (folders
    before it) or no row of an ok configuration."""
    if not folder.ops:
        return []
    ok = {r["config_id"] for r in folder.runs}
    by = defaultdict(list)
    for r in folder.ops:
        if r["config_id"] in ok:
            by[r["config_id"]].append(r)
    if not by:
        return []
    table = []
    for config_id in sorted(by):
        table += config_rows(config_id, by[config_id])
    return [f"## {TITLE}", "", "The last timed step of each configuration, timed op by op "
            "(ops.csv: events around each op's kernels on device 0's stream for dp, rank 0's "
            "for the other strategies; the host backend's clock on emulated devices). "
            f"Its {TOP} op kinds that took longest, by direction, as a share of that step "
            "(step_ms, the slowest rank's); TFLOP/s counts the GEMMs' FLOP only, GB/s each "
            "operand read or written once. What no op covers is the step's copies, exposed "
            "collectives and the host's gaps.", "",
            "| configuration | step ms | op kind | calls | ms | share of step | TFLOP/s | GB/s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"] + table + [""]
