#!/usr/bin/env python
"""Export the benchmark models to ``bench/models/`` (git-ignored; never commit them).

Run it with the *reference* virtualenv (torch + executorch + torchvision)::

    .ref/bin/python bench/export_models.py              # every model that is missing
    .ref/bin/python bench/export_models.py --force      # re-export all of them
    .ref/bin/python bench/export_models.py mlp many_ops # only some (by family name)

Models (random weights, fixed seeds, nothing is downloaded):

* ``resnet18_{portable,xnnpack}.pte``      torchvision resnet18, input f32[1,3,224,224]
* ``mobilenet_v2_{portable,xnnpack}.pte``  torchvision mobilenet_v2, input f32[1,3,224,224]
* ``mlp_{portable,xnnpack}.pte``           Linear(64,128)-ReLU-Linear(128,128)-ReLU-Linear(128,10), f32[1,64]
* ``bert_tiny_{portable,xnnpack}.pte``     a BERT of BERT-tiny's shape (Hugging Face ``BertModel``, hidden 128,
                                           2 layers, 2 heads, FFN 512), token ids int64[1, 128]
* ``whisper_encoder_{portable,xnnpack}.pte`` Whisper-tiny's encoder shape (``WhisperEncoder``, d_model 384,
                                           4 layers, 6 heads), log-mel f32[1, 80, 3000]
* ``many_ops_portable.pte``                300 cheap elementwise ops (150 x (add, mul)) on f32[4]
* ``few_ops_portable.pte``                 4 cheap elementwise ops on f32[4]; with ``many_ops`` it gives
                                           pterun's fixed per-call cost and its cost per instruction

``NAME_portable.pte`` = ``to_edge(export(model)).to_executorch()`` (portable kernels, no delegate);
``NAME_xnnpack.pte`` = ``to_edge_transform_and_lower(export(model), partitioner=[XnnpackPartitioner()])``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

HERE = Path(__file__).resolve().parent
MODELS_DIR = HERE / "models"

FAMILIES = ("resnet18", "mobilenet_v2", "mlp", "bert_tiny", "whisper_encoder", "many_ops", "few_ops")
# family -> the variants exported for it
VARIANTS = {
    "resnet18": ("portable", "xnnpack"),
    "mobilenet_v2": ("portable", "xnnpack"),
    "mlp": ("portable", "xnnpack"),
    "bert_tiny": ("portable", "xnnpack"),
    "whisper_encoder": ("portable", "xnnpack"),
    "many_ops": ("portable",),
    "few_ops": ("portable",),
}


def build(family: str):
    """(eval-mode module, example inputs) for one model family."""
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    if family in ("resnet18", "mobilenet_v2"):
        import torchvision

        model = getattr(torchvision.models, family)(weights=None)
        # give BatchNorm non-trivial running statistics so the outputs are not degenerate
        g = torch.Generator().manual_seed(1)
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
        return model.eval(), (torch.randn(1, 3, 224, 224),)
    if family == "mlp":
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))
        return model.eval(), (torch.randn(1, 64),)
    if family in ("bert_tiny", "whisper_encoder"):
        return _transformer(family)
    if family in ("many_ops", "few_ops"):
        pairs = 150 if family == "many_ops" else 2

        class Chain(nn.Module):
            def forward(self, x, y):
                # x <- (x + y) * 0.5 stays bounded however long the chain is
                for _ in range(pairs):
                    x = x + y
                    x = x * 0.5
                return x

        return Chain().eval(), (torch.randn(4), torch.randn(4))
    raise SystemExit(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")


def _transformer(family: str):
    """A Hugging Face encoder of a small released model's shape, random weights (nothing is downloaded)."""
    import torch
    import torch.nn as nn

    if family == "bert_tiny":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=512, attn_implementation="sdpa"), add_pooling_layer=False)

        class Wrapped(nn.Module):  # the last hidden state only (a ModelOutput is not a tensor)
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, ids):
                return self.m(input_ids=ids).last_hidden_state

        return Wrapped().eval(), (torch.randint(0, 1000, (1, 128)),)
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    enc = WhisperEncoder(WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                       encoder_ffn_dim=1536, num_mel_bins=80))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = enc

        def forward(self, mel):
            return self.e(mel).last_hidden_state

    return Encoder().eval(), (torch.randn(1, 80, 3000),)


def export_one(family: str, variant: str, path: Path) -> None:
    import torch
    from executorch.exir import to_edge, to_edge_transform_and_lower

    model, example = build(family)
    with torch.no_grad():
        ep = torch.export.export(model, example, strict=False)
    if variant == "portable":
        et = to_edge(ep).to_executorch()
    else:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pte.tmp")
    tmp.write_bytes(et.buffer)
    tmp.replace(path)
    plan = et.executorch_program.execution_plan[0]
    n_instr = sum(len(c.instructions) for c in plan.chains)
    print(f"  wrote {path.relative_to(HERE.parent)}: {len(et.buffer)} bytes, {n_instr} instructions, "
          f"{len(plan.delegates)} delegate(s)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("families", nargs="*", help=f"model families to export (default: all of {', '.join(FAMILIES)})")
    ap.add_argument("--force", action="store_true", help="re-export models that already exist")
    ap.add_argument("--out", type=Path, default=MODELS_DIR, help="output folder (default bench/models)")
    args = ap.parse_args(argv)
    families = args.families or list(FAMILIES)
    for f in families:
        if f not in VARIANTS:
            ap.error(f"unknown model family {f!r}; known: {', '.join(FAMILIES)}")
    todo = [(f, v, args.out / f"{f}_{v}.pte") for f in families for v in VARIANTS[f]]
    todo = [t for t in todo if args.force or not t[2].exists()]
    if not todo:
        print("bench/export_models.py: every requested model already exists (use --force to re-export)")
        return 0
    for f, v, path in todo:
        t0 = time.perf_counter()
        print(f"exporting {f} ({v}) ...", flush=True)
        export_one(f, v, path)
        print(f"  took {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
