"""Padding kernels: constant_pad_nd and the reflection / replication pads over the last 1-3 dims.

Pad lists run from the last dim backwards in (before, after) pairs, as in ``torch.nn.functional.pad``.
Example::

    >>> import numpy as np
    >>> from pterun.kernels.pad import constant_pad_nd_out
    >>> constant_pad_nd_out(np.ones((1, 2)), (1, 0), 7, None).tolist()
    [[7.0, 1.0, 1.0]]
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import scalar_value
from pterun.kernels.registry import register


def _widths(pad, ndim, what):
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise ValueError(f"{what}: pad {list(pad)} needs (before, after) pairs for at most {ndim} dims")
    widths = [(0, 0)] * ndim
    for i in range(len(pad) // 2):
        widths[ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return widths


@register("aten::constant_pad_nd.out")
def constant_pad_nd_out(self, pad, value, out):
    """constant_pad_nd.out(Tensor self, SymInt[] pad, Scalar value=0, *, Tensor(a!) out) -> Tensor(a!)"""
    widths = _widths(pad, self.ndim, "constant_pad_nd")
    # negative widths crop (eager PyTorch semantics; ExecuTorch rejects them)
    crop = tuple(slice(max(-b, 0), n - max(-a, 0)) for (b, a), n in zip(widths, self.shape))
    x = self[crop]
    grow = [(max(b, 0), max(a, 0)) for b, a in widths]
    return np.pad(x, grow, constant_values=scalar_value(value, self.dtype))


def _pad(mode, dims):
    def kernel(self, padding, out):
        if len(padding) != 2 * dims or self.ndim not in (dims + 1, dims + 2):
            raise ValueError(f"{mode} pad{dims}d needs {2 * dims} paddings and a {dims + 1}-D or {dims + 2}-D input, "
                             f"got {list(padding)} and shape {list(self.shape)}")
        widths = _widths(padding, self.ndim, f"{mode}_pad{dims}d")
        if any(b < 0 or a < 0 for b, a in widths):
            raise ValueError(f"{mode} padding must be non-negative, got {list(padding)}")
        if mode == "reflection" and any(max(w) >= n for w, n in zip(widths, self.shape) if max(w)):
            raise ValueError(f"reflection padding {list(padding)} must be smaller than the dims {list(self.shape)}")
        return np.pad(self, widths, mode="reflect" if mode == "reflection" else "edge")
    name = f"{mode}_pad{dims}d"
    kernel.__doc__ = f"{name}.out(Tensor self, SymInt[{2 * dims}] padding, *, Tensor(a!) out) -> Tensor(a!)"
    kernel.__name__ = f"{name}_out"
    register(f"aten::{name}.out")(kernel)


for _mode in ("reflection", "replication"):
    for _dims in (1, 2, 3):
        _pad(_mode, _dims)
