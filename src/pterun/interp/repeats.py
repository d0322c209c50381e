"""Repeated scalar reads: a method input's element read into a Python scalar once, not once per layer.

ExecuTorch's LLM exporter gives every attention layer its own copies of ``input_pos[0]``: a ``select_copy`` of
the input into a 0-D tensor, then ``_local_scalar_dense`` of that tensor, for each KV-cache update and each
attention call (48 instructions of a 12-layer decode step's 180), and one of ``input_pos[-1]`` for the attention
mask's end: of an input whose one dim is fixed at one element, the same element. They all read the same element
of a tensor nothing writes, so they give the same number. :func:`find_repeats` finds them at load; the step builder
(pterun.interp.steps) runs the first pair and copies its result to the other pairs' scalar slots, and the
other pairs leave no step behind.

A pair is a repeat only where nothing can tell: the tensor it reads is a method input that no instruction
writes, by name or, between the two reads, through another value over its bytes (so it is never computed at
load, the first read always runs as a step, and both read the same bytes); its ``select_copy`` has fixed ``dim``
and ``index`` and is the only writer of a 0-D tensor that only its ``_local_scalar_dense`` reads, by name or
through another value over its bytes; that scalar slot has no other writer and nothing reads it before the pair
would have run. Methods with more than one chain or with jumps are left alone.

Example::

    >>> skip, fan_out = find_repeats(plan, values, tags, volatile)   # doctest: +SKIP
    >>> fan_out                                                     # doctest: +SKIP
    {30: ((31, 164), (32, 165), ...)}
"""

from __future__ import annotations

from pterun.format.schema import DELEGATE_CALL, INT, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL, TENSOR
from pterun.interp.access import Accesses, After, kernels_for, written_slots
from pterun.interp.merge import const_int
from pterun.interp.tensor import Tensor

__all__ = ["find_repeats"]

SELECT = "aten::select_copy.int_out"
SCALAR = "aten::_local_scalar_dense"


def find_repeats(plan, values: list, tags: list, volatile: set, acc: Accesses | None = None) \
        -> tuple[frozenset, dict]:
    """(instructions to leave out, {instruction of a first scalar read: ((instruction, scalar slot) of each
    repeat of it, ...)}) for the method's only chain; nothing when the method has another chain or a jump. The
    first read's result is copied to each repeat's scalar slot. ``acc`` tells what reads and writes each value's
    bytes (made here when not given, knowing nothing of what delegates write)."""
    if len(plan.chains) != 1 or any(ins.kind == JUMP_FALSE_CALL for ins in plan.chains[0]):
        return frozenset(), {}
    chain = plan.chains[0]
    if not any(ins.kind == KERNEL_CALL and plan.operators[ins.op_index] == SCALAR for ins in chain):
        return frozenset(), {}
    reads, writes = _reads_and_writes(plan, chain, values)
    outputs, inputs = set(plan.outputs), set(plan.inputs)
    acc = acc if acc is not None else Accesses(plan, values, tags)  # two values may be one buffer: bytes too

    def clobbered(src: int, lo: int, hi: int) -> bool:  # something may write ``src``'s bytes between lo and hi
        return any(lo < pc < hi for k in acc.shared.overlapping(src) for pc in writes.get(k, ()))

    def only(slot: int, pc: int) -> bool:  # ``pc`` is the only instruction naming ``slot`` as written
        return writes.get(slot) == [pc]

    first: dict[tuple, int] = {}  # (source slot, dim, index) -> the first scalar read's instruction
    skip, fan_out = set(), {}
    for pc, ins in enumerate(chain):
        if ins.kind != KERNEL_CALL or plan.operators[ins.op_index] != SELECT:
            continue
        args = tuple(ins.args)
        if len(args) not in (4, 5) or (len(args) == 5 and args[4] != args[3]):
            continue
        src, dim, index, t = args[:4]
        key = _element(src, const_int(dim, values, tags, volatile), const_int(index, values, tags, volatile), values)
        if None in key[1:] or src not in inputs or tags[src] != TENSOR or writes.get(src) or tags[t] != TENSOR or \
                not only(t, pc):
            continue
        if getattr(values[t], "shape", None) != () or t in outputs:
            continue
        readers = [q for q in reads.get(t, ()) if q != pc]
        if len(readers) != 1:
            continue
        (q,) = readers
        scalar = chain[q]
        if scalar.kind != KERNEL_CALL or plan.operators[scalar.op_index] != SCALAR or len(scalar.args) != 2 or \
                scalar.args[0] != t or q < pc:
            continue
        out = scalar.args[1]
        if tags[out] != INT or not only(out, q) or any(r < q for r in reads.get(out, ()) if r != q):
            continue
        if acc.bytes_read(t, 0, After(len(chain), pc + 1), others_only=True):
            continue  # another value over the 0-D tensor's bytes reads what this select writes there
        if key not in first:
            first[key] = q
            continue
        if clobbered(src, first[key], q):
            continue  # the input's bytes may have changed since the first read
        fan_out.setdefault(first[key], []).append((q, out))
        skip.update((pc, q))
    return frozenset(skip), {q: tuple(pairs) for q, pairs in fan_out.items()}


def _element(src: int, dim, index, values: list) -> tuple:
    """(``src``, dim, index) of a select, the dim and the index counted from the front where the input's shape is
    fixed (``input_pos[-1]`` and ``input_pos[0]`` of a one-element input are one read); else as given."""
    t = values[src]
    rank = len(t.shape) if isinstance(t, Tensor) else 0
    if dim is None or index is None or not isinstance(t, Tensor) or t.dynamic or not -rank <= dim < rank:
        return src, dim, index
    dim %= rank
    n = t.shape[dim]
    return src, dim, index % n if -n <= index < n else index


def _reads_and_writes(plan, chain, values) -> tuple[dict, dict]:
    """slot -> instructions reading it, slot -> instructions that may write it (out arguments and return slots of
    kernels, every argument of a delegate call, a move's target), list members included."""
    kernels = kernels_for(plan, chain)
    reads: dict[int, list] = {}
    writes: dict[int, list] = {}

    def note(table: dict, slot: int, pc: int) -> None:
        if not 0 <= slot < len(values):
            return
        table.setdefault(slot, []).append(pc)
        if isinstance(values[slot], tuple):
            for j in values[slot]:
                if isinstance(j, int) and 0 <= j < len(values):
                    table.setdefault(j, []).append(pc)

    for pc, ins in enumerate(chain):
        if ins.kind == KERNEL_CALL:
            kernel = kernels.get(plan.operators[ins.op_index])
            args = tuple(ins.args)
            out = set(args) if kernel is None else set(written_slots(kernel, args))
            for a in dict.fromkeys(args):  # an out variant names its out argument twice (the return slot)
                note(reads, a, pc)
                if a in out:
                    note(writes, a, pc)
        elif ins.kind == DELEGATE_CALL:
            for a in dict.fromkeys(ins.args):
                note(reads, a, pc)
                note(writes, a, pc)
        elif ins.kind == MOVE_CALL:
            note(reads, ins.move_from, pc)
            note(writes, ins.move_to, pc)
    return reads, writes
