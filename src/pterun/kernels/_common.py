"""Semantics every kernel family shares: ExecuTorch's type promotion, dim wrapping, scalar conversion, and how a
result is stored into its planned ``out`` array.

Kernels call these instead of re-deriving the rules. Example::

    >>> import numpy as np
    >>> common_dtype(np.zeros(3, np.int32), 2.5)
    dtype('float32')
    >>> common_dtype(np.zeros(3, np.uint8), np.zeros((), np.int8))  # 0-d tensors promote like any other
    dtype('int16')
    >>> wrap_dim(-1, 3)
    2
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from pterun import dtypes

_BOOL, _INT, _FLOAT, _COMPLEX = 0, 1, 2, 3
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)


#: How a result enters its planned output array: cast to out's dtype as C's ``static_cast`` does (``unsafe``),
#: never broadcast (the shape must already be out's). The interpreter's write of a general kernel's result
#: (``interp.tensor.Tensor.write``) and every fast-path step (``kernels.fast``) follow it.
OUT_CASTING = "unsafe"


def write_out(out: np.ndarray, result) -> None:
    """Store ``result`` (out's shape) into ``out`` by the convention above."""
    np.copyto(out, result, OUT_CASTING)


def write_out_step(out: np.ndarray, result: np.ndarray):
    """A zero-argument step doing :func:`write_out` (a ``functools.partial`` over ``np.copyto``, called from C
    without a Python frame: the casting rule is passed positionally, which costs nothing per call, where a
    keyword would)."""
    return partial(np.copyto, out, result, OUT_CASTING)


def __getattr__(name: str):
    if name == "BFLOAT16":  # resolved on use: it imports ml_dtypes
        return dtypes.to_numpy(15)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_bfloat16(dtype: np.dtype) -> bool:
    # bfloat16 is ml_dtypes' kind 'V' type: testing the kind first keeps ml_dtypes unimported until one appears
    return dtype.kind == "V" and dtype == dtypes.to_numpy(15)


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
    if is_bfloat16(a) or is_bfloat16(b):
        bf16, other = (a, b) if is_bfloat16(a) else (b, a)
        return bf16 if other.itemsize < 2 else (F32 if other.itemsize == 2 else other)
    return np.promote_types(a, b)


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


def accumulate(ufunc: np.ufunc, x: np.ndarray, axis: int, dtype: np.dtype) -> np.ndarray:
    """``ufunc.accumulate(x, axis, dtype)`` (a running sum when ``ufunc`` is ``np.add``).

    A 1-D array goes through as one row of a 2-D view: NumPy 1.26 with ml_dtypes 0.4 crashes the process
    (a segmentation fault) on a 1-D bf16 accumulate longer than a few hundred elements, and a 2-D one is safe.
    """
    if x.ndim == 1:
        return ufunc.accumulate(x[None], axis=1, dtype=dtype)[0]
    return ufunc.accumulate(x, axis=axis, dtype=dtype)


def sum_in_order(x: np.ndarray, axes, dtype: np.dtype, keepdims: bool = False) -> np.ndarray:
    """Sum over ``axes`` (None: all) in ``dtype``, adding the reduced elements one at a time in memory order.

    That is how ExecuTorch's portable reductions and norms sum (a running total); NumPy's own sums are pairwise
    and differ from it in the last bits, which a later rounding (a dynamic int8 quantization) can magnify.
    """
    axes = tuple(range(x.ndim)) if axes is None else tuple(axes)
    k = x.ndim - len(axes)
    trailing = axes == tuple(range(k, x.ndim))
    if trailing:  # the last dims (a norm's rows, RMSNorm's mean): rows without a transpose
        lead, n = x.shape[:k], math.prod(x.shape[k:])
        rows = x if len(axes) == 1 else x.reshape(lead + (n,))
    else:
        kept = [a for a in range(x.ndim) if a not in axes]
        lead, n = tuple(x.shape[a] for a in kept), math.prod(x.shape[a] for a in axes)
        rows = np.transpose(x, kept + list(axes)).reshape(lead + (n,))
    total = np.zeros(lead, dtype) if n == 0 else accumulate(np.add, rows, -1, dtype)[..., -1]
    if keepdims:
        total = total.reshape(lead + (1,) * len(axes) if trailing else
                              [1 if a in axes else x.shape[a] for a in range(x.ndim)])
    return total


def as_dtype(x, dtype: np.dtype) -> np.ndarray:
    """``x`` as an array of ``dtype`` without copying when it already is one."""
    if isinstance(x, np.ndarray) and x.dtype == dtype:
        return x
    return np.asarray(x).astype(dtype, copy=False)


def scalar_value(s, dtype: np.dtype):
    """A Python scalar converted to ``dtype`` as C's ``static_cast`` does (integers wrap around, floats
    truncate toward zero), which is how ExecuTorch's ``scalar_to<CTYPE>`` reads a Scalar argument."""
    if isinstance(s, int) and not isinstance(s, bool) and dtype.kind in "iu":
        return np.array(s & 0xFFFFFFFFFFFFFFFF, np.uint64).astype(dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.array(s).astype(dtype)


def checked_scalar(s, dtype: np.dtype):
    """A Scalar converted to ``dtype`` the way ExecuTorch's ``check_overflow_scalar_cast`` does for fill
    values: out-of-range values are an error rather than wrapping; floats truncate into integer types."""
    if dtype.kind in "iu":
        v = s if isinstance(s, (int, np.integer)) else (math.trunc(s) if math.isfinite(s) else None)
        info = np.iinfo(dtype)
        if v is None or not info.min <= v <= info.max:
            raise ValueError(f"value {s!r} does not fit {dtype}")
    elif dtype.kind != "b" and isinstance(s, float) and math.isfinite(s):
        with np.errstate(over="ignore"):
            if not np.isfinite(np.array(s).astype(dtype)):
                raise ValueError(f"value {s!r} does not fit {dtype}")
    return scalar_value(s, dtype)


# -- ExecuTorch's promotion rules ---------------------------------------------------------------------------
# Portable kernels promote by dtype only (``promoteTypes``): unlike eager PyTorch, a 0-d tensor operand is
# not weaker than a dimensioned one. Scalars follow ``promote_type_with_scalar``. The compute type widens
# Half/BFloat16 to Float (``get_compute_type``).
def promote_dtypes(*dtypes) -> np.dtype:
    """``promoteTypes`` folded over dtypes."""
    result = dtypes[0]
    for d in dtypes[1:]:
        result = promote_types(result, d)
    return result


def promote_scalar(dtype: np.dtype, s) -> np.dtype:
    """``promote_type_with_scalar``: a float scalar lifts bool/int tensors to float32, an int scalar lifts
    bool tensors to int64; otherwise the tensor's dtype stays."""
    if dtype.kind == "c" or isinstance(s, (bool, np.bool_)):
        return dtype
    if isinstance(s, (float, np.floating)):
        return dtype if is_floating(dtype) else F32
    return dtype if dtype.kind != "b" else I64


def common_dtype(a, b) -> np.dtype:
    """The common dtype of a binary op's operands (arrays, or an array and a Python scalar)."""
    if isinstance(b, np.ndarray):
        return promote_types(a.dtype, b.dtype) if isinstance(a, np.ndarray) else promote_scalar(b.dtype, a)
    return promote_scalar(a.dtype, b)


def widen_half(dtype: np.dtype) -> np.dtype:
    """``get_compute_type``: Half and BFloat16 compute in Float."""
    return F32 if dtype == np.float16 or is_bfloat16(dtype) else dtype


def to_compute(x, dtype: np.dtype):
    """An operand in the compute dtype: arrays are cast, scalars converted as ``scalar_to<CTYPE>`` does."""
    if isinstance(x, np.ndarray):
        return as_dtype(x, dtype)
    return scalar_value(x, dtype)


def float_compute(x: np.ndarray) -> np.ndarray:
    """The input of a float-valued unary op as ExecuTorch reads it: double stays double, everything else
    (ints, bool, half types) is computed in float32."""
    return x if x.dtype == F64 else as_dtype(x, F32)


def floor_divide(a: np.ndarray, b) -> np.ndarray:
    """ExecuTorch's ``utils::floor_divide``: ints round toward -inf; floats are ``(a - fmod(a, b)) / b``
    minus one when the remainder's sign differs from b's, and ``b == 0`` gives +-inf by a's sign bit
    (even for 0 / 0, where eager PyTorch gives NaN)."""
    if a.dtype.kind in "iub":
        return np.floor_divide(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        mod = np.fmod(a, b)
        div = (a - mod) / b
        div = np.where((mod != 0) & (np.signbit(b) != np.signbit(mod)), div - 1, div)
        inf = np.where(np.signbit(a), -np.inf, np.inf).astype(div.dtype, copy=False)
        return np.where(b == 0, inf, div)
