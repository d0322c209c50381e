"""The kinds of file pterun reads, told apart by the identifier in bytes 4-8: a program (``ET12``), external
data (``FT01``) and a bundled program (``BP08``).

Example::

    >>> kind_of(b"\\x1c\\x00\\x00\\x00ET12")
    'program'
    >>> describe(kind_of(b"\\x1c\\x00\\x00\\x00FT01"))
    'an external data file (.ptd)'
"""

from __future__ import annotations

__all__ = ["BUNDLED", "DATA", "PROGRAM", "PROGRAM_ID", "DATA_ID", "BUNDLED_ID", "describe", "kind_of", "read_head"]

#: the identifiers (bytes 4-8) of the files pterun reads
PROGRAM_ID, DATA_ID, BUNDLED_ID = b"ET12", b"FT01", b"BP08"
PROGRAM, DATA, BUNDLED = "program", "data", "bundled"
_WORDS = {PROGRAM: "a program (.pte)", DATA: "an external data file (.ptd)", BUNDLED: "a bundled program (.bpte)"}


def kind_of(head: bytes) -> str | None:
    """``PROGRAM``, ``DATA`` or ``BUNDLED`` for a file whose first bytes are ``head`` (at least 8 of them), else
    None. Any ``ET`` identifier counts as a program: the program reader then says which version it is."""
    ident = bytes(head[4:8])
    if ident == DATA_ID:
        return DATA
    if ident == BUNDLED_ID:
        return BUNDLED
    return PROGRAM if ident[:2] == b"ET" else None


def describe(kind: str | None) -> str:
    """A kind in words, with its article."""
    return _WORDS.get(kind, "a file that is not a .pte, .ptd or .bpte")


def read_head(source) -> bytes:
    """The first 8 bytes of ``source``: a path, or bytes-like data. Raises what ``open`` raises for a path."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source[:8])
    with open(source, "rb") as f:
        return f.read(8)
