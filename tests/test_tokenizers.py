"""Tokenizers and the streaming decoder: HF tokenizer.json, tiktoken, SentencePiece and Mistral's tekken.json
(against ExecuTorch's own Tekken tokenizer); a streamed piece never breaks a character."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fixtures_util import needs
from pterun.llm import StreamDecoder, load_tokenizer
from pterun.llm.tokenizer import Tokenizer

LLM = Path(__file__).parent / "fixtures" / "llm"
MANIFEST = json.loads((LLM / "manifest.json").read_text(encoding="utf-8"))
TOKENIZER = LLM / "tokenizer.json"
MM = Path(__file__).parent / "fixtures" / "multimodal"
TEXT = "naïve café → 東京 🙂 Größe €3 ok"


def _check_streaming(tok: Tokenizer, text: str = TEXT) -> list[str]:
    ids = tok.encode(text)
    singles = [tok.decode([i]) for i in ids]
    assert any("\ufffd" in s for s in singles), "no character was split across tokens: the test would prove nothing"
    dec = StreamDecoder(tok)
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tok.decode(ids) == text
    return pieces


def test_stream_decoder_never_breaks_a_character_hf():
    needs("tokenizers")
    tok = load_tokenizer(TOKENIZER)
    assert type(tok).__name__ == "HFTokenizer" and tok.bos_id == MANIFEST["bos"] and tok.eos_id == MANIFEST["eos"]
    _check_streaming(tok)
    dec = StreamDecoder(tok)
    assert dec.push(tok.eos_id) == ""  # special tokens are not text


def test_tiktoken_file(tmp_path):
    needs("tiktoken")
    import base64
    ranks = [bytes([b]) for b in range(256)] + [b"ca", b"caf", " 東".encode()[:2], b"ok"]
    path = tmp_path / "tok.model"
    path.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for r, t in enumerate(ranks)))
    tok = load_tokenizer(path)
    assert type(tok).__name__ == "TiktokenTokenizer"
    assert tok.bos_id == len(ranks) and tok.eos_id == len(ranks) + 1 and tok.vocab_size == len(ranks) + 256
    assert tok.encode("ok", bos=1, eos=1) == [tok.bos_id, 259, tok.eos_id]
    _check_streaming(tok)


def test_sentencepiece_model(tmp_path):
    needs("sentencepiece")
    import sentencepiece as spm
    import io
    model = io.BytesIO()
    sentences = ["the cat sat on the mat", "a naive cat in a cafe", "ok go now"] * 50 + [TEXT]
    # rare characters fall outside the 98 % coverage and are spelled with byte-fallback pieces
    spm.SentencePieceTrainer.train(sentence_iterator=iter(sentences), model_writer=model, vocab_size=300,
                                   byte_fallback=True, character_coverage=0.98, model_type="bpe", minloglevel=2)
    path = tmp_path / "sp.model"
    path.write_bytes(model.getvalue())
    tok = load_tokenizer(path)
    assert type(tok).__name__ == "SentencePieceTokenizer" and tok.bos_id is not None
    assert tok.encode("cat", bos=1)[0] == tok.bos_id
    _check_streaming(tok)


def test_unknown_tokenizer_and_missing_library(tmp_path, monkeypatch):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\x01garbage")
    with pytest.raises(ValueError, match="not a tokenizer"):
        load_tokenizer(bad)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"^reading .*tokenizer.json needs the 'tokenizers' package: pip install "
                                          r"tokenizers \(every tokenizer library: pip install 'pterun\[llm\]', or "
                                          r"pip install -e '\.\[llm\]' in a clone of pterun\)$"):
        load_tokenizer(TOKENIZER)


# tekken.json (Mistral's tokenizer: Voxtral, Pixtral ...)
TEKKEN = json.loads((MM / "manifest.json").read_text(encoding="utf-8"))["tekken"]


def test_tekken_encodes_as_executorch_does():
    needs("tiktoken")
    from pterun.llm.tokenizer import TekkenTokenizer
    tok = load_tokenizer(MM / "tekken.json")
    assert type(tok) is TekkenTokenizer
    assert (tok.bos_id, tok.eos_id, tok.vocab_size) == (TEKKEN["bos_id"], TEKKEN["eos_id"], TEKKEN["vocab_size"])
    assert tok.special_ids == frozenset(range(TEKKEN["num_special"]))
    for case in TEKKEN["cases"]:
        ids = case["ids_bos_eos"]
        assert tok.encode(case["text"], bos=1, eos=1) == ids, case["text"]
        for i, piece in zip(ids, case["pieces"], strict=True):
            if piece is not None and i not in tok.special_ids:  # pterun never shows a special token as text
                assert tok.decode([i]) == piece
        assert tok.decode(ids) == case["text"].replace("<s>", "").replace("[INST]", "")
    assert tok.token_to_id("[INST]") == 3 and tok.token_to_id("<SPECIAL_31>") == 31
    assert tok.token_to_id("Hello") == tok.encode("Hello")[0] and tok.token_to_id("no such token") is None
    text = "Ωμέγα 😀 ξ ÿ"  # unseen in training: each character spread over byte tokens
    ids = tok.encode(text)
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    dec = StreamDecoder(tok)
    assert "".join([dec.push(i) for i in ids] + [dec.flush()]) == text


def test_tekken_errors(tmp_path, monkeypatch):
    needs("tiktoken")
    bad = tmp_path / "tekken.json"
    bad.write_text('{"config": {"default_num_special_tokens": 3, "num_vocab_tokens": 4}, "vocab": 5}')
    with pytest.raises(ValueError, match="not a tekken.json pterun can read"):
        load_tokenizer(bad)
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(ImportError, match="reading a Mistral tekken.json needs the 'tiktoken' package"):
        load_tokenizer(MM / "tekken.json")
