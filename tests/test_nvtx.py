#!/usr/bin/env python3
"""dpscale's NVTX ranges as an NVTX client sees them: dpscale runs on the
host backend with NVTX_INJECTION64_PATH naming tests/nvtx_record.c's library
(NVTX's injection interface, the one Nsight Systems uses), which logs every
call to DPSCALE_NVTX_LOG; the log is checked against docs/gpu.md's ranges.
Usage: test_nvtx.py DPSCALE CASE LIBRARY, CASE one of dp, ddp, off; LIBRARY
is `none` in a build without NVTX (meson builds the library exactly when it
defines DPS_HAVE_NVTX), and the test skips. Exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, NVTX_RECORD, exit_if_listing, test

# NVTX_RECORD: tests/nvtx_record.c's library, or "none" in a build without NVTX
TESTS = [test("nvtx " + c, DPSCALE, c, NVTX_RECORD, timeout=300) for c in ("dp", "ddp", "off")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import sys
import tempfile
from collections import namedtuple

from helpers import dpscale, expect, run_case

STEPS, WARMUP = 3, 1
DP_PHASES = ["load", "scatter", "replicate", "forward", "gather", "loss", "backward", "reduce",
             "optimizer"]  # docs/DESIGN.md, "The dp step" (--dp-impl torch)
DDP_PHASES = ["backward"]  # docs/gpu.md: "in ddp a `backward` range per rank"
Event = namedtuple("Event", "line tid pid kind domain msg payload category")
Range = namedtuple("Range", "name payload category first last children")


def read_log(path):
    """The library's lines as Events (none when no NVTX call was made)."""
    if not os.path.exists(path):
        return []
    events = []
    with open(path) as f:
        for n, text in enumerate(f, 1):
            cells = text.rstrip("\n").split("\t")
            expect(len(cells) == 7, f"{path}:{n}: {len(cells)} fields, expected 7: {text!r}")
            tid, pid, kind, domain, msg, payload, category = cells
            events.append(Event(n, int(tid), int(pid), kind, domain, msg, payload, int(category)))
    return events


def run(binary, lib, log, *args, stderr=None):
    """dpscale run ARGS on the host backend, NVTX injected; the log's Events
    (its standard error appended to the list `stderr` when one is given)."""
    os.environ.update(NVTX_INJECTION64_PATH=lib, DPSCALE_NVTX_LOG=log)
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "run", "--model", "tiny", "--gpus", "2", "--steps", str(STEPS),
                    "--warmup", str(WARMUP), *args, out=out, check_rc=0)
    if stderr is not None:
        stderr.append(p.stderr)
    return read_log(log)


def expect_injected(events, lib):
    expect(not [e for e in events if e.kind == "init_failed"],
           f"{lib}: NVTX's callback table lacks a module or an id the library installs")
    expect([e for e in events if e.kind == "init"],
           f"no NVTX call reached {lib}: NVTX_INJECTION64_PATH ignored, or dpscale built "
           f"without DPS_HAVE_NVTX although meson built the library")
    foreign = [f"line {e.line}: {e.kind} {e.msg} in {e.domain}" for e in events
               if e.kind in ("push", "pop", "mark") and e.domain != "dpscale"]
    expect(not foreign, f"NVTX events outside the dpscale domain: {foreign[:5]}")


def thread_ranges(events):
    """{tid: top-level Ranges}, each with its children; pushes and pops
    balance on every thread, or Failure names the thread and the line."""
    stacks, roots, names = {}, {}, thread_names(events)
    for e in events:
        if e.kind == "push":
            stacks.setdefault(e.tid, []).append(Range(e.msg, e.payload, e.category, e.line, [0], []))
        elif e.kind == "pop":
            stack = stacks.get(e.tid, [])
            expect(stack, f"log line {e.line}: pop without a range open on thread "
                   f"{names.get(e.tid, e.tid)} (process {e.pid})")
            r = stack.pop()
            r.last[0] = e.line
            (stack[-1].children if stack else roots.setdefault(e.tid, [])).append(r)
    open_ = {names.get(t, t): [r.name for r in s] for t, s in stacks.items() if s}
    expect(not open_, f"ranges pushed and never popped (innermost last), by thread: {open_}")
    return roots


def thread_names(events):
    return {int(e.payload): e.msg for e in events if e.kind == "name_thread"}


def check_domain(events, pid):
    names = [e.msg for e in events if e.kind == "domain_create" and e.pid == pid]
    expect("dpscale" in names, f"process {pid}: no `dpscale` domain created (domains: {names})")
    strings = {e.msg for e in events if e.kind == "register_string" and e.pid == pid}
    missing = sorted(set(DP_PHASES + ["step", "allreduce"]) - strings)
    expect(not missing, f"process {pid}: strings not registered: {missing}")


def check_steps(label, roots, phases):
    """A thread's top-level ranges: one `step` per step (payload its index),
    each holding exactly PHASES in order, with nothing nested in those."""
    names = [r.name for r in roots]
    expect(names == ["step"] * (STEPS + WARMUP),
           f"{label}: top-level ranges {names}, expected {STEPS + WARMUP} `step` ranges")
    for i, s in enumerate(roots):
        expect(s.payload == str(i), f"{label}: step range {i} carries payload {s.payload}")
        inner = [c.name for c in s.children]
        expect(inner == phases, f"{label}: step {i} holds {inner}, expected {phases}")
        nested = [c.name for c in s.children if c.children]
        expect(not nested, f"{label}: step {i}: ranges nested in phase(s) {nested}")


def within(r, outer):
    return outer.first < r.first and r.last[0] < outer.last[0]


def case_dp(binary, lib, log):
    """The main thread's steps hold dp's phases; each worker's forward and
    backward lie inside the main thread's phase of that name."""
    events = run(binary, lib, log, "--mode", "dp")
    expect_injected(events, lib)
    pid = events[0].pid
    expect(all(e.pid == pid for e in events), "dp: NVTX calls from more than one process")
    check_domain(events, pid)
    roots, names = thread_ranges(events), thread_names(events)
    check_steps("dp main thread", roots.get(pid, []), DP_PHASES)
    workers = sorted(t for t, n in names.items() if n.startswith("dp-worker-"))
    expect(len(workers) == 2, f"dp: worker threads named {sorted(names.values())}, expected 2")
    stray = sorted(set(roots) - set(workers) - {pid})
    expect(not stray, f"dp: ranges on unnamed threads {stray}")
    for t in workers:
        label = f"dp {names[t]}"
        mine = roots.get(t, [])
        got = [r.name for r in mine]
        expect(got == ["forward", "backward"] * (STEPS + WARMUP),
               f"{label}: ranges {got}, expected forward, backward per step")
        for r in mine:
            expect(not r.children, f"{label}: ranges nested in {r.name}")
            outer = [p for s in roots[pid] for p in s.children if p.name == r.name and within(r, p)]
            expect(outer, f"{label}: {r.name} at log line {r.first} outside the main thread's "
                   f"{r.name} range")


def rank_of(names, tid, prefix, label):
    name = names.get(tid, "")
    expect(name.startswith(prefix), f"{label}: thread {tid} named {name!r}, expected {prefix}N")
    return int(name[len(prefix):])


def bucket_ranges(label, roots, names, pid, comm_tids, steps):
    """The rank's bucket ranges: `allreduce`, a nonzero byte payload, each
    inside one of the rank's steps; [(category, bytes)] per step."""
    per_step = [[] for _ in steps]
    for t in comm_tids:
        for r in roots[t]:
            where = f"{label} {names.get(t, t)}: log line {r.first}"
            expect(r.name == "allreduce" and not r.children, f"{where}: a {r.name} range")
            expect(r.payload.isdigit() and int(r.payload) > 0,
                   f"{where}: bucket range payload {r.payload!r}, expected its bytes (> 0)")
            i = [k for k, s in enumerate(steps) if within(r, s)]
            expect(i, f"{where}: bucket range outside every step range of its rank")
            per_step[i[0]].append((r.category, int(r.payload)))
    empty = [i for i, b in enumerate(per_step) if not b]
    expect(not empty, f"{label}: no bucket range in step(s) {empty}")
    return per_step


def case_ddp(binary, lib, log):
    """Each rank (a process): its steps hold `backward`; its communication
    thread's bucket ranges carry their bytes, the same buckets on every rank."""
    events = run(binary, lib, log, "--mode", "ddp")
    expect_injected(events, lib)
    roots, names = thread_ranges(events), thread_names(events)
    pids = sorted({e.pid for e in events if e.kind == "push"})
    expect(len(pids) == 2, f"ddp: ranges from {len(pids)} process(es) {pids}, expected 2 ranks")
    buckets = {}
    for pid in pids:
        check_domain(events, pid)
        label = f"ddp process {pid}"
        rank = rank_of(names, pid, "ddp-rank-", label)
        label = f"ddp rank {rank} (process {pid})"
        check_steps(label, roots.get(pid, []), DDP_PHASES)
        tids = {e.tid for e in events if e.pid == pid and e.tid in roots} - {pid}
        for t in tids:
            expect(rank_of(names, t, "comm-rank-", label) == rank,
                   f"{label}: thread {names[t]} with ranges")
        buckets[rank] = bucket_ranges(label, roots, names, pid, tids, roots[pid])
    expect(sorted(buckets) == [0, 1], f"ddp: ranks {sorted(buckets)}, expected 0 and 1")
    expect(buckets[0] == buckets[1],
           f"ddp: ranks' buckets (index, bytes) per step differ: {buckets[0]} vs {buckets[1]}")


def case_off(binary, lib, log):
    """--no-nvtx: no range, no domain; at most the library's own start. Its
    old name --no-trace (given twice here) does the same and warns once."""
    errs = []
    events = run(binary, lib, log, "--mode", "ddp", "--no-nvtx")
    alias = run(binary, lib, log + ".dp", "--mode", "dp", "--no-trace", "--no-trace", stderr=errs)
    made = [f"line {e.line}: {e.kind} {e.msg}" for e in events + alias if e.kind not in ("init",)]
    expect(not made, f"--no-nvtx / --no-trace: NVTX calls recorded: {made[:5]}")
    warning = "--no-trace is now --no-nvtx (NVTX ranges; the timeline is --trace-steps)"
    expect(errs[0].count(warning) == 1,
           f"--no-trace given twice: expected the warning once, stderr:\n{errs[0]}")


def main():
    binary, case, lib = sys.argv[1:4]
    if lib == "none":
        print("SKIP: this build has no NVTX (meson found no nvtx3/nvToolsExt.h, or -Dnvtx=disabled), "
              "so dpscale emits no ranges and tests/nvtx_record.c was not built")
        return 77
    if not os.path.exists(lib):
        print(f"FAIL nvtx {case}: {lib} missing", file=sys.stderr)
        return 1
    fn = {"dp": case_dp, "ddp": case_ddp, "off": case_off}[case]
    with tempfile.TemporaryDirectory() as tmp:
        return run_case(f"nvtx {case}", fn, binary, os.path.abspath(lib),
                        os.path.join(tmp, "nvtx.log"))


if __name__ == "__main__":
    sys.exit(main())
