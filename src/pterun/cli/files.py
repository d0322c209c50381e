"""What the commands load: program files, told apart by the identifier in their first bytes.

Example::

    >>> from pterun.cli.files import kind_of
    >>> kind_of("model.ptd")                                                     # doctest: +SKIP
    'an external data file (.ptd)'
"""

from __future__ import annotations

__all__ = ["InputError", "identifier", "kind_of", "load", "default_method", "PTD", "BUNDLE"]

#: the identifiers (bytes 4-8) of the files pterun reads, other than a program's (``ET`` and a version)
PTD, BUNDLE = b"FT01", b"BP08"


class InputError(Exception):
    """A file or input the command cannot use (a directory, a ``.ptd`` where a program is expected, inputs that
    do not fit the method): one line on stderr, exit status 1, as for the errors the runtime raises."""


def identifier(path: str) -> bytes:
    """The four identifier bytes of the file at ``path`` (``b""`` when it does not exist: loading says so)."""
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8]
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a file") from None
    except FileNotFoundError:
        return b""  # loading it says so, in the runtime's words


def kind_of(path: str) -> str:
    """What the file at ``path`` is, in words with their article, going by its identifier."""
    ident = identifier(path)
    if ident == PTD:
        return "an external data file (.ptd)"
    if ident == BUNDLE:
        return "a bundled program (.bpte)"
    if ident[:2] == b"ET":
        return "a program (.pte)"
    return "a file that is not a .pte, .ptd or .bpte" if ident else "a missing or empty file"


def load(rt, path: str, data_path: list[str]):
    """(Program, BundledProgram or None) for a ``.pte`` or ``.bpte`` loaded by ``rt``; a ``.ptd`` is an
    :class:`InputError`."""
    ident = identifier(path)
    if ident == PTD:
        raise InputError(f"{path} is an external data file (.ptd), not a program: pass it with --data-path next to "
                         "the .pte that uses it")
    if ident == BUNDLE:
        bundle = rt.load_bundled_program(path, data_path=data_path or None, tensor_output="numpy")
        return bundle.program, bundle
    # the command line always works on NumPy arrays, whatever $PTERUN_TENSOR_OUTPUT says for Python code
    return rt.load_program(path, data_path=data_path or None, tensor_output="numpy"), None


def default_method(program, bundle, requested: str | None) -> str:
    """``requested``, else ``forward``, else the first method by name (of the bundle's test cases, for a .bpte)."""
    if requested is not None:
        return requested
    names = sorted(bundle.method_names if bundle is not None and bundle.method_names else program.method_names)
    return "forward" if "forward" in names else names[0]
