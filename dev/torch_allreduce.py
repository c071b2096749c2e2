#!/usr/bin/env python3
"""Times torch.distributed.all_reduce over gloo, one rank per process, beside dpscale's Gloo all-reduce."""
import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import timedelta

USAGE = """Started by a launcher, one process per rank:
  torchrun -r 2 -t 2 --nproc_per_node 2 --master_port 29555 \\
      dev/torch_allreduce.py --sizes 1M,64M
  MASTER_ADDR=10.0.0.1 MASTER_PORT=29556 mpirun -np 2 -x MASTER_ADDR \\
      -x MASTER_PORT /usr/bin/python3 dev/torch_allreduce.py
The rank and world size come from RANK and WORLD_SIZE (torchrun) or else
from OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI); MASTER_ADDR
and MASTER_PORT name rank 0's rendezvous. Per size: a tensor filled with
rank+1, WARMUP untimed all-reduces, a barrier, then ITERS all-reduces each
timed alone with time.perf_counter (the tensor is refilled, untimed, before
each, so the sum stays sum(1..world)); the last result is checked. As
dpscale comm-bench does, an iteration's time is the slowest rank's and the
median over iterations is kept; algbw = bytes / time, busbw = algbw *
2(n-1)/n (nccl-tests' all-reduce convention), GB/s = 1e9 bytes per second.
Rank 0 writes CSV (impl,nranks,bytes,iters,time_ms_median,algbw_gbs,
busbw_gbs) to --out, atomically, or to stdout.
Exit status: 0 done, 1 a failed check or collective, 2 bad usage or setup.
"""

PROG = "torch_allreduce.py"
COLUMNS = ["impl", "nranks", "bytes", "iters", "time_ms_median", "algbw_gbs", "busbw_gbs"]
ELEM_BYTES = {"f32": 4, "bf16": 2}
TORCH_DTYPE = {"f32": lambda torch: torch.float32, "bf16": lambda torch: torch.bfloat16}
EXACT_UP_TO = {"f32": 2 ** 24, "bf16": 2 ** 8}  # integers the dtype holds exactly
SHIFTS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


class Failure(Exception):
    """A failure to report: message (what and what to do) and exit status."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def parse_bytes(text):
    """'64M' -> 67108864: digits, then K/M/G/T (powers of 1024), optional 'i' and 'B'."""
    m = re.fullmatch(r"(\d+)(?:([KMGT])i?)?B?", text.strip(), re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a byte size; write digits with an optional K, M or G (e.g. 1M,16M)")
    return int(m.group(1)) << SHIFTS[(m.group(2) or "").upper()]


def size_list(text):
    sizes = [parse_bytes(s) for s in text.split(",") if s.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("--sizes is empty; give e.g. 1M,16M,64M")
    return sizes


def positive(kind):
    def check(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
        return v
    return check


def non_negative(text):
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} must be an integer of 0 or more")
    return int(text)


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, epilog=USAGE,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=size_list, default=size_list("1M,16M,64M"),
                    help="comma list of byte sizes, suffixes K/M/G (default 1M,16M,64M)")
    ap.add_argument("--iters", type=positive(int), default=10, help="timed all-reduces per size (default 10)")
    ap.add_argument("--warmup", type=non_negative, default=2, help="untimed all-reduces per size (default 2)")
    ap.add_argument("--dtype", choices=sorted(ELEM_BYTES), default="f32", help="element type (default f32)")
    ap.add_argument("--out", help="CSV file rank 0 writes, atomically (default stdout)")
    ap.add_argument("--timeout", type=positive(float), default=120.0,
                    help="seconds gloo waits for rendezvous or a collective (default 120)")
    ap.add_argument("--iface", help="network interface gloo uses (sets GLOO_SOCKET_IFNAME)")
    args = ap.parse_args(argv)
    for n in args.sizes:
        if n == 0:
            ap.error("a size of 0 bytes has nothing to time; give sizes above 0")
        if n % ELEM_BYTES[args.dtype]:
            ap.error(f"size {n} is not a multiple of {ELEM_BYTES[args.dtype]} bytes, "
                     f"the size of a {args.dtype} element; choose another size")
    return args


def why(error):
    """An exception's text, ready to have '; what to do' follow it."""
    return str(error).strip().rstrip(".")


def env_int(names):
    """The first of names set in the environment, as an int (None when none is)."""
    for name in names:
        text = os.environ.get(name)
        if text is not None:
            if not re.fullmatch(r"\d+", text.strip()):
                raise Failure(f"{name}={text!r} is not a non-negative integer; "
                              "fix what the launcher exports", 2)
            return int(text)
    return None


def env_str(name, hint):
    text = os.environ.get(name, "").strip()
    if not text:
        raise Failure(f"{name} is not set; {hint}", 2)
    return text


def launch_env():
    """(rank, world, addr, port) from torchrun's or Open MPI's variables."""
    launcher = "start this under torchrun, or under mpirun with MASTER_ADDR and MASTER_PORT exported (-x)"
    rank = env_int(["RANK", "OMPI_COMM_WORLD_RANK"])
    if rank is None:
        raise Failure(f"RANK (or OMPI_COMM_WORLD_RANK) is not set; {launcher}", 2)
    world = env_int(["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"])
    if world is None:
        raise Failure(f"WORLD_SIZE (or OMPI_COMM_WORLD_SIZE) is not set; {launcher}", 2)
    if not 0 <= rank < world:
        raise Failure(f"rank {rank} is outside a world of {world}; fix what the launcher exports", 2)
    addr = env_str("MASTER_ADDR", "export rank 0's address (e.g. MASTER_ADDR=127.0.0.1) to every rank")
    port = env_str("MASTER_PORT",
                   "export a free TCP port on rank 0's host (e.g. MASTER_PORT=29500) to every rank")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise Failure(f"MASTER_PORT={port!r} is not a TCP port; export one between 1 and 65535", 2)
    return rank, world, addr, int(port)


def set_iface(name):
    if name is None:
        return
    if os.path.isdir("/sys/class/net") and not os.path.exists(f"/sys/class/net/{name}"):
        raise Failure(f"there is no network interface {name!r} here; pick one that `ip link` lists", 2)
    os.environ["GLOO_SOCKET_IFNAME"] = name


def check_out(path):
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise Failure(f"--out {path}: folder {folder} does not exist; create it first", 2)
    if not os.access(folder, os.W_OK):
        raise Failure(f"--out {path}: folder {folder} is not writable; choose another place", 2)


def import_torch():
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise Failure(f"{sys.executable} cannot import PyTorch ({why(e)}); run under /usr/bin/python3 "
                      "with Debian's python3-torch (scripts/setup.sh --with-torch)", 2) from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise Failure("this PyTorch has no gloo backend; use Debian's python3-torch", 2)
    return torch, dist


def init_group(dist, rank, world, addr, port, timeout):
    url = f"tcp://{addr}:{port}"
    try:
        dist.init_process_group("gloo", init_method=url, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError, OSError) as e:
        raise Failure(f"joining the gloo group at {url} as rank {rank} of {world} failed: {why(e)}; "
                      f"check that every rank started, rank 0's host answers on {addr}:{port} "
                      "(port free, no firewall), --iface names the link between the hosts, "
                      "or raise --timeout") from None


def probe_dtype(torch, dist, name):
    """Fails before the rendezvous where gloo cannot sum this dtype: one local rank tries it."""
    if name == "f32":
        return
    try:
        alone = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=10))
        alone.allreduce([torch.ones(1, dtype=TORCH_DTYPE[name](torch))]).wait()
    except RuntimeError as e:
        if "Invalid scalar type" in str(e):
            raise Failure(f"this PyTorch's gloo backend cannot all-reduce {name} ({why(e)}; see "
                          "pytorch/pytorch#111131); use --dtype f32", 2) from None


def one_allreduce(dist, buf, value):
    """Refills buf untimed, then returns the seconds its all-reduce took."""
    buf.fill_(value)
    t0 = time.perf_counter()
    dist.all_reduce(buf)
    return time.perf_counter() - t0


def check_result(torch, buf, world, dtype, nbytes):
    want = world * (world + 1) / 2
    lo, hi = torch.aminmax(buf.float())
    lo, hi = float(lo), float(hi)
    tol = 0.0 if want <= EXACT_UP_TO[dtype] else want * (2.0 ** -7 if dtype == "bf16" else 2.0 ** -22) * world
    if abs(lo - want) > tol or abs(hi - want) > tol:
        raise Failure(f"all-reduce of {nbytes} bytes gave values in [{lo:g}, {hi:g}], not {want:g} = "
                      f"sum(1..{world}); the reduction is wrong: check that the ranks run the same "
                      "PyTorch and gloo")


def time_size(torch, dist, nbytes, args, rank, world):
    """Seconds of each timed all-reduce of nbytes, the slowest rank's per iteration."""
    buf = torch.empty(nbytes // ELEM_BYTES[args.dtype], dtype=TORCH_DTYPE[args.dtype](torch))
    for _ in range(args.warmup):
        one_allreduce(dist, buf, rank + 1)
    dist.barrier()
    times = [one_allreduce(dist, buf, rank + 1) for _ in range(args.iters)]
    check_result(torch, buf, world, args.dtype, nbytes)
    slowest = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist()


def row(nbytes, world, iters, seconds):
    t = statistics.median(seconds)
    algbw = nbytes / t / 1e9 if t > 0 else float("nan")
    busbw = algbw * 2 * (world - 1) / world if world > 1 else 0.0
    return ["torch-gloo", str(world), str(nbytes), str(iters),
            f"{t * 1e3:.4f}", f"{algbw:.3f}", f"{busbw:.3f}"]


def run_sizes(torch, dist, args, rank, world):
    rows = []
    for nbytes in args.sizes:
        try:
            seconds = time_size(torch, dist, nbytes, args, rank, world)
        except RuntimeError as e:
            raise Failure(f"all-reduce of {nbytes} bytes failed on rank {rank}: {why(e)}; "
                          "check that every rank is still running and the link between them works, "
                          "or raise --timeout") from None
        rows.append(row(nbytes, world, args.iters, seconds))
    return rows


def csv_text(rows):
    return "".join(",".join(r) + "\n" for r in [COLUMNS] + rows)


def write_atomic(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".torch_allreduce.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise Failure(f"cannot write --out {path}: {why(e)}; "
                      "choose a writable place with free space", 2) from None


def run(argv):
    args = parse_args(argv)
    rank, world, addr, port = launch_env()
    set_iface(args.iface)
    if rank == 0 and args.out:
        check_out(args.out)
    torch, dist = import_torch()
    torch.set_num_threads(1)
    probe_dtype(torch, dist, args.dtype)
    init_group(dist, rank, world, addr, port, args.timeout)
    try:
        rows = run_sizes(torch, dist, args, rank, world)
    except BaseException:
        dist.destroy_process_group()
        raise
    if rank == 0:
        if args.out:
            write_atomic(args.out, csv_text(rows))
        else:
            sys.stdout.write(csv_text(rows))
    return 0  # the group is left standing: see __main__


def main(argv=None):
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except Failure as e:
        who = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
        print(f"{PROG} rank {who}: {e}", file=sys.stderr)
        return e.status


if __name__ == "__main__":
    # Tearing the group down, or the interpreter with Gloo's threads alive,
    # now and then never returns (pytorch/pytorch#75097): the rank leaves at
    # once with its status, its output flushed.
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
