"""Selection kernels: topk.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.sort import topk_values
    >>> v, i = topk_values(np.array([3.0, 1.0, 2.0]), 2, -1, True, True, None, None)
    >>> v.tolist(), i.tolist()
    ([3.0, 2.0], [0, 2])
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import I64, wrap_dim
from pterun.kernels.registry import register


def sorted_indices(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Indices that sort ``x`` along ``axis`` with NaN counted as the largest value and ties kept in
    index order (ExecuTorch's topk orders ties however std::partial_sort leaves them)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
    return (n - 1) - np.flip(order, axis)


@register("aten::topk.values")
def topk_values(self, k, dim, largest, sorted, values, indices):  # noqa: A002  (schema names)
    """topk.values(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True, *, Tensor(a!) values, Tensor(b!) indices) -> (Tensor(a!) values, Tensor(b!) indices)"""
    if self.ndim == 0:
        if k not in (0, 1):
            raise ValueError(f"k={k} is out of range for a 0-d tensor")
        return self.copy(), np.zeros((), I64)
    d = wrap_dim(dim, self.ndim)
    n = self.shape[d]
    if not 0 <= k <= n:
        raise ValueError(f"k={k} is out of range for dim {d} of size {n}")
    idx = np.take(sorted_indices(self, d, largest), np.arange(k), axis=d).astype(I64, copy=False)
    return np.take_along_axis(self, idx, axis=d), idx
