#!/usr/bin/env python3
"""PyTorch's copies timed the way `dpscale links` times its own: pinned host
memory, one untimed copy, then SAMPLES copies each between two CUDA events
on the stream that issues it, and the median kept; GB/s = bytes / time /
1e9. Host to device 0 and back, and device 0 to device 1 (issued on the
source's stream, as dpscale's d2d_write) when there are two GPUs. Writes
CSV rows named as links.csv's (src, dst, method, bytes, bw_gbps)."""
import argparse
import csv
import sys

from dpstools import interpreter
from dpstools.stats import median


def copy_ms(torch, stream, dst, src, samples):
    """The median time of SAMPLES copies of src into dst on stream, in ms."""
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)
        stream.synchronize()
        times = []
        for _ in range(samples):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record(stream)
            dst.copy_(src, non_blocking=True)
            b.record(stream)
            stream.synchronize()
            times.append(a.elapsed_time(b))
    return median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_csv")
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("torch_copies.py: PyTorch sees no CUDA device", file=sys.stderr)
        return 2
    n = args.bytes
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    host.copy_(torch.randint(0, 256, (n,), dtype=torch.uint8))
    d0 = torch.empty(n, dtype=torch.uint8, device="cuda:0")
    s0 = torch.cuda.Stream(device=0)
    out = []

    def put(src, dst, method, ms):
        out.append({"src": src, "dst": dst, "method": method, "bytes": n,
                    "bw_gbps": f"{n / (ms * 1e-3) / 1e9:.3f}"})

    put("host", "dev0", "h2d", copy_ms(torch, s0, d0, host, args.samples))
    back = torch.empty(n, dtype=torch.uint8).pin_memory()
    put("dev0", "host", "d2h", copy_ms(torch, s0, back, d0, args.samples))
    if not torch.equal(back, host):
        print("torch_copies.py: the data differs after host -> dev0 -> host", file=sys.stderr)
        return 1
    if torch.cuda.device_count() > 1:
        d1 = torch.empty(n, dtype=torch.uint8, device="cuda:1")
        put("dev0", "dev1", "d2d_write", copy_ms(torch, s0, d1, d0, args.samples))
    with open(args.out_csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["src", "dst", "method", "bytes", "bw_gbps"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(out)
    for r in out:
        print(f"torch {r['method']} {r['src']}->{r['dst']}: {r['bw_gbps']} GB/s")
    return 0


if __name__ == "__main__":
    interpreter.reexec(["torch"], __file__, sys.argv[1:])
    sys.exit(main())
