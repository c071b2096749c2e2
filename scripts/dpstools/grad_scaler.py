"""GradScaler's loss scale as a pure function: each step's scale and whether it is skipped.

GradScaler keeps a float32 scale and an int growth tracker; each step's
backward is of loss * scale, and update() after the step applies ATen's
amp_update_scale_cuda_kernel (aten/src/ATen/native/cuda/AmpKernels.cu,
PyTorch 1.13): on inf/NaN in the unscaled gradients the step is skipped,
scale *= backoff_factor and the tracker is 0; else tracker += 1 and, when it
reaches growth_interval, scale *= growth_factor (kept unless that is inf:
"do not grow the scale past fp32 bounds") and the tracker is 0. Each product
is formed in double and narrowed to float32, as the kernel's. dpscale's
fp16 runs follow the same rules (its --init-scale, --growth-interval), so
steps.csv's loss_scale and skipped columns can be checked against
scale_sequence. Standard library and numpy only.
"""
import math

import numpy as np

# GradScaler's defaults (dpscale's --init-scale and --growth-interval defaults too)
INIT_SCALE = 65536.0
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000


def f32(x):
    """x rounded to float32, as a C float assignment (inf beyond its range)."""
    with np.errstate(over="ignore"):
        return float(np.float32(x))


def update(scale, tracker, found_inf, growth_factor=GROWTH_FACTOR,
           backoff_factor=BACKOFF_FACTOR, growth_interval=GROWTH_INTERVAL):
    """One GradScaler.update(): (new scale, new growth tracker) after a step
    whose gradients held inf/NaN (found_inf) or not."""
    if found_inf:
        return f32(scale * backoff_factor), 0
    tracker += 1
    if tracker == growth_interval:
        grown = f32(scale * growth_factor)
        return (grown if math.isfinite(grown) else scale), 0
    return scale, tracker


def check_args(steps, init_scale, growth_factor, backoff_factor, growth_interval):
    """ValueError naming the argument GradScaler would refuse or misuse."""
    if steps < 0:
        raise ValueError(f"grad_scaler: steps {steps}: give 0 or more")
    if not (math.isfinite(init_scale) and f32(init_scale) > 0):
        raise ValueError(f"grad_scaler: init_scale {init_scale}: give a finite float32 above 0")
    if not growth_factor > 1.0:
        raise ValueError(f"grad_scaler: growth_factor {growth_factor}: GradScaler wants > 1.0")
    if not 0.0 < backoff_factor < 1.0:
        raise ValueError(f"grad_scaler: backoff_factor {backoff_factor}: GradScaler wants "
                         f"a value in (0, 1)")
    if int(growth_interval) != growth_interval or growth_interval < 1:
        raise ValueError(f"grad_scaler: growth_interval {growth_interval}: give a whole "
                         f"number of steps, at least 1")


def scale_sequence(steps, overflow_steps=(), init_scale=INIT_SCALE, growth_factor=GROWTH_FACTOR,
                   backoff_factor=BACKOFF_FACTOR, growth_interval=GROWTH_INTERVAL):
    """[(scale used, skipped)] for optimizer steps 0 .. steps-1 (warm-up
    included: the scaler runs through it), the gradients of the steps in
    overflow_steps holding inf/NaN and no others'."""
    check_args(steps, init_scale, growth_factor, backoff_factor, growth_interval)
    overflow = set(overflow_steps)
    scale, tracker, out = f32(init_scale), 0, []
    for s in range(steps):
        found = s in overflow
        out.append((scale, found))
        scale, tracker = update(scale, tracker, found, growth_factor, backoff_factor,
                                growth_interval)
    return out
