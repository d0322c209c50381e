"""Indexing kernels: embedding, index, index_select, gather, masked_fill, index_put.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.indexing import embedding_out
    >>> embedding_out(np.eye(3, dtype=np.float32), np.array([2, 0]), -1, False, False, None).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import as_dtype, wrap_dim
from pterun.kernels.registry import register


def _check_range(index, n, what):
    if index.size and (index.min() < -n or index.max() >= n):
        bad = index[(index < -n) | (index >= n)].flat[0]
        raise IndexError(f"{what} index {bad} is out of range for size {n}")


@register("aten::embedding.out")
def embedding_out(weight, indices, padding_idx, scale_grad_by_freq, sparse, out):
    """embedding.out(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False, *, Tensor(a!) out) -> Tensor(a!)"""
    _check_range(indices, weight.shape[0], "embedding")
    return np.take(weight, indices, axis=0)


@register("aten::index_select.out")
def index_select_out(self, dim, index, out):
    """index_select.out(Tensor self, int dim, Tensor index, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self.reshape(index.shape) if index.size == 1 else self
    d = wrap_dim(dim, self.ndim)
    _check_range(index, self.shape[d], "index_select")
    return np.take(self, index.reshape(-1), axis=d)


@register("aten::gather.out")
def gather_out(self, dim, index, sparse_grad, out):
    """gather.out(Tensor self, int dim, Tensor index, *, bool sparse_grad=False, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    _check_range(index, self.shape[d] if self.ndim else 1, "gather")
    if index.shape != self.shape:
        # gather reads only the index's extent of the other dims
        src = self[tuple(slice(0, s) if i != d else slice(None) for i, s in enumerate(index.shape))]
    else:
        src = self
    return np.take_along_axis(src, index, axis=d)


def _index_tuple(indices, ndim):
    idx = []
    for i in indices:
        if i is None:
            idx.append(slice(None))
        elif i.dtype == np.bool_ or i.dtype == np.uint8:
            idx.extend(np.nonzero(i.astype(bool)))
        else:
            idx.append(i)
    return tuple(idx)


@register("aten::index.Tensor_out")
def index_tensor_out(self, indices, out):
    """index.Tensor_out(Tensor self, Tensor?[] indices, *, Tensor(a!) out) -> Tensor(a!)"""
    return self[_index_tuple(indices, self.ndim)]


@register("aten::index_put.out")
def index_put_out(self, indices, values, accumulate, out):
    """index_put.out(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    idx = _index_tuple(indices, self.ndim)
    v = as_dtype(values, self.dtype)
    if accumulate:
        np.add.at(result, idx, v)
    else:
        result[idx] = v
    return result


@register("aten::index_put_")
def index_put_(self, indices, values, accumulate):
    """index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)"""
    return index_put_out(self, indices, values, accumulate, self)


@register("aten::masked_fill.Scalar_out")
def masked_fill_scalar_out(self, mask, value, out):
    """masked_fill.Scalar_out(Tensor self, Tensor mask, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.where(mask.astype(bool, copy=False), np.array(value).astype(self.dtype), self)


@register("aten::masked_select.out")
def masked_select_out(self, mask, out):
    """masked_select.out(Tensor self, Tensor mask, *, Tensor(a!) out) -> Tensor(a!)"""
    a, m = np.broadcast_arrays(self, mask.astype(bool, copy=False))
    return a[m]


@register("aten::scatter.src_out")
def scatter_src_out(self, dim, index, src, out):
    """scatter.src_out(Tensor self, int dim, Tensor index, Tensor src, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    d = wrap_dim(dim, self.ndim)
    src = src[tuple(slice(0, s) for s in index.shape)]
    np.put_along_axis(result, index, src.astype(self.dtype, copy=False), axis=d)
    return result


@register("aten::scatter.value_out")
def scatter_value_out(self, dim, index, value, out):
    """scatter.value_out(Tensor self, int dim, Tensor index, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    np.put_along_axis(result, index, np.array(value).astype(self.dtype), axis=wrap_dim(dim, self.ndim))
    return result


@register("aten::nonzero.out")
def nonzero_out(self, out):
    """nonzero.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.stack(np.nonzero(self), axis=-1) if self.ndim else np.zeros((int(bool(self)), 0), np.int64)
