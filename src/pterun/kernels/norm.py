"""Normalisation kernels: layer norm, inference batch norm, group norm.

Example::

    >>> import numpy as np
    >>> from pterun.kernels.norm import native_layer_norm_out
    >>> y, mean, rstd = native_layer_norm_out(np.arange(4.0, dtype=np.float32).reshape(1, 4), (4,), None, None,
    ...                                       1e-5, None, None, None)
    >>> mean.shape
    (1, 1)
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import F32
from pterun.kernels.registry import register


def _f(x):
    return x if x.dtype.itemsize >= 4 and x.dtype.kind == "f" else x.astype(F32)


@register("aten::native_layer_norm.out")
def native_layer_norm_out(input, normalized_shape, weight, bias, eps, out0, out1, out2):  # noqa: A002
    """native_layer_norm.out(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    k = len(normalized_shape)
    if tuple(input.shape[input.ndim - k:]) != tuple(normalized_shape):
        raise ValueError(f"normalized_shape {list(normalized_shape)} does not match the input's trailing dims "
                         f"{list(input.shape)}")
    x = _f(input)
    axes = tuple(range(input.ndim - k, input.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    xc = x - mean
    var = np.mean(xc * xc, axis=axes, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = xc * rstd
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y, mean, rstd


@register("aten::_native_batch_norm_legit_no_training.out")
def batch_norm_no_training_out(input, weight, bias, running_mean, running_var, momentum, eps, out0, out1, out2):  # noqa: A002
    """_native_batch_norm_legit_no_training.out(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    shape = (1, -1) + (1,) * (input.ndim - 2)
    scale = 1 / np.sqrt(_f(running_var) + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    y = _f(input) * scale.reshape(shape) + shift.reshape(shape)
    # ExecuTorch resizes the saved mean / invstd outputs to [0] in inference mode
    empty = np.zeros(0, y.dtype)
    return y, (empty if out1.ndim == 1 else None), (empty if out2.ndim == 1 else None)


@register("aten::native_group_norm.out")
def native_group_norm_out(input, weight, bias, N, C, HxW, group, eps, out0, out1, out2):  # noqa: A002, N803
    """native_group_norm.out(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps, *, Tensor(a!) out0, Tensor(b!) out1, Tensor(c!) out2) -> (Tensor(a!), Tensor(b!), Tensor(c!))"""
    x = _f(input).reshape(N, group, -1)
    mean = x.mean(axis=2, keepdims=True)
    xc = x - mean
    var = (xc * xc).mean(axis=2, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = (xc * rstd).reshape(input.shape)
    shape = (1, C) + (1,) * (input.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y, mean.reshape(N, group), rstd.reshape(N, group)
