"""Text generation from text, images and audio: ExecuTorch's ``MultimodalRunner``, in NumPy, without torch.

A multimodal ``.pte`` (ExecuTorch's LLaVA exporter, optimum-executorch's ``image-text-to-text`` and
``multimodal-text-to-text`` tasks: Gemma 3, SmolVLM, Voxtral ...) has the methods ``token_embedding``
(ids -> embeddings), ``text_decoder`` (embeddings, positions -> logits, with the KV cache in the program) and
``vision_encoder`` and/or ``audio_encoder`` (pixels or features -> embeddings), plus the metadata methods. The
runner turns every input into embeddings in order, prefills them into the cache, then decodes one token per
``token_embedding`` + ``text_decoder`` call. Images, audio and raw audio may come in any order among the text
pieces. Example (on your own files)::

    >>> import numpy as np
    >>> from pterun.llm import MultimodalRunner, make_image_input, make_text_input
    >>> runner = MultimodalRunner("llava.pte", "tokenizer.json")                                 # doctest: +SKIP
    >>> pixels = np.zeros((224, 224, 3), np.uint8)            # H x W x 3 raw pixels, from any image library
    >>> inputs = [make_text_input("USER: "), make_image_input(pixels), make_text_input(" What is it? ASSISTANT:")]
    >>> for piece in runner.stream(inputs, max_new_tokens=64, temperature=0):                     # doctest: +SKIP
    ...     print(piece, end="", flush=True)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from pterun.errors import InvalidArgumentError, InvalidProgramError, NotSupportedError
from pterun.llm.audio import WhisperFrontEnd
from pterun.llm.config import GenerationConfig, Stats, now_ms
from pterun.llm.inputs import Audio, Image, MultimodalInput, RawAudio, make_image_input, make_token_input
from pterun.llm.loop import DecodeLoop, ProgramRunner, constant, make_sampler
from pterun.llm.tokenizer import StreamDecoder, Tokenizer
from pterun.runtime import Program

__all__ = ["MultimodalRunner", "MultimodalInfo", "read_multimodal_info", "Inputs"]

log = logging.getLogger("pterun")

#: what the runner generates from: a list of inputs (text strings, images, audio are wrapped), or one of them
Inputs = Union[str, MultimodalInput, Image, Audio, RawAudio, Sequence[Union[str, MultimodalInput, Image, Audio,
                                                                           RawAudio]]]

TOKEN_EMBEDDING, TEXT_DECODER = "token_embedding", "text_decoder"
VISION_ENCODER, AUDIO_ENCODER = "vision_encoder", "audio_encoder"


@dataclass(frozen=True)
class MultimodalInfo:
    """The program's conventions: its metadata methods and the shapes of its methods' inputs."""

    max_seq_len: int
    max_context_len: int
    vocab_size: int
    bos_id: int | None
    eos_ids: frozenset
    enable_dynamic_shape: bool
    cache_positions: bool  # text_decoder's second input takes [pos .. pos+n-1] rather than [pos]
    embeds_bound: int  # most embeddings one text_decoder call takes
    tokens_bound: int  # most ids one token_embedding call takes
    modalities: tuple  # "vision" and/or "audio"


def read_multimodal_info(program: Program, tokenizer: Tokenizer | None = None) -> MultimodalInfo:
    """Read a multimodal program's conventions, with ExecuTorch's defaults for missing metadata."""
    names = set(program.method_names)
    missing = {TOKEN_EMBEDDING, TEXT_DECODER} - names
    if missing:
        raise InvalidProgramError(f"a multimodal program needs 'token_embedding' and 'text_decoder' methods; this one "
                                  f"lacks {sorted(missing)} (it has {sorted(names)})")
    dec = program.metadata(TEXT_DECODER)
    if dec.num_inputs() != 2:
        raise InvalidProgramError(f"'text_decoder' takes {dec.num_inputs()} inputs; it must take (embeddings, "
                                  "positions) and keep its KV cache")
    emb_in, pos_in = dec.input_tensor_meta(0), dec.input_tensor_meta(1)
    if len(emb_in.sizes()) != 3:
        raise InvalidProgramError(f"'text_decoder' input 0 must be embeddings [1, n, dim], got {emb_in}")
    tok_in = program.metadata(TOKEN_EMBEDDING).input_tensor_meta(0)
    if len(tok_in.sizes()) != 2 or tok_in.numpy_dtype() != np.int64:
        raise InvalidProgramError(f"'token_embedding' input 0 must be int64 ids [1, n], got {tok_in}")
    max_seq = constant(program, "get_max_seq_len")
    if max_seq is None:
        max_seq = emb_in.sizes()[1] + 1 if emb_in.is_dynamic() else 128
        log.warning("program has no get_max_seq_len method; using %d", max_seq)
    ctx = constant(program, "get_max_context_len")
    eos = constant(program, "get_eos_ids")
    if eos is None:  # optimum-executorch records one id as get_eos_id
        one = constant(program, "get_eos_id")
        eos = [one] if one is not None else []
    if not eos and tokenizer is not None and tokenizer.eos_id is not None:
        eos = [tokenizer.eos_id]
    bos = constant(program, "get_bos_id")
    if bos is None and tokenizer is not None:
        bos = tokenizer.bos_id
    vocab = constant(program, "get_vocab_size")
    dyn = constant(program, "enable_dynamic_shape")
    return MultimodalInfo(
        max_seq_len=int(max_seq), max_context_len=int(max_seq if ctx is None else ctx),
        vocab_size=int(vocab) if vocab is not None else (tokenizer.vocab_size if tokenizer else -1),
        bos_id=None if bos is None else int(bos), eos_ids=frozenset(int(e) for e in eos),
        enable_dynamic_shape=bool(dyn) if dyn is not None else False,
        cache_positions=int(np.prod(pos_in.sizes())) > 1,
        embeds_bound=int(emb_in.sizes()[1]) if emb_in.is_dynamic() else 1 << 62,
        tokens_bound=int(tok_in.sizes()[1]) if tok_in.is_dynamic() else 1 << 62,
        modalities=tuple(m for m, name in (("vision", VISION_ENCODER), ("audio", AUDIO_ENCODER)) if name in names))


class MultimodalRunner(ProgramRunner, DecodeLoop):
    """Generate text from text, image and audio inputs; the calls of ExecuTorch's ``MultimodalRunner``.

    Args:
        model_path: the multimodal ``.pte``.
        tokenizer_path: its tokenizer (``tokenizer.json``, ``tekken.json``, tiktoken, SentencePiece).
        data_path: external weights (``.ptd``), or a list of them.
        preprocessor_path: a preprocessor ``.pte`` (waveform -> features) that turns :class:`RawAudio` inputs into
            the audio encoder's features; without one, an encoder of ``[chunks, n_mels, frames]`` features gets
            Whisper's log-mel computed in NumPy (:class:`~pterun.llm.audio.WhisperFrontEnd`), any other encoder
            the samples as they are.
        runtime: the :class:`pterun.Runtime` that loads the programs.
    """

    def _setup(self, program, tokenizer: Tokenizer, preprocessor, name: str, load_start: int) -> None:
        self.stats = Stats()
        self.stats.model_load_start_ms = load_start
        self.program, self.tokenizer, self.model_path = program, tokenizer, name
        self.info = read_multimodal_info(program, tokenizer)
        self._methods = {n: program.load_method(n).execute for n in
                         (TOKEN_EMBEDDING, TEXT_DECODER, VISION_ENCODER, AUDIO_ENCODER) if n in program.method_names}
        self._preprocess = preprocessor.load_method("forward").execute if preprocessor is not None else None
        self._pre_meta = preprocessor.metadata("forward").input_tensor_meta(0) if preprocessor is not None else None
        self._pos = 0
        self._stop = False
        self._tok1 = np.zeros((1, 1), np.int64)
        self._pos1 = np.zeros((1,), np.int64)
        self.stats.model_load_end_ms = now_ms()

    # -- ExecuTorch's API -------------------------------------------------------------------------------------
    def generate(self, inputs: Inputs, config: GenerationConfig | None = None,
                 token_callback: Callable[[str], None] | None = None,
                 stats_callback: Callable[[Stats], None] | None = None) -> None:
        """Generate from ``inputs`` (a list of :class:`MultimodalInput`, or a plain prompt string);
        ``token_callback`` gets each piece of text (the last text input first when ``config.echo``),
        ``stats_callback`` gets :attr:`stats` once at the end. Without a ``token_callback`` the tokens are not
        decoded into text at all (nobody reads it)."""
        config = config or GenerationConfig()
        if token_callback is None:
            for _ in self._timed(self._tokens(_as_inputs(inputs), config, None, [])):
                pass
        else:
            for piece in self._pieces(inputs, config, None):
                token_callback(piece)
        if stats_callback is not None:
            stats_callback(self.stats)

    def generate_text(self, inputs: Inputs, config: GenerationConfig | None = None) -> str:
        """Generate and return the whole text (what ``generate`` would pass to its callback, joined)."""
        return "".join(self._pieces(inputs, config or GenerationConfig(), None))

    def generate_hf(self, inputs: Mapping | list, config: GenerationConfig | None = None,
                    image_token_id: int | None = None,
                    token_callback: Callable[[str], None] | None = None,
                    stats_callback: Callable[[Stats], None] | None = None) -> None:
        """Generate from a HuggingFace processor's output (``input_ids`` and optional ``pixel_values``, as NumPy
        arrays: ``return_tensors="np"``), or from a list of inputs. One run of ``image_token_id`` in ``input_ids``
        marks where the image goes, as in ExecuTorch."""
        self.generate(hf_to_inputs(inputs, image_token_id), config, token_callback, stats_callback)

    def generate_text_hf(self, inputs: Mapping | list, config: GenerationConfig | None = None,
                         image_token_id: int | None = None) -> str:
        return self.generate_text(hf_to_inputs(inputs, image_token_id), config)

    def prefill(self, inputs: Inputs, config: GenerationConfig | None = None) -> None:
        """Run ``inputs`` into the KV cache without generating (to rebuild a conversation, say). BOS/EOS tokens are
        added only as ``config.num_bos``/``num_eos`` say (none by default, as in ExecuTorch)."""
        cfg = config or GenerationConfig()
        self._stop = False
        self._prefill(_as_inputs(inputs), cfg.num_bos, cfg.num_eos)

    def reset(self) -> None:
        """Forget the conversation: the next input starts at position 0. Stats are cleared too."""
        self.stats.reset()
        self._pos = 0

    def get_vocab_size(self) -> int:
        return self.info.vocab_size

    # -- pterun's additions -----------------------------------------------------------------------------------
    def stream(self, inputs: Inputs, config: GenerationConfig | None = None, *,
               rng: np.random.Generator | None = None, **options: Any) -> Iterator[str]:
        """Yield the generated text piece by piece (never a broken character). ``options`` override fields of
        ``config`` (``max_new_tokens=``, ``temperature=``, ``top_p=``, ``seed=`` ...); without a config nothing
        is echoed and a text first input gets one BOS when the model has one."""
        for piece in self._pieces(inputs, self._config(config, options), rng):
            if piece:
                yield piece

    def stream_ids(self, inputs: Inputs, config: GenerationConfig | None = None, *,
                   rng: np.random.Generator | None = None, **options: Any) -> Iterator[int]:
        """Like :meth:`stream`, but yield the generated token ids (an EOS id, when reached, is the last)."""
        cfg = self._config(config, options)
        yield from self._timed(self._tokens(_as_inputs(inputs), cfg, rng, []))

    @property
    def pos(self) -> int:
        """Positions of the context in use (the next input starts here)."""
        return self._pos

    def __repr__(self) -> str:
        return (f"<MultimodalRunner model={os.path.basename(self.model_path)!r} "
                f"modalities={list(self.info.modalities)} max_context_len={self.info.max_context_len} "
                f"pos={self._pos}>")

    # -- the work ---------------------------------------------------------------------------------------------
    def _pieces(self, inputs, config: GenerationConfig, rng) -> Iterator[str]:
        items = _as_inputs(inputs)
        context: list[int] = []
        if config.echo and items[-1].is_text():
            yield items[-1].get_text()
        decoder = None
        for tok in self._timed(self._tokens(items, config, rng, context)):
            if decoder is None:  # the last prompt ids are known once prefill has encoded them
                decoder = StreamDecoder(self.tokenizer, context)
            yield decoder.push(tok)
        tail = decoder.flush() if decoder is not None else ""
        if tail:
            yield tail

    def _tokens(self, items: list[MultimodalInput], config: GenerationConfig, rng, context: list) -> Iterator[int]:
        st = self.stats
        st.reset()
        st.inference_start_ms = now_ms()
        self._t0 = time.perf_counter()
        self._stop = False
        start = self._pos
        bos = config.num_bos if start == 0 else 0
        eos = config.num_eos if start == 0 else 0
        logits = self._prefill(items, bos, eos, context)
        st.num_prompt_tokens = self._pos - start
        max_new = config.resolve_max_new_tokens(self.info.max_context_len, self._pos)
        if max_new <= 0:
            raise InvalidArgumentError(f"no tokens may be generated: {config!r} leaves {max_new} of the "
                                       f"{self.info.max_context_len}-position context after {self._pos} positions")
        sampler = make_sampler(config, rng)
        tok = self._sample(sampler, logits)
        yield tok
        yield from self._decode(tok, max_new - 1, sampler)

    def _prefill(self, items: list[MultimodalInput], bos: int, eos: int, context: list | None = None) -> np.ndarray:
        """Each input through its encoder and the decoder, in order; the logits of the last position."""
        if not items:
            raise InvalidArgumentError("the inputs are empty")
        logits = None
        for i, item in enumerate(items):
            first_text = i == 0 and self._pos == 0 and item.is_text()
            embeds = self._embed(item, bos if first_text else 0, eos if first_text else 0, context)
            logits = self._decode_embeddings(embeds, item.kind)
        return logits

    def _encode_text(self, item: MultimodalInput, bos: int, eos: int) -> list[int]:
        if item.is_tokens():
            return item.get_tokens()
        ids = self.tokenizer.encode(item.get_text())
        b = self.info.bos_id if self.info.bos_id is not None else self.tokenizer.bos_id
        e = self.tokenizer.eos_id if self.tokenizer.eos_id is not None else min(self.info.eos_ids, default=None)
        if bos > 0 and b is not None:
            ids = [b] * bos + ids
        if eos > 0 and e is not None:
            ids = ids + [e] * eos
        return ids

    def _embed(self, item: MultimodalInput, bos: int, eos: int, context: list | None) -> np.ndarray:
        if item.is_text() or item.is_tokens():
            ids = self._encode_text(item, bos, eos)
            if not ids:
                raise InvalidArgumentError(f"{item!r} encodes to no tokens")
            if context is not None:
                context[:] = ids[-4:]
            chunk = self.info.tokens_bound
            parts = [self._run(TOKEN_EMBEDDING, [np.array([ids[j:j + chunk]], np.int64)])
                     for j in range(0, len(ids), chunk)]
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)
        if item.is_image():
            return self._encoder_output(VISION_ENCODER, [self._image_tensor(item.get_image())], "an image")
        if item.is_audio():
            return self._encoder_output(AUDIO_ENCODER, [self._audio_tensor(item.get_audio())], "audio")
        return self._encoder_output(AUDIO_ENCODER, [self._raw_audio_tensor(item.get_raw_audio())], "raw audio")

    def _need(self, method: str, what: str) -> None:
        if method not in self._methods:
            raise InvalidArgumentError(f"the program has no '{method}' method, so it takes no {what} "
                                       f"(its methods: {sorted(self.program.method_names)})")

    def _image_tensor(self, image: Image) -> np.ndarray:
        self._need(VISION_ENCODER, "images")
        meta = self.program.metadata(VISION_ENCODER).input_tensor_meta(0)
        want, sizes = np.dtype(meta.numpy_dtype()), list(meta.sizes())
        if want == np.uint8 and not image.is_uint8():
            raise InvalidArgumentError("the vision encoder takes uint8 pixels, but this image holds float data")
        if want != np.uint8 and not image.is_float():
            if want.kind not in "fV":
                raise NotSupportedError(f"the vision encoder takes {want} input, which no image converts to")
            raise InvalidArgumentError(f"the vision encoder takes {want} pixels, but this image holds uint8 data "
                                       "(give it float pixels, normalised as the model expects)")
        x = image.data[None] if len(sizes) == 4 else image.data
        if not meta.is_dynamic() and list(x.shape) != sizes:
            raise InvalidArgumentError(f"the vision encoder takes images of {sizes[-1]}x{sizes[-2]} pixels with "
                                       f"{sizes[-3]} channels; this one is {image.width}x{image.height} with "
                                       f"{image.channels} (resize it first)")
        return x.astype(want, copy=False)

    def _audio_tensor(self, audio: Audio) -> np.ndarray:
        self._need(AUDIO_ENCODER, "audio")
        want = np.dtype(self.program.metadata(AUDIO_ENCODER).input_tensor_meta(0).numpy_dtype())
        x = audio.data
        if x.dtype != want:
            if not (audio.is_float() and want.kind in "fV" and want.itemsize == 2):
                raise NotSupportedError(f"the audio encoder takes {want} input, but this audio holds {x.dtype}")
            x = x.astype(want)  # float32 features to a bfloat16/float16 encoder, as ExecuTorch converts them
        return x

    def _raw_audio_tensor(self, raw: RawAudio) -> np.ndarray:
        self._need(AUDIO_ENCODER, "raw audio")
        x = raw.data.astype(np.float32) if raw.is_uint8() else raw.data
        if self._preprocess is not None:
            rank = len(self._pre_meta.sizes())
            if raw.batch_size != 1:
                raise InvalidArgumentError(f"raw audio for a preprocessor must have batch size 1, got {raw.batch_size}")
            wave = x[0].mean(axis=0, dtype=np.float32) if rank == 1 else x[0]
            t = time.perf_counter()
            feats = np.asarray(self._preprocess([np.ascontiguousarray(wave.reshape(-1) if rank == 1 else wave)])[0])
            self.stats.seconds["model"] += time.perf_counter() - t
            return self._audio_tensor(Audio.from_array(feats.reshape((1,) * (3 - feats.ndim) + feats.shape)))
        meta = self.program.metadata(AUDIO_ENCODER).input_tensor_meta(0)
        sizes = list(meta.sizes())
        if len(sizes) == 3 and np.dtype(meta.numpy_dtype()).kind in "fV" and raw.batch_size == 1:
            # the encoder takes features, and no preprocessor was given: Whisper's log-mel in NumPy, in the
            # encoder's window (stacked windows when its first axis is a dynamic chunk count, as Voxtral's)
            front = WhisperFrontEnd.for_encoder(sizes)
            front.stack_output = meta.is_dynamic() and sizes[0] > 1
            feats = front(x[0].mean(axis=0, dtype=np.float32))
            return self._audio_tensor(Audio.from_array(feats))
        rank = len(sizes)
        return np.ascontiguousarray(x.reshape(x.shape[-rank:]) if rank < 3 else x)

    def _encoder_output(self, method: str, args: list, what: str) -> np.ndarray:
        out = self._run(method, args)
        if out.ndim == 2:  # [n, dim]: one sequence
            out = out[None]
        if out.ndim != 3 or out.shape[1] == 0:
            raise InvalidProgramError(f"'{method}' returned {what} embeddings of shape {list(out.shape)}; the text "
                                      "decoder needs [1, n, dim]")
        if out.shape[0] != 1:  # several windows (Voxtral's 30 s chunks): one sequence, in order
            out = out.reshape(1, -1, out.shape[2])
        return out

    def _run(self, method: str, args: list) -> np.ndarray:
        st = self.stats
        start = time.perf_counter()
        if not st.model_execution_start_ms:
            st.model_execution_start_ms = now_ms()
        out = self._methods[method](args)[0]
        st.seconds["model"] += time.perf_counter() - start
        st.aggregate_model_execution_time_ms = int(st.seconds["model"] * 1000)
        st.model_execution_end_ms = now_ms()
        return out

    def _decode_embeddings(self, embeds: np.ndarray, kind: str) -> np.ndarray:
        n = embeds.shape[1]
        room = self.info.max_context_len - self._pos
        if n >= room:
            raise InvalidArgumentError(f"the {kind} input fills {n} positions but only {room} of the "
                                       f"{self.info.max_context_len}-position context are left (reset() frees them)")
        logits = None
        chunk = self.info.embeds_bound
        for j in range(0, n, chunk):
            part = embeds[:, j:j + chunk]
            m = part.shape[1]
            pos = (np.arange(self._pos, self._pos + m, dtype=np.int64) if self.info.cache_positions
                   else np.array([self._pos], np.int64))
            logits = self._run(TEXT_DECODER, [np.ascontiguousarray(part), pos])
            self._pos += m
        return logits.reshape(-1, logits.shape[-1])[-1]

    def _step(self, tok: int) -> np.ndarray:
        """One token through ``token_embedding`` and ``text_decoder`` at the next position; its logits."""
        self._tok1[0, 0] = tok
        emb = self._run(TOKEN_EMBEDDING, [self._tok1])
        self._pos1[0] = self._pos
        self._pos += 1
        out = self._run(TEXT_DECODER, [emb, self._pos1])
        return out.reshape(-1, out.shape[-1])[-1]


def _as_inputs(inputs: Inputs) -> list[MultimodalInput]:
    if isinstance(inputs, (str, MultimodalInput, Image, Audio, RawAudio)):
        inputs = [inputs]
    if not isinstance(inputs, Iterable):
        raise InvalidArgumentError(f"inputs must be a list of MultimodalInput, got {type(inputs).__name__}")
    out = [i if isinstance(i, MultimodalInput) else MultimodalInput(i) for i in inputs]
    if not out:
        raise InvalidArgumentError("the inputs are empty")
    return out


def hf_to_inputs(inputs: Mapping | list, image_token_id: int | None = None) -> list[MultimodalInput]:
    """A HuggingFace processor's output (``input_ids``, optional ``pixel_values``) as runner inputs: the ids around
    the one run of ``image_token_id``, and the image in its place. A list of inputs passes through."""
    if isinstance(inputs, list):
        return _as_inputs(inputs)
    if not isinstance(inputs, Mapping) or "input_ids" not in inputs:
        raise InvalidArgumentError("HF inputs must be a mapping with 'input_ids' (and optionally 'pixel_values'), or "
                                   "a list of MultimodalInput")
    ids = np.asarray(inputs["input_ids"])
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1:
        raise InvalidArgumentError(f"'input_ids' must be [L] or [1, L], got shape {list(ids.shape)}")
    ids = ids.astype(np.int64).tolist()
    if "pixel_values" not in inputs:
        if image_token_id is not None and image_token_id in ids:
            raise InvalidArgumentError("found image token(s) in 'input_ids' but no 'pixel_values'")
        return [make_token_input(ids)]
    if image_token_id is None:
        raise InvalidArgumentError("'pixel_values' given but no image_token_id")
    pv = np.asarray(inputs["pixel_values"])
    if pv.ndim == 4 and pv.shape[0] != 1 or pv.ndim not in (3, 4):
        raise InvalidArgumentError(f"only one image is supported: 'pixel_values' must be [C, H, W] or [1, C, H, W], "
                                   f"got shape {list(pv.shape)}")
    where = [i for i, t in enumerate(ids) if t == image_token_id]
    if not where:
        raise InvalidArgumentError("'pixel_values' given but no image token in 'input_ids'")
    first, last = where[0], where[-1]
    if last - first + 1 != len(where):
        raise InvalidArgumentError("the image tokens in 'input_ids' must form one contiguous run (one image)")
    out = [make_token_input(ids[:first])] if first > 0 else []
    out.append(make_image_input(pv, layout="CHW" if pv.shape[-3] in (3, 4) else None))
    if last + 1 < len(ids):
        out.append(make_token_input(ids[last + 1:]))
    return out
