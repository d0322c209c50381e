"""Portable fixture models 1-6, ordinary networks: mlp, cnn, transformer, gru, mobilenet_v2, resnet_small.

Importing this module registers their builders in fixture_models_base.FIXTURES (in this order).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from fixture_models_base import Fixture, MethodSpec, fixture, randomize_batchnorm, seeded


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
