"""Repeated scalar reads (pterun.interp.repeats): an LLM export's per-layer copies of ``input_pos[0]`` run once,
the results do not change, and anything that could tell the copies apart keeps them."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures_util import FIXTURES

import pterun.interp.repeats as repeats_module
from pterun import Runtime
from pterun.format.schema import KERNEL_CALL, ExecutionPlan, MoveCall
from pterun.interp.method import MethodRunner
from pterun.interp.repeats import SCALAR, SELECT, find_repeats

KV = FIXTURES / "llm" / "kv_sdpa.pte"  # 2 layers: input_pos[0] read into a scalar 4 times


def _scalar_reads(plan) -> list[int]:
    return [pc for pc, ins in enumerate(plan.chains[0])
            if ins.kind == KERNEL_CALL and plan.operators[ins.op_index] == SCALAR]


def _repeats(plan):
    runner = MethodRunner(Runtime.get().load_program(KV)._pf, plan, shared_arenas={})
    return find_repeats(plan, runner.values, runner.tags, runner.volatile)


def test_the_exporters_per_layer_position_reads_run_once():
    plan = Runtime.get().load_program(KV)._plan("forward")
    chain = plan.chains[0]
    skip, fan_out = _repeats(plan)
    reads = _scalar_reads(plan)  # input_pos[-1] (the mask's end), then input_pos[0] per cache update and attention
    index = {pc: plan.values[chain[pc - 1].args[2]].val for pc in reads}
    assert [index[pc] for pc in reads] == [-1, 0, 0, 0, 0]  # of an input of one element: the same one, five times
    (first, repeats), = fan_out.items()
    assert first == reads[0] and [q for q, _ in repeats] == reads[1:]
    assert skip == {q for q, _ in repeats} | {q - 1 for q, _ in repeats}  # each repeat and its select_copy
    assert {plan.operators[chain[pc].op_index] for pc in skip} == {SELECT, SCALAR}
    assert [s for _, s in repeats] == [chain[q].args[1] for q in reads[1:]]
    method = Runtime.get().load_program(KV).load_method("forward")
    ran = {e.index for e in method.steps}
    assert not skip & ran and first in ran
    (event,) = [e for e in method.steps if e.index == first]
    assert event.detail == f"also gives the result of instructions {', '.join(map(str, reads[1:]))}, which read " \
                           "the same element"


def test_results_are_those_of_every_read_running(monkeypatch):
    prompt = np.load(FIXTURES / "llm" / "kv_sdpa.npz")["p0_prompt"].astype(np.int64).reshape(1, -1)
    method = Runtime.get().load_program(KV).load_method("forward")
    monkeypatch.setattr(repeats_module, "find_repeats", lambda *a: (frozenset(), {}))
    plain = Runtime.get().load_program(KV).load_method("forward")
    assert len(plain.steps) == len(method.steps) + 8
    a, b = method.execute([prompt, np.array([0], np.int64)]), plain.execute([prompt, np.array([0], np.int64)])
    np.testing.assert_array_equal(a[0], b[0])
    pos = prompt.shape[1]
    for _ in range(4):  # decode steps: every position read stands for the new one
        tok = np.array([[int(a[0].reshape(-1, a[0].shape[-1])[-1].argmax())]], np.int64)
        a = method.execute([tok, np.array([pos], np.int64)])
        b = plain.execute([tok, np.array([pos], np.int64)])
        np.testing.assert_array_equal(a[0], b[0])
        pos += 1


def test_no_folding_runs_every_read():
    assert len(Runtime(fold=False).load_program(KV).load_method("forward").steps) == \
        len(Runtime().load_program(KV).load_method("forward").steps) + 8


def _with_chain(plan, chain, outputs=None) -> ExecutionPlan:
    return ExecutionPlan(plan.name, plan.values, plan.inputs, plan.outputs if outputs is None else outputs, [chain],
                         plan.operators, plan.delegates, plan.buffer_sizes)


def test_a_written_source_keeps_every_read():
    plan = Runtime.get().load_program(KV)._plan("forward")
    chain = plan.chains[0]
    selects = [pc for pc, ins in enumerate(chain)
               if ins.kind == KERNEL_CALL and plan.operators[ins.op_index] == SELECT]
    src = chain[selects[0]].args[0]
    # a move into the position input at the very end: the input is no longer read-only
    assert _repeats(_with_chain(plan, [*chain, MoveCall(src, src)])) == (frozenset(), {})


def test_reads_of_anything_but_a_method_input_are_kept():
    # a constant source would have its first read computed at load, where nothing copies the result on
    plan = Runtime.get().load_program(KV)._plan("forward")
    chain = plan.chains[0]
    src = next(ins.args[0] for ins in chain if ins.kind == KERNEL_CALL and plan.operators[ins.op_index] == SELECT)
    assert src in plan.inputs
    others = tuple(i for i in plan.inputs if i != src)
    assert _repeats(ExecutionPlan(plan.name, plan.values, others, plan.outputs, plan.chains, plan.operators,
                                  plan.delegates, plan.buffer_sizes)) == (frozenset(), {})


def test_a_repeat_whose_tensor_is_also_an_output_is_kept():
    plan = Runtime.get().load_program(KV)._plan("forward")
    skip, fan_out = _repeats(plan)
    (first, repeats), = fan_out.items()
    q, _ = repeats[-1]
    t = plan.chains[0][q].args[0]  # the 0-D tensor the last repeat reads
    skip2, fan_out2 = _repeats(_with_chain(plan, plan.chains[0], (*plan.outputs, t)))
    assert [r for r, _ in fan_out2[first]] == [r for r, _ in repeats[:-1]] and q not in skip2 and len(skip2) == 6


def test_methods_with_a_jump_or_two_chains_are_left_alone():
    plan = Runtime.get().load_program(KV)._plan("forward")
    two = ExecutionPlan(plan.name, plan.values, plan.inputs, plan.outputs, [plan.chains[0], []], plan.operators,
                        plan.delegates, plan.buffer_sizes)
    assert _repeats(two) == (frozenset(), {})
    cond = Runtime.get().load_program(FIXTURES / "cond.pte").load_method("forward")._runner
    assert find_repeats(cond.plan, cond.values, cond.tags, cond.volatile) == (frozenset(), {})


def test_an_index_from_the_end_is_another_read_where_the_input_can_change_length():
    """``input_pos[-1]`` and ``input_pos[0]`` are one element of an input of one element; of a dynamic input they
    may be two, so the -1 read runs on its own."""
    plan = Runtime.get().load_program(KV)._plan("forward")
    runner = MethodRunner(Runtime.get().load_program(KV)._pf, plan, shared_arenas={})
    reads = _scalar_reads(plan)
    src = plan.chains[0][reads[0] - 1].args[0]
    runner.values[src].dynamic = True
    skip, fan_out = find_repeats(plan, runner.values, runner.tags, runner.volatile)
    (first, repeats), = fan_out.items()
    assert first == reads[1] and [q for q, _ in repeats] == reads[2:] and not {reads[0], reads[0] - 1} & skip


@pytest.mark.parametrize("name", ["kv_xnn", "kv_8da4w"])
def test_merged_delegate_programs_read_the_position_once(name):
    m = Runtime().load_program(FIXTURES / "llm" / f"{name}.pte").load_method("forward")
    plain = Runtime(fold=False).load_program(FIXTURES / "llm" / f"{name}.pte").load_method("forward")
    assert len(plain.steps) - len(m.steps) == 8
    x = [np.array([[1, 2, 3]], np.int64), np.array([0], np.int64)]
    np.testing.assert_allclose(m.execute(x)[0], plain.execute(x)[0], rtol=0, atol=1e-6)


def _desc(d, **changes):
    from pterun.format.schema import TensorDesc
    return TensorDesc(**{n: changes.get(n, getattr(d, n)) for n in TensorDesc.__slots__})


def test_a_write_through_another_value_over_the_inputs_bytes_keeps_the_later_reads():
    """Two values, one buffer: a second value laid over the position input's bytes is written after the first read;
    later reads may then see other bytes, so they run."""
    from pterun.format.schema import TENSOR, KernelCall
    plan = Runtime.get().load_program(KV)._plan("forward")
    chain = plan.chains[0]
    reads = _scalar_reads(plan)
    src = chain[reads[1] - 1].args[0]
    alias = len(plan.values)
    # the exporter leaves inputs unplanned; here the input lies in the arena, past everything else, and so does
    # the second value
    end = plan.buffer_sizes[1]
    planned = _desc(plan.values[src][1], memory_id=1, memory_offset=end)
    sizes = (plan.buffer_sizes[0], end + planned.nbytes, *plan.buffer_sizes[2:])
    values = list(plan.values) + [(TENSOR, planned)]
    values[src] = (TENSOR, planned)
    neg = KernelCall(len(plan.operators), (src, alias, alias))  # writes -input_pos over input_pos's bytes
    changed = ExecutionPlan(plan.name, values, plan.inputs, plan.outputs,
                            [chain[:reads[1] + 1] + [neg] + chain[reads[1] + 1:]], plan.operators + ["aten::neg.out"],
                            plan.delegates, sizes)
    first = reads[0]  # the reads before the write still repeat it, those after it run
    assert _repeats(changed) == ({reads[1] - 1, reads[1]}, {first: ((reads[1], chain[reads[1]].args[1]),)})
    later = ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, [chain + [neg]],
                          plan.operators + ["aten::neg.out"], plan.delegates, sizes)
    assert _repeats(later) == _repeats(plan)  # after the last read: nothing to tell


def test_a_repeat_whose_tensor_bytes_are_read_through_another_value_is_kept():
    from pterun.format.schema import TENSOR, KernelCall
    plan = Runtime.get().load_program(KV)._plan("forward")
    chain = plan.chains[0]
    _, fan_out = _repeats(plan)
    (first, repeats), = fan_out.items()
    q, _ = repeats[-1]
    t = chain[q].args[0]  # the 0-D tensor the last repeat reads
    alias, out = len(plan.values), len(plan.values) + 1
    values = list(plan.values) + [(TENSOR, plan.values[t][1]),
                                  (TENSOR, _desc(plan.values[t][1], memory_id=None, memory_offset=0))]
    neg = KernelCall(len(plan.operators), (alias, out, out))  # reads the select's bytes through another value
    changed = ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, [chain[:q + 1] + [neg] + chain[q + 1:]],
                            plan.operators + ["aten::neg.out"], plan.delegates, plan.buffer_sizes)
    skip, fan_out2 = _repeats(changed)
    assert [r for r, _ in fan_out2[first]] == [r for r, _ in repeats[:-1]] and q not in skip
