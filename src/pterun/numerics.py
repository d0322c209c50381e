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
# Two evaluations, for two needs: erf to double precision (the erf kernel, the general GELU) by a three-range
# Chebyshev series, and erfc(|z|) fast by one rational (the GELU fast path in kernels.fast, the XNNPACK GELU),
# exact enough wherever 1 + erf or erfc itself is used, but it would cancel in erf near 0, and the series is
# 5-10x slower. tests/test_numerics.py holds each to math.erf / math.erfc and the two to each other.
#
# Chebyshev series fitted offline (numpy.polynomial.chebyshev.chebfit on 2000 Chebyshev nodes against
# math.erf / math.erfc) — max relative error 7e-16 / 7e-14 / 8e-15 in the three ranges:
#   |x| <= 1:        erf(x) = x * A(t),                t = x^2 mapped from [0, 1]
#   1 < |x| <= 2.5:  erfc(x) = exp(-x^2) * B(x),       x mapped from [1, 2.5]
#   2.5 < |x|:       erfc(x) = exp(-x^2) * C(v) / x,   v = 1/x mapped from [1/6, 0.4] (erfc(6) < 3e-17)
_ERF_A = (0.9754769393826541, -0.14226120510371362, 0.010035582187599743, -0.0005768764699767347,
          2.7419931252179675e-05, -1.1043175507406296e-06, 3.8488755387334984e-08, -1.1808582432157819e-09,
          3.2334228555570324e-11, -7.990832516154001e-13, 1.7982489026049865e-14)
_ERFC_B = (0.3017138902444292, -0.10574990110152697, 0.01710484847440674, -0.002587682261135036,
           0.0003696145268036621, -5.019856060517468e-05, 6.517935170551732e-06, -8.12644977566327e-07,
           9.763690284687544e-08, -1.1338136561308765e-08, 1.2757868987446813e-09, -1.3939985513377731e-10,
           1.4818638250839538e-11, -1.535101401634757e-12, 1.551823501445588e-13)
_ERFC_C = (0.5428391662993293, -0.014904719866427217, -0.00100016009951447, 8.324150368572954e-05,
           -1.3760754589680038e-06, -2.6905987569094936e-07, 2.8452799573507118e-08, -9.192258996993878e-10,
           -9.804899830035007e-11, 1.6671725055661138e-11, -1.0726535394454667e-12, -1.2943620147048101e-14,
           1.0948534171756443e-14)


#: erfc(6) < 2**-54: from there on 1 - erfc(a) rounds to 1 in double (the series' C range ends there too)
ERFC_NEGLIGIBLE = 6.0


# the same series in the power basis of their mapped variable, for Horner evaluation (the conversion costs
# about two decimal digits at these degrees, far below float32 resolution and within 1e-14 of math.erf)
@functools.cache
def _erf_polys() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from numpy.polynomial import chebyshev  # on first use: importing numpy.polynomial costs ~4 ms

    return tuple(chebyshev.cheb2poly(c) for c in (_ERF_A, _ERFC_B, _ERFC_C))


def _horner(coeffs, u):
    y = np.full_like(u, coeffs[-1])
    for c in coeffs[-2::-1]:
        y *= u
        y += c
    return y


def _erfc_tail(a: np.ndarray) -> np.ndarray:
    """erfc(a) for float64 ``a`` in (1, ERFC_NEGLIGIBLE], to relative double precision."""
    _, b_poly, c_poly = _erf_polys()
    e = np.exp(-a * a)
    v = 1 / a
    return np.where(a <= 2.5, e * _horner(b_poly, (2 * a - 3.5) / 1.5),
                    e * _horner(c_poly, (v - 17 / 60) / (7 / 60)) * v)


def _result_dtype(x: np.ndarray) -> np.dtype:
    return x.dtype if x.dtype.kind == "f" or x.dtype.kind == "V" else _F32


def erf(x: np.ndarray) -> np.ndarray:
    """The error function to double precision (computed in float64, returned in x's float dtype; integer and
    bool inputs give float32)."""
    x = np.asarray(x)
    a_poly = _erf_polys()[0]
    x64 = x.astype(_F64).reshape(-1)
    u = x64 * x64
    u *= 2
    u -= 1
    y = _horner(a_poly, u)
    y *= x64  # exact for |x| <= 1 (and NaN stays NaN); the tails are patched below
    tail = np.nonzero(np.abs(x64) > 1)
    if tail[0].size:
        xt = x64[tail]
        # erf is +-1 in double from ERFC_NEGLIGIBLE on, where 1 - erfc(ERFC_NEGLIGIBLE) rounds to 1
        y[tail] = np.copysign(1 - _erfc_tail(np.minimum(np.abs(xt), ERFC_NEGLIGIBLE)), xt)
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
