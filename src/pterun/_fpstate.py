"""Silencing NumPy's floating-point warnings around a whole call, cheaply.

Overflow to inf and 0/0 are part of a model's numbers, not errors, and a library should not write warnings
to stderr on its own, so every ``execute`` runs with NumPy's floating-point errors ignored. ``np.errstate``
costs about 2 µs to enter and leave, a tenth of a small program's call. NumPy 2 keeps that state in a
context variable; setting it directly costs about 0.2 µs and is exactly what ``errstate`` does. Where that
variable is not there (NumPy 1.x, or a future NumPy that moves it), ``np.errstate`` is used instead.

Example::

    >>> import numpy as np
    >>> token = quiet()
    >>> float(np.float32(1) / np.float32(0))
    inf
    >>> restore(token)
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["quiet", "restore", "warning_rules"]

# Casting a complex value to a real dtype drops its imaginary part, and NumPy says so with a ComplexWarning on
# stderr. ExecuTorch's kernels refuse such dtype mixes, so in pterun's own code the cast is an error: the kernel
# fails, and the method raises a KernelError naming the operator. Only warnings raised from pterun's modules are
# affected (found by fuzzing: a program declaring a complex tensor where a float one is expected).
def warning_rules() -> None:
    """Install pterun's warning filter (done at import; again after a ``warnings.simplefilter`` that reset it)."""
    warnings.filterwarnings("error", category=np.exceptions.ComplexWarning, module=r"pterun(\.|$)")


warning_rules()


def _errstate_quiet():
    state = np.errstate(all="ignore")
    state.__enter__()
    return state


def _errstate_restore(state) -> None:
    state.__exit__(None, None, None)


def _contextvar():
    """NumPy's floating-point state variable and its all-ignore value, or None when it cannot be used."""
    try:
        from numpy._core import _ufunc_config
    except ImportError:
        return None
    var = getattr(_ufunc_config, "_extobj_contextvar", None)
    if var is None:
        return None
    with np.errstate(all="ignore"):
        ignore = var.get()
    return var, ignore


_CV = _contextvar()
if _CV is not None:
    _VAR, _IGNORE = _CV

    def quiet():
        """Ignore floating-point errors in this context until :func:`restore`; returns what restore needs."""
        return _VAR.set(_IGNORE)

    restore = _VAR.reset
else:
    quiet, restore = _errstate_quiet, _errstate_restore
