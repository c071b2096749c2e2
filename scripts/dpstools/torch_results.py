"""The PyTorch reference's results folder, written as dpscale writes its own.

steps.csv, devices.csv, phases.csv, runs.csv and meta.json from every
rank's report gathered on rank 0, each with every column of
results.COLUMNS (and the optional python_overhead_ms), so that plot.py
draws the folder and compare.py compares it like a dpscale folder.
"""
import contextlib
import csv
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess

import numpy as np

from dpstools import torch_ops
from dpstools.results import COLUMNS, OPTIONAL_COLUMNS, PHASES
from dpstools.stats import median, quantile
from dpstools.torch_model import BUCKET_MB

class Usage(Exception):
    """Bad arguments or an unusable output folder: exit 2 with the message."""


def conv_path(torch, cuda):
    """How PyTorch runs this run's convolutions, in meta.json's versions.conv
    words: cuDNN and its version on CUDA, else the CPU's own kernels."""
    if cuda and torch.backends.cudnn.is_available():
        v = torch.backends.cudnn.version()  # 9.1.0: 90100; 8.9.2: 8902
        major = 10000 if v >= 90000 else 1000
        return f"cudnn {v // major}.{v % major // 100}.{v % 100}"
    return "PyTorch's CPU convolutions"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    return re.sub(r"\s+\d+-Core Processor$", "", name)
    except OSError:
        pass
    return platform.processor() or "CPU"


def config_id(args):
    """dpscale's config_id for the same configuration, so compare.py and
    plot.py --torch match them: -accN after the batch when N > 1, then
    -syncall for ddp's --no-sync off, -tf32on or -tf32off last for fp32 with
    --tf32 on or off; stock
    ddp loss scaling, which dpscale does not have, is marked -stockloss as
    dpscale marks its own variants."""
    cid = f"{args.mode}-{args.model}-{args.precision}-{args.optimizer}-g{args.gpus}-b{args.batch}"
    if args.accum > 1:  # config_id in src/config/config.c
        cid += f"-acc{args.accum}" + ("-syncall" if args.no_sync == "off" else "")
    if args.mode == "ddp":
        cid += f"-bk{BUCKET_MB}" + ("-stockloss" if args.ddp_loss == "stock" else "")
    if args.precision == "fp32" and args.tf32 != "default":
        cid += f"-tf32{args.tf32}"
    return cid


def fmt(x, decimals):
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else f"{x:.{decimals}f}"


def fmt_scale(x):
    """A loss scale as dpscale's steps.csv has it (results.c: nine decimals,
    so that a scale backed off to 2^-30 still shows); empty without a scaler."""
    return "" if x is None else fmt(x, 9)


def columns(name):
    return COLUMNS[name] + OPTIONAL_COLUMNS.get(name, [])


def check_folder(folder):
    """A folder that holds only torch_reference.py's files of this version
    (dpscale's results are named as such first, whatever their columns)."""
    for name in ("runs.csv", "steps.csv", "devices.csv", "phases.csv"):
        path = os.path.join(folder, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            continue
        with open(path, newline="") as f:
            rows = csv.reader(f)
            header = next(rows)
            if name == "runs.csv" and "backend" in header:
                other = {r[header.index("backend")] for r in rows} - {"torch"}
                if other:
                    raise Usage(f"{path}: holds dpscale results (backend {', '.join(other)}); "
                                f"write PyTorch's to a folder of their own (--name) and set "
                                f"them beside with plot.py --torch")
            if header != columns(name):
                raise Usage(f"{path}: columns differ from this version's (results.COLUMNS); "
                            f"write to a new folder (--name)")


def write_rows(folder, name, rows):
    path = os.path.join(folder, name)
    cols = columns(name)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(cols)
        w.writerows([[row.get(c, "") for c in cols] for row in rows])


class Gathered:
    """Every process's report, one row per device (a rank's device, or each
    of dp's GPUs), and what the files share: the step times (a step's is
    its slowest rank's) and the loss of every step (the global mean);
    spec: the model (torch_model.Preset or torch_graph.Graph)."""

    def __init__(self, args, spec, reports):
        self.args, self.spec = args, spec
        self.cuda = args.device == "cuda"
        self.reports = sorted(reports, key=lambda r: r["rank"])
        self.rows = []  # (device number, report, device record, CUDA index or None)
        for rep in self.reports:
            for dv in rep["devices"]:
                self.rows.append((len(self.rows), rep, dv, dv["index"] if self.cuda else None))
        self.step_ms = [max(rep["step_ms"][k] for rep in self.reports)
                        for k in range(args.steps)]
        self.median_step = median(self.step_ms)
        rows_total = args.batch * spec.rows
        self.loss = [sum(rep["loss_sums"][k] for rep in self.reports) / rows_total
                     for k in range(args.warmup + args.steps)]

    def phase_ms(self, rep, cuda_index, k):
        """The phases of timed step k on one device: CUDA events on GPUs, else the host clock."""
        if cuda_index is None:
            return rep["phases"][k]
        per = rep["device_phases"][k].get(cuda_index, {})
        return {p: per.get(p, 0.0) for p in PHASES}

    def loads(self, n, cuda_index):
        """Whether device n copies its batch from the host (not on the CPU:
        there load is a view)."""
        return cuda_index is not None and (self.args.mode == "ddp" or n == 0)

    def steps_rows(self):
        out = []
        for k in range(self.args.steps):
            for n, rep, dv, ci in self.rows:
                ph = self.phase_ms(rep, ci, k)
                r = {"config_id": config_id(self.args), "step": k, "rank": n,
                     "device_index": dv["index"], "step_ms": fmt(self.step_ms[k], 4),
                     "rank_step_ms": fmt(rep["step_ms"][k], 4),
                     "loss": fmt(self.loss[self.args.warmup + k], 6),
                     "micro_steps": self.args.accum,
                     "skipped": int(rep["skipped"][self.args.warmup + k]),
                     "loss_scale": fmt_scale(rep["scales"][self.args.warmup + k])}
                r.update({p + "_ms": fmt(ph[p], 4) for p in PHASES})
                out.append(r)
        return out

    def phases_rows(self):
        out = []
        steps = range(self.args.steps)
        for n, rep, dv, ci in self.rows:
            for p in PHASES:
                xs = [self.phase_ms(rep, ci, k)[p] for k in steps]
                m = median(xs)
                nbytes = rep["load_bytes"] if p == "load" and self.loads(n, ci) else None
                overhead = ""
                if ci is not None and p != "allreduce":  # all-reduce: off the host's path
                    busy = [b[ci][p] for b in rep["busy"] if ci in b and p in b[ci]]
                    if busy and m > 0:  # the phase's events less the device's busy time
                        overhead = fmt(m - median(busy), 4)
                share = m / self.median_step if self.median_step > 0 else None
                out.append({"config_id": config_id(self.args), "device": n, "phase": p,
                            "median_ms": fmt(m, 4), "mean_ms": fmt(statistics.mean(xs), 4),
                            "share_of_step": fmt(share, 4),
                            "bytes_per_step": "" if nbytes is None else nbytes,
                            "achieved_gbps": fmt(nbytes / (m * 1e-3) / 1e9, 3)
                            if nbytes and m > 0 else "",
                            "python_overhead_ms": overhead})
        return out

    def devices_rows(self):
        out = []
        for n, rep, dv, ci in self.rows:
            base = dv["base_bytes"]
            out.append({"config_id": config_id(self.args), "device": n,
                        "device_index": dv["index"], "name": dv["name"],
                        "alloc_peak_bytes": dv["alloc_peak_bytes"],
                        "device_peak_bytes": dv["device_peak_bytes"],
                        "capacity_bytes": dv["capacity_bytes"],
                        "h2d_bytes_per_step": rep["load_bytes"] if self.loads(n, ci) else "",
                        "device_base_bytes": base,
                        "device_peak_over_base_bytes": "" if base == "" else
                        dv["device_peak_bytes"] - base})
        return out

    def allreduce_span_ms(self, k):
        """Timed step k's all-reduce time as dpscale's run_allreduce_span_ms
        defines it: per bucket, the last rank's completion minus the last
        rank's hand-over (so a rank's wait for the others is not counted as
        transfer), summed over the buckets; None when the ranks timed other
        numbers of buckets."""
        spans = [rep["allreduce_spans"][k] for rep in self.reports]
        n = len(spans[0])
        if n == 0 or any(len(s) != n for s in spans):
            return None
        return sum(max(s[i][1] for s in spans) - max(s[i][0] for s in spans) for i in range(n))

    def bandwidth(self):
        """ddp's (algbw, busbw) in GB/s from the median all-reduce time of a
        step, which all-reduces the parameters' gradients once (--no-sync on)
        or once a micro-step (off); (None, None) without an all-reduce. On
        the CPU that time is dpscale's (allreduce_span_ms: Gloo's callback
        marks each bucket's completion on the host clock). On GPUs the host
        callback runs when NCCL's work is queued, not done, so the time is
        the slowest rank's summed bucket time between CUDA events, its wait
        for the other ranks included: a lower bound of the bandwidth
        dpscale's definition would give."""
        args = self.args
        if args.mode != "ddp" or args.gpus < 2:
            return None, None
        if self.cuda:
            ar = [max(self.phase_ms(rep, ci, k)["allreduce"] for _, rep, _, ci in self.rows)
                  for k in range(args.steps)]
        else:
            ar = [self.allreduce_span_ms(k) for k in range(args.steps)]
            if any(t is None for t in ar):
                return None, None
        if not median(ar) > 0:
            return None, None
        passes = args.accum if args.no_sync == "off" else 1
        algbw = passes * self.spec.params * 4 / (median(ar) * 1e-3) / 1e9
        return algbw, algbw * 2 * (args.gpus - 1) / args.gpus

    def skipped_steps(self):
        """Timed steps GradScaler skipped (rank 0's: every rank skips the
        same); empty without a scaler (fp32, bf16)."""
        if self.args.precision != "fp16":
            return ""
        return sum(self.reports[0]["skipped"][self.args.warmup:])

    def run_row(self):
        args, cols = self.args, self.spec.columns()
        flops = self.spec.fwd_flops()  # None: not known (a module without its model file)
        t, med = self.step_ms, self.median_step
        peaks = [dv["alloc_peak_bytes"] for _, _, dv, _ in self.rows]
        sps = args.batch / (med * 1e-3)
        algbw, busbw = self.bandwidth()
        ddp = args.mode == "ddp"
        return {"config_id": config_id(args), "status": "ok", "error": "", "backend": "torch",
                "emulated": 0, "mode": args.mode, "ngpus": args.gpus,
                "devices": " ".join(str(dv["index"]) for _, _, dv, _ in self.rows),
                **cols, "precision": args.precision,
                "optimizer": args.optimizer, "lr": fmt(args.lr, 6), "global_batch": args.batch,
                "batch_per_gpu": -(-args.batch // args.gpus), "scaling": "weak",
                "bucket_mb": fmt(float(BUCKET_MB), 3) if ddp else "",
                "overlap": 1 if ddp else "", "accum": args.accum,
                "no_sync": args.no_sync if ddp else "", "skipped_steps": self.skipped_steps(),
                "seed": args.seed, "warmup": args.warmup,
                "steps": args.steps, "steps_done": args.steps, "step_ms_median": fmt(med, 4),
                "step_ms_p10": fmt(quantile(t, 0.1), 4),
                "step_ms_p90": fmt(quantile(t, 0.9), 4),
                "step_ms_mean": fmt(statistics.mean(t), 4),
                "step_ms_stdev": fmt(statistics.stdev(t) if len(t) > 1 else 0.0, 4),
                "samples_per_s": fmt(sps, 3), "tokens_per_s": fmt(sps * cols["tokens"], 1),
                "model_tflops": fmt(3 * flops * args.batch / (med * 1e-3) / 1e12, 6)
                if flops is not None else "",
                "loss_first": fmt(self.loss[0], 6), "loss_last": fmt(self.loss[-1], 6),
                "check": "off", "gpu0_alloc_peak_bytes": peaks[0],
                "max_other_alloc_peak_bytes": max(peaks[1:]) if len(peaks) > 1 else "",
                "algbw_gbps": fmt(algbw, 3), "busbw_gbps": fmt(busbw, 3),
                "start_time": args.start_time, "end_time": utc_now()}


def write_results(args, spec, reports, params):
    """steps.csv, devices.csv, phases.csv, runs.csv (last, as dpscale),
    meta.json and torch_ops.csv (rank 0's profiled step by op kind); the
    final parameters where asked."""
    folder = os.path.join(args.out, args.name)
    g = Gathered(args, spec, reports)
    os.makedirs(folder, exist_ok=True)
    write_rows(folder, "steps.csv", g.steps_rows())
    write_rows(folder, "devices.csv", g.devices_rows())
    write_rows(folder, "phases.csv", g.phases_rows())
    run = g.run_row()
    write_rows(folder, "runs.csv", [run])
    write_meta(folder, args)
    ops = g.reports[0].get("ops")
    if ops:  # rank 0's profiled step (dpscale's ops.csv traces rank 0's, or device 0's)
        torch_ops.write(folder, ops)
    if params is not None:
        np.save(args.save_params, params)
    print(f"{run['config_id']}: step {g.median_step:.3f} ms, {run['samples_per_s']} samples/s, "
          f"loss {g.loss[0]:.4f} -> {g.loss[-1]:.4f}; results in {folder}")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def precision_note(args, cuda):
    """meta.json's note on accumulation and precision, where not plain."""
    note = ""
    if args.accum > 1:
        sync = ", every micro-step all-reduced" if args.mode == "ddp" and args.no_sync == "off" \
            else ", all but the last under no_sync()" if args.mode == "ddp" else ""
        note += f"; {args.accum} micro-steps a step{sync}"
    if args.precision != "fp32" and getattr(args, "by_hand", False):
        scaler = "" if args.precision == "bf16" else \
            f" and GradScaler(init_scale={args.init_scale:g}, growth_interval={args.growth_interval})"
        return note + (f"; {args.precision}: dpscale's autocast rules for a model file cast by "
                       f"hand (torch_graph.half_casts){scaler}")
    if args.precision == "bf16":
        note += "; bf16: torch.autocast" if cuda else \
            "; bf16: dpscale's autocast maths cast by hand (torch_model.autocast_bf16)"
    if args.precision == "fp16":
        note += (f"; fp16: torch.autocast and GradScaler(init_scale={args.init_scale:g}, "
                 f"growth_interval={args.growth_interval})")
    return note


def module_note(args):
    """meta.json's note on --module: the user's nn.Module, not dpscale's maths."""
    if not getattr(args, "module", None):
        return ""
    init = f"dpscale's initial parameters of {args.model_file}" if args.model_file else \
        f"its own initialisation (torch.manual_seed({args.seed}))"
    return f"; the nn.Module {args.module} itself (its own ops), from {init}"


def tf32_meta(args):
    """meta.json's "tf32", as dpscale's (results.c, meta_tf32): --tf32 and
    the two flags every rank set from it (torch_train.configure)."""
    from dpstools.torch_train import tf32_flags
    cudnn, matmul = tf32_flags(args.tf32)
    where = "fp32 GEMMs; bf16 and fp16 ones are not affected"
    if args.device == "cpu":
        where += ("; on the CPU only a model file's module takes them, its gemms' operands "
                  "rounded to TF32 (torch_graph)")
    return {"tf32": {"mode": args.tf32, "cudnn_allow_tf32": cudnn,
                     "cuda_matmul_allow_tf32": matmul, "applies_to": where}}


def module_meta(args):
    """meta.json's "module" with --module: its spec and the model file it
    was exported to ("" without one), which summary.md reads."""
    if not getattr(args, "module", None):
        return {}
    return {"module": {"spec": args.module, "model_file": args.model_file or ""}}


def write_meta(folder, args):
    """meta.json with results.META_KEYS, as dpscale's: this invocation,
    and the machine's devices (every GPU PyTorch sees, or the CPU), so that
    compare.py finds two folders of one machine comparable."""
    import torch
    cuda = args.device == "cuda"
    if cuda:
        devices = [{"index": d, "name": torch.cuda.get_device_name(d), "bus_id": "",
                    "memory_bytes": torch.cuda.get_device_properties(d).total_memory}
                   for d in range(torch.cuda.device_count())]
    else:
        devices = [{"index": 0, "name": f"{cpu_name()} (CPU, {os.cpu_count()} cores)",
                    "bus_id": "", "memory_bytes": 0}]
    blas = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    nccl = driver = ""
    if cuda:
        with contextlib.suppress(Exception):
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        with contextlib.suppress(Exception):  # a private call: left empty where it is gone
            v = torch._C._cuda_getDriverVersion()
            driver = f"{v // 1000}.{v % 1000 // 10}"
    try:
        git = subprocess.run(["git", "-C", os.path.dirname(os.path.realpath(__file__)),
                              "describe", "--always", "--dirty"], capture_output=True, text=True,
                             timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        git = ""
    if args.mode == "ddp":
        how = (f"DistributedDataParallel over {'NCCL' if cuda else 'gloo'}, "
               f"ddp loss: {args.ddp_loss}")
    else:
        how = "nn.DataParallel" if args.gpus > 1 else "one device"
    what = f"PyTorch {torch.__version__} on {'CUDA' if cuda else 'the CPU'}: {how}"
    what += module_note(args) + precision_note(args, cuda)
    if getattr(args, "cudnn_benchmark", False):
        what += "; torch.backends.cudnn.benchmark on"
    if cuda:
        memory = {"alloc_peak_bytes": "torch.cuda.max_memory_allocated over the whole run "
                                      "(reset before the model is built, as dpscale's peak)",
                  "device_peak_bytes": "torch.cuda.max_memory_reserved over the whole run"}
    else:
        what += "; one process per rank with one thread"
        memory = {"alloc_peak_bytes": "growth of the rank process's peak resident set over "
                                      "its resident set before the model (approximate)",
                  "device_peak_bytes": "the rank process's peak resident set (ru_maxrss)",
                  "device_base_bytes": "its resident set before the model"}
    meta = {"dpscale_version": "torch_reference.py", "git_describe": git,
            "command_line": args.command_line, "start_time": args.start_time,
            "end_time": utc_now(), "host": socket.gethostname(),
            "os": f"{platform.system()} {platform.release()} {platform.machine()}",
            "backend": "torch", "emulated": False, "note": what, "memory": memory,
            "devices": devices, "topology": "", **tf32_meta(args), **module_meta(args),
            "versions": {
                "driver": driver, "runtime": (torch.version.cuda or "") if cuda else "",
                "cublas": "", "nccl": nccl, "nccl_build": "", "blas": blas.group(1) if blas else "",
                "conv": conv_path(torch, cuda), "torch": torch.__version__, "python": platform.python_version()}}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
