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
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Callable, Protocol

import numpy as np

from pterun._record import Fields

__all__ = ["Backend", "DelegateContext", "DelegateInfo", "KernelArg", "BACKENDS", "register_backend"]


class DelegateContext(Fields):
    """What a backend may need at init besides its blob.

    ``named_data(key)`` looks up a named-data blob (the program's ``named_data`` and any ``.ptd`` files) as a
    read-only uint8 array; it raises :class:`~pterun.errors.NamedDataNotFoundError` for an unknown key.
    ``engine`` is the program's engine choice, ``"auto"``, ``"numpy"`` or ``"litert"`` (backends with a single
    engine ignore it). ``num_threads`` is the thread count of the Runtime that loads the method, resolved (an
    engine that fixes its threads at load, as LiteRT does, takes it from here). ``call_args`` lists, for each
    DelegateCall of this delegate, the largest element count each argument can hold (None for an argument that
    is not a tensor), so a backend can check at load that its graph fits the memory the program gives it.
    ``dynamic_sizes`` are the upper bounds of the dims in which the method's dynamic inputs may vary (a token
    count's 511), and ``dynamic_args`` says, per argument of the first DelegateCall, whether its tensor is
    dynamic: an engine that sizes its memory at load (LiteRT) prepares such inputs with those dims at 1 and grows
    when a call brings larger ones, instead of holding memory for the upper bound from the start.
    ``finish`` is a list shared by every delegate of the method: a backend may leave there objects whose
    ``finish()`` the method calls once all its delegates are initialised (LiteRT builds the interpreters of the
    whole method together), or None where nobody will (each delegate is then ready when ``init`` returns).
    ``cache_dir`` is the directory a backend may keep what it prepares at load in between processes (XNNPACK's
    packed weights), ``""`` when the program's settings turn the cache off. ``exact`` says that the method
    quantizes activations dynamically (see :meth:`Backend.quantizes`): a merged graph must then give every
    operator it holds bit for bit (see :meth:`Backend.absorbs`).
    """

    program_name: str
    method_name: str
    delegate_index: int
    named_data: Callable[[str], np.ndarray]
    engine: str = "auto"
    num_threads: int = 1
    call_args: tuple = ()
    dynamic_sizes: frozenset = frozenset()
    dynamic_args: tuple = ()
    finish: list | None = None
    cache_dir: str = ""
    exact: bool = False


class KernelArg(Fields):
    """A tensor argument of an operator a merged graph holds as a kernel (the ``kernel`` form of
    :class:`pterun.interp.merge.Absorbed`, whose ``attrs["args"]`` are the operator's schema arguments with the
    tensors replaced by these): ``out`` says whether the operator writes it, ``index`` is its position among the
    operator's inputs (or outputs), ``shape`` and ``dtype`` what the tensor holds, ``const`` whether it is a
    constant of the program (read-only: weights), ``given`` whether it is one of the method's inputs (what the
    caller passed, unchecked: a merged graph checks an index there before each call, as the kernel would)."""

    out: bool
    index: int
    shape: tuple
    dtype: np.dtype
    const: bool = False
    given: bool = False


class DelegateInfo(Fields):
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


class Backend:
    """A delegate backend. ``init`` is what every backend has; the rest are hooks with defaults that say "nothing
    to offer", which a backend overrides where it can do better:

    * ``outputs(blob)``: which DelegateCall arguments the delegate writes (the rest it reads), so load passes can
      follow values through it (:mod:`pterun.interp.access`); None: not known, every argument counts as read.
    * ``absorbed_forms``: operator name -> the form (:class:`pterun.interp.merge.Absorbed` ``op``) in which a
      merged graph can hold that operator between two of its delegate calls (``"kernel"``: the operator itself,
      its arguments fixed at load but the tensors, :class:`KernelArg`; a tuple: forms tried in order, where the first
      does not fit the arguments); ``compiles(engine)`` whether runs of such
      operators alone become merged calls too; ``merges`` says whether the backend
      builds merged calls at all, and ``merge(...)`` builds one (:mod:`pterun.interp.merge`), or declines with
      None; ``merge_bytes`` bounds the bytes of delegates one merged call holds, as ``weight_bytes(blob)`` counts
      them (None: no bound).
    * ``describe(blob, named_data, engine)``: what ``pterun inspect`` shows of a payload, as JSON-ready values.
    """

    name: str = ""
    merges: bool = False
    merge_bytes: int | None = None
    absorbed_forms: Mapping[str, str | tuple] = MappingProxyType({})

    def is_available(self) -> bool:
        return True

    def weight_bytes(self, blob: np.ndarray) -> int:
        """The bytes a delegate's payload brings to a merged call (:attr:`merge_bytes`): its size by default."""
        return int(np.asarray(blob).nbytes)

    def init(self, blob: np.ndarray, compile_specs: tuple[tuple[str, bytes], ...], ctx: DelegateContext) -> Executor:
        """Compile ``blob`` once; raise :class:`~pterun.errors.DelegateError` for anything it cannot run."""
        raise NotImplementedError

    def outputs(self, blob: np.ndarray) -> frozenset[int] | None:
        return None

    def absorbs(self, op, exact: bool = False) -> bool:
        """Whether a merged graph can hold the operator ``op`` (an :class:`pterun.interp.merge.Absorbed`); with
        ``exact``, only where the graph gives the operator's own numbers bit for bit (see :meth:`quantizes`)."""
        return False

    def quantizes(self, blob: np.ndarray) -> bool:
        """Whether the delegate quantizes activations dynamically. Its method's merged graphs then hold only
        operators they compute bit for bit (``absorbs(op, exact=True)``): one ulp upstream can move a rounding tie
        of that quantization, and the output a whole quantization step."""
        return False

    def compiles(self, engine: str) -> bool:
        """Whether, on ``engine``, the backend also compiles runs of the operators it holds where none of its
        delegate calls is (a program without delegates): ``merge`` then gets runs of Absorbed operators alone."""
        return False

    def merge(self, parts, blobs: dict, ctx: DelegateContext, outside, tensors: list, shared):
        """One executor for a run of ``parts`` (DelegateParts and Absorbed operators, in order), as (executor,
        argument slots), or None to leave the calls separate."""
        return None

    def describe(self, blob: np.ndarray, named_data: Callable[[str], np.ndarray], engine: str) -> dict:
        return {}


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
