"""A comparison's reports: the Markdown table, JUnit XML, the JSON summary and its chart.

What compare.py writes of judge's rows, the verdict first. Standard library
only; matplotlib for the chart (plot), imported when it is drawn.
"""
import math
from xml.sax.saxutils import escape, quoteattr

from dpstools.judge import BAD, ORDER, recorded_by, undecided, verdict
from dpstools.results import InputError


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
