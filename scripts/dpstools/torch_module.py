"""The user's own nn.Module as the PyTorch reference trains it (torch_reference.py --module).

Module is the trainer's third kind of model, beside torch_model.Preset
(dpscale's MLP) and torch_graph.Graph (a model file built with dpscale's
maths): the module a MODULE:FUNCTION or MODULE.FUNCTION spec returns, the
spec model_export.py takes (resolved by dpstools.model_export.load), run
as PyTorch runs it, its own ops, under nn.DataParallel, DDP or FSDP. Its
logits [samples, ..., classes] are read as rows of classes (a thin wrapper,
Logits, reshapes them; nothing else stands between the module and the
strategy).

What is dpscale's, so that the runs sit beside dpscale's: the samples (a
sample of shape --input is dpscale's U[-1, 1) inputs from its generator,
the same numbers as `dpscale run --model FILE` feeds the exported file;
token ids, --tokens, are drawn from the same stream over the rows of the
file's first embedding table (or the first nn.Embedding's), which
dpscale's file, reading floats, does not see),
one label a loss row from dpscale's stream, the loss (the mean
cross-entropy), the optimizer and the batch. With the model file exported
from the module (--model FILE): its name (so the config_id is the file's
run's), its rows and classes, checked against the module's output, and
dpscale's initialisation of its tensors copied into the module's parameters
in model.parameters() order, so both start from the same parameters.
Without it: the module's own PyTorch initialisation under torch.manual_seed
(--seed), its name the function's. The forward is not dpscale's (a
BatchNorm normalises, a ReLU is not GELU, a pool averages): the losses
differ from the first step; the step times, phases and memory are what the
comparison is for. numpy at import; PyTorch passed in.
"""
import math

import numpy as np

from dpstools.torch_graph import RNG_INPUT, RNG_LABELS
from dpstools.torch_model import uniform

PROBE_SAMPLES = 2  # samples of the forward that sizes the logits (model_export's BATCH)


class ModuleError(ValueError):
    """A module spec that cannot be trained as given, with what to do."""


def header_input(path):
    """The input shape and --tokens that model_export.py wrote in a model
    file's first line ('..., input 3x224x224' or 'input 16 (token ids)'),
    or (None, False) where the file has no such line."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None, False
    if not first.startswith("#") or " input " not in first:
        return None, False
    words = first.rsplit(" input ", 1)[1].split()
    try:
        shape = tuple(int(x) for x in words[0].split("x"))
    except (ValueError, IndexError):
        return None, False
    return shape, "(token ids)" in first


def parse_shape(text):
    """'3x224x224' as a tuple of positive sizes; ModuleError otherwise."""
    try:
        shape = tuple(int(x) for x in text.split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise ModuleError(f"--input {text}: expected positive sizes joined by x, e.g. 3x224x224")
    return shape


class Module:
    """The spec interface of Preset and Graph (name, rows, params, init,
    module, flat, batch, sample_bytes, fwd_flops, columns) for the module a
    spec builds. graph: the model file exported from it (torch_graph.Graph),
    or None."""

    def __init__(self, torch, spec, shape, tokens, graph=None):
        self.spec, self.shape, self.tokens, self.graph = spec, tuple(shape), tokens, graph
        self.input = math.prod(self.shape)
        built = load(spec)
        self.leaves = sum(1 for m in built.modules()
                          if not list(m.children()) and list(m.parameters(recurse=False)))
        self.params = sum(p.numel() for p in built.parameters())
        self.vocab = embedding_rows(torch, built, graph) if tokens else 0
        if tokens and not self.vocab:
            raise ModuleError(f"--module {spec} --tokens: the module has no nn.Embedding (nor "
                              f"the model file an embedding op) whose rows would size its token "
                              f"ids")
        if graph:
            self.check_tensors(built)
        self.classes, self.rows = self.probe(torch, built)
        self.name = graph.name if graph else spec.replace(":", ".").rsplit(".", 1)[-1]
        if graph:
            self.check_graph()

    def probe(self, torch, built):
        """Classes and loss rows a sample, from one forward on PROBE_SAMPLES."""
        x, _ = self.batch(0, 0, PROBE_SAMPLES, classes=2, rows=1)
        try:
            with torch.no_grad():
                out = built.train()(torch.from_numpy(x))
        except Exception as e:  # the user's forward: whatever it raises, said
            raise ModuleError(f"--module {self.spec}: its forward on {PROBE_SAMPLES} samples of "
                              f"{'token ids ' if self.tokens else ''}"
                              f"{'x'.join(map(str, self.shape))} failed ({type(e).__name__}: "
                              f"{e}); give the --input (and --tokens) it takes") from None
        if not isinstance(out, torch.Tensor) or out.dim() < 2 or out.shape[0] != PROBE_SAMPLES:
            raise ModuleError(f"--module {self.spec}: its forward returned "
                              f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}, not "
                              f"logits [samples, ..., classes]")
        classes = out.shape[-1]
        return classes, out.numel() // (PROBE_SAMPLES * classes)

    def check_tensors(self, built):
        """The model file is this module's: its tensors' shapes in
        model.parameters() order."""
        g, spec = self.graph, self.spec
        dims = [tuple(p.shape) or (1,) for p in built.parameters()]
        want = [tuple(t.dims) for t in g.tensors]
        if dims != want:
            at = next((i for i, (a, b) in enumerate(zip(dims, want)) if a != b),
                      min(len(dims), len(want)))
            raise ModuleError(f"--module {spec} --model {g.path}: the file was not exported from "
                              f"this module: {len(want)} tensors in the file, {len(dims)} in the "
                              f"module, the first to differ at {at} (export it again: "
                              f"scripts/model_export.py {spec} --input "
                              f"{'x'.join(map(str, self.shape))}{' --tokens' if self.tokens else ''})")

    def check_graph(self):
        """The module's logits and input are the model file's: its classes,
        loss rows and input elements a sample."""
        g, spec = self.graph, self.spec
        if (self.classes, self.rows) != (g.classes, g.rows):
            raise ModuleError(f"--module {spec}: logits of {self.rows} rows of {self.classes} "
                              f"classes a sample, the file {g.path} {g.rows} of {g.classes}")
        if not self.tokens and self.input != g.input:
            raise ModuleError(f"--module {spec} --input {'x'.join(map(str, self.shape))}: "
                              f"{self.input} elements a sample, the file {g.path} {g.input}")

    def init(self, seed):
        """dpscale's initial parameters of the file (its flat layout), or
        the seed of the module's own initialisation."""
        return self.graph.init(seed) if self.graph else seed

    def module(self, torch, init):
        """The user's module, built as its spec builds it, its parameters
        dpscale's where init is a flat buffer, behind Logits."""
        if isinstance(init, np.ndarray):
            built = load(self.spec)
            with torch.no_grad():
                for p, a in zip(built.parameters(), self.graph.split(init)):
                    p.copy_(torch.from_numpy(np.array(a, dtype=np.float32)).reshape(p.shape))
        else:
            torch.manual_seed(init)
            built = load(self.spec)
        return logits_module(torch, built, self.classes)

    def flat(self, module):
        """The parameters as one float32 buffer: dpscale's layout with the
        model file, else model.parameters() order."""
        arrays = [p.detach().float().cpu().numpy() for p in module.inner.parameters()]
        if self.graph:
            return self.graph.join(arrays)
        return np.concatenate([a.ravel() for a in arrays]) if arrays else \
            np.zeros(0, np.float32)

    def batch(self, seed, step, samples, sample0=0, classes=None, rows=None):
        """Samples [sample0, sample0 + samples) of step's batch: x [samples,
        *shape] (float32, or int64 token ids) and a label a loss row, from
        dpscale's streams (torch_graph.Graph.batch's); a c x h x w image's
        elements in the order dpscale reads them, h x w pixels of c channels
        (docs/model-file.md)."""
        classes, rows = classes or self.classes, rows or self.rows
        stream = step << 8
        lo = sample0 * self.input
        idx = np.arange(lo, lo + samples * self.input, dtype=np.uint64)
        x = uniform(seed, RNG_INPUT + stream, idx)
        if self.tokens:
            x = np.minimum(np.floor((x.astype(np.float64) + 1.0) * 0.5 * self.vocab),
                           self.vocab - 1).astype(np.int64)
        r = np.arange(sample0 * rows, (sample0 + samples) * rows, dtype=np.uint64)
        u = uniform(seed, RNG_LABELS + stream, r).astype(np.float64)
        labels = np.minimum(np.floor((u + 1.0) * 0.5 * classes).astype(np.int64), classes - 1)
        if len(self.shape) == 3 and not self.tokens:  # c x h x w images: dpscale reads a
            c, h, w = self.shape                      # sample as h x w pixels of c channels
            return np.ascontiguousarray(x.reshape(samples, h, w, c).transpose(0, 3, 1, 2)), labels
        return x.reshape(samples, *self.shape), labels

    def sample_bytes(self):
        """A sample's input (fp32, or int64 ids) and labels as loaded."""
        return self.input * (8 if self.tokens else 4) + self.rows * 8

    def fwd_flops(self):
        """Forward GEMM FLOPs of a sample: the model file's; None without one."""
        return self.graph.fwd_flops() if self.graph else None

    def columns(self):
        """runs.csv's model columns: the file's with it (a model file's run's),
        else layers = the module's leaf modules with parameters."""
        if self.graph:
            cols = self.graph.columns()
            cols["model"] = self.name
            return cols
        return {"model": self.name, "layers": self.leaves, "width": max(1, self.input // self.rows),
                "tokens": self.rows, "classes": self.classes, "params": self.params}


def load(spec):
    """The nn.Module spec builds, as model_export.py resolves it."""
    from dpstools import model_export
    try:
        return model_export.load(spec)
    except model_export.ExportError as e:
        raise ModuleError(f"--module {e}") from None


def embedding_rows(torch, module, graph):
    """The rows of the model file's first embedding op's table, else of the
    module's first nn.Embedding (the token ids it takes); 0 without one."""
    for op in graph.ops if graph else ():
        if op.kind == "embedding":
            return graph.tensors[op.weight].dims[0]
    for m in module.modules():
        if isinstance(m, torch.nn.Embedding):
            return m.num_embeddings
    return 0


def logits_module(torch, inner, classes):
    class Logits(torch.nn.Module):
        """The user's module, its logits as rows of classes."""

        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x).reshape(-1, classes)

    return Logits()
