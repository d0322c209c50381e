#!/usr/bin/env python
"""Export the quantized, non-delegated fixtures ``q_static_cnn`` and ``q_embedding_4bit``.

Run with the reference virtualenv (torch + executorch + torchao)::

    .ref/bin/python tools/export_quantized_fixtures.py            # both fixtures
    .ref/bin/python tools/export_quantized_fixtures.py q_static_cnn

* ``q_static_cnn``: a small CNN quantized statically to int8 with PT2E (``prepare_pt2e`` / ``convert_pt2e``,
  ``XNNPACKQuantizer`` with ``get_symmetric_quantization_config(is_per_channel=True)``), exported with
  ``to_edge(...).to_executorch()`` and *no* partitioner, so the program runs the quantized_decomposed
  quantize / dequantize kernels (per tensor and per channel) around float portable kernels.
* ``q_embedding_4bit``: an embedding whose weight is quantized to int4 with per-group scales and zero points,
  packed two values per byte as ExecuTorch's exporter packs them (element 2k in the high nibble), and looked up
  with ``quantized_decomposed::embedding_4bit.dtype``, followed by a float linear layer.

Each fixture is written as ``tests/fixtures/NAME.pte`` plus ``NAME.npz`` in the format of
``tools/export_fixtures.py`` (``__manifest__`` = JSON list of calls, ``c<call>_in<i>`` / ``c<call>_out<j>``),
with the outputs of the reference runtime (``executorch.runtime`` after ``import executorch.kernels.quantized``).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.relu(self.c2(x))
        return self.fc(torch.flatten(x, 1))


def static_cnn():
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    g = torch.Generator().manual_seed(11)
    model = SmallCNN().eval()
    x = torch.randn(1, 3, 16, 16, generator=g)
    gm = torch.export.export(model, (x,)).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(gm, quantizer)
    for _ in range(8):
        prepared(torch.randn(1, 3, 16, 16, generator=g))
    converted = convert_pt2e(prepared)
    ep = torch.export.export(converted, (x,))
    calls = [(x,), (torch.randn(1, 3, 16, 16, generator=g) * 1.5,)]
    return ep, calls


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """int4 values in [-8, 7], [rows, dim] -> uint8 [rows, dim / 2]: element 2k in the high nibble."""
    u = (q + 8).to(torch.uint8).reshape(q.shape[0], -1, 2)
    return (u[:, :, 0] << 4) | u[:, :, 1]


class Embedding4bit(nn.Module):
    def __init__(self, num: int = 32, dim: int = 16, group: int = 8, out: int = 6):
        super().__init__()
        g = torch.Generator().manual_seed(12)
        weight = torch.randn(num, dim, generator=g)
        groups = weight.reshape(num, dim // group, group)
        lo, hi = groups.amin(-1), groups.amax(-1)
        scales = ((hi - lo) / 15).clamp(min=1e-6)
        zeros = (-8 - lo / scales).round().clamp(-8, 7)
        q = (groups / scales[..., None] + zeros[..., None]).round().clamp(-8, 7).to(torch.int8)
        self.register_buffer("packed", pack_int4(q.reshape(num, dim)))
        self.register_buffer("scales", scales)
        self.register_buffer("zeros", zeros)
        self.proj = nn.Linear(dim, out)

    def forward(self, idx):
        e = torch.ops.quantized_decomposed.embedding_4bit.dtype(self.packed, self.scales, self.zeros, -8, 7, idx,
                                                                dtype=torch.float32)
        return self.proj(e).sum(dim=1), e


def embedding_4bit():
    from executorch.exir.passes._quant_patterns_and_replacements import quantized_decomposed_lib  # noqa: F401

    model = Embedding4bit().eval()
    g = torch.Generator().manual_seed(13)
    idx = torch.randint(0, 32, (2, 5), generator=g)
    ep = torch.export.export(model, (idx,))
    calls = [(idx,), (torch.tensor([[31, 0, 7, 7, 16]]).expand(2, 5).contiguous(),)]
    return ep, calls


FIXTURES = {"q_static_cnn": static_cnn, "q_embedding_4bit": embedding_4bit}


def encode(value, key: str, arrays: dict) -> dict:
    arrays[key] = value.detach().cpu().contiguous().numpy().copy()
    return {"array": key}


def export_one(name: str) -> None:
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized kernels in the runtime)
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.runtime import Runtime

    ep, calls = FIXTURES[name]()
    et = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch()
    ops = sorted({f"{o.name}.{o.overload}" if o.overload else o.name
                  for p in et.executorch_program.execution_plan for o in p.operators})
    pte = FIXTURE_DIR / f"{name}.pte"
    pte.write_bytes(et.buffer)
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    eager = ep.module()
    arrays: dict = {}
    manifest = []
    for c, inputs in enumerate(calls):
        outs = list(method.execute(list(inputs)))
        with torch.no_grad():
            ref = eager(*inputs)
        ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
        worst = max(float((o - r).abs().max()) for o, r in zip(outs, ref))
        print(f"  call {c}: reference runtime vs eager max |diff| {worst:.3g}")
        manifest.append({"method": "forward",
                         "inputs": [encode(v, f"c{c}_in{i}", arrays) for i, v in enumerate(inputs)],
                         "outputs": [encode(v, f"c{c}_out{j}", arrays) for j, v in enumerate(outs)]})
    np.savez(FIXTURE_DIR / f"{name}.npz", __manifest__=np.array(json.dumps(manifest)), **arrays)
    print(f"{name}: {pte.stat().st_size} bytes; operators: {', '.join(ops)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"fixtures to export (default: all of {', '.join(FIXTURES)})")
    names = parser.parse_args(argv).names or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        parser.error(f"unknown fixtures {unknown}; choose from {list(FIXTURES)}")
    for name in names:
        export_one(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
