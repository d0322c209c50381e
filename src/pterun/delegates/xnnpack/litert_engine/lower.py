"""How a portable operator a merged graph holds as itself (a :data:`.graph.KERNEL` node) becomes TFLite operators.

The arguments were checked when the merge was planned (:func:`..kernel_ops.supports`); :data:`EMIT` holds the
operators that compute each. Elementwise arithmetic, comparisons, ``where``, views and copies give the portable
kernel's numbers exactly (:data:`..kernel_ops.BITWISE`); the transcendental functions, softmax, layer norm (a
mean, the centred mean of squares, a square root and a division; bit for bit where a node must be, :mod:`.exact`),
convolutions and matrix products give them within the float tolerance the NumPy engine has against ExecuTorch's
kernels: their sums run in another order and XNNPACK's ``exp`` and ``tanh`` are its own approximations.
Operators on bool values (comparisons, ``logical_not``, ``any``, ``where``'s condition) run on LiteRT's builtin
kernels, the float ones mostly on XNNPACK, within the one invocation.

Portable convolutions and pools are NCHW, TFLite's NHWC: a convolution's NHWC result is kept as its NCHW output's
twin (``nhwc``), which the next convolution, pool, batch norm or elementwise kernel reads instead; the NCHW
tensor itself is written (one TRANSPOSE, by the translator's ``tensor_of``) only where something reads it as
NCHW. A batch norm of a convolution's output that nothing else reads is folded into that convolution's weights.
"""

from __future__ import annotations

import numpy as np

from pterun.delegates import KernelArg
from pterun.delegates.xnnpack.kernel_ops import dims_of, pair, supports
from pterun.delegates.xnnpack.litert_engine.exact import emit_layer_norm_in_order

__all__ = ["EMIT", "KernelRules"]

F32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)
I64 = np.dtype(np.int64)
#: the TFLite tensor type of each dtype a kernel node's temporaries and scalars have
_TYPE_NAMES = {F32: "FLOAT32", BOOL: "BOOL", I64: "INT64"}


class KernelRules:
    """The translator's rule for :data:`.graph.KERNEL` nodes (a mixin of the translator in :mod:`.translate`)."""

    def node_Kernel(self, n) -> None:
        emit = EMIT.get(n.op)
        problem = "no lowering" if emit is None else supports(n.op, n.args)
        if problem is not None:
            raise self.no(f"{n.op}: {problem}")
        count = sum(1 for a in n.args if isinstance(a, KernelArg) and not a.out)
        ins = _Inputs(self, [n.fields[f"input{k}_id"] for k in range(1, count + 1)])
        first = len(self.operators)
        emit(self, n.args, ins, self.tensor_of(n.output_id))
        self.allow_builtin(first)

    def const_input(self, k: int) -> np.ndarray:
        """The constant data of the node's input ``k`` (from 0), shaped (the checks made sure it is constant)."""
        v = self.value(self.node.fields[f"input{k + 1}_id"])
        if v.data is None:
            raise self.no(f"{self.node.op}: input {k} is not a constant of the graph")
        return np.frombuffer(v.data, np.float32).reshape(v.dims)

    def const_data(self, t: int) -> np.ndarray:
        """The array a constant tensor of this model will hold (as :meth:`const` was given it)."""
        buf = self.tensors[t].buffer
        data = next(d for b, d, _ in self.blobs if b == buf)
        return data.view(np.float32).reshape(self.tensors[t].shape)

    def set_const_data(self, t: int, arr: np.ndarray) -> None:
        """Replace the contents of constant tensor ``t`` (same shape and dtype) before the model is written."""
        buf = self.tensors[t].buffer
        k = next(i for i, (b, _, _) in enumerate(self.blobs) if b == buf)
        self.blobs[k] = (buf, np.ascontiguousarray(arr).reshape(-1).view(np.uint8), 0)

    def scalar(self, value, dtype=F32) -> int:
        """A constant of shape [] (``const`` would make it [1]: FILL takes only a true scalar)."""
        data = np.asarray([value], dtype)
        return self.add_tensor([], getattr(self.S.TensorType, _TYPE_NAMES[np.dtype(dtype)]), self.buffer(data))

    def temp(self, shape, dtype=F32) -> int:
        return self.add_tensor(list(shape), getattr(self.S.TensorType, _TYPE_NAMES[np.dtype(dtype)]))


class _Inputs:
    """The tensors of a kernel node's inputs, made when an emitter first asks (a weight it transposes itself
    never becomes a tensor of the model)."""

    def __init__(self, tr, vids: list):
        self.tr, self.vids = tr, vids

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.tr.tensor_of(v) for v in self.vids[k]]
        return self.tr.tensor_of(self.vids[k])

    def nhwc(self, k: int) -> int | None:
        """The NHWC twin of input ``k`` (an earlier kernel's [N, C, H, W] output held as [N, H, W, C]), or None;
        reading it does not write the NCHW tensor."""
        tr = self.tr
        t = tr.tid.get(tr.alias.get(self.vids[k], self.vids[k]))
        return tr.nhwc.get(t) if t is not None else None


def _same_4d(args, count: int) -> bool:
    """Whether inputs 0..count-1 and the output are all [N, C, H, W] of one shape (NHWC twins then line up)."""
    shapes = {tuple(a.shape) for a in args if isinstance(a, KernelArg) and (a.out or a.index < count)}
    return len(shapes) == 1 and len(next(iter(shapes))) == 4


def _follow(tr, args, ins, out, count: int, emit_on) -> None:
    """``emit_on(inputs, output)`` on the inputs' NHWC twins where they all have one (the output then becomes
    one too), else on the NCHW tensors."""
    twins = _all_nhwc(ins, count) if _same_4d(args, count) else None
    if twins is None:
        emit_on(ins[:count], out)
        return
    n, c, h, w = [a for a in args if isinstance(a, KernelArg) and a.out][0].shape
    y = tr.temp((n, h, w, c))
    emit_on(twins, y)
    _nchw(tr, y, out)


def _binary(name: str, options: str | None):
    def emit(tr, args, ins, out):
        extra = {} if options is None else {"fusedActivationFunction": tr.S.ActivationFunctionType.NONE}
        _follow(tr, args, ins, out, 2, lambda i, o: tr.op(name, i, [o], options, **extra))
    return emit


def _binary_scalar(name: str, options: str | None):
    def emit(tr, args, ins, out):
        extra = {} if options is None else {"fusedActivationFunction": tr.S.ActivationFunctionType.NONE}
        dtype = args[0].dtype  # float32, or int64 with an int (kernel_ops' checks)
        tr.op(name, [ins[0], tr.scalar(np.asarray(args[1]).astype(dtype), dtype)], [out], options, **extra)
    return emit


def _compare_scalar(name: str):
    def emit(tr, args, ins, out):
        tr.op(name, [ins[0], tr.scalar(np.float32(args[1]))], [out])
    return emit


def _unary(name: str):
    def emit(tr, args, ins, out):
        _follow(tr, args, ins, out, 1, lambda i, o: tr.op(name, i, [o]))
    return emit


def _emit_any(tr, args, ins, out):
    x = args[0]
    rank = len(x.shape)
    dims = range(rank) if args[1] is None else sorted({d % rank for d in dims_of(args[1])})
    tr.op("REDUCE_ANY", [ins[0], tr.i32(list(dims))], [out], "ReducerOptions", keepDims=bool(args[2]))


def _emit_where(tr, args, ins, out):
    tr.op("SELECT_V2", ins[:3], [out])


def _emit_cast(tr, args, ins, out):
    """float32 -> int64, truncating toward zero as the portable kernel's ``static_cast``."""
    tr.op("CAST", ins[:1], [out])


def _emit_embedding(tr, args, ins, out):
    """Rows of a small constant table (:data:`..kernel_ops.SMALL_TABLE`) by int64 index: a GATHER on axis 0."""
    tr.op("GATHER", ins[:2], [out], "GatherOptions", axis=0, batchDims=0)


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
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims, var the mean of squared deviations;
    ExecuTorch's own sums and rounding where the node must be bit for bit (:mod:`.exact`)."""
    if tr.node.fields.get("bitwise"):
        return emit_layer_norm_in_order(tr, args, ins, out)
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


def _nhwc(tr, ins, k: int, shape) -> int:
    """Input ``k`` [N, C, H, W] as [N, H, W, C]: the NHWC twin an earlier kernel left, else a TRANSPOSE."""
    twin = ins.nhwc(k)
    if twin is not None:
        return twin
    n, c, h, w = shape
    y = tr.temp((n, h, w, c))
    tr.op("TRANSPOSE", [ins[k], tr.i32([0, 2, 3, 1])], [y])
    return y


def _nchw(tr, y: int, out: int) -> None:
    """``out`` holds ``y`` [N, H, W, C] as [N, C, H, W]: written only if something reads it as NCHW (the next
    convolution, pool or elementwise kernel takes ``y`` itself), so a chain of them never leaves NHWC."""
    tr.nhwc[out] = y
    tr.pending_nchw.add(out)


def _all_nhwc(ins, count: int) -> list | None:
    """The NHWC twins of inputs 0..count-1 when every one has one, else None."""
    twins = [ins.nhwc(k) for k in range(count)]
    return None if None in twins else twins


def _padded(tr, x: int, shape, pads, value: float = 0.0) -> tuple[int, tuple]:
    """``x`` [N, H, W, C] padded by (top, bottom, left, right) with ``value``, and its shape."""
    n, h, w, c = shape
    top, bottom, left, right = pads
    if not any(pads):
        return x, shape
    shaped = (n, h + top + bottom, w + left + right, c)
    y = tr.temp(shaped)
    paddings = tr.i32([[0, 0], [top, bottom], [left, right], [0, 0]])
    if value == 0.0:
        tr.op("PAD", [x, paddings], [y])
    else:
        tr.op("PADV2", [x, paddings, tr.scalar(np.float32(value))], [y])
    return y, shaped


def _emit_conv(tr, args, ins, out):
    """NCHW -> NHWC, explicit padding, CONV_2D or DEPTHWISE_CONV_2D (VALID), NHWC -> NCHW; a 1-d convolution as
    a 2-d one of height 1."""
    x, w, b, stride, padding, dilation, _, _, groups, o = args
    if len(x.shape) == 3:
        return _emit_conv1d(tr, args, ins, out)
    n, cin, h, wd = x.shape
    ph, pw = pair(padding)
    xs, shape = _padded(tr, _nhwc(tr, ins, 0, x.shape), (n, h, wd, cin), (ph, ph, pw, pw))
    _conv2d(tr, xs, args, tr.const_input(1), out, o.shape)


def _emit_conv1d(tr, args, ins, out):
    x, w, b, stride, padding, dilation, _, _, groups, o = args
    (n, cin, length), cout = x.shape, w.shape[0]
    x4 = tr.temp((n, 1, length, cin))  # [N, C, L] -> [N, L, C] -> [N, 1, L, C]
    t = tr.temp((n, length, cin))
    tr.op("TRANSPOSE", [ins[0], tr.i32([0, 2, 1])], [t])
    tr.op("RESHAPE", [t, tr.i32([n, 1, length, cin])], [x4])
    p = pair(padding)[0]
    xs, _ = _padded(tr, x4, (n, 1, length, cin), (0, 0, p, p))
    wide = (x, w, b, (1, pair(stride)[0]), (0, p), (1, pair(dilation)[0])) + tuple(args[6:])
    y4 = tr.temp((n, 1, o.shape[2], cout))
    _conv2d(tr, xs, wide, tr.const_input(1)[:, :, None, :], None, (n, cout, 1, o.shape[2]), y=y4)
    t = tr.temp((n, o.shape[2], cout))
    tr.op("RESHAPE", [y4, tr.i32([n, o.shape[2], cout])], [t])
    tr.op("TRANSPOSE", [t, tr.i32([0, 2, 1])], [out])


def _conv2d(tr, xs: int, args, weight: np.ndarray, out, out_shape, y: int | None = None) -> None:
    """The convolution of ``xs`` (NHWC, padded) into ``y`` (a new NHWC tensor unless given), whose NCHW twin is
    ``out`` (None: no twin)."""
    x, w, b, stride, padding, dilation, _, _, groups = args[:9]
    cin, cout = x.shape[1], w.shape[0]
    bias = tr.const_input(2) if isinstance(b, KernelArg) else np.zeros(cout, np.float32)
    sh, sw = pair(stride)
    dh, dw = pair(dilation)
    if y is None:
        y = tr.temp((out_shape[0], out_shape[2], out_shape[3], cout))
    none = tr.S.ActivationFunctionType.NONE
    # OIHW -> OHWI; depthwise: [C*M, 1, H, W] -> [1, H, W, C*M]
    filt = np.ascontiguousarray(weight.transpose(0, 2, 3, 1) if groups == 1 else weight.transpose(1, 2, 3, 0))
    ft, bt = tr.const(filt, "FLOAT32"), tr.const(np.array(bias, np.float32), "FLOAT32")
    if groups == 1:
        tr.op("CONV_2D", [xs, ft, bt], [y], "Conv2DOptions", padding=tr.S.Padding.VALID, strideH=sh,
              strideW=sw, dilationHFactor=dh, dilationWFactor=dw, fusedActivationFunction=none)
    else:
        tr.op("DEPTHWISE_CONV_2D", [xs, ft, bt], [y], "DepthwiseConv2DOptions", padding=tr.S.Padding.VALID,
              strideH=sh, strideW=sw, dilationHFactor=dh, dilationWFactor=dw, depthMultiplier=cout // cin,
              fusedActivationFunction=none)
    if out is not None:
        tr.convs[y] = (ft, bt, groups == 1)
        _nchw(tr, y, out)


def _fold_into_conv(tr, ins, scale: np.ndarray, shift: np.ndarray) -> int | None:
    """The output of the convolution that produced input 0, its weights and bias now scaled by ``scale`` and
    shifted by ``shift`` per output channel (a batch norm folded in), where nothing else reads that output;
    else None."""
    twin, vid = ins.nhwc(0), ins.vids[0]
    conv = tr.convs.get(twin)
    if conv is None or len(tr.consumers.get(vid, ())) != 1 or tr.value(vid).external_id is not None:
        return None
    ft, bt, dense = conv
    w = tr.const_data(ft)
    tr.set_const_data(ft, (w * (scale.reshape(-1, 1, 1, 1) if dense else scale)).astype(np.float32))
    tr.set_const_data(bt, (tr.const_data(bt) * scale + shift).astype(np.float32))
    del tr.convs[twin]
    return twin


def _emit_batch_norm(tr, args, ins, out):
    """x * scale + shift per channel, scale = weight / sqrt(var + eps), shift = bias - mean * scale."""
    x, w, b, mean, var = args[:5]
    eps = np.float32(args[6])
    c = x.shape[1]
    k = 1
    consts = {}
    for name, a in (("w", w), ("b", b)):
        if isinstance(a, KernelArg):
            consts[name] = tr.const_input(k)
            k += 1
    m, v = tr.const_input(k), tr.const_input(k + 1)
    scale = (consts.get("w", np.ones(c, np.float32)) / np.sqrt(v + eps)).astype(np.float32)
    shift = (consts.get("b", np.zeros(c, np.float32)) - m * scale).astype(np.float32)
    folded = _fold_into_conv(tr, ins, scale, shift)
    if folded is not None:
        _nchw(tr, folded, out)
        return
    none = tr.S.ActivationFunctionType.NONE
    twin = ins.nhwc(0)
    src, shape, per = (ins[0], x.shape, (1, c, 1, 1)) if twin is None else \
        (twin, (x.shape[0], x.shape[2], x.shape[3], c), (c,))
    scaled = tr.temp(shape)
    dst = out if twin is None else tr.temp(shape)
    tr.op("MUL", [src, tr.const(scale.reshape(per), "FLOAT32")], [scaled], "MulOptions",
          fusedActivationFunction=none)
    tr.op("ADD", [scaled, tr.const(shift.reshape(per), "FLOAT32")], [dst], "AddOptions",
          fusedActivationFunction=none)
    if twin is not None:
        _nchw(tr, dst, out)


def _emit_pool(name: str, max_pool: bool):
    def emit(tr, args, ins, out):
        x, kernel, stride, padding = args[:4]
        o = [a for a in args if isinstance(a, KernelArg) and a.out][0]
        n, c, h, w = x.shape
        kh, kw = pair(kernel)
        sh, sw = pair(stride) if len(tuple(stride)) else (kh, kw)
        ph, pw = pair(padding)
        xs, _ = _padded(tr, _nhwc(tr, ins, 0, x.shape), (n, h, w, c), (ph, ph, pw, pw),
                        -np.inf if max_pool else 0.0)
        y = tr.temp((n, o.shape[2], o.shape[3], c))
        tr.op(name, [xs], [y], "Pool2DOptions", padding=tr.S.Padding.VALID, strideH=sh, strideW=sw,
              filterHeight=kh, filterWidth=kw, fusedActivationFunction=tr.S.ActivationFunctionType.NONE)
        _nchw(tr, y, out)
    return emit


def _emit_addmm(tr, args, ins, out):
    """bias + x @ w: FULLY_CONNECTED where the weights are a constant of the graph (a transposed weight is, once
    the merge computed the transpose), else BATCH_MATMUL; then the bias added (it broadcasts, as addmm's)."""
    none = tr.S.ActivationFunctionType.NONE
    y = tr.temp(args[5].shape)
    if tr.value(tr.node.fields["input3_id"]).data is not None:
        weight = np.ascontiguousarray(tr.const_input(2).T)  # [in, out] -> FULLY_CONNECTED's [out, in]
        tr.op("FULLY_CONNECTED", [ins[1], tr.const(weight, "FLOAT32"), -1], [y], "FullyConnectedOptions",
              fusedActivationFunction=none)
    else:
        tr.op("BATCH_MATMUL", [ins[1], ins[2]], [y], "BatchMatMulOptions", adjX=False, adjY=False)
    tr.op("ADD", [y, ins[0]], [out], "AddOptions", fusedActivationFunction=none)


def _emit_matmul(tr, args, ins, out):
    tr.op("BATCH_MATMUL", ins[:2], [out], "BatchMatMulOptions", adjX=False, adjY=False)


def _emit_hardtanh(tr, args, ins, out):
    lo, hi = float(args[1]), float(args[2])
    act = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}.get((lo, hi))

    def clamp(i, o):
        if act is not None:
            tr.op(act, i, [o])
            return
        mid = tr.add_tensor(list(tr.tensors[o].shape), tr.tensors[o].type)
        tr.op("MAXIMUM", [i[0], tr.scalar(np.float32(lo))], [mid])
        tr.op("MINIMUM", [mid, tr.scalar(np.float32(hi))], [o])
    _follow(tr, args, ins, out, 1, clamp)


def _emit_gelu(tr, args, ins, out):
    tr.op("GELU", ins[:1], [out], "GeluOptions", approximate=args[1] == "tanh")


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
    "dim_order_ops::_clone_dim_order.out": _emit_reshape,
    "aten::alias_copy.out": _emit_reshape,
    "aten::detach_copy.out": _emit_reshape,
    "aten::hardtanh.out": _emit_hardtanh,
    "aten::gelu.out": _emit_gelu,
    "aten::convolution.out": _emit_conv,
    "aten::_native_batch_norm_legit_no_training.out": _emit_batch_norm,
    "aten::max_pool2d_with_indices.out": _emit_pool("MAX_POOL_2D", True),
    "aten::avg_pool2d.out": _emit_pool("AVERAGE_POOL_2D", False),
    "aten::minimum.out": _binary("MINIMUM", None),
    "aten::maximum.out": _binary("MAXIMUM", None),
    "dim_order_ops::_to_dim_order_copy.out": _emit_cast,
    "aten::embedding.out": _emit_embedding,
    "aten::addmm.out": _emit_addmm,
    "aten::mm.out": _emit_matmul,
    "aten::bmm.out": _emit_matmul,
}

