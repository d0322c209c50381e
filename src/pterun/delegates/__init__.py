"""Delegate backends: the registry ``DelegateCall`` instructions resolve against at method load.

A backend turns a delegate's processed blob into an executor once, at ``load_method``; each
``DelegateCall`` then calls ``executor.execute(args)`` where ``args`` are the method's live values at the
call's argument indices: delegate inputs first, then delegate outputs (runtime
:class:`~pterun.interp.tensor.Tensor` objects, or Python scalars). The executor reads ``t.array`` of the
inputs and writes results with ``t.write(result)`` (which resizes dynamic outputs and casts).

Example::

    >>> from pterun.delegates import BACKENDS
    >>> sorted(BACKENDS)                 # doctest: +SKIP
    ['XnnpackBackend']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

__all__ = ["Backend", "DelegateContext", "BACKENDS", "register_backend"]


@dataclass(frozen=True)
class DelegateContext:
    """What a backend may need at init besides its blob."""

    program_name: str
    method_name: str
    delegate_index: int
    #: Look up a named-data blob (program ``named_data`` and any ``.ptd`` files) as a read-only uint8 array;
    #: raises :class:`~pterun.errors.MethodNotFoundError` for an unknown key.
    named_data: Callable[[str], np.ndarray]


class Executor(Protocol):
    def execute(self, args: list) -> None: ...


class Backend(Protocol):
    name: str

    def is_available(self) -> bool: ...

    def init(self, blob: np.ndarray, compile_specs: tuple[tuple[str, bytes], ...], ctx: DelegateContext) -> Executor:
        """Compile ``blob`` once; raise :class:`~pterun.errors.DelegateError` for anything it cannot run."""
        ...


BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    if backend.name in BACKENDS:
        raise RuntimeError(f"backend {backend.name!r} is registered twice")
    BACKENDS[backend.name] = backend
    return backend


from pterun.delegates import xnnpack  # noqa: E402,F401  (registers XnnpackBackend)
