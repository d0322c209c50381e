"""Normalisation kernels: layer norm, batch norm (inference, and batch statistics), group norm.

Like ExecuTorch's portable kernels, the statistics come from one pass of sums — ``var = E[x^2] - E[x]^2``
— accumulated in float32 (group norm finishes in double). Example::

    >>> import numpy as np
    >>> from pterun.kernels.norm import native_layer_norm_out
    >>> y, mean, rstd = native_layer_norm_out(np.arange(4.0, dtype=np.float32).reshape(1, 4), (4,), None, None,
    ...                                       1e-5, None, None, None)
    >>> mean.shape
    (1, 1)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.kernels import _bf16
from pterun.kernels._common import F32, F64, is_bfloat16, sum_in_order, widen_half
from pterun.kernels.registry import register


#: ExecuTorch's optimized layer norm (the one its runtime links) runs the portable scalar loop below this row
#: size, and vectorised Welford moments (:func:`row_moments`) from it on.
SCALAR_LAYER_NORM = 256


def _f(x):
    return x.astype(widen_half(x.dtype), copy=False)


def _moments(x, axes, acc, sums=F32, sequential=False):
    """(mean, E[x^2] - mean^2) over ``axes`` (kept), from sums accumulated in ``sums``, finished in ``acc``.

    ``sequential`` adds each row left to right (:func:`sum_in_order`), as ExecuTorch's group norm
    and its layer norm on rows under ``SCALAR_LAYER_NORM`` elements do (``std::accumulate`` and a running sum
    of squares), so the statistics round exactly as theirs: NumPy's own sums are pairwise, and an ulp of
    difference in a normalised activation is enough to move an exact rounding tie of the dynamic int8
    quantization that follows it in 8da4w models.
    """
    n = math.prod(x.shape[a] for a in axes)
    if sequential:
        x = x.astype(sums, copy=False)
        s = sum_in_order(x, axes, sums, keepdims=True).astype(acc)
        sq = sum_in_order(np.square(x), axes, sums, keepdims=True).astype(acc)
    else:
        s = np.sum(x, axis=axes, dtype=sums, keepdims=True).astype(acc)
        sq = np.sum(np.square(x.astype(sums, copy=False)), axis=axes, dtype=sums, keepdims=True).astype(acc)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = s / n
        return mean, sq / n - mean * mean


@register("aten::native_layer_norm.out")
def native_layer_norm_out(input, normalized_shape, weight, bias, eps, out0, out1, out2):  # noqa: A002
    """native_layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    k = len(normalized_shape)
    if k == 0 or tuple(input.shape[input.ndim - k:]) != tuple(normalized_shape):
        raise ValueError(f"normalized_shape {list(normalized_shape)} does not match the input's trailing dims "
                         f"{list(input.shape)}")
    x = _f(input)
    axes = tuple(range(input.ndim - k, input.ndim))
    n = math.prod(int(d) for d in normalized_shape)
    if n >= SCALAR_LAYER_NORM and x.dtype in (F32, F64) and x.size:
        return _vector_layer_norm(x, k, n, weight, bias, eps)
    # the scalar loop: float statistics even for double inputs, as ExecuTorch
    mean, var = _moments(x, axes, F32, sequential=True)
    std = np.sqrt(var + np.float32(eps))
    with np.errstate(invalid="ignore", divide="ignore"):
        y = (x - mean.astype(x.dtype)) / std.astype(x.dtype)
        rstd = 1 / std.astype(F64)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


#: ExecuTorch's at::vec vectors hold 32 bytes in the build its runtime ships (8 floats, 4 doubles); the row
#: moments below run that many Welford lanes.
_VECTOR_BYTES = 32
_CHUNK = 16  # rows of lanes one Welford pass takes before its moments are merged (kChunkSize)


def _add_moments(m0_add: int, m1_add, m2_add, st: list) -> None:
    """Merge moments (count, mean, sum of squared deviations) into ``st`` = [count, mean, m2], in the dtype of
    the arrays and in ExecuTorch's operation order (AddMoments)."""
    dt = st[1].dtype.type
    m0 = st[0]
    total = m0 + m0_add
    c = dt(0) if total == 0 else dt(m0_add) / dt(total)
    delta = m1_add - st[1]
    st[1] = st[1] + c * delta
    st[2] = st[2] + (m2_add + delta * delta * c * dt(m0))
    st[0] = total


def row_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, biased variance) of each row of ``x`` [M, N] (float32 or float64), bit for bit as ExecuTorch's
    optimized ``RowwiseMoments``: Welford in vector lanes over chunks of 16, chunk moments merged as a binary
    counter, a scalar Welford tail, then the lanes merged one by one."""
    dt = x.dtype.type
    rows, n_all = x.shape
    vec = _VECTOR_BYTES // x.dtype.itemsize
    n = n_all // vec
    chunks = -(-n // _CHUNK)
    depth = 1 if chunks <= 2 else (chunks - 1).bit_length()  # CeilLog2
    lanes = x[:, : n * vec].reshape(rows, n, vec)
    zero = np.zeros((rows, vec), dt)
    inv = [dt(1) / dt(j + 1) for j in range(_CHUNK)]
    full = n // _CHUNK
    # every chunk's own Welford pass (the full chunks side by side, then the partial one)
    per_chunk = []
    if full:
        block = lanes[:, : full * _CHUNK].reshape(rows, full, _CHUNK, vec)
        m1 = np.zeros((rows, full, vec), dt)
        m2 = np.zeros((rows, full, vec), dt)
        for j in range(_CHUNK):
            xv = block[:, :, j]
            delta = xv - m1
            m1 = m1 + delta * inv[j]
            m2 = m2 + delta * (xv - m1)
        per_chunk += [(_CHUNK, m1[:, i], m2[:, i]) for i in range(full)]
    if n % _CHUNK:
        m1, m2 = zero, zero
        for j in range(n % _CHUNK):
            xv = lanes[:, full * _CHUNK + j]
            delta = xv - m1
            m1 = m1 + delta * inv[j]
            m2 = m2 + delta * (xv - m1)
        per_chunk.append((n % _CHUNK, m1, m2))
    stack = [[0, zero, zero] for _ in range(depth)]
    for i, (m0, m1, m2) in enumerate(per_chunk):
        _add_moments(m0, m1, m2, stack[0])
        mask, j = i + 1, 1
        while j < depth and mask & 1 == 0:
            _add_moments(*stack[j - 1], stack[j])
            stack[j - 1] = [0, zero, zero]
            mask >>= 1
            j += 1
    for j in range(1, depth):
        _add_moments(*stack[j], stack[0])
    st = [0, np.zeros(rows, dt), np.zeros(rows, dt)]
    for i in range(n * vec, n_all):  # the elements after the last whole vector
        xv = x[:, i]
        delta = xv - st[1]
        st[0] += 1
        st[1] = st[1] + delta / dt(st[0])
        st[2] = st[2] + delta * (xv - st[1])
    for lane in range(vec):
        _add_moments(n, stack[0][1][:, lane], stack[0][2][:, lane], st)
    return st[1], st[2] / dt(n_all)


def _vector_layer_norm(x, k, n, weight, bias, eps):
    """ExecuTorch's optimized layer norm on rows of at least ``SCALAR_LAYER_NORM`` elements."""
    dt = x.dtype.type
    rows = x.reshape(-1, n)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        mean, var = row_moments(rows)
        rstd = dt(1) / np.sqrt(var + dt(eps))
        scale, offset = rstd[:, None], (-rstd * mean)[:, None]
        y = rows * scale + offset
        y = y * (dt(1) if weight is None else weight.reshape(-1).astype(x.dtype, copy=False))
        y = y + (dt(0) if bias is None else bias.reshape(-1).astype(x.dtype, copy=False))
    keep = x.shape[: x.ndim - k] + (1,) * k
    return y.reshape(x.shape), mean.reshape(keep), rstd.reshape(keep)


def _batch_norm(x, mean, invstd, weight, bias):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (_f(x) - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        y = y * _f(weight).reshape(shape)
    if bias is not None:
        y = y + _f(bias).reshape(shape)
    return y


def _invstd_bf16(var, eps):
    """``CTYPE invstd = 1.0 / std::sqrt(var + eps)`` on ``BFloat16``: double arithmetic, stored through float."""
    return _bf16.as_bf16((1.0 / np.sqrt(var.astype(F64) + eps)).astype(F32))


def _batch_norm_bf16(x, mean, invstd, weight, bias):
    """``(x - mean) * invstd * weight + bias`` on ``BFloat16`` values, each operation rounded (ExecuTorch's
    portable batch norm loop)."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (_bf16.as_bf16(x) - mean.reshape(shape)) * invstd.reshape(shape)
    if weight is not None:
        y = y * _bf16.as_bf16(weight).reshape(shape)
    if bias is not None:
        y = y + _bf16.as_bf16(bias).reshape(shape)
    return y


def _inference(input, weight, bias, running_mean, running_var, eps):  # noqa: A002
    if is_bfloat16(input.dtype):
        mean = _bf16.as_bf16(running_mean)
        y = _batch_norm_bf16(input, mean, _invstd_bf16(_bf16.as_bf16(running_var), eps), weight, bias)
        empty = np.zeros(0, y.dtype)
        return y, empty, empty
    mean, var = _f(running_mean), _f(running_var)
    invstd = 1 / np.sqrt(var + var.dtype.type(eps))
    y = _batch_norm(input, mean, invstd, weight, bias)
    # ExecuTorch resizes the saved mean / invstd outputs to [0] in inference mode
    empty = np.zeros(0, y.dtype)
    return y, empty, empty


@register("aten::_native_batch_norm_legit_no_training.out")
def batch_norm_no_training_out(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):  # noqa: A002
    """_native_batch_norm_legit_no_training.out(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    return _inference(input, weight, bias, running_mean, running_var, eps)


@register("aten::_native_batch_norm_legit.out")
def batch_norm_legit_out(input, weight, bias, running_mean, running_var, training, momentum, eps, out,  # noqa: A002
                         save_mean, save_invstd):
    """_native_batch_norm_legit.out(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps, *, Tensor(d!) out, Tensor(e!) save_mean, Tensor(f!) save_invstd) -> (Tensor(d!), Tensor(e!), Tensor(f!))"""
    if training:
        raise NotImplementedError("batch norm in training mode is not supported (as in ExecuTorch's portable "
                                  "kernels: inference only)")
    return (None, None) + _inference(input, weight, bias, running_mean, running_var, eps)


@register("aten::_native_batch_norm_legit.no_stats_out")
def batch_norm_no_stats_out(input, weight, bias, training, momentum, eps, out, save_mean, save_invstd):  # noqa: A002
    """_native_batch_norm_legit.no_stats_out(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps, *, Tensor(a!) out, Tensor(b!) save_mean, Tensor(c!) save_invstd) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    if is_bfloat16(input.dtype):
        return _batch_stats_bf16(input, weight, bias, eps)
    x = _f(input)
    axes = (0,) + tuple(range(2, x.ndim))
    mean, var = _moments(x, axes, x.dtype)
    invstd = 1 / np.sqrt(var + x.dtype.type(eps))
    return _batch_norm(input, mean, invstd, weight, bias), mean.reshape(-1), invstd.reshape(-1)


def _batch_stats_bf16(input, weight, bias, eps):  # noqa: A002
    """ExecuTorch's bf16 batch norm on batch statistics: per sample and channel, float sums of x and x*x (in
    order) rounded to bf16, added up over the batch in bf16; then ``mean = sum / n``, ``var = sq / n - mean *
    mean``, all in bf16."""
    x = input.reshape(input.shape[0], input.shape[1], -1)
    inner = tuple(range(2, x.ndim))
    xf = x.astype(F32)
    sums = _bf16.as_bf16(sum_in_order(xf, inner, F32))  # [N, C]
    squares = _bf16.as_bf16(sum_in_order(xf * xf, inner, F32))
    count = _bf16.as_bf16(x.shape[0] * x.shape[2])
    mean = _bf16.running_sum(sums, (0,)) / count
    var = _bf16.running_sum(squares, (0,)) / count - mean * mean
    invstd = _invstd_bf16(var, eps)
    return _batch_norm_bf16(input, mean, invstd, weight, bias), mean, invstd


@register("aten::native_group_norm.out")
def native_group_norm_out(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):  # noqa: A002, N803
    """native_group_norm.out(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    x = _f(input).reshape(N, group, -1)
    mean, var = _moments(x, (2,), F64, sequential=True)  # ExecuTorch: float sums, double statistics
    rstd = 1 / np.sqrt(var + eps)
    y = (x - mean) * rstd
    shape = (1, group, C // group, -1)
    y = y.reshape(N, group, C // group, -1)
    if weight is not None:
        y = y * weight.astype(F64).reshape(shape)
    if bias is not None:
        y = y + bias.astype(F64).reshape(shape)
    return y.reshape(input.shape), mean.reshape(N, group), rstd.reshape(N, group)
