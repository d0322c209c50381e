"""The models and calls behind the portable fixtures that tools/export_fixtures.py exports: one builder per
fixture, registered in FIXTURES, plus the demo model shipped inside the package.

The fixture description and registry live in fixture_models_base.py, the builders in fixture_models_nets.py
(fixtures 1-6) and fixture_models_programs.py (fixtures 7-13); this module imports them in that order (so
FIXTURES keeps its order), re-exports their names and holds the demo model.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from fixture_models_base import (  # noqa: F401  (re-exported)
    FIXTURES,
    Fixture,
    MethodSpec,
    fixture,
    randomize_batchnorm,
    seeded,
)
from fixture_models_nets import (  # noqa: F401  (re-exported; importing registers fixtures 1-6)
    GRUModel,
    SmallCNN,
    SmallResNet,
    TinyTransformer,
    make_cnn,
    make_gru,
    make_mlp,
    make_mobilenet_v2,
    make_resnet_small,
    make_transformer,
)
from fixture_models_programs import (  # noqa: F401  (re-exported; importing registers fixtures 7-13)
    AddMul,
    ChannelsLastNet,
    CondModel,
    DynamicModel,
    Encoder,
    Head,
    OpsMisc,
    StatefulModel,
    make_channels_last,
    make_cond,
    make_dynamic,
    make_multi_method,
    make_ops_misc,
    make_stateful,
    make_unplanned_io,
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
