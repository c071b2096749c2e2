"""Reading and checking a dpscale results folder: the columns of each CSV
file as dpscale writes them, CSV reading whose every error names file:line,
number parsing, meta.json and the library versions it records. Shared by
compare.py, plot.py and the tests; standard library only.
"""
import csv
import json
import math
import os
import re

# The phases of a step, in steps.csv's order (dps_phase_names in src/core/names.c).
PHASES = ["load", "replicate", "scatter", "forward", "gather", "loss", "backward", "reduce",
          "allreduce", "allreduce_exposed", "optimizer"]

# Every column of each file, in the order dpscale writes them (src/run/results.c,
# src/run/links.c, src/run/commbench.c). Readers demand only the columns they use, so
# that older folders and torch_reference.py's files still read.
COLUMNS = {
    "runs.csv": [
        "config_id", "status", "error", "backend", "emulated", "mode", "ngpus", "devices",
        "model", "layers", "width", "tokens", "classes", "params", "precision", "optimizer",
        "lr", "global_batch", "batch_per_gpu", "scaling", "bucket_mb", "overlap", "seed",
        "warmup", "steps", "steps_done", "step_ms_median", "step_ms_p10", "step_ms_p90",
        "step_ms_mean", "step_ms_stdev", "samples_per_s", "tokens_per_s", "model_tflops",
        "gemm_ref_tflops", "loss_first", "loss_last", "check", "check_max_rel_diff",
        "gpu0_alloc_peak_bytes", "max_other_alloc_peak_bytes", "comm_bytes_per_step",
        "algbw_gbps", "busbw_gbps", "start_time", "end_time"],
    "steps.csv": ["config_id", "step", "rank", "device_index", "step_ms", "rank_step_ms",
                  "loss"] + [p + "_ms" for p in PHASES],
    "devices.csv": [
        "config_id", "device", "device_index", "name", "alloc_peak_bytes", "device_peak_bytes",
        "capacity_bytes", "h2d_bytes_per_step", "d2h_bytes_per_step", "p2p_sent_bytes_per_step",
        "p2p_recv_bytes_per_step", "nvml_pcie_tx_bytes", "nvml_pcie_rx_bytes",
        "nvml_nvlink_tx_bytes", "nvml_nvlink_rx_bytes", "sm_clock_min_mhz", "sm_clock_max_mhz",
        "throttle_reasons", "device_base_bytes", "device_peak_over_base_bytes"],
    "phases.csv": ["config_id", "device", "phase", "median_ms", "mean_ms", "share_of_step",
                   "bytes_per_step", "achieved_gbps"],
    "memory.csv": ["config_id", "device", "device_index", "category", "bytes_at_peak"],
    "links.csv": ["src", "dst", "method", "bytes", "bw_gbps", "latency_us", "status", "backend",
                  "emulated"],
    "allreduce.csv": ["backend", "method", "nranks", "bytes", "time_us", "algbw_gbps",
                      "busbw_gbps", "check"],
}
# Columns that only scripts/torch_reference.py writes, after all of COLUMNS'
# (dpscale's folders never have them, and readers must not demand them).
# python_overhead_ms: on GPUs, a phase's host time minus the time its device
# was busy in it; empty on the CPU.
OPTIONAL_COLUMNS = {"phases.csv": ["python_overhead_ms"]}

# The keys of meta.json (src/run/results.c).
META_KEYS = ["dpscale_version", "git_describe", "command_line", "start_time", "end_time", "host",
             "os", "backend", "emulated", "note", "devices", "topology", "versions"]
# The fields of meta.json's "versions", one per library (be_version_fields in
# src/backend/backend.c); "" where one does not apply.
VERSIONS = ["driver", "runtime", "cublas", "nccl", "nccl_build", "blas"]
# The one line that held the CUDA versions before those fields existed.
OLD_CUDA_LINE = re.compile(r"CUDA driver ([^,]*), runtime ([^,]*), cuBLAS ([^,]*), NCCL (.*)$")


class InputError(Exception):
    """A results file that is missing or not as dpscale writes it; the
    message names the file, and the line where there is one."""


class Table(list):
    """The rows of one CSV file as dicts, each with "_path" and "_line" (the
    line it ends on) added; .path and .columns (the header) too."""

    def __init__(self, path, columns, rows):
        super().__init__(rows)
        self.path = path
        self.columns = columns


def read_csv(path, required=()):
    """The Table of a CSV file that has at least the required columns, every
    row with as many fields as the header."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file (is this a dpscale results folder?)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise InputError(f"{path}:1: empty file (no header)")
        missing = [c for c in required if c not in reader.fieldnames]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}")
        rows = []
        for row in reader:
            if None in row or None in row.values():
                raise InputError(f"{path}:{reader.line_num}: wrong number of fields (the header "
                                 f"has {len(reader.fieldnames)})")
            row["_path"], row["_line"] = path, reader.line_num
            rows.append(row)
    return Table(path, list(reader.fieldnames), rows)


def read_folder(folder, columns, optional=()):
    """{file name: Table} for each file of a {file name: required columns}
    map, read in the map's order; a file named in optional that is absent
    reads as None."""
    tables = {}
    for name, required in columns.items():
        path = os.path.join(folder, name)
        absent = name in optional and not os.path.exists(path)
        tables[name] = None if absent else read_csv(path, required)
    return tables


def where(row):
    return f"{row['_path']}:{row['_line']}"


def number(row, col, allow_empty=False):
    """The finite float in a row's column (None for an empty cell when
    allow_empty)."""
    v = row[col]
    if v == "" and allow_empty:
        return None
    try:
        x = float(v)
    except ValueError:
        raise InputError(f"{where(row)}: column {col} is not a number: {v!r}") from None
    if not math.isfinite(x):
        raise InputError(f"{where(row)}: column {col} is not finite: {v!r}")
    return x


def integer(row, col):
    """The whole number in a row's column, as an int."""
    x = number(row, col)
    if x != int(x):
        raise InputError(f"{where(row)}: column {col} is not a whole number: {row[col]!r}")
    return int(x)


def by_config(rows):
    """{config_id: [rows]}, each list in file order."""
    out = {}
    for r in rows:
        out.setdefault(r["config_id"], []).append(r)
    return out


def read_meta(folder, required=(), missing_ok=False):
    """A folder's meta.json as a dict with the required keys; {} when it has
    none and missing_ok."""
    path = os.path.join(folder, "meta.json")
    if not os.path.exists(path):
        if missing_ok:
            return {}
        raise InputError(f"{path}: no such file (is this a dpscale results folder?)")
    try:
        with open(path) as f:
            meta = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: not a JSON object")
    missing = [k for k in required if k not in meta]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)}")
    return meta


def versions(meta):
    """{field: version} of a meta.json for each of VERSIONS: its own fields,
    or in a folder written before they existed, read from the one-line forms
    ("cuda", or "backend" on the cuda backend; "backend" names the BLAS of
    any other)."""
    v = meta.get("versions") or {}
    if "driver" in v:
        return {k: str(v.get(k, "")) for k in VERSIONS}
    out = dict.fromkeys(VERSIONS, "")
    out["nccl_build"] = str(v.get("nccl_build", ""))
    backend = str(v.get("backend", ""))
    cuda = OLD_CUDA_LINE.match(str(v.get("cuda", "")) or backend)
    if cuda:
        out.update(zip(["driver", "runtime", "cublas", "nccl"], cuda.groups()))
    if not OLD_CUDA_LINE.match(backend):
        out["blas"] = backend
    return out
