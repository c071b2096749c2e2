#!/usr/bin/env python3
"""The dpscale model, initialisation, data and optimizer in PyTorch, trained
under nn.DataParallel (dp) or DistributedDataParallel (ddp) on GPUs or on
the CPU, writing a results folder that scripts/dpstools/results.py reads as it
reads dpscale's (runs.csv, steps.csv, devices.csv, phases.csv, meta.json,
every column of dpstools.results.COLUMNS), so that plot.py draws it and
compare.py compares it like a dpscale folder, and the loss at every step
can be checked against dpscale's.

--device cuda (the default when PyTorch sees a GPU): dp is nn.DataParallel
over --gpus GPUs, ddp one process per GPU over NCCL. --device cpu: one
device (--gpus 1), or ddp over gloo with one process per rank, each with one
BLAS thread as dpscale's host backend gives each emulated device;
DataParallel needs CUDA, so dp on more than one device is refused there.

--accum N: N micro-batches an optimizer step, as dpscale's: step s's
global batch cut into N contiguous micro-batches (each split over the
devices), each micro-step's loss the mean over its rows divided by N; under
ddp the first N-1 backwards inside DDP's no_sync() (--no-sync off: every
one all-reduces). --precision bf16: torch.autocast on CUDA; on the CPU
dpscale's autocast maths cast by hand (torch_model.autocast_bf16: CPU
autocast rounds the parameters' gradients to bf16, dpscale does not).
--precision fp16: CUDA only, torch.autocast(float16) and
torch.cuda.amp.GradScaler (--init-scale, --growth-interval); PyTorch 1.13's
CPU autocast has no float16 and GradScaler needs CUDA. A model file
(--model FILE) in bf16 or fp16 casts by hand on either device, at the
points where dpscale's autocast rules put them (torch_graph.half_casts),
fp16 with GradScaler on CUDA and its rules transcribed on the CPU
(torch_train.HostScaler).
Rank processes are started with torch.multiprocessing (spawn, or
forkserver with PyTorch preloaded), or by torchrun, e.g. `torchrun
--nproc_per_node 2 -r 2 -t 2 torch_reference.py --mode ddp --gpus 2 ...`
(Debian's PyTorch 1.13 under Python 3.11 needs the `-r 2 -t 2`).

--zero1 and --fsdp (with --mode ddp): the same training with its state
sharded over the ranks, so every step's loss is ddp's. --zero1: DDP's
all-reduced gradients, each rank stepping its shard of the parameters with
torch.distributed.optim.ZeroRedundancyOptimizer (the optimizer and
hyper-parameters of torch_model.optimizer), which then broadcasts them
(CPU and GPU, PyTorch 1.13 and later). --fsdp: the model wrapped in
FullyShardedDataParallel, FULL_SHARD, a unit per Linear, BACKWARD_PRE
prefetch, no mixed precision of its own (PyTorch 2.x: 1.13's FSDP does not
import under Python 3.11); its gradients are reduce-scattered, each rank
steps its shard. Both write ddp's results (its config_id); meta.json's
command line says which ran.

Presets are read from `dpscale info`, so the shapes are dpscale's own: an
MLP preset is the MLP, a preset of a model file (resnet50, gpt2, bert-large)
that file.

--model FILE (a value that is not a preset: a path with a `/`, ending in
.model or naming a file): a model file (docs/model-file.md) as `dpscale run
--model FILE` trains it, built by dpstools.torch_graph with PyTorch's
autograd: each op with dpscale's maths
(model/graph.c: a gemm as x·Wᵀ + b or a matmul of its input's halves, a
resample reading x[i mod n], a norm's scale and shift, each act its fn's
torch function (softmax: GELU), an embedding adding its table at fixed
positions, a residual add), dpscale's
initialisation and synthetic samples, the loss the mean cross-entropy of
every row of the global batch. --batch defaults to 8 samples a device (a
preset's: its own); --save-params writes dpscale's flat layout (the tensors
in the reverse of ready order); the results carry the file's name record (a
preset's: its name) as the model. Model files run in fp32, as dpscale's.

--tf32 default|on|off sets PyTorch's two TF32 flags as dpscale's option
reads them (default: PyTorch 2's, convolutions in TF32 and matmuls not; on:
both; off: neither). A model file's module emulates them on any device, as
the host backend does: the operands of each gemm the flags put in TF32 (a
convolution's im2col GEMM, or with on every gemm) rounded to TF32, to
nearest even, and multiplied in fp32, forward and backward; a preset's MLP
and --module on the CPU run fp32, which PyTorch's CPU kernels keep whatever
the flags say.

--module SPEC: the user's own nn.Module instead, the MODULE:FUNCTION or
MODULE.FUNCTION that scripts/model_export.py takes, run as PyTorch runs it
(its own ops, under nn.DataParallel, DDP, or with --fsdp FSDP where it
imports), with dpscale's samples, labels, loss, optimizer and batch
(dpstools.torch_module). --input SHAPE and --tokens as the exporter's, by
default from the first line of --model FILE, the file exported from it:
with that file the run carries the file's name (the config_id of dpscale's
run of the file, so plot.py --torch sets the two side by side: PyTorch
itself against dpscale's model of it) and starts from dpscale's initial
parameters; without it, the module's own initialisation under --seed. Its
forward is not dpscale's maths, so its losses are its own: the step times,
phases and memory are what compare.
"""
import argparse
import copy
import functools
import inspect
import os
import platform
import subprocess
import sys
import time

from dpstools import interpreter

if __name__ == "__main__":  # before numpy is imported: Debian's Python has it and PyTorch
    if "numpy" in interpreter.reexec(["numpy", "torch"], __file__, sys.argv[1:]):
        sys.exit(f"torch_reference.py: {interpreter.here()} has no numpy: "
                 f"{interpreter.install_hint(['numpy', 'torch'], __file__)}")

# numpy (and PyTorch where they import it): after the interpreter is settled
from dpstools.grad_scaler import GROWTH_INTERVAL, INIT_SCALE  # noqa: E402
from dpstools.torch_graph import Graph, ModelFileError, read as read_model_file  # noqa: E402
from dpstools.torch_model import Preset, dpscale_info, file_presets, presets  # noqa: E402
from dpstools.torch_module import Module, ModuleError, header_input, parse_shape  # noqa: E402
from dpstools.torch_results import Usage, check_folder, utc_now  # noqa: E402
from dpstools.torch_train import Rank, RanksHung, run_ddp, run_single  # noqa: E402

FILE_BATCH_PER_DEVICE = 8  # a model file's default samples a device


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["dp", "ddp"], default="dp")
    ap.add_argument("--gpus", type=int, default=1, help="devices: GPUs, or ranks on the CPU")
    ap.add_argument("--device", choices=["cpu", "cuda"],
                    help="cuda (default when PyTorch sees a GPU) or cpu")
    ap.add_argument("--ddp-loss", choices=["global", "stock"], default="global",
                    help="ddp: the loss's scaling (computed as nn.CrossEntropyLoss does, "
                         "dpscale's --ddp-impl torch, either way): global = dpscale's (gradient "
                         "of the global mean even for uneven shards), stock = PyTorch's usual "
                         "per-rank mean averaged over ranks")
    shard = ap.add_mutually_exclusive_group()
    shard.add_argument("--zero1", action="store_true",
                       help="ddp with ZeroRedundancyOptimizer: each rank keeps and steps its "
                            "shard of the optimizer state (ZeRO-1); trains as ddp")
    shard.add_argument("--fsdp", action="store_true",
                       help="ddp's training with the model in FSDP FULL_SHARD, a unit per "
                            "Linear (PyTorch 2.x); trains as ddp")
    ap.add_argument("--model",
                    help="a preset (dpscale info) or a model file (docs/model-file.md); "
                         "default small; with --module, the file exported from the module")
    ap.add_argument("--module", metavar="SPEC",
                    help="the user's nn.Module as PyTorch runs it: MODULE:FUNCTION or "
                         "MODULE.FUNCTION returning it, as scripts/model_export.py takes it "
                         "(MODULE imported from the current directory first, as by python -m)")
    ap.add_argument("--input", metavar="SHAPE",
                    help="--module: one sample's input shape, e.g. 3x224x224 (model_export.py's; "
                         "default: the --model file's first line)")
    ap.add_argument("--tokens", action="store_true",
                    help="--module: the input is token ids (model_export.py's --tokens)")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                    help="fp16: CUDA only, with a GradScaler")
    ap.add_argument("--tf32", choices=["default", "on", "off"], default="default",
                    help="fp32 GEMMs in TF32, as dpscale's --tf32: sets "
                         "torch.backends.cudnn.allow_tf32 (default, on) and "
                         "torch.backends.cuda.matmul.allow_tf32 (on); a model file's module "
                         "rounds those gemms' operands to TF32 itself (its convolutions are "
                         "matmuls, and the CPU ignores the flags)")
    ap.add_argument("--cudnn-benchmark", action="store_true",
                    help="torch.backends.cudnn.benchmark = True: cuDNN times its convolution "
                         "algorithms on the first step of each shape and keeps the fastest, as "
                         "people train convolutional networks (CUDA only)")
    ap.add_argument("--accum", type=int, default=1,
                    help="micro-batches an optimizer step (gradient accumulation)")
    ap.add_argument("--no-sync", choices=["on", "off"], default="on",
                    help="ddp with --accum: on = no all-reduce but in the last micro-step "
                         "(DDP's no_sync()), off = every micro-step all-reduces")
    ap.add_argument("--init-scale", type=float, default=INIT_SCALE,
                    help=f"fp16: GradScaler's init_scale ({INIT_SCALE:g})")
    ap.add_argument("--growth-interval", type=int, default=GROWTH_INTERVAL,
                    help=f"fp16: GradScaler's growth_interval ({GROWTH_INTERVAL})")
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--lr", type=float, default=0.0, help="default per optimizer, as dpscale's")
    ap.add_argument("--batch", type=int, default=0,
                    help="global batch (default: the preset's, or 8 for a model file, x gpus)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300,
                    help="ddp: seconds a rank waits for the others or for a collective (300)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="results")
    ap.add_argument("--name", default="torch-" + time.strftime("%Y%m%d-%H%M%S"))
    ap.add_argument("--dpscale", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                      "src", "dpscale"))
    ap.add_argument("--start-method", choices=["spawn", "forkserver"], default="spawn",
                    help="ddp: how torch.multiprocessing starts the ranks (forkserver: from a "
                         "server that imported PyTorch once, so they start sooner)")
    ap.add_argument("--save-params", metavar="FILE",
                    help="write the final parameters (dpscale's flat layout, float32) as .npy")
    return ap.parse_args(argv)


def setup(args):
    """Checks the arguments, the output folder, the model and PyTorch;
    fills the defaults; returns the model (torch_model.Preset or
    torch_graph.Graph). What the arguments alone decide is refused before
    PyTorch is imported."""
    if args.gpus < 1:
        raise Usage(f"--gpus {args.gpus}: at least 1")
    if args.steps < 1 or args.warmup < 0:
        raise Usage("--steps must be at least 1 and --warmup at least 0")
    if args.mode == "dp" and args.ddp_loss != "global":
        raise Usage("--ddp-loss: applies to --mode ddp only")
    accum_refusal(args)
    shard_refusal(args)
    cpu_refusal(args)
    check_folder(os.path.join(args.out, args.name))
    if args.module:
        spec, per_gpu = module_args(args), FILE_BATCH_PER_DEVICE
    else:
        spec, per_gpu = model_spec(args)
        args.model = spec.name  # the results' model and config_id
    cpu_refusal(args, spec)
    args.by_hand = isinstance(spec, Graph) and args.precision != "fp32"  # torch_train.Rank's
    args.batch = args.batch or per_gpu * args.gpus
    if args.batch < args.gpus:
        raise Usage(f"--batch {args.batch}: fewer samples than the {args.gpus} devices")
    if args.accum > 1 and args.batch % (args.gpus * args.accum):
        parts = args.gpus * args.accum
        raise Usage(f"--batch {args.batch} --accum {args.accum} --gpus {args.gpus}: the batch "
                    f"must split into {args.accum} micro-batches of {args.gpus} equal parts; "
                    f"give a multiple of {parts} (e.g. --batch "
                    f"{max(parts, args.batch // parts * parts)})")
    args.lr = args.lr or (0.01 if args.optimizer == "sgd" else 1e-3)
    try:
        import torch
    except ImportError as e:
        raise Usage(f"PyTorch is not installed for {sys.executable} ({e}): scripts/setup.sh "
                    f"--with-torch installs python3-torch") from None
    ncuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    args.device = args.device or ("cuda" if ncuda else "cpu")
    cpu_refusal(args, spec)
    if args.device == "cuda" and ncuda < args.gpus:
        raise Usage(f"--device cuda --gpus {args.gpus}: PyTorch sees {ncuda} CUDA device(s) "
                    f"(PyTorch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                    f"use fewer --gpus, or --device cpu")
    if args.fsdp:
        fsdp_classes(torch)  # refused here, before any rank starts
    if args.module:
        spec = module_spec(torch, args, *spec)
    args.start_time = utc_now()
    return spec


def module_args(args):
    """What --module's arguments decide before PyTorch is imported: the
    model file exported from it (or None), the input shape and --tokens."""
    if args.input is None and args.model is None:
        raise Usage(f"--module {args.module}: give one sample's --input SHAPE (as "
                    f"scripts/model_export.py takes it), or --model FILE, the file exported "
                    f"from the module")
    graph = None
    if args.model is not None:
        if not (args.model.endswith(".model") or "/" in args.model or
                os.path.isfile(args.model)):
            raise Usage(f"--module {args.module} --model {args.model}: give the model file "
                        f"exported from the module (or leave --model out), not a preset")
        graph = model_file(args.model)
    args.model_file = args.model or ""
    shape, tokens = header_input(args.model) if graph else (None, False)
    try:
        shape = parse_shape(args.input) if args.input else shape
    except ModuleError as e:
        raise Usage(str(e)) from None
    if shape is None:
        raise Usage(f"--module {args.module} --model {args.model}: the file's first line names "
                    f"no input shape (scripts/model_export.py writes one); give --input SHAPE")
    return graph, shape, tokens or args.tokens


def module_spec(torch, args, graph, shape, tokens):
    """The user's module (torch_module.Module), its name the results' model."""
    if args.precision == "bf16" and args.device == "cpu":
        raise Usage("--module --precision bf16 --device cpu: bf16 on the CPU here is dpscale's "
                    "maths cast by hand, not the module's; use fp32 on the CPU, or bf16 on CUDA "
                    "(torch.autocast)")
    try:
        spec = Module(torch, args.module, shape, tokens, graph)
    except ModuleError as e:
        raise Usage(str(e)) from None
    args.model = spec.name
    return spec


def model_spec(args):
    """The model --model names, as dpscale takes it, and its default
    samples per device: a preset of `dpscale info` (an MLP, or a model file
    of bench/models/), else a model file at that path."""
    if args.input or args.tokens:
        raise Usage("--input, --tokens: shape the user's module; give --module SPEC")
    args.model = args.model or "small"
    if args.model.endswith(".model") and os.path.isfile(args.model):
        return file_spec(args, args.model), FILE_BATCH_PER_DEVICE  # dpscale not needed
    try:
        info = dpscale_info(args.dpscale)
    except (OSError, subprocess.CalledProcessError) as e:
        raise Usage(f"--dpscale {args.dpscale}: cannot run `dpscale info` ({e}); build dpscale "
                    f"(ninja -C build) or point --dpscale at it") from None
    mlps, files = presets(args.dpscale, info), file_presets(args.dpscale, info)
    if args.model in mlps:
        return Preset(args.model, mlps[args.model][:4]), mlps[args.model][4]
    if args.model in files:
        per_gpu, path = files[args.model]
        return file_spec(args, path, args.model), per_gpu
    if "/" in args.model or args.model.endswith(".model") or os.path.isfile(args.model):
        return file_spec(args, args.model), FILE_BATCH_PER_DEVICE
    raise Usage(f"--model {args.model}: not one of {sorted(mlps) + sorted(files)}, nor a model "
                f"file")


def file_spec(args, path, name=None):
    """The model file at path (named as its preset, else by its name record)."""
    graph = model_file(path)
    graph.name = name or graph.name
    return graph


def model_file(path):
    try:
        return read_model_file(path)
    except ModelFileError as e:
        raise Usage(f"--model {e}") from None
    except OSError as e:
        raise Usage(f"--model {path}: cannot read the model file ({e.strerror or e}); "
                    f"scripts/model_export.py writes one (docs/model-file.md)") from None


def accum_refusal(args):
    """What --accum, --no-sync and the GradScaler's options refuse, from the arguments alone."""
    if args.accum < 1:
        raise Usage(f"--accum {args.accum}: at least 1 (1: no accumulation)")
    if args.mode == "dp" and args.no_sync != "on":
        raise Usage("--no-sync off: dp has no no_sync (DataParallel reduces every micro-step); "
                    "leave --no-sync out or use --mode ddp")
    if args.no_sync != "on" and args.accum == 1:
        raise Usage("--no-sync off: with one micro-step every step all-reduces anyway; add "
                    "--accum N (N > 1), as dpscale asks")
    scaler = args.init_scale != INIT_SCALE or args.growth_interval != GROWTH_INTERVAL
    if scaler and args.precision != "fp16":
        raise Usage(f"--init-scale, --growth-interval: GradScaler's, with --precision fp16 only "
                    f"(not {args.precision})")
    if not args.init_scale > 0 or args.growth_interval < 1:
        raise Usage(f"--init-scale {args.init_scale:g} --growth-interval "
                    f"{args.growth_interval}: give a scale above 0 and an interval of at least 1")


def cpu_refusal(args, spec=None):
    """What the CPU refuses; fp16 once the model is known (spec): a model
    file's casts are by hand, the MLP's and a module's are autocast's."""
    if args.device != "cpu":
        return
    if args.mode == "dp" and args.gpus > 1:
        raise Usage(f"--mode dp --gpus {args.gpus} --device cpu: nn.DataParallel needs CUDA; "
                    f"on the CPU use --mode ddp (gloo, one process per rank) or --gpus 1")
    if args.precision == "fp16" and spec is not None and not isinstance(spec, Graph):
        raise Usage("--precision fp16 --device cpu: PyTorch's CPU autocast (1.13) takes "
                    "bfloat16 only and torch.cuda.amp.GradScaler needs CUDA; use --precision "
                    "bf16 or fp32 on the CPU, fp16 with --device cuda, or a model file (--model "
                    "FILE: its casts are by hand)")


def shard_refusal(args):
    """What --zero1 and --fsdp refuse, from the arguments alone."""
    if not (args.zero1 or args.fsdp):
        return
    flag = "--zero1" if args.zero1 else "--fsdp"
    if args.mode != "ddp":
        raise Usage(f"{flag}: shards ddp's training (its ranks, data and loss); add --mode ddp")
    if args.fsdp and args.precision == "fp16":
        raise Usage("--fsdp --precision fp16: FSDP's fp16 needs its ShardedGradScaler, not "
                    "torch.cuda.amp.GradScaler; use --precision bf16 or fp32, or --zero1")


def fsdp_classes(torch):
    """PyTorch's torch.distributed.fsdp and the auto-wrap policy of a unit per
    Linear (ModuleWrapPolicy, or the transformer policy that older 2.x has);
    Usage where FSDP does not import."""
    try:
        from torch.distributed import fsdp
        from torch.distributed.fsdp import wrap
    except (ImportError, ValueError, TypeError, RuntimeError) as e:
        # PyTorch 1.13 under Python 3.11: a dataclass of its sharded tensors has a mutable
        # default, which Python 3.11 refuses (ValueError) when FSDP is imported
        raise Usage(f"--fsdp: PyTorch {torch.__version__}'s FSDP does not import under Python "
                    f"{platform.python_version()} ({type(e).__name__}: {e}); run it with "
                    f"PyTorch 2.x, or use --zero1") from None
    if hasattr(wrap, "ModuleWrapPolicy"):
        policy = wrap.ModuleWrapPolicy({torch.nn.Linear})
    else:
        policy = functools.partial(wrap.transformer_auto_wrap_policy,
                                   transformer_layer_cls={torch.nn.Linear})
    return fsdp, policy


class ShardedRank(Rank):
    """A ddp rank with its state sharded. --zero1: DDP as ddp's, the optimizer
    replaced by ZeroRedundancyOptimizer of the same class and hyper-parameters
    (torch_model.optimizer's, read from its defaults): after DDP's all-reduce
    each rank steps the parameters it owns and broadcasts them. --fsdp: the
    bare model wrapped in FSDP FULL_SHARD instead of DDP (no all-reduce hook:
    its reduce-scatters are not timed apart), the optimizer over its flat
    shards. Both keep ddp's loss scaling (Rank.objective) and micro-steps."""

    def __init__(self, torch, args, spec, rank, world, cuda_devices):
        bare = copy.copy(args)
        if args.fsdp:
            bare.mode = "dp"  # one device a process: Rank leaves the model unwrapped
        super().__init__(torch, bare, spec, rank, world, cuda_devices)
        self.args = args
        cls = type(self.opt)
        # its defaults that its constructor takes (a later AdamW, an Adam underneath,
        # holds decoupled_weight_decay there, which it sets itself)
        takes = inspect.signature(cls).parameters
        hyper = {k: v for k, v in self.opt.defaults.items() if k in takes}
        if args.zero1:
            from torch.distributed.optim import ZeroRedundancyOptimizer
            self.opt = ZeroRedundancyOptimizer(self.net.parameters(), optimizer_class=cls,
                                               **hyper)
        else:
            fsdp, policy = fsdp_classes(torch)
            kw = {"device_id": cuda_devices[0]} if cuda_devices else {}
            self.model = fsdp.FullyShardedDataParallel(
                self.net, sharding_strategy=fsdp.ShardingStrategy.FULL_SHARD,
                auto_wrap_policy=policy, backward_prefetch=fsdp.BackwardPrefetch.BACKWARD_PRE,
                mixed_precision=None, **kw)
            self.opt = cls(self.model.parameters(), **hyper)
        print(self.shard_line(), flush=True)

    def shard_line(self):
        """What this rank holds, said once: ZeRO-1's tensors its optimizer steps,
        FSDP's units and the parameters of its shards (padding included)."""
        total = self.spec.params
        if self.args.zero1:
            mine = [p for g in self.opt.optim.param_groups for p in g["params"]]
            every = list(self.net.parameters())
            return (f"zero1 rank {self.rank}: ZeroRedundancyOptimizer steps {len(mine)} of "
                    f"{len(every)} tensors ({sum(p.numel() for p in mine)} of {total} "
                    f"parameters)")
        units = sum(isinstance(m, type(self.model)) for m in self.model.modules())
        held = sum(p.numel() for p in self.model.parameters())
        return f"fsdp rank {self.rank}: {units} FSDP units, shards of {held} of {total} parameters"

    def sync(self, m):
        """FSDP's no_sync() as DDP's (Rank.sync): --accum's micro-steps but the
        last keep their unsharded gradients, the last reduce-scatters them."""
        if self.args.fsdp and self.args.no_sync == "on" and m < self.args.accum - 1:
            return self.model.no_sync()
        return super().sync(m)

    def final_params(self):
        """The final parameters in dpscale's flat layout; under FSDP gathered
        from the shards (summon_full_params: a collective, every rank calls it)."""
        if not self.args.fsdp:
            return self.spec.flat(self.net)
        with type(self.model).summon_full_params(self.model, writeback=False):
            return self.spec.flat(self.net)


def main(argv, prog=None):
    """The command line's work (argv without the program), exit status
    returned; callable in-process (the tests do)."""
    args = parse(argv)
    args.command_line = [prog or sys.argv[0]] + list(argv)
    try:
        spec = setup(args)
        if args.mode == "dp":
            run_single(args, spec)
        elif args.zero1 or args.fsdp:
            run_ddp(args, spec, ShardedRank)
        else:
            run_ddp(args, spec)
    except Usage as e:
        print(f"torch_reference.py: {e}", file=sys.stderr)
        return 2
    except RanksHung as e:
        print(f"torch_reference.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
