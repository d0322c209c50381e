"""Unary elementwise kernels: float math (exp, log, trig, erf, sigmoid ...), rounding, abs/neg/sign, the
NaN/inf tests and logical/bitwise not.

Float-valued ops read their input as ExecuTorch does — double stays double, every other dtype (ints, bool,
half types) computes in float32 — and the interpreter casts the result to ``out``'s dtype. Example::

    >>> import numpy as np
    >>> from pterun.kernels.unary import erf
    >>> round(float(erf(np.array(0.5))), 12)
    0.520499877813
"""

from __future__ import annotations

import functools

import numpy as np

from pterun.kernels import fast
from pterun.kernels._common import F64, float_compute, is_floating, is_integral
from pterun.kernels.registry import register

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


# the same series in the power basis of their mapped variable, for Horner evaluation (the conversion costs
# about two decimal digits at these degrees, far below float32 resolution and within 1e-14 of math.erf)
@functools.cache
def _erf_polys() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from numpy.polynomial import chebyshev  # on first use: importing numpy.polynomial costs ~4 ms

    return chebyshev.cheb2poly(_ERF_A), chebyshev.cheb2poly(_ERFC_B), chebyshev.cheb2poly(_ERFC_C)


def _horner(coeffs, u):
    y = np.full_like(u, coeffs[-1])
    for c in coeffs[-2::-1]:
        y *= u
        y += c
    return y


def erf(x: np.ndarray) -> np.ndarray:
    """The error function to double precision (computed in float64, returned in x's float dtype)."""
    x = np.asarray(x)
    a_poly, b_poly, c_poly = _erf_polys()
    x64 = x.astype(F64).reshape(-1)
    u = x64 * x64
    u *= 2
    u -= 1
    y = _horner(a_poly, u)
    y *= x64  # exact for |x| <= 1 (and NaN stays NaN); the tails are patched below
    tail = np.nonzero(np.abs(x64) > 1)
    if tail[0].size:
        xt = x64[tail]
        at = np.minimum(np.abs(xt), 6.0)  # erfc(6) < 3e-17: erf is +-1 in double beyond
        e = np.exp(-at * at)
        mid = at <= 2.5
        v = 1 / at
        erfc = np.where(mid, e * _horner(b_poly, (2 * at - 3.5) / 1.5),
                        e * _horner(c_poly, (v - 17 / 60) / (7 / 60)) * v)
        y[tail] = np.copysign(1 - erfc, xt)
    return y.reshape(x.shape).astype(x.dtype if is_floating(x.dtype) else np.float32, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), without overflow warnings for large |x|."""
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


# the ops whose fast path is the same ufunc(s) in place in out, for float32/float64 inputs
_FLOAT_FAST = {"exp": (np.exp,), "tanh": (np.tanh,), "sqrt": (np.sqrt,), "sin": (np.sin,), "cos": (np.cos,),
               "log": (np.log,), "neg": (np.negative,)}


def _unary(name, fn):
    def kernel(self, out):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(float_compute(self))
    kernel.__doc__ = f"{name}.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_out"
    spec = fast.sigmoid if name == "sigmoid" else fast.float_unary(*_FLOAT_FAST[name]) if name in _FLOAT_FAST else None
    register(f"aten::{name}.out", specialize=spec)(kernel)
    return kernel


for _name, _fn in {
    "exp": np.exp, "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "erf": erf, "sigmoid": sigmoid,
    "reciprocal": lambda x: 1 / x,
}.items():
    _unary(_name, _fn)


def _no_bool(x, name):
    if x.dtype == np.bool_:
        raise TypeError(f"{name} does not support bool tensors")
    return x


def _same_dtype(name, fn):
    """Ops that keep the input dtype (ExecuTorch's REALHBF16 set: no bool); integers pass through rounding."""
    def kernel(self, out):
        x = _no_bool(self, name)
        return fn(x)
    kernel.__doc__ = f"{name}.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_out"
    register(f"aten::{name}.out", specialize=fast.float_unary(*_FLOAT_FAST[name]) if name in _FLOAT_FAST else None)(
        kernel)


for _name, _fn in {
    "floor": lambda x: x if is_integral(x.dtype) else np.floor(x),
    "ceil": lambda x: x if is_integral(x.dtype) else np.ceil(x),
    "trunc": lambda x: x if is_integral(x.dtype) else np.trunc(x),
    "round": lambda x: x if is_integral(x.dtype) else np.round(x),  # half to even, as ExecuTorch
    "neg": np.negative,
}.items():
    _same_dtype(_name, _fn)


@register("aten::abs.out", specialize=fast.float_unary(np.absolute))
def abs_out(self, out):
    """abs.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.abs(_no_bool(self, "abs"))  # complex inputs give their magnitude


@register("aten::sign.out")
def sign_out(self, out):
    """sign.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype == np.bool_:
        return self
    return np.sign(self)  # NaN stays NaN (ExecuTorch; eager PyTorch gives 0)


@register("aten::isnan.out")
def isnan_out(self, out):
    """isnan.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.isnan(self) if is_floating(self.dtype) else np.zeros(self.shape, bool)


@register("aten::isinf.out")
def isinf_out(self, out):
    """isinf.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.isinf(self) if is_floating(self.dtype) else np.zeros(self.shape, bool)


@register("aten::logical_not.out")
def logical_not_out(self, out):
    """logical_not.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    return np.logical_not(self)


@register("aten::bitwise_not.out")
def bitwise_not_out(self, out):
    """bitwise_not.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
    if self.dtype == np.bool_:
        return np.logical_not(self)
    if not is_integral(self.dtype):
        raise TypeError(f"bitwise_not needs an integer or bool tensor, got {self.dtype}")
    return np.invert(self)
