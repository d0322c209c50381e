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

import math

import numpy as np

from pterun.delegates import KernelArg

__all__ = ["BITWISE", "CHECKS", "KERNEL_OPS", "bit_for_bit", "dims_of", "pair", "supports"]

F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)
I64 = np.dtype(np.int64)


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
_int64 = _all(I64)


def _float_or_int64(args):
    """All tensors float32, or all int64 (index arithmetic: a T5 encoder's relative-position buckets)."""
    return None if _int64(args) is None else _float(args)


def _alpha_one(args):
    return _float_or_int64(args) or (None if args[2] == 1 else f"alpha {args[2]!r}")


def _scalar_alpha_one(args):
    """``add.Scalar`` / ``sub.Scalar``: a float32 tensor and a number, or an int64 tensor and an int."""
    if _int64(args) is None and (not isinstance(args[1], int) or isinstance(args[1], bool)):
        return f"an int64 tensor with the scalar {args[1]!r}"
    return _alpha_one(args)


def _int64_pair(args):
    return _int64(args) and "tensors other than int64"


def _to_int64(args):
    """A float32 -> int64 conversion (truncation toward zero, as the portable kernel's cast), same dim order."""
    x, _, dim_order, out = args[:4]
    if x.dtype != F32 or out.dtype != I64 or \
            dim_order is not None and tuple(dim_order) != tuple(range(len(x.shape))):
        return "a copy other than float32 to int64 in the same dim order"
    return None


#: an embedding table up to this size joins a merged graph (a copy of it goes into the graph, for the model's life:
#: a language model's token embedding, tens of MB, stays a kernel of its own; a small encoder's, 128 KB for a
#: 512-token vocabulary, joins, and the method is one call)
SMALL_TABLE = 1 << 20


def _embedding(args):
    weight, indices = args[:2]
    if weight.dtype != F32 or not weight.const or len(weight.shape) != 2 or indices.dtype != I64 or \
            math.prod(weight.shape) * 4 > SMALL_TABLE:
        return f"an embedding other than int64 indices into a constant float32 table of at most {SMALL_TABLE} bytes"
    return None  # indices from outside the merged call (the caller's token ids) are checked before it (.checked)


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
    if cond.dtype != BOOL or {x.dtype, y.dtype, out.dtype} not in ({F32}, {I64}):
        return "where on other than a bool condition and float32 or int64 values"
    return None


def _full_like(args):
    out, value = args[3], args[1]
    if out.dtype == BOOL and isinstance(value, bool) or out.dtype == F32 and not isinstance(value, bool) or \
            out.dtype == I64 and isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"full_like of {args[1]!r} into {out.dtype}"


def _same_dtype(args):
    """A view-like copy of float32 or bool values (int64 ones, position indices, are read into scalars by the
    interpreter's own steps: they stay there)."""
    ins, outs = _tensors(args)
    if ins[0].dtype not in (F32, BOOL):
        return f"a copy of {ins[0].dtype} values"
    return None if ins[0].dtype == outs[0].dtype else "a copy that changes dtype"


def _clone(args):
    x, _, dim_order, out = args
    if _same_dtype(args) or dim_order is not None and tuple(dim_order) != tuple(range(len(x.shape))):
        return "a clone into another dtype or dim order"
    return None


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
    if not -rank <= dim < rank or not -x.shape[dim] <= index < x.shape[dim]:
        return "a select out of range"
    return _same_dtype(args)


def _permute(args):
    rank = len(args[0].shape)
    dims = [d % rank for d in args[1]] if all(-rank <= d < rank for d in args[1]) else []
    return _same_dtype(args) or (None if sorted(dims) == list(range(rank)) else "not a permutation")


def pair(v) -> tuple:
    """A window argument (kernel size, stride, padding, dilation) of one or two ints as two ints."""
    v = tuple(int(d) for d in v)
    return v * 2 if len(v) == 1 else v


def _conv(args):
    x, w, b, stride, padding, dilation, transposed, _, groups, out = args
    nd = len(x.shape) - 2
    if {x.dtype, w.dtype, out.dtype} != {F32} or nd not in (1, 2) or transposed or not w.const or \
            b is not None and not b.const or not all(len(tuple(v)) in (1, nd) for v in (stride, padding, dilation)):
        return "a convolution other than 1-d or 2-d, float32, with constant weights"
    cin, cout = x.shape[1], w.shape[0]
    if groups != 1 and not (groups == cin and cout % cin == 0 and w.shape[1] == 1):
        return f"a convolution of {groups} groups"
    return None


def _batch_norm(args):
    x, w, b, mean, var = args[:5]
    if _float(args) or len(x.shape) != 4 or not all(a is None or a.const for a in (w, b, mean, var)):
        return "a batch norm other than float32 2-d with constant statistics"
    return None


def _pool_args(args, max_pool: bool):
    x, kernel, stride, padding = args[:4]
    if args[0].dtype != F32 or len(x.shape) != 4 or len(pair(kernel)) != 2:
        return "a pool other than 2-d float32"
    if max_pool and (tuple(pair(args[4])) != (1, 1) or args[5]):
        return "a max pool with dilation or ceil_mode"
    if not max_pool and (args[4] or any(pair(padding)) or args[6] is not None):
        return "an average pool with padding, ceil_mode or a divisor"
    return None


def _addmm(args):
    bias, x, w, beta, alpha, out = args
    if _float(args) or beta != 1 or alpha != 1 or len(x.shape) != 2:
        return "an addmm other than float32 with beta and alpha 1"
    return None


def _matmul(args):
    if _float(args):
        return "a matrix product other than float32"
    return None


def _hardtanh(args):
    return _float(args) or (None if args[1] < args[2] else "an empty hardtanh range")


def _gelu(args):
    return _float(args) or (None if args[1] in ("none", "tanh") else f"gelu approximate={args[1]!r}")


#: operator -> the check of its arguments (None, or why a merged graph cannot hold it)
CHECKS = {
    "aten::add.out": _alpha_one,
    "aten::sub.out": _alpha_one,
    "aten::mul.out": _float,
    "aten::div.out": _float,
    "aten::add.Scalar_out": _scalar_alpha_one,
    "aten::sub.Scalar_out": _scalar_alpha_one,
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
    "dim_order_ops::_clone_dim_order.out": _clone,
    "aten::alias_copy.out": _same_dtype,
    "aten::detach_copy.out": _same_dtype,
    "aten::hardtanh.out": _hardtanh,
    "aten::gelu.out": _gelu,
    "aten::convolution.out": _conv,
    "aten::_native_batch_norm_legit_no_training.out": _batch_norm,
    "aten::max_pool2d_with_indices.out": lambda args: _pool_args(args, True),
    "aten::avg_pool2d.out": lambda args: _pool_args(args, False),
    "aten::minimum.out": _int64_pair,
    "aten::maximum.out": _int64_pair,
    "dim_order_ops::_to_dim_order_copy.out": _to_int64,
    "aten::embedding.out": _embedding,
    "aten::addmm.out": _addmm,
    "aten::mm.out": _matmul,
    "aten::bmm.out": _matmul,
}
KERNEL_OPS = frozenset(CHECKS)

#: the operators whose lowering gives the portable kernel's numbers bit for bit (the others: within the float
#: tolerance). Only these join the merged graphs of a method with a delegate that quantizes activations
#: dynamically (``Backend.quantizes``): an ulp of difference in a normalised activation anywhere upstream can move
#: an exact rounding tie of that quantization, and the output a quantization step (2.8e-3 of scale in a DeiT
#: 8da4w model, 1.3e-2 in a Swin-T one, over the 1e-3 the accuracy policy allows).
BITWISE = frozenset({
    "aten::add.out", "aten::sub.out", "aten::mul.out", "aten::div.out", "aten::add.Scalar_out",
    "aten::sub.Scalar_out", "aten::mul.Scalar_out", "aten::div.Scalar_out", "aten::eq.Scalar_out",
    "aten::ne.Scalar_out", "aten::lt.Scalar_out", "aten::le.Scalar_out", "aten::gt.Scalar_out",
    "aten::ge.Scalar_out", "aten::logical_not.out", "aten::any.out", "aten::any.dims_out", "aten::where.self_out",
    "aten::full_like.out", "aten::expand_copy.out", "aten::unsqueeze_copy.out", "aten::select_copy.int_out",
    "aten::permute_copy.out", "aten::neg.out", "aten::abs.out", "aten::relu.out", "aten::hardtanh.out",
    "aten::max_pool2d_with_indices.out", "dim_order_ops::_clone_dim_order.out", "aten::alias_copy.out",
    "aten::detach_copy.out", "aten::minimum.out", "aten::maximum.out", "dim_order_ops::_to_dim_order_copy.out",
    "aten::embedding.out",
})


def bit_for_bit(name: str, args: tuple) -> bool:
    """Whether a merged graph can give the portable kernel's numbers for ``name`` with ``args`` bit for bit: the
    operators of :data:`BITWISE`, and a float32 layer norm over rows of fewer than
    :data:`~pterun.kernels.norm.SCALAR_LAYER_NORM` elements, which has a lowering of its own for that
    (:mod:`.litert_engine.exact`: ExecuTorch runs its scalar loop there, and vectorised moments from there on)."""
    if name in BITWISE:
        return True
    if name == "aten::native_layer_norm.out" and _layer_norm(args) is None:
        from pterun.kernels.norm import SCALAR_LAYER_NORM

        n = math.prod(args[1])
        return 0 < n < SCALAR_LAYER_NORM and math.prod(args[0].shape) > 0
    return False


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
