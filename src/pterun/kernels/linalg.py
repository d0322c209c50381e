"""Matrix products: mm, bmm, addmm, linear.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.linalg import mm_out
    >>> mm_out(np.eye(2, dtype=np.float32), np.ones((2, 3), np.float32), np.empty((2, 3), np.float32)).shape
    (2, 3)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import as_dtype, compute_dtype
from pterun.kernels.registry import register


def _mat(a, b, out):
    ct = compute_dtype(out.dtype, a, b)
    return as_dtype(a, ct), as_dtype(b, ct)


@register("aten::mm.out")
def mm_out(self, mat2, out):
    """mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)"""
    a, b = _mat(self, mat2, out)
    return np.matmul(a, b)


@register("aten::bmm.out")
def bmm_out(self, mat2, out):
    """bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim != 3 or mat2.ndim != 3:
        raise ValueError(f"bmm needs 3-D tensors, got shapes {list(self.shape)} and {list(mat2.shape)}")
    a, b = _mat(self, mat2, out)
    return np.matmul(a, b)


@register("aten::addmm.out")
def addmm_out(self, mat1, mat2, beta, alpha, out):
    """addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    a, b = _mat(mat1, mat2, out)
    prod = np.matmul(a, b)
    if alpha != 1:
        prod = prod * alpha
    if beta == 0:
        return prod
    bias = as_dtype(self, prod.dtype)
    return prod + (bias if beta == 1 else bias * beta)


@register("aten::linear.out")
def linear_out(input, weight, bias, out):  # noqa: A002  (schema names)
    """linear.out(Tensor input, Tensor weight, Tensor? bias=None, *, Tensor(a!) out) -> Tensor(a!)"""
    a, w = _mat(input, weight, out)
    y = np.matmul(a, w.T)
    if bias is not None:
        y += as_dtype(bias, y.dtype)
    return y
