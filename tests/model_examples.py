"""A user's own module as model_export.py meets one: parameters of its own
read through torch.nn.functional (F.embedding, F.linear, F.layer_norm),
nn.MultiheadAttention for self-attention, a residual; for the model file
tests (tests/test_model_file.py)."""
import torch
from torch import nn
from torch.nn import functional as F


class Tagger(nn.Module):
    """Token tagging: an embedding table, one attention block, a classifier."""

    def __init__(self, vocab=8000, tokens=16, d=64, heads=4, tags=32):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.norm_weight = nn.Parameter(torch.ones(d))
        self.norm_bias = nn.Parameter(torch.zeros(d))
        self.out_weight = nn.Parameter(torch.randn(tags, d) * 0.02)
        self.out_bias = nn.Parameter(torch.zeros(tags))
        self.d = d

    def forward(self, idx):
        x = F.embedding(idx, self.table)
        y = self.attn(x, x, x, need_weights=False)[0]
        x = F.layer_norm(x + y, (self.d,), self.norm_weight, self.norm_bias)
        return F.linear(x, self.out_weight, self.out_bias)


def tagger():
    return Tagger()
