"""One value under several names (pterun.interp.same): a merged call reads the exporter's per-layer copies of the
position and of the RoPE rows from one slot each, with the same numbers, and anything that could tell the copies
apart keeps them apart."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fixtures_util import FIXTURES

import pterun.interp.delegates as delegates_module
from pterun import Runtime
from pterun.format.schema import INT, INT_LIST, TENSOR_LIST, EValue, ExecutionPlan, JumpFalseCall
from pterun.interp.access import VIEW, Accesses
from pterun.interp.delegates import delegate_outputs
from pterun.interp.method import MethodRunner
from pterun.interp.repeats import find_repeats
from pterun.interp.same import same_reads, unread_views

KV = FIXTURES / "llm" / "kv_xnn.pte"  # 2 layers; the joined run is instructions 21..77 where nothing moves ahead
START, STOP = 21, 78


def _nothing_ahead(monkeypatch) -> None:
    """Runs as where nothing can run before a merged call (:mod:`pterun.interp.moves`): the joined run then starts
    after the RoPE views, as in a program whose position ints and rows depend on the first delegate's outputs."""
    import pterun.interp.merge as merge_module

    monkeypatch.setattr(merge_module, "ahead_of_call", lambda *a, **k: frozenset())


def _plan():
    return Runtime.get().load_program(KV)._plan("forward")


def _repeats_and_accesses(plan) -> tuple:
    """(find_repeats' fan-out, Accesses) as a method's load makes them (knowing what each delegate writes)."""
    pf = Runtime.get().load_program(KV)._pf
    runner = MethodRunner(pf, plan, shared_arenas={})
    acc = Accesses(plan, runner.values, runner.tags, delegate_outputs=lambda i: delegate_outputs(pf, plan, i))
    return find_repeats(plan, runner.values, runner.tags, runner.volatile, acc)[1], acc


def _same(plan, start=START, stop=STOP):
    fan_out, acc = _repeats_and_accesses(plan)
    return same_reads(plan, acc, fan_out, 0, start, stop)


def _with(plan, chain, values=None) -> ExecutionPlan:
    return ExecutionPlan(plan.name, plan.values if values is None else values, plan.inputs, plan.outputs, [chain],
                         plan.operators, plan.delegates, plan.buffer_sizes)


def test_the_position_reads_and_the_per_layer_rope_views_name_their_first_copy():
    plan = _plan()
    chain = plan.chains[0]
    # input_pos's one element is read at 8 (slot 41, as input_pos[-1]) and again at 10-13 (43-46, as input_pos[0]);
    # the RoPE rows (47, 50) are viewed per layer at 17-20
    assert _repeats_and_accesses(plan)[0] == {8: ((10, 43), (11, 44), (12, 45), (13, 46))}
    assert [chain[pc].args[0] for pc in range(17, 21)] == [47, 47, 50, 50]
    assert _same(plan) == {43: 41, 44: 41, 45: 41, 46: 41, 67: 62, 77: 72}
    assert _same(plan, start=8) == {}  # the first read has not run yet when such a run starts


def _insert(chain, at: int, ins) -> list:
    return list(chain[:at]) + [ins] + list(chain[at:])


def test_a_view_whose_source_is_written_between_the_views_keeps_its_own_slot():
    plan = _plan()
    chain = plan.chains[0]
    rewrite = chain[14]  # slice_copy into 47, the first RoPE table, again between its two views
    assert rewrite.args[-1] == 47
    got = _same(_with(plan, _insert(chain, 18, rewrite)), START + 1, STOP + 1)
    assert 67 not in got and got[77] == 72


def test_a_view_read_before_the_run_by_another_instruction_keeps_its_own_slot():
    plan = _plan()
    chain = plan.chains[0]
    mean = chain[16]  # a mean.out reading the second view of 47 before the run
    reader = mean._replace(args=(67, *mean.args[1:]))
    got = _same(_with(plan, _insert(chain, 20, reader)), START + 1, STOP + 1)
    assert 67 not in got and got[77] == 72


def test_a_source_the_run_writes_keeps_every_view():
    plan = _plan()
    chain = plan.chains[0]
    got = _same(_with(plan, _insert(chain, 22, chain[14])), START, STOP + 1)  # the run writes 47
    assert 67 not in got and got[77] == 72


def test_views_of_other_sizes_are_not_the_same():
    plan = _plan()
    chain = plan.chains[0]
    src, sizes, out = chain[18].args
    members = plan.values[sizes].val
    values = list(plan.values)
    values.append(EValue(INT, plan.values[members[-1]].val * 2))  # a different last dim
    values.append(EValue(INT_LIST, (*members[:-1], len(values) - 1)))
    view = chain[18]._replace(args=(src, len(values) - 1, out))
    code = list(chain)
    code[18] = view
    assert 67 not in _same(_with(plan, code, values))
    code[18] = view._replace(args=(src, sizes, out))  # the same sizes again: the same view
    assert _same(_with(plan, code, values))[67] == 62


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
@pytest.mark.parametrize("name", ["kv_xnn", "kv_8da4w"])
def test_the_joined_call_binds_one_position_and_one_copy_of_each_rope_table_with_the_same_numbers(monkeypatch,
                                                                                                   name):
    from pterun.delegates.xnnpack.litert_engine.kvplan import KvPlan

    def joined(method):
        (ex,) = [ex for _, ex, _ in method._runner.merged.values() if isinstance(ex, KvPlan)]
        return ex

    path = FIXTURES / "llm" / f"{name}.pte"
    one = Runtime(num_threads=1).load_program(path).load_method("forward")
    monkeypatch.setattr(delegates_module, "same_reads", lambda *a: {})
    every = Runtime(num_threads=1).load_program(path).load_method("forward")
    a, b = joined(one)._lay, joined(every)._lay
    # an element offset, key positions, query positions and a twin's start for each cache kind: one each, not one
    # per layer
    assert (len(a.offsets), len(a.keys), len(a.queries), len(a.starts)) == (1, 1, 1, 2)
    assert (len(b.offsets), len(b.keys), len(b.queries), len(b.starts)) == (2, 2, 2, 4)
    assert (a.n_in, b.n_in) == (16, 21)  # five position inputs fewer (the RoPE views are inside the call now)
    prompt = np.load(FIXTURES / "llm" / f"{name}.npz")["p0_prompt"].astype(np.int64).reshape(1, -1)
    pos = prompt.shape[1]
    x, y = one.execute([prompt, np.array([0])])[0], every.execute([prompt, np.array([0])])[0]
    np.testing.assert_array_equal(x, y)
    for _ in range(5):
        tok = np.array([[int(x.reshape(-1, x.shape[-1])[-1].argmax())]])
        x, y = one.execute([tok, np.array([pos])])[0], every.execute([tok, np.array([pos])])[0]
        np.testing.assert_array_equal(x, y)
        pos += 1


def test_a_view_the_run_points_elsewhere_keeps_every_copy():
    plan = _plan()
    chain = plan.chains[0]
    elsewhere = chain[19]._replace(args=(50, chain[19].args[1], 62))  # 62 (the first view of 47) made a view of 50
    got = _same(_with(plan, _insert(chain, 22, elsewhere)), START, STOP + 1)
    assert 67 not in got and got[77] == 72


def test_a_delegate_whose_outputs_are_not_known_reads_its_own_arguments(monkeypatch):
    from pterun.interp.delegates import DelegatePart, Source, _reading_same

    _nothing_ahead(monkeypatch)
    program = Runtime.get().load_program(KV)
    plan = program._plan("forward")
    method = program.load_method("forward")
    (run,) = [r for r, _, _ in method._runner.merged.values() if r.start == START]
    fan_out, acc = _repeats_and_accesses(plan)
    src = Source(program._pf, plan, "test")
    known = _reading_same(run, run.parts, src, acc, fan_out)
    reads = [a for p in known if isinstance(p, DelegatePart) for a in p.args]
    assert 62 in reads and 67 not in reads and 72 in reads and 77 not in reads
    acc.delegate_outputs = lambda i: None
    unknown = _reading_same(run, run.parts, src, acc, fan_out)
    assert [p.args for p in unknown if isinstance(p, DelegatePart)] == \
        [p.args for p in run.parts if isinstance(p, DelegatePart)]
    positions = [p.inputs[-1] for p in unknown if getattr(p, "op", None) in ("update_cache", "sdpa")]
    assert positions == [41] * len(positions) and len(positions) == 6  # 2 layers: 2 cache updates and 1 attention


# -- views left out (unread_views) -------------------------------------------------------------------------------
def _merged_reading(args: tuple, deferred: tuple = ()) -> dict:
    """A merged call over the joined run of KV that reads ``args``."""
    from pterun.interp.delegates import Merged
    from pterun.interp.merge import Run

    return {(0, START): Merged(Run(0, START, STOP, "XnnpackBackend", (), deferred), None, args)}


_ABSORBED = frozenset((0, pc) for pc in range(START, STOP))


def _live(plan) -> list:
    """The values a loaded method would hold, as far as unread_views reads them: a list slot's member slots."""
    return [v.val for v in plan.values]


def test_views_a_merged_call_no_longer_reads_are_left_out_and_the_others_kept():
    plan = _plan()
    # the run reads the first view of each RoPE table (62, 72), not the second (67, 77)
    assert unread_views(plan, _live(plan), 0, _merged_reading((62, 72, 43)), _ABSORBED) == {18, 20}
    assert unread_views(plan, _live(plan), 0, _merged_reading((62, 67, 72, 77, 43)), _ABSORBED) == set()
    # an instruction inside the run reading 67: the merged call stands for it, unless it runs after the call
    mean = plan.chains[0][16]
    inside = _with(plan, _insert(plan.chains[0], 22, mean._replace(args=(67, *mean.args[1:]))))
    absorbed = _ABSORBED | {(0, STOP)}
    assert unread_views(inside, _live(inside), 0, _merged_reading((62, 72, 43)), absorbed) == {18, 20}
    assert unread_views(inside, _live(inside), 0, _merged_reading((62, 72, 43), deferred=(22,)), absorbed) == {20}


def test_a_view_read_later_by_name_in_a_list_or_as_an_output_is_kept():
    plan = _plan()
    chain = list(plan.chains[0])
    mean = chain[16]
    read_after = _with(plan, chain + [mean._replace(args=(67, *mean.args[1:]))])
    assert unread_views(read_after, _live(read_after), 0, _merged_reading((62, 72, 43)), _ABSORBED) == {20}
    values = list(plan.values) + [EValue(TENSOR_LIST, (62, 77))]
    cat = chain[16]._replace(args=(len(values) - 1, *mean.args[1:]))  # any instruction naming the list
    in_list = _with(plan, chain + [cat], values)
    assert unread_views(in_list, _live(in_list), 0, _merged_reading((62, 72, 43)), _ABSORBED) == {18}
    as_output = ExecutionPlan(plan.name, plan.values, plan.inputs, (*plan.outputs, 77), plan.chains, plan.operators,
                              plan.delegates, plan.buffer_sizes)
    assert unread_views(as_output, _live(as_output), 0, _merged_reading((62, 72, 43)), _ABSORBED) == {18}


def test_a_view_only_an_unread_view_reads_is_unread_and_jumps_keep_every_view():
    plan = _plan()
    chain = list(plan.chains[0])
    view = chain[18]
    values = list(plan.values) + [plan.values[67]]
    of_view = view._replace(args=(67, view.args[1], len(values) - 1))  # a view of the second view, read by nothing
    stacked = _with(plan, _insert(chain, 19, of_view), values)
    absorbed = frozenset((0, pc + 1) for pc in range(START, STOP))
    merged = {(0, START + 1): _merged_reading((62, 72, 43))[0, START]}
    assert unread_views(stacked, _live(stacked), 0, merged, absorbed) == {18, 19, 21}
    jump = JumpFalseCall(43, len(chain))
    jumping = _with(plan, chain + [jump])
    assert unread_views(jumping, _live(jumping), 0, _merged_reading((62, 72, 43)), _ABSORBED) == set()


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
def test_the_loaded_method_leaves_out_the_views_its_joined_call_does_not_read(monkeypatch):
    views = lambda m: [e.index for e in m.steps if e.name == VIEW]  # noqa: E731
    ahead = Runtime(num_threads=1).load_program(KV).load_method("forward")
    assert views(ahead) == []  # the joined call starts at the first delegate: the views are inside it
    _nothing_ahead(monkeypatch)
    one = Runtime(num_threads=1).load_program(KV).load_method("forward")
    assert views(one) == [17, 19]
    monkeypatch.setattr(delegates_module, "same_reads", lambda *a: {})
    every = Runtime(num_threads=1).load_program(KV).load_method("forward")
    assert views(every) == [17, 18, 19, 20]
    unmerged = Runtime(num_threads=1, merge_delegates=False).load_program(KV).load_method("forward")
    assert views(unmerged)[:4] == [17, 18, 19, 20]  # and the views inside the run
