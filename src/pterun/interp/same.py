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

Once merged calls read the earlier slot, the later views' results are read by nothing: :func:`unread_views` names
those views, and the steps leave them out (a view only binds its result; in the 130M Llama's decode step that is 22
of its 35 interpreted steps).
"""

from __future__ import annotations

from pterun.format.schema import DELEGATE_CALL, FREE_CALL, INT, INT_LIST, JUMP_FALSE_CALL, KERNEL_CALL, MOVE_CALL
from pterun.interp.access import VIEW
from pterun.interp.moves import expanded

__all__ = ["same_reads", "unread_views"]


def same_reads(plan, acc, fan_out: dict, chain: int, start: int, stop: int, ahead=frozenset()) -> dict[int, int]:
    """slot -> an earlier slot that holds the same value whenever the run of chain ``chain`` over instructions
    ``start..stop-1`` starts (see the module docstring). ``fan_out`` is :func:`.repeats.find_repeats`' second
    result (for chain 0); ``acc`` an :class:`~pterun.interp.access.Accesses` of the method; ``ahead`` the run's
    instructions that run before its call (a first read among them has run too)."""
    code = plan.chains[chain]
    same: dict[int, int] = {}
    if chain == 0:
        for first, repeats in fan_out.items():
            if first < start or first in ahead:
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


def unread_views(plan, values: list, chain: int, merged: dict, absorbed: frozenset) -> frozenset:
    """The instructions of ``chain`` that are ``et_view`` calls whose result nothing that runs after them reads: not
    a method input or output, not an argument (or a member of a list argument) of a later instruction that runs,
    not an argument of a merged call (``merged``: (chain, first instruction) -> its record, with ``args`` and the
    ``run``'s ``deferred`` instructions; ``absorbed``: every (chain, instruction) merged calls stand for; a list
    slot of ``values``, the method's live values, names its members). Views
    only views left unread read are unread too. Only a method of one chain without jumps is looked at: elsewhere
    "after" is not program order."""
    code = plan.chains[chain]
    if len(plan.chains) != 1 or any(ins.kind == JUMP_FALSE_CALL for ins in code):
        return frozenset()
    read = set(plan.inputs) | set(plan.outputs)
    unread = set()
    for pc in range(len(code) - 1, -1, -1):
        ins = code[pc]
        m = merged.get((chain, pc))
        if m is not None:
            read.update(expanded(m.args, values))
            for d in m.run.deferred:
                read.update(expanded(_named(code[d]), values))
            continue
        if (chain, pc) in absorbed:
            continue
        if _is_view(plan, ins) and len(ins.args) == 3 and ins.args[2] not in read and ins.args[2] != ins.args[0]:
            unread.add(pc)
            continue
        read.update(expanded(_named(ins), values))
    return frozenset(unread)


def _named(ins) -> tuple:
    """The slots an instruction names (a FreeCall's none: it changes nothing)."""
    if ins.kind == MOVE_CALL:
        return ins.move_from, ins.move_to
    if ins.kind == JUMP_FALSE_CALL:
        return (ins.cond_value_index,)
    if ins.kind == FREE_CALL:
        return ()
    return tuple(ins.args)

