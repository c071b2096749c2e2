#!/usr/bin/env python3
"""The timeline, trace/<config_id>.json (--trace-steps): Chrome trace-event
JSON, one process per device (dp) or rank (ddp) with names, a slice per
phase per traced step whose length is the step record's (steps.csv; with
every step traced, the medians are phases.csv's), ddp's bucket all-reduces
with their bytes and the bandwidths runs.csv takes from them, and no file
with --trace-steps 0. Usage: test_trace.py
DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, exit_if_listing, test

# trace/<config_id>.json of dp, ddp (forked; under a launcher with Gloo), none
TESTS = [test("trace " + c, DPSCALE, c, timeout=300) for c in ("dp", "ddp", "none", "launcher")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

from helpers import Failure, expect, free_port, has_collectives, read_folder, run_case

RUN = ["run", "--backend", "host", "--model", "tiny", "--gpus", "2", "--warmup", "1"]
# small buckets: several all-reduces a step, the first during backward
DDP = ["--mode", "ddp", "--width", "384", "--bucket-mb", "0.25", "--first-bucket-mb", "0.1"]
# the phases each device runs a step (dp as DataParallel does it over 2 devices)
DP_PHASES = [{"load", "scatter", "replicate", "forward", "gather", "loss", "backward", "reduce",
              "optimizer"},
             {"scatter", "replicate", "forward", "gather", "backward", "reduce"}]
DP_TWO_SPANS = {(1, "scatter")}  # (device, phase) run in two spans a step
DDP_PHASES = {"load", "forward", "loss", "backward", "allreduce_exposed", "optimizer"}
CSV_ROUND_MS = 0.5e-4   # steps.csv and phases.csv: ms to 4 decimals
JSON_ROUND_MS = 0.5e-6  # the trace: us to 3 decimals
FLOAT_REL = 2 ** -23    # a step's allreduce is a float of the buckets' sum (a phase's is the float itself)


def bucket_tolerance(csv_ms, n):
    return CSV_ROUND_MS + n * JSON_ROUND_MS + FLOAT_REL * csv_ms


def run(binary, out, name, *extra):
    cmd = [binary, *RUN, *extra, "--out", out, "--name", name]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    expect(p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return os.path.join(out, name)


def no_constant(name):
    raise ValueError(f"{name} is not JSON")


def load_trace(folder):
    """The one trace file of a folder of one configuration, parsed strictly,
    and the folder's tables (read_folder: the folder still reads, trace/ and all)."""
    files = glob.glob(os.path.join(folder, "trace", "*"))
    tables = read_folder(folder)
    want = os.path.join(folder, "trace", tables[0][0]["config_id"] + ".json")
    expect(files == [want], f"trace files {files}, expected [{want}]")
    with open(want) as f:
        try:
            return json.load(f, parse_constant=no_constant), tables
        except ValueError as e:
            raise Failure(f"{want}: {e}") from None


def events(trace, ph, **match):
    return [e for e in trace["traceEvents"]
            if e["ph"] == ph and all(e.get(k) == v for k, v in match.items())]


def check_names(trace, ndev, mode):
    """One process per device with its name, and the names of its two tracks."""
    procs = {e["pid"]: e["args"]["name"] for e in events(trace, "M", name="process_name")}
    expect(sorted(procs) == list(range(1, ndev + 1)), f"processes {procs}")
    word = "device" if mode == "dp" else "rank"
    for pid, name in procs.items():
        expect(name.startswith(f"{word} {pid - 1} "), f"pid {pid} named {name!r}")
        tracks = {e["tid"] for e in events(trace, "M", name="thread_name", pid=pid)}
        expect(tracks == {1, 2}, f"pid {pid}: tracks {tracks}")
    for e in trace["traceEvents"]:
        expect(e["pid"] in procs, f"an event of no process: {e}")


def steps_by_key(tables):
    """steps.csv's phase cells: {(step, rank): row}."""
    return {(int(r["step"]), int(r["rank"])): r for r in tables[2]}


def phase_col(row, phase):
    return float(row[f"{phase}_ms"])


def phase_ms(mine):
    """{phase: (its slices' summed ms, their parts)} of one step's slices on a device."""
    out = {}
    for e in mine:
        ms, parts = out.get(e["name"], (0.0, []))
        out[e["name"]] = (ms + e["dur"] / 1e3, parts + [e["args"].get("part", 0)])
    return out


def check_slices(trace, tables, traced, expected, two_spans=()):
    """Each traced step has on each device a slice per phase it ran, two
    (parts 1 and 2) for a phase run in two spans (dp's scatter to a replica:
    its input chunk, then its rows of the logits' gradient), together as
    long as steps.csv says; the compute stream's slices do not overlap."""
    rows = steps_by_key(tables)
    for k in traced:
        for r, want in enumerate(expected):
            mine = [e for e in events(trace, "X", pid=r + 1, cat="phase") if e["args"]["step"] == k]
            got = phase_ms(mine)
            expect(sorted(got) == sorted(want), f"step {k} device {r}: slices {sorted(got)}")
            for name, (ms, parts) in got.items():
                split = (r, name) in two_spans
                expect(sorted(parts) == ([1, 2] if split else [0]),
                       f"step {k} device {r} {name}: parts {parts}")
                csv_ms = phase_col(rows[(k, r)], name)
                expect(abs(ms - csv_ms) <= CSV_ROUND_MS + len(parts) * JSON_ROUND_MS,
                       f"step {k} device {r} {name}: {ms} ms, steps.csv {csv_ms} ms")
            for e in mine:
                expect(e["ts"] >= 0, f"{e}: before the first traced step")
            serial = sorted((e for e in mine if e["tid"] == 1), key=lambda e: e["ts"])
            for a, b in zip(serial, serial[1:]):
                expect(b["ts"] >= a["ts"] + a["dur"] - 2e-3, f"device {r}: {a} and {b} overlap")
            step = events(trace, "X", pid=r + 1, cat="step", name=f"step {k}")
            expect(len(step) == 1, f"step {k} device {r}: {len(step)} step slices")


def check_medians(trace, tables, expected):
    """Every step traced: per device and phase, the median over the steps of
    its slices' summed lengths is phases.csv's median (a phase a device does
    not run reads 0)."""
    for row in tables[3]:
        r, phase = int(row["device"]), row["phase"]
        if phase == "allreduce":
            continue  # not a slice of its own: the buckets' (check_buckets)
        per_step = {}
        for e in events(trace, "X", pid=r + 1, cat="phase", name=phase):
            per_step[e["args"]["step"]] = per_step.get(e["args"]["step"], 0.0) + e["dur"] / 1e3
        durs = list(per_step.values())
        got = statistics.median(durs) if durs else 0.0
        expect(bool(durs) == (phase in expected[r]), f"device {r} {phase}: {len(durs)} slices")
        expect(abs(got - float(row["median_ms"])) <= CSV_ROUND_MS + 2 * JSON_ROUND_MS,
               f"device {r} {phase}: median {got} ms, phases.csv {row['median_ms']}")


def check_buckets(trace, tables, traced, nranks):
    """ddp: each traced step on each rank has the same bucket slices, with
    their bytes (all of the gradients together), summing to steps.csv's
    allreduce; each bucket is marked ready inside backward, one after the
    other, so the first is handed to the communication thread while backward
    still runs, and no all-reduce begins before its bucket is ready. (When
    the thread gets a core is the scheduler's business, not checked.)"""
    rows = steps_by_key(tables)
    params = int(tables[0][0]["params"])
    counts = set()
    for k in traced:
        for r in range(nranks):
            mine = sorted((e for e in events(trace, "X", pid=r + 1, cat="allreduce")
                           if e["args"]["step"] == k), key=lambda e: e["args"]["bucket"])
            counts.add(len(mine))
            expect(all(e["tid"] == 2 for e in mine), f"rank {r}: buckets off the comm track")
            expect([e["args"]["bucket"] for e in mine] == list(range(len(mine))),
                   f"step {k} rank {r}: buckets {[e['args'] for e in mine]}")
            total = sum(e["args"]["bytes"] for e in mine)
            expect(total == 4 * params, f"step {k} rank {r}: {total} bytes, not {4 * params}")
            csv_ms = phase_col(rows[(k, r)], "allreduce")
            got = sum(e["dur"] for e in mine) / 1e3
            expect(abs(got - csv_ms) <= bucket_tolerance(csv_ms, len(mine)),
                   f"step {k} rank {r}: buckets {got} ms, steps.csv allreduce {csv_ms} ms")
            bwd = [e for e in events(trace, "X", pid=r + 1, name="backward")
                   if e["args"]["step"] == k][0]
            check_ready(trace, k, r, mine, bwd)
    expect(len(counts) == 1 and counts.pop() >= 2, "bucket slices differ between steps or ranks")


def check_ready(trace, k, r, spans, bwd):
    """Step k on rank r: the buckets' ready marks, in bucket order inside
    backward, each before its all-reduce's begin."""
    ready = sorted((e for e in events(trace, "i", pid=r + 1, cat="bucket_ready")
                    if e["args"]["step"] == k), key=lambda e: e["args"]["bucket"])
    where = f"step {k} rank {r}"
    expect([e["args"]["bucket"] for e in ready] == list(range(len(spans))),
           f"{where}: ready marks {[e['args'] for e in ready]}")
    expect(all(e["tid"] == 1 for e in ready), f"{where}: ready marks off the compute track")
    ts = [e["ts"] for e in ready]
    bwd_end = bwd["ts"] + bwd["dur"] + 2 * JSON_ROUND_MS * 1e3
    expect(all(bwd["ts"] <= t <= bwd_end for t in ts),
           f"{where}: ready at {ts} us, backward {bwd['ts']}..{bwd_end} us")
    expect(ts == sorted(ts) and ts[0] < ts[-1],
           f"{where}: buckets ready at {ts} us, not one after the other")
    late = [s["args"]["bucket"] for s, t in zip(spans, ts) if s["ts"] + 2 * JSON_ROUND_MS * 1e3 < t]
    expect(not late, f"{where}: all-reduce of buckets {late} began before the bucket was ready")


def check_busbw(trace, tables, traced, nranks):
    """ddp: runs.csv's algbw and busbw are what the trace's spans imply, each
    bucket timed from the last rank's begin to the last rank's end (no rank's
    wait for a slower one counted as transfer), at the median over the traced
    steps; never below that, as the slowest rank's own sum would put them."""
    run = tables[0][0]
    nbytes = 4 * int(run["params"])
    per_step = []
    for k in traced:
        spans = [e for e in events(trace, "X", cat="allreduce") if e["args"]["step"] == k]
        total = 0.0
        for b in {e["args"]["bucket"] for e in spans}:
            mine = [e for e in spans if e["args"]["bucket"] == b]
            expect(len(mine) == nranks, f"step {k} bucket {b}: {len(mine)} ranks' spans")
            total += max(e["ts"] + e["dur"] for e in mine) - max(e["ts"] for e in mine)
        per_step.append(total)
    algbw = nbytes / (statistics.median(per_step) * 1e-6) / 1e9
    busbw = algbw * 2 * (nranks - 1) / nranks
    for col, want in (("algbw_gbps", algbw), ("busbw_gbps", busbw)):
        got = float(run[col])
        expect(got >= want * (1 - 1e-3) - 1e-3, f"{col} {got} below the spans' {want:.4f}")
        expect(abs(got - want) <= 1e-3 * want + 1e-3, f"{col} {got}, the spans give {want:.4f}")


def case_dp(binary):
    with tempfile.TemporaryDirectory() as out:
        folder = run(binary, out, "dp", "--mode", "dp", "--steps", "6", "--trace-steps", "3")
        trace, tables = load_trace(folder)
        check_names(trace, 2, "dp")
        expect(trace["otherData"]["first_step"] == 3, f"otherData {trace['otherData']}")
        check_slices(trace, tables, [3, 4, 5], DP_PHASES, DP_TWO_SPANS)
        folder = run(binary, out, "all", "--mode", "dp", "--steps", "5", "--trace-steps", "9")
        trace, tables = load_trace(folder)
        check_slices(trace, tables, range(5), DP_PHASES, DP_TWO_SPANS)
        check_medians(trace, tables, DP_PHASES)


def case_ddp(binary):
    with tempfile.TemporaryDirectory() as out:
        folder = run(binary, out, "ddp", *DDP, "--steps", "6", "--trace-steps", "3")
        trace, tables = load_trace(folder)
        check_names(trace, 2, "ddp")
        check_slices(trace, tables, [3, 4, 5], [DDP_PHASES] * 2)
        check_buckets(trace, tables, [3, 4, 5], 2)
        check_busbw(trace, tables, [3, 4, 5], 2)
        folder = run(binary, out, "all", *DDP, "--steps", "5", "--trace-steps", "5")
        trace, tables = load_trace(folder)
        check_slices(trace, tables, range(5), [DDP_PHASES] * 2)
        check_medians(trace, tables, [DDP_PHASES] * 2)
        check_busbw(trace, tables, range(5), 2)


def case_none(binary):
    """--trace-steps 0: no trace folder; the default traces 3 steps."""
    with tempfile.TemporaryDirectory() as out:
        for mode in (["--mode", "dp"], DDP):
            folder = run(binary, out, mode[1], *mode, "--steps", "4", "--trace-steps", "0")
            expect(not os.path.exists(os.path.join(folder, "trace")), f"{folder}: a trace folder")
        folder = run(binary, out, "default", "--mode", "dp", "--steps", "5")
        trace, tables = load_trace(folder)
        expect(trace["otherData"]["steps"] == 3, f"default: {trace['otherData']}")


def case_launcher(binary):
    """ddp under a launcher with Gloo: ranks share no memory, so the other
    rank's trace records reach rank 0 in its packed records."""
    if not has_collectives(binary, "gloo"):
        return 77
    with tempfile.TemporaryDirectory() as out:
        port = str(free_port())
        procs = []
        for r in range(2):
            env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", DPSCALE_PORT=port)
            cmd = [binary, "run", "--backend", "host", "--model", "tiny", "--warmup", "1",
                   *DDP, "--comm", "gloo", "--steps", "4", "--out", out, "--name", "gloo"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
        for p in procs:
            text = p.communicate(timeout=300)[0]
            expect(p.returncode == 0, f"rank exit {p.returncode}\n{text}")
        folder = os.path.join(out, "gloo")
        trace, tables = load_trace(folder)
        check_names(trace, 2, "ddp")
        check_slices(trace, tables, [1, 2, 3], [DDP_PHASES] * 2)
        rows = steps_by_key(tables)
        for k in (1, 2, 3):
            for r in range(2):
                mine = [e for e in events(trace, "X", pid=r + 1, cat="allreduce")
                        if e["args"]["step"] == k]
                got, csv_ms = sum(e["dur"] for e in mine) / 1e3, phase_col(rows[(k, r)], "allreduce")
                expect(len(mine) >= 2 and abs(got - csv_ms) <= bucket_tolerance(csv_ms, len(mine)),
                       f"step {k} rank {r}: {len(mine)} buckets, {got} ms, steps.csv {csv_ms} ms")


if __name__ == "__main__":
    binary, case = sys.argv[1], sys.argv[2]
    sys.exit(run_case(case, globals()["case_" + case], binary))
