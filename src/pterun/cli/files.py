"""What the commands load: program files, told apart by the identifier in their first bytes.

Example::

    >>> from pterun.cli.files import kind_of
    >>> kind_of("model.ptd")                                                     # doctest: +SKIP
    'an external data file (.ptd)'
"""

from __future__ import annotations

from pterun.format import kinds

__all__ = ["InputError", "kind_of", "kind_or_none", "load", "default_method"]


class InputError(Exception):
    """A file or input the command cannot use (a directory, a ``.ptd`` where a program is expected, inputs that
    do not fit the method): one line on stderr, exit status 1, as for the errors the runtime raises."""


def kind_or_none(path: str) -> str | None:
    """What the file at ``path`` is (:mod:`pterun.format.kinds`); None for another file or none at all (loading
    it then says so, in the runtime's words)."""
    try:
        return kinds.kind_of(kinds.read_head(path))
    except IsADirectoryError:
        raise InputError(f"{path} is a directory, not a file") from None
    except FileNotFoundError:
        return None


def kind_of(path: str) -> str:
    """What the file at ``path`` is, in words with their article, going by its identifier."""
    import os

    kind = kind_or_none(path)
    if kind is None and not (os.path.isfile(path) and os.path.getsize(path)):
        return "a missing or empty file"
    return kinds.describe(kind)


def load(rt, path: str, data_path: list[str]):
    """(Program, BundledProgram or None) for a ``.pte`` or ``.bpte`` loaded by ``rt``; a ``.ptd`` is an
    :class:`InputError`."""
    kind = kind_or_none(path)
    if kind == kinds.DATA:
        raise InputError(f"{path} is an external data file (.ptd), not a program: pass it with --data-path next to "
                         "the .pte that uses it")
    if kind == kinds.BUNDLED:
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
