"""The PyTorch reference's clocks: a step's phases on the host and in CUDA events, DDP's all-reduce.

Clock times one process's steps and their phases (and how long its devices
are really busy, for python_overhead_ms); AllreduceTimer and timed_allreduce
time each bucket's all-reduce as DDP's communication hook; timed_data_parallel
is nn.DataParallel with its scatter, replicate, forward and gather timed.
"""
import contextlib
import time

from dpstools.results import PHASES


class Clock:
    """The phase times of one process, one step at a time. On the CPU,
    host timers (perf_counter) per phase. On GPUs, a pair of CUDA events
    on each device's current stream per phase, and nothing synchronized
    inside the step, as PyTorch trains: end_step's one synchronize of each
    device ends the step, whose wall time is the host's from start_step;
    a phase's host time is then how long Python took to queue it.

    A phase is begin(name)...end(name), or the phase() context around a
    block; its events bracket a span of the stream, so a device that waits
    for Python between kernels counts as busy. To measure how long the
    device is really busy, a held step (warm-up only) first queues
    torch.cuda._sleep on each stream at a phase's begin, long enough for
    Python to queue the whole phase behind it, so the events see the
    kernels back to back; a phase whose queueing outlasted the hold is
    dropped. python_overhead_ms = event time (timed steps) - busy time
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
        """A step begins now (the devices idle: the last step's end_step
        synchronized them)."""
        self.held = held and bool(self.devices)
        self.host = dict.fromkeys(PHASES, 0.0)
        self.spans = []  # (phase, device, start event, end event)
        self.dropped = set()
        self.marks = {}  # phase -> host time at its last begin
        self.open = {}  # phase -> (host start, hold ms, [(device, start event)])
        self.t0 = time.perf_counter()

    def begin(self, name, devices=None):
        """Phase NAME begins on DEVICES (default: every device of the clock)."""
        torch = self.torch
        if name in self.open:
            raise RuntimeError(f"Clock: phase {name} begun twice without an end")
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
        self.open[name] = (t0, hold, starts)

    def end(self, name):
        """Phase NAME ends; returns {device: (start event, end event)} of this span."""
        torch = self.torch
        if name not in self.open:
            raise RuntimeError(f"Clock: phase {name} ended without a begin")
        t0, hold, starts = self.open.pop(name)
        out = {}
        for d, s in starts:
            with torch.cuda.device(d):
                e = torch.cuda.Event(enable_timing=True)
                e.record()
            self.spans.append((name, d, s, e))
            out[d] = (s, e)
        took = (time.perf_counter() - t0) * 1e3
        # a phase the results' PHASES lack (unscale, before its column) is timed, not written
        self.host[name] = self.host.get(name, 0.0) + took
        if hold and took > 0.8 * hold:
            self.dropped.add(name)
        return out

    @contextlib.contextmanager
    def phase(self, name, devices=None):
        self.begin(name, devices)
        yield
        self.end(name)

    def end_step(self):
        """The step's end: one synchronize of each device; returns its wall time in ms."""
        if self.open:
            raise RuntimeError(f"Clock: the step ended with phases {sorted(self.open)} open")
        for d in self.devices:
            self.torch.cuda.synchronize(d)
        return (time.perf_counter() - self.t0) * 1e3

    def device_ms(self):
        """{device: {phase: event time}} of this step (after end_step), for
        the phases each device took part in."""
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
