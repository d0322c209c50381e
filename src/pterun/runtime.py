"""The public facade, shaped like ``executorch.runtime``: Runtime, Program, Method, MethodMeta, TensorInfo.

Where programs come from is :mod:`pterun.sources`; how inputs are checked and converted, and outputs handed back,
:mod:`pterun.convert`; everything a method is made of, :mod:`pterun.interp`.

Example::

    >>> import numpy as np
    >>> from pterun import Runtime
    >>> program = Runtime.get().load_program("model.pte")                       # doctest: +SKIP
    >>> outputs = program.load_method("forward").execute([np.ones((1, 3), np.float32)])  # doctest: +SKIP
"""

from __future__ import annotations

import enum
import functools
import os
import threading
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from pterun import config, threads
from pterun._fpstate import quiet, restore
from pterun.convert import InputChecks, import_torch, torch_output
from pterun.delegates import BACKENDS, DelegateInfo, delegate_info
from pterun.errors import MethodNotFoundError, NamedDataNotFoundError, PterunError
from pterun.format.program import ProgramFile, read_program
from pterun.interp.method import MethodRunner
from pterun.meta import MethodMeta, TensorInfo
from pterun.sources import DataPath, ProgramSource, guard, open_data_files, open_source

if TYPE_CHECKING:
    from pterun.bundled import BundledProgram
    from pterun.interp.observe import Event, Hook, TraceEntry

__all__ = ["Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Verification", "BackendRegistry",
           "OperatorRegistry"]

class Verification(enum.IntEnum):
    """How much of a program is checked at load: ``Minimal`` parses a method when it is first used,
    ``InternalConsistency`` (the default) parses and validates every method up front."""

    Minimal = 0
    InternalConsistency = 1


def _check_engine_available(settings: config.Settings) -> None:
    """A program loaded with engine "litert" fails now, not at its first delegate, where LiteRT is missing."""
    if settings.engine == "litert":
        from pterun.delegates.xnnpack.litert_engine.env import available, unavailable_error

        why = available()
        if why is not None:
            raise unavailable_error(why)


class BackendRegistry:
    """Which delegate backends this runtime can run."""

    @property
    def registered_backend_names(self) -> list[str]:
        return list(BACKENDS)

    def is_available(self, backend_name: str) -> bool:
        try:
            return bool(BACKENDS[backend_name].is_available())
        except KeyError:
            return False

    def __repr__(self) -> str:
        return f"BackendRegistry({self.registered_backend_names})"


class OperatorRegistry:
    """Which operators this runtime has kernels for."""

    @property
    def operator_names(self) -> set[str]:
        from pterun.kernels import KERNELS
        return set(KERNELS)

    def __repr__(self) -> str:
        return f"OperatorRegistry({len(self.operator_names)} operators)"


class Runtime:
    """Entry point: ``Runtime.get().load_program(path)``."""

    def __init__(self, *, tensor_output: str | None = None, num_threads: int | None = None,
                 engine: str | None = None, fold: bool | None = None, seed: int | None = None,
                 merge_delegates: bool | None = None, cache: str | os.PathLike | bool | None = None):
        """Args:
            tensor_output: default for :meth:`load_program`'s ``tensor_output``.
            engine: default for :meth:`load_program`'s ``engine``.
            fold: compute instructions whose inputs are all constants once, at method load (constant
                folding), and read an input element into a scalar once where a program repeats the read
                (:mod:`pterun.interp.repeats`). ``None``: on, unless ``$PTERUN_NO_FOLD`` is set when a program
                is loaded.
            merge_delegates: run neighbouring XNNPACK delegate calls (with the ``mean`` operators between them)
                as one LiteRT graph, when LiteRT runs them: an exported LLM's decode step makes ~120 delegate calls
                where ~25 do. Intermediate values inside a merged call are not in the method's memory, so
                :meth:`Method.trace` shows the merged call as one instruction; turn it off to trace every
                delegate call. ``None``: on, unless ``$PTERUN_NO_MERGE`` is set when a program is loaded.
            seed: seeds the random generator each loaded method owns for its random operators (rand, randn,
                dropout), so runs are reproducible; ``None``: seeded from OS entropy.
            num_threads: the threads this runtime's methods compute on: large convolutions and matrix products
                are split over this many threads (the caller's and pterun's own, see :mod:`pterun.threads`),
                while they load and run. It belongs to this Runtime: another Runtime in the same process keeps
                its own. ``None``: the process default, as it is when a method runs
                (:func:`pterun.threads.set_num_threads`, else ``$PTERUN_NUM_THREADS``, else the cores the
                process may use). BLAS is held at one thread when a program is loaded, unless a BLAS variable
                such as ``OPENBLAS_NUM_THREADS`` is set.

            cache: where LiteRT keeps XNNPACK's packed weights between processes, so a large program loads
                without packing them again (README, "Loading"): a directory, True for pterun's folder in the
                user's cache directory (``~/.cache/pterun`` on Linux), or False for none. Entries are keyed by
                the translated model's bytes (weights included), LiteRT's version and the CPU; the files used
                longest ago go when the directory holds more than ``$PTERUN_CACHE_MAX_MB`` (4096). ``None``:
                ``$PTERUN_CACHE_DIR`` when set (and ``$PTERUN_NO_CACHE`` is not), else no cache.

        Raises:
            ValueError: ``num_threads`` (or ``$PTERUN_NUM_THREADS``) is not a positive integer.
            TypeError: ``num_threads`` is not an integer (``2.5`` is not taken as 2), or ``cache`` is not a
                directory, True or False.
        """
        self.backend_registry = BackendRegistry()
        self.operator_registry = OperatorRegistry()
        self.tensor_output = None if tensor_output is None else config.check_tensor_output(tensor_output)
        self.engine = None if engine is None else config.check_engine(engine)
        self.fold = fold
        self.merge_delegates = merge_delegates
        self.seed = seed
        self.cache = config.check_cache(cache)
        self._threads = None if num_threads is None else config.check_threads(num_threads)
        if num_threads is not None:
            threads.hold_blas(again=True)
        else:
            threads.num_threads()  # a bad $PTERUN_NUM_THREADS fails here, not inside a kernel

    def _choices(self) -> dict:
        """This Runtime's own settings (None: not chosen), the second layer of :func:`pterun.config.resolve`."""
        return {"engine": self.engine, "tensor_output": self.tensor_output, "fold": self.fold,
                "merge": self.merge_delegates, "seed": self.seed, "num_threads": self._threads, "cache": self.cache}

    @property
    def num_threads(self) -> int:
        """The threads this runtime's methods compute on (see ``num_threads=``; without it, the process
        default as it is now)."""
        return threads.resolve_threads(self._threads)

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def get() -> "Runtime":
        """The process-wide runtime."""
        return Runtime()

    def load_program(self, data: ProgramSource, *, data_path: DataPath | None = None,
                     verification: Verification = Verification.InternalConsistency,
                     tensor_output: str | None = None, engine: str | None = None) -> "Program":
        """Load a program from a path (memory-mapped), bytes, bytearray, memoryview or a file-like object.

        Args:
            data: the ``.pte`` program.
            data_path: ``.ptd`` external-data file(s) — a path or bytes, or a list of them — for programs whose
                weights live outside the ``.pte``. Memory-mapped like the program; nothing is copied.
            verification: ``Verification.InternalConsistency`` validates every method now;
                ``Verification.Minimal`` defers each method's validation to its first use.
            tensor_output: ``"numpy"`` or ``"torch"``: what tensor outputs of this program are. Decided here,
                once; defaults to the Runtime's setting, then ``$PTERUN_TENSOR_OUTPUT``, then
                ``$EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT`` (``"executorch"`` means numpy), then ``"numpy"``.
            engine: what runs XNNPACK-delegated graphs: ``"litert"`` (LiteRT, on XNNPACK itself), ``"numpy"``
                (pterun's NumPy engine) or ``"auto"``: LiteRT where it is installed and takes the whole delegate
                graph, else NumPy. A graph LiteRT cannot take runs on NumPy under either, with the reason in
                :attr:`Method.delegates`. Decided here, once; defaults to the Runtime's setting, then
                ``$PTERUN_ENGINE``, then ``"auto"``.

        Raises:
            InvalidProgramError: the data is not a valid program.
            TypeError: ``data`` is of an unsupported type.
            DelegateError: ``engine="litert"`` but LiteRT is not installed.
        """
        settings = config.resolve({"engine": None if engine is None else config.check_engine(engine),
                                   "tensor_output": None if tensor_output is None else
                                   config.check_tensor_output(tensor_output)}, self._choices())
        _check_engine_available(settings)
        threads.num_threads()  # resolved (and a bad $PTERUN_NUM_THREADS reported) before anything runs
        threads.hold_blas()  # once per process
        buf, name, keepalive = open_source(data)
        pf = guard(read_program, buf, name, name=name)
        if verification == Verification.InternalConsistency:
            guard(pf.verify_all, name=name)
        external = open_data_files(data_path)
        return Program(pf, settings, (keepalive, [k for _, k in external]), tuple(p for p, _ in external))

    def load_bundled_program(self, data: ProgramSource, *, data_path: DataPath | None = None,
                             verification: Verification = Verification.InternalConsistency,
                             tensor_output: str | None = None, engine: str | None = None) -> BundledProgram:
        """Load a bundled program (``.bpte``): its embedded program plus test inputs and expected outputs.

        Returns a :class:`~pterun.BundledProgram`; ``.program`` is the embedded :class:`Program` and
        ``.verify(method, testset_idx)`` runs a test case and checks its outputs.
        """
        from pterun.bundled import BundledProgram
        from pterun.format.bundled import read_bundled

        buf, name, keepalive = open_source(data, what="bundled program")
        bf = guard(read_bundled, buf, name, name=name)
        program = self.load_program(bf.program, data_path=data_path, verification=verification,
                                    tensor_output=tensor_output, engine=engine)
        program._pf.name = f"{name} (embedded program)"
        program._keepalive = (program._keepalive, keepalive)
        return BundledProgram(bf, program)


class Program:
    """A loaded ``.pte`` program. Methods load lazily with :meth:`load_method` and are cached."""

    def __init__(self, pf: ProgramFile, settings: config.Settings, keepalive: Any, external: tuple = ()):
        self._pf = pf
        self._settings = settings  # decided once, by load_program; every method loads with them
        self._external = external
        self._keepalive = keepalive
        self._torch = import_torch() if settings.tensor_output == "torch" else None
        self._methods: dict[str, Method] = {}
        self._shared_arenas: dict = {}
        self._lock = threading.Lock()

    @property
    def settings(self) -> config.Settings:
        """How this program loads and runs (:class:`pterun.config.Settings`), decided when it was loaded."""
        return self._settings

    @property
    def tensor_output(self) -> str:
        """``"numpy"`` or ``"torch"``: fixed when the program was loaded."""
        return self._settings.tensor_output

    @property
    def engine(self) -> str:
        """``"auto"``, ``"numpy"`` or ``"litert"``: the engine choice for XNNPACK delegates, fixed at load. What
        each delegate runs on is in :attr:`Method.delegates`."""
        return self._settings.engine

    @property
    def method_names(self) -> set[str]:
        return {h.name for h in self._pf.plan_headers}

    @property
    def file(self) -> ProgramFile:
        """The parsed container (:class:`pterun.format.program.ProgramFile`: headers, typed plans, segments), for
        tools such as :mod:`pterun.summary`."""
        return self._pf

    def named_data(self, key: str) -> np.ndarray:
        """The bytes stored under ``key``: in the external data files given at load (first), else in the program.
        Raises :class:`~pterun.NamedDataNotFoundError` (a KeyError) when neither has it."""
        for ptd in self._external:
            if key in ptd:
                return ptd.data(key)
        if key in self._pf.named_data:
            return self._pf.named(key)
        raise NamedDataNotFoundError(f"no named data with key {key!r} in {self._pf.name}"
                       + "".join(f" or {p.name}" for p in self._external))

    def _plan(self, name: str):
        idx = self._pf.plan_index(name)
        if idx is None:
            raise MethodNotFoundError(f"no method named {name!r} in {self._pf.name}; it has "
                                      f"{sorted(self.method_names)}")
        return guard(self._pf.plan, idx, name=self._pf.name)

    def metadata(self, method_name: str) -> MethodMeta:
        """MethodMeta of a method, without loading it."""
        return MethodMeta(self._plan(method_name))

    def load_method(self, name: str) -> "Method":
        """Load (once; later calls return the same object) the method called ``name``.

        Raises:
            MethodNotFoundError: no such method (a KeyError).
            OperatorMissingError: the method uses operators pterun has no kernel for (all listed).
            DelegateError: the method calls a delegate backend that is not available.
        """
        with self._lock:
            m = self._methods.get(name)
            if m is None:
                plan = self._plan(name)
                token = quiet()  # constants folded and delegates compiled at load: their numbers, not warnings
                prev = threads.use_threads(self._settings.num_threads)  # folding at load runs on its threads
                try:
                    runner = guard(functools.partial(MethodRunner, self._pf, plan, self._settings,
                                                      shared_arenas=self._shared_arenas, external=self._external),
                                    name=f"{self._pf.name}: method {name!r}")
                finally:
                    threads.use_threads(prev)
                    restore(token)
                m = self._methods[name] = Method(self, runner)
            return m

    def __repr__(self) -> str:
        return f"Program({self._pf.name!r}, methods={sorted(self.method_names)}, tensor_output={self.tensor_output!r})"


class Method:
    """One loaded method. Call :meth:`execute`; read :attr:`metadata`."""

    def __init__(self, program: Program, runner: MethodRunner):
        self._program = program
        self._runner = runner
        self._meta = MethodMeta(runner.plan)
        plan = runner.plan
        # (tag, desc, dtype): the dtype resolved once, not on every call
        self._check_inputs = InputChecks(plan.name, [plan.values[i] for i in plan.inputs])
        self._last_inputs: list | tuple = ()  # (array, shape, dtype) of the inputs _held checked last
        self._lock = program._lock if runner.uses_shared_arenas else runner.lock
        torch = program._torch
        self._wrap = torch_output(torch) if torch is not None else None

    @property
    def metadata(self) -> MethodMeta:
        return self._meta

    @property
    def name(self) -> str:
        return self._runner.name

    @property
    def delegates(self) -> list[DelegateInfo]:
        """One :class:`~pterun.delegates.DelegateInfo` (index, backend, engine, reason) per delegate: which engine
        runs it, and why not LiteRT when an XNNPACK delegate runs on NumPy although LiteRT was allowed."""
        r = self._runner
        return [delegate_info(i, d.backend_id, ex) for i, (d, ex) in enumerate(zip(r.plan.delegates, r.executors))]

    def execute(self, inputs: Sequence = (), *, hook: Hook | None = None) -> list:
        """Run the method on ``inputs`` and return its outputs as a list.

        ``hook``, when given, is called as ``hook(event, run)`` around every instruction (and every node of a
        delegate whose engine reports them): see :mod:`pterun.interp.observe`. Without it nothing is observed and
        nothing is paid for observing.

        The output contract:

        * Tensor outputs are NumPy arrays the caller owns: a later call never changes them. They export
          DLPack, so ``torch.from_dlpack``, ``cupy.from_dlpack`` and ``np.from_dlpack`` accept them.
          Int, Double and Bool outputs are Python ``int``, ``float`` and ``bool``.
        * Whether tensors come back as NumPy arrays or torch tensors was decided once, when the program
          was loaded (``Program.tensor_output``); importing torch later, in any thread, changes nothing.
          With ``"torch"``, outputs are ``torch.from_numpy`` views of the caller-owned arrays.
        * Inputs are NumPy arrays, DLPack-exporting objects (torch tensors; device arrays are copied to
          the host) or buffer-protocol objects, with exactly the dtype the method expects (never cast),
          and Python scalars for Int/Double/Bool inputs. They are never modified.
        * The call is thread-safe: concurrent calls of one method run one at a time.

        Raises:
            InvalidArgumentError: wrong number of inputs, dtype, rank or shape (names the input).
            KernelError: a kernel failed (names the operator and instruction; the cause is chained).
        """
        arrays = self._check_inputs(inputs)
        runner = self._runner
        with self._lock:
            # a method that is one LiteRT invoke: straight from and into the caller's arrays (pterun.interp.direct)
            outputs = None
            if hook is None and runner.direct is not None:
                try:
                    outputs = runner.direct(arrays)
                except PterunError:
                    raise
                except Exception as e:  # an index a merged graph checks before it gathers (IndexError), ...: as
                    # the call's step would report it (a KernelError naming the call, the cause chained)
                    raise runner.kernel_error(runner.chains[0].info, 0, e) from e
            if outputs is None:
                runner.set_inputs(arrays)
                runner.run(hook)
                outputs = runner.collect_outputs()
        if self._wrap is not None:
            outputs = [self._wrap(o) if isinstance(o, np.ndarray) else o for o in outputs]
        return outputs

    __call__ = execute

    def _held(self, inputs: list) -> list:
        """:meth:`execute` for pterun's own loops (:mod:`pterun.llm`) without what it does for a caller: the
        outputs are the method's own arrays (never torch tensors), read before its next call; the same input
        arrays again (by identity, dtype and shape: a decode step's) are not checked again."""
        last = self._last_inputs
        if len(inputs) != len(last) or any(x is not a or x.shape != shape or x.dtype != dtype
                                           for x, (a, shape, dtype) in zip(inputs, last)):
            arrays = self._check_inputs(inputs)
            same = all(type(a) is np.ndarray and a is x for a, x in zip(arrays, inputs))
            self._last_inputs = [(a, a.shape, a.dtype) for a in arrays] if same else ()
            inputs = arrays
        runner = self._runner
        with self._lock:
            runner.set_inputs(inputs)
            runner.run()
            return runner.collect_outputs(own=False)

    def trace(self, inputs: Sequence = ()) -> list[TraceEntry]:
        """Run the method once on ``inputs`` and return a :class:`~pterun.interp.observe.TraceEntry` (chain,
        instruction index, kind, operator name, delegate node, folded, copies of the outputs) for every
        instruction that wrote something, in execution order, with instructions computed at load (``folded``)
        in their program place and XNNPACK delegates broken down per node where the engine allows it (NumPy
        engine: per node; LiteRT: per DelegateCall). :mod:`pterun.trace` saves and compares traces."""
        from pterun.interp.observe import trace
        arrays = self._check_inputs(inputs)
        runner = self._runner
        with self._lock:
            runner.set_inputs(arrays)
            token = quiet()
            try:
                return trace(runner)
            finally:
                restore(token)

    @property
    def steps(self) -> list[Event]:
        """What one call executes: an :class:`~pterun.interp.observe.Event` per step, chain by chain, in program
        order (instructions folded at load, repeated scalar reads of an input (:mod:`pterun.interp.repeats`) and
        FreeCalls in chains without jumps are not steps)."""
        return [ev for chain in self._runner.events for ev in chain]

    @property
    def folded(self) -> list[Event]:
        """The instructions computed once at load (constant folding), as :class:`~pterun.interp.observe.Event`."""
        return list(self._runner.folded_events)

    def __repr__(self) -> str:
        return f"Method({self.name!r}, inputs={self._meta.num_inputs()}, outputs={self._meta.num_outputs()})"
