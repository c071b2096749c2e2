"""Valid model files (docs/model-file.md) written from op lists, for the
tests that run every op kind the format allows (tests/test_model_matrix.py,
tests/test_model_fuzz.py): each op's size is followed from its input, a
resample is put in where a kind needs another size, tensors are declared
before the ops that name them, and the ready order is a permutation of the
tensors. Also a sanitizer report (AddressSanitizer, LeakSanitizer,
UndefinedBehaviorSanitizer) told in a process's stderr. Standard library
only."""
import re

KINDS = ("gemm", "resample", "norm", "act", "add", "embedding")  # model_file.c's mf_kind_names
FNS = ("relu", "gelu", "softmax", "tanh", "sigmoid")              # model_file.c's mf_fn_names
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


class Model:
    """A model file being written: add ops with the methods below (each
    returns the op's name; src is the op it reads, default the last one),
    then text()."""

    def __init__(self, name, input_elems, classes):
        self.name, self.input, self.classes = name, input_elems, classes
        self.tensors = []          # (name, shape)
        self.ops = []              # (kind, name, keys)
        self.size = {"input": input_elems}
        self.last = "input"

    def tensor(self, shape):
        name = f"t{len(self.tensors)}.{'x'.join(map(str, shape))}"
        self.tensors.append((name, tuple(shape)))
        return name

    def op(self, kind, keys, src=None, out=None):
        src = self.last if src is None else src
        name = f"{kind[:3]}{len(self.ops)}"
        if src != self.last:
            keys = {"in": src, **keys}
        self.ops.append((kind, name, keys))
        self.size[name] = self.size[src] if out is None else out
        self.last = name
        return name

    def fit(self, src, n):
        """src's output, resampled to n elements a sample where it has another size."""
        src = self.last if src is None else src
        return src if self.size[src] == n else self.resample(n, src)

    def resample(self, n, src=None):
        return self.op("resample", {"n": n}, src, out=n)

    def gemm(self, m, k, n, weight=True, bias=True, src=None, tied=None):
        """y = x·Wᵀ (+ b) on m rows; tied: an existing n x k tensor as the weight."""
        src = self.fit(src, m * k)
        keys = {"m": m, "k": k, "n": n}
        if weight:
            keys["weight"] = tied or self.tensor((n, k))
            if bias:
                keys["bias"] = self.tensor((n,))
        return self.op("gemm", keys, src, out=m * n)

    def bmm(self, b, m, k, n, src=None):
        """The batched GEMM between its input's two halves (a gemm without weight)."""
        src = self.fit(src, b * (m * k + k * n))
        keys = {"m": m, "k": k, "n": n} if b == 1 else {"m": m, "k": k, "n": n, "b": b}
        return self.op("gemm", keys, src, out=b * m * n)

    def norm(self, c, weight=True, bias=True, src=None, rows=None):
        """The affine norm on rows of c; its input resampled to rows x c when not rows of c."""
        src = self.last if src is None else src
        if self.size[src] % c:
            src = self.resample(c * (rows or 1), src)
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

    def embedding(self, m, vocab, d, src=None, tied=None):
        """y = x + the vocab x d table read at fixed positions; tied: an existing vocab x d tensor."""
        src = self.fit(src, m * d)
        return self.op("embedding", {"m": m, "weight": tied or self.tensor((vocab, d))}, src,
                       out=m * d)

    def rows_of_classes(self, rows=1):
        """The last op's output made rows of classes (a resample when it is not)."""
        if self.size[self.last] % self.classes:
            self.resample(self.classes * rows)
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
