"""pterun: run ExecuTorch ``.pte`` programs with NumPy only — PyTorch is never imported.

Example::

    >>> import numpy as np
    >>> from pterun import Runtime
    >>> program = Runtime.get().load_program("model.pte")                            # doctest: +SKIP
    >>> program.load_method("forward").execute([np.ones((1, 3), np.float32)])         # doctest: +SKIP

ExecuTorch's pybindings API (``_load_for_executorch(path).forward(inputs)``) is :class:`Module`.
"""

from typing import TYPE_CHECKING

from pterun.errors import (DelegateError, InvalidArgumentError, InvalidProgramError, KernelError,
                           MethodNotFoundError, NamedDataNotFoundError, NotSupportedError, OperatorMissingError,
                           PterunError, VerificationError)
from pterun.runtime import Method, MethodMeta, Program, Runtime, TensorInfo, Verification

if TYPE_CHECKING:  # imported on first use (see __getattr__); named here for type checkers
    from pterun.bundled import BundledProgram, VerificationResult
    from pterun.module import (IOInfo, Module, _get_operator_names, _get_registered_backend_names, _is_available,
                               _load_bundled_program_from_buffer, _load_for_executorch,
                               _load_for_executorch_from_buffer, _load_for_executorch_from_bundled_program)

__version__ = "0.1.0"

__all__ = [
    "Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Verification", "BundledProgram", "Module", "IOInfo",
    "VerificationResult",
    "PterunError", "InvalidProgramError", "InvalidArgumentError", "MethodNotFoundError", "NamedDataNotFoundError",
    "OperatorMissingError", "NotSupportedError", "DelegateError", "KernelError", "VerificationError", "__version__",
]


_MODULE_API = ("Module", "IOInfo", "_load_for_executorch", "_load_for_executorch_from_buffer",
               "_load_for_executorch_from_bundled_program", "_load_bundled_program_from_buffer", "_get_operator_names",
               "_get_registered_backend_names", "_is_available")


def __getattr__(name: str) -> object:
    # bundled-program support and the pybindings-shaped Module are imported on first use, keeping
    # ``import pterun`` light
    if name in ("BundledProgram", "VerificationResult"):
        from pterun import bundled
        return getattr(bundled, name)
    if name in _MODULE_API:
        from pterun import module
        return getattr(module, name)
    raise AttributeError(f"module 'pterun' has no attribute {name!r}")
