"""Convolution and pooling over NC(D)HW tensors: convolution (groups, stride, padding, dilation,
transposed), max/avg pooling and adaptive average pooling.

Convolution is one GEMM per group over an im2col view (``sliding_window_view``); depthwise layers use
shifted multiply-adds instead. With several threads (:mod:`pterun.threads`) large GEMMs split by rows and
depthwise layers by channels. bf16 convolution and average pooling accumulate in bf16, in ExecuTorch's loop
order (:mod:`pterun.kernels._bf16`). Example::

    >>> import numpy as np
    >>> from pterun.kernels.conv_pool import conv2d
    >>> conv2d(np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 2, 2), np.float32), None,
    ...        (1, 1), (0, 0), (1, 1), 1).shape
    (1, 1, 2, 2)
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pterun.kernels import _bf16
from pterun.kernels._common import F32, is_bfloat16, is_floating, sum_in_order
from pterun.kernels.registry import register
from pterun import threads
from pterun.numerics import window_output_size


def _pair(v, n=2):
    v = tuple(v)
    return v * n if len(v) == 1 else v


def _windows(xp, k, stride, dilation):
    """[N, C, OH, OW, KH, KW] strided view of padded input ``xp``."""
    kh, kw = k
    dh, dw = dilation
    ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    w = sliding_window_view(xp, (ekh, ekw), axis=(2, 3))
    return w[:, :, :: stride[0], :: stride[1], ::dh, ::dw]


def conv2d(x, weight, bias, stride, padding, dilation, groups):
    """Plain 2-D convolution, NCHW input, OIHW weight."""
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise ValueError(f"input has {c} channels but weight expects {cg} x {groups} groups")
    ph, pw = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    if groups == c and cg == 1 and o == c:
        out = _depthwise(xp, weight, stride, dilation, (h + 2 * ph, w + 2 * pw))
    else:
        win = _windows(xp, (kh, kw), stride, dilation)  # N C OH OW KH KW
        oh, ow = win.shape[2], win.shape[3]
        og = o // groups
        if groups == 1:
            cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)
            out = _gemm(cols, weight.reshape(o, -1).T).reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
        else:
            cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
            cols = cols.reshape(n, groups, oh * ow, cg * kh * kw)
            wg = weight.reshape(groups, og, cg * kh * kw).transpose(0, 2, 1)
            out = np.matmul(cols, wg)  # N G OHW OG
            out = out.transpose(0, 1, 3, 2).reshape(n, o, oh, ow)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out


def _depthwise(xp, weight, stride, dilation, padded_hw):
    n, c = xp.shape[:2]
    _, _, kh, kw = weight.shape
    sh, sw = stride
    dh, dw = dilation
    hp, wp = padded_hw
    oh = (hp - (kh - 1) * dh - 1) // sh + 1
    ow = (wp - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, c, oh, ow), dtype=np.result_type(xp, weight))

    def channels(c0: int, c1: int) -> None:
        part = out[:, c0:c1]
        for i in range(kh):
            for j in range(kw):
                tap = xp[:, c0:c1, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
                part += tap * weight[c0:c1, 0, i, j].reshape(1, c1 - c0, 1, 1)

    if threads.num_threads() > 1 and out.size * kh * kw >= threads.SPLIT_TAPS:
        threads.parallel_for(c, channels, min_rows=8)
    else:
        channels(0, c)
    return out


def _gemm(cols: np.ndarray, wmat: np.ndarray) -> np.ndarray:
    """``cols @ wmat``, split over pterun's threads when the product is large."""
    m, k = cols.shape
    if threads.num_threads() < 2 or cols.dtype != wmat.dtype or not threads.splittable(m, k, wmat.shape[1]):
        return cols @ wmat
    out = np.empty((m, wmat.shape[1]), cols.dtype)
    threads.split_dot(cols, wmat, out)
    return out


def conv_transpose2d(x, weight, bias, stride, padding, dilation, output_padding, groups):
    """Transposed 2-D convolution as a convolution over the zero-stuffed input with the flipped kernel."""
    x, wt, pads = _transposed_as_direct(x, weight, stride, padding, dilation, output_padding, groups)
    x = np.pad(x, pads)
    return conv2d(x, np.ascontiguousarray(wt), bias, (1, 1), (0, 0), dilation, groups)


def _transposed_as_direct(x, weight, stride, padding, dilation, output_padding, groups):
    """(zero-stuffed input, flipped OIHW kernel, the input's np.pad widths) of the direct convolution that
    computes a transposed one."""
    n, c, h, w = x.shape
    cin, og, kh, kw = weight.shape  # IOHW
    sh, sw = stride
    if sh > 1 or sw > 1:
        z = np.zeros((n, c, (h - 1) * sh + 1, (w - 1) * sw + 1), x.dtype)
        z[:, :, ::sh, ::sw] = x
        x = z
    dh, dw = dilation
    ph = dh * (kh - 1) - padding[0]
    pw = dw * (kw - 1) - padding[1]
    if ph < 0 or pw < 0:
        x = x[:, :, max(-ph, 0):, max(-pw, 0):]
        ph, pw = max(ph, 0), max(pw, 0)
    pads = ((0, 0), (0, 0), (ph, ph + output_padding[0]), (pw, pw + output_padding[1]))
    cg = cin // groups
    wt = weight.reshape(groups, cg, og, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * og, cg, kh, kw)
    return x, wt[:, :, ::-1, ::-1], pads


def _conv2d_bf16(x, weight, bias, stride, padding, dilation, groups, taps_first=False, bias_first=False):
    """ExecuTorch's portable bf16 convolution (``conv2d_impl`` on ``BFloat16``): each output element is a running
    bf16 sum of bf16 products. Direct convolution adds them over (input channel, kernel row, kernel column) from
    zero, then the bias; the transposed one (here ``x`` is the zero-stuffed input and ``weight`` the flipped
    kernel) starts from the bias and adds over (kernel row, kernel column, input channel), which is the order
    of its loop over input positions. Padding adds exact zeros, which leave a running sum unchanged."""
    n, c = x.shape[:2]
    o, cg, kh, kw = weight.shape
    if c != cg * groups:
        raise ValueError(f"input has {c} channels but weight expects {cg} x {groups} groups")
    ph, pw = padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
    win = _windows(xp, (kh, kw), stride, dilation)  # N C OH OW KH KW
    oh, ow, og = win.shape[2], win.shape[3], o // groups
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = weight.reshape(groups, og, cg, kh, kw)
    if taps_first:
        cols, wg = cols.transpose(0, 1, 3, 4, 5, 6, 2), wg.transpose(0, 3, 4, 2, 1)
    else:
        cols, wg = cols.transpose(0, 1, 3, 4, 2, 5, 6), wg.transpose(0, 2, 3, 4, 1)
    cols = cols.reshape(n, groups, oh * ow, cg * kh * kw)
    wg = wg.reshape(groups, cg * kh * kw, og)
    b = None if bias is None else _bf16.as_bf16(bias).reshape(groups, 1, og)
    out = _bf16.running_matmul(cols, wg, init=b if bias_first else None)  # N G OHW OG
    if b is not None and not bias_first:
        out = out + b
    return out.transpose(0, 1, 3, 2).reshape(n, o, oh, ow)


def _conv_transpose2d_bf16(x, weight, bias, stride, padding, dilation, output_padding, groups):
    """The bf16 transposed convolution, as the direct one over the zero-stuffed input (see
    :func:`conv_transpose2d`), in ExecuTorch's order of additions."""
    xz, wt, pads = _transposed_as_direct(x, weight, stride, padding, dilation, output_padding, groups)
    xz = np.pad(xz, pads)
    return _conv2d_bf16(xz, wt, bias, (1, 1), (0, 0), dilation, groups, taps_first=True, bias_first=True)


@register("aten::convolution.out")
def convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: A002
    """convolution.out(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, *, Tensor(a!) out) -> Tensor(a!)"""
    bf16 = is_bfloat16(input.dtype) and is_bfloat16(weight.dtype)
    x = input if bf16 or input.dtype.kind == "f" and input.dtype.itemsize >= 4 else input.astype(F32)
    w = weight.astype(x.dtype, copy=False)
    b = None if bias is None else bias.astype(x.dtype, copy=False)
    nd = x.ndim - 2
    if nd not in (1, 2):
        raise NotImplementedError(f"{nd}-d convolution is not supported (1-d and 2-d are)")
    if nd == 1:  # run 1-d as 2-d with a unit height
        x, w = x[:, :, None, :], w[:, :, None, :]
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        output_padding = (0, *output_padding)
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    if bf16:
        direct, inverse = _conv2d_bf16, _conv_transpose2d_bf16
    else:
        direct, inverse = conv2d, conv_transpose2d
    if transposed:
        y = inverse(x, w, b, stride, padding, dilation, _pair(output_padding), groups)
    else:
        y = direct(x, w, b, stride, padding, dilation, groups)
    return y[:, :, 0, :] if nd == 1 else y


def _pool_geometry(size, k, s, p, d, ceil_mode):
    """(output size, extra trailing padding that a ceil_mode window overhanging the padded input reads)."""
    out = window_output_size(size, k, s, p, p, d, ceil_mode)
    extra = max(0, (out - 1) * s + (k - 1) * d + 1 - (size + 2 * p))
    return out, extra


def _pool_setup(x, kernel_size, stride, padding, dilation, ceil_mode):
    k = _pair(kernel_size)
    s = _pair(stride) if len(stride) else k
    p = _pair(padding)
    d = _pair(dilation)
    (oh, eh), (ow, ew) = (_pool_geometry(x.shape[-2], k[0], s[0], p[0], d[0], ceil_mode),
                          _pool_geometry(x.shape[-1], k[1], s[1], p[1], d[1], ceil_mode))
    return k, s, p, d, (oh, ow), (eh, ew)


@register("aten::max_pool2d_with_indices.out")
def max_pool2d_with_indices_out(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices):
    """max_pool2d_with_indices.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False, *, Tensor(a!) out, Tensor(b!) indices) -> (Tensor(a!), Tensor(b!))"""
    squeeze = self.ndim == 3
    x = self[None] if squeeze else self
    k, s, p, d, (oh, ow), (eh, ew) = _pool_setup(x, kernel_size, stride, padding, dilation, ceil_mode)
    lowest = -np.inf if is_floating(x.dtype) else np.iinfo(x.dtype).min
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew)), constant_values=lowest)
    win = _windows(xp, k, s, d)[:, :, :oh, :ow]
    flat = win.reshape(*win.shape[:4], -1)
    arg = np.argmax(flat, axis=-1)
    vals = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    ki, kj = np.divmod(arg, k[1])
    hh = np.arange(oh).reshape(-1, 1) * s[0] - p[0] + ki * d[0]
    ww = np.arange(ow).reshape(1, -1) * s[1] - p[1] + kj * d[1]
    idx = (hh * x.shape[-1] + ww).astype(np.int64)
    if squeeze:
        vals, idx = vals[0], idx[0]
    return vals, idx


@register("aten::avg_pool2d.out")
def avg_pool2d_out(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out):
    """avg_pool2d.out(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None, *, Tensor(a!) out) -> Tensor(a!)"""
    squeeze = self.ndim == 3
    x = self[None] if squeeze else self
    bf16 = is_bfloat16(x.dtype)
    xf = x if bf16 or x.dtype.kind == "f" and x.dtype.itemsize >= 4 else x.astype(F32)
    k, s, p, d, (oh, ow), (eh, ew) = _pool_setup(x, kernel_size, stride, padding, (1, 1), ceil_mode)
    pads = ((0, 0), (0, 0), (p[0], p[0] + eh), (p[1], p[1] + ew))
    win = _windows(np.pad(xf, pads), k, s, d)[:, :, :oh, :ow]
    # bf16: ExecuTorch's running sum over the window, rounded at every addition (padding adds exact zeros),
    # then divided by the count as a bf16
    total = _bf16.running_sum(win, (4, 5)) if bf16 else win.sum(axis=(-2, -1))
    if divisor_override:
        y = total / (_bf16.as_bf16(divisor_override) if bf16 else divisor_override)
    else:
        h, w = x.shape[-2:]
        # the divisor counts padding (if asked) but never the extra ceil_mode overhang
        mask = np.zeros((1, 1, h + 2 * p[0] + eh, w + 2 * p[1] + ew), F32 if bf16 else xf.dtype)
        if count_include_pad:
            mask[:, :, : h + 2 * p[0], : w + 2 * p[1]] = 1
        else:
            mask[:, :, p[0] : p[0] + h, p[1] : p[1] + w] = 1
        div = _windows(mask, k, s, d)[:, :, :oh, :ow].sum(axis=(-2, -1))
        y = total / (_bf16.as_bf16(div) if bf16 else div)
    if not is_floating(x.dtype):
        y = np.trunc(y)
    return y[0] if squeeze else y


@register("aten::_adaptive_avg_pool2d.out")
def adaptive_avg_pool2d_out(self, output_size, out):
    """_adaptive_avg_pool2d.out(Tensor self, SymInt[2] output_size, *, Tensor(a!) out) -> Tensor(a!)"""
    oh, ow = output_size
    h, w = self.shape[-2:]
    x = self if self.dtype.kind == "f" and self.dtype.itemsize >= 4 else self.astype(F32)
    if is_bfloat16(self.dtype):  # ExecuTorch adds a bf16 window up in float, in order (a pairwise sum may differ)
        def mean(v, axes):
            return sum_in_order(v, axes, F32) / F32.type(math.prod(v.shape[a] for a in axes))
    else:
        def mean(v, axes):
            return v.mean(axis=axes)
    if h % oh == 0 and w % ow == 0:
        return mean(x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow), (x.ndim - 1, x.ndim + 1))
    y = np.empty(x.shape[:-2] + (oh, ow), x.dtype)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            y[..., i, j] = mean(x[..., h0:h1, w0:w1], (x.ndim - 2, x.ndim - 1))
    return y



