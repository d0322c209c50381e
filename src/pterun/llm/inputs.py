"""The inputs of :class:`~pterun.llm.MultimodalRunner`: ExecuTorch's ``Image``, ``Audio``, ``RawAudio`` and
``MultimodalInput`` with its ``make_*_input`` helpers, over NumPy arrays instead of torch tensors.

An image is raw pixels: a NumPy ``uint8`` or float array, ``HWC`` (as image libraries return it) or ``CHW``, with
3 (RGB) or 4 (RGBA) channels, optionally with a leading batch dimension of 1. pterun keeps it ``CHW``, as
ExecuTorch's ``Image`` does. Audio is ``[batch, n_bins, n_frames]`` features (a mel spectrogram), raw audio
``[batch, n_channels, n_samples]`` samples. Example::

    >>> import numpy as np
    >>> from pterun.llm import make_image_input, make_text_input, make_audio_input
    >>> pixels = np.zeros((32, 48, 3), np.uint8)                  # H, W, C
    >>> image = make_image_input(pixels)
    >>> image.get_image()
    <Image height=32 width=48 channels=3 dtype=uint8>
    >>> [make_text_input("USER: "), image, make_text_input(" what is this? ASSISTANT:")][2].is_text()
    True
    >>> make_audio_input(np.zeros((1, 128, 3000), np.float32)).get_audio()
    <Audio batch_size=1 n_bins=128 n_frames=3000 dtype=float32>
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import numpy as np

from pterun.errors import InvalidArgumentError

__all__ = ["Image", "Audio", "RawAudio", "MultimodalInput", "make_text_input", "make_token_input",
           "make_image_input", "make_audio_input", "make_raw_audio_input", "ArrayLike"]

#: values the inputs take: a NumPy array, or a (nested) sequence of numbers
ArrayLike = Union[np.ndarray, Sequence]


def _data(data, what: str) -> np.ndarray:
    """uint8 stays uint8; any float becomes float32 (ExecuTorch's two kinds)."""
    arr = np.asarray(data)
    if arr.dtype == np.uint8:
        return np.ascontiguousarray(arr)
    if arr.dtype.kind == "f":
        return np.ascontiguousarray(arr, np.float32)
    if arr.dtype.kind in "iu" and not isinstance(data, np.ndarray):  # a list of ints is uint8 data, as in ExecuTorch
        if arr.size and (arr.min() < 0 or arr.max() > 255):
            raise InvalidArgumentError(f"{what} data given as integers must lie in 0..255, got "
                                       f"{arr.min()}..{arr.max()}")
        return arr.astype(np.uint8)
    raise InvalidArgumentError(f"{what} data must be uint8 or float, got {arr.dtype}")


class Image:
    """Pixels in ``CHW`` order, ``uint8`` or ``float32``: ``Image(data, width, height, channels)`` as in ExecuTorch
    (``data`` a flat sequence or array in CHW order), or :meth:`from_array` for a shaped array."""

    def __init__(self, data: ArrayLike = (), width: int = 0, height: int = 0, channels: int = 0):
        arr = _data(data, "image") if len(data) else np.zeros(0, np.uint8)
        if arr.size != width * height * channels:
            raise InvalidArgumentError(f"image data has {arr.size} values; width {width} x height {height} x "
                                       f"channels {channels} needs {width * height * channels}")
        self._data = arr.reshape(channels, height, width)
        self._data.setflags(write=False)
        self.width, self.height, self.channels = int(width), int(height), int(channels)

    @classmethod
    def from_array(cls, pixels: ArrayLike, layout: str | None = None) -> Image:
        """An image from a shaped array: ``HWC``, ``CHW``, ``1HWC`` or ``1CHW``. ``layout`` ("HWC" or "CHW")
        says which; without it, a last axis of 3 or 4 means HWC, else a first axis of 3 or 4 means CHW."""
        arr = _data(pixels, "image")
        if arr.ndim == 4:
            if arr.shape[0] != 1:
                raise InvalidArgumentError(f"a 4-D image must have batch size 1, got shape {list(arr.shape)}")
            arr = arr[0]
        if arr.ndim != 3:
            raise InvalidArgumentError(f"an image must be 3-D (H, W, C) or (C, H, W), or 4-D with batch 1; got shape "
                                       f"{list(arr.shape)}")
        if layout is None:
            layout = "HWC" if arr.shape[2] in (3, 4) else "CHW" if arr.shape[0] in (3, 4) else None
        if layout not in ("HWC", "CHW"):
            raise InvalidArgumentError(f"an image must have 3 (RGB) or 4 (RGBA) channels, first or last; got shape "
                                       f"{list(arr.shape)}" if layout is None else f"layout must be 'HWC' or 'CHW', "
                                       f"got {layout!r}")
        chw = arr.transpose(2, 0, 1) if layout == "HWC" else arr
        c, h, w = chw.shape
        if c not in (3, 4):
            raise InvalidArgumentError(f"an image must have 3 (RGB) or 4 (RGBA) channels, got {c}")
        return cls(np.ascontiguousarray(chw).reshape(-1), w, h, c)

    def is_uint8(self) -> bool:
        return self._data.dtype == np.uint8

    def is_float(self) -> bool:
        return self._data.dtype == np.float32

    @property
    def data(self) -> np.ndarray:
        """The pixels, ``[channels, height, width]`` (read-only)."""
        return self._data

    @property
    def uint8_data(self) -> np.ndarray:
        if not self.is_uint8():
            raise InvalidArgumentError("this image holds float data")
        return self._data.reshape(-1)

    @property
    def float_data(self) -> np.ndarray:
        if not self.is_float():
            raise InvalidArgumentError("this image holds uint8 data")
        return self._data.reshape(-1)

    def __repr__(self) -> str:
        dtype = "uint8" if self.is_uint8() else "float32"
        return f"<Image height={self.height} width={self.width} channels={self.channels} dtype={dtype}>"


class _Shaped:
    _dims: tuple[str, str, str]
    _kind: str

    def __init__(self, data: ArrayLike = (), a: int = 0, b: int = 0, c: int = 0):
        arr = _data(data, self._kind) if len(data) else np.zeros(0, np.float32)
        if arr.size != a * b * c:
            names = " x ".join(f"{n} {v}" for n, v in zip(self._dims, (a, b, c), strict=True))
            raise InvalidArgumentError(f"{self._kind} data has {arr.size} values; {names} needs {a * b * c}")
        self._data = arr.reshape(a, b, c)
        self._data.setflags(write=False)
        for name, value in zip(self._dims, (a, b, c), strict=True):
            setattr(self, name, int(value))

    @classmethod
    def from_array(cls, arr: ArrayLike) -> _Shaped:
        """One from a 3-D array, its sizes in the constructor's order (an instance of the class it is called on)."""
        x = _data(arr, cls._kind)
        if x.ndim != 3:
            raise InvalidArgumentError(f"{cls._kind} must be 3-D ({', '.join(cls._dims)}), got shape {list(x.shape)}")
        return cls(x.reshape(-1), *x.shape)

    @property
    def data(self) -> np.ndarray:
        """The values, 3-D in the order of the constructor's sizes (read-only)."""
        return self._data

    def is_uint8(self) -> bool:
        return self._data.dtype == np.uint8

    def is_float(self) -> bool:
        return self._data.dtype == np.float32

    def __repr__(self) -> str:
        dims = " ".join(f"{n}={getattr(self, n)}" for n in self._dims)
        return f"<{type(self).__name__} {dims} dtype={self._data.dtype}>"


class Audio(_Shaped):
    """Preprocessed audio (a mel spectrogram): ``Audio(data, batch_size, n_bins, n_frames)``, float32 or uint8."""

    _dims = ("batch_size", "n_bins", "n_frames")
    _kind = "audio"


class RawAudio(_Shaped):
    """Raw audio samples: ``RawAudio(data, batch_size, n_channels, n_samples)``, float32 (or uint8)."""

    _dims = ("batch_size", "n_channels", "n_samples")
    _kind = "raw audio"


class MultimodalInput:
    """One input of a multimodal prompt: text, token ids, an :class:`Image`, :class:`Audio` or
    :class:`RawAudio`. ``get_*`` returns None when the input is of another kind, as in ExecuTorch."""

    __slots__ = ("_kind", "_value")

    def __init__(self, value: str | ArrayLike | Image | Audio | RawAudio):
        if isinstance(value, str):
            kind = "text"
        elif isinstance(value, Image):
            kind = "image"
        elif isinstance(value, Audio):
            kind = "audio"
        elif isinstance(value, RawAudio):
            kind = "raw_audio"
        elif isinstance(value, (Sequence, np.ndarray)):
            value = [int(t) for t in np.asarray(value, np.int64).reshape(-1)]
            kind = "tokens"
        else:
            raise InvalidArgumentError(f"a MultimodalInput holds text, token ids, an Image, Audio or RawAudio; got "
                                       f"{type(value).__name__}")
        self._kind, self._value = kind, value

    @property
    def kind(self) -> str:
        """``"text"``, ``"tokens"``, ``"image"``, ``"audio"`` or ``"raw_audio"``."""
        return self._kind

    def is_text(self) -> bool:
        return self._kind == "text"

    def is_tokens(self) -> bool:
        return self._kind == "tokens"

    def is_image(self) -> bool:
        return self._kind == "image"

    def is_audio(self) -> bool:
        return self._kind == "audio"

    def is_raw_audio(self) -> bool:
        return self._kind == "raw_audio"

    def _get(self, kind):
        return self._value if self._kind == kind else None

    def get_text(self) -> str | None:
        return self._get("text")

    def get_tokens(self) -> list[int] | None:
        return self._get("tokens")

    def get_image(self) -> Image | None:
        return self._get("image")

    def get_audio(self) -> Audio | None:
        return self._get("audio")

    def get_raw_audio(self) -> RawAudio | None:
        return self._get("raw_audio")

    def __repr__(self) -> str:
        v = self._value
        shown = repr(v if len(v) <= 40 else v[:37] + "...") if self._kind == "text" else \
            (f"{len(v)} ids" if self._kind == "tokens" else repr(v))
        return f"<MultimodalInput {self._kind} {shown}>"


def make_text_input(text: str) -> MultimodalInput:
    """A text input (encoded by the runner's tokenizer)."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
    return MultimodalInput(text)


def make_token_input(tokens: ArrayLike) -> MultimodalInput:
    """Token ids, fed as they are (no BOS/EOS added)."""
    return MultimodalInput(list(np.asarray(tokens, np.int64).reshape(-1)))


def make_image_input(image: Image | ArrayLike, layout: str | None = None) -> MultimodalInput:
    """An image from raw pixels: an :class:`Image`, or an array ``(H, W, C)``, ``(1, H, W, C)``, ``(C, H, W)`` or
    ``(1, C, H, W)``, uint8 or float (see :meth:`Image.from_array` for ``layout``)."""
    return MultimodalInput(image if isinstance(image, Image) else Image.from_array(image, layout))


def make_audio_input(audio: Audio | ArrayLike) -> MultimodalInput:
    """Preprocessed audio: an :class:`Audio` or an array ``(batch_size, n_bins, n_frames)``, float32 or uint8."""
    return MultimodalInput(audio if isinstance(audio, Audio) else Audio.from_array(audio))


def make_raw_audio_input(audio: RawAudio | ArrayLike) -> MultimodalInput:
    """Raw samples: a :class:`RawAudio` or an array ``(batch_size, n_channels, n_samples)`` (a 1-D waveform is
    taken as one mono channel)."""
    if isinstance(audio, RawAudio):
        return MultimodalInput(audio)
    arr = np.asarray(audio)
    return MultimodalInput(RawAudio.from_array(arr.reshape(1, 1, -1) if arr.ndim == 1 else arr))
