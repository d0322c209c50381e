"""Merging neighbouring delegate calls: one backend call where the program makes several.

ExecuTorch runs each delegate of a program on its own, with the portable operators between them on the CPU. In a
decode step of an exported LLM that is ~120 XNNPACK calls, most of them a handful of elementwise nodes, separated
by nothing or by one ``mean`` (the RMSNorm's). Each call costs a boundary: copying inputs in and outputs out, and
the backend's own invocation. This pass finds *runs*: instructions of one chain that are DelegateCalls to the same
backend, or operators that backend can run inside its graph (:class:`Absorbed`), with nothing else between. A
backend that offers ``merge(parts, outside, ctx)`` then builds one executor for the run, or declines (returns
None), and the delegates run one by one as before.

What a run reads from outside becomes the merged call's inputs; what it writes that anything outside the run
reads (a later instruction, another chain, a method output) becomes its outputs. Values only the run itself reads
never reach the method's memory. Chains with jumps are left alone (a jump could land inside a run).

Example::

    >>> runs = find_runs(plan, values, tags, backend_of)     # doctest: +SKIP
    >>> [(r.chain, r.start, r.stop) for r in runs]           # doctest: +SKIP
    [(0, 101, 112), ...]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pterun.format.program import (BOOL, DELEGATE_CALL, FREE_CALL, INT_LIST, JUMP_FALSE_CALL, KERNEL_CALL,
                                   MOVE_CALL, NULL, OPT_TENSOR_LIST, TENSOR, TENSOR_LIST)
from pterun.interp.tensor import Tensor

__all__ = ["Absorbed", "DelegatePart", "Run", "absorbed_op", "find_runs", "slots_read_outside"]


class DelegatePart(NamedTuple):
    """A DelegateCall inside a run: the delegate's index and the call's argument slots."""

    delegate_index: int
    args: tuple


class Absorbed(NamedTuple):
    """An operator a backend may run inside a merged graph. ``op`` is the operation (``"mean"``); ``inputs`` and
    ``outputs`` are value slots; ``attrs`` its parameters resolved at load (``axes``, ``keepdim``)."""

    op: str
    inputs: tuple
    outputs: tuple
    attrs: dict


class Run(NamedTuple):
    """Instructions ``start..stop-1`` of chain ``chain``: the parts in order (DelegatePart or Absorbed) and the
    backend they all belong to."""

    chain: int
    start: int
    stop: int
    backend: str
    parts: tuple


def absorbed_op(name: str, args: tuple, values: list, tags: list, volatile: set) -> Absorbed | None:
    """The :class:`Absorbed` form of a KernelCall, or None when it has none (only a float32 ``mean.out`` over
    fixed dims, with keepdim fixed, does)."""
    if name != "aten::mean.out" or len(args) not in (5, 6):
        return None
    x, dim, keep, dtype, out = args[:5]
    if tags[x] != TENSOR or tags[out] != TENSOR or tags[dim] != INT_LIST or tags[keep] != BOOL:
        return None
    if tags[dtype] != NULL or keep in volatile or dim in volatile or any(j in volatile for j in values[dim]):
        return None
    xt, ot = values[x], values[out]
    if not (isinstance(xt, Tensor) and isinstance(ot, Tensor)) or xt.dtype != np.float32 or ot.dtype != np.float32:
        return None
    rank = len(xt.shape)
    axes = [values[j] for j in values[dim]]
    if not axes or any(type(a) is not int or not -rank <= a < rank for a in axes):
        return None
    axes = tuple(sorted({a % rank for a in axes}))
    if len(args) == 6 and args[5] != out:
        return None
    return Absorbed("mean", (x,), (out,), {"axes": axes, "keepdim": bool(values[keep])})


def find_runs(plan, values: list, tags: list, volatile: set, mergers: Callable[[int], str | None],
              absorbs: Callable[[str, Absorbed], bool]) -> list[Run]:
    """Runs of at least two DelegateCalls to one backend. ``mergers(delegate_index)`` names the delegate's backend
    when that backend can merge, else None; ``absorbs(backend, absorbed)`` says whether it can run an operator."""
    runs = []
    for ci, chain in enumerate(plan.chains):
        if any(ins.kind == JUMP_FALSE_CALL for ins in chain):
            continue
        pc, n = 0, len(chain)
        while pc < n:
            ins = chain[pc]
            backend = mergers(ins.delegate_index) if ins.kind == DELEGATE_CALL else None
            if backend is None:
                pc += 1
                continue
            parts, last, delegates, j = [DelegatePart(ins.delegate_index, tuple(ins.args))], pc, 1, pc + 1
            pending = []  # absorbed operators after the last delegate call, kept only if another call follows
            while j < n:
                nxt = chain[j]
                if nxt.kind == DELEGATE_CALL and mergers(nxt.delegate_index) == backend:
                    parts += pending + [DelegatePart(nxt.delegate_index, tuple(nxt.args))]
                    pending, last, delegates = [], j, delegates + 1
                elif nxt.kind == KERNEL_CALL:
                    op = absorbed_op(plan.operators[nxt.op_index], tuple(nxt.args), values, tags, volatile)
                    if op is None or not absorbs(backend, op):
                        break
                    pending.append(op)
                elif nxt.kind != FREE_CALL:
                    break
                j += 1
            if delegates >= 2:
                runs.append(Run(ci, pc, last + 1, backend, tuple(parts)))
            pc = last + 1
    return runs


def slots_read_outside(plan, tags: list, values: list) -> Callable[[Run, int], bool]:
    """``outside(run, slot)``: whether anything but ``run`` itself can read ``slot`` (an instruction outside the
    run, in any chain, directly or through a list, or the caller as a method output)."""
    uses: dict[int, list] = {}  # slot -> [(chain, pc), ...] of the instructions that name it

    def note(slot: int, where) -> None:
        if not 0 <= slot < len(tags):
            return
        uses.setdefault(slot, []).append(where)
        if tags[slot] in (TENSOR_LIST, OPT_TENSOR_LIST, INT_LIST) and isinstance(values[slot], tuple):
            for j in values[slot]:
                if 0 <= j < len(tags):
                    uses.setdefault(j, []).append(where)

    for ci, chain in enumerate(plan.chains):
        for pc, ins in enumerate(chain):
            if ins.kind in (KERNEL_CALL, DELEGATE_CALL):
                for a in ins.args:
                    note(a, (ci, pc))
            elif ins.kind == MOVE_CALL:
                note(ins.move_from, (ci, pc))
                note(ins.move_to, (ci, pc))
            elif ins.kind == JUMP_FALSE_CALL:
                note(ins.cond_value_index, (ci, pc))
    outputs = set(plan.outputs)

    def outside(run: Run, slot: int) -> bool:
        if slot in outputs:
            return True
        return any(c != run.chain or not run.start <= pc < run.stop for c, pc in uses.get(slot, ()))
    return outside
