"""Valid model files (docs/model-file.md) written from op lists, for the
tests that run every op kind the format allows (tests/test_model_matrix.py,
tests/test_model_fuzz.py) and the per-op tables' small mix of kinds: each
op's size is followed from its input, a resample is put in where a kind
needs another size, tensors are declared before the ops that name them, and
the ready order is a permutation of the tensors. Also a sanitizer report
(AddressSanitizer, LeakSanitizer, UndefinedBehaviorSanitizer) told in a
process's stderr. Standard library only."""
import math
import os
import re

# The grammar of src/model/model_file.c: its mf_kind_names, the keys each
# kind takes besides in, saved and moved (its kind_keys), its mf_fn_names and
# a resample's pool= values. test_model_matrix.py's refused case holds them
# against the parser's own refusals, which list them.
KINDS = ("gemm", "resample", "norm", "act", "add", "embedding", "mul", "cat", "attn")
KEYS = {"gemm": "m k n b g weight bias", "resample": "n window kernel stride pad dilation pool",
        "norm": "c weight bias", "act": "fn", "add": "from", "embedding": "m weight",
        "mul": "from pixels", "cat": "from weight pixels", "attn": "heads t d causal"}
FNS = ("relu", "gelu", "softmax", "tanh", "sigmoid", "relu6", "silu", "hardswish", "hardsigmoid",
       "mish")
POOLS = ("max", "avg")
SANITIZER = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: |"
                       r"WARNING: (AddressSanitizer|ThreadSanitizer)|SUMMARY: \w+Sanitizer")


def sanitizer_report(stderr):
    """The first line of a sanitizer's report in stderr, or None."""
    for line in stderr.splitlines():
        if SANITIZER.search(line):
            return line.strip()
    return None


def stderr_excerpt(stderr, lines=60):
    """What a failed run's stderr says: a sanitizer's report from its first
    line on, else stderr's last lines."""
    all_lines = stderr.splitlines()
    first = next((i for i, line in enumerate(all_lines) if SANITIZER.search(line)), None)
    return "\n".join(all_lines[first:first + lines] if first is not None else all_lines[-lines:])


def pair(v):
    """(a, b) as a window key's value, AxB."""
    return f"{v[0]}x{v[1]}"


class Window:
    """A resample's window (docs/model-file.md's resample row): c channels
    of h x w pixels, a kernel (kh, kw); stride, pad and dilation None when
    the file leaves them to their defaults (1x1, 0x0, 1x1); pool None (an
    im2col), "max" or "avg"."""

    def __init__(self, c, h, w, kernel, stride=None, pad=None, dilation=None, pool=None):
        self.c, self.h, self.w, self.kernel, self.pool = c, h, w, tuple(kernel), pool
        self.stride, self.pad, self.dilation = stride, pad, dilation

    def out_size(self):
        """The output's (height, width) in pixels."""
        (kh, kw), (sh, sw) = self.kernel, self.stride or (1, 1)
        (ph, pw), (dh, dw) = self.pad or (0, 0), self.dilation or (1, 1)
        return ((self.h + 2 * ph - dh * (kh - 1) - 1) // sh + 1,
                (self.w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)

    def out_pixels(self):
        oh, ow = self.out_size()
        return oh * ow

    def all_windows_hold_pixels(self):
        """Whether every window of a pooling holds a pixel of its input (a
        dilated one may fall between them, wholly in the padding)."""
        def along(size, kernel, stride, pad, dilation, outs):
            return all(any(0 <= o * stride - pad + k * dilation < size for k in range(kernel))
                       for o in range(outs))
        (kh, kw), (sh, sw) = self.kernel, self.stride or (1, 1)
        (ph, pw), (dh, dw) = self.pad or (0, 0), self.dilation or (1, 1)
        oh, ow = self.out_size()
        return along(self.h, kh, sh, ph, dh, oh) and along(self.w, kw, sw, pw, dw, ow)

    def cols(self):
        """An output pixel's columns: kh·kw·c for an im2col, c for a pooling."""
        return self.c if self.pool else self.kernel[0] * self.kernel[1] * self.c

    def keys(self):
        keys = {"n": self.out_pixels() * self.cols(), "window": f"{self.c}x{self.h}x{self.w}",
                "kernel": pair(self.kernel)}
        for key, v in (("stride", self.stride), ("pad", self.pad), ("dilation", self.dilation)):
            if v is not None:
                keys[key] = pair(v)
        if self.pool:
            keys["pool"] = self.pool
        return keys


class Model:
    """A model file being written: add ops with the methods below (each
    returns the op's name; src is the op it reads, default the last one),
    then text()."""

    def __init__(self, name, input_elems, classes):
        self.name, self.input, self.classes = name, input_elems, classes
        self.tensors = []          # (name, shape)
        self.ops = []              # (kind, name, keys)
        self.size = {"input": input_elems}
        self.reads = {}            # op name: the ops it reads (in=, from=)
        self.fitted = []           # the resamples fit() put in
        self.windows = {}          # a windowed resample's name: its Window
        self.last = "input"

    def tensor(self, shape):
        name = f"t{len(self.tensors)}.{'x'.join(map(str, shape))}"
        self.tensors.append((name, tuple(shape)))
        return name

    def op(self, kind, keys, src=None, out=None, name=None):
        src = self.last if src is None else src
        name = name or f"{kind[:3]}{len(self.ops)}"
        if src != self.last:
            keys = {"in": src, **keys}
        self.ops.append((kind, name, keys))
        self.size[name] = self.size[src] if out is None else out
        self.reads[name] = (src,) + ((keys["from"],) if "from" in keys else ())
        self.last = name
        return name

    def line_of(self, name):
        """The file line (from 1) of op name's record in text()."""
        index = next(i for i, (_, op, _) in enumerate(self.ops) if op == name)
        return 5 + len(self.tensors) + index

    def reads_input(self, name):
        """Whether op name reads the model's input (in= or from=), or its
        im2col does where it is a convolution."""
        im2col = self.reads.get(name + ".im2col", ())
        return "input" in self.reads[name] or "input" in im2col

    def is_im2col(self, name):
        """Whether op name is a windowed resample without pool= (an im2col)."""
        return name in self.windows and not self.windows[name].pool

    def fit(self, src, n):
        """src's output, resampled to n elements a sample where it has another size."""
        src = self.last if src is None else src
        if self.size[src] == n:
            return src
        self.fitted.append(self.resample(n, src))
        return self.last

    def resample(self, n, src=None):
        return self.op("resample", {"n": n}, src, out=n)

    def window(self, win, src=None, name=None):
        """A resample with a window (a Window): an im2col or a pooling of
        src's output resampled to win's c·h·w where it has another size."""
        src = self.fit(src, win.c * win.h * win.w)
        keys = win.keys()
        name = self.op("resample", keys, src, out=keys["n"], name=name)
        self.windows[name] = win
        return name

    def gemm(self, m, k, n, weight=True, bias=True, src=None, tied=None, g=None, shape=None,
             name=None):
        """y = x·Wᵀ (+ b) on m rows; tied: an existing tensor of n·k/g
        elements as the weight; g: groups (None: no g= key); shape: the
        weight's (default n x k/g)."""
        src = self.fit(src, m * k)
        if (g or 1) > 1 and self.is_im2col(src) and src != f"{name}.im2col":
            src = self.resample(m * k, src)  # a copy: a grouped gemm reads no other gemm's im2col
            self.fitted.append(src)
        keys = {"m": m, "k": k, "n": n}
        if g is not None:
            keys["g"] = g
        if weight:
            keys["weight"] = tied or self.tensor(shape or (n, k // (g or 1)))
            if bias:
                keys["bias"] = self.tensor((n,))
        return self.op("gemm", keys, src, out=m * n, name=name)

    def conv(self, win, n, g=None, bias=True, src=None):
        """A convolution: win's im2col (a Window without pool), named
        NAME.im2col, and the gemm NAME of g groups reading it, n output
        channels, its weight n x c/g x kh x kw as PyTorch's Conv2d."""
        name = f"conv{len(self.ops)}"
        col = self.window(win, src, name=name + ".im2col")
        (kh, kw), groups = win.kernel, g or 1
        return self.gemm(win.out_pixels(), win.cols(), n, bias=bias, src=col, g=g,
                         shape=(n, win.c // groups, kh, kw), name=name)

    def bmm(self, b, m, k, n, src=None, b_key=None):
        """The batched GEMM between its input's two halves (a gemm without
        weight); b=1 written only when b_key says so."""
        src = self.fit(src, b * (m * k + k * n))
        keys = {"m": m, "k": k, "n": n}
        if b > 1 or b_key:
            keys["b"] = b
        return self.op("gemm", keys, src, out=b * m * n)

    def attn(self, heads, t, d, causal=0, src=None):
        """Scaled dot-product attention over t rows of q, k and v of its heads
        (3·heads·d columns), t rows of heads·d out; causal None: no key."""
        src = self.fit(src, t * 3 * heads * d)
        keys = {"heads": heads, "t": t, "d": d}
        if causal is not None:
            keys["causal"] = causal
        return self.op("attn", keys, src, out=t * heads * d)

    def norm(self, c, weight=True, bias=True, src=None, rows=None):
        """The affine norm on rows of c; its input resampled to rows x c when not rows of c."""
        src = self.last if src is None else src
        if self.size[src] % c:
            src = self.resample(c * (rows or 1), src)
            self.fitted.append(src)
        keys = {"c": c}
        if weight:
            keys["weight"] = self.tensor((c,))
        if bias:
            keys["bias"] = self.tensor((c,))
        return self.op("norm", keys, src)

    def act(self, fn, src=None):
        return self.op("act", {"fn": fn}, src)

    def add(self, other, src=None):
        """src's output plus other's (an op's name or "input"), src resampled to other's size."""
        src = self.fit(src, self.size[other])
        return self.op("add", {"from": other}, src)

    def mul(self, other, src=None, runs=1, pixels=None):
        """src's output times other's (the scale): each of other's elements
        scales a run of `runs` elements of src; with pixels=P, src is P
        pixels of other's channels, each channel's scale at every pixel.
        src is resampled to the size that makes."""
        scale = self.size[other]
        src = self.fit(src, scale * (pixels or runs))
        keys = {"from": other} if pixels is None else {"from": other, "pixels": pixels}
        return self.op("mul", keys, src)

    def cat(self, other=None, shape=None, src=None, pixels=None, tied=None):
        """src's output, then other's (from=) or a tensor's of shape (weight=;
        tied: an existing tensor); with pixels=P both are P pixels (src
        resampled to whole pixels where it is not)."""
        src = self.last if src is None else src
        if pixels and self.size[src] % pixels:
            src = self.resample(pixels * (self.size[src] // pixels + 1), src)
            self.fitted.append(src)
        if other is not None:
            keys, tail = {"from": other}, self.size[other]
        else:
            keys = {"weight": tied[0] if tied else self.tensor(shape)}
            tail = math.prod(tied[1] if tied else shape)
        if pixels is not None:
            keys["pixels"] = pixels
        return self.op("cat", keys, src, out=self.size[src] + tail)

    def embedding(self, m, vocab, d, src=None, tied=None):
        """y = x + the vocab x d table read at fixed positions; tied: an existing vocab x d tensor."""
        src = self.fit(src, m * d)
        return self.op("embedding", {"m": m, "weight": tied or self.tensor((vocab, d))}, src,
                       out=m * d)

    def rows_of_classes(self, rows=1):
        """The last op's output made rows of classes (a resample when it is not)."""
        if self.size[self.last] % self.classes:
            self.fitted.append(self.resample(self.classes * rows))
        return self.last

    def text(self, ready=None):
        """The file; ready: the tensors' ready values (default: the reverse
        of their order, as backward makes a chain's gradients ready)."""
        n = len(self.tensors)
        ready = list(range(n - 1, -1, -1)) if ready is None else ready
        lines = ["dpscale-model 1", f"name {self.name}", f"input {self.input}",
                 f"classes {self.classes}"]
        lines += [f"tensor {t} {'x'.join(map(str, s))} ready={r}"
                  for (t, s), r in zip(self.tensors, ready)]
        lines += [f"op {kind} {name} " + " ".join(f"{k}={v}" for k, v in keys.items())
                  for kind, name, keys in self.ops]
        return "\n".join(lines) + "\n"


def ops_mix_file(folder):
    """A small file of six op kinds (embedding, norm, gemm, act, add,
    rows_of_classes) written as FOLDER/opsmix.model, for the per-op tables'
    tests (tests/test_ops.py, tests/test_torch_ops.py); (its path, its kinds)."""
    m = Model("opsmix", 256, 16)
    m.embedding(4, 64, 64, src="input")
    m.norm(64)
    m.gemm(4, 64, 256)
    m.act("gelu")
    m.gemm(4, 256, 64)
    m.add("emb0")
    m.gemm(4, 64, 16)
    m.rows_of_classes(4)
    path = os.path.join(folder, "opsmix.model")
    with open(path, "w") as f:
        f.write(m.text())
    return path, {kind for kind, _, _ in m.ops}
