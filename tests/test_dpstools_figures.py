#!/usr/bin/env python3
"""scripts/dpstools/figures.py, imported, on fields the test gives. line:
figure_line joins NAME, VALUE, GOAL and RESULT with tabs, each field as its
str(), a tab or a newline inside a field turned into a space, so that
device-check-lib.sh's dc_figures_from reads one line of exactly three tabs
back into the four fields. missing: Missing, raised by a figure that cannot
be computed, is caught as an Exception with its message, and turned into
the figure's FAIL line.
Usage: test_dpstools_figures.py FIXTURES CASE; exit 0 pass, 1 fail."""
from listing import FIXTURES, NOSAN, exit_if_listing, test

TESTS = [test("dpstools figures " + c, FIXTURES, c, suite=NOSAN, timeout=300)
         for c in ("line", "missing")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

from dpstools.figures import Missing, figure_line
from helpers import expect, run_cases

# (name, value, goal, result) -> the line, and the four fields read back from it
LINES = [
    (("step_ms", 1.5, "< 2", "PASS"), "step_ms\t1.5\t< 2\tPASS"),
    (("busbw_gbps", 0, "> 0", "FAIL: none measured"), "busbw_gbps\t0\t> 0\tFAIL: none measured"),
    (("loss", None, True, 3), "loss\tNone\tTrue\t3"),
    (("", "", "", ""), "\t\t\t"),
    (("a\tb", "1\n2", "goal\t", "FAIL: x\ny\tz"), "a b\t1 2\tgoal \tFAIL: x y z"),
    (("tabs\t\tand\n\nlines", 2.25, "-", "SKIP"), "tabs  and  lines\t2.25\t-\tSKIP"),
]


def case_line(fixtures):
    for fields, want in LINES:
        got = figure_line(*fields)
        expect(got == want, f"figure_line{fields!r}: {got!r}, expected {want!r}")
        expect("\n" not in got and got.count("\t") == 3, f"{got!r}: not one line of 3 tabs")
        back = got.split("\t")
        expect(back == want.split("\t") and len(back) == 4, f"{got!r} read back as {back}")


def figure(name, goal, compute):
    """A device check's figure as device_check_compare.py writes it: its
    value, or '-' and FAIL naming what is missing."""
    try:
        return figure_line(name, compute(), goal, "PASS")
    except Missing as e:
        return figure_line(name, "-", goal, f"FAIL: {e}")


def case_missing(fixtures):
    def absent():
        raise Missing("no runs.csv (the run wrote no results:\tsee device-check.log)")
    expect(issubclass(Missing, Exception), "Missing is not an Exception")
    got = figure("step_ms", "< 2", absent)
    want = "step_ms\t-\t< 2\tFAIL: no runs.csv (the run wrote no results: see device-check.log)"
    expect(got == want, f"a Missing figure: {got!r}, expected {want!r}")
    got = figure("step_ms", "< 2", lambda: 1.25)
    expect(got == "step_ms\t1.25\t< 2\tPASS", f"a figure computed: {got!r}")
    try:
        raise Missing("x")
    except Exception as e:  # what a caller that knows no Missing catches
        expect(type(e) is Missing and str(e) == "x", f"caught {e!r}")


if __name__ == "__main__":
    run_cases(globals())
