#!/usr/bin/env python3
"""The dpscale model, initialisation, data and optimizer in PyTorch, trained
under nn.DataParallel (dp) or DistributedDataParallel (ddp) on GPUs or on
the CPU, writing a results folder that scripts/dpsresults.py reads as it
reads dpscale's (runs.csv, steps.csv, devices.csv, phases.csv, meta.json,
every column of dpsresults.COLUMNS), so that plot.py draws it and
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
import contextlib
import csv
import ctypes
import datetime
import json
import math
import os
import platform
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from dpsresults import COLUMNS, OPTIONAL_COLUMNS, PHASES  # noqa: E402

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
RNG_PARAMS, RNG_INPUT = 1, 2
BUCKET_MB = 25  # DistributedDataParallel's bucket_cap_mb, as dpscale's --bucket-mb default

# How closely dpscale's loss must follow this script's at every step, as a
# relative difference, for the same seed, shapes, optimizer and learning
# rate (tests/test_torch_reference.py on the host backend, and
# scripts/device-check.sh on GPUs, read these). fp32: both compute the same
# operations in other summation orders (GEMM algorithms, the bias sums, the
# cross-entropy, the all-reduce), each about 1 ulp (6e-8); on the host
# backend every step agreed to 6 decimals (relative <= 5.6e-7), so 1e-5
# leaves a margin of 15 or more. On GPUs TF32 is off in both (configure()).
LOSS_TOL = 1e-5
# bf16: the GEMMs' inputs rounded to 8 significant bits (2**-8 = 3.9e-3
# relative), at other points in each (autocast casts each Linear's input and
# keeps GELU in bf16): a step's loss moves by a few of those roundings
# averaged over its rows; 2e-2 bounds five of them.
LOSS_TOL_BF16 = 2e-2
# The learning rates and step count at which the loss sees a wrong
# hyper-parameter (tests/test_torch_reference.py says how they were found).
FIDELITY_LR = {"sgd": 0.1, "adamw": 0.01}
FIDELITY_STEPS = 20


def mix64(z):
    """SplitMix64 on uint64 arrays (wrapping arithmetic), as kernels/elementwise.h."""
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & MASK
        return z ^ (z >> np.uint64(31))


def uniform(seed, stream, index):
    """dps_uniform: U[-1, 1) from (seed, stream, index), float32."""
    index = np.asarray(index, dtype=np.uint64)
    r = mix64(np.uint64(seed) ^ mix64(np.uint64(stream) ^ mix64(index)))
    return ((r >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / 16777216.0)
            - np.float32(1.0))


def param_count(L, D, T, C):
    return L * (D * D + D) + D * C + C


def init_params(shape, seed):
    """The flat parameter buffer of model_init_params, chunked to bound memory."""
    L, D, T, C = shape
    n = param_count(*shape)
    out = np.empty(n, dtype=np.float32)
    bound = np.float32(1.0) / np.sqrt(np.float32(D))
    step = 1 << 24
    for lo in range(0, n, step):
        idx = np.arange(lo, min(n, lo + step), dtype=np.uint64)
        out[lo:lo + len(idx)] = bound * uniform(seed, RNG_PARAMS, idx)
    return out


def make_batch(shape, seed, step, rows, row0=0):
    """model_make_batch for rows [row0, row0 + rows) of the global batch."""
    L, D, T, C = shape
    stream = RNG_INPUT + (step << 8)
    idx = np.arange(row0 * D, (row0 + rows) * D, dtype=np.uint64)
    x = uniform(seed, stream, idx).reshape(rows, D)
    k = min(D, C)
    labels = np.argmax(x[:, :k], axis=1).astype(np.int64)
    return x, labels


def shards(batch, world):
    """Samples per rank, as dpscale's ddp (numpy.array_split: 10 on 4 is 3, 3, 2, 2)."""
    return [batch // world + (i < batch % world) for i in range(world)]


def presets(dpscale):
    out = subprocess.run([dpscale, "info", "--backend", "host"], capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", line)
        if m:  # name, layers, width, tokens, classes, batch per GPU, params
            table[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 7))
    return table


def build_model(torch, shape, flat):
    """nn.Sequential of Linear + GELU, with dpscale's parameters (W is
    [in, out] there, Linear.weight is [out, in])."""
    L, D, T, C = shape
    nn = torch.nn
    layers, off = [], 0
    for li in range(L + 1):
        out = D if li < L else C
        lin = nn.Linear(D, out)
        w = flat[off:off + D * out].reshape(D, out)
        off += D * out
        b = flat[off:off + out]
        off += out
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
            lin.bias.copy_(torch.from_numpy(b.copy()))
        layers.append(lin)
        if li < L:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def flat_params(model):
    """The parameters of build_model's Sequential as dpscale's flat buffer."""
    parts = []
    for lin in (m for m in model.modules() if m.__class__.__name__ == "Linear"):
        parts.append(lin.weight.detach().float().cpu().numpy().T.ravel())
        parts.append(lin.bias.detach().float().cpu().numpy().ravel())
    return np.concatenate(parts).astype(np.float32)


def optimizer(torch, args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.01)


# ---- timing -------------------------------------------------------------------

class Clock:
    """The phase times of one process, one step at a time. Host timers
    always (perf_counter; on GPUs each phase ends by synchronizing its
    devices, so a host time is the phase's wall time); on GPUs also a pair
    of CUDA events on each device's current stream.

    Events bracket a span, so a device that waits for Python between kernels
    is counted as busy. To measure how long the device is really busy, a
    held step (warm-up only) first queues torch.cuda._sleep on each stream,
    long enough for Python to queue the whole phase behind it, so the events
    see the kernels back to back; a phase whose queueing outlasted the hold
    is dropped. python_overhead_ms = host time (timed steps) - busy time
    (held steps): the part of a phase in which the device waited."""

    def __init__(self, torch, devices):
        self.torch = torch
        self.devices = devices  # CUDA device indices; [] on the CPU
        self.cycles_per_ms = self._calibrate() if devices else 0.0
        self.hold_ms = {}  # phase -> how long a held step holds the streams
        self.start_step(held=False)

    def _calibrate(self):
        torch = self.torch
        with torch.cuda.device(self.devices[0]):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1000)  # load the kernel
            a.record()
            torch.cuda._sleep(10_000_000)
            b.record()
            b.synchronize()
            return 10_000_000 / max(a.elapsed_time(b), 1e-3)

    def start_step(self, held):
        self.held = held and bool(self.devices)
        self.host = dict.fromkeys(PHASES, 0.0)
        self.spans = []  # (phase, device, start event, end event)
        self.dropped = set()
        self.marks = {}  # phase -> host time at its start

    @contextlib.contextmanager
    def phase(self, name, devices=None):
        torch = self.torch
        devs = self.devices if devices is None else devices
        hold = self.hold_ms.get(name, 0.0) if self.held else 0.0
        t0 = time.perf_counter()
        self.marks[name] = t0
        starts = []
        for d in devs:
            with torch.cuda.device(d):
                if hold:
                    torch.cuda._sleep(int(hold * self.cycles_per_ms))
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                starts.append((d, ev))
        yield
        for d, s in starts:
            with torch.cuda.device(d):
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                self.spans.append((name, d, s, e))
        issued = (time.perf_counter() - t0) * 1e3
        for d in devs:
            torch.cuda.synchronize(d)
        self.host[name] += (time.perf_counter() - t0) * 1e3
        if hold and issued > 0.8 * hold:
            self.dropped.add(name)

    def device_ms(self):
        """{device: {phase: event time}} of this step (after its phases
        synchronized), for the phases each device took part in."""
        out = {}
        for name, d, s, e in self.spans:
            if name not in self.dropped:
                per = out.setdefault(d, {})
                per[name] = per.get(name, 0.0) + s.elapsed_time(e)
        return out

    def size_holds(self):
        """Hold lengths from an unheld step: twice the phase's host time, 1 ms at least."""
        self.hold_ms = {k: max(1.0, 2.0 * v) for k, v in self.host.items() if v}


class AllreduceTimer:
    """The state of timed_allreduce, DDP's communication hook: PyTorch's
    default all-reduce (the bucket divided by the world size, then summed
    over the ranks), timed. Each bucket's all-reduce is timed from its
    hand-over to its completion (host clock in the callback; on GPUs CUDA
    events, the second recorded in the callback on the stream that PyTorch
    makes wait for the collective), and the hand-over of the last bucket
    marks the end of backward's own work: what follows, until backward()
    returns, is the exposed all-reduce. Each bucket's span (hand-over,
    completion) is also kept on the wall clock, so that the ranks' spans of
    one bucket line up (Gathered.bandwidth)."""

    def __init__(self, torch, world, device):
        self.torch, self.world = torch, world
        self.device = device  # the rank's CUDA device, None on the CPU
        self.cuda = device is not None
        self.wall_offset_ms = (time.time() - time.perf_counter()) * 1e3
        self.reset()

    def reset(self):
        self.host_ms = []
        self.spans = []  # (begin, end) per bucket in wall-clock ms
        self.events = []  # (start, end) per bucket
        self.last_ready = None  # host time of the last hand-over
        self.last_event = None


def timed_allreduce(timer, bucket):
    """DDP communication hook (register_comm_hook(timer, timed_allreduce)):
    torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook, timed."""
    torch = timer.torch
    t0 = time.perf_counter()
    timer.last_ready = t0
    start = None
    if timer.cuda:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        timer.last_event = start
    buf = bucket.buffer()
    buf.div_(timer.world)
    fut = torch.distributed.all_reduce(buf, async_op=True).get_future()

    def done(f):
        t1 = time.perf_counter()
        timer.host_ms.append((t1 - t0) * 1e3)
        timer.spans.append((t0 * 1e3 + timer.wall_offset_ms, t1 * 1e3 + timer.wall_offset_ms))
        if timer.cuda:
            with torch.cuda.device(timer.device):  # the callback's thread may be on another
                end = torch.cuda.Event(enable_timing=True)
                end.record()
            timer.events.append((start, end))
        return f.value()[0]

    return fut.then(done)


# ---- training -----------------------------------------------------------------

def timed_data_parallel(torch, clock):
    """nn.DataParallel whose scatter, replicate, parallel_apply (forward) and
    gather are timed as dpscale's phases of the same names. The reduce of
    the gradients onto device 0 is Broadcast's backward (ReduceAddCoalesced),
    which runs inside backward(): PyTorch's dp has no separate reduce phase."""

    class TimedDataParallel(torch.nn.DataParallel):
        def scatter(self, inputs, kwargs, device_ids):
            with clock.phase("scatter"):
                return super().scatter(inputs, kwargs, device_ids)

        def replicate(self, module, device_ids):
            with clock.phase("replicate"):
                return super().replicate(module, device_ids)

        def parallel_apply(self, replicas, inputs, kwargs):
            with clock.phase("forward"):
                return super().parallel_apply(replicas, inputs, kwargs)

        def gather(self, outputs, output_device):
            with clock.phase("gather"):
                return super().gather(outputs, output_device)

    return TimedDataParallel


class Rank:
    """One training process: its rank, the devices it drives, its model."""

    def __init__(self, torch, args, shape, rank, world, cuda_devices):
        self.base_rss = rss_bytes()  # before the model, its data and its optimizer
        self.torch, self.args, self.shape = torch, args, shape
        self.rank, self.world = rank, world
        self.cuda = bool(cuda_devices)
        self.devices = cuda_devices
        self.device = torch.device("cuda", cuda_devices[0]) if self.cuda else torch.device("cpu")
        self.clock = Clock(torch, cuda_devices)
        for d in cuda_devices:  # the peak of the whole run, as dpscale's (from before the model)
            torch.cuda.synchronize(d)
            torch.cuda.reset_peak_memory_stats(d)
        flat = init_params(shape, args.seed)
        self.net = build_model(torch, shape, flat).to(self.device)
        self.hook = None
        if args.mode == "ddp":
            kw = {"device_ids": [cuda_devices[0]]} if self.cuda else {}
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.net, bucket_cap_mb=BUCKET_MB, **kw)
            self.hook = AllreduceTimer(torch, world, cuda_devices[0] if self.cuda else None)
            self.model.register_comm_hook(self.hook, timed_allreduce)
        elif len(cuda_devices) > 1:
            self.model = timed_data_parallel(torch, self.clock)(self.net, device_ids=cuda_devices)
        else:
            self.model = self.net
        self.opt = optimizer(torch, args, self.net.parameters())
        self.ce = torch.nn.CrossEntropyLoss(reduction="none")
        T = shape[2]
        sh = shards(args.batch, world)
        self.rows_total = args.batch * T
        self.row0 = sum(sh[:rank]) * T
        self.rows = sh[rank] * T

    def objective(self, per_row):
        """The scalar whose gradient is taken. dp and stock ddp: the mean over
        this process's rows (PyTorch's CrossEntropyLoss; DDP then averages the
        ranks' gradients, so uneven shards weigh their samples unequally).
        ddp with --ddp-loss global (dpscale's): the sum scaled by
        world / global rows, so the average of the ranks' gradients is the
        gradient of the global mean even for uneven shards."""
        if self.args.mode == "ddp" and self.args.ddp_loss == "global":
            return per_row.sum() * (self.world / self.rows_total)
        return per_row.mean()

    def step(self, step, held):
        """One training step; returns (host ms, phases, device phases, loss sum)."""
        torch, args, clock = self.torch, self.args, self.clock
        x, y = make_batch(self.shape, args.seed, step, self.rows, self.row0)
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        if self.cuda:
            xs, ys = xs.pin_memory(), ys.pin_memory()
            for d in self.devices:
                torch.cuda.synchronize(d)
        clock.start_step(held)
        if self.hook:
            self.hook.reset()
        dev0 = self.devices[:1]
        start = time.perf_counter()
        with clock.phase("load", dev0):
            xb = xs.to(self.device, non_blocking=True)
            yb = ys.to(self.device, non_blocking=True)
        bf16 = args.precision == "bf16"
        with torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            if isinstance(self.model, torch.nn.DataParallel):
                logits = self.model(xb)  # scatter, replicate, forward, gather inside
            else:
                with clock.phase("forward", dev0):
                    logits = self.model(xb)
        with clock.phase("loss", dev0):
            per_row = self.ce(logits.float(), yb)
            obj = self.objective(per_row)
            loss_sum = per_row.detach().sum()
        with clock.phase("backward"):
            obj.backward()
        with clock.phase("optimizer", dev0):
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        host_ms = (time.perf_counter() - start) * 1e3
        phases = dict(clock.host)
        device = clock.device_ms()
        if self.hook:
            self.split_backward(phases, device)
        self.last_spans = list(self.hook.spans) if self.hook else []
        return host_ms, phases, device, float(loss_sum)

    def split_backward(self, phases, device):
        """ddp: backward's own work ends when the last bucket is handed over;
        the rest of backward() is the exposed all-reduce."""
        hook = self.hook
        total = phases["backward"]
        if hook.last_ready is not None:
            own = (hook.last_ready - self.clock.marks["backward"]) * 1e3
            phases["backward"], phases["allreduce_exposed"] = own, total - own
        phases["allreduce"] = sum(hook.host_ms)
        if not self.cuda:
            return
        if "backward" in self.clock.dropped:  # a held step whose hold was too short
            self.clock.dropped |= {"allreduce", "allreduce_exposed"}
            return
        per = device.setdefault(self.devices[0], {})
        span = [s for n, d, s, e in self.clock.spans if n == "backward"]
        if span and hook.last_event is not None:
            own = span[0].elapsed_time(hook.last_event)
            per["backward"], per["allreduce_exposed"] = own, per["backward"] - own
        per["allreduce"] = sum(a.elapsed_time(b) for a, b in hook.events)

    def train(self):
        """Warm-up and timed steps: a record per step."""
        args, torch = self.args, self.torch
        recs = []
        busy = []  # device phases of held warm-up steps
        for step in range(args.warmup + args.steps):
            held = self.cuda and 0 < step < args.warmup
            host_ms, phases, device, loss_sum = self.step(step, held)
            if step == 0:
                self.clock.size_holds()
            if held:
                busy.append({d: {p: v for p, v in per.items() if p not in self.clock.dropped}
                             for d, per in device.items()})
            recs.append({"step_ms": host_ms, "phases": phases, "device": device,
                         "loss_sum": loss_sum, "spans": self.last_spans})
        return recs, busy

    def report(self, recs, busy):
        """What rank 0 needs from this process to write the results."""
        torch = self.torch
        timed = recs[self.args.warmup:]
        devs = []
        if self.cuda:
            for d in self.devices:
                p = torch.cuda.get_device_properties(d)
                devs.append({"index": d, "name": torch.cuda.get_device_name(d),
                             "alloc_peak_bytes": torch.cuda.max_memory_allocated(d),
                             "device_peak_bytes": torch.cuda.max_memory_reserved(d),
                             "capacity_bytes": p.total_memory, "base_bytes": ""})
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            devs.append({"index": self.rank, "name": cpu_name() + " (CPU, 1 thread)",
                         "alloc_peak_bytes": max(0, peak - self.base_rss),
                         "device_peak_bytes": peak, "capacity_bytes": "",
                         "base_bytes": self.base_rss})
        return {"rank": self.rank, "devices": devs,
                "step_ms": [r["step_ms"] for r in timed],
                "phases": [r["phases"] for r in timed],
                "device_phases": [r["device"] for r in timed],
                "busy": busy, "loss_sums": [r["loss_sum"] for r in recs],
                "allreduce_spans": [r["spans"] for r in timed],
                "load_bytes": self.rows * self.shape[1] * 4 + self.rows * 8}


def rss_bytes():
    """The resident set of this process now (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


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


# ---- processes ----------------------------------------------------------------

def one_blas_thread():
    """openblas_set_num_threads(1) on every OpenBLAS this process has loaded
    (as dpscale's host backend calls it): torch.set_num_threads does not reach
    an OpenBLAS linked on its own, as Debian's PyTorch and numpy link it."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("openblas_set_num_threads", "openblas_set_num_threads64_"):
            if hasattr(lib, name):
                getattr(lib, name)(1)


def configure(torch, args):
    """Per process (spawned ranks inherit none of it)."""
    if args.device == "cpu":  # one BLAS thread per rank, as the host backend's devices
        torch.set_num_threads(1)
        one_blas_thread()
    else:  # fp32 GEMMs as dpscale's: no TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def run_single(args, shape):
    """dp: one process driving --gpus GPUs (DataParallel), or one CPU device."""
    import torch
    configure(torch, args)
    devices = list(range(args.gpus)) if args.device == "cuda" else []
    r = Rank(torch, args, shape, 0, 1, devices)
    recs, busy = r.train()
    params = flat_params(r.net) if args.save_params else None
    write_results(args, shape, [r.report(recs, busy)], params)


def rank_main(rank, args, shape, init_method, local_rank=None):
    """One ddp rank (spawned, or started by torchrun)."""
    import torch
    import torch.distributed as dist
    configure(torch, args)
    cuda = args.device == "cuda"
    gpu = rank if local_rank is None else local_rank
    if cuda:
        torch.cuda.set_device(gpu)
    # a bounded wait: a rank that never comes, or a collective that never
    # ends, fails with Gloo's or NCCL's message instead of hanging
    dist.init_process_group("nccl" if cuda else "gloo", init_method=init_method, rank=rank,
                            world_size=args.gpus, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        r = Rank(torch, args, shape, rank, args.gpus, [gpu] if cuda else [])
        recs, busy = r.train()
        reports = [None] * args.gpus
        dist.all_gather_object(reports, r.report(recs, busy))
        if rank == 0:
            params = flat_params(r.net) if args.save_params else None
            write_results(args, shape, reports, params)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # The work is done and written. Tearing the process group down, or the
    # interpreter with Gloo's threads alive, now and then never returns
    # (pytorch/pytorch#75097): the rank leaves at once, with its output flushed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ddp(args, shape):
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:  # started by torchrun
        world = int(env["WORLD_SIZE"])
        if world != args.gpus:
            raise Usage(f"--gpus {args.gpus}: torchrun started {world} processes "
                        f"(--nproc_per_node); give the same number")
        rank_main(int(env["RANK"]), args, shape, "env://", int(env.get("LOCAL_RANK", 0)))
        return
    import torch.multiprocessing as mp
    if args.device == "cpu":  # ranks (and a fork server) start with single-threaded libraries
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    if args.start_method == "forkserver":  # the server imports PyTorch once for every rank
        mp.set_forkserver_preload(["torch", "torch.distributed"])
    with tempfile.TemporaryDirectory(prefix="torch-reference-") as tmp:
        # a file rendezvous: no port to pick, none to collide with another run's
        ranks = mp.start_processes(rank_main, args=(args, shape, "file://" + os.path.join(tmp, "store")),
                                   nprocs=args.gpus, start_method=args.start_method, join=False)
        join_ranks(ranks, args.timeout)


def join_ranks(ranks, timeout_s, grace_s=60):
    """Waits for the rank processes of a torch.multiprocessing context (its
    join raises on a rank that failed, and stops the others). Once one rank
    has ended, the rest end within --timeout (Gloo's bound on a collective)
    or never: those still running GRACE_S past it are killed."""
    first_end = None
    while not ranks.join(timeout=1):
        if first_end is None and any(not p.is_alive() for p in ranks.processes):
            first_end = time.monotonic()
        if first_end is not None and time.monotonic() - first_end > timeout_s + grace_s:
            alive = [r for r, p in enumerate(ranks.processes) if p.is_alive()]
            for p in ranks.processes:
                p.kill()
            raise RanksHung(f"PyTorch's ranks {alive} still ran {timeout_s + grace_s:g} s after "
                            f"another had ended (--timeout {timeout_s:g} bounds a collective): "
                            f"killed them; run again")


# ---- results ------------------------------------------------------------------

class Usage(Exception):
    """Bad arguments or an unusable output folder: exit 2 with the message."""


class RanksHung(Exception):
    """Rank processes that did not end: exit 1 with the message."""


def percentile(xs, q):
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def config_id(args):
    """dpscale's config_id for the same configuration, so compare.py and
    plot.py --torch match them; stock ddp loss scaling, which dpscale does
    not have, is marked -stockloss as dpscale marks its own variants."""
    cid = f"{args.mode}-{args.model}-{args.precision}-{args.optimizer}-g{args.gpus}-b{args.batch}"
    if args.mode == "ddp":
        cid += f"-bk{BUCKET_MB}" + ("-stockloss" if args.ddp_loss == "stock" else "")
    return cid


def fmt(x, decimals):
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else f"{x:.{decimals}f}"


def columns(name):
    return COLUMNS[name] + OPTIONAL_COLUMNS.get(name, [])


def check_folder(folder):
    """A folder that holds only torch_reference.py's files of this version."""
    for name in ("runs.csv", "steps.csv", "devices.csv", "phases.csv"):
        path = os.path.join(folder, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            continue
        with open(path, newline="") as f:
            rows = csv.reader(f)
            header = next(rows)
            if header != columns(name):
                raise Usage(f"{path}: columns differ from this version's (dpsresults.COLUMNS); "
                            f"write to a new folder (--name)")
            if name == "runs.csv":
                other = {r[header.index("backend")] for r in rows} - {"torch"}
                if other:
                    raise Usage(f"{path}: holds dpscale results (backend {', '.join(other)}); "
                                f"write PyTorch's to a folder of their own (--name) and set "
                                f"them beside with plot.py --torch")


def write_rows(folder, name, rows):
    path = os.path.join(folder, name)
    cols = columns(name)
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(cols)
        w.writerows([[row.get(c, "") for c in cols] for row in rows])


def median(xs):
    return statistics.median(xs) if xs else float("nan")


class Gathered:
    """Every process's report, one row per device (a rank's device, or each
    of dp's GPUs), and what the files share: the step times (a step's is
    its slowest rank's) and the loss of every step (the global mean)."""

    def __init__(self, args, shape, reports):
        self.args, self.shape = args, shape
        self.cuda = args.device == "cuda"
        self.reports = sorted(reports, key=lambda r: r["rank"])
        self.rows = []  # (device number, report, device record, CUDA index or None)
        for rep in self.reports:
            for dv in rep["devices"]:
                self.rows.append((len(self.rows), rep, dv, dv["index"] if self.cuda else None))
        self.step_ms = [max(rep["step_ms"][k] for rep in self.reports)
                        for k in range(args.steps)]
        self.median_step = median(self.step_ms)
        rows_total = args.batch * shape[2]
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
                     "loss": fmt(self.loss[self.args.warmup + k], 6)}
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
                    host = median([rep["phases"][k][p] for k in steps])
                    busy = [b[ci][p] for b in rep["busy"] if ci in b and p in b[ci]]
                    if busy and host > 0:
                        overhead = fmt(host - median(busy), 4)
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
        """ddp's (algbw, busbw) in GB/s from the median all-reduce time;
        (None, None) without an all-reduce. On the CPU that time is dpscale's
        (allreduce_span_ms: Gloo's callback marks each bucket's completion
        on the host clock). On GPUs the host callback runs when NCCL's work is
        queued, not done, so the time is the slowest rank's summed bucket
        time between CUDA events, its wait for the other ranks included: a
        lower bound of the bandwidth dpscale's definition would give."""
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
        algbw = param_count(*self.shape) * 4 / (median(ar) * 1e-3) / 1e9
        return algbw, algbw * 2 * (args.gpus - 1) / args.gpus

    def run_row(self):
        args, (L, D, T, C) = self.args, self.shape
        t, med = self.step_ms, self.median_step
        peaks = [dv["alloc_peak_bytes"] for _, _, dv, _ in self.rows]
        sps = args.batch / (med * 1e-3)
        algbw, busbw = self.bandwidth()
        ddp = args.mode == "ddp"
        return {"config_id": config_id(args), "status": "ok", "error": "", "backend": "torch",
                "emulated": 0, "mode": args.mode, "ngpus": args.gpus,
                "devices": " ".join(str(dv["index"]) for _, _, dv, _ in self.rows),
                "model": args.model, "layers": L, "width": D, "tokens": T, "classes": C,
                "params": param_count(*self.shape), "precision": args.precision,
                "optimizer": args.optimizer, "lr": fmt(args.lr, 6), "global_batch": args.batch,
                "batch_per_gpu": -(-args.batch // args.gpus), "scaling": "weak",
                "bucket_mb": fmt(float(BUCKET_MB), 3) if ddp else "",
                "overlap": 1 if ddp else "", "seed": args.seed, "warmup": args.warmup,
                "steps": args.steps, "steps_done": args.steps, "step_ms_median": fmt(med, 4),
                "step_ms_p10": fmt(percentile(t, 0.1), 4),
                "step_ms_p90": fmt(percentile(t, 0.9), 4),
                "step_ms_mean": fmt(statistics.mean(t), 4),
                "step_ms_stdev": fmt(statistics.stdev(t) if len(t) > 1 else 0.0, 4),
                "samples_per_s": fmt(sps, 3), "tokens_per_s": fmt(sps * T, 1),
                "model_tflops": fmt(6 * (L * D * D + D * C) * args.batch * T / (med * 1e-3)
                                    / 1e12, 6),
                "loss_first": fmt(self.loss[0], 6), "loss_last": fmt(self.loss[-1], 6),
                "check": "off", "gpu0_alloc_peak_bytes": peaks[0],
                "max_other_alloc_peak_bytes": max(peaks[1:]) if len(peaks) > 1 else "",
                "algbw_gbps": fmt(algbw, 3), "busbw_gbps": fmt(busbw, 3),
                "start_time": args.start_time, "end_time": utc_now()}


def write_results(args, shape, reports, params):
    """steps.csv, devices.csv, phases.csv, runs.csv (last, as dpscale) and
    meta.json; the final parameters where asked."""
    folder = os.path.join(args.out, args.name)
    g = Gathered(args, shape, reports)
    os.makedirs(folder, exist_ok=True)
    write_rows(folder, "steps.csv", g.steps_rows())
    write_rows(folder, "devices.csv", g.devices_rows())
    write_rows(folder, "phases.csv", g.phases_rows())
    run = g.run_row()
    write_rows(folder, "runs.csv", [run])
    write_meta(folder, args)
    if params is not None:
        np.save(args.save_params, params)
    print(f"{run['config_id']}: step {g.median_step:.3f} ms, {run['samples_per_s']} samples/s, "
          f"loss {g.loss[0]:.4f} -> {g.loss[-1]:.4f}; results in {folder}")


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_meta(folder, args):
    """meta.json with dpsresults.META_KEYS, as dpscale's: this invocation,
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
            "devices": devices, "topology": "", "versions": {
                "driver": driver, "runtime": (torch.version.cuda or "") if cuda else "",
                "cublas": "", "nccl": nccl, "nccl_build": "", "blas": blas.group(1) if blas else "",
                "torch": torch.__version__, "python": platform.python_version()}}
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


# ---- main ---------------------------------------------------------------------

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
