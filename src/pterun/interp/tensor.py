"""Runtime tensors: a dtype, a current shape and a dim order over a fixed slice of memory.

A :class:`Tensor` owns no memory of its own: ``storage`` is a uint8 view into a memory-planned arena, a
constant segment, or a private buffer, sized for the tensor's upper-bound shape. ``array`` is the logical
NumPy view of the current shape (a transposed view when the dim order is not contiguous). Dynamic tensors
change shape with :meth:`Tensor.resize`; everything else about them is fixed at load.

Example::

    >>> import numpy as np
    >>> t = Tensor(np.dtype(np.float32), (2, 3), (0, 1), np.zeros(24, np.uint8), dynamic=True)
    >>> t.resize((1, 3)); t.array.shape
    (1, 3)
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Tensor", "ShapeError", "strides_for"]


_NO_STORAGE = np.zeros(0, np.uint8)


class ShapeError(ValueError):
    """An output does not fit its tensor (static shape mismatch, rank change, or over the bound)."""


def strides_for(sizes, dim_order) -> tuple[int, ...]:
    """Element strides from sizes and dim order, as ExecuTorch computes them (a zero size keeps the stride)."""
    n = len(sizes)
    if n == 0:
        return ()
    strides = [0] * n
    strides[dim_order[-1]] = 1
    for i in range(n - 2, -1, -1):
        inner = dim_order[i + 1]
        strides[dim_order[i]] = strides[inner] * sizes[inner] if sizes[inner] else strides[inner]
    return tuple(strides)


class Tensor:
    __slots__ = ("dtype", "shape", "dim_order", "storage", "array", "dynamic", "capacity", "_contiguous", "_inv")

    def __init__(self, dtype: np.dtype, shape: tuple, dim_order: tuple, storage: np.ndarray, dynamic: bool = False):
        self.dtype = dtype
        self.shape = tuple(shape)
        self.dim_order = tuple(dim_order)
        self.storage = storage
        self.dynamic = dynamic
        self.capacity = math.prod(self.shape)
        self._contiguous = self.dim_order == tuple(range(len(self.dim_order)))
        self._inv = tuple(np.argsort(self.dim_order)) if not self._contiguous else None
        self.array = self._view(self.shape)

    def _view(self, shape: tuple) -> np.ndarray:
        n = math.prod(shape)
        flat = self.storage[: n * self.dtype.itemsize].view(self.dtype)
        if self._contiguous:
            return flat.reshape(shape)
        return flat.reshape([shape[d] for d in self.dim_order]).transpose(self._inv)

    def resize(self, shape) -> None:
        """Set a new shape: static tensors must keep theirs, dynamic ones keep rank and stay within the bound."""
        shape = tuple(int(s) for s in shape)
        if shape == self.shape:
            return
        if not self.dynamic:
            raise ShapeError(f"output has shape {list(shape)} but the tensor is static with shape {list(self.shape)}")
        if len(shape) != len(self.shape):
            raise ShapeError(f"cannot change the rank of a tensor from {len(self.shape)} to {len(shape)} "
                             f"(shape {list(self.shape)} -> {list(shape)})")
        if math.prod(shape) > self.capacity:
            raise ShapeError(f"shape {list(shape)} has {math.prod(shape)} elements, above the tensor's upper bound "
                             f"of {self.capacity}")
        self.shape = shape
        self.array = self._view(shape)

    def rebind(self, storage: np.ndarray, shape) -> None:
        """Point this tensor at other memory (used by views that alias their input)."""
        self.storage = storage
        self.capacity = max(self.capacity, math.prod(shape))
        self.shape = tuple(int(s) for s in shape)
        self.array = self._view(self.shape)

    def detached(self) -> Tensor:
        """A tensor like this one over memory of its own, uninitialized (as arena memory is)."""
        nbytes = self.capacity * self.dtype.itemsize
        return Tensor(self.dtype, self.shape, self.dim_order, np.empty(nbytes, np.uint8), self.dynamic)

    def freeze(self, array: np.ndarray) -> None:
        """Make this tensor the read-only constant ``array`` (same shape and dtype), leaving the memory it was
        planned in. ``array`` may be a strided view of another constant (a transposed weight); ``storage`` then
        no longer holds the contents, so only ``array`` may be read from a frozen tensor."""
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ShapeError(f"cannot freeze a {array.dtype}{list(array.shape)} array into a {self!r}")
        array = array.view()
        array.flags.writeable = False
        ordered = array.transpose(self.dim_order)
        self.storage = ordered.reshape(-1).view(np.uint8) if ordered.flags.c_contiguous else _NO_STORAGE
        self.array = array

    def write(self, value) -> None:
        """Copy ``value`` (an array or NumPy scalar) into this tensor, resizing it first when it is dynamic."""
        a = self.array
        if value is a:
            return
        shape = getattr(value, "shape", None)
        if shape is None:
            value = np.asarray(value)
            shape = value.shape
        if shape != a.shape:
            self.resize(shape)
            a = self.array
        if value.dtype.kind == "c" != a.dtype.kind:  # ExecuTorch's kernels refuse it; NumPy would drop .imag
            raise TypeError(f"cannot write a {value.dtype} result into a {a.dtype} tensor")
        np.copyto(a, value, casting="unsafe")

    def __repr__(self) -> str:
        return f"Tensor(dtype={self.dtype.name}, shape={list(self.shape)}{', dynamic' if self.dynamic else ''})"
