"""How values cross pterun's boundary: a caller's tensor into a host NumPy array for ``execute()``, and a result
back out as the tensor type the program was loaded for (``tensor_output``).

Example::

    >>> from pterun.convert import to_host_array
    >>> to_host_array(bytearray(b"ab"), 0)
    array([97, 98], dtype=uint8)

bfloat16 and float8 cross as their bits. NumPy's DLPack import refuses them ("Unsupported dtype in DLTensor"),
so a torch tensor of such a dtype comes in as a same-size integer view of itself, exported through DLPack
and viewed as ml_dtypes' type (no copy of host memory); other exporters of those dtypes (JAX) are read through
``__array__``, which gives ml_dtypes' type itself. Going out under ``tensor_output="torch"``, the array's bits
become a torch integer tensor viewed as the torch dtype of the same name. Torch is never imported for this:
a torch tensor as an input means torch is already loaded, and outputs use the torch that ``tensor_output``
imported.
"""

from __future__ import annotations

import sys

import numpy as np

from pterun.errors import InvalidArgumentError, PterunError
from pterun.format import dtypes

#: dtypes of ExecuTorch programs that NumPy lacks (ml_dtypes has them) -> the integer type of their bits, by
#: name, as torch and NumPy both spell them
_BITS = {"bfloat16": "int16", "float8_e5m2": "uint8", "float8_e4m3fn": "uint8", "float8_e5m2fnuz": "uint8",
         "float8_e4m3fnuz": "uint8"}


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
    name = str(getattr(src, "dtype", "")).rpartition(".")[2]  # "torch.bfloat16" -> "bfloat16"
    if name in _BITS:
        arr = _through_bits(src, name, i)
        if arr is not None:
            return arr
    if hasattr(src, "get"):  # CuPy and friends
        return np.asarray(src.get())
    if hasattr(src, "cpu"):
        return np.from_dlpack(src.cpu())
    raise InvalidArgumentError(f"input {i}: could not copy the {type(x).__name__} to host memory via DLPack "
                               f"({type(refusal).__name__}: {refusal})") from refusal


def _through_bits(src, name: str, i: int) -> np.ndarray | None:
    """A tensor of bfloat16 or a float8 type as ml_dtypes' type: through a same-size integer view of the tensor
    where its library has one (torch: ``view(torch.int16)``, found on the module that defined the tensor's
    type, which is loaded since the tensor exists), else through ``__array__``; None when neither exists."""
    library = sys.modules.get(type(src).__module__.partition(".")[0])
    bits_type = getattr(library, _BITS[name], None)
    if bits_type is not None and callable(getattr(src, "view", None)):
        bits = _from_dlpack(src.view(bits_type), i)
        return bits.view(dtypes.ml_dtype(name))
    if hasattr(src, "__array__"):
        arr = np.asarray(src)
        if isinstance(arr, np.ndarray) and arr.dtype.name == name:
            return arr
    return None


def check_dtype(arr: np.ndarray, want: np.dtype, i: int) -> np.ndarray:
    """An input whose dtype differs from the method's: byte order alone is fine (the copy into the method's
    tensor swaps it); anything else is refused, never cast."""
    if arr.dtype.kind == want.kind and arr.dtype.itemsize == want.itemsize and arr.dtype.newbyteorder("=") == want:
        return arr
    got = arr.dtype.name if arr.dtype.isnative else f"{arr.dtype.name} ({arr.dtype.str})"
    raise InvalidArgumentError(f"input {i}: expected dtype {want.name}, got {got} (pterun never casts inputs)")


def torch_output(torch):
    """The conversion ``Method.execute`` applies to each tensor output under ``tensor_output="torch"``:
    ``torch.from_numpy``, and for ml_dtypes' types (kind ``V``) a view of the bits as the torch dtype of the
    same name, which ``torch.from_numpy`` cannot take."""
    def wrap(a: np.ndarray):
        if a.dtype.kind != "V":
            return torch.from_numpy(a)
        name = a.dtype.name
        if name not in _BITS or getattr(torch, name, None) is None:
            raise TypeError(f"tensor_output='torch': torch has no dtype for a {name} output")
        return torch.from_numpy(a.view(_BITS[name])).view(getattr(torch, name))
    return wrap
