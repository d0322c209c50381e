"""The byte-level questions of pterun.interp.access and the helpers pterun.interp.merge asks them through: which
slots escape a chain's order (another chain's use, shared state), and what the merge asks only where it decides."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from merge_util import SyntheticPlan
from pterun.format.schema import TENSOR, DelegateCall
from pterun.interp.access import Accesses, After
from pterun.interp.merge import _asked_once
from pterun.interp.moves import meets_read_outside
from pterun.interp.tensor import Tensor


def _over(arena, start: int) -> Tensor:
    """A float32 [4] tensor over 16 bytes of ``arena`` from ``start``."""
    return Tensor(np.dtype(np.float32), (4,), (0,), arena[start:start + 16])


def _accesses(chains, state=()):
    """Slots 0 and 1 meet (bytes 0-16 and 8-24 of one arena), 2 and 3 lie apart; every test delegate reads its first
    argument and writes its second; ``state``: slots other methods share (memory id 2)."""
    arena = np.zeros(64, np.uint8)
    values = [_over(arena, 0), _over(arena, 8), _over(arena, 32), _over(arena, 48)]
    plan = SyntheticPlan(chains, [], tags=[TENSOR] * 4)
    for k in state:
        plan.values[k] = (TENSOR, SimpleNamespace(memory_id=2))
    return Accesses(plan, values, [TENSOR] * 4, delegate_outputs=lambda i: frozenset({1}))


def test_bytes_another_chain_uses_through_another_slot_are_read():
    acc = _accesses([[DelegateCall(0, (2, 0))], [DelegateCall(1, (2, 3)), DelegateCall(2, (1, 3))]])
    # nothing runs after either point of its own chain, but chain 1 reads slot 1, over slot 0's bytes, and chain 0
    # writes slot 0, over slot 1's: no order between the chains is known
    assert acc.bytes_read(0, 0, After(1, 1, wrap=False), others_only=True)
    assert acc.bytes_read(1, 1, After(2, 2, wrap=False))
    assert acc.bytes_read(3, 1, After(2, 2), others_only=True) is False  # slot 3 meets no other slot


def test_only_another_chains_use_of_the_slot_itself_is_left_out_with_others_only():
    acc = _accesses([[DelegateCall(0, (2, 0))], [DelegateCall(1, (0, 3))]])
    assert acc.bytes_read(0, 0, After(1, 1))
    assert acc.bytes_read(0, 0, After(1, 1), others_only=True) is False  # the next call overwrites them whole


def test_state_over_a_lone_chains_bytes_is_read():
    chains = [[DelegateCall(0, (2, 0)), DelegateCall(1, (3, 2))]]
    assert _accesses(chains, state=(1,)).bytes_read(0, 0, After(2, 1), others_only=True)
    assert _accesses(chains, state=(3,)).bytes_read(0, 0, After(2, 1), others_only=True) is False


def test_what_is_read_outside_is_asked_only_for_slots_whose_bytes_meet():
    asked = []

    def outside(slot):
        asked.append(slot)
        return slot == 2

    assert not meets_read_outside([(0, 8)], [(1, (8, 16)), (2, (16, 24))], outside) and asked == []
    assert not meets_read_outside([(0, 10)], [(1, (8, 16)), (2, (16, 24))], outside) and asked == [1]
    assert meets_read_outside([(0, 10), (20, 30)], [(1, (8, 16)), (2, (16, 24))], outside) and asked == [1, 1, 2]


def test_an_operator_is_asked_about_once_per_backend_and_arguments():
    asked = []

    def absorbed(backend, name, args):
        asked.append((backend, name, args))
        return None if name == "b" else (name, args)

    held = _asked_once(absorbed)
    got = [held("X", "a", (1, 2)), held("X", "a", (1, 2)), held("X", "b", (1,)), held("X", "b", (1,)),
           held("Y", "a", (1, 2)), held("X", "a", (2, 1))]
    assert got == [("a", (1, 2)), ("a", (1, 2)), None, None, ("a", (1, 2)), ("a", (2, 1))]
    assert asked == [("X", "a", (1, 2)), ("X", "b", (1,)), ("Y", "a", (1, 2)), ("X", "a", (2, 1))]


def test_written_in_answers_from_each_slots_writes_in_the_range_and_chain():
    # chain 0 writes slot 0 at pc 0 and pc 2 (each test delegate writes its second argument), slot 2 at pc 1
    acc = _accesses([[DelegateCall(0, (3, 0)), DelegateCall(1, (3, 2)), DelegateCall(2, (3, 0))],
                     [DelegateCall(3, (0, 1))]])
    assert 0 in acc.written_in(0, 0, 1) and 2 not in acc.written_in(0, 0, 1)
    assert 0 in acc.written_in(0, 1, 3) and 2 in acc.written_in(0, 1, 3)
    assert 0 not in acc.written_in(0, 1, 3, skip=frozenset({2}))  # its write at pc 2 is skipped
    assert 1 not in acc.written_in(0, 0, 3) and 1 in acc.written_in(1, 0, 1)  # chain 1's write is its own
    assert 3 not in acc.written_in(0, 0, 3)  # read, never written


def _group_by_slot(acc, slot: int) -> list:
    """What ``Accesses._group_events`` must find for ``slot``, worked out slot by slot: the reads (0) and certain
    writes (1) of ``slot`` and of every slot over its bytes, sorted."""
    ev = []
    for k in (slot,) + acc.shared.overlapping(slot):
        lo, hi = acc.shared.span(k)
        member = (k, lo, hi, acc._whole(k), acc.roots.get(k, k))
        ev += [(pc, 0) + member for _, pc in acc.read_at.get(k, ())]
        ev += [(pc, 1) + member for _, pc in acc.write_at.get(k, ())]
    return sorted(ev)


def test_a_slots_group_is_every_event_over_its_bytes_in_an_exported_llm():
    from pathlib import Path

    from pterun import Runtime

    path = Path(__file__).parent / "fixtures" / "llm" / "kv_8da4w.pte"
    runner = Runtime(engine="numpy").load_program(path).load_method("forward")._runner
    plan, values = runner.plan, runner.memory.values
    acc = Accesses(plan, values, runner.analysis.tags)
    slots = [k for k in range(len(values)) if acc.shared.span(k) is not None]
    shared = [k for k in slots if acc.shared.overlapping(k)]
    assert len(shared) > 50  # the memory plan lays many values over the same bytes
    for k in slots:
        ev, pcs, _, _ = acc._group_events(k)
        assert ev == _group_by_slot(acc, k) and pcs == [e[0] for e in ev]
