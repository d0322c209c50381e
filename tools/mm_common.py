"""What the multimodal exporters share: where fixtures go, tokenizers trained here (byte-level BPE, a
Mistral tekken.json), synthetic speech and WAV files, and the manifest."""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach a hub: everything is made here
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402

warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "multimodal"
SR = 16000
OPTIONS = {"reuse": False}  # --reuse: record again with the programs already exported


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


def stdlib_texts() -> list[str]:
    """Text to train the bench tokenizers on: Python's standard library sources (ASCII only)."""
    stdlib = Path(os.__file__).parent
    files = sorted(p for d in ("json", "email", "http", "logging") for p in (stdlib / d).rglob("*.py"))
    return [p.read_text(errors="ignore").encode("ascii", "ignore").decode() for p in files]


# ----------------------------------------------------------------------------------------------------------------
# A Mistral tekken.json written here
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
              "token_str": raw[i].decode("utf-8") if is_utf8(raw[i]) else None} for r, i in enumerate(order)]
    specials = TEKKEN_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(TEKKEN_SPECIALS), TEKKEN_NUM_SPECIAL)]
    data = {"config": {"pattern": TEKKEN_PATTERN, "num_vocab_tokens": len(vocab) + TEKKEN_NUM_SPECIAL,
                       "default_vocab_size": len(vocab) + TEKKEN_NUM_SPECIAL,
                       "default_num_special_tokens": TEKKEN_NUM_SPECIAL, "version": "v7"},
            "vocab": vocab,
            "special_tokens": [{"rank": i, "token_str": t, "is_control": True} for i, t in enumerate(specials)]}
    path.write_text(json.dumps(data, ensure_ascii=False))


def is_utf8(b: bytes) -> bool:
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
