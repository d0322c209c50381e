"""ExecuTorch scalar types and their NumPy dtypes, in one table.

``ml_dtypes`` (bfloat16, float8) is imported only when one of its types is first needed, so ``import pterun``
and programs without them stay light.

Example::

    >>> from pterun.dtypes import to_numpy, scalar_type_name
    >>> to_numpy(6), scalar_type_name(6)
    (dtype('float32'), 'Float')
"""

from __future__ import annotations

import sys

import numpy as np

from pterun.errors import NotSupportedError

#: ScalarType id -> (name as ExecuTorch prints it, NumPy dtype or ml_dtypes name, or None without equivalent)
_SPEC: dict[int, tuple[str, object]] = {
    0: ("Byte", np.uint8), 1: ("Char", np.int8), 2: ("Short", np.int16), 3: ("Int", np.int32),
    4: ("Long", np.int64), 5: ("Half", np.float16), 6: ("Float", np.float32), 7: ("Double", np.float64),
    8: ("ComplexHalf", None), 9: ("ComplexFloat", np.complex64), 10: ("ComplexDouble", np.complex128),
    11: ("Bool", np.bool_), 12: ("QInt8", np.int8), 13: ("QUInt8", np.uint8), 14: ("QInt32", np.int32),
    15: ("BFloat16", "bfloat16"), 16: ("QUInt4x2", np.uint8), 17: ("QUInt2x4", np.uint8), 18: ("Bits1x8", np.uint8),
    19: ("Bits2x4", np.uint8), 20: ("Bits4x2", np.uint8), 21: ("Bits8", np.uint8), 22: ("Bits16", np.uint16),
    23: ("Float8_e5m2", "float8_e5m2"), 24: ("Float8_e4m3fn", "float8_e4m3fn"),
    25: ("Float8_e5m2fnuz", "float8_e5m2fnuz"), 26: ("Float8_e4m3fnuz", "float8_e4m3fnuz"),
    27: ("UInt16", np.uint16), 28: ("UInt32", np.uint32), 29: ("UInt64", np.uint64),
}
_NAMES = {k: v[0] for k, v in _SPEC.items()}
#: ScalarType id -> NumPy dtype, or None without equivalent; ml_dtypes' types are added when first asked for
_DTYPES: dict[int, np.dtype | None] = {k: None if dt is None else np.dtype(dt) for k, (_, dt) in _SPEC.items()
                                       if not isinstance(dt, str)}
# the preferred ScalarType id for each NumPy dtype: the plain, non-quantized type (the lowest id)
_IDS: dict[np.dtype, int] = {dt: k for k, dt in sorted(_DTYPES.items(), reverse=True) if dt is not None}


def _add_ml_dtypes() -> None:
    """Add bfloat16 and the float8 types. Only programs that use them pay for importing ``ml_dtypes``: 1-7 ms for
    the releases pyproject.toml allows, 0.7-0.8 s for ml_dtypes 0.7.0, which it excludes."""
    import ml_dtypes

    for sid, (_, dt) in _SPEC.items():
        if isinstance(dt, str):
            _DTYPES[sid] = np.dtype(getattr(ml_dtypes, dt))
            _IDS[_DTYPES[sid]] = sid


def __getattr__(name: str):
    if name == "SCALAR_TYPES":
        return {k: (_NAMES[k], to_numpy(k) if _SPEC[k][1] is not None else None) for k in _SPEC}
    if name == "BFLOAT16":
        return to_numpy(15)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_valid(scalar_type: int) -> bool:
    return scalar_type in _SPEC


def scalar_type_name(scalar_type: int) -> str:
    return _NAMES.get(scalar_type, f"ScalarType({scalar_type})")


def to_numpy(scalar_type: int) -> np.dtype:
    """The NumPy dtype for an ExecuTorch ScalarType id; NotSupportedError when NumPy has none."""
    dt = _DTYPES.get(scalar_type)
    if dt is None and isinstance(_SPEC.get(scalar_type, (None, None))[1], str):
        _add_ml_dtypes()
        dt = _DTYPES[scalar_type]
    if dt is None:
        raise NotSupportedError(f"scalar type {scalar_type_name(scalar_type)} has no NumPy equivalent")
    return dt


def numpy_name(scalar_type: int) -> str | None:
    """NumPy's name for the dtype of a ScalarType id (``float32``, ``bfloat16``), or None where NumPy has none;
    what ``pterun inspect`` shows, so naming a type never imports ``ml_dtypes``."""
    dt = _SPEC.get(scalar_type, (None, None))[1]
    if dt is None:
        return None
    return dt if isinstance(dt, str) else np.dtype(dt).name


def ml_dtype(name: str) -> np.dtype | None:
    """ml_dtypes' dtype called ``name`` (``"bfloat16"``, ``"float8_e4m3fn"``, ...) when it is one of the
    ExecuTorch scalar types NumPy lacks, else None; ml_dtypes is imported only for such a name."""
    for sid, (_, dt) in _SPEC.items():
        if dt == name:
            return to_numpy(sid)
    return None


def from_numpy(dtype) -> int:
    """The ExecuTorch ScalarType id for a NumPy dtype."""
    dt = np.dtype(dtype)
    if dt not in _IDS and "ml_dtypes" in sys.modules:  # no array can have ml_dtypes' types before it is imported
        _add_ml_dtypes()
    try:
        return _IDS[dt]
    except KeyError:
        raise NotSupportedError(f"NumPy dtype {dt} has no ExecuTorch scalar type") from None


def dtype_name(dtype) -> str:
    """How pterun prints a dtype in messages: NumPy's name (``float32``, ``bfloat16``)."""
    return np.dtype(dtype).name
