"""How values cross pterun's boundary: a caller's tensor into a host NumPy array for ``execute()``, and a result
back out as the tensor type the program was loaded for (``tensor_output``).

Example::

    >>> from pterun.convert import to_host_array
    >>> to_host_array(bytearray(b"ab"), 0)
    array([97, 98], dtype=uint8)
"""

from __future__ import annotations

import numpy as np

from pterun.errors import InvalidArgumentError, PterunError


def import_torch():
    try:
        import torch  # noqa: PLC0415  (only behind tensor_output="torch")
    except ImportError as e:
        raise ImportError("tensor_output='torch' needs PyTorch, which is not installed; install torch or use "
                          "tensor_output='numpy'") from e
    return torch


def to_host_array(x, i: int) -> np.ndarray:
    """Anything execute() takes as a tensor -> a NumPy array on the host. Whatever the object's own
    ``__dlpack__``, ``.cpu()``, ``.get()`` or ``__array__`` raises, the caller gets InvalidArgumentError naming the
    input, with that exception chained."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, (bool, int, float, complex, np.generic)) or x is None:
        raise InvalidArgumentError(f"input {i}: expected a tensor (a NumPy array or DLPack/buffer object), "
                                   f"got {type(x).__name__} {x!r}")
    what = "its attributes"  # even hasattr() runs the object's own __getattr__
    try:
        if hasattr(x, "__dlpack__"):
            what = "DLPack"
            arr = _from_dlpack(x, i)
        elif hasattr(x, "__array__"):
            what = "__array__"
            arr = np.asarray(x)
        else:
            what = "the buffer protocol"
            try:
                view = memoryview(x)
            except TypeError:
                raise InvalidArgumentError(f"input {i}: expected a NumPy array, a DLPack-exporting tensor or a "
                                           f"buffer, got {type(x).__name__}") from None
            arr = np.asarray(view)
    except PterunError:
        raise
    except Exception as e:  # the object's own conversion failed: any exception at all, chained
        raise InvalidArgumentError(f"input {i}: converting the {type(x).__name__} through {what} failed: "
                                   f"{type(e).__name__}: {e}") from e
    if not isinstance(arr, np.ndarray):
        raise InvalidArgumentError(f"input {i}: {type(x).__name__} converted through {what} to "
                                   f"{type(arr).__name__}, not an array")
    return arr


def _from_dlpack(x, i: int) -> np.ndarray:
    """A host array from a DLPack exporter (a device tensor is copied); InvalidArgumentError, with the first
    refusal chained, when it offers no way."""
    src = x.detach() if hasattr(x, "detach") else x
    refusal = None
    for kwargs in ({}, {"device": "cpu", "copy": True}):
        try:
            return np.from_dlpack(src, **kwargs)
        except (BufferError, TypeError, ValueError, RuntimeError) as e:
            refusal = refusal or e
    if hasattr(src, "get"):  # CuPy and friends
        return np.asarray(src.get())
    if hasattr(src, "cpu"):
        return np.from_dlpack(src.cpu())
    raise InvalidArgumentError(f"input {i}: could not copy the {type(x).__name__} to host memory via DLPack "
                               f"({type(refusal).__name__}: {refusal})") from refusal


def check_dtype(arr: np.ndarray, want: np.dtype, i: int) -> np.ndarray:
    """An input whose dtype differs from the method's: byte order alone is fine (the copy into the method's
    tensor swaps it); anything else is refused, never cast."""
    if arr.dtype.kind == want.kind and arr.dtype.itemsize == want.itemsize and arr.dtype.newbyteorder("=") == want:
        return arr
    got = arr.dtype.name if arr.dtype.isnative else f"{arr.dtype.name} ({arr.dtype.str})"
    raise InvalidArgumentError(f"input {i}: expected dtype {want.name}, got {got} (pterun never casts inputs)")


def torch_output(torch):
    """The conversion ``Method.execute`` applies to each tensor output under ``tensor_output="torch"``."""
    return lambda a: torch.from_numpy(a)
