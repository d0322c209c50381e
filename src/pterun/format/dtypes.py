"""ExecuTorch scalar types and their NumPy dtypes, in one table.

Example::

    >>> from pterun.format.dtypes import to_numpy, scalar_type_name
    >>> to_numpy(6), scalar_type_name(6)
    (dtype('float32'), 'Float')
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from pterun.errors import NotSupportedError

#: ScalarType id -> (name as ExecuTorch prints it, NumPy dtype or None when NumPy has no equivalent)
SCALAR_TYPES: dict[int, tuple[str, np.dtype | None]] = {
    0: ("Byte", np.dtype(np.uint8)),
    1: ("Char", np.dtype(np.int8)),
    2: ("Short", np.dtype(np.int16)),
    3: ("Int", np.dtype(np.int32)),
    4: ("Long", np.dtype(np.int64)),
    5: ("Half", np.dtype(np.float16)),
    6: ("Float", np.dtype(np.float32)),
    7: ("Double", np.dtype(np.float64)),
    8: ("ComplexHalf", None),
    9: ("ComplexFloat", np.dtype(np.complex64)),
    10: ("ComplexDouble", np.dtype(np.complex128)),
    11: ("Bool", np.dtype(np.bool_)),
    12: ("QInt8", np.dtype(np.int8)),
    13: ("QUInt8", np.dtype(np.uint8)),
    14: ("QInt32", np.dtype(np.int32)),
    15: ("BFloat16", np.dtype(ml_dtypes.bfloat16)),
    16: ("QUInt4x2", np.dtype(np.uint8)),
    17: ("QUInt2x4", np.dtype(np.uint8)),
    18: ("Bits1x8", np.dtype(np.uint8)),
    19: ("Bits2x4", np.dtype(np.uint8)),
    20: ("Bits4x2", np.dtype(np.uint8)),
    21: ("Bits8", np.dtype(np.uint8)),
    22: ("Bits16", np.dtype(np.uint16)),
    23: ("Float8_e5m2", np.dtype(ml_dtypes.float8_e5m2)),
    24: ("Float8_e4m3fn", np.dtype(ml_dtypes.float8_e4m3fn)),
    25: ("Float8_e5m2fnuz", np.dtype(ml_dtypes.float8_e5m2fnuz)),
    26: ("Float8_e4m3fnuz", np.dtype(ml_dtypes.float8_e4m3fnuz)),
    27: ("UInt16", np.dtype(np.uint16)),
    28: ("UInt32", np.dtype(np.uint32)),
    29: ("UInt64", np.dtype(np.uint64)),
}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

# The preferred ScalarType id for each NumPy dtype (reverse lookups pick the plain, non-quantized type).
_FROM_NUMPY: dict[np.dtype, int] = {}
for _sid, (_name, _dt) in sorted(SCALAR_TYPES.items(), reverse=True):
    if _dt is not None:
        _FROM_NUMPY[_dt] = _sid


def is_valid(scalar_type: int) -> bool:
    return scalar_type in SCALAR_TYPES


def scalar_type_name(scalar_type: int) -> str:
    entry = SCALAR_TYPES.get(scalar_type)
    return entry[0] if entry else f"ScalarType({scalar_type})"


def to_numpy(scalar_type: int) -> np.dtype:
    """The NumPy dtype for an ExecuTorch ScalarType id; NotSupportedError when NumPy has none."""
    entry = SCALAR_TYPES.get(scalar_type)
    if entry is None or entry[1] is None:
        raise NotSupportedError(f"scalar type {scalar_type_name(scalar_type)} has no NumPy equivalent")
    return entry[1]


def from_numpy(dtype) -> int:
    """The ExecuTorch ScalarType id for a NumPy dtype."""
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise NotSupportedError(f"NumPy dtype {dt} has no ExecuTorch scalar type") from None


def dtype_name(dtype) -> str:
    """How pterun prints a dtype in messages: NumPy's name (``float32``, ``bfloat16``)."""
    return np.dtype(dtype).name
