"""Reductions and scans: sum, mean, prod, amax/amin, max/min (dim and whole tensor), argmax/argmin, any,
var/var_mean, cumsum, softmax/log_softmax.

ExecuTorch accumulates in the *output* dtype (half types in float32), so sums of int8 into int8 wrap the
way the planned output would anyway, and NaN wins every max/min. Its bf16 ``var``, ``prod`` and ``cumsum``
accumulate in bf16 itself, rounding at every step (:mod:`pterun.kernels._bf16`). Example::

    >>> import numpy as np
    >>> from pterun.kernels.reduction import sum_out
    >>> sum_out(np.ones((2, 3), np.float32), [1], False, None, np.empty(2, np.float32))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels import _bf16
from pterun.kernels._common import (F32, F64, I64, accumulate, is_bfloat16, is_floating, reduce_axes, sum_in_order,
                                    widen_half, wrap_dim)
from pterun.kernels.registry import register


def _acc(out):
    """The accumulation dtype: the output's, with half types widened to float32."""
    return widen_half(out.dtype)


def _axes(dim, ndim):
    axes = reduce_axes(dim, ndim)
    return None if axes is None else tuple(sorted(set(axes)))


def _count(x, axes) -> int:
    """How many elements each output element reduces over."""
    return x.size if axes is None else math.prod(x.shape[a] for a in axes)


@register("aten::sum.IntList_out")
def sum_out(self, dim, keepdim, dtype, out):
    """sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    # the ufunc itself, not np.sum: a cast it refuses (complex into a real out) is then raised from this module,
    # where pterun's warning filter makes it an error (pterun._fpstate), not a warning from NumPy's wrapper
    return np.add.reduce(self, axis=_axes(dim, self.ndim), dtype=_acc(out), keepdims=keepdim)


@register("aten::mean.out")
def mean_out(self, dim, keepdim, dtype, out):
    """mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    acc = _acc(out)
    if not is_floating(acc):
        raise TypeError(f"mean needs a floating output dtype, got {out.dtype}")
    axes = _axes(dim, self.ndim)
    total = sum_in_order(self, axes, acc, keepdims=keepdim)  # ExecuTorch's running sum, not NumPy's pairwise
    count = _count(self, axes)
    if count:  # (an errstate costs more than this RMSNorm mean's arithmetic)
        return total / acc.type(count)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0: NaN, as ExecuTorch's
        return total / acc.type(count)


@register("aten::mean.dtype_out")
def mean_dtype_out(self, dtype, out):
    """mean.dtype_out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    return mean_out(self, None, False, dtype, out)


@register("aten::prod.int_out")
def prod_int_out(self, dim, keepdim, dtype, out):
    """prod.int_out(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    axis = wrap_dim(dim, self.ndim) if self.ndim else None
    return _prod(self, axis, keepdim and self.ndim > 0, out)


@register("aten::prod.out")
def prod_out(self, dtype, out):
    """prod.out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    return _prod(self, None, False, out)


def _prod(x, axis, keepdims, out):
    # a bf16 product is a running product in bf16 (each input first converted to bf16): NumPy's multiply
    # reduction over ml_dtypes' bf16 runs element by element and rounds every step, as that loop does
    if is_bfloat16(out.dtype):
        x, acc = _bf16.as_bf16(x), out.dtype
    else:
        acc = _acc(out)
    with np.errstate(over="ignore"):
        return np.multiply.reduce(x, axis=axis, dtype=acc, keepdims=keepdims)


def _extreme(fn, self, dim, keepdim):
    axes = _axes(dim, self.ndim)
    if self.size == 0 and (axes is None or any(self.shape[a] == 0 for a in axes)):
        raise ValueError(f"cannot reduce over an empty dimension of a tensor of shape {list(self.shape)}")
    return fn(self, axis=axes, keepdims=keepdim)  # NaN propagates


@register("aten::amax.out")
def amax_out(self, dim, keepdim, out):
    """amax.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.max, self, dim, keepdim)


@register("aten::amin.out")
def amin_out(self, dim, keepdim, out):
    """amin.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.min, self, dim, keepdim)


def _whole(fn, bound, self, out):
    """max/min over every element; an empty tensor gives the out dtype's lowest/highest value (-inf/inf)."""
    if self.size == 0:
        dt = out.dtype
        if is_floating(dt):
            return np.array(bound * np.inf)
        if dt == np.bool_:
            return np.array(bound > 0)
        info = np.iinfo(dt)
        return np.array(info.min if bound < 0 else info.max)
    return fn(self)


@register("aten::max.unary_out")
def max_unary_out(self, out):
    """max.unary_out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return _whole(np.max, -1, self, out)


@register("aten::min.unary_out")
def min_unary_out(self, out):
    """min.unary_out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return _whole(np.min, 1, self, out)


def _arg(fn, self, dim, keepdim):
    """First index of the extreme value; the first NaN wins (np.argmax/argmin do the same)."""
    if self.dtype == np.bool_:
        raise TypeError("argmax/argmin do not support bool tensors")
    if dim is None or self.ndim == 0:
        if self.size == 0:
            raise ValueError("argmax/argmin of an empty tensor")
        r = np.asarray(fn(self.reshape(-1)))
        return r.reshape((1,) * self.ndim) if keepdim else r
    d = wrap_dim(dim, self.ndim)
    if self.shape[d] == 0:
        raise ValueError(f"argmax/argmin over dim {d} of size 0")
    return fn(self, axis=d, keepdims=keepdim)


@register("aten::argmax.out")
def argmax_out(self, dim, keepdim, out):
    """argmax.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _arg(np.argmax, self, dim, keepdim)


@register("aten::argmin.out")
def argmin_out(self, dim, keepdim, out):
    """argmin.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _arg(np.argmin, self, dim, keepdim)


def _dim_extreme(argfn, self, dim, keepdim):
    if self.ndim == 0:
        return self, np.zeros((), I64)
    d = wrap_dim(dim, self.ndim)
    if self.shape[d] == 0:
        raise ValueError(f"max/min over dim {d} of size 0")
    idx = argfn(self, axis=d, keepdims=True)
    vals = np.take_along_axis(self, idx, axis=d)
    if not keepdim:
        idx, vals = np.squeeze(idx, d), np.squeeze(vals, d)
    return vals, idx


@register("aten::max.dim_max")
def max_dim_max(self, dim, keepdim, max, max_values):  # noqa: A002  (schema names)
    """max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)"""
    return _dim_extreme(np.argmax, self, dim, keepdim)


@register("aten::min.dim_min")
def min_dim_min(self, dim, keepdim, min, min_indices):  # noqa: A002
    """min.dim_min(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) min, Tensor(b!) min_indices) -> (Tensor(a!) values, Tensor(b!) indices)"""
    return _dim_extreme(np.argmin, self, dim, keepdim)


@register("aten::any.all_out")
def any_all_out(self, out):
    """any.all_out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.asarray(np.any(self))


@register("aten::any.dims_out")
def any_dims_out(self, dim, keepdim, out):
    """any.dims_out(Tensor self, int[]? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    if dim is not None and len(dim) == 0:
        return self.astype(bool)  # an explicit empty dim list reduces nothing in ExecuTorch
    return np.any(self, axis=_axes(dim, self.ndim), keepdims=keepdim)


@register("aten::any.out")
def any_out(self, dim, keepdim, out):
    """any.out(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self.astype(bool)
    return np.any(self, axis=wrap_dim(dim, self.ndim), keepdims=keepdim)


def _var_mean(self, dim, correction, keepdim, out, innermost_fast_path=False):
    """(var, mean) in the output's dtype (halves in float32): two passes; NaN when nothing is left to
    divide by, as ExecuTorch."""
    if not is_floating(self.dtype):
        raise TypeError(f"var needs a floating tensor, got {self.dtype}")
    acc = _acc(out)
    x = self.astype(acc, copy=False)
    axes = _axes(dim, self.ndim)
    n = _count(self, axes)
    denom = n - correction
    shape = np.sum(x, axis=axes, keepdims=keepdim).shape
    if n == 0 or denom <= 0:
        nan = np.full(shape, np.nan, acc)
        return nan, nan
    if is_bfloat16(out.dtype):
        # var_mean's loop over one innermost dim of a contiguous same-dtype input divides by bf16(denominator)
        fast = innermost_fast_path and axes == (self.ndim - 1,) and self.dtype == out.dtype and \
            self.flags.c_contiguous
        return _var_mean_bf16(self, axes, n, denom, keepdim, shape, bf16_denominator=fast)
    mean = np.sum(x, axis=axes, keepdims=True) / acc.type(n)
    d = x - mean
    var = np.sum(d * d, axis=axes, keepdims=keepdim) / denom
    return var, mean.reshape(shape)


def _var_mean_bf16(x, axes, n, denom, keepdim, shape, bf16_denominator=False):
    """ExecuTorch's bf16 variance: a running bf16 sum, ``mean = sum / bf16(n)``, then a running bf16 sum of
    ``(v - mean) * (v - mean)`` (each step rounded), divided by the denominator in double, or (var_mean's
    innermost-dim loop) by the denominator as a bf16."""
    x = _bf16.as_bf16(x)
    mean = _bf16.running_sum(x, axes, keepdims=True) / _bf16.as_bf16(n)
    d = x - mean
    sq = _bf16.running_sum(d * d, axes, keepdims=keepdim)
    if bf16_denominator:
        return sq / _bf16.as_bf16(denom), mean.reshape(shape)
    var = (sq.astype(F64) / denom).astype(F32)  # stored through float, as the C++ double -> BFloat16 goes
    return var, mean.reshape(shape)


@register("aten::var.correction_out")
def var_correction_out(self, dim, correction, keepdim, out):
    """var.correction_out(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False, Tensor(a!) out) -> Tensor(a!)"""
    return _var_mean(self, dim, 1 if correction is None else correction, keepdim, out)[0]


@register("aten::var.out")
def var_out(self, dim, unbiased, keepdim, out):
    """var.out(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _var_mean(self, dim, 1 if unbiased else 0, keepdim, out)[0]


@register("aten::var_mean.correction_out")
def var_mean_correction_out(self, dim, correction, keepdim, out0, out1):
    """var_mean.correction_out(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))"""
    return _var_mean(self, dim, 1 if correction is None else correction, keepdim, out0, innermost_fast_path=True)


@register("aten::cumsum.out")
def cumsum_out(self, dim, dtype, out):
    """cumsum.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    acc = out.dtype  # ExecuTorch adds in the output type itself, halves included
    if self.ndim == 0:
        return self.astype(acc)
    with np.errstate(over="ignore"):
        return accumulate(np.add, self.astype(acc, copy=False), wrap_dim(dim, self.ndim), acc)


def _softmax(x, dim, log):
    if not is_floating(x.dtype):
        raise TypeError(f"softmax needs a floating tensor, got {x.dtype}")
    if x.ndim == 0:
        return np.zeros((), x.dtype) if log else np.ones((), x.dtype)
    d = wrap_dim(dim, x.ndim)
    bf16 = is_bfloat16(x.dtype)
    xf = x.astype(widen_half(x.dtype), copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        z = xf - np.max(xf, axis=d, keepdims=True)
        e = np.exp(z)
        if not log:
            # ExecuTorch's portable softmax adds the exponentials one by one in float
            s = sum_in_order(e, (d,), F32, keepdims=True) if bf16 else np.sum(e, axis=d, keepdims=True)
            return e / s
        s = np.sum(e, axis=d, keepdims=True)
        if bf16 and d == x.ndim - 1:
            # its optimized log_softmax over the last dim (ATen's lastdim kernel) keeps the sum of the
            # exponentials, and then its log, in bf16 buffers: both are rounded to bf16
            log_sum = np.log(_bf16.as_bf16(s).astype(F32))
            return z - _bf16.as_bf16(log_sum).astype(F32)
        return z - np.log(s)


@register("aten::_softmax.out")
def softmax_out(self, dim, half_to_float, out):
    """_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> Tensor(a!)"""
    return _softmax(self, dim, log=False)


@register("aten::_log_softmax.out")
def log_softmax_out(self, dim, half_to_float, out):
    """_log_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> Tensor(a!)"""
    return _softmax(self, dim, log=True)
