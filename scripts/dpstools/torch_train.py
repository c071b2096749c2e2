"""The PyTorch reference's training: a process per rank, its steps, the ranks started.

Rank builds the model (a preset's, torch_model, or a model file's,
torch_graph), times its steps (torch_timing) and
reports what the results need; run_single runs dp (nn.DataParallel, or one
device), run_ddp the ranks of DistributedDataParallel (spawned by
torch.multiprocessing, or started by torchrun); rank 0 writes the results
(torch_results). PyTorch is imported in the processes that train.
"""
import contextlib
import ctypes
import datetime
import os
import resource
import sys
import tempfile
import time

from dpstools.torch_model import BUCKET_MB, optimizer, shards
from dpstools.torch_results import Usage, cpu_name, write_results
from dpstools.torch_timing import AllreduceTimer, Clock, timed_allreduce, timed_data_parallel


class RanksHung(Exception):
    """Rank processes that did not end: exit 1 with the message."""


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
        self.net = spec.module(torch, spec.init(args.seed)).to(self.device)
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
        sh = shards(args.batch, world)
        self.rows_total = args.batch * spec.rows
        self.sample0, self.samples = sum(sh[:rank]), sh[rank]

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
        x, y = self.spec.batch(args.seed, step, self.samples, self.sample0)
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
        args = self.args
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


def configure(torch, args):
    """Per process (spawned ranks inherit none of it)."""
    if args.device == "cpu":  # one BLAS thread per rank, as the host backend's devices
        torch.set_num_threads(1)
        one_blas_thread()
    else:  # fp32 GEMMs as dpscale's: no TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def run_single(args, spec):
    """dp: one process driving --gpus GPUs (DataParallel), or one CPU device."""
    import torch
    configure(torch, args)
    devices = list(range(args.gpus)) if args.device == "cuda" else []
    r = Rank(torch, args, spec, 0, 1, devices)
    recs, busy = r.train()
    params = spec.flat(r.net) if args.save_params else None
    write_results(args, spec, [r.report(recs, busy)], params)


def rank_main(rank, args, spec, init_method, local_rank=None):
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
        r = Rank(torch, args, spec, rank, args.gpus, [gpu] if cuda else [])
        recs, busy = r.train()
        reports = [None] * args.gpus
        dist.all_gather_object(reports, r.report(recs, busy))
        if rank == 0:
            params = spec.flat(r.net) if args.save_params else None
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


def run_ddp(args, spec):
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:  # started by torchrun
        world = int(env["WORLD_SIZE"])
        if world != args.gpus:
            raise Usage(f"--gpus {args.gpus}: torchrun started {world} processes "
                        f"(--nproc_per_node); give the same number")
        rank_main(int(env["RANK"]), args, spec, "env://", int(env.get("LOCAL_RANK", 0)))
        return
    import torch.multiprocessing as mp
    if args.device == "cpu":  # ranks (and a fork server) start with single-threaded libraries
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(var, "1")
    if args.start_method == "forkserver":  # the server imports PyTorch once for every rank
        mp.set_forkserver_preload(["torch", "torch.distributed"])
    with tempfile.TemporaryDirectory(prefix="torch-reference-") as tmp:
        # a file rendezvous: no port to pick, none to collide with another run's
        ranks = mp.start_processes(rank_main, args=(args, spec, "file://" + os.path.join(tmp, "store")),
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
