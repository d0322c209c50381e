"""The program and data files pterun has memory-mapped, and the status of each file when it was mapped.

:func:`pterun.sources.open_source` notes each mapping it makes (:func:`remember`); :func:`file_of` answers which
file, in which version, a mapping shows. The packed-weight cache names constants read from such a file by the
file's digest, noted once per version (:mod:`pterun.delegates.xnnpack.litert_engine.cache`).

Example::

    >>> import mmap
    >>> file_of(mmap.mmap(-1, 16)) is None
    True
"""

from __future__ import annotations

import mmap
import os
import weakref

__all__ = ["file_of", "remember"]

#: each mapping noted -> (the file's path, its status when it was mapped)
_FILES: "weakref.WeakKeyDictionary[mmap.mmap, tuple]" = weakref.WeakKeyDictionary()


def remember(mm: mmap.mmap, path: str, st: os.stat_result) -> None:
    """Note that ``mm`` maps the file ``path`` as it was when its status was ``st``."""
    _FILES[mm] = (path, st)


def file_of(mm) -> tuple | None:
    """(path, ``os.stat_result``) of the file behind ``mm``, a mapping noted with :func:`remember`, else None.
    The status is the one taken before mapping: what names this version of the file."""
    try:
        return _FILES.get(mm)
    except TypeError:  # not weak-referenceable: not a mapping of ours
        return None
