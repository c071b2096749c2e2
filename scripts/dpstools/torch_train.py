"""The PyTorch reference's training: a process per rank, its steps, the ranks started.

Rank builds the model (a preset's, torch_model, or a model file's,
torch_graph), times its steps (torch_timing) and
reports what the results need; run_single runs dp (nn.DataParallel, or one
device), run_ddp the ranks of DistributedDataParallel (spawned by
torch.multiprocessing, or started by torchrun); rank 0 writes the results
(torch_results). A step is --accum micro-steps, each its own load,
forward, loss and backward (under ddp all but the last inside no_sync()
unless --no-sync off), then one optimizer step (fp16: through GradScaler);
on GPUs nothing is synchronized inside a step but its end (Clock.end_step).
PyTorch is imported in the processes that train.
"""
import contextlib
import ctypes
import datetime
import os
import resource
import sys
import tempfile
import time

from dpstools import grad_scaler, torch_ops
from dpstools.torch_graph import Graph
from dpstools.torch_model import BUCKET_MB, autocast_bf16, micro_batches, optimizer
from dpstools.torch_results import Usage, config_id, cpu_name, write_results
from dpstools.torch_timing import AllreduceTimer, Clock, timed_allreduce, timed_data_parallel


class RanksHung(Exception):
    """Rank processes that did not end: exit 1 with the message."""


class Exposed:
    """ddp's exposed all-reduce of a step, summed over its micro-steps: the
    host's ms after the last bucket's hand-over in backward(), and on GPUs
    the (hand-over event, backward's end event) pairs, read after the step."""

    def __init__(self):
        self.host_ms = 0.0
        self.events = []


class LossEnd:
    """The end of the loss phase in backward(): a hook on the logits, which
    runs once their gradient is computed (under DataParallel the gathered
    logits on device 0), ends the loss phase and begins backward's, on the
    host clock and in CUDA events. check() after backward(): it ran once."""

    def __init__(self, clock, logits):
        self.clock, self.fired = clock, 0
        self.handle = logits.register_hook(self.on_grad)

    def on_grad(self, grad):
        self.fired += 1
        self.clock.end("loss")
        self.clock.begin("backward")

    def check(self):
        self.handle.remove()
        if self.fired != 1:
            raise RuntimeError(f"the logits' gradient hook ran {self.fired} times in one "
                               f"micro-step's backward(), not once: the loss and backward "
                               f"phases cannot be told apart")


class HostScaler:
    """torch.cuda.amp.GradScaler's interface and rules on the CPU, where
    PyTorch 1.13's disables itself: the loss times the scale, unscale_ as
    _amp_foreach_non_finite_check_and_unscale_ (each gradient times the
    float32 reciprocal, inf or NaN found), step skipped on one, update as
    grad_scaler.update (ATen's amp_update_scale_)."""

    def __init__(self, torch, init_scale, growth_interval):
        self.torch, self.growth_interval = torch, growth_interval
        self.value, self.tracker, self.found = grad_scaler.f32(init_scale), 0, False

    def get_scale(self):
        return self.value

    def scale(self, obj):
        return obj * self.value

    def unscale_(self, opt):
        inv = grad_scaler.f32(1.0 / self.value)
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.mul_(inv)
                    self.found = self.found or not bool(self.torch.isfinite(p.grad).all())

    def step(self, opt):
        if not self.found:
            opt.step()

    def update(self):
        self.value, self.tracker = grad_scaler.update(self.value, self.tracker, self.found,
                                                      growth_interval=self.growth_interval)
        self.found = False


class Rank:
    """One training process: its rank, the devices it drives, its model
    (spec: a torch_model.Preset or a torch_graph.Graph)."""

    def __init__(self, torch, args, spec, rank, world, cuda_devices):
        self.base_rss = rss_bytes()  # before the model, its data and its optimizer
        self.torch, self.args, self.spec = torch, args, spec
        self.rank, self.world = rank, world
        self.cuda = bool(cuda_devices)
        self.devices = cuda_devices
        self.device = torch.device("cuda", cuda_devices[0]) if self.cuda else torch.device("cpu")
        self.clock = Clock(torch, cuda_devices)
        for d in cuda_devices:  # the peak of the whole run, as dpscale's (from before the model)
            torch.cuda.synchronize(d)
            torch.cuda.reset_peak_memory_stats(d)
        self.by_hand = isinstance(spec, Graph) and args.precision != "fp32"
        if self.by_hand:  # a model file: dpscale's autocast rules, cast by hand on any device
            half = torch.bfloat16 if args.precision == "bf16" else torch.float16
            self.net = spec.module(torch, spec.init(args.seed), half)
        elif isinstance(spec, Graph):  # its gemms in TF32 where --tf32 says, on any device
            self.net = spec.module(torch, spec.init(args.seed), tf32=args.tf32)
        else:
            self.net = spec.module(torch, spec.init(args.seed))
        if args.precision == "bf16" and not self.cuda and not self.by_hand:  # by hand too
            self.net = autocast_bf16(torch, self.net)
        self.net = self.net.to(self.device)
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
        self.scaler = None
        if args.precision == "fp16" and self.cuda:
            self.scaler = torch.cuda.amp.GradScaler(init_scale=args.init_scale,
                                                    growth_interval=args.growth_interval)
        elif args.precision == "fp16":  # a model file on the CPU (setup refuses the others)
            self.scaler = HostScaler(torch, args.init_scale, args.growth_interval)
        self.ce = torch.nn.CrossEntropyLoss(reduction="none")
        self.rows_total = args.batch * spec.rows
        self.micro = micro_batches(args.batch, world, args.accum, rank)
        self.samples = sum(n for _, n in self.micro)  # this process's samples a step

    def objective(self, per_row):
        """The scalar whose gradient is taken. dp and stock ddp: the mean over
        this process's rows (PyTorch's CrossEntropyLoss; DDP then averages the
        ranks' gradients, so uneven shards weigh their samples unequally).
        ddp with --ddp-loss global (dpscale's): the sum scaled by
        world / global rows, so the average of the ranks' gradients is the
        gradient of the global mean even for uneven shards.
        With --accum N each micro-step's mean is divided by N (the global
        form already is: its rows_total counts the whole step's rows).
        fp16: the scaled loss, as GradScaler.scale()."""
        if self.args.mode == "ddp" and self.args.ddp_loss == "global":
            obj = per_row.sum() * (self.world / self.rows_total)
        else:
            obj = per_row.mean() / self.args.accum
        return self.scaler.scale(obj) if self.scaler else obj

    def host_batch(self, step, sample0, samples):
        """Samples [sample0, sample0 + samples) of step's global batch on the host."""
        torch = self.torch
        x, y = self.spec.batch(self.args.seed, step, samples, sample0)
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        return (xs.pin_memory(), ys.pin_memory()) if self.cuda else (xs, ys)

    def autocast(self):
        """CUDA's autocast for bf16 and fp16; none for fp32, on the CPU
        (where bf16 is the module's own casts, torch_model.autocast_bf16)
        and for a model file (its casts by hand, torch_graph.half_casts)."""
        torch, prec = self.torch, self.args.precision
        if not self.cuda or prec == "fp32" or self.by_hand:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16 if prec == "bf16" else torch.float16)

    def sync(self, m):
        """DDP's no_sync() around micro-step m but the last (--no-sync on):
        the gradients accumulate locally and the last backward all-reduces
        them; with --no-sync off every micro-step all-reduces."""
        last = m == self.args.accum - 1
        if self.hook and self.args.no_sync == "on" and not last:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def step(self, step, held):
        """One optimizer step of --accum micro-steps; returns its record
        (wall ms, phases, device phases, loss sum, scale used, skipped)."""
        clock = self.clock
        batches = [self.host_batch(step, s0, n) for s0, n in self.micro]
        scale = self.scaler.get_scale() if self.scaler else None  # the scale this step uses
        clock.start_step(held)
        if self.hook:
            self.hook.reset()
        exposed = Exposed()
        loss_sum = 0.0
        for m, (xs, ys) in enumerate(batches):
            with self.sync(m):
                loss_sum = loss_sum + self.micro_step(xs, ys, exposed)
        self.optimizer_step()
        wall_ms = clock.end_step()  # the step's one synchronize
        phases = dict(clock.host)
        device = clock.device_ms()
        if self.hook:
            self.split_backward(phases, device, exposed)
        self.last_spans = list(self.hook.spans) if self.hook else []
        skipped = bool(self.scaler) and self.scaler.get_scale() < scale  # backed off: inf/NaN
        return {"step_ms": wall_ms, "phases": phases, "device": device,
                "loss_sum": float(loss_sum), "scale": scale, "skipped": skipped}

    def micro_step(self, xs, ys, exposed):
        """Load, forward, loss and backward of one micro-batch; returns its
        rows' loss sum (a tensor, read after the step). The loss phase is
        dpscale's: the loss's forward and its backward up to the logits'
        gradient (LossEnd), the casts under autocast included."""
        torch, clock = self.torch, self.clock
        dev0 = self.devices[:1]
        mark = torch.autograd.profiler.record_function  # torch_ops's kinds, when profiled
        with clock.phase("load", dev0), mark(torch_ops.MARK + "load"):
            xb = xs.to(self.device, non_blocking=True)
            yb = ys.to(self.device, non_blocking=True)
        with self.autocast():
            if isinstance(self.model, torch.nn.DataParallel):
                logits = self.model(xb)  # scatter, replicate, forward, gather inside
            else:
                with clock.phase("forward", dev0):
                    logits = self.model(xb)
        loss_end = LossEnd(clock, logits)
        clock.begin("loss", dev0)
        with mark(torch_ops.MARK + "loss"):
            per_row = self.ce(logits.float(), yb)
            obj = self.objective(per_row)
            loss_sum = per_row.detach().sum()
        self.backward(obj, loss_end, exposed)
        return loss_sum

    def backward(self, obj, loss_end, exposed):
        """backward(): the loss phase until the logits' gradient (loss_end),
        then backward; under ddp, what followed the last bucket's hand-over
        in it (the exposed all-reduce) kept in exposed."""
        clock, hook = self.clock, self.hook
        if hook:
            hook.last_ready = hook.last_event = None
        obj.backward()
        loss_end.check()
        before = clock.host["backward"]
        spans = clock.end("backward")  # begun by LossEnd
        if not hook or hook.last_ready is None:  # no all-reduce in this micro-step
            return
        took = clock.host["backward"] - before
        exposed.host_ms += took - (hook.last_ready - clock.marks["backward"]) * 1e3
        if self.cuda and hook.last_event is not None:
            exposed.events.append((hook.last_event, spans[self.devices[0]][1]))

    def optimizer_step(self):
        """The optimizer's step and the gradients cleared; fp16: GradScaler's
        unscale (phase unscale), step (skipped on inf/NaN) and update."""
        clock, dev0 = self.clock, self.devices[:1]
        if self.scaler:
            with clock.phase("unscale", dev0):
                self.scaler.unscale_(self.opt)
        with clock.phase("optimizer", dev0):
            if self.scaler:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()
            self.opt.zero_grad(set_to_none=True)

    def split_backward(self, phases, device, exposed):
        """ddp: backward's own work ends when the last bucket is handed over;
        the rest of backward() is the exposed all-reduce (summed over the
        micro-steps that all-reduce; on GPUs read from the events after the
        step's synchronize)."""
        hook = self.hook
        if hook.last_ready is not None:  # the last micro-step always all-reduces
            phases["backward"] -= exposed.host_ms
            phases["allreduce_exposed"] = exposed.host_ms
        phases["allreduce"] = sum(hook.host_ms)
        if not self.cuda:
            return
        if "backward" in self.clock.dropped:  # a held step whose hold was too short
            self.clock.dropped |= {"allreduce", "allreduce_exposed"}
            return
        per = device.setdefault(self.devices[0], {})
        if exposed.events:
            ms = sum(a.elapsed_time(b) for a, b in exposed.events)
            per["backward"] = per.get("backward", 0.0) - ms
            per["allreduce_exposed"] = ms
        per["allreduce"] = sum(a.elapsed_time(b) for a, b in hook.events)

    def train(self):
        """Warm-up and timed steps: a record per step."""
        args = self.args
        recs = []
        busy = []  # device phases of held warm-up steps
        for d in self.devices:  # the model's set-up done: the first step starts on idle devices
            self.torch.cuda.synchronize(d)
        for step in range(args.warmup + args.steps):
            held = self.cuda and 0 < step < args.warmup
            rec = self.step(step, held)
            if step == 0:
                self.clock.size_holds()
            if held:
                busy.append({d: {p: v for p, v in per.items() if p not in self.clock.dropped}
                             for d, per in rec["device"].items()})
            rec["spans"] = self.last_spans
            recs.append(rec)
        return recs, busy

    def profiled_step(self, config_id):
        """One more step, after the timed ones and the report, under
        torch.profiler: its ops by kind (torch_ops.op_rows, ops.csv's rows).
        Every rank takes it (its collectives need them all)."""
        step = self.args.warmup + self.args.steps
        with torch_ops.profile(self.torch, self.cuda) as prof:
            rec = self.step(step, held=False)
        return torch_ops.op_rows(torch_ops.host_events(prof), self.cuda, rec["step_ms"], step,
                                 config_id)

    def final_params(self):
        """The trained parameters in dpscale's flat layout (every rank calls it)."""
        return self.spec.flat(self.net)

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
                "scales": [r["scale"] for r in recs], "skipped": [r["skipped"] for r in recs],
                "allreduce_spans": [r["spans"] for r in timed],
                "load_bytes": self.samples * self.spec.sample_bytes()}


def rss_bytes():
    """The resident set of this process now (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


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


def tf32_flags(mode):
    """PyTorch's (cudnn.allow_tf32, cuda.matmul.allow_tf32) for --tf32 MODE:
    default is PyTorch 2's defaults (True, False), on both True
    (set_float32_matmul_precision("high") too), off both False."""
    return mode != "off", mode == "on"


def configure(torch, args):
    """Per process (spawned ranks inherit none of it)."""
    if args.device == "cpu":  # one BLAS thread per rank, as the host backend's devices
        torch.set_num_threads(1)
        one_blas_thread()
    # fp32 GEMMs in TF32 as dpscale's --tf32 (the CPU's kernels ignore the flags:
    # a model file's module rounds its TF32 gemms' operands itself, torch_graph)
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = tf32_flags(args.tf32)
    torch.backends.cudnn.benchmark = bool(getattr(args, "cudnn_benchmark", False))


def run_single(args, spec):
    """dp: one process driving --gpus GPUs (DataParallel), or one CPU device."""
    import torch
    configure(torch, args)
    devices = list(range(args.gpus)) if args.device == "cuda" else []
    r = Rank(torch, args, spec, 0, 1, devices)
    recs, busy = r.train()
    params = spec.flat(r.net) if args.save_params else None
    report = r.report(recs, busy)
    report["ops"] = r.profiled_step(config_id(args))  # after all that was measured
    write_results(args, spec, [report], params)


def rank_main(rank, args, spec, init_method, local_rank=None, rank_cls=None):
    """One ddp rank (spawned, or started by torchrun); rank_cls: a Rank of
    another kind (torch_reference.py's ShardedRank), Rank by default."""
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
        r = (rank_cls or Rank)(torch, args, spec, rank, args.gpus, [gpu] if cuda else [])
        recs, busy = r.train()
        reports = [None] * args.gpus
        report = r.report(recs, busy)
        params = r.final_params() if args.save_params else None  # every rank: may be collective
        report["ops"] = r.profiled_step(config_id(args))  # after all that was measured
        dist.all_gather_object(reports, report)
        if rank == 0:
            write_results(args, spec, reports, params)
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


def run_ddp(args, spec, rank_cls=None):
    """The ranks of rank_main under torchrun (this process is one), or
    spawned here; rank_cls as rank_main's."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:  # started by torchrun
        world = int(env["WORLD_SIZE"])
        if world != args.gpus:
            raise Usage(f"--gpus {args.gpus}: torchrun started {world} processes "
                        f"(--nproc_per_node); give the same number")
        rank_main(int(env["RANK"]), args, spec, "env://", int(env.get("LOCAL_RANK", 0)), rank_cls)
        return
    import torch.multiprocessing as mp
    if args.device == "cpu":  # ranks (and a fork server) start with single-threaded libraries
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    if args.start_method == "forkserver":  # the server imports PyTorch once for every rank
        mp.set_forkserver_preload(["torch", "torch.distributed"])
    with tempfile.TemporaryDirectory(prefix="torch-reference-") as tmp:
        # a file rendezvous: no port to pick, none to collide with another run's
        store = "file://" + os.path.join(tmp, "store")
        ranks = mp.start_processes(rank_main, args=(args, spec, store, None, rank_cls),
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
