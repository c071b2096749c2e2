#!/usr/bin/env python3
"""scripts/torch_reference.py against dpscale: the initialisation and data
bit for bit (numpy only), and on the CPU (PyTorch) the loss at every step of
dpscale's host backend, the final parameters of PyTorch's ddp against its
single device, and a PyTorch results folder read, drawn and compared as a
dpscale one.

usage: test_torch_reference.py DPSCALE CASE [ARGS...]
  generator                     numpy's copy of dpscale's generator (needs numpy)
  fidelity MODE GPUS OPT BATCH [stock] [params]
                                dpscale --backend host and PyTorch --device cpu:
                                the same loss at every step (ddp: dpscale's
                                --ddp-impl lean too); stock: --ddp-loss stock
                                too (differs from dpscale's with uneven shards,
                                agrees with even ones); params: PyTorch's ddp ends
                                with its single device's parameters
  results                       torch_reference.py's folder through plot.py and
                                compare.py, and its refusals
  layout                        --module's SE and DenseNet-style blocks: dpscale's loss (pixels=)
  hung                          a rank that outlives another past the timeout is
                                killed, and said
  module                        --module: the user's nn.Module (tests/model_examples.py)
                                with dpscale's initial parameters and samples, under dp
                                and DDP (FSDP where it imports, else refused naming the
                                version), beside dpscale's run of its model file in
                                summary.md; its refusals
Exit 77 (skip) without numpy, or without PyTorch for the cases that train
(scripts/setup.sh --with-torch installs python3-torch)."""
from listing import DPSCALE, FIXTURES, exit_if_listing, test

HANG_S = 300  # a case's hang guard (faulthandler): it prints every thread's stack and fails

# PyTorch on the CPU against the host backend (exit 77, skipped, without python3-torch:
# scripts/setup.sh --with-torch); fidelity's [mode, gpus, optimizer, batch, extra checks...]:
# stock = --ddp-loss stock too, params = PyTorch's ddp against its single device
FIDELITY = [["dp", "1", "sgd", "8"], ["dp", "1", "adamw", "8"],
            ["ddp", "2", "sgd", "3", "stock"], ["ddp", "2", "adamw", "8", "stock"],
            ["ddp", "4", "sgd", "10", "params"], ["ddp", "4", "adamw", "10", "params"]]
TESTS = [test("torch_reference generator", DPSCALE, "generator", suite="scripts")]
TESTS += [test("torch fidelity " + " ".join(c), DPSCALE, "fidelity", *c, suite="torch",
               timeout=HANG_S + 60) for c in FIDELITY]
TESTS += [test("torch hung ranks", DPSCALE, "hung", suite="torch", timeout=HANG_S + 60),
          test("torch results", DPSCALE, "results", FIXTURES + "/results-host", suite="torch",
               timeout=HANG_S + 60),
          test("torch module", DPSCALE, "module", suite="torch", timeout=HANG_S + 60),
          test("torch layout", DPSCALE, "layout", suite="torch", timeout=HANG_S + 60)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import faulthandler
import os
import re
import signal
import sys
import tempfile
import time

from helpers import (Failure, compare_losses, copy_fixture, dpscale, dpsresults, expect,
                     expect_exit, losses, need_torch, params_diff, png_size, read_folder,
                     run_case, script, torch_ref)

try:
    import numpy as np
    from dpstools import torch_model as tr, torch_train
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy)")
    sys.exit(77)

# Relative tolerance on the loss at every step and on the final parameters
# (max |p - p_ref| / max |p_ref|, as dpscale's check_max_rel_diff). dpscale
# and PyTorch compute the same fp32 operations in other summation orders:
# OpenBLAS's sgemm against PyTorch's GEMM, dpscale's loops for the bias
# sums, the cross-entropy and the loss against PyTorch's vectorised
# reductions, dpscale's ring all-reduce against gloo's, AdamW's bias
# corrections with powf against Python's pow; each ~1 ulp (6e-8). Measured
# on this VM (tiny and small presets, dp 1 and ddp 2 and 4, SGD and AdamW,
# 20 to 200 steps, default and the learning rates below): every step's loss
# agreed to dpscale's last printed digit (6 decimals: |diff| <= 1e-6,
# relative <= 5.6e-7); PyTorch's ddp against its single device: parameters
# within 6e-8 (SGD) and 2.2e-7 (AdamW) at the default rates, 1.8e-7 and
# 6.4e-7 at the rates below. 1e-5 leaves a margin of 15 or more
# (dpstools.torch_model.LOSS_TOL, which scripts/device-check.sh applies on GPUs too).
TOL = tr.LOSS_TOL
# Final parameters (dpscale's --save-params against PyTorch's): SGD within
# TOL; AdamW within PARAMS_TOL_ADAMW, dpscale's own --check tolerance for it:
# dividing each update by its running RMS turns the rounding of near-zero
# gradients into updates of up to the learning rate (measured: 1.1e-5).
PARAMS_TOL = {"sgd": TOL, "adamw": 1e-4}
# The loss of every step, each on a fresh batch, sees the parameters too.
# At the default learning rates 10 steps
# moved the parameters too little for it to see a wrong hyper-parameter
# (momentum 0.91, AdamW beta2 0.99, eps 1e-6 or twice the weight decay all
# stayed under 1e-5); at ten times those rates 20 steps see each of them
# (5.5e-4, 9.9e-4, 1.4e-4, 2.8e-4) and a weight decay 10 % off (2.8e-5),
# while a correct run still agrees to the last digit. Stock DDP's averaging
# of per-shard means with uneven shards moves the loss by more than 1e-4.
STEPS = str(tr.FIDELITY_STEPS)  # these two: torch_model.FIDELITY_*
LR = {k: str(v) for k, v in tr.FIDELITY_LR.items()}


def case_generator(binary):
    # golden values, as asserted for the C generator in tests/unit/test_backend.c
    got = tr.uniform(1234, 1, [0, 7919])
    expect(got[0] == np.float32(-0.651825905) and got[1] == np.float32(0.878929496),
           f"uniform(1234, 1, ...) = {got}")
    expect(tr.uniform(42, 2 + (5 << 8), [123456789])[0] == np.float32(0.278357625),
           "uniform(42, ...) differs")
    # presets come from dpscale itself; the parameter count agrees with its own
    table = tr.presets(binary)
    expect(table.get("tiny") == (2, 64, 4, 16, 8) and tr.param_count(*table["tiny"][:4]) == 9360,
           f"presets: {table.get('tiny')}")
    # initialisation bound and labels as model_init_params / model_make_batch
    p = tr.init_params(table["tiny"][:4], 1234)
    expect(len(p) == 9360 and (np.abs(p) <= 1 / 8).all() and p[0] == np.float32(-0.651825905 / 8),
           f"init_params: {p[:3]}")
    x, y = tr.make_batch(table["tiny"][:4], 1234, 0, 8)
    expect(x.shape == (8, 64) and (y == np.argmax(x[:, :16], axis=1)).all(), "make_batch")
    # a rank's shard is its rows of the global batch
    xs, ys = tr.make_batch(table["tiny"][:4], 1234, 3, 5, row0=2)
    xa, ya = tr.make_batch(table["tiny"][:4], 1234, 3, 7)
    expect((xs == xa[2:]).all() and (ys == ya[2:]).all(), "make_batch(row0=2) is not rows 2..6")
    expect(tr.shards(10, 4) == [3, 3, 2, 2] and tr.shards(7, 2) == [4, 3], "shards")


def case_fidelity(binary, mode, gpus, optimizer, batch, *checks):
    """The loss of every step equal within TOL between dpscale's host backend
    and PyTorch on the CPU (same model, initialisation, data, optimizer)."""
    skip = need_torch()
    if skip:
        return skip
    common = ["--mode", mode, "--gpus", gpus, "--model", "tiny", "--optimizer", optimizer,
              "--lr", LR[optimizer], "--batch", batch, "--steps", STEPS, "--warmup", "0"]
    with tempfile.TemporaryDirectory(prefix="dpscale-torch-") as out:
        # dpscale: --check also trains on one device and compares the final parameters
        check = ["--check"] if mode == "ddp" else []
        saved = os.path.join(out, "dpscale.npy")
        dpscale(binary, "run", *common, *check, "--save-params", saved, out=out, name="dpscale",
                check_rc=0)
        cid, mine = losses(os.path.join(out, "dpscale"))
        if check:
            run = dpsresults.read_csv(os.path.join(out, "dpscale", "runs.csv"), ["check"])[0]
            expect(run["check"] == "pass", f"dpscale {cid} --check: {run['check']} "
                   f"({run['check_max_rel_diff']}): dpscale's ddp does not train as one device")
        params = os.path.join(out, "torch.npy")
        torch_ref(binary, *common, "--save-params", params, out=out, name="torch")
        tcid, ref = losses(os.path.join(out, "torch"))
        expect(tcid == cid, f"PyTorch's config_id {tcid} is not dpscale's {cid}")
        worst, k = compare_losses(mine, ref, cid)
        print(f"{cid}: {len(ref)} steps, largest relative loss difference {worst:.3g} "
              f"(step {k}: dpscale {mine[k]}, PyTorch {ref[k]})")
        expect(worst <= TOL, f"{cid}: step {k}'s loss is {mine[k]} in dpscale "
               f"({out}/dpscale/steps.csv) and {ref[k]} in PyTorch ({out}/torch/steps.csv), "
               f"relative difference {worst:.3g} > {TOL}: the host backend no longer trains as "
               f"PyTorch does (look at the model, the loss scaling or the optimizer of the "
               f"change)")
        if mode == "ddp":  # the fused loss trains as nn.CrossEntropyLoss's three operations do
            dpscale(binary, "run", *common, "--ddp-impl", "lean", out=out, name="lean", check_rc=0)
            lcid, lean = losses(os.path.join(out, "lean"))
            worst, k = compare_losses(lean, ref, lcid)
            print(f"{lcid}: largest relative loss difference from PyTorch {worst:.3g} (step {k})")
            expect(worst <= TOL, f"{lcid}: step {k}'s loss is {lean[k]} with dpscale's fused loss "
                   f"({out}/lean/steps.csv) and {ref[k]} in PyTorch, relative difference "
                   f"{worst:.3g} > {TOL}")
        d = params_diff(np.load(saved), np.load(params))
        print(f"{cid}: final parameters, dpscale against PyTorch: {d:.3g}")
        expect(d <= PARAMS_TOL[optimizer], f"{cid}: dpscale's final parameters ({saved}) are "
               f"{d:.3g} (max |diff| / max |p|) away from PyTorch's ({params}), above "
               f"{PARAMS_TOL[optimizer]}")
        if "params" in checks:
            single = os.path.join(out, "single.npy")
            one = ["--mode", "dp", "--gpus", "1"] + common[4:]
            torch_ref(binary, *one, "--save-params", single, out=out, name="single")
            d = params_diff(np.load(params), np.load(single))
            print(f"{cid}: PyTorch's final parameters against its single device: {d:.3g}")
            expect(d <= TOL, f"{cid}: PyTorch's ddp ends {d:.3g} (max |diff| / max |p|) away "
                   f"from its single device, above {TOL}: torch_reference.py's ddp loss scaling "
                   f"(--ddp-loss global) no longer gives the global mean's gradient")
        if "stock" in checks:
            torch_ref(binary, *common, "--ddp-loss", "stock", out=out, name="stock")
            scid, stock = losses(os.path.join(out, "stock"))
            expect(scid == cid + "-stockloss", f"--ddp-loss stock is labelled {scid}, expected "
                   f"{cid}-stockloss")
            even = int(batch) % int(gpus) == 0
            worst, k = compare_losses(stock, mine, scid)
            print(f"{scid} ({'even' if even else 'uneven'} shards): largest relative loss "
                  f"difference from dpscale {worst:.3g} (step {k})")
            if even:
                expect(worst <= TOL, f"{scid}: with even shards stock DDP's loss is dpscale's, "
                       f"but step {k} differs by {worst:.3g} > {TOL} ({out}/stock/steps.csv)")
            else:
                expect(worst > 10 * TOL, f"{scid}: with uneven shards stock DDP (mean of per-"
                       f"shard means) should train otherwise than dpscale's global mean, but "
                       f"every step is within {worst:.3g}: is --ddp-loss stock ignored?")
    return 0


def case_results(binary, fixture):
    """A PyTorch folder has every column of dpsresults, and plot.py (alone and
    beside a dpscale folder) and compare.py take it; bad uses are refused."""
    with tempfile.TemporaryDirectory(prefix="dpscale-torch-") as out:
        # refused before PyTorch is needed
        p = torch_ref(binary, "--mode", "dp", "--gpus", "2", out=out, name="x", check_rc=None)
        expect_exit(p, 2, "nn.DataParallel needs CUDA", "--mode ddp")
        dps = copy_fixture(fixture, out, "dpscale")
        p = torch_ref(binary, "--model", "tiny", out=out, name="dpscale", check_rc=None)
        expect_exit(p, 2, "holds dpscale results", "--name")
        skip = need_torch()
        if skip:
            return skip
        args = ["--model", "tiny", "--steps", "4", "--warmup", "1"]
        torch_ref(binary, *args, out=out, name="torch")
        torch_ref(binary, *args, "--mode", "ddp", "--gpus", "2", "--batch", "7",
                  out=out, name="torch")  # spawn, the default
        folder = os.path.join(out, "torch")
        runs, devices, steps, phases, meta = read_folder(folder, torch=True)
        expect([r["config_id"] for r in runs] == ["dp-tiny-fp32-sgd-g1-b8",
                                                  "ddp-tiny-fp32-sgd-g2-b7-bk25"],
               f"runs.csv: {[r['config_id'] for r in runs]}")
        expect(all(r["backend"] == "torch" for r in runs) and meta["backend"] == "torch",
               "the backend is not torch")
        ddp = [p for p in phases if p["config_id"].startswith("ddp") and p["device"] == "1"]
        got = {p["phase"]: float(p["median_ms"]) for p in ddp}
        expect(all(got[k] > 0 for k in ("forward", "loss", "backward", "allreduce",
                                        "optimizer")), f"rank 1's phases: {got}")
        expect(all(p["python_overhead_ms"] == "" for p in phases),
               "python_overhead_ms filled on the CPU, where there is no device time")
        p = script("plot.py", folder, "--out", os.path.join(out, "plots"))
        expect_exit(p, 0)
        for name in ("scaling", "efficiency", "gpu0_imbalance", "phases"):
            png_size(os.path.join(out, "plots", name + ".png"))
        p = script("compare.py", folder, folder)
        expect_exit(p, 0)
        expect("ddp-tiny-fp32-sgd-g2-b7-bk25 | busbw_gbps" in p.stdout, p.stdout)
        # beside a dpscale folder of the same configuration
        p = script("plot.py", dps, "--torch", folder, "--out", os.path.join(out, "beside"))
        expect_exit(p, 0)
        with open(os.path.join(out, "beside", "summary.md")) as f:
            md = f.read()
        expect("## Beside PyTorch" in md and "| dp-tiny-fp32-sgd-g1-b8 | step |" in md and
               "| dp-tiny-fp32-sgd-g1-b8 | forward |" in md,
               f"summary.md does not set PyTorch beside dpscale:\n{md}")
        # another run of the same configuration: comparable (same machine, versions)
        torch_ref(binary, *args, out=out, name="again")
        p = script("compare.py", folder, os.path.join(out, "again"), "--warn-only")
        expect_exit(p, 0)
        expect("dp-tiny-fp32-sgd-g1-b8 | step_ms" in p.stdout, p.stdout)
    return 0


def case_module(binary):
    """torch_reference.py --module model_examples:small_resnet with its model
    file: the module starts from dpscale's parameters of the file and eats
    dpscale's samples (in-process, bit for bit); dp on one device and ddp on
    two CPU ranks write the file's config_ids, meta.json names the module;
    --fsdp runs, or is refused naming PyTorch's version where FSDP does not
    import; plot.py sets PyTorch itself beside dpscale's run of the file;
    without the file the module's own name and initialisation; refusals."""
    skip = need_torch()
    if skip:
        return skip
    import torch
    from dpstools import torch_graph, torch_module
    model = os.path.join(FIXTURES, "models", "small-resnet.model")
    spec = "model_examples:small_resnet"
    graph = torch_graph.read(model)
    m = torch_module.Module(torch, spec, (3, 8, 8), False, graph)
    expect((m.name, m.rows, m.classes, m.params) == ("small-resnet", 1, 10, graph.params),
           f"the module as read: {m.columns()}")
    expect(np.array_equal(m.flat(m.module(torch, m.init(7))), graph.init(7)),
           "the module does not start from dpscale's parameters of its file")
    (x, y), (gx, gy) = m.batch(7, 3, 5, 2), graph.batch(7, 3, 5, 2)
    expect(x.shape == (5, 3, 8, 8) and  # dpscale reads a sample as 8 x 8 pixels of 3 channels
           np.array_equal(x.transpose(0, 2, 3, 1).reshape(5, -1), gx) and
           np.array_equal(y, gy), "the module's samples are not dpscale's")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="dpscale-torch-") as out:
        def ref(*args, name="pt", rc=0):
            p = script("torch_reference.py", "--device", "cpu", "--out", out, "--name", name,
                       "--steps", "3", "--warmup", "1", "--timeout", "120", *args, env=env,
                       timeout=240)
            expect(rc is None or p.returncode == rc,
                   f"torch_reference.py {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
            return p
        ref("--module", spec, "--model", model)
        ref("--module", spec, "--model", model, "--mode", "ddp", "--gpus", "2",
            "--start-method", "forkserver")
        runs, _, _, _, meta = read_folder(os.path.join(out, "pt"), torch=True)
        expect([r["config_id"] for r in runs] == ["dp-small-resnet-fp32-sgd-g1-b8",
                                                  "ddp-small-resnet-fp32-sgd-g2-b16-bk25"],
               f"runs.csv: {[r['config_id'] for r in runs]}")
        expect(meta["module"] == {"spec": spec, "model_file": model} and
               f"the nn.Module {spec} itself" in meta["note"], f"meta.json: {meta}")
        p = ref("--module", spec, "--model", model, "--mode", "ddp", "--gpus", "2", "--fsdp",
                "--start-method", "forkserver", name="fsdp", rc=None)
        expect(p.returncode == 0 or (p.returncode == 2 and
                                     f"PyTorch {torch.__version__}'s FSDP does not import" in
                                     p.stderr), f"--fsdp: exit {p.returncode}\n{p.stderr}")
        dpscale(binary, "run", "--model", model, "--steps", "3", "--warmup", "1", out=out,
                name="dps", check_rc=0)
        p = script("plot.py", os.path.join(out, "dps"), "--torch", os.path.join(out, "pt"),
                   "--out", os.path.join(out, "beside"))
        expect_exit(p, 0)
        with open(os.path.join(out, "beside", "summary.md")) as f:
            md = f.read()
        expect(re.search(r"- dp-small-resnet-fp32-sgd-g1-b8: PyTorch itself: [\d.]+ ms; "
                         r"dpscale's model of it: [\d.]+ ms", md), f"summary.md:\n{md}")
        ref("--module", spec, "--input", "3x8x8", name="own")
        runs, _, _, _, meta = read_folder(os.path.join(out, "own"), torch=True)
        expect(runs[0]["config_id"] == "dp-small_resnet-fp32-sgd-g1-b8" and
               "torch.manual_seed(1234)" in meta["note"], f"without the file: {runs[0]}")
        tagger = os.path.join(FIXTURES, "models", "tagger.model")
        for args, needle in ((["--module", spec], "give one sample's --input SHAPE"),
                             (["--module", spec, "--model", tagger], "not exported from this"),
                             (["--module", spec, "--model", "tiny"], "not a preset"),
                             (["--input", "3x8x8"], "give --module SPEC"),
                             (["--module", "model_examples:nonesuch", "--input", "3"],
                              "nonesuch")):
            expect_exit(ref(*args, name="refused", rc=None), 2, needle)
    return 0


def case_layout(binary):
    """The pixel layout's mul and cat (pixels=) and a depthwise convolution:
    model_examples' small_se and small_dense, exported, give dpscale's host
    backend the loss of their real modules (torch_reference.py --module,
    from the file's parameters) at every step, within TOL."""
    skip = need_torch()
    if skip:
        return skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="dpscale-layout-") as out:
        for name, needle in (("small_se", "op mul mul in=dw from=sigmoid pixels=36"),
                             ("small_dense", "pixels=36")):
            spec, model = f"model_examples:{name}", os.path.join(out, f"{name}.model")
            expect_exit(script("model_export.py", spec, "--input", "3x6x6", "--out", model,
                               env=env, timeout=240), 0)
            with open(model) as f:
                expect(needle in f.read(), f"{model}: no '{needle}' line")
            dpscale(binary, "run", "--model", model, "--steps", "3", "--warmup", "1", out=out,
                    name=f"dps-{name}", check_rc=0)
            p = script("torch_reference.py", "--device", "cpu", "--out", out, "--name",
                       f"pt-{name}", "--steps", "3", "--warmup", "1", "--module", spec,
                       "--model", model, env=env, timeout=240)
            expect_exit(p, 0)
            cid, mine = losses(os.path.join(out, f"dps-{name}"))
            _, ref = losses(os.path.join(out, f"pt-{name}"))
            worst, k = compare_losses(mine, ref, cid)
            print(f"{cid}: largest relative loss difference from the module {worst:.3g}")
            expect(worst <= TOL, f"{cid}: step {k}'s loss is {mine[k]} in dpscale, {ref[k]} in "
                   f"the module: the pixel layout's mul, cat or grouped im2col disagrees")
    return 0


JOIN_S = 120  # the hang guard of a killed rank's join


def sleeper(rank):
    """Rank 0 ends at once, rank 1 never does (until killed)."""
    if rank:
        time.sleep(600)


def case_hung(binary):
    """torch_reference.py's wait for its ranks: once one has ended, the
    others have --timeout and the grace to end, or are killed: rank 1, which
    would sleep 600 s, ends by SIGKILL and join_ranks says so."""
    skip = need_torch()
    if skip:
        return skip
    import torch.multiprocessing as mp
    ranks = mp.start_processes(sleeper, nprocs=2, start_method="fork", join=False)
    try:
        torch_train.join_ranks(ranks, 0.5, grace_s=1)
        raise Failure("join_ranks returned while rank 1 still slept")
    except torch_train.RanksHung as e:
        expect("ranks [1]" in str(e) and "killed" in str(e), f"message: {e}")
    for p in ranks.processes:
        p.join(timeout=JOIN_S)  # at once after the kill; the guard only against a hang
    expect(not any(p.is_alive() for p in ranks.processes),
           f"rank 1 still alive {JOIN_S} s after join_ranks killed it: hung")
    codes = [p.exitcode for p in ranks.processes]
    expect(codes == [0, -signal.SIGKILL], f"the ranks' exit codes {codes}, expected [0, "
           f"{-signal.SIGKILL}]: rank 0 ended, rank 1 killed by join_ranks")
    return 0


CASES = {"generator": case_generator, "fidelity": case_fidelity, "results": case_results, "module": case_module, "layout": case_layout,
         "hung": case_hung}


if __name__ == "__main__":
    binary, case, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    # a run that hangs (a rank that never ends) prints where every thread is
    # and fails, before meson's timeout kills it without a word
    faulthandler.dump_traceback_later(HANG_S, exit=True)
    sys.exit(run_case(" ".join(["torch_reference", case, *rest]), CASES[case], binary, *rest))
