"""A model file (docs/model-file.md) from a PyTorch module: its parameter
tensors in model.parameters() order with the order their gradients become
ready, and its forward as dpscale's ops, traced with torch.fx on the CPU.

torch.fx traces the module (torch.nn's modules are leaves, their containers
are not); each node maps to ops: Linear and Conv2d to gemm (a convolution
after a resample to its im2col size, a grouped one a gemm of g groups),
norms to norm, activations to act, Embedding to embedding, the same through
torch.nn.functional on the model's own parameters (F.linear, F.layer_norm,
F.embedding), residual additions to add, a product of two activations
(squeeze-and-excitation) to mul, a product with or a sum with a parameter
(a layer scale, a position embedding) to norm, torch.cat to cat (a class
token by its weight), matmuls of two activations to gemm without weight,
nn.MultiheadAttention (self-attention) and nn.TransformerEncoderLayer to
their GEMMs; views, pools, dropout and stochastic depth are the values of
their input (the identity, as in eval), resampled where a consumer needs
another size. One forward and backward on a batch of
two records the bytes autograd saves per node and the order in which the
parameters' gradients become ready."""
import contextlib
import dis
import inspect
import io
import importlib
import math
import operator
import os
import sys
import traceback

import torch
import torch.fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from dpstools import sdpa

FORMAT = 1
BATCH = 2  # samples traced; per-sample figures are divided by it
ACTS = {nn.ReLU: "relu", nn.GELU: "gelu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid",
        nn.Softmax: "softmax", nn.ReLU6: "relu6", nn.SiLU: "silu", nn.Hardswish: "hardswish",
        nn.Hardsigmoid: "hardsigmoid", nn.Mish: "mish"}
ACT_FUNCS = {torch.relu: "relu", nn.functional.relu: "relu", nn.functional.gelu: "gelu",
             torch.tanh: "tanh", torch.sigmoid: "sigmoid", torch.softmax: "softmax",
             nn.functional.softmax: "softmax", nn.functional.relu6: "relu6",
             nn.functional.silu: "silu", nn.functional.hardswish: "hardswish",
             nn.functional.hardsigmoid: "hardsigmoid", nn.functional.mish: "mish",
             "relu": "relu", "softmax": "softmax", "tanh": "tanh", "sigmoid": "sigmoid"}
NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.LayerNorm, nn.GroupNorm)
POOLS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Flatten, nn.Dropout, nn.Identity)
WINDOWS = (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)  # a windowed resample each
# functions and methods whose output is their first input's values, rearranged, kept
# or scaled: views of it, made a resample only where a consumer needs another size
VIEWS = {torch.flatten, torch.reshape, torch.permute, torch.transpose, torch.squeeze,
         torch.unsqueeze, nn.functional.dropout, operator.getitem, operator.mul,
         operator.truediv, torch.mul, "view", "reshape", "flatten", "permute", "transpose",
         "contiguous", "float", "squeeze", "unsqueeze", "split", "chunk", "masked_fill",
         "mul", "div", "expand", "expand_as", "type_as", "to", nn.functional.adaptive_avg_pool2d,
         nn.functional.adaptive_max_pool2d, nn.functional.avg_pool2d, nn.functional.max_pool2d,
         torch.mean, "mean"}
try:  # torchvision's stochastic depth: the identity, its value in eval (every branch kept)
    from torchvision.ops import stochastic_depth
    VIEWS.add(stochastic_depth)
except ImportError:
    pass
ADDS = {operator.add, operator.iadd, torch.add, "add"}
MULS = {operator.mul, operator.imul, torch.mul, "mul"}
CATS = {torch.cat, torch.concat}
# fused attention: PyTorch's (2.0 on), and dpstools.sdpa's stand-in for it, as attn ops
TORCH_SDPA = getattr(nn.functional, "scaled_dot_product_attention", None)
SDPA = {sdpa.scaled_dot_product_attention} | ({TORCH_SDPA} if TORCH_SDPA else set())
MATMULS = {operator.matmul, torch.matmul, torch.bmm, "matmul", "bmm"}
ACT_OF_ENCODER = {nn.functional.relu: "relu", nn.functional.gelu: "gelu"}


class ExportError(Exception):
    """A module or function the exporter cannot map, named."""


# the modules map_module maps, whole (a leaf of the trace); containers and the
# user's own modules are traced through
MAPPED = (nn.Linear, nn.Conv2d, nn.Embedding, *NORMS, *ACTS, *POOLS, nn.MultiheadAttention,
          nn.TransformerEncoderLayer)


def mapped(m):
    """Whether map_module maps module m (an activation by its exact class)."""
    return type(m) in ACTS or isinstance(m, tuple(c for c in MAPPED if c not in ACTS))


def unmapped(name, m):
    """The refusal of a module the exporter does not map: its qualified name,
    its class, the modules it maps and what the user can do."""
    cls = type(m)
    where = name or "the model itself"
    return ExportError(
        f"{where}: {cls.__name__} is not a module the exporter maps ({cls.__module__}."
        f"{cls.__qualname__}); it maps {', '.join(c.__name__ for c in MAPPED)}, the user's "
        f"own modules built of them, and torch functions on their outputs. Replace {where} "
        f"with modules of those kinds of the same sizes (what dpscale runs is their GEMMs and "
        f"element-wise bytes), or export a submodule without it (a MODULE:FUNCTION returning "
        f"the part before or after it)")


def load(spec):
    """The module a MODULE.FUNCTION or MODULE:FUNCTION spec builds. MODULE
    is imported as `python -m` imports: the current directory first (a
    mymodel.py where the command runs), then PYTHONPATH and the installed
    packages (the one place a spec is resolved: model_export.py's and
    torch_reference.py --module's)."""
    mod, _, fn = spec.rpartition(":") if ":" in spec else spec.rpartition(".")
    if not mod or not fn:
        raise ExportError(f"{spec}: give MODULE.FUNCTION or MODULE:FUNCTION, e.g. "
                          "torchvision.models.resnet50")
    cwd = os.getcwd()
    if sys.path[:1] != [cwd]:
        sys.path.insert(0, cwd)
    try:
        built = getattr(importlib.import_module(mod), fn)()
    except ModuleNotFoundError as e:
        raise ExportError(f"{spec}: {e} (looked in the current directory {cwd}, PYTHONPATH and "
                          "the installed packages)") from None
    except (ImportError, AttributeError) as e:
        raise ExportError(f"{spec}: {e}") from None
    if not isinstance(built, nn.Module):
        raise ExportError(f"{spec}: returned a {type(built).__name__}, not an nn.Module")
    return built


def shape(node):
    meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def numel(node):
    s = shape(node)
    return math.prod(s) // BATCH if s is not None else None


class Ops:
    """The op lines written so far, and for each fx node the op holding its
    values (a view's node holds its op's values in another shape)."""

    def __init__(self, model):
        self.lines = []           # (op name, kind, keys, fx node or None)
        self.size = {}            # op name (or "input") -> elements per sample
        self.value = {}           # fx node -> op name holding its values
        self.const = set()        # fx nodes made from no input: arange, buffers
        self.param_name = {}
        for n, p in model.named_parameters():
            self.param_name.setdefault(p, n)
        self.used = set()
        self.unbatched = set()    # fx nodes without the batch dimension (an embedding of positions)
        self.param_of = {}        # get_attr fx nodes that read a parameter -> the parameter
        self.model = model
        self.last = "input"
        self.input_int = False

    def tensor(self, p, where):
        if p not in self.param_name:
            raise ExportError(f"{where}: uses a tensor that is not one of the model's parameters")
        name = self.param_name[p]
        self.used.add(name)
        return name

    def add(self, kind, name, keys, src, node=None):
        name = self.unique(name)
        if src != self.last:
            keys = {"in": src, **keys}
        self.lines.append((name, kind, keys, node))
        self.size[name] = out_size(kind, keys, self.size[src], self)
        self.last = name
        if node is not None:
            self.value[node] = name
        return name

    def unique(self, name):
        taken = {line[0] for line in self.lines} | {"input"}
        base, i = name, 1
        while name in taken:
            name, i = f"{base}.{i}", i + 1
        return name

    def resample(self, name, src, n):
        """src's values as n elements per sample."""
        return src if self.size[src] == n else self.add("resample", name, {"n": n}, src)

    def numel(self, node):
        """node's elements per sample."""
        s = shape(node)
        if s is None:
            return None
        return math.prod(s) if node in self.unbatched else math.prod(s) // BATCH

    def source(self, node, name):
        """The op whose output is node's values at node's size."""
        src = self.value.get(node, "input")
        n = self.numel(node)
        if src == "input" and self.input_int:
            return src
        return self.resample(f"{name}.in", src, n) if n is not None else src

    def inputs(self, node):
        """node's tensor inputs that come from the model's input, also those in
        lists and tuples (torch.cat's)."""
        args = []
        torch.fx.node.map_arg((node.args, node.kwargs), args.append)
        return [a for a in args if a in self.value and a not in self.const]


def out_size(kind, keys, have, ops):
    if kind == "gemm":
        return keys.get("b", 1) * keys["m"] * keys["n"]
    if kind == "resample":
        return keys["n"]
    if kind == "attn":
        return keys["t"] * keys["heads"] * keys["d"]
    if kind == "cat":
        return have + (ops.size[keys["from"]] if "from" in keys else
                       dict(ops.model.named_parameters())[keys["weight"]].numel())
    return have


def export(model, input_shape, integer_input=False):
    """The ops of model's forward on a batch of input_shape samples."""
    model.train()
    tracer = Tracer()
    if tracer.is_leaf_module(model, "") and not mapped(model):
        raise unmapped("", model)
    try:
        traced = tracer.trace(model)
    except IndexError as e:
        raise untraced(model, e) from None
    except (torch.fx.proxy.TraceError, TypeError) as e:
        raise ExportError(f"{type(model).__name__}: torch.fx cannot trace its forward ({e}); "
                          "a forward that branches on a tensor's values or unpacks a tensor "
                          "cannot be exported") from None
    gm = torch.fx.GraphModule(model, traced)
    example = (torch.randint(0, 2, (BATCH, *input_shape)) if integer_input
               else torch.randn(BATCH, *input_shape))
    printed = io.StringIO()  # ShapeProp prints the failing node's traceback itself
    try:
        with contextlib.redirect_stderr(printed):
            result = ShapeProp(gm).propagate(example)
    except RuntimeError as e:
        last = [line for line in printed.getvalue().splitlines() if "Error" in line]
        cause = last[-1] if last else str(e).splitlines()[0]
        raise ExportError(f"{type(model).__name__}: its forward fails on a batch of "
                          f"{'x'.join(map(str, input_shape))} {'token ids' if integer_input else 'inputs'} "
                          f"({cause}); give --input the shape of one sample it takes") from None
    if not isinstance(result, torch.Tensor):
        raise ExportError(f"{type(model).__name__}: its forward returns {type(result).__name__}, "
                          "not one tensor of logits (a model's auxiliary outputs in training); "
                          "export it built without them (googlenet and inception_v3: "
                          "aux_logits=False, init_weights=True), or wrap it in a module that "
                          "returns the logits alone")
    modules = dict(gm.named_modules())
    ops = Ops(model)
    ops.input_int = integer_input
    for node in gm.graph.nodes:
        map_node(ops, node, modules)
    return ops, gm, example


def untraced(model, e):
    """The refusal of a forward whose trace raised IndexError: torch.fx's
    Proxy.__iter__ (an unpacked output, `y, _ = ...`) reads the bytecode of
    a newer Python than the PyTorch knows, or the forward's own error."""
    where = traceback.extract_tb(e.__traceback__)[-1]
    if where.filename.endswith(os.path.join("fx", "proxy.py")) and where.name == "__iter__":
        return ExportError(f"{type(model).__name__}: torch.fx cannot trace its forward: it unpacks "
                           "a module's or function's output (y, _ = ...), which this PyTorch's "
                           "torch.fx cannot follow on this Python; index it instead (y = ...[0])")
    return ExportError(f"{type(model).__name__}: its forward raised IndexError ({e}) at "
                       f"{where.filename}:{where.lineno} while torch.fx traced it")


class Tracer(torch.fx.Tracer):
    """torch.nn's modules are leaves, as fx's default, but not its containers;
    each node notes the module it was made in (meta "scope"), which names
    the ops of functions ("h.0.attn.matmul")."""

    def __init__(self):
        super().__init__()
        self.scope = []

    def call_module(self, m, forward, args, kwargs):
        path = self.path_of_module(m)
        if self.is_leaf_module(m, path) and not mapped(m):
            raise unmapped(path, m)  # before its output is used: an LSTM's tuple cannot be traced
        self.scope.append((path, type(m).__name__))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self.scope.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["scope"], node.meta["scope_class"] = self.scope[-1] if self.scope else ("", "")
        return node

    def trace(self, root, concrete_args=None):
        iterate = torch.fx.proxy.Proxy.__iter__
        torch.fx.proxy.Proxy.__iter__ = unpack_proxy
        try:
            return super().trace(root, concrete_args)
        finally:
            torch.fx.proxy.Proxy.__iter__ = iterate

    def is_leaf_module(self, m, qualname):
        if isinstance(m, (nn.TransformerEncoder, nn.Sequential, nn.ModuleList)):
            return False
        return super().is_leaf_module(m, qualname)


def unpack_proxy(proxy):
    """`n, c, h, w = x.shape` on a proxy: its items, as fx's Proxy.__iter__
    gives them, the unpacking instruction found by its offset (fx's own
    lookup, by index, misses it in Python 3.11's bytecode, which holds caches)."""
    frame = inspect.currentframe().f_back
    for inst in dis.get_instructions(frame.f_code):
        if inst.offset == frame.f_lasti and inst.opname == "UNPACK_SEQUENCE":
            return (proxy[i] for i in range(inst.argval))
    return proxy.tracer.iter(proxy)


def attr_of(model, target):
    """What a get_attr node's dotted target names in model."""
    held = model
    for part in target.split("."):
        held = getattr(held, part)
    return held


def map_node(ops, node, modules):
    if node.op == "placeholder":
        ops.value[node] = "input"
        if not ops.input_int:
            ops.size["input"] = numel(node)
    elif node.op == "get_attr":
        ops.value[node] = "input"
        ops.const.add(node)
        held = attr_of(ops.model, node.target)
        if isinstance(held, nn.Parameter):
            ops.param_of[node] = held
    elif node.op == "call_module":
        map_module(ops, node, modules[node.target])
    elif node.op in ("call_function", "call_method"):
        map_function(ops, node)


def src_of(ops, node, name):
    ins = ops.inputs(node)
    return ops.source(ins[0], name) if ins else "input"


def map_module(ops, node, m):
    name = node.target
    if isinstance(m, nn.Conv2d):
        map_conv(ops, node, m, name)
    elif isinstance(m, nn.Linear):
        linear(ops, node, name, src_of(ops, node, name), m.weight, m.bias, numel(node))
    elif isinstance(m, NORMS):
        c = (m.num_channels if isinstance(m, nn.GroupNorm) else
             m.num_features if hasattr(m, "num_features") else math.prod(m.normalized_shape))
        norm(ops, node, name, src_of(ops, node, name), c, m.weight, m.bias)
    elif type(m) in ACTS:
        ops.add("act", name, {"fn": ACTS[type(m)]}, src_of(ops, node, name), node)
    elif isinstance(m, nn.Embedding):
        map_embedding(ops, node, m, name)
    elif isinstance(m, WINDOWS) and ops.inputs(node):
        map_pool(ops, node, m, name)
    elif isinstance(m, POOLS):
        ins = ops.inputs(node)
        ops.value[node] = ops.value[ins[0]] if ins else "input"
    elif isinstance(m, nn.TransformerEncoderLayer):
        map_encoder_layer(ops, node, m, name)
    elif isinstance(m, nn.MultiheadAttention):
        map_mha(ops, node, m, name)
    else:
        raise unmapped(name, m)


def linear(ops, node, name, src, weight, bias, out):
    rows = out // weight.shape[0]
    src = ops.resample(f"{name}.view", src, rows * weight.shape[1])
    keys = {"m": rows, "k": weight.shape[1], "n": weight.shape[0], "weight": ops.tensor(weight, name)}
    if bias is not None:
        keys["bias"] = ops.tensor(bias, name)
    return ops.add("gemm", name, keys, src, node)


def norm(ops, node, name, src, c, weight, bias):
    keys = {"c": c}
    if weight is not None:
        keys["weight"] = ops.tensor(weight, name)
    if bias is not None:
        keys["bias"] = ops.tensor(bias, name)
    return ops.add("norm", name, keys, src, node)


def pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def window(ops, name, src_node, kernel, stride, pad, dilation, pool=None):
    """A resample's window keys over src_node's values, read as h x w pixels
    of c channels (docs/model-file.md), with its output's size n."""
    s = shape(src_node)
    if s is None or len(s) != 4:
        raise ExportError(f"{name}: its input is not a batch of c x h x w images; "
                          "export the model with a 2-d input of --input CxHxW")
    c, h, w = s[1:]
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(pair, (kernel, stride, pad, dilation))
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    keys = {"n": oh * ow * (c if pool else kh * kw * c), "window": f"{c}x{h}x{w}",
            "kernel": f"{kh}x{kw}", "stride": f"{sh}x{sw}", "pad": f"{ph}x{pw}",
            "dilation": f"{dh}x{dw}"}
    if pool:
        keys["pool"] = pool
    return keys


def map_conv(ops, node, m, name):
    """A convolution as its im2col (a windowed resample, 1x1 ones too) and
    GEMM; a grouped (or depthwise) one as a gemm of g groups, each its k/g
    im2col columns by its n/g filters."""
    if isinstance(m.padding, str) or m.padding_mode != "zeros":
        raise ExportError(f"{name}: Conv2d with padding={m.padding!r}, padding_mode="
                          f"{m.padding_mode!r}: dpscale's im2col pads with zeros by a number of "
                          "pixels; build it with padding=(ph, pw) and padding_mode='zeros'")
    rows = math.prod(shape(node)[2:])
    k = m.in_channels * math.prod(m.kernel_size)
    x = ops.inputs(node)[0]
    keys = window(ops, name, x, m.kernel_size, m.stride, m.padding, m.dilation)
    src = ops.add("resample", f"{name}.im2col", keys, ops.source(x, name))
    keys = {"m": rows, "k": k, "n": m.out_channels}
    if m.groups > 1:
        keys["g"] = m.groups
    keys["weight"] = ops.tensor(m.weight, name)
    if m.bias is not None:
        keys["bias"] = ops.tensor(m.bias, name)
    ops.add("gemm", name, keys, src, node)


def stand_in_pool(ops, node, name, x, why):
    """A pooling no window= describes, as a resample without a window (its
    output's size, y[i] = x[i mod n_in]: the cost of a reshaping, not the
    pooling's values), said on stderr."""
    print(f"model_export: {name}: {why}; written as a resample without a window, which has "
          "the pooling's sizes but not its values (docs/model-file.md)", file=sys.stderr)
    ops.add("resample", name, {"n": ops.numel(node)}, ops.source(x, name), node)


def map_pool(ops, node, m, name):
    """MaxPool2d, AvgPool2d (count_include_pad, floor) and AdaptiveAvgPool2d
    (a whole-input window for 1x1, else one that divides the input) as a
    windowed resample."""
    x = ops.inputs(node)[0]
    if isinstance(m, nn.AdaptiveAvgPool2d):
        h, w = shape(x)[2:]
        oh, ow = (v if v is not None else d for v, d in zip(pair(m.output_size), (h, w)))
        if h % oh or w % ow:
            return stand_in_pool(ops, node, name, x, f"AdaptiveAvgPool2d to {oh}x{ow} from {h}x{w}: "
                                 "its windows overlap unevenly, which no window= gives")
        kernel = stride = (h // oh, w // ow)
        keys = window(ops, name, x, kernel, stride, 0, 1, "avg")
    else:
        if m.ceil_mode or (isinstance(m, nn.AvgPool2d) and (not m.count_include_pad or
                                                            m.divisor_override)):
            return stand_in_pool(ops, node, name, x, f"{type(m).__name__} with ceil_mode=True, "
                                 "count_include_pad=False or a divisor_override: dpscale's "
                                 "windows pool as PyTorch's defaults do")
        if isinstance(m, nn.MaxPool2d) and m.return_indices:
            raise ExportError(f"{name}: MaxPool2d with return_indices=True: its indices are no "
                              "activation a model file carries; build it without")
        dil = m.dilation if isinstance(m, nn.MaxPool2d) else 1
        keys = window(ops, name, x, m.kernel_size, m.stride or m.kernel_size, m.padding, dil,
                      "max" if isinstance(m, nn.MaxPool2d) else "avg")
    ops.add("resample", name, keys, ops.source(x, name), node)


def map_embedding(ops, node, m, name):
    arg = node.args[0]
    if arg in ops.const:
        ops.unbatched.add(node)
    out = ops.numel(node)
    if ops.input_int:
        ops.size.setdefault("input", out)
        if ops.size["input"] != out:
            raise ExportError(f"{name}: its output ({out} elements a sample) is not the size of "
                              f"the first embedding's ({ops.size['input']})")
    src = "input" if ops.input_int else src_of(ops, node, name)
    ops.add("embedding", name, {"m": out // m.embedding_dim, "weight": ops.tensor(m.weight, name)},
            src, node)


def uses_sdpa(a, need_weights):
    """Whether nn.MultiheadAttention a runs scaled_dot_product_attention:
    its own attn_implementation when it says one (reference_models'
    SdpaSelfAttention), else as PyTorch 2's does when no weights are asked
    for (nn.TransformerEncoderLayer's call); PyTorch 1's never does."""
    if hasattr(a, "attn_implementation"):
        return a.attn_implementation == "sdpa"
    return TORCH_SDPA is not None and not need_weights


def attention(ops, node, a, name, x, t, d, need_weights=False):
    """nn.MultiheadAttention's self-attention on x (t tokens of d): in_proj,
    the attention (an attn op where it runs scaled_dot_product_attention,
    else the scores and context matmuls over the heads), out_proj; its last op."""
    if not a._qkv_same_embed_dim or a.in_proj_weight is None:
        raise ExportError(f"{name}: a MultiheadAttention with kdim or vdim of its own is not mapped")
    h = a.num_heads
    hd = d // h
    qkv = linear(ops, node, f"{name}.in_proj", x, a.in_proj_weight, a.in_proj_bias, t * 3 * d)
    if uses_sdpa(a, need_weights):
        y = ops.add("attn", f"{name}.attn", {"heads": h, "t": t, "d": hd, "causal": 0}, qkv)
    else:
        qk = ops.resample(f"{name}.qk", qkv, h * 2 * t * hd)
        s = ops.add("gemm", f"{name}.scores", {"m": t, "k": hd, "n": t, "b": h}, qk)
        p = ops.add("act", f"{name}.softmax", {"fn": "softmax"}, s)
        pv = ops.resample(f"{name}.pv", p, h * (t * t + t * hd))
        y = ops.add("gemm", f"{name}.context", {"m": t, "k": t, "n": hd, "b": h}, pv)
    return linear(ops, None, f"{name}.out_proj", y, a.out_proj.weight, a.out_proj.bias, t * d)


def tokens_width(node, batch_first):
    """(tokens, width) of a [batch, tokens, width] (or [tokens, batch, width]) node."""
    s = shape(node)
    return (s[1], s[2]) if batch_first else (s[0], s[2])


def map_mha(ops, node, m, name):
    """nn.MultiheadAttention called on one tensor as query, key and value."""
    args = [a for a in node.args if isinstance(a, torch.fx.Node)]
    args += [node.kwargs[k] for k in ("query", "key", "value") if k in node.kwargs]
    if len(args) < 3 or not (args[0] is args[1] is args[2]):
        raise ExportError(f"{name}: MultiheadAttention other than self-attention (one tensor as "
                          "query, key and value) is not mapped")
    t, d = tokens_width(args[0], m.batch_first)
    need_weights = node.kwargs.get("need_weights", node.args[4] if len(node.args) > 4 else True)
    out = attention(ops, node, m, name, src_of(ops, node, name), t, d, need_weights)
    ops.value[node] = out


def map_encoder_layer(ops, node, m, name):
    """nn.TransformerEncoderLayer as its GEMMs: the attention, the
    feed-forward pair, the norms and residuals."""
    if m.norm_first:
        raise ExportError(f"{name}: a norm_first TransformerEncoderLayer is not mapped")
    t, d = tokens_width(node, m.self_attn.batch_first)
    x = src_of(ops, node, name)
    y = attention(ops, node, m.self_attn, f"{name}.self_attn", x, t, d)
    y = ops.add("add", f"{name}.add1", {"from": x}, y)
    y = norm(ops, None, f"{name}.norm1", y, d, m.norm1.weight, m.norm1.bias)
    f = linear(ops, None, f"{name}.linear1", y, m.linear1.weight, m.linear1.bias,
               t * m.linear1.out_features)
    act = ACT_OF_ENCODER.get(m.activation, "relu") if callable(m.activation) else m.activation
    f = ops.add("act", f"{name}.activation", {"fn": act}, f)
    f = linear(ops, None, f"{name}.linear2", f, m.linear2.weight, m.linear2.bias, t * d)
    f = ops.add("add", f"{name}.add2", {"from": y}, f)
    norm(ops, node, f"{name}.norm2", f, d, m.norm2.weight, m.norm2.bias)


def op_name(node):
    """A function's op: its fx name inside the module it ran in."""
    scope = node.meta.get("scope", "")
    base = getattr(node.target, "__name__", str(node.target)).strip("_")
    return f"{scope}.{base}" if scope else base


def map_function(ops, node):
    fn = node.target
    name = op_name(node)
    ins = ops.inputs(node)
    first = node.args[0] if node.args else None
    if fn in VIEWS and fn not in MULS and isinstance(first, torch.fx.Node) and first in ops.param_of:
        ops.param_of[node] = ops.param_of[first]  # a view of a parameter (a class token expanded)
        ins = []
    if not ins:  # arange, zeros, a mask from a buffer, a view of a parameter: made from no input
        ops.value[node] = "input"
        ops.const.add(node)
        return
    out = ops.numel(node)
    if out is None:  # size(), shape: no tensor
        ops.value[node] = ops.value[ins[0]]
        return
    ins = [a for a in ins if shape(a) is not None] or ins  # the tensors, not sizes
    if fn in ADDS and len(ins) == 1 and scaling_param(ops, node) is not None:
        p = scaling_param(ops, node)  # a learned position embedding
        norm(ops, node, name, ops.source(ins[0], name), p.numel(), None, p)
    elif fn in CATS:
        map_cat(ops, node, ins, name)
    elif fn in ADDS and len(ins) == 2:
        a = ops.source(ins[0], name)
        bsrc = ops.source(ins[1], f"{name}.other")
        ops.add("add", name, {"from": bsrc}, a, node)
    elif fn in MULS and len(ins) == 2:
        map_mul(ops, node, ins, name)
    elif fn in MULS and scaling_param(ops, node) is not None:
        p = scaling_param(ops, node)
        norm(ops, node, name, ops.source(ins[0], name), p.numel(), p, None)
    elif fn in ADDS or fn in VIEWS:
        ops.value[node] = ops.value[ins[0]]
        if ins[0] in ops.unbatched:
            ops.unbatched.add(node)
    elif fn in FUNCTIONAL_LAYERS:
        FUNCTIONAL_LAYERS[fn](ops, node, name, ops.source(ins[0], name), node_params(ops, node))
    elif fn in MATMULS and len(ins) == 2:
        map_matmul(ops, node, ins, name)
    elif fn in SDPA:
        map_sdpa(ops, node, name)
    elif fn in ACT_FUNCS:
        ops.add("act", name, {"fn": ACT_FUNCS[fn]}, ops.source(ins[0], name), node)
    else:
        where = node.meta.get("scope_class")
        raise ExportError(f"{name}: {getattr(fn, '__name__', fn)} is not a function the exporter "
                          f"maps{f' (called by {where})' if where else ''}; replace what calls it "
                          "with modules and functions the exporter maps, or export the model "
                          "without it (docs/model-file.md#exporting-a-model)")


def map_mul(ops, node, ins, name):
    """A product of two activations (squeeze-and-excitation's x * s, s
    broadcast over a channel's pixels): a mul of the larger by the smaller."""
    x, s = sorted(ins, key=lambda a: -ops.numel(a))
    if ops.numel(s) == 0 or ops.numel(x) % ops.numel(s):
        raise ExportError(f"{name}: a product of {shape(x)} and {shape(s)} whose broadcast is not "
                          "one factor's element over a run of the other's is not mapped")
    keys = {"from": ops.source(s, f"{name}.scale")}
    pixels = mul_pixels(name, shape(x), shape(s))
    if pixels > 1:
        keys["pixels"] = pixels
    ops.add("mul", name, keys, ops.source(x, name), node)


def mul_pixels(name, xs, ss):
    """A mul's pixels=: an image's channel scales (x N x C x H x W, s N x C x 1 x
    1), which dpscale holds pixel by pixel, scale each pixel's channels:
    H·W; 1 (each scale over its run) for the others."""
    if xs is None or ss is None or len(xs) != 4 or math.prod(ss) == math.prod(xs):
        return 1
    if len(ss) == 4 and ss[1] == xs[1] and ss[2:] == (1, 1):
        return xs[2] * xs[3]
    if len(ss) == 4 and ss[1] == 1 and ss[2:] == xs[2:]:
        return 1  # a scale a pixel: each over its pixel's channels
    raise ExportError(f"{name}: a product of an image {xs} and {ss}: only a channel's scale "
                      "(N x C x 1 x 1) or a pixel's (N x 1 x H x W) is mapped")


def map_cat(ops, node, ins, name):
    """torch.cat of activations and parameters (a class token) along a
    dimension after the batch's: cat ops appending each to the first
    activation's values, a sample's after its own."""
    parts = node.args[0] if node.args else node.kwargs["tensors"]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim == 0 or dim == -len(shape(node)):
        raise ExportError(f"{name}: a cat along the batch dimension is not mapped")
    pixels = cat_pixels(name, shape(node), dim)
    first = next(a for a in parts if a in ins)
    src = ops.source(first, f"{name}.in")
    rest = [a for a in parts if a is not first]
    for i, a in enumerate(rest):
        last = i == len(rest) - 1
        if a in ins:
            keys = {"from": ops.source(a, f"{name}.{i}.in")}
            if pixels > 1:
                keys["pixels"] = pixels
        elif a in ops.param_of:
            keys = {"weight": ops.tensor(ops.param_of[a], name)}
        else:
            raise ExportError(f"{name}: a cat of a tensor made neither from the input nor from a "
                              "parameter is not mapped")
        src = ops.add("cat", name if last else f"{name}.{i}", keys, src, node if last else None)
    if not rest:
        ops.value[node] = src


def cat_pixels(name, out, dim):
    """A cat's pixels=: images (N x C x H x W, held pixel by pixel) joined
    along their channels join each pixel's: H·W; along their rows (dim 2) a
    sample's after another's (1); along their columns is not mapped."""
    if out is None or len(out) != 4:
        return 1
    dim %= 4
    if dim == 3:
        raise ExportError(f"{name}: a cat of images along their columns (dim 3) is not mapped: "
                          "dpscale holds an image pixel by pixel; join along the channels")
    return out[2] * out[3] if dim == 1 else 1


def scaling_param(ops, node):
    """The model's parameter a product scales an activation by (ConvNeXt's
    layer scale), or None."""
    found = [ops.param_of[a] for a in node.args if isinstance(a, torch.fx.Node) and a in ops.param_of]
    return found[0] if found else None


def node_params(ops, node):
    """The parameters a function's arguments read (get_attr nodes), by argument name."""
    names = {F.linear: ("input", "weight", "bias"), F.layer_norm: ("input", "normalized_shape", "weight",
             "bias"), F.embedding: ("input", "weight")}[node.target]
    got = dict(zip(names, node.args))
    got.update(node.kwargs)
    return {k: ops.param_of.get(v) for k, v in got.items() if isinstance(v, torch.fx.Node)}


def functional_linear(ops, node, name, src, p):
    if p.get("weight") is None:
        raise ExportError(f"{name}: F.linear of a weight that is not a parameter of the model")
    linear(ops, node, name, src, p["weight"], p.get("bias"), ops.numel(node))


def functional_layer_norm(ops, node, name, src, p):
    c = shape(node)[-1]
    norm(ops, node, name, src, c, p.get("weight"), p.get("bias"))


def functional_embedding(ops, node, name, src, p):
    w = p.get("weight")
    if w is None:
        raise ExportError(f"{name}: F.embedding of a table that is not a parameter of the model")
    out = ops.numel(node)
    if ops.input_int:
        ops.size.setdefault("input", out)
    ops.add("embedding", name, {"m": out // w.shape[1], "weight": ops.tensor(w, name)},
            "input" if ops.input_int else src, node)


F = nn.functional
FUNCTIONAL_LAYERS = {F.linear: functional_linear, F.layer_norm: functional_layer_norm,
                     F.embedding: functional_embedding}


def map_matmul(ops, node, ins, name):
    """A matmul of two activations: a gemm without weight over the first's
    values, resampled to hold both operands."""
    a, b = shape(ins[0]), shape(ins[1])
    batches = math.prod(shape(node)[:-2]) // BATCH
    m, k, n = a[-2], a[-1], b[-1]
    src = ops.resample(f"{name}.in", ops.value[ins[0]], batches * (m * k + k * n))
    ops.add("gemm", name, {"m": m, "k": k, "n": n, "b": batches}, src, node)


def map_sdpa(ops, node, name):
    """scaled_dot_product_attention(q, k, v) without a mask: an attn op
    when q, k and v are the heads of one op's rows of [q | k | v] (a
    split of GPT-2's c_attn or of an in_proj on its last dimension), else
    (keys of another length or sources of their own) the scores gemm
    q·kᵀ over the heads, softmax and the context gemm with v."""
    args = dict(zip(("query", "key", "value", "attn_mask", "dropout_p", "is_causal"), node.args))
    args.update(node.kwargs)
    if args.get("attn_mask") is not None:
        raise ExportError(f"{name}: scaled_dot_product_attention with an attn_mask is not mapped; "
                          "use is_causal or no mask")
    q, k, v = (shape(args[a]) for a in ("query", "key", "value"))
    batches = math.prod(q[:-2]) // BATCH
    t, e, s, ev = q[-2], q[-1], k[-2], v[-1]
    src = {ops.value.get(args[a]) for a in ("query", "key", "value")}
    if q == k == v and len(src) == 1 and ops.size.get(next(iter(src))) == 3 * batches * t * e:
        keys = {"heads": batches, "t": t, "d": e, "causal": int(bool(args.get("is_causal")))}
        ops.add("attn", name, keys, next(iter(src)), node)
        return
    if args.get("is_causal"):
        raise ExportError(f"{name}: a causal scaled_dot_product_attention whose q, k and v are "
                          "not the heads of one projection's [q | k | v] rows is not mapped")
    qk = ops.resample(f"{name}.qk", ops.source(args["query"], f"{name}.q"), batches * (t * e + e * s))
    scores = ops.add("gemm", f"{name}.scores", {"m": t, "k": e, "n": s, "b": batches}, qk)
    p = ops.add("act", f"{name}.softmax", {"fn": "softmax"}, scores)
    pv = ops.resample(f"{name}.pv", p, batches * (t * s + s * ev))
    ops.add("gemm", f"{name}.context", {"m": t, "k": s, "n": ev, "b": batches}, pv, node)


def ready_order(model, gm, example):
    """Parameter names in the order the first backward makes their gradients ready."""
    order = []
    names = {}
    for n, p in model.named_parameters():
        names.setdefault(p, n)
    hooks = [p.register_hook(lambda g, n=n: order.append(n)) for p, n in names.items()]
    gm(example).float().sum().backward()
    for h in hooks:
        h.remove()
    model.zero_grad(set_to_none=True)
    return order


def saved_bytes(model, gm, example):
    """Per fx node, the activation bytes autograd keeps from it, one sample."""
    params = {p.data_ptr() for p in model.parameters()}
    seen, by_node = set(), {}

    class Counting(torch.fx.Interpreter):
        def run_node(self, n):
            def pack(t):
                key = (t.data_ptr(), t.numel(), t.dtype)
                if t.data_ptr() not in params and key not in seen:
                    seen.add(key)
                    by_node[n] = by_node.get(n, 0) + t.numel() * t.element_size()
                return t
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                return super().run_node(n)

    Counting(gm).run(example)
    return {node: b // BATCH for node, b in by_node.items()}


def model_file(name, source, model, input_shape, integer_input=False):
    """The model file's lines."""
    ops, gm, example = export(model, input_shape, integer_input)
    unused = [n for n, _ in model.named_parameters() if n not in ops.used]
    if unused:
        raise ExportError(f"{unused[0]}: a parameter no mapped op uses")
    place = {n: i for i, n in enumerate(ready_order(model, gm, example))}
    saved = saved_bytes(model, gm, example)
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    lines = [f"# {name}, exported by scripts/model_export.py from {source}, input "
             f"{'x'.join(map(str, input_shape))}{' (token ids)' if integer_input else ''}",
             f"dpscale-model {FORMAT}", f"name {name}", f"input {ops.size['input']}",
             f"classes {shape(out)[-1]}"]
    for n, p in model.named_parameters():
        lines.append(f"tensor {n} {'x'.join(map(str, p.shape)) or '1'} ready={place[n]}")
    first_of = {}
    for op, kind, keys, node in ops.lines:
        if node is not None and node not in first_of:
            first_of[node] = op
    for op, kind, keys, node in ops.lines:
        words = " ".join(f"{k}={v}" for k, v in keys.items())
        if node is not None and first_of[node] == op and saved.get(node):
            words += f" saved={saved[node]}"
        lines.append(f"op {kind} {op} {words}".rstrip())
    return lines
