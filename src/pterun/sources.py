"""Where programs and external data come from: a path (memory-mapped, nothing copied), bytes-like data or a file
object, opened into a buffer the format readers take; and the guard that turns what a corrupt file makes the
readers raise into pterun's errors.

Example::

    >>> buf, name, keepalive = open_source(b"0123ET12")
    >>> name
    '<bytes>'
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import IO, Sequence, Union

from pterun.errors import InvalidProgramError
from pterun.format.mapped import remember
from pterun.format.ptd import PtdFile, read_ptd

__all__ = ["DataPath", "ProgramSource", "guard", "open_data_files", "open_source", "read_data_file"]

#: what load_program accepts: a path (memory-mapped), bytes-like data, or a binary file object
ProgramSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]
#: external data for load_program: one .ptd (path or bytes-like) or a list of them
DataPath = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Sequence[Union[str, "os.PathLike[str]", bytes]]]


def guard(fn, *args, name: str = "program"):
    """Run a load step; a low-level error from a corrupt file becomes InvalidProgramError, and so does running
    out of memory (a corrupt size under ``ulimit -v`` or with overcommit off): the message says how much."""
    try:
        return fn(*args)
    except (struct.error, IndexError, OverflowError, UnicodeDecodeError) as e:
        raise InvalidProgramError(f"{name}: corrupt program ({type(e).__name__}: {e})") from e
    except MemoryError as e:
        asked = str(e) or "an allocation NumPy or Python could not satisfy"
        raise InvalidProgramError(f"{name}: loading ran out of memory: {asked} (corrupt file?)") from e


def read_data_file(source: ProgramSource) -> PtdFile:
    """One ``.ptd`` external-data file (a path, memory-mapped, or bytes-like data), read and validated: its keys
    give read-only zero-copy views (the file stays mapped while the result lives). What ``data_path=`` and
    :func:`pterun.summary.describe` read.

    Raises:
        InvalidProgramError: not a valid ``.ptd``.
        FileNotFoundError: no such file.
    """
    return _read_data_file(source)[0]


def _read_data_file(source) -> tuple:
    buf, name, keep = open_source(source, what="external data file")
    return guard(read_ptd, buf, name, name=name), keep


def open_data_files(data_path) -> list:
    """[(PtdFile, keepalive)] for ``data_path``: None, one path/bytes, or a list of them."""
    if data_path is None:
        return []
    items = list(data_path) if isinstance(data_path, (list, tuple)) else [data_path]
    out, seen = [], {}
    for item in items:
        ptd, keep = _read_data_file(item)
        name = ptd.name
        for key in ptd.keys():
            if key in seen:
                raise InvalidProgramError(f"named data key {key!r} is in both {seen[key]} and {name}")
            seen[key] = name
        out.append((ptd, keep))
    return out


def open_source(data, what: str = "program file"):
    """(buffer, display name, object to keep alive) for anything load_program accepts."""
    if isinstance(data, (str, os.PathLike)):
        path = os.fsdecode(data)  # not pathlib: importing it would add ~10 ms to import pterun
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(f"no such {what}: {path!r}") from None
        with f:
            st = os.fstat(f.fileno())
            if st.st_size == 0:
                raise InvalidProgramError(f"{path}: the file is empty")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        remember(mm, os.path.abspath(path), st)  # which version of which file: the cache's keys, external weights
        return mm, path, mm
    if isinstance(data, bytes):
        return data, "<bytes>", data
    if isinstance(data, (bytearray, memoryview)):
        mv = memoryview(data).toreadonly().cast("B")
        return mv, f"<{type(data).__name__}>", data
    if hasattr(data, "read"):
        raw = data.read()
        if not isinstance(raw, (bytes, bytearray)):
            raise TypeError(f"file-like object's read() returned {type(raw).__name__}, expected bytes")
        return bytes(raw), getattr(data, "name", "<file>") if isinstance(getattr(data, "name", None), str) \
            else "<file>", raw
    raise TypeError(f"Expected data to be bytes, bytearray, a path to a .pte file, or a file-like object, "
                    f"but got {type(data).__name__}.")
