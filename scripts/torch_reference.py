#!/usr/bin/env python3
"""The dpscale model, initialisation, data and optimizer in PyTorch, trained
under nn.DataParallel (dp) or DistributedDataParallel (ddp) on GPUs or on
the CPU, writing a results folder that scripts/dpstools/results.py reads as it
reads dpscale's (runs.csv, steps.csv, devices.csv, phases.csv, meta.json,
every column of dpstools.results.COLUMNS), so that plot.py draws it and
compare.py compares it like a dpscale folder, and the loss at every step
can be checked against dpscale's.

--device cuda (the default when PyTorch sees a GPU): dp is nn.DataParallel
over --gpus GPUs, ddp one process per GPU over NCCL. --device cpu: one
device (--gpus 1), or ddp over gloo with one process per rank, each with one
BLAS thread as dpscale's host backend gives each emulated device;
DataParallel needs CUDA, so dp on more than one device is refused there.
Rank processes are started with torch.multiprocessing (spawn, or
forkserver with PyTorch preloaded), or by torchrun, e.g. `torchrun
--nproc_per_node 2 -r 2 -t 2 torch_reference.py --mode ddp --gpus 2 ...`
(Debian's PyTorch 1.13 under Python 3.11 needs the `-r 2 -t 2`).

Presets are read from `dpscale info`, so the shapes are dpscale's own.
"""
import argparse
import os
import subprocess
import sys
import time

from dpstools.torch_model import presets
from dpstools.torch_results import Usage, check_folder, utc_now
from dpstools.torch_train import RanksHung, run_ddp, run_single


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["dp", "ddp"], default="dp")
    ap.add_argument("--gpus", type=int, default=1, help="devices: GPUs, or ranks on the CPU")
    ap.add_argument("--device", choices=["cpu", "cuda"],
                    help="cuda (default when PyTorch sees a GPU) or cpu")
    ap.add_argument("--ddp-loss", choices=["global", "stock"], default="global",
                    help="ddp: the loss's scaling (computed as nn.CrossEntropyLoss does, "
                         "dpscale's --ddp-impl torch, either way): global = dpscale's (gradient "
                         "of the global mean even for uneven shards), stock = PyTorch's usual "
                         "per-rank mean averaged over ranks")
    ap.add_argument("--model", default="small")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.0, help="default per optimizer, as dpscale's")
    ap.add_argument("--batch", type=int, default=0, help="global batch (default: preset's x gpus)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300,
                    help="ddp: seconds a rank waits for the others or for a collective (300)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="results")
    ap.add_argument("--name", default="torch-" + time.strftime("%Y%m%d-%H%M%S"))
    ap.add_argument("--dpscale", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "src", "dpscale"))
    ap.add_argument("--start-method", choices=["spawn", "forkserver"], default="spawn",
                    help="ddp: how torch.multiprocessing starts the ranks (forkserver: from a "
                         "server that imported PyTorch once, so they start sooner)")
    ap.add_argument("--save-params", metavar="FILE",
                    help="write the final parameters (dpscale's flat layout, float32) as .npy")
    return ap.parse_args(argv)


def setup(args):
    """Checks the arguments, the output folder, the presets and PyTorch;
    fills the defaults. What the arguments alone decide is refused before
    PyTorch is imported."""
    if args.gpus < 1:
        raise Usage(f"--gpus {args.gpus}: at least 1")
    if args.steps < 1 or args.warmup < 0:
        raise Usage("--steps must be at least 1 and --warmup at least 0")
    if args.mode == "dp" and args.ddp_loss != "global":
        raise Usage("--ddp-loss: applies to --mode ddp only")
    cpu_refusal(args)
    check_folder(os.path.join(args.out, args.name))
    try:
        table = presets(args.dpscale)
    except (OSError, subprocess.CalledProcessError) as e:
        raise Usage(f"--dpscale {args.dpscale}: cannot run `dpscale info` ({e}); build dpscale "
                    f"(ninja -C build) or point --dpscale at it") from None
    if args.model not in table:
        raise Usage(f"--model {args.model}: not one of {sorted(table)}")
    shape, per_gpu = table[args.model][:4], table[args.model][4]
    args.batch = args.batch or per_gpu * args.gpus
    if args.batch < args.gpus:
        raise Usage(f"--batch {args.batch}: fewer samples than the {args.gpus} devices")
    args.lr = args.lr or (0.01 if args.optimizer == "sgd" else 1e-3)
    try:
        import torch
    except ImportError as e:
        raise Usage(f"PyTorch is not installed for {sys.executable} ({e}): scripts/setup.sh "
                    f"--with-torch installs python3-torch") from None
    ncuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    args.device = args.device or ("cuda" if ncuda else "cpu")
    cpu_refusal(args)
    if args.device == "cuda" and ncuda < args.gpus:
        raise Usage(f"--device cuda --gpus {args.gpus}: PyTorch sees {ncuda} CUDA device(s) "
                    f"(PyTorch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                    f"use fewer --gpus, or --device cpu")
    args.start_time = utc_now()
    return shape


def cpu_refusal(args):
    if args.device != "cpu":
        return
    if args.mode == "dp" and args.gpus > 1:
        raise Usage(f"--mode dp --gpus {args.gpus} --device cpu: nn.DataParallel needs CUDA; "
                    f"on the CPU use --mode ddp (gloo, one process per rank) or --gpus 1")
    if args.precision == "bf16":
        raise Usage("--precision bf16 --device cpu: dpscale's host backend has no bf16 to "
                    "compare with; use fp32, or --device cuda")


def main(argv, prog=None):
    """The command line's work (argv without the program), exit status
    returned; callable in-process (the tests do)."""
    args = parse(argv)
    args.command_line = [prog or sys.argv[0]] + list(argv)
    try:
        shape = setup(args)
        if args.mode == "dp":
            run_single(args, shape)
        else:
            run_ddp(args, shape)
    except Usage as e:
        print(f"torch_reference.py: {e}", file=sys.stderr)
        return 2
    except RanksHung as e:
        print(f"torch_reference.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
