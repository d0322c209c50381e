"""Convolution and pooling windows for the NumPy engine's kernels: geometry, padding, kernel taps, stride phases.

A kernel tap is one position of the kernel: the unit-stride rectangle of the (padded, or phase-split) input it reads
for every output pixel. Work buffers come from a :class:`Scratch`: the work memory of the plan that owns it, one
growing buffer per purpose and thread, so a plan stays thread-safe and steady-state calls do not allocate.

Example::

    >>> oh, ow, phases, taps_ = window_taps(Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)), 5, 5)
    >>> (oh, ow), phases, len(taps_)   # stride 1: the input itself; every tap of the 3x3 kernel reads it
    ((5, 5), ((0, 0),), 9)
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from pterun._record import Fields

F32 = np.float32


class Geometry(Fields):
    """Padding (top, right, bottom, left), kernel (h, w), stride (h, w) and dilation (h, w) of a 2-D window;
    ``same_padding``: TensorFlow SAME, the padding derived from the input size at run time. Immutable and
    hashable (a cache key)."""

    padding: tuple
    kernel: tuple
    stride: tuple
    dilation: tuple
    same_padding: bool = False

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


def full_tap_first(taps_: tuple, oh: int, ow: int) -> tuple[tuple, bool]:
    """Put a tap that covers the whole output first; says whether there is one."""
    for i, t in enumerate(taps_):
        if t[5:] == (0, oh, 0, ow):
            return (t,) + taps_[:i] + taps_[i + 1 :], True
    return taps_, False
