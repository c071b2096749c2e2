#!/usr/bin/env python3
"""dpstools.sdpa's attention (PyTorch's fused one where it has it) and its
stand-in, on tiny float64 tensors, against softmax(q·kᵀ/√d)·v written out
here (exp over the row's sum, the causal mask as -inf above the diagonal).
forward: random q, k, v (causal and not) match it within 1e-12; q = 0
gives each row the mean of v's rows (of rows 0..i when causal). backward:
q, k and v's gradients from a random output gradient match autograd's
through the written-out maths within 1e-10, and the stand-in passes
gradcheck. limits: one token returns v itself; the stand-in keeps q, k,
v, its output and each row's log-sum-exp for backward, never the t x t
probabilities, and returns [batch, heads, t, d] over [batch, t, heads, d]
memory; without PyTorch's fused attention an attn_mask or a dropout_p is
refused (ValueError).
Usage: test_dpstools_sdpa.py - CASE; exit 0 pass, 1 fail, 77 skip (no PyTorch)."""
from listing import exit_if_listing, test

TESTS = [test(f"dpstools sdpa {c}", "-", c, suite="torch", timeout=300)
         for c in ("forward", "backward", "limits")]
if __name__ == "__main__":
    exit_if_listing(TESTS)  # --list: before the imports below

import math

from helpers import expect, need_torch, run_cases


def reference(q, k, v, causal):
    """softmax(q·kᵀ/√d)·v, the softmax as exp(s - max) over its row's sum."""
    import torch
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t, u = s.shape[-2], s.shape[-1]
        above = torch.tensor([[j > i for j in range(u)] for i in range(t)])
        s = s.masked_fill(above, float("-inf"))
    e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
    return (e / e.sum(dim=-1, keepdim=True)) @ v


def attentions():
    """{name: f(q, k, v, causal)}: the module's call and its stand-in."""
    from dpstools import sdpa
    return {"scaled_dot_product_attention":
            lambda q, k, v, c: sdpa.scaled_dot_product_attention(q, k, v, is_causal=c),
            "the stand-in": lambda q, k, v, c: sdpa._Attention.apply(q, k, v, c)}


def qkv(seed, shape=(2, 3, 5, 4), grad=False):
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)
            for _ in range(3)]


def max_diff(a, b):
    return float((a - b).abs().max())


def case_forward(_):
    if need_torch():
        return 77
    import torch
    for name, attn in attentions().items():
        for causal in (False, True):
            q, k, v = qkv(1 + causal)
            err = max_diff(attn(q, k, v, causal), reference(q, k, v, causal))
            expect(err < 1e-12, f"{name}, causal {causal}: differs from softmax(q·kᵀ/√d)·v by "
                                f"{err:.3g}")
        _, _, v = qkv(3)
        zero = torch.zeros_like(v)
        means = v.mean(dim=-2, keepdim=True).expand_as(v)
        err = max_diff(attn(zero, zero, v, False), means)
        expect(err < 1e-12, f"{name}: q = 0 should give every row v's mean (off by {err:.3g})")
        prefix = torch.stack([v[..., :i + 1, :].mean(dim=-2) for i in range(v.shape[-2])], -2)
        err = max_diff(attn(zero, zero, v, True), prefix)
        expect(err < 1e-12, f"{name}: q = 0, causal, should give row i the mean of v's rows "
                            f"0..i (off by {err:.3g})")


def case_backward(_):
    if need_torch():
        return 77
    import torch
    for name, attn in attentions().items():
        for causal in (False, True):
            q, k, v = qkv(4 + causal, grad=True)
            dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(9),
                               dtype=torch.float64)
            got = torch.autograd.grad(attn(q, k, v, causal), (q, k, v), dout)
            want = torch.autograd.grad(reference(q, k, v, causal), (q, k, v), dout)
            for x, a, b in zip("qkv", got, want):
                err = max_diff(a, b)
                expect(err < 1e-10, f"{name}, causal {causal}: d{x} differs from autograd's "
                                    f"through the written-out maths by {err:.3g}")
    from dpstools import sdpa
    for causal in (False, True):
        q, k, v = qkv(6, shape=(1, 2, 3, 2), grad=True)
        stand_in = lambda a, b, c: sdpa._Attention.apply(a, b, c, causal)  # noqa: E731
        expect(torch.autograd.gradcheck(stand_in, (q, k, v)),
               f"the stand-in fails gradcheck, causal {causal}")


def case_limits(_):
    if need_torch():
        return 77
    import torch
    from dpstools import sdpa
    for name, attn in attentions().items():
        q, k, v = qkv(7, shape=(2, 3, 1, 4))
        for causal in (False, True):
            err = max_diff(attn(q, k, v, causal), v)
            expect(err < 1e-12, f"{name}: one token should return v itself (off by {err:.3g})")
    b, h, t, d = 2, 3, 5, 4
    q, k, v = qkv(8, shape=(b, h, t, d), grad=True)
    out = sdpa._Attention.apply(q, k, v, True)
    saved = [tuple(x.shape) for x in out.grad_fn.saved_tensors]
    expect(saved == [(b, h, t, d)] * 4 + [(b, h, t)],
           f"the stand-in saves tensors of shapes {saved}: expected q, k, v, the output "
           f"{(b, h, t, d)} and the log-sum-exp {(b, h, t)}, no {t} x {t} probabilities")
    lse = out.grad_fn.saved_tensors[4]
    s = q.detach() @ k.detach().transpose(-2, -1) / math.sqrt(d)
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.log(torch.exp(s).sum(dim=-1))
    expect(max_diff(lse, want) < 1e-12, "the saved log-sum-exp is not log(sum(exp(scores)))")
    expect(tuple(out.shape) == (b, h, t, d) and out.transpose(1, 2).is_contiguous(),
           f"the stand-in's output {tuple(out.shape)}, strides {out.stride()}: expected "
           f"{(b, h, t, d)} over [batch, t, heads, d] memory")
    if getattr(torch.nn.functional, "scaled_dot_product_attention", None) is None:
        for kw in ({"attn_mask": torch.zeros(t, t, dtype=torch.float64)}, {"dropout_p": 0.1}):
            try:
                sdpa.scaled_dot_product_attention(q, k, v, **kw)
            except ValueError:
                continue
            expect(False, f"{kw} was taken without PyTorch's fused attention")


if __name__ == "__main__":
    run_cases(globals())
