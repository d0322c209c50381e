"""Pass 3, step building: every instruction becomes a step, a zero-argument function called for its effect.

Arguments are bound once (pterun.interp.binding): constants are passed as they are, values that can change while
the method runs (volatile) through getters. A kernel whose arguments are all fixed may hand back a fast path
(kernels/fast.py). The one step protocol: a step's return value is ignored; a JumpFalseCall is not a step but a
:class:`JumpFalse`, which the loop (pterun.interp.loop) asks where to go. Each step also gets an
:class:`~pterun.interp.observe.Event`: what an execute hook is shown, and how to read the step's outputs.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from pterun.format.program import (BOOL, DELEGATE_CALL, DOUBLE, FREE_CALL, INT, JUMP_FALSE_CALL, KERNEL_CALL,
                                   MOVE_CALL, STATIC, TAG_NAMES, TENSOR, ExecutionPlan)
from pterun.interp.access import kernels_for, written_slots
from pterun.interp.checks import CHECKS as GEOMETRY_CHECKS
from pterun.interp.checks import check as check_geometry
from pterun.interp.loop import JumpFalse
from pterun.interp.observe import Event, slot_reader
from pterun.interp.tensor import Tensor


def find_volatile(plan: ExecutionPlan, tags: list) -> set[int]:
    """Slots whose content or tensor view can change during a run."""
    KERNELS = kernels_for(ins for c in plan.chains for ins in c)
    vol = set()
    for i, (tag, p) in enumerate(plan.values):
        if tag == TENSOR and p.dynamism != STATIC:
            vol.add(i)
    for chain in plan.chains:
        for ins in chain:
            if ins.kind == MOVE_CALL:
                vol.add(ins.move_to)
            elif ins.kind == FREE_CALL:
                vol.add(ins.value_index)
            elif ins.kind == KERNEL_CALL:
                k, b = KERNELS[plan.operators[ins.op_index]], ins.args
                if k.raw:
                    positions = range(len(b)) if k.volatile_args is None else k.volatile_args
                    vol.update(b[p] for p in positions if p < len(b))
                elif not k.schema.mutable and b and tags[b[-1]] in (INT, DOUBLE, BOOL):
                    vol.add(b[-1])
    return vol


class StepBuilder:
    """Builds the steps of one method over its live values (see MethodRunner, which owns what is built)."""

    def __init__(self, runner, folder):
        self.plan, self.values, self.tags, self.volatile = runner.plan, runner.values, runner.tags, runner.volatile
        self.binder, self.executors, self.where, self.fail = runner.binder, runner.executors, runner.where, runner.fail
        self.folder = folder  # pterun.interp.fold.Folder, or None: nothing is folded
        self.folded, self.folded_events = runner.folded, runner.folded_events
        self.events, self.delegate_steps = runner.events, runner.delegate_steps
        self.runner = runner
        self.repeats = (frozenset(), {})  # pterun.interp.repeats.find_repeats, when folding is on
        if folder is not None:
            from pterun.interp.repeats import find_repeats
            self.repeats = find_repeats(self.plan, self.values, self.tags, self.volatile, runner.accesses())

    def generator(self):
        """The method's random generator (``Runtime(seed=)``), made on first use."""
        r = self.runner
        if r.rng is None:
            r.rng = np.random.default_rng(r.seed)
        return r.rng

    def build_chain(self, chain, ci: int):
        # steps are built in program order, so an instruction computed at load (folded) is done before any
        # later step binds its output; ``info`` entries are (name, arguments, instruction index); ``events`` what
        # an execute hook is shown for each step (pterun.interp.observe); ``delegates`` step position ->
        # (executor, argument getter) for delegates that can report their nodes
        KERNELS = kernels_for(chain)
        steps, info, events, delegates = [], [], [], {}
        has_jumps = False
        values, tags = self.values, self.tags
        merged = self.runner.merged  # (chain, first instruction) -> (run, executor, argument slots)
        absorbed = self.runner.absorbed  # (chain, instruction) of every instruction a merged call runs
        # repeated reads of one input element into a scalar (pterun.interp.repeats): left out, and the first
        # read's result copied to their scalar slots
        skip, fan_out = self.repeats if ci == 0 else (frozenset(), {})

        def kernel_call(ins, pc: int) -> None:
            if pc in skip:
                return
            name, b = self.plan.operators[ins.op_index], ins.args
            kernel = KERNELS[name]
            if name in GEOMETRY_CHECKS:
                self._check_geometry(kernel, b, pc)
            read = slot_reader(values, tags, written_slots(kernel, b))
            if self.folder is not None and self.folder.fold(kernel, b, ci, pc):
                self.folded.append((ci, pc, name))
                self.folded_events.append(Event(ci, pc, "KernelCall", name, read))
                return
            step, detail = self._kernel_step(kernel, b, pc), None
            if pc in fan_out:
                step = _fanned_out(step, values, b[-1], tuple(slot for _, slot in fan_out[pc]))
                detail = (f"also gives the result of instructions {', '.join(str(q) for q, _ in fan_out[pc])}, "
                          "which read the same element")
            steps.append(step)
            info.append((name, b, pc))
            events.append(Event(ci, pc, "KernelCall", name, read, detail=detail))

        for pc, ins in enumerate(chain):
            kind = ins.kind
            if (ci, pc) in absorbed:
                if (ci, pc) in merged:
                    run, ex, b = merged[ci, pc]
                    name = f"delegate {run.backend}"
                    steps.append(self._executor_step(ex, b))
                    info.append((name, b, pc))
                    read = slot_reader(values, tags, _delegate_outputs(ex, b))
                    later = f"; {', '.join(map(str, run.deferred))} run after it" if run.deferred else ""
                    events.append(Event(ci, pc, "DelegateCall", name, read,
                                        detail=f"instructions {run.start}-{run.stop - 1} merged into one call{later}"))
                    for d in run.deferred:  # instructions the merged call moved past: in program order, after it
                        kernel_call(chain[d], d)
                continue
            if kind == KERNEL_CALL:
                kernel_call(ins, pc)
            elif kind == DELEGATE_CALL:
                a, b = ins.delegate_index, ins.args
                ex = self.executors[a]
                name = f"delegate {self.plan.delegates[a].backend_id}"
                if hasattr(ex, "execute_observed"):
                    delegates[len(steps)] = (ex, partial(_args_of, values, b))
                steps.append(self._delegate_step(a, b))
                info.append((name, b, pc))
                events.append(Event(ci, pc, "DelegateCall", name, slot_reader(values, tags, _delegate_outputs(ex, b))))
            elif kind == MOVE_CALL:
                a, b = ins.move_from, ins.move_to
                steps.append(self._move_step(a, b))
                info.append(("MoveCall", (a, b), pc))
                events.append(Event(ci, pc, "MoveCall", "MoveCall", slot_reader(values, tags, (b,))))
            elif kind == JUMP_FALSE_CALL:
                a, b = ins.cond_value_index, ins.destination_instruction
                if not 0 <= b <= len(chain):
                    raise self.fail(f"JumpFalseCall at instruction {pc} jumps to {b}, outside the chain "
                                    f"(0..{len(chain)})")
                steps.append(self._jump_step(a, b, pc))
                info.append(("JumpFalseCall", (a,), pc))
                events.append(Event(ci, pc, "JumpFalseCall", "JumpFalseCall", list))
                has_jumps = True
            elif kind == FREE_CALL:
                a = ins.value_index
                if self.tags[a] != TENSOR:
                    raise self.fail(f"FreeCall at instruction {pc} frees value {a}, which is not a tensor")
                steps.append(None)  # memory is reused by the plan; nothing to release here
                info.append(("FreeCall", (a,), pc))
                events.append(Event(ci, pc, "FreeCall", "FreeCall", list))
        self.events.append(events)
        if not has_jumps:
            keep = [k for k, s in enumerate(steps) if s is not None]
            self.delegate_steps.append({keep.index(k): v for k, v in delegates.items()})
            self.events[-1] = [events[k] for k in keep]
            return False, [steps[k] for k in keep], [info[k] for k in keep]
        self.delegate_steps.append(delegates)
        steps = [_noop if s is None else s for s in steps]
        return tuple(s.target if type(s) is JumpFalse else None for s in steps), steps, info

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
        where = f"instruction {pc} ({kernel.name})"
        values = self.values
        if kernel.raw:
            fn = kernel.fn
            return lambda: fn(values, args)
        schema = kernel.schema
        n = len(schema.args)
        if len(args) not in (n, n + 1):
            raise self.fail(f"{where} has {len(args)} arguments; the schema {schema} takes {n} plus a return slot")
        binder = self.binder
        binder.where = f"{self.where}: {where}"
        consts, dyn = [], []
        for pos, (arg, vi) in enumerate(zip(schema.args, args)):
            is_dyn, v = binder.bind(arg, vi)
            consts.append(None if is_dyn else v)
            if is_dyn:
                dyn.append((pos, v))
        fn = kernel.fn
        if kernel.random:  # the method's own generator, bound once
            fn = partial(fn, rng=self.generator())
        if kernel.has_fast_path and not dyn:
            # every argument is fixed at load (static shapes, constant scalars): the kernel may hand back a
            # closure that computes straight into the output arrays, skipping promotion and the write-back
            fast = kernel.specialize(*consts)
            if fast is not None:
                return fast
        if schema.mutable:
            writers = [binder.writer(schema.args[m], args[m]) for m in schema.mutable]
            if len(writers) == 1:
                w0 = writers[0]

                def write(result):  # None: the kernel updated its argument in place
                    if result is not None:
                        w0(result)
            else:
                def write(results, writers=writers):
                    for w, r in zip(writers, results):
                        if r is not None:
                            w(r)
        elif len(args) == n + 1 and self.tags[args[-1]] == TENSOR:
            # a functional op returning a new tensor (allclose.Tensor): the result goes into the return slot
            write = binder.writer(None, args[-1])
        else:
            if len(args) != n + 1:
                raise self.fail(f"{where} returns a value but has no return slot")
            ret = args[-1]
            if self.tags[ret] not in (INT, DOUBLE, BOOL):
                raise self.fail(f"{where} returns a scalar into value {ret}, which is "
                                f"{TAG_NAMES.get(self.tags[ret])}")

            def write(r, ret=ret):
                values[ret] = r
        if not dyn:
            return lambda: write(fn(*consts))
        if len(dyn) == 1:
            (p0, g0), = dyn

            def step():
                a = consts.copy()
                a[p0] = g0()
                write(fn(*a))
            return step

        def step():
            a = consts.copy()
            for p, g in dyn:
                a[p] = g()
            write(fn(*a))
        return step

    def _delegate_step(self, index: int, args: tuple):
        return self._executor_step(self.executors[index], args)

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
