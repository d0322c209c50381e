"""Indexing kernels: embedding, index, index_select, gather, index_put, masked fill/select/scatter,
scatter (src, value, add), nonzero, repeat_interleave.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.indexing import embedding_out
    >>> embedding_out(np.eye(3, dtype=np.float32), np.array([2, 0]), -1, False, False, None).tolist()
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import as_dtype, scalar_value, wrap_dim
from pterun.kernels.registry import register


#: index arrays this small are range-checked as a Python list: a decode step's one token in ~2 us where two NumPy
#: reductions take ~6 (and ~35 against ~70 when the caches are cold after an LLM's invoke)
_FEW = 16


def check_range(index, n, what, allow_negative=False):
    """Raise IndexError naming the first index of ``index`` outside ``[0, n)`` (``[-n, n)`` with
    ``allow_negative``); ``what`` names the operator. Merged graphs that gather check the caller's ids with it too
    (:mod:`pterun.delegates.xnnpack.checked`)."""
    low = -n if allow_negative else 0
    if index.size <= _FEW:
        for i in index.ravel().tolist():
            if not low <= i < n:
                raise IndexError(f"{what} index {i} is out of range for size {n}")
        return
    if index.min() < low or index.max() >= n:
        bad = index[(index < low) | (index >= n)].flat[0]
        raise IndexError(f"{what} index {bad} is out of range for size {n}")


def _check_index_dtype(index, what):
    if index.dtype not in (np.int64, np.int32):
        raise TypeError(f"{what} indices must be int64 or int32, got {index.dtype}")


@register("aten::embedding.out")
def embedding_out(weight, indices, padding_idx, scale_grad_by_freq, sparse, out):
    """embedding.out(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False, *, Tensor(a!) out) -> Tensor(a!)"""
    _check_index_dtype(indices, "embedding")
    check_range(indices, weight.shape[0], "embedding")  # ExecuTorch rejects negative indices
    return weight.take(indices, axis=0)


@register("aten::index_select.out")
def index_select_out(self, dim, index, out):
    """index_select.out(Tensor self, int dim, Tensor index, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim == 0:
        return self.reshape(index.shape) if index.size == 1 else self
    d = wrap_dim(dim, self.ndim)
    _check_index_dtype(index, "index_select")
    check_range(index, self.shape[d], "index_select")
    return np.take(self, index.reshape(-1), axis=d)


@register("aten::gather.out")
def gather_out(self, dim, index, sparse_grad, out):
    """gather.out(Tensor self, int dim, Tensor index, *, bool sparse_grad=False, Tensor(a!) out) -> Tensor(a!)"""
    d = wrap_dim(dim, self.ndim)
    check_range(index, self.shape[d] if self.ndim else 1, "gather")
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


def _put(target, indices, values, accumulate):
    idx = _index_tuple(indices, target.ndim)
    v = as_dtype(values, target.dtype).copy()  # values may alias target's memory
    if accumulate:
        np.add.at(target, idx, v)
    else:
        target[idx] = v


@register("aten::index_put.out")
def index_put_out(self, indices, values, accumulate, out):
    """index_put.out(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    _put(result, indices, values, accumulate)
    return result


@register("aten::index_put_")
def index_put_(self, indices, values, accumulate):
    """index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)"""
    if not self.flags.writeable:
        return index_put_out(self, indices, values, accumulate, None)
    # in place on the live tensor (e.g. a KV cache): only the indexed rows are touched; handing back the
    # very array the interpreter passed makes its write-back a no-op
    _put(self, indices, values, accumulate)
    return self


@register("aten::masked_fill.Scalar_out")
def masked_fill_scalar_out(self, mask, value, out):
    """masked_fill.Scalar_out(Tensor self, Tensor mask, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.where(mask.astype(bool, copy=False), scalar_value(value, self.dtype), self)


@register("aten::masked_select.out")
def masked_select_out(self, mask, out):
    """masked_select.out(Tensor self, Tensor mask, *, Tensor(a!) out) -> Tensor(a!)"""
    a, m = np.broadcast_arrays(self, mask.astype(bool, copy=False))
    return a[m]


def _scatter_coords(self, dim, index, what):
    """Index tuples addressing ``self`` at ``index``'s coordinates with dim ``dim`` replaced by its values."""
    d = wrap_dim(dim, self.ndim)
    check_range(index, self.shape[d] if self.ndim else 1, what)
    coords = list(np.indices(index.shape, sparse=True))
    src_coords = tuple(coords)
    coords[d] = index
    return tuple(coords), src_coords


@register("aten::scatter.src_out")
def scatter_src_out(self, dim, index, src, out):
    """scatter.src_out(Tensor self, int dim, Tensor index, Tensor src, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    if index.size and self.ndim:
        target, at = _scatter_coords(self, dim, index, "scatter")
        result[target] = src[at]  # duplicates: the last write wins, as ExecuTorch's sequential loop
    elif index.size:
        result[...] = src.reshape(-1)[0]
    return result


@register("aten::scatter.value_out")
def scatter_value_out(self, dim, index, value, out):
    """scatter.value_out(Tensor self, int dim, Tensor index, Scalar value, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    if index.size and self.ndim:
        result[_scatter_coords(self, dim, index, "scatter")[0]] = scalar_value(value, self.dtype)
    elif index.size:
        result[...] = scalar_value(value, self.dtype)
    return result


@register("aten::nonzero.out")
def nonzero_out(self, out):
    """nonzero.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.stack(np.nonzero(self), axis=-1) if self.ndim else np.zeros((int(bool(self)), 0), np.int64)


@register("aten::scatter_add.out")
def scatter_add_out(self, dim, index, src, out):
    """scatter_add.out(Tensor self, int dim, Tensor index, Tensor src, *, Tensor(a!) out) -> Tensor(a!)"""
    result = self.copy()
    if index.size == 0:
        return result
    if self.ndim == 0:
        return result + src.reshape(-1)[0] * index.size
    target, at = _scatter_coords(self, dim, index, "scatter_add")
    np.add.at(result, target, src[at].astype(self.dtype, copy=False))  # src read at index's coordinates
    return result


@register("aten::masked_scatter.out")
def masked_scatter_out(self, mask, source, out):
    """masked_scatter.out(Tensor self, Tensor mask, Tensor source, *, Tensor(a!) out) -> Tensor(a!)"""
    x, m = np.broadcast_arrays(self, mask.astype(bool, copy=False))
    result = x.copy()
    n = int(m.sum())
    if n > source.size:
        raise ValueError(f"masked_scatter needs {n} source elements, source has {source.size}")
    result[m] = source.reshape(-1)[:n]  # consecutive source elements, in row-major mask order
    return result


@register("aten::repeat_interleave.Tensor_out")
def repeat_interleave_tensor_out(repeats, output_size, out):
    """repeat_interleave.Tensor_out(Tensor repeats, *, SymInt? output_size=None, Tensor(a!) out) -> Tensor(a!)"""
    if repeats.ndim != 1 or repeats.dtype not in (np.int32, np.int64):
        raise ValueError(f"repeats must be a 1-D int32/int64 tensor, got {repeats.dtype} {list(repeats.shape)}")
    if repeats.size and repeats.min() < 0:
        raise ValueError("repeats cannot be negative")
    total = int(repeats.sum())
    if output_size is not None and output_size != total:
        raise ValueError(f"output_size {output_size} must equal repeats.sum() = {total}")
    return np.repeat(np.arange(repeats.size, dtype=repeats.dtype), repeats)
