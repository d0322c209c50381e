"""Text generation over an ExecuTorch-exported LLM: ExecuTorch's ``TextLLMRunner``, in NumPy.

The runner reads the program's metadata methods (``get_max_seq_len`` ...), encodes the prompt, prefills the
KV cache (in one call when the token input is dynamic, else token by token; in chunks of ``max_seq_len``),
then decodes one token per ``forward`` call until ``max_new_tokens``, an EOS id, or :meth:`stop`. Both decoder
conventions work (``tokens, start_pos[1]`` and ``tokens, cache_positions[n]``), and so do programs without a
KV cache (``forward(tokens)`` on the whole sequence). Example::

    >>> from pterun.llm import TextLLMRunner, GenerationConfig              # doctest: +SKIP
    >>> runner = TextLLMRunner("llama.pte", "tokenizer.json")               # doctest: +SKIP
    >>> for piece in runner.stream("Once upon a time", max_new_tokens=32, temperature=0):  # doctest: +SKIP
    ...     print(piece, end="", flush=True)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pterun.errors import InvalidArgumentError, InvalidProgramError
from pterun.llm.config import GenerationConfig, Stats, now_ms
from pterun.llm.loop import DecodeLoop, constant, make_sampler
from pterun.llm.sampler import Sampler
from pterun.llm.tokenizer import StreamDecoder, Tokenizer, load_tokenizer
from pterun.runtime import Program, Runtime
from pterun.sources import DataPath

__all__ = ["TextLLMRunner", "ModelInfo", "read_model_info"]

log = logging.getLogger("pterun")


@dataclass(frozen=True)
class ModelInfo:
    """What the runner knows about the program: its metadata methods and its ``forward`` signature."""

    max_seq_len: int
    max_context_len: int
    vocab_size: int
    bos_id: int | None
    eos_ids: frozenset
    use_kv_cache: bool
    use_sdpa_with_kv_cache: bool
    enable_dynamic_shape: bool
    cache_positions: bool  # forward's second input takes [start_pos .. start_pos+n-1] rather than [start_pos]
    tokens_bound: int  # most tokens one forward call accepts
    dynamic_tokens: bool  # the token input is dynamic: prefill goes in chunks rather than token by token


def read_model_info(program: Program, tokenizer: Tokenizer | None = None) -> ModelInfo:
    """Read the LLM conventions of a loaded program, with ExecuTorch's defaults for missing metadata."""
    if "forward" not in program.method_names:
        raise InvalidProgramError(f"an LLM program needs a 'forward' method; this one has "
                                  f"{sorted(program.method_names)}")
    meta = program.metadata("forward")
    n_in = meta.num_inputs()
    if n_in not in (1, 2) or meta.num_outputs() < 1:
        raise InvalidProgramError(f"'forward' takes {n_in} inputs and gives {meta.num_outputs()} outputs; an LLM "
                                  "decoder takes (tokens) or (tokens, positions) and returns logits")
    tokens_info = meta.input_tensor_meta(0)
    sizes = tokens_info.sizes()
    if len(sizes) != 2 or tokens_info.numpy_dtype() != np.int64:
        raise InvalidProgramError(f"'forward' input 0 must be int64 tokens [1, n], got {tokens_info}")
    max_seq = constant(program, "get_max_seq_len")
    if max_seq is None:  # ExecuTorch refuses such a program; the token input's bound says as much
        max_seq = sizes[1] + 1 if tokens_info.is_dynamic() else 128
        log.warning("program has no get_max_seq_len method; using %d", max_seq)
    ctx = constant(program, "get_max_context_len")
    ctx = int(max_seq if ctx is None else ctx)
    kv = n_in == 2
    use_kv = constant(program, "use_kv_cache")
    if use_kv is not None and bool(use_kv) != kv:
        log.warning("use_kv_cache says %s but 'forward' takes %d inputs; going by the inputs", use_kv, n_in)
    vocab = constant(program, "get_vocab_size")
    bos = constant(program, "get_bos_id")
    eos = constant(program, "get_eos_ids")
    if bos is None and tokenizer is not None:
        bos = tokenizer.bos_id
    if eos is None:
        eos = [tokenizer.eos_id] if tokenizer is not None and tokenizer.eos_id is not None else []
    dyn_flag = constant(program, "enable_dynamic_shape")
    bound = sizes[1]
    if not kv:  # the whole sequence goes in every call, so the input's bound caps the context
        ctx = min(ctx, bound + 1)
    return ModelInfo(
        max_seq_len=int(max_seq), max_context_len=ctx,
        vocab_size=int(vocab) if vocab is not None else (tokenizer.vocab_size if tokenizer else -1),
        bos_id=int(bos) if bos is not None else None, eos_ids=frozenset(int(e) for e in eos), use_kv_cache=kv,
        use_sdpa_with_kv_cache=bool(constant(program, "use_sdpa_with_kv_cache") or False),
        enable_dynamic_shape=bool(dyn_flag) if dyn_flag is not None else False,
        cache_positions=kv and int(np.prod(meta.input_tensor_meta(1).sizes())) > 1,
        tokens_bound=int(bound), dynamic_tokens=tokens_info.is_dynamic())


class TextLLMRunner(DecodeLoop):
    """Generate text with an LLM ``.pte``; the same calls as ``executorch.extension.llm.runner.TextLLMRunner``.

    Args:
        model_path: the ``.pte`` program.
        tokenizer_path: ``tokenizer.json`` (HuggingFace), a tiktoken file or a SentencePiece ``.model``.
        data_path: external weights (``.ptd``), or a list of them.
        runtime: the :class:`pterun.Runtime` that loads the model (threads, engine); default
            :meth:`pterun.Runtime.get`.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: DataPath | None = None, *, runtime: Runtime | None = None):
        load_start = now_ms()
        program = (runtime or Runtime.get()).load_program(model_path, data_path=data_path)
        self._setup(program, load_tokenizer(tokenizer_path), str(model_path), load_start)

    @classmethod
    def from_program(cls, program: Program, tokenizer: Tokenizer | str | os.PathLike) -> "TextLLMRunner":
        """A runner over an already loaded :class:`pterun.Program` (from bytes, say) and a tokenizer object or
        file."""
        self = cls.__new__(cls)
        load_start = now_ms()
        tok = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
        self._setup(program, tok, getattr(program, "name", "<program>"), load_start)
        return self

    def _setup(self, program, tokenizer: Tokenizer, name: str, load_start: int) -> None:
        self.stats = Stats()
        self.stats.model_load_start_ms = load_start
        self.tokenizer = tokenizer
        self.model_path = name
        self.program = program
        self.info = read_model_info(program, tokenizer)
        # a pterun Method's own logits, read by the sampler before the next call: no copy a token
        forward = program.load_method("forward")
        self._forward = getattr(forward, "_held", forward.execute)
        self.stats.model_load_end_ms = now_ms()
        info = self.info
        self._chunk = max(1, min(info.max_seq_len, info.tokens_bound)) if info.dynamic_tokens else 1
        self._pos = 0  # positions of the KV cache in use
        self._history: list[int] = []  # the sequence so far, for programs without a KV cache
        self._stop = False
        # the decode step's inputs, reused: one token and its position
        self._tok1 = np.zeros((1, 1), np.int64)
        self._pos1 = np.zeros((1,), np.int64)

    # -- ExecuTorch's API ---------------------------------------------------------------------------------
    def generate(self, prompt: str, config: GenerationConfig | None = None,
                 token_callback: Callable[[str], None] | None = None,
                 stats_callback: Callable[[Stats], None] | None = None) -> None:
        """Generate from ``prompt``; ``token_callback`` gets each piece of text as it is decoded (the prompt
        first when ``config.echo``), ``stats_callback`` gets :attr:`stats` once at the end. Without a
        ``token_callback`` the tokens are not decoded into text at all (nobody reads it)."""
        config = config or GenerationConfig()
        if token_callback is None:
            ids, max_new, sampler = self._start(prompt, config, None)
            for _ in self._timed_tokens(ids, max_new, sampler):
                pass
        else:
            for piece in self._pieces(prompt, config, None):
                token_callback(piece)
        if stats_callback is not None:
            stats_callback(self.stats)

    def prefill(self, prompt: str, config: GenerationConfig | None = None) -> None:
        """Run ``prompt`` (with ``config.num_bos``/``num_eos``) into the KV cache without generating."""
        ids = self._encode(prompt, config or GenerationConfig())
        if not ids:
            raise InvalidArgumentError("prefill: the prompt encodes to no tokens")
        self._check_fits(len(ids))
        self._prefill(ids)

    def reset(self) -> None:
        """Forget the conversation: the next prompt starts at position 0. Stats are cleared too."""
        self.stats.reset()
        self._pos = 0
        self._history = []

    def get_vocab_size(self) -> int:
        return self.info.vocab_size

    # -- pterun's additions -------------------------------------------------------------------------------
    def stream(self, prompt: str, config: GenerationConfig | None = None, *, rng: np.random.Generator | None = None,
               **options: Any) -> Iterator[str]:
        """Yield the generated text piece by piece (never a broken character).

        ``options`` override fields of ``config`` (``max_new_tokens=``, ``temperature=``, ``top_k=``,
        ``top_p=``, ``seed=``, ...). Without a config the prompt is not echoed and gets one BOS token when
        the model has one. ``rng`` (an ``np.random.Generator``) takes precedence over ``seed``.
        """
        cfg = self._config(config, options)
        for piece in self._pieces(prompt, cfg, rng):
            if piece:
                yield piece

    def stream_ids(self, prompt: str, config: GenerationConfig | None = None, *,
                   rng: np.random.Generator | None = None, **options: Any) -> Iterator[int]:
        """Like :meth:`stream`, but yield the generated token ids (an EOS id, when reached, is the last)."""
        cfg = self._config(config, options)
        ids, max_new, sampler = self._start(prompt, cfg, rng)
        yield from self._timed_tokens(ids, max_new, sampler)

    @property
    def pos(self) -> int:
        """Positions of the context in use (the next prompt starts here)."""
        return self._pos

    def __repr__(self) -> str:
        return (f"<TextLLMRunner model={os.path.basename(self.model_path)!r} kv_cache={self.info.use_kv_cache} "
                f"max_context_len={self.info.max_context_len} pos={self._pos}>")

    # -- the work -----------------------------------------------------------------------------------------
    def _check_fits(self, n_prompt: int) -> int:
        room = self.info.max_context_len - self._pos
        if n_prompt >= room:
            raise InvalidArgumentError(f"the prompt has {n_prompt} tokens but only {room} positions of the "
                                       f"{self.info.max_context_len}-token context are left (reset() frees them)")
        return room

    def _encode(self, prompt: str, config: GenerationConfig) -> list[int]:
        """Prompt ids with ``num_bos`` BOS / ``num_eos`` EOS ids: the model's own (``get_bos_id``,
        ``get_eos_ids``) first, the tokenizer's when the program does not say."""
        ids = self.tokenizer.encode(prompt)
        bos = self.info.bos_id if self.info.bos_id is not None else self.tokenizer.bos_id
        eos = self.tokenizer.eos_id if self.tokenizer.eos_id is not None else min(self.info.eos_ids, default=None)
        if config.num_bos > 0 and bos is not None:
            ids = [bos] * config.num_bos + ids
        if config.num_eos > 0 and eos is not None:
            ids = ids + [eos] * config.num_eos
        return ids

    def _start(self, prompt: str, config: GenerationConfig, rng):
        """Encode and check the prompt, reset the stats: (prompt ids, max new tokens, sampler)."""
        if not prompt:
            raise InvalidArgumentError("the prompt is empty")
        st = self.stats
        st.reset()
        st.inference_start_ms = now_ms()
        self._t0 = time.perf_counter()
        ids = self._encode(prompt, config)
        st.token_encode_end_ms = now_ms()
        if not ids:
            raise InvalidArgumentError("the prompt encodes to no tokens")
        room = self._check_fits(len(ids))
        max_new = config.resolve_max_new_tokens(room, len(ids))
        if max_new <= 0:
            raise InvalidArgumentError(f"no tokens may be generated: {config!r} leaves {max_new} of the {room} "
                                       f"free positions for a {len(ids)}-token prompt")
        st.num_prompt_tokens = len(ids)
        self._stop = False
        return ids, max_new, make_sampler(config, rng)

    def _pieces(self, prompt: str, config: GenerationConfig, rng) -> Iterator[str]:
        ids, max_new, sampler = self._start(prompt, config, rng)
        decoder = StreamDecoder(self.tokenizer, ids)
        if config.echo:
            yield prompt
        for tok in self._timed_tokens(ids, max_new, sampler):
            yield decoder.push(tok)
        tail = decoder.flush()
        if tail:
            yield tail

    def _timed_tokens(self, ids: list[int], max_new: int, sampler: Sampler) -> Iterator[int]:
        return self._timed(self._tokens(ids, max_new, sampler))

    def _tokens(self, ids: list[int], max_new: int, sampler: Sampler) -> Iterator[int]:
        """Prefill, then decode: the token ids, first one from the prompt's logits."""
        tok = self._sample(sampler, self._prefill(ids))
        yield tok
        yield from self._decode(tok, max_new - 1, sampler)

    def _run(self, inputs: list) -> np.ndarray:
        """One forward call; the logits row of the last token."""
        st = self.stats
        start = time.perf_counter()
        if not st.model_execution_start_ms:
            st.model_execution_start_ms = now_ms()
        out = self._forward(inputs)[0]
        dt = time.perf_counter() - start
        st.seconds["model"] += dt
        st.aggregate_model_execution_time_ms = int(st.seconds["model"] * 1000)
        st.model_execution_end_ms = now_ms()
        return out.reshape(-1, out.shape[-1])[-1]

    def _prefill(self, ids: list[int]) -> np.ndarray:
        if not self.info.use_kv_cache:
            self._history.extend(ids)
            self._pos = len(self._history)
            return self._run([np.array([self._history], np.int64)])
        logits = None
        for i in range(0, len(ids), self._chunk):
            chunk = ids[i:i + self._chunk]
            logits = self._run([np.array([chunk], np.int64), self._positions(self._pos, len(chunk))])
            self._pos += len(chunk)
        return logits

    def _positions(self, start: int, n: int) -> np.ndarray:
        if self.info.cache_positions:
            return np.arange(start, start + n, dtype=np.int64)
        return np.array([start], np.int64)

    def _step(self, tok: int) -> np.ndarray:
        """Feed one token at the next position; the logits it produces."""
        if not self.info.use_kv_cache:
            self._history.append(tok)
            self._pos += 1
            return self._run([np.array([self._history], np.int64)])
        self._tok1[0, 0] = tok
        if self.info.cache_positions:
            pos = self._positions(self._pos, 1)
        else:
            pos = self._pos1
            pos[0] = self._pos
        self._pos += 1
        return self._run([self._tok1, pos])
