#!/usr/bin/env python3
"""ZeRO-1 against ddp: PyTorch's ZeroRedundancyOptimizer (torch_reference.py
--zero1 under torchrun, gloo on the CPU) trains as PyTorch's DDP and as
dpscale on the host backend, every step's loss and the final parameters;
and torch_reference.py's refusals of --zero1 and --fsdp.

usage: test_zero_reference.py DPSCALE CASE [ARGS...]
  zero1 GPUS OPT BATCH [spawn]  PyTorch ZeRO-1 on GPUS CPU ranks (torchrun; spawn:
                                torch_reference.py's own ranks) against PyTorch's
                                DDP and dpscale --mode DPSCALE_MODE; each rank's
                                optimizer steps a shard, the shards the model
  refusals                      --zero1 and --fsdp without --mode ddp, --fsdp with
                                fp16, both at once, and FSDP that does not import
                                (PyTorch 1.13 under Python 3.11) said as such
Sharded training is ddp's training: ZeRO-1 all-reduces the gradients as DDP
does and each rank steps the parameters it owns, so the losses are ddp's.
Exit 77 (skip) without numpy, PyTorch or torchrun (scripts/setup.sh
--with-torch installs python3-torch)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

# [gpus, optimizer, batch, how]: 3 ranks with 7 samples shard the batch and the tiny
# preset's 6 tensors unevenly; spawn: ranks started by torch_reference.py, not torchrun
ZERO = [["2", "sgd", "8"], ["2", "adamw", "8"], ["3", "sgd", "7"], ["3", "adamw", "7"],
        ["2", "adamw", "6", "spawn"]]
TESTS = [test("zero1 torch_reference refusals", DPSCALE, "refusals", suite=NOSAN, timeout=300)]
TESTS += [test("zero1 fidelity " + " ".join(c), DPSCALE, "zero1", *c, suite="torch",
               timeout=300) for c in ZERO]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import faulthandler
import os
import re
import shutil
import subprocess
import sys
import tempfile

from helpers import (SCRIPTS, dpscale, expect, expect_exit, need_torch, rows_of, run_case,
                     torch_ref, torchrun_single_node)

try:
    from dpstools import torch_model as tr
    from test_accum_reference import expect_same_training
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy)")
    sys.exit(77)

# dpscale's side of the comparison.
DPSCALE_MODE = "zero1"
STEPS = str(tr.FIDELITY_STEPS)
LR = {k: str(v) for k, v in tr.FIDELITY_LR.items()}
TINY_PARAMS = tr.param_count(2, 64, 4, 16)  # the tiny preset (src/model/model.c)
SHARD_LINE = re.compile(r"zero1 rank (\d+): ZeroRedundancyOptimizer steps (\d+) of (\d+) "
                        r"tensors \((\d+) of (\d+) parameters\)")


def dpscale_takes(binary, mode):
    """Whether dpscale run takes --mode MODE (its dry run, which refuses an unknown mode)."""
    p = subprocess.run([binary, "run", "--backend", "host", "--mode", mode, "--gpus", "2",
                        "--model", "tiny", "--dry-run"], capture_output=True, text=True,
                       timeout=300)
    return p.returncode == 0


def torchrun_zero1(torchrun, binary, args, out, name):
    """torch_reference.py --zero1 on the CPU under torchrun, one process a rank
    (Debian's torchrun under Python 3.11 needs -r 2 -t 2, as test_launch.py's);
    returns its stdout, every rank's."""
    gpus = args[args.index("--gpus") + 1]
    cmd = [torchrun, "-r", "2", "-t", "2", *torchrun_single_node(f"{name}-{os.getpid()}"),
           "--nproc_per_node", gpus,
           "--log_dir", os.path.join(out, f"{name}-logs"),
           os.path.join(SCRIPTS, "torch_reference.py"), "--device", "cpu", "--dpscale", binary,
           "--timeout", "120", *args, "--zero1", "--out", out, "--name", name]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    expect(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\nstdout:\n{p.stdout}\n"
           f"stderr:\n{p.stderr[-3000:]}")
    return p.stdout


def expect_shards(stdout, gpus):
    """One line a rank from ShardedRank: its optimizer steps fewer tensors
    than the model has, and the ranks' shards add up to the model."""
    lines = {int(m.group(1)): [int(g) for g in m.groups()[1:]]
             for m in SHARD_LINE.finditer(stdout)}
    expect(sorted(lines) == list(range(gpus)), f"ZeRO-1's shard lines of ranks {sorted(lines)}, "
           f"expected 0 to {gpus - 1}:\n{stdout}")
    mine = [v[0] for v in lines.values()]
    held = sum(v[2] for v in lines.values())
    expect(all(0 < n < v[1] for n, v in zip(mine, lines.values())),
           f"each rank's optimizer should step some but not all tensors: {lines}")
    expect(held == TINY_PARAMS and all(v[3] == TINY_PARAMS for v in lines.values()),
           f"the ranks' shards hold {held} parameters, the model {TINY_PARAMS}: {lines}")
    print(f"ZeRO-1 shards: {', '.join(f'rank {r} {v[2]}' for r, v in sorted(lines.items()))} "
          f"of {TINY_PARAMS} parameters")


def expect_same_run(out, mine, ref):
    """MINE and REF ran the same model, devices, batch, optimizer and rate (their
    config_ids may differ in the mode); returns MINE's config_id."""
    cols = ["model", "ngpus", "global_batch", "precision", "optimizer", "lr", "steps"]
    # read leniently: dpstools.results checks runs.csv's mode against the modes it knows
    a, b = (rows_of(os.path.join(out, n, "runs.csv"))[0] for n in (mine, ref))
    expect(a.get("status") == "ok", f"{out}/{mine}: status {a.get('status')}")
    differ = [c for c in cols if a.get(c) != b.get(c)]
    expect(not differ, f"{mine} ({a['config_id']}) and {ref} ({b['config_id']}) ran other "
           f"configurations: {', '.join(f'{c} {a[c]} and {b[c]}' for c in differ)}")
    return a["config_id"]


def case_zero1(binary, gpus, optimizer, batch, how="torchrun"):
    """PyTorch ZeRO-1 against PyTorch DDP and dpscale --mode DPSCALE_MODE: every
    step's loss within LOSS_TOL, the final parameters within PARAMS_TOL."""
    skip = need_torch()
    if skip:
        return skip
    args = ["--mode", "ddp", "--gpus", gpus, "--model", "tiny", "--optimizer", optimizer,
            "--lr", LR[optimizer], "--batch", batch, "--steps", STEPS, "--warmup", "0"]
    if DPSCALE_MODE == "ddp" and dpscale_takes(binary, "zero1"):
        print("note: dpscale takes --mode zero1 now: set DPSCALE_MODE = \"zero1\" in "
              "tests/test_zero_reference.py to compare it")
    torchrun = shutil.which("torchrun")
    if how != "spawn" and not torchrun:
        print("skipped: no torchrun (python3-torch; scripts/setup.sh --with-torch)")
        return 77
    with tempfile.TemporaryDirectory(prefix="dpscale-zero1-") as out:
        if how == "spawn":
            p = torch_ref(binary, *args, "--zero1", "--save-params", f"{out}/zero1.npy",
                          out=out, name="zero1")
            stdout = p.stdout
        else:
            stdout = torchrun_zero1(torchrun, binary, args + ["--save-params", f"{out}/zero1.npy"],
                                    out, "zero1")
        expect_shards(stdout, int(gpus))
        torch_ref(binary, *args, "--save-params", f"{out}/ddp.npy", out=out, name="ddp")
        mine = ["--mode", DPSCALE_MODE] + args[2:]
        dpscale(binary, "run", *mine, "--save-params", f"{out}/dpscale.npy", out=out,
                name="dpscale", check_rc=0)
        cid = expect_same_run(out, "zero1", "ddp")
        expect_same_training(out, "zero1", "ddp", cid, optimizer, "PyTorch's ZeRO-1 no longer "
                             "trains as its DDP: look at torch_reference.py's ShardedRank (the "
                             "optimizer's class and hyper-parameters it passes on)")
        dcid = expect_same_run(out, "dpscale", "zero1")
        expect_same_training(out, "dpscale", "zero1", dcid, optimizer,
                             f"dpscale --mode {DPSCALE_MODE} does not train as PyTorch's ZeRO-1")
    return 0


def case_refusals(binary):
    """--zero1 and --fsdp refused with the reason and what to do; FSDP that
    does not import is said to (PyTorch 1.13 under Python 3.11)."""
    cases = [(["--zero1"], "--zero1: shards ddp's training", "--mode ddp"),
             (["--fsdp", "--mode", "dp"], "--fsdp: shards ddp's training", "--mode ddp"),
             (["--fsdp", "--mode", "ddp", "--precision", "fp16", "--device", "cuda"],
              "ShardedGradScaler", "bf16 or fp32"),
             (["--zero1", "--fsdp", "--mode", "ddp"], "not allowed with argument")]
    with tempfile.TemporaryDirectory(prefix="dpscale-zero1-") as out:
        for args, *needles in cases:
            p = torch_ref(binary, "--model", "tiny", *args, out=out, name="x", check_rc=None)
            expect_exit(p, 2, *needles)
        if need_torch():
            return 0
        p = subprocess.run(["/usr/bin/python3", "-c", "import torch.distributed.fsdp"],
                           capture_output=True, text=True, timeout=120)
        if p.returncode == 0:
            print("FSDP imports here: its refusal is not reached")
            return 0
        p = torch_ref(binary, "--model", "tiny", "--mode", "ddp", "--fsdp", out=out, name="x",
                      check_rc=None)
        expect_exit(p, 2, "--fsdp: PyTorch", "FSDP does not import under Python", "--zero1")
        print(f"refused: {p.stderr.strip()[:200]}")
    return 0


CASES = {"zero1": case_zero1, "refusals": case_refusals}


if __name__ == "__main__":
    binary, case, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    faulthandler.dump_traceback_later(240, exit=True)
    sys.exit(run_case(" ".join(["zero_reference", case, *rest]), CASES[case], binary, *rest))
