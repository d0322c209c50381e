"""Tokenizers for text generation, through well-kept libraries, and a streaming UTF-8-safe detokenizer.

:func:`load_tokenizer` looks at the file's *content* and picks the library: a HuggingFace ``tokenizer.json``
(``tokenizers``), a Mistral ``tekken.json`` (``tiktoken``, in Mistral's layout: special tokens first), a tiktoken
BPE file (``tiktoken``, with Llama 3's special tokens, as ExecuTorch assumes) or a SentencePiece model
(``sentencepiece``). The libraries are the optional extra ``pterun[llm]``; a missing one
raises an ImportError that says so. :class:`StreamDecoder` turns token ids into text one token at a time and
holds a piece back until its characters are complete, so a character split across tokens is never shown
broken. Example::

    >>> from pterun.llm.tokenizer import load_tokenizer, StreamDecoder   # doctest: +SKIP
    >>> tok = load_tokenizer("tokenizer.json")                            # doctest: +SKIP
    >>> ids = tok.encode("東京 🙂", bos=1)                                 # doctest: +SKIP
    >>> dec = StreamDecoder(tok)                                          # doctest: +SKIP
    >>> "".join(dec.push(i) for i in ids) + dec.flush()                   # doctest: +SKIP
    '東京 🙂'
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Sequence

__all__ = ["Tokenizer", "load_tokenizer", "StreamDecoder", "HFTokenizer", "TiktokenTokenizer",
           "SentencePieceTokenizer", "TekkenTokenizer"]

_EXTRA = "every tokenizer library: pip install 'pterun[llm]', or pip install -e '.[llm]' in a clone of pterun"
_BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "<|bos|>", "<|startoftext|>", "[BOS]")
_EOS_NAMES = ("<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>", "<|eos|>", "<|eot_id|>", "<|im_end|>", "[EOS]")
# Llama 3's split pattern and special-token layout: ExecuTorch's tiktoken tokenizer assumes both by default
_LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                   r"\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                    "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>",
                    "<|image|>"]
_LLAMA3_SPECIALS += [f"<|reserved_special_token_{i}|>" for i in range(2, 2 + 256 - len(_LLAMA3_SPECIALS))]


def _need(module: str, what: str):
    try:
        return __import__(module)
    except ImportError as e:
        raise ImportError(f"reading {what} needs the {module!r} package: pip install {module} ({_EXTRA})") from e


class Tokenizer:
    """What the runner needs from a tokenizer. ``bos_id``/``eos_id`` are None when unknown."""

    vocab_size: int
    bos_id: int | None
    eos_id: int | None
    special_ids: frozenset  # never shown as text

    def encode(self, text: str, bos: int = 0, eos: int = 0) -> list[int]:
        """Token ids of ``text`` with ``bos`` BOS tokens before and ``eos`` EOS tokens after."""
        ids = self._encode(text)
        if bos and self.bos_id is not None:
            ids = [self.bos_id] * bos + ids
        if eos and self.eos_id is not None:
            ids = ids + [self.eos_id] * eos
        return ids

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens dropped; incomplete UTF-8 becomes U+FFFD)."""
        raise NotImplementedError

    def token_to_id(self, token: str) -> int | None:
        """The id of the token spelled ``token`` (a special token such as ``<image>``), or None."""
        return None


class HFTokenizer(Tokenizer):
    """A HuggingFace ``tokenizer.json`` through the ``tokenizers`` library."""

    def __init__(self, path: str | os.PathLike):
        tokenizers = _need("tokenizers", "a HuggingFace tokenizer.json")
        self.path = Path(path)
        try:
            self._tok = tokenizers.Tokenizer.from_file(str(path))
        except Exception as e:  # the library raises a bare Exception for JSON it cannot use
            raise ValueError(f"{path}: not a HuggingFace tokenizer.json the 'tokenizers' library can read: {e}") \
                from None
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        added = {t.content: i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        self.special_ids = frozenset(added.values())
        bos_name, eos_name = self._config_names()
        self.bos_id = self._find(bos_name, _BOS_NAMES, added)
        self.eos_id = self._find(eos_name, _EOS_NAMES, added)

    def _config_names(self):
        # tokenizer_config.json next to the file names the BOS/EOS tokens, when it is there
        cfg = self.path.with_name("tokenizer_config.json")
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, None
        names = [data.get(k) for k in ("bos_token", "eos_token")]
        return [n.get("content") if isinstance(n, dict) else n for n in names]

    def _find(self, configured, names, added) -> int | None:
        for name in ([configured] if configured else []) + list(names):
            i = self._tok.token_to_id(name)
            if i is not None:
                return i
        return None

    def _encode(self, text: str) -> list[int]:
        # special tokens come from bos/eos counts, not the post-processor, so they are never doubled
        return self._tok.encode(text, add_special_tokens=False).ids

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE file (``base64-token rank`` lines) through ``tiktoken``, with Llama 3's specials."""

    def __init__(self, path: str | os.PathLike, pattern: str = _LLAMA3_PATTERN, specials=tuple(_LLAMA3_SPECIALS)):
        tiktoken = _need("tiktoken", "a tiktoken tokenizer file")
        ranks = {}
        for n, line in enumerate(Path(path).read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            token, _, rank = line.partition(b" ")
            try:
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except ValueError:
                raise ValueError(f"{path}: line {n} is not 'base64-token rank'") from None
        base = len(ranks)
        special = {name: base + i for i, name in enumerate(specials)}
        self._enc = tiktoken.Encoding(name=Path(path).name, pat_str=pattern, mergeable_ranks=ranks,
                                      special_tokens=special)
        self.vocab_size = base + len(special)
        self.special_ids = frozenset(special.values())
        self.bos_id = special.get("<|begin_of_text|>")
        self.eos_id = special.get("<|end_of_text|>")
        self._special = special

    def token_to_id(self, token: str) -> int | None:
        if token in self._special:
            return self._special[token]
        try:
            return self._enc.encode_single_token(token.encode())
        except KeyError:
            return None

    def _encode(self, text: str) -> list[int]:
        return self._enc.encode(text, disallowed_special=())

    def decode(self, ids: Sequence[int]) -> str:
        special = self.special_ids
        return self._enc.decode([i for i in ids if i not in special], errors="replace")


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece ``.model`` through ``sentencepiece``."""

    def __init__(self, path: str | os.PathLike):
        spm = _need("sentencepiece", "a SentencePiece model")
        self._sp = spm.SentencePieceProcessor(model_file=str(path))
        self.vocab_size = self._sp.get_piece_size()
        self.bos_id = self._sp.bos_id() if self._sp.bos_id() >= 0 else None
        self.eos_id = self._sp.eos_id() if self._sp.eos_id() >= 0 else None
        self.special_ids = frozenset(i for i in range(self.vocab_size) if self._sp.is_control(i))

    def _encode(self, text: str) -> list[int]:
        return self._sp.encode(text)

    def token_to_id(self, token: str) -> int | None:
        i = self._sp.piece_to_id(token)
        return None if i == self._sp.unk_id() and token != self._sp.id_to_piece(i) else int(i)

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.decode([int(i) for i in ids])


class TekkenTokenizer(Tokenizer):
    """A Mistral ``tekken.json`` through ``tiktoken``: ``default_num_special_tokens`` special tokens take the first
    ids (named by ``special_tokens``, the rest ``<SPECIAL_i>``), then the BPE vocabulary, cut to
    ``default_vocab_size``, split by ``config.pattern``. A special token's name in the text (``[INST]``,
    ``[BEGIN_AUDIO]``) becomes its id, as ExecuTorch's Tekken tokenizer does (runners write prompts that way)."""

    _V1_SPECIALS = ("<unk>", "<s>", "</s>")  # files without a special_tokens list

    def __init__(self, path: str | os.PathLike):
        tiktoken = _need("tiktoken", "a Mistral tekken.json")
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            cfg = data["config"]
            n_special = int(cfg.get("default_num_special_tokens", len(self._V1_SPECIALS)))
            vocab = data["vocab"]
            size = int(cfg.get("default_vocab_size", len(vocab) + n_special))
            ranks = {base64.b64decode(e["token_bytes"]): int(e["rank"]) for e in vocab[:size - n_special]}
            pattern = cfg["pattern"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a tekken.json pterun can read ({type(e).__name__}: {e})") from None
        names = [f"<SPECIAL_{i}>" for i in range(n_special)]
        listed = data.get("special_tokens")
        for i, t in (((int(t["rank"]), t["token_str"]) for t in listed) if listed else
                     enumerate(self._V1_SPECIALS)):
            if 0 <= i < n_special:
                names[i] = t
        self._enc = tiktoken.Encoding(name=Path(path).name, pat_str=pattern, mergeable_ranks=ranks,
                                      special_tokens={})
        self._n_special = n_special
        self._special = {t: i for i, t in enumerate(names)}
        # longest names first, so that a name containing another is matched whole
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted(self._special, key=len, reverse=True))
                                 + ")") if self._special else None
        self.vocab_size = n_special + len(ranks)
        self.special_ids = frozenset(range(n_special))
        self.bos_id = self._special.get("<s>")
        self.eos_id = self._special.get("</s>")

    def _encode(self, text: str) -> list[int]:
        n = self._n_special
        ids: list[int] = []
        for i, part in enumerate(self._split.split(text) if self._split else [text]):
            if i % 2:  # the captured separators are special-token names
                ids.append(self._special[part])
            elif part:
                ids.extend(t + n for t in self._enc.encode_ordinary(part))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        n = self._n_special
        return self._enc.decode([i - n for i in ids if i >= n], errors="replace")

    def token_to_id(self, token: str) -> int | None:
        if token in self._special:
            return self._special[token]
        try:
            return self._enc.encode_single_token(token.encode()) + self._n_special
        except KeyError:
            return None


_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/]+={0,2} \d+$")


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Open a tokenizer file, choosing the library from what the file contains (not its name).

    Raises:
        FileNotFoundError: no such file.
        ImportError: the library for this format is not installed (``pip install 'pterun[llm]'``).
        ValueError: the content is none of the supported formats.
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(4096)
    stripped = head.lstrip()
    if stripped.startswith(b"{"):
        # tekken.json opens with its config; a HuggingFace tokenizer.json has no such keys
        if b'"default_num_special_tokens"' in head or b'"num_vocab_tokens"' in head:
            return TekkenTokenizer(path)
        return HFTokenizer(path)
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if len(head) == 4096 and len(lines) > 1:
        lines.pop()  # the last line may be cut short by the 4 KiB read
    if lines and all(_TIKTOKEN_LINE.match(ln.strip()) for ln in lines):
        return TiktokenTokenizer(path)
    if head[:1] == b"\x0a":  # a protobuf whose field 1 (the pieces) comes first: SentencePiece's ModelProto
        return SentencePieceTokenizer(path)
    raise ValueError(f"{path}: not a tokenizer pterun can read (expected a HuggingFace tokenizer.json, a Mistral "
                     "tekken.json, a tiktoken BPE file or a SentencePiece .model)")


class StreamDecoder:
    """Incremental detokenizer: :meth:`push` one id, get the new text (possibly ``""``) back.

    It decodes a short window of recent ids and emits only what the window adds, and keeps text back while it
    ends in U+FFFD (an incomplete UTF-8 sequence), so multi-byte characters come out whole. Giving the prompt
    as ``context`` lets tokenizers that drop a leading space at the start of a text (SentencePiece) keep it.
    """

    def __init__(self, tokenizer: Tokenizer, context: Sequence[int] = ()):
        self._decode = tokenizer.decode
        self._special = tokenizer.special_ids
        self._ids = [i for i in list(context)[-4:] if i not in self._special]
        self._prefix = 0  # window start
        self._read = len(self._ids)  # ids before this point are already emitted

    def push(self, token: int) -> str:
        if token in self._special:
            return ""
        ids = self._ids
        ids.append(int(token))
        prefix_text = self._decode(ids[self._prefix:self._read])
        text = self._decode(ids[self._prefix:])
        if len(text) > len(prefix_text) and not text.endswith("\ufffd"):
            piece = text[len(prefix_text):]
            self._prefix, self._read = self._read, len(ids)
            if self._prefix > 64:  # keep the window (and the list) short
                del ids[:self._prefix]
                self._read -= self._prefix
                self._prefix = 0
            return piece
        return ""

    def flush(self) -> str:
        """Whatever is still held back at the end of generation. A character whose bytes were cut off by the
        end can never be completed: it is dropped rather than shown as U+FFFD."""
        ids = self._ids
        prefix_text = self._decode(ids[self._prefix:self._read])
        text = self._decode(ids[self._prefix:])
        self._prefix = self._read = len(ids)
        return text[len(prefix_text):].rstrip("\ufffd") if len(text) > len(prefix_text) else ""
