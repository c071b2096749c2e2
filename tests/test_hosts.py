#!/usr/bin/env python3
"""ddp across emulated hosts: network namespaces with hostnames of their own
(dpstools/netns.py), joined by shaped veth links; one rank a host, started with
Open MPI's variables (or a torchrun agent a host), meeting over Gloo. Usage: test_hosts.py DPSCALE CASE;
exit 0 pass, 1 fail, 77 skip (no namespaces here, or no Gloo in the build)."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a hang guard: far above any run here on a busy machine under ASan
# network namespaces, shaped veth links; root only, else skipped. None bounds a time, so
# each may run beside other tests; meson's timeouts guard a hang only: a case's runs
RUNS = {"gloo": 2, "loopback_master": 1, "shaping": 2, "rank_killed": 1, "rank_hangs": 1,
        "sharded_torchrun": 3}
TESTS = [test("hosts " + c.replace("_", " "), DPSCALE, c, timeout=n * HANG_S + 60)
         for c, n in RUNS.items()]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from helpers import communicate, expect, has_collectives, read_folder, run_case
from dpstools import netns

NEVER_S = str(2 * HANG_S)  # a --timeout no rank may reach: the hang guard fires first

PLOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "plot.py")
BASE = ["run", "--mode", "ddp", "--backend", "host", "--warmup", "1"]
# 4 x 2048 x 2048 weights: one 64 MiB all-reduce a step, after backward
BIG = ["--layers", "4", "--width", "2048", "--tokens", "1", "--classes", "16", "--steps", "3",
       "--no-overlap", "--bucket-mb", "128"]


def start(hosts, binary, out, name, *extra, port=29700, env_extra=None):
    """One rank on each host (Open MPI's variables, rank 0's host as
    MASTER_ADDR); their Popens in rank order."""
    n, procs, addr = hosts.n, [], hosts.addr(0)
    for r in range(n):
        env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(n),
                   OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_LOCAL_SIZE="1",
                   MASTER_ADDR=addr, DPSCALE_PORT=str(port), **(env_extra or {}))
        procs.append(hosts.popen(r, [binary, *BASE, *extra, "--out", out, "--name", name],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True))
    return procs


def finish(procs):
    """(returncode, output) of each, in rank order."""
    return [(communicate(p, f"rank {r}")[0], p.returncode)[::-1] for r, p in enumerate(procs)]


def run_ranks(hosts, binary, out, name, *extra, env_extra=None):
    got = finish(start(hosts, binary, out, name, *extra, env_extra=env_extra))
    for r, (rc, text) in enumerate(got):
        expect(rc == 0, f"{name}: rank {r} exited {rc}:\n{text[-3000:]}")
    return read_folder(os.path.join(out, name))


def usable(binary):
    ok, why = netns.available()
    if not ok:
        print(f"SKIP: no network namespaces here: {why}")
        return False
    return has_collectives(binary, "gloo")


def case_gloo(binary):
    """Three hosts at 10 Gbit/s: auto chooses Gloo (the hostnames differ),
    its addresses exchanged through a shared folder (DPSCALE_STORE_DIR,
    emptied afterwards), --check passes, meta.json lists three nodes with
    their addresses, and plot.py's summary names them."""
    if not usable(binary):
        return 77
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(3, "10gbit") as hosts:
        shared = os.path.join(tmp, "store")
        os.mkdir(shared)
        runs, _, _, _, meta = run_ranks(hosts, binary, tmp, "three", "--model", "tiny",
                                        "--steps", "5", "--check",
                                        env_extra={"DPSCALE_STORE_DIR": shared})
        expect(os.listdir(shared) == [], f"DPSCALE_STORE_DIR keeps {os.listdir(shared)}")
        expect(runs[0]["status"] == "ok" and runs[0]["check"] == "pass", f"runs {runs}")
        launch = meta["launch"]
        nodes = launch.get("nodes", [])
        expect(launch.get("collectives") == "gloo" and
               [x["host"] for x in nodes] == [hosts.hostname(i) for i in range(3)] and
               [x["address"] for x in nodes] == [hosts.addr(i) for i in range(3)] and
               [x["ranks"] for x in nodes] == [[0], [1], [2]] and
               all(x["nic"] == "eth0" and len(x["devices"]) == 1 for x in nodes),
               f"meta.json launch {launch}")
        folder = os.path.join(tmp, "three")
        charts = os.path.join(tmp, "charts")
        p = subprocess.run(["/usr/bin/python3", PLOT, folder, "--out", charts],
                           capture_output=True, text=True, timeout=HANG_S)
        expect(p.returncode == 0, f"plot.py: exit {p.returncode}: {p.stderr[-2000:]}")
        with open(os.path.join(charts, "summary.md")) as f:
            text = f.read()
        expect("ran on 3 nodes under Open MPI: dps-node0 (ranks 0), dps-node1 (ranks 1), "
               "dps-node2 (ranks 2); gradients moved with Gloo over TCP" in text,
               f"summary.md says nothing of the nodes:\n{text[:1500]}")


def torchrun_agents(hosts, torchrun, binary, out, name, port, *extra):
    """A torchrun agent on each host (one worker each, rank 0's host the
    rendezvous); their exit codes and stderr, in node order."""
    agents = []
    for i in range(hosts.n):
        cmd = [torchrun, "-r", "2", "-t", "2", "--nnodes", str(hosts.n), "--node_rank", str(i),
               "--nproc_per_node", "1", "--master_addr", hosts.addr(0), "--master_port", str(port),
               "--log_dir", os.path.join(out, f"logs-{name}-{i}"), "--no_python", binary,
               "run", "--backend", "host", "--warmup", "1", *extra, "--out", out, "--name", name]
        agents.append(hosts.popen(i, cmd, env=dict(os.environ), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True))
    return [(communicate(a, f"torchrun agent {i}"), a.returncode) for i, a in enumerate(agents)]


def case_sharded_torchrun(binary):
    """zero1, zero2 and fsdp (with SGD or AdamW) across three hosts under
    torchrun, an agent a host, meeting over Gloo: --check passes, and
    meta.json says Gloo moved the shards."""
    torchrun = shutil.which("torchrun")
    if not torchrun:
        print("SKIP: no torchrun (python3-torch; scripts/setup.sh --with-torch)")
        return 77
    if not usable(binary):
        return 77
    runs = [("zero1", "adamw"), ("zero2", "sgd"), ("fsdp", "adamw")]
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(3, "10gbit") as hosts:
        for k, (mode, opt) in enumerate(runs):
            name = f"{mode}-{opt}"
            got = torchrun_agents(hosts, torchrun, binary, tmp, name, 29800 + k, "--mode", mode,
                                  "--optimizer", opt, "--model", "tiny", "--steps", "4",
                                  "--comm", "gloo", "--check")
            for i, ((_, err), rc) in enumerate(got):
                expect(rc == 0, f"{name}: torchrun agent on host {i}: exit {rc}\n{err[-3000:]}")
            folder = read_folder(os.path.join(tmp, name))
            r = folder[0][0]
            expect(r["mode"] == mode and r["status"] == "ok" and r["check"] == "pass",
                   f"{name}: status {r['status']}, check {r['check']}: {r['error']}")
            expect(folder[4]["launch"].get("collectives") == "gloo",
                   f"{name}: meta.json launch {folder[4]['launch']}")


def slowest_allreduce(phases):
    """The slower of the two ranks' median all-reduce times (ms) and the bytes
    of the buffer all-reduced a step: in 2 of 3 steps one rank entered the
    collective first, and so waited for every byte its peer sent it."""
    rows = [p for p in phases if p["phase"] == "allreduce"]
    expect(sorted(p["device"] for p in rows) == ["0", "1"], f"allreduce rows: {rows}")
    return max(float(p["median_ms"]) for p in rows), int(rows[0]["bytes_per_step"])


def link_rate(hosts):
    """The rate (bits/s) tc shows on every host's eth0, one for all."""
    rates = set()
    for ns in hosts.hosts:
        shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True, timeout=HANG_S).stdout
        rate = re.search(r"\btbf\b.*\brate (\S+)", shown)
        expect(rate, f"{ns}: eth0 has no tbf with a rate: {shown!r}")
        rates.add(netns.rate_bits(rate[1]))
    expect(len(rates) == 1, f"the hosts' eth0 rates differ: {sorted(rates)}")
    return rates.pop()


def expect_held_to_link(hosts, rate, ms, nbytes):
    """tc shows rate on every host's eth0, and the all-reduce took at least
    what the link needs for what a rank's peer sends it (2 ranks: the
    buffer's bytes), less tbf's bucket: a rate no slowness can break."""
    bits = netns.rate_bits(rate)
    shown = link_rate(hosts)
    expect(shown == bits, f"tc shows {shown / 1e9:g} Gbit/s on eth0 after shaping to {rate}")
    least = (nbytes - netns.burst_bytes(rate)) / (bits / 8) * 1e3
    print(f"64 MiB all-reduce, 2 hosts at {rate}: {ms:.1f} ms, busbw "
          f"{nbytes / (ms / 1e3) / 1e6:.1f} MB/s (the link: {bits / 8 / 1e6:.1f} MB/s)")
    expect(ms >= least, f"{rate}: the all-reduce of {nbytes} bytes took {ms:.1f} ms, less than "
           f"the {least:.1f} ms the shaped link needs for them: the shaping does not hold")


def case_shaping(binary):
    """shape() holds every host's egress to the rate it is given: tc shows
    it on each eth0, and the 64 MiB all-reduce between two hosts takes no
    less than the link needs for its bytes, at 10 Gbit/s and after
    shape("1gbit") at 1 Gbit/s. Its bus bandwidth against the link's rate
    is printed: a benchmark's figure, not a verdict, as a loaded machine
    lowers it."""
    if not usable(binary):
        return 77
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(2, "10gbit") as hosts:
        ms, nbytes = slowest_allreduce(run_ranks(hosts, binary, tmp, "fast", *BIG,
                                                 "--batch", "2")[3])
        expect_held_to_link(hosts, "10gbit", ms, nbytes)
        hosts.shape("1gbit")
        ms, nbytes = slowest_allreduce(run_ranks(hosts, binary, tmp, "slow", *BIG,
                                                 "--batch", "2")[3])
        expect_held_to_link(hosts, "1gbit", ms, nbytes)


def gloo_peers(hosts, i, pid, port):
    """How many TCP connections process pid on host i holds other than to
    the store's port: Gloo's, once its mesh is made."""
    out = subprocess.run(["ip", "netns", "exec", hosts.hosts[i], "ss", "-tnpH", "state",
                          "established"], capture_output=True, text=True, timeout=HANG_S).stdout
    return sum(1 for line in out.splitlines()
               if f"pid={pid}," in line and f":{port} " not in line + " ")


def wait_meshed(hosts, procs, port):
    """Waits until every rank is connected to every other through Gloo (the
    ranks train), however slowly a loaded machine started them; fails as
    hung past HANG_S."""
    end = time.monotonic() + HANG_S
    while time.monotonic() < end:
        expect(all(p.poll() is None for p in procs), "a rank ended before the others joined")
        if all(gloo_peers(hosts, i, p.pid, port) >= hosts.n - 1 for i, p in enumerate(procs)):
            return
        time.sleep(0.2)
    expect(False, f"the ranks' Gloo mesh: hung, not made after {HANG_S} s")


def case_rank_killed(binary):
    """Rank 1, on the second host, killed by its pid mid-run: rank 0 sees
    it gone (no --timeout in reach: the hang guard comes first), names rank
    1 and its host, records the failure (an error, not a timeout); no rank
    is left running."""
    if not usable(binary):
        return 77
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(3, "10gbit") as hosts:
        procs = start(hosts, binary, tmp, "killed", "--model", "tiny", "--steps", "200000",
                      "--timeout", NEVER_S)
        wait_meshed(hosts, procs, 29700)
        os.kill(procs[1].pid, signal.SIGKILL)
        got = finish(procs)
        rc0, text0 = got[0]
        expect(rc0 == 1 and f"rank 1 (pid {procs[1].pid} on host {hosts.hostname(1)})" in text0,
               f"rank 0: exit {rc0}: {text0[-2000:]}")
        expect(got[2][0] != 0, f"rank 2 exited {got[2][0]} though the group failed")
        runs = read_folder(os.path.join(tmp, "killed"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "error" and
               hosts.hostname(1) in runs[0]["error"], f"runs {runs}")


def case_rank_hangs(binary):
    """Rank 1, on the second host, hangs at step 3: --timeout (20 s, far
    above a step or the set-up of these ranks) ends the group at step 3,
    rank 0's message says which rank was not in a collective and on which
    host, the status is timeout, and the hung rank is ended too."""
    if not usable(binary):
        return 77
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(2, "10gbit") as hosts:
        procs = start(hosts, binary, tmp, "hangs", "--model", "tiny", "--steps", "50",
                      "--timeout", "20", "--inject-fault", "1:3:hang")
        got = finish(procs)
        rc0, text0 = got[0]
        expect(rc0 == 1 and f"rank 1 step 3, not in a collective (host {hosts.hostname(1)}"
               in text0, f"rank 0: exit {rc0}: {text0[-2000:]}")
        expect(got[1][0] != 0, f"the hung rank exited {got[1][0]}")
        runs = read_folder(os.path.join(tmp, "hangs"))[0]
        expect(runs[0]["status"] == "timeout", f"runs {runs}")


def case_loopback_master(binary):
    """Ranks 0 and 2 on the first host reach rank 0's store through a
    loopback address (as MASTER_ADDR=$(hostname) does on Debian, 127.0.1.1),
    ranks 1 and 3 on the second host through the network (ranks placed round
    robin, as mpirun --map-by node does): Gloo still gets addresses the other
    host reaches, and the run passes --check."""
    if not usable(binary):
        return 77
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(2, "10gbit") as hosts:
        procs = []
        for r in range(4):
            env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="4",
                       OMPI_COMM_WORLD_LOCAL_RANK=str(r // 2), OMPI_COMM_WORLD_LOCAL_SIZE="2",
                       MASTER_ADDR="127.0.0.1" if r % 2 == 0 else hosts.addr(0),
                       DPSCALE_PORT="29700")
            procs.append(hosts.popen(r % 2, [binary, *BASE, "--model", "tiny", "--steps", "3",
                                             "--check", "--timeout", "60", "--out", tmp,
                                             "--name", "lo"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True))
        for r, (rc, text) in enumerate(finish(procs)):
            expect(rc == 0, f"rank {r} exited {rc}:\n{text[-2000:]}")
        runs = read_folder(os.path.join(tmp, "lo"))[0]
        expect(runs[0]["check"] == "pass", f"runs {runs}")


CASES = {"gloo": case_gloo, "sharded_torchrun": case_sharded_torchrun,
         "loopback_master": case_loopback_master, "shaping": case_shaping, "rank_killed": case_rank_killed,
         "rank_hangs": case_rank_hangs}

if __name__ == "__main__":
    netns.cleanup_stale()
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], os.path.abspath(sys.argv[1])))
