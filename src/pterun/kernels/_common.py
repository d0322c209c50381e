"""Semantics every kernel family shares: PyTorch type promotion, dim wrapping, scalar handling.

Kernels call these instead of re-deriving the rules. Example::

    >>> import numpy as np
    >>> promote(np.zeros(3, np.int32), 2.5)
    dtype('float32')
    >>> wrap_dim(-1, 3)
    2
"""

from __future__ import annotations

import numpy as np

from pterun.format.dtypes import BFLOAT16

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3
_DEFAULT = {_BOOL: np.dtype(np.bool_), _INT: np.dtype(np.int64), _FLOAT: np.dtype(np.float32),
            _COMPLEX: np.dtype(np.complex64)}
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)


def category(dtype: np.dtype) -> int:
    k = dtype.kind
    if k == "b":
        return _BOOL
    if k in "iu":
        return _INT
    if k == "c":
        return _COMPLEX
    return _FLOAT  # f, and ml_dtypes' bfloat16 / float8 (kind 'V')


def is_floating(dtype: np.dtype) -> bool:
    return category(dtype) == _FLOAT


def is_integral(dtype: np.dtype, include_bool: bool = False) -> bool:
    c = category(dtype)
    return c == _INT or (include_bool and c == _BOOL)


def promote_types(a: np.dtype, b: np.dtype) -> np.dtype:
    """``torch.promote_types``: the higher category wins outright; within a category, the wider type."""
    if a == b:
        return a
    ca, cb = category(a), category(b)
    if ca != cb:
        return a if ca > cb else b
    if a == BFLOAT16 or b == BFLOAT16:
        other = b if a == BFLOAT16 else a
        return BFLOAT16 if other.itemsize < 2 or other == BFLOAT16 else (F32 if other.itemsize == 2 else other)
    return np.promote_types(a, b)


def _scalar_category(s) -> int:
    if isinstance(s, (bool, np.bool_)):
        return _BOOL
    if isinstance(s, (int, np.integer)):
        return _INT
    if isinstance(s, complex):
        return _COMPLEX
    return _FLOAT


def promote(*operands) -> np.dtype:
    """The dtype PyTorch computes in for these operands (arrays, 0-d arrays, or Python scalars).

    Dimensioned tensors dominate 0-d tensors of the same category, which dominate Python scalars; a
    higher category from a weaker operand wins but takes that level's type (scalars: the default type).
    """
    dim = zero = None
    scalar_cat = -1
    for x in operands:
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if x.ndim:
                dim = x.dtype if dim is None else promote_types(dim, x.dtype)
            else:
                zero = x.dtype if zero is None else promote_types(zero, x.dtype)
        elif isinstance(x, np.generic):
            zero = x.dtype if zero is None else promote_types(zero, x.dtype)
        else:
            scalar_cat = max(scalar_cat, _scalar_category(x))
    result = dim
    if zero is not None:
        if result is None or category(zero) > category(result):
            result = zero
    if scalar_cat >= 0 and (result is None or scalar_cat > category(result)):
        result = _DEFAULT[scalar_cat]
    return result if result is not None else F32


def wrap_dim(dim: int, ndim: int) -> int:
    """A possibly negative dim as an index in ``range(ndim)`` (0-d tensors accept 0 and -1)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"dim {dim} is out of range for a tensor of rank {ndim}")
    return dim % n


def wrap_dims(dims, ndim: int) -> tuple[int, ...]:
    return tuple(wrap_dim(d, ndim) for d in dims)


def reduce_axes(dims, ndim: int):
    """Dims for a reduction: None or an empty list means all dims."""
    if dims is None or len(dims) == 0:
        return None
    return wrap_dims(dims, ndim)


def as_dtype(x, dtype: np.dtype) -> np.ndarray:
    """``x`` as an array of ``dtype`` without copying when it already is one."""
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x
    return np.asarray(x).astype(dtype, copy=False)


def compute_dtype(out_dtype: np.dtype, *operands) -> np.dtype:
    """Dtype to compute an arithmetic op in: the promoted type, widened from half types to float32 as
    ExecuTorch's portable kernels do for their accumulation."""
    ct = promote(*operands)
    if ct == np.float16 or ct == BFLOAT16:
        return F32
    return ct


def scalar_value(s, dtype: np.dtype):
    """A Python scalar converted to ``dtype`` with C-style wrap-around for out-of-range integers."""
    return np.array(s).astype(dtype)
