#!/usr/bin/env python
"""Export the portable (non-delegated) ``.pte`` test fixtures for pterun.

Run with the *reference* virtualenv (torch + executorch + torchvision); pterun
itself never depends on torch:

    .ref/bin/python tools/export_fixtures.py              # all fixtures + demo model
    .ref/bin/python tools/export_fixtures.py mlp cnn      # only some of them
    .ref/bin/python tools/export_fixtures.py demo         # only the packaged demo model

For every fixture NAME the script

1. builds a small model with fixed seeds (eval mode),
2. exports it without any delegate:
   ``torch.export.export`` -> ``executorch.exir.to_edge`` -> ``.to_executorch()``,
3. writes ``tests/fixtures/NAME.pte``,
4. runs the recorded calls, in order, on ONE program loaded by the reference
   runtime (``executorch.runtime.Runtime``) and writes the inputs and the
   reference outputs to ``tests/fixtures/NAME.npz``:

   * ``__manifest__``: ``np.array(json)`` with a list of calls
     ``[{"method": ..., "inputs": [...], "outputs": [...]}, ...]``; each value is
     ``{"array": KEY}`` (a tensor stored under KEY in the same npz) or
     ``{"int": 3}`` / ``{"float": 1.5}`` / ``{"bool": true}`` / ``{"none": null}``;
   * ``c<call>_in<i>`` / ``c<call>_out<j>``: the tensors, in their exact dtype.

It also writes ``tests/fixtures/OPERATORS.txt`` (the union of the operators used
by the fixtures written, with the fixtures that use each; when only some
fixtures are regenerated the entries of the others are kept) and
``tests/fixtures/README.md``, plus the demo model shipped inside the package
(``src/pterun/models/demo.pte``, ``demo_input.npy``, ``demo_expected.npz``).

As a sanity check every reference output is compared with eager PyTorch and the
maximum difference is printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"
MODELS_DIR = REPO / "src" / "pterun" / "models"
REGEN_CMD = ".ref/bin/python tools/export_fixtures.py"


# --------------------------------------------------------------------------------------
# Fixture description
# --------------------------------------------------------------------------------------


@dataclass
class MethodSpec:
    """One method of a program: the module to export and how to export it."""

    module: nn.Module
    example_inputs: Tuple[Any, ...]
    dynamic_shapes: Any = None


@dataclass
class Fixture:
    """Everything needed to export and record one fixture."""

    description: str
    methods: Dict[str, MethodSpec]
    # calls run in order on one loaded program: (method name, list of inputs)
    calls: List[Tuple[str, List[Any]]]
    constant_methods: Optional[Dict[str, Any]] = None
    # buffer-name patterns whose initial value is serialized (et_init_buffer)
    init_buffers: List[str] = field(default_factory=list)
    # MemoryPlanningPass options: False leaves graph inputs / outputs unplanned (caller-provided memory)
    plan_inputs: bool = True
    plan_outputs: bool = True


FIXTURES: Dict[str, Callable[[], Fixture]] = {}


def fixture(name: str):
    """Decorator registering a fixture builder under ``name``."""

    def register(fn: Callable[[], Fixture]):
        FIXTURES[name] = fn
        return fn

    return register


def seeded(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def randomize_batchnorm(model: nn.Module) -> None:
    """Give every BatchNorm non-trivial affine params and running statistics."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                c = m.num_features
                m.weight.copy_(1.0 + 0.2 * torch.randn(c))
                m.bias.copy_(0.1 * torch.randn(c))
                m.running_mean.copy_(0.1 * torch.randn(c))
                m.running_var.copy_(0.5 + torch.rand(c))


# --------------------------------------------------------------------------------------
# 1. mlp
# --------------------------------------------------------------------------------------


@fixture("mlp")
def make_mlp() -> Fixture:
    seeded(1)
    model = nn.Sequential(
        nn.Linear(16, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.GELU(),
        nn.Linear(32, 10),
    ).eval()
    x = torch.randn(4, 16)
    return Fixture(
        description="Linear(16,32)-ReLU-Linear(32,32)-GELU-Linear(32,10); input f32[4,16]; one call.",
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# 2. cnn
# --------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """Conv/BN/ReLU/MaxPool, grouped strided conv, dilated conv, Conv1d, AvgPool, Linear."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2)  # 32 -> 16
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, groups=2, padding=1)  # 16 -> 8
        self.bn2 = nn.BatchNorm2d(16)
        self.act2 = nn.Hardtanh(-1.0, 1.5)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=2, dilation=2, bias=False)  # dilated, 8 -> 8
        self.act3 = nn.ReLU6()
        self.pool2 = nn.AvgPool2d(2)  # 8 -> 4
        self.conv1d = nn.Conv1d(16, 8, 3, padding=1)  # over the flattened 4x4 spatial positions
        self.fc = nn.Linear(8 * 16, num_classes)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.act2(self.bn2(self.conv2(x)))
        x = self.act3(self.conv3(x))
        x = self.pool2(x)  # [N,16,4,4]
        x = self.conv1d(x.flatten(2))  # [N,8,16]
        return self.fc(torch.flatten(x, 1))


@fixture("cnn")
def make_cnn() -> Fixture:
    seeded(2)
    model = SmallCNN()
    # non-trivial BatchNorm running stats from a few training-mode passes
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, 32, 32) * 2 + 0.5)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    return Fixture(
        description=(
            "Conv2d 3->8 k3 p1, BatchNorm2d (running stats from 3 train passes), ReLU, MaxPool2d(2), "
            "Conv2d 8->16 k3 s2 groups=2 p1, BatchNorm2d, Hardtanh(-1,1.5), dilated Conv2d 16->16 d2 (no bias), "
            "ReLU6, AvgPool2d(2), Conv1d 16->8 k3 over flattened 4x4, flatten, Linear->10; input f32[2,3,32,32]."
        ),
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# 3. transformer
# --------------------------------------------------------------------------------------


class TinyTransformer(nn.Module):
    def __init__(self, vocab=100, d=32, seq=12):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.1)
        self.layer = nn.TransformerEncoderLayer(
            d_model=d, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.0
        )
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens, mask):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        x = self.layer(x, src_mask=mask)
        return self.head(self.norm(x))


@fixture("transformer")
def make_transformer() -> Fixture:
    seeded(3)
    model = TinyTransformer().eval()
    tokens = torch.randint(0, 100, (2, 12), dtype=torch.int64)
    mask = torch.triu(torch.full((12, 12), float("-inf")), diagonal=1)
    return Fixture(
        description=(
            "Embedding(100,32) on i64 tokens [2,12] + learned positions, nn.TransformerEncoderLayer(d_model=32, "
            "nhead=4, ff=64, batch_first, dropout=0) with additive float causal mask f32[12,12] (-inf above "
            "the diagonal, second input), LayerNorm, Linear->100 logits."
        ),
        methods={"forward": MethodSpec(model, (tokens, mask))},
        calls=[("forward", [tokens, mask])],
    )


# --------------------------------------------------------------------------------------
# 4. gru
# --------------------------------------------------------------------------------------


class GRUModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(input_size=8, hidden_size=16, batch_first=True)

    def forward(self, x):
        out, h_n = self.gru(x)
        return out, h_n


@fixture("gru")
def make_gru() -> Fixture:
    seeded(4)
    model = GRUModel().eval()
    x = torch.randn(2, 5, 8)
    return Fixture(
        description="nn.GRU(8,16,batch_first) over f32[2,5,8]; outputs (output [2,5,16], h_n [1,2,16]).",
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# 5. mobilenet_v2
# --------------------------------------------------------------------------------------


@fixture("mobilenet_v2")
def make_mobilenet_v2() -> Fixture:
    import torchvision

    seeded(5)
    model = torchvision.models.mobilenet_v2(weights=None, width_mult=0.25, num_classes=10)
    randomize_batchnorm(model)
    model.eval()
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        description=(
            "torchvision mobilenet_v2(width_mult=0.25, num_classes=10), random init with randomized BatchNorm "
            "stats; input f32[1,3,64,64]."
        ),
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# 6. resnet_small
# --------------------------------------------------------------------------------------


class SmallResNet(nn.Module):
    """ResNet with torchvision BasicBlocks, widths 16/32/64/64, one block per stage."""

    def __init__(self, num_classes=10):
        from torchvision.models.resnet import BasicBlock

        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        layers = []
        inplanes = 16
        for planes, stride in [(16, 1), (32, 2), (64, 2), (64, 2)]:
            down = None
            if stride != 1 or inplanes != planes:
                down = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes)
                )
            layers.append(BasicBlock(inplanes, planes, stride, down))
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


@fixture("resnet_small")
def make_resnet_small() -> Fixture:
    seeded(6)
    model = SmallResNet()
    randomize_batchnorm(model)
    model.eval()
    x = torch.randn(1, 3, 64, 64)
    return Fixture(
        description=(
            "Hand-built ResNet from torchvision BasicBlocks (widths 16/32/64/64, [1,1,1,1], 7x7/2 stem + "
            "maxpool 3/2, 1x1 downsample convs, AdaptiveAvgPool2d(1), Linear->10), randomized BatchNorm stats; "
            "input f32[1,3,64,64]. (torchvision ResNet(BasicBlock,[1,1,1,1]) has 64..512 channels, ~19 MB.)"
        ),
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# 7. dynamic
# --------------------------------------------------------------------------------------


class DynamicModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):  # x: [b, 6]
        b = x.shape[0]
        h = torch.softmax(x @ self.w + self.b, dim=-1)  # [b, 4]
        col_sum = h.sum(0)  # [4], reduces over the dynamic dim
        flat = h.reshape(b * 2, 2)  # view with the batch dim
        both = torch.cat([h, x[:, :2]], dim=1)  # [b, 6]
        stacked = torch.cat([x, x * 2], dim=0)  # [2b, 6]
        return h, col_sum, flat, both, stacked.mean(1), b


@fixture("dynamic")
def make_dynamic() -> Fixture:
    seeded(7)
    model = DynamicModel().eval()
    batch = torch.export.Dim("b", min=1, max=8)
    x_example = torch.randn(4, 6)
    x3 = torch.randn(3, 6)
    x7 = torch.randn(7, 6)
    return Fixture(
        description=(
            "Dynamic batch x f32[b,6], b = Dim('b', 1..8): softmax(x@W+b), sum over batch, reshape(b*2,2), "
            "cat along dim 1 and dim 0, mean; last output is x.shape[0] as an Int. Two calls: batch 3 then 7."
        ),
        methods={"forward": MethodSpec(model, (x_example,), dynamic_shapes=({0: batch},))},
        calls=[("forward", [x3]), ("forward", [x7])],
    )


# --------------------------------------------------------------------------------------
# 8. stateful
# --------------------------------------------------------------------------------------


class StatefulModel(nn.Module):
    def __init__(self):
        super().__init__()
        # ``count`` and ``acc`` start at zero and are NOT serialized (the runtime
        # must zero-initialise planned memory); ``scale`` has a non-zero initial
        # value that IS serialized (mutable_data_segments, et_init_buffer).
        self.register_buffer("count", torch.zeros(1))
        self.register_buffer("acc", torch.zeros(2, 3))
        self.register_buffer("scale", torch.arange(1.0, 4.0))

    def forward(self, x):
        self.count.add_(1)
        self.acc.add_(x)
        self.scale.mul_(0.5)
        return self.acc * self.scale + self.count, self.count.clone()


@fixture("stateful")
def make_stateful() -> Fixture:
    seeded(8)
    model = StatefulModel().eval()
    xs = [torch.randn(2, 3) for _ in range(3)]
    return Fixture(
        description=(
            "Buffers updated in place each call: count (zeros, +1), acc (zeros, += x), scale (initialised to "
            "[1,2,3] and serialized via InitializedMutableBufferPass, *= 0.5). Returns (acc*scale+count, count). "
            "Three calls in order; count/acc start at zero (NOT serialized: the runtime zero-initialises)."
        ),
        methods={"forward": MethodSpec(model, (torch.zeros(2, 3),))},
        calls=[("forward", [x]) for x in xs],
        init_buffers=["scale"],
    )


# --------------------------------------------------------------------------------------
# 9. cond
# --------------------------------------------------------------------------------------


class CondModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        def true_fn(x):
            return torch.sigmoid(self.lin(x)) * 2.0

        def false_fn(x):
            return torch.tanh(x) - 1.0

        y = torch.cond(x.sum() > 0, true_fn, false_fn, (x,))
        return y + 0.5


@fixture("cond")
def make_cond() -> Fixture:
    seeded(9)
    model = CondModel().eval()
    xp = torch.rand(3, 4) + 0.1  # sum > 0 -> true branch
    xn = -torch.rand(3, 4) - 0.1  # sum < 0 -> false branch
    return Fixture(
        description=(
            "torch.cond(x.sum() > 0, sigmoid(Linear(x))*2, tanh(x)-1) + 0.5 on f32[3,4]; two calls: first takes "
            "the true branch, second the false branch."
        ),
        methods={"forward": MethodSpec(model, (xp,))},
        calls=[("forward", [xp]), ("forward", [xn])],
    )


# --------------------------------------------------------------------------------------
# 10. multi_method
# --------------------------------------------------------------------------------------


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x, y):
        return self.lin(x) * y, (x * y.sum()).amax(dim=1)


@fixture("multi_method")
def make_multi_method() -> Fixture:
    seeded(10)
    head = Head().eval()
    enc = Encoder().eval()
    x = torch.randn(2, 8)
    y = torch.randn(2, 3)
    x2 = torch.randn(5, 8)
    consts = {"get_max_seq_len": 128, "get_scale": 0.5, "use_kv_cache": True}
    return Fixture(
        description=(
            "Program with methods forward(x f32[2,8], y f32[2,3]) -> (Linear(x)*y, amax(x*sum(y),1)), "
            "encode(x f32[5,8]) -> tanh(Linear(x)), and constant methods get_max_seq_len=128 (Int), "
            "get_scale=0.5 (Double), use_kv_cache=True (Bool) called with no inputs."
        ),
        methods={"forward": MethodSpec(head, (x, y)), "encode": MethodSpec(enc, (x2,))},
        constant_methods=consts,
        calls=[("forward", [x, y]), ("encode", [x2])] + [(name, []) for name in consts],
    )


# --------------------------------------------------------------------------------------
# 11. ops_misc
# --------------------------------------------------------------------------------------


class OpsMisc(nn.Module):
    """Many common portable ops on small tensors, several outputs of several dtypes."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))
        self.bias = nn.Parameter(torch.randn(5))
        self.emb = nn.Embedding(10, 4)
        self.ln = nn.LayerNorm(5)

    def forward(self, x, y, idx):
        # x f32[3,4], y f32[2,3,4], idx i64[3]
        a = torch.addmm(self.bias, x, self.w)  # [3,5]
        b = torch.bmm(y, y.transpose(1, 2))  # [2,3,3]
        c = torch.mm(x, x.t())  # [3,3]
        d = (a - 1.5) * a / (a.abs() + 2.0)  # sub/mul/div with scalars and tensors
        d = d - torch.sigmoid(a) + torch.tanh(a) * F.silu(a) / torch.exp(-a.abs())
        d = torch.clamp(d, -3.0, 3.0)
        ls = F.log_softmax(d, dim=1)
        sm = torch.softmax(c, dim=0)
        red = d.mean(dim=1, keepdim=True) + d.sum(dim=0, keepdim=True) - d.amax(dim=1, keepdim=True)
        am = torch.argmax(d, dim=1)  # i64
        cs = torch.cumsum(x, dim=1)
        # topk on the unclamped values: ExecuTorch breaks ties with std::nth_element, whose order is
        # implementation-defined, so a fixture with ties could not pin indices down
        tv, ti = torch.topk(a, 2, dim=1)  # f32 / i64
        wh = torch.where(d > 0, d, torch.zeros_like(d) - 1.0)
        cmp = (x == x.round()) | (x > 0.5) | (x < -0.5)  # eq/gt/lt with scalars
        cmp2 = torch.logical_not(torch.gt(x, cs))  # tensor-tensor compare
        anyv = torch.any(cmp2, dim=1)  # bool
        full = torch.full((2, 2), 3.5) + torch.full_like(c[:2, :2], 0.25)
        sl = y[:, 1:3, ::2]  # slice with step
        se = y.select(1, 0)  # [2,4]
        p1, p2 = torch.split(y, [1, 3], dim=2)
        sq = p1.squeeze(2).unsqueeze(0)  # [1,2,3]
        pe = y.permute(2, 0, 1)  # [4,2,3]
        ex = x[:, :1].expand(3, 4)
        cat = torch.cat([sl.reshape(2, -1), se, p2.flatten(1)], dim=1)
        ln = self.ln(d)
        em = self.emb(idx)  # [3,4]
        half = (em * 2).to(torch.float16)  # f16 output
        return (
            red,  # f32 [3,5]
            ls,
            sm,
            b,
            am,  # i64
            tv,
            ti,  # i64
            wh,
            cmp,  # bool
            anyv,  # bool
            full,
            sq,
            pe + 1.0,
            ex * ex,
            cat,
            ln,
            em,
            half,  # f16
            cs,
        )


@fixture("ops_misc")
def make_ops_misc() -> Fixture:
    seeded(11)
    model = OpsMisc().eval()
    x = torch.randn(3, 4)
    x[0, 0] = 1.0  # exercise eq(x, round(x))
    y = torch.randn(2, 3, 4)
    idx = torch.tensor([1, 7, 3], dtype=torch.int64)
    return Fixture(
        description=(
            "One model with many common portable ops (addmm, bmm, mm, sub/mul/div tensor+scalar, abs, sigmoid, "
            "tanh, silu, exp, clamp, log_softmax, softmax, mean/sum/amax keepdim, argmax, cumsum, topk, where, "
            "eq/gt/lt, logical_or, logical_not, any, full/full_like/zeros_like, slice with step, select, split, "
            "squeeze/unsqueeze, permute, expand, cat, layer_norm, embedding, to(float16)); inputs x f32[3,4], "
            "y f32[2,3,4], idx i64[3]; 19 outputs including i64, bool and f16 tensors."
        ),
        methods={"forward": MethodSpec(model, (x, y, idx))},
        calls=[("forward", [x, y, idx])],
    )


# --------------------------------------------------------------------------------------
# 12. unplanned_io: inputs and outputs left out of the memory plan
# --------------------------------------------------------------------------------------


class AddMul(nn.Module):
    def forward(self, x, y):
        z = x + y
        return z * y, z.sum()


@fixture("unplanned_io")
def make_unplanned_io() -> Fixture:
    seeded(12)
    model = AddMul().eval()
    x, y = torch.randn(3, 5), torch.randn(3, 5)
    return Fixture(
        description="x + y then (z * y, z.sum()) with MemoryPlanningPass(alloc_graph_input=False, "
        "alloc_graph_output=False): the runtime must provide memory for inputs and outputs itself",
        methods={"forward": MethodSpec(model, (x, y))},
        calls=[("forward", [x, y]), ("forward", [torch.randn(3, 5), torch.randn(3, 5)])],
        plan_inputs=False,
        plan_outputs=False,
    )


# --------------------------------------------------------------------------------------
# 13. channels_last: an input and an output in dim order [0, 2, 3, 1]
# --------------------------------------------------------------------------------------


class ChannelsLastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x):
        y = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.conv(y)


@fixture("channels_last")
def make_channels_last() -> Fixture:
    seeded(13)
    model = ChannelsLastNet().eval().to(memory_format=torch.channels_last)
    x = torch.randn(1, 2, 3, 4).to(memory_format=torch.channels_last)
    return Fixture(
        description="nearest upsample x2 and a conv on a channels-last input (dim order [0, 2, 3, 1])",
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# Demo model shipped inside the package
# --------------------------------------------------------------------------------------


class DemoNet(nn.Module):
    """Tiny image classifier for pterun's packaged demo (input [1,3,32,32], 10 classes)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(64, 10)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def make_demo() -> Fixture:
    seeded(100)
    model = DemoNet()
    randomize_batchnorm(model)
    model.eval()
    x = torch.randn(1, 3, 32, 32)
    return Fixture(
        description="Demo CNN (3 conv/BN/ReLU blocks, global avg pool, Linear->10); input f32[1,3,32,32].",
        methods={"forward": MethodSpec(model, (x,))},
        calls=[("forward", [x])],
    )


# --------------------------------------------------------------------------------------
# Export / run / record machinery
# --------------------------------------------------------------------------------------


def export_program(fx: Fixture):
    """torch.export each method, then to_edge (no delegate) -> to_executorch."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    programs = {}
    for name, spec in fx.methods.items():
        programs[name] = torch.export.export(
            spec.module, spec.example_inputs, dynamic_shapes=spec.dynamic_shapes, strict=False
        )
    edge = to_edge(programs, constant_methods=fx.constant_methods)
    passes = []
    if fx.init_buffers:
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        passes.append(InitializedMutableBufferPass(fx.init_buffers))
    config = {}
    if not (fx.plan_inputs and fx.plan_outputs):
        from executorch.exir.passes import MemoryPlanningPass

        config["memory_planning_pass"] = MemoryPlanningPass(
            alloc_graph_input=fx.plan_inputs, alloc_graph_output=fx.plan_outputs
        )
    return edge.to_executorch(ExecutorchBackendConfig(passes=passes, **config))


def program_operators(et_prog) -> List[str]:
    """Operator names ("ns::name.overload", or "ns::name" for an empty overload) of all plans."""
    ops = set()
    for plan in et_prog.executorch_program.execution_plan:
        for op in plan.operators:
            ops.add(f"{op.name}.{op.overload}" if op.overload else op.name)
    return sorted(ops)


def encode_value(v, key: str, arrays: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """Manifest entry for a value; tensors go to ``arrays[key]``."""
    if isinstance(v, torch.Tensor):
        arrays[key] = v.detach().cpu().contiguous().numpy().copy()
        return {"array": key}
    if v is None:
        return {"none": None}
    if isinstance(v, bool):  # before int: bool is an int subclass
        return {"bool": bool(v)}
    if isinstance(v, int):
        return {"int": int(v)}
    if isinstance(v, float):
        return {"float": float(v)}
    raise TypeError(f"cannot record value of type {type(v)}")


def eager_outputs(fx: Fixture) -> List[List[Any]]:
    """Run the calls on fresh copies of the eager modules (for sanity checking)."""
    import copy

    mods = {name: copy.deepcopy(spec.module) for name, spec in fx.methods.items()}
    outs = []
    with torch.no_grad():
        for method, inputs in fx.calls:
            if method in mods:
                r = mods[method](*[i.clone() if isinstance(i, torch.Tensor) else i for i in inputs])
                outs.append(list(r) if isinstance(r, (tuple, list)) else [r])
            else:  # constant method
                outs.append([fx.constant_methods[method]])
    return outs


def max_diff(a, b) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if a.dtype == torch.bool or not a.is_floating_point():
            return float((a != b).sum())
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return float(abs(float(a) - float(b)))
    return 0.0 if a == b else math.inf


def build_and_record(name: str, fx: Fixture, pte_path: Path):
    """Export ``fx`` to ``pte_path``, run it with the reference runtime, return (manifest, arrays, ops)."""
    from executorch.runtime import Runtime

    et_prog = export_program(fx)
    pte_path.parent.mkdir(parents=True, exist_ok=True)
    pte_path.write_bytes(et_prog.buffer)
    ops = program_operators(et_prog)

    program = Runtime.get().load_program(str(pte_path))
    methods = {}
    manifest, arrays = [], {}
    ref_outs = []
    for ci, (method, inputs) in enumerate(fx.calls):
        if method not in methods:
            methods[method] = program.load_method(method)
        outs = list(methods[method].execute(inputs))
        ref_outs.append(outs)
        manifest.append(
            {
                "method": method,
                "inputs": [encode_value(v, f"c{ci}_in{i}", arrays) for i, v in enumerate(inputs)],
                "outputs": [encode_value(v, f"c{ci}_out{j}", arrays) for j, v in enumerate(outs)],
            }
        )

    # Sanity check against eager PyTorch.
    worst = 0.0
    for ci, (ref, eager) in enumerate(zip(ref_outs, eager_outputs(fx))):
        if len(ref) != len(eager):
            print(f"  !! call {ci}: {len(ref)} outputs from the runtime, {len(eager)} from eager")
            worst = math.inf
            continue
        for j, (r, e) in enumerate(zip(ref, eager)):
            d = max_diff(r, e)
            if d > 1e-3:
                print(f"  !! call {ci} output {j}: max |ref - eager| = {d}")
            worst = max(worst, d)
    print(f"  eager vs reference runtime: max abs diff {worst:.3g}")
    return manifest, arrays, ops


def write_npz(path: Path, manifest, arrays) -> None:
    np.savez(path, __manifest__=np.array(json.dumps(manifest)), **arrays)


# --------------------------------------------------------------------------------------
# OPERATORS.txt and README.md
# --------------------------------------------------------------------------------------


def read_operator_table(path: Path) -> Dict[str, set]:
    """Parse an existing OPERATORS.txt into {operator: {fixtures}}."""
    table: Dict[str, set] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            op, _, users = line.partition(" ")
            table[op] = set(u for u in users.strip().split(",") if u)
    return table


def write_operator_table(path: Path, fixture_ops: Dict[str, List[str]]) -> None:
    table = read_operator_table(path)
    # forget previous entries of the fixtures we regenerated
    for users in table.values():
        users.difference_update(fixture_ops)
    for fname, ops in fixture_ops.items():
        for op in ops:
            table.setdefault(op, set()).add(fname)
    lines = [
        "# Operators used by the portable fixtures (tests/fixtures/*.pte and src/pterun/models/demo.pte).",
        "# Format: <operator name[.overload]> <comma-separated fixtures>.",
        f"# Generated by: {REGEN_CMD}",
    ]
    for op in sorted(k for k, v in table.items() if v):
        lines.append(f"{op} {','.join(sorted(table[op]))}")
    path.write_text("\n".join(lines) + "\n")


def write_readme(path: Path) -> None:
    lines = [
        "# Portable (non-delegated) `.pte` fixtures",
        "",
        "Generated by `tools/export_fixtures.py` with the reference runtime virtualenv "
        "(torch 2.14.1, executorch 1.5.1, torchvision). Regenerate all of them (and the packaged demo model) with:",
        "",
        "```",
        REGEN_CMD,
        "```",
        "",
        f"or only some: `{REGEN_CMD} mlp cnn` (`demo` selects the packaged demo model).",
        "",
        "Each fixture `NAME` is `NAME.pte` (the program, exported with `torch.export.export` -> "
        "`executorch.exir.to_edge` -> `.to_executorch()`, no delegate) and `NAME.npz`:",
        "",
        "* `__manifest__`: `np.array(json)`, a list of calls to run **in order on one loaded program** "
        '(`[{"method": "forward", "inputs": [...], "outputs": [...]}, ...]`); each value is `{"array": KEY}` '
        '(a tensor stored under KEY, exact dtype) or `{"int": n}` / `{"float": x}` / `{"bool": b}` / `{"none": null}`.',
        "* `c<call>_in<i>` / `c<call>_out<j>`: input / output tensors. Outputs are those of the reference runtime "
        "(`executorch.runtime.Runtime`, portable kernels), which loads one program and shares planned memory "
        "among its methods.",
        "",
        "`OPERATORS.txt` lists every operator used by the fixtures and which fixtures use it.",
        "",
        "Other fixtures in this folder come from their own scripts, with the same NPZ layout:",
        "",
        "* `q_*` (PT2E static int8, 4-bit embedding): `tools/export_quantized_fixtures.py`",
        "* `xnn_*` (XNNPACK-lowered programs; `xnn_delegate_io/` holds per-delegate-call inputs/outputs): "
        "`tools/export_xnnpack_fixtures.py`, see `XNN_README.md`",
        "* `ext_*`, `xnn_ext_*` (weights in `.ptd` files) and `bundled*.bpte`: `tools/export_data_fixtures.py`, "
        "see `DATA_README.md`",
        "* `llm/` (tiny Llama programs and tokenizer): `tools/export_llm_fixtures.py`",
        "",
        "## Fixtures",
        "",
        "| fixture | .pte bytes | contents |",
        "|---|---|---|",
    ]
    for name, builder in FIXTURES.items():
        pte = FIXTURE_DIR / f"{name}.pte"
        size = pte.stat().st_size if pte.exists() else "-"
        desc = FIXTURE_DESCRIPTIONS.get(name) or ""
        lines.append(f"| `{name}` | {size} | {desc} |")
    lines += [
        "",
        "Packaged demo model: `src/pterun/models/demo.pte` with `demo_input.npy` and `demo_expected.npz` "
        "(key `out0`, reference runtime output). " + (FIXTURE_DESCRIPTIONS.get("demo") or ""),
        "",
        "## Notes / simplifications",
        "",
    ]
    lines += [f"* {n}" for n in NOTES]
    path.write_text("\n".join(lines) + "\n")


# Filled with each builder's description (built lazily so the README can list all).
FIXTURE_DESCRIPTIONS: Dict[str, str] = {}

NOTES = [
    "`resnet_small` is hand-built from torchvision `BasicBlock`s with widths 16/32/64/64 instead of "
    "`torchvision.models.ResNet(BasicBlock, [1,1,1,1])` (64..512 channels, ~19 MB of weights).",
    "`stateful`: `count` and `acc` have no serialized initial value (the exporter treats them as "
    "uninitialised; the reference runtime zero-fills planned memory, which the recorded outputs rely on). "
    "`scale` is tagged with `InitializedMutableBufferPass` so its initial value [1,2,3] is stored in the "
    "program's mutable data segment.",
    "`multi_method`: all methods of one program share planned memory in the reference runtime's Program API; "
    "the recorded calls run forward, encode, then the constant methods on one loaded program.",
    "All models are exported with `torch.export.export(..., strict=False)`; `Conv1d` in `cnn` appears as `aten::convolution.out` on 3-D tensors; `nn.SiLU` is decomposed to sigmoid+mul.",
]


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help=f"fixtures to regenerate (default: all); choices: {', '.join(FIXTURES)}, demo"
    )
    args = parser.parse_args(argv)
    names = args.names or list(FIXTURES) + ["demo"]
    unknown = [n for n in names if n not in FIXTURES and n != "demo"]
    if unknown:
        parser.error(f"unknown fixtures: {unknown}")

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    fixture_ops: Dict[str, List[str]] = {}
    failures = []
    for name in names:
        t0 = time.time()
        print(f"== {name}")
        try:
            if name == "demo":
                fx = make_demo()
                manifest, arrays, ops = build_and_record(name, fx, MODELS_DIR / "demo.pte")
                np.save(MODELS_DIR / "demo_input.npy", arrays["c0_in0"])
                np.savez(MODELS_DIR / "demo_expected.npz", out0=arrays["c0_out0"])
                size = (MODELS_DIR / "demo.pte").stat().st_size
            else:
                fx = FIXTURES[name]()
                manifest, arrays, ops = build_and_record(name, fx, FIXTURE_DIR / f"{name}.pte")
                write_npz(FIXTURE_DIR / f"{name}.npz", manifest, arrays)
                size = (FIXTURE_DIR / f"{name}.pte").stat().st_size
        except Exception as e:  # keep going; report at the end
            import traceback

            traceback.print_exc()
            failures.append((name, repr(e)))
            continue
        fixture_ops[name] = ops
        print(f"  {size} bytes, {len(fx.calls)} call(s), {time.time() - t0:.1f}s")
        print("  operators: " + ", ".join(ops))

    # descriptions for the README (cheap: builders only construct small modules)
    for name, builder in list(FIXTURES.items()) + [("demo", make_demo)]:
        FIXTURE_DESCRIPTIONS[name] = builder().description
    write_operator_table(FIXTURE_DIR / "OPERATORS.txt", fixture_ops)
    write_readme(FIXTURE_DIR / "README.md")

    if failures:
        print("FAILED:")
        for name, err in failures:
            print(f"  {name}: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
