"""Matrix products and distances: mm, bmm, addmm, linear, _cdist_forward, _pdist_forward.

Products compute in the inputs' dtype (half types in float32, then rounded by the output write), except a bf16
``addmm``, which ExecuTorch's portable kernel accumulates in bf16 (:mod:`pterun.kernels._bf16`). Example::

    >>> import numpy as np
    >>> from pterun.kernels.linalg import mm_out
    >>> mm_out(np.eye(2, dtype=np.float32), np.ones((2, 3), np.float32), np.empty((2, 3), np.float32)).shape
    (2, 3)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels import _bf16, fast
from pterun.kernels._common import as_dtype, is_bfloat16, promote_dtypes, to_compute, widen_half
from pterun.kernels.registry import register


def _mat(*arrays):
    ct = widen_half(promote_dtypes(*(a.dtype for a in arrays)))
    if ct == np.bool_:
        raise TypeError("matrix products do not support bool tensors")
    return [as_dtype(a, ct) for a in arrays]


def _check_rank(name, want, *arrays):
    if any(a.ndim != want for a in arrays):
        raise ValueError(f"{name} needs {want}-D tensors, got shapes {[list(a.shape) for a in arrays]}")


@register("aten::mm.out", specialize=fast.mm)
def mm_out(self, mat2, out):
    """mm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)"""
    _check_rank("mm", 2, self, mat2)
    a, b = _mat(self, mat2)
    return np.matmul(a, b)


@register("aten::bmm.out", specialize=fast.bmm)
def bmm_out(self, mat2, out):
    """bmm.out(Tensor self, Tensor mat2, *, Tensor(a!) out) -> Tensor(a!)"""
    _check_rank("bmm", 3, self, mat2)
    a, b = _mat(self, mat2)
    return np.matmul(a, b)


@register("aten::addmm.out", specialize=fast.addmm)
def addmm_out(self, mat1, mat2, beta, alpha, out):
    """addmm.out(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"""
    _check_rank("addmm", 2, mat1, mat2)
    if is_bfloat16(out.dtype) and is_bfloat16(mat1.dtype) and is_bfloat16(mat2.dtype):
        return _addmm_bf16(self, mat1, mat2, beta, alpha)
    bias, a, b = _mat(self, mat1, mat2)
    prod = np.matmul(a, b)
    ct = prod.dtype
    if alpha != 1:
        prod = prod * to_compute(alpha, ct)
    # ExecuTorch always adds self * beta, so NaN/inf in self survive beta == 0
    return prod + (bias if beta == 1 else bias * to_compute(beta, ct))


def _addmm_bf16(self, mat1, mat2, beta, alpha):
    """ExecuTorch's portable addmm on bf16 (``vec_addmm``): the dot products are running sums in bf16, then
    ``sum * alpha + self * beta``, every operation rounded to bf16 (alpha and beta too). Eager PyTorch and the
    optimized mm/linear kernels accumulate in float32 instead, which can differ by many bf16 ulps."""
    if mat1.shape[1] != mat2.shape[0]:
        raise ValueError(f"addmm cannot multiply shapes {list(mat1.shape)} and {list(mat2.shape)}")
    prod = _bf16.running_matmul(mat1, mat2)
    bias = np.broadcast_to(_bf16.as_bf16(self), prod.shape)
    return prod * _bf16.as_bf16(alpha) + bias * _bf16.as_bf16(beta)


@register("aten::linear.out", specialize=fast.linear)
def linear_out(input, weight, bias, out):  # noqa: A002  (schema names)
    """linear.out(Tensor input, Tensor weight, Tensor? bias=None, *, Tensor(a!) out) -> Tensor(a!)"""
    a, w = _mat(input, weight)
    y = np.matmul(a, w.T)
    if bias is not None:
        y += as_dtype(bias, y.dtype)
    return y


def _norm(diff, p):
    """Reduce |x - y| over the last axis to a p-norm, as ExecuTorch's distance_util: p = 0 counts nonzero
    differences, inf takes the max, other p sum |d|^p and take the 1/p power."""
    if p == 0:
        return np.count_nonzero(diff, axis=-1).astype(diff.dtype)
    if p == 1:
        return diff.sum(axis=-1)
    if p == 2:
        return np.sqrt((diff * diff).sum(axis=-1))
    if p == math.inf:
        return diff.max(axis=-1, initial=0)
    return np.power(np.power(diff, p).sum(axis=-1), 1.0 / p)


_CHUNK = 1 << 22  # elements of the [rows, R, M] difference block built at once


@register("aten::_cdist_forward.out")
def cdist_forward_out(x1, x2, p, compute_mode, out):
    """_cdist_forward.out(Tensor x1, Tensor x2, float p, int? compute_mode, *, Tensor(a!) out) -> Tensor(a!)"""
    if p < 0:
        raise ValueError(f"cdist needs p >= 0, got {p}")
    ct = widen_half(out.dtype)
    a, b = as_dtype(x1, ct), as_dtype(x2, ct)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    rows, r, m = a.shape[-2], b.shape[-2], a.shape[-1]
    step = max(1, _CHUNK // max(1, r * m * max(1, math.prod(batch))))
    parts = [_norm(np.abs(a[..., i:i + step, None, :] - b[..., None, :, :]), p) for i in range(0, rows, step)]
    return np.concatenate(parts, axis=-2) if parts else np.zeros(batch + (0, r), ct)


@register("aten::_pdist_forward.out")
def pdist_forward_out(self, p, out):
    """_pdist_forward.out(Tensor self, float p=2., *, Tensor(a!) out) -> Tensor(a!)"""
    if self.ndim != 2 or p < 0:
        raise ValueError(f"pdist needs a 2-D input and p >= 0, got shape {list(self.shape)} and p={p}")
    x = self.astype(widen_half(self.dtype), copy=False)
    i, j = np.triu_indices(x.shape[0], k=1)  # row-major upper triangle, as the condensed form
    return _norm(np.abs(x[i] - x[j]), p)
