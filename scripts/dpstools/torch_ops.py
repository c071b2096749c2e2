"""PyTorch's own per-op breakdown of one step: torch.profiler's events as ops.csv's rows.

A step run under torch.profiler (CPU activities on the CPU, CUDA's too on
GPUs) gives each ATen op, each autograd node of backward and each
record_function; op_rows groups them by dpscale's op kinds (model/graph.c's
gemm .. cat, and loss, optimizer) and directions, as src/model/op_trace.c
groups its ops: an event's kind is that of its outermost ancestor with a
kind (aten::linear's addmm and transpose are gemm; the model file's module
marks each op as dpscale::KIND, torch_train marks the loss dpscale::loss and
the load dpscale::load); backward's nodes (autograd::engine::evaluate_function:
NODE) take the kind of the forward op of the same sequence number, else
their own name's; the optimizer's step and zero_grad (Optimizer.step#,
Optimizer.zero_grad#, PyTorch's record_functions) are optimizer update.
The loss's backward counts as its forward, as dpscale's loss op computes
its gradient with its value. Ops of no kind (AccumulateGrad, stray
fills) are "other"; the load and the collectives are left out, as
dpscale's ops.csv leaves its copies and collectives out.

ms: the events' self time, on the CPU the host's (self_cpu_time_total),
on GPUs the kernels each event launched (self_cuda_time_total), a negative
one counted as 0 (on a busy machine the profiler can give an op's children
more time than the op: its self time, their difference, is then below 0,
which is no time of its own); FLOP:
the profiler's count (with_flops: mm, addmm, bmm, conv2d) of the gemm
kind, a backward gemm without its own twice its forward's; bytes: the
kind-defining ops' inputs by their recorded shapes, 4 bytes an element
(the profiler records no dtypes: an upper bound in bf16 or fp16).
"""
import csv
import os
import re
import tempfile

from dpstools.results import COLUMNS

FILE = "torch_ops.csv"  # in the torch_reference.py folder, ops.csv's columns
MARK = "dpscale::"  # record_function names that give their events' kind
LEFT_OUT = ("load", "collective")
BACKWARD = "autograd::engine::evaluate_function: "
OPTIMIZER = ("Optimizer.step#", "Optimizer.zero_grad#")
COLLECTIVE = re.compile(r"^(c10d::|gloo:|nccl:|ProcessGroup|record_param_comms)")
# ATen op names (aten:: and a leading _ or native_ / cudnn_ / mkldnn_ dropped, a
# trailing _ of an in-place op too) to kinds, first match wins.
RULES = [
    ("loss", r"(cross_entropy\w*|nll_loss\w*|log_softmax|mse_loss|binary_cross_entropy\w*)"),
    ("gemm", r"(addmm|mm|bmm|baddbmm|addbmm|matmul|linear|einsum|"
             r"(\w*_)?conv(olution)?(\w*)|conv_depthwise\w*|thnn_conv\w*)"),
    ("attention", r"(scaled_dot_product\w*|\w*flash_attention\w*|\w*efficient_attention\w*)"),
    ("norm", r"(layer_norm|batch_norm|group_norm|instance_norm|rms_norm|batch_norm_impl_index)"),
    ("act", r"(relu|relu6|gelu|softmax|tanh|sigmoid|silu|hardtanh|hardswish|hardsigmoid|mish|"
            r"leaky_relu|elu|threshold)"),
    ("embedding", r"(embedding|embedding_bag|embedding_dense)"),
    ("add", r"(add|sub|rsub)"),
    ("mul", r"(mul|div)"),
    ("cat", r"(cat|stack)"),
    ("resample", r"(\w*pool\w*|upsample\w*|im2col|col2im|clone|contiguous|copy|"
                 r"index_select|gather|repeat|repeat_interleave|pad|constant_pad_nd)"),
    ("cast", r"(to|to_copy)"),
]
RULES = [(kind, re.compile(f"^{pattern}$")) for kind, pattern in RULES]


def aten_kind(name):
    """The kind of an op or autograd node by its name, None for none:
    aten::native_layer_norm -> norm, AddmmBackward0 -> gemm."""
    n = re.sub(r"Backward\d*$", "", name.split("::")[-1])
    n = re.sub(r"(?<!^)(?=[A-Z])", "_", n).lower() if n[:1].isupper() else n
    n = re.sub(r"^_+|_+$", "", n)
    n = re.sub(r"^(native|cudnn|mkldnn|miopen)_", "", n)
    n = re.sub(r"_(backward|forward|out|data|input|weight)(_\w+)?$", "", n)
    for kind, pattern in RULES:
        if pattern.match(n):
            return kind
    return None


def own_kind(ev):
    """(kind, direction) that this event alone says, or None: its mark,
    the optimizer's record_functions, a collective, an ATen op's name."""
    name = ev.name
    if name.startswith(MARK):
        return name[len(MARK):], None
    if name.startswith(OPTIMIZER):
        return "optimizer", "update"
    if COLLECTIVE.match(name):
        return "collective", None
    if name.startswith("aten::"):
        kind = aten_kind(name)
        return (kind, None) if kind else None
    return None


def ancestors(ev):
    """The event and its parents, outermost last."""
    out = []
    while ev is not None and len(out) < 10_000:
        out.append(ev)
        ev = ev.cpu_parent
    return out


class Grouping:
    """Each event's (kind, direction, the event that decides them)."""

    def __init__(self, events):
        self.fwd_kind = {}  # (thread, sequence number) -> forward kind
        self.placed = {}
        # forward first, in the order the ops began: backward's nodes look their kinds up, and
        # of the ops that saw one sequence number the last made the node (an op without
        # autograd, a buffer's add_, sees the number its next op takes)
        for ev in sorted(events, key=lambda e: e.time_range.start):
            chain = ancestors(ev)
            if not any(a.name.startswith(BACKWARD) for a in chain):
                self.placed[id(ev)] = self.forward(chain)
        for ev in events:
            if id(ev) not in self.placed:
                self.placed[id(ev)] = self.backward(ancestors(ev))

    def forward(self, chain):
        kind = direction = head = None
        for a in chain:  # the outermost with a kind wins
            own = own_kind(a)
            if own:
                kind, head = own[0], a
                direction = own[1] or "forward"
        if head is None:
            return "other", "forward", chain[-1]
        if direction == "forward":
            for a in chain[:chain.index(head) + 1]:  # the head and the ops under it
                if a.sequence_nr >= 0:
                    self.fwd_kind[(a.thread, a.sequence_nr)] = kind
        return kind, direction, head

    def backward(self, chain):
        node = next(a for a in reversed(chain) if a.name.startswith(BACKWARD))
        kind = self.fwd_kind.get((node.fwd_thread, node.sequence_nr)) or \
            aten_kind(node.name[len(BACKWARD):]) or "other"
        for a in chain:
            if a is node:
                break
            own = own_kind(a)
            if own and own[0] == "collective":  # DDP's hook runs inside a node
                return "collective", "backward", a
        return kind, "forward" if kind == "loss" else "backward", node


def outermost_aten(ev, head):
    """Whether ev is an ATen op with none above it up to its group's head."""
    if not ev.name.startswith("aten::"):
        return False
    while ev is not head and ev.cpu_parent is not None:
        ev = ev.cpu_parent
        if ev.name.startswith("aten::"):
            return False
    return True


def input_bytes(ev):
    """Bytes of an op's inputs by the shapes the profiler recorded, 4 an element."""
    total = 0
    for shape in ev.input_shapes or []:
        n = 1
        for d in shape:
            n *= d
        total += 4 * n if shape else 0
    return total


def op_rows(events, cuda, step_ms, step, config_id):
    """ops.csv's rows (dicts of its columns) of one profiled step's events
    (FunctionEvents of the host's threads)."""
    g = Grouping(events)
    acc = {}  # (kind, direction) -> [calls, us, flop, bytes]
    heads = set()
    fwd_flop = {}  # (thread, sequence number) -> the forward op's FLOP
    for ev in events:
        if ev.sequence_nr >= 0 and ev.flops and g.placed[id(ev)][1] == "forward":
            k = (ev.thread, ev.sequence_nr)
            fwd_flop[k] = fwd_flop.get(k, 0) + ev.flops
    for ev in events:
        kind, direction, head = g.placed[id(ev)]
        if kind in LEFT_OUT:
            continue
        a = acc.setdefault((kind, direction), [0, 0.0, 0.0, 0.0])
        if id(head) not in heads:
            heads.add(id(head))
            a[0] += 1
            if kind == "gemm" and direction == "backward" and not subtree_flops(head):
                a[2] += 2 * fwd_flop.get((head.fwd_thread, head.sequence_nr), 0)
        if outermost_aten(ev, head):
            a[3] += input_bytes(ev)
        a[1] += self_us(ev, cuda)
        if kind == "gemm":
            a[2] += ev.flops or 0
    rows = []
    for (kind, direction), (calls, us, flop, nbytes) in sorted(acc.items()):
        ms = us / 1e3
        rows.append({"config_id": config_id, "kind": kind, "direction": direction,
                     "calls": calls, "ms": f"{ms:.6f}", "flop": f"{flop:.0f}",
                     "bytes": f"{nbytes:.0f}",
                     "tflops": f"{flop / ms / 1e9:.6f}" if flop and ms > 0 else "",
                     "gbps": f"{nbytes / ms / 1e6:.6f}" if nbytes and ms > 0 else "",
                     "step": step, "step_ms": f"{step_ms:.6f}"})
    return rows


def self_us(ev, cuda):
    """An event's self time in µs, 0 where the profiler gives a negative one."""
    us = ev.self_cuda_time_total if cuda else ev.self_cpu_time_total
    return us if us > 0 else 0.0


def subtree_flops(ev):
    """The profiler's FLOP of an event and everything under it."""
    stack, total = [ev], 0
    while stack:
        e = stack.pop()
        total += e.flops or 0
        stack.extend(e.cpu_children)
    return total


def profile(torch, cuda):
    """torch.profiler's context for one step: CPU activities, and CUDA's on GPUs."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=acts, record_shapes=True, with_flops=True)


def host_events(prof):
    """The profiler's events of the host's threads (kernels hang under them)."""
    return [e for e in prof.events() if str(e.device_type).endswith("CPU")]


def write(folder, rows):
    """FOLDER/torch_ops.csv with the rows added to those there (each
    configuration's rows replacing its earlier ones), written to a
    temporary file and renamed over it, so that a reader never sees half."""
    path = os.path.join(folder, FILE)
    cols = COLUMNS["ops.csv"]
    mine = {r["config_id"] for r in rows}
    kept = []
    if os.path.exists(path):
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if r.get("config_id") not in mine]
    fd, tmp = tempfile.mkstemp(prefix=".torch_ops.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(cols)
            w.writerows([[r.get(c, "") for c in cols] for r in kept + rows])
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
