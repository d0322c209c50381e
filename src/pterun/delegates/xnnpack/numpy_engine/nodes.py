"""Node builders: each turns one XNode into a step ``step(env)`` with everything static prepared once.

A builder reads its fields, checks them against the values they name, packs weights into the layout the
kernel in :mod:`.ops` wants, and emits a closure. Three paths recur:

* *real*: read inputs as real float32 (dequantizing or widening), compute, store through the output's
  rep (rounding, saturating and applying the fused clamp) — every node has it;
* *raw*: data movement (transpose, reshape, slice, pad, concat, copy, max pool, clamp) on the stored
  arrays when input and output share the same grid, as XNNPACK requires for quantized tensors;
* *integer*: static int8 convolutions and fully-connected layers accumulate zero-point-corrected integers
  (as float32, exact below 2**24) and requantize per output channel like XNNPACK's fp32 requantization.

Example::

    >>> from pterun.delegates.xnnpack.numpy_engine import BUILDERS
    >>> NAMES["Conv2d"] in BUILDERS and NAMES["Add"] in BUILDERS
    True
"""

from __future__ import annotations

import math

import numpy as np

from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.numpy_engine import pointwise, pool, windows
from pterun.delegates.xnnpack.numpy_engine.compiler import NAMES, Compiler, builds, chain  # noqa: F401  (NAMES: doctest)
from pterun.kernels._common import sum_in_order

F32 = np.float32


def emit_unary(c: Compiler, node, fn, in_id: int, out_id: int, fresh: bool = True) -> None:
    """out = store(fn(real(in))); ``fresh`` says fn returns a new array."""
    i = c.slot(in_id)
    rd = c.rep(in_id).real()
    o = c.out_slot(out_id)
    f = chain(rd, fn, c.rep(out_id).store(node.output_min, node.output_max, fresh or rd is not None))

    def step(env):
        env[o] = f(env[i])

    c.emit(step)


def emit_raw(c: Compiler, node, fn, in_id: int, out_id: int) -> None:
    """Data movement on stored arrays when input and output share a grid, else through real values."""
    rin, rout = c.rep(in_id), c.rep(out_id)
    if not rin.same_grid(rout):
        return emit_unary(c, node, fn, in_id, out_id, fresh=False)
    i, o = c.slot(in_id), c.out_slot(out_id)
    clamp = raw_clamp(rout, node.output_min, node.output_max)
    f = chain(fn, clamp)

    def step(env):
        env[o] = f(env[i])

    c.emit(step)


def raw_clamp(rep, lo: float, hi: float):
    """The fused clamp applied to stored values (quantized bounds for static int8), or None."""
    if not (np.isfinite(lo) or np.isfinite(hi)):
        return None
    if rep.kind == "static":
        qlo, qhi = Q.fused_range(lo, hi, rep.scale, rep.zero_point, rep.dtype)
        return lambda a: np.clip(a, qlo, qhi).astype(rep.dtype, copy=False)
    lo_, hi_ = rep.dtype.type(lo), rep.dtype.type(hi)
    return lambda a: pointwise.clip(a, lo_, hi_)


# -- elementwise ------------------------------------------------------------------------------------------
@builds(*[n for n in pointwise.UNARY if n not in ("Copy", "Clamp")])
def build_unary(c: Compiler, node) -> None:
    fn = pointwise.UNARY[node.name]
    lut_step(c, node, fn) or emit_unary(c, node, fn, node.input_id, node.output_id)


@builds("LeakyReLU", "ELU")
def build_param_unary(c: Compiler, node) -> None:
    fn = pointwise.leaky_relu(node.negative_slope) if node.name == "LeakyReLU" else pointwise.elu(node.alpha)
    lut_step(c, node, fn) or emit_unary(c, node, fn, node.input_id, node.output_id)


def lut_step(c: Compiler, node, fn) -> bool:
    """8-bit static quantized unary ops become a 256-entry table, as XNNPACK builds them."""
    rin, rout = c.rep(node.input_id), c.rep(node.output_id)
    if not (rin.kind == rout.kind == "static" and rin.dtype.itemsize == 1 and rout.dtype.itemsize == 1):
        return False
    if node.name == "Softmax":
        return False
    codes = np.arange(256, dtype=np.uint8).view(rin.dtype)
    fn = pointwise.LUT_REFERENCE.get(node.name, fn)
    with np.errstate(all="ignore"):  # e.g. log of the negative codes: whatever they become, as in XNNPACK
        real = np.nan_to_num(fn(rin.real()(codes)).astype(F32))
        qlo, qhi = Q.fused_range(node.output_min, node.output_max, rout.scale, rout.zero_point, rout.dtype)
        table = Q.quantize_reference(real, rout.scale, rout.zero_point, rout.dtype, qlo, qhi)
    i, o = c.slot(node.input_id), c.out_slot(node.output_id)

    def step(env):
        env[o] = table[env[i].view(np.uint8)]

    c.emit(step)
    return True


@builds("Copy", "Clamp")
def build_copy(c: Compiler, node) -> None:
    emit_raw(c, node, lambda a: a, node.input_id, node.output_id)


@builds(*pointwise.BINARY)
def build_binary(c: Compiler, node) -> None:
    fn = pointwise.BINARY[node.name]
    a, b, o = c.slot(node.input1_id), c.slot(node.input2_id), c.out_slot(node.output_id)
    if integer_binary(c, node, a, b, o):
        return
    ra, rb = c.rep(node.input1_id).real(), c.rep(node.input2_id).real()
    st = c.rep(node.output_id).store(node.output_min, node.output_max, fresh=True)
    ra, rb = ra or (lambda x: x), rb or (lambda x: x)
    f = chain(lambda pair: fn(ra(pair[0]), rb(pair[1])), st)

    def step(env):
        env[o] = f((env[a], env[b]))

    c.emit(step)


def integer_binary(c: Compiler, node, a: int, b: int, o: int) -> bool:
    """Static int8 add, subtract and multiply in XNNPACK's integer arithmetic; False when not applicable."""
    r1, r2, ro = c.rep(node.input1_id), c.rep(node.input2_id), c.rep(node.output_id)
    if node.name not in ("Add", "Subtract", "Multiply") or not (
            r1.kind == r2.kind == ro.kind == "static" and r1.dtype == r2.dtype == ro.dtype == np.int8):
        return False
    try:
        op = Q.integer_binary_params(node.name, (r1.scale, r1.zero_point), (r2.scale, r2.zero_point),
                                     (ro.scale, ro.zero_point))
    except ValueError as e:
        raise c.fail(str(e)) from None
    qlo, qhi = Q.fused_range(node.output_min, node.output_max, ro.scale, ro.zero_point, ro.dtype)

    def step(env):
        env[o] = op(env[a], env[b], qlo, qhi, np.int8)

    c.emit(step)
    return True


# -- shape / data movement -----------------------------------------------------------------------------------
@builds("StaticTranspose")
def build_transpose(c: Compiler, node) -> None:
    perm = tuple(node.perm)
    if sorted(perm) != list(range(len(perm))) or node.num_dims != len(perm):
        raise c.fail(f"perm {list(perm)} is not a permutation of {node.num_dims} dims")
    emit_raw(c, node, lambda a: a.transpose(perm), node.input_id, node.output_id)


@builds("StaticReshape")
def build_reshape(c: Compiler, node) -> None:
    shape = tuple(-1 if d == 0 else d for d in node.new_shape)
    if shape.count(-1) > 1 or node.num_dims != len(shape):
        raise c.fail(f"new_shape {list(node.new_shape)} has more than one inferred (0) dim")
    emit_raw(c, node, lambda a: a.reshape(shape), node.input_id, node.output_id)


@builds("StaticSlice")
def build_slice(c: Compiler, node) -> None:
    if not len(node.offsets) == len(node.sizes) == node.num_dims:
        raise c.fail(f"offsets {list(node.offsets)} and sizes {list(node.sizes)} do not match num_dims "
                     f"{node.num_dims}")
    index = tuple(slice(o, o + s if s else None) for o, s in zip(node.offsets, node.sizes))
    emit_raw(c, node, lambda a: a[index], node.input_id, node.output_id)


@builds("StaticConstantPad")
def build_pad(c: Compiler, node) -> None:
    pre, post = tuple(node.pre_paddings), tuple(node.post_paddings)
    if len(pre) != len(post):
        raise c.fail(f"pre_paddings {list(pre)} and post_paddings {list(post)} differ in length")
    rout = c.rep(node.output_id)
    value = node.padding_value
    if rout.kind == "static" and c.rep(node.input_id).same_grid(rout):
        value = int(Q.quantize(np.array([value], F32), rout.scale, rout.zero_point, rout.dtype)[0])
    emit_raw(c, node, lambda a: pool.constant_pad(a, pre, post, value), node.input_id, node.output_id)


@builds("Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5")
def build_concat(c: Compiler, node) -> None:
    n = int(node.name[-1])
    ids = [node.input1_id, node.input2_id, node.input3_id, node.input4_id, node.input5_id][:n]
    axis, rout = node.axis, c.rep(node.output_id)
    slots = [c.slot(i) for i in ids]
    o = c.out_slot(node.output_id)
    if all(c.rep(i).same_grid(rout) for i in ids):
        clamp = raw_clamp(rout, node.output_min, node.output_max) or (lambda a: a)

        def step(env):
            env[o] = clamp(np.concatenate([env[s] for s in slots], axis=axis))
    else:
        reads = [c.rep(i).real() or (lambda a: a) for i in ids]
        st = rout.store(node.output_min, node.output_max, fresh=True) or (lambda a: a)

        def step(env):
            env[o] = st(np.concatenate([r(env[s]) for r, s in zip(reads, slots)], axis=axis))

    c.emit(step)


# -- pooling, resize, softmax, convert, matmul ---------------------------------------------------------------
def pool_geometry(c: Compiler, node) -> windows.Geometry:
    ph, pw = node.pooling_height, node.pooling_width
    if ph < 1 or pw < 1:
        raise c.fail(f"pooling window {ph}x{pw} is empty")
    sh = getattr(node, "stride_height", ph) or 1
    sw = getattr(node, "stride_width", pw) or 1
    dh = max(getattr(node, "dilation_height", 1), 1)  # the avg-pool exporter writes 0 for "unused"
    dw = max(getattr(node, "dilation_width", 1), 1)
    pads = (node.padding_top, node.padding_right, node.padding_bottom, node.padding_left)
    return windows.Geometry(pads, (ph, pw), (sh, sw), (dh, dw), bool(node.flags & G.FLAG_TENSORFLOW_SAME_PADDING))


@builds("MaxPooling2d")
def build_max_pool(c: Compiler, node) -> None:
    g = pool_geometry(c, node)
    scratch = c.scratch
    emit_raw(c, node, lambda a: pool.max_pool(a, g, scratch), node.input_id, node.output_id)


@builds("AvgPooling2d")
def build_avg_pool(c: Compiler, node) -> None:
    emit_unary(c, node, pool.AvgPool(pool_geometry(c, node)), node.input_id, node.output_id)


@builds("GlobalAvgPooling2d")
def build_global_avg_pool(c: Compiler, node) -> None:
    keep = bool(node.flags & G.FLAG_KEEP_DIMS)
    rin, rout = c.rep(node.input_id), c.rep(node.output_id)
    if rin.kind == rout.kind == "static" and rin.dtype.itemsize == 1:  # integer sums, as XNNPACK's mean
        i, o = c.slot(node.input_id), c.out_slot(node.output_id)
        qlo, qhi = Q.fused_range(node.output_min, node.output_max, rout.scale, rout.zero_point, rout.dtype)

        def step(env):
            a = env[i]
            count = a.size // max(a.shape[0] * a.shape[-1], 1)
            mult, offset = Q.mean_params(rin.scale, rin.zero_point, rout.scale, rout.zero_point, count)
            s = pool.global_avg_pool(a, keep, divide=False, exact=count > 2**16)  # int sums, exact
            env[o] = Q.requantize_sum(s, mult, offset, qlo, qhi, rout.dtype)

        return c.emit(step)
    emit_unary(c, node, lambda a: pool.global_avg_pool(a, keep), node.input_id, node.output_id)


@builds("Mean")
def build_mean(c: Compiler, node) -> None:
    """A float32 mean over ``axes`` (pterun's own node: merged graphs hold the program's ``mean.out`` between two
    delegates), summed in float32 as ExecuTorch's portable kernel does."""
    axes, keep = tuple(node.axes), bool(node.keepdim)

    def mean(a):
        count = math.prod(a.shape[k] for k in axes)
        s = sum_in_order(a, axes, F32, keepdims=keep)  # left to right, as the kernel: NumPy's reduce is pairwise
        return np.divide(s, F32(count), out=s) if isinstance(s, np.ndarray) else s / F32(count)

    emit_unary(c, node, mean, node.input_id, node.output_id)


@builds("Pick")
def build_pick(c: Compiler, node) -> None:
    """One element along ``dim`` (pterun's own node: a merged graph's ``select_copy``), a negative index from the
    end of the dim's size when the graph runs; out of range raises, as the kernel does."""
    d, index = int(node.dim), int(node.element)

    def pick(a):
        if not -a.shape[d] <= index < a.shape[d]:
            raise IndexError(f"select index {index} is out of range for dim {d} of {list(a.shape)}")
        return np.take(a, index, axis=d)

    emit_unary(c, node, pick, node.input_id, node.output_id)


@builds("Kernel")
def build_kernel(c: Compiler, node) -> None:
    """A portable operator a merged graph holds as itself (pterun's own node): the kernel the interpreter would
    have run, on the same arrays, so the numbers are the interpreter's. Its first output is the node's."""
    ins = [c.slot(node.fields[f"input{k}_id"]) for k in range(1, _count_inputs(node) + 1)]
    v = c.value(node.output_id)
    o, shape, dtype = c.out_slot(node.output_id), tuple(v.dims), np.dtype(G.STORAGE_DTYPES[v.datatype])
    call = node.call

    def step(env):
        r = call(*[env[i] for i in ins])[0]
        out = np.empty(shape, dtype)
        np.copyto(out, np.broadcast_to(r, shape) if np.shape(r) != shape else r, casting="unsafe")
        env[o] = out

    c.emit(step)


def _count_inputs(node) -> int:
    k = 0
    while f"input{k + 1}_id" in node.fields:
        k += 1
    return k


@builds("ArgMaxPooling2d")
def build_argmax_pool(c: Compiler, node) -> None:
    g = pool_geometry(c, node)
    i = c.slot(node.input_id)
    rd = c.rep(node.input_id).real()
    rv = c.rep(node.output_value_id)
    same = c.rep(node.input_id).same_grid(rv)
    st = None if same else rv.store()
    vo, io = c.out_slot(node.output_value_id), c.out_slot(node.output_index_id)
    idx_dtype = c.rep(node.output_index_id).dtype

    def step(env):
        x = env[i]
        best, idx = pool.argmax_pool(x if same else chain(rd)(x), g)
        env[vo] = best if st is None else st(best)
        env[io] = idx.astype(idx_dtype, copy=False)

    c.emit(step)


@builds("StaticResizeBilinear2D")
def build_resize(c: Compiler, node) -> None:
    if node.new_height < 1 or node.new_width < 1:
        raise c.fail(f"output size {node.new_height}x{node.new_width} is empty")
    fn = pool.ResizeBilinear(node.new_height, node.new_width, bool(node.flags & G.FLAG_ALIGN_CORNERS),
                            bool(node.flags & G.FLAG_TENSORFLOW_LEGACY))
    emit_unary(c, node, fn, node.input_id, node.output_id)


@builds("Convert")
def build_convert(c: Compiler, node) -> None:
    rin, rout = c.rep(node.input_id), c.rep(node.output_id)
    if rin.same_grid(rout):
        return emit_raw(c, node, lambda a: a, node.input_id, node.output_id)
    if rin.kind == rout.kind == "static" and rin.dtype == rout.dtype == np.int8:  # int8 -> int8 requantization
        try:
            op = Q.RequantizeParams(rin.scale, rin.zero_point, rout.scale, rout.zero_point)
        except ValueError as e:
            raise c.fail(str(e)) from None
        qlo, qhi = Q.fused_range(node.output_min, node.output_max, rout.scale, rout.zero_point, rout.dtype)
        i, o = c.slot(node.input_id), c.out_slot(node.output_id)

        def step(env):
            env[o] = op(env[i], qlo, qhi)

        return c.emit(step)
    emit_unary(c, node, lambda a: a, node.input_id, node.output_id, fresh=False)


@builds("BatchMatrixMultiply")
def build_bmm(c: Compiler, node) -> None:
    transpose_b = bool(node.flags & G.FLAG_TRANSPOSE_WEIGHTS)
    if c.is_const(node.input2_id):  # constant B: dequantize/transpose once
        b = c.real_const(node.input2_id)
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2) if transpose_b else b)
        a_slot = c.slot(node.input1_id)
        ra = c.rep(node.input1_id).real() or (lambda x: x)
        o = c.out_slot(node.output_id)
        st = chain(c.rep(node.output_id).store(node.output_min, node.output_max, fresh=True))

        def step(env):
            env[o] = st(np.matmul(ra(env[a_slot]), b))

        return c.emit(step)
    a, bs, o = c.slot(node.input1_id), c.slot(node.input2_id), c.out_slot(node.output_id)
    ra = c.rep(node.input1_id).real() or (lambda x: x)
    rb = c.rep(node.input2_id).real() or (lambda x: x)
    st = chain(c.rep(node.output_id).store(node.output_min, node.output_max, fresh=True))

    def step(env):
        bv = rb(env[bs])
        env[o] = st(np.matmul(ra(env[a]), np.swapaxes(bv, -1, -2) if transpose_b else bv))

    c.emit(step)


@builds("ScaledDotProductAttention")
def build_sdpa(c: Compiler, node) -> None:
    raise c.fail("XNNScaledDotProductAttention is not supported (the XNNPACK runtime does not define it either)")
