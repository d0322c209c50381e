"""The portable operators a merged XNNPACK graph can hold as themselves (:data:`.graph.KERNEL` nodes), and the
arguments each needs: every engine that runs merged graphs computes each of them (the NumPy engine runs the
kernel itself; the LiteRT engine lowers it, :mod:`.litert_engine.lower`, whose table the tests hold equal to this
one). An operator whose arguments a check refuses keeps its run apart at load (:func:`supports`), instead of
failing the merged graph.

Example::

    >>> from pterun.delegates import KernelArg
    >>> import numpy as np
    >>> x = KernelArg(False, 0, (2, 8), np.dtype(np.float32))
    >>> supports("aten::_softmax.out", (x, 0, False, x._replace(out=True)))
    'softmax other than float32 over the last dim'
"""

from __future__ import annotations

import numpy as np

from pterun.delegates import KernelArg

__all__ = ["CHECKS", "KERNEL_OPS", "dims_of", "supports"]

F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)


def _tensors(args) -> tuple[list, list]:
    ins = [a for a in args if isinstance(a, KernelArg) and not a.out]
    outs = [a for a in args if isinstance(a, KernelArg) and a.out]
    return ins, outs


def _all(dtype):
    def check(args):
        ins, outs = _tensors(args)
        if any(a.dtype != dtype for a in ins + outs[:1]):
            return f"tensors other than {dtype}"
        return None
    return check


_float = _all(F32)


def _alpha_one(args):
    return _float(args) or (None if args[2] == 1 else f"alpha {args[2]!r}")


def _compare(args):
    (x,), (out,) = _tensors(args)
    if x.dtype != F32 or out.dtype != BOOL or isinstance(args[1], bool):
        return f"a comparison of {x.dtype} into {out.dtype}"
    return None


def _bool(args):
    return _all(BOOL)(args)


def _any(args):
    return _bool(args) or (None if args[1] is None or all(-len(args[0].shape) <= d < len(args[0].shape)
                                                          for d in dims_of(args[1])) else "dims out of range")


def dims_of(d) -> tuple:
    """An int or a list of ints, as a tuple."""
    return (d,) if isinstance(d, int) else tuple(d)


def _where(args):
    cond, x, y, out = args
    if cond.dtype != BOOL or {x.dtype, y.dtype, out.dtype} != {F32}:
        return "where on other than a bool condition and float32 values"
    return None


def _full_like(args):
    out = args[3]
    if out.dtype == BOOL and isinstance(args[1], bool) or out.dtype == F32 and not isinstance(args[1], bool):
        return None
    return f"full_like of {args[1]!r} into {out.dtype}"


def _same_dtype(args):
    ins, outs = _tensors(args)
    return None if ins[0].dtype == outs[0].dtype else "a copy that changes dtype"


def _softmax(args):
    x, dim, half, _ = args
    if _float(args) or half or dim % max(len(x.shape), 1) != len(x.shape) - 1:
        return "softmax other than float32 over the last dim"
    return None


def _layer_norm(args):
    x, shape = args[0], tuple(args[1])
    if _float(args) or not shape or tuple(x.shape[len(x.shape) - len(shape):]) != shape:
        return "layer norm other than float32 over the trailing dims"
    return None

def _select(args):
    x, dim, index = args[:3]
    rank = len(x.shape)
    if _same_dtype(args) or not -rank <= dim < rank or not -x.shape[dim] <= index < x.shape[dim]:
        return "a select out of range"
    return None


def _permute(args):
    rank = len(args[0].shape)
    dims = [d % rank for d in args[1]] if all(-rank <= d < rank for d in args[1]) else []
    return _same_dtype(args) or (None if sorted(dims) == list(range(rank)) else "not a permutation")


#: operator -> the check of its arguments (None, or why a merged graph cannot hold it)
CHECKS = {
    "aten::add.out": _alpha_one,
    "aten::sub.out": _alpha_one,
    "aten::mul.out": _float,
    "aten::div.out": _float,
    "aten::add.Scalar_out": _alpha_one,
    "aten::sub.Scalar_out": _alpha_one,
    "aten::mul.Scalar_out": _float,
    "aten::div.Scalar_out": _float,
    "aten::eq.Scalar_out": _compare,
    "aten::ne.Scalar_out": _compare,
    "aten::lt.Scalar_out": _compare,
    "aten::le.Scalar_out": _compare,
    "aten::gt.Scalar_out": _compare,
    "aten::ge.Scalar_out": _compare,
    "aten::logical_not.out": _bool,
    "aten::any.out": _any,
    "aten::any.dims_out": _any,
    "aten::where.self_out": _where,
    "aten::full_like.out": _full_like,
    "aten::expand_copy.out": _same_dtype,
    "aten::unsqueeze_copy.out": _same_dtype,
    "aten::select_copy.int_out": _select,
    "aten::permute_copy.out": _permute,
    "aten::_softmax.out": _softmax,
    "aten::native_layer_norm.out": _layer_norm,
    "aten::exp.out": _float,
    "aten::tanh.out": _float,
    "aten::sigmoid.out": _float,
    "aten::neg.out": _float,
    "aten::sqrt.out": _float,
    "aten::rsqrt.out": _float,
    "aten::abs.out": _float,
    "aten::relu.out": _float,
}
KERNEL_OPS = frozenset(CHECKS)


def supports(name: str, args: tuple) -> str | None:
    """None when a merged graph can hold the operator ``name`` with ``args`` (its schema arguments,
    :class:`~pterun.delegates.KernelArg` for the tensors), else why not."""
    check = CHECKS.get(name)
    if check is None:
        return "not an operator merged graphs hold"
    try:
        return check(args)
    except (TypeError, ValueError, IndexError, ZeroDivisionError) as e:  # an argument of an unexpected kind
        return f"unexpected arguments ({type(e).__name__}: {e})"
