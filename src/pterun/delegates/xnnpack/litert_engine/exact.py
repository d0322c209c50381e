"""Lowerings that give a portable kernel's numbers bit for bit where the plain lowering (:mod:`.lower`) does not.

A method whose delegates quantize activations dynamically needs them (:func:`..kernel_ops.bit_for_bit`): an ulp
upstream of the quantization can move one of its rounding ties. ExecuTorch's layer norm on rows of fewer than
:data:`pterun.kernels.norm.SCALAR_LAYER_NORM` elements is a scalar loop: the sum and the sum of squares run left
to right in float32, ``var = sq / n - mean * mean``, ``y = (x - mean) / sqrt(var + eps) * w + b``. Here:

* each sum is FULLY_CONNECTED with a row of ones, on XNNPACK itself: its float32 matrix product adds the products
  one after another into one accumulator, and a product by 1.0 is exact (MEAN and SUM add in another order;
  LiteRT's builtin CUMSUM, used before, gave the same numbers with a partition boundary on each side);
* the square root is LiteRT's builtin ``SQRT`` (``std::sqrt``, correctly rounded) on the statistics reshaped to
  rank 7, which XNNPACK (6 dims at most) leaves to it: XNNPACK's own square root on x86 refines a reciprocal
  estimate and misses the correctly rounded result by an ulp in about a third of the rows;
* the elementwise steps are ADD, SUB, MUL and DIV, one rounding each on either kernel library.

A ``mean`` node over a row (RMSNorm's) is the same row-of-ones sum and a DIV (:meth:`.nodes.NodeRules.node_Mean`);
as a CUMSUM and a DIV it split an 8da4w Llama's decode graphs at every RMSNorm and took its step from 2.9 to 4.2 ms
on two threads.

The builtin kernels split the graph into XNNPACK partitions, whose values in between live in LiteRT's arena. In a
shared interpreter (:class:`.plan.Batch`) the check that XNNPACK took every other operator sees only that arena:
a value other than the layer norm's own that crosses it sends the graph to the NumPy engine (slower, the same
numbers).

The rows take one builtin kernel (the square root) and a few µs more than the plain lowering: a graph of one layer
norm called alone took 4.4 against 3.3 µs for 16 rows of 64 and 24.4 against 11.8 µs for 128 of 128 on one thread
(4.7 and 31.9 µs with CUMSUM sums), a few µs less than a NumPy kernel between two LiteRT calls.
"""

from __future__ import annotations

import math

import numpy as np

from pterun.delegates import KernelArg

__all__ = ["emit_layer_norm_in_order", "row_sum"]

_BUILTIN_RANK = 7  # one more than XNNPACK's XNN_MAX_TENSOR_DIMS: a tensor of this rank stays on builtin kernels


def _options(tr) -> dict:
    return {"fusedActivationFunction": tr.S.ActivationFunctionType.NONE}


def row_sum(tr, x: int, total: int, n: int, rank: int = 2) -> int:
    """``total``: each row of ``x`` (its last dim, ``n`` long; ``rank`` dims) added left to right, the other dims
    kept: FULLY_CONNECTED with a row of ones, which XNNPACK computes one product after another into one
    accumulator (each product by 1.0 exact)."""
    tr.op("FULLY_CONNECTED", [x, tr.const(np.ones((1, n), np.float32), "FLOAT32"), -1], [total],
          "FullyConnectedOptions", **_options(tr), keepNumDims=rank != 2)
    return total


def _sqrt(tr, x: int, m: int) -> int:
    """[m, 1]: the correctly rounded square root of ``x`` [m, 1], on LiteRT's builtin kernel."""
    deep = [m] + [1] * (_BUILTIN_RANK - 1)
    a, b, y = tr.temp(deep), tr.temp(deep), tr.temp((m, 1))
    tr.op("RESHAPE", [x, tr.i32(deep)], [a])
    tr.op("SQRT", [a], [b])
    tr.op("RESHAPE", [b, tr.i32([m, 1])], [y])
    return y


def emit_layer_norm_in_order(tr, args, ins, out) -> None:
    """``aten::native_layer_norm.out`` as ExecuTorch's scalar loop computes it (module docstring)."""
    x, shape = args[0], tuple(args[1])
    n = math.prod(shape)
    m = math.prod(x.shape) // n
    rows = tr.temp((m, n))
    tr.op("RESHAPE", [ins[0], tr.i32([m, n])], [rows])
    square = tr.temp((m, n))
    tr.op("MUL", [rows, rows], [square], "MulOptions", **_options(tr))
    count = tr.scalar(np.float32(n))
    mean, mean_sq, sq_mean, var, shifted = (tr.temp((m, 1)) for _ in range(5))
    tr.op("DIV", [row_sum(tr, rows, tr.temp((m, 1)), n), count], [mean], "DivOptions", **_options(tr))
    tr.op("DIV", [row_sum(tr, square, tr.temp((m, 1)), n), count], [sq_mean], "DivOptions", **_options(tr))
    tr.op("MUL", [mean, mean], [mean_sq], "MulOptions", **_options(tr))
    tr.op("SUB", [sq_mean, mean_sq], [var], "SubOptions", **_options(tr))
    tr.op("ADD", [var, tr.scalar(np.float32(args[4]))], [shifted], "AddOptions", **_options(tr))
    std = _sqrt(tr, shifted, m)
    centred, y = tr.temp((m, n)), tr.temp((m, n))
    tr.op("SUB", [rows, mean], [centred], "SubOptions", **_options(tr))
    tr.op("DIV", [centred, std], [y], "DivOptions", **_options(tr))
    k = 1
    for arg, name in ((args[2], "MUL"), (args[3], "ADD")):
        if isinstance(arg, KernelArg):
            flat, nxt = tr.temp((n,)), tr.temp((m, n))
            tr.op("RESHAPE", [ins[k], tr.i32([n])], [flat])
            tr.op(name, [y, flat], [nxt], name.title() + "Options", **_options(tr))
            y, k = nxt, k + 1
    tr.op("RESHAPE", [y, tr.i32(list(x.shape))], [out])
