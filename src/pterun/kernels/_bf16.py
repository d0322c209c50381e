"""bfloat16 arithmetic as ExecuTorch's kernels do it, for the kernels whose bf16 path differs from their float one.

Example::

    >>> import numpy as np
    >>> from pterun.kernels._bf16 import bf16, running_matmul
    >>> a, b = np.full((1, 3), 1.0, bf16()), np.array([[256.0], [1.0], [1.0]], bf16())
    >>> float(running_matmul(a, b)[0, 0])  # 256 + 1 rounds back to 256, twice; a float32 sum would give 258
    256.0

ExecuTorch computes most bf16 operators in float32 and rounds once, when the result is stored (elementwise
ops, mean, sum, softmax, mm/bmm/linear of its optimized library): there the float32 kernels are right for bf16
too, since the interpreter's write into a bf16 output rounds to nearest even. Some portable kernels instead
run their C++ loop on ``c10::BFloat16`` values, where every ``+``, ``*`` or ``/`` converts both operands to
float, computes, and rounds the result back to bf16 (round to nearest even; ``x op double`` computes in
double). Those accumulate in bf16, one rounding per step, in the loop's order:

* ``addmm`` (portable ``vec_addmm``/``vec_matmul``): ``sum += a[i, k] * b[k, j]`` over k, then
  ``sum * alpha + self * beta``;
* ``convolution`` (portable ``conv2d_impl``): the same running sum over (input channel, kernel row, kernel
  column), then ``+ bias``; transposed, the outputs start at the bias and add each input position's products;
* ``avg_pool2d``: a running sum over the window, then ``/ bf16(count)``;
* ``var``/``var_mean``, ``prod``, ``cumsum``, batch norm: running sums or products in bf16.

ml_dtypes' bfloat16 ufuncs are exactly that arithmetic (float32 operation, round to nearest even), so each
step here is one NumPy ufunc call on bf16 arrays, and the order of the loop is kept. ``ml_dtypes`` is imported
only when a bf16 kernel runs (:func:`pterun.dtypes.to_numpy`).
"""

from __future__ import annotations

import numpy as np

from pterun import dtypes
from pterun.kernels._common import sum_in_order


def bf16() -> np.dtype:
    """ml_dtypes' bfloat16 (importing ml_dtypes the first time)."""
    return dtypes.to_numpy(15)


def as_bf16(x) -> np.ndarray:
    """``x`` (an array or a Python scalar) in bf16, rounded as ``static_cast<BFloat16>`` does (a double goes
    through float first, as the C++ conversion does)."""
    a = np.asarray(x)
    if a.dtype == bf16():
        return a
    if a.dtype.kind in "fiub" and a.dtype != np.float32:
        a = a.astype(np.float32)
    return a.astype(bf16())


def running_matmul(a: np.ndarray, b: np.ndarray, init: np.ndarray | None = None) -> np.ndarray:
    """``init + sum_k a[..., :, k] * b[..., k, :]`` with every product and every partial sum rounded to bf16, k in
    increasing order (``init`` None: the sum starts at zero). ``a`` [..., M, K] and ``b`` [..., K, N] are bf16 and
    broadcast in their leading dims."""
    k = a.shape[-1]
    if b.shape[-2] != k:
        raise ValueError(f"cannot multiply shapes {list(a.shape)} and {list(b.shape)}")
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-2] + (1,))[:-1] + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, bf16()) if init is None else np.array(np.broadcast_to(init, shape), bf16())
    step = np.empty(shape, bf16())
    for i in range(k):
        np.multiply(a[..., :, i:i + 1], b[..., i:i + 1, :], out=step)
        np.add(acc, step, out=acc)
    return acc


def running_sum(x: np.ndarray, axes, keepdims: bool = False) -> np.ndarray:
    """A sum over ``axes`` (None: all) of bf16 ``x``, adding the reduced elements one at a time in memory order
    and rounding after each addition, as a ``CTYPE acc`` loop in bf16 does."""
    return sum_in_order(as_bf16(x), axes, bf16(), keepdims=keepdims)
