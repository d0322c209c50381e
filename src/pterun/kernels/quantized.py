"""ExecuTorch's quantized kernels (``quantized_decomposed::``): quantize / dequantize per tensor, channel
and token, choose_qparams, and the quantized add.

Arithmetic follows kernels/quantized/cpu on x86: ``q = clamp(zp + nearbyint(float(x * float(1 / scale))))``
with round-half-to-even, where a non-finite product becomes INT64_MIN (so clamps to quant_min);
``x = float(q - zp) * float(scale)``. Example::

    >>> import numpy as np
    >>> from pterun.kernels.quantized import quantize
    >>> quantize(np.array([0.5, 1.5, -3.0], np.float32), 0.5, 0, -128, 127, np.dtype(np.int8)).tolist()
    [1, 3, -6]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import F32, F64, I64, wrap_dim
from pterun.kernels.registry import register
from pterun.numerics import along_axis, inverse_scale

_INT64_MIN = np.float64(-(2 ** 63))


def quantize(x, scale, zero_point, quant_min, quant_max, dtype):
    """Quantize with (broadcastable) per-element scale / zero point, as ExecuTorch's quantize_val."""
    if x.dtype.kind not in "fV":
        raise TypeError(f"quantize needs a floating input, got {x.dtype}")
    inv = inverse_scale(scale)
    with np.errstate(over="ignore", invalid="ignore"):
        if x.dtype == F64:
            v = (inv.astype(F64) * x).astype(F32)
        else:
            v = inv * x.astype(F32, copy=False)
        # int32(zp) + nearbyint(v) is a float sum; its cast to int64 turns inf/NaN into INT64_MIN on x86
        s = np.asarray(zero_point).astype(np.int32).astype(F32) + np.rint(v)
        s = np.where(np.isfinite(s) & (np.abs(s.astype(F64)) < 2.0 ** 63), s.astype(F64), _INT64_MIN)
    return np.clip(s, quant_min, quant_max).astype(dtype)


def dequantize(q, scale, zero_point):
    """``float(q - int32(zp)) * float(scale)`` in float32."""
    diff = q.astype(np.int64) - np.asarray(zero_point).astype(np.int32).astype(np.int64)
    return diff.astype(F32) * np.asarray(scale, F64).astype(F32)


def _check_q(q, dtype):
    if q.dtype != dtype:
        raise TypeError(f"quantized input has dtype {q.dtype}, but the op says {dtype}")


def _one(t, what):
    if t.size != 1:
        raise ValueError(f"{what} must have one element, got shape {list(t.shape)}")
    return t.reshape(-1)[0]


@register("quantized_decomposed::quantize_per_tensor.out")
def quantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out):  # noqa: A002
    """quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"""
    return quantize(input, scale, zero_point, quant_min, quant_max, dtype)


@register("quantized_decomposed::quantize_per_tensor.Tensor_out")
def quantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out):  # noqa: A002
    """quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"""
    return quantize(input, _one(scale, "scale"), _one(zero_point, "zero_point"), quant_min, quant_max, dtype)


@register("quantized_decomposed::quantize_per_channel.out")
def quantize_per_channel_out(input, scales, zero_points, axis, quant_min, quant_max, dtype, out):  # noqa: A002
    """quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"""
    a = wrap_dim(axis, input.ndim)
    if scales.size != input.shape[a] or zero_points.size != input.shape[a]:
        raise ValueError(f"per-channel parameters need {input.shape[a]} entries along axis {a}")
    return quantize(input, along_axis(scales, a, input.ndim), along_axis(zero_points, a, input.ndim), quant_min,
                    quant_max, dtype)


@register("quantized_decomposed::quantize_per_token.out")
def quantize_per_token_out(input, scales, zero_points, quant_min, quant_max, dtype, out):  # noqa: A002
    """quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)"""
    tokens = input.reshape(-1, input.shape[-1]) if input.ndim else input.reshape(1, 1)
    q = quantize(tokens, scales.reshape(-1, 1), zero_points.reshape(-1, 1), quant_min, quant_max, dtype)
    return q.reshape(input.shape)


@register("quantized_decomposed::dequantize_per_tensor.out")
def dequantize_per_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):  # noqa: A002
    """dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    _check_q(input, dtype)
    return dequantize(input, scale, zero_point)


@register("quantized_decomposed::dequantize_per_tensor.Tensor_out")
def dequantize_per_tensor_tensor_out(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):  # noqa: A002
    """dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    _check_q(input, dtype)
    return dequantize(input, _one(scale, "scale"), _one(zero_point, "zero_point"))


@register("quantized_decomposed::dequantize_per_channel.out")
def dequantize_per_channel_out(input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype, out):  # noqa: A002
    """dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    _check_q(input, dtype)
    a = wrap_dim(axis, input.ndim)
    if scales.size != input.shape[a]:
        raise ValueError(f"dequantize_per_channel needs {input.shape[a]} scales along axis {a}, got {scales.size}")
    zp = 0 if zero_points is None else along_axis(zero_points, a, input.ndim)
    return dequantize(input, along_axis(scales, a, input.ndim), zp)


@register("quantized_decomposed::dequantize_per_token.out")
def dequantize_per_token_out(input, scales, zero_points, quant_min, quant_max, dtype, output_dtype, out):  # noqa: A002
    """dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)"""
    _check_q(input, dtype)
    tokens = input.reshape(-1, input.shape[-1])
    return dequantize(tokens, scales.reshape(-1, 1), zero_points.reshape(-1, 1)).reshape(input.shape)


# -- choose_qparams ----------------------------------------------------------------------------------------
_SMALL_SCALE = np.float32(6.1e-5)


def qparams(mn, mx, qmin: int, qmax: int):
    """(double scale, int64 zero point) arrays from float32 min/max arrays: ExecuTorch's
    calculate_scale_and_zero_point, including its tiny-scale widening and zero-point nudging."""
    mn = np.minimum(np.asarray(mn, F32), np.float32(0))
    mx = np.maximum(np.asarray(mx, F32), np.float32(0))
    span = qmax - qmin
    scale = (mx.astype(F64) - mn.astype(F64)) / span
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s32 = scale.astype(F32)
        scale = np.where((s32 == 0) | np.isinf(np.float32(1) / s32), 0.1, scale)
        small = scale < np.float64(_SMALL_SCALE)
        amp = _SMALL_SCALE / scale.astype(F32)
        widened_mn = np.where(mn == 0, mn, np.where(mx == 0, np.float32(-_SMALL_SCALE * np.float32(span)), mn * amp))
        widened_mx = np.where(mn == 0, np.float32(_SMALL_SCALE * np.float32(span)), np.where(mx == 0, mx, mx * amp))
    mn = np.where(small, widened_mn, mn).astype(F64)
    mx = np.where(small, widened_mx, mx).astype(F64)
    scale = np.where(small, np.float64(_SMALL_SCALE), scale)
    from_min, from_max = qmin - mn / scale, qmax - mx / scale
    err_min = abs(qmin) - np.abs(mn / scale)
    err_max = abs(qmax) - np.abs(mx / scale)
    initial = np.where(err_min < err_max, from_min, from_max)
    zp = np.where(initial < qmin, qmin, np.where(initial > qmax, qmax, np.rint(initial.astype(F32))))
    return scale, zp.astype(I64)


@register("quantized_decomposed::choose_qparams.Tensor_out")
def choose_qparams_tensor_out(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out):  # noqa: A002
    """choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"""
    # ExecuTorch ignores eps; an empty input has no min/max, which it does not guard either
    if input.dtype != F32 or input.size == 0 or quant_min >= quant_max:
        raise ValueError(f"choose_qparams needs a non-empty float32 input and quant_min < quant_max, got "
                         f"{input.dtype} {list(input.shape)}, [{quant_min}, {quant_max}]")
    scale, zp = qparams(input.min(), input.max(), quant_min, quant_max)
    return np.full(scale_out.shape, scale), np.full(zero_point_out.shape, zp)


@register("quantized_decomposed::choose_qparams_per_token_asymmetric.out")
def choose_qparams_per_token_asymmetric_out(input, dtype, scale_out, zero_point_out):  # noqa: A002
    """choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))"""
    if input.dtype != F32 or input.ndim == 0:
        raise ValueError(f"choose_qparams_per_token_asymmetric needs a float32 tensor, got {input.dtype}")
    shape = input.shape[:-1] + (1,)
    scale, zp = qparams(input.min(axis=-1, keepdims=True), input.max(axis=-1, keepdims=True), -128, 127)
    return scale.reshape(shape), zp.reshape(shape)


@register("quantized_decomposed::add.out")
def add_out(a, a_scale, a_zero_point, a_quant_min, a_quant_max, b, b_scale, b_zero_point, b_quant_min,
            b_quant_max, out_scale, out_zero_point, out_quant_min, out_quant_max, out):
    """add.out(Tensor a, float a_scale, int a_zero_point, int a_quant_min, int a_quant_max, Tensor b, float b_scale, int b_zero_point, int b_quant_min, int b_quant_max, float out_scale, int out_zero_point, int out_quant_min, int out_quant_max, *, Tensor(a!) out) -> Tensor(a!)"""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"quantized add needs equal shapes and dtypes, got {a.dtype}{list(a.shape)} and "
                         f"{b.dtype}{list(b.shape)}")
    # dequantize in double with float scales, add in float, requantize as quantize_val
    dqa = ((a.astype(np.int64) - np.int32(a_zero_point)) * np.float64(np.float32(a_scale))).astype(F32)
    dqb = ((b.astype(np.int64) - np.int32(b_zero_point)) * np.float64(np.float32(b_scale))).astype(F32)
    return quantize(dqa + dqb, out_scale, out_zero_point, out_quant_min, out_quant_max, a.dtype)
