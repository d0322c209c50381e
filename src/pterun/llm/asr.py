"""Speech to text over an ExecuTorch-exported encoder-decoder (Whisper): the runner ExecuTorch has only in C++.

ExecuTorch's ``extension/asr/runner`` (``Seq2SeqRunner``, alias ``AsrRunner``) drives a program with an
``encoder`` method (log-mel features -> hidden states) and a ``text_decoder`` method
(``token[1, 1], encoder_out, cache_position[1]`` -> logits, a KV cache in the program), as optimum-executorch's
``automatic-speech-recognition`` export makes it, plus a preprocessor ``.pte`` that turns a waveform into the
features. This module is that runner in NumPy: features from the preprocessor program (or the NumPy
:class:`~pterun.llm.audio.WhisperFrontEnd` when none is given), one encoder call per window of audio, then
greedy (or sampled) decoding from ``decoder_start_token_id`` until an EOS id. Example (on your own files)::

    >>> from pterun.llm import Seq2SeqRunner
    >>> runner = Seq2SeqRunner("whisper.pte", "tokenizer.json",
    ...                        preprocessor_path="whisper_preprocessor.pte")          # doctest: +SKIP
    >>> print(runner.transcribe_text("speech.wav"))                                 # doctest: +SKIP
    >>> for piece in runner.stream("speech.wav", max_new_tokens=64):               # doctest: +SKIP
    ...     print(piece, end="", flush=True)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Union

import numpy as np

from pterun.errors import InvalidArgumentError, InvalidProgramError
from pterun.llm.audio import WhisperFrontEnd, load_audio
from pterun.llm.config import Stats, now_ms
from pterun.llm.loop import ProgramRunner, constant
from pterun.llm.sampler import Sampler
from pterun.llm.tokenizer import StreamDecoder, Tokenizer

__all__ = ["Seq2SeqRunner", "Seq2SeqTranscribeConfig", "AsrRunner", "AsrTranscribeConfig", "AudioSource"]

log = logging.getLogger("pterun")

#: what the speech runner transcribes: a WAV path, a 1-D float waveform at 16 kHz, or features
AudioSource = Union[str, os.PathLike, np.ndarray]

class Seq2SeqTranscribeConfig:
    """ExecuTorch's ``Seq2SeqTranscribeConfig`` (``max_new_tokens`` 128, ``temperature`` 0 = greedy,
    ``decoder_start_token_id``, ``eos_token_ids``), with pterun's ``top_k``, ``top_p``, ``seed`` and
    ``prompt_ids`` (tokens forced after the start token, e.g. Whisper's language and task tokens).

    ``decoder_start_token_id=None`` takes the program's ``decoder_start_token_id`` method, else the tokenizer's
    ``<|startoftranscript|>``; an empty ``eos_token_ids`` takes the program's (``get_eos_ids`` /
    ``get_eos_id``), else the tokenizer's EOS.
    """

    def __init__(self, max_new_tokens: int = 128, eos_token_ids: Sequence[int] = (), temperature: float = 0.0,
                 decoder_start_token_id: int | None = None, *, top_k: int = 0, top_p: float = 1.0,
                 seed: int | None = None, prompt_ids: Sequence[int] = ()):
        self.max_new_tokens = int(max_new_tokens)
        self.eos_token_ids = set(int(i) for i in eos_token_ids)
        self.temperature = float(np.float32(temperature))
        self.decoder_start_token_id = decoder_start_token_id
        self.top_k, self.top_p, self.seed = int(top_k), float(top_p), seed
        self.prompt_ids = [int(i) for i in prompt_ids]

    def __repr__(self) -> str:
        return (f"<Seq2SeqTranscribeConfig max_new_tokens={self.max_new_tokens} temperature={self.temperature:f} "
                f"decoder_start_token_id={self.decoder_start_token_id}>")


class Seq2SeqRunner(ProgramRunner):
    """Transcribe audio with an encoder-decoder ``.pte``; ExecuTorch's C++ ``Seq2SeqRunner`` in Python.

    Args:
        model_path: the ``.pte`` with ``encoder`` and ``text_decoder`` methods.
        tokenizer_path: the tokenizer (``tokenizer.json`` for Whisper).
        data_path: external weights (``.ptd``), if any.
        preprocessor_path: the preprocessor ``.pte`` (waveform -> features); without it pterun's NumPy
            :class:`~pterun.llm.audio.WhisperFrontEnd` is used, sized from the encoder's input.
        runtime: the :class:`pterun.Runtime` that loads the programs.

    :attr:`stats` counts as ExecuTorch's runner does: ``num_prompt_tokens`` is the encoder's output positions and
    ``num_generated_tokens`` every generated token, the first included.
    """

    counts_every_token = True  # Stats.num_generated_tokens includes the first token, as in Seq2SeqRunner

    def _setup(self, program, tokenizer: Tokenizer, preprocessor, name: str, load_start: int) -> None:
        missing = {"encoder", "text_decoder"} - set(program.method_names)
        if missing:
            raise InvalidProgramError(f"a speech-to-text program needs 'encoder' and 'text_decoder' methods; this "
                                      f"one lacks {sorted(missing)} (it has {sorted(program.method_names)})")
        self.stats = Stats()
        self.stats.model_load_start_ms = load_start
        self.program, self.tokenizer, self.model_path = program, tokenizer, name
        enc_meta, dec_meta = program.metadata("encoder"), program.metadata("text_decoder")
        if dec_meta.num_inputs() != 3:
            raise InvalidProgramError(f"'text_decoder' takes {dec_meta.num_inputs()} inputs; a Whisper-style decoder "
                                      "takes (token[1, 1], encoder_output, cache_position[1])")
        feat = enc_meta.input_tensor_meta(0)
        self.feature_shape = tuple(feat.sizes())
        self.feature_dtype = feat.numpy_dtype()
        self._encoder = program.load_method("encoder").execute
        self._decoder = program.load_method("text_decoder").execute
        self._preprocess = preprocessor.load_method("forward").execute if preprocessor is not None else None
        self.front_end = None if preprocessor is not None else WhisperFrontEnd.for_encoder(self.feature_shape)
        self.max_seq_len = int(constant(program, "get_max_seq_len") or 448)
        eos = constant(program, "get_eos_ids")
        if eos is None:
            one = constant(program, "get_eos_id")
            eos = [] if one is None else [one]
        if not eos and tokenizer.eos_id is not None:
            eos = [tokenizer.eos_id]
        self.eos_ids = frozenset(int(e) for e in eos)
        start = constant(program, "decoder_start_token_id")
        if start is None:
            start = tokenizer.token_to_id("<|startoftranscript|>")
        self.decoder_start_token_id = None if start is None else int(start)
        self._stop = False
        self._tok = np.zeros((1, 1), np.int64)
        self._pos = np.zeros((1,), np.int64)
        self.stats.model_load_end_ms = now_ms()

    # -- ExecuTorch's API -------------------------------------------------------------------------------------
    def transcribe(self, audio: AudioSource, config: Seq2SeqTranscribeConfig | None = None,
                   token_callback: Callable[[str], None] | None = None) -> list[int]:
        """The token ids (the start token first, then every generated token, an EOS id last when reached).

        ``audio`` is a WAV path, a mono waveform (1-D float array at 16 kHz) or preprocessed features shaped like
        the encoder's input (``[1, n_mels, frames]``, or ``[1, n_mels, k * frames]`` for ``k`` windows, each
        transcribed in turn). ``token_callback`` gets each piece of text as it is decoded.
        """
        cfg = config or Seq2SeqTranscribeConfig()
        ids: list[int] = []
        decoder = StreamDecoder(self.tokenizer)
        for is_start, tok in self._tokens(audio, cfg):
            ids.append(tok)
            if token_callback is not None and not is_start:
                piece = decoder.push(tok)
                if piece:
                    token_callback(piece)
        if token_callback is not None:
            tail = decoder.flush()
            if tail:
                token_callback(tail)
        return ids

    def stop(self) -> None:
        """Stop transcribing after the current token (safe from a callback or another thread)."""
        self._stop = True

    # -- pterun's additions -----------------------------------------------------------------------------------
    def stream(self, audio: AudioSource, config: Seq2SeqTranscribeConfig | None = None,
               **options: Any) -> Iterator[str]:
        """Yield the transcript piece by piece (never a broken character). ``options`` override fields of the
        config (``max_new_tokens=``, ``temperature=``, ``seed=``, ...)."""
        cfg = _with(config, options)
        decoder = StreamDecoder(self.tokenizer)
        for is_start, tok in self._tokens(audio, cfg):
            if not is_start:  # the start token is not text
                piece = decoder.push(tok)
                if piece:
                    yield piece
        tail = decoder.flush()
        if tail:
            yield tail

    def transcribe_text(self, audio: AudioSource, config: Seq2SeqTranscribeConfig | None = None, **options: Any) -> str:
        """The whole transcript as one string."""
        return "".join(self.stream(audio, config, **options))

    def features(self, audio: AudioSource) -> np.ndarray:
        """The encoder's input features for ``audio`` (a WAV path, a waveform, or features, passed through)."""
        if isinstance(audio, (str, os.PathLike)):
            audio = load_audio(audio, 16000)
        x = np.asarray(audio)
        if x.ndim == 3:
            return x.astype(self.feature_dtype, copy=False)
        if x.ndim != 1 or x.dtype.kind != "f":
            raise InvalidArgumentError(f"audio must be a WAV path, a 1-D float waveform or [1, n_mels, frames] "
                                       f"features; got a {x.dtype} array of shape {list(x.shape)}")
        x = np.ascontiguousarray(x, np.float32)
        if self._preprocess is not None:
            return np.asarray(self._preprocess([x])[0])
        return self.front_end(x)

    @property
    def info(self) -> dict:
        return {"feature_shape": list(self.feature_shape), "max_seq_len": self.max_seq_len,
                "eos_ids": sorted(self.eos_ids), "decoder_start_token_id": self.decoder_start_token_id,
                "preprocessor": self._preprocess is not None}

    def __repr__(self) -> str:
        return (f"<Seq2SeqRunner model={os.path.basename(self.model_path)!r} features={list(self.feature_shape)} "
                f"preprocessor={self._preprocess is not None}>")

    # -- the work ---------------------------------------------------------------------------------------------
    def _tokens(self, audio: AudioSource, cfg: Seq2SeqTranscribeConfig) -> Iterator[tuple[bool, int]]:
        """Encode each window of the features and decode it, one token at a time: ``(is_start, id)`` pairs, the
        start token of every window first."""
        if cfg.max_new_tokens <= 0:
            raise InvalidArgumentError(f"max_new_tokens must be positive, got {cfg.max_new_tokens}")
        start = cfg.decoder_start_token_id if cfg.decoder_start_token_id is not None else self.decoder_start_token_id
        if start is None:
            raise InvalidArgumentError("no decoder_start_token_id: the program has no such method and the tokenizer "
                                       "no <|startoftranscript|>; set Seq2SeqTranscribeConfig.decoder_start_token_id")
        eos = cfg.eos_token_ids or self.eos_ids
        if not eos:
            raise InvalidArgumentError("the EOS token set is empty: set Seq2SeqTranscribeConfig.eos_token_ids")
        st = self.stats
        st.reset()
        st.inference_start_ms = now_ms()
        t0 = time.perf_counter()
        windows = self._split(self.features(audio))
        st.token_encode_end_ms = now_ms()
        sampler = Sampler(cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p, seed=cfg.seed)
        self._stop = False
        t_decode = 0.0
        try:
            for window in windows:
                if self._stop:
                    return
                yield True, start
                for tok in self._decode_window(window, start, cfg, eos, sampler):
                    if not t_decode:
                        st.first_token_ms = now_ms()
                        t_decode = time.perf_counter()
                        st.seconds["ttft"] = t_decode - t0
                    yield False, tok
        finally:
            st.inference_end_ms = now_ms()
            if t_decode:
                st.seconds["decode"] = time.perf_counter() - t_decode

    def _split(self, feats: np.ndarray) -> list[np.ndarray]:
        want = self.feature_shape
        if feats.ndim != 3 or feats.shape[:2] != tuple(want[:2]) or feats.shape[2] % want[2]:
            raise InvalidArgumentError(f"features of shape {list(feats.shape)} do not fit the encoder's input "
                                       f"{list(want)} (or whole windows of it along the last axis)")
        return [np.ascontiguousarray(feats[..., i:i + want[2]]) for i in range(0, feats.shape[2], want[2])]

    def _decode_window(self, feats: np.ndarray, start: int, cfg, eos, sampler: Sampler) -> Iterator[int]:
        st = self.stats
        t = time.perf_counter()
        enc = self._encoder([feats])[0]
        st.seconds["prefill"] += time.perf_counter() - t
        st.prompt_eval_end_ms = now_ms()
        st.num_prompt_tokens += int(enc.shape[1])
        tok, pos = start, 0
        forced = list(cfg.prompt_ids)
        limit = min(cfg.max_new_tokens, self.max_seq_len - 1 - len(forced))
        generated = 0
        while generated < limit and not self._stop:
            self._tok[0, 0] = tok
            self._pos[0] = pos
            t = time.perf_counter()
            logits = self._decoder([self._tok, enc, self._pos])[0]
            st.seconds["model"] += time.perf_counter() - t
            st.aggregate_model_execution_time_ms = int(st.seconds["model"] * 1000)
            pos += 1
            if forced:  # a forced prompt token is fed, not predicted
                tok = forced.pop(0)
                yield tok
                continue
            st.on_sampling_begin()
            tok = sampler.sample(logits.reshape(-1))
            st.on_sampling_end()
            generated += 1
            st.num_generated_tokens += 1
            yield tok
            if tok in eos:
                return


def _with(config: Seq2SeqTranscribeConfig | None, options: dict) -> Seq2SeqTranscribeConfig:
    import copy
    cfg = copy.copy(config) if config is not None else Seq2SeqTranscribeConfig()
    for name, value in options.items():
        if not hasattr(cfg, name):
            raise TypeError(f"unexpected transcription option {name!r}")
        setattr(cfg, name, value)
    return cfg


AsrRunner = Seq2SeqRunner
AsrTranscribeConfig = Seq2SeqTranscribeConfig
