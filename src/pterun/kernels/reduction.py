"""Reductions and scans: sum, mean, amax/amin, argmax/argmin, any, var, max.dim, cumsum, topk, softmax.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.reduction import sum_out
    >>> sum_out(np.ones((2, 3), np.float32), [1], False, None, np.empty(2, np.float32))
    array([3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import F32, I64, is_floating, is_integral, reduce_axes, wrap_dim
from pterun.kernels.registry import register


def _acc_dtype(x, dtype, out):
    """Accumulation dtype: the requested dtype, else out's; integer sums accumulate in int64."""
    if dtype is not None:
        return dtype
    d = out.dtype
    if is_integral(d, include_bool=True):
        return I64
    if d.itemsize < 4:
        return F32
    return d


@register("aten::sum.IntList_out")
def sum_out(self, dim, keepdim, dtype, out):
    """sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.sum(self, axis=reduce_axes(dim, self.ndim), dtype=_acc_dtype(self, dtype, out), keepdims=keepdim)


@register("aten::mean.out")
def mean_out(self, dim, keepdim, dtype, out):
    """mean.out(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    acc = _acc_dtype(self, dtype, out)
    if not is_floating(acc):
        raise TypeError(f"mean needs a floating output dtype, got {out.dtype}")
    return np.mean(self, axis=reduce_axes(dim, self.ndim), dtype=acc, keepdims=keepdim)


@register("aten::mean.dtype_out")
def mean_dtype_out(self, dtype, out):
    """mean.dtype_out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    return mean_out(self, None, False, dtype, out)


@register("aten::sum.out")
def sum_dtype_out(self, dtype, out):
    """sum.out(Tensor self, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    return sum_out(self, None, False, dtype, out)


def _extreme(fn, self, dim, keepdim):
    axes = reduce_axes(dim, self.ndim)
    if self.size == 0:
        raise ValueError("cannot reduce an empty tensor")
    return fn(self, axis=axes, keepdims=keepdim)


@register("aten::amax.out")
def amax_out(self, dim, keepdim, out):
    """amax.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.max, self, dim, keepdim)


@register("aten::amin.out")
def amin_out(self, dim, keepdim, out):
    """amin.out(Tensor self, int[1] dim=[], bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _extreme(np.min, self, dim, keepdim)


def _arg(fn, self, dim, keepdim):
    if dim is None:
        r = fn(self.reshape(-1))
        return np.asarray(r).reshape((1,) * self.ndim if keepdim else ())
    return fn(self, axis=wrap_dim(dim, self.ndim), keepdims=keepdim) if self.ndim else np.asarray(0)


@register("aten::argmax.out")
def argmax_out(self, dim, keepdim, out):
    """argmax.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _arg(np.argmax, self, dim, keepdim)


@register("aten::argmin.out")
def argmin_out(self, dim, keepdim, out):
    """argmin.out(Tensor self, int? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _arg(np.argmin, self, dim, keepdim)


@register("aten::max.dim_max")
def max_dim_max(self, dim, keepdim, max, max_values):  # noqa: A002  (schema names)
    """max.dim_max(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) max, Tensor(b!) max_values) -> (Tensor(a!) values, Tensor(b!) indices)"""
    d = wrap_dim(dim, self.ndim)
    idx = np.argmax(self, axis=d, keepdims=True) if self.ndim else np.asarray(0)
    vals = np.take_along_axis(self, idx, axis=d) if self.ndim else self
    if not keepdim and self.ndim:
        idx, vals = np.squeeze(idx, d), np.squeeze(vals, d)
    return vals, idx


@register("aten::min.dim_min")
def min_dim_min(self, dim, keepdim, min, min_indices):  # noqa: A002
    """min.dim_min(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) min, Tensor(b!) min_indices) -> (Tensor(a!) values, Tensor(b!) indices)"""
    d = wrap_dim(dim, self.ndim)
    idx = np.argmin(self, axis=d, keepdims=True) if self.ndim else np.asarray(0)
    vals = np.take_along_axis(self, idx, axis=d) if self.ndim else self
    if not keepdim and self.ndim:
        idx, vals = np.squeeze(idx, d), np.squeeze(vals, d)
    return vals, idx


@register("aten::any.all_out")
def any_all_out(self, out):
    """any.all_out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.asarray(np.any(self))


@register("aten::any.dims_out")
def any_dims_out(self, dim, keepdim, out):
    """any.dims_out(Tensor self, int[]? dim=None, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.any(self, axis=reduce_axes(dim, self.ndim), keepdims=keepdim)


@register("aten::any.out")
def any_out(self, dim, keepdim, out):
    """any.out(Tensor self, int dim, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.any(self, axis=wrap_dim(dim, self.ndim), keepdims=keepdim)


@register("aten::all.all_out")
def all_all_out(self, out):
    """all.all_out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.asarray(np.all(self))


def _var(self, dim, correction, keepdim, out):
    x = self if is_floating(self.dtype) and self.dtype.itemsize >= 4 else self.astype(F32)
    return np.var(x, axis=reduce_axes(dim, self.ndim), ddof=correction, keepdims=keepdim)


@register("aten::var.correction_out")
def var_correction_out(self, dim, correction, keepdim, out):
    """var.correction_out(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False, Tensor(a!) out) -> Tensor(a!)"""
    return _var(self, dim, 1 if correction is None else correction, keepdim, out)


@register("aten::var.out")
def var_out(self, dim, unbiased, keepdim, out):
    """var.out(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)"""
    return _var(self, dim, 1 if unbiased else 0, keepdim, out)


@register("aten::cumsum.out")
def cumsum_out(self, dim, dtype, out):
    """cumsum.out(Tensor self, int dim, *, ScalarType? dtype=None, Tensor(a!) out) -> Tensor(a!)"""
    acc = dtype if dtype is not None else (I64 if is_integral(out.dtype, True) else out.dtype)
    if self.ndim == 0:
        return self.astype(acc)
    return np.cumsum(self, axis=wrap_dim(dim, self.ndim), dtype=acc)


@register("aten::topk.values")
def topk_values(self, k, dim, largest, sorted, values, indices):  # noqa: A002
    """topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)"""
    if self.ndim == 0:
        return self.copy(), np.zeros((), I64)
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is out of range for a dimension of size {n}")
    key = -self if largest and self.dtype != np.bool_ else self
    if largest and not is_floating(self.dtype) and self.dtype != np.bool_ and np.issubdtype(self.dtype, np.unsignedinteger):
        key = -(self.astype(np.int64))
    # stable sort on the key gives ties in index order, as PyTorch's CPU kernel does
    order = np.argsort(key, axis=d, kind="stable")
    idx = np.take(order, np.arange(k), axis=d)
    return np.take_along_axis(self, idx, axis=d), idx


def _softmax(x, dim, log):
    if x.ndim == 0:
        return np.zeros((), x.dtype) if log else np.ones((), x.dtype)
    d = wrap_dim(dim, x.ndim)
    xf = x if x.dtype.itemsize >= 4 else x.astype(F32)
    m = np.max(xf, axis=d, keepdims=True)
    z = xf - m
    e = np.exp(z)
    s = np.sum(e, axis=d, keepdims=True)
    return z - np.log(s) if log else e / s


@register("aten::_softmax.out")
def softmax_out(self, dim, half_to_float, out):
    """_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> Tensor(a!)"""
    return _softmax(self, dim, log=False)


@register("aten::_log_softmax.out")
def log_softmax_out(self, dim, half_to_float, out):
    """_log_softmax.out(Tensor self, int dim, bool half_to_float, *, Tensor(a!) out) -> Tensor(a!)"""
    return _softmax(self, dim, log=True)
