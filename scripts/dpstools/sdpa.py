"""scaled_dot_product_attention on any PyTorch: F.scaled_dot_product_attention
where PyTorch has it (2.0 on), else the same maths as an autograd function
that saves what PyTorch's flash and memory-efficient kernels save (q, k, v,
the output and each row's log-sum-exp, never the t x t probabilities) and
returns its output as they do, [batch, heads, t, d] over [batch, t, heads,
d] memory (so that `.transpose(1, 2).contiguous()` is a view).

A module that calls it through a name of its own module made a leaf of
torch.fx's trace (`torch.fx.wrap("scaled_dot_product_attention")` there, as
dpstools.reference_models does) is exported by scripts/model_export.py as
an attn op, as F.scaled_dot_product_attention is."""
import math

import torch


class _Attention(torch.autograd.Function):
    """softmax(q·kᵀ/√d, masked when causal)·v, backward from the log-sum-exp."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        with torch.no_grad():
            scores = _scores(q, k, causal)
            lse = torch.logsumexp(scores, dim=-1)
            b, h, t, d = q.shape
            out = torch.empty(b, t, h, v.shape[-1], dtype=q.dtype, device=q.device).transpose(1, 2)
            torch.matmul(torch.exp(scores - lse.unsqueeze(-1)), v, out=out)
        ctx.causal = causal
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        scale = 1.0 / math.sqrt(q.shape[-1])
        p = torch.exp(_scores(q, k, ctx.causal) - lse.unsqueeze(-1))
        dv = p.transpose(-2, -1) @ g
        dp = g @ v.transpose(-2, -1)
        ds = p * (dp - (g * out).sum(dim=-1, keepdim=True))
        return ds @ k * scale, ds.transpose(-2, -1) @ q * scale, dv, None


def _scores(q, k, causal):
    s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, k.shape[-2], dtype=torch.bool, device=q.device).triu(1),
                          float("-inf"))
    return s


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False):
    """F.scaled_dot_product_attention's call; without it, no mask and no dropout."""
    fused = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    if fused is not None:
        return fused(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                     is_causal=is_causal)
    if attn_mask is not None or dropout_p:
        raise ValueError("dpstools.sdpa: this PyTorch has no F.scaled_dot_product_attention, and "
                         "its stand-in takes no attn_mask and no dropout_p; use is_causal")
    return _Attention.apply(query, key, value, bool(is_causal))
