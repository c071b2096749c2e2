#!/usr/bin/env python3
"""scripts/torch_reference.py reproduces dpscale's initialisation and data
bit for bit (numpy only; PyTorch is needed just to train). Exit 77 (skip)
without numpy."""
import sys

from helpers import expect, run_case

try:
    import numpy as np
    import torch_reference as tr  # scripts/: helpers puts it on sys.path
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)


def case_generator(dpscale):
    # golden values, as asserted for the C generator in tests/test_unit.c
    got = tr.uniform(1234, 1, [0, 7919])
    expect(got[0] == np.float32(-0.651825905) and got[1] == np.float32(0.878929496),
           f"uniform(1234, 1, ...) = {got}")
    expect(tr.uniform(42, 2 + (5 << 8), [123456789])[0] == np.float32(0.278357625),
           "uniform(42, ...) differs")
    # presets come from dpscale itself; the parameter count agrees with its own
    table = tr.presets(dpscale)
    expect(table.get("tiny") == (2, 64, 4, 16, 8) and tr.param_count(*table["tiny"][:4]) == 9360,
           f"presets: {table.get('tiny')}")
    # initialisation bound and labels as model_init_params / model_make_batch
    p = tr.init_params(table["tiny"][:4], 1234)
    expect(len(p) == 9360 and (np.abs(p) <= 1 / 8).all() and p[0] == np.float32(-0.651825905 / 8),
           f"init_params: {p[:3]}")
    x, y = tr.make_batch(table["tiny"][:4], 1234, 0, 8)
    expect(x.shape == (8, 64) and (y == np.argmax(x[:, :16], axis=1)).all(), "make_batch")


if __name__ == "__main__":
    sys.exit(run_case("torch_reference generator", case_generator, sys.argv[1]))
