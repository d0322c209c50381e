"""Unary elementwise kernels: float math (exp, log, trig, erf, sigmoid ...), rounding, abs/neg/sign, the
NaN/inf tests and logical/bitwise not.

Float-valued ops read their input as ExecuTorch does — double stays double, every other dtype (ints, bool,
half types) computes in float32 — and the interpreter casts the result to ``out``'s dtype. Example::

    >>> import numpy as np
    >>> from pterun.kernels.unary import sigmoid
    >>> sigmoid(np.array([0.0], np.float32))
    array([0.5], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels import fast
from pterun.kernels._common import float_compute, is_floating, is_integral
from pterun.kernels.registry import register
from pterun.numerics import erf


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
