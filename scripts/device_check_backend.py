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
"""
import csv
import os
import sys


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
    path = os.path.join(folder, "devices.csv")
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        return [(name, f"cannot read {path}: {e.strerror}", goal, "FAIL")]
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


def main(argv):
    kinds = {"same-bits": (same_bits, 3), "nvml-pcie": (nvml_pcie, 3)}
    if len(argv) < 2 or argv[1] not in kinds or len(argv) != 2 + kinds[argv[1]][1]:
        sys.stderr.write(__doc__)
        return 2
    fn = kinds[argv[1]][0]
    for fig in fn(*argv[2:]):
        print("\t".join(str(x).replace("\t", " ") for x in fig))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
