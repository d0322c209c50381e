#!/usr/bin/env python
"""Export four fixtures of what load-time constants meet: ``tests/fixtures/xnn_const_delegate.pte``, an XNNPACK
delegate call whose inputs are all constants, ``tests/fixtures/const_reuse.pte``, a portable program whose
weight transpose both a compiled run and an operator after it read, ``tests/fixtures/xnn_int64_buckets.pte``,
int64 index arithmetic between two delegate calls, and ``tests/fixtures/xnn_folded_between.pte``, work on
constants alone between a delegate call and the operators after it.

Run with the reference virtualenv (torch + executorch); pterun never depends on torch::

    .ref/bin/python tools/export_fold_fixture.py

The model computes a bias from ``arange`` (a portable operator on nothing but constants), through an XNNPACK
delegate (``sigmoid``, ``floor``, arithmetic), a comparison and a cast (portable), into a second delegate that
applies it to a linear layer's output: the T5 encoder's relative-position bias in miniature. pterun computes the
first delegate call at load (``pterun.interp.fold``).

``const_reuse`` (no delegate) transposes a weight, multiplies by it and takes a softmax (a run pterun compiles into
one LiteRT program), then a ``cumsum`` (which ends the run) and a second product with the same transpose: the
compiled run computes the transpose for itself and the interpreter replays it for the product after
(``pterun.interp.merge``).

``xnn_int64_buckets`` is the T5 encoder's relative-position buckets in miniature: one delegate computes a linear
layer of the input and, from ``arange`` alone, a ``log``; portable int64 operators (a cast, additions, a
``full_like``, a ``minimum``, a ``where``) turn the log into bucket indices, an ``embedding`` of a small table
looks them up, and a second delegate adds them to a second linear layer of the first one's output, less its mean.
pterun holds the int64 operators and the small embedding inside one merged LiteRT call, exactly.

``xnn_folded_between`` is a BERT encoder's attention mask in miniature: after a first delegate (a linear layer),
an int64 comparison of ``arange`` and a ``where`` make a bias from constants alone, between that call and a layer
norm (portable) and a second delegate. pterun folds the bias at load before it merges, so the two calls and the
layer norm become one merged call.

Each program's recorded calls, inputs and ExecuTorch's outputs go to ``NAME.npz`` in the
fixtures' usual format (``__manifest__`` with ``c<call>_in<i>`` / ``c<call>_out<j>`` arrays).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


class ConstDelegate(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        pos = torch.arange(1, 9, dtype=torch.float32)
        bias = torch.floor(torch.sigmoid(pos * 0.25) * 4.0) / 4.0  # one delegate, on constants only
        step = (bias > 0.7).to(torch.float32)  # portable: a comparison and a cast
        return self.lin(x) * (bias + step)


class Int64Buckets(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(8, 8)
        self.lin2 = nn.Linear(8, 8)
        self.table = nn.Embedding(16, 8)

    def forward(self, x):
        h = self.lin1(x)
        pos = torch.arange(1, 9, dtype=torch.float32)
        rel = torch.log(pos) * 4.0 + 1.5  # in the first delegate, beside lin1
        b = rel.to(torch.int64) + 2  # portable int64 from here on
        b = torch.minimum(b, torch.full_like(b, 9))
        b = torch.where(pos < 3.0, b + 5, b)
        return self.lin2(h - h.mean(-1, keepdim=True)) + self.table(b).sum(0)


class FoldedBetween(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin1 = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.lin2 = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin1(x)
        keep = torch.arange(8) >= 2  # int64: portable, on constants alone
        bias = torch.where(keep, 0.0, -1.0)
        return self.lin2(self.norm(h)) + bias


class ConstReuse(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        wt = self.w.t()
        y = torch.softmax(x @ wt, dim=-1)
        return torch.cumsum(y, dim=-1) @ wt


def main() -> None:
    torch.manual_seed(0)
    export(ConstDelegate().eval(), "xnn_const_delegate", xnnpack=True)
    export(ConstReuse().eval(), "const_reuse", xnnpack=False)
    export(Int64Buckets().eval(), "xnn_int64_buckets", xnnpack=True)
    export(FoldedBetween().eval(), "xnn_folded_between", xnnpack=True)


def export(model: nn.Module, name: str, xnnpack: bool) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    calls = [(torch.randn(2, 8),), (torch.randn(2, 8),)]
    ep = torch.export.export(model, calls[0])
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()] if xnnpack else []).to_executorch()
    pte = OUT / f"{name}.pte"
    pte.write_bytes(prog.buffer)
    method = Runtime.get().load_program(str(pte)).load_method("forward")
    manifest, arrays = [], {}
    for ci, inputs in enumerate(calls):
        outs = method.execute(list(inputs))
        with torch.no_grad():
            eager = model(*inputs)
        print(f"call {ci}: max |ExecuTorch - eager| = {float((outs[0] - eager).abs().max()):.3g}")
        for i, t in enumerate(inputs):
            arrays[f"c{ci}_in{i}"] = t.numpy()
        for j, t in enumerate(outs):
            arrays[f"c{ci}_out{j}"] = t.numpy()
        manifest.append({"method": "forward",
                         "inputs": [{"array": f"c{ci}_in{i}"} for i in range(len(inputs))],
                         "outputs": [{"array": f"c{ci}_out{j}"} for j in range(len(outs))]})
    np.savez(OUT / f"{name}.npz", __manifest__=np.array(json.dumps(manifest)), **arrays)
    print(f"wrote {pte.name} ({pte.stat().st_size} bytes) and {name}.npz")


if __name__ == "__main__":
    main()
