#!/usr/bin/env python
"""Export ``tests/fixtures/xnn_const_delegate.pte``: an XNNPACK delegate call whose inputs are all constants.

Run with the reference virtualenv (torch + executorch); pterun never depends on torch::

    .ref/bin/python tools/export_fold_fixture.py

The model computes a bias from ``arange`` (a portable operator on nothing but constants), through an XNNPACK
delegate (``sigmoid``, ``floor``, arithmetic), a comparison and a cast (portable), into a second delegate that
applies it to a linear layer's output: the T5 encoder's relative-position bias in miniature. pterun computes the
first delegate call at load (``pterun.interp.fold``). The recorded calls, inputs and ExecuTorch's outputs go to
``tests/fixtures/xnn_const_delegate.npz`` in the fixtures' usual format (``__manifest__`` with ``c<call>_in<i>``
/ ``c<call>_out<j>`` arrays).
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


def main() -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    torch.manual_seed(0)
    model = ConstDelegate().eval()
    calls = [(torch.randn(2, 8),), (torch.randn(2, 8),)]
    ep = torch.export.export(model, calls[0])
    prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    pte = OUT / "xnn_const_delegate.pte"
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
    np.savez(OUT / "xnn_const_delegate.npz", __manifest__=np.array(json.dumps(manifest)), **arrays)
    print(f"wrote {pte.name} ({pte.stat().st_size} bytes) and xnn_const_delegate.npz")


if __name__ == "__main__":
    main()
