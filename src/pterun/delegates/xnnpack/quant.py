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

from pterun.numerics import along_axis, inverse_scale

F32 = np.float32
QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255), np.dtype(np.int32): (-(2**31), 2**31 - 1)}


#: 1/scale in float32, as XNNPACK precomputes it (the same rule as ExecuTorch's quantize kernels).
inverse = inverse_scale


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


def mean_params(in_scale: float, in_zero_point: int, out_scale: float, out_zero_point: int,
                count: int) -> tuple[np.float32, np.float32]:
    """(multiplier, offset) of XNNPACK's static int8 mean over ``count`` elements.

    XNNPACK sums the raw stored integers in int32, converts the sum to float32 and quantizes it with
    ``rint(sum * multiplier + offset)``: ``multiplier = (in_scale / out_scale) * (1 / count)`` and the input zero
    point folded into the offset, ``out_zero_point - (count * in_zero_point) * multiplier``, all in float32.
    Averaging the dequantized values instead rounds differently on a few percent of the outputs.
    """
    mult = F32(F32(in_scale) / F32(out_scale)) * (F32(1) / F32(count))
    offset = F32(out_zero_point) - F32(count * in_zero_point) * mult
    return F32(mult), F32(offset)


def requantize_sum(acc: np.ndarray, multiplier, offset, qmin: int, qmax: int, dtype) -> np.ndarray:
    """``clamp(rint(float32(acc) * multiplier + offset))`` (XNNPACK's int32 -> int8 convert); ``acc`` is a
    float32 temporary holding exact integer sums, overwritten."""
    np.multiply(acc, multiplier, out=acc)
    acc += offset
    np.rint(acc, out=acc)
    np.clip(acc, qmin, qmax, out=acc)
    return acc.astype(dtype)


def quantize_reference(x: np.ndarray, scale: float, zero_point: int, dtype, qmin: int | None = None,
                       qmax: int | None = None) -> np.ndarray:
    """``clamp(rint(x * (1/scale) + zero_point))`` in float32: XNNPACK's reference quantization, which builds
    the 256-entry tables of static int8 unary operators. Unlike :func:`quantize` the zero point is added
    *before* rounding, which decides values within an ulp of a half step differently."""
    lo, hi = QRANGE[np.dtype(dtype)]
    y = np.multiply(np.asarray(x, F32), inverse(scale), dtype=F32)
    y += F32(zero_point)
    np.rint(y, out=y)
    np.clip(y, lo if qmin is None else qmin, hi if qmax is None else qmax, out=y)
    return y.astype(dtype)


class AddParams:
    """XNNPACK's fixed-point static int8 addition: ``(bias + a * a_mult + b * b_mult) >> shift`` + zero point.

    The multipliers are ``a_scale / out_scale`` and ``b_scale / out_scale`` (float32) with 21 significant bits,
    sharing one shift chosen from the larger; ``bias`` holds the half-step rounding term and both input zero
    points, so ties round up (towards +inf), not to even. ``sign_b = -1`` makes the subtraction.
    """

    __slots__ = ("a_mult", "b_mult", "shift", "bias", "out_zero_point")

    def __init__(self, a_scale: float, a_zero_point: int, b_scale: float, b_zero_point: int, out_scale: float,
                 out_zero_point: int, sign_b: int = 1):
        for k, scale in ((1, a_scale), (2, b_scale)):  # XNNPACK refuses to create the operator otherwise
            ratio = F32(scale) / F32(out_scale)
            if not 2.0**-10 <= ratio < 2.0**8:
                raise ValueError(f"input{k}-to-output scale ratio {float(ratio):.7g} is outside XNNPACK's "
                                 "[2**-10, 2**8) range for int8 add")
        a_os = F32(a_scale) / F32(out_scale)
        b_os = F32(F32(b_scale) * F32(sign_b)) / F32(out_scale)
        top = max(abs(a_os), abs(b_os))
        exponent = int((np.array(top, F32).view(np.uint32) >> 23) & 0xFF) - 127
        shift = 20 - exponent  # 13..30 for the ratios allowed above
        self.a_mult = int(math.copysign(np.rint(np.ldexp(abs(a_os), shift, dtype=F32)), a_os))
        self.b_mult = int(math.copysign(np.rint(np.ldexp(abs(b_os), shift, dtype=F32)), b_os))
        self.shift = shift
        self.bias = (1 << (shift - 1)) - self.a_mult * int(a_zero_point) - self.b_mult * int(b_zero_point)
        self.out_zero_point = int(out_zero_point)

    def __call__(self, a: np.ndarray, b: np.ndarray, qmin: int, qmax: int, dtype) -> np.ndarray:
        acc = a.astype(np.int32) * np.int32(self.a_mult)  # |a * mult| < 2**29: int32 holds the sum
        acc = acc + b.astype(np.int32) * np.int32(self.b_mult)
        acc += np.int32(self.bias)
        acc >>= self.shift  # arithmetic shift: floor
        acc += np.int32(self.out_zero_point)
        np.clip(acc, qmin, qmax, out=acc)
        return acc.astype(dtype)


class RequantizeParams:
    """XNNPACK's static int8 -> int8 Convert: an 8-bit fixed-point multiplier ``rint(256 * in_scale /
    out_scale)``, ``(x * mult + (out_zp << 8) - mult * in_zp + 128) >> 8``: halves round up, and the ratio
    itself is only kept to 1/256."""

    __slots__ = ("mult", "bias")

    def __init__(self, in_scale: float, in_zero_point: int, out_scale: float, out_zero_point: int):
        ratio = F32(in_scale) / F32(out_scale)
        if not 2.0**-8 <= ratio <= 2.0**7:
            raise ValueError(f"scale ratio {float(ratio):.7g} is outside XNNPACK's [2**-8, 2**7] range for an "
                             f"int8 to int8 convert")
        self.mult = int(np.rint(F32(256) * ratio))
        self.bias = (int(out_zero_point) << 8) - self.mult * int(in_zero_point) + 0x80

    def __call__(self, x: np.ndarray, qmin: int = -128, qmax: int = 127) -> np.ndarray:
        acc = x.astype(np.int32) * np.int32(self.mult)
        acc += np.int32(self.bias)
        acc >>= 8
        np.clip(acc, qmin, qmax, out=acc)
        return acc.astype(np.int8)


def integer_binary_params(name: str, a: tuple, b: tuple, out: tuple):
    """The :class:`AddParams` / :class:`MulParams` of a static int8 ``Add``, ``Subtract`` or ``Multiply`` node
    from its (scale, zero point) pairs; ValueError where XNNPACK would refuse to create the operator."""
    if name == "Multiply":
        return MulParams(*a, *b, *out)
    return AddParams(*a, *b, *out, -1 if name == "Subtract" else 1)


class MulParams:
    """XNNPACK's static int8 multiplication: the integer product of the zero-point-corrected inputs, converted
    to float32, times ``(a_scale * b_scale) / out_scale`` (float32), rounded to even, plus the zero point."""

    __slots__ = ("a_zero_point", "b_zero_point", "scale", "out_zero_point")

    def __init__(self, a_scale: float, a_zero_point: int, b_scale: float, b_zero_point: int, out_scale: float,
                 out_zero_point: int):
        self.a_zero_point, self.b_zero_point = int(a_zero_point), int(b_zero_point)
        self.scale = F32(F32(a_scale) * F32(b_scale)) / F32(out_scale)
        if not 2.0**-16 <= self.scale < 2.0**8:  # XNNPACK refuses to create such an operator
            raise ValueError(f"product-to-output scale ratio {float(self.scale):.7g} is outside XNNPACK's "
                             "[2**-16, 2**8) range for int8 multiply")
        self.out_zero_point = int(out_zero_point)

    def __call__(self, a: np.ndarray, b: np.ndarray, qmin: int, qmax: int, dtype) -> np.ndarray:
        acc = (a.astype(np.int32) - np.int32(self.a_zero_point)) * (b.astype(np.int32) - np.int32(self.b_zero_point))
        y = acc.astype(F32)  # |acc| <= 2**16: exact
        y *= self.scale
        np.rint(y, out=y)
        y += F32(self.out_zero_point)
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


class Qd8Values(np.ndarray):
    """Dequantized dynamic-int8 values that still know their integers: ``codes`` (float32, zero-point-relative
    int8 codes, one row per dynamic-quantization row), ``zero_point`` and ``dq`` (the per-row zero point and
    dequantization scale). A GEMM that finds them sums integers exactly as XNNPACK does. Any array derived from
    one (a reshape, a slice, arithmetic) is plain float data again: ``codes`` is None there."""

    codes = zero_point = dq = None

    def __array_finalize__(self, obj) -> None:
        self.codes = self.zero_point = self.dq = None


def qd8_fake_quantize(x: np.ndarray, num_nonbatch_dims: int = 1) -> np.ndarray:
    """Quantize each row dynamically to int8 and return the dequantized float32 values (a :class:`Qd8Values`).

    A row is everything in the last ``num_nonbatch_dims`` dims. The int8 grid is exactly XNNPACK's; the
    dequantized values serve any reader, the integer codes the GEMMs that sum them exactly.
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
    out = np.multiply(q, dq[:, None]).reshape(x.shape).view(Qd8Values)
    out.codes, out.zero_point, out.dq = q, zp, dq
    return out


def qd8_rows(a: np.ndarray, k: int):
    """(codes [m, k], zero points [m], dequantization scales [m]) of a :class:`Qd8Values` read as rows of ``k``,
    or None when ``a`` carries no codes or its quantization rows do not tile those rows."""
    codes = getattr(a, "codes", None)
    if codes is None or k <= 0 or codes.size != a.size:
        return None
    width = codes.shape[1]
    if width == k:
        return codes, a.zero_point, a.dq
    if width % k == 0:  # several GEMM rows per quantization row
        r = width // k
        return codes.reshape(-1, k), np.repeat(a.zero_point, r), np.repeat(a.dq, r)
    return None


_EXACT_F32 = 2**24  # float32 adds integers exactly while every partial sum stays below this


class Qd8ChannelGemm:
    """qdint8 activations x per-channel int8/int4 weights (qd8-f32-qc8w/qc4w): the int32 sum of code x weight
    products, converted to float32, times the row's dequantization scale, times the channel's scale, plus bias.

    The products are summed in float32 BLAS calls over chunks of K short enough that no partial sum can reach
    2**24 (exact), and the chunks in float64 (exact), so the integer is XNNPACK's.
    """

    def __init__(self, w_ints: np.ndarray, scales: np.ndarray, bias: np.ndarray | None):
        self.w = np.ascontiguousarray(w_ints.T, dtype=F32)  # [k, n] integer values
        self.scale = np.asarray(scales, F32).reshape(-1)
        self.bias = None if bias is None else np.asarray(bias, F32)
        peak = 255 * max(float(np.abs(w_ints).max(initial=0)), 1.0)
        self.chunk = max(int((_EXACT_F32 - 1) // peak), 1)

    def __call__(self, codes: np.ndarray, zero_point: np.ndarray, dq: np.ndarray) -> np.ndarray:
        k = self.w.shape[0]
        if k <= self.chunk:
            acc = codes.dot(self.w)
        else:
            acc = np.zeros((codes.shape[0], self.w.shape[1]), np.float64)
            for k0 in range(0, k, self.chunk):
                acc += codes[:, k0 : k0 + self.chunk].dot(self.w[k0 : k0 + self.chunk])
            acc = acc.astype(F32)
        acc *= dq[:, None]
        acc *= self.scale
        if self.bias is not None:
            acc += self.bias
        return acc


class Qd8BlockGemm:
    """qdint8 activations x blockwise int4 weights (qd8-f32-qb4w): per block of K an exact integer sum of raw
    int8 codes x int4 weights, converted to float32 and times the block's bf16 scale, added block after block
    to ``-zero_point * sum(weights x scales)``; then times the row's dequantization scale, plus bias.

    Each block's sum is one batched float32 product, exact for blocks up to 2**24 / (128 * 8) = 16384.
    """

    def __init__(self, w_ints: np.ndarray, scales: np.ndarray, block: int, bias: np.ndarray | None):
        n, k = w_ints.shape
        nb = k // block
        self.block, self.nb = block, nb
        self.w = np.ascontiguousarray(w_ints.reshape(n, nb, block).transpose(1, 2, 0), dtype=F32)  # [nb, bl, n]
        self.scale = np.ascontiguousarray(np.asarray(scales, F32).reshape(n, nb).T)[:, None, :]  # [nb, 1, n]
        wsum = w_ints.reshape(n, nb, block).sum(axis=2, dtype=np.int64).T.astype(F32)  # [nb, n], exact
        ksum = np.zeros(n, F32)
        for b in range(nb):  # packed in float32, block after block
            ksum -= wsum[b] * self.scale[b, 0]
        self.ksum = ksum
        self.bias = None if bias is None else np.asarray(bias, F32)

    def __call__(self, codes: np.ndarray, zero_point: np.ndarray, dq: np.ndarray) -> np.ndarray:
        m = codes.shape[0]
        raw = codes + zero_point[:, None]  # the stored int8 codes
        out = np.multiply.outer(zero_point, self.ksum).astype(F32)
        step = max(1, (1 << 22) // max(self.nb * self.w.shape[2], 1))  # rows per batch: bounded scratch
        for r0 in range(0, m, step):
            a = np.ascontiguousarray(raw[r0 : r0 + step].reshape(-1, self.nb, self.block).transpose(1, 0, 2))
            blocks = np.matmul(a, self.w)  # [nb, rows, n]: exact integer sums, one BLAS call per block
            blocks *= self.scale
            o = out[r0 : r0 + step]
            for b in range(self.nb):
                o += blocks[b]
        out *= dq[:, None]
        if self.bias is not None:
            out += self.bias
        return out


def unpack_int4(packed: np.ndarray, rows: int, cols: int, zero_point: int = 8) -> np.ndarray:
    """4-bit weights (low nibble = even element, rows padded to whole bytes) -> int8 values minus zero point."""
    b = packed.reshape(rows, (cols + 1) // 2)
    out = np.empty((rows, b.shape[1] * 2), np.int8)
    out[:, 0::2] = b & 0x0F
    out[:, 1::2] = b >> 4
    return (out[:, :cols] - np.int8(zero_point)).astype(np.int8)


def channel_scales(scale, ndim: int, channel_dim: int) -> np.ndarray:
    """Per-channel scales shaped to broadcast along ``channel_dim`` of an ``ndim``-D tensor."""
    return along_axis(np.asarray(scale, F32), channel_dim, ndim)
