"""A dpscale results folder read and checked: the files' schema, their readers, meta.json.

The columns of each CSV file as dpscale writes them and what their cells
may hold (SCHEMA), CSV reading whose every error names file:line and says
what to do, what the files of a folder promise each other, meta.json's
types and the library versions it records; and `dpscale predict`'s
predictions.csv (read_predictions). Shared by every tool that reads results
and by the tests; src/core/csv_kinds.h's table is generated from SCHEMA
(scripts/csv_kinds.py). Standard library only.
"""
import array
import codecs
import copy
import csv
import io
import json
import math
import os
import re
import stat

# The phases of a step, in steps.csv's order (dps_phase_names in src/core/names.c);
# unscale: the GradScaler's unscale and inf/NaN check (fp16), 0 without a scaler.
PHASES = ["load", "replicate", "scatter", "forward", "gather", "loss", "backward", "reduce",
          "allreduce", "allreduce_exposed", "unscale", "optimizer"]


# What a cell may hold: every check of a cell's type and range is made here.
class Kind:
    """The cells of a column: any text, text that is not empty, one of
    `words`, or finite numbers (whole ones, at least `least`, above 0 when
    `positive`); `empty` lets a cell be empty (a figure not measured)."""

    def __init__(self, number=False, whole=False, least=None, positive=False, words=None,
                 nonempty=False, empty=False):
        self.number, self.whole, self.least, self.positive = number, whole, least, positive
        self.words, self.nonempty, self.empty = words, nonempty, empty

    def or_empty(self):
        kind = copy.copy(self)
        kind.empty = True
        return kind

    def problem(self, v):
        """Why a cell does not hold what it may, or None."""
        if v == "":
            needed = not self.empty and (self.number or self.words or self.nonempty)
            return "is empty" if needed else None
        if self.words is not None:
            return None if v in self.words else f"is not one of {', '.join(self.words)}"
        return number_problem(v, self) if self.number else None

    def pattern(self):
        """A regular expression that only cells of this kind match (row_pattern's
        quick check; a cell it does not match is judged by problem())."""
        if self.words is not None:
            core = "|".join(re.escape(w) for w in self.words)
        elif not self.number:
            core = "[^\x00]+" if self.nonempty else "[^\x00]*"
        else:
            core = quick_number_pattern(self)
        return f"(?:{core})?" if self.empty else f"(?:{core})"


# The cells dpscale writes (src/core/csv.c's csv_int, csv_u64, csv_num; torch_reference.py's
# fmt the same): whole numbers in ASCII digits without sign or leading zero, other numbers
# as printf's %.Nf, N from 0 to 9, a '-' only before a negative one. Python's int() and
# float() take much more ('２', '٢', ' 2', '+2', '2e0', '2_0' as 20): a number cell must match
# these first. src/core/csv_table.c (predict --from) holds the same grammar.
WHOLE = re.compile(r"0|[1-9][0-9]*")
DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]{1,9})?")
WRITTEN = ("digits, a '.' and at most 9 decimals, a '-' only before a negative number: no '+', "
           "exponent, space, '_' or leading zero")

# The magnitudes of the non-zero numbers dpscale writes: at most 9 decimals,
# at most a 64-bit count. Beyond them, sums and ratios of cells could overflow.
SMALLEST, LARGEST = 1e-9, 2.0 ** 64


def number_problem(v, kind):
    if not (WHOLE if kind.whole else DECIMAL).fullmatch(v):
        return unwritten_problem(v, kind)
    x = int(v) if kind.whole else float(v)
    if x and not SMALLEST <= abs(x) < LARGEST:
        return f"is out of range (non-zero values lie between {SMALLEST:g} and 2^64)"
    if kind.least is not None and x < kind.least:
        return f"is below {kind.least}"
    if kind.positive and x <= 0:
        return "is not above 0"
    return None


def unwritten_problem(v, kind):
    """What a number cell that dpscale would not write holds instead."""
    if kind.whole and DECIMAL.fullmatch(v):
        below = kind.least is not None and float(v) < kind.least
        return f"is below {kind.least}" if below else \
            "is not a whole number (dpscale writes those in digits alone)"
    try:
        x = float(v)
    except ValueError:
        return "is not a number"
    if not math.isfinite(x):
        return "is not finite"
    return f"is not a number as dpscale writes them ({WRITTEN})"


def quick_number_pattern(kind):
    """The numbers of a kind that need no more check: at most 19 digits before
    the point (under 2^64) and 9 after (no non-zero value below 1e-9)."""
    digits = "[1-9][0-9]{0,18}" if kind.whole and kind.least == 1 else "0|[1-9][0-9]{0,18}"
    if kind.least not in (None, 0, 1) or (kind.least == 1 and not kind.whole):
        return "(?!)"  # every cell through problem()
    if kind.whole:
        return digits
    sign = "-?" if kind.least is None and not kind.positive else ""
    nonzero = "(?![0.]*(?:\x00|\\Z))" if kind.positive else ""
    return f"{nonzero}{sign}(?:{digits})(?:\\.[0-9]{{1,9}})?"


TEXT = Kind()
NAME = Kind(nonempty=True)
NUMBER = Kind(number=True)
AT_LEAST_0 = Kind(number=True, least=0)
ABOVE_0 = Kind(number=True, positive=True)
COUNT = Kind(number=True, whole=True, least=0)
COUNT_1 = Kind(number=True, whole=True, least=1)
# A run's status (dps_status_name in src/core/err.c) and mode (src/core/names.c).
STATUS = Kind(words=("ok", "oom", "error", "timeout", "skipped"))
# The strategies (dps_mode_names in src/core/names.c; core/strategy.h describes each).
MODE = Kind(words=("dp", "ddp", "zero1", "zero2", "fsdp"))
# The strategies with DDP's buckets, whose runs have bucket_mb, overlap and no_sync.
BUCKETED = ("ddp", "zero1")
# ddp's --no-sync (empty for dp), and a step skipped by the GradScaler or not.
NO_SYNC = Kind(words=("on", "off"), empty=True)
# ops.csv's directions (op_dir_names in src/model/op_trace.c)
OP_DIRECTION = Kind(words=("forward", "backward", "update"))
SKIPPED = Kind(words=("0", "1"), empty=True)
# comm-bench's collectives (comm_op_names in src/comm/comm.c).
COLLECTIVE = Kind(words=("all-reduce", "reduce-scatter", "all-gather"))
# A prediction's status (predict_status_names in src/predict/predict_model.c).
PREDICTED = Kind(words=("ok", "oom", "skipped"))

# Every column of each file with what its cells hold, in the order dpscale writes
# them (src/results/results.c, src/microbench/links.c, src/microbench/commbench.c); empty where a
# figure may be unmeasured (any result of a configuration that did not run).
# Readers demand only the columns they use, so that older folders and
# torch_reference.py's files still read.
SCHEMA = {
    "runs.csv": [
        ("config_id", NAME), ("status", STATUS), ("error", TEXT), ("backend", TEXT),
        ("emulated", COUNT), ("mode", MODE), ("ngpus", COUNT_1), ("devices", TEXT),
        ("model", TEXT), ("layers", COUNT), ("width", COUNT_1), ("tokens", COUNT_1),
        ("classes", COUNT_1), ("params", COUNT_1), ("precision", TEXT), ("optimizer", TEXT),
        ("lr", AT_LEAST_0), ("global_batch", COUNT_1), ("batch_per_gpu", COUNT_1),
        ("scaling", TEXT), ("bucket_mb", AT_LEAST_0.or_empty()), ("overlap", COUNT.or_empty()),
        ("accum", COUNT_1.or_empty()), ("no_sync", NO_SYNC), ("skipped_steps", COUNT.or_empty()),
        ("seed", COUNT), ("warmup", COUNT), ("steps", COUNT_1), ("steps_done", COUNT),
        ("step_ms_median", ABOVE_0.or_empty()), ("step_ms_p10", ABOVE_0.or_empty()),
        ("step_ms_p90", ABOVE_0.or_empty()), ("step_ms_mean", ABOVE_0.or_empty()),
        ("step_ms_stdev", AT_LEAST_0.or_empty()), ("samples_per_s", ABOVE_0.or_empty()),
        ("tokens_per_s", ABOVE_0.or_empty()), ("model_tflops", AT_LEAST_0.or_empty()),
        ("gemm_ref_tflops", AT_LEAST_0.or_empty()), ("loss_first", NUMBER.or_empty()),
        ("loss_last", NUMBER.or_empty()), ("check", TEXT),
        ("check_max_rel_diff", AT_LEAST_0.or_empty()),
        ("gpu0_alloc_peak_bytes", COUNT.or_empty()),
        ("max_other_alloc_peak_bytes", COUNT.or_empty()),
        ("comm_bytes_per_step", AT_LEAST_0.or_empty()), ("algbw_gbps", AT_LEAST_0.or_empty()),
        ("busbw_gbps", AT_LEAST_0.or_empty()), ("start_time", TEXT), ("end_time", TEXT)],
    "steps.csv": [
        ("config_id", NAME), ("step", COUNT), ("rank", COUNT), ("device_index", COUNT),
        ("step_ms", ABOVE_0), ("rank_step_ms", AT_LEAST_0), ("loss", NUMBER.or_empty()),
        ("micro_steps", COUNT_1.or_empty()), ("skipped", SKIPPED),
        ("loss_scale", ABOVE_0.or_empty())]
    + [(p + "_ms", AT_LEAST_0.or_empty()) for p in PHASES],
    "devices.csv": [
        ("config_id", NAME), ("device", COUNT), ("device_index", COUNT), ("name", TEXT),
        ("alloc_peak_bytes", COUNT), ("device_peak_bytes", COUNT),
        ("capacity_bytes", COUNT.or_empty())]
    + [(c, AT_LEAST_0.or_empty()) for c in (
        "h2d_bytes_per_step", "d2h_bytes_per_step", "p2p_sent_bytes_per_step",
        "p2p_recv_bytes_per_step", "nvml_pcie_tx_bytes", "nvml_pcie_rx_bytes",
        "nvml_nvlink_tx_bytes", "nvml_nvlink_rx_bytes")]
    + [("sm_clock_min_mhz", COUNT.or_empty()), ("sm_clock_max_mhz", COUNT.or_empty()),
       ("throttle_reasons", TEXT), ("device_base_bytes", COUNT.or_empty()),
       ("device_peak_over_base_bytes", COUNT.or_empty())],
    "phases.csv": [
        ("config_id", NAME), ("device", COUNT), ("phase", NAME),
        ("median_ms", AT_LEAST_0.or_empty()), ("mean_ms", AT_LEAST_0.or_empty()),
        ("share_of_step", AT_LEAST_0.or_empty()), ("bytes_per_step", AT_LEAST_0.or_empty()),
        ("achieved_gbps", AT_LEAST_0.or_empty())],
    "memory.csv": [("config_id", NAME), ("device", COUNT), ("device_index", COUNT),
                   ("category", TEXT), ("kind", TEXT), ("bytes_at_peak", COUNT),
                   ("peak_phase", NAME)],
    # The collectives of a strategy of a process a device over the traced steps, a row
    # per rank, micro-step (0-based) and bucket all-reduced in it (ddp, zero1), or per
    # sharded unit's reduce-scatter or all-gather (bucket: the unit; collective says
    # which, and phase the phase that issued it: fsdp gathers a unit in forward and
    # again in backward): when each was ready and its collective began, ms after backward began
    # (medians), the collective's time; the last two empty on one rank, which runs no
    # collective. Folders before the sharded strategies have no collective column.
    # wait_ms, transfer_ms: the collective split into this rank's wait for the last peer
    # and the transfer (the shortest rank's time: ranks leave a collective together);
    # late_ms: how much later than the other ranks' median the bucket was ready, after
    # each rank's step began (medians over the traced steps; empty on one rank; folders
    # before them have none); late_p25_ms: the lateness reached in 3 of 4 traced steps
    # (its 25th percentile: a rank late in most steps, not in a burst); ready_step_ms: when
    # the bucket was ready after the rank's step began (median).
    "buckets.csv": [("config_id", NAME), ("rank", COUNT), ("bucket", COUNT),
                    ("micro_step", COUNT.or_empty()), ("bytes", COUNT),
                    ("ready_ms", NUMBER), ("allreduce_begin_ms", NUMBER.or_empty()),
                    ("allreduce_ms", AT_LEAST_0.or_empty()), ("traced_steps", COUNT_1),
                    ("collective", COLLECTIVE), ("phase", NAME),
                    ("wait_ms", AT_LEAST_0.or_empty()), ("transfer_ms", AT_LEAST_0.or_empty()),
                    ("late_ms", NUMBER.or_empty()), ("late_p25_ms", NUMBER.or_empty()),
                    ("ready_step_ms", NUMBER.or_empty())],
    # Each rank's step partition (src/results/step_parts.h), means over the timed steps:
    # compute_ms .. idle_host_ms sum to step_ms, the mean step. compute: compute phases with
    # no collective beside them; overlap: compute with a collective beside it;
    # comm_exposed: the collectives' wait after backward (dp: replicate and reduce);
    # copies: load (dp: scatter, gather); wait_peer: idle, waiting for the slowest rank to
    # end the step (dp: a replica's device waiting for device 0's gather, loss, unscale and
    # optimizer); idle_host: the rest.
    "partition.csv": [("config_id", NAME), ("rank", COUNT), ("device_index", COUNT),
                      ("steps", COUNT_1), ("step_ms", AT_LEAST_0)]
    + [(p + "_ms", NUMBER) for p in ("compute", "overlap", "comm_exposed", "copies",
                                     "wait_peer", "idle_host")],
    # The last timed step's ops (src/model/op_trace.h) on device 0 (dp) or rank 0, by
    # kind (a model file's: gemm .. cat; the MLP's: linear, gelu, cast; loss, optimizer)
    # and direction (the loss forward, the optimizer update): calls, their summed time
    # by events around their kernels, GEMM FLOP (0 for other kinds) and bytes (each
    # operand once), the rates (tflops empty without FLOP; both empty at 0 ms), the
    # step traced and its step_ms. Folders before it have no ops.csv.
    "ops.csv": [("config_id", NAME), ("kind", NAME), ("direction", OP_DIRECTION),
                ("calls", COUNT_1), ("ms", AT_LEAST_0), ("flop", AT_LEAST_0),
                ("bytes", AT_LEAST_0), ("tflops", AT_LEAST_0.or_empty()),
                ("gbps", AT_LEAST_0.or_empty()), ("step", COUNT), ("step_ms", AT_LEAST_0)],
    "links.csv": [("src", NAME), ("dst", NAME), ("method", NAME), ("bytes", COUNT),
                  ("bw_gbps", ABOVE_0.or_empty()), ("latency_us", AT_LEAST_0.or_empty()),
                  ("status", TEXT), ("backend", TEXT), ("emulated", COUNT)],
    # comm-bench's rows: the implementation (method), the collective (op; folders
    # before it have only all-reduces and no op column), its size (the whole buffer).
    "allreduce.csv": [("backend", TEXT), ("method", TEXT), ("op", COLLECTIVE), ("nranks", COUNT_1),
                      ("bytes", COUNT), ("time_us", AT_LEAST_0.or_empty()),
                      ("algbw_gbps", AT_LEAST_0.or_empty()), ("busbw_gbps", AT_LEAST_0.or_empty()),
                      ("check", TEXT)],
    # `dpscale predict` (src/predict/predict_out.c): one row per mode and GPU count of
    # the series model, precision, optimizer (source: the measured configuration
    # it was predicted from, empty for a workload file); max_batch_per_gpu: the
    # largest batch per GPU whose memory fits the machine's gpu_mem_gib (empty
    # without it, or skipped); from step_ms on, the cells are empty exactly where
    # status is skipped (read_predictions). nunits: the sharded strategies' units;
    # allreduce_bytes .. all_gather_bytes: a step's buffers through each collective
    # on a rank, comm_bytes_per_step what its ring sends and receives (runs.csv's).
    "predictions.csv": [
        ("machine", NAME), ("workload", NAME), ("model", NAME), ("precision", NAME),
        ("optimizer", NAME), ("source", TEXT), ("mode", MODE), ("ngpus", COUNT_1),
        ("nodes", COUNT_1), ("batch_per_gpu", COUNT_1), ("max_batch_per_gpu", COUNT.or_empty()),
        ("accum", COUNT_1.or_empty()),
        ("no_sync", NO_SYNC), ("status", PREDICTED), ("note", TEXT),
        ("step_ms", ABOVE_0.or_empty()), ("samples_per_s", ABOVE_0.or_empty()),
        ("efficiency", AT_LEAST_0.or_empty())]
    + [(p + "_ms", AT_LEAST_0.or_empty()) for p in PHASES]
    + [("gpu0_mem_bytes", COUNT.or_empty()), ("other_mem_bytes", COUNT.or_empty()),
       ("nbuckets", COUNT.or_empty()), ("busbw_gbps", AT_LEAST_0.or_empty()),
       ("allreduce_end_ms", AT_LEAST_0.or_empty()), ("bucket_copy_ms", AT_LEAST_0.or_empty()),
       ("sync_ms", AT_LEAST_0.or_empty()), ("bus_eff", AT_LEAST_0.or_empty()),
       ("base_latency_us", AT_LEAST_0.or_empty()), ("bucket_overhead_us", AT_LEAST_0.or_empty()),
       ("dp_sync_ms", AT_LEAST_0.or_empty()), ("compute_scale", AT_LEAST_0.or_empty()),
       ("overlap_eff", AT_LEAST_0.or_empty()), ("nunits", COUNT.or_empty()),
       ("allreduce_bytes", AT_LEAST_0.or_empty()), ("reduce_scatter_bytes", AT_LEAST_0.or_empty()),
       ("all_gather_bytes", AT_LEAST_0.or_empty()),
       ("comm_bytes_per_step", AT_LEAST_0.or_empty()), ("bucket_mb", AT_LEAST_0.or_empty())],
}
COLUMNS = {name: [c for c, _ in cols] for name, cols in SCHEMA.items()}
# Columns that only scripts/torch_reference.py writes, after all of COLUMNS'
# (dpscale's folders never have them, and readers must not demand them).
# python_overhead_ms: on GPUs, a phase's event time minus the time its device
# was busy in it (the device's wait for Python); empty on the CPU.
OPTIONAL_SCHEMA = {"phases.csv": [("python_overhead_ms", NUMBER.or_empty())]}
OPTIONAL_COLUMNS = {name: [c for c, _ in cols] for name, cols in OPTIONAL_SCHEMA.items()}
KINDS = {name: dict(SCHEMA[name] + OPTIONAL_SCHEMA.get(name, [])) for name in SCHEMA}


def ddp_on(row):
    """no_sync's default: on for the strategies with buckets, empty for the others."""
    return "on" if row.get("mode") in BUCKETED else ""


def zero_unless_skipped(row):
    """A prediction's figure: empty where it is skipped (read_predictions)."""
    return "" if row.get("status") == "skipped" else "0"


# Columns that folders written before them lack (gradient accumulation, the GradScaler):
# a reader does not demand them, and a row of a file without one reads the cell given
# here (a text, or a function of the row's other cells). An empty cell of accum or
# micro_steps reads as 1, of skipped as 0 (accum(), no_sync()).
DEFAULTS = {
    "runs.csv": {"accum": "1", "no_sync": ddp_on, "skipped_steps": ""},
    "steps.csv": {"micro_steps": "1", "skipped": "0", "loss_scale": "", "unscale_ms": "0"},
    "allreduce.csv": {"op": "all-reduce"},
    "buckets.csv": {"micro_step": "0", "collective": "all-reduce", "phase": "backward",
                    "wait_ms": "", "transfer_ms": "", "late_ms": "", "late_p25_ms": "",
                    "ready_step_ms": ""},
    "predictions.csv": {"accum": "1", "no_sync": ddp_on, "unscale_ms": zero_unless_skipped,
                        "max_batch_per_gpu": "", "nunits": zero_unless_skipped,
                        "allreduce_bytes": zero_unless_skipped,
                        "reduce_scatter_bytes": zero_unless_skipped,
                        "all_gather_bytes": zero_unless_skipped,
                        "comm_bytes_per_step": zero_unless_skipped, "bucket_mb": ""},
}
# The columns that name a row: no two rows of a file name the same thing.
KEYS = {"runs.csv": ["config_id"], "steps.csv": ["config_id", "step", "rank"],
        "devices.csv": ["config_id", "device"], "phases.csv": ["config_id", "device", "phase"],
        "buckets.csv": ["config_id", "rank", "micro_step", "bucket", "collective", "phase"],
        "partition.csv": ["config_id", "rank"],
        "ops.csv": ["config_id", "kind", "direction"],
        "links.csv": ["src", "dst", "method", "bytes"],  # links: one row per path and copy size
        "predictions.csv": ["machine", "workload", "source", "mode", "ngpus", "accum", "no_sync",
                            "bucket_mb"]}
# What to do about two rows with the same key, where it is not the results folder's remedy.
REPEAT_FIX = {"predictions.csv": "remove the repeated rows, or predict into a folder of its own "
                                 "(dpscale predict --name)"}

# Files that take another's columns, kinds and key: torch_reference.py's
# torch_ops.csv (its profiled step by op kind, dpstools.torch_ops) is ops.csv's.
SCHEMA_OF = {"torch_ops.csv": "ops.csv"}

# The keys of meta.json (src/results/results.c) and the JSON type of each.
META_TYPES = {"dpscale_version": str, "git_describe": str, "command_line": list,
              "start_time": str, "end_time": str, "host": str, "os": str, "backend": str,
              "emulated": bool, "strict": bool, "note": str, "memory": dict, "devices": list,
              "topology": (str, dict), "versions": dict, "tf32": dict}
META_KEYS = ["dpscale_version", "git_describe", "command_line", "start_time", "end_time", "host",
             "os", "backend", "emulated", "note", "devices", "topology", "versions"]
# meta.json's "strict" (--strict, DPSCALE_STRICT=1: the host backend's strict
# mode, timings not representative) is absent from folders written before it.
# meta.json's "tf32" (--tf32; absent from folders written before it, which ran
# every fp32 GEMM in fp32): its mode, and PyTorch's two flags it stands for.
TF32_TYPES = {"mode": str, "cudnn_allow_tf32": bool, "cuda_matmul_allow_tf32": bool}
TF32_MODES = ["default", "on", "off"]
# The fields of each of meta.json's devices.
DEVICE_TYPES = {"index": int, "name": str, "bus_id": str, "memory_bytes": int}
# The fields of meta.json's "versions", one per library (be_version_fields in
# src/backend/backend.c); "" where one does not apply. Every value is a string.
VERSIONS = ["driver", "runtime", "cublas", "nccl", "nccl_build", "blas", "conv"]
# The one line that held the CUDA versions before those fields existed.
OLD_CUDA_LINE = re.compile(r"CUDA driver ([^,]*), runtime ([^,]*), cuBLAS ([^,]*), NCCL (.*)$")
# What to do about a file that is not as dpscale writes it.
FIX = "restore the file as dpscale wrote it, or run the configuration again"
PREDICT_FIX = "restore the file as dpscale predict wrote it, or predict again"


class InputError(Exception):
    """A results file that is missing or not as dpscale writes it; the
    message names the file, and the line where there is one."""


class Table(list):
    """The rows of one CSV file as dicts, each with "_path" and "_line" (the
    line it ends on) added; .path, .columns (the header), .schema (the SCHEMA
    entry its cells are checked against) and .fix (what to do about a bad
    cell) too."""

    def __init__(self, path, columns, rows, schema=None, fix=FIX):
        super().__init__(rows)
        self.path = path
        self.columns = columns
        self.schema = schema or os.path.basename(path)
        self.fix = fix


# The largest file the readers take, in bytes (docs/results.md; src/core/csv_read.h's
# CSV_READ_MAX_BYTES the same): steps.csv (a row per step and rank) is held compactly
# (Steps: about 140 bytes a row at the peak, as much as the file); every other file's rows
# are dicts, about 15 times the file. A larger file is refused before it is read.
MAX_BYTES = {"steps.csv": 1 << 30}
MAX_BYTES_OTHER = 64 << 20
# What to do about a file over its limit.
TOO_BIG_FIX = ("dpscale writes less than that: restore the file as it wrote it, or record the "
               "configurations in folders of their own (--name)")


def byte_limit(name):
    return MAX_BYTES.get(name, MAX_BYTES_OTHER)


def refuse_unreadable(path, st, fix, limit):
    """Refuses, by its stat st, a file that is not a regular file of at most
    limit bytes (a FIFO would block its reader, /dev/zero never end)."""
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: a folder, not a file; {fix}")
    if not stat.S_ISREG(st.st_mode):
        what = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" \
            if stat.S_ISSOCK(st.st_mode) else "a device"
        raise InputError(f"{path}: {what}, not a regular file (dpscale writes files); {fix}")
    if st.st_size > limit:
        raise InputError(f"{path}: {st.st_size} bytes, more than the {limit} the readers take "
                         f"(docs/results.md); {TOO_BIG_FIX}")


def open_regular(path, fix=FIX, limit=None):
    """path opened for reading in binary, once it is known to be a regular file
    of at most limit bytes (default: byte_limit of its name); refused before
    it is opened otherwise, and again by what was opened."""
    limit = byte_limit(os.path.basename(path)) if limit is None else limit
    try:
        refuse_unreadable(path, os.stat(path), fix, limit)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        dangling = os.path.lexists(path)
        raise InputError(f"{path}: " + ("a symbolic link to nothing; " + fix if dangling else
                                        "no such file (is this a dpscale results folder?)")) \
            from None
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    try:
        refuse_unreadable(path, os.fstat(fd), fix, limit)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def not_utf8(path, fix):
    """The InputError of a file that does not decode as UTF-8, naming the line
    of its first bad byte (the file read again, a MiB at a time)."""
    decoder, line = codecs.getincrementaldecoder("utf-8")(), 1
    with open_regular(path, fix) as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            try:
                decoder.decode(piece)
            except UnicodeDecodeError as e:  # e.object: the bytes it held, then piece
                line += e.object.count(b"\n", 0, e.start)
                return InputError(f"{path}:{line}: not UTF-8 (byte 0x{e.object[e.start]:02x}); "
                                  f"{fix}")
            line += piece.count(b"\n")
    return InputError(f"{path}:{line}: not UTF-8 (it ends inside a character); {fix}")


def read_text(path, fix=FIX):
    """A file's text (UTF-8; a leading byte-order mark is skipped), read once
    open_regular has checked the file."""
    with open_regular(path, fix) as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputError(f"{path}:{line}: not UTF-8 (byte 0x{data[e.start]:02x}); {fix}") \
            from None


def row_pattern(header, kinds):
    """One regular expression that a row's cells joined by NUL match only
    when every cell holds what its column's kind may (most rows need no more
    check: see Kind.pattern)."""
    return re.compile("\x00".join(kinds[c].pattern() if c in kinds else "[^\x00]*"
                                  for c in header), re.DOTALL)


def csv_rows(path, required, schema, fix):
    """(header, rows): rows yields (line, cells) of each row of a CSV file,
    streamed, once its field count and every cell are checked (the header:
    at least the required columns but those DEFAULTS gives, none twice)."""
    f = open_regular(path, fix)
    text = io.TextIOWrapper(f, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError) as e:
        f.close()
        raise reading_error(path, reader, e, fix) from None
    if not header:
        f.close()
        raise InputError(f"{path}:1: empty file (no header)")
    try:
        absent = DEFAULTS.get(schema, {})
        check_header(path, header, [c for c in required if c not in absent or c in header], fix)
    except InputError:
        f.close()
        raise
    return header, checked_rows(path, f, reader, header, KINDS.get(schema, {}), fix)


def checked_rows(path, f, reader, header, kinds, fix):
    quick, width = row_pattern(header, kinds).fullmatch, len(header)
    checked = [(i, c, kinds[c]) for i, c in enumerate(header) if c in kinds]
    with f:
        try:
            for cells in reader:
                if len(cells) != width:
                    raise InputError(f"{path}:{reader.line_num}: wrong number of fields (the "
                                     f"header has {width}); {fix}")
                if not quick("\x00".join(cells)):
                    check_cells(path, reader.line_num, cells, checked, fix)
                yield reader.line_num, cells
        except (csv.Error, UnicodeDecodeError) as e:
            raise reading_error(path, reader, e, fix) from None


def reading_error(path, reader, e, fix):
    if isinstance(e, UnicodeDecodeError):
        return not_utf8(path, fix)
    why = f"a field longer than {csv.field_size_limit()} characters" \
        if "field limit" in str(e) else f"not CSV as dpscale writes it ({e})"
    return InputError(f"{path}:{reader.line_num}: {why}; {fix}")


def check_cells(path, line, cells, checked, fix):
    for i, col, kind in checked:
        why = kind.problem(cells[i])
        if why:
            raise InputError(f"{path}:{line}: column {col} {why}: {short(cells[i])}; {fix}")


def read_csv(path, required=(), schema=None, fix=FIX):
    """The Table of a CSV file that has at least the required columns, every
    row with as many fields as the header, every cell as its column's kind
    (KINDS) and no two rows with the same key (KEYS); schema: the file name
    whose kinds and key apply (default: the file's own name), fix: what an
    error says to do. A column of DEFAULTS that the file lacks reads as its
    default in every row (.columns: the file's header). Streamed: what it
    holds is the rows' dicts."""
    schema = schema or os.path.basename(path)
    header, rows = csv_rows(path, required, schema, fix)
    key = key_of(header, schema)
    table, first = Table(path, list(header), [], schema, fix), {}
    absent = [(c, d) for c, d in DEFAULTS.get(schema, {}).items() if c not in header]
    for line, cells in rows:
        row = dict(zip(header, cells))
        for c, default in absent:
            row[c] = default(row) if callable(default) else default
        row["_path"], row["_line"] = path, line
        if key:
            repeated(first, tuple(cells[i] for i in key), row, schema, [header[i] for i in key])
        table.append(row)
    return table


def check_header(path, header, required, fix=FIX):
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}; {fix}")
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise InputError(f"{path}:1: column(s) {', '.join(twice)} more than once; {fix}")


def short(v):
    return repr(v) if len(v) <= 40 else repr(v[:40]) + "..."


def key_of(header, schema):
    """The indexes of a file's key columns (KEYS) but those of DEFAULTS it
    lacks (the same cell in every row), or None when it has none. The key's
    cells compare as text: whole numbers have one spelling."""
    key = [c for c in KEYS.get(schema, []) if c in header or c not in DEFAULTS.get(schema, {})]
    if not key or any(c not in header for c in key):
        return None
    return [header.index(c) for c in key]


def repeated(first, k, row, schema, key):
    """Refuses a row whose key k (the cells of columns key) an earlier row
    had; else notes its line."""
    if k not in first:
        first[k] = row["_line"]
        return
    remedy = REPEAT_FIX.get(schema, "remove the repeated rows, or record each run in a folder of "
                                    "its own (--name)")
    what = ", ".join(f"{c} {row[c]}" for c in key[1:] if row[c] != "")
    raise InputError(f"{where(row)}: {'configuration ' if not what else ''}{row[key[0]]}"
                     f"{': ' + what if what else ''} again (first at line {first[k]}); {remedy}")


class StepRows:
    """One configuration's rows of steps.csv in file order: arrays of their
    step, rank and line, and values[col] of each other column read (floats,
    NaN where empty)."""
    __slots__ = ("step", "rank", "line", "values", "seen")

    def __init__(self, columns):
        self.step, self.rank, self.line = array.array("Q"), array.array("Q"), array.array("Q")
        self.values = {c: array.array("d") for c in columns}
        self.seen = set()  # (step, rank) codes while the file is read

    def __len__(self):
        return len(self.step)

    def where(self, path, i):
        return f"{path}:{self.line[i]}"


class Steps:
    """steps.csv held compactly (read_steps): .of {config_id: StepRows}, in
    file order; .path, .columns (the header)."""

    def __init__(self, path, columns):
        self.path, self.columns, self.of = path, columns, {}

    def __len__(self):
        return sum(len(g) for g in self.of.values())


def read_steps(path, required=()):
    """steps.csv as Steps: every cell checked as read_csv checks it, no step
    and rank of a configuration twice; of each row only config_id, step, rank
    and the other required columns are kept (a column of DEFAULTS the file
    lacks: its default in every row)."""
    header, rows = csv_rows(path, ["config_id", "step", "rank", *required], "steps.csv", FIX)
    steps = Steps(path, list(header))
    ci, si, ri = (header.index(c) for c in ("config_id", "step", "rank"))
    wanted = [c for c in required if c not in ("config_id", "step", "rank")]
    floats = [(c, header.index(c)) for c in wanted if c in header]
    fixed = [(c, float(DEFAULTS["steps.csv"][c] or "nan")) for c in wanted if c not in header]
    names = [c for c, _ in floats] + [c for c, _ in fixed]
    for line, cells in rows:
        g = steps.of.get(cells[ci])
        if g is None:
            g = steps.of[cells[ci]] = StepRows(names)
        step, rank = int(cells[si]), int(cells[ri])
        code = step << 64 | rank
        if code in g.seen:
            raise step_again(steps, cells[ci], g, step, rank, line)
        g.seen.add(code)
        g.step.append(step)
        g.rank.append(rank)
        g.line.append(line)
        for c, i in floats:
            g.values[c].append(float(cells[i]) if cells[i] else math.nan)
        for c, x in fixed:
            g.values[c].append(x)
    for g in steps.of.values():
        g.seen = None
    return steps


def step_again(steps, cid, g, step, rank, line):
    first = next(g.line[i] for i in range(len(g)) if g.step[i] == step and g.rank[i] == rank)
    return InputError(f"{steps.path}:{line}: {cid}: step {step}, rank {rank} again (first at "
                      f"line {first}); remove the repeated rows, or record each run in a folder "
                      f"of its own (--name)")


def read_folder(folder, columns, optional=()):
    """{file name: Table} for each file of a {file name: required columns}
    map (steps.csv: Steps), read in the map's order, checked against each
    other (check_runs); a file named in optional that is absent reads as None."""
    tables = {}
    for name, required in columns.items():
        path = os.path.join(folder, name)
        absent = name in optional and not os.path.lexists(path)
        if absent:
            tables[name] = None
        elif name == "steps.csv":
            tables[name] = read_steps(path, required)
        else:
            tables[name] = read_csv(path, required, SCHEMA_OF.get(name))
    if tables.get("runs.csv") is not None:
        check_runs(tables)
    return tables


def where(row):
    return f"{row['_path']}:{row['_line']}"


def number(row, col, allow_empty=False):
    """The finite float in a row's column (None for an empty cell when
    allow_empty)."""
    v = row[col]
    if v == "" and allow_empty:
        return None
    why = number_problem(v, NUMBER) if v else "is empty"
    if why:
        raise InputError(f"{where(row)}: column {col} {why}: {short(v)}; {FIX}")
    return float(v)


def strategy(run):
    """The line a run belongs to: its mode, and each mode's lean variant apart."""
    lean = run["mode"] + "-lean"
    return lean if run["config_id"].startswith(lean + "-") else run["mode"]


def accum(row):
    """A run's (or prediction's) micro-batches per optimizer step: its accum
    cell, 1 where empty or absent (no accumulation)."""
    return integer(row, "accum") if row.get("accum") else 1


def no_sync(row):
    """ddp's --no-sync, on or off (on where the file has no such column); ''
    for dp."""
    if row.get("mode") not in BUCKETED:
        return ""
    return row.get("no_sync") or "on"


def line(row):
    """The line a run (or prediction) is drawn in: its strategy, and ddp with
    --no-sync off (every micro-step all-reduced) apart, as -syncall."""
    name = strategy(row) if "config_id" in row else row["mode"]
    return name + "-syncall" if no_sync(row) == "off" else name


WHOLE_NUMBER = Kind(number=True, whole=True)


def integer(row, col):
    """The whole number in a row's column, as an int."""
    v = row[col]
    why = number_problem(v, WHOLE_NUMBER) if v else "is empty"
    if why:
        raise InputError(f"{where(row)}: column {col} {why}: {short(v)}; {FIX}")
    return int(v)


def by_config(rows):
    """{config_id: [rows]}, each list in file order."""
    out = {}
    for r in rows:
        out.setdefault(r["config_id"], []).append(r)
    return out


# ---- what the files of one folder promise each other ---------------------------

def check_runs(tables):
    """Each ok configuration of runs.csv has, where those files were read, the
    steps.csv rows it promises (one per rank and step done) and one devices.csv
    row per device, each device that takes part with an allocation peak."""
    ok = [r for r in tables["runs.csv"] if r["status"] == "ok"]
    steps, devices = tables.get("steps.csv"), tables.get("devices.csv")
    if steps is not None:
        check_steps(ok, steps)
    if devices is not None:
        check_devices(ok, devices)


def check_steps(ok, steps):
    """steps: Steps (read_steps)."""
    empty = StepRows([])
    for run in ok:
        cid, n, done = run["config_id"], integer(run, "ngpus"), integer(run, "steps_done")
        rows = steps.of.get(cid, empty)
        past = first_past(rows, n, done)
        if past is not None:
            raise InputError(f"{rows.where(steps.path, past)}: {cid}: step {rows.step[past]}, rank "
                             f"{rows.rank[past]} is past what {where(run)} says (ngpus {n}, "
                             f"steps_done {done}); {FIX}")
        if len(rows) != n * done:
            raise InputError(f"{steps.path}: {cid}: {len(rows)} rows, but {where(run)} promises "
                             f"{n * done} ({n} rank(s) x steps_done {done}): the file was cut "
                             f"short or edited; {FIX}")


def first_past(rows, n, done):
    """The index of a configuration's first steps.csv row past its n ranks or
    its steps done, or None."""
    if not rows or (max(rows.rank) < n and max(rows.step) < done):
        return None
    return next(i for i in range(len(rows)) if rows.rank[i] >= n or rows.step[i] >= done)


def check_devices(ok, devices):
    mine = by_config(devices)
    for run in ok:
        cid, n = run["config_id"], integer(run, "ngpus")
        rows = mine.get(cid, [])
        for d in rows:
            dev = integer(d, "device")
            if dev >= n:
                raise InputError(f"{where(d)}: {cid}: device {dev} is past what {where(run)} says "
                                 f"(ngpus {n}); {FIX}")
            if "alloc_peak_bytes" in d and dev < devices_used(run) and \
                    integer(d, "alloc_peak_bytes") == 0:
                raise InputError(f"{where(d)}: column alloc_peak_bytes is 0, but device {dev} of "
                                 f"{cid} (status ok) takes part and holds its model; {FIX}")
        if len(rows) != n:
            raise InputError(f"{devices.path}: {cid}: {len(rows)} rows, but {where(run)} "
                             f"promises one per device (ngpus {n}); {FIX}")


def devices_used(run):
    """How many of a configuration's devices take part: dp splits the batch as
    torch.chunk does (chunks of ceil(B / n)), so devices past the last chunk
    stay idle; ddp's ranks all hold the model."""
    n = integer(run, "ngpus")
    if run["mode"] != "dp" or "global_batch" not in run:
        return n
    batch = integer(run, "global_batch")
    return -(-batch // -(-batch // n))


# ---- meta.json ------------------------------------------------------------------

def read_meta(folder, required=(), missing_ok=False):
    """A folder's meta.json as a dict with the required keys, each key of
    META_TYPES of its type; {} when it has none and missing_ok."""
    path = os.path.join(folder, "meta.json")
    if missing_ok and not os.path.lexists(path):
        return {}
    try:
        meta = json.loads(read_text(path))
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: not JSON: {e}; {FIX}") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: not a JSON object; {FIX}")
    missing = [k for k in required if k not in meta]
    if missing:
        raise InputError(f"{path}: missing key(s) {', '.join(missing)}; {FIX}")
    check_meta(path, meta)
    return meta


JSON_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "true or false",
              int: "a number", float: "a number", type(None): "null"}


def check_type(path, what, value, want):
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        wanted = " or ".join(JSON_NAMES[t] for t in (want if isinstance(want, tuple) else (want,)))
        raise InputError(f"{path}: {what} is {JSON_NAMES[type(value)]}, not {wanted}; {FIX}")


def check_meta(path, meta):
    for key, want in META_TYPES.items():
        if key in meta:
            check_type(path, key, meta[key], want)
    for i, dev in enumerate(meta.get("devices", [])):
        check_type(path, f"devices[{i}]", dev, dict)
        for key, want in DEVICE_TYPES.items():
            if key in dev:
                check_type(path, f"devices[{i}].{key}", dev[key], want)
    for key, value in meta.get("versions", {}).items():
        check_type(path, f"versions.{key}", value, str)
    for key, want in TF32_TYPES.items():
        if "tf32" in meta:
            if key not in meta["tf32"]:
                raise InputError(f"{path}: tf32 has no {key}; {FIX}")
            check_type(path, f"tf32.{key}", meta["tf32"][key], want)
    if "tf32" in meta and meta["tf32"]["mode"] not in TF32_MODES:
        raise InputError(f"{path}: tf32.mode is {meta['tf32']['mode']!r}, not one of "
                         f"{', '.join(TF32_MODES)}; {FIX}")


def versions(meta):
    """{field: version} of a meta.json for each of VERSIONS: its own fields,
    or in a folder written before they existed, read from the one-line forms
    ("cuda", or "backend" on the cuda backend; "backend" names the BLAS of
    any other)."""
    v = meta.get("versions") or {}
    if "driver" in v:
        return {k: v.get(k, "") for k in VERSIONS}
    out = dict.fromkeys(VERSIONS, "")
    out["nccl_build"] = v.get("nccl_build", "")
    backend = v.get("backend", "")
    cuda = OLD_CUDA_LINE.match(v.get("cuda", "") or backend)
    if cuda:
        out.update(zip(["driver", "runtime", "cublas", "nccl"], cuda.groups()))
    if not OLD_CUDA_LINE.match(backend):
        out["blas"] = backend
    return out


# ---- dpscale predict's predictions.csv ------------------------------------------

# The figures of a prediction: every column from step_ms on.
# bucket_mb, the last, is the bucketed strategies' alone (empty for dp's rows).
PREDICTED_FIGURES = COLUMNS["predictions.csv"][COLUMNS["predictions.csv"].index("step_ms"):
                                               COLUMNS["predictions.csv"].index("bucket_mb")]


def read_predictions(path):
    """The Table of a predictions.csv that `dpscale predict` wrote (any file
    name): every column of SCHEMA's, each cell of its kind, no machine,
    workload, source, mode and GPU count twice, and the figures (step_ms on)
    filled in where status is ok or oom, empty where it is skipped."""
    table = read_csv(path, COLUMNS["predictions.csv"], schema="predictions.csv", fix=PREDICT_FIX)
    for row in table:
        skipped = row["status"] == "skipped"
        for col in PREDICTED_FIGURES:
            if (row[col] == "") != skipped:
                what = f"holds {short(row[col])}" if skipped else "is empty"
                raise InputError(f"{where(row)}: column {col} {what}, but status is "
                                 f"{row['status']} (a skipped prediction has no figures, any "
                                 f"other has them all); {PREDICT_FIX}")
    return table
