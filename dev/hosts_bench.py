#!/usr/bin/env python3
"""dpscale's Gloo all-reduce beside PyTorch's, across emulated hosts on shaped links."""
import argparse
import csv
import io
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# dev/ is beside scripts/, not in it: the package is found there, as for a script of scripts/
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
from dpstools import netns, results  # noqa: E402
USAGE = """As root (network namespaces): two or more emulated hosts joined by a
bridge, each link shaped with tc tbf to each --rates figure in turn; one
rank a host. dpscale runs ddp with one all-reduce of about --mbytes MiB a
step (4 layers of WIDTH x WIDTH weights, --no-overlap, one bucket), and its
all-reduce phase's median gives its bus bandwidth; torch_allreduce.py then
all-reduces the same bytes over PyTorch's gloo on the same link. Prints one
line per rate, and writes CSV (rate,nranks,bytes,dpscale_busbw_gbs,
torch_busbw_gbs,ratio) to --out when given.
  dev/hosts_bench.py build/src/dpscale --rates 1gbit,10gbit --mbytes 64
"""


def rank_env(hosts, r, port):
    return dict(os.environ, OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE=str(hosts.n),
                OMPI_COMM_WORLD_LOCAL_RANK="0", OMPI_COMM_WORLD_LOCAL_SIZE="1",
                MASTER_ADDR=hosts.addr(0), MASTER_PORT=str(port), DPSCALE_PORT=str(port))


def on_every_host(hosts, argv, port):
    """argv on each host as one rank; rank 0's output."""
    procs = [hosts.popen(r, argv, env=rank_env(hosts, r, port), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True) for r in range(hosts.n)]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    for r, (p, text) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            sys.exit(f"hosts_bench.py: rank {r} of `{' '.join(argv[:3])} ...` exited "
                     f"{p.returncode}:\n{text[-2000:]}")
    return outs[0]


def dpscale_busbw(hosts, binary, width, tmp, name, port):
    """(bytes a step, bus bandwidth in GB/s) of dpscale's all-reduce."""
    on_every_host(hosts, [binary, "run", "--mode", "ddp", "--backend", "host", "--layers", "4",
                          "--width", str(width), "--tokens", "1", "--classes", "16", "--batch",
                          str(hosts.n), "--steps", "5", "--warmup", "1", "--no-overlap",
                          "--bucket-mb", "65536", "--out", tmp, "--name", name], port)
    phases = results.read_csv(os.path.join(tmp, name, "phases.csv"))
    row = next(p for p in phases if p["device"] == "0" and p["phase"] == "allreduce")
    nbytes, ms = int(row["bytes_per_step"]), float(row["median_ms"])
    n = hosts.n
    return nbytes, nbytes / (ms / 1e3) * 2 * (n - 1) / n / 1e9


def torch_busbw(hosts, nbytes, port):
    out = on_every_host(hosts, ["/usr/bin/python3", os.path.join(HERE, "torch_allreduce.py"),
                                "--sizes", str(nbytes - nbytes % 4), "--iters", "5",
                                "--iface", "eth0"], port)
    rows = list(csv.DictReader(io.StringIO(out[out.index("impl,"):])))
    return float(rows[-1]["busbw_gbs"])


def main(argv):
    ap = argparse.ArgumentParser(description=USAGE, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("dpscale", help="the dpscale binary")
    ap.add_argument("--hosts", type=int, default=2, help="emulated hosts, one rank each (2)")
    ap.add_argument("--rates", default="1gbit,10gbit", help="tc rates of each link, in turn")
    ap.add_argument("--mbytes", type=float, default=64, help="MiB all-reduced (about; 64)")
    ap.add_argument("--out", help="CSV of the figures")
    args = ap.parse_args(argv)
    ok, why = netns.available()
    if not ok:
        sys.exit(f"hosts_bench.py: cannot make emulated hosts here: {why}")
    width = int((args.mbytes * 2 ** 20 / 4 / 4) ** 0.5)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, netns.EmulatedHosts(args.hosts, None) as hosts:
        for k, rate in enumerate(args.rates.split(",")):
            hosts.shape(rate)
            nbytes, ours = dpscale_busbw(hosts, os.path.abspath(args.dpscale), width, tmp,
                                         f"r{k}", 29800 + 2 * k)
            theirs = torch_busbw(hosts, nbytes, 29801 + 2 * k)
            rows.append([rate, hosts.n, nbytes, f"{ours:.4f}", f"{theirs:.4f}",
                         f"{ours / theirs:.3f}"])
            print(f"{rate}: {hosts.n} hosts, {nbytes / 2 ** 20:.1f} MiB all-reduce: dpscale gloo "
                  f"{ours:.3f} GB/s busbw, torch gloo {theirs:.3f} GB/s ({ours / theirs:.2f}x)",
                  flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["rate", "nranks", "bytes", "dpscale_busbw_gbs", "torch_busbw_gbs", "ratio"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
