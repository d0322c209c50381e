"""Kernels that create tensors: full, full_like, zeros, ones, fill, scalar_tensor, arange, empty.

Fill values convert as ExecuTorch's ``check_overflow_scalar_cast``: a value the output dtype cannot hold is
an error. Example::

    >>> import numpy as np
    >>> from pterun.kernels.creation import full_out
    >>> full_out((2,), 7, np.empty(2, np.int64))
    array([7, 7])
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels._common import F64, checked_scalar
from pterun.kernels.registry import register


@register("aten::full.out")
def full_out(size, fill_value, out):
    """full.out(SymInt[] size, Scalar fill_value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(tuple(size), checked_scalar(fill_value, out.dtype), dtype=out.dtype)


@register("aten::full_like.out", shape_only=(0,))
def full_like_out(self, fill_value, memory_format, out):
    """full_like.out(Tensor self, Scalar fill_value, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(self.shape, checked_scalar(fill_value, out.dtype), dtype=out.dtype)


@register("aten::zeros.out")
def zeros_out(size, out):
    """zeros.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(tuple(size), dtype=out.dtype)


@register("aten::ones.out")
def ones_out(size, out):
    """ones.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.ones(tuple(size), dtype=out.dtype)


@register("aten::fill.Scalar_out")
def fill_scalar_out(self, value, out):
    """fill.Scalar_out(Tensor self, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.full(self.shape, checked_scalar(value, self.dtype), dtype=self.dtype)


@register("aten::fill.Tensor_out")
def fill_tensor_out(self, value, out):
    """fill.Tensor_out(Tensor self, Tensor value, *, Tensor(a!) out) -> Tensor(a!)"""
    if value.ndim != 0:
        raise ValueError(f"fill value must be a 0-d tensor, got shape {list(value.shape)}")
    with np.errstate(invalid="ignore", over="ignore"):
        return np.full(self.shape, value.astype(self.dtype), dtype=self.dtype)


@register("aten::scalar_tensor.out")
def scalar_tensor_out(s, out):
    """scalar_tensor.out(Scalar s, *, Tensor(a!) out) -> Tensor(a!)"""
    return checked_scalar(s, out.dtype)


@register("aten::empty.out", foldable=False)  # a buffer later instructions fill
def empty_out(size, memory_format, out):
    """empty.out(SymInt[] size, *, MemoryFormat? memory_format=None, Tensor(a!) out) -> Tensor(a!)"""
    return np.zeros(tuple(size), dtype=out.dtype)  # contents are undefined; zeros are as good as any


@register("dim_order_ops::_empty_dim_order.out", foldable=False)
def empty_dim_order_out(size, dim_order, out):
    """_empty_dim_order.out(int[] size, *, int[]? dim_order=None, Tensor(a!) out) -> Tensor(a!)"""
    if dim_order is not None and sorted(dim_order) != list(range(len(size))):
        raise ValueError(f"dim_order {list(dim_order)} is not a permutation for size {list(size)}")
    return np.zeros(tuple(size), dtype=out.dtype)


@register("aten::arange.out")
def arange_out(end, out):
    """arange.out(Scalar end, *, Tensor(a!) out) -> Tensor(a!)"""
    return arange_start_out(0, end, 1, out)


@register("aten::arange.start_out")
def arange_start_out(start, end, step, out):
    """arange.start_out(Scalar start, Scalar end, Scalar step=1, *, Tensor(a!) out) -> Tensor(a!)"""
    if step == 0 or (end - start) / step < 0 and math.ceil((end - start) / step) != 0:
        raise ValueError(f"arange({start}, {end}, {step}) has a zero step or runs the wrong way")
    n = math.ceil((float(end) - float(start)) / float(step))
    # ExecuTorch: out[i] = static_cast<T>(start + i * step) in double
    with np.errstate(invalid="ignore", over="ignore"):
        return (float(start) + np.arange(n, dtype=F64) * float(step)).astype(out.dtype)
