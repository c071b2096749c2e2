#!/usr/bin/env python3
"""Model files from PyTorch modules (scripts/model_export.py) and read by
dpscale: torchvision's ResNets with their exact tensor lists and GEMM FLOPs,
a GPT with tied weights and attention's matmuls, the committed presets as
the exporter writes them today, and the modules it refuses, named.

usage: test_model_file.py DPSCALE CASE
  resnet        resnet18 and resnet50: every tensor (name, shape) in
                model.parameters() order, 11,689,512 and 25,557,032
                parameters, GEMM FLOPs within 1 % of a count from the
                module's Conv2d and Linear layers; dpscale reads the file
  transformer   a small GPT: the head tied to the token embedding, each
                attention matmul a gemm without weight over the heads
  custom        a user's module (tests/model_examples.py): its own parameters
                through F.embedding, F.linear and F.layer_norm, and
                nn.MultiheadAttention; fused attention (mapped as
                F.scaled_dot_product_attention is, where PyTorch has it)
  presets       bench/models/resnet50.model is what the exporter writes now;
                every file there is read by dpscale predict
  refuses       a module, a function and a forward the exporter cannot map,
                an --input its forward fails on, and a bad MODULE, each refused
                with its name (exit 2); an nn.LSTM whose output is unpacked, a
                GRU in a container and an LSTM as the whole model, refused
                naming the module's qualified name, its class and what to do
  cwd           MODULE:FUNCTION and MODULE.FUNCTION of a mymodel.py in the
                directory the exporter runs in (not on PYTHONPATH), as
                `python -m` imports; torch_reference.py --module's loader too
  buckets       dpscale info --model FILE's DDP buckets, byte for byte, against
                PyTorch's DDP's rebuilt buckets (two gloo ranks on the CPU) for
                resnet18, a GPT with tied weights and the custom module, each
                at two bucket caps (the custom module's with a first bucket cap
                of its own)
Exit 77 (skip) without PyTorch or torchvision (scripts/setup.sh --with-torch)."""
from listing import DPSCALE, exit_if_listing, test

TESTS = [test("model export " + c, DPSCALE, c, suite="torch", timeout=300)
         for c in ("resnet", "transformer", "custom", "presets", "refuses", "cwd")]
TESTS += [test("model buckets torch", DPSCALE, "buckets", suite="torch", timeout=300)]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math
import os
import subprocess
import sys
import tempfile

from helpers import HERE, PYTHON, expect, run_case
import model_examples

REPO = os.path.dirname(HERE)
EXPORT = os.path.join(REPO, "scripts", "model_export.py")
MACHINE = os.path.join(REPO, "bench", "predict", "dgx1-v100-ib.machine")
try:
    import torch
    import torchvision
    from torch import nn
    from dpstools import model_export, reference_models
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh --with-torch installs PyTorch and torchvision)")
    sys.exit(77)


def records(lines, kind):
    return [line.split() for line in lines if line.startswith(kind + " ")]


def hooked_flops(model, shape):
    """Forward GEMM FLOPs of one sample, counted on the module's own Conv2d and Linear layers."""
    total = [0]

    def conv(m, args, out):
        total[0] += 2 * out.numel() * m.in_channels // m.groups * math.prod(m.kernel_size)

    def linear(m, args, out):
        total[0] += 2 * out.numel() * m.in_features

    hooks = [m.register_forward_hook(conv if isinstance(m, nn.Conv2d) else linear)
             for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    with torch.no_grad():
        model.eval()(torch.randn(2, *shape))
    for h in hooks:
        h.remove()
    return total[0] / 2


def file_flops(lines):
    f = 0
    for r in records(lines, "op"):
        if r[1] == "gemm":
            keys = dict(w.split("=", 1) for w in r[3:])
            f += 2 * int(keys.get("b", 1)) * int(keys["m"]) * int(keys["k"]) * int(keys["n"]) // \
                int(keys.get("g", 1))
    return f


def write_model(tmp, name, lines):
    """lines as TMP/NAME.model; its path."""
    path = os.path.join(tmp, name + ".model")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def expect_tensors(name, lines, model):
    """The file's tensors are model.named_parameters()' names and shapes, in order."""
    got = [(t[1], t[2]) for t in records(lines, "tensor")]
    want = [(n, "x".join(map(str, p.shape)) or "1") for n, p in model.named_parameters()]
    expect(got == want, f"{name}: the tensor list is not model.named_parameters()'s: {got}")


def read_by_dpscale(dpscale, path, what):
    """dpscale predict reads the model file through a workload's model key."""
    with tempfile.TemporaryDirectory() as tmp:
        workload = os.path.join(tmp, "w.workload")
        with open(workload, "w") as f:
            f.write(f"model = {os.path.abspath(path)}\nstep_ms_1gpu = 100\nbatch_per_gpu = 2\n")
        r = subprocess.run([dpscale, "predict", "--machine", MACHINE, "--workload", workload,
                            "--gpus", "1,2"], capture_output=True, text=True)
    expect(r.returncode == 0, f"{what}: dpscale predict refused it: {r.stderr.strip()}")
    return r.stdout


def case_resnet(dpscale):
    for name, count in (("resnet18", 11689512), ("resnet50", 25557032)):
        model = getattr(torchvision.models, name)()
        lines = model_export.model_file(name, f"torchvision.models.{name}", model, (3, 224, 224))
        expect_tensors(name, lines, model)
        tensors = records(lines, "tensor")
        got = sum(math.prod(int(d) for d in t[2].split("x")) for t in tensors)
        expect(got == count, f"{name}: {got} parameters, expected {count}")
        ready = sorted(int(t[3].split("=")[1]) for t in tensors)
        expect(ready == list(range(len(tensors))), f"{name}: ready is not 0..{len(tensors) - 1}")
        flops, hooked = file_flops(lines), hooked_flops(model, (3, 224, 224))
        expect(abs(flops / hooked - 1) < 0.01, f"{name}: {flops:.4g} GEMM FLOPs in the file, "
               f"{hooked:.4g} counted on the module")
        with tempfile.TemporaryDirectory() as tmp:
            read_by_dpscale(dpscale, write_model(tmp, name, lines), name)
        print(f"{name}: {len(tensors)} tensors, {got} parameters, {flops / 1e9:.3f} GFLOP a sample")


def case_transformer(dpscale):
    for attn in ("sdpa", "eager"):
        name = f"tiny_gpt {attn}"
        model = reference_models.tiny_gpt(attn)
        lines = model_export.model_file("tiny_gpt", "tiny_gpt", model, (16,), integer_input=True)
        expect_tensors(name, lines, model)
        tensors = [t[1] for t in records(lines, "tensor")]
        expect("lm_head.weight" not in tensors, f"{name}: the tied head is a tensor of its own")
        ops = records(lines, "op")
        head = [r for r in ops if r[2] == "lm_head"]
        expect(head and "weight=wte.weight" in head[0], f"{name}: lm_head does not read wte: {head}")
        matmuls = [dict(w.split("=", 1) for w in r[3:]) for r in ops if r[1] == "gemm" and
                   not any(w.startswith("weight=") for w in r[3:])]
        attns = [dict(w.split("=", 1) for w in r[3:]) for r in ops if r[1] == "attn"]
        if attn == "eager":
            expect(len(matmuls) == 4 and all(m.get("b") == "4" for m in matmuls) and not attns,
                   f"{name}: attention's matmuls are not 4 gemms over 4 heads: {matmuls}")
        else:
            expect(not matmuls and len(attns) == 2 and
                   all((a.get("heads"), a.get("t"), a.get("d"), a.get("causal")) == ("4", "16", "16", "1")
                       for a in attns),
                   f"{name}: attention is not 2 causal attn ops of 4 heads over 16 tokens: {attns}")
        with tempfile.TemporaryDirectory() as tmp:
            read_by_dpscale(dpscale, write_model(tmp, "tiny_gpt", lines), "tiny_gpt")


def case_custom(dpscale):
    model = model_examples.tagger()
    lines = model_export.model_file("tagger", "model_examples:tagger", model, (16,), integer_input=True)
    expect_tensors("tagger", lines, model)
    kinds = [r[1] for r in records(lines, "op")]
    expect(kinds[0] == "embedding" and kinds.count("gemm") == 5 and "norm" in kinds and "add" in kinds,
           f"tagger: ops {kinds}")
    with tempfile.TemporaryDirectory() as tmp:
        read_by_dpscale(dpscale, write_model(tmp, "tagger", lines), "tagger")
    model_export.SDPA.add(model_examples.attention)  # F.scaled_dot_product_attention's mapping
    try:
        fused = model_export.model_file("fused", "model_examples:fused_attention",
                                        model_examples.fused_attention(), (8, 16))
        split = model_export.model_file("split", "model_examples:split_attention",
                                        model_examples.split_attention(), (8, 16))
    finally:
        model_export.SDPA.discard(model_examples.attention)
    for name, lines, want in (
            ("fused attention", fused, [("attn", "attention",
                                         {"heads": "2", "t": "8", "d": "8", "causal": "0"})]),
            ("split attention", split, [("gemm", "attention.scores", {"m": "8", "k": "8", "n": "8", "b": "2"}),
                                        ("gemm", "attention.context", {"m": "8", "k": "8", "n": "8", "b": "2"})])):
        ops = [(r[1], r[2], dict(w.split("=", 1) for w in r[3:])) for r in records(lines, "op")]
        got = [(kind, op, {k: v for k, v in keys.items() if k in want[0][2]}) for kind, op, keys in ops
               if kind == "attn" or (kind == "gemm" and "weight" not in keys)]
        expect(got == want, f"{name}: its attention is {got}, expected {want}")
        with tempfile.TemporaryDirectory() as tmp:
            read_by_dpscale(dpscale, write_model(tmp, name.split()[0], lines), name)


def case_presets(dpscale):
    folder = os.path.join(REPO, "bench", "models")
    with open(os.path.join(folder, "resnet50.model")) as f:
        committed = f.read().splitlines()
    model = torchvision.models.resnet50()
    now = model_export.model_file("resnet50", "torchvision.models.resnet50", model, (3, 224, 224))
    expect(committed == now, "bench/models/resnet50.model is not what model_export.py writes "
           "now: export it again (docs/model-file.md)")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".model"):
            read_by_dpscale(dpscale, os.path.join(folder, name), name)


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8)

    def forward(self, x):
        return self.rnn(x)[0]


class Cumsum(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return torch.cumsum(self.fc(x), dim=1)


class Branches(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else x


def case_refuses(dpscale):
    del dpscale
    for model, needle in ((Lstm(), "rnn: LSTM is not a module the exporter maps"),
                          (Cumsum(), "cumsum is not a function the exporter maps"),
                          (Branches(), "Branches: torch.fx cannot trace its forward")):
        try:
            model_export.model_file("m", "m", model, (4, 8))
            expect(False, f"{type(model).__name__}: exported, expected a refusal")
        except model_export.ExportError as e:
            expect(needle in str(e), f"{type(model).__name__}: refused with {e!s}, expected {needle}")
    refuses_unmapped()
    r = subprocess.run([PYTHON, EXPORT, "dpstools.reference_models:tiny_gpt", "--input", "32", "--tokens"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.path.dirname(EXPORT)})
    expect(r.returncode == 2 and "its forward fails on a batch of 32 token ids" in r.stderr and
           "Traceback" not in r.stderr, f"an --input the module does not take: exit {r.returncode}, {r.stderr}")
    r = subprocess.run([PYTHON, EXPORT, "nosuchpackage.build", "--input", "8"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.path.dirname(EXPORT)})
    expect(r.returncode == 2 and "nosuchpackage.build: No module named 'nosuchpackage'" in r.stderr,
           f"a module that does not exist: exit {r.returncode}, {r.stderr.strip()}")


UNMAPPED = """from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.rnn = nn.LSTM(16, 16, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        y, _ = self.rnn(self.embed(x))
        return self.head(y)


def tagger():
    return Tagger()


def nested():
    return nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.ReLU(), nn.GRU(8, 8)))


def bare():
    return nn.LSTM(8, 8)
"""


def export_in(tmp, spec, *args):
    """model_export.py SPEC ARGS run in the directory tmp, scripts/ alone on PYTHONPATH."""
    return subprocess.run([PYTHON, EXPORT, spec, *args], capture_output=True, text=True, cwd=tmp,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(EXPORT)}, timeout=120)


def refuses_unmapped():
    """An unmapped module: exit 2 naming it, its class and what to do, no traceback."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "unmapped.py"), "w") as f:
            f.write(UNMAPPED)
        for fn, where, cls in (("tagger", "rnn", "LSTM"), ("nested", "1.1", "GRU"),
                               ("bare", "the model itself", "LSTM")):
            r = export_in(tmp, f"unmapped:{fn}", "--input", "5x8")
            needles = (f"{where}: {cls} is not a module the exporter maps",
                       f"torch.nn.modules.rnn.{cls}", "it maps Linear, Conv2d",
                       f"Replace {where} with", "export a submodule without it")
            expect(r.returncode == 2 and all(n in r.stderr for n in needles) and
                   "Traceback" not in r.stderr,
                   f"unmapped:{fn}: exit {r.returncode}, expected 2 with {needles}:\n{r.stderr}")


def case_cwd(dpscale):
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "mymodel.py"), "w") as f:
            f.write("from torch import nn\n\n\ndef build():\n"
                    "    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))\n")
        for spec in ("mymodel:build", "mymodel.build"):
            out = os.path.join(tmp, "mine.model")
            r = export_in(tmp, spec, "--input", "8", "--out", "mine.model")
            expect(r.returncode == 0 and os.path.exists(out),
                   f"{spec} from {tmp}: exit {r.returncode}, no {out}: {r.stderr}")
            with open(out) as f:
                lines = f.read().splitlines()
            expect(lines[1:3] == ["dpscale-model 1", "name build"] and
                   len(records(lines, "op")) == 3, f"{spec}: the file {lines}")
            read_by_dpscale(dpscale, out, spec)
            os.remove(out)
        from dpstools import torch_module
        here = os.getcwd()
        os.chdir(tmp)
        try:
            built = torch_module.load("mymodel:build")
        finally:
            os.chdir(here)
        expect(isinstance(built, nn.Sequential) and len(built) == 3,
               f"torch_module.load('mymodel:build') in {tmp}: {built!r}")


DDP_BUCKETS = r"""
import json, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp, torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from dpstools import reference_models
GPT = (4096, 16, 128, 4, 4)  # vocab, tokens, width, layers, heads

def buckets(spec, cap, first):
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(first * 1048576)  # DDP's first bucket cap
    torch.manual_seed(0)
    if spec == "gpt":
        model, x = reference_models.Gpt2(*GPT), torch.randint(0, GPT[0], (2, GPT[1]))
    elif spec == "tagger":
        import model_examples
        model, x = model_examples.tagger(), torch.randint(0, 8000, (2, 16))
    else:
        model, x = getattr(torchvision.models, spec)(), torch.randn(2, 3, 64, 64)
    ddp = DDP(model, bucket_cap_mb=cap)
    for _ in range(3):
        ddp(x).float().sum().backward()
    return ddp._get_ddp_logging_data()["rebuilt_bucket_sizes"]

def rank(r, cases, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=r, world_size=2)
    got = [buckets(*case) for case in cases]
    if r == 0:
        with open(out, "w") as f:
            json.dump(got, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    cases, port, out = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    mp.spawn(rank, args=(cases, port, out), nprocs=2)
"""


def torch_buckets(cases, tmp):
    """PyTorch DDP's rebuilt bucket sizes in bytes of each (model, --bucket-mb,
    --first-bucket-mb) of CASES, from two gloo ranks on the CPU, one DDP a case."""
    import json
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, script = os.path.join(tmp, "buckets.json"), os.path.join(tmp, "ddp_buckets.py")
    with open(script, "w") as f:  # a file: mp.spawn's children import their __main__ again
        f.write(DDP_BUCKETS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "scripts"), HERE]))
    r = subprocess.run([PYTHON, script, json.dumps(cases), str(port), out], env=env,
                       capture_output=True, text=True, timeout=240)
    expect(r.returncode == 0, f"PyTorch DDP on {cases}: exit {r.returncode}: {r.stderr[-2000:]}")
    with open(out) as f:
        every = json.load(f)
    return [[int(x) for x in (sizes.split(", ") if isinstance(sizes, str) else sizes)]
            for sizes in every]


def dpscale_buckets(dpscale, path, cap, first):
    r = subprocess.run([dpscale, "info", "--model", path, "--bucket-mb", str(cap),
                        "--first-bucket-mb", str(first)],
                       capture_output=True, text=True)
    expect(r.returncode == 0, f"dpscale info --model {path}: {r.stderr.strip()}")
    return [int(line.split()[2]) for line in r.stdout.splitlines() if not line.startswith("#")]


def case_buckets(dpscale):
    # each model, its input, and (--bucket-mb, --first-bucket-mb) pairs; PyTorch's side
    # steps resnet18 at 64x64 (its buckets are its parameters', whatever the input)
    models = {"resnet18": (torchvision.models.resnet18(), (3, 64, 64), False, ((25, 1), (5, 1))),
              "gpt": (reference_models.Gpt2(4096, 16, 128, 4, 4), (16,), True, ((25, 1), (1, 1))),
              "tagger": (model_examples.tagger(), (16,), True, ((25, 1), (0.05, 0.01)))}
    cases = [(name, cap, first) for name, (_, _, _, caps) in models.items() for cap, first in caps]
    with tempfile.TemporaryDirectory() as tmp:
        wants = torch_buckets(cases, tmp)
        paths = {name: write_model(tmp, name, model_export.model_file(name, name, m, shape, tokens))
                 for name, (m, shape, tokens, _) in models.items()}
        for (name, cap, first), want in zip(cases, wants):
            got = dpscale_buckets(dpscale, paths[name], cap, first)
            expect(got == want, f"{name}, --bucket-mb {cap} --first-bucket-mb {first}: "
                   f"dpscale's buckets {got}, PyTorch DDP's rebuilt {want}")
            print(f"{name} --bucket-mb {cap} --first-bucket-mb {first}: {len(got)} buckets, "
                  f"as DDP's: {got}")


CASES = {"resnet": case_resnet, "transformer": case_transformer, "custom": case_custom,
         "presets": case_presets,
         "refuses": case_refuses, "cwd": case_cwd, "buckets": case_buckets}

if __name__ == "__main__":
    sys.exit(run_case(sys.argv[2], CASES[sys.argv[2]], sys.argv[1]))
