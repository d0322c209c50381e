"""Image resampling kernels over NCHW tensors: nearest and bilinear upsampling (plain and antialiased) and
grid_sampler_2d (bilinear / nearest / bicubic with zeros / border / reflection padding).

Index arithmetic follows ExecuTorch's upsample_util / grid_sampler_2d_util: scales are float32, and with
``output_size`` given the scale is ``1 / (out / in)``. Example::

    >>> import numpy as np
    >>> from pterun.kernels.image import upsample_nearest2d_vec_out
    >>> upsample_nearest2d_vec_out(np.arange(4.0).reshape(1, 1, 2, 2), (4, 4), None, None)[0, 0, 0].tolist()
    [0.0, 0.0, 1.0, 1.0]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import F32, widen_half
from pterun.kernels.registry import register


def _out_size_and_scales(x, output_size, scale_factors):
    """(out_h, out_w, scale_h, scale_w) as ExecuTorch's resize_upsample_2d: scales are out/in."""
    h, w = x.shape[-2:]
    if scale_factors is not None:
        sh, sw = scale_factors
        oh, ow = int(h * sh), int(w * sw)
    elif output_size is not None:
        oh, ow = output_size
        sh, sw = oh / h, ow / w
    else:
        raise ValueError("upsample needs output_size or scale_factors")
    if oh <= 0 or ow <= 0:
        raise ValueError(f"upsampled size must be non-empty, got {oh}x{ow}")
    return oh, ow, sh, sw


def _kernel_scale(in_size, out_size, align_corners, scale):
    """``area_pixel_compute_scale``: input pixels per output pixel, as float32."""
    if align_corners:
        return np.float32((in_size - 1) / (out_size - 1)) if out_size > 1 else np.float32(0)
    return np.float32(1.0 / scale)


@register("aten::upsample_nearest2d.vec_out")
def upsample_nearest2d_vec_out(input, output_size, scale_factors, out):  # noqa: A002  (schema names)
    """upsample_nearest2d.vec_out(Tensor input, SymInt[]? output_size, float[]? scale_factors, *, Tensor(a!) out) -> Tensor(a!)"""
    oh, ow, sh, sw = _out_size_and_scales(input, output_size, scale_factors)
    h, w = input.shape[-2:]
    # src = min(floor(dst * scale), in - 1), the product in float32
    rows = np.minimum(np.floor(np.arange(oh, dtype=F32) * _kernel_scale(h, oh, False, sh)).astype(np.int64), h - 1)
    cols = np.minimum(np.floor(np.arange(ow, dtype=F32) * _kernel_scale(w, ow, False, sw)).astype(np.int64), w - 1)
    return input[..., rows[:, None], cols[None, :]]


def _linear_taps(in_size, out_size, align_corners, scale):
    """(index0, index1, lambda0, lambda1) per output position (``compute_source_index_and_lambda``)."""
    if in_size == out_size:
        i = np.arange(out_size)
        return i, i, np.ones(out_size, F32), np.zeros(out_size, F32)
    ratio = _kernel_scale(in_size, out_size, align_corners, scale)
    dst = np.arange(out_size, dtype=F32)
    real = ratio * dst if align_corners else np.maximum(ratio * (dst + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    lam1 = np.clip(real - i0.astype(F32), np.float32(0), np.float32(1))
    i1 = i0 + (i0 < in_size - 1)
    return i0, i1, np.float32(1) - lam1, lam1


@register("aten::upsample_bilinear2d.vec_out")
def upsample_bilinear2d_vec_out(input, output_size, align_corners, scale_factors, out):  # noqa: A002
    """upsample_bilinear2d.vec_out(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors, *, Tensor(a!) out) -> Tensor(a!)"""
    oh, ow, sh, sw = _out_size_and_scales(input, output_size, scale_factors)
    h, w = input.shape[-2:]
    h0, h1, wh0, wh1 = _linear_taps(h, oh, align_corners, sh)
    w0, w1, ww0, ww1 = _linear_taps(w, ow, align_corners, sw)
    x = input.astype(widen_half(input.dtype), copy=False)
    ct = x.dtype
    ww0, ww1, wh0, wh1 = (a.astype(ct) for a in (ww0, ww1, wh0, wh1))
    top = x[..., h0, :]
    bottom = x[..., h1, :]
    top = top[..., w0] * ww0 + top[..., w1] * ww1
    bottom = bottom[..., w0] * ww0 + bottom[..., w1] * ww1
    return top * wh0[:, None] + bottom * wh1[:, None]


def _aa_weights(in_size, out_size, scale):
    """[out, in] antialiasing (triangle filter) weights, normalised per output row, as ExecuTorch."""
    scale = np.float32(scale)
    center = scale * (np.arange(out_size, dtype=F32) + np.float32(0.5))
    support = scale if scale >= 1 else np.float32(1)
    invscale = np.float32(1) / scale if scale >= 1 else np.float32(1)
    xmin = np.maximum((center - support + np.float32(0.5)).astype(np.int64), 0)
    xmax = np.minimum((center + support + np.float32(0.5)).astype(np.int64), in_size)
    pos = np.arange(in_size, dtype=F32)
    taps = np.maximum(np.float32(1) - np.abs((pos[None, :] - center[:, None] + np.float32(0.5)) * invscale), np.float32(0))
    inside = (np.arange(in_size)[None, :] >= xmin[:, None]) & (np.arange(in_size)[None, :] < xmax[:, None])
    taps = np.where(inside, taps, np.float32(0))
    total = taps.sum(axis=1, dtype=F32)
    fallback = (xmax <= xmin) | (total <= 0)
    weights = taps / np.where(fallback, np.float32(1), total)[:, None]
    if fallback.any():
        idx = np.clip(center.astype(np.int64), 0, in_size - 1)
        weights[fallback] = np.eye(in_size, dtype=F32)[idx[fallback]]
    return weights


@register("aten::_upsample_bilinear2d_aa.out")
def upsample_bilinear2d_aa_out(self, output_size, align_corners, scales_h, scales_w, out):
    """_upsample_bilinear2d_aa.out(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None, *, Tensor(a!) out) -> Tensor(a!)"""
    oh, ow = output_size
    h, w = self.shape[-2:]
    if scales_h is not None and scales_w is not None:
        sh, sw = scales_h, scales_w
    else:
        sh, sw = oh / h, ow / w
    wh = _aa_weights(h, oh, _kernel_scale(h, oh, align_corners, sh))
    wv = _aa_weights(w, ow, _kernel_scale(w, ow, align_corners, sw))
    x = self.astype(widen_half(self.dtype), copy=False)
    y = np.matmul(np.matmul(wh.astype(x.dtype), x), wv.T.astype(x.dtype))
    return y if self.dtype.kind == "f" or self.dtype.kind == "V" else np.trunc(y)


# -- grid_sampler_2d ---------------------------------------------------------------------------------------
_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return ((coord + 1) / 2) * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low, twice_high):
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low = coord.dtype.type(twice_low / 2)
    span = coord.dtype.type((twice_high - twice_low) / 2)
    c = np.abs(coord - low)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(flips % 2 == 0, extra + low, span - extra + low)


def _source_index(coord, size, padding, align_corners):
    coord = _unnormalize(coord, size, align_corners)
    if padding == _REFLECTION:
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding in (_BORDER, _REFLECTION):
        coord = np.clip(coord, 0, size - 1)
    return coord


def _gather(x, iy, ix, padding):
    """x[n, :, iy, ix] for [N, OH, OW] index grids -> [N, C, OH, OW]; zeros padding reads 0 outside."""
    n, _, h, w = x.shape
    inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
    cy, cx = np.clip(iy, 0, h - 1), np.clip(ix, 0, w - 1)
    vals = x[np.arange(n)[:, None, None], :, cy, cx]  # N OH OW C
    vals = np.moveaxis(vals, -1, 1)
    if padding == _ZEROS:
        vals = np.where(inside[:, None], vals, 0)
    return vals


def _cubic_coefficients(t):
    a = t.dtype.type(-0.75)

    def conv1(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def conv2(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return conv2(t + 1), conv1(t), conv1(1 - t), conv2(2 - t)


@register("aten::grid_sampler_2d.out")
def grid_sampler_2d_out(input, grid, interpolation_mode, padding_mode, align_corners, out):  # noqa: A002
    """grid_sampler_2d.out(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, *, Tensor(a!) out) -> Tensor(a!)"""
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise ValueError(f"grid_sampler_2d needs input [N,C,H,W] and grid [N,OH,OW,2], got {list(input.shape)} "
                         f"and {list(grid.shape)}")
    if interpolation_mode not in (0, 1, 2) or padding_mode not in (0, 1, 2):
        raise ValueError(f"unknown grid_sampler mode {interpolation_mode} / padding {padding_mode}")
    h, w = input.shape[-2:]
    x = input.astype(widen_half(input.dtype), copy=False)
    g = grid.astype(x.dtype if x.dtype.kind == "f" else F32, copy=False)
    gx, gy = g[..., 0], g[..., 1]
    if interpolation_mode == _BICUBIC:
        ix, iy = _unnormalize(gx, w, align_corners), _unnormalize(gy, h, align_corners)
        x0, y0 = np.floor(ix), np.floor(iy)
        cx, cy = _cubic_coefficients(ix - x0), _cubic_coefficients(iy - y0)
        x0, y0 = x0.astype(np.int64), y0.astype(np.int64)
        rows = []
        for dy in range(-1, 3):
            row = 0
            for dx, c in zip(range(-1, 3), cx):
                row = row + _bicubic_tap(x, y0 + dy, x0 + dx, padding_mode, align_corners) * c[:, None]
            rows.append(row)
        return sum(r * c[:, None] for r, c in zip(rows, cy))
    ix = _source_index(gx, w, padding_mode, align_corners)
    iy = _source_index(gy, h, padding_mode, align_corners)
    if interpolation_mode == _NEAREST:
        return _gather(x, np.rint(iy).astype(np.int64), np.rint(ix).astype(np.int64), padding_mode)
    x0, y0 = np.floor(ix), np.floor(iy)
    x1, y1 = x0 + 1, y0 + 1
    nw, ne = (x1 - ix) * (y1 - iy), (ix - x0) * (y1 - iy)
    sw, se = (x1 - ix) * (iy - y0), (ix - x0) * (iy - y0)
    x0, y0, x1, y1 = (a.astype(np.int64) for a in (x0, y0, x1, y1))
    return (_gather(x, y0, x0, padding_mode) * nw[:, None] + _gather(x, y0, x1, padding_mode) * ne[:, None]
            + _gather(x, y1, x0, padding_mode) * sw[:, None] + _gather(x, y1, x1, padding_mode) * se[:, None])


def _bicubic_tap(x, iy, ix, padding, align_corners):
    h, w = x.shape[-2:]
    if padding == _REFLECTION:
        fy, fx = iy.astype(F32), ix.astype(F32)
        if align_corners:
            fy, fx = _reflect(fy, 0, 2 * (h - 1)), _reflect(fx, 0, 2 * (w - 1))
        else:
            fy, fx = _reflect(fy, -1, 2 * h - 1), _reflect(fx, -1, 2 * w - 1)
        iy = np.clip(fy, 0, h - 1).astype(np.int64)
        ix = np.clip(fx, 0, w - 1).astype(np.int64)
    return _gather(x, iy, ix, padding)

