"""Elementwise kernels: arithmetic, comparisons, logic and unary math, with PyTorch promotion rules.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.elementwise import add_out
    >>> add_out(np.ones(2, np.float32), np.ones(2, np.float32), 2, np.empty(2, np.float32))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels._common import F32, as_dtype, compute_dtype, is_floating, is_integral, promote, scalar_value
from pterun.kernels.registry import register


def _operands(a, b, out):
    """Both operands in the compute dtype (Python scalars stay weak, converted with C wrap-around)."""
    ct = compute_dtype(out.dtype, a, b)
    a = as_dtype(a, ct)
    b = as_dtype(b, ct) if isinstance(b, np.ndarray) else (scalar_value(b, ct) if is_integral(ct) else b)
    return a, b, ct


def _scaled(b, alpha, ct):
    if alpha == 1:
        return b
    if is_integral(ct, include_bool=True) and isinstance(alpha, float) and not alpha.is_integer():
        raise ValueError(f"alpha {alpha} must be an integer for integer tensors")
    return b * (scalar_value(alpha, ct) if is_integral(ct) else alpha)


@register("aten::add.out")
def add_out(self, other, alpha, out):
    """add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other, out)
    if ct == np.bool_:
        return np.logical_or(a, b)
    return np.add(a, _scaled(b, alpha, ct))


@register("aten::add.Scalar_out")
def add_scalar_out(self, other, alpha, out):
    """add.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    return add_out(self, other, alpha, out)


@register("aten::sub.out")
def sub_out(self, other, alpha, out):
    """sub.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other, out)
    if ct == np.bool_:
        raise TypeError("subtraction of bool tensors is not supported")
    return np.subtract(a, _scaled(b, alpha, ct))


@register("aten::sub.Scalar_out")
def sub_scalar_out(self, other, alpha, out):
    """sub.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    return sub_out(self, other, alpha, out)


@register("aten::rsub.Scalar_out")
def rsub_scalar_out(self, other, alpha, out):
    """rsub.Scalar_out(Tensor self, Scalar other, Scalar alpha=1, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other, out)
    return np.subtract(b, _scaled(a, alpha, ct))


@register("aten::mul.out")
def mul_out(self, other, out):
    """mul.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, ct = _operands(self, other, out)
    if ct == np.bool_:
        return np.logical_and(a, b)
    return np.multiply(a, b)


@register("aten::mul.Scalar_out")
def mul_scalar_out(self, other, out):
    """mul.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return mul_out(self, other, out)


def _true_div(self, other):
    ct = promote(self, other)
    if not is_floating(ct):
        ct = F32
    elif ct.itemsize < 4:
        ct = F32
    a = as_dtype(self, ct)
    b = as_dtype(other, ct) if isinstance(other, np.ndarray) else other
    return np.true_divide(a, b)


def _div_mode(self, other, mode, out):
    if mode is None:
        return _true_div(self, other)
    a, b, ct = _operands(self, other, out)
    if mode == "trunc":
        if is_integral(ct):
            if np.any(b == 0):
                raise ZeroDivisionError("integer division by zero")
            q = np.floor_divide(a, b)
            fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
            return q + fix.astype(ct)
        return np.trunc(np.true_divide(a, b))
    if mode == "floor":
        if is_integral(ct):
            if np.any(b == 0):
                raise ZeroDivisionError("integer division by zero")
            return np.floor_divide(a, b)
        return np.floor(np.true_divide(a, b))
    raise ValueError(f"rounding_mode must be None, 'trunc' or 'floor', got {mode!r}")


@register("aten::div.out")
def div_out(self, other, out):
    """div.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _true_div(self, other)


@register("aten::div.Scalar_out")
def div_scalar_out(self, other, out):
    """div.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _true_div(self, other)


@register("aten::div.out_mode")
def div_out_mode(self, other, rounding_mode, out):
    """div.out_mode(Tensor self, Tensor other, *, str? rounding_mode, Tensor(a!) out) -> Tensor(a!)"""
    return _div_mode(self, other, rounding_mode, out)


@register("aten::div.Scalar_mode_out")
def div_scalar_mode_out(self, other, rounding_mode, out):
    """div.Scalar_mode_out(Tensor self, Scalar other, *, str? rounding_mode, Tensor(a!) out) -> Tensor(a!)"""
    return _div_mode(self, other, rounding_mode, out)


@register("aten::pow.Tensor_Scalar_out")
def pow_tensor_scalar_out(self, exponent, out):
    """pow.Tensor_Scalar_out(Tensor self, Scalar exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = compute_dtype(out.dtype, self, exponent)
    a = as_dtype(self, ct)
    if exponent == 2:
        return a * a
    if exponent == 0.5 and is_floating(ct):
        return np.sqrt(a)
    return np.power(a, exponent)


@register("aten::pow.Tensor_Tensor_out")
def pow_tensor_tensor_out(self, exponent, out):
    """pow.Tensor_Tensor_out(Tensor self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, _ = _operands(self, exponent, out)
    return np.power(a, b)


@register("aten::pow.Scalar_out")
def pow_scalar_out(self, exponent, out):
    """pow.Scalar_out(Scalar self, Tensor exponent, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b, _ = _operands(exponent, self, out)
    return np.power(b, a)


def _minmax(fn, self, other, out):
    a, b, _ = _operands(self, other, out)
    return fn(a, b)


@register("aten::maximum.out")
def maximum_out(self, other, out):
    """maximum.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _minmax(np.maximum, self, other, out)


@register("aten::minimum.out")
def minimum_out(self, other, out):
    """minimum.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return _minmax(np.minimum, self, other, out)


# -- comparisons ------------------------------------------------------------------------------------------
def _compare(ufunc):
    def tensor_kernel(self, other, out):
        ct = promote(self, other)
        b = as_dtype(other, ct) if isinstance(other, np.ndarray) else other
        return ufunc(as_dtype(self, ct), b)
    return tensor_kernel


for _name, _uf in (("eq", np.equal), ("ne", np.not_equal), ("gt", np.greater), ("ge", np.greater_equal),
                   ("lt", np.less), ("le", np.less_equal)):
    _k = _compare(_uf)
    _k.__doc__ = f"{_name}.Tensor_out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"
    register(f"aten::{_name}.Tensor_out")(_k)
    _s = _compare(_uf)
    _s.__doc__ = f"{_name}.Scalar_out(Tensor self, Scalar other, *, Tensor(a!) out) -> Tensor(a!)"
    register(f"aten::{_name}.Scalar_out")(_s)


# -- logic ------------------------------------------------------------------------------------------------
@register("aten::logical_not.out")
def logical_not_out(self, out):
    """logical_not.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_not(self)


@register("aten::logical_and.out")
def logical_and_out(self, other, out):
    """logical_and.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_and(self, other)


@register("aten::logical_or.out")
def logical_or_out(self, other, out):
    """logical_or.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_or(self, other)


@register("aten::logical_xor.out")
def logical_xor_out(self, other, out):
    """logical_xor.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_xor(self, other)


@register("aten::bitwise_not.out")
def bitwise_not_out(self, out):
    """bitwise_not.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_not(self) if self.dtype == np.bool_ else np.invert(self)


@register("aten::where.self_out")
def where_self_out(condition, self, other, out):
    """where.self_out(Tensor condition, Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = promote(self, other)
    return np.where(condition.astype(bool, copy=False), as_dtype(self, ct), as_dtype(other, ct))


# -- unary math -------------------------------------------------------------------------------------------
def _float_in(x, out):
    """Floating input for a float-valued unary op (ints and bools compute in float32, halves in float32)."""
    if is_floating(x.dtype) and x.dtype.itemsize >= 4:
        return x
    return x.astype(F32)


def erf(x: np.ndarray) -> np.ndarray:
    """Error function to ~1e-7 absolute (Abramowitz & Stegun 7.1.26), computed in float64."""
    x64 = np.asarray(x, dtype=np.float64)
    s = np.sign(x64)
    a = np.abs(x64)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return (s * (1.0 - poly * np.exp(-a * a))).astype(x.dtype if is_floating(x.dtype) else F32, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _unary(name, fn, float_only=True):
    def kernel(self, out):
        return fn(_float_in(self, out) if float_only else self)
    kernel.__doc__ = f"{name}.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_out"
    register(f"aten::{name}.out")(kernel)
    return kernel


_SQRT1_2 = 1 / math.sqrt(2)
for _name, _fn in {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erf": erf, "sigmoid": sigmoid,
    "reciprocal": lambda x: 1 / x,
}.items():
    _unary(_name, _fn)

for _name, _fn in {
    "abs": np.abs, "neg": np.negative, "sign": np.sign,
    "floor": lambda x: x if is_integral(x.dtype, True) else np.floor(x),
    "ceil": lambda x: x if is_integral(x.dtype, True) else np.ceil(x),
    "round": lambda x: x if is_integral(x.dtype, True) else np.round(x),
    "trunc": lambda x: x if is_integral(x.dtype, True) else np.trunc(x),
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
}.items():
    _unary(_name, _fn, float_only=False)


@register("aten::gelu.out")
def gelu_out(self, approximate, out):
    """gelu.out(Tensor self, *, str approximate="none", Tensor(a!) out) -> Tensor(a!)"""
    x = _float_in(self, out)
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    if approximate not in (None, "none"):
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * x * (1 + erf(x * _SQRT1_2))


@register("aten::silu.out")
def silu_out(self, out):
    """silu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _float_in(self, out)
    return x * sigmoid(x)


@register("aten::hardtanh.out")
def hardtanh_out(self, min_val, max_val, out):
    """hardtanh.out(Tensor self, Scalar min_val=-1, Scalar max_val=1, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.minimum(np.maximum(self, min_val), max_val).astype(self.dtype, copy=False)


@register("aten::hardswish.out")
def hardswish_out(self, out):
    """hardswish.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _float_in(self, out)
    return x * np.clip(x + 3, 0, 6) / 6


@register("aten::hardsigmoid.out")
def hardsigmoid_out(self, out):
    """hardsigmoid.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _float_in(self, out)
    return np.clip(x + 3, 0, 6) / 6


@register("aten::leaky_relu.out")
def leaky_relu_out(self, negative_slope, out):
    """leaky_relu.out(Tensor self, Scalar negative_slope=0.01, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.where(self > 0, self, self * negative_slope)


@register("aten::elu.out")
def elu_out(self, alpha, scale, input_scale, out):
    """elu.out(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _float_in(self, out)
    return np.where(x > 0, x * scale, np.expm1(np.minimum(x, 0) * input_scale) * alpha * scale)


@register("aten::clamp.out")
def clamp_out(self, min, max, out):  # noqa: A002  (schema names)
    """clamp.out(Tensor self, Scalar? min=None, Scalar? max=None, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = promote(self, *(v for v in (min, max) if v is not None))
    x = as_dtype(self, ct)
    if min is not None:
        x = np.maximum(x, min)
    if max is not None:
        x = np.minimum(x, max)
    return x


@register("aten::clamp.Tensor_out")
def clamp_tensor_out(self, min, max, out):  # noqa: A002
    """clamp.Tensor_out(Tensor self, Tensor? min=None, Tensor? max=None, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = promote(self, *(v for v in (min, max) if v is not None))
    x = as_dtype(self, ct)
    if min is not None:
        x = np.maximum(x, as_dtype(min, ct))
    if max is not None:
        x = np.minimum(x, as_dtype(max, ct))
    return x


@register("aten::isnan.out")
def isnan_out(self, out):
    """isnan.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.isnan(self) if is_floating(self.dtype) else np.zeros(self.shape, bool)


@register("aten::isinf.out")
def isinf_out(self, out):
    """isinf.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.isinf(self) if is_floating(self.dtype) else np.zeros(self.shape, bool)


# -- bitwise ----------------------------------------------------------------------------------------------
def _bitwise(ufunc, name, variant, other_type):
    def kernel(self, other, out):
        a, b, ct = _operands(self, other, out)
        if not is_integral(ct, include_bool=True):
            raise TypeError(f"bitwise_{name} needs integer or bool tensors, got {ct}")
        return ufunc(a, b)
    kernel.__doc__ = f"bitwise_{name}.{variant}(Tensor self, {other_type} other, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"bitwise_{name}_{variant}"
    register(f"aten::bitwise_{name}.{variant}")(kernel)


for _name, _uf in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor),
                   ("left_shift", np.left_shift), ("right_shift", np.right_shift)):
    _bitwise(_uf, _name, "Tensor_out", "Tensor")
    _bitwise(_uf, _name, "Tensor_Scalar_out" if "shift" in _name else "Scalar_out", "Scalar")
