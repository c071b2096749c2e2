#!/usr/bin/env python3
"""The micro-benchmarks: comm-bench's all-reduce times and checks, its
reduce-scatters and all-gathers on the shared-memory ring and on Gloo, a rank that
exits, hangs, runs out of memory or is killed; scripts/allreduce_vs_mpi.sh's
table beside Open MPI; dpscale links's paths, sizes and host memory.
Usage: test_microbench.py DPSCALE CASE [ARGS...] | --list; exit 0 pass, 1
fail, 77 skip (meson's convention)."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a hang guard: far above any run here on a busy machine under ASan
# no case bounds a time; meson's timeouts guard a hang only
TESTS = [test("comm-bench", DPSCALE, "comm_bench", timeout=HANG_S),
         test("comm-bench ops", DPSCALE, "comm_bench_ops", timeout=2 * HANG_S),
         test("comm-bench faults", DPSCALE, "comm_bench_faults", timeout=3 * HANG_S),
         test("comm-bench vs mpi", DPSCALE, "vs_mpi", timeout=HANG_S + 60),
         test("links", DPSCALE, "links", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import resource
import signal
import subprocess
import tempfile
import time
from collections import defaultdict

from helpers import (Failure, children, dpscale, expect, expect_exit, has_collectives, read_table,
                     run_cases)

NEVER_S = str(2 * HANG_S)  # a --timeout no rank may reach: its end is the rank's exit
HANG_TIMEOUT_S = "20"  # a hung rank's --timeout: far above a step or set-up of these ranks


def run(cmd, **kwargs):
    """subprocess.run(cmd) under the hang guard; past it the case fails as hung."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, **kwargs)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)}: hung, still running after {HANG_S} s") from None


def guarded(binary, *args, **kwargs):
    """helpers.dpscale(binary, ARGS) under the hang guard."""
    try:
        return dpscale(binary, *args, timeout=HANG_S, **kwargs)
    except subprocess.TimeoutExpired:
        raise Failure(f"dpscale {' '.join(args)}: hung, still running after {HANG_S} s") \
            from None


def case_comm_bench(binary):
    """comm-bench times and checks the host all-reduce for every size and rank count."""
    with tempfile.TemporaryDirectory() as out:
        guarded(binary, "comm-bench", "--gpus", "2,3", "--sizes", "4,1M", "--steps", "2",
                "--warmup", "1", out=out, backend=None, check_rc=0)
        rows = read_table(os.path.join(out, "t", "allreduce.csv"))
        got = sorted((int(r["nranks"]), int(r["bytes"])) for r in rows)
        expect(got == [(2, 4), (2, 1 << 20), (3, 4), (3, 1 << 20)], f"rows {got}")
        for r in rows:
            expect(r["op"] == "all-reduce" and r["method"] == "shm", f"row {r}")
            expect_bandwidths(r)


def expect_bandwidths(r):
    """A passed row's algbw = bytes / time and nccl-tests' busbw: algbw x 2(n-1)/n for an
    all-reduce, (n-1)/n for a reduce-scatter or all-gather (bytes: the whole buffer)."""
    expect(r["check"] == "pass" and float(r["time_us"]) > 0, f"row {r}")
    t = float(r["time_us"])  # written to 0.1 us: the time measured lay within 0.05 us of it
    gbps = [int(r["bytes"]) / (x * 1e-6) / 1e9 for x in (t + 0.05, max(t - 0.05, 1e-3))]
    expect(0.99 * gbps[0] - 1e-3 <= float(r["algbw_gbps"]) <= 1.01 * gbps[1] + 1e-3, f"algbw {r}")
    n = int(r["nranks"])
    factor = (2 if r["op"] == "all-reduce" else 1) * (n - 1) / n
    expect(abs(float(r["busbw_gbps"]) - float(r["algbw_gbps"]) * factor) < 2e-3, f"busbw {r}")


def case_comm_bench_ops(binary):
    """comm-bench --op: reduce-scatter and all-gather (and all-reduce) on 2 and 3 ranks over
    shm's ring and Gloo, at sizes of fewer elements than ranks and of uneven chunks: a row
    per op, rank count and size, each checked, with nccl-tests' bandwidths."""
    ops = ["all-reduce", "reduce-scatter", "all-gather"]
    sizes = [4, 4100, 65536]  # 1 element; 1025 (uneven on 2 and 3 ranks); 16384
    with tempfile.TemporaryDirectory() as out:
        for comm in ("shm", "gloo"):
            if comm == "gloo" and not has_collectives(binary, "gloo"):
                continue
            p = guarded(binary, "comm-bench", "--comm", comm, "--op", ",".join(ops), "--gpus",
                        "2,3", "--sizes", "4,4100,64K", "--steps", "2", "--warmup", "1", out=out,
                        name=comm, backend=None, check_rc=0)
            expect("reduce-scatter" in p.stdout and "all-gather" in p.stdout, p.stdout)
            rows = read_table(os.path.join(out, comm, "allreduce.csv"))
            got = sorted((r["op"], int(r["nranks"]), int(r["bytes"])) for r in rows)
            want = sorted((o, n, b) for o in ops for n in (2, 3) for b in sizes)
            expect(got == want, f"{comm}: rows {got}")
            for r in rows:
                expect(r["method"] == comm and r["backend"] == "host", f"{comm}: row {r}")
                expect_bandwidths(r)
        p = dpscale(binary, "comm-bench", "--op", "all-to-all", out=out, name="bad", backend=None)
        expect_exit(p, 2, "--op")


def comm_bench_fails(binary, out, name, *args, rc=1):
    """comm-bench ARGS fails with rc in one line; returns (stdout, that line)."""
    p = guarded(binary, "comm-bench", "--sizes", "64K", *args, out=out, name=name, backend=None)
    expect(p.returncode == rc, f"{args}: exit {p.returncode}, expected {rc}\n{p.stderr}")
    lines = p.stderr.splitlines()
    expect(len(lines) == 1, f"{args}: expected one line on stderr, got {p.stderr!r}")
    return p.stdout, lines[0]


def case_comm_bench_faults(binary):
    """A comm-bench rank that exits, hangs or is killed: which rank and how, one line, no
    results line; a rank's exit or death ends the ranks with no --timeout in reach (its
    launcher reaps it), a hang by --timeout."""
    with tempfile.TemporaryDirectory() as out:
        stdout, err = comm_bench_fails(binary, out, "exit", "--gpus", "3", "--steps", "1000",
                                       "--inject-fault", "1:4:exit", "--timeout", NEVER_S)
        expect("comm-bench with 3 ranks: rank 1 exited with status 3 during step 4 (injected by "
               "--inject-fault 1:4:exit)" in err, err)
        expect("# results in" not in stdout and not os.path.exists(os.path.join(out, "exit", "allreduce.csv")),
               f"results announced or written: {stdout}")
        stdout, err = comm_bench_fails(binary, out, "hang", "--gpus", "3", "--steps", "1000",
                                       "--inject-fault", "2:3:hang", "--timeout", HANG_TIMEOUT_S)
        expect(f"step 3 exceeded --timeout {HANG_TIMEOUT_S} s" in err and
               "ranks not in a collective: 2" in err and
               "waiting in a collective: 0, 1" in err, err)
        expect("injected by --inject-fault 2:3:hang" in err, err)
        # the fault applies where its rank exists: 2 ranks run and are written, 3 fail
        stdout, err = comm_bench_fails(binary, out, "some", "--gpus", "2,3", "--steps", "2",
                                       "--inject-fault", "2:1:exit", "--timeout", NEVER_S)
        rows = read_table(os.path.join(out, "some", "allreduce.csv"))
        expect([r["nranks"] for r in rows] == ["2"] and "# results in" in stdout, f"{rows} {stdout}")
        _, err = comm_bench_fails(binary, out, "bad", "--gpus", "2", "--inject-fault", "2:1:exit", rc=2)
        expect("--inject-fault 2:1:exit: comm-bench has ranks 0..1" in err, err)
        _, err = comm_bench_fails(binary, out, "bad", "--steps", "2", "--warmup", "1", "--inject-fault",
                                  "1:3:exit", rc=2)
        expect("--inject-fault 1:3:exit: comm-bench has steps 0..2" in err, err)
        if not sanitized(binary):  # a rank's own message: out of memory for its buffer
            limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # noqa: E731
            p = run([binary, "comm-bench", "--gpus", "2", "--sizes", "16G", "--out", out,
                     "--name", "oom"], preexec_fn=limit)
            expect(p.returncode == 1 and len(p.stderr.splitlines()) == 1 and
                   "comm-bench with 2 ranks: rank " in p.stderr and "out of host memory" in p.stderr,
                   f"exit {p.returncode}: {p.stderr!r}")
        comm_bench_killed(binary, out)


def comm_bench_killed(binary, out):
    """A comm-bench rank killed from outside, once the three run (in pid order, as forked):
    the parent names it and the signal in one line, no results line."""
    cmd = [binary, "comm-bench", "--gpus", "3", "--sizes", "64K", "--steps", "10000000",
           "--timeout", NEVER_S, "--out", out, "--name", "killed"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + HANG_S
        while len(children(p.pid)) < 3:
            expect(p.poll() is None, f"comm-bench ended before its 3 ranks ran: exit "
                   f"{p.returncode}")
            expect(time.monotonic() < end, f"comm-bench's 3 ranks: hung, not all running after "
                   f"{HANG_S} s: {children(p.pid)}")
            time.sleep(0.05)
        ranks = sorted(children(p.pid))
        expect(len(ranks) == 3, f"ranks {ranks}")
        os.kill(ranks[1], signal.SIGKILL)
        stdout, stderr = p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        raise Failure(f"comm-bench still running {HANG_S} s after its rank 1 was killed: "
                      f"hung") from None
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    expect(p.returncode == 1 and stderr.splitlines() == [stderr.strip()],
           f"{p.returncode} {stderr!r}")
    expect("rank 1 was killed by signal 9 (SIGKILL)" in stderr and "# results in" not in stdout,
           f"{stderr} {stdout}")


def case_vs_mpi(binary):
    """scripts/allreduce_vs_mpi.sh on 2 ranks, two sizes: a row per
    collective and size, each with both times, their ratio and a share of
    memcpy; skipped (77) without Open MPI's mpicc and mpirun."""
    import shutil
    if not (shutil.which("mpicc") and shutil.which("mpirun")):
        print("SKIP: no mpicc/mpirun (apt-get install openmpi-bin libopenmpi-dev)")
        return 77
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                          "allreduce_vs_mpi.sh")
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    p = run([script, "--sizes", "1K,64K", "--iters", "5", "--warmup", "1", "--rounds", "1",
             "--build", build])
    expect(p.returncode == 0, f"allreduce_vs_mpi.sh: exit {p.returncode}\n{p.stderr[-2000:]}")
    rows = [l.split() for l in p.stdout.splitlines() if l.strip() and not l.startswith("#")]
    got = {(r[0], r[2]) for r in rows}
    want = {(op, b) for op in ("all-reduce", "reduce-scatter", "all-gather") for b in ("1024", "65536")}
    expect(got == want, f"rows {sorted(got)}, expected {sorted(want)}:\n{p.stdout}")
    for r in rows:
        mpi, mine, ratio = float(r[3]), float(r[4]), float(r[5].rstrip("x"))
        low, high = (mpi - 0.05) / (mine + 0.05), (mpi + 0.05) / max(mine - 0.05, 1e-9)
        expect(mpi > 0 and mine > 0 and low - 0.005 <= ratio <= high + 0.005 and
               r[6].endswith("%"), f"row {r}: speedup is not mpi_us / dpscale_us (times "
               f"shown to 0.1 us, the speedup to 0.01)")


def case_links(binary):
    """dpscale links on the host backend: every path measured, verified, in links.csv."""
    with tempfile.TemporaryDirectory() as out:
        p = dpscale(binary, "links", "--gpus", "3", "--sizes", "1M", "--steps", "3", out=out,
                    check_rc=0)
        expect("d2d_write (GB/s)" in p.stdout and "emulated" in p.stdout, p.stdout)
        rows = read_table(os.path.join(out, "t", "links.csv"))
        got = sorted((r["method"], r["src"], r["dst"]) for r in rows)
        devs = ["dev0", "dev1", "dev2"]
        want = sorted([("h2d", "host", d) for d in devs] + [("d2h", d, "host") for d in devs] +
                      [(m, a, b) for m in ("d2d_write", "d2d_read", "latency", "d2d_nopeer")
                       for a in devs for b in devs if a != b] +
                      [("d2d_bidir", a, b) for i, a in enumerate(devs) for b in devs[i + 1:]])
        expect(got == want, f"rows {got}")
        for r in rows:
            if r["method"] == "d2d_nopeer":  # the host backend has no peer access to switch off
                expect(r["status"].startswith("WAIVED") and r["bw_gbps"] == "", f"{r}")
                continue
            expect(r["status"] == "ok", f"{r}")
            v = r["latency_us"] if r["method"] == "latency" else r["bw_gbps"]
            expect(float(v) > 0, f"{r}")
        p = dpscale(binary, "links", "--gpus", "9", out=out, name="x")
        expect_exit(p, 2, "--gpus 9")
        links_out_of_memory(binary, out)
        links_sizes(binary, out)


def links_sizes(binary, out):
    """--link-min-bytes/--link-max-bytes/--link-factor: every path at every size (nccl-tests'
    -b/-e/-f, the maximum itself included), the latency once a direction."""
    p = dpscale(binary, "links", "--gpus", "2", "--link-min-bytes", "4K", "--link-max-bytes",
                "600K", "--link-factor", "4", "--steps", "3", out=out, name="sizes", check_rc=0)
    expect("GB/s by copy size" in p.stdout, p.stdout)
    rows = read_table(os.path.join(out, "sizes", "links.csv"))
    sizes = defaultdict(list)
    for r in rows:
        sizes[(r["method"], r["src"], r["dst"])].append(int(r["bytes"]))
    want = [4096, 16384, 65536, 262144, 614400]
    for path, got in sorted(sizes.items()):
        expect(sorted(got) == ([4] if path[0] == "latency" else want), f"{path}: sizes {got}")
    expect(len(sizes) == 2 + 2 + 2 * 4 + 1, f"paths {sorted(sizes)}")
    p = dpscale(binary, "links", "--link-min-bytes", "1M", "--link-max-bytes", "64K", out=out,
                name="bad")
    expect_exit(p, 2, "--link-min-bytes 1M is above --link-max-bytes 64K")


def sanitized(binary):
    """Whether the binary is built with AddressSanitizer (which an address-space limit breaks)."""
    with open(binary, "rb") as f:
        return b"libasan" in f.read()


def links_out_of_memory(binary, out):
    """links without the memory for its host buffers names the host, not a device -1."""
    if sanitized(binary):
        return
    limit = lambda: resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # noqa: E731
    p = run([binary, "links", "--backend", "host", "--gpus", "2", "--sizes", "16G", "--out", out,
             "--name", "oom"], preexec_fn=limit)
    expect_exit(p, 1, "pinned host memory", "16.00 GiB")
    expect("device -1" not in p.stderr, f"stderr names device -1: {p.stderr}")


if __name__ == "__main__":
    run_cases(globals())
