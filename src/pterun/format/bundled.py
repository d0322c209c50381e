"""Bundled programs (``.bpte``): a ``.pte`` plus test inputs and expected outputs per method.

Example::

    >>> bp = read_bundled(open("model.bpte", "rb").read(), "model.bpte")   # doctest: +SKIP
    >>> [(s.method, len(s.cases)) for s in bp.suites]                      # doctest: +SKIP
    [('forward', 3)]
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from pterun.errors import InvalidProgramError
from pterun import dtypes
from pterun.format import kinds
from pterun.format.flatbuffer import Buffer, Table

# ValueUnion tags
_TENSOR, _INT, _BOOL, _DOUBLE = 1, 2, 3, 4


@dataclass(frozen=True)
class BundledCase:
    inputs: tuple  # np.ndarray (read-only view) / int / bool / float
    expected_outputs: tuple


@dataclass(frozen=True)
class BundledSuite:
    method: str
    cases: tuple[BundledCase, ...]


class BundledFile:
    def __init__(self, data, name: str):
        self.name = name
        buf = self.buf = Buffer(data, name)
        buf.require_identifier(kinds.BUNDLED_ID, "an ExecuTorch bundled program",
                               {b"ET12": " (this is a plain .pte program; use load_program)"})
        root = Table.root(buf, "BundledProgram")
        self.version = root.u32(4)
        program = root.bytes_view(8)
        if program is None or len(program) == 0:
            raise InvalidProgramError(f"{name}: the bundled program contains no program")
        self.program = program
        self.suites = tuple(self._suite(s) for s in root.tables(6, "BundledMethodTestSuite"))

    def _suite(self, t: Table) -> BundledSuite:
        method = t.string(4, strict=True)  # the method it tests: looked up by name
        if method is None:
            raise InvalidProgramError(f"{self.name}: a test suite has no method name")
        cases = tuple(BundledCase(tuple(self._value(method, v) for v in c.tables(4, "Value")),
                                  tuple(self._value(method, v) for v in c.tables(6, "Value")))
                      for c in t.tables(6, "BundledMethodTestCase"))
        return BundledSuite(method, cases)

    def _value(self, method: str, v: Table):
        tag, u = v.union(4, 6, "Value")
        if u is None:
            raise InvalidProgramError(f"{self.name}: a test value of method {method!r} has type {tag} and no data")
        if tag == _INT:
            return u.i64(4)
        if tag == _BOOL:
            return u.bool(4)
        if tag == _DOUBLE:
            return u.f64(4)
        if tag != _TENSOR:
            raise InvalidProgramError(f"{self.name}: test value of method {method!r} has unknown type {tag}")
        st = u.i8(4)
        if not dtypes.is_valid(st):
            raise InvalidProgramError(f"{self.name}: test tensor of method {method!r} has invalid scalar type {st}")
        dtype = dtypes.to_numpy(st)
        sizes = tuple(int(x) for x in u.array(6, np.int32))
        if any(s < 0 for s in sizes):
            raise InvalidProgramError(f"{self.name}: test tensor of method {method!r} has negative sizes")
        dim_order = tuple(int(x) for x in u.array(10, np.uint8)) or tuple(range(len(sizes)))
        if sorted(dim_order) != list(range(len(sizes))):
            raise InvalidProgramError(f"{self.name}: test tensor of method {method!r} has an invalid dim order")
        raw = u.bytes_view(8)
        nbytes = math.prod(sizes) * dtype.itemsize
        if raw is None or len(raw) != nbytes:
            raise InvalidProgramError(f"{self.name}: test tensor of method {method!r} has "
                                      f"{0 if raw is None else len(raw)} data bytes, its shape {list(sizes)} needs "
                                      f"{nbytes}")
        flat = np.frombuffer(raw, dtype=dtype)
        phys = flat.reshape([sizes[d] for d in dim_order])
        return phys.transpose(np.argsort(dim_order)) if dim_order != tuple(range(len(sizes))) else phys


def read_bundled(data, name: str = "<buffer>") -> BundledFile:
    try:
        return BundledFile(data, name)
    except (struct.error, IndexError, OverflowError, ValueError) as e:
        if isinstance(e, InvalidProgramError):
            raise
        raise InvalidProgramError(f"{name}: corrupt bundled program ({type(e).__name__}: {e})") from e
