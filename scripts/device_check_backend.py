#!/usr/bin/env python3
"""Figures of the CUDA backend's own checks for scripts/device-check.sh, one
a line as NAME<TAB>VALUE<TAB>GOAL<TAB>RESULT.

  same-bits NAME FILE_A FILE_B   two --save-params files of one configuration
                                 run twice: equal bytes (the bias gradients'
                                 fixed summation order, deterministic GEMMs)
  nvml-pcie NAME FOLDER BACKEND  NVML's PCIe bytes in FOLDER's devices.csv (a
                                 sweep's configurations, each NVML initialised
                                 in its own process) against the host-to-device
                                 bytes dpscale counted; SKIP off the cuda backend
  nvml-read FILE                 NVML's cumulative PCIe TX and RX byte counters of
                                 GPU 0 (NVML's index: run CUDA with
                                 CUDA_DEVICE_ORDER=PCI_BUS_ID to match) into FILE
                                 as "tx rx bits", or the reason they cannot be read
  nvml-links NAME FOLDER STEPS BEFORE AFTER
                                 the counters' growth over a `dpscale links` run
                                 (FOLDER/links.csv, --steps STEPS) against the
                                 bytes its copies moved: RX >= the h2d bytes, TX >= the d2h bytes
                                 (each path's copies: bytes x steps, at least)
  gpu-tests NAME BUILD PYTHON LOG
                                 the build's GPU tests (meson suite gpu and the
                                 unit group cuda_ops), each run as meson would
                                 (its command from `meson introspect --tests`,
                                 in BUILD) but with PYTHON for the Python ones:
                                 none failed, one ran at least; their output in LOG
"""
import csv
import ctypes
import json
import os
import subprocess
import sys

from dpstools.figures import figure_line

FI_PCIE_TX, FI_PCIE_RX = 197, 198  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES, _RX_BYTES


class FieldValue(ctypes.Structure):
    """nvmlFieldValue_t."""
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint),
                ("timestamp", ctypes.c_longlong), ("latencyUsec", ctypes.c_longlong),
                ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


def nvml_counters():
    """(tx, rx, bits) of GPU 0's PCIe byte counters; raises OSError with the reason."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        raise OSError(f"no NVML ({e})") from None
    if lib.nvmlInit_v2() != 0:
        raise OSError("nvmlInit_v2 failed")
    dev = ctypes.c_void_p()
    if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) != 0:
        raise OSError("NVML has no device 0")
    f = (FieldValue * 2)()
    f[0].fieldId, f[1].fieldId = FI_PCIE_TX, FI_PCIE_RX
    rc = lib.nvmlDeviceGetFieldValues(dev, 2, f)
    if rc != 0 or f[0].nvmlReturn != 0 or f[1].nvmlReturn != 0:
        raise OSError(f"nvmlDeviceGetFieldValues: {rc}, fields {f[0].nvmlReturn} "
                      f"{f[1].nvmlReturn} (drivers before R550 lack the PCIe byte counters)")
    bits = 32 if f[0].valueType in (1, 5) else 64  # unsigned int, signed int: 32 bits
    mask = (1 << bits) - 1
    return f[0].value & mask, f[1].value & mask, bits


def nvml_read(path):
    try:
        tx, rx, bits = nvml_counters()
        text = f"{tx} {rx} {bits}\n"
    except OSError as e:
        text = f"error {e}\n"
    with open(path, "w") as f:
        f.write(text)
    return []


def read_counters(path):
    try:
        with open(path) as f:
            words = f.read().split()
    except OSError as e:
        raise OSError(f"cannot read {path}: {e.strerror}") from None
    if len(words) != 3 or words[0] == "error":
        raise OSError(f"{path}: {' '.join(words) or 'empty'}")
    return [int(w) for w in words]


def csv_rows(path):
    """(the rows of a CSV file, None), or ([], why it cannot be read)."""
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f)), None
    except OSError as e:
        return [], f"cannot read {path}: {e.strerror}"


def nvml_links(name, folder, steps, before, after):
    goal = "NVML RX >= h2d bytes and TX >= d2h bytes copied"
    try:
        tx0, rx0, bits = read_counters(before)
        tx1, rx1, _ = read_counters(after)
    except (OSError, ValueError) as e:
        return [(name, f"no NVML counters: {e}", goal, "FAIL")]
    rows, failed = csv_rows(os.path.join(folder, "links.csv"))
    if failed:
        return [(name, failed, goal, "FAIL")]
    steps = int(steps)
    moved = {"h2d": 0, "d2h": 0}
    for r in rows:
        if r.get("method") in moved and r.get("status") == "ok" and r.get("bytes", "").isdigit():
            moved[r["method"]] += int(r["bytes"]) * steps
    mod = 1 << bits
    rx, tx = (rx1 - rx0) % mod, (tx1 - tx0) % mod
    if not steps or not moved["h2d"] or not moved["d2h"]:
        return [(name, f"links.csv in {folder} has no ok h2d and d2h rows, or the steps are "
                       f"not above 0", goal, "FAIL")]
    ok = rx >= moved["h2d"] and tx >= moved["d2h"]
    value = (f"RX {rx / 1e9:.3f} GB for h2d {moved['h2d'] / 1e9:.3f} GB ({rx / moved['h2d']:.2f}x), "
             f"TX {tx / 1e9:.3f} GB for d2h {moved['d2h'] / 1e9:.3f} GB "
             f"({tx / moved['d2h']:.2f}x)")
    if not ok:
        value += ("; NVML counted fewer bytes than the copies moved: NVML's device 0 may not be "
                  "CUDA's (CUDA_DEVICE_ORDER=PCI_BUS_ID), or a counter wrapped")
    return [(name, value, goal, "PASS" if ok else "FAIL")]


def same_bits(name, a, b):
    for p in (a, b):
        if not os.path.isfile(p):
            return [(name, f"{p} missing", "equal bytes", "FAIL")]
    with open(a, "rb") as fa, open(b, "rb") as fb:
        da, db = fa.read(), fb.read()
    if da == db:
        return [(name, f"equal ({len(da)} bytes)", "equal bytes", "PASS")]
    first = next((i for i, (x, y) in enumerate(zip(da, db)) if x != y), min(len(da), len(db)))
    return [(name, f"differ from byte {first} ({len(da)} vs {len(db)} bytes)", "equal bytes", "FAIL")]


def nvml_pcie(name, folder, backend):
    goal = "every GPU's nvml_pcie_rx_bytes >= its counted h2d bytes"
    if backend != "cuda":
        return [(name, f"backend {backend}: no NVML", goal, "SKIP")]
    rows, failed = csv_rows(os.path.join(folder, "devices.csv"))
    if failed:
        return [(name, failed, goal, "FAIL")]
    steps = {}
    try:
        with open(os.path.join(folder, "runs.csv"), newline="") as f:
            for r in csv.DictReader(f):
                steps[r["config_id"]] = int(r.get("warmup") or 0) + int(r.get("steps") or 0)
    except (OSError, ValueError, KeyError):
        pass
    empty = [r for r in rows if not r.get("nvml_pcie_rx_bytes")]
    if not rows or empty:
        return [(name, f"{len(empty)} of {len(rows)} GPU rows without NVML PCIe bytes", goal, "FAIL")]
    low = []
    for r in rows:
        counted = float(r.get("h2d_bytes_per_step") or 0) * steps.get(r["config_id"], 0)
        rx = float(r["nvml_pcie_rx_bytes"])
        if rx < counted:
            low.append(f"{r['config_id']}: {rx / 1e9:.3f} GB < {counted / 1e9:.3f} GB")
    rx_all = sum(float(r["nvml_pcie_rx_bytes"]) for r in rows)
    value = f"{len(rows)} GPU rows, RX {rx_all / 1e9:.3f} GB" + (f"; {'; '.join(low)}" if low else "")
    return [(name, value, goal, "FAIL" if low else "PASS")]


def gpu_test_commands(build, python):
    """(name, argv, env) of BUILD's GPU tests, Python ones under PYTHON."""
    listed = subprocess.run(["meson", "introspect", "--tests", build], capture_output=True,
                            text=True, timeout=120)
    if listed.returncode != 0:
        raise RuntimeError(f"meson introspect --tests {build}: {listed.stderr.strip()}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = []
    for t in json.loads(listed.stdout):
        if "dpscale:gpu" not in t["suite"] and t["name"] != "unit cuda_ops":
            continue
        cmd = list(t["cmd"])
        if cmd and os.path.basename(cmd[0]).startswith("python"):
            cmd[0] = python
        env = dict(os.environ, **t.get("env", {}), DPSCALE_PYTHON=python,
                   PYTHONPATH=os.path.join(root, "scripts"))
        out.append((t["name"], cmd, env))
    return out


def gpu_tests(name, build, python, log):
    goal = "none fails, one runs at least"
    try:
        tests = gpu_test_commands(build, python)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
        return [(name, f"no list of tests: {e}", goal, "FAIL")]
    ran, skipped, failed = 0, 0, []
    with open(log, "w") as f:
        for test, cmd, env in tests:
            try:
                p = subprocess.run(cmd, cwd=build, env=env, capture_output=True, text=True,
                                   timeout=300)
                rc, text = p.returncode, p.stdout + p.stderr
            except subprocess.TimeoutExpired as e:
                rc, text = "timeout (300 s)", str(e)
            f.write(f"== {test}: exit {rc}\n{text}\n")
            if rc == 77:
                skipped += 1
            elif rc == 0:
                ran += 1
            else:
                failed.append(f"{test} ({rc})")
    value = f"{ran} passed, {skipped} skipped, {len(failed)} failed" + \
        (f": {', '.join(failed)}" if failed else "")
    return [(name, value, goal, "FAIL" if failed or not ran else "PASS")]


def main(argv):
    kinds = {"same-bits": (same_bits, 3), "nvml-pcie": (nvml_pcie, 3), "nvml-read": (nvml_read, 1),
             "nvml-links": (nvml_links, 5), "gpu-tests": (gpu_tests, 4)}
    if len(argv) < 2 or argv[1] not in kinds or len(argv) != 2 + kinds[argv[1]][1]:
        sys.stderr.write(__doc__)
        return 2
    fn = kinds[argv[1]][0]
    for fig in fn(*argv[2:]):
        print(figure_line(*fig))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
