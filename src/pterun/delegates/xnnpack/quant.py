"""Quantization arithmetic as XNNPACK does it: per-tensor int8, per-channel weights, dynamic per-row int8,
4-bit weight unpacking, and requantization with round-half-to-even.

XNNPACK quantizes with ``q = clamp(rint(x * (1/scale)) + zero_point)`` (round half to even, the scale
inverted in float32) and requantizes integer accumulators with ``rint(acc * scale) + zero_point``. Dynamic
(``qdint8``) activations get per-row parameters from the row's min/max (both extended to include 0), exactly
as ``xnn_f32_qd8_asymmetric_quantization_params`` computes them.

Example::

    >>> import numpy as np
    >>> quantize(np.array([0.1, -0.26], np.float32), 0.1, 3, np.int8)
    array([4, 0], dtype=int8)
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32
QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int32): (-(2**31), 2**31 - 1)}


def inverse(scale) -> np.float32 | np.ndarray:
    """1/scale in float32, as XNNPACK precomputes it."""
    return F32(1) / np.asarray(scale, F32)


def fused_range(lo: float, hi: float, scale: float, zero_point: int, dtype) -> tuple[int, int]:
    """A fused output_min/output_max clamp expressed in the quantized domain, within the dtype's range."""
    qmin, qmax = QRANGE[np.dtype(dtype)]
    if math.isfinite(lo):
        qmin = int(min(max(np.rint(F32(lo) * inverse(scale)) + zero_point, qmin), qmax))
    if math.isfinite(hi):
        qmax = int(max(min(np.rint(F32(hi) * inverse(scale)) + zero_point, qmax), qmin))
    return qmin, qmax


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype, qmin: int | None = None,
             qmax: int | None = None) -> np.ndarray:
    """Real float32 values -> quantized integers of ``dtype`` (round half to even, saturating)."""
    lo, hi = QRANGE[np.dtype(dtype)]
    lo = lo if qmin is None else qmin
    hi = hi if qmax is None else qmax
    return requantize(np.asarray(x, F32), inverse(scale), zero_point, lo, hi, dtype)


def requantize(acc: np.ndarray, multiplier, zero_point: int, qmin: int, qmax: int, dtype,
               inplace: bool = False) -> np.ndarray:
    """``clamp(rint(acc * multiplier) + zero_point, qmin, qmax)`` cast to ``dtype``; ``inplace`` reuses ``acc``
    (a float32 temporary the caller owns) as scratch."""
    y = np.multiply(acc, multiplier, out=acc if inplace else None, dtype=F32)
    np.rint(y, out=y)
    y += F32(zero_point)
    np.clip(y, qmin, qmax, out=y)
    return y.astype(dtype)


def dequantize(q: np.ndarray, scale, zero_point) -> np.ndarray:
    """``(q - zero_point) * scale`` in float32; ``scale``/``zero_point`` may broadcast (per channel)."""
    y = q.astype(F32)
    if np.any(zero_point):
        y -= np.asarray(zero_point, F32)
    y *= np.asarray(scale, F32)
    return y


def qd8_params(row_min: np.ndarray, row_max: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (quantize multiplier, zero point, dequantize scale) of XNNPACK's dynamic int8 quantization.

    The range is widened to include 0; multiplier = 255 / (max - min) (1 for an all-zero row); the zero point
    comes from whichever end has the smaller error, clamped and rounded; the GEMM dequantizes with
    1/multiplier.
    """
    rmin = np.minimum(row_min, _ZERO, dtype=F32)
    rmax = np.maximum(row_max, _ZERO, dtype=F32)
    span = rmax - rmin
    span[span == 0] = 255  # an all-zero row gets multiplier 1
    mult = np.divide(_255, span, dtype=F32)
    dmin, dmax = rmin * mult, rmax * mult
    zp = np.where((dmin - 128) + (dmax + 127) > 0, -128 - dmin, 127 - dmax)
    np.rint(np.minimum(np.maximum(zp, -128, out=zp), 127, out=zp), out=zp)  # ufuncs: np.clip is slow on rows
    # the convert kernel quantizes with the multiplier itself (not 1/dq_scale): checked against the
    # reference runtime, where the two differ by an ulp often enough to move values across a rounding edge
    return mult, zp, np.divide(_ONE, mult, dtype=F32)


_ZERO, _ONE, _255 = F32(0), F32(1), F32(255)


def qd8_fake_quantize(x: np.ndarray, num_nonbatch_dims: int = 1) -> np.ndarray:
    """Quantize each row dynamically to int8 and return the dequantized float32 values.

    A row is everything in the last ``num_nonbatch_dims`` dims. The int8 grid is exactly XNNPACK's; carrying
    the dequantized values lets the following GEMM run in float32 (the integer sums are the same numbers).
    """
    x = np.asarray(x, F32)
    k = min(max(num_nonbatch_dims, 1), x.ndim)
    width = 1
    for d in x.shape[x.ndim - k :]:
        width *= d
    if width == 0 or x.size == 0:
        return x.copy()
    rows = x.reshape(-1, width)
    mult, zp, dq = qd8_params(rows.min(axis=1), rows.max(axis=1))
    q = rows * mult[:, None]
    np.rint(q, out=q)
    np.maximum(q, (-128 - zp)[:, None], out=q)  # saturate around the zero point
    np.minimum(q, (127 - zp)[:, None], out=q)
    q *= dq[:, None]
    return q.reshape(x.shape)


def unpack_int4(packed: np.ndarray, rows: int, cols: int, zero_point: int = 8) -> np.ndarray:
    """4-bit weights (low nibble = even element, rows padded to whole bytes) -> int8 values minus zero point."""
    b = packed.reshape(rows, (cols + 1) // 2)
    out = np.empty((rows, b.shape[1] * 2), np.int8)
    out[:, 0::2] = b & 0x0F
    out[:, 1::2] = b >> 4
    return (out[:, :cols] - np.int8(zero_point)).astype(np.int8)


def channel_scales(scale, ndim: int, channel_dim: int) -> np.ndarray:
    """Per-channel scales shaped to broadcast along ``channel_dim`` of an ``ndim``-D tensor."""
    shape = [1] * ndim
    shape[channel_dim] = -1
    return np.asarray(scale, F32).reshape(shape)
