#!/usr/bin/python3
"""Charts of a dpscale results folder: scaling, efficiency, GPU-0 imbalance,
phases, links, memory, and a summary.md that links them and names every
configuration that did not end ok (each chart counts those it leaves out).

With the sharded strategies (zero1, zero2, fsdp), summary.md sets each
device's parameters, gradients and optimizer state (memory.csv) against
dpscale's ZeRO formulas, and its diagnosis names the units whose all-gathers
stall the step (buckets.csv) and sets each strategy against ddp.

usage: plot.py RESULTS_DIR [--out DIR] [--torch TORCH_DIR] [--predictions PRED ...]
       (default DIR: plots/<folder name>)

--torch: a scripts/torch_reference.py folder of the same configurations;
summary.md then sets PyTorch's step and phase times (and, from GPUs, its
Python overhead per phase) beside dpscale's.

--predictions (repeatable): a predictions.csv of `dpscale predict`, or a
folder holding one; RESULTS_DIR's own predictions.csv is read too. The
scaling and efficiency charts draw each predicted series (status ok) dash-
dotted with x markers, beside the measured weak scaling of the same model,
precision, optimizer and batch per GPU (a panel of its own where none was
measured), predicted out-of-memory points as triangles at the bottom; where a
measured point matches, the scaling chart and summary.md's "Predicted
against measured" give the step time's error. A RESULTS_DIR that holds
predictions.csv and no runs.csv is drawn as predictions alone (scaling,
efficiency, summary.md).

Reads columns by name through dpstools.results; a folder or predictions file it
refuses, or an --out that cannot be written, is exit 2. Runs under Debian's
/usr/bin/python3 with python3-matplotlib (run by another Python without
matplotlib, it runs itself again under that one: dpstools.interpreter).
"""
import argparse
import os
import sys

from dpstools import charts, interpreter, summary
from dpstools.folder import Folder
from dpstools.predicted import (Predicted, prediction_files, predictions_only,
                                read_all_predictions)
from dpstools.results import InputError


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="a results folder (results/<name>)")
    ap.add_argument("--out", help="where to write the charts (default: plots/<name>)")
    ap.add_argument("--reference", "--torch", dest="torch", metavar="TORCH_DIR",
                    help="a torch_reference.py folder to set beside this one in summary.md "
                         "(--torch is the same)")
    ap.add_argument("--predictions", action="append", default=[], metavar="PRED",
                    help="a predictions.csv of dpscale predict, or a folder holding one, to "
                         "draw beside the measurements (repeatable; RESULTS_DIR's own "
                         "predictions.csv is read too)")
    args = ap.parse_args(argv)
    try:
        if not os.path.isdir(args.results):
            raise InputError(f"{args.results}: not a folder")
        pred_paths = prediction_files(args.results, args.predictions)
        preds = read_all_predictions(pred_paths)
        if predictions_only(args.results):
            return plot_predictions_only(args, preds, pred_paths)
        folder = Folder(args.results)
        torch_folder = None
        if args.torch:
            if not os.path.isdir(args.torch):
                raise InputError(f"--torch {args.torch}: not a folder")
            torch_folder = Folder(args.torch)
        plt, out = start(args)
        drawn = [os.path.basename(c) for c in charts.draw(plt, folder, out, preds)]
        summary.write(folder, out, drawn, torch_folder, preds, pred_paths)
    except (InputError, ImportError) as e:
        return refused(e)
    return done(out, drawn)


def start(args):
    """matplotlib's pyplot (Agg) and the --out folder, made."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    name = os.path.basename(os.path.realpath(args.results))
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "plots", name)
    make_folder(out)
    return plt, out


def make_folder(out):
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise InputError(f"--out {out}: cannot make the folder: {e.strerror}; give --out a "
                         f"folder (not a file) you may write in") from None


def plot_predictions_only(args, preds, pred_paths):
    """A folder of predictions alone: scaling, efficiency and summary.md
    (main refuses what this raises)."""
    if not any(p["status"] == "ok" for p in preds):
        raise InputError(f"{', '.join(pred_paths)}: no prediction with status ok to draw")
    folder = Predicted(args.results, preds)
    plt, out = start(args)
    drawn = [os.path.basename(c) for c in charts.draw_predicted(plt, folder, out, preds)]
    summary.write_predicted(folder, out, drawn, preds, pred_paths)
    return done(out, drawn)


def refused(e):
    """Exit 2, with the reason on stderr."""
    if isinstance(e, ImportError):
        print(f"plot.py: {e}: install python3-matplotlib (scripts/setup.sh does) and run "
              f"with /usr/bin/python3", file=sys.stderr)
    else:
        print(f"plot.py: {e}", file=sys.stderr)
    return 2


def done(out, drawn):
    print(f"plot.py: charts in {os.path.normpath(out)}: {', '.join(drawn)}, summary.md")
    return 0


if __name__ == "__main__":
    interpreter.reexec(["matplotlib"], __file__, sys.argv[1:])
    sys.exit(main(sys.argv[1:]))
