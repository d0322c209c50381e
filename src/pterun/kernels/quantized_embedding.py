"""Weight-only quantized kernels: embedding_byte / embedding_4bit / embedding_2bit (packed, per-row or
per-group scales and optional zero points) and the int8 mixed_mm / mixed_linear.

Packing (ExecuTorch's embeddingxb.cpp and the exporter's _pack_embedding_weight): 4-bit stores element 2k in
the *high* nibble and 2k+1 in the low nibble, each as value + 8; 2-bit stores element 4k+j in bits 2j..2j+1
as value + 2. Rows dequantize as ``(float(q) - float(zp)) * float(scale)``. Example::

    >>> import numpy as np
    >>> from pterun.kernels.quantized_embedding import unpack
    >>> unpack(np.array([[0x9F]], np.uint8), 4).tolist()
    [[1, 7]]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import F32
from pterun.kernels.registry import register


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    """Signed int8 values from rows of packed uint8 (4 or 2 bits per value)."""
    p = packed.astype(np.int16)
    if bits == 4:
        values = np.stack([(p >> 4) & 0xF, p & 0xF], axis=-1) - 8
    elif bits == 2:
        values = np.stack([(p >> (2 * j)) & 3 for j in range(4)], axis=-1) - 2
    else:
        return packed
    return values.reshape(*packed.shape[:-1], -1).astype(np.int8)


def _embedding(weight, scales, zero_points, indices, bits):
    if weight.ndim != 2 or scales.ndim not in (1, 2) or scales.shape[0] != weight.shape[0]:
        raise ValueError(f"quantized embedding needs a 2-D weight and [rows] or [rows, groups] scales, got "
                         f"{list(weight.shape)} and {list(scales.shape)}")
    if indices.dtype not in (np.int64, np.int32):
        raise TypeError(f"embedding indices must be int64 or int32, got {indices.dtype}")
    rows = indices.reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= weight.shape[0]):
        raise IndexError(f"embedding index out of range for {weight.shape[0]} rows")
    q = unpack(weight[rows], bits).astype(F32)
    dim = q.shape[-1]
    groups = scales.shape[1] if scales.ndim == 2 else 1
    if dim % groups:
        raise ValueError(f"embedding dim {dim} is not divisible into {groups} groups")
    s = scales.reshape(scales.shape[0], groups)[rows].astype(F32)
    if zero_points is not None:
        q = q - np.repeat(zero_points.reshape(zero_points.shape[0], groups)[rows].astype(F32), dim // groups, axis=1)
    out = q * np.repeat(s, dim // groups, axis=1)
    return out.reshape(indices.shape + (dim,))


def _register_embedding(bits, name):
    doc_args = ("Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, int weight_quant_min, "
                "int weight_quant_max, Tensor indices")

    def out_kernel(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, out):
        return _embedding(weight, weight_scales, weight_zero_points, indices, bits)

    def dtype_kernel(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, dtype,
                     out):
        return _embedding(weight, weight_scales, weight_zero_points, indices, bits)

    out_kernel.__doc__ = f"{name}.out({doc_args}, *, Tensor(a!) out) -> Tensor(a!)"
    # embedding_byte's dtype is keyword-only; the 2/4-bit variants take it positionally
    sep = ", *, " if bits == 8 else ", "
    tail = "Tensor(a!) out" if bits == 8 else "*, Tensor(a!) out"
    dtype_kernel.__doc__ = f"{name}.dtype_out({doc_args}{sep}ScalarType? dtype=None, {tail}) -> Tensor(a!)"
    out_kernel.__name__, dtype_kernel.__name__ = f"{name}_out", f"{name}_dtype_out"
    register(f"quantized_decomposed::{name}.out")(out_kernel)
    register(f"quantized_decomposed::{name}.dtype_out")(dtype_kernel)
    return out_kernel, dtype_kernel


embedding_byte_out, embedding_byte_dtype_out = _register_embedding(8, "embedding_byte")
embedding_4bit_out, embedding_4bit_dtype_out = _register_embedding(4, "embedding_4bit")
embedding_2bit_out, embedding_2bit_dtype_out = _register_embedding(2, "embedding_2bit")


def _no_zero_points(zero_points, name):
    if zero_points is not None:
        raise NotImplementedError(f"{name} with zero points is not supported (nor by ExecuTorch)")


@register("quantized_decomposed::mixed_mm.out")
def mixed_mm_out(input, weight, weight_scales, weight_zero_points, out):  # noqa: A002  (schema names)
    """mixed_mm.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, *, Tensor(a!) out) -> Tensor(a!)"""
    _no_zero_points(weight_zero_points, "mixed_mm")
    x = input.astype(F32, copy=False)
    # weight [n, p] int8 with one scale per row n (the reduction dim)
    return x @ (weight.astype(F32) * weight_scales.astype(F32).reshape(-1, 1))


@register("quantized_decomposed::mixed_linear.out")
def mixed_linear_out(input, weight, weight_scales, weight_zero_points, dtype, out):  # noqa: A002
    """mixed_linear.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, ScalarType? dtype=None, *, Tensor(a!) out) -> Tensor(a!)"""
    _no_zero_points(weight_zero_points, "mixed_linear")
    x = input.astype(F32, copy=False)
    p, n = weight.shape
    s = weight_scales.astype(F32).reshape(p, -1)
    group = -(-n // s.shape[1])  # ceil(n / groups), as ExecuTorch
    scale = np.repeat(s, group, axis=1)[:, :n]
    return x @ (weight.astype(F32) * scale).T
