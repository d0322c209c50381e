"""NumPy kernels for the XNNPACK node types, in NHWC layout, on float32 arrays.

Convolutions are prepared once (weights packed into GEMM-ready matrices) and then called per run:
``Conv2d`` gathers patches with ``sliding_window_view`` and does one matmul per layer (a batched one for
grouped convolutions), ``DepthwiseConv2d`` sums shifted multiply-adds over the kernel taps, and
``ConvTranspose2d`` does one matmul followed by a scatter-add per tap. Pools loop over taps too, never over
elements. The quantized paths reuse the same kernels on zero-point-corrected integer values.

Example::

    >>> import numpy as np
    >>> conv = Conv2d(np.ones((4, 3, 3, 2), np.float32), None, Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)))
    >>> conv(np.ones((1, 5, 5, 2), np.float32)).shape
    (1, 5, 5, 4)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

F32 = np.float32


@dataclass(frozen=True)
class Geometry:
    """Padding (top, right, bottom, left), kernel (h, w), stride (h, w) and dilation (h, w) of a 2-D window."""

    padding: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    same_padding: bool = False  # TensorFlow SAME: padding derived from the input size at run time

    def pads(self, h: int, w: int) -> tuple[int, int, int, int]:
        if not self.same_padding:
            return self.padding
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        th = max((-(-h // sh) - 1) * sh + (kh - 1) * dh + 1 - h, 0)
        tw = max((-(-w // sw) - 1) * sw + (kw - 1) * dw + 1 - w, 0)
        return th // 2, tw - tw // 2, th - th // 2, tw // 2

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        pt, pr, pb, pl = self.pads(h, w)
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        return (h + pt + pb - (kh - 1) * dh - 1) // sh + 1, (w + pl + pr - (kw - 1) * dw - 1) // sw + 1


def pad_hw(x: np.ndarray, pads: tuple[int, int, int, int], value=0) -> np.ndarray:
    """Pad the H and W axes of an NHWC array (returns ``x`` itself when there is nothing to pad)."""
    pt, pr, pb, pl = pads
    if not (pt or pr or pb or pl):
        return x
    n, h, w, c = x.shape
    out = np.full((n, h + pt + pb, w + pl + pr, c), value, dtype=x.dtype)
    out[:, pt : pt + h, pl : pl + w] = x
    return out


def taps(xp: np.ndarray, g: Geometry, oh: int, ow: int):
    """Yield (ky, kx, view) for every kernel tap: the strided input view each output pixel reads there."""
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
    for ky in range(kh):
        y0 = ky * dh
        rows = xp[:, y0 : y0 + sh * (oh - 1) + 1 : sh]
        for kx in range(kw):
            x0 = kx * dw
            yield ky, kx, rows[:, :, x0 : x0 + sw * (ow - 1) + 1 : sw]


class Conv2d:
    """NHWC convolution as one GEMM; ``weight`` is OHWI ``[groups*ocg, kh, kw, icg]``."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geom: Geometry, groups: int = 1):
        oc, kh, kw, icg = weight.shape
        self.geom, self.groups, self.oc = geom, groups, oc
        self.pointwise = (kh, kw) == (1, 1) and geom.padding == (0, 0, 0, 0) and not geom.same_padding
        ocg = oc // groups
        # patches are gathered as [..., kh, kw, group, icg]; the weights are laid out to match once
        w = weight.reshape(groups, ocg, kh, kw, icg).transpose(0, 2, 3, 4, 1)  # [g, kh, kw, icg, ocg]
        self.wmat = np.ascontiguousarray(w.reshape(groups, kh * kw * icg, ocg), dtype=F32)
        if groups == 1:
            self.wmat = self.wmat[0]
        self.bias = None if bias is None else np.asarray(bias, F32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        g = self.geom
        oh, ow = g.output_size(h, w)
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
        m = n * oh * ow
        if self.pointwise:
            cols = x[:, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw].reshape(m, c)
        else:
            xp = pad_hw(x, g.pads(h, w))
            win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
            win = win[:, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw, :, ::dh, ::dw]
            cols = win.transpose(0, 1, 2, 4, 5, 3)  # [n, oh, ow, kh, kw, c]: copies contiguous channel runs
        if self.groups == 1:
            y = np.matmul(cols.reshape(m, -1), self.wmat)
        else:
            icg = c // self.groups
            cols = cols.reshape(m, kh * kw, self.groups, icg).transpose(2, 0, 1, 3).reshape(self.groups, m, -1)
            y = np.matmul(cols, self.wmat).transpose(1, 0, 2).reshape(m, self.oc)
        if self.bias is not None:
            y += self.bias
        return y.reshape(n, oh, ow, self.oc)


class DepthwiseConv2d:
    """Depthwise convolution: output channel c reads input channel c // depth_multiplier; filter [1,kh,kw,oc]."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geom: Geometry, depth_multiplier: int):
        self.w = np.ascontiguousarray(weight.reshape(weight.shape[1:]), dtype=F32)  # [kh, kw, oc]
        self.bias = None if bias is None else np.asarray(bias, F32)
        self.geom, self.dm = geom, depth_multiplier

    def __call__(self, x: np.ndarray) -> np.ndarray:
        _, h, w, _ = x.shape
        g = self.geom
        oh, ow = g.output_size(h, w)
        xp = pad_hw(x, g.pads(h, w))
        if self.dm > 1:
            xp = np.repeat(xp, self.dm, axis=3)
        acc = None
        for ky, kx, view in taps(xp, g, oh, ow):  # one product and one add per tap (faster than out= temps)
            if acc is None:
                acc = view * self.w[ky, kx]
            else:
                acc += view * self.w[ky, kx]
        if self.bias is not None:
            acc += self.bias
        return acc


class ConvTranspose2d:
    """Deconvolution: one GEMM to per-tap contributions, then a strided scatter-add per tap, then cropping.

    ``weight`` is ``[groups*ocg, kh, kw, icg]``; ``adjustment`` (output_padding) adds rows/cols at the end.
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geom: Geometry, groups: int,
                 adjustment: tuple[int, int]):
        oc, kh, kw, icg = weight.shape
        ocg = oc // groups
        self.geom, self.groups, self.oc, self.adj = geom, groups, oc, adjustment
        w = weight.reshape(groups, ocg, kh, kw, icg).transpose(0, 4, 2, 3, 1)  # [g, icg, kh, kw, ocg]
        self.wmat = np.ascontiguousarray(w.reshape(groups, icg, kh * kw * ocg), dtype=F32)
        self.bias = None if bias is None else np.asarray(bias, F32)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.geom.kernel, self.geom.stride, self.geom.dilation
        pt, pr, pb, pl = self.geom.padding
        return ((h - 1) * sh + (kh - 1) * dh + 1 + self.adj[0] - pt - pb,
                (w - 1) * sw + (kw - 1) * dw + 1 + self.adj[1] - pl - pr)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        (kh, kw), (sh, sw), (dh, dw) = self.geom.kernel, self.geom.stride, self.geom.dilation
        pt, pr, pb, pl = self.geom.padding
        g, ocg = self.groups, self.oc // self.groups
        cols = x.reshape(n * h * w, g, c // g).transpose(1, 0, 2)  # [g, m, icg]
        contrib = np.matmul(cols, self.wmat)  # [g, m, kh*kw*ocg]
        contrib = contrib.reshape(g, n, h, w, kh, kw, ocg).transpose(1, 2, 3, 4, 5, 0, 6)
        contrib = contrib.reshape(n, h, w, kh, kw, self.oc)
        fh = (h - 1) * sh + (kh - 1) * dh + 1 + self.adj[0]
        fw = (w - 1) * sw + (kw - 1) * dw + 1 + self.adj[1]
        full = np.zeros((n, max(fh, pt + 1), max(fw, pl + 1), self.oc), F32)
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dh, kx * dw
                full[:, y0 : y0 + sh * (h - 1) + 1 : sh, x0 : x0 + sw * (w - 1) + 1 : sw] += contrib[:, :, :, ky, kx]
        out = full[:, pt : fh - pb, pl : fw - pr]
        if self.bias is not None:
            out = out + self.bias
        return out


def lowest(dtype: np.dtype):
    """A padding value no real element loses to in a max (bfloat16's NumPy kind is 'V', not 'f')."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def max_pool(x: np.ndarray, g: Geometry) -> np.ndarray:
    """Max pooling; padded positions never win (XNNPACK reads only real input pixels)."""
    _, h, w, _ = x.shape
    oh, ow = g.output_size(h, w)
    xp = pad_hw(x, g.pads(h, w), lowest(x.dtype))
    out = None
    for _, _, view in taps(xp, g, oh, ow):
        out = view.copy() if out is None else np.maximum(out, view, out=out)
    return out


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


def global_avg_pool(x: np.ndarray, keep_dims: bool) -> np.ndarray:
    """Mean over the spatial axes of an N...C array (all but the first and last)."""
    axes = tuple(range(1, x.ndim - 1))
    return np.mean(x, axis=axes, dtype=F32, keepdims=keep_dims)


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


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


# -- elementwise ----------------------------------------------------------------------------------------------
_ERFC = tuple(F32(c) for c in (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
                                -1.13520398, 1.48851587, -0.82215223, 0.17087277))


def erfc_abs(z: np.ndarray) -> np.ndarray:
    """erfc(|z|) with relative error below 1.2e-7 (Chebyshev fit, Numerical Recipes 6.2)."""
    a = np.abs(z)
    t = F32(1) / (F32(1) + F32(0.5) * a)
    poly = _ERFC[-1]
    for c in reversed(_ERFC[1:-1]):
        poly = c + t * poly
    return t * np.exp(-a * a + _ERFC[0] + t * poly)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, written with erfc so that large negative inputs keep their relative accuracy."""
    half = F32(0.5) * x * erfc_abs(x * F32(0.7071067811865476))
    return np.where(x >= 0, x - half, half)


def sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    r = F32(1) / (F32(1) + e)
    return np.where(x >= 0, r, e * r)


def hardswish(x: np.ndarray) -> np.ndarray:
    return x * np.clip(x + F32(3), 0, 6) * F32(1 / 6)


UNARY = {
    "Abs": np.abs, "Negate": np.negative, "Floor": np.floor, "Ceiling": np.ceil, "Square": np.square,
    "SquareRoot": np.sqrt, "ReciprocalSquareRoot": lambda x: F32(1) / np.sqrt(x), "Log": np.log, "Exp": np.exp,
    "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh, "Sigmoid": sigmoid, "Gelu": gelu, "Hardswish": hardswish,
    "Softmax": softmax, "Copy": lambda x: x, "Clamp": lambda x: x,  # Clamp is all fused min/max
}

BINARY = {
    "Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Div": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum,
    "PReLU": lambda x, slope: np.where(x >= 0, x, x * slope),
}


def leaky_relu(slope: float):
    s = F32(slope)
    return lambda x: np.where(x >= 0, x, x * s)


def elu(alpha: float):
    a = F32(alpha)
    return lambda x: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))
