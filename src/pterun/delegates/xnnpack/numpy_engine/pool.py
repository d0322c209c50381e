"""Pooling, resizing and padding for the NumPy engine, in NHWC layout: max pooling does one maximum per kernel tap
over the whole output, reading each tap's rectangle of the input without a padded copy; padded positions never win.

Example::

    >>> import numpy as np
    >>> x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    >>> max_pool(x, Geometry((0, 0, 0, 0), (2, 2), (2, 2), (1, 1)))[0, ..., 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.delegates.xnnpack.numpy_engine.windows import (F32, Geometry, Scratch, full_tap_first, pad_hw, phase_planes,
                                                           taps, window_taps)


def lowest(dtype: np.dtype):
    """A padding value no real element loses to in a max (bfloat16's NumPy kind is 'V', not 'f')."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def max_pool(x: np.ndarray, g: Geometry, scratch: Scratch | None = None) -> np.ndarray:
    """Max pooling; padded positions never win (XNNPACK reads only real input pixels). ``scratch``: the owning
    plan's work memory for the phase planes (None: fresh memory)."""
    n, h, w, c = x.shape
    oh, ow, phases, tps = window_taps(g, h, w)
    tps, full = full_tap_first(tps, oh, ow)
    out = np.empty((n, oh, ow * c), x.dtype)
    if out.size == 0:
        return out.reshape(n, oh, ow, c)
    if not full:
        out.fill(lowest(x.dtype))
    planes = phase_planes(scratch if scratch is not None else Scratch(), x, g, phases, "pool_planes")
    for i, (_, _, p, iy0, ix0, oy0, oy1, ox0, ox1) in enumerate(tps):
        src = planes[p][:, iy0 : iy0 + oy1 - oy0, ix0 * c : (ix0 + ox1 - ox0) * c]
        if i == 0 and full:
            np.copyto(out, src)
        else:
            dst = out[:, oy0:oy1, ox0 * c : ox1 * c]
            np.maximum(dst, src, out=dst)
    return out.reshape(n, oh, ow, c)


class AvgPool:
    """Average pooling whose divisor counts only the real (non-padding) pixels under each window."""

    def __init__(self, g: Geometry):
        self.geom = g
        self._inv_counts: dict[tuple[int, int], np.ndarray] = {}

    def inv_counts(self, h: int, w: int) -> np.ndarray:
        key = (h, w)
        inv = self._inv_counts.get(key)
        if inv is None:
            g = self.geom
            oh, ow = g.output_size(h, w)
            ones = pad_hw(np.ones((1, h, w, 1), F32), g.pads(h, w), 0)
            counts = sum(view for _, _, view in taps(ones, g, oh, ow))
            inv = (F32(1) / np.maximum(counts, 1)).astype(F32)
            self._inv_counts[key] = inv
        return inv

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _, h, w, _ = x.shape
        g = self.geom
        oh, ow = g.output_size(h, w)
        xp = pad_hw(x, g.pads(h, w), 0)
        acc = None
        for _, _, view in taps(xp, g, oh, ow):
            acc = view.astype(F32) if acc is None else np.add(acc, view, out=acc)
        acc *= self.inv_counts(h, w)
        return acc


def argmax_pool(x: np.ndarray, g: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Max and its index inside the window (row-major over the window; first maximum wins); stride = window."""
    _, h, w, _ = x.shape
    oh, ow = g.output_size(h, w)
    xp = pad_hw(x, g.pads(h, w), lowest(x.dtype))
    best = idx = None
    kw = g.kernel[1]
    for ky, kx, view in taps(xp, g, oh, ow):
        if best is None:
            best, idx = view.copy(), np.zeros(view.shape, np.int32)
        else:
            better = view > best
            best = np.where(better, view, best)
            idx[better] = ky * kw + kx
    return best, idx


def global_avg_pool(x: np.ndarray, keep_dims: bool, divide: bool = True, exact: bool = False) -> np.ndarray:
    """Mean over the spatial axes of an N...C array (all but the first and last), in float32; ``divide=False``
    returns the sums; ``exact`` sums in float64 (exact for any int8 sum an int32 holds) before rounding once to
    float32, as converting an int32 sum does."""
    n, c = x.shape[0], x.shape[-1]
    count = math.prod(x.shape[1:-1])
    s = np.add.reduce(x.reshape(n, count, c), axis=1, dtype=np.float64 if exact else F32)
    if exact:
        s = s.astype(F32)
    if divide:
        np.divide(s, F32(count), out=s)
    return s.reshape((n,) + (1,) * (x.ndim - 2) + (c,)) if keep_dims else s


class ResizeBilinear:
    """XNNPACK's bilinear resize of NHWC; index/weight tables are built once per input size."""

    def __init__(self, out_h: int, out_w: int, align_corners: bool, tf_legacy: bool):
        self.out = (out_h, out_w)
        self.align, self.legacy = align_corners, tf_legacy
        self._tables: dict = {}

    def _axis(self, n_in: int, n_out: int):
        adjust = 1 if self.align and n_out != 1 else 0
        scale = F32(n_in - adjust) / F32(n_out - adjust)
        pos = np.arange(n_out, dtype=F32) * scale
        if not (self.align or self.legacy):  # half-pixel centres, clamped to the input
            pos = np.clip(pos + (F32(0.5) * scale - F32(0.5)), 0, n_in - 1).astype(F32)
        lo = pos.astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (pos - lo.astype(F32)).astype(F32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        key = x.shape[1:3]
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = (self._axis(key[0], self.out[0]), self._axis(key[1], self.out[1]))
        (y0, y1, ay), (x0, x1, ax) = t
        ax = ax[:, None]
        top, bottom = x[:, y0], x[:, y1]  # [n, oh, w, c]
        top = top[:, :, x0] + (top[:, :, x1] - top[:, :, x0]) * ax
        bottom = bottom[:, :, x0] + (bottom[:, :, x1] - bottom[:, :, x0]) * ax
        return top + (bottom - top) * ay[:, None, None]


def constant_pad(x: np.ndarray, pre, post, value) -> np.ndarray:
    out = np.full(tuple(p + s + q for p, s, q in zip(pre, x.shape, post)), value, dtype=x.dtype)
    out[tuple(slice(p, p + s) for p, s in zip(pre, x.shape))] = x
    return out
