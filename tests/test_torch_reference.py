#!/usr/bin/env python3
"""scripts/torch_reference.py reproduces dpscale's initialisation and data
bit for bit (numpy only; PyTorch is needed just to train). Exit 77 (skip)
without numpy."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))
try:
    import numpy as np
    import torch_reference as tr
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def main(dpscale):
    fails = []
    # golden values, as asserted for the C generator in tests/test_unit.c
    got = tr.uniform(1234, 1, [0, 7919])
    if not (got[0] == np.float32(-0.651825905) and got[1] == np.float32(0.878929496)):
        fails.append(f"uniform(1234, 1, ...) = {got}")
    if tr.uniform(42, 2 + (5 << 8), [123456789])[0] != np.float32(0.278357625):
        fails.append("uniform(42, ...) differs")
    # presets come from dpscale itself; the parameter count agrees with its own
    table = tr.presets(dpscale)
    if table.get("tiny") != (2, 64, 4, 16, 8) or tr.param_count(*table["tiny"][:4]) != 9360:
        fails.append(f"presets: {table.get('tiny')}")
    # initialisation bound and labels as model_init_params / model_make_batch
    p = tr.init_params(table["tiny"][:4], 1234)
    if len(p) != 9360 or not (np.abs(p) <= 1 / 8).all() or p[0] != np.float32(-0.651825905 / 8):
        fails.append(f"init_params: {p[:3]}")
    x, y = tr.make_batch(table["tiny"][:4], 1234, 0, 8)
    if x.shape != (8, 64) or (y != np.argmax(x[:, :16], axis=1)).any():
        fails.append("make_batch")
    for f in fails:
        print("FAIL", f, file=sys.stderr)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
