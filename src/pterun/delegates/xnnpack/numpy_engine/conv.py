"""Convolutions for the NumPy engine, in NHWC layout, on float32 arrays (quantized paths reuse them on
zero-point-corrected integer values).

``Conv2d`` is one GEMM per layer that reads the OHWI filter in place as its ``[kh*kw*ic, oc]`` matrix (a transposed
view, no copy); 1x1 convolutions multiply the input itself, others gather patches into a scratch matrix (a batched
GEMM for grouped convolutions). ``DepthwiseConv2d`` does one multiply-add per kernel tap over the whole output,
reading each tap's unit-stride rectangle of the input (of a stride phase plane) without a padded copy.
``ConvTranspose2d`` does one matmul followed by a scatter-add per tap. Nothing loops over elements in Python.

Example::

    >>> import numpy as np
    >>> conv = Conv2d(np.ones((4, 3, 3, 2), np.float32), None, Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)))
    >>> conv(np.ones((1, 5, 5, 2), np.float32)).shape
    (1, 5, 5, 4)
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pterun import threads
from pterun.delegates.xnnpack.numpy_engine.pointwise import clip
from pterun.delegates.xnnpack.numpy_engine.windows import (F32, Geometry, Scratch, full_tap_first, padded, phase_planes,
                                                           window_taps)
from pterun.threads import num_threads, parallel_for


class BiasAdd:
    """Adds a per-channel bias to a C-contiguous ``[m, channels]`` float32 array in place, over rows of
    several pixels at once (a short channel axis makes NumPy's broadcast loop slow)."""

    def __init__(self, bias: np.ndarray):
        self.bias = np.ascontiguousarray(bias, F32).reshape(-1)
        self._tiles: dict[int, tuple[int, np.ndarray]] = {}

    def __call__(self, y: np.ndarray) -> np.ndarray:
        m = y.shape[0]
        if m == 1 or not y.flags.c_contiguous:  # one row, or a reshape would copy: add where it is
            return np.add(y, self.bias, out=y)
        t = self._tiles.get(m)
        if t is None:
            r = 1
            while r < 64 and m % (2 * r) == 0 and 2 * r * self.bias.size <= 8192:
                r *= 2
            t = self._tiles[m] = (r, np.tile(self.bias, r))
        r, tile = t
        flat = y.reshape(m // r, r * self.bias.size)
        np.add(flat, tile, out=flat)
        return y


def exact_splits(w_kn: np.ndarray, peak_input: float) -> list | None:
    """Cut points along K (axis -2 of integer-valued ``[..., k, n]`` weights) such that no partial sum of a
    chunk can reach 2**24 when inputs are at most ``peak_input`` in magnitude, or None when the whole sum
    already cannot: float32 BLAS then sums those integers exactly, in any order, as XNNPACK's int32 does."""
    a = np.abs(np.asarray(w_kn, np.float64))
    col = a.reshape(-1, a.shape[-2], a.shape[-1])
    limit = (2**24 - 1) / max(peak_input, 1.0)
    if float(col.sum(axis=1).max(initial=0.0)) < limit:
        return None
    row = col.max(axis=(0, 2))  # the largest |w| of each k: a bound for every column at once
    cuts, acc = [0], 0.0
    for k, r in enumerate(row):
        if acc + r >= limit:
            cuts.append(k)
            acc = 0.0
        acc += r
    cuts.append(len(row))
    return cuts


def split_matmul(a: np.ndarray, b: np.ndarray, cuts: list | None) -> np.ndarray:
    """``a @ b`` in float32; with ``cuts``, chunk by chunk of K (each exact) added in float64 (exact)."""
    if cuts is None:
        return np.matmul(a, b)
    acc = None
    for k0, k1 in zip(cuts[:-1], cuts[1:]):
        part = np.matmul(a[..., k0:k1], b[..., k0:k1, :]).astype(np.float64)
        acc = part if acc is None else np.add(acc, part, out=acc)
    return acc.astype(F32)


class Conv2d:
    """NHWC convolution as one GEMM; ``weight`` is OHWI ``[groups*ocg, kh, kw, icg]``.

    Without groups the GEMM reads the OHWI filter in place as a ``[kh*kw*ic, oc]`` matrix (a transposed view:
    no copy). Patches are gathered into a per-thread scratch matrix: pixel-major ``[m, kh*kw*ic]`` rows, one
    copy per kernel row (its ``kw * ic`` inputs are adjacent in NHWC), or for few input channels tap-major
    ``[kh*kw*ic, m]`` (one long copy per tap and channel), which the GEMM reads transposed. 1x1 unpadded
    convolutions multiply the input itself. With several threads (:mod:`pterun.threads`) a large layer is
    split by output rows: each thread gathers its own patches and multiplies them into its rows of the output.
    ``clamp`` (lo, hi), when set, is applied to each part while it is still in cache. ``scratch``: the owning
    plan's work memory (None: a Scratch of this convolution's own).
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geom: Geometry, groups: int = 1,
                 scratch: Scratch | None = None):
        self.scratch = scratch if scratch is not None else Scratch()
        oc, kh, kw, icg = weight.shape
        self.geom, self.groups, self.oc = geom, groups, oc
        self.pointwise = (kh, kw) == (1, 1) and geom.padding == (0, 0, 0, 0) and not geom.same_padding
        ocg = oc // groups
        if groups == 1:
            self.wmat = np.asarray(weight, F32).reshape(oc, kh * kw * icg).T  # a view when weight is float32
        else:  # patches are gathered as [..., kh, kw, group, icg]; the weights are laid out to match once
            w = weight.reshape(groups, ocg, kh, kw, icg).transpose(0, 2, 3, 4, 1)  # [g, kh, kw, icg, ocg]
            self.wmat = np.ascontiguousarray(w.reshape(groups, kh * kw * icg, ocg), dtype=F32)
        self.bias = None if bias is None else BiasAdd(bias)
        self.clamp: tuple | None = None
        self.k_splits: list | None = None  # see exact_splits: set on integer weights whose sums could round

    def __call__(self, x: np.ndarray) -> np.ndarray:
        n, h, w, c = x.shape
        g = self.geom
        oh, ow = g.output_size(h, w)
        (kh, kw), (sh, sw) = g.kernel, g.stride
        m = n * oh * ow
        if self.groups == 1:
            y = np.empty((m, self.oc), F32)
            split = num_threads() > 1 and m * kh * kw * c * self.oc >= threads.SPLIT_MACS
            if self.pointwise:
                if (sh, sw) != (1, 1):
                    x = x[:, : sh * (oh - 1) + 1 : sh, : sw * (ow - 1) + 1 : sw]
                cols = x.reshape(m, c)
                if split:
                    parallel_for(m, lambda lo, hi: self._gemm(cols[lo:hi], y[lo:hi]),
                                 min_rows=threads.SPLIT_MIN_ROWS)
                else:
                    self._gemm(cols, y)
            else:
                tap_major = c < 16
                xp = padded(self.scratch, x, g.pads(h, w), "conv_pad", channels_first=tap_major)
                gather = self._im2col_tap_major if tap_major else self._im2col
                if split and n == 1:
                    parallel_for(oh, lambda r0, r1: self._gemm(gather(xp, n, c, r0, r1, ow),
                                                                  y[r0 * ow : r1 * ow]), min_rows=2)
                else:
                    self._gemm(gather(xp, n, c, 0, oh, ow), y)
            return y.reshape(n, oh, ow, self.oc)
        cols = self._im2col(padded(self.scratch, x, g.pads(h, w), "conv_pad"), n, c, 0, oh, ow)
        icg = c // self.groups
        cols = cols.reshape(m, kh * kw, self.groups, icg).transpose(2, 0, 1, 3).reshape(self.groups, m, -1)
        y = split_matmul(cols, self.wmat, self.k_splits).transpose(1, 0, 2).reshape(m, self.oc)
        if self.bias is not None:
            self.bias(y)
        if self.clamp is not None:
            clip(y, *self.clamp, out=y)
        return y.reshape(n, oh, ow, self.oc)

    def _gemm(self, cols: np.ndarray, y: np.ndarray) -> None:
        """``y = cols @ wmat (+ bias, clamped)`` for one block of rows, written in place."""
        if self.k_splits is None:
            np.dot(cols, self.wmat, out=y)  # 2-D dot: BLAS on either memory order, less overhead than matmul
        else:
            y[...] = split_matmul(cols, self.wmat, self.k_splits)
        if self.bias is not None:
            self.bias(y)
        if self.clamp is not None:
            clip(y, *self.clamp, out=y)

    def _im2col(self, xp: np.ndarray, n: int, c: int, r0: int, r1: int, ow: int) -> np.ndarray:
        """Patches of output rows ``r0:r1`` from the padded NHWC input, pixel-major ``[m, kh*kw*c]``."""
        g = self.geom
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
        r = r1 - r0
        cols = self.scratch("conv_cols", (n, r, ow, kh, kw, c), xp.dtype)
        if dw == 1:  # the kw taps of a row are kw*c adjacent elements: one copy per kernel row
            xp = np.ascontiguousarray(xp)
            hp, wp = xp.shape[1:3]
            win = sliding_window_view(xp.reshape(n, hp, wp * c), kw * c, axis=2)  # [n, hp, wp*c-kw*c+1, kw*c]
            win = win[:, :, : sw * c * (ow - 1) + 1 : sw * c]
            rows = cols.reshape(n, r, ow, kh, kw * c)
            for ky in range(kh):
                y0 = ky * dh + sh * r0
                np.copyto(rows[:, :, :, ky], win[:, y0 : y0 + sh * (r - 1) + 1 : sh])
        else:
            for ky in range(kh):
                y0 = ky * dh + sh * r0
                rows = xp[:, y0 : y0 + sh * (r - 1) + 1 : sh]
                for kx in range(kw):
                    np.copyto(cols[:, :, :, ky, kx], rows[:, :, kx * dw : kx * dw + sw * (ow - 1) + 1 : sw])
        return cols.reshape(n * r * ow, kh * kw * c)

    def _im2col_tap_major(self, xp: np.ndarray, n: int, c: int, r0: int, r1: int, ow: int) -> np.ndarray:
        """Patches of output rows ``r0:r1`` from the padded NCHW input, as a transposed tap-major matrix."""
        g = self.geom
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
        r = r1 - r0
        cols = self.scratch("conv_cols", (kh, kw, c, n, r, ow), xp.dtype)
        for ky in range(kh):
            y0 = ky * dh + sh * r0
            rows = xp[:, :, y0 : y0 + sh * (r - 1) + 1 : sh]
            for kx in range(kw):
                np.copyto(cols[ky, kx], rows[:, :, :, kx * dw : kx * dw + sw * (ow - 1) + 1 : sw].transpose(1, 0, 2, 3))
        return cols.reshape(kh * kw * c, n * r * ow).T


class DepthwiseConv2d:
    """Depthwise convolution: output channel c reads input channel c // depth_multiplier; filter [1,kh,kw,oc].

    One multiply and one add per kernel tap over the whole output, with rows of ``ow * channels`` contiguous
    elements: each tap reads a unit-stride rectangle of the input (of a phase plane when strided) and skips
    the padding instead of reading a padded copy; its weights are tiled along the row once per input size.
    With several threads a large layer is split by output rows; ``clamp`` and ``scratch`` work as in
    :class:`Conv2d`.
    """

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None, geom: Geometry, depth_multiplier: int,
                 scratch: Scratch | None = None):
        self.scratch = scratch if scratch is not None else Scratch()
        self.w = np.asarray(weight, F32).reshape(weight.shape[1:])  # [kh, kw, oc]
        self.bias = None if bias is None else np.asarray(bias, F32).reshape(-1)
        self.geom, self.dm = geom, depth_multiplier
        self._plans: dict = {}
        self.clamp: tuple | None = None

    def _plan(self, h: int, w: int):
        oh, ow, phases, tps = window_taps(self.geom, h, w)
        tps, full = full_tap_first(tps, oh, ow)
        oc = self.w.shape[-1]
        wt = np.tile(self.w, (1, 1, max(ow, 0)))  # [kh, kw, ow * oc]
        steps = tuple((p, iy0, ix0 * oc, (ix0 + ox1 - ox0) * oc, oy0, oy1, ox0 * oc, ox1 * oc,
                       wt[ky, kx, ox0 * oc : ox1 * oc])
                      for ky, kx, p, iy0, ix0, oy0, oy1, ox0, ox1 in tps)
        bias = None if self.bias is None else np.tile(self.bias, max(ow, 0))
        plan = self._plans[(h, w)] = (oh, ow, phases, steps, full, bias)
        return plan

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.dm > 1:
            x = np.repeat(x, self.dm, axis=3)
        n, h, w, c = x.shape
        if c != self.w.shape[-1]:
            raise ValueError(f"input has {c} channels, the filter {self.w.shape[-1]} (depth multiplier {self.dm})")
        plan = self._plans.get((h, w)) or self._plan(h, w)
        oh, ow, phases, steps, full, bias = plan
        out = np.empty((n, oh, ow * c), F32)
        if out.size == 0:
            return out.reshape(n, oh, ow, c)
        planes = phase_planes(self.scratch, x.astype(F32, copy=False), self.geom, phases, "dw_planes")

        def rows(r0: int, r1: int) -> None:
            self._rows(planes, steps, full, bias, out, r0, r1)

        # strided layers are left whole: their phase planes are copied first, and what remains splits no better
        # than the thread hand-offs cost
        if num_threads() > 1 and out.size * len(steps) >= threads.SPLIT_TAPS and len(phases) == 1:
            parallel_for(oh, rows, min_rows=2)
        else:
            rows(0, oh)
        return out.reshape(n, oh, ow, c)

    def _rows(self, planes, steps, full, bias, out, r0: int, r1: int) -> None:
        """Output rows ``r0:r1``: every tap's product added in, then bias and clamp."""
        mul, add = np.multiply, np.add
        part = out[:, r0:r1]
        first = 0
        if full:
            p, i0, j0, j1, o0, _, _, _, wv = steps[0]
            np.multiply(planes[p][:, i0 + r0 - o0 : i0 + r1 - o0, j0:j1], wv, out=part)
            first = 1
        else:
            part.fill(0)
        n = out.shape[0]
        tmp = self.scratch("dw_tmp", (part.size,))
        for p, i0, j0, j1, o0, o1, k0, k1, wv in steps[first:]:
            a, b = max(o0, r0), min(o1, r1)
            if a >= b:
                continue
            t = tmp[: n * (b - a) * (j1 - j0)].reshape(n, b - a, j1 - j0)
            mul(planes[p][:, i0 + a - o0 : i0 + b - o0, j0:j1], wv, out=t)
            ov = out[:, a:b, k0:k1]
            add(ov, t, out=ov)
        if bias is not None:
            add(part, bias, out=part)
        if self.clamp is not None:
            clip(part, *self.clamp, out=part)


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
