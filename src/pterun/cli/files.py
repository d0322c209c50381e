"""What the commands load: program files, told apart by the identifier in their first bytes.

Example::

    >>> from pterun.cli.files import identifier
    >>> identifier("model.ptd")                                                  # doctest: +SKIP
    b'FT01'
"""

from __future__ import annotations

__all__ = ["CliError", "identifier", "load", "default_method"]


class CliError(Exception):
    """A mistake in how pterun was called: one line on stderr, exit status 2 (argparse's, for usage errors)."""


def identifier(path: str) -> bytes:
    """The four identifier bytes of the file at ``path`` (``b""`` when it does not exist: loading says so)."""
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8]
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a program file") from None
    except FileNotFoundError:
        return b""  # loading it says so, in the runtime's words


def load(rt, path: str, data_path: list[str]):
    """(Program, BundledProgram or None) for a ``.pte`` or ``.bpte`` loaded by ``rt``; a ``.ptd`` is a usage
    error."""
    ident = identifier(path)
    if ident == b"FT01":
        raise CliError(f"{path} is an external data file (.ptd), not a program: pass it with --data-path next to "
                       "the .pte that uses it")
    if ident == b"BP08":
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
