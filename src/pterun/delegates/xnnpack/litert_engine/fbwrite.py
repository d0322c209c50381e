"""A flatbuffer written front to back: the tables :mod:`.tflite` lays out, without the ``flatbuffers`` package.

A flatbuffer points forward: a table's field holds the distance from the field to the table, string or vector it
names (``uoffset``, unsigned), and a table starts with the signed distance back to its vtable, the list of where
each field sits in it. So the writer puts every object after those that point at it: the root table first, then
its children, each field patched once its child has a position. A vtable is written once per table shape, before
the first table of that shape, and every table of the shape points back at it. Scalars are aligned to their size
from the buffer's start (the buffer itself is 64-byte aligned where the model bytes are made).

Every scalar field of a shape is written, its default too: a reader gets the same value either way, and one shape
per kind of table keeps the vtables few. Nothing is shared between two parents (a flatbuffer may share, but a
shared child would have to follow every parent): the bytes saved are a few shapes and names.

Example (a table with a string and an int32, read back by hand)::

    >>> w = Writer(b"TEST")
    >>> shape = Shape(((0, "off"), (1, "i32")))
    >>> root = w.table(shape, (0, 7))
    >>> w.patch(root + shape.at[0], w.string("hi"))
    >>> w.patch(0, root)
    >>> import struct; b = bytes(w.buf)
    >>> struct.unpack_from("<i", b, root + shape.at[1])[0], b[4:8]
    (7, b'TEST')
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["Shape", "Writer"]

_SIZE = {"u64": 8, "off": 4, "u32": 4, "i32": 4, "f32": 4, "u8": 1, "i8": 1, "bool": 1}
_CODE = {"u64": "Q", "off": "I", "u32": "I", "i32": "i", "f32": "f", "u8": "B", "i8": "b", "bool": "?"}
_U32 = struct.Struct("<I")


class Shape:
    """One kind of table: its fields as (slot, type) in the order values are given (types: ``off`` for a child,
    ``u64``, ``u32``, ``i32``, ``f32``, ``u8``, ``i8``, ``bool``). ``at[k]``: where field ``k`` sits from the
    table's start; ``children``: the indices of the ``off`` fields."""

    __slots__ = ("vtable", "struct", "order", "at", "children", "wide")

    def __init__(self, fields: tuple):
        # widest first, after the 4-byte vtable distance: each field then sits at a multiple of its size once the
        # table starts 4 bytes past a multiple of 8 (only tables with 8-byte fields need that)
        order = sorted(range(len(fields)), key=lambda k: -_SIZE[fields[k][1]])
        at, end = [0] * len(fields), 4
        for k in order:
            at[k], end = end, end + _SIZE[fields[k][1]]
        slots = 1 + max((slot for slot, _ in fields), default=-1)
        where = [0] * slots
        for (slot, _), a in zip(fields, at):
            where[slot] = a
        self.vtable = struct.pack(f"<HH{slots}H", 4 + 2 * slots, end, *where)
        self.struct = struct.Struct("<i" + "".join(_CODE[fields[k][1]] for k in order))
        self.order = tuple(order)
        self.at = tuple(at)
        self.children = tuple(k for k, (_, kind) in enumerate(fields) if kind == "off")
        self.wide = any(_SIZE[kind] == 8 for _, kind in fields)


class Writer:
    """The buffer being written: ``buf`` starts with the root's offset (patched last, ``patch(0, root)``) and the
    4-byte file identifier."""

    __slots__ = ("buf", "_vtables")

    def __init__(self, identifier: bytes):
        if len(identifier) != 4:
            raise ValueError(f"a file identifier is 4 bytes, got {identifier!r}")
        self.buf = bytearray(4) + identifier
        self._vtables: dict[int, int] = {}

    def table(self, shape: Shape, values) -> int:
        """A table of ``shape`` holding ``values`` (0 for each child: :meth:`patch` it); its position."""
        buf = self.buf
        vt = self._vtables.get(id(shape))
        if vt is None:
            if len(buf) & 1:
                buf.append(0)
            vt = self._vtables[id(shape)] = len(buf)
            buf += shape.vtable
        pad = (4 - len(buf)) % 8 if shape.wide else -len(buf) % 4
        if pad:
            buf += bytes(pad)
        pos = len(buf)
        buf += shape.struct.pack(pos - vt, *[values[k] for k in shape.order])
        return pos

    def patch(self, at: int, target: int) -> None:
        """Point the offset at ``at`` to ``target``, which lies after it (else ``struct.error``)."""
        _U32.pack_into(self.buf, at, target - at)

    def vector(self, items: np.ndarray) -> int:
        """A vector of scalars (``items``: a 1-D little-endian array); its position."""
        buf, size = self.buf, items.dtype.itemsize
        pad = -(len(buf) + 4) % size if size > 4 else -len(buf) % 4
        if pad:
            buf += bytes(pad)
        pos = len(buf)
        buf += _U32.pack(items.size)
        buf += items.tobytes()
        return pos

    def string(self, s: str) -> int:
        data = s.encode()
        buf = self.buf
        pad = -len(buf) % 4
        if pad:
            buf += bytes(pad)
        pos = len(buf)
        buf += _U32.pack(len(data))
        buf += data
        buf.append(0)
        return pos

    def slots(self, n: int) -> int:
        """A vector of ``n`` offsets to objects written after it (:meth:`point`); its position."""
        buf = self.buf
        pad = -len(buf) % 4
        if pad:
            buf += bytes(pad)
        pos = len(buf)
        buf += _U32.pack(n)
        buf += bytes(4 * n)
        return pos

    def point(self, vector: int, targets: list) -> None:
        """Point the offsets of the vector at ``vector`` (:meth:`slots`) to ``targets``, in order."""
        if targets:
            first = vector + 4
            at = np.arange(first, first + 4 * len(targets), 4, dtype=np.int64)
            step = np.asarray(targets, np.int64) - at
            if step.min() <= 0:
                raise ValueError(f"an offset must point forward: object at {targets[int(step.argmin())]} before "
                                 f"the vector at {vector}")
            self.buf[first:first + 4 * len(targets)] = step.astype("<u4").tobytes()
