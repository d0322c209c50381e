"""A small, bounds-checked flatbuffer reader.

It reads tables, vectors and strings straight out of a buffer, checking every offset against the buffer's
length, so a corrupt file raises :class:`~pterun.errors.InvalidProgramError` instead of ``struct.error`` or
``IndexError``. Vectors of scalars come back as read-only, zero-copy NumPy views.

Example::

    >>> buf = open("model.pte", "rb").read()        # doctest: +SKIP
    >>> root = Table.root(Buffer(buf, "model.pte"))  # doctest: +SKIP
    >>> root.u32(4)                                   # Program.version  # doctest: +SKIP
    0
"""

from __future__ import annotations

import struct

import numpy as np

from pterun.errors import InvalidProgramError

_U8 = struct.Struct("<B")
_I8 = struct.Struct("<b")
_I16 = struct.Struct("<h")
_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")
_VT_HEAD = struct.Struct("<HH")  # a vtable's own size and its table's size


class Buffer:
    """Bytes plus a name for error messages; every read is bounds-checked."""

    __slots__ = ("data", "size", "name", "_np", "error", "vtables")

    def __init__(self, data, name: str = "buffer", error: type[Exception] = InvalidProgramError):
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.size = len(self.data)
        self.name = name
        self.error = error
        self._np = None
        #: vtable offset -> (its table's size, its field offsets), each read and checked once: flatbuffer writers
        #: share one vtable among the tables of a shape, so a program's thousands of tables have a few dozen
        self.vtables: dict[int, tuple[int, tuple]] = {}

    def fail(self, what: str) -> Exception:
        return self.error(f"{self.name}: {what}")

    def check(self, pos: int, length: int, what: str) -> None:
        if pos < 0 or length < 0 or pos + length > self.size:
            raise self.fail(f"{what} at offset {pos} (+{length} bytes) lies outside the {self.size}-byte buffer")

    def unpack(self, st: struct.Struct, pos: int, what: str = "value"):
        if pos < 0 or pos + st.size > self.size:
            raise self.fail(f"{what} at offset {pos} lies outside the {self.size}-byte buffer")
        return st.unpack_from(self.data, pos)[0]

    def require_identifier(self, expected: bytes, kind: str, hints: dict | None = None) -> None:
        """Check the 4-byte flatbuffer file identifier at offset 4; ``hints`` maps other identifiers to an
        explanation appended to the error (e.g. which loader that file needs)."""
        if self.size < 8:
            raise self.fail(f"file is {self.size} bytes, too short to be {kind}")
        ident = bytes(self.data[4:8])
        if ident != expected:
            hint = (hints or {}).get(ident, "")
            raise self.fail(f"not {kind}: expected identifier {expected.decode()!r} at offset 4, found "
                            f"{ident!r}{hint}")

    def array(self) -> np.ndarray:
        """The whole buffer as a read-only uint8 array (made once)."""
        if self._np is None:
            arr = np.frombuffer(self.data, dtype=np.uint8)
            arr.flags.writeable = False
            self._np = arr
        return self._np


class Table:
    """One flatbuffer table: ``pos`` is where it starts, its vtable is read on creation."""

    __slots__ = ("buf", "pos", "vt", "kind", "offs")

    def __init__(self, buf: Buffer, pos: int, kind: str = "table"):
        self.buf = buf
        self.pos = pos
        self.kind = kind
        data, size = buf.data, buf.size
        # bounds checked inline, messages formatted only on failure: a program has thousands of tables
        if pos < 0 or pos + 4 > size:
            raise buf.fail(f"{kind} header at offset {pos} lies outside the {size}-byte buffer")
        vt = pos - _I32.unpack_from(data, pos)[0]
        known = buf.vtables.get(vt)
        if known is None:
            if vt < 0 or vt + 4 > size:
                raise buf.fail(f"{kind} vtable at offset {vt} lies outside the {size}-byte buffer")
            vt_size, table_size = _VT_HEAD.unpack_from(data, vt)
            if vt_size < 4 or vt_size % 2:
                raise buf.fail(f"{kind} vtable at offset {vt} has invalid size {vt_size}")
            if vt + vt_size > size:
                buf.check(vt, vt_size, f"{kind} vtable")
            # every field offset at once: one unpack here instead of one per field read
            known = buf.vtables[vt] = (table_size, struct.unpack_from(f"<{(vt_size - 4) >> 1}H", data, vt + 4))
        table_size, self.offs = known
        self.vt = vt
        if pos + max(table_size, 4) > size:
            buf.check(pos, max(table_size, 4), kind)

    @classmethod
    def root(cls, buf: Buffer, kind: str = "root table") -> "Table":
        return cls(buf, buf.unpack(_U32, 0, "root offset"), kind)

    def field(self, slot: int) -> int:
        """Absolute position of the field at vtable slot ``slot``, or 0 when absent."""
        i = (slot - 4) >> 1
        if not 0 <= i < len(self.offs):
            return 0
        off = self.offs[i]
        return self.pos + off if off else 0

    def has(self, slot: int) -> bool:
        return self.field(slot) != 0

    def _scalar(self, st: struct.Struct, slot: int, default):
        i, offs = (slot - 4) >> 1, self.offs  # :meth:`field`, inline: the reads a load makes most
        if not 0 <= i < len(offs) or not offs[i]:
            return default
        p = self.pos + offs[i]
        if p + st.size > self.buf.size:
            raise self.buf.fail(f"{self.kind} field {slot} at offset {p} lies outside the {self.buf.size}-byte buffer")
        return st.unpack_from(self.buf.data, p)[0]

    def u8(self, slot, default=0):
        return self._scalar(_U8, slot, default)

    def i8(self, slot, default=0):
        return self._scalar(_I8, slot, default)

    def i16(self, slot, default=0):
        return self._scalar(_I16, slot, default)

    def u32(self, slot, default=0):
        return self._scalar(_U32, slot, default)

    def i32(self, slot, default=0):
        return self._scalar(_I32, slot, default)

    def u64(self, slot, default=0):
        return self._scalar(_U64, slot, default)

    def i64(self, slot, default=0):
        return self._scalar(_I64, slot, default)

    def f32(self, slot, default=0.0):
        return self._scalar(_F32, slot, default)

    def f64(self, slot, default=0.0):
        return self._scalar(_F64, slot, default)

    def bool(self, slot, default=False):
        return bool(self._scalar(_U8, slot, default))

    def _indirect(self, slot: int) -> int:
        i, offs = (slot - 4) >> 1, self.offs
        if not 0 <= i < len(offs) or not offs[i]:
            return 0
        p = self.pos + offs[i]
        if p + 4 > self.buf.size:
            raise self.buf.fail(f"{self.kind} offset field {slot} at offset {p} lies outside the "
                                f"{self.buf.size}-byte buffer")
        return p + _U32.unpack_from(self.buf.data, p)[0]

    def table(self, slot: int, kind: str = "table") -> "Table | None":
        p = self._indirect(slot)
        return Table(self.buf, p, kind) if p else None

    def union(self, type_slot: int, slot: int, kind: str = "union") -> tuple[int, "Table | None"]:
        tag = self.u8(type_slot)
        return tag, (self.table(slot, kind) if tag else None)

    def _vector(self, slot: int, elem_size: int) -> tuple[int, int]:
        p = self._indirect(slot)
        if not p:
            return 0, 0
        size = self.buf.size
        if p + 4 > size:
            raise self.buf.fail(f"{self.kind} vector length at offset {p} lies outside the {size}-byte buffer")
        n = _U32.unpack_from(self.buf.data, p)[0]
        if p + 4 + n * elem_size > size:
            self.buf.check(p + 4, n * elem_size, f"{self.kind} vector of {n} elements")
        return p + 4, n

    def string(self, slot: int, default: str | None = None, *, strict: bool = False) -> str | None:
        """A string field. Names are not semantics: bytes that are not valid UTF-8 are decoded with U+FFFD
        replacement characters (as ExecuTorch, which never decodes them, accepts them), unless ``strict``, for
        a string the program needs to be exact (a method or operator name), which then fails."""
        start, n = self._vector(slot, 1)
        if not start:
            return default
        raw = bytes(self.buf.data[start : start + n])
        if not strict:
            return raw.decode("utf-8", "replace")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.buf.fail(f"{self.kind} string field {slot} ({raw[:40]!r}) is not valid UTF-8 "
                                f"(byte {e.start})") from None

    def bytes_view(self, slot: int) -> memoryview | None:
        """A ``[ubyte]`` vector as a zero-copy memoryview, or None when absent."""
        start, n = self._vector(slot, 1)
        if not start:
            return None
        return memoryview(self.buf.data)[start : start + n]

    def array(self, slot: int, dtype) -> np.ndarray:
        """A vector of scalars as a read-only NumPy view (empty when absent)."""
        dt = np.dtype(dtype).newbyteorder("<")
        start, n = self._vector(slot, dt.itemsize)
        if not start:
            return np.zeros(0, dt)
        return np.frombuffer(self.buf.array(), dtype=dt, count=n, offset=start)

    def values(self, slot: int, code: str) -> tuple:
        """A vector of scalars as a tuple of Python numbers (``code``: a ``struct`` format character, e.g. ``"i"``
        for int32, ``"B"`` for uint8); empty when absent. Cheaper than :meth:`array` for the short vectors of
        sizes and indices a program is made of."""
        start, n = self._vector(slot, struct.calcsize(code))
        if not start:
            return ()
        return struct.unpack_from(f"<{n}{code}", self.buf.data, start)

    def tables(self, slot: int, kind: str = "table") -> list["Table"]:
        start, n = self._vector(slot, 4)
        if not n:
            return []
        buf = self.buf  # the offsets all at once (the vector lies inside the buffer: _vector checked it)
        offsets = struct.unpack_from(f"<{n}I", buf.data, start)
        return [Table(buf, start + 4 * i + off, kind) for i, off in enumerate(offsets)]

    def strings(self, slot: int) -> list[str]:
        start, n = self._vector(slot, 4)
        out = []
        for i in range(n):
            p = start + 4 * i
            q = p + self.buf.unpack(_U32, p)
            m = self.buf.unpack(_U32, q, "string length")
            self.buf.check(q + 4, m, "string")
            out.append(bytes(self.buf.data[q + 4 : q + 4 + m]).decode("utf-8", "replace"))
        return out
