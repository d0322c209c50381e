"""The models behind the XNNPACK-delegated fixtures that tools/export_xnnpack_fixtures.py exports: the
Fixture description, one builder per fixture registered in FIXTURES (in export order), and the models,
quantizing them first (PT2E or torchao) where the fixture asks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Fixture:
    module: nn.Module
    example_inputs: tuple
    calls: list  # list of input tuples, run in order
    dynamic_shapes: Any = None
    exported: Any = None  # an ExportedProgram made by the builder (quantized fixtures)
    note: str = ""
    extra: dict = field(default_factory=dict)


FIXTURES: dict[str, Callable[[], Fixture]] = {}


def fixture(name: str):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


def rng(seed: int) -> np.random.Generator:
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def randn(g: np.random.Generator, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.from_numpy(g.standard_normal(shape).astype(np.float32)).to(dtype)


# --------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, d_in=16, hidden=32, d_out=8):
        super().__init__()
        self.l1 = nn.Linear(d_in, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, d_out)

    def forward(self, x):
        x = F.relu(self.l1(x))
        x = F.hardtanh(self.l2(x), -1.0, 1.0)
        return self.l3(x)


@fixture("mlp")
def make_mlp() -> Fixture:
    g = rng(0)
    m = MLP()
    x = randn(g, 4, 16)
    return Fixture(m, (x,), [(x,), (randn(g, 4, 16),)])


@fixture("mlp_dynamic")
def make_mlp_dynamic() -> Fixture:
    g = rng(1)
    m = MLP()
    x = randn(g, 8, 16)
    batch = torch.export.Dim("batch", min=1, max=16)
    return Fixture(m, (x,), [(x,), (randn(g, 3, 16),), (randn(g, 16, 16),)], dynamic_shapes=({0: batch},))


class CNN(nn.Module):
    """Ordinary, grouped, dilated, depthwise and strided convs, pools, deconv, resize, pad and cat."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.dw_mult = nn.Conv2d(8, 16, 3, padding=(1, 2), groups=8, bias=False)  # depth multiplier 2
        self.grouped = nn.Conv2d(16, 16, 3, padding=2, dilation=2, groups=2)
        self.strided = nn.Conv2d(16, 24, (3, 5), stride=2, padding=(1, 2))
        self.deconv = nn.ConvTranspose2d(24, 8, 3, stride=2, padding=1, output_padding=1)
        self.deconv_g = nn.ConvTranspose2d(8, 8, 2, stride=2, groups=2)
        self.head = nn.Linear(8 + 8 + 8, 10)

    def forward(self, x):
        a = F.relu(self.c1(x))                                   # [1,8,16,16]
        b = F.hardtanh(self.dw(a), 0.0, 6.0)
        b = self.dw_mult(b)                                      # [1,16,16,18]
        b = b[:, :, :, 1:17]                                     # slice back to 16x16
        c = self.grouped(b)                                      # [1,16,16,16]
        d = F.relu(self.strided(c))                              # [1,24,8,8]
        e = self.deconv(d)                                       # [1,8,16,16]
        p = F.max_pool2d(a, 2)                                   # [1,8,8,8]
        q = F.avg_pool2d(a, 3, stride=2, padding=1, count_include_pad=False)  # [1,8,8,8]
        r = self.deconv_g(p + q)                                 # [1,8,16,16]
        up = F.interpolate(q, scale_factor=2, mode="bilinear", align_corners=False)  # [1,8,16,16]
        padded = F.pad(e, (1, 1, 2, 0), value=0.5)[:, :, 1:17, 1:17]
        cat = torch.cat([padded, r, up], dim=1)                  # [1,24,16,16]
        pooled = cat.mean(dim=(2, 3), keepdim=True).flatten(1)
        return self.head(pooled), F.max_pool2d(cat, 3, stride=2, padding=1, dilation=1)


@fixture("cnn")
def make_cnn() -> Fixture:
    g = rng(2)
    m = CNN()
    x = randn(g, 1, 3, 16, 16)
    return Fixture(m, (x,), [(x,), (randn(g, 1, 3, 16, 16),)])


class Ops(nn.Module):
    """Every unary/binary node the partitioner takes, plus bmm, softmax, argmax pooling, cat 3/4/5."""

    def __init__(self):
        super().__init__()
        self.prelu = nn.PReLU(4)
        self.elu = nn.ELU(alpha=0.7)

    def forward(self, x, y):  # x, y: [2,4,6,8]
        pos = torch.abs(x) + 0.5
        u = [
            torch.sqrt(pos), torch.rsqrt(pos), torch.log(pos), torch.exp(x * 0.5), torch.sin(x), torch.cos(x),
            torch.floor(x * 3), torch.ceil(x * 3), -x, x * x, torch.tanh(x), torch.sigmoid(x),
            F.gelu(x), F.hardswish(x), F.leaky_relu(x, 0.1), self.elu(x), self.prelu(x),
            torch.clamp(x, -0.5, 0.25), F.relu6(y), x.clone(),
        ]
        b = [x + y, x - y, x * y, x / (torch.abs(y) + 1.0), torch.maximum(x, y), torch.minimum(x, y),
             x + y[:, :, :1, :]]  # broadcasting
        s = torch.softmax(x, dim=-1)
        mm = torch.bmm(x.reshape(8, 6, 8), y.reshape(8, 6, 8).transpose(1, 2))
        vals, idx = torch.max(x, dim=3, keepdim=True)
        amax = torch.amax(y, dim=2, keepdim=True)
        cat3 = torch.cat([x, y, s], dim=3)
        cat4 = torch.cat([x, y, s, u[0]], dim=1)
        cat5 = torch.cat([x, y, s, u[0], u[1]], dim=2)
        perm = x.permute(0, 2, 3, 1)
        total = sum(t.sum() * 0 + t for t in u[:4])
        return (torch.stack(u).sum(0), torch.stack(b).sum(0), s, mm, vals, idx, amax, cat3, cat4, cat5, perm,
                total, F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=True))


@fixture("ops")
def make_ops() -> Fixture:
    g = rng(3)
    m = Ops()
    with torch.no_grad():
        m.prelu.weight.copy_(torch.tensor([0.1, 0.2, -0.3, 0.4]))
    x, y = randn(g, 2, 4, 6, 8), randn(g, 2, 4, 6, 8)
    return Fixture(m, (x, y), [(x, y)])


@fixture("transformer")
def make_transformer() -> Fixture:
    g = rng(4)
    m = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
    x = randn(g, 2, 8, 32)
    return Fixture(m, (x,), [(x,), (randn(g, 2, 8, 32),)])


class EmbedMLP(nn.Module):
    """Token ids -> an embedding (a portable kernel: XNNPACK does not take it) -> two linear layers (delegated)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(64, 16)
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 4)

    def forward(self, ids):
        return self.l2(torch.relu(self.l1(self.emb(ids))))


@fixture("embed_mlp")
def make_embed_mlp() -> Fixture:
    g = rng(11)
    m = EmbedMLP()
    ids = [torch.from_numpy(g.integers(0, 64, (10,))) for _ in range(2)]
    return Fixture(m, (ids[0],), [(i,) for i in ids], note="the caller's ids gathered inside the merged call")


class EmbedPositions(nn.Module):
    """A BERT's embeddings: token ids, plus positions and token types sliced from constant buffers (work folding
    does at load), then a layer norm and a linear layer (delegated)."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos, self.typ = nn.Embedding(64, 16), nn.Embedding(32, 16), nn.Embedding(2, 16)
        self.norm = nn.LayerNorm(16)
        self.out = nn.Linear(16, 8)
        self.register_buffer("position_ids", torch.arange(32).expand((1, -1)), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros((1, 32), dtype=torch.long), persistent=False)

    def forward(self, ids):
        n = ids.shape[1]
        types = self.token_type_ids[:, :n].expand(ids.shape[0], n)
        h = self.tok(ids) + self.pos(self.position_ids[:, :n]) + self.typ(types)
        return self.out(self.norm(h))


@fixture("embed_positions")
def make_embed_positions() -> Fixture:
    g = rng(12)
    m = EmbedPositions()
    ids = [torch.from_numpy(g.integers(0, 64, (2, 10))) for _ in range(2)]
    return Fixture(m, (ids[0],), [(i,) for i in ids], note="positions and token types folded at load")


class GRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(input_size=8, hidden_size=16, batch_first=True)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        y, h = self.gru(x)
        return self.out(y), h


@fixture("gru")
def make_gru() -> Fixture:
    g = rng(5)
    m = GRU()
    x = randn(g, 1, 5, 8)
    return Fixture(m, (x,), [(x,), (randn(g, 1, 5, 8),)])


def randomize_batchnorm(model: nn.Module, g: np.random.Generator) -> None:
    """Random-init BN stats so the folded convs are not trivial."""
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            n = mod.num_features
            with torch.no_grad():
                mod.running_mean.copy_(torch.from_numpy(g.normal(0, 0.1, n).astype(np.float32)))
                mod.running_var.copy_(torch.from_numpy(g.uniform(0.5, 1.5, n).astype(np.float32)))
                mod.weight.copy_(torch.from_numpy(g.uniform(0.5, 1.5, n).astype(np.float32)))
                mod.bias.copy_(torch.from_numpy(g.normal(0, 0.1, n).astype(np.float32)))


@fixture("mobilenet_v2")
def make_mobilenet_v2() -> Fixture:
    import torchvision

    g = rng(6)
    m = torchvision.models.mobilenet_v2(weights=None, width_mult=0.35, num_classes=10)
    randomize_batchnorm(m, g)
    x = randn(g, 1, 3, 64, 64)
    return Fixture(m, (x,), [(x,)])


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        a = F.relu(self.c1(x))
        b = F.relu(self.dw(a)) + a
        c = F.max_pool2d(F.relu(self.c2(b)), 2)
        return self.fc(torch.flatten(c, 1))


def _pt2e(model: nn.Module, example: tuple, calib: list, config) -> torch.export.ExportedProgram:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    gm = torch.export.export(model, example).module()
    quantizer = XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(gm, quantizer)
    for c in calib:
        prepared(*c)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, example)


@fixture("qint8_cnn")
def make_qint8_cnn() -> Fixture:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config

    g = rng(7)
    m = SmallCNN().eval()
    x = randn(g, 1, 3, 16, 16)
    calib = [(randn(g, 1, 3, 16, 16),) for _ in range(8)]
    ep = _pt2e(m, (x,), calib, get_symmetric_quantization_config(is_per_channel=True))
    return Fixture(m, (x,), [(x,), (randn(g, 1, 3, 16, 16),)], exported=ep)


@fixture("qdint8_mlp")
def make_qdint8_mlp() -> Fixture:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config

    g = rng(8)
    m = MLP(d_in=32, hidden=64, d_out=16).eval()
    x = randn(g, 4, 32)
    ep = _pt2e(m, (x,), [(x,)], get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    return Fixture(m, (x,), [(x,), (randn(g, 4, 32) * 3,)], exported=ep)


class QOps(nn.Module):
    """Quantized ops beyond conv/linear: relu6, avg/global-avg pools, mul, cat, depthwise with multiplier."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 16, 3, padding=1, groups=8)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(24, 6)

    def forward(self, x):
        a = F.hardtanh(self.c1(x), 0.0, 6.0)
        b = F.relu(self.dw(a))
        p = F.avg_pool2d(a, 2)
        m = self.c2(p) * F.avg_pool2d(a, 2)
        cat = torch.cat([F.max_pool2d(b, 2), m], dim=1)
        g = F.adaptive_avg_pool2d(cat, 1).flatten(1)
        return self.fc(g)


@fixture("qint8_ops")
def make_qint8_ops() -> Fixture:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config

    g = rng(12)
    m = QOps().eval()
    x = randn(g, 1, 3, 12, 12)
    calib = [(randn(g, 1, 3, 12, 12),) for _ in range(8)]
    ep = _pt2e(m, (x,), calib, get_symmetric_quantization_config(is_per_channel=True))
    return Fixture(m, (x,), [(x,), (randn(g, 1, 3, 12, 12),)], exported=ep)


class DynReshape(nn.Module):
    """Dynamic batch through a reshape with an inferred dim, sigmoid and cat."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 16)

    def forward(self, x):
        h = self.l(x).view(-1, 4, 4)
        h = torch.cat([h, torch.sigmoid(h)], dim=2)
        return h.reshape(-1, 8) * 2.0


@fixture("dynamic_reshape")
def make_dynamic_reshape() -> Fixture:
    g = rng(13)
    m = DynReshape()
    x = randn(g, 4, 8)
    batch = torch.export.Dim("batch", min=1, max=8)
    return Fixture(m, (x,), [(x,), (randn(g, 2, 8),), (randn(g, 7, 8),)], dynamic_shapes=({0: batch},))


class Linear4(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(64, 96)
        self.l2 = nn.Linear(96, 32, bias=False)

    def forward(self, x):
        return self.l2(F.relu(self.l1(x)))


@fixture("8da4w")
def make_8da4w() -> Fixture:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    g = rng(9)
    m = Linear4().eval()
    quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    x = randn(g, 3, 64)
    ep = torch.export.export(m, (x,))
    return Fixture(m, (x,), [(x,), (randn(g, 3, 64),)], exported=ep)


@fixture("8da4w_channel")
def make_8da4w_channel() -> Fixture:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    g = rng(14)
    m = Linear4().eval()
    quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerAxis(0)))
    x = randn(g, 2, 64)
    return Fixture(m, (x,), [(x,), (randn(g, 2, 64) * 2,)], exported=torch.export.export(m, (x,)))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.fc(torch.flatten(F.relu(self.c2(F.relu(self.c1(x)))), 1))


@fixture("qdint8_conv")
def make_qdint8_conv() -> Fixture:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import get_symmetric_quantization_config

    g = rng(15)
    m = ConvNet().eval()
    x = randn(g, 1, 3, 8, 8)
    ep = _pt2e(m, (x,), [(x,)], get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    return Fixture(m, (x,), [(x,), (randn(g, 1, 3, 8, 8) * 2,)], exported=ep)


class HalfNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 6)

    def forward(self, x):
        y = F.relu(self.conv(x))
        y = y.mean(dim=(2, 3), keepdim=True).flatten(1)
        return torch.sigmoid(self.fc(y)) * 2.0 + y[:, :6]


@fixture("fp16")
def make_fp16() -> Fixture:
    g = rng(10)
    m = HalfNet().half()
    x = randn(g, 1, 3, 8, 8, dtype=torch.float16)
    return Fixture(m, (x,), [(x,)])


class Mixed(nn.Module):
    """Delegated linears around cumsum, which XNNPACK does not take."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.cumsum(h, dim=1)
        return self.b(h) * 0.5


@fixture("mixed")
def make_mixed() -> Fixture:
    g = rng(11)
    m = Mixed()
    x = randn(g, 3, 8)
    return Fixture(m, (x,), [(x,), (randn(g, 3, 8),)])
