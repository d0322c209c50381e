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

import importlib
from collections.abc import MutableMapping
from typing import Callable, NamedTuple, Protocol

import numpy as np

__all__ = ["Backend", "DelegateContext", "DelegateInfo", "BACKENDS", "register_backend"]


class DelegateContext:
    """What a backend may need at init besides its blob.

    ``named_data(key)`` looks up a named-data blob (the program's ``named_data`` and any ``.ptd`` files) as a
    read-only uint8 array; it raises :class:`~pterun.errors.NamedDataNotFoundError` for an unknown key.
    ``engine`` is the program's engine choice, ``"auto"``, ``"numpy"`` or ``"litert"`` (backends with a single
    engine ignore it). ``call_args`` lists, for each DelegateCall of this delegate, the largest element count
    each argument can hold (None for an argument that is not a tensor), so a backend can check at load that its
    graph fits the memory the program gives it. ``num_threads`` is the thread count of the Runtime that loads
    the method (an engine that fixes its threads at load, as LiteRT does, takes it from here).
    ``dynamic_sizes`` are the upper bounds of the dims in which the method's dynamic inputs may vary (a token
    count's 511), and ``dynamic_args`` says, per argument of the first DelegateCall, whether its tensor is
    dynamic: an engine that sizes its memory at load (LiteRT) prepares such inputs with those dims at 1 and grows
    when a call brings larger ones, instead of holding memory for the upper bound from the start.
    ``finish`` is a list shared by every delegate of the method: a backend may leave there objects whose
    ``finish()`` the method calls once all its delegates are initialised (LiteRT builds the interpreters of the
    whole method together), or None where nobody will (each delegate is then ready when ``init`` returns).
    """

    __slots__ = ("program_name", "method_name", "delegate_index", "named_data", "engine", "call_args", "num_threads",
                 "dynamic_sizes", "dynamic_args", "finish")

    def __init__(self, program_name: str, method_name: str, delegate_index: int,
                 named_data: Callable[[str], np.ndarray], engine: str = "auto", call_args: tuple = (),
                 num_threads: int = 1, dynamic_sizes: frozenset = frozenset(), dynamic_args: tuple = (),
                 finish: list | None = None):
        self.program_name = program_name
        self.method_name = method_name
        self.delegate_index = delegate_index
        self.named_data = named_data
        self.engine = engine
        self.call_args = call_args
        self.num_threads = num_threads
        self.dynamic_sizes = dynamic_sizes
        self.dynamic_args = dynamic_args
        self.finish = finish


class DelegateInfo(NamedTuple):
    """How one delegate of a loaded method runs: its ``index`` in the method, its ``backend``, the ``engine`` that
    runs it (``"litert"`` or ``"numpy"`` for XNNPACK; None for a backend with a single engine) and, when the
    XNNPACK delegate runs on the NumPy engine although LiteRT was allowed, the ``reason``."""

    index: int
    backend: str
    engine: str | None
    reason: str | None


def delegate_info(index: int, backend: str, executor) -> DelegateInfo:
    """The :class:`DelegateInfo` of one initialised executor."""
    return DelegateInfo(index, backend, getattr(executor, "engine", None), getattr(executor, "engine_reason", None))


class Executor(Protocol):
    def execute(self, args: list) -> None: ...


class Backend(Protocol):
    name: str

    def is_available(self) -> bool: ...

    def init(self, blob: np.ndarray, compile_specs: tuple[tuple[str, bytes], ...], ctx: DelegateContext) -> Executor:
        """Compile ``blob`` once; raise :class:`~pterun.errors.DelegateError` for anything it cannot run."""
        ...

    # Optional, for backends that can run several delegate calls as one (pterun.interp.merge):
    # absorbs(op) -> bool: whether its merged graph can hold an operator (an interp.merge.Absorbed);
    # merge(parts, blobs, ctx, outside, tensors) -> (executor, argument slots) | None: one executor for a run
    # of parts (DelegateParts and Absorbed operators, in order), or None to leave the calls separate.


class _Registry(MutableMapping):
    """Backends by name. Built-in backends are imported on first lookup, keeping ``import pterun`` light."""

    def __init__(self, lazy: dict[str, str]):
        self._loaded: dict[str, Backend] = {}
        self._lazy = dict(lazy)  # name -> module that registers it when imported

    def __getitem__(self, name: str) -> Backend:
        module = self._lazy.pop(name, None)
        if module is not None:
            importlib.import_module(module)
        return self._loaded[name]

    def __setitem__(self, name: str, backend: Backend) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = backend

    def __delitem__(self, name: str) -> None:
        if name not in self._loaded and name not in self._lazy:
            raise KeyError(name)
        self._loaded.pop(name, None)
        self._lazy.pop(name, None)

    def __iter__(self):
        return iter(sorted(set(self._loaded) | set(self._lazy)))

    def __len__(self) -> int:
        return len(set(self._loaded) | set(self._lazy))

    def __contains__(self, name) -> bool:
        return name in self._loaded or name in self._lazy


BACKENDS = _Registry({"XnnpackBackend": "pterun.delegates.xnnpack"})


def register_backend(backend: Backend) -> Backend:
    if backend.name in BACKENDS._loaded:
        raise RuntimeError(f"backend {backend.name!r} is registered twice")
    BACKENDS[backend.name] = backend
    return backend
