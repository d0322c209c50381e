#!/usr/bin/env python
"""Export the small committed fixtures for the static int8 rules the model zoo found.

Run with the reference virtualenv::

    .ref/bin/python tools/zoo/export_fixtures.py [NAME ...]    # default: every fixture

Writes ``tests/fixtures/zoo/NAME.pte`` + ``NAME.npz`` (the manifest format of ``tools/export_fixtures.py``:
``__manifest__`` lists the calls, ``c<call>_in<i>`` / ``c<call>_out<j>`` hold the inputs and ExecuTorch's
outputs). The first two are PT2E static int8 (XNNPACKQuantizer, per-channel) lowered to XNNPACK:

* ``qint8_add``: ``x + y``, ``x - y`` and ``x * y`` on hand-placed int8 grids (quantize / dequantize pairs as
  convert_pt2e writes them) where the sum's scale is twice the inputs': XNNPACK adds in fixed point (21-bit
  multipliers, ties rounded up) and multiplies through a float32 product scale, so adding or multiplying the
  dequantized floats lands about half of these sums on another code; and 2x2 average pools, which XNNPACK
  computes from the integer sums with the zero point folded in before rounding;
* ``qint8_se``: a mobile block (conv, hardswish, squeeze-excitation with average pool / hardsigmoid / mul, a
  residual add, a global average pool) with each stage as an output, so a failure names the stage. The
  quantizer leaves hardswish and hardsigmoid in float; the pools, the mul and the add run in int8.

``norm_order`` is a program without delegate of a LayerNorm(64), a GroupNorm(4, 32), two means and a
LayerNorm(300) on values over four decades: ExecuTorch's kernels sum each row left to right in float32, except
its optimized layer norm from 256 elements a row (vectorised Welford moments); the order shows in the last bits
of the statistics (the zoo's deit 8da4w case moved by 2.8e-3 of scale on one such bit).

``litert_graphs`` is an XNNPACK fp32 program of two patterns LiteRT once refused, sending their graphs to the
NumPy engine: a DenseNet transition (batch norm, ReLU, a 1x1 convolution without a bias, a 2x2 average pool;
LiteRT's convolutions need a bias input) and GPT-2's Conv1D (``addmm`` with weights stored [in, out], an XNNPACK
fully-connected node with transposed weights).

``qd8_layer_norm`` is 8da4w linears (group 32) around a residual LayerNorm(64) twice, and a LayerNorm(320) in a
branch of its own, on rows over four decades: the layer norms are portable kernels between XNNPACK calls, whose
dynamic quantization of their outputs magnifies an ulp of difference into a quantization step.

``qd8_ties`` is an 8da4w linear (int8 dynamic activations, int4 group-32 weights through torchao) whose
inputs sit on exact float32 rounding ties of the dynamic quantization: XNNPACK rounds the exact product
``x * multiplier`` rounded to float32 and then half to even, as pterun does (the tie is where any upstream
difference shows first).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

warnings.filterwarnings("ignore")
OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "zoo"


def qdq(x, scale: float, zero_point: int):
    """Fake-quantize to int8 the way convert_pt2e writes it (the XNNPACK partitioner lowers these pairs)."""
    q = torch.ops.quantized_decomposed.quantize_per_tensor.default(x, scale, zero_point, -128, 127, torch.int8)
    return torch.ops.quantized_decomposed.dequantize_per_tensor.default(q, scale, zero_point, -128, 127,
                                                                         torch.int8)


class Arith(nn.Module):
    """Hand-placed int8 grids: the sum's scale is exactly twice the inputs' (half the sums are ties, which
    XNNPACK rounds up and round-half-to-even does not); the product scale ratio is 0.5 in float32 arithmetic;
    2x2 means whose input and output zero points differ by an odd number (XNNPACK folds the zero point in
    before rounding the tie to even)."""

    def forward(self, x, y):
        a, b = qdq(x, 0.02, 3), qdq(y, 0.02, -5)
        pooled = nn.functional.adaptive_avg_pool2d(qdq(x.reshape(8, 64, 2, 2), 0.02, 3), 1)  # 2x2 means
        return (qdq(a + b, 0.04, 1), qdq(a - b, 0.04, -2), qdq(qdq(x, 0.1, 0) * qdq(y, 0.1, 0), 0.02, 0),
                qdq(pooled, 0.02, 0))


class SEBlock(nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.expand = nn.Conv2d(c, 2 * c, 1)
        self.dw = nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c)
        self.se1 = nn.Conv2d(2 * c, c, 1)
        self.se2 = nn.Conv2d(c, 2 * c, 1)
        self.project = nn.Conv2d(2 * c, c, 1)

    def forward(self, x):
        a = nn.functional.hardswish(self.dw(self.expand(x)))
        s = nn.functional.hardsigmoid(self.se2(torch.relu(self.se1(nn.functional.adaptive_avg_pool2d(a, 1)))))
        b = a * s
        r = self.project(b) + x
        return a, s, b, r, nn.functional.adaptive_avg_pool2d(r, 1)


class Norms(nn.Module):
    """ExecuTorch's portable layer and group norms and means: rows whose float32 sums round differently when
    added left to right (as those kernels do) and pairwise (as NumPy's sum does)."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(64)
        self.gn = nn.GroupNorm(4, 32)
        self.ln_long = nn.LayerNorm(300)  # from 256 a row ExecuTorch's layer norm is vectorised Welford

    def forward(self, x, y, z):  # the means: RMSNorm's mean of squares over the last dim, and one over dims 0, 2
        return self.ln(x), self.gn(y), (x * x).mean(-1, keepdim=True), y.mean((0, 2)), self.ln_long(z)


class QuantizedNorms(nn.Module):
    """8da4w linears around layer norms, as a transformer has them: LayerNorm(64) (ExecuTorch's scalar loop) in one
    branch, LayerNorm(320) (vectorised Welford moments) in the other."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(64, 64), nn.Linear(64, 64)
        self.ln, self.ln2 = nn.LayerNorm(64), nn.LayerNorm(64)
        self.wide_up, self.wide_down = nn.Linear(64, 320), nn.Linear(320, 64)
        self.ln_wide = nn.LayerNorm(320)

    def forward(self, x):
        h = self.ln(self.up(x) + x)
        return self.ln2(self.down(h) + h), self.wide_down(self.ln_wide(self.wide_up(x)))


class LiteRTGraphs(nn.Module):
    """A DenseNet transition (BN, ReLU, bias-free 1x1 conv, 2x2 average pool) and a GPT-2 Conv1D (addmm with
    [in, out] weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(16)
        self.conv = nn.Conv2d(16, 8, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)
        self.w = nn.Parameter(torch.randn(32, 24) * 0.2)  # [in, out], as transformers' Conv1D stores it
        self.b = nn.Parameter(torch.randn(24) * 0.1)

    def forward(self, x, t):
        y = self.pool(self.conv(torch.relu(self.bn(x))))
        return y, torch.addmm(self.b, t, self.w)


def norm_rows(shape: tuple, g: torch.Generator) -> torch.Tensor:
    """Values over four decades plus an offset, so that the order of a float32 sum shows in its last bits."""
    mag = 10 ** (torch.rand(shape, generator=g) * 4 - 2)
    return torch.randn(shape, generator=g) * mag + 3.0


def lower(model: nn.Module, example: tuple, calib: list):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    gm = torch.export.export(model, example).module()
    prepared = prepare_pt2e(gm, XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
    for c in calib:
        prepared(*c)
    ep = torch.export.export(convert_pt2e(prepared), example)
    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()


def record(name: str, et, calls: list) -> None:
    from executorch.runtime import Runtime

    OUT.mkdir(parents=True, exist_ok=True)
    pte = OUT / f"{name}.pte"
    pte.write_bytes(et.buffer)
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    arrays, manifest = {}, []
    for c, inputs in enumerate(calls):
        outs = method.execute(list(inputs))
        for i, x in enumerate(inputs):
            arrays[f"c{c}_in{i}"] = x.numpy()
        for j, o in enumerate(outs):
            arrays[f"c{c}_out{j}"] = o.numpy()
        manifest.append({"method": "forward", "inputs": [{"array": f"c{c}_in{i}"} for i in range(len(inputs))],
                         "outputs": [{"array": f"c{c}_out{j}"} for j in range(len(outs))]})
    arrays["__manifest__"] = np.array(json.dumps(manifest))
    np.savez_compressed(OUT / f"{name}.npz", **arrays)
    print(f"{name}: {len(et.buffer)} bytes, {len(calls)} call(s)")


def tie_rows(rows: int, width: int, g: torch.Generator) -> torch.Tensor:
    """Rows whose dynamic int8 quantization lands on exact float32 ties.

    Each row spans [-1.7, 2.3] (so its multiplier is 255 / 4 in float32); every other element x is chosen so
    that the float32 product x * multiplier is exactly k + 0.5 while the exact product is a hair above or below
    it. Rounding the float32 product (half to even) and rounding the exact product give different codes for
    about half of them.
    """
    mult = np.float32(255) / (np.float32(2.3) - np.float32(-1.7))
    out = np.empty((rows, width), np.float32)
    ks = torch.randint(-100, 140, (rows, width), generator=g).numpy()
    for r in range(rows):
        for c in range(width):
            t = np.float32(ks[r, c] + 0.5)
            x = np.float32(t / mult)
            for _ in range(64):  # walk to a neighbour whose float32 product rounds onto t but is not t
                if np.float32(x * mult) == t and float(x) * float(mult) != float(t):
                    break
                x = np.nextafter(x, np.float32(np.inf if (c + r) % 2 else -np.inf))
            out[r, c] = x
        out[r, 0], out[r, 1] = np.float32(-1.7), np.float32(2.3)
    return torch.from_numpy(out)


def main() -> int:
    """Every fixture, or only those named on the command line (qint8_add, qint8_se, norm_order, qd8_ties,
    qd8_layer_norm, litert_graphs)."""
    want = set(sys.argv[1:]) or {"qint8_add", "qint8_se", "norm_order", "qd8_ties", "qd8_layer_norm", "litert_graphs"}
    g = torch.Generator().manual_seed(13)
    if "qint8_add" in want:
        # every code of x against random codes of y
        xs = ((torch.arange(-128, 128, dtype=torch.float32) - 3) * 0.02).repeat(8, 1)
        ys = (torch.randint(-128, 128, (8, 256), generator=g).float() + 5) * 0.02
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower  # also registers quantized_decomposed

        ep = torch.export.export(Arith(), (xs, ys))
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        record("qint8_add", et, [(xs, ys)])

    if "qint8_se" in want:
        torch.manual_seed(5)
        m = SEBlock().eval()
        x = torch.randn(1, 8, 8, 8, generator=g)
        et = lower(m, (x,), [(torch.randn(1, 8, 8, 8, generator=g) * 1.5,) for _ in range(6)])
        record("qint8_se", et, [(x,), (torch.randn(1, 8, 8, 8, generator=g) * 2,)])

    if "norm_order" in want:  # portable layer norm and group norm
        from executorch.exir import to_edge

        g = torch.Generator().manual_seed(19)
        torch.manual_seed(19)
        m = Norms().eval()
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if name.endswith("weight") else 0.0))
        calls = [(norm_rows((16, 64), g), norm_rows((2, 32, 8, 8), g), norm_rows((3, 4, 300), g)) for _ in range(2)]
        et = to_edge(torch.export.export(m, calls[0])).to_executorch()
        record("norm_order", et, calls)

    if "qd8_ties" in want:  # an 8da4w linear (group 32) fed rows full of exact float32 rounding ties
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        g = torch.Generator().manual_seed(17)
        torch.manual_seed(17)
        lin = nn.Linear(64, 16).eval()
        quantize_(lin, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
        x = tie_rows(8, 64, g)
        ep = torch.export.export(lin, (x,))
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        record("qd8_ties", et, [(x,), (tie_rows(8, 64, g),)])

    if "qd8_layer_norm" in want:  # 8da4w linears with portable layer norms between them
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerGroup

        g = torch.Generator().manual_seed(29)
        torch.manual_seed(29)
        m = QuantizedNorms().eval()
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.startswith("ln"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5 + (1.0 if name.endswith("weight") else 0.0))
        quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
        calls = [(norm_rows((16, 64), g),) for _ in range(3)]
        ep = torch.export.export(m, calls[0])
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        record("qd8_layer_norm", et, calls)

    if "litert_graphs" in want:  # fp32 XNNPACK: a bias-free convolution, transposed fully-connected weights
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        g = torch.Generator().manual_seed(23)
        torch.manual_seed(23)
        m = LiteRTGraphs().eval()
        with torch.no_grad():  # batch statistics that are not the identity
            m.bn.running_mean.normal_(generator=g)
            m.bn.running_var.uniform_(0.5, 2.0, generator=g)
            m.bn.weight.normal_(generator=g)
            m.bn.bias.normal_(generator=g)
        calls = [(torch.randn(1, 16, 8, 8, generator=g), torch.randn(5, 32, generator=g)) for _ in range(2)]
        ep = torch.export.export(m, calls[0])
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        record("litert_graphs", et, calls)
    return 0


if __name__ == "__main__":
    sys.exit(main())
