"""A results folder as plot.py reads it, and what its charts and summary.md share.

Folder holds the ok and the failed configurations of runs.csv, devices.csv,
phases.csv, links.csv, memory.csv, buckets.csv, partition.csv, ops.csv,
torch_ops.csv (a torch_reference.py folder's), the step times and loss
scales of steps.csv and meta.json, read through results; series, the
allocation peaks and the link curves are read from it for the charts and the
summary alike. A configuration's line is its strategy, ddp with --no-sync off
apart (results.line), and its accumulation (accum) beside it.
"""
import math
from collections import defaultdict

from dpstools.results import InputError, accum, integer, line, number, read_folder, read_meta
from dpstools.speedup import step_times

# accum, no_sync, skipped_steps: absent from older folders, read as their defaults
RUNS_COLS = ["config_id", "status", "backend", "mode", "ngpus", "model", "precision",
             "optimizer", "global_batch", "scaling", "samples_per_s", "step_ms_median",
             "steps_done", "accum", "no_sync", "skipped_steps"]
DEVICES_COLS = ["config_id", "device", "alloc_peak_bytes"]
PHASES_COLS = ["config_id", "device", "phase", "median_ms"]
LINKS_COLS = ["src", "dst", "method", "bytes", "bw_gbps", "status"]
MEMORY_COLS = ["config_id", "device", "category", "bytes_at_peak"]
BUCKETS_COLS = ["config_id", "rank", "bucket", "micro_step"]
PARTITION_COLS = ["config_id", "rank", "step_ms"]
OPS_COLS = ["config_id", "kind", "direction", "calls", "ms", "tflops", "gbps", "step_ms"]
STEPS_COLS = ["config_id", "step", "rank", "step_ms", "skipped", "loss_scale"]
PHASE_ORDER = ["load", "replicate", "scatter", "forward", "gather", "loss", "backward",
               "reduce", "allreduce_exposed", "unscale", "optimizer"]
# strategy()'s names, in the order drawn
STRATEGIES = ("dp", "dp-lean", "ddp", "ddp-lean", "zero1", "zero1-lean", "zero2", "zero2-lean",
              "fsdp", "fsdp-lean")
# line()'s names, in the order drawn: the strategies, then ddp's with --no-sync off
LINES = STRATEGIES + ("ddp-syncall", "ddp-lean-syncall", "zero1-syncall", "zero1-lean-syncall")
FAILED = "Failed configurations"  # summary.md's section of the configurations not drawn


class Folder:
    """A results folder to draw: runs (ok, each with _n and _sps), failed,
    devices, phases, links, memory, buckets, partition, ops and torch_ops
    (None where absent), step_ms (rank 0's step times by config_id), meta and its device, backend and label."""

    def __init__(self, path):
        self.path = path
        files = read_folder(path, {"runs.csv": RUNS_COLS, "devices.csv": DEVICES_COLS,
                                   "phases.csv": PHASES_COLS, "links.csv": LINKS_COLS,
                                   "memory.csv": MEMORY_COLS, "buckets.csv": BUCKETS_COLS,
                                   "steps.csv": STEPS_COLS, "partition.csv": PARTITION_COLS,
                                   "ops.csv": OPS_COLS, "torch_ops.csv": OPS_COLS},
                            optional=("links.csv", "memory.csv", "buckets.csv", "steps.csv",
                                      "partition.csv", "ops.csv", "torch_ops.csv"))
        self.runs_path = files["runs.csv"].path
        self.runs = [r for r in files["runs.csv"] if r["status"] == "ok"]
        self.failed = [r for r in files["runs.csv"] if r["status"] != "ok"]
        if not self.runs:
            raise InputError(f"{self.runs_path}: no configuration with status ok to draw")
        for r in self.runs:
            r["_n"] = integer(r, "ngpus")
            r["_sps"] = number(r, "samples_per_s")
            r["_accum"], r["_line"] = accum(r), line(r)
        self.devices = files["devices.csv"]
        self.phases = files["phases.csv"]
        self.links = files["links.csv"]
        self.memory = files["memory.csv"]
        self.buckets = files["buckets.csv"]
        self.partition = files["partition.csv"]
        self.ops = files["ops.csv"]
        self.torch_ops = files["torch_ops.csv"]  # a torch_reference.py folder's
        self.step_ms = step_times(files["steps.csv"])
        self.loss_scale = step_values(files["steps.csv"], "loss_scale")
        self.meta = read_meta(path)
        devs = self.meta.get("devices") or [{}]
        self.device = devs[0].get("name", "unknown device")
        self.backend = self.meta.get("backend", self.runs[0]["backend"])
        self.emulated = bool(self.meta.get("emulated")) or self.backend == "host"

    def nodes(self):
        """The launcher's nodes (meta.json's launch.nodes: host, address,
        ranks), [] when dpscale forked its ranks on one host."""
        launch = self.meta.get("launch")
        nodes = launch.get("nodes") if isinstance(launch, dict) else None
        return nodes if isinstance(nodes, list) else []

    def ranks_per_node(self):
        """Ranks on the fullest node when the run spans nodes, else None."""
        nodes = self.nodes()
        return max(len(n.get("ranks", [])) for n in nodes) if len(nodes) > 1 else None

    def label(self):
        if self.emulated:
            text = (f"{self.backend} backend, emulated devices on "
                    f"{self.device.replace('emulated device on ', '')}")
            over = self.meta.get("oversubscribed")
            return f"{text}; {over}" if isinstance(over, str) and over else text
        return f"{self.device}, {self.backend} backend"


def step_values(steps, col):
    """{config_id: [rank 0's col of each step, NaN where empty]} of steps.csv
    (results.Steps, or None)."""
    out = {}
    for cid, rows in (steps.of.items() if steps else ()):
        out[cid] = [x for rank, x in zip(rows.rank, rows.values[col]) if rank == 0]
    return out


def run_label(run, sep=", "):
    """A run's line and, beside it, its accumulation where it has one:
    'ddp-syncall, accum 4'."""
    return run["_line"] + (f"{sep}accum {run['_accum']}" if run["_accum"] > 1 else "")


def line_label(name, n_accum, scaling=None):
    """A chart line's legend: 'ddp, accum 4 (weak scaling)'."""
    text = name + (f", accum {n_accum}" if n_accum > 1 else "")
    return f"{text} ({scaling} scaling)" if scaling else text


def any_accum(folder):
    """Whether a configuration of the folder accumulates gradients."""
    return any(r["_accum"] > 1 for r in folder.runs)


def series(folder):
    """(model, precision, optimizer) -> (line, accum, scaling) -> sorted [(n, samples/s, row)]."""
    out = defaultdict(lambda: defaultdict(list))
    for r in folder.runs:
        key = (r["model"], r["precision"], r["optimizer"])
        out[key][(r["_line"], r["_accum"], r["scaling"] or "weak")].append((r["_n"], r["_sps"], r))
    for lines in out.values():
        for pts in lines.values():
            pts.sort(key=lambda p: p[0])
    return out



def cannot_write(path, e):
    return InputError(f"{path}: cannot write: {e.strerror}; give --out a folder you may write in")



def peaks_by_config(folder):
    peaks = defaultdict(dict)
    for d in folder.devices:
        peaks[d["config_id"]][integer(d, "device")] = number(d, "alloc_peak_bytes")
    return peaks



def gpu0_ratio(peaks):
    if len(peaks) < 2:
        return None
    others = [p for p in peaks[1:] if p > 0]
    return peaks[0] / (sum(others) / len(others)) if others else None



def link_curves(folder):
    """(method, src, dst) -> [(bytes, GB/s)] ascending: each path's measured sizes."""
    curves = defaultdict(list)
    for r in folder.links or []:
        if r["status"] == "ok" and r.get("bw_gbps"):
            curves[(r["method"], r["src"], r["dst"])].append(
                (integer(r, "bytes"), number(r, "bw_gbps")))
    for pts in curves.values():
        pts.sort()
    return curves



def at_size(pts, size):
    """A path's GB/s at `size`: log-linear between the measured sizes around it, the
    nearest measured size outside them."""
    if size <= pts[0][0]:
        return pts[0][1]
    for (s0, b0), (s1, b1) in zip(pts, pts[1:]):
        if size <= s1:
            t = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + t * (b1 - b0)
    return pts[-1][1]


def fmt_bytes(b):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def scaler_runs(folder):
    """[(run, skipped steps, timed steps, first and last loss scale or None)] of
    the configurations with a GradScaler (fp16: skipped_steps not empty)."""
    out = []
    for r in folder.runs:
        if r["skipped_steps"] == "":
            continue
        scales = [x for x in folder.loss_scale.get(r["config_id"], []) if not math.isnan(x)]
        first, last = (scales[0], scales[-1]) if scales else (None, None)
        out.append((r, integer(r, "skipped_steps"), integer(r, "steps_done"), first, last))
    return out

