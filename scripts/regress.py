#!/usr/bin/env python3
"""The regression gate (`ninja -C build regress`, scripts/regress.sh).

Builds the base commit beside the build (a git worktree and a Meson build
in BUILD/regress-base/<commit>/, kept for the next time), runs the suite
with the base and the head binary interleaved, round after round, and
compares them with compare.py as paired rounds. It stops as soon as every
configuration is decided (REGRESSION, IMPROVED or SAME) after --min-rounds,
or when --budget-min is spent; stopped with some undecided, it is
INCONCLUSIVE (exit 3). --base-binary takes a base built elsewhere, and
--rounds N runs exactly N rounds before judging them (scripts/ab.sh OLD
NEW is regress.py NEW --base-binary OLD --rounds 6). --stored compares
one run with a stored baseline (bench/baselines/<backend>-<device>/)
instead, for runners where the base cannot be built; --update-baseline
adds a run to that baseline, stamped with the dpscale that recorded it
(baseline.json)."""
EXIT_STATUS = """exit status:
  0  pass
  1  regression (or a failed or missing configuration)
  2  bad input, a base that cannot be built or a sweep that refuses its input
  3  inconclusive: the rounds stopped at --budget-min, --max-rounds or
     --rounds with configurations undecided (WARN or NOISY), the report's
     first line says INCONCLUSIVE and why; --stored: a step time NOISY, or
     no baseline for this machine
ninja -C build regress fails on 3 as on 1; a CI job that accepts an undecided
gate runs: scripts/regress.sh BUILD/src/dpscale || [ $? -eq 3 ]
--warn-only exits 0 for 1 and 3 alike (docs/regression.md)."""
import argparse
import os
import sys

from dpstools import gate
from dpstools.gate import ROOT, GateError


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 epilog=EXIT_STATUS,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dpscale", help="the head build's dpscale (BUILD/src/dpscale)")
    ap.add_argument("--base", help="the base commit (default: the merge-base with main)")
    ap.add_argument("--base-binary", metavar="DPSCALE",
                    help="a base dpscale built elsewhere, instead of building --base")
    ap.add_argument("--out", default=os.path.join(ROOT, "results"),
                    help="where the gate's folder goes (results/)")
    ap.add_argument("--budget-min", type=float, default=5.0,
                    help="stop adding rounds after this many minutes (5)")
    ap.add_argument("--min-rounds", type=int, default=6,
                    help="rounds before deciding (6, the fewest with a 95 %% interval)")
    ap.add_argument("--max-rounds", type=int, default=200, help="rounds at most (200)")
    ap.add_argument("--rounds", type=int, metavar="N",
                    help="exactly N rounds (1 or more), judged once at the end, whatever "
                         "--budget-min, --min-rounds and --max-rounds say (scripts/ab.sh)")
    ap.add_argument("--suite", default=os.path.join(ROOT, "bench", "ci.suite"))
    ap.add_argument("--steps", type=int, default=0,
                    help="timed steps of each configuration in a round (0: the suite's); "
                         "more rounds narrow the interval more than longer ones")
    ap.add_argument("--inject-slowdown", type=float, default=0.0, metavar="PCT",
                    help="for testing the gate: the head's compute phases PCT %% slower")
    ap.add_argument("--stored", action="store_true",
                    help="compare one run with the stored baseline of this machine")
    ap.add_argument("--update-baseline", action="store_true",
                    help="add one run to the stored baseline of this machine")
    a, extra = ap.parse_known_args(argv)
    if not (a.budget_min > 0 and 6 <= a.min_rounds <= a.max_rounds and a.steps >= 0 and
            0 <= a.inject_slowdown <= 1000 and (a.rounds is None or a.rounds >= 1)):
        ap.error("--budget-min must be above 0, 6 <= --min-rounds <= --max-rounds, --steps >= 0, "
                 "--inject-slowdown 0 to 1000, --rounds 1 or more")
    if a.rounds and (a.stored or a.update_baseline):
        ap.error("--rounds: the rounds of base and head interleaved, not --stored or "
                 "--update-baseline")
    for binary in filter(None, (a.dpscale, a.base_binary)):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            ap.error(f"{binary}: not an executable dpscale")
    if not os.path.isfile(a.suite):
        ap.error(f"--suite {a.suite}: no such suite file")
    return a, extra


def main(argv):
    try:
        a, extra = parse(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        return gate.stored(a, extra) if a.stored or a.update_baseline else gate.gate(a, extra)
    except (GateError, OSError) as e:
        print(f"regress: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
