"""Which instructions a merged call may run before itself (pterun.interp.moves.ahead_of_call): only those that
neither read what the run's earlier elements write nor write what they touch, by slot, by name and by bytes."""

from __future__ import annotations

from pterun.format.schema import KernelCall
from pterun.interp.merge import Absorbed, DelegatePart
from pterun.interp.moves import ahead_of_call

# slots: 1 the run's input, 2 what its first delegate writes, 3 a view result, 4-9 what moved instructions use
SPANS = {1: (0, 64), 2: (64, 128), 3: (0, 64), 4: (128, 192), 5: (192, 256), 6: (256, 320), 7: (320, 384)}


def _ahead(chain: dict, items: list, outputs_of=lambda i: None, spans=SPANS) -> frozenset:
    """``ahead_of_call`` over ``items`` ((pc, part or None: moved)); ``chain`` pc -> (read, written) slots of each
    instruction (a moved one's as ``later`` says)."""
    code = {pc: KernelCall(0, tuple(sorted(r | w))) for pc, (r, w) in chain.items()}
    moved = {id(code[pc]): chain[pc] for pc, p in items if p is None}
    return ahead_of_call(items, code, [None] * 16, {}, lambda ins: moved[id(ins)], spans.get, outputs_of)


def test_moved_instructions_that_read_only_what_was_there_before_the_run_go_ahead_in_order():
    chain = {0: ({1}, {2}), 1: ({8}, {4}), 2: ({4}, {5}), 3: ({2}, {6})}
    items = [(0, DelegatePart(0, (1, 2))), (1, None), (2, None), (3, DelegatePart(1, (2, 6)))]
    assert _ahead(chain, items) == {1, 2}  # 2 reads what 1 wrote: both ahead, 1 first


def test_a_moved_instruction_reading_what_the_run_wrote_before_it_stays_and_so_do_those_after_it():
    chain = {0: ({1}, {2}), 1: ({2}, {4}), 2: ({8}, {5})}
    items = [(0, DelegatePart(0, (1, 2))), (1, None), (2, None)]
    assert _ahead(chain, items) == set()  # 2 alone could go, but it would pass the deferred 1


def test_what_a_delegate_writes_is_its_outputs_where_its_backend_says_else_every_argument():
    chain = {0: ({1}, {2}), 1: ({1}, {4})}  # the moved instruction reads the delegate's input
    items = [(0, DelegatePart(0, (1, 2))), (1, None)]
    assert _ahead(chain, items) == set()  # outputs unknown: the call may write slot 1
    assert _ahead(chain, items, outputs_of=lambda i: frozenset({1})) == {1}  # only argument 1 (slot 2) is written


def test_bytes_decide_where_slots_differ():
    chain = {0: ({1}, {2}), 1: ({8}, {4}), 2: ({9}, {5})}
    items = [(0, DelegatePart(0, (1, 2))), (1, None), (2, None)]
    known = lambda i: frozenset({1})  # noqa: E731
    assert _ahead(chain, items, known) == {1, 2}
    # slot 4 laid over the input's bytes (the memory plan reused them): writing it early would change what the call
    # reads
    assert _ahead(chain, items, known, {**SPANS, 4: (32, 96)}) == set()
    # slot 8 over the bytes the delegate writes: read early, it would be read before the call wrote them
    assert _ahead(chain, items, known, {**SPANS, 8: (100, 110)}) == set()


def test_a_result_an_earlier_view_binds_or_an_operator_writes_keeps_its_reader_behind():
    chain = {0: ({1}, {2}), 1: ({2}, {3}), 2: ({3}, {4})}
    view = Absorbed("view", (2,), (3,), {"size": (1, 64)})
    items = [(0, DelegatePart(0, (1, 2))), (1, view), (2, None)]
    assert _ahead(chain, items, lambda i: frozenset({1})) == set()  # 3 exists once the view has run
    chain = {0: ({1}, {2}), 1: ({8}, {7}), 2: ({7}, {4})}
    mean = Absorbed("mean", (8,), (7,), {"axes": (1,), "keepdim": True})
    items = [(0, DelegatePart(0, (1, 2))), (1, mean), (2, None)]
    assert _ahead(chain, items, lambda i: frozenset({1})) == set()  # 7 is the mean's result
