"""The fixture description and registry shared by the portable fixture models (see fixture_models.py):
MethodSpec, Fixture, the FIXTURES registry with its @fixture decorator, and seeding helpers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn

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
