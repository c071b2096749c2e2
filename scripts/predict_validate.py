#!/usr/bin/env python3
"""`dpscale predict` against what it predicts, printed with the
errors; the figures are for notes, not assertions.

- This machine (--host): the constants are fitted (--calibrate) to a
  calibration folder of one shape on 1 and 2 devices; then another shape
  runs on one device, its 2-device dp and ddp are predicted from that run
  (--from, with the calibration), and only then measured.
- Published results: each case predicted from its one-GPU figure (or, where
  the source gives none, from one published point taken as the
  calibration) and the machine files of bench/predict/.

usage: predict_validate.py DPSCALE [BENCH_DIR] [--host [--keep DIR]]
       (BENCH_DIR: bench/predict; --host: also the host runs, ~5 minutes on 2 cores)

Exit status: 0 printed, 2 bad input (a prediction that did not run).
Standard library only.
"""
import argparse
import os
import subprocess
import sys

from dpstools import results, validate

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    ap = argparse.ArgumentParser(prog="predict_validate.py", description=__doc__.splitlines()[0])
    ap.add_argument("dpscale", help="the dpscale binary")
    ap.add_argument("bench", nargs="?", default=os.path.join(HERE, "..", "bench", "predict"),
                    help="the MACHINE and WORKLOAD files (default: bench/predict)")
    ap.add_argument("--host", action="store_true",
                    help="also calibrate, predict and measure on this machine (~5 minutes on 2 cores)")
    ap.add_argument("--keep", metavar="DIR", help="--host: keep its folders in DIR")
    args = ap.parse_args(argv[1:])
    print(f"  {'case':<34} {'predicted':>10} {'published':>10} {'error':>10}")
    validate.resnet(args.dpscale, args.bench)
    validate.resnet_buckets(args.dpscale, args.bench)
    validate.gpt2(args.dpscale, args.bench)
    if args.host:
        validate.host(args.dpscale, args.keep)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (validate.BadInput, results.InputError, OSError, subprocess.SubprocessError) as e:
        print(f"predict_validate.py: {e}", file=sys.stderr)
        sys.exit(2)
