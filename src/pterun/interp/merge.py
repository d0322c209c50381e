"""Merging neighbouring delegate calls: one backend call where the program makes several.

ExecuTorch runs each delegate of a program on its own, with the portable operators between them on the CPU. In a
decode step of an exported LLM that is ~120 XNNPACK calls, most of them a handful of elementwise nodes, separated
by nothing or by one ``mean`` (the RMSNorm's). Each call costs a boundary: copying inputs in and outputs out, and
the backend's own invocation. This pass finds *runs*: instructions of one chain that are DelegateCalls to the same
backend, or operators that backend can run inside its graph (:class:`Absorbed`: the operators its
``absorbed_forms`` names, read here in that form), with nothing else between. The backend's ``merge`` then builds
one executor for the run, or declines (returns None), and the delegates run one by one as before.

What a run reads from outside becomes the merged call's inputs; what it writes that anything outside the run
reads (a later instruction, another chain, a method output) becomes its outputs. Values only the run itself reads
never reach the method's memory. Two values may be one buffer, so "reads" is worked out by bytes
(:mod:`pterun.interp.access`): a value is read outside when any value over its bytes is. Chains with jumps are
left alone (a jump could land inside a run).

Example::

    >>> runs = find_runs(plan, values, tags, volatile, mergers, absorbed, later, acc)   # doctest: +SKIP
    >>> [(r.chain, r.start, r.stop) for r in runs]                                      # doctest: +SKIP
    [(0, 101, 112), ...]
"""

from __future__ import annotations

from collections.abc import Callable

from pterun._record import Fields
from pterun.delegates import KernelArg
from pterun.format.schema import (DELEGATE_CALL, FREE_CALL, INT_LIST, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL,
                                  OPT_TENSOR_LIST, TENSOR_LIST)
from pterun.interp.access import Accesses, After, view_roots
from pterun.interp.forms import Absorbed, absorbed_op, const_int, kernel_op  # noqa: F401  (the merge's vocabulary)
from pterun.interp.moves import ahead_of_call, byte_spans, first_conflict
from pterun.interp.tensor import Tensor

__all__ = ["Absorbed", "DelegatePart", "Run", "absorbed_op", "const_int", "find_runs", "kernel_op",
           "slots_read_outside"]


class DelegatePart(Fields):
    """A DelegateCall inside a run: the delegate's index and the call's argument slots."""

    delegate_index: int
    args: tuple


class Run(Fields):
    """Instructions ``start..stop-1`` of chain ``chain``: the parts in order (DelegatePart or Absorbed), the
    backend they all belong to, and the instructions among them that run after the merged call, in order
    (``deferred``), and before it (``ahead``: :mod:`.moves`)."""

    chain: int
    start: int
    stop: int
    backend: str
    parts: tuple
    deferred: tuple = ()
    ahead: tuple = ()


def find_runs(plan, values: list, tags: list, volatile: set, mergers: Callable[[int], str | None],
              absorbed: Callable[[str, str, tuple], Absorbed | None], later: Callable | None = None,
              acc: Accesses | None = None, home: str | None = None, fixed: frozenset = frozenset(),
              gone: frozenset = frozenset(), bound: tuple | None = None) -> list[Run]:
    """Runs of at least two DelegateCalls to one backend, or one and an operator it holds as a kernel (the
    ``kernel`` form of :class:`Absorbed`). ``mergers(delegate_index)`` names the delegate's backend
    when that backend can merge, else None; ``absorbed(backend, operator, args)`` is the :class:`Absorbed` form
    of a KernelCall the backend can run inside its merged graph, else None (asked once per backend, operator and
    arguments: each run that starts before an instruction would ask again).

    ``later(instruction)``, when given, lets a run reach past KernelCalls the backend cannot hold: it returns the
    (read, written) slots of a KernelCall that may run after the merged call instead of before it, or None.
    Such an instruction is *deferred* (``Run.deferred``) only where moving it is invisible: nothing later in the
    run reads or writes what it writes or writes what it reads, and none of the memory it touches is memory the
    merged call writes for anything later in the run. An absorbed ``view`` whose result is read outside the run
    is deferred too (it is replayed after the call: a view costs nothing but its binding).

    What is read outside the run is worked out by bytes (``acc``, made here when not given): a slot the run writes
    is read outside when any value over its bytes is read after the merged call before they are overwritten.

    ``home``, when given, names a backend that also compiles runs with no delegate call in them
    (:meth:`pterun.delegates.Backend.compiles`): such a run starts at an operator it holds as a kernel, and is
    kept where it is worth one call (:func:`_worth_a_call`).

    ``fixed`` names (chain, instruction) pairs of work folding does at load (:meth:`pterun.interp.fold.Folder.
    foreseen`), which a merged call would do on every call: no run starts at one (nor takes in one before
    its start), and a delegate call among them ends a run. A run that has started holds the operators among them
    it can: computing them inside its graph costs less than a call more. ``gone`` names those folding has already
    computed (:meth:`pterun.interp.fold.Folder.ahead`): a run passes over them as over a FreeCall, and reads what
    they wrote as constants. ``bound``, (``sizes(delegate_index)``, ``max_bytes(backend)``), bounds the bytes of
    a run's delegates (:func:`_room`; :attr:`pterun.delegates.Backend.merge_bytes`).
    """
    uses = _uses(plan, tags, values)
    outputs = set(plan.outputs)
    root = view_roots(plan)
    acc = acc if acc is not None else Accesses(plan, values, tags)
    span = byte_spans(values)
    absorbed = _asked_once(absorbed)
    runs = []
    for ci, chain in enumerate(plan.chains):
        if any(ins.kind == JUMP_FALSE_CALL for ins in chain):
            continue
        pc, n, floor = 0, len(chain), 0
        barred = {at for c, at in fixed if c == ci}
        skip = {at for c, at in gone if c == ci}
        while pc < n:
            backend, items = _start(chain, floor, pc, plan, mergers, absorbed, home, barred, skip)
            if backend is None:
                pc += 1
                continue
            room = None if bound is None else _room(items, backend, *bound)
            items += _following(chain, pc, backend, plan, mergers, absorbed, later, barred, skip, room)
            run = _settle(ci, backend, items, chain, values, uses, outputs, root, later, span, acc)
            if run is None:
                pc += 1
                continue
            runs.append(run)
            pc = floor = run.stop
    return runs


def _room(items, backend: str, sizes, max_bytes) -> tuple | None:
    """(sizes, bytes left) of the bound on a run of ``backend`` that starts with ``items``, or None (no bound). A
    run ends before the delegate call that would take its delegates past the bound; its first one always fits."""
    bound = max_bytes(backend)
    if bound is None:
        return None
    return sizes, bound - sum(sizes(p.delegate_index) for _, p in items if isinstance(p, DelegatePart))


def _following(chain, pc: int, backend: str, plan, mergers, absorbed, later, barred: set, skip: set,
               room: tuple | None = None) -> list:
    """The instructions after ``pc`` a run of ``backend`` may hold, as (pc, part or None: deferred), up to the
    first it cannot (or a delegate call folding runs at load, or one whose payload bytes would exceed what is
    left of the bound: ``room`` is (sizes, bytes left)); folded ones (``skip``) are passed over."""
    items = []
    sizes, left = room if room is not None else (None, 0)
    for j in range(pc + 1, len(chain)):
        nxt = chain[j]
        if j in skip:
            continue
        if j in barred and nxt.kind == DELEGATE_CALL:
            break
        if nxt.kind == DELEGATE_CALL and mergers(nxt.delegate_index) == backend:
            if sizes is not None:
                left -= sizes(nxt.delegate_index)
                if left < 0:
                    break
            items.append((j, DelegatePart(nxt.delegate_index, tuple(nxt.args))))
        elif nxt.kind == KERNEL_CALL:
            op = absorbed(backend, plan.operators[nxt.op_index], tuple(nxt.args))
            if op is not None:
                items.append((j, op))
            elif later is not None and later(nxt) is not None:
                items.append((j, None))
            else:
                break
        elif nxt.kind != FREE_CALL:
            break
    return items


def _asked_once(absorbed: Callable) -> Callable:
    """``absorbed``, with each answer kept (the same operator with the same arguments is held the same way)."""
    known: dict[tuple, Absorbed | None] = {}

    def held(backend: str, name: str, args: tuple) -> Absorbed | None:
        key = (backend, name, args)
        if key not in known:
            known[key] = absorbed(backend, name, args)
        return known[key]
    return held


def _start(chain, floor: int, pc: int, plan, mergers, absorbed, home, barred: set, skip: set) -> tuple:
    """(backend, the run's first items as (pc, part or None: deferred)) for a run that may start at ``pc``, or
    (None, None): at a delegate call, with the operators its backend holds right before it; at an operator the
    ``home`` backend holds as a kernel. No run holds an instruction of ``barred``."""
    if pc in barred:
        return None, None
    ins = chain[pc]
    backend = mergers(ins.delegate_index) if ins.kind == DELEGATE_CALL else None
    if backend is not None:
        lead_floor = max((b + 1 for b in barred - skip if b < pc), default=0)  # folding does what is before it
        items = _leading(chain, max(floor, lead_floor), pc, backend, plan, absorbed, skip)
        return backend, items + [(pc, DelegatePart(ins.delegate_index, tuple(ins.args)))]
    if home is not None and ins.kind == KERNEL_CALL:
        op = absorbed(home, plan.operators[ins.op_index], tuple(ins.args))
        if op is not None and op.op == "kernel":
            return home, [(pc, op)]
    return None, None


def _leading(chain, floor: int, pc: int, backend: str, plan, absorbed, skip: set = frozenset()) -> list:
    """The instructions from ``floor`` up to ``pc`` (a delegate call) that lead into its run: the operators right
    before it that ``backend`` holds (FreeCalls and what was folded, ``skip``, passed over), as (pc, Absorbed), in
    order. Views are left out, and end the lead: one read outside the run would be replayed after the call, which
    the instructions between could forbid, cutting the run short."""
    lead = []
    k = pc - 1
    while k >= floor:
        ins = chain[k]
        if k in skip:  # folded at load: nothing left of it to run
            k -= 1
            continue
        if ins.kind == KERNEL_CALL:
            op = absorbed(backend, plan.operators[ins.op_index], tuple(ins.args))
            if op is None or op.op == "view":
                break
            lead.append((k, op))
        elif ins.kind != FREE_CALL:
            break
        k -= 1
    return lead[::-1]


def _settle(ci, backend, items, chain, values, uses, outputs, root, later, span, acc) -> Run | None:
    """The longest prefix of ``items`` that ends on a delegate call or an operator held as a kernel, holds two
    delegate calls or one and a kernel, and whose deferred instructions may run after the merged call; None when
    there is none. The run is cut before the first element a deferred instruction may not move past, and settled
    again (what is read outside changes)."""
    while True:
        while items and not (isinstance(items[-1][1], DelegatePart) or _is_kernel(items[-1][1]) and
                             not _on_constants(items[-1][1])):
            # a run ends on a delegate call or a kernel: views and the like gain nothing there, and an operator on
            # constants alone (a weight's transpose) belongs to the run that reads it (or to the folder)
            items = items[:-1]
        calls = sum(isinstance(p, DelegatePart) for _, p in items)
        if calls < 2 and not (calls == 1 and any(_is_kernel(p) for _, p in items)) and \
                not (calls == 0 and _worth_a_call(items)):
            return None
        start, stop = items[0][0], items[-1][0] + 1
        ahead = ahead_of_call(items, chain, values, root, later, span, acc.delegate_outputs)
        deferred = {pc for pc, p in items if p is None} - ahead

        def named_outside(slot: int) -> bool:
            return slot in outputs or any(c != ci or not start <= pc < stop or pc in deferred or pc in ahead
                                          for c, pc in uses.get(slot, ()))

        for pc, p in reversed(items):  # a view read outside is replayed (later views first: views of views)
            if isinstance(p, Absorbed) and p.op == "view" and named_outside(p.outputs[0]):
                deferred.add(pc)
        items = _replay_constants(items, deferred, named_outside)

        known: dict[int, bool] = {}  # this settling's answers, by slot

        def outside(slot: int, deferred=frozenset(deferred), known=known) -> bool:
            got = known.get(slot)
            if got is None:
                got = known[slot] = _read_outside(uses, outputs, acc, ci, start, stop, deferred, slot, ahead)
            return got
        bad = first_conflict(items, deferred, chain, values, root, later, outside, span, ahead, acc.delegate_outputs)
        if bad is None:
            parts = tuple(p for _, p in items if p is not None)
            return Run(ci, start, stop, backend, parts, tuple(sorted(deferred)), tuple(sorted(ahead)))
        items = [(pc, p) for pc, p in items if pc < bad]


#: operators whose work alone is worth one call of a backend (a run of portable operators with one of these, or
#: with at least :data:`RUN_MIN_KERNELS` operators, is compiled; fewer cheap ones run faster as NumPy kernels)
HEAVY_KERNELS = frozenset({"aten::convolution.out", "aten::addmm.out", "aten::mm.out", "aten::bmm.out",
                           "aten::linear.out", "aten::_softmax.out", "aten::native_layer_norm.out"})
RUN_MIN_KERNELS = 4


def _worth_a_call(items) -> bool:
    """Whether a run without delegate calls is worth compiling into one call."""
    kernels = [p for _, p in items if _is_kernel(p)]
    return len(kernels) >= RUN_MIN_KERNELS or any(p.attrs["name"] in HEAVY_KERNELS for p in kernels)


def _on_constants(part) -> bool:
    """Whether a kernel reads only constants of the program (the merged graph computes it at load)."""
    tensors = [a for a in part.attrs["args"] if isinstance(a, KernelArg) and not a.out]
    return bool(tensors) and all(a.const for a in tensors)


def _is_kernel(part) -> bool:
    return isinstance(part, Absorbed) and part.op == "kernel"


def _replay_constants(items, deferred: set, named_outside) -> list:
    """``items`` with the operators computed from constants alone (program constants, or what such operators
    before them in the run computed) that something outside the run reads by name marked ``replayed``, with the
    ones in the run they read from: the merged graph computes them for itself (at load), and the interpreter
    replays them after the call for the outside readers (folding computes them at load too). Their pcs join
    ``deferred``."""
    made: dict[int, int] = {}  # slot -> the item index of the constant operator that writes it
    const_items: dict[int, set] = {}  # item index -> the item indices of the constant operators it reads from
    for k, (pc, p) in enumerate(items):
        if not _is_kernel(p):
            continue
        tensors = list(zip((x for x in p.attrs["args"] if isinstance(x, KernelArg) and not x.out), p.inputs))
        if tensors and all(a.const or slot in made for a, slot in tensors):
            const_items[k] = {made[slot] for a, slot in tensors if slot in made}
            for slot in p.outputs:
                made[slot] = k
    wanted = [k for k in const_items if any(named_outside(slot) for slot in items[k][1].outputs[:1])]
    replay: set[int] = set()
    while wanted:
        k = wanted.pop()
        if k not in replay:
            replay.add(k)
            wanted.extend(const_items[k])
    if not replay:
        return items
    out = list(items)
    for k in replay:
        pc, p = out[k]
        deferred.add(pc)
        out[k] = (pc, p._replace(attrs={**p.attrs, "replayed": True}))
    return out


def _uses(plan, tags: list, values: list) -> dict:
    """slot -> [(chain, pc), ...] of the instructions that name it, directly or through a list."""
    uses: dict[int, list] = {}

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
    return uses


def _read_outside(uses: dict, outputs: set, acc: Accesses, ci: int, start: int, stop: int, deferred, slot: int,
                  ahead=frozenset()) -> bool:
    """Whether anything but the merged call of the run ``start..stop-1`` of chain ``ci`` can read ``slot``: by name
    (an instruction outside the run, deferred past its call or moved ahead of it, in any chain, or the caller as a
    method output), or through another value over the same bytes before they are overwritten (deferred
    instructions, the rest of the chain, the outputs, the next call up to the run)."""
    if slot in outputs or any(c != ci or not start <= pc < stop or pc in deferred or pc in ahead
                              for c, pc in uses.get(slot, ())):
        return True
    if not acc.shared.overlapping(slot):
        return False
    # what the run writes after ``slot`` reaches memory after it (the merged call writes its outputs in run order),
    # and a slot read by name outside the run is one of those outputs: reading it reads its own value. A deferred
    # instruction that came before the write sees memory as it was then (find_runs keeps the writes after it from
    # reaching what it touches), so only those after it can read these bytes.
    last = acc.last_write(slot, ci, start, stop, deferred)
    last = start - 1 if last is None else last
    again = acc.written_in(ci, last + 1, stop, deferred)
    after = After(len(acc.plan.chains[ci]), stop, first=sorted(d for d in deferred if d > last), until=start)
    return acc.bytes_read(slot, ci, after, others_only=True, written=again)


def slots_read_outside(plan, tags: list, values: list, acc: Accesses | None = None) -> Callable[[Run, int], bool]:
    """``outside(run, slot)``: whether anything but ``run``'s merged call can read ``slot`` (an instruction outside
    the run, deferred past its call or moved ahead of it, in any chain, directly or through a list, or the caller as a method
    output), by name or through another value laid over the same bytes (:func:`_read_outside`)."""
    uses = _uses(plan, tags, values)
    outputs = set(plan.outputs)
    acc = acc if acc is not None else Accesses(plan, values, tags)

    known: dict = {}

    def outside(run: Run, slot: int) -> bool:
        key = (run.chain, run.start, run.stop, run.deferred, run.ahead, slot)
        got = known.get(key)
        if got is None:
            got = known[key] = _read_outside(uses, outputs, acc, run.chain, run.start, run.stop,
                                             frozenset(run.deferred), slot, frozenset(run.ahead))
        return got
    return outside
