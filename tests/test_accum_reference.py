#!/usr/bin/env python3
"""Gradient accumulation, GradScaler and half precision on the host against
their references: dpstools.grad_scaler against GradScaler's rules, PyTorch's
(torch_reference.py) accumulation and bf16 against dpscale's host backend,
and dpscale's fp16 loss scale against grad_scaler.

usage: test_accum_reference.py DPSCALE CASE [ARGS...]
  scaler                        grad_scaler.scale_sequence against GradScaler's
                                documented rules and against PyTorch's own
                                torch._amp_update_scale_ where it runs: PyTorch
                                1.13 has no CPU kernel for it (NotImplementedError
                                on CPU tensors), so on a machine without CUDA the
                                rules alone check it, as update() transcribes
                                ATen's amp_update_scale_cuda_kernel
  refusals                      torch_reference.py's refusals of --accum, --no-sync
                                and fp16 on the CPU (before PyTorch is imported)
  bf16_emulation                torch_model.autocast_bf16 (PyTorch on the CPU)
                                against a numpy transcription of model.c's
                                forward_bf16 and backward_bf16, and torch.autocast
                                on the CPU against it (needs PyTorch)
  torch_accum MODE GPUS OPT BATCH [syncall]
                                PyTorch with --accum 4 trains as PyTorch on one
                                device without it (needs PyTorch)
  accum MODE GPUS OPT BATCH [syncall]
                                dpscale --accum 4 against PyTorch --accum 4: the
                                loss of every step and the final parameters
  bf16 OPT                      dpscale --precision bf16 --backend host against
                                PyTorch --device cpu --precision bf16, one device
  overflow MODE                 dpscale --precision fp16 --inject-overflow 3
                                --growth-interval 4 on 2 devices: every rank's
                                loss_scale and skipped as grad_scaler's
Exit 77 (skip) without numpy, or without PyTorch for the cases that need it
(scripts/setup.sh --with-torch installs python3-torch)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

# [mode, gpus, optimizer, batch, extra checks]: 16 samples on 2 ranks in 4 micro-batches;
# syncall = --no-sync off (every micro-step all-reduced)
ACCUM = [["ddp", "2", "sgd", "16"], ["ddp", "2", "adamw", "16"],
         ["ddp", "2", "sgd", "16", "syncall"], ["ddp", "2", "adamw", "16", "syncall"],
         ["dp", "1", "sgd", "16"]]
TESTS = [test("accum grad_scaler model", DPSCALE, "scaler", suite=NOSAN, timeout=300),
         test("accum torch_reference refusals", DPSCALE, "refusals", suite=NOSAN, timeout=300),
         test("accum bf16 emulation", DPSCALE, "bf16_emulation", suite="torch", timeout=300)]
TESTS += [test("accum torch " + " ".join(c), DPSCALE, "torch_accum", *c, suite="torch",
               timeout=300) for c in ACCUM]
TESTS += [test("accum fidelity " + " ".join(c), DPSCALE, "accum", *c, suite="torch",
               timeout=300) for c in ACCUM]
TESTS += [test("bf16 fidelity " + o, DPSCALE, "bf16", o, suite="torch", timeout=300)
          for o in ("sgd", "adamw")]
TESTS += [test("fp16 overflow " + m, DPSCALE, "overflow", m, timeout=300) for m in ("dp", "ddp")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import faulthandler
import math
import os
import random
import sys
import tempfile

from helpers import (compare_losses, dpscale, dpsresults, expect, expect_exit, losses,
                     need_torch, params_diff, run_case, torch_ref)

try:
    import numpy as np
    from dpstools import grad_scaler, torch_model as tr
except ImportError as e:
    print(f"skipped: {e} (install python3-numpy)")
    sys.exit(77)

# fp32 with --accum: accumulation adds N micro-batches' gradients where one
# batch's were summed at once, another summation order (~1 ulp, 6e-8) on
# each side, as the rest of test_torch_reference.py's argument for LOSS_TOL.
TOL = tr.LOSS_TOL
PARAMS_TOL = {"sgd": TOL, "adamw": 1e-4}  # as test_torch_reference.py's (AdamW: its --check's)
STEPS = str(tr.FIDELITY_STEPS)
LR = {k: str(v) for k, v in tr.FIDELITY_LR.items()}
ACCUM_N = "4"
TINY = (2, 64, 4, 16)  # the tiny preset's layers, width, tokens, classes (src/model/model.c)


# --- grad_scaler against GradScaler's rules -------------------------------

def documented(steps, overflow, init_scale, growth_interval):
    """GradScaler's documentation, counted rather than stepped: a step uses
    init_scale halved once per earlier overflow and doubled once per
    growth_interval clean steps in a row since the scale last changed."""
    out, scale, clean = [], init_scale, 0
    for s in range(steps):
        out.append((scale, s in overflow))
        if s in overflow:
            scale, clean = scale / 2, 0
        else:
            clean += 1
            if clean % growth_interval == 0:
                scale, clean = scale * 2, 0
    return out


def aten_oracle():
    """A device where torch._amp_update_scale_ runs (CUDA, or a CPU kernel
    that later PyTorch has), else None with the reason printed."""
    try:
        import torch
    except ImportError:
        print("no oracle: PyTorch is not installed")
        return None
    devices = (["cuda"] if torch.cuda.is_available() else []) + ["cpu"]
    for dev in devices:
        try:
            torch._amp_update_scale_(torch.ones(1, device=dev),
                                     torch.zeros(1, dtype=torch.int32, device=dev),
                                     torch.zeros(1, device=dev), 2.0, 0.5, 2)
            return torch, dev
        except (NotImplementedError, RuntimeError) as e:
            why = str(e).splitlines()[0][:120]
            print(f"no oracle on {dev} (PyTorch {torch.__version__}): {why}")
    return None


def aten_sequence(oracle, steps, overflow, init_scale, growth_interval):
    """[(scale used, skipped)] stepped through PyTorch's own torch._amp_update_scale_."""
    torch, dev = oracle
    scale = torch.full((1,), init_scale, dtype=torch.float32, device=dev)
    tracker = torch.zeros(1, dtype=torch.int32, device=dev)
    out = []
    for s in range(steps):
        out.append((scale.item(), s in overflow))
        found = torch.full((1,), 1.0 if s in overflow else 0.0, device=dev)
        torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, growth_interval)
    return out


def case_scaler(binary):
    """scale_sequence against hand-worked sequences, the documented rules
    over random overflow patterns, and PyTorch's kernel where it runs."""
    got = grad_scaler.scale_sequence(12, {3}, init_scale=1024, growth_interval=4)
    want = [(1024.0, False)] * 3 + [(1024.0, True)] + [(512.0, False)] * 4 + [(1024.0, False)] * 4
    expect(got == want, f"overflow at step 3, growth interval 4: {got}, expected {want}")
    got = [s for s, _ in grad_scaler.scale_sequence(6, (), init_scale=1, growth_interval=2)]
    expect(got == [1, 1, 2, 2, 4, 4], f"growth every 2 clean steps: {got}")
    got = [s for s, _ in grad_scaler.scale_sequence(4, {0, 1, 2}, init_scale=8, growth_interval=1)]
    expect(got == [8, 4, 2, 1], f"three overflows in a row: {got}")
    top = 2.0 ** 127  # 2**128 is inf in float32: GradScaler keeps the scale
    got = grad_scaler.scale_sequence(3, (), init_scale=top, growth_interval=1)
    expect([s for s, _ in got] == [top] * 3, f"growth past float32's range: {got}")
    expect(grad_scaler.scale_sequence(1, (), init_scale=0.1)[0][0] == float(np.float32(0.1)),
           "init_scale is not kept as float32, as GradScaler's tensor")
    for bad in ({"growth_interval": 0}, {"init_scale": 0.0}, {"init_scale": math.inf}):
        try:
            grad_scaler.scale_sequence(3, (), **bad)
            expect(False, f"scale_sequence took {bad}")
        except ValueError as e:
            expect("grad_scaler:" in str(e), f"{bad}: message {e}")
    rng = random.Random(27)
    patterns = [(rng.choice([1, 2, 3, 5]), {s for s in range(40) if rng.random() < p})
                for p in (0.0, 0.05, 0.2, 0.5) for _ in range(5)]
    for gi, overflow in patterns:
        got = grad_scaler.scale_sequence(40, overflow, init_scale=65536.0, growth_interval=gi)
        want = documented(40, overflow, 65536.0, gi)
        expect(got == want, f"growth interval {gi}, overflows {sorted(overflow)}: {got} "
               f"against the documented rules' {want}")
    oracle = aten_oracle()
    if oracle is None:
        print(f"{len(patterns)} patterns against the documented rules; PyTorch's kernel not run")
        return 0
    for gi, overflow in patterns:
        got = grad_scaler.scale_sequence(40, overflow, init_scale=65536.0, growth_interval=gi)
        want = aten_sequence(oracle, 40, overflow, 65536.0, gi)
        expect(got == want, f"growth interval {gi}, overflows {sorted(overflow)}: {got} "
               f"against torch._amp_update_scale_'s {want}")
    print(f"{len(patterns)} patterns against the rules and torch._amp_update_scale_ on "
          f"{oracle[1]}")
    return 0


# --- torch_reference.py's refusals -----------------------------------------

def case_refusals(binary):
    """What torch_reference.py refuses of accumulation and precision, each
    with what to do, before it imports PyTorch."""
    cases = [(["--precision", "fp16"], "CPU autocast", "--device cuda"),
             (["--accum", "0"], "--accum 0", "at least 1"),
             (["--no-sync", "off", "--accum", "2"], "dp has no no_sync", "--mode ddp"),
             (["--mode", "ddp", "--gpus", "2", "--no-sync", "off"], "one micro-step", "--accum N"),
             (["--mode", "ddp", "--gpus", "2", "--batch", "12", "--accum", "4"],
              "equal parts", "multiple of 8"),
             (["--init-scale", "1024"], "--precision fp16 only", "not fp32")]
    with tempfile.TemporaryDirectory(prefix="dpscale-accum-") as out:
        for args, *needles in cases:
            p = torch_ref(binary, "--model", "tiny", *args, out=out, name="x", check_rc=None)
            expect_exit(p, 2, *needles)
    return 0


# --- autocast_bf16 against model.c's bf16 maths ---------------------------

def bf16(a):
    """float32 -> bf16 -> float32, round to nearest even (dps_f32_to_bf16)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


ERF = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    x = x.astype(np.float64)
    return (0.5 * x * (1 + ERF(x / math.sqrt(2)))).astype(np.float32)


def gelu_grad(x):
    x = x.astype(np.float64)
    return (0.5 * (1 + ERF(x / math.sqrt(2))) +
            x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)).astype(np.float32)


def layers(shape, flat):
    """[(W [in, out], b)] of dpscale's flat buffer."""
    L, D, T, C = shape
    out, off = [], 0
    for li in range(L + 1):
        n = D if li < L else C
        out.append((flat[off:off + D * n].reshape(D, n), flat[off + D * n:off + D * n + n]))
        off += D * n + n
    return out


def mlp_bf16(shape, flat, x, y):
    """(loss, flat gradient) of one batch as model.c's forward_bf16 and
    backward_bf16 compute them, in numpy: every rounding written out (the
    parameters' gradients rounded to bf16 once, param_grads_half)."""
    p = layers(shape, bf16(flat))
    h, pres, ins = bf16(x), [], []
    for w, b in p[:-1]:
        ins.append(h)
        pres.append(bf16(h @ w + b))
        h = bf16(gelu(pres[-1]))
    z = bf16(h @ p[-1][0] + p[-1][1]).astype(np.float64)
    rows = len(y)
    z -= z.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1))
    soft = np.exp(z - lse[:, None])
    soft[np.arange(rows), y] -= 1
    dl = bf16((soft / rows).astype(np.float32))
    grads = [None] * len(p)
    grads[-1] = (bf16(h.T @ dl), bf16(dl.sum(0, dtype=np.float32)))
    dh = bf16(dl @ p[-1][0].T)
    for li in range(len(p) - 2, -1, -1):
        dpre = bf16(dh * gelu_grad(pres[li]))
        grads[li] = (bf16(ins[li].T @ dpre), bf16(dpre.sum(0, dtype=np.float32)))
        if li:
            dh = bf16(dpre @ p[li][0].T)
    flat_g = np.concatenate([np.concatenate([g.ravel(), b]) for g, b in grads])
    return float(np.mean(lse - z[np.arange(rows), y])), flat_g


def torch_grads(torch, net):
    return np.concatenate([np.concatenate([m.weight.grad.numpy().T.ravel(), m.bias.grad.numpy()])
                           for m in net.modules() if isinstance(m, torch.nn.Linear)])


def train_losses(torch, net, spec, opt, autocast):
    """The loss of FIDELITY_STEPS steps of 8 samples at FIDELITY_LR."""
    args = type("Args", (), {"optimizer": opt, "lr": tr.FIDELITY_LR[opt]})
    o = tr.optimizer(torch, args, net.parameters())
    out = []
    for s in range(tr.FIDELITY_STEPS):
        x, y = (torch.from_numpy(a) for a in spec.batch(1234, s, 8))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = net(x)
        loss = torch.nn.functional.cross_entropy(logits.float(), y)
        loss.backward()
        o.step()
        o.zero_grad()
        out.append(loss.item())
    return out


def case_bf16_emulation(binary):
    """autocast_bf16's loss and gradients are model.c's (a numpy
    transcription) to the bit but for rare flipped roundings; PyTorch's own
    CPU autocast (its matrix-vector products summed in bf16) trains within
    LOSS_TOL_BF16 of it."""
    skip = need_torch()
    if skip:
        return skip
    import torch
    torch.set_num_threads(1)
    v = np.concatenate([np.random.RandomState(0).randn(100000).astype(np.float32) * 10,
                        np.float32([1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 0.0])])
    expect((bf16(v) == torch.from_numpy(v).to(torch.bfloat16).float().numpy()).all(),
           "PyTorch's float -> bfloat16 cast is not round to nearest even (dps_f32_to_bf16)")
    spec = tr.Preset("tiny", TINY)
    flat = spec.init(1234)
    x, y = spec.batch(1234, 0, 8)
    loss, g = mlp_bf16(TINY, flat, x, y)
    net = tr.autocast_bf16(torch, spec.module(torch, flat))
    lt = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
    lt.backward()
    gt = torch_grads(torch, net)
    off = int((np.abs(g - gt) > 1e-6 * np.abs(g).max()).sum())
    print(f"autocast_bf16 against model.c's maths: loss {lt.item()} against {loss}, "
          f"{off} of {g.size} gradients differ")
    expect(abs(lt.item() - loss) <= 1e-6 * loss, f"loss {lt.item()}, model.c's {loss}")
    expect(off <= g.size // 1000, f"{off} of {g.size} gradients differ from model.c's maths "
           f"(a rounding put elsewhere changes most of them): look at torch_model.autocast_bf16")
    for opt in ("sgd", "adamw"):
        mine = train_losses(torch, tr.autocast_bf16(torch, spec.module(torch, flat)), spec, opt,
                            False)
        theirs = train_losses(torch, spec.module(torch, flat), spec, opt, True)
        worst, k = compare_losses(theirs, mine, "autocast")
        print(f"{opt}: torch.autocast('cpu') against autocast_bf16, largest relative loss "
              f"difference {worst:.3g} (step {k})")
        expect(worst <= tr.LOSS_TOL_BF16, f"{opt}: CPU autocast's loss at step {k} is "
               f"{theirs[k]}, autocast_bf16's {mine[k]}: {worst:.3g} > LOSS_TOL_BF16")
    return 0


# --- accumulation: PyTorch alone, and dpscale against it -----------------

def accum_args(mode, gpus, optimizer, batch, checks):
    common = ["--mode", mode, "--gpus", gpus, "--model", "tiny", "--optimizer", optimizer,
              "--lr", LR[optimizer], "--batch", batch, "--steps", STEPS, "--warmup", "0"]
    return common + ["--accum", ACCUM_N] + (["--no-sync", "off"] if "syncall" in checks else [])


def case_torch_accum(binary, mode, gpus, optimizer, batch, *checks):
    """PyTorch's --accum 4 (ddp: no_sync, or every micro-step all-reduced)
    trains as PyTorch on one device with the whole batch at once."""
    skip = need_torch()
    if skip:
        return skip
    args = accum_args(mode, gpus, optimizer, batch, checks)
    one = ["--mode", "dp", "--gpus", "1"] + args[4:args.index("--accum")]
    with tempfile.TemporaryDirectory(prefix="dpscale-accum-") as out:
        torch_ref(binary, *args, "--save-params", f"{out}/acc.npy", out=out, name="acc")
        torch_ref(binary, *one, "--save-params", f"{out}/one.npy", out=out, name="one")
        cid = losses(os.path.join(out, "acc"))[0]
        want = f"-b{batch}-acc{ACCUM_N}" + ("-syncall" if "syncall" in checks else "")
        expect(want in cid, f"PyTorch's config_id {cid} lacks {want}")
        check_columns(os.path.join(out, "acc"), cid, mode, checks)
        expect_same_training(out, "acc", "one", cid, optimizer, "torch_reference.py's "
                             "micro-batches or their loss scaling (torch_train.Rank.objective) "
                             "are wrong")
    return 0


def expect_same_training(out, mine, ref, cid, optimizer, why):
    """Runs out/MINE and out/REF (losses in steps.csv, final parameters in
    NAME.npy) train alike: every step's loss within TOL, the parameters
    within PARAMS_TOL; `why` says what a difference means."""
    a, b = losses(os.path.join(out, mine))[1], losses(os.path.join(out, ref))[1]
    worst, k = compare_losses(a, b, cid)
    d = params_diff(np.load(f"{out}/{mine}.npy"), np.load(f"{out}/{ref}.npy"))
    print(f"{cid}: {mine} against {ref}: largest relative loss difference {worst:.3g} (step "
          f"{k}: {a[k]} against {b[k]}); final parameters {d:.3g}")
    expect(worst <= TOL, f"{cid}: step {k}'s loss is {a[k]} in {mine} and {b[k]} in {ref} "
           f"({out}): {worst:.3g} > {TOL}: {why}")
    expect(d <= PARAMS_TOL[optimizer], f"{cid}: {mine}'s final parameters are {d:.3g} from "
           f"{ref}'s, above {PARAMS_TOL[optimizer]}")


def check_columns(folder, cid, mode, checks):
    """runs.csv's accum and no_sync and steps.csv's micro_steps as the contract has them."""
    run = dpsresults.read_csv(os.path.join(folder, "runs.csv"), ["accum", "no_sync"])[0]
    sync = ("off" if "syncall" in checks else "on") if mode == "ddp" else ""
    expect(run["accum"] == ACCUM_N and run["no_sync"] == sync,
           f"{folder}/runs.csv: accum {run['accum']!r}, no_sync {run['no_sync']!r}; expected "
           f"{ACCUM_N!r}, {sync!r}")
    steps = dpsresults.read_csv(os.path.join(folder, "steps.csv"), ["micro_steps"])
    bad = [r["micro_steps"] for r in steps if r["micro_steps"] != ACCUM_N]
    expect(not bad, f"{folder}/steps.csv: micro_steps {bad[:3]}, expected {ACCUM_N} ({cid})")


def case_accum(binary, mode, gpus, optimizer, batch, *checks):
    """dpscale's host backend and PyTorch with --accum 4: the same loss at
    every step within TOL, the same final parameters within PARAMS_TOL."""
    skip = need_torch()
    if skip:
        return skip
    args = accum_args(mode, gpus, optimizer, batch, checks)
    with tempfile.TemporaryDirectory(prefix="dpscale-accum-") as out:
        dpscale(binary, "run", *args, "--save-params", f"{out}/dpscale.npy", out=out,
                name="dpscale", check_rc=0)
        torch_ref(binary, *args, "--save-params", f"{out}/torch.npy", out=out, name="torch")
        cid = losses(os.path.join(out, "dpscale"))[0]
        tcid = losses(os.path.join(out, "torch"))[0]
        expect(tcid == cid, f"PyTorch's config_id {tcid} is not dpscale's {cid}")
        check_columns(os.path.join(out, "dpscale"), cid, mode, checks)
        expect_same_training(out, "dpscale", "torch", cid, optimizer, "dpscale's micro-batches, "
                             "their loss scaling or its no_sync are not PyTorch's")
    return 0


# --- bf16 on the host backend ---------------------------------------------

def bf16_args(optimizer, steps):
    return ["--mode", "dp", "--gpus", "1", "--model", "tiny", "--precision", "bf16",
            "--optimizer", optimizer, "--lr", LR[optimizer], "--batch", "8", "--steps",
            str(steps), "--warmup", "0"]


def case_bf16(binary, optimizer):
    """dpscale --precision bf16 on the host backend and PyTorch's CPU bf16
    (autocast_bf16): the same loss at every step within LOSS_TOL_BF16_HOST;
    SGD: the same parameters after BF16_PARAMS_STEPS steps within
    PARAMS_TOL_BF16_HOST (torch_model says why AdamW's are not compared)."""
    skip = need_torch()
    if skip:
        return skip
    tol = tr.LOSS_TOL_BF16_HOST[optimizer]
    args = bf16_args(optimizer, tr.FIDELITY_STEPS)
    with tempfile.TemporaryDirectory(prefix="dpscale-bf16-") as out:
        dpscale(binary, "run", *args, out=out, name="dpscale", check_rc=0)
        torch_ref(binary, *args, out=out, name="torch")
        cid, mine = losses(os.path.join(out, "dpscale"))
        tcid, ref = losses(os.path.join(out, "torch"))
        expect(tcid == cid, f"PyTorch's config_id {tcid} is not dpscale's {cid}")
        worst, k = compare_losses(mine, ref, cid)
        print(f"{cid}: largest relative loss difference {worst:.3g} (step {k}: dpscale "
              f"{mine[k]}, PyTorch {ref[k]}), tolerance {tol}")
        expect(worst <= tol, f"{cid}: step {k}'s loss is {mine[k]} in dpscale's host bf16 "
               f"({out}/dpscale/steps.csv) and {ref[k]} in PyTorch's: {worst:.3g} > {tol} "
               f"(torch_model.LOSS_TOL_BF16_HOST)")
        if optimizer == "sgd":
            bf16_params(binary, out)
    return 0


def bf16_params(binary, out):
    """SGD's parameters after BF16_PARAMS_STEPS bf16 steps, dpscale's against PyTorch's."""
    args = bf16_args("sgd", tr.BF16_PARAMS_STEPS)
    dpscale(binary, "run", *args, "--save-params", f"{out}/d.npy", out=out, name="d", check_rc=0)
    torch_ref(binary, *args, "--save-params", f"{out}/t.npy", out=out, name="t")
    d, tol = params_diff(np.load(f"{out}/d.npy"), np.load(f"{out}/t.npy")), tr.PARAMS_TOL_BF16_HOST
    print(f"bf16 SGD: parameters after {tr.BF16_PARAMS_STEPS} steps {d:.3g} apart, tolerance {tol}")
    expect(d <= tol, f"bf16 SGD: dpscale's parameters after {tr.BF16_PARAMS_STEPS} steps are "
           f"{d:.3g} (max |diff| / max |p|) from PyTorch's, above {tol} "
           f"(torch_model.PARAMS_TOL_BF16_HOST): a rounding of model.c's bf16 path is not "
           f"where torch_model.autocast_bf16 has it")


# --- fp16's loss scale against grad_scaler --------------------------------

def scaler_rows(folder):
    """{rank: [(loss_scale, skipped) of each timed step]} of steps.csv."""
    steps = dpsresults.read_csv(os.path.join(folder, "steps.csv"),
                                ["config_id", "step", "rank", "loss_scale", "skipped"])
    by_rank = {}
    for r in sorted(steps, key=lambda r: (int(r["rank"]), int(r["step"]))):
        scale = float(r["loss_scale"]) if r["loss_scale"] else None
        by_rank.setdefault(int(r["rank"]), []).append((scale, r["skipped"] == "1"))
    return by_rank


def expect_scales(folder, cid, want, skipped_steps):
    """Every rank's steps.csv scale and skip as want; runs.csv's skipped_steps."""
    got = scaler_rows(folder)
    expect(len(got) == 2, f"{folder}/steps.csv: ranks {sorted(got)}, expected 0 and 1")
    for rank, seq in got.items():
        expect(seq == want, f"{cid} rank {rank}: (loss_scale, skipped) of the timed steps "
               f"{seq}, grad_scaler's {want} ({folder}/steps.csv)")
    run = dpsresults.read_csv(os.path.join(folder, "runs.csv"), ["skipped_steps"])[0]
    expect(run["skipped_steps"] == str(skipped_steps), f"{cid}: runs.csv's skipped_steps "
           f"{run['skipped_steps']!r}, expected {skipped_steps}")


def case_overflow(binary, mode):
    """fp16 on 2 devices with +inf planted at step 3 (warm-up 2 included):
    every rank records the scale and skip of grad_scaler.scale_sequence
    (init 1024, growth interval 4) at each timed step; without the plant
    at the defaults no step is skipped."""
    warmup, steps = 2, 10
    args = ["run", "--mode", mode, "--gpus", "2", "--model", "tiny", "--precision", "fp16",
            "--batch", "8", "--warmup", str(warmup), "--steps", str(steps)]
    with tempfile.TemporaryDirectory(prefix="dpscale-fp16-") as out:
        dpscale(binary, *args, "--inject-overflow", "3", "--growth-interval", "4",
                "--init-scale", "1024", out=out, name="planted", check_rc=0)
        cid, _ = losses(os.path.join(out, "planted"))  # and every rank's loss the same
        want = grad_scaler.scale_sequence(warmup + steps, {3}, init_scale=1024,
                                          growth_interval=4)[warmup:]
        expect_scales(os.path.join(out, "planted"), cid, want, 1)
        print(f"{cid}: scale and skip of {steps} timed steps on both ranks as grad_scaler's")
        dpscale(binary, *args, out=out, name="clean", check_rc=0)
        want = grad_scaler.scale_sequence(warmup + steps)[warmup:]
        expect_scales(os.path.join(out, "clean"), cid, want, 0)
    return 0


CASES = {"scaler": case_scaler, "refusals": case_refusals, "bf16_emulation": case_bf16_emulation,
         "torch_accum": case_torch_accum, "accum": case_accum, "bf16": case_bf16,
         "overflow": case_overflow}


if __name__ == "__main__":
    binary, case, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    faulthandler.dump_traceback_later(240, exit=True)
    sys.exit(run_case(" ".join(["accum_reference", case, *rest]), CASES[case], binary, *rest))
