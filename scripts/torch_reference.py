#!/usr/bin/env python3
"""The dpscale model, initialisation, data and optimizer in PyTorch, run
under nn.DataParallel (dp) or DistributedDataParallel (ddp), writing the
same results files (runs.csv, steps.csv, devices.csv) so that dpscale can
be checked against PyTorch on the same GPUs: the loss curves should agree,
and step time and per-GPU memory are comparable side by side.

usage: torch_reference.py --mode dp|ddp --gpus N --model PRESET
                          [--precision fp32|bf16] [--optimizer sgd|adamw]
                          [--batch N] [--steps N] [--warmup N] [--seed N]
                          [--out DIR] [--name NAME] [--dpscale PATH]

Presets are read from `dpscale info`, so the shapes are dpscale's own.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
RNG_PARAMS, RNG_INPUT = 1, 2


def mix64(z):
    """SplitMix64 on uint64 arrays (wrapping arithmetic), as kernels/elementwise.h."""
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & MASK
        return z ^ (z >> np.uint64(31))


def uniform(seed, stream, index):
    """dps_uniform: U[-1, 1) from (seed, stream, index), float32."""
    index = np.asarray(index, dtype=np.uint64)
    r = mix64(np.uint64(seed) ^ mix64(np.uint64(stream) ^ mix64(index)))
    return ((r >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / 16777216.0)
            - np.float32(1.0))


def param_count(L, D, T, C):
    return L * (D * D + D) + D * C + C


def init_params(shape, seed):
    """The flat parameter buffer of model_init_params, chunked to bound memory."""
    L, D, T, C = shape
    n = param_count(*shape)
    out = np.empty(n, dtype=np.float32)
    bound = np.float32(1.0) / np.sqrt(np.float32(D))
    step = 1 << 24
    for lo in range(0, n, step):
        idx = np.arange(lo, min(n, lo + step), dtype=np.uint64)
        out[lo:lo + len(idx)] = bound * uniform(seed, RNG_PARAMS, idx)
    return out


def make_batch(shape, seed, step, rows):
    """model_make_batch for rows [0, rows) of the global batch."""
    L, D, T, C = shape
    stream = RNG_INPUT + (step << 8)
    idx = np.arange(rows * D, dtype=np.uint64)
    x = uniform(seed, stream, idx).reshape(rows, D)
    k = min(D, C)
    labels = np.argmax(x[:, :k], axis=1).astype(np.int64)
    return x, labels


def presets(dpscale):
    out = subprocess.run([dpscale, "info", "--backend", "host"], capture_output=True, text=True,
                         check=True).stdout
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", line)
        if m:  # name, layers, width, tokens, classes, batch per GPU, params
            table[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 7))
    return table


def build_model(torch, shape, flat):
    """nn.Sequential of Linear + GELU, with dpscale's parameters (W is
    [in, out] there, Linear.weight is [out, in])."""
    L, D, T, C = shape
    nn = torch.nn
    layers, off = [], 0
    for li in range(L + 1):
        out = D if li < L else C
        lin = nn.Linear(D, out)
        w = flat[off:off + D * out].reshape(D, out)
        off += D * out
        b = flat[off:off + out]
        off += out
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T)))
            lin.bias.copy_(torch.from_numpy(b.copy()))
        layers.append(lin)
        if li < L:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def optimizer(torch, args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr or 0.01, momentum=0.9)
    return torch.optim.AdamW(params, lr=args.lr or 1e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.01)


def train(torch, args, shape, rank, world, model, device):
    """Runs warmup + steps; returns (per-step ms, per-step loss)."""
    L, D, T, C = shape
    opt = optimizer(torch, args, model.parameters())
    loss_fn = torch.nn.CrossEntropyLoss()
    rows = args.batch * T
    shard = [args.batch // world + (i < args.batch % world) for i in range(world)]
    r0 = sum(shard[:rank]) * T
    r1 = r0 + shard[rank] * T
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        x, y = make_batch(shape, args.seed, step, rows)
        if args.mode == "ddp":
            x, y = x[r0:r1], y[r0:r1]
        xs = torch.from_numpy(x).pin_memory()
        ys = torch.from_numpy(y).pin_memory()
        torch.cuda.synchronize()
        start = time.perf_counter()
        xb = xs.to(device, non_blocking=True)
        yb = ys.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(xb)
        loss = loss_fn(logits.float(), yb)
        if args.mode == "ddp":  # dpscale's scaling: the global mean even for uneven shards
            (loss * (len(yb) * world / rows)).backward()
        else:
            loss.backward()
        opt.step()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        total = loss.detach() * len(yb)
        if args.mode == "ddp":
            torch.distributed.all_reduce(total)
        losses.append(float(total) / rows)
        if step >= args.warmup:
            times.append(ms)
    return times, losses


def percentile(xs, q):
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def config_id(args):
    cid = f"{args.mode}-{args.model}-{args.precision}-{args.optimizer}-g{args.gpus}-b{args.batch}"
    return cid + ("-bk25" if args.mode == "ddp" else "")


def write_rows(path, cols, rows):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        if new:
            w.writerow(cols)
        w.writerows(rows)


def write_results(args, shape, times, losses, peaks):
    """runs.csv, steps.csv and devices.csv with dpscale's column names."""
    folder = os.path.join(args.out, args.name)
    os.makedirs(folder, exist_ok=True)
    cid = config_id(args)
    L, D, T, C = shape
    med = statistics.median(times)
    mm = L * D * D + D * C
    sps = args.batch / (med * 1e-3)
    write_rows(os.path.join(folder, "steps.csv"), ["config_id", "step", "rank", "step_ms", "loss"],
               [[cid, k, 0, f"{t:.4f}", f"{losses[args.warmup + k]:.6f}"]
                for k, t in enumerate(times)])
    write_rows(os.path.join(folder, "devices.csv"),
               ["config_id", "device", "alloc_peak_bytes", "device_peak_bytes"],
               [[cid, d, a, r] for d, (a, r) in enumerate(peaks)])
    write_rows(os.path.join(folder, "runs.csv"),
               ["config_id", "status", "backend", "mode", "ngpus", "model", "params", "precision",
                "optimizer", "global_batch", "steps", "step_ms_median", "step_ms_p10",
                "step_ms_p90", "step_ms_mean", "step_ms_stdev", "samples_per_s", "model_tflops",
                "loss_first", "loss_last"],
               [[cid, "ok", "torch", args.mode, args.gpus, args.model, param_count(*shape),
                 args.precision, args.optimizer, args.batch, args.steps, f"{med:.4f}",
                 f"{percentile(times, 0.1):.4f}", f"{percentile(times, 0.9):.4f}",
                 f"{statistics.mean(times):.4f}",
                 f"{statistics.stdev(times) if len(times) > 1 else 0.0:.4f}", f"{sps:.3f}",
                 f"{6 * mm * args.batch * T / (med * 1e-3) / 1e12:.6f}", f"{losses[0]:.6f}",
                 f"{losses[-1]:.6f}"]])
    print(f"{cid}: step {med:.3f} ms, {sps:.1f} samples/s, loss {losses[0]:.4f} -> "
          f"{losses[-1]:.4f}; results in {folder}")


def run_dp(args, shape):
    import torch
    flat = init_params(shape, args.seed)
    model = build_model(torch, shape, flat).cuda(0)
    if args.gpus > 1:
        model = torch.nn.DataParallel(model, device_ids=list(range(args.gpus)))
    for d in range(args.gpus):
        torch.cuda.reset_peak_memory_stats(d)
    times, losses = train(torch, args, shape, 0, 1, model, torch.device("cuda", 0))
    peaks = [(torch.cuda.max_memory_allocated(d), torch.cuda.max_memory_reserved(d))
             for d in range(args.gpus)]
    write_results(args, shape, times, losses, peaks)


def ddp_worker(rank, args, shape, port):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=args.gpus)
    flat = init_params(shape, args.seed)
    model = build_model(torch, shape, flat).cuda(rank)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    torch.cuda.reset_peak_memory_stats(rank)
    times, losses = train(torch, args, shape, rank, args.gpus, ddp, torch.device("cuda", rank))
    t = torch.tensor(times, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step's time is the slowest rank's
    peak = torch.tensor([torch.cuda.max_memory_allocated(rank),
                         torch.cuda.max_memory_reserved(rank)], device="cuda", dtype=torch.int64)
    peaks = [torch.zeros_like(peak) for _ in range(args.gpus)]
    dist.all_gather(peaks, peak)
    if rank == 0:
        write_results(args, shape, t.tolist(), losses, [tuple(p.tolist()) for p in peaks])
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description="dpscale's model in PyTorch (DataParallel or DDP)")
    ap.add_argument("--mode", choices=["dp", "ddp"], default="dp")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--model", default="small")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=0, help="global batch (default: preset's x gpus)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="results")
    ap.add_argument("--name", default="torch-" + time.strftime("%Y%m%d-%H%M%S"))
    ap.add_argument("--dpscale", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "src", "dpscale"))
    args = ap.parse_args()
    table = presets(args.dpscale)
    if args.model not in table:
        print(f"torch_reference.py: --model {args.model}: not one of {sorted(table)}",
              file=sys.stderr)
        return 2
    shape, per_gpu = table[args.model][:4], table[args.model][4]
    args.batch = args.batch or per_gpu * args.gpus
    import torch
    if not torch.cuda.is_available() or torch.cuda.device_count() < args.gpus:
        print(f"torch_reference.py: needs {args.gpus} CUDA device(s), PyTorch sees "
              f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 GEMMs as dpscale's
    torch.backends.cudnn.allow_tf32 = False
    if args.mode == "dp":
        run_dp(args, shape)
    else:
        import torch.multiprocessing as mp
        mp.spawn(ddp_worker, args=(args, shape, 29500 + os.getpid() % 1000), nprocs=args.gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
