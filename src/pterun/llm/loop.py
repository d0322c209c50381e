"""What every generating runner shares: the decode loop, its timing, stopping, and generation options.

:class:`DecodeLoop` is the base of :class:`~pterun.llm.TextLLMRunner` and :class:`~pterun.llm.MultimodalRunner`:
a subclass provides ``_step(token) -> logits`` (one token through the model at the next position) and an
``info`` with ``eos_ids`` and ``bos_id``; the loop samples, counts, checks EOS and :meth:`DecodeLoop.stop`, and
fills :class:`~pterun.llm.Stats`. Example (a subclass's generator of token ids, timed)::

    >>> from pterun.llm.loop import constant          # the metadata methods' values
    >>> from pterun import Runtime                     # doctest: +SKIP
    >>> constant(Runtime.get().load_program("llama.pte"), "get_max_seq_len")   # doctest: +SKIP
    128
"""

from __future__ import annotations

import copy
import time
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from pterun.llm.config import GenerationConfig, Stats, now_ms
from pterun.llm.sampler import Sampler
from pterun.llm.tokenizer import Tokenizer, load_tokenizer

if TYPE_CHECKING:
    from pterun.runtime import Program, Runtime
    from pterun.sources import DataPath

__all__ = ["DecodeLoop", "ProgramRunner", "constant", "make_sampler"]


def constant(program, name: str):
    """The value of a metadata method (``get_max_seq_len`` ...), or None when the program has no such method.
    ``get_eos_ids`` gives the whole list; every other method its one value."""
    if name not in program.method_names:
        return None
    out = program.load_method(name).execute([])
    return out if name == "get_eos_ids" else out[0]


class ProgramRunner:
    """How the multimodal and the speech runner load: a model program (and its ``.ptd``), a tokenizer and an
    optional preprocessor program, from files or already loaded; a subclass's ``_setup`` takes it from there."""

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: DataPath | None = None, *, preprocessor_path: str | os.PathLike | None = None,
                 runtime: Runtime | None = None):
        from pterun.runtime import Runtime

        load_start = now_ms()
        rt = runtime or Runtime.get()
        program = rt.load_program(model_path, data_path=data_path)
        pre = rt.load_program(preprocessor_path) if preprocessor_path is not None else None
        self._setup(program, load_tokenizer(tokenizer_path), pre, str(model_path), load_start)

    @classmethod
    def from_program(cls, program: Program, tokenizer: Tokenizer | str | os.PathLike,
                     preprocessor: Program | None = None) -> ProgramRunner:
        """A runner over already loaded programs and a tokenizer object or file."""
        self = cls.__new__(cls)
        tok = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
        self._setup(program, tok, preprocessor, getattr(program, "name", "<program>"), now_ms())
        return self

    def _setup(self, program: Program, tokenizer: Tokenizer, preprocessor: Program | None, name: str,
               load_start: int) -> None:
        raise NotImplementedError


def make_sampler(config: GenerationConfig, rng: np.random.Generator | None) -> Sampler:
    return Sampler(config.temperature, top_k=config.top_k, top_p=config.top_p, rng=rng, seed=config.seed)


class DecodeLoop:
    """The token loop shared by the runners; see the module docstring for what a subclass provides."""

    stats: Stats
    _stop: bool = False
    _t0: float = 0.0

    def stop(self) -> None:
        """Stop the running generation after the current token (safe to call from a callback or thread)."""
        self._stop = True

    def _config(self, config: GenerationConfig | None, options: dict) -> GenerationConfig:
        """A copy of ``config`` (or pterun's default: no echo, one BOS when the model has one) with
        ``options`` set on it."""
        cfg = copy.copy(config) if config is not None else GenerationConfig(
            echo=False, num_bos=1 if self.info.bos_id is not None else 0)
        for name, value in options.items():
            if name not in GenerationConfig.__slots__ and name != "temperature":
                raise TypeError(f"unexpected generation option {name!r}")
            setattr(cfg, name, value)
        return cfg

    def _sample(self, sampler: Sampler, logits: np.ndarray) -> int:
        st = self.stats
        st.on_sampling_begin()
        tok = sampler.sample(logits)
        st.on_sampling_end()
        return tok

    def _decode(self, tok: int, steps: int, sampler: Sampler) -> Iterator[int]:
        """Up to ``steps`` tokens after ``tok`` (the one prefill produced), one ``_step`` each; stops after an
        EOS id or :meth:`stop`."""
        st = self.stats
        eos = self.info.eos_ids
        step = self._step
        for _ in range(steps):
            if tok in eos or self._stop:
                return
            tok = self._sample(sampler, step(tok))
            st.num_generated_tokens += 1
            yield tok

    def _timed(self, tokens: Iterator[int]) -> Iterator[int]:
        """Pass ``tokens`` through, stamping the first token's time and the end of inference (also when the
        caller stops iterating early). ``self._t0`` is the ``perf_counter`` at the start of inference."""
        st = self.stats
        t_decode = 0.0
        try:
            for i, tok in enumerate(tokens):
                if i == 0:
                    st.first_token_ms = st.prompt_eval_end_ms = now_ms()
                    t_decode = time.perf_counter()
                    st.seconds["ttft"] = st.seconds["prefill"] = t_decode - self._t0
                yield tok
        finally:
            st.inference_end_ms = now_ms()
            if t_decode:
                st.seconds["decode"] = time.perf_counter() - t_decode
