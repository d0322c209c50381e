#!/usr/bin/env python
"""Export a stack of 8da4w linear layers, one token at a time, as an XNNPACK ``.pte``: the decode step of an LLM
without its attention. With ``--split`` a cheap portable operator (a cumsum) follows every pair of layers, so
the stack becomes one XNNPACK delegate per pair instead of one for all of them.

Run it with the reference virtualenv; time both runtimes on the same file with ``bench/run_one.py``::

    .ref/bin/python bench/export_fc_stack.py bench/models/fc48.pte --pairs 48
    .ref/bin/python bench/export_fc_stack.py bench/models/fc48s.pte --pairs 48 --split
    .ref/bin/python bench/export_fc_stack.py bench/models/fc16x131.pte --pairs 16 --tokens 131
    PTERUN_NUM_THREADS=2 .venv/bin/python bench/run_one.py bench/models/fc48.pte --quiet
    BENCH_REF_THREADS=2 .ref/bin/python bench/run_one.py bench/models/fc48.pte --runtime executorch --quiet

Each pair is Linear(768, 2048) then Linear(2048, 768), no bias, random weights (seed 0), quantized with torchao's
``Int8DynamicActivationIntxWeightConfig`` (int4 weights in groups of 128, int8 activations per token), or left in
float32 (``--fp32``: ``--pairs 40`` holds 126M weights, 503 MB, about a 130M fp32 Llama's)::

    .ref/bin/python bench/export_fc_stack.py bench/models/fc40f.pte --pairs 40 --fp32
"""

from __future__ import annotations

import argparse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the .pte to write")
    ap.add_argument("--pairs", type=int, default=48, help="pairs of linear layers (default 48: 151M weights)")
    ap.add_argument("--split", action="store_true", help="a portable cumsum after every pair: one delegate each")
    ap.add_argument("--tokens", type=int, default=1, help="rows of the input (default 1: a decode step; more: a "
                    "prefill's many-row kernels)")
    ap.add_argument("--fp32", action="store_true", help="float32 weights, not quantized: a decode step that only "
                    "streams its weights from memory (an fp32 LLM's)")
    args = ap.parse_args()

    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torch import nn
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)

    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.ModuleList([nn.Linear(768, 2048, bias=False) for _ in range(args.pairs)])
            self.down = nn.ModuleList([nn.Linear(2048, 768, bias=False) for _ in range(args.pairs)])

        def forward(self, x):
            for up, down in zip(self.up, self.down):
                x = down(up(x)) * 0.05
                if args.split:
                    x = torch.cumsum(x, dim=-1) * 0.01
            return x

    model = Stack().eval()
    if not args.fp32:
        quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4,
                                                               weight_granularity=PerGroup(128)))
    exported = torch.export.export(model, (torch.randn(1, args.tokens, 768),))
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()]).to_executorch()
    with open(args.out, "wb") as f:
        f.write(program.buffer)
    print(f"wrote {args.out} ({len(program.buffer) / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
