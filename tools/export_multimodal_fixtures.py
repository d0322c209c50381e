#!/usr/bin/env python
"""Build the multimodal and speech fixtures with ExecuTorch's own exporters, and record ExecuTorch's runs.

Nothing is downloaded: every config, tokenizer and processor is made here, with tiny sizes and seeded random
weights. Each part needs its own export environment (see ``--help``)::

    # torch 2.14.1 + executorch 1.5.1 + optimum-executorch 1.1.0 (transformers 5.0.0rc1, ExecuTorch's pin)
    /path/to/mm-export/bin/python tools/export_multimodal_fixtures.py whisper voxtral
    # the same, with transformers 4.57 (ExecuTorch's LLaVA exporter still reads the 4.x attribute layout)
    /path/to/mm-llava/bin/python tools/export_multimodal_fixtures.py llava

What each part makes in ``tests/fixtures/multimodal/``:

``whisper``
    A tiny Whisper (``WhisperConfig``: d_model 32, 2+2 layers, 80 mel bins, 10 s windows) exported by
    optimum-executorch's ``automatic-speech-recognition`` task on the ``xnnpack`` recipe (methods ``encoder``,
    ``text_decoder``, ``sampler`` and the metadata), the mel preprocessor exported by ExecuTorch's
    ``executorch.extension.audio.mel_spectrogram`` (XNNPACK), a byte-level BPE ``tokenizer.json`` with Whisper's
    special tokens, and a synthetic 16 kHz WAV. ExecuTorch has no Python ASR runner (``extension/asr/runner``
    is C++ only), so the recording drives ExecuTorch's Python ``Runtime`` through the C++ ``Seq2SeqRunner``'s
    algorithm: WAV samples as its ``load_wav_audio_data`` reads them (int16 / 32767), ``preprocessor.forward``,
    ``encoder``, then ``text_decoder(token, encoder_out, [pos])`` from ``decoder_start_token_id``, each next
    token from the ``sampler`` method (greedy), until EOS or ``max_new_tokens``.
``llava``
    ExecuTorch's LLaVA exporter (``examples/models/llava/export_llava.export_all``) on a tiny
    ``LlavaForConditionalGeneration`` (CLIP vision 32 wide over 32x32 images in 8x8 patches, a Llama text model
    128 wide): ``vision_encoder`` (PT2E int8, XNNPACK), ``token_embedding`` (8-bit), ``text_decoder`` (8da4w,
    XNNPACK, custom SDPA + KV cache). ExecuTorch's Python ``MultimodalRunner`` records greedy generations on fixed
    raw-pixel images and prompts.
``voxtral``
    optimum-executorch's ``multimodal-text-to-text`` task on a tiny ``VoxtralForConditionalGeneration``
    (``audio_encoder``, ``token_embedding``, ``text_decoder``), the Voxtral preprocessor (ExecuTorch's
    ``mel_spectrogram`` with 128 bins and stacked 30 s chunks) and a Mistral ``tekken.json`` written here;
    ExecuTorch's Python ``MultimodalRunner`` records greedy generations with audio interleaved with text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mm_common import OPTIONS, OUT, byte_bpe, margin, stdlib_texts, update_manifest  # first: it sets the environment
from mm_speech import WHISPER_BENCH, build_tekken, build_voxtral, build_whisper, export_whisper
import numpy as np
import torch


# ----------------------------------------------------------------------------------------------------------------
# LLaVA: ExecuTorch's own exporter (examples/models/llava), on a tiny LlavaForConditionalGeneration
# ----------------------------------------------------------------------------------------------------------------
LLAVA_SPECIALS = ["<unk>", "<s>", "</s>", "<image>"]
LLAVA_TEXTS = ["USER: what is in the picture? ASSISTANT: a red square on a blue sky.",
               "USER: describe the image in one sentence. ASSISTANT: two cats sleep on a warm mat.",
               "A chat between a curious human and an artificial intelligence assistant."] * 10
LLAVA_TEXT_ARGS = dict(dim=128, n_layers=2, n_heads=4, n_kv_heads=2, norm_eps=1e-5, rope_theta=10000.0)
LLAVA_IMAGE = 32  # the vision tower's (and the processor's crop) size; smaller even sizes are padded in the graph
LLAVA_MAX_SEQ = 128
LLAVA_MAX_NEW = 20
LLAVA_EMBED_HINT = 48
LLAVA_TOK = OUT / "llava_tokenizer"  # tokenizer.json + tokenizer_config.json


def llava_cases() -> list[dict]:
    """Fixed inputs: raw uint8 HWC pixels and prompts, in the orders the runner must accept."""
    rng = np.random.default_rng(7)
    big = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    small = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)  # H 16, W 24: padded to 32x32 by the program
    yy, xx = np.mgrid[0:32, 0:32]
    gradient = np.stack([xx * 8, yy * 8, (xx + yy) * 4], -1).astype(np.uint8)
    return [
        {"name": "text_image_text", "inputs": [("text", "USER: "), ("image", big),
                                               ("text", " what is in the picture? ASSISTANT:")]},
        {"name": "image_first", "inputs": [("image", gradient), ("text", "describe the image in one sentence.")]},
        {"name": "small_image", "inputs": [("text", "USER: "), ("image", small), ("text", " ASSISTANT:")]},
        {"name": "two_images", "inputs": [("text", "USER: "), ("image", gradient), ("text", " and "),
                                          ("image", big), ("text", " ASSISTANT:")]},
        {"name": "text_only", "inputs": [("text", "A chat between a curious human and")]},
    ]


LLAVA_FIXTURE = dict(vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  image_size=LLAVA_IMAGE, patch_size=8, projection_dim=32),
                     text=LLAVA_TEXT_ARGS, hidden_dim=256, vocab=320, max_seq=LLAVA_MAX_SEQ, hint=LLAVA_EMBED_HINT,
                     texts=LLAVA_TEXTS)
# a CLIP-like tower on 224x224 images in 14x14 patches (256 image tokens) and a 6-layer Llama, 4k vocabulary
LLAVA_BENCH = dict(vision=dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                               image_size=224, patch_size=14, projection_dim=256),
                   text=dict(dim=256, n_layers=6, n_heads=4, n_kv_heads=4, norm_eps=1e-5, rope_theta=10000.0),
                   hidden_dim=768, vocab=4096, max_seq=512, hint=64, texts=None)


def export_llava(out: Path, spec: dict, prefix: str, tok_dir: Path) -> dict:
    """A random LLaVA of ``spec``'s shape through ExecuTorch's LLaVA exporter (``{prefix}.pte``) and its tokenizer
    (``tok_dir``: tokenizer.json + tokenizer_config.json); returns the special tokens' ids."""
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, PreTrainedTokenizerFast)
    from tokenizers import processors
    import executorch.examples.models.llava.model as llava_model
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.examples.models.llava.export_llava import export_all

    # ASCII-only vocabulary (no 256-byte alphabet): every token decodes to whole characters, so ExecuTorch's
    # runner can hand each piece to Python even for the random text a random model writes
    texts = spec["texts"] or stdlib_texts() + LLAVA_TEXTS
    tok = byte_bpe(texts, spec["vocab"], LLAVA_SPECIALS, specials_first=True, full_alphabet=False)
    ids = {s: tok.token_to_id(s) for s in LLAVA_SPECIALS}
    # ExecuTorch's C++ HF tokenizer adds BOS through the post-processor, and takes BOS/EOS from a
    # tokenizer_config.json when given the folder; pterun reads the same file next to tokenizer.json
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", ids["<s>"])])
    tok_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>"}) + "\n")
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    size = spec["vision"]["image_size"]
    processor = CLIPImageProcessor(crop_size={"height": size, "width": size}, size={"shortest_edge": size})
    ta = spec["text"]
    text = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=ta["dim"], intermediate_size=spec["hidden_dim"],
                       num_hidden_layers=ta["n_layers"], num_attention_heads=ta["n_heads"],
                       num_key_value_heads=ta["n_kv_heads"], max_position_embeddings=spec["max_seq"],
                       rms_norm_eps=ta["norm_eps"], bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                       pad_token_id=ids["<unk>"], tie_word_embeddings=False)
    config = LlavaConfig(vision_config=CLIPVisionConfig(**spec["vision"]), text_config=text,
                         image_token_index=ids["<image>"], vision_feature_layer=-2,
                         vision_feature_select_strategy="default")
    torch.manual_seed(0)
    hf = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():  # clear winners among the random logits, so greedy decoding is stable
        hf.lm_head.weight.mul_(16.0)
    # The exporter builds the text model from ModelArgs with LLaVA-1.5-7B's shape hard-coded (32 layers, dim 4096);
    # the small model's shape goes in here, everything else is the exporter's own code.
    llava_model.ModelArgs = lambda **kw: ModelArgs(**{**kw, **ta})
    example = np.random.default_rng(7).integers(0, 256, (size, size, 3), dtype=np.uint8)

    class LocalLlavaModel(llava_model.LlavaModel):
        """LlavaModel with a locally built model and processor instead of the hub's llava-1.5-7b-hf."""

        def __init__(self):  # noqa: D107 - the parent's __init__ downloads; set what export_all reads
            self.use_sdpa_with_kv_cache_op = True
            self.max_context_len = self.max_seq_len = spec["max_seq"]
            self.model, self.tokenizer, self.image_processor = hf, hf_tok, processor
            self.input = self.resized_image = None

        def get_example_inputs(self):  # what prepare_image returns: uint8 CHW pixels
            return (torch.from_numpy(example).permute(2, 0, 1).contiguous(),)

        def get_inputs_for_prefill(self):
            # token_embedding is planned for this example's length (the exporter's HintBasedSymShapeEvalPass):
            # LLaVA's own example is its ~36-token system prompt; this one gives spec["hint"] ids a call
            system = tok.encode(LLAVA_TEXTS[2] + " USER: ", add_special_tokens=False).ids * 16
            before = torch.tensor([[ids["<s>"]] + system[:spec["hint"] - 1]])
            after = torch.tensor([tok.encode(" what is in the picture? ASSISTANT:", add_special_tokens=False).ids])
            return (before, *self.get_example_inputs(), after)

    if not (OPTIONS["reuse"] and (out / f"{prefix}.pte").exists()):
        program = export_all(LocalLlavaModel())
        with open(out / f"{prefix}.pte", "wb") as f:
            program.write_to_file(f)
    return ids


def build_llava(work: Path) -> None:
    ids = export_llava(OUT, LLAVA_FIXTURE, "llava", LLAVA_TOK)
    rec, entry = record_llava(OUT / "llava.pte", LLAVA_TOK, ids)
    np.savez_compressed(OUT / "llava.npz", **rec)
    entry.update(bos_id=ids["<s>"], eos_id=ids["</s>"], image_token_id=ids["<image>"], max_new_tokens=LLAVA_MAX_NEW,
                 max_seq_len=LLAVA_MAX_SEQ, bytes=(OUT / "llava.pte").stat().st_size)
    update_manifest("llava", entry)


def record_llava(pte: Path, tokenizer: Path, ids: dict) -> tuple[dict, dict]:
    """For every case: ExecuTorch's MultimodalRunner's streamed pieces and stats, and the token ids of the same
    greedy run driven through ExecuTorch's Runtime by the runner's algorithm (the runner reports text only)."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401  (embedding_byte, for the runner's process too)
    from executorch.extension.llm.runner import GenerationConfig, MultimodalRunner, make_image_input, make_text_input
    from executorch.runtime import Runtime
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    rec, cases = {}, []
    for n, case in enumerate(llava_cases()):
        runner = MultimodalRunner(str(pte), str(tokenizer))
        inputs = [make_text_input(v) if k == "text" else make_image_input(torch.from_numpy(v).permute(2, 0, 1)
                                                                           .contiguous()) for k, v in case["inputs"]]
        pieces, stats = [], []
        cfg = GenerationConfig(echo=False, max_new_tokens=LLAVA_MAX_NEW, temperature=0.0, num_bos=1)
        runner.generate(inputs, cfg, pieces.append, lambda s, out=stats: out.append(json.loads(s.to_json_string())))
        # the same run through the Runtime: embeddings per input, one prefill call each, then decode
        program = Runtime.get().load_program(str(pte))
        emb, dec, vis = (program.load_method(m) for m in ("token_embedding", "text_decoder", "vision_encoder"))
        pos, logits, kept, margins = 0, None, [], []
        for i, (kind, value) in enumerate(case["inputs"]):
            if kind == "text":
                t = ([ids["<s>"]] if i == 0 else []) + tok.encode(value, add_special_tokens=False).ids
                e = emb.execute([torch.tensor([t])])[0]
            else:
                e = vis.execute([torch.from_numpy(value).permute(2, 0, 1).contiguous()])[0]
            logits = dec.execute([e, torch.tensor([pos])])[0]
            pos += e.shape[1]
        n_prompt = pos
        gen = []
        for step in range(LLAVA_MAX_NEW):
            row = logits.reshape(-1, logits.shape[-1])[-1].numpy().astype(np.float32)
            if step < 3:
                kept.append(row.copy())
            margins.append(margin(row))
            nxt = int(row.argmax())
            gen.append(nxt)
            if nxt == ids["</s>"] or step == LLAVA_MAX_NEW - 1:
                break
            e = emb.execute([torch.tensor([[nxt]])])[0]
            logits = dec.execute([e, torch.tensor([pos])])[0]
            pos += 1
        text = tok.decode(gen)
        assert "".join(pieces) == text, (pieces, text)  # the runner and the Runtime loop agree
        for i, (kind, value) in enumerate(case["inputs"]):
            if kind == "image":
                rec[f"c{n}_image{i}"] = value
        rec[f"c{n}_generated"] = np.array(gen, np.int64)
        rec[f"c{n}_logits"] = np.stack(kept)
        cases.append({"name": case["name"], "inputs": [[k, v if k == "text" else f"c{n}_image{i}"]
                                                       for i, (k, v) in enumerate(case["inputs"])],
                      "prompt_positions": n_prompt, "runner_pieces": pieces, "runner_stats": stats[0],
                      "min_greedy_margin": min(margins)})
        print(f"llava {case['name']}: {n_prompt} positions -> {gen} {text!r} (margin {min(margins):.3f})")
    return rec, {"cases": cases}


# run in this order whatever the order asked: the Voxtral export patches optimum-executorch's integrations for the
# rest of the process, and a Whisper export after it fails (its processor comes back None)
PARTS = {"tekken": build_tekken, "whisper": build_whisper, "llava": build_llava, "voxtral": build_voxtral}


def build_bench(out: Path, parts: list[str]) -> None:
    """The larger random models bench/multimodal_bench.py measures (not fixtures; git-ignored under bench/)."""
    out.mkdir(parents=True, exist_ok=True)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        if "whisper" in parts:
            export_whisper(Path(tmp), out, WHISPER_BENCH, "whisper_bench")
        if "llava" in parts:
            export_llava(out, LLAVA_BENCH, "llava_bench", out / "llava_bench_tokenizer")
    for p in sorted(out.iterdir()):
        print(f"  {p.name}: {p.stat().st_size / 1e6:.1f} MB" if p.is_file() else f"  {p.name}/")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("parts", nargs="+", choices=sorted(PARTS))
    ap.add_argument("--reuse", action="store_true", help="keep programs already exported; only record again")
    ap.add_argument("--bench", type=Path, metavar="DIR", help="instead, export the larger benchmark models of these "
                    "parts (whisper, llava) into DIR")
    args = ap.parse_args(argv)
    OPTIONS["reuse"] = args.reuse
    if args.bench:
        build_bench(args.bench, args.parts)
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for part in [p for p in PARTS if p in args.parts]:
            PARTS[part](Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
