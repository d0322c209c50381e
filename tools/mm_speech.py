"""The speech parts of the multimodal fixtures: a Whisper through optimum-executorch's ASR export with
ExecuTorch's mel preprocessor, ExecuTorch's Tekken tokenizer on the tekken.json written here, and a Voxtral
through optimum-executorch's multimodal-text-to-text task; each recorded with ExecuTorch's own runtime.
Run through ``tools/export_multimodal_fixtures.py``."""

from __future__ import annotations

import json
from pathlib import Path

from mm_common import (OPTIONS, OUT, SR, TEKKEN_NUM_SPECIAL, TEKKEN_SPECIALS, TEKKEN_TEXTS, byte_bpe, et_wav_floats,
                       is_utf8, margin, stdlib_texts, synth_speech, update_manifest, write_tekken, write_wav)
import numpy as np
import torch


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
# Tekken: what ExecuTorch's own Tekken tokenizer makes of the tekken.json written here
# ----------------------------------------------------------------------------------------------------------------
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
            if not is_utf8(base64.b64decode(e["token_bytes"])):
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
    if not (OPTIONS["reuse"] and (OUT / "voxtral.pte").exists()):
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
