"""How an engine meets a DelegateCall's arguments: input arrays in the graph's dim order, outputs written back.

XNNPACK sees a tensor's dims in memory order, so a channels-last ExecuTorch tensor is read through a transposed
view and written back through the inverse transpose. Shared by every engine.

Example::

    >>> import numpy as np
    >>> from pterun.interp.tensor import Tensor
    >>> t = Tensor(np.dtype(np.float32), (1, 2), (0, 1), np.zeros(8, np.uint8))
    >>> write_output([t], 0, np.ones((1, 2), np.float32)); t.array
    array([[1., 1.]], dtype=float32)
"""

from __future__ import annotations

import math

import numpy as np

from pterun.errors import DelegateError

F32_DTYPE = np.dtype(np.float32)
_IDENTITY = tuple(tuple(range(n)) for n in range(9))


def dim_order(t) -> tuple | None:
    """A tensor's dim order when it is not the contiguous one, else None."""
    order = getattr(t, "dim_order", ())
    if type(order) is not tuple:
        order = tuple(order)
    n = len(order)
    return None if order == (_IDENTITY[n] if n < 9 else tuple(range(n))) else order


def input_array(args: list, ext: int, want: np.dtype) -> np.ndarray:
    """Argument ``ext`` as an array in memory order, checked to be of dtype ``want``."""
    t = args[ext]
    a = getattr(t, "array", None)
    if a is None:
        raise DelegateError(f"XNNPACK delegate input {ext} must be a tensor, got {type(t).__name__}")
    order = dim_order(t)
    if order is not None:  # XNNPACK sees dims in memory order
        a = a.transpose(order)
    if a.dtype != want:
        raise DelegateError(f"XNNPACK delegate input {ext} has dtype {a.dtype}, the graph expects {want}")
    return a


def write_output(args: list, ext: int, value: np.ndarray) -> None:
    """Write ``value`` (in memory order) into output argument ``ext``, resizing a dynamic tensor."""
    t = args[ext] if ext < len(args) else None
    if not hasattr(t, "write"):
        raise DelegateError(f"XNNPACK delegate output {ext} is not a tensor ({type(t).__name__})")
    order = dim_order(t)
    if order is not None:
        value = value.transpose(np.argsort(order))
    shape = tuple(t.shape)
    if value.shape != shape and value.ndim != len(shape) and value.size == math.prod(shape):
        value = value.reshape(shape)  # e.g. a rank-0 ExecuTorch tensor the graph holds as [1]
    try:
        t.write(value)
    except ValueError as e:
        raise DelegateError(f"XNNPACK delegate output {ext}: {e}") from e
