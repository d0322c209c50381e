"""How a portable operator a merged graph holds as itself (a :data:`.graph.KERNEL` node) becomes TFLite operators.

The arguments were checked when the merge was planned (:func:`..kernel_ops.supports`); :data:`EMIT` holds the
operators that compute each. Elementwise arithmetic, comparisons, ``where``, views and copies give the portable
kernel's numbers exactly; the transcendental functions, softmax and layer norm (a mean, the centred mean of
squares, a square root and a division, as the portable kernel computes it) give them within the float tolerance
the NumPy engine has against ExecuTorch's kernels: their sums run in another order and XNNPACK's ``exp`` and
``tanh`` are its own approximations. Operators on bool values (comparisons, ``logical_not``, ``any``, ``where``'s
condition) run on LiteRT's builtin kernels, the float ones mostly on XNNPACK, within the one invocation.
"""

from __future__ import annotations

import numpy as np

from pterun.delegates import KernelArg
from pterun.delegates.xnnpack.kernel_ops import dims_of, supports

__all__ = ["EMIT", "KernelRules"]

F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)


class KernelRules:
    """The translator's rule for :data:`.graph.KERNEL` nodes (a mixin of the translator in :mod:`.translate`)."""

    def node_Kernel(self, n) -> None:
        emit = EMIT.get(n.op)
        problem = "no lowering" if emit is None else supports(n.op, n.args)
        if problem is not None:
            raise self.no(f"{n.op}: {problem}")
        count = sum(1 for a in n.args if isinstance(a, KernelArg) and not a.out)
        ins = [self.tensor_of(n.fields[f"input{k}_id"]) for k in range(1, count + 1)]
        first = len(self.operators)
        emit(self, n.args, ins, self.tensor_of(n.output_id))
        for o in self.operators[first:]:  # LiteRT's builtin kernels may run these (see Translation.builtin)
            self.kernel_tensors.update(t for t in o.inputs.tolist() + o.outputs.tolist() if t >= 0)

    def scalar(self, value, dtype=F32) -> int:
        """A constant of shape [] (``const`` would make it [1]: FILL takes only a true scalar)."""
        data = np.asarray([value], dtype)
        return self.add_tensor([], getattr(self.S.TensorType, "BOOL" if dtype == BOOL else "FLOAT32"),
                               self.buffer(data))

    def temp(self, shape, dtype=F32) -> int:
        return self.add_tensor(list(shape), getattr(self.S.TensorType, "BOOL" if dtype == BOOL else "FLOAT32"))


def _binary(name: str, options: str | None):
    def emit(tr, args, ins, out):
        extra = {} if options is None else {"fusedActivationFunction": tr.S.ActivationFunctionType.NONE}
        tr.op(name, ins[:2], [out], options, **extra)
    return emit


def _binary_scalar(name: str, options: str | None):
    def emit(tr, args, ins, out):
        extra = {} if options is None else {"fusedActivationFunction": tr.S.ActivationFunctionType.NONE}
        tr.op(name, [ins[0], tr.scalar(np.float32(args[1]))], [out], options, **extra)
    return emit


def _compare_scalar(name: str):
    def emit(tr, args, ins, out):
        tr.op(name, [ins[0], tr.scalar(np.float32(args[1]))], [out])
    return emit


def _unary(name: str):
    def emit(tr, args, ins, out):
        tr.op(name, ins[:1], [out])
    return emit


def _emit_any(tr, args, ins, out):
    x = args[0]
    rank = len(x.shape)
    dims = range(rank) if args[1] is None else sorted({d % rank for d in dims_of(args[1])})
    tr.op("REDUCE_ANY", [ins[0], tr.i32(list(dims))], [out], "ReducerOptions", keepDims=bool(args[2]))


def _emit_where(tr, args, ins, out):
    tr.op("SELECT_V2", ins[:3], [out])


def _emit_full_like(tr, args, ins, out):
    dtype = args[3].dtype
    tr.op("FILL", [tr.i32(list(args[3].shape)), tr.scalar(args[1], dtype)], [out])


def _emit_reshape(tr, args, ins, out):
    """A copy into the out tensor's shape (unsqueeze, or an expand that changes nothing)."""
    shape = [a for a in args if isinstance(a, KernelArg) and a.out][0].shape
    tr.op("RESHAPE", [ins[0], tr.i32(list(shape))], [out])


def _emit_expand(tr, args, ins, out):
    x, shape = args[0], args[3].shape
    if tuple(x.shape) == tuple(shape):
        return _emit_reshape(tr, args, ins, out)
    tr.op("BROADCAST_TO", [ins[0], tr.i32(list(shape))], [out])


def _emit_select(tr, args, ins, out):
    x, dim, index, o = args
    rank = len(x.shape)
    d = dim % rank
    i = index + x.shape[d] if index < 0 else index
    begin = [i if k == d else 0 for k in range(rank)]
    size = [1 if k == d else x.shape[k] for k in range(rank)]
    piece = tr.temp(size, x.dtype)
    tr.op("SLICE", [ins[0], tr.i32(begin), tr.i32(size)], [piece])
    tr.op("RESHAPE", [piece, tr.i32(list(o.shape))], [out])



def _emit_permute(tr, args, ins, out):
    rank = len(args[0].shape)
    tr.op("TRANSPOSE", [ins[0], tr.i32([d % rank for d in args[1]])], [out])



def _emit_softmax(tr, args, ins, out):
    tr.op("SOFTMAX", ins[:1], [out], "SoftmaxOptions", beta=1.0)


def _emit_layer_norm(tr, args, ins, out):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims, var the mean of squared deviations."""
    x, shape = args[0], tuple(x_ for x_ in args[1])
    rank = len(x.shape)
    axes = tr.i32(list(range(rank - len(shape), rank)))
    stat = [1 if k >= rank - len(shape) else d for k, d in enumerate(x.shape)]
    none = tr.S.ActivationFunctionType.NONE
    mean, centred, square, var, shifted, std = (tr.temp(s) for s in (stat, x.shape, x.shape, stat, stat, stat))
    tr.op("MEAN", [ins[0], axes], [mean], "ReducerOptions", keepDims=True)
    tr.op("SUB", [ins[0], mean], [centred], "SubOptions", fusedActivationFunction=none)
    tr.op("MUL", [centred, centred], [square], "MulOptions", fusedActivationFunction=none)
    tr.op("MEAN", [square, axes], [var], "ReducerOptions", keepDims=True)
    tr.op("ADD", [var, tr.scalar(np.float32(args[4]))], [shifted], "AddOptions", fusedActivationFunction=none)
    tr.op("SQRT", [shifted], [std])
    k = 1
    steps = [("DIV", "DivOptions", std)]
    for arg in (args[2], args[3]):
        if isinstance(arg, KernelArg):
            steps.append(("MUL", "MulOptions", ins[k]) if arg is args[2] else ("ADD", "AddOptions", ins[k]))
            k += 1
    y = centred
    for j, (name, options, other) in enumerate(steps):
        dst = out if j == len(steps) - 1 else tr.temp(x.shape)
        tr.op(name, [y, other], [dst], options, fusedActivationFunction=none)
        y = dst


#: operator -> the operators that compute it (every operator of :data:`..kernel_ops.CHECKS`)
EMIT = {
    "aten::add.out": _binary("ADD", "AddOptions"),
    "aten::sub.out": _binary("SUB", "SubOptions"),
    "aten::mul.out": _binary("MUL", "MulOptions"),
    "aten::div.out": _binary("DIV", "DivOptions"),
    "aten::add.Scalar_out": _binary_scalar("ADD", "AddOptions"),
    "aten::sub.Scalar_out": _binary_scalar("SUB", "SubOptions"),
    "aten::mul.Scalar_out": _binary_scalar("MUL", "MulOptions"),
    "aten::div.Scalar_out": _binary_scalar("DIV", "DivOptions"),
    "aten::eq.Scalar_out": _compare_scalar("EQUAL"),
    "aten::ne.Scalar_out": _compare_scalar("NOT_EQUAL"),
    "aten::lt.Scalar_out": _compare_scalar("LESS"),
    "aten::le.Scalar_out": _compare_scalar("LESS_EQUAL"),
    "aten::gt.Scalar_out": _compare_scalar("GREATER"),
    "aten::ge.Scalar_out": _compare_scalar("GREATER_EQUAL"),
    "aten::logical_not.out": _unary("LOGICAL_NOT"),
    "aten::any.out": _emit_any,
    "aten::any.dims_out": _emit_any,
    "aten::where.self_out": _emit_where,
    "aten::full_like.out": _emit_full_like,
    "aten::expand_copy.out": _emit_expand,
    "aten::unsqueeze_copy.out": _emit_reshape,
    "aten::select_copy.int_out": _emit_select,
    "aten::permute_copy.out": _emit_permute,
    "aten::_softmax.out": _emit_softmax,
    "aten::native_layer_norm.out": _emit_layer_norm,
    "aten::exp.out": _unary("EXP"),
    "aten::tanh.out": _unary("TANH"),
    "aten::sigmoid.out": _unary("LOGISTIC"),
    "aten::neg.out": _unary("NEG"),
    "aten::sqrt.out": _unary("SQRT"),
    "aten::rsqrt.out": _unary("RSQRT"),
    "aten::abs.out": _unary("ABS"),
    "aten::relu.out": _unary("RELU"),
}

