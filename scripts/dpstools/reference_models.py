"""Plain-PyTorch definitions of GPT-2 small and BERT-large, the transformer
presets' sources (bench/models/): GPT-2 as its paper's code writes it (tied
embeddings, 124,439,808 parameters), BERT-large as nn.TransformerEncoderLayer
blocks with a masked-LM head (tied decoder).

Each takes attn_implementation, as transformers' models do: "sdpa" (the
default) runs attention as scaled_dot_product_attention
(dpstools.sdpa: PyTorch's where it has one), which scripts/model_export.py
exports as an attn op; "eager" as explicit matmuls and a softmax, which it
exports as gemm and act ops."""
import math

import torch
from torch import nn
from torch.nn import functional as F

from dpstools.sdpa import scaled_dot_product_attention

torch.fx.wrap("scaled_dot_product_attention")  # a leaf of the exporter's trace
IMPLEMENTATIONS = ("sdpa", "eager")


def implementation(name):
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation={name!r}: expected one of {IMPLEMENTATIONS}")
    return name


class Attention(nn.Module):
    """GPT-2's causal self-attention."""

    def __init__(self, d, heads, tokens, attn_implementation="sdpa"):
        super().__init__()
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.heads, self.d = heads, d
        self.attn_implementation = implementation(attn_implementation)
        if self.attn_implementation == "eager":
            self.register_buffer("mask", torch.tril(torch.ones(tokens, tokens)).view(1, 1, tokens, tokens))

    def forward(self, x):
        b, t, c = x.size(0), x.size(1), x.size(2)
        parts = self.c_attn(x).split(self.d, dim=2)
        q, k, v = parts[0], parts[1], parts[2]
        hd = c // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        if self.attn_implementation == "sdpa":
            y = scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d, heads, tokens, attn_implementation="sdpa"):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, heads, tokens, attn_implementation)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    """GPT-2: token and position embeddings, blocks, a final norm, the head tied to wte."""

    def __init__(self, vocab=50257, tokens=1024, d=768, layers=12, heads=12,
                 attn_implementation="sdpa"):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(tokens, d)
        self.h = nn.ModuleList(Block(d, heads, tokens, attn_implementation) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.tokens = tokens

    def forward(self, idx):
        pos = torch.arange(0, self.tokens, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class SdpaSelfAttention(nn.MultiheadAttention):
    """nn.MultiheadAttention's self-attention (batch first, one tensor as
    query, key and value, no masks) through scaled_dot_product_attention,
    as PyTorch 2's runs it when no attention weights are asked for; its
    parameters are nn.MultiheadAttention's."""

    attn_implementation = "sdpa"

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False,
                attn_mask=None, **kwargs):
        b, t, e = query.shape
        hd = e // self.num_heads
        qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)
        q, k, v = (qkv[:, :, i * e:(i + 1) * e].view(b, t, self.num_heads, hd).transpose(1, 2)
                   for i in range(3))
        y = scaled_dot_product_attention(q, k, v)
        return self.out_proj(y.transpose(1, 2).contiguous().view(b, t, e)), None


def encoder_layer(d, heads, ff, attn_implementation):
    layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu",
                                       batch_first=True)
    if implementation(attn_implementation) == "sdpa":
        layer.self_attn = SdpaSelfAttention(d, heads, batch_first=True)
    return layer


class Bert(nn.Module):
    """BERT: word, position and token-type embeddings, post-norm encoder layers, the MLM head."""

    def __init__(self, vocab=30522, tokens=512, d=1024, layers=24, heads=16, ff=4096,
                 attn_implementation="sdpa"):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.position = nn.Embedding(tokens, d)
        self.token_type = nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(encoder_layer(d, heads, ff, attn_implementation)
                                    for _ in range(layers))
        self.transform = nn.Linear(d, d)
        self.transform_act = nn.GELU()
        self.transform_norm = nn.LayerNorm(d, eps=1e-12)
        self.decoder = nn.Linear(d, vocab)
        self.decoder.weight = self.word.weight
        self.tokens = tokens

    def forward(self, idx):
        pos = torch.arange(0, self.tokens, dtype=torch.long)
        kind = torch.zeros(self.tokens, dtype=torch.long)
        x = self.norm(self.word(idx) + self.position(pos) + self.token_type(kind))
        for layer in self.layers:
            x = layer(x)
        return self.decoder(self.transform_norm(self.transform_act(self.transform(x))))


def gpt2(attn_implementation="sdpa"):
    return Gpt2(attn_implementation=attn_implementation)


def bert_large(attn_implementation="sdpa"):
    return Bert(attn_implementation=attn_implementation)


def tiny_gpt(attn_implementation="sdpa"):
    """A GPT of two small blocks, for tests that run it."""
    return Gpt2(vocab=512, tokens=16, d=64, layers=2, heads=4,
                attn_implementation=attn_implementation)


def small_gpt():
    """A GPT of two small blocks over 128 tokens, where attention's t x t
    scores (which scaled_dot_product_attention never keeps) would outweigh
    the rest of a block's activations."""
    return Gpt2(vocab=512, tokens=128, d=64, layers=2, heads=4)


def tiny_gpt_eager():
    """tiny_gpt with its attention as matmuls and a softmax."""
    return tiny_gpt("eager")


def tiny_bert(attn_implementation="sdpa"):
    """A BERT of two small nn.TransformerEncoderLayer blocks, for tests that run it."""
    return Bert(vocab=512, tokens=16, d=64, layers=2, heads=4, ff=128,
                attn_implementation=attn_implementation)


def tiny_bert_eager():
    """tiny_bert with nn.MultiheadAttention's own attention."""
    return tiny_bert("eager")
