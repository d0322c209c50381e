"""``.ptd`` external-data files (FlatTensor): named blobs, optionally with a tensor layout.

Example::

    >>> ptd = read_ptd(open("model.ptd", "rb").read(), "model.ptd")   # doctest: +SKIP
    >>> sorted(ptd.keys())[:2]                                         # doctest: +SKIP
    ['lin.bias', 'lin.weight']
"""

from __future__ import annotations

import struct

import numpy as np

from pterun._record import Record
from pterun.errors import InvalidProgramError
from pterun import dtypes
from pterun.format import kinds
from pterun.format.flatbuffer import Buffer, Table

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class TensorLayout(Record):
    """dtype, sizes and dim order of a .ptd entry."""

    __slots__ = ("scalar_type", "sizes", "dim_order")

    @property
    def nbytes(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n * dtypes.to_numpy(self.scalar_type).itemsize


class PtdFile:
    """A validated ``.ptd``: ``data(key)`` gives a read-only uint8 view, ``layout(key)`` its TensorLayout."""

    def __init__(self, data, name: str):
        self.name = name
        buf = self.buf = Buffer(data, name)
        buf.require_identifier(kinds.DATA_ID, "an ExecuTorch external-data file",
                               {b"ET12": " (this is a .pte program, not external data)"})
        if buf.size < 48 or bytes(buf.data[8:12]) != b"FH01":
            raise InvalidProgramError(f"{name}: missing the 'FH01' external-data header")
        hlen = buf.unpack(_U32, 12)
        if hlen < 40:
            raise InvalidProgramError(f"{name}: header length {hlen} is below the minimum of 40")
        self.segment_base = buf.unpack(_U64, 32)
        self.segment_size = buf.unpack(_U64, 40)
        if self.segment_base + self.segment_size > buf.size:
            end = self.segment_base + self.segment_size
            raise InvalidProgramError(f"{name}: segments span {self.segment_base}..{end} but the file has "
                                      f"{buf.size} bytes (truncated?)")
        root = Table.root(buf, "FlatTensor")
        segments = []
        for i, s in enumerate(root.tables(6, "DataSegment")):
            off, size = s.u64(4), s.u64(6)
            if off + size > self.segment_size:
                raise InvalidProgramError(f"{name}: segment {i} (offset {off}, size {size}) runs past the segment "
                                          f"data ({self.segment_size} bytes)")
            segments.append((self.segment_base + off, size))
        self._entries: dict[str, tuple[int, TensorLayout | None]] = {}
        for nd in root.tables(8, "NamedData"):
            key = nd.string(4)
            idx = nd.u32(6)
            if key is None or idx >= len(segments):
                raise InvalidProgramError(f"{name}: named data {key!r} points at segment {idx}, out of range "
                                          f"({len(segments)} segments)")
            lt = nd.table(8, "TensorLayout")
            layout = None
            if lt is not None:
                st = lt.i8(4)
                if not dtypes.is_valid(st):
                    raise InvalidProgramError(f"{name}: key {key!r} has invalid scalar type {st}")
                layout = TensorLayout(st, tuple(int(x) for x in lt.array(6, np.int32)),
                                      tuple(int(x) for x in lt.array(8, np.uint8)))
            self._entries[key] = (idx, layout)
        self._segments = segments

    def keys(self):
        return self._entries.keys()

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def layout(self, key: str) -> TensorLayout | None:
        return self._entries[key][1]

    def data(self, key: str) -> np.ndarray:
        idx, _ = self._entries[key]
        start, size = self._segments[idx]
        return self.buf.array()[start : start + size]


def read_ptd(data, name: str = "<buffer>") -> PtdFile:
    try:
        return PtdFile(data, name)
    except (struct.error, IndexError, OverflowError) as e:
        raise InvalidProgramError(f"{name}: corrupt external-data file ({type(e).__name__}: {e})") from e
