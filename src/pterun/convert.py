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
from collections.abc import Sequence

import numpy as np

from pterun.errors import InvalidArgumentError, PterunError
from pterun import dtypes
from pterun.format.schema import BOOL, DOUBLE, INT, NULL, STATIC, STRING, TAG_NAMES, TENSOR

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


class InputChecks:
    """The checks of one method's inputs, resolved once at load: a function per input that takes what the
    caller passed and gives what the method runs on (a host array of exactly the dtype, rank and shape the method
    takes; None; a Python scalar equal to the one the program was exported with), or raises
    :class:`~pterun.errors.InvalidArgumentError` naming the input."""

    def __init__(self, method: str, specs: list):
        self.method = method
        self._checks = [self._check_for(i, tag, desc) for i, (tag, desc) in enumerate(specs)]

    def __call__(self, inputs) -> list:
        if type(inputs) is not list and type(inputs) is not tuple and (
                isinstance(inputs, (np.ndarray, str, bytes)) or not isinstance(inputs, Sequence)):
            raise InvalidArgumentError(f"method {self.method!r}: inputs must be a list or tuple of values, got "
                                       f"{type(inputs).__name__}")
        checks = self._checks
        if len(inputs) != len(checks):
            raise InvalidArgumentError(f"method {self.method!r} takes {len(checks)} input(s), got {len(inputs)}")
        return [check(x) for check, x in zip(checks, inputs)]

    @staticmethod
    def _check_for(i: int, tag: int, desc):
        if tag == TENSOR:
            return _tensor_check(i, desc)
        if tag == NULL:
            def none(x):
                if x is not None:
                    raise InvalidArgumentError(f"input {i}: expected None, got {type(x).__name__}")
                return None
            return none
        return _scalar_check(i, tag, desc)


def _tensor_check(i: int, desc):
    want, sizes, static = desc.dtype, tuple(desc.sizes), desc.dynamism == STATIC

    def tensor(x):
        arr = x if type(x) is np.ndarray else to_host_array(x, i)
        if arr.dtype != want:
            arr = check_dtype(arr, want, i)
        shape = arr.shape
        if len(shape) != len(sizes):
            raise InvalidArgumentError(f"input {i}: expected rank {len(sizes)} with shape {list(sizes)}, got shape "
                                       f"{list(shape)}")
        if static:
            if shape != sizes:
                raise InvalidArgumentError(f"input {i}: expected shape {list(sizes)}, got {list(shape)}")
        elif any(s > b for s, b in zip(shape, sizes)):
            raise InvalidArgumentError(f"input {i}: shape {list(shape)} exceeds the upper bound {list(sizes)} of "
                                       "this dynamic input")
        return arr
    return tensor


def _scalar_check(i: int, tag: int, baked):
    """An Int, Double, Bool or String input: a program exported with one baked in accepts only that value."""
    want_t = {INT: int, DOUBLE: float, BOOL: bool, STRING: str}[tag]

    def scalar(x):
        if isinstance(x, np.generic):
            x = x.item()
        ok = isinstance(x, want_t) and not (want_t is int and isinstance(x, bool))
        if want_t is float and isinstance(x, int) and not isinstance(x, bool):
            ok, x = True, float(x)
        if not ok:
            raise InvalidArgumentError(f"input {i}: expected {TAG_NAMES[tag]}, got {type(x).__name__}")
        if tag == DOUBLE:
            same = (x == baked) or (abs(x - baked) <= 1e-4 + 1e-5 * abs(baked)) or (x != x and baked != baked)
        else:
            same = x == baked
        if not same:
            raise InvalidArgumentError(f"input {i}: this program was exported with {TAG_NAMES[tag]} {baked!r} baked "
                                       f"in and only accepts that value, got {x!r}")
        return x
    return scalar
