"""Pass 3, delegates: each DelegateCall's executor, after merging the runs of neighbouring calls a backend can
compile as one (pterun.interp.merge).

:func:`load_delegates` asks the backends: first, where merging is on, each backend that merges builds one executor
per run it accepts; then every delegate still called on its own is initialised; last, what the backends left to
finish once every delegate is known (LiteRT builds a method's interpreters together) is finished. It returns a
:class:`Delegates` record. The only other change is where a few tensors live: KV caches a merged call updates,
and outputs it writes in place, move to memory of their own at a 64-byte boundary where nothing else sees their
bytes (:func:`align_caches`, :func:`own_outputs`).

Example::

    >>> d = load_delegates(source, memory, analysis, settings, accesses)   # doctest: +SKIP
    >>> [type(ex).__name__ for ex in d.executors]                         # doctest: +SKIP
    ['LiteRTPlan', 'LiteRTPlan']
"""

from __future__ import annotations

from functools import cache, partial

import numpy as np

from pterun._record import Fields
from pterun import threads
from pterun._log import logger
from pterun.config import Settings
from pterun.delegates import BACKENDS, DelegateContext
from pterun.errors import DelegateError, PterunError
from pterun.format.schema import DELEGATE_CALL, JUMP_FALSE_CALL, KERNEL_CALL, TENSOR
from pterun.interp.access import Accesses, kernels_for, view_roots, written_slots
from pterun.interp.analysis import Analysis
from pterun.interp.forms import absorbed_op, kernel_op
from pterun.interp.merge import DelegatePart, Run, find_runs, slots_read_outside
from pterun.interp.same import same_reads
from pterun.interp.tensor import Tensor

__all__ = ["Delegates", "Merged", "Source", "load_delegates"]


class Merged(Fields):
    """One merged call: the run it stands for, its executor, and its argument slots (inputs, then outputs)."""

    run: Run
    executor: object
    args: tuple


class Delegates(Fields):
    """``executors`` per delegate index; ``merged``: (chain, first instruction) -> :class:`Merged`;
    ``absorbed``: (chain, instruction) of every instruction a merged call runs (deferred ones included)."""

    executors: tuple
    merged: dict
    absorbed: frozenset


class Source(Fields):
    """Where a method comes from: its file (``pf``, a ProgramFile), its plan, and its name for messages."""

    pf: object
    plan: object
    where: str


def merging_backend(plan, i: int) -> str | None:
    """The backend of delegate ``i`` when it is available and merges, else None."""
    if not 0 <= i < len(plan.delegates):
        return None
    name = plan.delegates[i].backend_id
    backend = BACKENDS.get(name) if name in BACKENDS else None
    return name if backend is not None and backend.merges and backend.is_available() else None


def delegate_outputs(pf, plan, i: int) -> frozenset | None:
    """The DelegateCall arguments delegate ``i`` writes, from its backend; None where that is not known."""
    if not 0 <= i < len(plan.delegates):
        return None
    name = plan.delegates[i].backend_id
    backend = BACKENDS.get(name) if name in BACKENDS else None
    if backend is None:
        return None
    try:
        return backend.outputs(pf.delegate_blob(plan.delegates[i]))
    except Exception:  # noqa: BLE001  (unknown: every argument counts as read; the backend's init reports)
        return None


def _context(src: Source, index: int, memory, analysis: Analysis, settings: Settings, finish: list,
             first_call: bool, exact: bool = False) -> DelegateContext:
    values, plan = memory.values, src.plan
    calls = analysis.calls.get(index, ()) if first_call else ()
    call_args = tuple(tuple(plan.values[a][1].numel if 0 <= a < len(plan.values) and plan.values[a][0] == TENSOR
                            else None for a in args) for args in calls)
    first = calls[0] if calls else ()
    return DelegateContext(src.pf.name, plan.name, index, memory.named_data, settings.engine,
                           threads.resolve_threads(settings.num_threads), call_args, analysis.dynamic_sizes,
                           tuple(analysis.is_dynamic(values, a) for a in first), finish, settings.cache_dir, exact)


def _init(src: Source, i: int, ctx: DelegateContext):
    d = src.plan.delegates[i]
    backend = BACKENDS.get(d.backend_id)
    if backend is None or not backend.is_available():
        raise DelegateError(f"{src.where}: delegate {i} needs backend {d.backend_id!r}, which is not available "
                            f"(available: {sorted(BACKENDS) or 'none'})")
    try:
        return backend.init(src.pf.delegate_blob(d), d.compile_specs, ctx)
    except PterunError:
        raise
    except Exception as e:  # a backend bug must still surface as a pterun error
        raise DelegateError(f"{src.where}: backend {d.backend_id!r} failed to initialise delegate {i}: "
                            f"{type(e).__name__}: {e}") from e


def _merge(src: Source, memory, analysis: Analysis, settings: Settings, acc: Accesses, finish: list,
           folder=None, fan_out=None) -> dict:
    """(chain, first instruction) -> :class:`Merged`, for the runs their backends accept (``fan_out``: the
    repeated scalar reads, :func:`pterun.interp.repeats.find_repeats`)."""
    plan, values, tags = src.plan, memory.values, analysis.tags
    KERNELS = kernels_for(plan)
    exact = _quantizes(src)  # then every merged graph of the method holds only bit-for-bit operators
    given = frozenset(plan.inputs)

    def absorbed(backend: str, name: str, args: tuple):
        b = BACKENDS[backend]
        forms = b.absorbed_forms.get(name, ())
        for form in forms if isinstance(forms, tuple) else (forms,):  # the first that fits the arguments
            if form == "kernel":
                kernel = KERNELS.get(name)
                op = None if kernel is None else kernel_op(kernel, args, values, tags, analysis.volatile, given)
            else:
                op = absorbed_op(form, args, values, tags, analysis.volatile)
            if op is not None and b.absorbs(op, exact=exact):
                return op
        return None

    def later(ins):  # (read, written) slots of a KernelCall that may run after a merged call, or None
        kernel = KERNELS.get(plan.operators[ins.op_index]) if ins.kind == KERNEL_CALL else None
        if kernel is None or kernel.raw or kernel.random or kernel.not_supported:
            return None
        args = tuple(ins.args)
        left = {args[m] for m in kernel.unwritten if m < len(args)}  # out placeholders it never touches
        return set(args) - left, set(written_slots(kernel, args)) - left

    home = next((name for name, b in BACKENDS.items() if b.merges and b.is_available() and
                 b.compiles(settings.engine)), None)
    # what folding computes at load stays out of merged calls, which would compute it on every call: operators
    # are folded now (merged graphs then read their results as constants), delegate calls start no run
    fixed, gone = folder.ahead(KERNELS) if folder is not None else (frozenset(), frozenset())
    bounds = {"bound": (cache(partial(_payload_bytes, src)), lambda b: BACKENDS[b].merge_bytes)}
    runs = find_runs(plan, values, tags, analysis.volatile, partial(merging_backend, plan), absorbed, later, acc,
                     home=home, fixed=fixed, gone=gone, **bounds)
    if not runs:
        return {}
    caches = [p.inputs[1] for r in runs for p in r.parts if getattr(p, "op", None) == "update_cache"]
    align_caches(caches, values, acc.shared, memory.arenas[2:])
    outside = slots_read_outside(plan, tags, values, acc)
    merged = {}
    same = (acc, fan_out or {})
    declined = _merge_runs(runs, src, memory, analysis, settings, same, finish, values, outside, merged, exact)
    if declined:  # runs a backend declined with operators held as kernels (or KV caches): tried again without
        def plain(backend: str, name: str, args: tuple):
            op = absorbed(backend, name, args)
            return None if op is None or op.op in _RETRIED else op
        again = find_runs(plan, values, tags, analysis.volatile, partial(merging_backend, plan), plain, later, acc,
                          fixed=fixed, gone=gone, **bounds)
        taken = [(m.run.chain, m.run.start, m.run.stop) for m in merged.values()]
        again = [r for r in again if _meets(r, declined) and not _meets(r, taken)]
        _merge_runs(again, src, memory, analysis, settings, same, finish, values, outside, merged, exact)
    own_outputs(merged, plan, values, acc, memory.arenas[2:])
    return merged


#: KV caches move to memory at this boundary (:func:`align_caches`)
CACHE_ALIGN = 64


def align_caches(slots, values: list, shared, shared_arenas: list) -> list[int]:
    """Give each KV cache among ``slots`` (those a merged run writes with ``llama::update_cache``) memory of its
    own at a :data:`CACHE_ALIGN`-byte boundary, its contents copied, where it lies elsewhere; the slots moved. A
    backend that works on a cache in place may need the boundary (LiteRT does:
    :mod:`pterun.delegates.xnnpack.litert_engine.kvplan`), and the memory plan places tensors at 16 bytes. Only a
    cache no other value shares bytes with moves (``shared``, :class:`~pterun.interp.access.SharedBytes`), and none
    in an arena the program's methods share (``shared_arenas``): another method reads it there."""
    moved = []
    for c in dict.fromkeys(slots):
        t = values[c]
        if not isinstance(t, Tensor) or t.dynamic or shared.overlapping(c):
            continue
        where = t.storage.ctypes.data
        if where % CACHE_ALIGN == 0 or _in_arenas(where, shared_arenas):
            continue
        _move(t)
        moved.append(c)
    return moved


def own_outputs(merged: dict, plan, values: list, acc: Accesses, shared_arenas: list) -> list[int]:
    """Give each output that a merged call's executor writes in place where the method's array allows it
    (``executor.in_place_outputs()``: positions among the call's arguments; the LiteRT KV plan's, an LLM's logits)
    memory of its own at a :data:`CACHE_ALIGN`-byte boundary, its contents copied, where nothing but that slot
    sees its bytes from the call on (:func:`_alone_after`); the slots moved. The memory plan places tensors at 16
    bytes, and lays an LLM's logits over the bytes of a hundred values that live before the call: an output
    LiteRT cannot write in place is copied into the method's array at every call (32k logits: ~40 us)."""
    moved, roots = [], None
    for m in merged.values():
        wants = getattr(m.executor, "in_place_outputs", None)
        for e in wants() if wants is not None else ():
            x = m.args[e]
            t = values[x]
            if not isinstance(t, Tensor) or t.dynamic or m.args.count(x) != 1 or \
                    t.storage.ctypes.data % CACHE_ALIGN == 0 and not acc.shared.overlapping(x):
                continue
            roots = view_roots(plan) if roots is None else roots
            if _alone_after(x, m, plan, acc, roots) and not _in_arenas(t.storage.ctypes.data, shared_arenas):
                _move(t)
                moved.append(x)
    return moved


def _alone_after(x: int, m: Merged, plan, acc: Accesses, roots: dict) -> bool:
    """Whether from the merged call ``m`` on, the bytes of its output ``x`` are seen through ``x`` alone, so that
    ``x`` may move to other memory: ``x`` is no method input, no view and viewed by nothing, and its chain (which
    has no jumps) touches it only from the call on. Every other value over its bytes is no method input or output,
    and its chain touches it only before the call (instructions the call moved ahead included) or inside the call
    (which computes what it absorbed in memory of its own, and takes its arguments before it writes anything),
    where it is not written as one of the call's arguments."""
    run = m.run
    chain, first, ahead, after = run.chain, run.start, frozenset(run.ahead), frozenset(run.deferred)
    if x in acc.inputs or any(ins.kind == JUMP_FALSE_CALL for ins in plan.chains[chain]) or \
            any(r == x and k != x for k, r in roots.items()) or roots.get(x, x) != x:
        return False
    if any(c != chain or pc < first or pc in ahead for c, pc in acc.read_at.get(x, []) + acc.write_at.get(x, [])):
        return False

    def later(pc: int) -> bool:  # run after the call, or not at all inside it
        return pc >= run.stop or pc in after
    for y in acc.shared.overlapping(x):
        reads, writes = acc.read_at.get(y, []), acc.write_at.get(y, [])
        if y in acc.inputs or y in acc.outputs or any(c != chain for c, _ in reads + writes) or \
                any(later(pc) for _, pc in reads + writes) or \
                y in m.args and any(first <= pc and pc not in ahead for _, pc in writes):
            return False
    return True


def _in_arenas(where: int, arenas: list) -> bool:
    return any(a.ctypes.data <= where < a.ctypes.data + a.nbytes for a in arenas if a.nbytes)


def _move(t: Tensor) -> None:
    """Point ``t`` at memory of its own at a :data:`CACHE_ALIGN`-byte boundary, its contents copied."""
    raw = np.empty(t.storage.nbytes + CACHE_ALIGN, np.uint8)
    start = -raw.ctypes.data % CACHE_ALIGN
    own = raw[start:start + t.storage.nbytes]
    own[:] = t.storage
    t.rebind(own, t.shape)


def _with_private_caches(run: Run, plan, acc: Accesses) -> tuple:
    """``run.parts``, each ``update_cache`` and ``sdpa`` given ``attrs["private"]``: cache slot -> ``"k"`` or
    ``"v"``, for the caches it touches that the run's attentions read in one role, and that nothing but the run's
    own instructions reads or writes (by name or through other bytes), that are no method input or output, and not
    state other methods share. A backend may keep such a cache in a form of its own beside the method's
    (:mod:`pterun.delegates.xnnpack.litert_engine.attention`): nothing else sees either."""
    def private(c: int) -> bool:
        if c in acc.inputs or c in acc.outputs or acc.shared.overlapping(c):
            return False
        desc = plan.values[c][1]
        if getattr(desc, "memory_id", None) is not None and desc.memory_id >= 2:
            return False
        touched = acc.read_at.get(c, []) + acc.write_at.get(c, [])
        return all(ci == run.chain and run.start <= pc < run.stop for ci, pc in touched)

    roles: dict[int, set] = {}  # cache -> how the run's attentions read it: as keys ("k"), as values ("v")
    for p in run.parts:
        if getattr(p, "op", None) == "sdpa":
            roles.setdefault(p.inputs[1], set()).add("k")
            roles.setdefault(p.inputs[2], set()).add("v")
    kept = {c: r.pop() for c, r in roles.items() if len(r) == 1 and private(c)}
    parts = []
    for p in run.parts:
        if getattr(p, "op", None) in ("update_cache", "sdpa"):
            caches = p.inputs[1:2] if p.op == "update_cache" else p.inputs[1:3]
            p = p._replace(attrs={**p.attrs, "private": {c: kept[c] for c in caches if c in kept}})
        parts.append(p)
    return tuple(parts)


def _reading_same(run: Run, parts: tuple, src: Source, acc: Accesses, fan_out: dict) -> tuple:
    """``parts`` with what a delegate call reads, and the position an ``update_cache`` or ``sdpa`` reads, taken
    from the earlier slot that holds the same value when the run starts (:func:`pterun.interp.same.same_reads`):
    one input of the merged call instead of one per copy. A delegate whose outputs its backend does not say
    (``acc.delegate_outputs``) is left as it is."""
    same = same_reads(src.plan, acc, fan_out, run.chain, run.start, run.stop, frozenset(run.ahead))
    if not same:
        return parts
    out = []
    for p in parts:
        if isinstance(p, DelegatePart):
            written = acc.delegate_outputs(p.delegate_index)
            if written is not None:
                p = p._replace(args=tuple(a if k in written else same.get(a, a) for k, a in enumerate(p.args)))
        elif getattr(p, "op", None) in ("update_cache", "sdpa"):
            p = p._replace(inputs=(*p.inputs[:-1], same.get(p.inputs[-1], p.inputs[-1])))
        out.append(p)
    return tuple(out)


#: the forms of absorbed operators a declined run is merged again without
_RETRIED = frozenset({"kernel", "update_cache", "sdpa"})


def _payload_bytes(src: Source, i: int) -> int:
    """Delegate ``i``'s bytes as its backend counts them for a merged call (0 where unreadable: its init reports
    it)."""
    d = src.plan.delegates[i]
    try:
        return BACKENDS[d.backend_id].weight_bytes(src.pf.delegate_blob(d))
    except Exception:  # noqa: BLE001
        return 0


def _quantizes(src: Source) -> bool:
    """Whether any delegate of the method quantizes activations dynamically (its backend says)."""
    for d in src.plan.delegates:
        backend = BACKENDS.get(d.backend_id) if d.backend_id in BACKENDS else None
        if backend is not None:
            try:
                if backend.quantizes(src.pf.delegate_blob(d)):
                    return True
            except Exception:  # noqa: BLE001  (unreadable: the delegate's init reports it)
                continue
    return False


def _meets(run: Run, ranges: list) -> bool:
    return any(run.chain == c and run.start < stop and start < run.stop for c, start, stop in ranges)


def _merge_runs(runs, src, memory, analysis, settings, same: tuple, finish, values, outside, merged: dict,
                exact: bool) -> list:
    """Merge each run its backend accepts into ``merged`` (``exact``: the method quantizes activations
    dynamically; ``same``: (Accesses, repeated scalar reads)); the (chain, start, stop) of those it declined that
    held operators as kernels."""
    acc, fan_out = same
    declined = []
    for run in runs:
        indices = sorted({p.delegate_index for p in run.parts if isinstance(p, DelegatePart)})
        ctx = _context(src, indices[0] if indices else -1, memory, analysis, settings, finish, first_call=False,
                       exact=exact)
        try:
            blobs = {i: src.pf.delegate_blob(src.plan.delegates[i]) for i in indices}
            parts = _reading_same(run, _with_private_caches(run, src.plan, acc), src, acc, fan_out)
            got = BACKENDS[run.backend].merge(parts, blobs, ctx, partial(outside, run), values, acc.shared)
        except Exception as e:  # the delegates then load one by one, and report their own errors
            logger().debug("%s: delegates %s not merged: %s: %s", src.where, indices, type(e).__name__, e)
            got = None
        if got is not None:
            merged[run.chain, run.start] = Merged(run, *got)
        elif any(getattr(p, "op", None) in _RETRIED for p in run.parts):
            declined.append((run.chain, run.start, run.stop))
    return declined


def load_delegates(src: Source, memory, analysis: Analysis, settings: Settings, acc: Accesses | None,
                   folder=None, fan_out: dict | None = None) -> Delegates:
    """Every delegate's executor (merged runs first, where ``settings.merge`` and ``acc`` is given), finished.
    ``folder`` (a :class:`~pterun.interp.fold.Folder`, or None: nothing is folded) folds, before the merge, the
    operators it would otherwise compute on every call. ``fan_out``: the repeated scalar reads the steps copy
    (:func:`pterun.interp.repeats.find_repeats`), which merged calls then read from the first."""
    plan = src.plan
    finish: list = []  # what backends finish once every delegate is known (DelegateContext.finish)
    merged = _merge(src, memory, analysis, settings, acc, finish, folder, fan_out) \
        if settings.merge and acc is not None else {}
    absorbed = frozenset((m.run.chain, pc) for m in merged.values() for pc in range(m.run.start, m.run.stop))
    executors = [None] * len(plan.delegates)
    for m in merged.values():
        for p in m.run.parts:
            if isinstance(p, DelegatePart):
                executors[p.delegate_index] = m.executor
    called = {ins.delegate_index for ci, c in enumerate(plan.chains) for pc, ins in enumerate(c)
              if ins.kind == DELEGATE_CALL and (ci, pc) not in absorbed}
    for i in range(len(plan.delegates)):
        if executors[i] is None or i in called:
            executors[i] = _init(src, i, _context(src, i, memory, analysis, settings, finish, first_call=True))
    for pending in finish:
        try:
            pending.finish()
        except PterunError:
            raise
        except Exception as e:  # a backend bug must still surface as a pterun error
            raise DelegateError(f"{src.where}: finishing the delegates' load failed: {type(e).__name__}: {e}") \
                from e
    return Delegates(tuple(executors), merged, absorbed)
