#!/usr/bin/env python3
"""ddp started by a launcher on one host (--launcher env): torchrun and
Open MPI's mpirun themselves, the environment contracts of Open MPI, MPICH and Slurm (ranks started here
with their variables), the refusals, and a rank that never comes. Usage:
test_launch.py DPSCALE CASE; exit 0 pass, 1 fail, 77 skip."""
from listing import DPSCALE, exit_if_listing, test

HANG_S = 300  # a hang guard: far above any run here on a busy machine under ASan
# ddp under a launcher on one host: torchrun, the MPI and Slurm contracts, refusals, failures;
# none bounds a time, and meson's timeouts guard a hang only: a case's runs one after another
RUNS = {"torchrun": 2, "torchrun_nodes": 2, "torchrun_fault": 1, "legacy_launch": 1,
        "mpirun": 2, "contracts": 4, "refusals": 2, "missing_rank": 1, "rank_dies": 1}
TESTS = [test("launch " + c.replace("_", " "), DPSCALE, c, timeout=n * HANG_S + 60)
         for c, n in RUNS.items()]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import os
import shutil
import subprocess
import struct
import sys
import tempfile

from helpers import (Failure, communicate, expect, expect_exit, free_port, has_collectives,
                     read_folder, run_case, torchrun_single_node)

RUN = ["run", "--mode", "ddp", "--backend", "host", "--model", "tiny", "--steps", "5",
       "--warmup", "1"]
NEVER_S = str(2 * HANG_S)  # a --timeout no rank may reach: the hang guard fires first


def run(cmd, **kwargs):
    """subprocess.run(cmd) under the hang guard; past it the case fails as hung."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_S, **kwargs)
    except subprocess.TimeoutExpired:
        raise Failure(f"{' '.join(cmd)}: hung, still running after {HANG_S} s") from None


def start_ranks(binary, out, name, envs, *extra):
    """One process a rank, each with its launcher's variables; their
    (returncode, stdout and stderr) in rank order."""
    procs = []
    for env in envs:
        full = dict(os.environ, **env)
        procs.append(subprocess.Popen([binary, *RUN, *extra, "--out", out, "--name", name],
                                      env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    for r, p in enumerate(procs):
        out_text, err = communicate(p, f"{name}: rank {r}")
        results.append((p.returncode, out_text + err))
    return results


def contract(kind, rank, size, port):
    """The variables `kind` gives rank `rank` of `size` on one host."""
    common = {"MASTER_ADDR": "127.0.0.1", "DPSCALE_PORT": str(port)}
    table = {
        "openmpi": {"OMPI_COMM_WORLD_RANK": rank, "OMPI_COMM_WORLD_SIZE": size,
                    "OMPI_COMM_WORLD_LOCAL_RANK": rank, "OMPI_COMM_WORLD_LOCAL_SIZE": size},
        "mpich": {"PMI_RANK": rank, "PMI_SIZE": size, "MPI_LOCALRANKID": rank,
                  "MPI_LOCALNRANKS": size},
        "slurm": {"SLURM_PROCID": rank, "SLURM_NTASKS": size, "SLURM_LOCALID": rank,
                  "SLURM_NODEID": 0, "SLURM_NTASKS_PER_NODE": size},
    }
    return dict(common, **{k: str(v) for k, v in table[kind].items()})


def params(path):
    with open(path, "rb") as f:
        return f.read()


def fork_reference(binary, tmp, ngpus):
    """The final parameters of the same run with dpscale's own ranks."""
    npy = os.path.join(tmp, "fork.npy")
    p = run([binary, *RUN, "--gpus", str(ngpus), "--out", tmp, "--name", "fork",
             "--save-params", npy])
    expect(p.returncode == 0, f"fork launcher: exit {p.returncode}\n{p.stderr}")
    meta = read_folder(os.path.join(tmp, "fork"))[4]
    expect(meta.get("launch") == {"launcher": "fork"}, f"fork: launch {meta.get('launch')}")
    return params(npy)


def check_folder(folder, ngpus, launcher):
    runs, _, _, _, meta = read_folder(folder)
    expect(len(runs) == 1 and runs[0]["status"] == "ok" and runs[0]["check"] == "pass" and
           runs[0]["ngpus"] == str(ngpus), f"{folder}: {runs}")
    launch = meta.get("launch", {})
    expect(launch.get("launcher") == launcher and launch.get("ranks") == ngpus,
           f"{folder}/meta.json: launch {launch}")


def launcher(name, package):
    """The launcher's path; None, having said what installs it, when absent."""
    path = shutil.which(name)
    if not path:
        print(f"SKIP: no {name} ({package}; scripts/setup.sh --with-torch)")
    return path


def case_torchrun(binary):
    """torchrun --no-python with 2 workers: --check passes, and the final
    parameters are those of the fork launcher, bit for bit."""
    torchrun = launcher("torchrun", "python3-torch")
    if not torchrun:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "env.npy")
        # Python 3.11's torchrun fails to parse its redirect flags' default 0
        cmd = [torchrun, "-r", "2", "-t", "2", *torchrun_single_node(f"env-{os.getpid()}"),
               "--nproc_per_node", "2", "--log_dir", os.path.join(tmp, "logs"), "--no_python",
               binary, *RUN, "--check",
               "--out", tmp, "--name", "env", "--save-params", npy]
        p = run(cmd)
        expect(p.returncode == 0, f"torchrun: exit {p.returncode}\n{p.stderr[-3000:]}")
        check_folder(os.path.join(tmp, "env"), 2, "torchrun")
        expect(params(npy) == fork_reference(binary, tmp, 2),
               "torchrun's final parameters differ from the fork launcher's")


def floats(path):
    """The float32 values of a .npy file that --save-params wrote."""
    with open(path, "rb") as f:
        data = f.read()
    head = 10 + int.from_bytes(data[8:10], "little")
    return struct.unpack(f"<{(len(data) - head) // 4}f", data[head:])


def expect_close(got, want, what, rtol=1e-5):
    """Final parameters that another order of summation leaves within rtol."""
    a, b = floats(got), floats(want)
    worst = max(abs(x - y) / max(abs(y), 1e-3) for x, y in zip(a, b))
    expect(len(a) == len(b) and worst <= rtol,
           f"{what}: final parameters differ from the fork launcher's by {worst:.2e} (> {rtol})")


def case_torchrun_nodes(binary):
    """Two torchrun agents as two nodes of 2 ranks each, --comm gloo: the
    four ranks meet through rank 0's store, --check passes, meta.json lists
    the node, and the parameters are the fork launcher's to float rounding
    (Gloo's ring sums in another order)."""
    torchrun = launcher("torchrun", "python3-torch")
    if not torchrun or not has_collectives(binary, "gloo"):
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        npy, port = os.path.join(tmp, "env.npy"), free_port()
        agents = []
        for node in range(2):
            cmd = [torchrun, "-r", "2", "-t", "2", "--nnodes", "2", "--node_rank", str(node),
                   "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                   str(port), "--log_dir", os.path.join(tmp, f"logs{node}"), "--no_python",
                   binary, *RUN, "--check", "--comm", "gloo", "--out", tmp, "--name", "env",
                   "--save-params", npy]
            agents.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True))
        outs = [communicate(a, f"torchrun agent {k}") for k, a in enumerate(agents)]
        for a, (_, err) in zip(agents, outs):
            expect(a.returncode == 0, f"torchrun agent: exit {a.returncode}\n{err[-3000:]}")
        check_folder(os.path.join(tmp, "env"), 4, "torchrun")
        launch = read_folder(os.path.join(tmp, "env"))[4]["launch"]
        expect(launch.get("collectives") == "gloo" and len(launch.get("nodes", [])) == 1 and
               launch["nodes"][0]["ranks"] == [0, 1, 2, 3], f"meta.json launch {launch}")
        fork_reference(binary, tmp, 4)
        expect_close(npy, os.path.join(tmp, "fork.npy"), "torchrun --comm gloo")


def dpscale_regions(run_id):
    """This job's shared regions: other launch tests may run meanwhile."""
    return {n for n in os.listdir("/dev/shm") if n.startswith("dpscale-") and
            n.endswith(f"-{run_id}")}


def case_torchrun_fault(binary):
    """Under torchrun, rank 1 exits at step 3: rank 0 sees it gone, aborts
    the group (no --timeout in reach: the hang guard comes first), records
    the failure naming rank 1 (gone without a word), and leaves no shared
    region behind."""
    torchrun = launcher("torchrun", "python3-torch")
    if not torchrun:
        return 77
    run_id = f"fault-{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [torchrun, "-r", "2", "-t", "2", *torchrun_single_node(run_id), "--nproc_per_node",
               "2",
               "--log_dir", os.path.join(tmp, "logs"), "--no_python", binary, *RUN, "--steps",
               "100000", "--timeout", NEVER_S, "--inject-fault", "1:3:exit", "--out", tmp,
               "--name", "fault"]
        p = run(cmd)
        expect(p.returncode != 0, f"torchrun: exit {p.returncode}\n{p.stderr[-3000:]}")
        runs = read_folder(os.path.join(tmp, "fault"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "error" and
               "rank 1 (pid" in runs[0]["error"] and "ended without a word" in runs[0]["error"],
               f"runs {runs}")
    left = dpscale_regions(run_id)
    expect(not left, f"shared regions left in /dev/shm: {left}")


def case_mpirun(binary):
    """Open MPI's mpirun with 4 ranks: --check passes, the final parameters
    are those of the fork launcher, bit for bit."""
    mpirun = launcher("mpirun", "openmpi-bin")
    if not mpirun:
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        npy = os.path.join(tmp, "mpi.npy")
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", "-x",
               "MASTER_ADDR=127.0.0.1", "-x", f"DPSCALE_PORT={free_port()}",
               binary, *RUN, "--check", "--out", tmp, "--name", "mpi", "--save-params", npy]
        p = run(cmd)
        expect(p.returncode == 0, f"mpirun: exit {p.returncode}\n{p.stderr[-3000:]}")
        check_folder(os.path.join(tmp, "mpi"), 4, "Open MPI")
        expect(params(npy) == fork_reference(binary, tmp, 4),
               "mpirun's final parameters differ from the fork launcher's")


def case_contracts(binary):
    """Ranks started with Open MPI's, MPICH's and Slurm's variables (3 of
    them): rank 0 alone writes the folder, --check passes, the parameters
    are the fork launcher's."""
    with tempfile.TemporaryDirectory() as tmp:
        want = None
        for kind in ("openmpi", "mpich", "slurm"):
            port = free_port()
            npy = os.path.join(tmp, f"{kind}.npy")
            envs = [contract(kind, r, 3, port) for r in range(3)]
            got = start_ranks(binary, tmp, kind, envs, "--check", "--save-params", npy)
            expect(all(rc == 0 for rc, _ in got), f"{kind}: {got}")
            check_folder(os.path.join(tmp, kind), 3,
                         {"openmpi": "Open MPI", "mpich": "MPICH", "slurm": "Slurm"}[kind])
            want = want or fork_reference(binary, tmp, 3)
            expect(params(npy) == want, f"{kind}: final parameters differ from the fork launcher's")


def case_legacy_launch(binary):
    """torch.distributed.launch's contract before PyTorch 2.0: RANK,
    WORLD_SIZE and MASTER_* in the environment, the local rank as
    --local_rank=N (or --local-rank N): --check passes."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        envs = [{"RANK": str(r), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(port)} for r in range(2)]
        procs = []
        for r, env in enumerate(envs):
            flag = ["--local_rank=0"] if r == 0 else ["--local-rank", "1"]
            procs.append(subprocess.Popen([binary, *RUN, *flag, "--check", "--out", tmp,
                                           "--name", "legacy"], env=dict(os.environ, **env),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        for r, p in enumerate(procs):
            text = communicate(p, f"rank {r}")[0]
            expect(p.returncode == 0, f"rank {r}: exit {p.returncode}: {text[-2000:]}")
        check_folder(os.path.join(tmp, "legacy"), 2, "torchrun")


def one_rank(binary, tmp, env, *args):
    return run([binary, *RUN, *args, "--out", tmp, "--name", "x"], env=dict(os.environ, **env))


def case_refusals(binary):
    """What a launcher's variables cannot mean is refused (exit 2), named."""
    torch = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
             "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}
    with tempfile.TemporaryDirectory() as tmp:
        expect_exit(one_rank(binary, tmp, torch, "--mode", "dp"), 2, "dp runs in one")
        expect_exit(one_rank(binary, tmp, torch, "--gpus", "4"), 2,
                    "--gpus 4, but torchrun started 2 ranks")
        expect_exit(one_rank(binary, tmp, {}, "--comm", "gloo"), 2,
                    "--comm gloo: the ranks meet through rank 0's store")
        expect_exit(one_rank(binary, tmp, {}, "--comm", "nccl"), 2,
                    "--comm nccl cannot move host-backend buffers")
        expect_exit(one_rank(binary, tmp, {}, "--comm", "shm", "--mode", "dp"), 2,
                    "--comm: only the strategies of a process a device read it")
        expect_exit(one_rank(binary, tmp, {k: v for k, v in torch.items() if k != "WORLD_SIZE"}),
                    2, "WORLD_SIZE is not set")
        expect_exit(one_rank(binary, tmp, {"PMI_RANK": "0", "PMI_SIZE": "2",
                                           "MPI_LOCALRANKID": "0"}), 2, "MASTER_ADDR is not set")
        expect_exit(one_rank(binary, tmp, {}, "--launcher", "env"), 2,
                    "--launcher env: no launcher's variables are set")
        p = one_rank(binary, tmp, torch, "--launcher", "fork", "--gpus", "2")
        expect_exit(p, 0)  # the launcher's variables ignored


def case_missing_rank(binary):
    """Rank 1 never starts: rank 0 gives up within --timeout, names how many
    arrived, and records the failure in its folder."""
    with tempfile.TemporaryDirectory() as tmp:
        env = contract("openmpi", 0, 2, free_port())
        (rc, err), = start_ranks(binary, tmp, "alone", [env], "--timeout", "3")
        expect(rc == 1 and "1 of 2 ranks arrived within --timeout 3 s" in err, f"exit {rc}: {err}")
        runs = read_folder(os.path.join(tmp, "alone"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "timeout", f"runs {runs}")


def case_rank_dies(binary):
    """Rank 1 exits at step 3 without a word: rank 0 sees it gone (no
    --timeout in reach: the hang guard comes first), names rank 1 and its
    pid, and records the failure."""
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        envs = [contract("openmpi", r, 2, port) for r in range(2)]
        got = start_ranks(binary, tmp, "dies", envs, "--timeout", NEVER_S, "--steps", "50",
                          "--inject-fault", "1:3:exit")
        expect(got[1][0] == 3, f"rank 1: exit {got[1][0]}")
        expect(got[0][0] == 1 and "rank 1 (pid " in got[0][1] and "ended without a word"
               in got[0][1], f"rank 0: exit {got[0][0]}: {got[0][1]}")
        runs = read_folder(os.path.join(tmp, "dies"))[0]
        expect(len(runs) == 1 and runs[0]["status"] == "error" and "rank 1" in runs[0]["error"],
               f"runs {runs}")


CASES = {"torchrun": case_torchrun, "torchrun_nodes": case_torchrun_nodes,
         "legacy_launch": case_legacy_launch, "torchrun_fault": case_torchrun_fault, "mpirun": case_mpirun, "rank_dies": case_rank_dies, "contracts": case_contracts, "refusals": case_refusals,
         "missing_rank": case_missing_rank}


def main():
    binary, case = sys.argv[1], sys.argv[2]
    return run_case(case, CASES[case], binary)


if __name__ == "__main__":
    sys.exit(main())
