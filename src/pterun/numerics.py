"""Numeric routines shared by the kernels and the delegates: the error function, sliding-window geometry and
quantization parameters, each written once. It imports nothing of pterun, so both ``kernels/`` and
``delegates/`` may use it. Example::

    >>> import numpy as np
    >>> round(float(erf(np.array(0.5))), 12)
    0.520499877813
    >>> window_output_size(5, kernel=2, stride=2, pad_before=0, pad_after=0, ceil_mode=True)
    3
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["ERFCX_P", "ERFCX_Q", "ERFC_NEGLIGIBLE", "along_axis", "erf", "erfc_abs", "inverse_scale",
           "window_output_size"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

# -- the error function ------------------------------------------------------------------------------------
# One evaluation of erfc, used everywhere: erfc(|z|) = exp(-z*z) * P(|z|) / Q(|z|), W. J. Cody's rational
# (:func:`erfc_abs`; the GELU fast path in kernels.fast evaluates the same P and Q as one matrix product over a
# chunk's powers). erf(x) is 1 - erfc(|x|) with x's sign for |x| > 1 (within 2e-16 of math.erf there), but near 0
# that subtraction cancels (erfc(0) = 1): for |x| <= 1 erf has a series of its own, x * A(x^2), which is a
# different function of a different region, not a second erfc. tests/test_numerics.py holds both to math.erf /
# math.erfc.
#
# A: a Chebyshev series in t = 2x^2 - 1 fitted offline (numpy.polynomial.chebyshev.chebfit on 2000 Chebyshev
# nodes against math.erf), max relative error 7e-16 on |x| <= 1.
_ERF_A = (0.9754769393826541, -0.14226120510371362, 0.010035582187599743, -0.0005768764699767347,
          2.7419931252179675e-05, -1.1043175507406296e-06, 3.8488755387334984e-08, -1.1808582432157819e-09,
          3.2334228555570324e-11, -7.990832516154001e-13, 1.7982489026049865e-14)


#: erfc(6) < 2**-54: from there on 1 - erfc(a) rounds to 1 in double
ERFC_NEGLIGIBLE = 6.0


# the series in the power basis of t, for Horner evaluation (the conversion costs about two decimal digits at
# this degree, far below float32 resolution and within 1e-14 of math.erf)
@functools.cache
def _erf_poly() -> np.ndarray:
    from numpy.polynomial import chebyshev  # on first use: importing numpy.polynomial costs ~4 ms

    return chebyshev.cheb2poly(_ERF_A)


def _horner(coeffs, u):
    y = np.full_like(u, coeffs[-1])
    for c in coeffs[-2::-1]:
        y *= u
        y += c
    return y


def _result_dtype(x: np.ndarray) -> np.dtype:
    return x.dtype if x.dtype.kind == "f" or x.dtype.kind == "V" else _F32


def erf(x: np.ndarray) -> np.ndarray:
    """The error function to double precision (computed in float64, returned in x's float dtype; integer and
    bool inputs give float32)."""
    x = np.asarray(x)
    x64 = x.astype(_F64).reshape(-1)
    u = x64 * x64
    u *= 2
    u -= 1
    y = _horner(_erf_poly(), u)
    y *= x64  # exact for |x| <= 1 (and NaN stays NaN); the tails are patched below
    tail = np.nonzero(np.abs(x64) > 1)
    if tail[0].size:
        xt = x64[tail]
        y[tail] = np.copysign(1 - erfc_abs(xt), xt)  # +-1 from ERFC_NEGLIGIBLE on, where erfc rounds away
    return y.reshape(x.shape).astype(_result_dtype(x), copy=False)


# exp(a*a) * erfc(a) = P(a) / Q(a), coefficients in ascending powers of a: W. J. Cody's rational approximation
# (Math. Comp. 23, 1969) for 0.47 <= a <= 4. Measured against math.erfc it stays within 5e-12 (relative) on all of
# [0, 6], within 7e-13 on [4, 6], 4e-10 on [6, 10] and 8e-8 beyond (it tends to erfc's asymptote 1 / (a sqrt(pi)));
# all coefficients are positive, so summing the powers loses nothing to cancellation.
ERFCX_P = (1.23033935479799725e3, 2.05107837782607147e3, 1.71204761263407058e3, 8.81952221241769090e2,
           2.98635138197400131e2, 6.61191906371416295e1, 8.88314979438837594e0, 5.64188496988670089e-1,
           2.15311535474403846e-8)
ERFCX_Q = (1.23033935480374942e3, 3.43936767414372164e3, 4.36261909014324716e3, 3.29079923573345963e3,
           1.62138957456669019e3, 5.37181101862009858e2, 1.17693950891312499e2, 1.57449261107098347e1, 1.0)

# per precision: the coefficients highest power first, as 0-d arrays (ufuncs take those fastest)
_ERFCX_HORNER = {dt: tuple(tuple(np.array(c, dt) for c in coeffs[::-1]) for coeffs in (ERFCX_P, ERFCX_Q))
                 for dt in (_F32, _F64)}
# exp(-a*a) is 0 in double from here on (and in float32 long before): clamping keeps inf out of the powers
_ERFC_ZERO = 27.3


def erfc_abs(z: np.ndarray) -> np.ndarray:
    """erfc(|z|) by the rational above, computed in z's precision (float64 for float64, float32 otherwise, as
    XNNPACK computes) and returned in z's float dtype. In float64 the relative error is below 5e-12 up to
    |z| = 6 and 1e-7 beyond; in float32 it is float32 rounding, mostly of exp(-z*z) (below 5e-6 to |z| = 9, where
    erfc leaves float32's normal range). 0 from 27.3, NaN for NaN. Large negative GELU inputs need erfc itself:
    ``1 - erf`` would cancel them away."""
    z = np.asarray(z)
    dt = _F64 if z.dtype == _F64 else _F32
    a = np.minimum(np.abs(z.astype(dt)).reshape(-1), dt.type(_ERFC_ZERO))
    (p0, *p_rest), (q0, *q_rest) = _ERFCX_HORNER[dt]
    p, q, e = np.full(a.shape, p0, dt), np.full(a.shape, q0, dt), np.multiply(a, a)
    multiply, add = np.multiply, np.add  # outputs passed positionally: a keyword out= costs more per call
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # float32: a**8 of a large a is inf
        for pc, qc in zip(p_rest, q_rest):
            multiply(p, a, p)
            add(p, pc, p)
            multiply(q, a, q)
            add(q, qc, q)
        np.negative(e, e)
        np.exp(e, e)
        multiply(e, p, e)
        np.divide(e, q, e)
    return e.reshape(z.shape).astype(_result_dtype(z), copy=False)


# -- sliding-window geometry ---------------------------------------------------------------------------------
def window_output_size(size: int, kernel: int, stride: int, pad_before: int, pad_after: int, dilation: int = 1,
                       ceil_mode: bool = False) -> int:
    """How many windows (of ``kernel`` taps, ``dilation`` apart) fit along one axis of ``size`` padded by
    ``pad_before`` / ``pad_after``, every ``stride``: convolution and pooling output sizes, in the kernels and
    the delegates. ``ceil_mode`` counts a last partial window, provided it starts inside the input or its
    leading padding (PyTorch's and ExecuTorch's rule)."""
    span = size + pad_before + pad_after - ((kernel - 1) * dilation + 1)
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_before:
        out -= 1
    return out


# -- quantization ----------------------------------------------------------------------------------------------
def inverse_scale(scale) -> np.float32 | np.ndarray:
    """1 / scale in float32, the scale first rounded to float32: how ExecuTorch's quantize kernels and XNNPACK
    both turn a scale into the multiplier they quantize with."""
    return np.float32(1) / np.asarray(scale, _F64).astype(_F32)


def along_axis(values, axis: int, ndim: int) -> np.ndarray:
    """Per-channel parameters (one per index of ``axis``) shaped to broadcast against an ``ndim``-D tensor."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(values).reshape(shape)
