"""pterun: run ExecuTorch ``.pte`` programs with NumPy only — PyTorch is never imported.

Example::

    >>> import numpy as np
    >>> from pterun import Runtime
    >>> program = Runtime.get().load_program("model.pte")                            # doctest: +SKIP
    >>> program.load_method("forward").execute([np.ones((1, 3), np.float32)])         # doctest: +SKIP
"""

from pterun.errors import (DelegateError, InvalidArgumentError, InvalidProgramError, KernelError,
                           MethodNotFoundError, NotSupportedError, OperatorMissingError, PterunError, VerificationError)
from pterun.runtime import Method, MethodMeta, Program, Runtime, TensorInfo, Verification

__version__ = "0.1.0"

__all__ = [
    "Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Verification", "BundledProgram",
    "VerificationResult",
    "PterunError", "InvalidProgramError", "InvalidArgumentError", "MethodNotFoundError", "OperatorMissingError",
    "NotSupportedError", "DelegateError", "KernelError", "VerificationError", "__version__",
]


def __getattr__(name: str):
    # bundled-program support is imported on first use, keeping ``import pterun`` light
    if name in ("BundledProgram", "VerificationResult"):
        from pterun import bundled
        return getattr(bundled, name)
    raise AttributeError(f"module 'pterun' has no attribute {name!r}")
