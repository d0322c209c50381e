"""Binary arithmetic kernels: add, sub, rsub, mul, div (all rounding modes), floor_divide, fmod, remainder,
pow, atan2, maximum, minimum.

Operands promote as ExecuTorch's portable kernels do (by dtype, scalars per ``promote_type_with_scalar``)
and compute in the widened type (half types in float32); the interpreter casts the result to ``out``'s
dtype. Example::

    >>> import numpy as np
    >>> from pterun.kernels.elementwise import add_out
    >>> add_out(np.ones(2, np.float32), np.ones(2, np.float32), 2, np.empty(2, np.float32))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels import fast
from pterun.kernels._common import (F32, F64, common_dtype, floor_divide, is_floating, is_integral, to_compute,
                                    widen_half)
from pterun.kernels.registry import register


def _operands(a, b, ct=None):
    """Both operands in the compute dtype (the common dtype widened from half types)."""
    ct = widen_half(common_dtype(a, b)) if ct is None else ct
    return to_compute(a, ct), to_compute(b, ct), ct


def _alpha(alpha, ct):
    if is_integral(ct) and isinstance(alpha, float) and not alpha.is_integer():
        raise ValueError(f"alpha {alpha} must be an integer for integer tensors")
    return to_compute(alpha, ct)


def _check_nonzero(b, what):
    if np.any(b == 0):
        raise ZeroDivisionError(f"{what}: integer division by zero")


@register("aten::add.out", specialize=fast.binary(np.add, integers=True))
def add_out(self, other, alpha, out):
    """add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    if ct == np.bool_:
        return a | (b & bool(alpha))
    if alpha == 1:
        return a + b
    return a + _alpha(alpha, ct) * b


@register("aten::add.Scalar_out", specialize=fast.binary_scalar(np.add))
def add_scalar_out(self, other, alpha, out):
    """add.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    if ct == np.bool_:
        return a | (b & bool(alpha))
    return a + (_alpha(alpha, ct) * b).astype(ct)  # alpha * other in the compute type, as ExecuTorch


@register("aten::sub.out", specialize=fast.binary(np.subtract, integers=True))
def sub_out(self, other, alpha, out):
    """sub.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    if ct == np.bool_ or isinstance(alpha, bool):
        raise TypeError("subtraction with bool tensors or a bool alpha is not supported")
    return a - b if alpha == 1 else a - _alpha(alpha, ct) * b


@register("aten::sub.Scalar_out", specialize=fast.binary_scalar(np.subtract))
def sub_scalar_out(self, other, alpha, out):
    """sub.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    if ct == np.bool_ or isinstance(alpha, bool):
        raise TypeError("subtraction with bool tensors or a bool alpha is not supported")
    return a - (_alpha(alpha, ct) * b).astype(ct)


@register("aten::rsub.Scalar_out")
def rsub_scalar_out(self, other, alpha, out):
    """rsub.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    if ct == np.bool_ or isinstance(alpha, bool):
        raise TypeError("subtraction with bool tensors or a bool alpha is not supported")
    return b - _alpha(alpha, ct) * a


@register("aten::mul.out", specialize=fast.binary(np.multiply, integers=True))
def mul_out(self, other, out):
    """mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other)
    return a & b if ct == np.bool_ else a * b


@register("aten::mul.Scalar_out", specialize=fast.binary_scalar(np.multiply))
def mul_scalar_out(self, other, out):
    """mul.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return mul_out(self, other, out)


def _true_div(self, other):
    # ExecuTorch divides in the floating operand's type (the promoted one when both float), else float32
    ct = common_dtype(self, other)
    if not is_floating(ct) and ct.kind != "c":
        ct = F32
    a, b, ct = _operands(self, other, widen_half(ct))
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _div_mode(self, other, mode):
    if mode is None:
        return _true_div(self, other)
    if mode not in ("trunc", "floor"):
        raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', got {mode!r}")
    a, b, ct = _operands(self, other)
    if ct == np.bool_:
        raise TypeError("division with a rounding mode is not supported for bool tensors")
    if is_integral(ct):
        _check_nonzero(b, f"div(rounding_mode={mode!r})")
        if mode == "floor":
            return np.floor_divide(a, b)
        q = np.floor_divide(a, b)
        return q + ((q < 0) & (q * b != a)).astype(ct)  # C truncation toward zero
    if mode == "trunc":
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.trunc(a / b)
    return floor_divide(a, b)


@register("aten::div.out", specialize=fast.binary(np.true_divide))
def div_out(self, other, out):
    """div.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _true_div(self, other)


@register("aten::div.Scalar_out", specialize=fast.binary_scalar(np.true_divide))
def div_scalar_out(self, other, out):
    """div.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _true_div(self, other)


@register("aten::div.out_mode")
def div_out_mode(self, other, rounding_mode, out):
    """div.out_mode(Tensor self, Tensor other, *, str? rounding_mode, Tensor(a!) out) -> Tensor(a!)"""
    return _div_mode(self, other, rounding_mode)


@register("aten::div.Scalar_mode_out")
def div_scalar_mode_out(self, other, rounding_mode, out):
    """div.Scalar_mode_out(Tensor self, Scalar other, *, str? rounding_mode, Tensor(a!) out) -> Tensor(a!)"""
    return _div_mode(self, other, rounding_mode)


@register("aten::floor_divide.out")
def floor_divide_out(self, other, out):
    """floor_divide.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _div_mode(self, other, "floor")


def _float_or_double(self, other):
    # fmod and pow compute in float when the common type is float32 (or a half type), else in double
    ct = widen_half(common_dtype(self, other))
    if ct == np.bool_:
        raise TypeError("bool tensors are not supported")
    return _operands(self, other, F32 if ct == F32 else F64)


def _fmod(self, other):
    a, b, _ = _float_or_double(self, other)
    if not is_floating(common_dtype(self, other)) and not isinstance(other, np.ndarray):
        _check_nonzero(b, "fmod")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b)


@register("aten::fmod.Tensor_out")
def fmod_tensor_out(self, other, out):
    """fmod.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _fmod(self, other)


@register("aten::fmod.Scalar_out")
def fmod_scalar_out(self, other, out):
    """fmod.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _fmod(self, other)


def _remainder(self, other):
    a, b, ct = _operands(self, other)
    if ct == np.bool_:
        raise TypeError("remainder is not supported for bool tensors")
    if is_integral(ct):
        # ExecuTorch's integer remainder is C's % (sign of the dividend), unlike eager PyTorch's
        _check_nonzero(b, "remainder")
        return np.fmod(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        # ExecuTorch keeps fmod's result in a float (also for double) and adds b when the signs differ
        rem = np.fmod(a, b).astype(F32).astype(ct)
        return np.where(((a < 0) ^ (b < 0)) & (rem != 0), rem + b, rem)


@register("aten::remainder.Tensor_out")
def remainder_tensor_out(self, other, out):
    """remainder.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _remainder(self, other)


@register("aten::remainder.Scalar_out")
def remainder_scalar_out(self, other, out):
    """remainder.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _remainder(self, other)


def _pow(base, exponent):
    a, b, ct = _float_or_double(base, exponent)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        if not isinstance(exponent, np.ndarray) and b == 2:
            return a * a
        if b.size == 1 and a.size > 1:
            # NumPy turns a broadcast exponent of 0.5 into sqrt, which differs from C's pow at -inf and -0
            b = np.full(np.broadcast_shapes(a.shape, b.shape), b.reshape(()))
        if a.dtype == F32 and b.dtype == F32:
            # ExecuTorch calls the C library's powf; NumPy's float32 power differs from glibc's in the last bit
            # of ~16% of results, the double power rounded to float in ~0.05% (where powf itself misrounds)
            return np.power(a.astype(F64), b.astype(F64)).astype(F32)
        return np.power(a, b)


@register("aten::pow.Tensor_Tensor_out")
def pow_tensor_tensor_out(self, exponent, out):
    """pow.Tensor_Tensor_out(Tensor self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    return _pow(self, exponent)


@register("aten::pow.Tensor_Scalar_out")
def pow_tensor_scalar_out(self, exponent, out):
    """pow.Tensor_Scalar_out(Tensor self, Scalar exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    return _pow(self, exponent)


@register("aten::pow.Scalar_out")
def pow_scalar_out(self, exponent, out):
    """pow.Scalar_out(Scalar self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    return _pow(self, exponent)


@register("aten::atan2.out")
def atan2_out(self, other, out):
    """atan2.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = common_dtype(self, other)
    a, b, _ = _operands(self, other, widen_half(ct) if is_floating(ct) else F32)
    return np.arctan2(a, b)


def _extreme(fn, self, other):
    a, b, ct = _operands(self, other)
    return fn(a, b)  # np.maximum / np.minimum propagate NaN like max_override / min_override


@register("aten::maximum.out", specialize=fast.binary(np.maximum, integers=True))
def maximum_out(self, other, out):
    """maximum.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.maximum, self, other)


@register("aten::minimum.out", specialize=fast.binary(np.minimum, integers=True))
def minimum_out(self, other, out):
    """minimum.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.minimum, self, other)
