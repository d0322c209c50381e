"""Builders for the GEMM-shaped nodes: fully connected, convolution, depthwise and transposed convolution.

Weights are decoded, dequantized or kept as integers, and packed once here. Static int8 nodes (qint8
input and output with qcint8/qint8 weights and an int32 bias) take the *integer* path: the kernel runs on
``x - zero_point`` with integer-valued float32 weights, the int32 bias is added to the accumulator, and
the result is requantized per output channel with ``input_scale * weight_scale / output_scale``, as
XNNPACK's fp32 requantization does. Everything else (fp32, fp16, bf16 and dynamically quantized inputs
with qcint8 / qcint4 / qbint4 weights) takes the *real* path on dequantized float32 weights.

Example::

    >>> from pterun.delegates.xnnpack.numpy_engine import BUILDERS, NAMES
    >>> NAMES["FullyConnected"] in BUILDERS
    True
"""

from __future__ import annotations

import numpy as np

from pterun import threads
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.numpy_engine import conv, windows
from pterun.delegates.xnnpack.numpy_engine.compiler import Compiler, builds, chain

F32 = np.float32


def integer_path(c: Compiler, x_id: int, w_id: int, o_id: int) -> bool:
    rx, ro, wv = c.rep(x_id), c.rep(o_id), c.value(w_id)
    return (rx.kind == ro.kind == "static" and wv.data is not None and wv.quant is not None
            and wv.quant.kind in (G.PER_CHANNEL, G.PER_TENSOR))


def weight_ints(c: Compiler, w_id: int) -> np.ndarray:
    """Integer weight values (minus any per-tensor zero point) as float32."""
    q = c.value(w_id).quant
    w = c.const(w_id).astype(F32)
    if q.kind == G.PER_TENSOR and q.zero_point:
        w -= F32(q.zero_point)
    return w


def weight_scales(c: Compiler, w_id: int, channels: int) -> np.ndarray:
    """One weight scale per output channel."""
    q = c.value(w_id).quant
    if q.kind == G.PER_TENSOR:
        return np.full(channels, q.scale, F32)
    s = c.channel_scale(w_id).reshape(-1)
    if s.size != channels:
        raise c.fail(f"weights have {s.size} per-channel scales for {channels} output channels")
    return s


def bias_array(c: Compiler, b_id: int, channels: int, acc_scale=None) -> np.ndarray | None:
    """The bias as float32: in accumulator units on the integer path (``acc_scale`` given), else real."""
    if b_id == G.INVALID_ID:
        return None
    if not c.is_const(b_id):
        raise c.fail(f"bias {c.value(b_id).describe()} must be a constant")
    bv = c.value(b_id)
    if acc_scale is not None and bv.quant is not None:
        b = c.const(b_id).astype(F32)  # int32 already in accumulator units
    elif acc_scale is not None:
        b = c.real_const(b_id) / acc_scale
    else:
        b = c.real_const(b_id)
    b = b.reshape(-1)
    if b.size != channels:
        raise c.fail(f"bias has {b.size} elements for {channels} output channels")
    return b.astype(F32)


def emit_gemm(c: Compiler, node, x_id: int, w_id: int, o_id: int, channels: int, make_kernel) -> None:
    """Emit a step for a weight-stationary node; ``make_kernel(weights, bias)`` builds its kernel."""
    x, o = c.slot(x_id), c.out_slot(o_id)
    rx, ro = c.rep(x_id), c.rep(o_id)
    if integer_path(c, x_id, w_id, o_id):
        ws = weight_scales(c, w_id, channels)
        acc_scale = F32(rx.scale) * ws
        kernel = make_kernel(weight_ints(c, w_id), bias_array(c, node.bias_id, channels, acc_scale))
        if hasattr(kernel, "k_splits"):  # |x - zero point| <= 255: split K where a float32 sum could round
            kernel.k_splits = conv.exact_splits(kernel.wmat if hasattr(kernel, "wmat") else kernel.w_kn, 255)
        mult = (acc_scale / F32(ro.scale)).astype(F32)
        qlo, qhi = Q.fused_range(node.output_min, node.output_max, ro.scale, ro.zero_point, ro.dtype)
        zx, zo, dt = F32(rx.zero_point), ro.zero_point, ro.dtype

        def f(a):
            xf = a.astype(F32)
            if zx:
                xf -= zx
            return Q.requantize(kernel(xf), mult, zo, qlo, qhi, dt, inplace=True)
    else:
        kernel = make_kernel(c.real_const(w_id), bias_array(c, node.bias_id, channels))
        lo, hi = node.output_min, node.output_max
        if hasattr(kernel, "clamp") and ro.kind == "float" and ro.dtype == F32 and (np.isfinite(lo) or np.isfinite(hi)):
            kernel.clamp = (F32(lo), F32(hi))  # applied by the kernel to each block while it is in cache
            f = chain(rx.real(), kernel)
        else:
            f = chain(rx.real(), kernel, ro.store(lo, hi, fresh=True))

    def step(env):
        env[o] = f(env[x])

    c.emit(step)


# -- fully connected ------------------------------------------------------------------------------------------
@builds("FullyConnected")
def build_fully_connected(c: Compiler, node) -> None:
    transposed = bool(node.flags & G.FLAG_TRANSPOSE_WEIGHTS)  # filter is [in, out] instead of [out, in]
    wv = c.value(node.filter_id)
    if len(wv.dims) != 2:
        raise c.fail(f"filter {wv.describe()} must be 2-D")
    n_out = wv.dims[1] if transposed else wv.dims[0]
    if wv.data is None:
        return emit_dynamic_fc(c, node, transposed)
    exact = qd8_exact_gemm(c, node, transposed, n_out)

    def make_kernel(w, bias):
        w_kn = np.asarray(w if transposed else w.T, dtype=F32)  # [in, out]: a view, BLAS reads it transposed
        k = w_kn.shape[0]
        add_bias = None if bias is None else conv.BiasAdd(bias)

        def kernel(a):
            cuts = kernel.k_splits
            if exact is not None:
                rows = Q.qd8_rows(a, k)
                if rows is not None:
                    return exact(*rows).reshape(a.shape[:-1] + (n_out,))
            a2 = a.reshape(-1, k)
            m = a2.shape[0]
            if cuts is not None:
                y = conv.split_matmul(a2, w_kn, cuts)
            elif threads.num_threads() > 1 and a2.dtype == F32 and threads.splittable(m, k, n_out):
                y = np.empty((m, n_out), F32)
                threads.split_dot(a2, w_kn, y)
            else:
                y = a2.dot(w_kn)  # 2-D dot: BLAS on either memory order, less overhead than matmul
            if add_bias is not None:
                add_bias(y)
            return y.reshape(a.shape[:-1] + (n_out,))

        kernel.k_splits, kernel.w_kn = None, w_kn
        return kernel

    emit_gemm(c, node, node.input1_id, node.filter_id, node.output_id, n_out, make_kernel)


def qd8_exact_gemm(c: Compiler, node, transposed: bool, n_out: int):
    """The integer-exact kernel for qdint8 input x per-channel / blockwise quantized constant weights, or None."""
    wv = c.value(node.filter_id)
    q = wv.quant
    if c.rep(node.input1_id).kind != "dynamic" or q is None or q.kind not in (G.PER_CHANNEL, G.PER_CHANNEL_GROUP):
        return None
    w = c.const(node.filter_id)
    w = w.T if transposed else w  # [out, in]
    bias = bias_array(c, node.bias_id, n_out)
    if q.kind == G.PER_CHANNEL:
        return Q.Qd8ChannelGemm(w, weight_scales(c, node.filter_id, n_out), bias)
    k, gs = w.shape[1], q.group_size
    if transposed or gs <= 0 or k % gs or q.scale.size != n_out * (k // gs) or gs > 16384:
        return None
    return Q.Qd8BlockGemm(w, q.scale, gs, bias)


def emit_dynamic_fc(c: Compiler, node, transposed: bool) -> None:
    """FC whose filter (and maybe bias) is a run-time tensor."""
    x, w = c.slot(node.input1_id), c.slot(node.filter_id)
    rx = c.rep(node.input1_id).real() or (lambda a: a)
    rw = c.rep(node.filter_id).real() or (lambda a: a)
    b = None
    if node.bias_id != G.INVALID_ID:
        b, rb = c.slot(node.bias_id), c.rep(node.bias_id).real() or (lambda a: a)
    o = c.out_slot(node.output_id)
    st = chain(c.rep(node.output_id).store(node.output_min, node.output_max, fresh=True))

    def step(env):
        a, wt = rx(env[x]), rw(env[w])
        w_kn = wt if transposed else wt.T
        y = np.matmul(a.reshape(-1, w_kn.shape[0]), w_kn)
        if b is not None:
            y += rb(env[b])
        env[o] = st(y.reshape(a.shape[:-1] + (w_kn.shape[1],)))

    c.emit(step)


# -- convolutions ---------------------------------------------------------------------------------------------
def conv_geometry(c: Compiler, node) -> windows.Geometry:
    kh, kw = node.kernel_height, node.kernel_width
    sh, sw = node.subsampling_height, node.subsampling_width
    if min(kh, kw, sh, sw) < 1:
        raise c.fail(f"kernel {kh}x{kw} / stride {sh}x{sw} must be positive")
    pads = (node.padding_top, node.padding_right, node.padding_bottom, node.padding_left)
    return windows.Geometry(pads, (kh, kw), (sh, sw), (max(node.dilation_height, 1), max(node.dilation_width, 1)),
                        bool(node.flags & G.FLAG_TENSORFLOW_SAME_PADDING))


def check_filter(c: Compiler, node, expected: tuple) -> None:
    wv = c.value(node.filter_id)
    if wv.data is None:
        raise c.fail(f"filter {wv.describe()} must be a constant")
    if tuple(wv.dims) != expected:
        raise c.fail(f"filter {wv.describe()} does not match the node's shape {list(expected)}")


@builds("Conv2d")
def build_conv2d(c: Compiler, node) -> None:
    g = conv_geometry(c, node)
    groups, oc = max(node.groups, 1), max(node.groups, 1) * node.group_output_channels
    check_filter(c, node, (oc, g.kernel[0], g.kernel[1], node.group_input_channels))
    emit_gemm(c, node, node.input1_id, node.filter_id, node.output_id, oc,
              lambda w, b: conv.Conv2d(w, b, g, groups, c.scratch))


@builds("DepthwiseConv2d")
def build_depthwise(c: Compiler, node) -> None:
    g = conv_geometry(c, node)
    channels = max(node.groups, 1)
    multiplier = node.group_output_channels // max(node.group_input_channels, 1)
    if multiplier < 1:
        raise c.fail(f"depth multiplier {node.group_output_channels}/{node.group_input_channels} is below 1")
    check_filter(c, node, (1, g.kernel[0], g.kernel[1], channels * multiplier))
    emit_gemm(c, node, node.input1_id, node.filter_id, node.output_id, channels * multiplier,
              lambda w, b: conv.DepthwiseConv2d(w, b, g, multiplier, c.scratch))


@builds("ConvTranspose2d")
def build_deconv(c: Compiler, node) -> None:
    g = conv_geometry(c, node)
    groups, oc = max(node.groups, 1), max(node.groups, 1) * node.group_output_channels
    check_filter(c, node, (oc, g.kernel[0], g.kernel[1], node.group_input_channels))
    adjust = (node.adjustment_height, node.adjustment_width)
    if adjust[0] >= g.stride[0] or adjust[1] >= g.stride[1]:
        raise c.fail(f"adjustment {adjust} must be smaller than the stride {g.stride}")
    emit_gemm(c, node, node.input1_id, node.filter_id, node.output_id, oc,
              lambda w, b: conv.ConvTranspose2d(w, b, g, groups, adjust))
