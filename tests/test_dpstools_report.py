#!/usr/bin/env python3
"""scripts/dpstools/report.py, imported, on judge's rows as the test writes
them (a regression, a failed run, a noisy and a new configuration, memory
and step time the same; then paired rounds with intervals) and the lines
each report must hold. markdown: the verdict line, how the rows were judged
(the baseline's recording, or the paired rounds' confidence and
threshold), the count of each status in ORDER, the warnings, every row in
the status's order with its cells (fmt's 4 digits, Δ with its interval,
p, noise in %, the status in bold where bad, the rounds a NOISY row needs).
summary: the JSON report's verdict, rounds, undecided step times and the
most rounds one asks for. junit: one testcase a row, a failure where it is
bad, skipped where NOISY, its message, escaping. plot: the chart's points
(each step time's ratio, new over base or 1 + Δ), its width, and no rows
or a folder that is not there refused.
Usage: test_dpstools_report.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools report " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("markdown", "paired", "summary", "junit", "plot")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import json
import math
import os
import tempfile
import types
import xml.etree.ElementTree as ET

from dpstools import report
from dpstools.results import InputError
from helpers import expect, png_size, run_cases

NONE = dict(delta_pct=None, p=None, noise=None, threshold=None)
# judge.compare's rows of one baseline against one current run
ROWS = [
    dict(config="ddp-a", metric="step_ms", base=10.0, new=11.0, delta_pct=10.0, p=0.004,
         noise=0.02, threshold=0.05, status="REGRESSION"),
    dict(config="ddp-a", metric="samples_per_s", base=1600.0, new=1454.5454, delta_pct=-9.0909,
         p=0.004, noise=0.02, threshold=0.05, status="REGRESSION"),
    dict(config="dp-b", metric="step_ms", base=5.0, new=5.0, delta_pct=0.0, p=1.0, noise=0.01,
         threshold=0.05, status="SAME"),
    dict(config="dp-b", metric="alloc_peak_bytes[0]", base=2097152.0, new=2097152.0,
         delta_pct=0.0, p=None, noise=None, threshold=0.02, status="SAME"),
    dict(config="dp-c", metric="status", base="ok", new="oom", status="FAILED",
         detail="device 0: out of memory <2 MiB> & more", **NONE),
    dict(config="zero1-d", metric="step_ms", base=8.0, new=9.2, delta_pct=15.0, p=0.3,
         noise=0.25, threshold=0.5, status="NOISY"),
    dict(config="new-e", metric="configuration", base=None, new=None, status="NEW", **NONE),
]
# ... the markdown table's rows of ROWS, in ORDER: FAILED, REGRESSION, NOISY, NEW, SAME
TABLE = ["| dp-c | status | ok | oom | - | - | - | **FAILED** |",
         "| ddp-a | samples_per_s | 1600 | 1455 | -9.1 | 0.004 | 2.0 % | **REGRESSION** |",
         "| ddp-a | step_ms | 10 | 11 | +10.0 | 0.004 | 2.0 % | **REGRESSION** |",
         "| zero1-d | step_ms | 8 | 9.2 | +15.0 | 0.3 | 25.0 % | NOISY |",
         "| new-e | configuration | - | - | - | - | - | NEW |",
         "| dp-b | alloc_peak_bytes[0] | 2.097e+06 | 2.097e+06 | +0.0 | - | - | SAME |",
         "| dp-b | step_ms | 5 | 5 | +0.0 | 1 | 1.0 % | SAME |"]
PAIRED = dict(threshold=0.05, rounds=3, confidence=0.975)
# paired rounds' rows (judge.judge_paired): intervals, the rounds an undecided one needs; Δ
# the shift of the rounds' log-ratios, not the pooled medians' ratio
PAIRED_ROWS = [
    dict(config="ddp-a", metric="step_ms", base=10.0, new=10.4, delta_pct=3.0, lo_pct=-1.0,
         hi_pct=7.5, p=0.2, noise=0.03, status="NOISY", rounds_needed=12,
         detail="needs about 12 rounds to decide", **PAIRED),
    dict(config="dp-b", metric="step_ms", base=5.0, new=5.0, delta_pct=0.0, lo_pct=-math.inf,
         hi_pct=math.inf, p=1.0, noise=0.01, status="SAME", **PAIRED),
    dict(config="dp-b", metric="busbw_gbps", base=2.0, new=1.9, delta_pct=5.2632, lo_pct=-0.25,
         hi_pct=10.75, p=0.1, noise=0.04, status="WARN", rounds_needed=40,
         detail="needs about 40 rounds to decide", **PAIRED),
]
PAIRED_TABLE = [  # in ORDER: WARN, NOISY, SAME
    "| dp-b | busbw_gbps | 2 | 1.9 | +5.3 [-0.2, +10.8] | 0.1 | 4.0 % | WARN (needs about 40 "
    "rounds to decide) |",
    "| ddp-a | step_ms | 10 | 10.4 | +3.0 [-1.0, +7.5] | 0.2 | 3.0 % | NOISY (needs about 12 "
    "rounds to decide) |",
    "| dp-b | step_ms | 5 | 5 | +0.0 [-inf, +inf] | 1 | 1.0 % | SAME |"]
META = {"start_time": "2026-01-02T03:04:05Z", "host": "vm", "dpscale_version": "0.1.0",
        "git_describe": "abc1234"}
WARNED = ["the baseline was recorded by dpscale 0.0.9 (fff), the current run by dpscale 0.1.0"]


def side(folder, rounds=1, meta=META):
    """A judge.Results as report reads it: its folder, runs (parts), meta.json."""
    return types.SimpleNamespace(folder=folder, parts=[None] * rounds, meta=meta)


def case_markdown(fixtures):
    base, cur = side("/r/base"), side("/r/cur")
    md = report.markdown(ROWS, base, cur, WARNED).splitlines()
    want = ["## dpscale performance comparison: REGRESSION in 2 configuration(s)", "",
            "Baseline `/r/base`, current `/r/cur`. Baseline recorded 2026-01-02T03:04:05Z on vm "
            "by dpscale 0.1.0 (abc1234); not run beside the current one, so the machine's "
            "drift since widens the threshold.", "",
            "1 failed, 2 regression, 1 noisy, 1 new, 2 same.", "",
            f"> warning: {WARNED[0]}",
            "| configuration | metric | base | new | Δ % | p | noise | status |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"] + TABLE
    expect(md == want, "markdown:\n" + "\n".join(md) + "\nexpected:\n" + "\n".join(want))
    same = [dict(r, status="SAME") for r in ROWS if r["metric"] == "step_ms"]
    md = report.markdown(same, side("b", meta={}), cur, []).splitlines()
    expect(md[0].endswith(": PASS") and md[4] == "3 same." and
           md[2] == "Baseline `b`, current `/r/cur`. Baseline recorded ? on ?; not run beside "
                    "the current one, so the machine's drift since widens the threshold.",
           "every step time the same, a baseline without meta.json:\n" + "\n".join(md[:6]))
    noisy = same + [dict(ROWS[-2])]
    md = report.markdown(noisy, base, cur, []).splitlines()
    expect(md[0] == "## dpscale performance comparison: INCONCLUSIVE: 1 of 4 configuration(s) "
                    "too noisy to judge (noise above 10 %)", f"a NOISY step time: {md[0]!r}")
    for v, digits, want in ((None, 4, "-"), ("oom", 4, "oom"), (12.34567, 4, "12.35"),
                            (12.34567, 2, "12"), (1234567.0, 4, "1.235e+06"), (-2e6, 4, "-2e+06"),
                            (0.000123456, 4, "0.0001235"), (123456.0, 6, "123456"),
                            (1234567.0, 6, "1.235e+06")):  # from 1e6 on: 4 digits, whatever asked
        expect(report.fmt(v, digits) == want, f"fmt({v!r}, {digits}): {report.fmt(v, digits)!r}")


def case_paired(fixtures):
    """Paired rounds: the verdict on the undecided step time (the busbw row
    counts not), the stop's reason, the confidence and threshold of the
    rows, Δ's intervals, infinite ends; delta alone."""
    base, cur = side("b", rounds=3), side("c", rounds=3)
    md = report.markdown(PAIRED_ROWS, base, cur, [], paired=True,
                         stopped="--max-rounds 3 reached").splitlines()
    want = ["## dpscale performance comparison: INCONCLUSIVE: 1 of 2 configuration(s) undecided "
            "after 3 round(s); stopped: --max-rounds 3 reached", "",
            "Baseline `b`, current `c`. Paired rounds (3): Δ is the shift of head's median over "
            "base's with its 97.50 % interval (the report's confidence shared among the rows it "
            "decides); REGRESSION when the whole interval is worse than 5 %.", "",
            "1 warn, 1 noisy, 1 same.", "",
            "| configuration | metric | base | new | Δ % | p | noise | status |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"] + PAIRED_TABLE
    expect(md == want, "paired markdown:\n" + "\n".join(md) + "\nexpected:\n" + "\n".join(want))
    plain = [{k: v for k, v in r.items() if k not in ("rounds", "confidence")} for r in PAIRED_ROWS]
    got = report.how(base, True, plain)
    expect(got == "Paired rounds (3).", f"no row with rounds: {got!r}")
    for r, want in ((ROWS[0], "+10.0"), (ROWS[4], "-"), (PAIRED_ROWS[0], "+3.0 [-1.0, +7.5]"),
                    (PAIRED_ROWS[1], "+0.0 [-inf, +inf]"),
                    (dict(delta_pct=-0.04, lo_pct=-0.06, hi_pct=-0.01), "-0.0 [-0.1, -0.0]")):
        expect(report.delta(r) == want, f"delta of {r}: {report.delta(r)!r}, expected {want!r}")


def case_summary(fixtures):
    """The JSON report: one run a side: REGRESSION, no rounds, none
    undecided; paired: INCONCLUSIVE, 3 rounds, 1 undecided, 12 rounds
    needed (the step time's, not busbw's 40); every value JSON can write."""
    base, cur = side("/r/base"), side("/r/cur")
    got = report.summary(ROWS, base, cur, WARNED, False)
    want = {"verdict": "REGRESSION", "verdict_line": "REGRESSION in 2 configuration(s)",
            "baseline": "/r/base", "current": "/r/cur", "warnings": WARNED, "paired": False,
            "rounds": None, "undecided": 0, "rounds_needed": None, "rows": ROWS}
    expect(got == want, f"summary {got}, expected {want}")
    expect(json.loads(json.dumps(got)) == want, "the summary does not round-trip through JSON")
    base, cur = side("b", rounds=3), side("c", rounds=3)
    got = report.summary(PAIRED_ROWS, base, cur, [], True, stopped="--budget-min 5 reached")
    want = {"verdict": "INCONCLUSIVE",
            "verdict_line": "INCONCLUSIVE: 1 of 2 configuration(s) undecided after 3 round(s); "
                            "stopped: --budget-min 5 reached",
            "baseline": "b", "current": "c", "warnings": [], "paired": True, "rounds": 3,
            "undecided": 1, "rounds_needed": 12, "rows": PAIRED_ROWS}
    expect(got == want, f"paired summary {got}, expected {want}")
    got = report.summary(PAIRED_ROWS[1:2], base, cur, [], True)
    expect((got["verdict"], got["undecided"], got["rounds_needed"]) == ("PASS", 0, None),
           f"every step time decided: {got}")


def case_junit(fixtures):
    """7 rows: 3 failures (2 REGRESSION, 1 FAILED), 1 skipped (NOISY), the
    others system-out; each message; a name with XML's special characters
    read back as written."""
    rows = ROWS + [dict(ROWS[2], config='a<b & "c"', metric="step_ms")]
    suite = ET.fromstring(report.junit(rows)).find("testsuite")
    expect(suite.attrib == {"name": "dpscale.compare", "tests": "8", "failures": "3",
                            "skipped": "1"}, f"testsuite {suite.attrib}")
    cases = suite.findall("testcase")
    got = [(c.get("classname"), c.get("name"), c[0].tag) for c in cases]
    want = [(r["config"], r["metric"], {"REGRESSION": "failure", "FAILED": "failure",
                                        "NOISY": "skipped"}.get(r["status"], "system-out"))
            for r in rows]
    expect(got == want, f"testcases {got}, expected {want}")
    msgs = {(c.get("classname"), c.get("name")): c[0].get("message", c[0].text) for c in cases}
    for key, want in [
            (("ddp-a", "step_ms"), "REGRESSION: base 10, new 11 (+10.0 %), p = 0.004, noise 2.0 %"),
            (("dp-c", "status"),
             "FAILED: base ok, new oom: device 0: out of memory <2 MiB> & more"),
            (("zero1-d", "step_ms"), "NOISY: base 8, new 9.2 (+15.0 %), p = 0.3, noise 25.0 %"),
            (("dp-b", "alloc_peak_bytes[0]"), "SAME: base 2.097e+06, new 2.097e+06 (+0.0 %)"),
            (("new-e", "configuration"), "NEW: base -, new -"),
            (('a<b & "c"', "step_ms"), "SAME: base 5, new 5 (+0.0 %), p = 1, noise 1.0 %")]:
        expect(msgs.get(key) == want, f"{key}: message {msgs.get(key)!r}, expected {want!r}")
    failure = cases[4][0]
    expect(failure.text == failure.get("message"), f"failure text {failure.text!r}")
    empty = ET.fromstring(report.junit([])).find("testsuite")
    expect(empty.attrib["tests"] == "0" and not empty.findall("testcase"), "no rows")


def case_plot(fixtures):
    """The points drawn: new / base of each step time with both sides (11/10,
    5/5, 9.2/8), 1 + Δ of a paired one (1.03, not 10.4/10); max(6, 0.6 n +
    2) in wide at 110 dpi for n step times; no step time refused; a folder
    that is not there refused."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    drawn, real = [], Figure.savefig

    def keep(fig, path, **kw):
        drawn.append([l.get_ydata()[0] for l in fig.axes[0].lines if l.get_marker() == "o"])
        return real(fig, path, **kw)
    rows = ROWS + PAIRED_ROWS[:1] + [dict(ROWS[0], config="x", base=0.0)]  # no base: not drawn
    Figure.savefig = keep
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "compare.png")
            report.plot(rows, path)
            size = png_size(path)
            report.plot(rows * 3, path)
            wide = png_size(path)
            why = refused(report.plot, [ROWS[3], ROWS[4]], path)
            expect(why == "--plot: no configuration with step times on both sides", why)
            why = refused(report.plot, rows, os.path.join(tmp, "no", "such", "x.png"))
            expect("cannot write" in why and "no/such/x.png" in why, f"unwritable: {why}")
    finally:
        Figure.savefig = real
    want = [1.1, 1.0, 9.2 / 8, 1.03]
    expect(len(drawn[0]) == 4 and all(abs(a - b) < 1e-9 for a, b in zip(drawn[0], want)),
           f"points {drawn[0]}, expected {want}")
    expect(size == (660, 495), f"4 step times: {size}, expected 6 x 4.5 in at 110 dpi")
    expect(abs(wide[0] - (0.6 * 12 + 2) * 110) <= 1 and wide[1] == 495,
           f"12 step times: {wide}, expected 9.2 x 4.5 in at 110 dpi")


def refused(fn, *args):
    try:
        fn(*args)
    except InputError as e:
        return str(e)
    expect(False, f"{fn.__name__}: no InputError")


if __name__ == "__main__":
    run_cases(globals())
