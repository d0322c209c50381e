"""Memory the LiteRT engine gives back once XNNPACK has packed the weights.

When its interpreter is built, LiteRT's XNNPACK delegate packs every convolution's and fully-connected layer's
filter and bias into buffers of its own and never reads the model's copy again (the graph is wholly delegated, so
no builtin kernel reads it either; input resizing reshapes XNNPACK's runtime, it does not repack). Two copies of
those weights would otherwise stay resident beside the packed ones:

* the model's bytes: :func:`release_packed` returns their whole pages to the system (``madvise(MADV_DONTNEED)`` on
  Linux: the pages read as zeros afterwards, which is why only ranges nothing reads again are given);
* the program file's pages the translation read the weights from: :func:`release_sources` drops them from the
  process's mapping (read-only file mappings only; they are read back from the file if anything touches them
  again, e.g. the NumPy engine after a fallback);
* where LiteRT's CompiledModel read the weights from the program file in place, the pages of its own (private)
  mappings of the file: :func:`release_mapped`.

Both are best effort: on other systems, or when a call fails, the memory simply stays.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import os
import sys

import numpy as np

__all__ = ["MAPS", "mapping_of", "new_bytes", "release_mapped", "release_packed", "release_sources"]

_PAGE = mmap.PAGESIZE
_libc = None


def _page_range(start: int, size: int) -> tuple[int, int]:
    """The whole pages inside [start, start + size): (first page address, length), length 0 when none."""
    a = -(-start // _PAGE) * _PAGE
    e = (start + size) // _PAGE * _PAGE
    return a, max(e - a, 0)


#: ``madvise`` advice that faults a range in, writable, in one call (Linux 5.14; Python's mmap names it from 3.13)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
#: Where the kernel keeps its transparent-huge-page defrag policy (Linux).
THP_DEFRAG = "/sys/kernel/mm/transparent_hugepage/defrag"
_huge_ok = None


def huge_pages_without_stalls(path: str = THP_DEFRAG) -> bool:
    """Whether asking for transparent huge pages (``MADV_HUGEPAGE``) cannot stall the first write: only where the
    kernel's defrag policy is ``defer`` or ``never``. Under ``madvise``, ``always`` and ``defer+madvise`` (the
    usual defaults) a fault in an madvised range compacts memory on the spot when no huge page is free: filling
    45 MB of ResNet18 weights took 5-20 ms with huge pages at hand and 110-230 ms in a third of fresh processes
    on a busy VM, against a steady 20-25 ms of ordinary faults."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return False
    chosen = text[text.find("[") + 1:text.find("]")] if "[" in text else ""
    return chosen in ("defer", "never")


def new_bytes(size: int) -> tuple[bytes, np.ndarray] | None:
    """A new, not yet filled ``bytes`` object of ``size`` bytes and a writable uint8 view of its contents, or None
    where the C API is not reachable. Large ones ask for transparent huge pages on Linux where that cannot stall
    (:func:`huge_pages_without_stalls`): writing 45 MB of weights then takes a few dozen page faults instead of
    ~11,000. Then their pages are faulted in by one ``madvise(MADV_POPULATE_WRITE)`` rather than one by one as
    they are written: ResNet18's load took 102 ms against 105 (alternating fresh processes, 2-core Intel Xeon).
    The caller fills every byte before anyone else sees the object (``PyBytes_FromStringAndSize(NULL, n)``'s
    contract)."""
    global _huge_ok
    import ctypes

    try:
        make = ctypes.pythonapi.PyBytes_FromStringAndSize
    except AttributeError:  # not CPython
        return None
    make.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
    make.restype = ctypes.py_object
    b = make(None, size)
    addr = np.frombuffer(b, np.uint8).ctypes.data if size else 0
    view = np.frombuffer((ctypes.c_char * size).from_address(addr), np.uint8) if size else np.empty(0, np.uint8)
    if size >= 1 << 22 and sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE"):
        if _huge_ok is None:
            _huge_ok = huge_pages_without_stalls()
        a, n = _page_range(addr, size)
        if n and _huge_ok:
            _madvise(a, n, mmap.MADV_HUGEPAGE)
        if n:  # fault every page in with one call (Linux 5.14+; older kernels refuse it and nothing changes)
            _madvise(a, n, MADV_POPULATE_WRITE)
    return b, view


def _madvise(addr: int, size: int, advice: int) -> bool:
    global _libc
    import ctypes

    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _libc.madvise.restype = ctypes.c_int
    return _libc.madvise(addr, size, advice) == 0


def release_packed(model: bytes, ranges) -> int:
    """Give back the whole pages of ``model`` inside ``ranges`` ((offset, size) pairs); the bytes released."""
    if not ranges or not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    base = np.frombuffer(model, np.uint8).ctypes.data
    released = 0
    for off, size in ranges:
        a, n = _page_range(base + off, size)
        if n and _madvise(a, n, mmap.MADV_DONTNEED):
            released += n
    return released


def _mapping(a: np.ndarray):
    """The read-only ``mmap`` whose memory ``a`` views, or None."""
    b = a
    while isinstance(b, np.ndarray):
        b = b.base
    if isinstance(b, memoryview):
        if not b.readonly:
            return None
        b = b.obj
    if isinstance(b, mmap.mmap) and len(b) and memoryview(b).readonly:
        return b
    return None


def mapping_of(a: np.ndarray) -> tuple | None:
    """(the read-only ``mmap`` whose memory ``a`` views, ``a``'s byte offset in it), or None."""
    mm = _mapping(a)
    if mm is None or not a.size:
        return None
    offset = a.ctypes.data - np.frombuffer(mm, np.uint8, count=1).ctypes.data
    return (mm, offset) if 0 <= offset and offset + a.nbytes <= len(mm) else None


def release_sources(arrays) -> int:
    """Drop the whole pages of read-only file mappings that ``arrays`` view from this process; the bytes dropped."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    bases: dict[int, int] = {}
    released = 0
    for a in arrays:
        mm = _mapping(a)
        if mm is None:
            continue
        base = bases.get(id(mm))
        if base is None:
            base = bases[id(mm)] = np.frombuffer(mm, np.uint8, count=1).ctypes.data
        start, n = _page_range(a.ctypes.data, a.nbytes)
        if n and base <= start and start - base + n <= len(mm):
            try:
                mm.madvise(mmap.MADV_DONTNEED, start - base, n)
            except (OSError, ValueError):
                continue
            released += n
    return released


#: the process's memory map (Linux)
MAPS = "/proc/self/maps"


def release_mapped(files, maps: str = MAPS) -> int:
    """Drop the whole pages of the packed ranges of ``files`` ((path, status, offset, size, packed) tuples,
    :attr:`.writer.Unwritten.files`) from the private mappings of those files in this process: LiteRT's
    CompiledModel maps each constant it reads from a program file in place, privately, and XNNPACK, having packed
    the weights, never reads those ranges again (a private mapping's dropped page reads back from the file, the
    bytes unchanged: LiteRT does not write them). pterun's own mappings are shared ones (see
    :func:`release_sources`). The bytes dropped.

    LiteRT maps each constant on its own (MobileNetV2 read in place: 107 mappings for 107 ranges), so each mapping
    looks up the ranges it can hold by their sorted offsets rather than going through all of them: every mapping
    against every range took 5-6 ms of a 60-90 ms load."""
    ranges: dict[tuple, list] = {}
    for _, st, offset, size, packed in files:
        if packed and size > 0:
            ranges.setdefault((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino), []).append((offset, size))
    if not ranges or not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    try:
        with open(maps) as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    index = {}  # file -> its runs by offset, their offsets, and the furthest end of the runs up to each
    for key, runs in ranges.items():
        runs.sort()
        index[key] = (runs, [offset for offset, _ in runs],
                      list(itertools.accumulate((offset + size for offset, size in runs), max)))
    released = 0
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6 or fields[1][3:] != "p":
            continue
        major, _, minor = fields[3].partition(":")
        try:
            key = (int(major, 16), int(minor, 16), int(fields[4]))
        except ValueError:
            continue
        if key not in index:
            continue
        runs, offsets, ends = index[key]
        lo, _, hi = fields[0].partition("-")
        start, end, at = int(lo, 16), int(hi, 16), int(fields[2], 16)
        stop = at + end - start
        # the runs that can overlap [at, stop): from the first whose run-so-far reaches past ``at`` to the last
        # that starts before ``stop``
        for offset, size in runs[bisect.bisect_right(ends, at):bisect.bisect_left(offsets, stop)]:
            a = max(offset, at)
            e = min(offset + size, stop)
            if e > a:
                addr, n = _page_range(start + a - at, e - a)
                if n and _madvise(addr, n, mmap.MADV_DONTNEED):
                    released += n
    return released
