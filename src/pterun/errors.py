"""The exceptions pterun raises.

Every error pterun raises on purpose derives from :class:`PterunError`, and each also derives from the
built-in exception a Python user would reach for first, so ``except ValueError`` keeps working::

    PterunError
    ├── InvalidProgramError (ValueError)           not a .pte, truncated, corrupt, index/offset out of range
    ├── InvalidArgumentError (ValueError)          wrong inputs to execute(): count, dtype, shape, type
    ├── MethodNotFoundError (KeyError)             unknown method name
    ├── NamedDataNotFoundError (KeyError)          a named-data key or external tensor in no data file given
    ├── OperatorMissingError (NotImplementedError) load_method: lists every missing operator at once
    ├── NotSupportedError (NotImplementedError)    a valid program using a feature pterun lacks (says which)
    ├── DelegateError                              delegate payload invalid or backend unavailable
    ├── KernelError (RuntimeError)                 a kernel failed: operator, instruction index, input shapes
    └── VerificationError (AssertionError)         a bundled program's outputs differ from its expected outputs

Example::

    >>> from pterun import errors
    >>> issubclass(errors.InvalidProgramError, ValueError)
    True
"""

from __future__ import annotations

__all__ = [
    "PterunError",
    "InvalidProgramError",
    "InvalidArgumentError",
    "MethodNotFoundError",
    "NamedDataNotFoundError",
    "OperatorMissingError",
    "NotSupportedError",
    "DelegateError",
    "KernelError",
    "VerificationError",
]


class PterunError(Exception):
    """Base class of every error pterun raises on purpose."""


class InvalidProgramError(PterunError, ValueError):
    """The file is not a valid ExecuTorch program: wrong identifier, truncated, or inconsistent."""


class InvalidArgumentError(PterunError, ValueError):
    """The inputs given to ``Method.execute`` do not match the method's metadata."""


class MethodNotFoundError(PterunError, KeyError):
    """No method of that name exists in the program (or, for a bundled program, has test cases)."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class NamedDataNotFoundError(PterunError, KeyError):
    """A named-data key, or a tensor stored in external data, is in neither the program nor the ``.ptd`` files
    given to ``load_program`` (or no ``data_path`` was given); the message names the key and the files."""

    def __str__(self) -> str:  # KeyError would show the message in quotes
        return str(self.args[0]) if self.args else ""


class OperatorMissingError(PterunError, NotImplementedError):
    """``load_method`` found operators pterun has no kernel for; ``missing`` lists all of them."""

    def __init__(self, method: str, missing: list[str]):
        self.method = method
        self.missing = sorted(set(missing))
        super().__init__(
            f"method {method!r} uses {len(self.missing)} operator(s) pterun does not implement: "
            + ", ".join(self.missing)
        )


class NotSupportedError(PterunError, NotImplementedError):
    """The program is valid but uses a feature pterun does not support; the message names it."""


class DelegateError(PterunError):
    """A delegate payload is invalid, or its backend is not available."""


class KernelError(PterunError, RuntimeError):
    """A kernel failed while the method ran; the cause is chained as ``__cause__``."""

    def __init__(self, message: str, *, operator: str = "", instruction: int = -1):
        self.operator = operator
        self.instruction = instruction
        super().__init__(message)


class VerificationError(PterunError, AssertionError):
    """A bundled program's method produced outputs that differ from the expected ones it carries."""
