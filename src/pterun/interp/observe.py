"""Watching a method run: the public observer behind ``Method.execute(hook=)``, profiling and ``Method.trace``.

A hook is a function ``hook(event, run)``: ``event`` is the :class:`Event` about to run (an instruction, or one
node of a delegate whose engine can report its nodes), ``run`` a zero-argument function that executes it. The
hook calls ``run()`` once (if it does not, the instruction runs right after the hook returns) and may then read
``event.outputs()``. Nodes of a delegate are reported while its ``DelegateCall`` runs, so a hook that times
``run()`` sees delegate time both per call and per node.

The loop here is the slow, observed twin of :func:`pterun.interp.loop.run_chains`; a method executed without a
hook never enters it.

Example::

    >>> def show(event, run):                                           # doctest: +SKIP
    ...     run()
    ...     print(event.index, event.name, [o.shape for o in event.outputs()])
    >>> method.execute([x], hook=show)                                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pterun._record import Fields
from pterun.errors import InvalidProgramError, KernelError
from pterun.format.schema import INT_LIST, OPT_TENSOR_LIST, TENSOR, TENSOR_LIST
from pterun.interp.loop import JumpFalse
from pterun.interp.tensor import Tensor

__all__ = ["Event", "Hook", "TraceEntry"]


class Event:
    """One instruction (or delegate node) as a hook sees it.

    ``chain`` and ``index`` locate the instruction in the program (the index ExecuTorch's instruction numbering
    uses); ``kind`` is ``"KernelCall"``, ``"DelegateCall"``, ``"MoveCall"``, ``"JumpFalseCall"``, ``"FreeCall"``
    or ``"DelegateNode"`` (then ``node`` is the node's position in the delegate's graph and ``index`` the
    DelegateCall's); ``name`` is the operator (``"aten::add.out"``), ``"delegate XnnpackBackend"``,
    ``"XnnpackBackend/XNNConv2d"`` or the instruction kind.
    """

    __slots__ = ("chain", "index", "kind", "name", "node", "detail", "_read")

    def __init__(self, chain: int, index: int, kind: str, name: str, read: Callable[[], list],
                 node: int | None = None, detail: str | None = None):
        self.chain, self.index, self.kind, self.name, self.node = chain, index, kind, name, node
        self.detail = detail  # e.g. a delegate node's own description, "node 3 (XNNConv2d)"
        self._read = read

    def outputs(self) -> list[np.ndarray]:
        """Copies of the values this instruction wrote (tensors, list items, scalars as 0-d arrays), in argument
        order. Meaningful after ``run()``."""
        return self._read()

    def __repr__(self) -> str:
        node = f", node={self.node}" if self.node is not None else ""
        return f"Event(chain={self.chain}, index={self.index}, kind={self.kind!r}, name={self.name!r}{node})"


#: ``hook(event, run)``: see the module docstring
Hook = Callable[["Event", Callable[[], Any]], Any]


class TraceEntry(Fields):
    """One executed (or folded at load) instruction or delegate node and copies of its outputs."""

    chain: int
    index: int
    kind: str
    name: str
    node: int | None
    folded: bool  # computed once at load (constant folding): the outputs are those constants
    outputs: list


def _copy(v) -> np.ndarray | None:
    if isinstance(v, Tensor):
        return v.array.copy()
    if isinstance(v, np.ndarray):
        return v.copy()
    if v is None or isinstance(v, (bool, int, float, str, np.generic)):
        return None if v is None else np.asarray(v)
    return None


def slot_reader(values: list, tags: list, slots: tuple) -> Callable[[], list]:
    """A function returning copies of value ``slots`` (list values expand to their items)."""
    def read() -> list:
        out = []
        for s in slots:
            tag, v = tags[s], values[s]
            if tag in (TENSOR_LIST, OPT_TENSOR_LIST):
                out.extend(_copy(values[j]) for j in v if j >= 0 and values[j] is not None)
            elif tag == INT_LIST:
                out.append(np.array([values[j] for j in v], np.int64))
            elif tag == TENSOR or not isinstance(v, tuple):
                out.append(_copy(v))
            else:
                out.append(np.asarray(v))
        return [o for o in out if o is not None]
    return read


def _node_reader(read: Callable[[], list]) -> Callable[[], list]:
    return lambda: [c for c in map(_copy, read()) if c is not None]


def run_observed(runner, hook) -> None:
    """Run ``runner``'s chains with ``hook`` around every step (and every node of delegates that report theirs)."""
    for chain in runner.chains:
        jumps, steps, info, events, delegates = chain
        pc, count, n = 0, 0, len(steps)
        limit = runner.instruction_limit
        try:
            while pc < n:
                ev = events[pc]
                call = delegates.get(pc)
                step = steps[pc] if call is None else _observed_delegate(call, ev, hook)
                done = []

                def run(step=step, done=done):
                    if not done:
                        done.append(step())
                    return done[0]
                hook(ev, run)
                nxt = run() if step.__class__ is JumpFalse else (run(), None)[1]
                pc = pc + 1 if nxt is None else nxt
                count += 1
                if jumps and count > limit:
                    raise runner.loop_error(limit, n)
        except Exception as e:
            if isinstance(e, (InvalidProgramError, KernelError)):  # already names the method and instruction
                raise
            raise runner.kernel_error(info, pc, e) from e


def _observed_delegate(call, ev: Event, hook):
    executor, get_args = call
    base = ev.name.removeprefix("delegate ")

    def observe(node: int, desc: str, run, outputs) -> None:
        kind = desc[desc.find("(") + 1 : -1] if desc.endswith(")") and "(" in desc else desc
        node_ev = Event(ev.chain, ev.index, "DelegateNode", f"{base}/{kind}", _node_reader(outputs), node, desc)
        done = []

        def run_once():
            if not done:
                done.append(run())
        hook(node_ev, run_once)
        run_once()

    return lambda: executor.execute_observed(get_args(), observe)


def trace(runner) -> list[TraceEntry]:
    """Run ``runner`` (inputs already set) recording every instruction's and delegate node's outputs."""
    entries: list[TraceEntry] = []

    def record(ev: Event, run) -> None:
        run()
        if ev.kind in ("JumpFalseCall", "FreeCall"):
            return
        entries.append(TraceEntry(ev.chain, ev.index, ev.kind, ev.name, ev.node, False, ev.outputs()))

    runner.run(record)
    if runner.folded_events:  # chains with folded instructions have no jumps: program order is index order
        folded = [TraceEntry(e.chain, e.index, e.kind, e.name, None, True, e.outputs()) for e in runner.folded_events]
        entries = sorted(entries + folded, key=lambda t: (t.chain, t.index, -1 if t.node is None else t.node))
    return entries
