"""Pass 4, step building: every instruction becomes a step, a zero-argument function called for its effect.

Arguments are bound once (pterun.interp.binding): constants are passed as they are, values that can change while
the method runs (volatile) through getters. A kernel whose arguments are all fixed may hand back a fast path
(kernels/fast.py). The one step protocol: a step's return value is ignored; a JumpFalseCall is not a step but a
:class:`JumpFalse`, which the loop (pterun.interp.loop) asks where to go. Each step also gets an
:class:`~pterun.interp.observe.Event`: what an execute hook is shown, and how to read the step's outputs.
Instructions whose inputs are constants are folded on the way (pterun.interp.fold), and repeated reads of one
input element left out (pterun.interp.repeats). :func:`build_steps` returns a :class:`Steps` record.

Example::

    >>> built = build_steps(plan, values, analysis, delegates, binder, where, folder)   # doctest: +SKIP
    >>> [len(c.steps) for c in built.chains], len(built.folded)                        # doctest: +SKIP
    ([134], 12)
"""

from __future__ import annotations

from functools import partial

import numpy as np

from pterun._record import Fields
from pterun.errors import InvalidProgramError
from pterun.format.schema import (BOOL, DELEGATE_CALL, DOUBLE, FREE_CALL, INT, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL,
                                  TAG_NAMES, TENSOR)
from pterun.interp.access import kernels_for, written_slots
from pterun.interp.checks import CHECKS as GEOMETRY_CHECKS
from pterun.interp.checks import check as check_geometry
from pterun.interp.loop import JumpFalse
from pterun.interp.observe import Event, slot_reader
from pterun.interp.same import unread_views
from pterun.interp.tensor import Tensor

__all__ = ["Chain", "RandomSource", "Steps", "build_steps"]


class Chain(Fields):
    """One chain, ready to run. ``steps`` in order; ``jumps``: empty for a chain without jumps, else per position
    None for a step or the JumpFalse's ``target``; ``info``: per step (name, arguments, the program's instruction
    index), for errors; ``events``: per step, what an execute hook is shown (pterun.interp.observe); ``delegates``:
    step position -> (executor, argument getter) for the delegates that can report their nodes."""

    jumps: tuple
    steps: list
    info: list
    events: list
    delegates: dict


class Steps(Fields):
    """What step building returns: the ``chains``; ``folded``: (chain, instruction, operator) of each instruction
    computed at load, and ``folded_events`` the same as Method.trace reports them; ``random``: the method's
    random generator (:class:`RandomSource`); ``only_call``: see :mod:`pterun.interp.direct`."""

    chains: tuple
    folded: tuple
    folded_events: tuple
    random: RandomSource
    only_call: tuple | None = None  # (executor, argument slots) when the method's one step is one delegate call


class RandomSource:
    """The random generator a method's random kernels draw from (``Runtime(seed=)``; None: OS entropy), made when
    the first random kernel's step is built (``numpy.random`` is not free to import)."""

    def __init__(self, seed: int | None):
        self.seed = seed
        self.rng = None

    def generator(self) -> np.random.Generator:
        if self.rng is None:
            self.rng = np.random.default_rng(self.seed)
        return self.rng


def build_steps(plan, values: list, analysis, delegates, binder, where: str, folder=None,
                repeats=(frozenset(), {}), seed: int | None = None) -> Steps:
    """The :class:`Steps` of a method: ``analysis`` (pterun.interp.analysis), ``delegates`` (its
    pterun.interp.delegates record), ``binder`` (pterun.interp.binding), ``folder`` (a Folder, or None: nothing is
    folded) and ``repeats`` (pterun.interp.repeats.find_repeats, for the first chain)."""
    builder = StepBuilder(plan, values, analysis, delegates, binder, where, folder, repeats, RandomSource(seed))
    chains = tuple(builder.build_chain(c, ci) for ci, c in enumerate(plan.chains))
    only = builder.calls[0] if len(builder.calls) == 1 and sum(len(c.steps) for c in chains) == 1 and \
        not any(c.jumps for c in chains) else None
    return Steps(chains, tuple(builder.folded), tuple(builder.folded_events), builder.random, only)


class _Parts:
    """What one chain's instructions become, in order (a FreeCall leaves None: no step)."""

    def __init__(self):
        self.steps, self.info, self.events, self.delegates = [], [], [], {}
        self.has_jumps = False

    def add(self, step, info: tuple, event: Event) -> None:
        self.steps.append(step)
        self.info.append(info)
        self.events.append(event)

    def chain(self) -> Chain:
        if not self.has_jumps:  # FreeCalls leave no step
            keep = [k for k, s in enumerate(self.steps) if s is not None]
            delegates = {keep.index(k): v for k, v in self.delegates.items()}
            return Chain((), [self.steps[k] for k in keep], [self.info[k] for k in keep],
                         [self.events[k] for k in keep], delegates)
        steps = [_noop if s is None else s for s in self.steps]
        jumps = tuple(s.target if type(s) is JumpFalse else None for s in steps)
        return Chain(jumps, steps, self.info, self.events, self.delegates)


class StepBuilder:
    """Builds the steps of one method's chains over its live values; what it folds it keeps in ``folded``."""

    def __init__(self, plan, values: list, analysis, delegates, binder, where: str, folder, repeats,
                 random: RandomSource):
        self.plan, self.values, self.tags, self.volatile = plan, values, analysis.tags, analysis.volatile
        self.binder, self.executors, self.where = binder, delegates.executors, where
        self.merged, self.absorbed = delegates.merged, delegates.absorbed
        self.folder = folder  # pterun.interp.fold.Folder, or None: nothing is folded
        self.repeats = repeats
        self.random = random
        self.folded: list[tuple[int, int, str]] = []
        self.folded_events: list[Event] = []
        self.calls: list[tuple] = []  # (executor, argument slots) of every delegate step
        self.unread: frozenset = frozenset()  # the current chain's views nothing reads (same.unread_views)

    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def build_chain(self, chain, ci: int) -> Chain:
        # steps are built in program order, so an instruction computed at load (folded) is done before any later
        # step binds its output
        parts = _Parts()
        kernels = kernels_for(self.plan, chain)
        # repeated reads of one input element into a scalar (pterun.interp.repeats): left out, and the first
        # read's result copied to their scalar slots
        repeats = self.repeats if ci == 0 else (frozenset(), {})
        # views whose results merged calls now read from an earlier view (pterun.interp.same): left out
        self.unread = unread_views(self.plan, self.values, ci, self.merged, self.absorbed) if self.merged else frozenset()
        done = self.folder.done if self.folder is not None else frozenset()
        for pc, ins in enumerate(chain):
            if (ci, pc) in done and ins.kind == KERNEL_CALL:  # folded ahead of the merge (Folder.ahead)
                self._kernel_call(parts, ins, ci, pc, kernels, repeats)
            elif (ci, pc) in self.absorbed:
                if (ci, pc) in self.merged:
                    self._merged_call(parts, chain, ci, pc, kernels, repeats)
            elif ins.kind == KERNEL_CALL:
                self._kernel_call(parts, ins, ci, pc, kernels, repeats)
            elif ins.kind == DELEGATE_CALL:
                self._delegate_call(parts, ins, ci, pc)
            else:
                self._control(parts, ins, ci, pc, len(chain))
        return parts.chain()

    def _kernel_call(self, parts: _Parts, ins, ci: int, pc: int, kernels: dict, repeats) -> None:
        skip, fan_out = repeats
        if pc in skip or pc in self.unread:
            return
        name, b = self.plan.operators[ins.op_index], ins.args
        kernel = kernels[name]
        if name in GEOMETRY_CHECKS:
            self._check_geometry(kernel, b, pc)
        read = slot_reader(self.values, self.tags, written_slots(kernel, b))
        if self.folder is not None and self.folder.fold(kernel, b, ci, pc):
            self.folded.append((ci, pc, name))
            self.folded_events.append(Event(ci, pc, "KernelCall", name, read))
            return
        step, detail = self._kernel_step(kernel, b, pc), None
        if pc in fan_out:
            step = _fanned_out(step, self.values, b[-1], tuple(slot for _, slot in fan_out[pc]))
            detail = (f"also gives the result of instructions {', '.join(str(q) for q, _ in fan_out[pc])}, "
                      "which read the same element")
        parts.add(step, (name, b, pc), Event(ci, pc, "KernelCall", name, read, detail=detail))

    def _merged_call(self, parts: _Parts, chain, ci: int, pc: int, kernels: dict, repeats) -> None:
        run, ex, b = self.merged[ci, pc]
        name = f"delegate {run.backend}"
        read = slot_reader(self.values, self.tags, _delegate_outputs(ex, b))
        for a in run.ahead:  # instructions moved ahead of the merged call (pterun.interp.moves): in order, before it
            self._kernel_call(parts, chain[a], ci, a, kernels, repeats)
        later = f"; {', '.join(map(str, run.deferred))} run after it" if run.deferred else ""
        before = f"; {', '.join(map(str, run.ahead))} run before it" if run.ahead else ""
        parts.add(self._executor_step(ex, b), (name, b, pc),
                  Event(ci, pc, "DelegateCall", name, read,
                        detail=f"instructions {run.start}-{run.stop - 1} merged into one call{before}{later}"))
        self.calls.append((ex, tuple(b)))
        for d in run.deferred:  # instructions the merged call moved past: in program order, after it
            self._kernel_call(parts, chain[d], ci, d, kernels, repeats)

    def _delegate_call(self, parts: _Parts, ins, ci: int, pc: int) -> None:
        a, b = ins.delegate_index, ins.args
        ex = self.executors[a]
        name = f"delegate {self.plan.delegates[a].backend_id}"
        if self.folder is not None and self.folder.fold_delegate(ex, a, b, ci, pc):
            self.folded.append((ci, pc, name))
            self.folded_events.append(Event(ci, pc, "DelegateCall", name,
                                            slot_reader(self.values, self.tags, _delegate_outputs(ex, b))))
            return
        if hasattr(ex, "execute_observed"):
            parts.delegates[len(parts.steps)] = (ex, partial(_args_of, self.values, b))
        parts.add(self._executor_step(ex, b), (name, b, pc),
                  Event(ci, pc, "DelegateCall", name, slot_reader(self.values, self.tags, _delegate_outputs(ex, b))))
        self.calls.append((ex, tuple(b)))

    def _control(self, parts: _Parts, ins, ci: int, pc: int, n: int) -> None:
        """A MoveCall, JumpFalseCall or FreeCall."""
        kind = ins.kind
        if kind == MOVE_CALL:
            a, b = ins.move_from, ins.move_to
            parts.add(self._move_step(a, b), ("MoveCall", (a, b), pc),
                      Event(ci, pc, "MoveCall", "MoveCall", slot_reader(self.values, self.tags, (b,))))
        elif kind == JUMP_FALSE_CALL:
            a, b = ins.cond_value_index, ins.destination_instruction
            if not 0 <= b <= n:
                raise self.fail(f"JumpFalseCall at instruction {pc} jumps to {b}, outside the chain (0..{n})")
            parts.add(self._jump_step(a, b, pc), ("JumpFalseCall", (a,), pc),
                      Event(ci, pc, "JumpFalseCall", "JumpFalseCall", list))
            parts.has_jumps = True
        elif kind == FREE_CALL:
            a = ins.value_index
            if self.tags[a] != TENSOR:
                raise self.fail(f"FreeCall at instruction {pc} frees value {a}, which is not a tensor")
            # memory is reused by the plan: nothing to release here
            parts.add(None, ("FreeCall", (a,), pc), Event(ci, pc, "FreeCall", "FreeCall", list))

    def _check_geometry(self, kernel, args: tuple, pc: int) -> None:
        """Arguments fixed at load that drive a kernel's work (padding, windows, sizes) must give exactly the
        shape of its static out tensors (interp/checks.py); otherwise the program is refused now."""
        schema = kernel.schema
        if kernel.raw or len(args) not in (len(schema.args), len(schema.args) + 1):
            return  # _kernel_step reports the arity
        self.binder.where = f"{self.where}: instruction {pc} ({kernel.name})"
        bound, outs = [], []
        for arg, vi in zip(schema.args, args):
            is_dyn, v = self.binder.bind(arg, vi)
            if is_dyn:
                return  # shapes known only at run time
            bound.append(v)
            if arg.mutable:
                t = self.values[vi]
                outs.append((t.shape, not t.dynamic) if isinstance(t, Tensor) else ((), False))
        problem = check_geometry(kernel.name, bound, outs)
        if problem is not None:
            raise self.fail(f"instruction {pc} ({kernel.name}): {problem}")

    def _kernel_step(self, kernel, args: tuple, pc: int):
        values = self.values
        if kernel.raw:
            fn = kernel.fn
            return lambda: fn(values, args)
        schema = kernel.schema
        n = len(schema.args)
        where = f"instruction {pc} ({kernel.name})"
        if len(args) not in (n, n + 1):
            raise self.fail(f"{where} has {len(args)} arguments; the schema {schema} takes {n} plus a return slot")
        self.binder.where = f"{self.where}: {where}"
        consts, dyn = [], []
        for pos, (arg, vi) in enumerate(zip(schema.args, args)):
            is_dyn, v = self.binder.bind(arg, vi)
            consts.append(None if is_dyn else v)
            if is_dyn:
                dyn.append((pos, v))
        fn = kernel.fn
        if kernel.random:  # the method's own generator, bound once
            fn = partial(fn, rng=self.random.generator())
        if kernel.has_fast_path and not dyn:
            # every argument is fixed at load (static shapes, constant scalars): the kernel may hand back a
            # closure that computes straight into the output arrays, skipping promotion and the write-back
            fast = kernel.specialize(*consts)
            if fast is not None:
                return fast
        return _stepper(fn, consts, dyn, self._writer(kernel, args, where))

    def _writer(self, kernel, args: tuple, where: str):
        """``write(result)``: where a kernel's result goes (its out arguments, a return slot)."""
        schema, binder, values = kernel.schema, self.binder, self.values
        n = len(schema.args)
        if schema.mutable:
            writers = [binder.writer(schema.args[m], args[m]) for m in schema.mutable]
            if len(writers) == 1:
                w0 = writers[0]

                def write(result):  # None: the kernel updated its argument in place
                    if result is not None:
                        w0(result)
                return write

            def write_all(results, writers=writers):
                for w, r in zip(writers, results):
                    if r is not None:
                        w(r)
            return write_all
        if len(args) == n + 1 and self.tags[args[-1]] == TENSOR:
            # a functional op returning a new tensor (allclose.Tensor): the result goes into the return slot
            return binder.writer(None, args[-1])
        if len(args) != n + 1:
            raise self.fail(f"{where} returns a value but has no return slot")
        ret = args[-1]
        if self.tags[ret] not in (INT, DOUBLE, BOOL):
            raise self.fail(f"{where} returns a scalar into value {ret}, which is {TAG_NAMES.get(self.tags[ret])}")

        def write_scalar(r, ret=ret):
            values[ret] = r
        return write_scalar

    def _executor_step(self, ex, args: tuple):
        """A step calling a delegate executor (one delegate's, or a merged run's) on the live values at ``args``."""
        get = self.values.__getitem__
        return lambda: ex.execute(list(map(get, args)))

    def _move_step(self, src: int, dst: int):
        values = self.values

        def move():
            values[dst] = values[src]
        return move

    def _jump_step(self, cond: int, dest: int, pc: int) -> JumpFalse:
        values = self.values
        tag = self.tags[cond]
        if tag == BOOL:
            if cond in self.volatile:
                return JumpFalse(lambda: None if values[cond] else dest)
            return JumpFalse((lambda: dest) if not values[cond] else _noop)
        if tag == TENSOR:
            if values[cond].dtype != np.bool_:
                raise self.fail(f"JumpFalseCall at instruction {pc} tests a {values[cond].dtype} tensor; "
                                "it must be bool")
            return JumpFalse(lambda: None if values[cond].array.all() else dest)
        raise self.fail(f"JumpFalseCall at instruction {pc} tests a {TAG_NAMES.get(tag)} value; it must be Bool")


def _noop():
    return None


def _stepper(fn, consts: list, dyn: list, write):
    """The step calling ``fn`` on ``consts`` with the getters ``dyn`` ((position, getter)) read at each call."""
    if not dyn:
        return lambda: write(fn(*consts))
    if len(dyn) == 1:
        (p0, g0), = dyn

        def step():
            a = consts.copy()
            a[p0] = g0()
            write(fn(*a))
        return step

    def step_n():
        a = consts.copy()
        for p, g in dyn:
            a[p] = g()
        write(fn(*a))
    return step_n


def _fanned_out(step, values: list, slot: int, copies: tuple):
    """``step``, then its scalar result at ``slot`` copied to ``copies``."""
    def run():
        step()
        v = values[slot]
        for c in copies:
            values[c] = v
    return run


def _delegate_outputs(executor, args: tuple) -> tuple:
    """The DelegateCall arguments a delegate writes: those its executor lists as outputs (external ids), else all."""
    try:
        return tuple(args[ext] for ext, *_ in executor.outputs)
    except (AttributeError, TypeError, ValueError, IndexError):
        return tuple(args)

def _args_of(values: list, args: tuple) -> list:
    return [values[a] for a in args]
