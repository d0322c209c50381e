"""pterun: run ExecuTorch ``.pte`` programs with NumPy only — PyTorch is never imported.

Example::

    >>> import numpy as np
    >>> from pterun import Runtime
    >>> program = Runtime.get().load_program("model.pte")                            # doctest: +SKIP
    >>> program.load_method("forward").execute([np.ones((1, 3), np.float32)])         # doctest: +SKIP

ExecuTorch's pybindings API (``_load_for_executorch(path).forward(inputs)``) is :class:`Module`.

Only the exceptions are imported with the package; everything else (the runtime, NumPy with it, bundled programs,
the pybindings-shaped Module, the submodules such as :mod:`pterun.threads`) on first use. So ``import pterun``
costs a few milliseconds, and the ``pterun`` command can catch Ctrl-C from its first import on.
"""

from pterun.errors import (DelegateError, InvalidArgumentError, InvalidProgramError, KernelError,
                           MethodNotFoundError, NamedDataNotFoundError, NotSupportedError, OperatorMissingError,
                           PterunError, VerificationError)

TYPE_CHECKING = False  # typing's own flag, without importing typing; type checkers take the branch below
if TYPE_CHECKING:  # imported on first use (see __getattr__); named here for type checkers
    from pterun.bundled import BundledProgram, VerificationResult
    from pterun.module import (IOInfo, Module, _get_operator_names, _get_registered_backend_names, _is_available,
                               _load_bundled_program_from_buffer, _load_for_executorch,
                               _load_for_executorch_from_buffer, _load_for_executorch_from_bundled_program)
    from pterun.runtime import Method, MethodMeta, Program, Runtime, TensorInfo, Verification

__version__ = "0.1.0"

__all__ = [
    "Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Verification", "BundledProgram", "Module", "IOInfo",
    "VerificationResult",
    "PterunError", "InvalidProgramError", "InvalidArgumentError", "MethodNotFoundError", "NamedDataNotFoundError",
    "OperatorMissingError", "NotSupportedError", "DelegateError", "KernelError", "VerificationError", "__version__",
    # ExecuTorch's pybindings functions, spelt as ExecuTorch spells them (``from pterun import _load_for_executorch``)
    "_load_for_executorch", "_load_for_executorch_from_buffer", "_load_for_executorch_from_bundled_program",
    "_load_bundled_program_from_buffer", "_get_operator_names", "_get_registered_backend_names", "_is_available",
]

# where each name imported on first use lives
_LAZY = {name: "pterun.runtime" for name in ("Runtime", "Program", "Method", "MethodMeta", "TensorInfo",
                                             "Verification")}
_LAZY.update({name: "pterun.bundled" for name in ("BundledProgram", "VerificationResult")})
_LAZY.update({name: "pterun.module" for name in ("Module", "IOInfo", "_load_for_executorch",
                                                 "_load_for_executorch_from_buffer",
                                                 "_load_for_executorch_from_bundled_program",
                                                 "_load_bundled_program_from_buffer", "_get_operator_names",
                                                 "_get_registered_backend_names", "_is_available")})


def __getattr__(name: str) -> object:
    import importlib

    where = _LAZY.get(name)
    if where is not None:
        value = getattr(importlib.import_module(where), name)
        globals()[name] = value  # found directly from now on
        return value
    if not name.startswith("__"):
        # ``import pterun; pterun.threads.set_num_threads(2)`` worked when the runtime came with the package, and
        # ``from pterun import dtypes`` asks here first: the submodule is imported (no search of the path before)
        try:
            return importlib.import_module(f"pterun.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"pterun.{name}":
                raise
    raise AttributeError(f"module 'pterun' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public names, the ones imported on first use too; not the helpers above, nor submodules loaded so far
    return sorted(__all__)
