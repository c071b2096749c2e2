"""The dpscale model in numpy and PyTorch: random numbers, parameters, batches, presets.

dpscale's own generator (SplitMix64, kernels/elementwise.h), initialisation
and synthetic batches, bit for bit; the model as nn.Sequential of Linear and
GELU with dpscale's parameters; the presets read from `dpscale info`; and
how closely dpscale's loss must follow PyTorch's (LOSS_TOL, read by the
tests and the GPU check). PyTorch is passed in, not imported.
"""
import re
import subprocess

import numpy as np

MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
RNG_PARAMS, RNG_INPUT = 1, 2
BUCKET_MB = 25  # DistributedDataParallel's bucket_cap_mb, as dpscale's --bucket-mb default

# How closely dpscale's loss must follow this script's at every step, as a
# relative difference, for the same seed, shapes, optimizer and learning
# rate (tests/test_torch_reference.py on the host backend, and
# scripts/device-check.sh on GPUs, read these). fp32: both compute the same
# operations in other summation orders (GEMM algorithms, the bias sums, the
# cross-entropy, the all-reduce), each about 1 ulp (6e-8); on the host
# backend every step agreed to 6 decimals (relative <= 5.6e-7), so 1e-5
# leaves a margin of 15 or more. On GPUs TF32 is as --tf32 says in both
# (configure(): default leaves the MLP's Linears out of it).
LOSS_TOL = 1e-5
# bf16: the GEMMs' inputs rounded to 8 significant bits (2**-8 = 3.9e-3
# relative), at other points in each (autocast casts each Linear's input and
# keeps GELU in bf16): a step's loss moves by a few of those roundings
# averaged over its rows; 2e-2 bounds five of them.
LOSS_TOL_BF16 = 2e-2
# fp16: the same roundings with 11 significant bits (2**-11 = 4.9e-4), under a
# GradScaler that scales every gradient by a power of two (exact): 2.5e-3
# bounds five of them (scripts/device-check.sh's fp16 pair).
LOSS_TOL_FP16 = 2.5e-3
# bf16 on the host backend against --device cpu --precision bf16: the same
# roundings at the same points (autocast_bf16 equals a numpy transcription of
# model.c to the bit), so they differ only where an fp32 sum of another
# order (~1 ulp) lands a value on the other side of a bf16 rounding (2**-8),
# and training makes such flips grow. Measured on tiny, batch 8, seeds 1234
# and 1 to 5, at FIDELITY_LR: after 3 SGD steps the parameters within
# 1.2e-7 (max |diff| / max |p|), while a rounding put elsewhere (the
# parameters' gradients left in fp32, or the activation gradients) moves
# them by 2e-4 or more: PARAMS_TOL_BF16_HOST = 1e-6 after
# BF16_PARAMS_STEPS sees that. AdamW divides by the gradient's RMS, so a
# flipped rounding of a near-zero gradient moves its parameter by up to the
# learning rate (3e-4 after 3 steps): its parameters are not compared. The
# loss over FIDELITY_STEPS: within 2.5e-5 (SGD) and 2.4e-4 (AdamW), while
# the misplaced roundings moved SGD's by 6.5e-5 only: LOSS_TOL_BF16_HOST
# bounds the growth with a margin of 8 and catches gross errors alone.
LOSS_TOL_BF16_HOST = {"sgd": 2e-4, "adamw": 2e-3}
PARAMS_TOL_BF16_HOST, BF16_PARAMS_STEPS = 1e-6, 3
# The learning rates and step count at which the loss sees a wrong
# hyper-parameter (tests/test_torch_reference.py says how they were found).
FIDELITY_LR = {"sgd": 0.1, "adamw": 0.01}
FIDELITY_STEPS = 20


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


def make_batch(shape, seed, step, rows, row0=0):
    """model_make_batch for rows [row0, row0 + rows) of the global batch."""
    L, D, T, C = shape
    stream = RNG_INPUT + (step << 8)
    idx = np.arange(row0 * D, (row0 + rows) * D, dtype=np.uint64)
    x = uniform(seed, stream, idx).reshape(rows, D)
    k = min(D, C)
    labels = np.argmax(x[:, :k], axis=1).astype(np.int64)
    return x, labels


def shards(batch, world):
    """Samples per rank, as dpscale's ddp (numpy.array_split: 10 on 4 is 3, 3, 2, 2)."""
    return [batch // world + (i < batch % world) for i in range(world)]


def micro_batches(batch, world, accum, rank):
    """[(first sample, samples)] of rank's part of each micro-batch of a
    step, as dpscale's --accum: the global batch cut into accum contiguous
    micro-batches, micro m samples [m*B/N, (m+1)*B/N), each split over the
    ranks as shards() splits a batch (with accum > 1, B is a multiple of
    world * accum, so the parts are equal)."""
    per = batch // accum
    sh = shards(per, world)
    return [(m * per + sum(sh[:rank]), sh[rank]) for m in range(accum)]


def dpscale_info(dpscale):
    return subprocess.run([dpscale, "info", "--backend", "host"], capture_output=True, text=True,
                          check=True).stdout


def presets(dpscale, info=None):
    """dpscale info's MLP presets: {name: (layers, width, tokens, classes, batch per GPU)}."""
    table = {}
    for line in (info or dpscale_info(dpscale)).splitlines():
        m = re.match(r"\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", line)
        if m:  # name, layers, width, tokens, classes, batch per GPU, params
            table[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 7))
    return table


def file_presets(dpscale, info=None):
    """dpscale info's presets of model files: {name: (batch per GPU, the file's path)}."""
    table = {}
    for line in (info or dpscale_info(dpscale)).splitlines():
        m = re.match(r"\s+(\S+)\s+file\s+(\d+)\s+\d+\s+\d+\s+\S+\s+(\S.*?)\s*$", line)
        if m:  # name, file, batch per GPU, tensors, params, GFLOP, path
            table[m.group(1)] = (int(m.group(2)), m.group(3))
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


# PyTorch 1.13's torch.autocast("cpu", dtype=torch.bfloat16), measured: a
# Linear's GEMM rounds once from an fp32 sum, as cuBLAS's (every element of
# 32 x K by K x 64 equal to the exact product rounded, K = 64 to 512), but a
# parameter's gradient is a bf16 GEMM's output cast back (ToCopyBackward, on
# CUDA too), so rounded to bf16 once, as dpscale's (model.c's
# param_grads_half); but a bf16 matrix-vector product sums in bf16 (1 x 4096
# by 4096 x 1: -15.6 for -17.9), where cuBLAS and dpscale sum in fp32. So
# --device cpu --precision bf16 casts by hand (below), and
# tests/test_accum_reference.py measures how far CPU autocast itself trains
# from it.
def half_cast(torch, half):
    """A cast of fp32 tensors to the half type `half` (torch.bfloat16 or
    torch.float16) held in fp32: the values rounded to nearest even (as
    dps_to_half), and their gradient rounded likewise in backward."""
    def rounded(t):
        return t.to(half).float()

    class Cast(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return rounded(t)

        @staticmethod
        def backward(ctx, g):
            return rounded(g)

    return Cast.apply


def autocast_bf16(torch, seq):
    """build_model's Sequential trained with dpscale's autocast maths (model/model.c
    forward_bf16, backward_bf16), cast by hand on the CPU (the note above says
    why): x, each Linear's weight and bias rounded to bf16 (their gradients,
    summed in fp32, rounded to bf16 once, as the cast's backward gets them
    from autocast's bf16 GEMM), each Linear's fp32 product plus bias rounded
    once, GELU of that rounded; in backward each activation gradient rounded
    where it is formed (dlogits, a GELU's output and input gradients)."""
    F = torch.nn.functional
    half = half_cast(torch, torch.bfloat16)  # a parameter or an activation: rounded both ways

    class AutocastMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seq = seq

        def forward(self, x):
            lins = [m for m in self.seq if isinstance(m, torch.nn.Linear)]
            h = x.to(torch.bfloat16).float()
            for i, lin in enumerate(lins):
                acc = h @ half(lin.weight).t()  # bf16 operands: exact products, fp32 sum
                h = half(acc + half(lin.bias))
                if i < len(lins) - 1:
                    h = half(F.gelu(h))
            return h

    return AutocastMLP()


def flat_params(model):
    """The parameters of build_model's Sequential as dpscale's flat buffer."""
    parts = []
    for lin in (m for m in model.modules() if m.__class__.__name__ == "Linear"):
        parts.append(lin.weight.detach().float().cpu().numpy().T.ravel())
        parts.append(lin.bias.detach().float().cpu().numpy().ravel())
    return np.concatenate(parts).astype(np.float32)


class Preset:
    """A preset's MLP as the trainer takes a model (torch_graph.Graph is the
    other): its name, loss rows a sample, initialisation, module, batches
    and runs.csv columns. A sample is `tokens` rows of `width` inputs."""

    def __init__(self, name, shape):
        self.name, self.shape = name, shape
        self.rows = shape[2]
        self.params = param_count(*shape)

    def init(self, seed):
        return init_params(self.shape, seed)

    def module(self, torch, flat):
        return build_model(torch, self.shape, flat)

    @staticmethod
    def flat(module):
        return flat_params(module)

    def batch(self, seed, step, samples, sample0=0):
        """x [samples * rows, width] and a label a row."""
        return make_batch(self.shape, seed, step, samples * self.rows, sample0 * self.rows)

    def sample_bytes(self):
        """A sample's input and labels as loaded (fp32 and int64)."""
        return self.rows * (self.shape[1] * 4 + 8)

    def fwd_flops(self):
        L, D, T, C = self.shape
        return 2 * (L * D * D + D * C) * T

    def columns(self):
        L, D, T, C = self.shape
        return {"model": self.name, "layers": L, "width": D, "tokens": T, "classes": C,
                "params": self.params}


def optimizer(torch, args, params):
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.01)
