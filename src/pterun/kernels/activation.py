"""Activation and clamping kernels: relu, gelu, glu, elu, leaky_relu, hardtanh, logit, clamp.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.activation import relu_out
    >>> relu_out(np.array([-1.0, 2.0, np.nan]), None).tolist()
    [0.0, 2.0, nan]
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels import fast
from pterun.kernels._common import (F32, F64, promote_dtypes, promote_scalar, scalar_value, to_compute,
                                    widen_half, wrap_dim)
from pterun.kernels.registry import register
from pterun.kernels.unary import sigmoid
from pterun.numerics import erf


def _math_dtype(x):
    """The type ExecuTorch does the math in for a float kernel: double stays, everything else float32."""
    return F64 if x.dtype == F64 else F32


@register("aten::relu.out", specialize=fast.relu)
def relu_out(self, out):
    """relu.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype == np.bool_:
        raise TypeError("relu does not support bool tensors")
    return np.where(self < 0, np.zeros((), self.dtype), self)  # NaN passes through


@register("aten::gelu.out", specialize=fast.gelu)
def gelu_out(self, approximate, out):
    """gelu.out(Tensor self, *, str approximate="none", Tensor(a!) out) -> Tensor(a!)"""
    if approximate == "tanh":
        # ExecuTorch: the inner polynomial and tanh in the input's float type, the final product in double
        x = self.astype(_math_dtype(self), copy=False)
        beta = x.dtype.type(math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5)
        inner = beta * (x + x.dtype.type(np.float32(0.044715)) * (x * x * x))
        with np.errstate(invalid="ignore", over="ignore"):
            y = 0.5 * x.astype(F64) * (1.0 + np.tanh(inner).astype(F64))
    elif approximate in (None, "none"):
        x64 = self.astype(F64)
        with np.errstate(invalid="ignore"):
            y = 0.5 * x64 * (1 + erf(x64 * math.sqrt(0.5)))
    else:
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return y  # gelu(-inf) is NaN in ExecuTorch 1.5 (0.5 * -inf * 0), as in this formula


@register("aten::glu.out")
def glu_out(self, dim, out):
    """glu.out(Tensor self, int dim=-1, *, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if n % 2:
        raise ValueError(f"glu halves dim {d}, which has odd size {n}")
    a, b = np.split(self.astype(widen_half(self.dtype), copy=False), 2, axis=d)
    return a * sigmoid(b)


@register("aten::elu.out")
def elu_out(self, alpha, scale, input_scale, out):
    """elu.out(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1, *, Tensor(a!) out) -> Tensor(a!)"""
    x = self.astype(_math_dtype(self), copy=False)
    t = x.dtype.type
    negcoef = t(alpha) * t(scale)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x <= 0, np.expm1(np.minimum(x, 0) * t(input_scale)) * negcoef, x * t(scale))


@register("aten::leaky_relu.out")
def leaky_relu_out(self, negative_slope, out):
    """leaky_relu.out(Tensor self, Scalar negative_slope=0.01, *, Tensor(a!) out) -> Tensor(a!)"""
    slope = scalar_value(negative_slope, self.dtype)
    return np.where(self >= 0, self, self * slope)


@register("aten::hardtanh.out", specialize=fast.hardtanh)
def hardtanh_out(self, min_val, max_val, out):
    """hardtanh.out(Tensor self, Scalar min_val=-1, Scalar max_val=1, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype == np.bool_:
        raise TypeError("hardtanh does not support bool tensors")
    return np.minimum(np.maximum(self, scalar_value(min_val, self.dtype)), scalar_value(max_val, self.dtype))


@register("aten::logit.out")
def logit_out(self, eps, out):
    """logit.out(Tensor self, float? eps=None, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = out.dtype if out.dtype in (F32, F64) else F32  # ExecuTorch computes in the out type
    x = self.astype(ct)
    if eps is not None:
        x = np.where(x < eps, ct.type(eps), np.where(x > 1 - eps, ct.type(1 - eps), x))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x / (1 - x))


def _check_bound(v, dtype, what):
    """ExecuTorch rejects finite bounds that the output dtype cannot represent."""
    if isinstance(v, float) and not math.isfinite(v) or dtype.kind == "b":
        return
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        ok = info.min <= int(v) <= info.max
    else:
        with np.errstate(over="ignore"):
            ok = bool(np.isfinite(np.array(float(v)).astype(dtype)))
    if not ok:
        raise ValueError(f"clamp {what} {v} is out of range for {dtype}")


@register("aten::clamp.out")
def clamp_out(self, min, max, out):  # noqa: A002  (schema names)
    """clamp.out(Tensor self, Scalar? min=None, Scalar? max=None, *, Tensor(a!) out) -> Tensor(a!)"""
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    ct = self.dtype
    for v, what in ((min, "min"), (max, "max")):
        if v is not None:
            _check_bound(v, out.dtype, what)
            ct = promote_scalar(ct, v)
    ct = widen_half(ct)
    x = to_compute(self, ct)
    if min is not None:
        x = np.maximum(x, to_compute(min, ct))  # NaN (input or bound) propagates, as max_override
    if max is not None:
        x = np.minimum(x, to_compute(max, ct))
    return x


@register("aten::clamp.Tensor_out")
def clamp_tensor_out(self, min, max, out):  # noqa: A002
    """clamp.Tensor_out(Tensor self, Tensor? min=None, Tensor? max=None, *, Tensor(a!) out) -> Tensor(a!)"""
    if min is None and max is None:
        raise ValueError("clamp needs at least one of min and max")
    ct = widen_half(promote_dtypes(*(t.dtype for t in (self, min, max) if t is not None)))
    x = to_compute(self, ct)
    if min is not None:
        x = np.maximum(x, to_compute(min, ct))
    if max is not None:
        x = np.minimum(x, to_compute(max, ct))
    return x
