"""Independent NumPy references for the XNNPACK delegate tests: direct loops over output pixels, so they only
suit small sizes, plus the comparison and random-input helpers the XNNPACK test modules share.
"""

from __future__ import annotations


import numpy as np

F32 = np.float32
RNG = np.random.default_rng(1234)


def ref_conv(x, w, b, stride, pads, dil, groups):
    """x NHWC, w [oc, kh, kw, icg] -> NHWC; pads (top, right, bottom, left)."""
    n, h, wd, c = x.shape
    oc, kh, kw, icg = w.shape
    pt, pr, pb, pl = pads
    xp = np.zeros((n, h + pt + pb, wd + pl + pr, c), np.float64)
    xp[:, pt : pt + h, pl : pl + wd] = x
    oh = (h + pt + pb - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kw - 1) - 1) // stride[1] + 1
    ocg = oc // groups
    out = np.zeros((n, oh, ow, oc))
    for oy in range(oh):
        for ox in range(ow):
            for ky in range(kh):
                for kx in range(kw):
                    pix = xp[:, oy * stride[0] + ky * dil[0], ox * stride[1] + kx * dil[1]]  # [n, c]
                    for g in range(groups):
                        out[:, oy, ox, g * ocg : (g + 1) * ocg] += (
                            pix[:, g * icg : (g + 1) * icg] @ w[g * ocg : (g + 1) * ocg, ky, kx].T)
    return out + (0 if b is None else b)


def ref_deconv(x, w, b, stride, pads, dil, groups, adj):
    n, h, wd, _ = x.shape
    oc, kh, kw, icg = w.shape
    pt, pr, pb, pl = pads
    oh = (h - 1) * stride[0] + dil[0] * (kh - 1) + 1 + adj[0] - pt - pb
    ow = (wd - 1) * stride[1] + dil[1] * (kw - 1) + 1 + adj[1] - pl - pr
    ocg = oc // groups
    out = np.zeros((n, oh, ow, oc))
    for iy in range(h):
        for ix in range(wd):
            for ky in range(kh):
                for kx in range(kw):
                    oy, ox = iy * stride[0] + ky * dil[0] - pt, ix * stride[1] + kx * dil[1] - pl
                    if 0 <= oy < oh and 0 <= ox < ow:
                        for g in range(groups):
                            out[:, oy, ox, g * ocg : (g + 1) * ocg] += (
                                x[:, iy, ix, g * icg : (g + 1) * icg] @ w[g * ocg : (g + 1) * ocg, ky, kx].T)
    return out + (0 if b is None else b)


def ref_pool(x, kernel, stride, pads, dil, how):
    n, h, wd, c = x.shape
    pt, pr, pb, pl = pads
    oh = (h + pt + pb - dil[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dil[1] * (kernel[1] - 1) - 1) // stride[1] + 1
    out = np.zeros((n, oh, ow, c))
    index = np.zeros((n, oh, ow, c), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            vals, where = [], []
            for ky in range(kernel[0]):
                for kx in range(kernel[1]):
                    iy, ix = oy * stride[0] + ky * dil[0] - pt, ox * stride[1] + kx * dil[1] - pl
                    if 0 <= iy < h and 0 <= ix < wd:
                        vals.append(x[:, iy, ix])
                        where.append(ky * kernel[1] + kx)
            vals = np.stack(vals)
            if how == "avg":
                out[:, oy, ox] = vals.mean(0)
            else:
                out[:, oy, ox] = vals.max(0)
                index[:, oy, ox] = np.asarray(where)[vals.argmax(0)]
    return (out, index) if how == "argmax" else out


def ref_resize(x, oh, ow, align, legacy):
    n, h, w, c = x.shape
    def axis(n_in, n_out):
        adj = 1 if align and n_out != 1 else 0
        scale = F32(n_in - adj) / F32(n_out - adj)
        res = []
        for o in range(n_out):
            pos = F32(o) * scale
            if not (align or legacy):
                pos = min(max(pos + (F32(0.5) * scale - F32(0.5)), 0), n_in - 1)
            lo = int(pos)
            res.append((lo, min(lo + 1, n_in - 1), float(pos) - lo))
        return res
    out = np.zeros((n, oh, ow, c))
    for oy, (y0, y1, ay) in enumerate(axis(h, oh)):
        for ox, (x0, x1, ax) in enumerate(axis(w, ow)):
            top = x[:, y0, x0] * (1 - ax) + x[:, y0, x1] * ax
            bot = x[:, y1, x0] * (1 - ax) + x[:, y1, x1] * ax
            out[:, oy, ox] = top * (1 - ay) + bot * ay
    return out


def close(actual, expected, tol=1e-5, where=""):
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
    scale = max(np.abs(expected).max(initial=0), 1.0)
    err = np.abs(actual.astype(np.float64) - expected).max(initial=0) / scale
    assert err <= tol, f"{where}: max error {err:.3g} > {tol}"


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(F32)
