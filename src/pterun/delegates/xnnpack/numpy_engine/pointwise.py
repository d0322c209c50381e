"""Elementwise node kernels for the NumPy engine: activations, their XNNPACK reference functions (what int8 lookup
tables are built from), and the unary and binary tables the node builders look names up in.

Example::

    >>> import numpy as np
    >>> float(sigmoid(np.float32(0.0)))
    0.5
"""

from __future__ import annotations

import numpy as np

from pterun.numerics import erfc_abs

F32 = np.float32


def clip(a: np.ndarray, lo, hi, out: np.ndarray | None = None) -> np.ndarray:
    """``np.clip(a, lo, hi)`` as two ufunc calls: ``np.clip``'s own argument handling costs several µs a call."""
    t = np.maximum(a, lo, out=out)
    return np.minimum(t, hi, out=t)


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
