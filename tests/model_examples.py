"""A user's own module as model_export.py meets one: parameters of its own
read through torch.nn.functional (F.embedding, F.linear, F.layer_norm),
nn.MultiheadAttention for self-attention, a residual; and a small residual
convolution net (convolutions, batch norms, ReLU, a residual add, pooling,
a Linear head); self-attention through one fused attention function (as
F.scaled_dot_product_attention); a plain CNN with biased convolutions and
max pooling, and an MLP on 3 x 32 x 32 images; for the model file tests
(tests/test_model_file.py, tests/test_torch_graph.py,
tests/test_model_matrix.py)."""
import torch
import torch.fx
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


class SmallResNet(nn.Module):
    """One residual block on 3 x 8 x 8 images: conv, BatchNorm, ReLU, conv,
    BatchNorm, the residual add, ReLU, global average pooling, a Linear head."""

    def __init__(self, channels=8, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        z = self.relu(self.bn2(self.conv2(y)) + y)
        return self.fc(torch.flatten(self.pool(z), 1))


def small_resnet():
    return SmallResNet()


class SmallSE(nn.Module):
    """Squeeze-and-excitation on 3 x 6 x 6 images, every op one dpscale
    computes as PyTorch does (no BatchNorm; 1x1 and depthwise convolutions,
    whose filters read alike as OIHW and KRSC): a 1x1 conv, ReLU, a 3x3
    depthwise conv, the SE block's channel scales (pool, 1x1 convs, ReLU,
    sigmoid, x * s), global average pooling, a Linear head."""

    def __init__(self, channels=8, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 1)
        self.dw = nn.Conv2d(channels, channels, 3, padding=1, groups=channels)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, 4, 1)
        self.fc2 = nn.Conv2d(4, channels, 1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x):
        y = self.dw(torch.relu(self.conv(x)))
        s = torch.sigmoid(self.fc2(torch.relu(self.fc1(self.pool(y)))))
        return self.fc(torch.flatten(self.pool(y * s), 1))


def small_se():
    return SmallSE()


class SmallDense(nn.Module):
    """A DenseNet-style block on 3 x 6 x 6 images, every op one dpscale
    computes as PyTorch does: each layer's 1x1 conv and ReLU reads the
    channel concatenation of the features before it (torch.cat(..., 1)),
    then global average pooling and a Linear head."""

    def __init__(self, growth=4, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, 6, 1)
        self.l1 = nn.Conv2d(6, growth, 1)
        self.l2 = nn.Conv2d(6 + growth, growth, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(6 + 2 * growth, classes)

    def forward(self, x):
        f = [torch.relu(self.stem(x))]
        f.append(torch.relu(self.l1(torch.cat(f, 1))))
        f.append(torch.relu(self.l2(torch.cat(f, 1))))
        return self.fc(torch.flatten(self.pool(torch.cat(f, 1)), 1))


def small_dense():
    return SmallDense()


def small_cnn():
    """3 x 16 x 16 images: two biased convolutions, ReLU, max pooling, a
    BatchNorm, global average pooling, a Linear head."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def mlp():
    """3 x 32 x 32 images flattened, Linear(3072, 256), ReLU, Linear(256, 10)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3072, 256), nn.ReLU(), nn.Linear(256, 10))


def attention(q, k, v):
    """scaled_dot_product_attention's maths (PyTorch 2.0), for a PyTorch that lacks it."""
    return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v


torch.fx.wrap("attention")


class FusedAttention(nn.Module):
    """Self-attention through one fused attention function (`attention`,
    standing for F.scaled_dot_product_attention), then a Linear head."""

    def __init__(self, d=16, heads=2, classes=5):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.head = nn.Linear(d, classes)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.head(y)


def fused_attention():
    return FusedAttention()


class SplitAttention(nn.Module):
    """FusedAttention with q, k and v from three Linears: not the heads of
    one op's rows, so its attention is its scores and context GEMMs."""

    def __init__(self, d=16, heads=2, classes=5):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.head = nn.Linear(d, classes)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (f(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        y = attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        return self.head(y)


def split_attention():
    return SplitAttention()
