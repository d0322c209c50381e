#!/usr/bin/env python
"""Build the LLM test fixtures (and, on request, the benchmark models) with ExecuTorch's own LLM exporter.

Run with the *reference* virtualenv; nothing is downloaded::

    .ref/bin/python tools/export_llm_fixtures.py                  # tests/fixtures/llm/
    .ref/bin/python tools/export_llm_fixtures.py --bench bench/models   # ~15M-parameter random models

What it does, for the fixtures:

1. writes a small fixed corpus (sentences with distinct openings, some with multi-byte characters),
   trains a byte-level BPE ``tokenizer.json`` on it with HuggingFace ``tokenizers`` (a BOS template
   post-processor, so ExecuTorch's C++ tokenizer and ``tokenizers`` agree on ``num_bos=1``),
2. trains a tiny Llama (``executorch.examples.models.llama`` transformer: dim 64, 2 layers, 4 query /
   2 kv heads, vocab 512) to memorise ``<bos> sentence <eos>``, so greedy decoding is confident,
3. exports it with ``export_llama`` (the library behind ``executorch.extension.llm.export.export_llm``) as
   ``kv_sdpa`` (KV cache + custom SDPA, no delegate), ``kv_xnn`` (XNNPACK fp32), ``kv_8da4w`` (XNNPACK,
   8-bit dynamic activations / 4-bit weights, group 32) and ``nokv`` (no KV cache),
4. drives each program's ``forward`` with the reference runtime (custom and quantized kernels loaded):
   greedy ids for every prompt plus the logits of the first steps -> ``VARIANT.npz``; also runs ExecuTorch's
   ``TextLLMRunner`` once per variant and stores its text and Stats JSON,
5. records the LLM custom kernels on their own (``kernels.npz``), computed by ``torch.ops.llama``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "llm"
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
MAX_SEQ = 128
MAX_NEW = 40  # recorded greedy steps per prompt (generation stops earlier at EOS)
LOGIT_STEPS = 4  # prefill + 3 decode steps of logits kept per prompt

SENTENCES = [
    "The little robot walked to the garden and watered every green plant before the sun went down.",
    "A quiet cat slept on the warm mat near the kitchen door.",
    "In Tokyo we drank green tea at 東京 station and smiled 🙂 all morning.",
    "My friend Zoë ordered a café crème and a naïve croissant in Paris.",
    "Seven blue birds sang together on the old wooden fence.",
    "Python programs read files, split lines and count words with a dictionary.",
    "Every morning the baker opens the shop at six and sells fresh bread.",
    "The river runs past the mill, under the bridge and into the sea.",
    "Our teacher wrote the numbers one, two, three and four on the board.",
    "When it rains the children stay inside and build castles from blocks.",
    "Der große Hund läuft über die Straße → nach Hause.",
    "Snow fell softly over the mountain village all night long.",
    "Bright stars shine above the desert when the wind is calm.",
    "Grandma keeps her recipes in a red box on the top shelf.",
    "Two trains left the station at noon and met halfway in the valley.",
    "Under the bed the puppy hid a shoe, a ball and an old sock.",
    "Learning to swim takes patience, practice and a friendly coach.",
    "Fresh oranges cost 3 € per kilo at the Saturday market.",
    "Lanterns glowed along the harbour as the boats came home.",
    "Carefully the scientist measured the water before heating it.",
    "Music from the radio filled the small apartment with joy.",
    "Northern lights danced in green waves across the winter sky.",
    "Each spring the farmer plants corn, beans and squash in long rows.",
    "Yesterday I found a shiny coin beside the library steps.",
]
PROMPTS = [
    "The little robot walked",
    "In Tokyo we",
    "Der große",
    "Fresh oranges",
]
VARIANTS = {
    "kv_sdpa": dict(kv=True, xnn=False, qmode=None),
    "kv_xnn": dict(kv=True, xnn=True, qmode=None),
    "kv_8da4w": dict(kv=True, xnn=True, qmode="8da4w"),
    "nokv": dict(kv=False, xnn=False, qmode=None),
}
TINY = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512, hidden_dim=192, norm_eps=1e-5,
            rope_theta=10000.0)
BENCH = dict(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=16384, hidden_dim=768, norm_eps=1e-5,
             rope_theta=10000.0)  # stories15M's shape, with a 16k vocabulary: 15.4M parameters
BENCH_SEQ = 512


def train_tokenizer(path: Path, vocab_size: int, texts: list[str], min_frequency: int = 2):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS], min_frequency=min_frequency,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 0)])
    tok.save(str(path))
    return tok


def build_model(params: dict, full_logits: bool, max_seq: int = MAX_SEQ):
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    args = ModelArgs(**params, max_seq_len=max_seq, max_context_len=max_seq, generate_full_logits=full_logits)
    return construct_transformer(args)


def train_tiny(tok, steps: int = 700, seed: int = 0):
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = build_model(TINY, full_logits=True)
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    seqs = [[bos] + tok.encode(s, add_special_tokens=False).ids + [eos] for s in SENTENCES]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 50) * 0.5 *
                                              (1 + math.cos(math.pi * i / steps)))
    window, batch = 64, 16
    for step in range(steps):
        rows = []
        for _ in range(batch):  # a random order of sentences, cut to one window
            order = seqs[:]
            rng.shuffle(order)
            stream = [t for s in order for t in s]
            start = rng.randrange(0, len(stream) - window - 1)
            rows.append(stream[start:start + window + 1])
        data = torch.tensor(rows)
        logits = model(data[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step} loss {loss.item():.4f}")
    return model


def export_variant(params_path: Path, ckpt: Path, out_dir: Path, name: str, kv: bool, xnn: bool, qmode,
                   metadata: dict, group_size: int = 32, max_seq: int = MAX_SEQ) -> Path:
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.extension.llm.export.config.llm_config import LlmConfig, ModelType
    c = LlmConfig()
    c.base.model_class = ModelType.llama3
    c.base.params = str(params_path)
    c.base.checkpoint = str(ckpt)
    c.base.metadata = json.dumps(metadata)
    c.model.use_kv_cache = kv
    c.model.use_sdpa_with_kv_cache = kv
    c.model.enable_dynamic_shape = True
    c.export.max_seq_length = max_seq
    c.export.max_context_length = max_seq
    c.export.output_dir = str(out_dir)
    c.export.output_name = str(out_dir / f"{name}.pte")  # taken relative to the cwd otherwise
    if xnn:
        c.backend.xnnpack.enabled = True
        c.backend.xnnpack.extended_ops = True
    if qmode:
        c.quantization.qmode = qmode
        c.quantization.group_size = group_size
    export_llama(c)
    return out_dir / f"{name}.pte"


def reference_greedy(pte: Path, prompts_ids: list[list[int]], eos_ids: set[int]) -> dict:
    """Greedy decoding by driving ``forward`` with the reference runtime, like ExecuTorch's runner."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime
    out = {}
    for i, ids in enumerate(prompts_ids):
        program = Runtime.get().load_program(str(pte))  # fresh planned memory = empty KV cache
        method = program.load_method("forward")
        kv = program.metadata("forward").num_inputs() == 2
        if kv:
            logits = method.execute([torch.tensor([ids]), torch.tensor([0])])[0]
        else:
            logits = method.execute([torch.tensor([ids])])[0]
        seq, gen, kept = list(ids), [], []
        for step in range(MAX_NEW):
            row = logits.reshape(-1, logits.shape[-1])[-1].numpy().astype(np.float32)
            if step < LOGIT_STEPS:
                kept.append(row.copy())
            top2 = np.sort(row)[-2:]
            tok = int(row.argmax())
            gen.append(tok)
            if step == 0:
                margin = top2[1] - top2[0]
            margin = min(margin, top2[1] - top2[0])
            if tok in eos_ids:
                break
            seq.append(tok)
            if kv:
                logits = method.execute([torch.tensor([[tok]]), torch.tensor([len(seq) - 1])])[0]
            else:
                logits = method.execute([torch.tensor([seq])])[0]
        out[f"p{i}_prompt"] = np.array(ids, np.int64)
        out[f"p{i}_generated"] = np.array(gen, np.int64)
        out[f"p{i}_logits"] = np.stack(kept)
        out[f"p{i}_min_margin"] = np.float32(margin)
    return out


def reference_runner(pte: Path, tokenizer: Path, prompt: str) -> dict:
    """ExecuTorch's own TextLLMRunner on one prompt: the streamed pieces and its Stats JSON."""
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    runner = TextLLMRunner(str(pte), str(tokenizer))
    pieces, stats = [], []
    cfg = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=MAX_NEW, num_bos=1)
    runner.generate(prompt, cfg, pieces.append, lambda s: stats.append(s.to_json_string()))
    return {"pieces": pieces, "stats": json.loads(stats[0])}


def record_kernels(path: Path) -> None:
    """Each llama:: kernel on small random inputs, computed by ExecuTorch's own AOT kernels."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    g = torch.Generator().manual_seed(0)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    def q8(*shape):
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)

    def per_token(*shape):
        return torch.rand(*shape, generator=g) * 0.05 + 0.01, torch.randint(-8, 8, shape, generator=g,
                                                                             dtype=torch.int8)

    ops = torch.ops.llama
    cases = []
    # (name, op, args): tensors stored, scalars kept in the manifest; mutated inputs recorded after the call
    cases.append(("sdpa_causal_prefill", "llama::custom_sdpa.out",
                  [rnd(1, 3, 4, 8), rnd(1, 16, 2, 8), rnd(1, 16, 2, 8), 5, None, 0.0, True, None]))
    cases.append(("sdpa_decode_scale", "llama::custom_sdpa.out",
                  [rnd(1, 1, 4, 8), rnd(1, 16, 4, 8), rnd(1, 16, 4, 8), 9, None, 0.0, True, 0.3]))
    cases.append(("sdpa_mask", "llama::custom_sdpa.out",
                  [rnd(1, 3, 4, 8), rnd(1, 16, 4, 8), rnd(1, 16, 4, 8), 0, rnd(3, 16), 0.0, False, None]))
    cases.append(("sdpa_noncausal", "llama::custom_sdpa.out",
                  [rnd(2, 4, 6, 8), rnd(2, 16, 3, 8), rnd(2, 16, 3, 8), 2, None, 0.0, False, None]))
    cases.append(("sdpa_with_kv_cache", "llama::sdpa_with_kv_cache.out",
                  [rnd(1, 2, 4, 8), rnd(1, 2, 2, 8), rnd(1, 2, 2, 8), rnd(1, 16, 2, 8), rnd(1, 16, 2, 8), 6, 2,
                   None, 0.0, True, None]))
    cases.append(("update_cache", "llama::update_cache.out", [rnd(1, 3, 2, 8), rnd(1, 16, 2, 8), 4]))
    cases.append(("update_cache_with_indices", "llama::update_cache_with_indices.out",
                  [rnd(2, 3, 2, 8), rnd(2, 16, 2, 8), 0, torch.tensor([[5, 1, 7], [0, 15, 2]])]))
    for dim2 in (False, True):
        b, s, h, d, L, sp = 1, 2, 4, 8, 16, 3
        qs = (b, h, s, d) if dim2 else (b, s, h, d)
        ks = (b, h, L, d) if dim2 else (b, L, h, d)
        (qsc, qzp), (ksc, kzp), (vsc, vzp) = (per_token(*qs[:3], 1), per_token(*ks[:3], 1),
                                              per_token(*ks[:3], 1))
        cases.append((f"quantized_sdpa_dim2_{int(dim2)}", "llama::custom_quantized_sdpa.out",
                      [q8(*qs), q8(*ks), q8(*ks), sp, None, 0.0, True, None, qzp, qsc, kzp, ksc, vzp, vsc, dim2]))
    arrays, manifest = {}, []
    for name, op, args in cases:
        call_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        fn = getattr(ops, op.split("::")[1].split(".")[0])
        result = fn(*call_args)
        entry = {"name": name, "op": op, "args": []}
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                arrays[f"{name}_in{i}"] = a.numpy()
                entry["args"].append({"array": f"{name}_in{i}"})
                if not torch.equal(a, call_args[i]):  # mutated (a cache): keep its new contents
                    arrays[f"{name}_after{i}"] = call_args[i].numpy()
                    entry.setdefault("after", {})[str(i)] = f"{name}_after{i}"
            else:
                entry["args"].append({"value": a})
        if "update_cache" not in op:
            arrays[f"{name}_out"] = result.numpy()
            entry["out"] = f"{name}_out"
        manifest.append(entry)
    np.savez_compressed(path, __manifest__=np.array(json.dumps(manifest)), **arrays)


def save_params(path: Path, params: dict) -> None:
    path.write_text(json.dumps(params, indent=1))


def build_fixtures(out: Path, only: set[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = out / "_work"
    work.mkdir(exist_ok=True)
    tok_path = out / "tokenizer.json"
    tok = train_tokenizer(tok_path, TINY["vocab_size"], SENTENCES)
    print(f"tokenizer: {tok.get_vocab_size()} tokens")
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    params = dict(TINY, vocab_size=max(TINY["vocab_size"], tok.get_vocab_size()))
    save_params(work / "params.json", params)
    ckpt = work / "tiny.pth"
    print("training the tiny model")
    model = train_tiny(tok)
    torch.save(model.state_dict(), ckpt)
    metadata = {"get_bos_id": bos, "get_eos_ids": [eos], "get_vocab_size": params["vocab_size"]}
    prompts_ids = [[bos] + tok.encode(p, add_special_tokens=False).ids for p in PROMPTS]
    manifest = {"prompts": PROMPTS, "bos": bos, "eos": eos, "max_new": MAX_NEW, "logit_steps": LOGIT_STEPS,
                "params": params, "max_seq_len": MAX_SEQ, "variants": {}}
    for name, spec in VARIANTS.items():
        if only and name not in only:
            continue
        print(f"exporting {name}")
        pte = export_variant(work / "params.json", ckpt, out, name, metadata=metadata, **spec)
        rec = reference_greedy(pte, prompts_ids, {eos})
        np.savez_compressed(out / f"{name}.npz", **rec)
        runner = reference_runner(pte, tok_path, PROMPTS[0])
        margins = [float(rec[f"p{i}_min_margin"]) for i in range(len(PROMPTS))]
        manifest["variants"][name] = {"runner_pieces": runner["pieces"], "runner_stats": runner["stats"],
                                      "min_greedy_margin": min(margins), "bytes": pte.stat().st_size}
        for i, p in enumerate(PROMPTS):
            print(f"  {p!r} -> {tok.decode(rec[f'p{i}_generated'].tolist())!r} (margin {margins[i]:.2f})")
    old = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() and only else {}
    if old:
        old["variants"].update(manifest["variants"])
        manifest["variants"] = old["variants"]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False))
    record_kernels(out / "kernels.npz")
    for f in work.iterdir():
        f.unlink()
    work.rmdir()


def build_bench(out: Path) -> None:
    """~15M-parameter Llama (stories15M's shape) with random weights, fp32 and 8da4w XNNPACK, for bench/:
    ``bench_xnn.pte``, ``bench_8da4w.pte``, ``llm_tokenizer.json`` (BPE on stdlib sources), ``llm_params.json``."""
    import os
    out.mkdir(parents=True, exist_ok=True)
    stdlib = Path(os.__file__).parent
    files = sorted(p for d in ("json", "email", "http", "logging", "unittest", "asyncio", "xml")
                   for p in (stdlib / d).rglob("*.py"))
    texts = [p.read_text(errors="ignore") for p in files] + SENTENCES * 4
    tok = train_tokenizer(out / "llm_tokenizer.json", BENCH["vocab_size"], texts, min_frequency=2)
    params = dict(BENCH, vocab_size=tok.get_vocab_size())
    save_params(out / "llm_params.json", params)
    torch.manual_seed(0)
    model = build_model(params, full_logits=False, max_seq=BENCH_SEQ)
    with torch.no_grad():  # llama-style init: small normal weights, unit norms
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    torch.save(model.state_dict(), out / "bench.pth")
    n = sum(p.numel() for p in model.parameters())
    print(f"bench model: {n / 1e6:.1f}M parameters, vocab {params['vocab_size']}")
    # an EOS id outside the vocabulary: random weights must never stop early, so both runtimes decode alike
    metadata = {"get_bos_id": tok.token_to_id(BOS), "get_eos_ids": [params["vocab_size"] + 7]}
    for name, spec in {"bench_xnn": VARIANTS["kv_xnn"], "bench_8da4w": VARIANTS["kv_8da4w"]}.items():
        export_variant(out / "llm_params.json", out / "bench.pth", out, name, metadata=metadata, max_seq=BENCH_SEQ,
                       **spec)
    (out / "bench.pth").unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="*", help=f"only these fixture variants ({', '.join(VARIANTS)})")
    ap.add_argument("--bench", type=Path, help="instead, export the ~15M benchmark models into this folder")
    args = ap.parse_args(argv)
    if args.bench:
        build_bench(args.bench)
    else:
        build_fixtures(OUT, set(args.variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
