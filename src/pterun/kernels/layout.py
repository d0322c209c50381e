"""Data-movement kernels beyond plain views: flip, roll, repeat, tril, diagonal, narrow, unfold, as_strided,
pixel (un)shuffle, and the scatter-into-a-copy ops select_scatter / slice_scatter.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.layout import roll_out
    >>> roll_out(np.arange(4), (1,), (0,), None).tolist()
    [3, 0, 1, 2]
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pterun.kernels._common import wrap_dim, wrap_dims
from pterun.kernels.registry import register


@register("aten::flip.out")
def flip_out(self, dims, out):
    """flip.out(Tensor self, int[] dims, *, Tensor(a!) out) -> Tensor(a!)"""
    axes = wrap_dims(dims, self.ndim)
    if len(set(axes)) != len(axes):
        raise ValueError(f"flip dims {list(dims)} repeat a dimension")
    return np.flip(self, axes) if self.ndim and axes else self


@register("aten::roll.out")
def roll_out(self, shifts, dims, out):
    """roll.out(Tensor self, SymInt[1] shifts, int[1] dims=[], *, Tensor(a!) out) -> Tensor(a!)"""
    if not dims:
        if len(shifts) != 1:
            raise ValueError(f"roll without dims takes one shift, got {list(shifts)}")
        return np.roll(self.reshape(-1), shifts[0]).reshape(self.shape)
    if len(shifts) != len(dims):
        raise ValueError(f"roll got {len(shifts)} shifts for {len(dims)} dims")
    if self.size == 0:
        return self
    return np.roll(self, tuple(shifts), wrap_dims(dims, self.ndim))  # shifts of a repeated dim add up


@register("aten::repeat.out")
def repeat_out(self, repeats, out):
    """repeat.out(Tensor self, SymInt[] repeats, *, Tensor(a!) out) -> Tensor(a!)"""
    if len(repeats) < self.ndim or any(r < 0 for r in repeats):
        raise ValueError(f"repeat needs {self.ndim} or more non-negative repeats, got {list(repeats)}")
    x = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    return np.tile(x, tuple(repeats))


@register("aten::tril.out")
def tril_out(self, diagonal, out):
    """tril.out(Tensor self, SymInt diagonal=0, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim < 2:
        raise ValueError(f"tril needs a tensor with 2 or more dims, got shape {list(self.shape)}")
    return np.tril(self, diagonal)


@register("aten::diagonal_copy.out")
def diagonal_copy_out(self, offset, dim1, dim2, out):
    """diagonal_copy.out(Tensor self, int offset=0, int dim1=0, int dim2=1, *, Tensor(a!) out) -> Tensor(a!)"""
    d1, d2 = wrap_dim(dim1, self.ndim), wrap_dim(dim2, self.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal dims must differ, got {dim1} and {dim2}")
    return np.diagonal(self, offset, d1, d2)


@register("aten::narrow_copy.out")
def narrow_copy_out(self, dim, start, length, out):
    """narrow_copy.out(Tensor self, int dim, SymInt start, SymInt length, *, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if start < 0:
        start += n
    if not (0 <= start <= n and 0 <= length <= n - start):
        raise IndexError(f"narrow start {start} length {length} is out of range for dim {d} of size {n}")
    return np.take(self, np.arange(start, start + length), axis=d) if length != n else self


@register("aten::unfold_copy.out")
def unfold_copy_out(self, dimension, size, step, out):
    """unfold_copy.out(Tensor self, int dimension, int size, int step, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self.reshape(1)
    d = wrap_dim(dimension, self.ndim)
    if size > self.shape[d] or step <= 0 or size < 0:
        raise ValueError(f"unfold size {size} step {step} does not fit dim {d} of size {self.shape[d]}")
    windows = sliding_window_view(self, size, axis=d)  # window as the new last dim
    index = [slice(None)] * windows.ndim
    index[d] = slice(None, None, step)
    return windows[tuple(index)]


@register("aten::as_strided_copy.out")
def as_strided_copy_out(self, size, stride, storage_offset, out):
    """as_strided_copy.out(Tensor self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None, *, Tensor(a!) out) -> Tensor(a!)"""
    if len(size) != len(stride) or any(s < 0 for s in stride):
        raise ValueError(f"as_strided needs matching non-negative strides, got size {list(size)} stride {list(stride)}")
    flat = self.ravel(order="K")  # the tensor's storage, in memory (dim) order
    index = np.full(tuple(size), storage_offset or 0, np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        index = index + (np.arange(n) * s).reshape(shape)
    if index.size and (index.min() < 0 or index.max() >= flat.size):
        raise IndexError(f"as_strided size {list(size)} stride {list(stride)} offset {storage_offset} reads "
                         f"outside a storage of {flat.size} elements")
    return flat[index]


@register("aten::pixel_shuffle.out")
def pixel_shuffle_out(self, upscale_factor, out):
    """pixel_shuffle.out(Tensor self, int upscale_factor, *, Tensor(a!) out) -> Tensor(a!)"""
    r = upscale_factor
    *lead, c, h, w = self.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: {c} channels are not divisible by {r}^2")
    n = len(lead)
    x = self.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


@register("aten::pixel_unshuffle.out")
def pixel_unshuffle_out(self, downscale_factor, out):
    """pixel_unshuffle.out(Tensor self, int downscale_factor, *, Tensor(a!) out) -> Tensor(a!)"""
    r = downscale_factor
    *lead, c, h, w = self.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: {h}x{w} is not divisible by {r}")
    n = len(lead)
    x = self.reshape(*lead, c, h // r, r, w // r, r)
    x = x.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


@register("aten::select_scatter.out")
def select_scatter_out(self, src, dim, index, out):
    """select_scatter.out(Tensor self, Tensor src, int dim, SymInt index, *, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select_scatter index {index} is out of range for dim {d} of size {n}")
    result = self.copy()
    target = [slice(None)] * self.ndim
    target[d] = index
    result[tuple(target)] = src
    return result


@register("aten::slice_scatter.out")
def slice_scatter_out(self, src, dim, start, end, step, out):
    """slice_scatter.out(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1, *, Tensor(a!) out) -> Tensor(a!)"""
    if step <= 0:
        raise ValueError(f"slice step must be positive, got {step}")
    d = wrap_dim(dim, self.ndim)
    result = self.copy()
    target = [slice(None)] * self.ndim
    target[d] = slice(start, end, step)
    result[tuple(target)] = src
    return result
