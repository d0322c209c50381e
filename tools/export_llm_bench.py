#!/usr/bin/env python
"""Export realistic-size random-weight Llamas for ``bench/llm_bench.py`` with ExecuTorch's own LLM exporter.

Run with the *reference* virtualenv (torch + executorch); nothing is downloaded::

    .ref/bin/python tools/export_llm_bench.py                         # all four into bench/models/
    .ref/bin/python tools/export_llm_bench.py --only llama130m_8da4w  # one of them
    .ref/bin/python tools/export_llm_bench.py --list                  # names, shapes, parameter counts

Models (Llama 3 architecture from ``executorch.examples.models.llama``, grouped-query attention, untied
output layer, vocabulary 32000 from a byte-level BPE trained on the Python standard library, context 512):

* ``llama130m``: dim 768, 12 layers, 12 query / 4 kv heads, FFN 2304 (~132M parameters);
* ``llama500m``: dim 1024, 24 layers, 16 query / 4 kv heads, FFN 4864 (~487M parameters);

each as ``_fp32`` (XNNPACK fp32) and ``_8da4w`` (XNNPACK, 8-bit dynamic activations, 4-bit weights,
group 128), KV cache + ``llama::sdpa_with_kv_cache``, dynamic shapes, exactly as
``export_llama`` does for real checkpoints. Weights are random (normal, std 0.02; seed fixed), so the
text is nonsense; the EOS id lies outside the vocabulary so both runtimes always decode the full length.

Outputs go to ``bench/models/`` (git-ignored; never commit them): ``<name>.pte`` and ``llm32k_tokenizer.json``.
Each model is exported in its own child process, one at a time, so its memory is returned before the next
(the ~500M fp32 export peaks at several GB); the child's peak RSS is printed. Existing files are kept unless
``--force``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "models"
TOKENIZER = "llm32k_tokenizer.json"
VOCAB = 32000
MAX_SEQ = 512
GROUP = 128
SHAPES = {
    "llama130m": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, hidden_dim=2304),
    "llama500m": dict(dim=1024, n_layers=24, n_heads=16, n_kv_heads=4, hidden_dim=4864),
}
VARIANTS = {"fp32": None, "8da4w": "8da4w"}
# the order they are built in: small first, the heaviest (500M fp32) last
NAMES = [f"{s}_{v}" for s in SHAPES for v in VARIANTS]


def param_count(shape: dict, vocab: int = VOCAB) -> int:
    d, h = shape["dim"], shape["hidden_dim"]
    kv = d // shape["n_heads"] * shape["n_kv_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * h + 2 * d
    return shape["n_layers"] * per_layer + 2 * vocab * d + d


def build_tokenizer(out: Path) -> Path:
    sys.path.insert(0, str(REPO / "tools"))
    from export_llm_fixtures import SENTENCES, train_tokenizer
    path = out / TOKENIZER
    if path.exists():
        return path
    stdlib = Path(os.__file__).parent
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts)
    texts = [p.read_text(errors="ignore") for p in files] + SENTENCES * 4
    tok = train_tokenizer(path, VOCAB, texts, min_frequency=2)
    print(f"tokenizer: {tok.get_vocab_size()} tokens from {len(files)} files", flush=True)
    return path


def export_one(name: str, out: Path) -> None:
    """In a child process: random checkpoint -> export_llama -> ``out/name.pte``."""
    import torch
    sys.path.insert(0, str(REPO / "tools"))
    from export_llm_fixtures import BOS, build_model, export_variant, save_params
    from tokenizers import Tokenizer
    size, variant = name.rsplit("_", 1)
    tok = Tokenizer.from_file(str(out / TOKENIZER))
    params = dict(SHAPES[size], vocab_size=tok.get_vocab_size(), norm_eps=1e-5, rope_theta=500000.0)
    # the checkpoint's path must not contain "8da4w": ExecuTorch's Llama loader then takes it for a pre-quantized
    # checkpoint (examples/models/llama/model.py) and export fails in dequantize_affine
    work = out / f"_work_{os.getpid()}"
    work.mkdir(exist_ok=True)
    save_params(work / "params.json", params)
    torch.manual_seed(0)
    model = build_model(params, full_logits=False, max_seq=MAX_SEQ)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    n = sum(p.numel() for p in model.parameters())
    torch.save(model.state_dict(), work / "ckpt.pth")
    del model
    print(f"{name}: {n / 1e6:.1f}M parameters, vocab {params['vocab_size']}", flush=True)
    metadata = {"get_bos_id": tok.token_to_id(BOS), "get_eos_ids": [params["vocab_size"] + 7]}
    pte = export_variant(work / "params.json", work / "ckpt.pth", out, name, kv=True, xnn=True,
                         qmode=VARIANTS[variant], metadata=metadata, group_size=GROUP, max_seq=MAX_SEQ)
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    print(f"{name}: wrote {pte} ({pte.stat().st_size / 1e6:.0f} MB)", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*", choices=NAMES, help="only these models (default: all, in order)")
    ap.add_argument("--force", action="store_true", help="re-export existing files")
    ap.add_argument("--list", action="store_true", help="print the models and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.list:
        for s, shape in SHAPES.items():
            print(f"{s}: {shape}, ~{param_count(shape) / 1e6:.0f}M parameters; variants {', '.join(VARIANTS)}")
        return 0
    if args.child:
        export_one(args.child, args.out)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(args.out)
    failed = []
    for name in args.only or NAMES:
        pte = args.out / f"{name}.pte"
        if pte.exists() and not args.force:
            print(f"{name}: exists, kept ({pte})", flush=True)
            continue
        t0 = time.time()
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child", name])
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        # RUSAGE_CHILDREN is the largest child so far: exact for this child when it is the largest yet
        rss = f"{peak / 2**20:.1f} GB" if peak > before else f"<= {before / 2**20:.1f} GB"
        print(f"{name}: exit {proc.returncode} after {time.time() - t0:.0f} s, child peak RSS {rss}", flush=True)
        if proc.returncode != 0:
            failed.append(name)
            pte.unlink(missing_ok=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
