"""Generation settings and statistics, shaped like ``executorch.extension.llm.runner``'s.

:class:`GenerationConfig` has ExecuTorch's fields, defaults and ``resolve_max_new_tokens`` rule, plus three
optional extras (``top_k``, ``top_p``, ``seed``). :class:`Stats` carries ExecuTorch's millisecond timestamps
and counters and renders the same ``to_json_string()``. Example::

    >>> from pterun.llm import GenerationConfig
    >>> cfg = GenerationConfig(max_new_tokens=20, temperature=0)
    >>> cfg
    <GenerationConfig max_new_tokens=20 seq_len=-1 temperature=0.000000 echo=True warming=False>
    >>> cfg.resolve_max_new_tokens(128, 120)
    8
"""

from __future__ import annotations

import json
import time

import numpy as np

__all__ = ["GenerationConfig", "Stats"]


def _f32(x) -> float:
    # ExecuTorch keeps temperature in a C float; reading it back gives the float32-rounded value
    return float(np.float32(x))


class GenerationConfig:
    """How to generate: ExecuTorch's fields (``echo``, ``max_new_tokens``, ``warming``, ``seq_len``,
    ``temperature``, ``num_bos``, ``num_eos``) plus pterun's ``top_k`` (0 = off), ``top_p`` (ExecuTorch's
    sampler uses 0.9) and ``seed`` (None = fresh entropy)."""

    __slots__ = ("echo", "max_new_tokens", "warming", "seq_len", "_temperature", "num_bos", "num_eos", "top_k",
                 "top_p", "seed")

    def __init__(self, echo: bool = True, max_new_tokens: int = -1, warming: bool = False, seq_len: int = -1,
                 temperature: float = 0.8, num_bos: int = 0, num_eos: int = 0, *, top_k: int = 0,
                 top_p: float = 0.9, seed: int | None = None):
        self.echo = bool(echo)
        self.max_new_tokens = int(max_new_tokens)
        self.warming = bool(warming)
        self.seq_len = int(seq_len)
        self.temperature = temperature
        self.num_bos = int(num_bos)
        self.num_eos = int(num_eos)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.seed = seed

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = _f32(value)

    def resolve_max_new_tokens(self, max_context_len: int, num_tokens_occupied: int) -> int:
        """How many tokens may be generated, by ExecuTorch's rule.

        Neither limit set: the rest of the context. Only ``max_new_tokens``: that, capped by the rest of the
        context. Only ``seq_len``: ``min(seq_len, max_context_len)`` minus what is occupied. Both: the smaller of
        the two. Never negative.
        """
        room = max_context_len - num_tokens_occupied
        if self.seq_len == -1 and self.max_new_tokens == -1:
            n = room
        elif self.seq_len == -1:
            n = min(self.max_new_tokens, room)
        elif self.max_new_tokens == -1:
            n = min(self.seq_len, max_context_len) - num_tokens_occupied
        else:
            n = min(min(self.seq_len, max_context_len) - num_tokens_occupied, self.max_new_tokens)
        return max(0, n)

    def __repr__(self) -> str:
        return (f"<GenerationConfig max_new_tokens={self.max_new_tokens} seq_len={self.seq_len} "
                f"temperature={self.temperature:f} echo={self.echo} warming={self.warming}>")


def now_ms() -> int:
    """ExecuTorch's ``time_in_ms``: wall-clock milliseconds."""
    return time.time_ns() // 1_000_000


def _num(x: float) -> str:
    # C++ ostream's default float formatting (6 significant digits), so the JSON reads like ExecuTorch's
    return format(x, ".6g")


class Stats:
    """Timestamps (ms) and counters of the last generation, as ExecuTorch's runner keeps them.

    ``num_generated_tokens`` counts decode steps, ExecuTorch's way: the first token, which prefill produces,
    is not included. :attr:`seconds` holds the same intervals at full resolution for reporting.
    """

    SCALING_FACTOR_UNITS_PER_SECOND = 1000
    _FIELDS = ("model_load_start_ms", "model_load_end_ms", "inference_start_ms", "token_encode_end_ms",
               "model_execution_start_ms", "model_execution_end_ms", "prompt_eval_end_ms", "first_token_ms",
               "inference_end_ms", "aggregate_sampling_time_ms", "aggregate_model_execution_time_ms",
               "num_prompt_tokens", "num_generated_tokens")

    def __init__(self):
        self.model_load_start_ms = self.model_load_end_ms = 0
        self.reset()

    def reset(self, all_stats: bool = False) -> None:
        """Zero everything but the model load times (those too with ``all_stats=True``)."""
        for name in self._FIELDS:
            if all_stats or not name.startswith("model_load"):
                setattr(self, name, 0)
        self._sampling_start = 0
        #: full-resolution durations in seconds: ``ttft``, ``prefill``, ``decode``, ``sampling``, ``model``
        self.seconds = {"ttft": 0.0, "prefill": 0.0, "decode": 0.0, "sampling": 0.0, "model": 0.0}

    def on_sampling_begin(self) -> None:
        self._sampling_start = now_ms()

    def on_sampling_end(self) -> None:
        self.aggregate_sampling_time_ms += now_ms() - self._sampling_start
        self._sampling_start = 0

    def _rates(self) -> tuple[float, float]:
        prefill_ms = self.prompt_eval_end_ms - self.inference_start_ms
        decode_ms = self.inference_end_ms - self.prompt_eval_end_ms
        prefill = self.num_prompt_tokens / prefill_ms * self.SCALING_FACTOR_UNITS_PER_SECOND if prefill_ms > 0 else 0
        decode = self.num_generated_tokens / decode_ms * self.SCALING_FACTOR_UNITS_PER_SECOND if decode_ms > 0 else 0
        return prefill, decode

    def to_json_string(self) -> str:
        """The ``PyTorchObserver`` JSON ExecuTorch's runner prints, with the same keys in the same order."""
        prefill, decode = self._rates()
        parts = []
        if prefill > 0:
            parts.append(f'"prefill_token_per_sec":{_num(prefill)}')
        if decode > 0:
            parts.append(f'"decode_token_per_sec":{_num(decode)}')
        fields = [("prompt_tokens", self.num_prompt_tokens), ("generated_tokens", self.num_generated_tokens)]
        fields += [(n, getattr(self, n)) for n in (
            "model_load_start_ms", "model_load_end_ms", "inference_start_ms", "inference_end_ms",
            "model_execution_start_ms", "model_execution_end_ms", "prompt_eval_end_ms", "first_token_ms",
            "aggregate_sampling_time_ms", "aggregate_model_execution_time_ms")]
        fields.append(("SCALING_FACTOR_UNITS_PER_SECOND", self.SCALING_FACTOR_UNITS_PER_SECOND))
        parts += [f"{json.dumps(k)}:{int(v)}" for k, v in fields]
        return "{" + ",".join(parts) + "}"

    def __repr__(self) -> str:
        total_ms = self.inference_end_ms - self.inference_start_ms
        tps = self.num_generated_tokens / total_ms * self.SCALING_FACTOR_UNITS_PER_SECOND if total_ms > 0 else 0.0
        return (f"<Stats num_prompt_tokens={self.num_prompt_tokens} num_generated_tokens="
                f"{self.num_generated_tokens} tokens_per_second={tps:f}>")
