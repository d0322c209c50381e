"""Load-time geometry checks for the portable kernels whose work a scalar argument drives.

A convolution's padding, a pooling window, an upsampling size, an ``arange`` end or a ``full`` size decide how
much a kernel computes and allocates before it writes its ``out`` tensor. When every argument is fixed at load
and ``out`` has a static shape, the shape those arguments give must be that shape: a corrupt padding of 2^30
is then refused when the method is loaded instead of allocating gigabytes (or running for minutes) at
``execute``. Each function returns the out shape(s) its arguments give, or raises ValueError naming the bad
argument; :func:`check` compares them with the program's out tensors.

Example::

    >>> import numpy as np
    >>> _pool_out((1, 3, 8, 8), (2, 2), (), (0, 0), (1, 1), False)
    (1, 3, 4, 4)
"""

from __future__ import annotations

import math


def _pair(v, what: str) -> tuple[int, int]:
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        v = v * 2
    if len(v) != 2:
        raise ValueError(f"{what} {list(v)} must have 1 or 2 entries")
    return v


def _positive(v, what: str) -> None:
    if any(x < 1 for x in v):
        raise ValueError(f"{what} {list(v)} must be positive")


def _window(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    eff = (k - 1) * d + 1
    num = size + 2 * p - eff
    if num < 0:
        raise ValueError(f"window {k} (dilated to {eff}) does not fit the input size {size} padded by {p} on each "
                         "side")
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_out(shape, kernel_size, stride, padding, dilation, ceil_mode):
    if len(shape) not in (3, 4):
        raise ValueError(f"pooling needs a 3-D or 4-D input, got shape {list(shape)}")
    k = _pair(kernel_size, "kernel_size")
    s = _pair(stride, "stride") if len(stride) else k
    p = _pair(padding, "padding")
    d = _pair(dilation, "dilation")
    _positive(k, "kernel_size")
    _positive(s, "stride")
    _positive(d, "dilation")
    if any(pp < 0 or pp > kk // 2 for pp, kk in zip(p, k)):
        raise ValueError(f"padding {list(p)} must be between 0 and half the kernel_size {list(k)}")
    oh = _window(shape[-2], k[0], s[0], p[0], d[0], ceil_mode)
    ow = _window(shape[-1], k[1], s[1], p[1], d[1], ceil_mode)
    return tuple(shape[:-2]) + (oh, ow)


def _max_pool(self, kernel_size, stride, padding, dilation, ceil_mode, out, indices):
    shape = _pool_out(self.shape, kernel_size, stride, padding, dilation, ceil_mode)
    return shape, shape


def _avg_pool(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, out):
    return (_pool_out(self.shape, kernel_size, stride, padding, (1,), ceil_mode),)


def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out):  # noqa: A002
    nd = input.ndim - 2
    if nd not in (1, 2) or weight.ndim != input.ndim:
        return None  # the kernel reports what it does not support
    s, p, d = (tuple(int(x) for x in v) for v in (stride, padding, dilation))
    op = tuple(int(x) for x in output_padding) if output_padding is not None else ()
    if len(s) == 1:
        s = s * nd
    if len(p) == 1:
        p = p * nd
    if len(d) == 1:
        d = d * nd
    op = op * nd if len(op) == 1 else (op or (0,) * nd)
    if not len(s) == len(p) == len(d) == len(op) == nd:
        raise ValueError(f"stride {list(s)}, padding {list(p)}, dilation {list(d)} must each have {nd} entries")
    _positive(s, "stride")
    _positive(d, "dilation")
    _positive((groups,), "groups")
    if any(x < 0 for x in p + op):
        raise ValueError(f"padding {list(p)} and output_padding {list(op)} must not be negative")
    k = weight.shape[2:]
    spatial = []
    for i in range(nd):
        size = input.shape[2 + i]
        if transposed:
            spatial.append((size - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1)
        else:
            spatial.append(_window(size, k[i], s[i], p[i], d[i], False))
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return ((input.shape[0], channels, *spatial),)


def _adaptive_avg_pool(self, output_size, out):
    oh, ow = _pair(output_size, "output_size")
    _positive((oh, ow), "output_size")
    return (tuple(self.shape[:-2]) + (oh, ow),)


def _upsample_size(x, output_size, scale_factors):
    h, w = x.shape[-2:]
    if scale_factors is not None:
        scales = tuple(float(x) for x in scale_factors)
        if len(scales) == 1:
            scales = scales * 2
        if len(scales) != 2:
            raise ValueError(f"scale_factors {list(scales)} must have 1 or 2 entries")
        sh, sw = scales
        if not (0 < sh < 1e6 and 0 < sw < 1e6):
            raise ValueError(f"scale_factors {list(scale_factors)} must be positive and finite")
        oh, ow = int(h * sh), int(w * sw)
    elif output_size is not None:
        oh, ow = _pair(output_size, "output_size")
    else:
        return None
    return (tuple(x.shape[:-2]) + (oh, ow),)


def _upsample_nearest(input, output_size, scale_factors, out):  # noqa: A002
    return _upsample_size(input, output_size, scale_factors)


def _upsample_bilinear(input, output_size, align_corners, scale_factors, out):  # noqa: A002
    return _upsample_size(input, output_size, scale_factors)


def _upsample_aa(self, output_size, align_corners, scales_h, scales_w, out):
    return _upsample_size(self, output_size, None)


def _sized(size, *rest):
    return (tuple(int(x) for x in size),)


def _arange(start, end, step, out):
    if step == 0:
        raise ValueError("step is 0")
    n = (float(end) - float(start)) / float(step)
    if not math.isfinite(n):
        raise ValueError(f"arange({start}, {end}, {step}) has no finite length")
    return ((max(math.ceil(n), 0),),)


def _constant_pad(self, pad, value, out):
    pad = tuple(int(x) for x in pad)
    if len(pad) % 2 or len(pad) // 2 > self.ndim:
        return None  # the kernel reports it
    shape = list(self.shape)
    for i in range(len(pad) // 2):
        shape[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    return (tuple(shape),)


CHECKS = {
    "aten::convolution.out": _convolution,
    "aten::max_pool2d_with_indices.out": _max_pool,
    "aten::avg_pool2d.out": _avg_pool,
    "aten::_adaptive_avg_pool2d.out": _adaptive_avg_pool,
    "aten::upsample_nearest2d.vec_out": _upsample_nearest,
    "aten::upsample_bilinear2d.vec_out": _upsample_bilinear,
    "aten::_upsample_bilinear2d_aa.out": _upsample_aa,
    "aten::full.out": _sized,
    "aten::zeros.out": _sized,
    "aten::ones.out": _sized,
    "aten::arange.out": lambda end, out: _arange(0, end, 1, out),
    "aten::arange.start_out": _arange,
    "aten::constant_pad_nd.out": _constant_pad,
}


def check(name: str, args: list, outs: list) -> str | None:
    """None when ``args`` (every argument, bound) give exactly the shapes of the static tensors ``outs``
    (``(shape, is_static)`` per out argument); else what is wrong, in words."""
    fn = CHECKS.get(name)
    if fn is None:
        return None
    try:
        implied = fn(*args)
    except (ValueError, TypeError, OverflowError, ZeroDivisionError) as e:
        return str(e)
    if implied is None:
        return None
    for want, (shape, static) in zip(implied, outs):
        if static and tuple(want) != tuple(shape):
            return (f"its arguments give an output of shape {list(want)}, but the program's out tensor has shape "
                    f"{list(shape)}")
    return None
