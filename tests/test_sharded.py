#!/usr/bin/env python3
"""Sharded data parallel (--mode zero1, zero2, fsdp) on the host backend:
--check over devices, optimizers and models, losses equal to ddp's step by
step, model-state memory against the ZeRO formulas, and the collectives
each strategy issues. (PyTorch's ZeroRedundancyOptimizer: test_zero_reference.py.)

usage: test_sharded.py DPSCALE CASE
  check       zero1, zero2 and fsdp on 1 to 4 devices, SGD and AdamW, on the MLP
              (its parameters not a multiple of 3 or 4); on 3 devices a model file
              with a tied tensor, --accum 1 and 2; --accum 2 on 2 and 4: every
              --check passing
  losses      each sharded strategy's losses equal ddp's step by step (3 ranks)
  memory      medium, AdamW, 4 ranks: each strategy's model-state bytes per
              device (memory.csv) are the ZeRO formula's plus at most two
              units a kind; fsdp's parameters at the peak are its shard and two
              units, not the model
  collectives buckets.csv names each sharded collective: zero2 reduce-scatters
              and all-gathers every unit once a step, fsdp gathers every unit
              twice (forward and backward) and reduce-scatters it once, zero1
              all-reduces ddp's buckets and all-gathers every unit
  refused     fsdp and zero2 in half precision with an MLP preset, --no-sync and --bucket-mb
              without a strategy that has buckets: exit 2 saying what to do; with a
              GradScaler they run, a planted inf skipping the step on every rank"""
from listing import DPSCALE, FIXTURES, exit_if_listing, test

# hang guards: a case's sweeps take about a minute on a loaded machine, 3-5 times that in
# CI's sanitizer build
TESTS = [test("sharded " + c, DPSCALE, c, timeout=900)
         for c in ("check", "losses", "memory", "collectives", "refused")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import collections
import os
import tempfile

from helpers import dpscale, expect, expect_exit, losses, read_folder, read_table, rel_diff, run_cases

TIED_FILE = os.path.join(FIXTURES, "models", "tiny-gpt.model")
SHARDED = ("zero1", "zero2", "fsdp")


def sweep(binary, tmp, body, *args, timeout=800):
    suite = os.path.join(tmp, "s.suite")
    with open(suite, "w") as f:
        f.write(body)
    out = os.path.join(tmp, "res")
    p = dpscale(binary, "sweep", suite, "--host-devices", "4", "--no-links", *args, out=out,
                name="s", timeout=timeout)
    expect(p.returncode == 0, f"sweep exit {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr}")
    return os.path.join(out, "s")


def case_check(binary):
    with tempfile.TemporaryDirectory() as tmp:
        folder = sweep(binary, tmp, "modes = zero1, zero2, fsdp\ngpus = 1, 2, 3, 4\n"
                       "models = tiny\noptimizers = sgd, adamw\nglobal_batch = 24\n"
                       "batch = strong\nsteps = 2\nwarmup = 1\n\n"
                       f"[+ tied]\nmodels = {TIED_FILE}\ngpus = 3\naccum = 1, 2\n\n"
                       "[+ accumulation]\ngpus = 2, 4\naccum = 2\n", "--check")
        runs = read_folder(folder)[0]
        want = 3 * 4 * 2 + 3 * 2 * 2 + 3 * 2 * 2
        expect(len(runs) == want, f"{len(runs)} configurations, expected {want}")
        for r in runs:
            expect(r["status"] == "ok" and r["check"] == "pass",
                   f"{r['config_id']}: status {r['status']}, check {r['check']} "
                   f"({r['check_max_rel_diff']}): {r['error']}")


def case_losses(binary):
    with tempfile.TemporaryDirectory() as tmp:
        curves = {}
        for mode in ("ddp",) + SHARDED:
            out = os.path.join(tmp, mode)
            dpscale(binary, "run", "--mode", mode, "--model", "tiny", "--gpus", "3", "--batch", "24",
                    "--optimizer", "adamw", "--steps", "6", "--warmup", "1", out=out, name=mode,
                    check_rc=0)
            curves[mode] = losses(os.path.join(out, mode))[1]
        for mode in SHARDED:
            worst = max(rel_diff(a, b) for a, b in zip(curves[mode], curves["ddp"]))
            expect(len(curves[mode]) == len(curves["ddp"]) == 6 and worst < 1e-6,
                   f"{mode}: losses {curves[mode]} against ddp's {curves['ddp']} "
                   f"(worst relative difference {worst:.3g})")


def model_states(folder):
    """{(config_id, device): {kind: bytes}} of memory.csv's parameters,
    gradients and optimizer state at each device's peak."""
    out = {}
    for m in read_table(os.path.join(folder, "memory.csv")):
        if m["kind"] in ("parameters", "gradients", "optimizer state"):
            cell = out.setdefault((m["config_id"], m["device"]), collections.Counter())
            cell[m["kind"]] += int(m["bytes_at_peak"])
    return out


def case_memory(binary):
    with tempfile.TemporaryDirectory() as tmp:
        # the model states do not depend on the tokens a sample: fewer of them
        # under the sanitizers, whose debug build trains medium slowly
        tokens = ["--tokens", "8"] if "ASAN_OPTIONS" in os.environ else []
        folder = sweep(binary, tmp, "modes = ddp, zero1, zero2, fsdp\ngpus = 4\nmodels = medium\n"
                       "optimizers = adamw\nbatch_per_gpu = 1\nsteps = 1\nwarmup = 0\n", *tokens)
        runs = read_folder(folder)[0]
        params = int(runs[0]["params"])
        width = int(runs[0]["width"])
        unit = 4 * (width * width + width)  # a hidden layer's bytes (the classifier's is smaller)
        p, n = 4 * params, 4
        formula = {"ddp": (p, p, 2 * p), "zero1": (p, p, 2 * p / n),
                   "zero2": (p, p / n, 2 * p / n), "fsdp": (p / n, p / n, 2 * p / n)}
        transient = {"ddp": (0, 0), "zero1": (0, 0), "zero2": (0, 2), "fsdp": (2, 2)}
        got_all = model_states(folder)
        expect(len(got_all) == 16, f"memory.csv: {len(got_all)} devices, expected 4 x 4")
        for (cid, dev), got in got_all.items():
            mode = cid.split("-")[0]
            want = formula[mode]
            units = (transient[mode][0], transient[mode][1], 0)
            for kind, w, u in zip(("parameters", "gradients", "optimizer state"), want, units):
                extra = got[kind] - w
                expect(-4 * n <= extra <= u * unit + 4 * n,
                       f"{cid} device {dev}: {kind} {got[kind]} bytes, the formula's {w:.0f} plus "
                       f"at most {u} unit(s) of {unit} (extra {extra:.0f})")
            if mode == "fsdp":
                expect(got["parameters"] < p / 2,
                       f"{cid} device {dev}: parameters {got['parameters']} at the peak: the "
                       f"model's {p}, not a shard and two units")


def case_collectives(binary):
    with tempfile.TemporaryDirectory() as tmp:
        folder = sweep(binary, tmp, "modes = zero1, zero2, fsdp\ngpus = 2\nmodels = tiny\n"
                       "steps = 3\nwarmup = 1\n", "--trace-steps", "2")
        rows = read_table(os.path.join(folder, "buckets.csv"))
        layers = int(read_folder(folder)[0][0]["layers"])
        units = layers + 1
        count = collections.Counter((r["config_id"].split("-")[0], r["rank"], r["collective"])
                                    for r in rows)
        fsdp_fwd = {r["bucket"] for r in rows if r["config_id"].startswith("fsdp-") and
                    r["collective"] == "all-gather" and r["phase"] == "forward" and r["rank"] == "0"}
        expect(len(fsdp_fwd) == units, f"fsdp: forward gathers units {sorted(fsdp_fwd)}, "
               f"expected every one of {units}")
        want = {("zero2", "reduce-scatter"): units, ("zero2", "all-gather"): units,
                ("fsdp", "reduce-scatter"): units, ("zero1", "all-gather"): units}
        for (mode, op), n in want.items():
            for rank in ("0", "1"):
                expect(count[(mode, rank, op)] == n,
                       f"buckets.csv: {mode} rank {rank}: {count[(mode, rank, op)]} {op} rows, "
                       f"expected {n} (one per unit)")
        for rank in ("0", "1"):  # forward's and backward's gathers; the last unit's stays
            got = count[("fsdp", rank, "all-gather")]
            expect(2 * units - 1 <= got <= 2 * units, f"fsdp rank {rank}: {got} all-gathers, "
                   f"expected about two per unit ({units} units)")
            expect(count[("zero1", rank, "all-reduce")] >= 1, f"zero1: no bucket all-reduced")


def case_refused(binary):
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("zero2", "fsdp"):
            p = dpscale(binary, "run", "--mode", mode, "--precision", "bf16", "--gpus", "2",
                        out=tmp, check_rc=None)
            expect_exit(p, 2, "fp32", "--precision fp32")
        for mode in ("zero2", "fsdp"):  # the sharded GradScaler: what each rank found all-reduced
            dpscale(binary, "run", "--mode", mode, "--scaler", "on", "--gpus", "2", "--steps", "3",
                    "--warmup", "1", "--inject-overflow", "2", "--check", out=tmp,
                    name=mode + "-scaler", check_rc=0)
            rows = list(read_table(os.path.join(tmp, mode + "-scaler", "steps.csv")))
            skipped = sorted({(r["step"], r["rank"]) for r in rows if r["skipped"] == "1"})
            expect(skipped == [("1", "0"), ("1", "1")],
                   f"{mode} --scaler on --inject-overflow 2: steps.csv's skipped (step, rank) "
                   f"are {skipped}, expected step 1 (the second measured) on both ranks")
        p = dpscale(binary, "run", "--mode", "fsdp", "--accum", "2", "--no-sync", "off",
                    "--gpus", "2", out=tmp, check_rc=None)
        expect_exit(p, 2, "--no-sync", "buckets", "--mode ddp")
        p = dpscale(binary, "run", "--mode", "fsdp", "--bucket-mb", "4", "--gpus", "2", out=tmp,
                    check_rc=None)
        expect_exit(p, 2, "--bucket-mb", "buckets")


if __name__ == "__main__":
    run_cases(globals())
