"""Comparison, logical and bitwise kernels, ``where`` and ``allclose``.

Comparisons promote like ExecuTorch's ``comparison_op`` pattern: by dtype, except that two *different*
dtypes whose promotion is floating compare in float32; a Scalar is converted to the common type first (so
an int8 tensor compared with 300 sees 300 wrapped to 44, as ExecuTorch does). Example::

    >>> import numpy as np
    >>> from pterun.kernels.compare import where_self_out
    >>> where_self_out(np.array([True, False]), np.ones(2), np.zeros(2), np.empty(2)).tolist()
    [1.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import (F32, common_dtype, is_floating, is_integral, promote_types, to_compute,
                                    widen_half)
from pterun.kernels.registry import register


def _compare(ufunc, name, variant, other_type):
    def kernel(self, other, out):
        ct = common_dtype(self, other)
        if isinstance(other, np.ndarray) and is_floating(ct) and self.dtype != other.dtype:
            ct = F32
        ct = widen_half(ct)
        return ufunc(to_compute(self, ct), to_compute(other, ct))
    kernel.__doc__ = f"{name}.{variant}(Tensor self, {other_type} other, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_{variant}"
    register(f"aten::{name}.{variant}")(kernel)


for _name, _uf in (("eq", np.equal), ("ne", np.not_equal), ("gt", np.greater), ("ge", np.greater_equal),
                   ("lt", np.less), ("le", np.less_equal)):
    _compare(_uf, _name, "Tensor_out", "Tensor")
    _compare(_uf, _name, "Scalar_out", "Scalar")


def _logical(ufunc, name):
    def kernel(self, other, out):
        return ufunc(self.astype(bool, copy=False), other.astype(bool, copy=False))
    kernel.__doc__ = f"{name}.out(Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_out"
    register(f"aten::{name}.out")(kernel)


for _name, _uf in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                   ("logical_xor", np.logical_xor)):
    _logical(_uf, _name)


def _shift(ufunc):
    def shift(a, b):
        # C shifts promote narrow types to int; a negative or too-large count is undefined behaviour
        # there, which we pin to NumPy's answer (0 or sign fill)
        with np.errstate(over="ignore"):
            return ufunc(a, b)
    return shift


def _bitwise(ufunc, name, variant, other_type):
    def kernel(self, other, out):
        ct = widen_half(common_dtype(self, other))
        if not is_integral(ct, include_bool=True):
            raise TypeError(f"bitwise_{name} needs integer or bool tensors, got {ct}")
        return ufunc(to_compute(self, ct), to_compute(other, ct))
    kernel.__doc__ = f"bitwise_{name}.{variant}(Tensor self, {other_type} other, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"bitwise_{name}_{variant}"
    register(f"aten::bitwise_{name}.{variant}")(kernel)


for _name, _uf in (("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor),
                   ("left_shift", _shift(np.left_shift)), ("right_shift", _shift(np.right_shift))):
    _bitwise(_uf, _name, "Tensor_out", "Tensor")
    _bitwise(_uf, _name, "Tensor_Scalar_out" if "shift" in _name else "Scalar_out", "Scalar")


@register("aten::where.self_out")
def where_self_out(condition, self, other, out):
    """where.self_out(Tensor condition, Tensor self, Tensor other, *, Tensor(a!) out) -> Tensor(a!)"""
    ct = promote_types(self.dtype, other.dtype)
    return np.where(condition.astype(bool, copy=False), self.astype(ct, copy=False), other.astype(ct, copy=False))


def _allclose(self, other, rtol, atol):
    # ExecuTorch: shapes and dtypes must match; floats compare |a - b| <= atol + |rtol * b| with any
    # non-finite error (NaN, inf - inf) failing, whatever equal_nan says; other dtypes compare bytes
    if self.shape != other.shape or self.dtype != other.dtype:
        raise ValueError(f"allclose needs equal shapes and dtypes, got {list(self.shape)} {self.dtype} and "
                         f"{list(other.shape)} {other.dtype}")
    if not is_floating(self.dtype):
        return bool(np.array_equal(self, other))
    a, b = self.astype(np.float64), other.astype(np.float64)
    if rtol == 0 and atol == 0:
        return bool(np.all(a == b))
    with np.errstate(invalid="ignore"):
        err = np.abs(a - b)
        return bool(np.all(np.isfinite(err) & (err <= atol + np.abs(rtol * b))))


@register("aten::allclose.out")
def allclose_out(self, other, rtol, atol, equal_nan, dummy_param, out):
    """allclose.out(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False, bool dummy_param=False, *, Tensor(a!) out) -> Tensor(a!)"""
    if out.size != 1:
        raise ValueError(f"allclose writes a single element, but out has shape {list(out.shape)}")
    return np.full(out.shape, _allclose(self, other, rtol, atol))


@register("aten::allclose.Tensor")
def allclose_tensor(self, other, rtol, atol, equal_nan, dummy_param):
    """allclose.Tensor(Tensor self, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False, bool dummy_param=False) -> Tensor"""
    return np.array([_allclose(self, other, rtol, atol)])
