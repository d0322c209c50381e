"""The LiteRT engine's plans: a typed XNNPACK graph translated at load into one TFLite model, run by LiteRT.

LiteRT (``ai-edge-litert``, the TensorFlow Lite runtime) runs CPU graphs with XNNPACK, the library ExecuTorch's
XNNPACK delegate runs. :func:`~.translate.translate` turns a :class:`~.graph.Graph` into TFLite model bytes
in memory; :func:`build` creates the interpreter with pterun's thread count, checks that LiteRT's XNNPACK delegate
took *every* operator (LiteRT's builtin kernels round differently, so a partly delegated graph is refused), and
returns a :class:`LiteRTPlan` whose ``execute(args)`` has the NumPy plan's contract.

Anything the translation does not cover raises :class:`Unsupported` with the reason; anything missing from the
installation raises :class:`Unavailable`. The caller then runs the graph on the NumPy engine.

Example::

    >>> plan = build(Graph.read(blob, named_data), num_threads=2)   # doctest: +SKIP
    >>> plan.execute([input_tensor, output_tensor])                  # doctest: +SKIP
"""

from __future__ import annotations

import operator
import os
import threading
import weakref
from functools import partial

import numpy as np

from pterun._log import logger
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.binding import input_array, write_output
from pterun.delegates.xnnpack.litert_engine.adapter import Subgraph
from pterun.delegates.xnnpack.litert_engine.compiled import Compiled, open_prepared
from pterun.delegates.xnnpack.litert_engine.env import (Unavailable, Unsupported, available, capture_native_stderr,
                                                        modules)
from pterun.delegates.xnnpack.litert_engine.memory import release_packed, release_sources
from pterun.delegates.xnnpack.litert_engine.prepare import declared_at, interpreter_for, load_shapes, prepared_shapes
from pterun.delegates.xnnpack.litert_engine.translate import combine, translate, translate_part
from pterun.errors import DelegateError

__all__ = ["Batch", "Unavailable", "Unsupported", "LiteRTPlan", "build", "pending", "translate", "available"]


_ORDERS = tuple(tuple(range(n)) for n in range(65))  # the contiguous dim order of each rank NumPy allows
_ARRAY = operator.attrgetter("array")


def _getter(indices: list):
    """``args`` -> the tuple of ``args[i]`` for ``indices``."""
    if len(indices) == 1:
        i, = indices
        return lambda args: (args[i],)
    return operator.itemgetter(*indices) if indices else (lambda args: ())


class LiteRTPlan:
    """An interpreter over the translated model. ``execute(args)`` sets the inputs (resizing the interpreter's
    tensors when a shape changes), invokes, and writes each output into its DelegateCall tensor (one copy out
    of LiteRT's arena). Calls are serialized: an interpreter runs one invocation at a time."""

    engine = "litert"
    engine_reason: str | None = None

    def __init__(self, interp, graph: G.Graph, tr, num_threads: int, fallback=None, shapes=None,
                 load_dims=None, cache_dir: str = ""):
        in_idx, out_idx = tr.inputs, tr.outputs
        self._fallback = fallback  # () -> a NumPy plan, for input shapes this model cannot take
        self._numpy = None
        self._graph = graph  # to build the interpreter again in a forked child
        self.fixed_shape = tr.fixed_shape
        self.num_threads = num_threads
        self.inputs = [(v.external_id, t, np.dtype(G.STORAGE_DTYPES[v.datatype])) for v, t in zip(graph.inputs, in_idx)]
        self.outputs = [(v.external_id, t) for v, t in zip(graph.outputs, out_idx)]
        self._lock = threading.Lock()
        self._load_dims = load_dims  # to prepare a rebuilt interpreter (forked child) as this one was
        self._cache_dir = cache_dir  # the packed-weight cache's directory ("": off), see .compiled
        self._pending = None  # (translated part, input resizes, shapes) until a Batch builds the interpreter
        self._interp = self._model = self._views = self._set = self._invoke = None
        self._seen = None
        self._steady = None  # see _settle
        ins, outs = [e for e, _, _ in self.inputs], [e for e, _ in self.outputs]
        self._get_ins, self._get_outs = _getter(ins), _getter(outs)
        if interp is not None:
            self._use(interp, tr.model, shapes)
        _PLANS.add(self)

    def _use(self, interp, model, shapes=None, sub: int | None = None, lock=None) -> None:
        """Run on ``interp``, an Interpreter or a :class:`.compiled.Compiled` (its subgraph ``sub`` when it holds
        several graphs, sharing ``lock``)."""
        self._interp = interp
        self._model = model  # the interpreter reads its constants from these bytes
        self._shapes = dict(shapes) if shapes is not None else {
            t: tuple(int(d) for d in v.dims) for (_, t, _), v in zip(self.inputs, self._graph.inputs)}
        k = 0 if sub is None else sub
        # see .adapter: LiteRT's API past subgraph 0
        self._sub = interp.subgraph(k) if isinstance(interp, Compiled) else Subgraph(interp, k)
        self._set, self._invoke = self._sub.setter(), self._sub.invoker()
        self._views = {t: self._sub.viewer(t) for _, t in self.outputs}
        if sub is not None:
            self._lock = lock
        self._seen = None  # the input tensors of the last call, when their arrays could be passed as they are
        self._steady = None

    def _forked(self) -> None:
        """In a forked child: the interpreter's thread pool has no threads here, so it is neither run nor
        destroyed (destroying it joins threads that only the parent has); the first call builds a new one."""
        self._lock = threading.Lock()  # another thread of the parent may have held it at the fork
        self._steady = None
        if self._invoke is not None:
            self._interp = self._model = self._views = self._set = self._invoke = None

    def _rebuild(self, pending=None) -> None:
        """An interpreter of its own (in a forked child, or where no Batch built one); ``pending``: its translation."""
        self._pending = None
        self._lock = threading.Lock()
        interp, tr, shapes = interpreter_for(self._graph, self.num_threads, self._load_dims, self._cache_dir,
                                             _INTERPRETERS.add, pending)
        self._use(interp, tr.model, shapes)

    @property
    def arity(self) -> int:
        return max([e for e, *_ in self.inputs] + [e for e, _ in self.outputs], default=-1) + 1

    def execute(self, args: list) -> None:
        st = self._steady
        if st is not None and self._steady_call(st, args):  # the same tensors and arrays as the last call
            return
        arrays = self._input_arrays(args)
        with self._lock:
            if self._numpy is not None:
                return self._numpy.execute(args)
            if self._invoke is None:  # first call in a forked child (or of a plan no Batch built)
                try:
                    self._rebuild()
                except Unsupported as e:
                    raise DelegateError(f"XNNPACK delegate (LiteRT engine) in a forked process: {e}") from None
            try:
                arrays = self._fit(arrays)
            except Unsupported as e:
                arrays = self._at_declared_dims(arrays, e)
                if arrays is None:
                    if self._fallback is None:
                        raise DelegateError(f"XNNPACK delegate (LiteRT engine): {e}") from None
                    self._switch_to_numpy(str(e))
                    return self._numpy.execute(args)
            try:
                for t, a in arrays:
                    if a.flags.c_contiguous:
                        self._set(t, a)
                    else:  # e.g. a channels-last input: one strided copy into LiteRT's buffer
                        self._sub.put(t, a)
                self._invoke()
            except (ValueError, RuntimeError) as e:
                raise DelegateError(f"XNNPACK delegate (LiteRT engine) failed: {e}") from e
            if self._copy_out(args) and self._seen is not None and all(a.flags.c_contiguous for _, a in arrays):
                self._settle(args)

    def _steady_call(self, st: tuple, args: list) -> bool:
        """Copy in, invoke and copy out where ``args`` bring the very tensors and arrays the steady state ``st``
        was made for; False (nothing done) otherwise."""
        tin, ain, pin, tout, aout, pout, _ = st
        try:
            x, y = self._get_ins(args), self._get_outs(args)
        except IndexError:  # reported by the checked path
            return False
        if not (all(map(operator.is_, x, tin)) and all(map(operator.is_, y, tout)) and
                all(map(operator.is_, map(_ARRAY, x), ain)) and all(map(operator.is_, map(_ARRAY, y), aout))):
            return False
        with self._lock:
            if self._steady is not st:  # something resized this interpreter meanwhile
                return False
            for put, src in pin:
                put(src)
            try:
                self._invoke()
            except (ValueError, RuntimeError) as e:
                raise DelegateError(f"XNNPACK delegate (LiteRT engine) failed: {e}") from e
            for dst, src in pout:
                np.copyto(dst, src, casting="unsafe")
        return True

    def call_direct(self, arrays: list) -> list | None:
        """The outputs (new arrays, in external-output order) of a call on ``arrays`` (in external-input order),
        copied straight from and into this interpreter's memory (:mod:`pterun.interp.direct`); None, with nothing
        done, unless the steady state holds (see :meth:`_settle`) and the arrays are C-contiguous of its shapes
        (their dtypes are the method's: checked by the caller)."""
        st = self._steady
        if st is None:
            return None
        shapes, puts, gets = st[6]
        for a, shape in zip(arrays, shapes):
            if a.shape != shape or not a.flags.c_contiguous:
                return None
        with self._lock:
            if self._steady is not st:  # something resized this interpreter meanwhile
                return None
            for put, a in zip(puts, arrays):
                put(a)
            try:
                self._invoke()
            except (ValueError, RuntimeError) as e:
                raise DelegateError(f"XNNPACK delegate (LiteRT engine) failed: {e}") from e
            return [get() for get in gets]

    def _input_arrays(self, args: list) -> list:
        """(tensor index, array) of each input, its dtype and dim order checked (once for the same tensors)."""
        try:
            tensors = [args[ext] for ext, _, _ in self.inputs]
        except IndexError:
            raise DelegateError(f"XNNPACK delegate expects {self.arity} arguments, got {len(args)}") from None
        seen = self._seen
        if seen is not None and all(map(operator.is_, tensors, seen)):  # the same tensors as last time: their
            # dtype and dim order were checked then
            return [(t, x.array) for (_, t, _), x in zip(self.inputs, tensors)]
        arrays = [(t, input_array(args, ext, dt)) for ext, t, dt in self.inputs]
        plain = all(a is x.array for (_, a), x in zip(arrays, tensors))  # no transposed view was needed
        self._seen = tensors if plain else None
        return arrays

    def _fit(self, arrays: list) -> list:
        """The arrays as the interpreter takes them, resizing it where a call brings new input shapes (preparing a
        CompiledModel's signature at its first call); raises Unsupported for a shape this model cannot take."""
        shapes, resized = self._shapes, False
        for k, (t, a) in enumerate(arrays):
            if a.shape == shapes[t]:
                continue
            if _unit_dims_only(a.shape, shapes[t]):  # a 0-D scalar for a [1] value: the same bytes, and resizing
                # would have LiteRT prepare XNNPACK again, which then adds convolution biases after the sums
                # instead of starting from them as ExecuTorch does
                arrays[k] = (t, a.reshape(shapes[t]))
                continue
            if self.fixed_shape:
                raise Unsupported(f"input shape {list(a.shape)}: the model's SAME pool padding equals the graph's "
                                  f"padding only at {list(shapes[t])}")
            self._resize(t, a.shape)
            resized = True
        if resized or not self._sub.prepared:  # (a CompiledModel's first call prepares it: .compiled)
            self._reallocate()
        return arrays

    def _copy_out(self, args: list) -> bool:
        """Copy each output into its DelegateCall tensor; whether every one went the direct way (same shape, plain
        dim order), which the steady state needs."""
        direct = True
        for ext, t in self.outputs:
            got, dest = self._views[t](), args[ext]
            a = getattr(dest, "array", None)
            if a is not None and a.shape == got.shape and dest.dim_order == _ORDERS[a.ndim]:
                np.copyto(a, got, casting="unsafe")  # the common case, without write_output's checks
            else:
                write_output(args, ext, got)
                direct = False
        return direct

    def _settle(self, args: list) -> None:
        """Keep what the next call needs if it brings the same tensors, with the same arrays: arrays over this
        interpreter's input and output memory, paired with pterun's. Such a call then copies in, invokes and
        copies out, with no check to repeat (the shapes and dtypes were checked with these very arrays). Arrays
        over the interpreter's memory stay valid until its subgraph is resized (each subgraph has memory of its
        own), so every resize drops the steady state first."""
        x, y = self._get_ins(args), self._get_outs(args)
        pin = [(self._sub.input_copier(t), a.array) for (_, t, _), a in zip(self.inputs, x)]
        pout = tuple((a.array, self._views[t]()) for (_, t), a in zip(self.outputs, y))
        if not all(isinstance(m, np.ndarray) for m in [v for _, v in pout]) or any(c is None for c, _ in pin):
            return  # LiteRT gives a rank-0 tensor as a NumPy scalar, a copy of its memory: nothing to keep
        # a 0-D scalar for a [1] value: see execute
        pin = [(c, a.reshape(self._shapes[t])) for (c, a), (_, t, _) in zip(pin, self.inputs)]
        self._steady = (x, tuple(map(_ARRAY, x)), tuple(pin), y, tuple(map(_ARRAY, y)), pout, _direct(pin, x, pout))

    def _resize(self, t: int, shape: tuple) -> None:
        self._steady = None
        try:
            self._sub.resize(t, shape)
        except (ValueError, RuntimeError) as e:
            raise Unsupported(f"LiteRT cannot resize an input to {list(shape)}: {str(e).strip()[:200]}") from e
        self._shapes[t] = tuple(shape)

    def _reallocate(self) -> None:
        self._steady = None
        try:
            with capture_native_stderr():
                self._sub.allocate()
        except (ValueError, RuntimeError) as e:
            raise Unsupported(f"LiteRT cannot reshape the graph: {str(e).strip()[:200]}") from e

    def _at_declared_dims(self, arrays: list, why: Exception) -> list | None:
        """``arrays`` fitted to an interpreter prepared again at the declared dims (None: that cannot either)."""
        if self._load_dims is None:
            return None
        logger().debug("LiteRT engine: %s; prepared again at the declared dims", why)
        self._load_dims = None
        try:
            self._rebuild()
            return self._fit(arrays)
        except Unsupported:
            return None

    def _switch_to_numpy(self, reason: str) -> None:
        """From now on run on the NumPy engine (an input shape the LiteRT model cannot take)."""
        self._steady = None
        self._numpy = self._fallback()
        self.engine, self.engine_reason = "numpy", reason
        self._interp = self._views = self._set = self._invoke = None  # the interpreter and its memory go
        logger().info("XNNPACK delegate moves to the NumPy engine: %s", reason)


def _direct(pin: list, x: list, pout: tuple) -> tuple:
    """(input shapes, copy-in functions, copy-out functions) of :meth:`LiteRTPlan.call_direct` in a steady state:
    each input as its pterun tensor is shaped, reshaped where LiteRT holds it otherwise (a 0-D scalar as [1]);
    each output a new array of its pterun tensor's shape and dtype."""
    shapes = tuple(t.array.shape for t in x)
    puts = tuple(copy if own.shape == shape else partial(_put_reshaped, copy, own.shape)
                 for (copy, own), shape in zip(pin, shapes))
    gets = tuple(src.copy if src.shape == dst.shape and src.dtype == dst.dtype else partial(_get_as, src, dst)
                 for dst, src in pout)
    return shapes, puts, gets


def _put_reshaped(copy, shape: tuple, a: np.ndarray) -> None:
    copy(a.reshape(shape))


def _get_as(src: np.ndarray, like: np.ndarray) -> np.ndarray:
    out = np.empty(like.shape, like.dtype)
    np.copyto(out, src, casting="unsafe")
    return out


def _unit_dims_only(shape: tuple, declared: tuple) -> bool:
    """Whether ``shape`` and ``declared`` differ only in dims of size 1 (the same elements in the same order)."""
    return tuple(d for d in shape if d != 1) == tuple(d for d in declared if d != 1)


#: A Batch joins the graphs of one method into interpreters of at most this much model (their constants): every
#: graph of an interpreter exists as model bytes before XNNPACK packs them, so a bigger one costs that much more
#: memory while the method loads.
GROUP_BYTES = 64 << 20


class Batch:
    """LiteRT plans of one method whose interpreters are built together once the method knows them all
    (:meth:`finish`). Plans with the same thread count share an interpreter, each graph a subgraph of it, so
    their calls share one XNNPACK thread pool: LiteRT gives every interpreter a pool of its own, and a decode step
    going through 15 of them woke 15 workers while the previous ones still spun on the other cores (a stack of
    49 8da4w delegates on two threads: 4.1-4.4 ms apart, 2.7-2.8 ms in one interpreter, ExecuTorch 2.7-2.9 ms).
    A graph XNNPACK does not take wholly runs on the NumPy engine, as it would alone; a group LiteRT refuses
    is built graph by graph instead. ``cache_dir``: the packed-weight cache's directory ("": off)."""

    def __init__(self, cache_dir: str = "") -> None:
        self.plans: list[LiteRTPlan] = []
        self.cache_dir = cache_dir

    def add(self, plan: LiteRTPlan) -> None:
        self.plans.append(plan)

    def finish(self) -> None:
        plans, self.plans = [p for p in self.plans if p._pending is not None], []
        groups: dict[int, list[list]] = {}
        filled: dict[int, int] = {}  # thread count -> model bytes in its last group
        for p in plans:  # same thread count, under GROUP_BYTES of model each (a bigger graph alone)
            if not p._pending[0].checkable():
                _build_alone(p)  # only an interpreter of its own lists what XNNPACK left to builtin kernels
                continue
            runs = groups.setdefault(p.num_threads, [[]])
            size = p._pending[0].nbytes
            if runs[-1] and filled[p.num_threads] + size > GROUP_BYTES:
                runs.append([])
                filled[p.num_threads] = 0
            runs[-1].append(p)
            filled[p.num_threads] = filled.get(p.num_threads, 0) + size
        for runs in groups.values():
            for members in runs:
                if len(members) == 1:
                    _build_alone(members[0])
                else:
                    _build_group(members)


def _build_alone(plan: LiteRTPlan) -> None:
    try:
        plan._rebuild(plan._pending)
    except Unsupported as e:
        plan._switch_to_numpy(str(e))


def _build_group(plans: list) -> None:
    Interpreter = modules()
    parts = [p._pending[0] for p in plans]
    try:
        laid = combine(parts)
        compiled = open_prepared(laid, plans[0].num_threads, plans[0]._cache_dir, [p._pending[1] for p in plans],
                                 external=not any(part.builtin for part in parts))
        if compiled is not None:
            _INTERPRETERS.add(compiled.cm)
            _share(plans, compiled, compiled.model)
            release_sources(laid.sources)
            compiled.release_when_prepared()
            return
        model = laid.fill()
        from_file = release_sources(laid.sources)  # copied into the model's bytes: the file's pages can go now
        with capture_native_stderr():
            interp = Interpreter(model_content=model, num_threads=max(int(plans[0].num_threads), 1))
            _INTERPRETERS.add(interp)
            subs = [Subgraph(interp, k) for k in range(len(plans))]
            for sub, p in zip(subs, plans):
                for t, dims in p._pending[1].items():
                    sub.resize(t, dims)
            for sub in subs:
                sub.allocate()
    except Exception as e:  # LiteRT refused the joined model: each graph on its own, as without a Batch
        logger().debug("LiteRT engine: %d graphs not joined (%s: %s); built one by one", len(plans),
                       type(e).__name__, str(e)[:200])
        for p in plans:  # combining renumbered their translations' tables: each is translated afresh
            p._pending = None
            _build_alone(p)
        return
    _share(plans, interp, model)
    for k, (p, part) in enumerate(zip(plans, parts)):
        left = _in_arena(subs[k], part)
        if left:
            p._switch_to_numpy(f"LiteRT's XNNPACK delegate did not take {', '.join(left)}; LiteRT's builtin kernels "
                               "round differently from XNNPACK")
    given = release_packed(model, laid.packed)
    logger().debug("LiteRT engine: %d graphs in one interpreter; %d bytes of the program's mapping and %d bytes of "
                   "the model given back", len(plans), from_file, given)


def _share(plans: list, interp, model) -> None:
    """Run each of ``plans`` on its subgraph of ``interp`` (in their order), under one lock."""
    lock = threading.Lock()
    for k, p in enumerate(plans):
        shapes = p._pending[2]
        p._pending = None
        p._use(interp, model, shapes, sub=k, lock=lock)


def _in_arena(sub: Subgraph, part) -> list[str]:
    """The operators of subgraph ``k`` that XNNPACK left to LiteRT's builtin kernels: LiteRT's Python lists the
    nodes of subgraph 0 only, but what XNNPACK runs never reaches LiteRT's arena, so an intermediate tensor with
    memory there is one a builtin kernel reads or writes."""
    ends = set(part.inputs) | set(part.outputs) | part.builtin
    held = []
    for i, t in enumerate(part.writer.tensors):
        if t.buffer or i in ends:
            continue
        try:
            sub.tensor(i)
        except ValueError:  # "Tensor data is null": never allocated, XNNPACK's own
            continue
        held.append(i)
    return part.producers(held) or (["the graph"] if held else [])


def pending(graph: G.Graph, num_threads: int, fallback, load_dims, batch: Batch) -> LiteRTPlan:
    """A plan whose interpreter ``batch`` builds when the method has all of its graphs. The graph is translated
    now (a graph the translation does not cover raises :class:`Unsupported`, as :func:`build` does)."""
    declared, small, shrunk = load_shapes(graph, load_dims)
    part = translate_part(declared_at(graph, shrunk, small) if shrunk else graph)
    if part.fixed_shape and shrunk:
        part, small = translate_part(graph), {}
    resize, shapes = prepared_shapes(graph, part.inputs, declared, small)
    plan = LiteRTPlan(None, graph, part, num_threads, fallback, None, load_dims, batch.cache_dir)
    plan._pending = (part, resize, shapes)
    batch.add(plan)
    return plan


def build(graph: G.Graph, num_threads: int = 1, fallback=None, load_dims=None, cache_dir: str = "") -> LiteRTPlan:
    """Translate ``graph`` and create its interpreter on LiteRT's XNNPACK path.

    Raises :class:`Unsupported` (the reason) when the translation or XNNPACK does not take the whole graph, and
    :class:`Unavailable` when LiteRT is missing. ``fallback()``, when given, makes the NumPy plan the LiteRT plan
    moves to if a later call brings input shapes the model cannot take. ``load_dims(external_id, dims)``, when
    given, names smaller dims to prepare a dynamic input at (None: its declared upper bound): LiteRT sizes its
    memory for the shapes it is prepared at, and a prefill of 60 tokens should not hold memory for 511.
    """
    interp, tr, shapes = interpreter_for(graph, num_threads, load_dims, cache_dir, _INTERPRETERS.add)
    return LiteRTPlan(interp, graph, tr, num_threads, fallback, shapes, load_dims, cache_dir)


# -- fork ------------------------------------------------------------------------------------------------------
# An interpreter owns an XNNPACK thread pool whose threads exist only in the process that made it. In a forked
# child, destroying such an interpreter joins threads that are not there (a crash), so every interpreter alive
# at the fork, including garbage not yet collected, is given a reference nothing ever drops: it outlives the
# child, interpreter shutdown included. Each plan builds a new interpreter on its first call there.
_PLANS: weakref.WeakSet = weakref.WeakSet()
_INTERPRETERS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    import ctypes

    for interp in list(_INTERPRETERS):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(interp))
    _INTERPRETERS.clear()
    for plan in list(_PLANS):
        plan._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
