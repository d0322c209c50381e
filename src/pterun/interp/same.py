"""One value under several names: the slots a merged call may read in place of others.

ExecuTorch's LLM exporter gives each layer its own copy of what a decode step computes once: the position
(``input_pos[0]`` read into an int once per cache update and attention: :mod:`.repeats`) and the RoPE rows (an
``et_view`` of the same slice per layer). Merged into one call, every copy became an input of its own, filled and
bound on every call: the 130M Llama's joined layers had 134 inputs, 48 of them the one position and 24 the two
RoPE row tables. :func:`same_reads` names, for a run, the slots that hold at its start exactly what an earlier
slot holds; the merge reads that slot in their place.

Two kinds qualify, both worked out at load:

* a repeated scalar read (:func:`.repeats.find_repeats`) whose first read comes before the run: the step builder
  copies the first read's int into the repeat's slot there, so from then on both hold it;
* the result of an ``et_view`` before the run that views the same tensor with the same sizes as an earlier
  ``et_view`` (each size a constant nothing writes, or the same int slot), where nothing but views names either
  result before the run, and nothing writes the viewed tensor or a size slot from the first view to the run's
  start, nor the viewed tensor inside the run: both are then the same memory at the same shape.
"""

from __future__ import annotations

from pterun.format.schema import DELEGATE_CALL, INT, INT_LIST, KERNEL_CALL, MOVE_CALL
from pterun.interp.access import VIEW

__all__ = ["same_reads"]


def same_reads(plan, acc, fan_out: dict, chain: int, start: int, stop: int) -> dict[int, int]:
    """slot -> an earlier slot that holds the same value whenever the run of chain ``chain`` over instructions
    ``start..stop-1`` starts (see the module docstring). ``fan_out`` is :func:`.repeats.find_repeats`' second
    result (for chain 0); ``acc`` an :class:`~pterun.interp.access.Accesses` of the method."""
    code = plan.chains[chain]
    same: dict[int, int] = {}
    if chain == 0:
        for first, repeats in fan_out.items():
            if first < start:
                slot = code[first].args[-1]
                same.update({r: slot for _, r in repeats})
    firsts: dict[tuple, tuple] = {}  # (viewed slot, sizes) -> (pc, result slot) of the first such view
    set_ints = _ints_set(plan)
    for pc in range(start):
        ins = code[pc]
        if not _is_view(plan, ins):
            continue
        src, sizes, out = ins.args[:3]
        key = _view_key(plan, set_ints, src, sizes)
        if key is None:
            continue
        got = firsts.setdefault(key, (pc, out))
        if got[1] == out:
            continue
        watched = {src, got[1], out, *(m for kind, m in key[1] if kind == "slot")}
        if _only_views_name(plan, code, watched, got[0] + 1, start, allowed={pc}) and \
                not _written(acc, src, chain, start, stop) and not _rebound(plan, code, {got[1], out}, start, stop):
            same[out] = got[1]
    return same


def _rebound(plan, code, slots: set, lo: int, hi: int) -> bool:
    """Whether an et_view ``lo..hi-1`` points one of ``slots`` elsewhere."""
    return any(_is_view(plan, code[pc]) and code[pc].args[2] in slots for pc in range(lo, hi))


def _is_view(plan, ins) -> bool:
    return ins.kind == KERNEL_CALL and 0 <= ins.op_index < len(plan.operators) and \
        plan.operators[ins.op_index] == VIEW and len(ins.args) >= 3


def _ints_set(plan) -> frozenset:
    """The slots an instruction may set: every kernel's last argument (its result), what a move writes, every
    argument of a delegate call."""
    got = set()
    for code in plan.chains:
        for ins in code:
            if ins.kind == KERNEL_CALL and ins.args:
                got.add(ins.args[-1])
            elif ins.kind == MOVE_CALL:
                got.add(ins.move_to)
            elif ins.kind == DELEGATE_CALL:
                got.update(ins.args)
    return frozenset(got)


def _view_key(plan, set_ints: frozenset, src: int, sizes: int) -> tuple | None:
    """(the viewed slot, each size as ("const", value) or ("slot", int slot)), or None for sizes not read that
    way."""
    tag, members = plan.values[sizes]
    if tag != INT_LIST or sizes in set_ints:
        return None
    key = []
    for m in members:
        mtag, value = plan.values[m]
        if mtag != INT:
            return None
        key.append(("slot", m) if m in set_ints else ("const", value))
    return src, tuple(key)


def _only_views_name(plan, code, slots: set, lo: int, hi: int, allowed: set) -> bool:
    """Whether no instruction ``lo..hi-1`` but et_views reading them (and those at ``allowed``) names ``slots``:
    nothing writes, resizes or rebinds them there."""
    for pc in range(lo, hi):
        ins = code[pc]
        if pc in allowed:
            continue
        args = getattr(ins, "args", None)
        if ins.kind == MOVE_CALL:
            args = (ins.move_from, ins.move_to)
        if not args or slots.isdisjoint(args):
            continue
        if _is_view(plan, ins) and ins.args[2] not in slots:
            continue  # another view of one of them: binds its own result only
        return False
    return True


def _written(acc, slot: int, chain: int, lo: int, hi: int) -> bool:
    """Whether an instruction ``lo..hi-1`` of ``chain`` certainly writes ``slot``'s memory, by name or through a
    view of it or of what it views."""
    roots = acc.roots
    root = roots.get(slot, slot)
    return any(roots.get(k, k) == root for pc in range(lo, hi) for k in acc.named_writes[chain][pc])
