"""Kernels that create tensors: full, full_like, zeros, ones, fill, scalar_tensor, arange, empty.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.creation import full_out
    >>> full_out((2,), 7, np.empty(2, np.int64))
    array([7, 7])
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels._common import scalar_value
from pterun.kernels.registry import register


@register("aten::full.out")
def full_out(size, fill_value, out):
    """full.out(SymInt[] size, Scalar fill_value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(tuple(size), scalar_value(fill_value, out.dtype), dtype=out.dtype)


@register("aten::full_like.out")
def full_like_out(self, fill_value, memory_format, out):
    """full_like.out(Tensor self, Scalar fill_value, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(self.shape, scalar_value(fill_value, out.dtype), dtype=out.dtype)


@register("aten::zeros.out")
def zeros_out(size, out):
    """zeros.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(tuple(size), dtype=out.dtype)


@register("aten::ones.out")
def ones_out(size, out):
    """ones.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.ones(tuple(size), dtype=out.dtype)


@register("aten::zeros_like.out")
def zeros_like_out(self, memory_format, out):
    """zeros_like.out(Tensor self, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(self.shape, dtype=out.dtype)


@register("aten::ones_like.out")
def ones_like_out(self, memory_format, out):
    """ones_like.out(Tensor self, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.ones(self.shape, dtype=out.dtype)


@register("aten::fill.Scalar_out")
def fill_scalar_out(self, value, out):
    """fill.Scalar_out(Tensor self, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(self.shape, scalar_value(value, out.dtype), dtype=out.dtype)


@register("aten::fill.Tensor_out")
def fill_tensor_out(self, value, out):
    """fill.Tensor_out(Tensor self, Tensor value, *, Tensor(a!) out) -> Tensor(a!)"""
    if value.ndim != 0:
        raise ValueError(f"fill value must be a 0-d tensor, got shape {list(value.shape)}")
    return np.full(self.shape, value.astype(out.dtype), dtype=out.dtype)


@register("aten::scalar_tensor.out")
def scalar_tensor_out(s, out):
    """scalar_tensor.out(Scalar s, *, Tensor(a!) out) -> Tensor(a!)"""
    return scalar_value(s, out.dtype)


@register("aten::empty.out")
def empty_out(size, memory_format, out):
    """empty.out(SymInt[] size, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(tuple(size), dtype=out.dtype)


@register("dim_order_ops::_empty_dim_order.out")
def empty_dim_order_out(size, dim_order, out):
    """_empty_dim_order.out(int[] size, *, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(tuple(size), dtype=out.dtype)


@register("aten::arange.out")
def arange_out(end, out):
    """arange.out(Scalar end, *, Tensor(a!) out) -> Tensor(a!)"""
    return arange_start_out(0, end, 1, out)


@register("aten::arange.start_out")
def arange_start_out(start, end, step, out):
    """arange.start_out(Scalar start, Scalar end, Scalar step=1, *, Tensor(a!) out) -> Tensor(a!)"""
    if step == 0:
        raise ValueError("arange step must be non-zero")
    n = max(0, math.ceil((end - start) / step))
    return (start + np.arange(n, dtype=np.float64) * step).astype(out.dtype) if not all(
        isinstance(v, int) for v in (start, end, step)) else np.arange(start, start + n * step, step)[:n]
