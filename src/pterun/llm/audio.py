"""Audio for the speech runners: WAV files with the standard library, resampling, and Whisper's log-mel front end.

:func:`read_wav` reads PCM WAV (8/16/24/32-bit, through :mod:`wave`) and IEEE-float WAV, scaling integers the
way ExecuTorch's C++ ``load_wav_audio_data`` does (sample / the type's largest positive value), and averages the
channels to mono. :class:`WhisperFrontEnd` computes the log-mel spectrogram of ExecuTorch's
``executorch.extension.audio.mel_spectrogram`` preprocessor (HuggingFace's ``WhisperFeatureExtractor``) in
NumPy, for programs exported without a preprocessor ``.pte``. Example::

    >>> import numpy as np
    >>> from pterun.llm.audio import WhisperFrontEnd, resample
    >>> wave_16k = np.sin(np.linspace(0, 2000 * np.pi, 16000)).astype(np.float32)   # 1 s at 16 kHz
    >>> WhisperFrontEnd(n_mels=80, chunk_length=10)(wave_16k).shape                   # one 10 s window
    (1, 80, 1000)
    >>> resample(wave_16k, 16000, 8000).shape
    (8000,)
"""

from __future__ import annotations

import logging
import os
import struct
import wave
from functools import lru_cache

import numpy as np

from pterun.errors import InvalidArgumentError

__all__ = ["read_wav", "resample", "load_audio", "WhisperFrontEnd", "mel_filters"]

log = logging.getLogger("pterun")

_WAVE_FORMAT_PCM, _WAVE_FORMAT_FLOAT, _WAVE_FORMAT_EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


def read_wav(path: str | os.PathLike, *, mono: bool = True) -> tuple[np.ndarray, int]:
    """The samples of a WAV file as float32 in [-1, 1], and its sample rate.

    ``mono=True`` averages the channels (shape ``[n]``); ``mono=False`` keeps them (``[n, channels]``).
    Integer PCM is divided by the type's largest positive value (16-bit: 32767), as ExecuTorch's runner does,
    so the same file gives the same floats. Raises :class:`~pterun.errors.InvalidArgumentError` for a file that
    is not a WAV pterun can read, saying why.
    """
    try:
        with wave.open(os.fspath(path), "rb") as w:
            channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
        samples = _pcm_to_float(raw, width, channels)
    except wave.Error as e:
        if "unknown format" not in str(e):
            raise InvalidArgumentError(f"{path}: not a WAV file pterun can read ({e})") from None
        samples, rate = _read_float_wav(path)  # the stdlib reads integer PCM only
    except EOFError:
        raise InvalidArgumentError(f"{path}: the WAV file is truncated") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"no such audio file: {os.fspath(path)!r}") from None
    if samples.size == 0:
        raise InvalidArgumentError(f"{path}: the WAV file has no samples")
    if mono:
        samples = samples.mean(axis=1, dtype=np.float32) if samples.shape[1] > 1 else samples[:, 0]
    return np.ascontiguousarray(samples, np.float32), int(rate)


def _pcm_to_float(raw: bytes, width: int, channels: int) -> np.ndarray:
    if width == 1:  # 8-bit WAV is unsigned
        x = (np.frombuffer(raw, np.uint8).astype(np.float64) - 128.0) / 127.0
    elif width in (2, 4):
        dt = np.dtype("<i2" if width == 2 else "<i4")
        x = np.frombuffer(raw, dt).astype(np.float64) * np.float32(1.0 / np.iinfo(dt).max)
    elif width == 3:
        b = np.frombuffer(raw, np.uint8)
        b = b[: b.size - b.size % 3].reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = np.where(v >= 1 << 23, v - (1 << 24), v).astype(np.float64) / ((1 << 23) - 1)
    else:
        raise InvalidArgumentError(f"WAV samples of {width} bytes are not supported (1, 2, 3 or 4)")
    x = x.astype(np.float32)
    return x[: x.size - x.size % channels].reshape(-1, channels)


def _read_float_wav(path) -> tuple[np.ndarray, int]:
    """IEEE-float WAV (format 3, or extensible with a float subformat), read chunk by chunk."""
    data = open(path, "rb").read()
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidArgumentError(f"{path}: not a RIFF/WAVE file")
    fmt = body = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        chunk = data[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            fmt = chunk
        elif cid == b"data":
            body = chunk
        pos += 8 + size + (size & 1)
    if fmt is None or len(fmt) < 16 or body is None:
        raise InvalidArgumentError(f"{path}: the WAV file has no 'fmt ' or 'data' chunk")
    tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _WAVE_FORMAT_EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack_from("<H", fmt, 24)[0]  # the subformat GUID starts with the format code
    if tag != _WAVE_FORMAT_FLOAT or bits not in (32, 64) or channels < 1:
        raise InvalidArgumentError(f"{path}: WAV format {tag:#06x} with {bits}-bit samples is not supported "
                                   "(PCM 8/16/24/32-bit or IEEE float 32/64-bit)")
    x = np.frombuffer(body[: len(body) - len(body) % (bits // 8)], "<f4" if bits == 32 else "<f8")
    x = x.astype(np.float32)
    return x[: x.size - x.size % channels].reshape(-1, channels), rate


def resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Band-limited resampling of a 1-D signal from ``rate`` to ``target`` Hz (FFT method: the spectrum is cut or
    zero-padded), float32 out."""
    x = np.asarray(samples, np.float64)
    if rate == target:
        return x.astype(np.float32)
    if rate <= 0 or target <= 0:
        raise InvalidArgumentError(f"sample rates must be positive, got {rate} and {target}")
    n_out = int(round(x.size * target / rate))
    spec = np.fft.rfft(x)
    keep = min(spec.size, n_out // 2 + 1)
    out_spec = np.zeros(n_out // 2 + 1, np.complex128)
    out_spec[:keep] = spec[:keep]
    return (np.fft.irfft(out_spec, n_out) * (n_out / x.size)).astype(np.float32)


def load_audio(path: str | os.PathLike, sampling_rate: int = 16000) -> np.ndarray:
    """A WAV file as mono float32 at ``sampling_rate`` (resampled, with a log message, when the file differs)."""
    samples, rate = read_wav(path)
    if rate != sampling_rate:
        log.info("%s: resampling %d Hz to %d Hz", path, rate, sampling_rate)
        samples = resample(samples, rate, sampling_rate)
    return samples


@lru_cache(maxsize=8)
def mel_filters(sampling_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """Slaney-scale, Slaney-normalised triangular mel filters ``[n_mels, n_fft // 2 + 1]`` (librosa's default,
    which Whisper uses), built in the float32 arithmetic of ExecuTorch's preprocessor."""
    f32 = np.float32
    fftfreqs = (np.arange(n_fft // 2 + 1, dtype=f32) * f32(sampling_rate / n_fft)).astype(f32)
    mels = np.linspace(0.0, 45.245640471924965, n_mels + 2, dtype=f32)
    f_sp = f32(200.0 / 3)
    freqs = (f_sp * mels).astype(f32)
    min_log_mel = f32(1000.0 / (200.0 / 3))
    logstep = f32(np.log(f32(6.4)) / f32(27.0))
    log_t = mels >= min_log_mel
    freqs[log_t] = f32(1000.0) * np.exp(logstep * (mels[log_t] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(f32(0.0), np.minimum(lower, upper))
    enorm = f32(2.0) / (freqs[2:n_mels + 2] - freqs[:n_mels])
    weights = (weights * enorm[:, None]).astype(f32)
    weights.setflags(write=False)  # cached and shared: nobody may change it
    return weights


class WhisperFrontEnd:
    """Whisper's log-mel spectrogram, as ExecuTorch's ``mel_spectrogram`` preprocessor computes it.

    The waveform (mono, ``sampling_rate`` Hz) is zero-padded to whole ``chunk_length``-second windows, framed
    with a periodic Hann window (``n_fft``, ``hop_length``, centred with reflection), turned into power, mel
    filtered, ``log10`` (floor 1e-10), clipped to 8 below the maximum and scaled ``(x + 4) / 4``. The output is
    ``[1, n_mels, frames]``, or ``[windows, n_mels, frames_per_window]`` with ``stack_output=True`` (Voxtral's
    layout).
    """

    def __init__(self, n_mels: int = 80, sampling_rate: int = 16000, hop_length: int = 160, chunk_length: int = 30,
                 n_fft: int = 400, padding_value: float = 0.0, stack_output: bool = False):
        self.n_mels, self.sampling_rate, self.hop_length, self.n_fft = n_mels, sampling_rate, hop_length, n_fft
        self.chunk_length, self.padding_value, self.stack_output = chunk_length, padding_value, stack_output
        self.n_samples = chunk_length * sampling_rate
        self.frames_per_chunk = self.n_samples // hop_length

    @classmethod
    def for_encoder(cls, shape, sampling_rate: int = 16000, hop_length: int = 160) -> WhisperFrontEnd:
        """The front end whose windows fit an encoder input of ``shape`` ``[batch, n_mels, frames]``."""
        if len(shape) != 3:
            raise InvalidArgumentError(f"an audio encoder's features are [batch, n_mels, frames], got {list(shape)}")
        frames = int(shape[2])
        chunk = frames * hop_length / sampling_rate
        if chunk != int(chunk):
            raise InvalidArgumentError(f"{frames} frames of {hop_length} samples are not whole seconds at "
                                       f"{sampling_rate} Hz; give the program's preprocessor .pte instead")
        return cls(n_mels=int(shape[1]), sampling_rate=sampling_rate, hop_length=hop_length,
                   chunk_length=int(chunk), stack_output=int(shape[0]) != 1)

    def __call__(self, waveform: np.ndarray) -> np.ndarray:
        x = np.asarray(waveform, np.float32).reshape(-1)
        if x.size == 0:
            raise InvalidArgumentError("the waveform is empty")
        n_chunks = (x.size - 1) // self.n_samples + 1
        x = np.concatenate([x, np.full(n_chunks * self.n_samples - x.size, self.padding_value, np.float32)])
        half = self.n_fft // 2
        padded = np.pad(x, half, mode="reflect")
        n_frames = 1 + (padded.size - self.n_fft) // self.hop_length
        frames = np.lib.stride_tricks.as_strided(padded, (n_frames, self.n_fft),
                                                 (padded.strides[0] * self.hop_length, padded.strides[0]))
        window = (0.5 * (1 - np.cos(2 * np.pi * np.arange(self.n_fft, dtype=np.float32) / self.n_fft)))
        spec = np.fft.rfft(frames * window.astype(np.float32), axis=1)[:-1]  # the last frame is dropped
        power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
        mel = mel_filters(self.sampling_rate, self.n_fft, self.n_mels) @ power.T
        log_spec = np.log10(np.maximum(mel, np.float32(1e-10)))
        log_spec = np.maximum(log_spec, log_spec.max() - np.float32(8.0))
        log_spec = ((log_spec + np.float32(4.0)) / np.float32(4.0)).astype(np.float32)
        if self.stack_output:
            return np.ascontiguousarray(log_spec.reshape(self.n_mels, -1, self.frames_per_chunk).transpose(1, 0, 2))
        return log_spec[None]
