"""NumPy kernels for the XNNPACK node types, in NHWC layout, on float32 arrays.

Convolutions are prepared once and then called per run. ``Conv2d`` is one GEMM per layer that reads the OHWI
filter in place as its ``[kh*kw*ic, oc]`` matrix (a transposed view, no copy); 1x1 convolutions multiply the
input itself, others gather patches into a scratch matrix (a batched GEMM for grouped
convolutions). ``DepthwiseConv2d`` and max pooling do one multiply-add (or maximum) per kernel tap over the
whole output, reading each tap's unit-stride rectangle of the input (of a stride phase plane) without a
padded copy. ``ConvTranspose2d`` does one matmul followed by a scatter-add per tap. Nothing loops over
elements in Python. The quantized paths reuse the same kernels on zero-point-corrected integer values.

Work buffers (patch matrices, phase planes, temporaries) come from a :class:`Scratch`: the work memory of the
plan that owns it (each kernel that needs one is given its plan's at compile time), one growing buffer per
purpose and thread, so a plan stays thread-safe, steady-state calls do not allocate, and the memory is freed
with the plan.

Example::

    >>> import numpy as np
    >>> conv = Conv2d(np.ones((4, 3, 3, 2), np.float32), None, Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)))
    >>> conv(np.ones((1, 5, 5, 2), np.float32)).shape
    (1, 5, 5, 4)
"""

from __future__ import annotations

import functools
import math
import threading
from collections import namedtuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pterun import threads
from pterun.numerics import erfc_abs
from pterun.threads import num_threads, parallel_for

F32 = np.float32

try:  # the ufunc behind np.clip, without np.clip's Python-level argument handling (several µs a call)
    from numpy._core.umath import clip
except ImportError:  # NumPy 1.x
    try:
        from numpy.core.umath import clip
    except ImportError:
        clip = np.clip


class Geometry(namedtuple("Geometry", "padding kernel stride dilation same_padding", defaults=(False,))):
    """Padding (top, right, bottom, left), kernel (h, w), stride (h, w) and dilation (h, w) of a 2-D window;
    ``same_padding``: TensorFlow SAME, the padding derived from the input size at run time. Immutable and
    hashable (a cache key)."""

    __slots__ = ()

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


# -- work buffers ------------------------------------------------------------------------------------------------
class Scratch:
    """The work memory of one plan: ``scratch(slot, shape, dtype)`` is a reusable buffer (contents undefined) for
    one kernel-internal purpose, one per slot and thread, grown to the largest request.

    Kernels gather patches, phase planes and temporaries here instead of allocating (and page-faulting) fresh
    memory on every call. A buffer never leaves the kernel that asked for it: the next call with the same
    ``slot`` on the same thread overwrites it, so one plan (and the pool threads its kernels split over) can run
    from several threads at once. The buffers are freed with the Scratch, that is with the plan that owns it
    (and a thread's share when that thread ends).
    """

    __slots__ = ("__weakref__", "_tls")

    def __init__(self):
        self._tls = threading.local()

    def __call__(self, slot: str, shape: tuple, dtype=F32) -> np.ndarray:
        dt = np.dtype(dtype)
        n = dt.itemsize * math.prod(shape)
        tls = self._tls
        buf = getattr(tls, slot, None)
        if buf is None or buf.nbytes < n:
            buf = np.empty(max(n, 64), np.uint8)
            setattr(tls, slot, buf)
        return buf[:n].view(dt).reshape(shape)

    def nbytes(self) -> int:
        """Bytes this thread's buffers hold."""
        return sum(b.nbytes for b in vars(self._tls).values())


def padded(scratch: Scratch, x: np.ndarray, pads: tuple[int, int, int, int], slot: str,
           channels_first: bool = False) -> np.ndarray:
    """``x`` (NHWC) zero-padded into a scratch buffer, NHWC or (``channels_first``) NCHW; ``x`` itself (or its
    NCHW view) when there is nothing to pad."""
    pt, pr, pb, pl = pads
    n, h, w, c = x.shape
    src = x.transpose(0, 3, 1, 2) if channels_first else x
    if not (pt or pr or pb or pl):
        return src
    hp, wp = h + pt + pb, w + pl + pr
    # the buffer is shared, so its border is cleared each time: [n, (c,) rows, cols, (c)] as [.., rows, cols, ..]
    xp = scratch(slot, (n, c, hp, wp) if channels_first else (n, hp, wp, c), x.dtype)
    hw = xp.transpose(0, 2, 3, 1) if channels_first else xp  # an NHWC view of either layout
    hw[:, :pt] = 0
    hw[:, pt + h :] = 0
    hw[:, pt : pt + h, :pl] = 0
    hw[:, pt : pt + h, pl + w :] = 0
    hw[:, pt : pt + h, pl : pl + w] = x
    return xp


@functools.lru_cache(maxsize=512)
def window_taps(g: Geometry, h: int, w: int):
    """How a window op over an ``[n, h, w, c]`` input reads it, without a padded copy.

    Returns ``(oh, ow, phases, taps)``. For stride (sh, sw) the input splits into *phase planes*
    ``x[:, a::sh, b::sw]``; every tap reads one plane at unit stride. ``phases`` lists the (a, b) planes some tap
    reads (``[(0, 0)]`` at stride 1: the input itself). Each tap is ``(ky, kx, phase, iy0, ix0, oy0, oy1, ox0,
    ox1)``: output rows ``oy0:oy1`` and columns ``ox0:ox1`` read the plane from ``(iy0, ix0)`` on; outputs
    outside that rectangle would read padding, which never contributes. Taps that read only padding are left
    out.
    """
    pt, _, _, pl = g.pads(h, w)
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.stride, g.dilation
    oh, ow = g.output_size(h, w)
    phases: list = []
    out = []
    for ky in range(kh):
        a, qy = _phase(ky * dh - pt, sh)
        oy0, oy1 = max(0, -qy), min(oh, (h - a + sh - 1) // sh - qy)
        if oy0 >= oy1:
            continue
        for kx in range(kw):
            b, qx = _phase(kx * dw - pl, sw)
            ox0, ox1 = max(0, -qx), min(ow, (w - b + sw - 1) // sw - qx)
            if ox0 >= ox1:
                continue
            if (a, b) not in phases:
                phases.append((a, b))
            out.append((ky, kx, phases.index((a, b)), oy0 + qy, ox0 + qx, oy0, oy1, ox0, ox1))
    return oh, ow, tuple(phases), tuple(out)


def _phase(offset: int, stride: int) -> tuple[int, int]:
    """Input index ``o * stride + offset`` = ``(o + q) * stride + a``: returns (a, q)."""
    a = offset % stride
    return a, (offset - a) // stride


def phase_planes(scratch: Scratch, x: np.ndarray, g: Geometry, phases: list, slot: str) -> list:
    """The phase planes of ``x`` (NHWC) as contiguous ``[n, rows, cols * c]`` arrays."""
    n, h, w, c = x.shape
    sh, sw = g.stride
    if (sh, sw) == (1, 1):
        xc = np.ascontiguousarray(x)
        return [xc.reshape(n, h, w * c)]
    dims = [((h - a + sh - 1) // sh, (w - b + sw - 1) // sw) for a, b in phases]
    buf = scratch(slot, (sum(n * r * q * c for r, q in dims),), x.dtype)
    planes, at = [], 0
    for (a, b), (r, q) in zip(phases, dims):
        p = buf[at : at + n * r * q * c].reshape(n, r, q, c)
        np.copyto(p, x[:, a::sh, b::sw])
        planes.append(p.reshape(n, r, q * c))
        at += n * r * q * c
    return planes


def _full_first(taps_: tuple, oh: int, ow: int) -> tuple[tuple, bool]:
    """Put a tap that covers the whole output first; says whether there is one."""
    for i, t in enumerate(taps_):
        if t[5:] == (0, oh, 0, ow):
            return (t,) + taps_[:i] + taps_[i + 1 :], True
    return taps_, False


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
        tps, full = _full_first(tps, oh, ow)
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


def lowest(dtype: np.dtype):
    """A padding value no real element loses to in a max (bfloat16's NumPy kind is 'V', not 'f')."""
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def max_pool(x: np.ndarray, g: Geometry, scratch: Scratch | None = None) -> np.ndarray:
    """Max pooling; padded positions never win (XNNPACK reads only real input pixels). ``scratch``: the owning
    plan's work memory for the phase planes (None: fresh memory)."""
    n, h, w, c = x.shape
    oh, ow, phases, tps = window_taps(g, h, w)
    tps, full = _full_first(tps, oh, ow)
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


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


# -- elementwise ----------------------------------------------------------------------------------------------
def gelu(x: np.ndarray) -> np.ndarray:
    """Exact (erf) GELU, written with erfc so that large negative inputs keep their relative accuracy."""
    half = F32(0.5) * x * erfc_abs(x * F32(0.7071067811865476))
    return np.where(x >= 0, x - half, half)


def sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    r = F32(1) / (F32(1) + e)
    return np.where(x >= 0, r, e * r)


def hardswish(x: np.ndarray) -> np.ndarray:
    """x * (1/6) * clamp(x + 3, 0, 6), multiplied in XNNPACK's f32 kernel order."""
    return np.multiply(x, F32(1 / 6), dtype=F32) * np.clip(x + F32(3), 0, 6)


def hardswish_reference(x: np.ndarray) -> np.ndarray:
    """(x / 6) * clamp(x + 3, 0, 6): the reference operator XNNPACK tabulates for 8-bit inputs."""
    return np.divide(x, F32(6), dtype=F32) * np.clip(x + F32(3), 0, 6)


def sigmoid_reference(x: np.ndarray) -> np.ndarray:
    """e / (1 + e) with e = exp(x) in float64, 1 above 100 and 0 below -100: the tabulated reference."""
    xd = np.clip(x.astype(np.float64), -100, 100)
    e = np.exp(xd)
    y = (e / (1 + e)).astype(F32)
    y[x > 100] = 1
    y[x < -100] = 0
    return y


# 8-bit static quantized unary operators are tables XNNPACK fills from its reference operators; where that
# operator's float arithmetic differs from the fast kernel's, the table uses this one
LUT_REFERENCE = {"Hardswish": hardswish_reference, "Sigmoid": sigmoid_reference}


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
