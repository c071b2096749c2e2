"""A dpscale model file in PyTorch: its reader, and its ops as model/graph.c computes them.

read() takes a model file (docs/model-file.md) as dpscale reads it: the
tensors (name, dims, ready), the ops (kind, name, input, keys, tensors,
elements per sample), and refuses what dpscale refuses with FILE:LINE.
Graph holds what the PyTorch reference trains: dpscale's initialisation
(graph_init_params) in its flat parameter layout (the tensors in the reverse
of ready order), its synthetic batches of samples, and the module, built on
flat fp32 tensors [samples, elements] with model/graph.c's semantics: a gemm
is x·Wᵀ + b on m rows of a sample (W viewed as n × k; with g groups, group j's
k/g columns of x by its n/g rows of W give its n/g columns) or, without weight,
b matmuls between the two halves of its input; a resample reads
x[i mod n_in]; a norm scales and shifts c columns; an act is its fn's
torch function (F.relu, F.gelu's exact erf form, torch.tanh, torch.sigmoid,
F.relu6, F.silu, F.hardswish, F.hardsigmoid, F.mish), whose autograd saves
what dpscale keeps (relu's, tanh's and sigmoid's output, the others' input),
but softmax, which runs GELU as dpscale runs it (the op names no row
length); an embedding adds its table's elements at fixed positions; an add
is a residual; a cat appends another op's output or a tensor to each
sample; a mul scales each run of n/n_s elements by one of its other
operand's n_s. With a half type (bf16 or fp16) the module computes as
dpscale runs a file under autocast (model/graph.h, docs/model-file.md's
"Half precision"), the casts by hand on fp32 tensors that hold half values,
as torch_model.autocast_bf16 does for the MLP: a gemm's input, weight and
bias rounded to the half type (their gradients too), its output rounded; a
resample and an act in their input's type, a norm and an embedding in
fp32, an add, a mul and a cat in the half type when both operands are of it
(a cat's tensor is an fp32 parameter), else fp32, the products of a mul's
scale gradient rounded to its type (grad * self) before they are summed;
every half output's gradient rounded once, and each gradient an op hands
its input rounded to the input's type. In fp32, a gemm that --tf32 puts in
TF32 (a convolution's, is_conv, under default or on; every one under on)
runs as dpscale's host backend runs it on any device: its operands rounded
to TF32 (round_tf32, nearest even, dps_round_tf32) and multiplied in fp32,
forward and backward (tf32_matmul), since PyTorch's CPU kernels ignore the
allow_tf32 flags and this module's convolutions are matmuls, which cuDNN's
flag does not reach. numpy only at import: PyTorch is passed in.
"""
import collections
import math

import numpy as np

from dpstools.torch_model import half_cast, uniform

INPUT = -1  # an op's `in` or `from`: the model's input
RNG_GRAPH_PARAMS = 1 << 40  # dpscale's generator streams of a model file's tensors (+ t)
RNG_INPUT, RNG_LABELS = 2, 3  # the streams of a step's inputs and labels (+ step << 8)
KINDS = ("gemm", "resample", "norm", "act", "add", "embedding", "mul", "cat", "attn")
FNS = ("relu", "gelu", "softmax", "tanh", "sigmoid", "relu6", "silu", "hardswish", "hardsigmoid",
       "mish")
WINDOW_KEYS = {"window", "kernel", "stride", "pad", "dilation", "pool"}
KIND_KEYS = {"gemm": {"m", "k", "n", "b", "g", "weight", "bias"}, "resample": {"n"} | WINDOW_KEYS,
             "norm": {"c", "weight", "bias"}, "act": {"fn"}, "add": {"from"},
             "embedding": {"m", "weight"}, "mul": {"from", "pixels"},
             "cat": {"from", "weight", "pixels"}, "attn": {"heads", "t", "d", "causal"}}
COMMON_KEYS = {"in", "saved", "moved"}
NUMBER_KEYS = ("m", "k", "n", "b", "c", "g", "pixels", "heads", "t", "d")
NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:/-[]")
DIM_MAX = 1 << 31
HOWTO = "(docs/model-file.md)"

Tensor = collections.namedtuple("Tensor", "name dims numel ready line")
Op = collections.namedtuple("Op", "kind name inp frm m k n b c fn weight bias "
                                  "in_elems out_elems line g win pixels heads t d causal",
                            defaults=(None, 1, 0, 0, 0, 0))
# A resample's window (model_file.h's mf_window): the input h x w pixels of
# c channels held pixel by pixel; pool None (an im2col), "max" or "avg";
# groups: an im2col's, the g of the convolution's gemm that reads it.
Window = collections.namedtuple("Window", "c h w kh kw sh sw ph pw dh dw pool groups",
                                defaults=(1,))


class ModelFileError(ValueError):
    """A file dpscale would refuse: FILE:LINE: what."""


class Graph:
    """A model file as read: name, input, classes, tensors and ops (file
    order), rows of the loss a sample, and the flat layout's offsets."""

    def __init__(self, path, name, input_elems, classes, tensors, ops):
        self.path, self.name, self.input, self.classes = path, name, input_elems, classes
        self.tensors, self.ops = tensors, ops
        self.rows = ops[-1].out_elems // classes
        self.params = sum(t.numel for t in tensors)
        self.order = sorted(range(len(tensors)), key=lambda t: -tensors[t].ready)
        self.offset, at = [0] * len(tensors), 0
        for t in self.order:
            self.offset[t], at = at, at + tensors[t].numel

    def columns(self):
        """runs.csv's model columns, as dpscale writes them for a model file."""
        return {"model": self.name, "layers": len(self.ops),
                "width": max(1, self.input // self.rows), "tokens": self.rows,
                "classes": self.classes, "params": self.params}

    def fwd_flops(self):
        """Forward FLOPs of one sample (model_file_fwd_flops): the gemms', and
        an attn's two products, 4·heads·t·t·d, causal or not."""
        return (sum(2 * o.b * o.m * o.k * o.n // o.g for o in self.ops if o.kind == "gemm") +
                sum(4 * o.heads * o.t * o.t * o.d for o in self.ops if o.kind == "attn"))

    def init(self, seed):
        """graph_init_params: tensor t is bound * U(seed, 2**40 + t, i), bound
        1/sqrt(fan-in) in float32, in the flat layout."""
        flat = np.empty(self.params, dtype=np.float32)
        for t, ts in enumerate(self.tensors):
            fan_in = ts.numel // ts.dims[0] if len(ts.dims) > 1 else ts.numel
            bound = np.float32(1.0) / np.sqrt(np.float32(fan_in))
            for lo in range(0, ts.numel, 1 << 24):
                idx = np.arange(lo, min(ts.numel, lo + (1 << 24)), dtype=np.uint64)
                at = self.offset[t] + lo
                flat[at:at + len(idx)] = bound * uniform(seed, RNG_GRAPH_PARAMS + t, idx)
        return flat

    def split(self, flat):
        """The flat buffer as one array per tensor (file order, the tensor's dims)."""
        return [flat[self.offset[t]:self.offset[t] + ts.numel].reshape(ts.dims)
                for t, ts in enumerate(self.tensors)]

    def join(self, arrays):
        """One array per tensor (file order) as the flat buffer."""
        flat = np.empty(self.params, dtype=np.float32)
        for t, a in enumerate(arrays):
            flat[self.offset[t]:self.offset[t] + self.tensors[t].numel] = np.ravel(a)
        return flat

    def batch(self, seed, step, samples, sample0=0):
        """Samples [sample0, sample0 + samples) of step's global batch:
        x [samples, input] and one label a loss row [samples * rows]."""
        stream = step << 8
        lo = sample0 * self.input
        idx = np.arange(lo, lo + samples * self.input, dtype=np.uint64)
        x = uniform(seed, RNG_INPUT + stream, idx).reshape(samples, self.input)
        rows = np.arange(sample0 * self.rows, (sample0 + samples) * self.rows, dtype=np.uint64)
        u = uniform(seed, RNG_LABELS + stream, rows).astype(np.float64)
        labels = np.floor((u + 1.0) * 0.5 * self.classes).astype(np.int64)
        return x, np.minimum(labels, self.classes - 1)

    def module(self, torch, flat, half=None, tf32="off"):
        """The nn.Module of the ops with the parameters of the flat buffer;
        half (torch.bfloat16 or torch.float16): as under dpscale's autocast;
        tf32 (--tf32's word): in fp32, which gemms multiply in TF32."""
        return make_module(torch, self, flat, half, tf32)

    def is_conv(self, i):
        """Whether op i is a convolution's im2col GEMM: a gemm with a weight
        whose input is a resample named "<its name>.im2col"
        (model_file_is_conv in src/model/model_file.c)."""
        op = self.ops[i]
        if op.kind != "gemm" or op.weight < 0 or op.inp == INPUT:
            return False
        src = self.ops[op.inp]
        return src.kind == "resample" and src.name == op.name + ".im2col"

    @staticmethod
    def flat(module):
        return flat_params(module)

    def sample_bytes(self):
        """A sample's input and labels as loaded (fp32 and int64)."""
        return self.input * 4 + self.rows * 8


def tf32_for(mode, conv):
    """Whether --tf32 MODE multiplies a convolution's (conv) or a Linear's or
    matmul's fp32 GEMM in TF32, as PyTorch's two flags (dps_tf32_for)."""
    return mode == "on" or (mode == "default" and conv)


def round_tf32(torch, t):
    """t's fp32 values rounded to TF32 (10 mantissa bits), to nearest even,
    inf and NaN kept: kernels/elementwise.h's dps_round_tf32."""
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0xfff + ((bits >> 13) & 1)) & -0x2000).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


def tf32_matmul(torch):
    """matmul(a, b) as a TF32 GEMM: a and b rounded to TF32, an fp32
    product; backward's two GEMMs round their operands too (the output's
    gradient and the saved, rounded operands), as dpscale's gemm_bwd runs
    under gemm_tf32."""
    class TF32Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ra, rb = round_tf32(torch, a), round_tf32(torch, b)
            ctx.save_for_backward(ra, rb)
            return torch.matmul(ra, rb)

        @staticmethod
        def backward(ctx, g):
            ra, rb = ctx.saved_tensors
            rg = round_tf32(torch, g)
            return torch.matmul(rg, rb.transpose(-1, -2)), torch.matmul(ra.transpose(-1, -2), rg)

    return TF32Matmul.apply


def make_module(torch, graph, flat, half=None, tf32="off"):
    nn = torch.nn
    casts = half_casts(torch, half) if half is not None else None
    tf32_mm = tf32_matmul(torch)
    mark = torch.autograd.profiler.record_function
    mms = [tf32_mm if half is None and tf32_for(tf32, graph.is_conv(i)) else torch.matmul
           for i in range(len(graph.ops))]

    class GraphModule(nn.Module):
        """The file's ops on [samples, input] → logits [samples * rows, classes];
        tensor t of the file is parameter `t{t}` (not an nn.ParameterList,
        which nn.DataParallel's replicas see empty)."""

        def __init__(self):
            super().__init__()
            self.graph = graph
            for t, a in enumerate(graph.split(flat)):
                self.register_parameter(f"t{t}", nn.Parameter(
                    torch.from_numpy(np.array(a, dtype=np.float32))))

        def weights(self):
            """The parameters in the file's tensor order."""
            return [getattr(self, f"t{t}") for t in range(len(graph.tensors))]

        def forward(self, x):
            w, outs, halves = self.weights(), [], []
            for op, mm in zip(graph.ops, mms):
                with mark("dpscale::" + op.kind):  # the op's kind under torch.profiler (torch_ops)
                    if casts:
                        y, h = op_forward_half(torch, casts, op, w, x, outs, halves)
                        outs.append(y)
                        halves.append(h)
                    else:
                        outs.append(op_forward(torch, op, w, x, outs, mm=mm))
            return outs[-1].reshape(-1, graph.classes)

    return GraphModule()


def flat_params(module):
    """A GraphModule's parameters as dpscale's flat buffer (float32)."""
    return module.graph.join([p.detach().float().cpu().numpy() for p in module.weights()])


def source(x, outs, op_index):
    return x if op_index == INPUT else outs[op_index]


def op_forward(torch, op, w, x, outs, a=None, mm=None):
    """One op on [samples, in_elems] → [samples, out_elems], as model/graph.c
    (a: its input, when not outs' or x as it is; mm: a gemm's matmul,
    torch.matmul or tf32_matmul's)."""
    a = source(x, outs, op.inp) if a is None else a
    if op.kind == "gemm":
        return gemm(torch, op, w, a, mm or torch.matmul)
    if op.kind == "resample":
        return windowed(torch, a, op.win) if op.win else resample(torch, a, op.out_elems)
    if op.kind == "norm":
        v = a.reshape(-1, op.c)
        v = v * w[op.weight] if op.weight >= 0 else v
        v = v + w[op.bias] if op.bias >= 0 else v
        return v.reshape(a.shape[0], op.out_elems)
    if op.kind == "act":
        return act_function(torch, op.fn)(a)
    if op.kind == "add":
        return a + source(x, outs, op.frm)
    if op.kind == "cat":  # each sample's a, then the other operand's (the tensor's) elements
        other = (w[op.weight].reshape(1, -1).expand(a.shape[0], -1) if op.weight >= 0
                 else source(x, outs, op.frm))
        return cat(torch, op, a, other)
    if op.kind == "mul":  # each of s's elements scales its run of a (pixels: its channel)
        return a * spread(op, source(x, outs, op.frm))
    if op.kind == "attn":
        return attention(torch, op, a)
    return a + resample(torch, w[op.weight].reshape(1, -1), op.out_elems)  # embedding


def cat(torch, op, a, other):
    """a then other in each sample; over pixels, in each pixel."""
    if op.pixels == 1:
        return torch.cat([a, other], dim=1)
    p = op.pixels
    return torch.cat([a.reshape(a.shape[0], p, -1), other.reshape(a.shape[0], p, -1)],
                     dim=2).reshape(a.shape[0], -1)


def spread(op, s):
    """A mul's scales s [samples, n_s] as its input's size: each element over
    its run, or over pixels (pixels=P) s's channels at every pixel."""
    if op.pixels > 1:
        return s.repeat(1, op.pixels)
    return s.repeat_interleave(op.out_elems // s.shape[1], dim=1)


def attention(torch, op, a):
    """An attn op as PyTorch's math scaled_dot_product_attention computes
    it: each sample's t rows of [q | k | v] of its heads split into heads,
    softmax(q·kᵀ·(1/√d), keys after a row masked when causal)·v, the heads'
    rows joined again (t rows of heads·d)."""
    s, h, t, d = a.shape[0], op.heads, op.t, op.d
    x = a.reshape(s, t, 3, h, d)
    q, k, v = (x[:, :, i].transpose(1, 2) for i in range(3))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    if op.causal:
        mask = torch.ones(t, t, dtype=torch.bool, device=a.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    return y.transpose(1, 2).reshape(s, t * h * d)


def attention_half(torch, op, a, cast):
    """An attn op on half q, k, v (a: cast already): the math attention's
    output rounded once; its backward as FlashAttention's (and dpscale's),
    D = rowsum(dO ∘ O) from the rounded output O it keeps, where autograd
    through the math would use the unrounded one (2^-9 apart in bf16)."""
    class Flash(torch.autograd.Function):
        @staticmethod
        def forward(ctx, qkv):
            with torch.enable_grad():
                x = qkv.detach().requires_grad_(True)
                y = attention(torch, op, x)
            out = cast(y.detach())
            ctx.save_for_backward(qkv, out)
            return out

        @staticmethod
        def backward(ctx, g):
            qkv, out = ctx.saved_tensors
            g = cast(g.detach())  # the gradient of a half output: rounded first
            with torch.enable_grad():
                x = qkv.detach().requires_grad_(True)
                y = attention(torch, op, x)
                # the math's gradient, its softmax term moved from y to the kept output
                shift = (g * (out - y.detach())).reshape(g.shape[0], op.t, op.heads, op.d)
                gx, = torch.autograd.grad(y, x, g)
            return gx + softmax_shift(torch, op, x.detach(), shift.sum(-1))

    return Flash.apply(a)


def softmax_shift(torch, op, x, dd):
    """The gradient of the attention's input from dS = -P·dd (dd: [samples,
    t, heads], a change of D): dq = dS·k/√d, dk = dSᵀ·q/√d, dv = 0."""
    s, h, t, d = x.shape[0], op.heads, op.t, op.d
    q, k, v = (x.reshape(s, t, 3, h, d)[:, :, i].transpose(1, 2) for i in range(3))
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    if op.causal:
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    ds = -torch.softmax(scores, dim=-1) * dd.transpose(1, 2).unsqueeze(-1)
    dq = (ds @ k) / math.sqrt(d)
    dk = (ds.transpose(-2, -1) @ q) / math.sqrt(d)
    parts = [p.transpose(1, 2).reshape(s, t, h * d) for p in (dq, dk, torch.zeros_like(dq))]
    return torch.stack([p.reshape(s, t, h, d) for p in parts], dim=2).reshape(s, -1)


def half_casts(torch, half):
    """(cast, grad_cast, mul_half) to the half type on fp32 tensors: cast
    rounds the values and their gradient (a tensor of the half type: a
    gemm's cast operands, a half op's output), grad_cast only the gradient
    (a half tensor an op reads: the gradient it hands back has the tensor's
    type); mul_half(a, s) is a * s whose gradient for s, g * a, is rounded
    element by element (a product of half tensors)."""
    def rounded(t):
        return t.to(half).float()  # round to nearest even, as dps_to_half

    class GradCast(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, g):
            return rounded(g)

    class MulHalf(torch.autograd.Function):  # a * s in half: grad * a in half, as autocast's
        @staticmethod
        def forward(ctx, a, s):
            ctx.save_for_backward(a, s)
            return a * s

        @staticmethod
        def backward(ctx, g):
            a, s = ctx.saved_tensors
            return g * s, rounded(g * a)

    return half_cast(torch, half), GradCast.apply, MulHalf.apply


def op_forward_half(torch, casts, op, w, x, outs, halves):
    """One op as dpscale runs it under autocast (model/graph_autocast.c):
    (its output, whether it is of the half type)."""
    cast, grad_cast, mul_half = casts

    def read(index):  # an input, its gradient rounded to its type
        a = source(x, outs, index)
        return grad_cast(a) if index != INPUT and halves[index] else a

    in_half = op.inp != INPUT and halves[op.inp]
    if op.kind == "gemm":
        a = cast(source(x, outs, op.inp))
        if op.weight < 0:
            return cast(gemm(torch, op, w, a)), True
        casted = list(w)
        casted[op.weight] = cast(w[op.weight])
        if op.bias >= 0:
            casted[op.bias] = cast(w[op.bias])
        return cast(gemm(torch, op, casted, a)), True
    if op.kind == "attn":  # autocast's lower-precision list: q, k, v cast, fp32 sums, one rounding
        return attention_half(torch, op, cast(source(x, outs, op.inp)), cast), True
    if op.kind in ("add", "mul", "cat"):  # type promotion (cat: autocast's promote list)
        out_half = in_half and op.frm != INPUT and halves[op.frm] and op.weight < 0
        a = read(op.inp)
        if op.kind == "add":
            y = a + read(op.frm)
        elif op.kind == "cat":
            y = op_forward(torch, op, w, x, outs, a) if op.weight >= 0 else \
                cat(torch, op, a, read(op.frm))
        else:
            s = spread(op, read(op.frm))
            y = mul_half(a, s) if out_half else a * s
        return (cast(y), True) if out_half else (y, False)
    y = op_forward(torch, op, w, x, outs, read(op.inp))
    if op.kind in ("resample", "act"):  # in the input's type
        return (cast(y), True) if in_half else (y, False)
    return y, False  # norm, embedding: fp32


def act_function(torch, fn):
    """fn's torch function; softmax: GELU, as model/graph.c runs it."""
    F = torch.nn.functional
    return {"relu": F.relu, "gelu": F.gelu, "softmax": F.gelu, "tanh": torch.tanh,
            "sigmoid": torch.sigmoid, "relu6": F.relu6, "silu": F.silu, "hardswish": F.hardswish,
            "hardsigmoid": F.hardsigmoid, "mish": F.mish}[fn]


def gemm(torch, op, w, a, mm=None):
    mm = mm or torch.matmul
    samples = a.shape[0]
    if op.weight >= 0 and op.g > 1:  # g GEMMs: k/g columns of a by n/g rows of W each
        x = a.reshape(samples * op.m, op.g, op.k // op.g).transpose(0, 1)
        W = w[op.weight].reshape(op.g, op.n // op.g, op.k // op.g)
        y = mm(x, W.transpose(1, 2)).transpose(0, 1).reshape(samples * op.m, op.n)
        if op.bias >= 0:
            y = y + w[op.bias]
        return y.reshape(samples, op.out_elems)
    if op.weight >= 0:
        y = mm(a.reshape(samples * op.m, op.k), w[op.weight].reshape(op.n, op.k).t())
        if op.bias >= 0:
            y = y + w[op.bias]
        return y.reshape(samples, op.out_elems)
    half = op.b * op.m * op.k
    left = a[:, :half].reshape(samples, op.b, op.m, op.k)
    right = a[:, half:].reshape(samples, op.b, op.k, op.n)
    return mm(left, right).reshape(samples, op.out_elems)


def resample(torch, a, n):
    """y[:, i] = a[:, i mod n_in] for i < n; its gradient sums what each element fed."""
    n_in = a.shape[1]
    if n <= n_in:
        return a[:, :n]
    idx = torch.arange(n, device=a.device) % n_in
    return a.index_select(1, idx)


def window_out(win):
    """(oh, ow, columns of an output pixel) of a window, as PyTorch sizes them."""
    oh = (win.h + 2 * win.ph - win.dh * (win.kh - 1) - 1) // win.sh + 1
    ow = (win.w + 2 * win.pw - win.dw * (win.kw - 1) - 1) // win.sw + 1
    return oh, ow, win.c if win.pool else win.kh * win.kw * win.c


def windowed(torch, a, win):
    """A windowed resample on [samples, h w c] (pixel by pixel, a pixel's
    channels together): F.unfold's columns as rows of output pixels in
    (g, kh, kw, c/g) order (g: the window's groups), or F.max_pool2d / F.avg_pool2d (count_include_pad,
    floor) as rows of output pixels of c channels."""
    F = torch.nn.functional
    samples = a.shape[0]
    x = a.reshape(samples, win.h, win.w, win.c).permute(0, 3, 1, 2)
    k, st, pad, dil = (win.kh, win.kw), (win.sh, win.sw), (win.ph, win.pw), (win.dh, win.dw)
    if win.pool is None:
        oh, ow, _ = window_out(win)
        cols = F.unfold(x, k, dilation=dil, padding=pad, stride=st)  # [s, c kh kw, L]
        g = win.groups
        cols = cols.reshape(samples, g, win.c // g, win.kh, win.kw, oh * ow)
        return cols.permute(0, 5, 1, 3, 4, 2).reshape(samples, -1)
    if win.pool == "max":
        y = F.max_pool2d(x, k, st, pad, dil)
    else:
        y = F.avg_pool2d(x, k, st, pad)
    return y.permute(0, 2, 3, 1).reshape(samples, -1)


# ---- the reader ----

def read(path):
    """The model file at path as a Graph; ModelFileError (FILE:LINE: what) for
    one dpscale would refuse, OSError when it does not read."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    r = Reader(path)
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if words:
            r.record(number, words)
    return r.whole(r.ops[-1].line if r.ops else r.format_line or 1)


class Reader:
    """The records of one file as they come, each checked as dpscale does."""

    def __init__(self, path):
        self.path = path
        self.header = {}  # name, input, classes: (value, line)
        self.format_line = 0
        self.tensors, self.ops = [], []
        self.tensor_at, self.op_at = {}, {}
        self.first_op = {}  # tensor index: the first op that names it

    def fail(self, line, what):
        raise ModelFileError(f"{self.path}:{line}: {what}")

    def record(self, line, w):
        if not self.format_line:
            if w != ["dpscale-model", "1"]:
                self.fail(line, f"expected 'dpscale-model 1' as the first record: not a model "
                                f"file of the format this reads {HOWTO}")
            self.format_line = line
        elif w[0] == "tensor":
            self.tensor(line, w)
        elif w[0] == "op":
            self.op(line, w)
        elif w[0] in ("name", "input", "classes"):
            self.header_record(line, w)
        else:
            self.fail(line, f"unknown record '{w[0]}' (expected dpscale-model, name, input, "
                            f"classes, tensor or op) {HOWTO}")

    def whole_number(self, line, key, v, lo, hi):
        if not v.isdigit() or not lo <= int(v) <= hi:
            self.fail(line, f"{key}={v}: expected a whole number from {lo} to {hi} {HOWTO}")
        return int(v)

    def good_name(self, line, what, name):
        if not 0 < len(name) < 128 or set(name) - NAME_CHARS:
            self.fail(line, f"{what} '{name}': expected letters, digits and _.:/-[] {HOWTO}")

    def header_record(self, line, w):
        key = w[0]
        if len(w) != 2:
            self.fail(line, f"expected '{key} VALUE' {HOWTO}")
        if key in self.header:
            self.fail(line, f"'{key}' given again (first at line {self.header[key][1]})")
        if self.ops:
            self.fail(line, f"'{key}' after the first op {HOWTO}")
        if key == "name":
            self.good_name(line, "name", w[1])
            value = w[1]
        else:
            value = self.whole_number(line, key, w[1], 1 if key == "input" else 2,
                                      1 << 40 if key == "input" else DIM_MAX)
        self.header[key] = (value, line)

    def tensor(self, line, w):
        if len(w) != 4 or not w[3].startswith("ready="):
            self.fail(line, f"expected 'tensor NAME SHAPE ready=K' {HOWTO}")
        self.good_name(line, "tensor name", w[1])
        if w[1] in self.tensor_at:
            self.fail(line, f"tensor {w[1]} given twice")
        dims = tuple(self.whole_number(line, "shape", d, 1, DIM_MAX) for d in w[2].split("x"))
        ready = self.whole_number(line, "ready", w[3][6:], 0, DIM_MAX - 1)
        self.tensor_at[w[1]] = len(self.tensors)
        self.tensors.append(Tensor(w[1], dims, math.prod(dims), ready, line))

    def op(self, line, w):
        if len(w) < 3 or w[1] not in KINDS:
            self.fail(line, f"expected 'op KIND NAME key=value ...', KIND one of "
                            f"{', '.join(KINDS)} {HOWTO}")
        kind, name = w[1], w[2]
        self.good_name(line, "op name", name)
        if name == "input" or name in self.op_at:
            self.fail(line, f"op {name}: 'input' or a name given twice {HOWTO}")
        if "input" not in self.header:
            self.fail(line, f"an op before the 'input N' record {HOWTO}")
        keys = self.op_keys(line, kind, w[3:])
        op = self.sized(line, kind, name, keys)
        self.op_at[name] = len(self.ops)
        self.ops.append(op)

    def op_keys(self, line, kind, words):
        keys = {}
        for kv in words:
            key, eq, v = kv.partition("=")
            if not key or not eq or not v:
                self.fail(line, f"'{kv}': expected key=value {HOWTO}")
            if key not in KIND_KEYS[kind] | COMMON_KEYS:
                self.fail(line, f"a {kind} op takes no key '{key}' (it takes "
                                f"{' '.join(sorted(KIND_KEYS[kind]))}, in, saved, moved) {HOWTO}")
            if key in keys:
                self.fail(line, f"key {key} given twice")
            keys[key] = self.key_value(line, key, v)
        return keys

    def key_value(self, line, key, v):
        if key in NUMBER_KEYS:
            return self.whole_number(line, key, v, 1, DIM_MAX)
        if key == "pool":
            if v not in ("max", "avg"):
                self.fail(line, f"pool={v}: expected max or avg (none: an im2col) {HOWTO}")
            return v
        if key in WINDOW_KEYS:
            parts = v.split("x")
            if len(parts) != (3 if key == "window" else 2):
                self.fail(line, f"{key}={v}: expected "
                                f"{'CxHxW, as 64x56x56' if key == 'window' else 'two sizes, as 3x3'} "
                                f"{HOWTO}")
            return tuple(self.whole_number(line, key, d, 0 if key == "pad" else 1, DIM_MAX)
                         for d in parts)
        if key in ("saved", "moved"):
            return self.whole_number(line, key, v, 0, 1 << 50)
        if key == "causal":
            return self.whole_number(line, key, v, 0, 1)
        if key in ("weight", "bias"):
            if v not in self.tensor_at:
                self.fail(line, f"tensor {v} is not given above this op {HOWTO}")
            self.first_op.setdefault(self.tensor_at[v], len(self.ops))
            return self.tensor_at[v]
        if key == "fn":
            if v not in FNS:
                self.fail(line, f"fn={v}: expected one of {', '.join(FNS)}")
            return v
        if v != "input" and v not in self.op_at:  # in, from
            self.fail(line, f"{v}: no op of that name above this one (or 'input') {HOWTO}")
        return INPUT if v == "input" else self.op_at[v]

    def out_of(self, op_index):
        return self.header["input"][0] if op_index == INPUT else self.ops[op_index].out_elems

    def sized(self, line, kind, name, keys):
        """The op with its elements per sample in and out, checked against its input."""
        inp = keys.get("in", len(self.ops) - 1 if self.ops else INPUT)
        have = self.out_of(inp)
        k = {key: keys.get(key, 0) for key in NUMBER_KEYS}
        need, out = self.sizes(line, kind, keys, k, have)
        if need != have:
            where = "the input" if inp == INPUT else self.ops[inp].name
            self.fail(line, f"op {name} takes {need} elements per sample, but its input "
                            f"({where}) gives {have}: put a resample op between them {HOWTO}")
        op = Op(kind, name, inp, keys.get("from", INPUT), k["m"], k["k"], k["n"],
                k["b"] or 1, k["c"], keys.get("fn"), keys.get("weight", -1),
                keys.get("bias", -1), have, out, line, k["g"] or 1,
                self.window(line, keys, have, out) if kind == "resample" else None,
                k["pixels"] or 1, k["heads"], k["t"], k["d"], keys.get("causal", 0))
        self.conv_sizes(line, op)
        return op

    def window(self, line, keys, have, n):
        """A resample's Window (None without window=), checked as dpscale checks it."""
        if "window" not in keys:
            if WINDOW_KEYS & set(keys):
                self.fail(line, f"kernel=, stride=, pad=, dilation= and pool= describe a window: "
                                f"give window=CxHxW too {HOWTO}")
            return None
        if "kernel" not in keys:
            self.fail(line, f"window= needs kernel=KHxKW {HOWTO}")
        pool = keys.get("pool")
        win = Window(*keys["window"], *keys["kernel"], *keys.get("stride", (1, 1)),
                     *keys.get("pad", (0, 0)), *keys.get("dilation", (1, 1)), pool)
        if pool and (2 * win.ph > win.kh or 2 * win.pw > win.kw):
            self.fail(line, f"pad={win.ph}x{win.pw}: a pooling's padding is at most half its "
                            f"kernel {win.kh}x{win.kw}, as PyTorch's {HOWTO}")
        if pool == "avg" and (win.dh > 1 or win.dw > 1):
            self.fail(line, f"pool=avg takes no dilation (avg_pool2d has none) {HOWTO}")
        if (win.h + 2 * win.ph < win.dh * (win.kh - 1) + 1 or
                win.w + 2 * win.pw < win.dw * (win.kw - 1) + 1):
            self.fail(line, f"the kernel {win.kh}x{win.kw} (dilated) is larger than the padded "
                            f"input {win.h + 2 * win.ph}x{win.w + 2 * win.pw} {HOWTO}")
        if win.c * win.h * win.w != have:
            self.fail(line, f"window={win.c}x{win.h}x{win.w} holds {win.c * win.h * win.w} "
                            f"elements, but its input gives {have} a sample {HOWTO}")
        oh, ow, cols = window_out(win)
        if oh * ow * cols != n:
            self.fail(line, f"n={n}, but the window gives {oh}x{ow} output pixels of {cols} "
                            f"columns, {oh * ow * cols} elements {HOWTO}")
        if pool == "max":
            self.max_pool_windows(line, win, oh, ow)
        return win

    def max_pool_windows(self, line, win, oh, ow):
        """A max pool whose every window holds an input element (max_pool2d
        gives -inf for one wholly in the padding), checked as dpscale checks it."""
        def all_padding(n_in, k, s, p, d, n_out):
            return next((o for o in range(n_out)
                         if all(not 0 <= o * s - p + j * d < n_in for j in range(k))), -1)
        oy = all_padding(win.h, win.kh, win.sh, win.ph, win.dh, oh)
        ox = all_padding(win.w, win.kw, win.sw, win.pw, win.dw, ow)
        if oy >= 0 or ox >= 0:
            self.fail(line, f"pool=max: the window of output {'row' if oy >= 0 else 'column'} "
                            f"{oy if oy >= 0 else ox} lies wholly in the padding (kernel "
                            f"{win.kh}x{win.kw}, stride {win.sh}x{win.sw}, pad {win.ph}x{win.pw}, "
                            f"dilation {win.dh}x{win.dw} on {win.h}x{win.w} pixels), where "
                            f"max_pool2d has no element to take: give a smaller pad= or "
                            f"dilation= {HOWTO}")

    def conv_sizes(self, line, op):
        """A convolution whose im2col has a window: m its output pixels, k its
        columns, its g the im2col's groups (dividing the window's channels)."""
        if op.kind != "gemm" or op.weight < 0 or op.inp == INPUT:
            return
        src = self.ops[op.inp]
        if src.kind != "resample" or src.win is None:
            return
        if src.name != op.name + ".im2col":
            if op.g > 1 and not src.win.pool:
                self.fail(line, f"gemm {op.name} g={op.g} reads the im2col {src.name}: a grouped "
                                f"convolution's im2col is named after its gemm, {op.name}.im2col, "
                                f"so that it orders its columns group by group {HOWTO}")
            return
        if src.win.pool:
            self.fail(line, f"gemm {op.name} reads {src.name}, a pooling: a convolution's im2col "
                            f"has no pool= {HOWTO}")
        if src.win.c % op.g:
            self.fail(line, f"gemm {op.name} g={op.g}: its im2col {src.name} has c={src.win.c} "
                            f"channels, which g groups do not split evenly; give g a divisor of c "
                            f"{HOWTO}")
        self.ops[op.inp] = src._replace(win=src.win._replace(groups=op.g))
        oh, ow, cols = window_out(src.win)
        if op.m != oh * ow or op.k != cols:
            self.fail(line, f"gemm {op.name}: m={op.m} k={op.k}, but its im2col gives {oh * ow} "
                            f"output pixels (m) of {cols} columns (k = kh kw c) {HOWTO}")

    def needs(self, line, kind, k, letters):
        for key in letters:
            if not k[key]:
                self.fail(line, f"a {kind} op needs {key}= {HOWTO}")

    def numel(self, keys, key):
        return self.tensors[keys[key]].numel if key in keys else None

    def sizes(self, line, kind, keys, k, have):
        """(elements it takes, elements it gives) per sample."""
        if kind == "gemm":
            return self.gemm_sizes(line, keys, k)
        if kind == "resample":
            self.needs(line, kind, k, "n")
            return have, k["n"]
        if kind == "norm":
            self.needs(line, kind, k, "c")
            if have % k["c"]:
                self.fail(line, f"norm c={k['c']}: its input's {have} elements are not rows "
                                f"of c {HOWTO}")
            self.tensor_size(line, keys, "weight", k["c"])
            self.tensor_size(line, keys, "bias", k["c"])
            return have, have
        if kind == "act" and "fn" not in keys:
            self.fail(line, f"an act op needs fn= {HOWTO}")
        if kind == "add":
            if "from" not in keys:
                self.fail(line, f"an add op needs from=OP {HOWTO}")
            return self.out_of(keys["from"]), have
        if kind == "cat":
            if ("from" in keys) == ("weight" in keys):
                self.fail(line, f"a cat op needs from=OP or weight=T, one of them {HOWTO}")
            tail = self.numel(keys, "weight") or self.out_of(keys.get("from"))
            p = k["pixels"] or 1
            if p > 1 and "weight" in keys:
                self.fail(line, f"cat pixels= is for a cat with from=OP, not weight=T {HOWTO}")
            if have % p or tail % p:
                where = "the input" if keys["from"] == INPUT else self.ops[keys["from"]].name
                self.fail(line, f"cat pixels={p}: its input's {have} elements and {where}'s "
                                f"{tail} are not both whole pixels; give pixels= their pixels "
                                f"(H·W) {HOWTO}")
            return have, have + tail
        if kind == "mul":
            if "from" not in keys:
                self.fail(line, f"a mul op needs from=OP {HOWTO}")
            ns = self.out_of(keys["from"])
            if have % ns:
                where = "the input" if keys["from"] == INPUT else self.ops[keys["from"]].name
                self.fail(line, f"mul: {where}'s {ns} elements per sample do not divide its "
                                f"input's {have} {HOWTO}")
            p = k["pixels"] or 1
            if p > 1 and p * ns != have:
                where = "the input" if keys["from"] == INPUT else self.ops[keys["from"]].name
                self.fail(line, f"mul pixels={p}: its input's {have} elements are not {p} pixels "
                                f"of the {ns} channels {where} scales; give pixels= the input's "
                                f"pixels (H·W) {HOWTO}")
            return have, have
        if kind == "attn":
            for key in ("heads", "t", "d"):
                self.needs(line, kind, k, [key])
            return 3 * k["t"] * k["heads"] * k["d"], k["t"] * k["heads"] * k["d"]
        if kind == "embedding":
            self.needs(line, kind, k, "m")
            if "weight" not in keys or len(self.tensors[keys["weight"]].dims) != 2:
                self.fail(line, f"an embedding op needs weight=T of two dimensions {HOWTO}")
            n = k["m"] * self.tensors[keys["weight"]].dims[1]
            return n, n
        return have, have

    def gemm_sizes(self, line, keys, k):
        self.needs(line, "gemm", k, "mkn")
        b = k["b"] or 1
        if "weight" not in keys:
            if k["g"] > 1:
                self.fail(line, f"g= is for a gemm with weight {HOWTO}")
            if "bias" in keys:
                self.fail(line, f"a gemm without weight takes no bias {HOWTO}")
            return b * (k["m"] * k["k"] + k["k"] * k["n"]), b * k["m"] * k["n"]
        if b > 1:
            self.fail(line, f"b= is for a gemm without weight {HOWTO}")
        g = k["g"] or 1
        if k["k"] % g or k["n"] % g:
            self.fail(line, f"gemm g={g}: k={k['k']} and n={k['n']} must both be multiples of g "
                            f"{HOWTO}")
        self.tensor_size(line, keys, "weight", k["n"] * k["k"] // g)
        self.tensor_size(line, keys, "bias", k["n"])
        return k["m"] * k["k"], k["m"] * k["n"]

    def tensor_size(self, line, keys, key, want):
        got = self.numel(keys, key)
        if got is not None and got != want:
            self.fail(line, f"{key} {self.tensors[keys[key]].name} has {got} elements, the "
                            f"op's keys need {want} {HOWTO}")

    def whole(self, last_line):
        """What the file promises as a whole; the Graph."""
        if not self.format_line:
            self.fail(1, f"empty: not a model file {HOWTO}")
        if set(self.header) != {"name", "input", "classes"} or not self.ops or not self.tensors:
            self.fail(last_line, f"a model file needs name, input, classes, tensors and ops "
                                 f"{HOWTO}")
        n, seen = len(self.tensors), set()
        for t, ts in enumerate(self.tensors):
            if t not in self.first_op:
                self.fail(ts.line, f"tensor {ts.name}: no op names it {HOWTO}")
            if ts.ready >= n or ts.ready in seen:
                self.fail(ts.line, f"tensor {ts.name}: ready={ts.ready}, but the ready values "
                                   f"must be 0 to {n - 1}, once each {HOWTO}")
            seen.add(ts.ready)
        classes = self.header["classes"][0]
        if self.ops[-1].out_elems % classes:
            self.fail(self.ops[-1].line, f"the last op's output ({self.ops[-1].out_elems} "
                                         f"elements per sample) is not rows of classes "
                                         f"{classes} {HOWTO}")
        return Graph(self.path, self.header["name"][0], self.header["input"][0], classes,
                     self.tensors, self.ops)
