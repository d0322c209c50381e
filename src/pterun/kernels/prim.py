"""Primitive kernels: symbolic sizes, scalar arithmetic on Int/Double/Bool EValues, and the two
ExecuTorch-specific tensor ops (``et_view`` aliasing, ``et_copy_index`` stacking).

Scalar ops return Python numbers; the interpreter stores them in the instruction's return slot, where
boxed int lists read them on their next use.

Example::

    >>> from pterun.kernels.prim import floordiv_scalar, floordiv_int
    >>> floordiv_scalar(-7, 2), floordiv_int(-7, 2)
    (-4, -3)
    >>> floordiv_scalar(0.0, 0.0)
    inf
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels._common import wrap_dim
from pterun.kernels.registry import register


def _num(x, what="operand"):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise TypeError(f"{what} must be an Int or Double, got {type(x).__name__} {x!r}")
    return x


def _int(x, what="operand"):
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{what} must be an Int, got {type(x).__name__} {x!r}")
    return x


@register("aten::sym_size.int")
def sym_size_int(self, dim):
    """sym_size.int(Tensor self, int dim) -> SymInt"""
    return int(self.shape[wrap_dim(dim, self.ndim)])


@register("aten::sym_numel")
def sym_numel(self):
    """sym_numel(Tensor self) -> SymInt"""
    return int(self.size)


@register("aten::_local_scalar_dense")
def local_scalar_dense(self):
    """_local_scalar_dense(Tensor self) -> Scalar"""
    if self.size < 1:
        raise ValueError("_local_scalar_dense of an empty tensor")
    v = self.reshape(-1)[0]
    if self.dtype == np.bool_:
        return bool(v)
    return int(v) if self.dtype.kind in "iu" else float(v)


def _wrap64(v):
    """Python int arithmetic as C int64: results wrap around."""
    return ((v + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63) if isinstance(v, int) else v


def _binary(name, fn, check=_num):
    def kernel(a, b):
        return _wrap64(fn(check(a, "a"), check(b, "b")))
    kernel.__doc__ = f"{name}.Scalar(Scalar a, Scalar b) -> Scalar"
    kernel.__name__ = f"{name}_scalar"
    register(f"executorch_prim::{name}.Scalar")(kernel)
    return kernel


def _c_div(a: int, b: int) -> int:
    """C integer division (truncation toward zero); division by zero is an error, not a crash."""
    if b == 0:
        raise ZeroDivisionError("integer division by zero")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a: int, b: int) -> int:
    """C ``%``: the remainder takes the dividend's sign."""
    return a - _c_div(a, b) * b


def _floordiv(a, b):
    if isinstance(a, int) and isinstance(b, int):
        q = _c_div(a, b)
        return q - 1 if (a < 0) != (b < 0) and q * b != a else q
    a, b = float(a), float(b)
    if b == 0:  # ExecuTorch: +-inf by the sign bit of a, even for 0 / 0
        return -math.inf if math.copysign(1, a) < 0 else math.inf
    mod = math.fmod(a, b)
    div = (a - mod) / b
    return div - 1 if mod != 0 and (math.copysign(1, b) < 0) != (math.copysign(1, mod) < 0) else div


def _truediv(a, b):
    a, b = float(a), float(b)
    if b == 0:  # IEEE division, as C
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
    return a / b


add_scalar = _binary("add", lambda a, b: a + b)
sub_scalar = _binary("sub", lambda a, b: a - b)
mul_scalar = _binary("mul", lambda a, b: a * b)
floordiv_scalar = _binary("floordiv", _floordiv)
truediv_scalar = _binary("truediv", _truediv)
sym_max_scalar = _binary("sym_max", max, _int)
sym_min_scalar = _binary("sym_min", min, _int)
mod_scalar = _binary("mod", _c_mod, _int)


def _compare(name, fn):
    def kernel(a, b):
        if isinstance(a, bool) != isinstance(b, bool):
            raise TypeError(f"cannot compare {type(a).__name__} with {type(b).__name__}")
        return bool(fn(a, b))
    kernel.__doc__ = f"{name}.Scalar(Scalar a, Scalar b) -> bool"
    register(f"executorch_prim::{name}.Scalar")(kernel)
    return kernel


for _n, _f in (("eq", lambda a, b: a == b), ("gt", lambda a, b: a > b), ("lt", lambda a, b: a < b),
               ("ge", lambda a, b: a >= b), ("le", lambda a, b: a <= b)):
    _compare(_n, _f)


@register("executorch_prim::floordiv.int")
def floordiv_int(a, b):
    """floordiv.int(int a, int b) -> int"""
    return _wrap64(_c_div(_int(a), _int(b)))  # C truncation, despite the name


@register("executorch_prim::mod.int")
def mod_int(a, b):
    """mod.int(int a, int b) -> int"""
    return _c_mod(_int(a), _int(b))


@register("executorch_prim::neg.Scalar")
def neg_scalar(a):
    """neg.Scalar(Scalar a) -> Scalar"""
    return _wrap64(-_num(a))


@register("executorch_prim::sym_float.Scalar")
def sym_float_scalar(a):
    """sym_float.Scalar(Scalar a) -> float"""
    return float(a)


@register("executorch_prim::sym_int.Scalar")
def sym_int_scalar(a):
    """sym_int.Scalar(Scalar a) -> int"""
    if isinstance(a, float) and not math.isfinite(a):
        raise ValueError(f"sym_int of {a}")
    return _wrap64(int(a))  # truncation toward zero


@register("executorch_prim::sym_not.Scalar")
def sym_not_scalar(a):
    """sym_not.Scalar(Scalar a) -> bool"""
    if not isinstance(a, bool):
        raise TypeError(f"sym_not needs a Bool, got {type(a).__name__}")
    return not a


@register("executorch_prim::sym_ite.Scalar")
def sym_ite_scalar(b, t, f):
    """sym_ite.Scalar(Scalar b, Scalar t, Scalar f) -> Scalar"""
    if not isinstance(b, bool):
        raise TypeError(f"sym_ite condition must be a Bool, got {type(b).__name__}")
    return t if b else f


def _double_only(name, fn):
    def kernel(a):
        if not isinstance(a, float):
            raise TypeError(f"{name} needs a Double, got {type(a).__name__}")
        return int(fn(a))
    kernel.__doc__ = f"{name}.Scalar(Scalar a) -> int"
    register(f"executorch_prim::{name}.Scalar")(kernel)


_double_only("ceil", math.ceil)
_double_only("round", round)  # Python's round is half-to-even, as ExecuTorch's
_double_only("trunc", math.trunc)


@register("executorch_prim::et_view.default", raw=True, volatile_args=(2,))
def et_view(values, args):
    """et_view.default(Tensor self, int[] size) -> Tensor: ``out`` aliases ``self``'s memory."""
    src, out = values[args[0]], values[args[2]]
    size = [values[j] for j in values[args[1]]]
    if out.storage is src.storage and out.shape == tuple(size) and out.dtype == src.dtype and \
            math.prod(src.shape) == math.prod(size):
        return  # already this view (a decode step asks for the same sizes every call)
    numel = math.prod(src.shape)
    if size.count(-1) > 1:
        raise ValueError(f"et_view size {size} has more than one -1")
    if -1 in size:
        rest = math.prod(s for s in size if s != -1)
        if rest == 0:
            raise ValueError(f"et_view cannot infer -1 in {size} with a zero-sized dim")
        size[size.index(-1)] = numel // rest
    if math.prod(size) != numel:
        raise ValueError(f"et_view: shape {size} does not match {numel} elements of {list(src.shape)}")
    if out.dtype != src.dtype:
        raise TypeError(f"et_view changes dtype {src.dtype} to {out.dtype}")
    out.rebind(src.storage, size)



@register("executorch_prim::et_copy_index.tensor", raw=True, volatile_args=(0,))
def et_copy_index(values, args):
    """et_copy_index.tensor(Tensor(a!) copy_to, Tensor copy_from, int index): stack map/scan outputs."""
    dst, src, index = values[args[0]], values[args[1]].array, values[args[2]]
    if index < 0:
        raise IndexError(f"et_copy_index index {index} is negative")
    if dst.array.ndim != src.ndim + 1 or tuple(dst.shape[1:]) != src.shape:
        raise ValueError(f"et_copy_index: cannot copy shape {list(src.shape)} into {list(dst.shape)}")
    dst.resize((index + 1,) + src.shape)
    dst.array[index] = src

