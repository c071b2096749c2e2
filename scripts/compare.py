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
After the table, "Where the time went" breaks each slower configuration's
step down (--breakdown): the step time's change, each phase's change in its
per-rank medians (steps.csv) on the rank where it changed most, sorted by
its share of the step's change, the buckets' collective that grew most or
became ready later (buckets.csv), and the phase that lost most.
Exit status: 0 pass, warn or inconclusive, 1 regression, 2 bad input (the
gate, regress.py, exits 3 for inconclusive). Standard library only;
matplotlib for --plot, from /usr/bin/python3 (this script runs itself again
under it when the Python running it has none: dpstools.interpreter).
"""
import argparse
import json
import math
import os
import sys

from dpstools import interpreter, judge, report, tracediff
from dpstools.results import InputError

PLOT_PYTHON = interpreter.SYSTEM_PYTHON  # Debian's Python, which has python3-matplotlib
REEXEC_ENV = interpreter.REEXEC_ENV  # set when compare.py runs itself again, so it does not loop


def plot_python(argv):
    """--plot needs matplotlib. A Python without it (a python3 on PATH other
    than Debian's) runs the whole command again under PLOT_PYTHON when that
    one has it; else the command is refused before anything is written."""
    if not interpreter.reexec(["matplotlib"], __file__, argv, "compare.py: --plot"):
        return
    raise InputError(f"--plot needs matplotlib: {interpreter.here()} has none, nor has "
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
    ap.add_argument("--breakdown", choices=("slower", "all", "none"), default="slower",
                    help="which configurations to break down phase by phase and bucket by "
                         "bucket: slower (those whose step time is REGRESSION or WARN; the "
                         "default), all (every one both sides ran ok), none")
    ap.add_argument("--warn-only", action="store_true", help="exit 0 even on a regression")
    ap.add_argument("--force", action="store_true", help="compare different machines anyway")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        if args.plot:
            plot_python(argv)
        base, cur = judge.Results(args.baseline), judge.Results(args.current)
        mine = os.path.realpath(cur.newest.folder)
        if base.pooled and any(os.path.realpath(p.folder) == mine for p in base.parts):
            raise InputError(f"{args.baseline}: the baseline holds the current run "
                             f"{cur.newest.folder} itself; give a baseline without it")
        warned = judge.check_comparable(base, cur, args.force)
        paired = bool(base.round_names()) and base.round_names() == cur.round_names()
        warned += judge.version_warnings(base, cur, paired)
        rows = judge.compare(base, cur, args, paired)
        diffs = tracediff.breakdowns(rows, base, cur, args.breakdown)
        md = report.markdown(rows, base, cur, warned, paired, args.stopped) + \
            tracediff.markdown(diffs)
        sys.stdout.write(md)
        if args.markdown:
            write_file("--markdown", args.markdown, md)
        if os.environ.get("GITHUB_STEP_SUMMARY"):
            write_file("GITHUB_STEP_SUMMARY", os.environ["GITHUB_STEP_SUMMARY"], md, "a")
        if args.junit:
            write_file("--junit", args.junit, report.junit(rows))
        if args.json:
            write_file("--json", args.json, json.dumps(
                {**report.summary(rows, base, cur, warned, paired, args.stopped),
                 "breakdown": diffs}, indent=1, default=str))
        if args.plot:
            report.plot(rows, args.plot)
    except InputError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 2
    except ImportError as e:  # matplotlib imports, but not its parts
        print(f"compare.py: --plot: {e}: reinstall python3-matplotlib (scripts/setup.sh) and run "
              f"under {PLOT_PYTHON}", file=sys.stderr)
        return 2
    bad = any(r["status"] in judge.BAD for r in rows)
    return 1 if bad and not args.warn_only else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
