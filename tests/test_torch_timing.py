#!/usr/bin/env python3
"""The PyTorch reference's clock (dpstools.torch_timing.Clock) and its loss
phase (torch_train.Rank): on GPUs one synchronize a step, at its end, and
events on every stream; the loss phase as dpscale's, its backward included.

usage: test_torch_timing.py DPSCALE CASE [ARGS...]
  clock                 Clock on a stand-in torch with two CUDA-like devices
                        (every call recorded): no synchronize inside a step,
                        one of each device at end_step, each phase's events on
                        its devices, a held step's sleeps; on the CPU no CUDA
                        call (needs nothing but the package)
  loss_phase MODE       a Rank on the CPU whose loss's backward moves the
                        clock's time SKIP_S (an hour) ahead: the loss phase
                        holds that hour, backward does not (dp on one device;
                        ddp: one gloo rank, --accum 2 under no_sync, the hook
                        once a micro-step); no real time is bounded, so a busy
                        machine cannot fail it; needs PyTorch
Exit 77 (skip) without PyTorch for loss_phase (scripts/setup.sh --with-torch)."""
from listing import DPSCALE, NOSAN, exit_if_listing, test

TESTS = [test("torch clock one sync", DPSCALE, "clock", suite=NOSAN)]
TESTS += [test("torch loss phase " + m, DPSCALE, "loss_phase", m, suite="torch", timeout=300)
          for m in ("dp", "ddp")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import contextlib
import os
import sys
import tempfile
import time

from dpstools import torch_timing
from dpstools.torch_timing import Clock
from helpers import Failure, expect, need_torch, run_case


class FakeCuda:
    """torch.cuda's calls that Clock makes, each logged as (call, device);
    time is a counter the calls advance by 1 ms, and an event's elapsed
    time may be read only after a synchronize of its device."""

    def __init__(self):
        self.calls, self.now, self.current = [], 0.0, None
        self.synced = set()
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = self.device = None

            def record(self):
                cuda.now += 1.0
                self.t, self.device = cuda.now, cuda.current
                cuda.calls.append(("record", cuda.current))
                cuda.synced.discard(cuda.current)

            def synchronize(self):
                cuda.synced.add(self.device)

            def elapsed_time(self, end):
                if not {self.device, end.device} <= cuda.synced:
                    raise Failure(f"elapsed_time of device {end.device}'s events read before "
                                  f"it was synchronized")
                return end.t - self.t

        self.Event = Event

    @contextlib.contextmanager
    def device(self, d):
        before, self.current = self.current, d
        yield
        self.current = before

    def synchronize(self, d):
        self.calls.append(("synchronize", d))
        self.synced.add(d)

    def _sleep(self, cycles):
        self.now += 1.0
        self.calls.append(("sleep", self.current))


class FakeTorch:
    def __init__(self):
        self.cuda = FakeCuda()


class NoCuda:
    """A torch on the CPU: any CUDA call fails the test."""

    @property
    def cuda(self):
        raise Failure("Clock made a CUDA call on the CPU")


def one_step(clock, held):
    """A step as Rank's: load and forward on the first device, the loss
    ended by the logits' hook which begins backward on every device, the
    optimizer; its wall ms."""
    dev0 = clock.devices[:1]
    clock.start_step(held)
    with clock.phase("load", dev0):
        pass
    with clock.phase("forward", dev0):
        pass
    clock.begin("loss", dev0)
    clock.end("loss")
    clock.begin("backward")
    clock.end("backward")
    with clock.phase("optimizer", dev0):
        pass
    return clock.end_step()


def case_clock(binary):
    """One synchronize a device a step, at its end; each phase's events."""
    torch = FakeTorch()
    cuda = torch.cuda
    clock = Clock(torch, [0, 1])
    cuda.calls = []
    wall = one_step(clock, False)
    syncs = [c for c in cuda.calls if c[0] == "synchronize"]
    expect(sorted(syncs) == [("synchronize", 0), ("synchronize", 1)],
           f"a step synchronized {syncs}, not each device once")
    expect(cuda.calls[-2:] == syncs, f"a synchronize before the step's end: {cuda.calls}")
    records = [c for c in cuda.calls if c[0] == "record"]
    # load, forward, loss, optimizer on device 0; backward on both: 2 events each
    expect(len(records) == 2 * 6, f"events recorded: {records}")
    expect(not [c for c in cuda.calls if c[0] == "sleep"], "an unheld step queued a hold")
    # a phase's span is from its start event to its end event: 1 ms a record apart on one
    # device; backward's on two devices, its four events in turn, 2 ms
    want = {0: {"load": 1.0, "forward": 1.0, "loss": 1.0, "backward": 2.0, "optimizer": 1.0},
            1: {"backward": 2.0}}
    expect(clock.device_ms() == want, f"device phases {clock.device_ms()}, not {want}")
    expect(wall >= 0, f"wall time {wall}")
    clock.size_holds()
    cuda.calls = []
    one_step(clock, True)
    sleeps = [c for c in cuda.calls if c[0] == "sleep"]
    expect(len(sleeps) == 6, f"a held step queued {len(sleeps)} holds, not one a phase and device")
    for bad in (lambda: clock.end("loss"), lambda: (clock.begin("loss"), clock.end_step())):
        try:
            bad()
            raise Failure("Clock took a phase ended without a begin, or a step ended with one open")
        except RuntimeError:
            pass
    cpu = Clock(NoCuda(), [])
    expect(one_step(cpu, False) >= 0 and cpu.host["loss"] >= 0 and cpu.device_ms() == {},
           "the CPU clock")
    print("one synchronize a device at the step's end; events on each phase's devices")
    return 0


SKIP_S = 3600.0  # the clock's time skipped in the loss's backward, far above any real phase


class SkippingTime:
    """The time module as dpstools.torch_timing reads it, whose clocks skip():
    perf_counter and time are the real ones plus every second skipped."""

    def __init__(self):
        self.ahead = 0.0

    def skip(self, seconds):
        self.ahead += seconds

    def perf_counter(self):
        return time.perf_counter() + self.ahead

    def time(self):
        return time.time() + self.ahead


def rank_on_cpu(binary, mode, out, clock):
    """A Rank of the tiny preset on the CPU as torch_reference.py builds it
    (ddp: one gloo rank, --accum 2), its loss's backward skipping the clock
    SKIP_S ahead."""
    import torch
    import torch_reference
    from dpstools import torch_train
    args = ["--device", "cpu", "--model", "tiny", "--dpscale", binary, "--out", out,
            "--name", "t", "--mode", mode]
    if mode == "ddp":
        args += ["--accum", "2"]
        torch.distributed.init_process_group("gloo", init_method="file://" + out + "/store",
                                             rank=0, world_size=1)
    a = torch_reference.parse(args)
    spec = torch_reference.setup(a)
    torch_train.configure(torch, a)
    r = torch_train.Rank(torch, a, spec, 0, 1, [])

    class SlowGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            clock.skip(SKIP_S)
            return g

    ce = r.ce
    r.ce = lambda logits, y: ce(SlowGrad.apply(logits), y)
    return r, a


def case_loss_phase(binary, mode):
    """The loss's backward up to the logits' gradient is the loss phase's."""
    skip = need_torch()
    if skip:
        return skip
    clock, real = SkippingTime(), torch_timing.time
    torch_timing.time = clock
    try:
        with tempfile.TemporaryDirectory(prefix="dpscale-clock-") as out:
            r, a = rank_on_cpu(binary, mode, out, clock)
            r.step(0, False)
            ph = r.step(1, False)["phases"]
    finally:
        torch_timing.time = real
    micro = a.accum
    expect(ph["loss"] >= micro * SKIP_S * 1e3,
           f"the loss phase {ph['loss']:.1f} ms lacks the loss's backward ({micro} x "
           f"{SKIP_S * 1e3:g} ms skipped in it): {ph}")
    expect(ph["backward"] < SKIP_S * 1e3,
           f"backward {ph['backward']:.1f} ms holds the loss's backward ({SKIP_S * 1e3:g} ms "
           f"skipped in it): {ph}")
    if mode == "ddp":
        expect(ph["allreduce"] > 0 and "allreduce_exposed" in ph, f"ddp's all-reduce: {ph}")
    print(f"{mode}, {micro} micro-step(s): loss {ph['loss']:.1f} ms, backward "
          f"{ph['backward']:.2f} ms")
    return 0


CASES = {"clock": case_clock, "loss_phase": case_loss_phase}


if __name__ == "__main__":
    binary, case, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    rc = run_case(" ".join(["torch_timing", case, *rest]), CASES[case], binary, *rest)
    # the interpreter's end with Gloo's threads alive now and then never returns
    # (pytorch/pytorch#75097, as torch_train.rank_main): leave at once, output flushed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
