"""A small results folder a test writes from a few numbers, so that what
scripts/dpstools reads from it has answers known by hand: runs.csv,
steps.csv, devices.csv, phases.csv and meta.json of the configurations
given (run), and memory.csv, buckets.csv and links.csv where rows are
given. Only the columns the readers use are written (dpstools.folder.Folder
demands no others). Standard library only."""
import csv
import json
import os
from statistics import median

RUNS = ["config_id", "status", "error", "backend", "mode", "ngpus", "model", "precision",
        "optimizer", "params", "global_batch", "batch_per_gpu", "scaling", "bucket_mb", "accum",
        "no_sync", "skipped_steps", "steps", "steps_done", "step_ms_median", "samples_per_s"]
STEPS = ["config_id", "step", "rank", "step_ms", "skipped"]
PHASES = ["config_id", "device", "phase", "median_ms", "bytes_per_step", "achieved_gbps"]
MEMORY = ["config_id", "device", "category", "kind", "bytes_at_peak"]
BUCKETS = ["config_id", "rank", "bucket", "micro_step", "bytes", "ready_ms",
           "allreduce_begin_ms", "allreduce_ms", "traced_steps", "collective", "phase"]
LINKS = ["src", "dst", "method", "bytes", "bw_gbps", "status"]
META = {"backend": "host", "emulated": True, "devices": [{"name": "emulated device on a test CPU"}]}
MiB = 1 << 20


def num(x):
    """A number as dpscale writes it: at most 6 decimals, no trailing zeros."""
    if isinstance(x, str):
        return x
    return f"{x:.6f}".rstrip("0").rstrip(".")


def run(config_id, n, times, batch=16, status="ok", peaks=None, phases=None, **cells):
    """One configuration of n devices (its mode: config_id's first word): times,
    its step times, one a step, on every rank's row; batch, its global batch
    (samples/s: batch over the median step); peaks, each device's allocation
    peak (1 MiB each unless given); phases, {device: {phase: median ms, or
    {column: value} of phases.csv's median_ms, bytes_per_step, achieved_gbps}};
    cells, runs.csv's other cells (model m, fp32, sgd, weak scaling, 1000
    parameters, the global batch over n a device, unless given). A run not ok
    has no steps (times: [])."""
    step = median(times) if times else None
    row = {"config_id": config_id, "status": status, "error": "", "backend": "host",
           "mode": config_id.split("-")[0], "ngpus": n, "model": "m", "precision": "fp32",
           "optimizer": "sgd", "params": 1000, "global_batch": batch,
           "batch_per_gpu": max(batch // n, 1), "scaling": "weak",
           "bucket_mb": "", "accum": "", "no_sync": "", "skipped_steps": "",
           "steps": max(len(times), 1), "steps_done": len(times),
           "step_ms_median": "" if step is None else step,
           "samples_per_s": "" if step is None else batch / step * 1e3, **cells}
    return {"row": row, "times": times, "peaks": peaks or [MiB] * n, "phases": phases or {}}


def write_rows(path, cols, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(cols)
        w.writerows([num(r.get(c, "")) for c in cols] for r in rows)


def write_folder(path, runs, memory=(), buckets=(), links=(), meta=None):
    """Writes the folder at path: the configurations runs (each of run()),
    memory.csv, buckets.csv and links.csv of the rows given (dicts by
    column), meta.json (META unless given); returns path."""
    os.makedirs(path)
    write_rows(os.path.join(path, "runs.csv"), RUNS, [r["row"] for r in runs])
    steps, devices, phases = [], [], []
    for r in runs:
        cid, n = r["row"]["config_id"], r["row"]["ngpus"]
        for s, t in enumerate(r["times"]):
            steps += [{"config_id": cid, "step": s, "rank": k, "step_ms": t, "skipped": 0}
                      for k in range(n)]
        if r["row"]["status"] == "ok":
            devices += [{"config_id": cid, "device": d, "alloc_peak_bytes": p}
                        for d, p in enumerate(r["peaks"])]
        phases += [{"config_id": cid, "device": d, "phase": ph,
                    **(ms if isinstance(ms, dict) else {"median_ms": ms})}
                   for d, by in sorted(r["phases"].items()) for ph, ms in by.items()]
    write_rows(os.path.join(path, "steps.csv"), STEPS, steps)
    write_rows(os.path.join(path, "devices.csv"), ["config_id", "device", "alloc_peak_bytes"],
               devices)
    write_rows(os.path.join(path, "phases.csv"), PHASES, phases)
    for name, cols, rows in (("memory.csv", MEMORY, memory), ("buckets.csv", BUCKETS, buckets),
                             ("links.csv", LINKS, links)):
        if rows:
            write_rows(os.path.join(path, name), cols, rows)
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(META if meta is None else meta, f)
    return path
