#!/usr/bin/env python3
"""Figures of scripts/device-check.sh that hold dpscale's results against
PyTorch's (scripts/torch_reference.py's folder) or against a goal read from
the same results: one line per figure, NAME<TAB>VALUE<TAB>GOAL<TAB>RESULT,
as device-check-lib.sh's dc_figures_from records them. The folders are read
with scripts/dpstools/results.py's readers; a missing or malformed file is a FAIL
line that names it, never a crash. A FAIL's value ends with what to do.

usage: device_check_compare.py [--rehearsal REASON] COMMAND FIG ARGS...
  losses FIG DPSCALE TORCH PRECISION
        every step's loss (steps.csv) within torch_model.LOSS_TOL (fp32)
        or LOSS_TOL_BF16 (bf16), relative; the same config_id, both runs ok
  sharded_losses FIG DPSCALE TORCH PRECISION
        losses, for a sharded mode (dpscale --mode fsdp against
        torch_reference.py --mode ddp --fsdp, ddp's config_id): the runs
        matched by their columns (model, devices, batch, precision,
        optimizer, rate, steps, seed) instead of their config_id
  sharded_memory FIG DPSCALE TORCH
        INFO: each device's peak, dpscale's memory.csv (its categories by
        kind) against PyTorch's torch.cuda.max_memory_allocated
  memory FIG DPSCALE TORCH MAX_FRACTION
        each device's alloc_peak_bytes (devices.csv) within MAX_FRACTION of
        PyTorch's torch.cuda.max_memory_allocated
  step FIG DPSCALE TORCH MAX_RATIO
        dpscale's median step time at most MAX_RATIO x PyTorch's (one
        synchronize a step), PyTorch's wait for Python beside it (the sum of
        device 0's python_overhead_ms in its phases.csv)
  real_step FIG DPSCALE TORCH MAX_RATIO
        step, against PyTorch running a real module (torch_reference.py
        --module: torchvision's, transformers') or its model file: the runs
        matched by their columns (devices, batch, precision, optimizer,
        steps), as the module's name is its own
  real_memory FIG DPSCALE TORCH MAX_FRACTION
        device 0's alloc_peak_bytes within MAX_FRACTION of the real module's
        torch.cuda.max_memory_allocated, the runs matched as real_step's
  phase FIG DPSCALE TORCH PHASE MAX_RATIO
        dpscale's median time of PHASE on device 0 (phases.csv) at most
        MAX_RATIO x PyTorch's (its loss phase as dpscale's: the loss's
        forward and backward to the logits' gradient)
  tflops FIG FOLDER MIN_RATIO
        model_tflops at least MIN_RATIO x gemm_ref_tflops (--gemm-ref)
  nongemm FIG FOLDER MAX_SHARE
        the share of the step in the NVTX-timed phases that run no GEMM
        (phases.csv: all but forward and backward; the all-reduce's exposed
        part counted, its overlapped part not) at most MAX_SHARE
  overlap FIG FOLDER MAX_EXPOSED
        ddp on 2+ devices: allreduce_exposed at most MAX_EXPOSED x allreduce
        (phases.csv medians, the worst device): the all-reduce overlapped
  fault FIG FOLDER STATUS WANT_EXIT EXIT SECONDS MAX_SECONDS
        a run that must fail: its row has STATUS (error, timeout), dpscale
        exited with WANT_EXIT (its exit status EXIT; 124 or 137: killed by
        the check's timeout, a hang), and it ended (after SECONDS) within
        MAX_SECONDS
--rehearsal REASON: the figure is computed, but recorded SKIP with REASON
(on the host backend, where a GPU figure means nothing).
"""
import os
import sys

from dpstools import results
from dpstools.figures import Missing, figure_line

REHEARSAL = None


def line(name, value, goal, result, fix=""):
    if result == "FAIL" and fix:
        value = f"{value}; {fix}"
    if REHEARSAL and result in ("PASS", "FAIL"):
        value, result = f"{REHEARSAL}; rehearsal gave {result}: {value}", "SKIP"
    print(figure_line(name, value, goal, result))


def table(folder, name, required=()):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        raise Missing(f"no {path} (the run wrote no results: see device-check.log)")
    try:
        rows = results.read_csv(path, required)
    except results.InputError as e:
        raise Missing(str(e)) from None
    if not rows:
        raise Missing(f"{path} has no rows")
    return rows


def run_row(folder):
    return table(folder, "runs.csv", ["config_id", "status", "error"])[-1]


def num(row, col):
    try:
        return results.number(row, col)
    except (results.InputError, KeyError) as e:
        raise Missing(f"{e} (status {row.get('status')}: {row.get('error') or 'no error given'})") \
            from None


def ok_runs(*folders):
    """The runs.csv rows of the folders; Missing names the first not ok."""
    out = []
    for f in folders:
        r = run_row(f)
        if r["status"] != "ok":
            raise Missing(f"{f}: status {r['status']} ({r.get('error') or 'no error given'})")
        out.append(r)
    return out


def same_config(d, t, dps, tor):
    if d["config_id"] != t["config_id"]:
        raise Missing(f"dpscale ran {d['config_id']} ({dps}), PyTorch {t['config_id']} ({tor}): "
                      f"not the same configuration; give both the same options")


def losses_of(folder):
    """The loss of every step of a one-configuration folder (ranks' rows agree)."""
    rows = table(folder, "steps.csv", ["config_id", "step", "rank", "loss"])
    by_step = {}
    for r in rows:
        k, v = results.integer(r, "step"), num(r, "loss")
        if by_step.setdefault(k, v) != v:
            raise Missing(f"{results.where(r)}: rank {r['rank']}'s loss {v} differs from "
                          f"another rank's {by_step[k]} at step {k}")
    return [by_step[k] for k in sorted(by_step)]


def cmd_losses(fig, dps, tor, precision):
    d, t = ok_runs(dps, tor)
    same_config(d, t, dps, tor)
    loss_line(fig, dps, tor, precision, d["config_id"])


# The columns that make two runs the same training whatever their modes' names.
SAME_RUN = ("model", "ngpus", "global_batch", "precision", "optimizer", "lr", "steps", "warmup",
            "seed")


def ok_run(folder):
    """runs.csv's last row, which must have ended ok."""
    r = run_row(folder)
    if r.get("status") != "ok":
        raise Missing(f"{folder}: status {r.get('status')} ({r.get('error') or 'no error given'})")
    return r


def cmd_sharded_losses(fig, dps, tor, precision):
    d, t = ok_run(dps), ok_run(tor)
    differ = [c for c in SAME_RUN if d.get(c) != t.get(c)]
    if differ:
        raise Missing(f"dpscale ran {d.get('config_id')} ({dps}), PyTorch {t.get('config_id')} "
                      f"({tor}): {', '.join(f'{c} {d.get(c)} and {t.get(c)}' for c in differ)} "
                      f"differ; give both the same options")
    loss_line(fig, dps, tor, precision, f"{d['config_id']} against {t['config_id']}")


def loss_line(fig, dps, tor, precision, what):
    """The figure of every step's loss of DPS against TOR's within PRECISION's tolerance."""
    from dpstools import torch_model  # numpy: imported by the figures that need it
    tol = {"bf16": torch_model.LOSS_TOL_BF16,
           "fp16": torch_model.LOSS_TOL_FP16}.get(precision, torch_model.LOSS_TOL)
    goal = f"every step within {tol:g} relative"
    mine, ref = losses_of(dps), losses_of(tor)
    if len(mine) != len(ref) or not ref:
        raise Missing(f"{len(mine)} steps in {dps}/steps.csv, {len(ref)} in {tor}/steps.csv")
    rel = [abs(a - b) / abs(b) if b else abs(a) for a, b in zip(mine, ref)]
    k = max(range(len(rel)), key=rel.__getitem__)
    line(fig, f"{rel[k]:.3g} at step {k} of {len(ref)} (dpscale {mine[k]:.6g}, torch "
              f"{ref[k]:.6g}; {what})", goal, "PASS" if rel[k] <= tol else "FAIL",
         f"dpscale's loss ({dps}/steps.csv) leaves PyTorch's ({tor}/steps.csv): run the same "
         f"configuration in fp32 on the host (meson test --suite torch) to tell a CUDA kernel "
         f"from the model or optimizer")


def cmd_memory(fig, dps, tor, frac):
    frac = float(frac)
    goal = f"each device within {frac * 100:g} %"
    d, t = ok_runs(dps, tor)
    same_config(d, t, dps, tor)
    cols = ["device", "alloc_peak_bytes"]
    mine = {r["device"]: num(r, "alloc_peak_bytes") for r in table(dps, "devices.csv", cols)}
    ref = {r["device"]: num(r, "alloc_peak_bytes") for r in table(tor, "devices.csv", cols)}
    if sorted(mine) != sorted(ref):
        raise Missing(f"devices {sorted(mine)} in {dps}/devices.csv, {sorted(ref)} in "
                      f"{tor}/devices.csv")
    parts, worst = [], 0.0
    for dev in sorted(mine, key=int):
        if not ref[dev] > 0:
            raise Missing(f"{tor}/devices.csv: device {dev}'s alloc_peak_bytes is {ref[dev]}")
        diff = (mine[dev] - ref[dev]) / ref[dev]
        worst = max(worst, abs(diff))
        parts.append(f"device {dev} {diff * 100:+.1f} % (dpscale {mine[dev] / 2**20:.1f} MiB, "
                     f"torch {ref[dev] / 2**20:.1f} MiB)")
    line(fig, "; ".join(parts), goal, "PASS" if worst <= frac else "FAIL",
         f"the categories at the peak are in dpscale's summary.txt ({dps}); PyTorch's peak is "
         f"max_memory_allocated over the whole run, cuBLAS's workspace included")


def cmd_sharded_memory(fig, dps, tor):
    for folder in (dps, tor):
        ok_run(folder)  # both ended ok
    cats = table(dps, "memory.csv", ["device", "kind", "bytes_at_peak"])
    ref = {r["device"]: num(r, "alloc_peak_bytes")
           for r in table(tor, "devices.csv", ["device", "alloc_peak_bytes"])}
    mine = {}
    for r in cats:
        kinds = mine.setdefault(r["device"], {})
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + num(r, "bytes_at_peak")
    if sorted(mine) != sorted(ref):
        raise Missing(f"devices {sorted(mine)} in {dps}/memory.csv, {sorted(ref)} in "
                      f"{tor}/devices.csv")
    mib = 2 ** 20
    parts = []
    for dev in sorted(mine, key=int):
        total, kinds = sum(mine[dev].values()), mine[dev]
        by_size = sorted(kinds.items(), key=lambda kv: -kv[1])
        top = ", ".join(f"{k} {v / mib:.2f}" for k, v in by_size)
        diff = f"; {(total - ref[dev]) / ref[dev] * 100:+.1f} %" if ref[dev] > 0 else ""
        parts.append(f"device {dev}: dpscale {total / mib:.2f} MiB at its peak ({top} MiB), "
                     f"torch max_memory_allocated {ref[dev] / mib:.2f} MiB{diff}")
    line(fig, "; ".join(parts), "reported", "INFO")


def cmd_step(fig, dps, tor, ratio):
    d, t = ok_runs(dps, tor)
    same_config(d, t, dps, tor)
    dm, tm = num(d, "step_ms_median"), num(t, "step_ms_median")
    if not tm > 0:
        raise Missing(f"{tor}/runs.csv: step_ms_median {tm}")
    ratio_line(fig, dm / tm, ratio, f"{d['config_id']}: dpscale {dm:.3f} ms, torch {tm:.3f} ms, "
               f"{python_wait(tor)}", f"phases.csv of both folders ({dps}, {tor}) show which "
               f"phase is slower; scripts/profile.sh captures the kernels")


# The columns a real module's run shares with dpscale's run of its model file (its model,
# so its config_id, is the module's own name without the file).
REAL_RUN = ("ngpus", "global_batch", "precision", "optimizer", "steps", "warmup")


def real_pair(dps, tor):
    """dpscale's and PyTorch's runs.csv rows of a real-module pair, both ok and
    run with the same options, and what PyTorch ran (meta.json's module)."""
    d, t = ok_run(dps), ok_run(tor)
    differ = [c for c in REAL_RUN if d.get(c) != t.get(c)]
    if differ:
        raise Missing(f"dpscale ran {d.get('config_id')} ({dps}), PyTorch {t.get('config_id')} "
                      f"({tor}): {', '.join(f'{c} {d.get(c)} and {t.get(c)}' for c in differ)} "
                      f"differ; give both the same options")
    try:
        module = results.read_meta(tor).get("module")
    except results.InputError as e:
        raise Missing(str(e)) from None
    what = module.get("spec") if isinstance(module, dict) else f"its model file ({t['model']})"
    return d, t, f"dpscale {d['model']} against PyTorch's {what}"


def cmd_real_step(fig, dps, tor, ratio):
    """dpscale's median step at most RATIO x that of PyTorch running the real module."""
    d, t, what = real_pair(dps, tor)
    dm, tm = num(d, "step_ms_median"), num(t, "step_ms_median")
    if not tm > 0:
        raise Missing(f"{tor}/runs.csv: step_ms_median {tm}")
    ratio_line(fig, dm / tm, ratio, f"{what}: dpscale {dm:.3f} ms, torch {tm:.3f} ms, "
               f"{python_wait(tor)}", f"a finding, not a crash: summary.md of plot.py {dps} "
               f"--torch {tor} sets the two steps side by side, op kind by op kind (ops.csv, "
               f"torch_ops.csv)")


def cmd_real_memory(fig, dps, tor, frac):
    """Device 0's allocation peak within FRAC of the real module's max_memory_allocated."""
    _, _, what = real_pair(dps, tor)
    cols = ["device", "alloc_peak_bytes"]
    mine = [num(r, "alloc_peak_bytes") for r in table(dps, "devices.csv", cols)
            if r["device"] == "0"]
    ref = [num(r, "alloc_peak_bytes") for r in table(tor, "devices.csv", cols)
           if r["device"] == "0"]
    if not mine or not ref or not ref[0] > 0:
        raise Missing(f"device 0's alloc_peak_bytes: {mine or 'none'} in {dps}/devices.csv, "
                      f"{ref or 'none'} in {tor}/devices.csv")
    diff = (mine[0] - ref[0]) / ref[0]
    line(fig, f"device 0 {diff * 100:+.1f} % (dpscale {mine[0] / 2**20:.1f} MiB, torch "
              f"{ref[0] / 2**20:.1f} MiB; {what})", f"within {float(frac) * 100:g} %",
         "PASS" if abs(diff) <= float(frac) else "FAIL",
         f"a finding, not a crash: the categories at dpscale's peak are in memory.csv ({dps}); "
         f"PyTorch's peak is max_memory_allocated over the whole run, its workspaces included")


def ratio_line(fig, r, ratio, what, hint):
    """FIG: dpscale's time over PyTorch's, r, at most RATIO; what it compared, and on failure
    the hint."""
    line(fig, f"{r:.3f} ({what})", f"<= {ratio}", "PASS" if r <= float(ratio) else "FAIL", hint)


def python_wait(tor):
    """How long PyTorch's device 0 waited for Python in a step: the sum of
    its phases' python_overhead_ms (phases.csv, GPUs only), in words."""
    rows = table(tor, "phases.csv", ["device", "phase", "median_ms"])
    waits = [num(p, "python_overhead_ms") for p in rows
             if p["device"] == "0" and p.get("python_overhead_ms")]
    if not waits:
        return ("its wait for Python not measured (python_overhead_ms empty: the CPU, or fewer "
                "than 2 warm-up steps)")
    return f"of which its device waited for Python {sum(waits):.3f} ms"


def phase_ms(folder, phase):
    """Device 0's median time of PHASE in FOLDER/phases.csv."""
    rows = table(folder, "phases.csv", ["device", "phase", "median_ms"])
    ms = [num(p, "median_ms") for p in rows if p["device"] == "0" and p["phase"] == phase]
    if not ms:
        raise Missing(f"{folder}/phases.csv: device 0 has no phase {phase}")
    return ms[-1]


def cmd_phase(fig, dps, tor, phase, ratio):
    d, t = ok_runs(dps, tor)
    same_config(d, t, dps, tor)
    mine, ref = phase_ms(dps, phase), phase_ms(tor, phase)
    if not ref > 0:
        raise Missing(f"{tor}/phases.csv: device 0's {phase} median is {ref}")
    ratio_line(fig, mine / ref, ratio, f"{d['config_id']}: {phase} on device 0, dpscale "
               f"{mine:.3f} ms, torch {ref:.3f} ms", f"dpscale's {phase} kernels are slower "
               f"than PyTorch's: scripts/profile.sh captures them ({dps}/phases.csv, "
               f"{tor}/phases.csv)")


def cmd_tflops(fig, folder, goal):
    (r,) = ok_runs(folder)
    model, gemm = num(r, "model_tflops"), num(r, "gemm_ref_tflops")
    if not gemm > 0:
        raise Missing(f"{folder}/runs.csv: gemm_ref_tflops {gemm} (run with --gemm-ref)")
    ratio = model / gemm
    line(fig, f"{ratio:.3f} ({r['model']} {r['precision']}: model {model:.4g} / GEMMs alone "
              f"{gemm:.4g} TFLOP/s)", f">= {goal}", "PASS" if ratio >= float(goal) else "FAIL",
         f"the step loses time outside its GEMMs: see figure 'non-GEMM share' and "
         f"{folder}/phases.csv")


NO_GEMM_PHASES = ("load", "replicate", "scatter", "gather", "loss", "reduce",
                  "allreduce_exposed", "unscale", "optimizer")
NEWER_PHASES = ("unscale",)  # folders written before them lack their rows: 0


def cmd_nongemm(fig, folder, goal):
    (r,) = ok_runs(folder)
    rows = table(folder, "phases.csv", ["device", "phase", "median_ms"])
    step = num(r, "step_ms_median")
    if not step > 0:
        raise Missing(f"{folder}/runs.csv: step_ms_median {step}")
    dev0 = {p: 0.0 for p in NEWER_PHASES}
    dev0.update({p["phase"]: num(p, "median_ms") for p in rows if p["device"] == "0"})
    missing = [p for p in NO_GEMM_PHASES + ("forward", "backward") if p not in dev0]
    if missing:
        raise Missing(f"{folder}/phases.csv: device 0 has no phase {', '.join(missing)}")
    share = sum(dev0[p] for p in NO_GEMM_PHASES) / step
    top = sorted(NO_GEMM_PHASES, key=lambda p: -dev0[p])[:3]
    extra = ""
    if r.get("gemm_ref_tflops") and r.get("model_tflops"):  # the rest is in forward/backward
        gemm = num(r, "gemm_ref_tflops")
        if gemm > 0:
            extra = f"; all but the GEMMs alone: {1 - num(r, 'model_tflops') / gemm:.3f}"
    line(fig, f"{share:.3f} of {step:.3f} ms (largest: "
              + ", ".join(f"{p} {dev0[p]:.3f} ms" for p in top) + f"){extra}",
         f"<= {goal}", "PASS" if share <= float(goal) else "FAIL",
         f"the largest phases above are the kernels to look at ({folder}/phases.csv)")


def cmd_overlap(fig, folder, goal):
    ok_runs(folder)
    rows = table(folder, "phases.csv", ["device", "phase", "median_ms"])
    per = {}
    for p in rows:
        if p["phase"] in ("allreduce", "allreduce_exposed"):
            per.setdefault(p["device"], {})[p["phase"]] = num(p, "median_ms")
    if not per or any(len(v) != 2 for v in per.values()) or \
            not any(v["allreduce"] > 0 for v in per.values()):
        raise Missing(f"{folder}/phases.csv: no all-reduce timed (allreduce and "
                      f"allreduce_exposed rows of ddp on 2+ devices)")
    worst, dev = max((v["allreduce_exposed"] / v["allreduce"] if v["allreduce"] > 0
                      else float("inf"), d) for d, v in per.items())
    v = per[dev]
    line(fig, f"{worst:.3f} on device {dev} (allreduce {v['allreduce']:.3f} ms, exposed "
              f"{v['allreduce_exposed']:.3f} ms)", f"exposed <= {goal} x allreduce",
         "PASS" if worst <= float(goal) else "FAIL",
         f"the all-reduce waits for backward's end: the trace ({folder}/trace) shows whether "
         f"buckets start during backward")


def cmd_fault(fig, folder, status, want_rc, rc, seconds, max_seconds):
    goal = f"a row with status {status}, exit {want_rc}, within {max_seconds} s"
    rc, secs = int(rc), float(seconds)
    if rc in (124, 137):
        line(fig, f"killed by the check's timeout after {secs:.0f} s (exit {rc}): the run hung",
             goal, "FAIL", f"{folder}: the watchdog of --timeout or of a rank's exit did not end "
                           f"the run; see device-check.log for the last step printed")
        return
    r = run_row(folder)
    ok = r["status"] == status and rc == int(want_rc) and secs <= float(max_seconds)
    line(fig, f"status {r['status']} ({r.get('error') or 'no error'}), exit {rc}, "
              f"{secs:.0f} s", goal, "PASS" if ok else "FAIL",
         f"{folder}/runs.csv: the failure did not end the run as it should")


COMMANDS = {"losses": (cmd_losses, 4), "sharded_losses": (cmd_sharded_losses, 4),
            "sharded_memory": (cmd_sharded_memory, 3), "memory": (cmd_memory, 4),
            "step": (cmd_step, 4), "phase": (cmd_phase, 5), "real_step": (cmd_real_step, 4),
            "real_memory": (cmd_real_memory, 4),
            "tflops": (cmd_tflops, 3), "nongemm": (cmd_nongemm, 3), "overlap": (cmd_overlap, 3),
            "fault": (cmd_fault, 7)}


def main(argv):
    global REHEARSAL
    args = argv[1:]
    if len(args) >= 2 and args[0] == "--rehearsal":
        REHEARSAL, args = args[1], args[2:]
    if not args or args[0] not in COMMANDS or len(args) - 1 != COMMANDS[args[0]][1]:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    fn = COMMANDS[args[0]][0]
    try:
        fn(*args[1:])
    except Missing as e:
        line(args[1], f"no figure: {e}", "-", "FAIL")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
