"""Which instructions a merged call may move: past it (deferred: they run after the call) or ahead of it.

A run (:mod:`.merge`) may reach past KernelCalls its backend cannot hold. Each is moved out of the merged call:

* *ahead* of it (:func:`ahead_of_call`), where it reads nothing the run's elements before it write and writes
  nothing they name, by slot and by bytes, and no instruction before it in the run is deferred. It then runs
  before the merged call, in program order with the others moved ahead: an LLM's position ints and RoPE rows,
  computed after its first delegate call, no longer cut the step's run there;
* else *after* it (deferred), where nothing later in the run reads or writes what it writes or writes what it
  reads, and none of the memory it touches is memory the merged call writes for anything later in the run
  (:func:`first_conflict` finds the first element one may not move past; the run is cut there).

Two values may be one buffer: every test is by view roots and by byte ranges (:func:`byte_spans`), not by value
indices alone.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from pterun.interp.access import storage_span
from pterun.interp.tensor import Tensor

__all__ = ["ahead_of_call", "byte_spans", "expanded", "first_conflict", "meets_read_outside"]


def ahead_of_call(items, chain, values, root, later, span, outputs_of=lambda i: None) -> frozenset:
    """The moved instructions of a run (``items``: (pc, part or None: moved), in order) that may run before its
    merged call: from the first on, each that reads nothing an element of the run before it writes (by view root or
    by bytes), writes nothing such an element touches or names as its result, and follows no moved instruction
    that stays deferred. ``later(instruction)`` gives a moved instruction's (read, written) slots; ``root`` maps a
    slot to the slot whose memory it views; ``span(slot)`` its byte range; ``outputs_of(delegate index)`` the
    positions of the arguments a delegate writes (None: all of them, as far as anyone knows)."""
    ahead = set()
    before = []  # (roots touched, roots written, names given, bytes touched, bytes written) of each element so far
    for pc, p in items:
        ins = chain[pc]
        if p is not None:
            touched = _roots_of(ins.args, values, root)
            if _is_call(p):
                named = set(_call_writes(p, ins, outputs_of))
                written = _roots_of(named, values, root)
            else:  # an absorbed view writes no memory but binds its result; other operators write their outputs
                written = set() if p.op == "view" else {root.get(s, s) for s in p.outputs}
                named = set(p.outputs)
            before.append((touched, written, named, _spans_of(touched, span), _spans_of(written, span)))
            continue
        reads, writes = _moved(None, ins, values, root, later)
        names = set(expanded(ins.args, values))
        read_at, write_at = _spans_of(reads, span), _spans_of(writes, span)
        if any(writes & t or reads & w or names & n or _meet(write_at, tb) or _meet(read_at, wb)
               for t, w, n, tb, wb in before):
            break  # this one, and every moved instruction after it, stays deferred (or cuts the run)
        ahead.add(pc)
    return frozenset(ahead)


def _is_call(part) -> bool:
    """Whether an element of a run is a delegate call (:class:`.merge.DelegatePart`)."""
    return hasattr(part, "delegate_index")


def _call_writes(part, ins, outputs_of) -> tuple:
    """The argument slots a delegate call writes: those its backend names, else every one."""
    outs = outputs_of(part.delegate_index)
    return tuple(ins.args) if outs is None else tuple(a for k, a in enumerate(ins.args) if k in outs)


def first_conflict(items, deferred, chain, values, root, later, outside, span, ahead=frozenset(),
                   outputs_of=lambda i: None) -> int | None:
    """The first element of the run that a deferred instruction before it may not move past, or None. Each
    deferred instruction is checked against the elements after it up to the first conflict found so far (found by
    bisection), and what an element touches is worked out when first checked: nothing past the first conflict is.
    The instructions ``ahead`` run before the call (:func:`ahead_of_call`): neither moved past nor checked. A
    delegate call writes the arguments ``outputs_of(delegate index)`` names (None: every one)."""
    kept = [(q, e) for q, e in items if q not in deferred and q not in ahead]  # deferred ones keep their order
    at = [q for q, _ in kept]
    known: dict[int, tuple] = {}

    def touches(k: int) -> tuple:
        """(slots touched, slots written, touched bytes, (slot, bytes) written) of ``kept[k]``, once, when asked."""
        got = known.get(k)
        if got is None:
            q, e = kept[k]
            touched = _roots_of(chain[q].args, values, root)
            if _is_call(e):
                written = _roots_of(_call_writes(e, chain[q], outputs_of), values, root)
            else:  # an absorbed view writes no memory; other absorbed operators their output
                written = set() if e.op == "view" else {root.get(s, s) for s in e.outputs}
            got = known[k] = (touched, written, _spans_of(touched, span),
                              [(s, span(s)) for s in written if span(s) is not None])
        return got

    first = None
    for pc, p in items:
        if pc not in deferred:
            continue
        reads, writes = _moved(p, chain[pc], values, root, later)
        mine_w, mine_rw = _spans_of(writes, span), _spans_of(reads | writes, span)
        for k in range(bisect_left(at, pc), len(at) if first is None else bisect_left(at, first)):
            touched, written, touched_at, written_at = touches(k)
            # a slot both sides name is caught by the set tests; the byte ranges catch different slots laid
            # over the same memory (the memory plan reuses it)
            if writes & touched or reads & written or _meet(mine_w, touched_at) or \
                    meets_read_outside(mine_rw, written_at, outside):
                first = at[k]
                break
    return first


def meets_read_outside(ranges: list, written: list, outside) -> bool:
    """Whether any byte range of ``ranges`` meets those of a slot of ``written`` ((slot, range) pairs) that is read
    outside the run (asked last, the costly test)."""
    for slot, (lo, hi) in written:
        for a, b in ranges:
            if a < hi and lo < b:
                if outside(slot):
                    return True
                break
    return False


def _moved(p, ins, values, root, later) -> tuple[set, set]:
    """(slots read, slots written) of a deferred instruction, by their view roots: a kernel the run reaches past
    (``p`` None) as ``later`` says, a list out as its members; a replayed view writes only its own binding, a
    replayed operator on constants its outputs."""
    if p is None:
        reads, writes = later(ins)
        return _roots_of(reads, values, root), _roots_of(writes, values, root)
    return _roots_of(ins.args, values, root), ({root.get(s, s) for s in p.outputs} if p.op == "kernel" else set())


def _roots_of(args, values, root) -> set:
    """The view roots of argument slots, with the members of list arguments."""
    return {root.get(s, s) for s in expanded(args, values)}


def _spans_of(slots, span) -> list:
    """The byte ranges of the slots that have bytes."""
    return [r for r in map(span, slots) if r is not None]


def _meet(a: list, b: list) -> bool:
    """Whether any byte range of ``a`` meets one of ``b`` (as ``np.may_share_memory`` decides for flat storages)."""
    for x0, x1 in a:
        for y0, y1 in b:
            if x0 < y1 and y0 < x1:
                return True
    return False


def byte_spans(values: list) -> Callable[[int], tuple | None]:
    """``span(slot)``: the [start, end) addresses of a tensor slot's storage, None for anything else or no bytes;
    worked out once per slot (the memory layout is fixed once a method is loaded)."""
    known: dict[int, tuple | None] = {}

    def span(slot: int):
        if slot not in known:
            v = values[slot] if 0 <= slot < len(values) else None
            known[slot] = storage_span(v) if isinstance(v, Tensor) else None
        return known[slot]
    return span


def expanded(args, values) -> list:
    """Argument slots, with the members of list arguments."""
    out = []
    for a in args:
        out.append(a)
        if 0 <= a < len(values) and isinstance(values[a], tuple):
            out.extend(j for j in values[a] if isinstance(j, int) and 0 <= j < len(values))
    return out
