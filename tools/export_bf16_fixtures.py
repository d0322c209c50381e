#!/usr/bin/env python
"""Export the bfloat16 ``.pte`` test fixtures for pterun (``tests/fixtures/bf16_*``).

Run with the *reference* virtualenv (torch + executorch); pterun itself never depends on torch:

    .ref/bin/python tools/export_bf16_fixtures.py            # all bf16 fixtures
    .ref/bin/python tools/export_bf16_fixtures.py mlp cnn    # only some of them

Each model is built in bf16 (weights and inputs) with fixed seeds, exported like the portable fixtures
(``torch.export.export`` -> ``to_edge`` -> ``to_executorch``, no delegate), and its calls are run, in order, on one
program loaded by ExecuTorch's runtime. Each is also lowered with ``XnnpackPartitioner``, and the script checks
that no bf16 value enters a delegate: ExecuTorch 1.5.1's partitioner takes no bf16 node, so the bf16 part of a
program runs on the portable and optimized kernels either way (a float32 island inside it may be delegated). ``tests/fixtures/bf16_NAME.npz`` then holds the
inputs and ExecuTorch's outputs in the usual manifest layout (see ``tests/fixtures/README.md``), except that a
bf16 tensor is stored as its uint16 bit pattern and its manifest entry says so: ``{"array": KEY, "dtype":
"bfloat16"}`` (NumPy has no bfloat16 of its own, and ``np.save`` of an ml_dtypes array reads back as raw bytes).

Exporting all of them also rewrites ``tests/fixtures/BF16_README.md`` (what each fixture covers, and how its outputs differ
from eager PyTorch's: ExecuTorch's portable kernels round in bf16 where eager PyTorch accumulates in float32).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

warnings.filterwarnings("ignore")

from export_fixtures import encode_value, export_program, program_operators
from fixture_models import Fixture, MethodSpec

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"
REGEN_CMD = ".ref/bin/python tools/export_bf16_fixtures.py"
BF16 = torch.bfloat16

FIXTURES: dict[str, Callable[[], Fixture]] = {}


def fixture(name: str):
    def register(fn):
        FIXTURES[name] = fn
        return fn

    return register


def randn(g: torch.Generator, *shape, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g) * scale).to(BF16)


def bf16_module(module: nn.Module, g: torch.Generator) -> nn.Module:
    """``module`` in bf16, eval mode, with every float parameter and buffer redrawn from ``g`` (BatchNorm
    statistics included: a fresh BatchNorm would normalise by mean 0 / var 1)."""
    module = module.to(BF16).eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.2 if name.endswith("bias") else 0.5))
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return module


# --------------------------------------------------------------------------------------------------------------
# the fixtures
# --------------------------------------------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 32)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


@fixture("mlp")
def make_mlp() -> Fixture:
    g = torch.Generator().manual_seed(0)
    model = bf16_module(MLP(), g)
    xs = [randn(g, 4, 16), randn(g, 4, 16, scale=3.0)]
    return Fixture(
        description="Linear(16,32)-ReLU-Linear(32,32) in bf16 (permute + portable `addmm`, which accumulates in "
        "bf16); input bf16[4,16]; two calls.",
        methods={"forward": MethodSpec(model, (xs[0],))},
        calls=[("forward", [x]) for x in xs],
    )


class Ops(nn.Module):
    """Common bf16 operators, each output one or two operators away from the inputs."""

    def __init__(self, g: torch.Generator):
        super().__init__()
        self.w = nn.Parameter(randn(g, 32, 16, scale=0.3), requires_grad=False)
        self.bias = nn.Parameter(randn(g, 16, scale=0.3), requires_grad=False)
        self.ln = nn.LayerNorm(32).to(BF16)
        self.rms_w = nn.Parameter(randn(g, 32), requires_grad=False)
        with torch.no_grad():
            self.ln.weight.copy_(randn(g, 32))
            self.ln.bias.copy_(randn(g, 32, scale=0.2))

    def forward(self, x, y, a, b):  # x, y: [4, 32]; a: [3, 8, 32]; b: [3, 32, 8]
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.rms_w
        return (
            x + y, x * y - 0.5 * x, x / (y.abs() + 1.0), torch.add(x, y, alpha=0.3),
            F.relu(x), F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x), torch.tanh(x), torch.sigmoid(x),
            torch.exp(x), torch.rsqrt(x.abs() + 0.1), x.pow(2), x.clamp(-0.5, 0.7), F.leaky_relu(x, 0.1),
            torch.where(x > y, x, y),
            torch.softmax(x, -1), torch.softmax(x, 0), torch.log_softmax(x, -1), torch.log_softmax(x, 0),
            self.ln(x), rms,
            x.mean(-1), x.sum(0), x.var(-1), (1 + 0.1 * x).prod(-1), x.cumsum(-1), x.amax(-1),
            x @ self.w, torch.addmm(self.bias, x, self.w, beta=0.5, alpha=2.0), torch.bmm(a, b),
            a.view(3, 1, 8, 32) @ b.view(3, 1, 32, 8),
            x.float() * 1.5, (x.float() * 1.1).to(BF16),
        )


@fixture("ops")
def make_ops() -> Fixture:
    g = torch.Generator().manual_seed(1)
    model = Ops(g).eval()
    inputs = [randn(g, 4, 32), randn(g, 4, 32), randn(g, 3, 8, 32), randn(g, 3, 32, 8)]
    return Fixture(
        description="34 outputs of common bf16 operators on x, y bf16[4,32], a bf16[3,8,32], b bf16[3,32,8]: "
        "add/sub/mul/div (tensor, scalar, alpha), relu, gelu (erf and tanh), silu, tanh, sigmoid, exp, rsqrt, "
        "pow, clamp, leaky_relu, where, softmax and log_softmax (last dim and dim 0), layer_norm (32 wide), an "
        "RMS norm, mean, sum, var, prod, cumsum, amax, mm, addmm (alpha 2, beta 0.5), bmm, a 4-D matmul, and "
        "conversions to and from float32.",
        methods={"forward": MethodSpec(model, tuple(inputs))},
        calls=[("forward", inputs)],
    )


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2, groups=2)
        self.head = nn.Linear(8, 10)
        self.conv1d = nn.Conv1d(4, 6, 3, padding=1, dilation=2)

    def forward(self, img, seq):  # img: [2, 3, 16, 16]; seq: [2, 4, 20]
        h = F.max_pool2d(F.relu(self.bn1(self.conv1(img))), 2)  # [2, 8, 8, 8]
        h = F.hardtanh(self.conv2(self.dw(h)), -1.0, 1.5)  # [2, 16, 4, 4]
        pooled = F.avg_pool2d(h, 3, stride=1, padding=1, count_include_pad=False)
        up = self.up(pooled)  # [2, 8, 8, 8]
        logits = self.head(F.adaptive_avg_pool2d(F.avg_pool2d(up, 2), 1).flatten(1))
        return logits, pooled, F.adaptive_avg_pool2d(up, (3, 3)), self.conv1d(seq)


@fixture("cnn")
def make_cnn() -> Fixture:
    g = torch.Generator().manual_seed(2)
    model = bf16_module(CNN(), g)
    inputs = [randn(g, 2, 3, 16, 16), randn(g, 2, 4, 20)]
    return Fixture(
        description="bf16 conv net: conv 3->8 pad 1, batch norm (eval), relu, max pool, depthwise conv, grouped "
        "strided conv without bias, hardtanh, avg pool 3/1/1 without padding in the count, grouped transposed "
        "conv (stride 2), avg pool 2, adaptive avg pool to 1 (a mean) and to 3x3, linear head; and a dilated, "
        "padded conv1d. Inputs bf16[2,3,16,16] and bf16[2,4,20]; outputs: logits, the avg-pooled map, the 3x3 "
        "pooled map, the conv1d output.",
        methods={"forward": MethodSpec(model, tuple(inputs))},
        calls=[("forward", inputs)],
    )


# --------------------------------------------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------------------------------------------


def compare_with_eager(fx: Fixture, reference: list[list[Any]]) -> str:
    """How ExecuTorch's bf16 outputs differ from eager PyTorch's: elements that differ, and the largest
    difference as a fraction of its output's largest magnitude."""
    differing, total, worst = 0, 0, 0.0
    with torch.no_grad():
        for (method, inputs), ref in zip(fx.calls, reference):
            eager = fx.methods[method].module(*inputs)
            eager = list(eager) if isinstance(eager, (tuple, list)) else [eager]
            for r, e in zip(ref, eager):
                if r.dtype == BF16 and r.numel():
                    r32, e32 = r.float(), e.float()
                    differing += int((r32 != e32).sum())
                    total += r.numel()
                    scale = float(r32.abs().max()) or 1.0
                    worst = max(worst, float((r32 - e32).abs().max()) / scale)
    return f"{differing} of {total} bf16 elements differ (at most {worst:.2g} of the output's scale)"


def xnnpack_delegated_dtypes(fx: Fixture) -> set:
    """The dtypes of the values that go into or come out of XNNPACK delegates when ``fx`` is lowered with
    ``XnnpackPartitioner``."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    (spec,) = fx.methods.values()
    ep = torch.export.export(spec.module, spec.example_inputs, strict=False)
    graph = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).exported_program().graph
    found = set()
    for node in graph.nodes:
        if node.op == "call_function" and "call_delegate" in str(node.target):
            for v in [a.meta.get("val") for a in node.args[1:] if hasattr(a, "meta")] + [node.meta.get("val")]:
                for t in v if isinstance(v, (tuple, list)) else [v]:
                    if isinstance(t, torch.Tensor):
                        found.add(t.dtype)
    return found


def build_and_record(name: str, fx: Fixture):
    from executorch.runtime import Runtime

    et_prog = export_program(fx)
    delegated = xnnpack_delegated_dtypes(fx)
    if BF16 in delegated:
        raise RuntimeError(f"bf16_{name}: the XNNPACK partitioner delegates bf16 values now: regenerate the "
                           "README's claim and add XNNPACK bf16 fixtures")
    pte = FIXTURE_DIR / f"bf16_{name}.pte"
    pte.write_bytes(et_prog.buffer)
    program = Runtime.get().load_program(str(pte))
    manifest, arrays, reference = [], {}, []
    for ci, (method, inputs) in enumerate(fx.calls):
        outs = list(program.load_method(method).execute(inputs))
        reference.append(outs)
        manifest.append({
            "method": method,
            "inputs": [encode_value(v, f"c{ci}_in{i}", arrays) for i, v in enumerate(inputs)],
            "outputs": [encode_value(v, f"c{ci}_out{j}", arrays) for j, v in enumerate(outs)],
        })
    np.savez(FIXTURE_DIR / f"bf16_{name}.npz", __manifest__=np.array(json.dumps(manifest)), **arrays)
    return program_operators(et_prog), compare_with_eager(fx, reference), pte.stat().st_size, delegated


def write_readme(rows: list[tuple]) -> None:
    lines = [
        "# bfloat16 fixtures",
        "",
        "bf16 programs (weights and inputs in bf16) with their inputs and the **reference runtime's** outputs "
        "(`executorch.runtime`, executorch 1.5.1, torch 2.14.1). Regenerate with the reference virtualenv from the "
        "repository root:",
        "",
        "```",
        f"{REGEN_CMD}            # all of them",
        f"{REGEN_CMD} mlp cnn    # some of them",
        "```",
        "",
        "`bf16_NAME.npz` has the usual manifest (`__manifest__` = JSON list of calls, arrays `c<call>_in<i>` / "
        '`c<call>_out<j>`); a bf16 tensor is stored as its uint16 bits, its entry marked `"dtype": "bfloat16"`. '
        "`tests/test_bf16.py` checks pterun against them.",
        "",
        "Lowered with `XnnpackPartitioner`, no bf16 value enters a delegate (the script checks): ExecuTorch "
        "1.5.1's partitioner takes no bf16 node. `bf16_mlp` and `bf16_cnn` get no delegate at all; in `bf16_ops` "
        "XNNPACK takes only the float32 parts (`silu`, which the export computes in float32, and "
        "the two products of `x.float()`).",
        "",
        "ExecuTorch's portable `addmm`, `convolution`, `avg_pool2d`, `var`, `prod`, `cumsum` and batch norm "
        "accumulate in bf16, rounding after every addition; eager PyTorch accumulates in float32, so the recorded "
        "outputs are not eager PyTorch's (the last column says by how much).",
        "",
        "| fixture | .pte bytes | contents | operators | vs eager PyTorch |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| `bf16_{n}` | {size} | {desc} | {', '.join(f'`{o}`' for o in ops)} | {eager} |"
              for n, size, desc, ops, eager in rows]
    lines += [
        "",
        "Not in the fixtures: layer norm over 256 or more elements. ExecuTorch 1.5.1's optimized "
        "`native_layer_norm` computes a bf16 row of that size from float32 vector loads of the bf16 data "
        "(`RowwiseMoments` in kernels/optimized/cpu/moments_utils.h), so its statistics are wrong (outputs with "
        "a standard deviation of ~1.4 instead of 1); pterun computes them in float32 from the bf16 values.",
    ]
    (FIXTURE_DIR / "BF16_README.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"fixtures to export (default: all): {', '.join(FIXTURES)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in FIXTURES]
    if unknown:
        parser.error(f"unknown fixtures: {unknown}")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    rows = []
    for name in args.names or list(FIXTURES):
        fx = FIXTURES[name]()
        ops, eager, size, delegated = build_and_record(name, fx)
        print(f"== bf16_{name}: {size} bytes; {eager}\n   operators: {', '.join(ops)}\n   lowered with "
              f"XnnpackPartitioner, delegate values: {sorted(str(d) for d in delegated) or 'no delegate'}")
        rows.append((name, size, fx.description, ops, eager))
    if len(rows) == len(FIXTURES):
        write_readme(rows)
    else:
        print(f"(BF16_README.md is rewritten when all fixtures are exported: {REGEN_CMD})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
