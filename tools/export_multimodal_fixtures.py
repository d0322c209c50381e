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
import logging
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub: everything is made here
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "multimodal"
SR = 16000
REUSE = False  # --reuse: record again with the programs already exported


# ----------------------------------------------------------------------------------------------------------------
# Shared helpers
# ----------------------------------------------------------------------------------------------------------------
def byte_bpe(texts: list[str], vocab_size: int, specials: list[str], specials_first: bool = True,
             full_alphabet: bool = True):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``texts``; ``specials`` first or appended;
    ``full_alphabet`` puts all 256 bytes in the vocabulary (else only those the texts use)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials if specials_first else [],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if full_alphabet else [],
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    if not specials_first:
        tok.add_special_tokens(specials)
    return tok


def synth_speech(seconds: float, seed: int) -> np.ndarray:
    """A deterministic speech-like int16 signal: voiced syllables (harmonics under moving formants) and pauses."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SR)
    t = np.arange(n) / SR
    out = np.zeros(n)
    pos = 0
    while pos < n:
        length = int(rng.uniform(0.12, 0.3) * SR)
        seg = slice(pos, min(n, pos + length))
        tt = t[seg] - t[pos]
        f0 = rng.uniform(100, 220) * (1 + 0.1 * tt)
        voiced = sum(np.sin(2 * np.pi * k * f0 * tt) / k * np.exp(-((k * f0 - rng.uniform(300, 2500)) / 800) ** 2)
                     for k in range(1, 16))
        env = np.sin(np.pi * np.linspace(0, 1, tt.size)) ** 2
        out[seg] = voiced * env
        pos += length + int(rng.uniform(0.03, 0.12) * SR)
    out += 0.01 * rng.standard_normal(n)
    out *= 0.6 / np.abs(out).max()
    return np.round(out * 32767).astype(np.int16)


def write_wav(path: Path, samples: np.ndarray, rate: int = SR) -> None:
    import wave
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1 if samples.ndim == 1 else samples.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())


def et_wav_floats(samples: np.ndarray) -> np.ndarray:
    """What ExecuTorch's C++ ``load_wav_audio_data`` returns for 16-bit PCM: sample * (1 / INT16_MAX)."""
    return (samples.astype(np.float64) * np.float32(1.0 / 32767)).astype(np.float32)


def margin(row: np.ndarray) -> float:
    top2 = np.sort(row.astype(np.float64))[-2:]
    return float(top2[1] - top2[0])


def update_manifest(part: str, entry: dict) -> None:
    path = OUT / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    manifest[part] = entry
    path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# Whisper: optimum-executorch's ASR export + ExecuTorch's mel preprocessor
# ----------------------------------------------------------------------------------------------------------------
WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
WHISPER_TEXTS = ["the quick brown fox jumps over the lazy dog", "hello world, this is a tiny whisper model",
                 "speech to text on small boards without torch", "one two three four five six seven eight",
                 "naïve café, 東京 and 🙂 are spelled in bytes"] * 8
WHISPER_CHUNK_S = 10  # the tiny encoder sees 10 s windows: 1000 mel frames, 500 positions
WHISPER_MAX_NEW = 24


WHISPER_FIXTURE = dict(d_model=32, layers=2, heads=2, ffn=64, vocab=256 + 64, chunk_s=WHISPER_CHUNK_S, max_seq=64,
                       texts=WHISPER_TEXTS)
# whisper-tiny's shape (d_model 384, 4 + 4 layers, 30 s windows) with a 4k vocabulary, for bench/
WHISPER_BENCH = dict(d_model=384, layers=4, heads=6, ffn=1536, vocab=4096, chunk_s=30, max_seq=128, texts=None)


def export_whisper(work: Path, out: Path, spec: dict, prefix: str) -> dict:
    """A random Whisper of ``spec``'s shape through optimum-executorch (``{prefix}.pte``), its mel preprocessor
    through ExecuTorch's mel_spectrogram (``{prefix}_preprocessor.pte``), its ``{prefix}_tokenizer.json``;
    returns the special tokens' ids."""
    from optimum.exporters.executorch import main_export
    from transformers import (WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizerFast)
    from executorch.extension.audio.mel_spectrogram import export_processor

    model_dir = work / f"{prefix}_hf"
    model_dir.mkdir(parents=True, exist_ok=True)
    tok = byte_bpe(spec["texts"] or stdlib_texts(), spec["vocab"], WHISPER_SPECIALS, specials_first=False)
    eot = "<|endoftext|>"
    hf_tok = WhisperTokenizerFast(tokenizer_object=tok, bos_token=eot, eos_token=eot, unk_token=eot, pad_token=eot)
    fe = WhisperFeatureExtractor(feature_size=80, chunk_length=spec["chunk_s"])
    WhisperProcessor(feature_extractor=fe, tokenizer=hf_tok).save_pretrained(model_dir)
    ids = {s: tok.token_to_id(s) for s in WHISPER_SPECIALS}
    d, n, h, f = spec["d_model"], spec["layers"], spec["heads"], spec["ffn"]
    cfg = WhisperConfig(vocab_size=tok.get_vocab_size(), num_mel_bins=80, d_model=d, encoder_layers=n,
                        decoder_layers=n, encoder_attention_heads=h, decoder_attention_heads=h, encoder_ffn_dim=f,
                        decoder_ffn_dim=f, max_source_positions=fe.nb_max_frames // 2,
                        max_target_positions=spec["max_seq"], decoder_start_token_id=ids["<|startoftranscript|>"],
                        eos_token_id=ids[eot], bos_token_id=ids[eot], pad_token_id=ids[eot],
                        begin_suppress_tokens=None, suppress_tokens=None, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # a larger output projection: random logits with clear winners, so greedy is stable
        model.proj_out.weight.mul_(8.0)
    model.save_pretrained(model_dir)
    main_export(str(model_dir), task="automatic-speech-recognition", recipe="xnnpack",
                output_dir=str(work / f"{prefix}_pte"), max_seq_len=spec["max_seq"])
    (work / f"{prefix}_pte" / "model.pte").replace(out / f"{prefix}.pte")
    export_processor(output_file=str(out / f"{prefix}_preprocessor.pte"), feature_size=80,
                     chunk_length=spec["chunk_s"], max_audio_len=60)
    tok.save(str(out / f"{prefix}_tokenizer.json"))
    return ids


def stdlib_texts() -> list[str]:
    """Text to train the bench tokenizers on: Python's standard library sources (ASCII only)."""
    stdlib = Path(os.__file__).parent
    files = sorted(p for d in ("json", "email", "http", "logging") for p in (stdlib / d).rglob("*.py"))
    return [p.read_text(errors="ignore").encode("ascii", "ignore").decode() for p in files]


def build_whisper(work: Path) -> None:
    ids = export_whisper(work, OUT, WHISPER_FIXTURE, "whisper")
    eot = "<|endoftext|>"
    speech = synth_speech(2.5, seed=3)
    write_wav(OUT / "speech.wav", speech)
    rec = record_whisper(OUT / "whisper.pte", OUT / "whisper_preprocessor.pte", et_wav_floats(speech),
                         decoder_start=ids["<|startoftranscript|>"], eos=ids[eot])
    np.savez_compressed(OUT / "whisper.npz", **rec)
    from tokenizers import Tokenizer
    text = Tokenizer.from_file(str(OUT / "whisper_tokenizer.json")).decode(rec["tokens"][1:].tolist())
    update_manifest("whisper", {
        "decoder_start_token_id": ids["<|startoftranscript|>"], "eos_id": ids[eot], "max_new_tokens": WHISPER_MAX_NEW,
        "chunk_seconds": WHISPER_CHUNK_S, "text": text, "min_greedy_margin": float(rec["margins"].min()),
        "bytes": {p: (OUT / p).stat().st_size for p in ("whisper.pte", "whisper_preprocessor.pte", "speech.wav")}})
    print(f"whisper: {rec['tokens'].tolist()} {text!r}, min margin {rec['margins'].min():.3f}")


def record_whisper(pte: Path, preprocessor: Path, wav: np.ndarray, decoder_start: int, eos: int) -> dict:
    """ExecuTorch's Runtime through the C++ Seq2SeqRunner's loop (greedy: the ``sampler`` method picks)."""
    from executorch.runtime import Runtime
    rt = Runtime.get()
    features = rt.load_program(str(preprocessor)).load_method("forward").execute([torch.from_numpy(wav)])[0]
    program = rt.load_program(str(pte))
    enc = program.load_method("encoder").execute([features])[0]
    decoder = program.load_method("text_decoder")
    sampler = program.load_method("sampler")
    tokens, logits_kept, margins = [decoder_start], [], []
    for pos in range(WHISPER_MAX_NEW):
        logits = decoder.execute([torch.tensor([[tokens[-1]]]), enc, torch.tensor([pos])])[0]
        row = logits.reshape(-1).numpy().astype(np.float32)
        if pos < 4:
            logits_kept.append(row.copy())
        margins.append(margin(row))
        nxt = int(sampler.execute([logits])[0].reshape(-1)[0])
        tokens.append(nxt)
        if nxt == eos:
            break
    return {"features": features.numpy(), "encoder_out": enc.numpy(),
            "tokens": np.array(tokens, np.int64), "logits": np.stack(logits_kept), "margins": np.array(margins)}


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

    if not (REUSE and (out / f"{prefix}.pte").exists()):
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


# ----------------------------------------------------------------------------------------------------------------
# Tekken: a Mistral tekken.json written here, and what ExecuTorch's own Tekken tokenizer makes of it
# ----------------------------------------------------------------------------------------------------------------
# Mistral's split pattern (tekken.json's config.pattern)
TEKKEN_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
                  r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")
TEKKEN_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                   "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]",
                   "[AUDIO]", "[BEGIN_AUDIO]", "[TRANSCRIBE]"]
TEKKEN_NUM_SPECIAL = 32  # ids 0..31: the named ones, then <SPECIAL_23> .. <SPECIAL_31>
TEKKEN_TEXTS = ["Transcribe the audio, please.", "Hello world! What is said in this recording?",
                "naïve café → 東京 🙂 Größe €3", "   spaces\tand\nnew lines\r\n", "numbers 12345 and CamelCaseWords",
                "<s> is not a special token in text [INST]"]


def write_tekken(path: Path, texts: list[str], n_merges: int = 300) -> None:
    """A tekken.json: byte-level BPE ranks learnt from ``texts`` (all 256 bytes first), Mistral's layout."""
    import base64
    tok = byte_bpe(texts, 256 + n_merges, [], specials_first=True)
    byte_of = {ch: b for b, ch in _bytes_to_unicode().items()}
    by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    raw = [bytes(byte_of[c] for c in s) for s, _ in by_id]
    order = sorted(range(len(raw)), key=lambda i: (len(raw[i]) > 1, i))  # single bytes first, then merges
    vocab = [{"rank": r, "token_bytes": base64.b64encode(raw[i]).decode(),
              "token_str": raw[i].decode("utf-8") if _utf8(raw[i]) else None} for r, i in enumerate(order)]
    specials = TEKKEN_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(TEKKEN_SPECIALS), TEKKEN_NUM_SPECIAL)]
    data = {"config": {"pattern": TEKKEN_PATTERN, "num_vocab_tokens": len(vocab) + TEKKEN_NUM_SPECIAL,
                       "default_vocab_size": len(vocab) + TEKKEN_NUM_SPECIAL,
                       "default_num_special_tokens": TEKKEN_NUM_SPECIAL, "version": "v7"},
            "vocab": vocab,
            "special_tokens": [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(specials)]}
    path.write_text(json.dumps(data, ensure_ascii=False))


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _bytes_to_unicode() -> dict:
    """GPT-2's byte <-> printable character table, which byte-level BPE vocabularies are written in."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def _piece(et, token: int):
    """ExecuTorch's text for one token, or None where it is part of a character (not valid UTF-8 alone)."""
    try:
        return et.decode(token, False)
    except UnicodeDecodeError:
        return None


def build_tekken(work: Path) -> None:
    from pytorch_tokenizers.pytorch_tokenizers_cpp import Tekken
    path = OUT / "tekken.json"
    write_tekken(path, TEKKEN_TEXTS * 4 + WHISPER_TEXTS)
    et = Tekken()
    et.load(str(path))
    cases = []
    for text in TEKKEN_TEXTS + ["", "zzz qqq xyzzy ÿ"]:
        ids = list(et.encode(text, 1, 1))
        cases.append({"text": text, "ids_bos_eos": ids, "pieces": [_piece(et, i) for i in ids]})
    update_manifest("tekken", {"bos_id": et.bos_tok(), "eos_id": et.eos_tok(), "vocab_size": et.vocab_size(),
                               "num_special": TEKKEN_NUM_SPECIAL, "cases": cases})
    print(f"tekken: vocab {et.vocab_size()}, bos {et.bos_tok()}, eos {et.eos_tok()}; {cases[2]['ids_bos_eos']}")


# ----------------------------------------------------------------------------------------------------------------
# Voxtral: optimum-executorch's multimodal-text-to-text task on a tiny VoxtralForConditionalGeneration
# ----------------------------------------------------------------------------------------------------------------
VOXTRAL_MAX_LEN = 832  # the static KV cache (stored in the program): each 30 s audio chunk is 375 positions
VOXTRAL_MAX_NEW = 16


def voxtral_cases() -> list[dict]:
    """ExecuTorch's Voxtral prompt (examples/models/voxtral/multimodal.cpp): text, audio, text."""
    return [
        {"name": "transcribe", "repeat": 1,
         "before": "<s>[INST][BEGIN_AUDIO]", "after": "What can you tell me about this audio?[/INST]"},
        {"name": "long_audio", "repeat": 14,  # the same 2.5 s 14 times: 35 s, two 30 s chunks, 750 positions
         "before": "<s>[INST][BEGIN_AUDIO]", "after": "Transcribe.[/INST]"},
    ]


def build_voxtral(work: Path) -> None:
    import types
    from optimum.exporters.executorch import main_export
    import optimum.exporters.executorch.integrations as integrations
    from transformers import LlamaConfig, VoxtralConfig, VoxtralEncoderConfig, VoxtralForConditionalGeneration
    from executorch.extension.audio.mel_spectrogram import export_processor

    tekken = OUT / "tekken.json"
    if not tekken.exists():
        build_tekken(work)
    from pytorch_tokenizers.pytorch_tokenizers_cpp import Tekken
    et_tok = Tekken()
    et_tok.load(str(tekken))
    model_dir = work / "voxtral_hf"
    audio = VoxtralEncoderConfig(hidden_size=32, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 num_mel_bins=128, max_source_positions=1500, vocab_size=et_tok.vocab_size())
    text = LlamaConfig(vocab_size=et_tok.vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                       max_position_embeddings=VOXTRAL_MAX_LEN, bos_token_id=1, eos_token_id=2,
                       tie_word_embeddings=False)
    cfg = VoxtralConfig(audio_config=audio, text_config=text, audio_token_id=TEKKEN_SPECIALS.index("[AUDIO]"))
    torch.manual_seed(0)
    model = VoxtralForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        head = model.language_model.lm_head.weight
        head.mul_(16.0)
        # ExecuTorch's runner hands every token's text to Python as a str, which fails on a token that is only
        # part of a UTF-8 character; such tokens get zero logits so that greedy decoding never picks them
        import base64
        data = json.loads(tekken.read_text(encoding="utf-8"))
        n_special = data["config"]["default_num_special_tokens"]
        for e in data["vocab"]:
            if not _utf8(base64.b64decode(e["token_bytes"])):
                head[n_special + e["rank"]] = 0.0
    model.save_pretrained(model_dir)
    # optimum's AudioExportableModule takes its example features from the model's processor applied to a sample
    # WAV it downloads; the same [batch, 128, 3000] features are made here from local audio instead.
    from transformers import WhisperFeatureExtractor
    fe = WhisperFeatureExtractor(feature_size=128, chunk_length=30)
    example = torch.from_numpy(fe(et_wav_floats(synth_speech(3.0, seed=9)), sampling_rate=SR,
                                  return_tensors="np")["input_features"])
    integrations.AutoProcessor = types.SimpleNamespace(from_pretrained=lambda *a, **k: None)
    integrations.apply_chat_template_with_fallback = lambda *a, **k: {"input_features": example}
    if not (REUSE and (OUT / "voxtral.pte").exists()):
        main_export(str(model_dir), task="multimodal-text-to-text", recipe="xnnpack",
                    output_dir=str(work / "voxtral_pte"), max_length=VOXTRAL_MAX_LEN, use_custom_sdpa=True,
                    use_custom_kv_cache=True)
        (work / "voxtral_pte" / "model.pte").replace(OUT / "voxtral.pte")
        export_processor(output_file=str(OUT / "voxtral_preprocessor.pte"), feature_size=128, stack_output=True,
                         max_audio_len=60)
    rec, entry = record_voxtral(OUT / "voxtral.pte", OUT / "voxtral_preprocessor.pte", tekken)
    np.savez_compressed(OUT / "voxtral.npz", **rec)
    entry.update(max_new_tokens=VOXTRAL_MAX_NEW, bytes=(OUT / "voxtral.pte").stat().st_size)
    update_manifest("voxtral", entry)


def record_voxtral(pte: Path, preprocessor: Path, tekken: Path) -> tuple[dict, dict]:
    """ExecuTorch's Python MultimodalRunner on audio between text (its Voxtral prompt), features from the
    preprocessor program; also the token ids of the same greedy run through ExecuTorch's Runtime."""
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig, MultimodalRunner, make_audio_input, make_text_input
    from executorch.runtime import Runtime
    from pytorch_tokenizers.pytorch_tokenizers_cpp import Tekken
    tok = Tekken()
    tok.load(str(tekken))
    rt = Runtime.get()
    pre = rt.load_program(str(preprocessor)).load_method("forward")
    rec, cases = {}, []
    short = synth_speech(2.5, 5)
    write_wav(OUT / "voxtral_speech.wav", short)
    for n, case in enumerate(voxtral_cases()):
        wav = np.tile(et_wav_floats(short), case["repeat"])
        feats = pre.execute([torch.from_numpy(wav)])[0]
        runner = MultimodalRunner(str(pte), str(tekken))
        inputs = [make_text_input(case["before"]), make_audio_input(feats), make_text_input(case["after"])]
        pieces, stats = [], []
        cfg = GenerationConfig(echo=False, max_new_tokens=VOXTRAL_MAX_NEW, temperature=0.0, num_bos=0)
        runner.generate(inputs, cfg, pieces.append, lambda s, out=stats: out.append(json.loads(s.to_json_string())))
        program = rt.load_program(str(pte))
        emb, dec, aud = (program.load_method(m) for m in ("token_embedding", "text_decoder", "audio_encoder"))
        pos, logits, margins = 0, None, []
        for part in ("before", "audio", "after"):
            if part == "audio":
                e = aud.execute([feats])[0]
                e = e.reshape(1, -1, e.shape[-1])
            else:
                e = emb.execute([torch.tensor([list(tok.encode(case[part], 0, 0))])])[0]
            logits = dec.execute([e, torch.arange(pos, pos + e.shape[1])])[0]
            pos += e.shape[1]
        n_prompt, gen = pos, []
        for step in range(VOXTRAL_MAX_NEW):
            row = logits.reshape(-1, logits.shape[-1])[-1].numpy().astype(np.float32)
            margins.append(margin(row))
            nxt = int(row.argmax())
            gen.append(nxt)
            if nxt == tok.eos_tok() or step == VOXTRAL_MAX_NEW - 1:
                break
            e = emb.execute([torch.tensor([[nxt]])])[0]
            logits = dec.execute([e, torch.tensor([pos])])[0]
            pos += 1
        rec[f"c{n}_generated"] = np.array(gen, np.int64)
        cases.append({"name": case["name"], "wav": "voxtral_speech.wav", "repeat": case["repeat"],
                      "before": case["before"],
                      "after": case["after"], "prompt_positions": n_prompt, "runner_pieces": pieces,
                      "runner_stats": stats[0], "min_greedy_margin": min(margins)})
        print(f"voxtral {case['name']}: {n_prompt} positions -> {gen} (margin {min(margins):.3f}) {pieces}")
    return rec, {"cases": cases}


PARTS = {"voxtral": build_voxtral, "tekken": build_tekken, "whisper": build_whisper, "llava": build_llava}


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
    global REUSE
    REUSE = args.reuse
    if args.bench:
        build_bench(args.bench, args.parts)
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for part in args.parts:
            PARTS[part](Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
