"""Two values, one buffer: the merge of delegate calls reasons about bytes, not value indices.

ExecuTorch 0.6 and 1.0 leave a flatten between two delegates as nothing but two values at one arena offset; a
merged call must then join them through a reshape, refuse a partial overlap or another dtype, write bytes read
later through another value, and never defer an instruction past a call that reads what it writes.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from merge_util import add_later, find_runs_in, mean_values, merge_over, run_plan, slots
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.merge import CannotMerge
from pterun.delegates.xnnpack.numpy_engine import compile_graph
from pterun.interp.merge import DelegatePart
from pterun.interp.tensor import Tensor
from xnn_payloads import Graph

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")
RNG = np.random.default_rng(7)


def _aliased_pair(shift_bytes=0):
    """Delegate 0 writes slot 10 ([2, 16, 1, 1]); delegate 1 reads slot 11 ([2, 16]) laid over the same bytes, as
    ExecuTorch 0.6 and 1.0 leave a flatten between two delegates: nothing but two values at one offset. With
    ``shift_bytes``, slot 11 starts that far into slot 10's memory (an overlap that is no reshape)."""
    g0 = Graph()
    a, b, o = g0.input([2, 16, 1, 1]), g0.input([2, 16, 1, 1]), g0.output([2, 16, 1, 1])
    g0.node("Add", input1_id=a, input2_id=b, output_id=o)
    g1 = Graph()
    x, w, o = g1.input([2, 16]), g1.input([2, 16]), g1.output([2, 16])
    g1.node("Multiply", input1_id=x, input2_id=w, output_id=o)
    graphs = {0: G.Graph.read(*g0.blob()), 1: G.Graph.read(*g1.blob())}
    parts = (DelegatePart(0, (1, 2, 10)), DelegatePart(1, (11, 12, 13)))
    tensors = slots({1: (2, 16, 1, 1), 2: (2, 16, 1, 1), 10: (2, 16, 1, 1), 12: (2, 16), 13: (2, 16)})
    arena = np.zeros(128 + shift_bytes, np.uint8)
    tensors[10] = Tensor(np.dtype(np.float32), (2, 16, 1, 1), (0, 1, 2, 3), arena[:128])
    tensors[11] = Tensor(np.dtype(np.float32), (2, 16), (0, 1), arena[shift_bytes:shift_bytes + 128])
    return parts, graphs, tensors


@pytest.mark.parametrize("engine", ["numpy", pytest.param("litert", marks=needs_litert)])
def test_a_read_of_bytes_an_earlier_part_wrote_through_another_value_joins_it_through_a_reshape(engine):
    parts, graphs, tensors = _aliased_pair()
    graph, args = merge_over(parts, graphs, lambda s: s == 13, tensors)
    assert args == (1, 2, 12, 13)  # slot 11 is no input: its bytes are what the first part wrote
    assert [n.name for n in graph.nodes] == ["Add", "StaticReshape", "Multiply"]
    add, reshape, mul = graph.nodes
    assert reshape.input_id == add.output_id and reshape.new_shape == [2, 16] and mul.input1_id == reshape.output_id
    x, y = RNG.standard_normal((2, 16, 1, 1), np.float32), RNG.standard_normal((2, 16, 1, 1), np.float32)
    w = RNG.standard_normal((2, 16), np.float32)
    if engine == "numpy":
        plan = compile_graph(graph)
    else:
        from pterun.delegates.xnnpack import litert_engine as L
        plan = L.build(graph, 1)
    (got,) = run_plan(plan, [(2, 16, 1, 1), (2, 16, 1, 1), (2, 16), (2, 16)], [x, y, w])
    np.testing.assert_allclose(got, (x + y).reshape(2, 16) * w, rtol=1e-6, atol=1e-6)


def test_a_read_of_bytes_an_earlier_part_wrote_in_part_is_not_merged():
    parts, graphs, tensors = _aliased_pair(shift_bytes=64)
    with pytest.raises(CannotMerge, match=r"slot 11 reads memory that slot 10 wrote in part"):
        merge_over(parts, graphs, lambda s: s == 13, tensors)


def test_a_read_of_bytes_through_another_dtype_is_not_merged():
    parts, graphs, tensors = _aliased_pair()
    arena = tensors[10].storage
    tensors[11] = Tensor(np.dtype(np.int32), (2, 16), (0, 1), arena)  # same bytes, read as int32
    with pytest.raises(CannotMerge, match=r"slot 11 reads the bytes slot 10 wrote, as another value"):
        merge_over(parts, graphs, lambda s: s == 13, tensors)


def test_a_value_whose_bytes_are_read_after_the_run_through_another_value_is_an_output():
    """Slot 1 is written by the first call and read by nothing by name; slot 6 lies over its bytes and an add after
    the run reads it: the merged call must write slot 1 to memory."""
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), DelegateCall(1, (1, 2)), KernelCall(1, (6, 7, 11, 8))]]  # add.out(6, 7) -> 8
    values, tags = mean_values()
    (run,), outside = find_runs_in(chains, outputs=(8,), values=(values, tags))
    assert not outside(run, 1)  # nothing reads its bytes after the run
    values[6] = Tensor(values[1].dtype, values[1].shape, (0, 1, 2), values[1].storage)  # one buffer, two values
    (run,), outside = find_runs_in(chains, outputs=(8,), values=(values, tags))
    assert outside(run, 1) and not outside(run, 0)
    # written again before the add reads it: the bytes the run left are not read
    chains[0].insert(2, KernelCall(1, (3, 4, 11, 6)))
    (run,), outside = find_runs_in(chains, outputs=(8,), values=(values, tags))
    assert not outside(run, 1)


def test_a_dynamic_write_covers_its_own_readers_but_not_the_bytes_others_read():
    from pterun.format.schema import DelegateCall, KernelCall
    values, tags = mean_values()
    # slot 6 is dynamic (a write may cover only part of it), slot 9 static, both over slot 1's bytes
    values[6] = Tensor(values[1].dtype, values[1].shape, (0, 1, 2), values[1].storage, dynamic=True)
    values[9] = Tensor(values[1].dtype, values[1].shape, (0, 1, 2), values[1].storage)
    chains = [[DelegateCall(0, (0, 1)), DelegateCall(1, (1, 2)), KernelCall(1, (3, 4, 11, 6)),
               KernelCall(1, (6, 9, 11, 8))]]
    (run,), outside = find_runs_in(chains, outputs=(8,), values=(values, tags))
    assert outside(run, 1)  # slot 9 is read with only a write of the dynamic slot 6 between
    chains[0][3] = KernelCall(1, (6, 6, 11, 8))
    (run,), outside = find_runs_in(chains, outputs=(8,), values=(values, tags))
    assert not outside(run, 1)  # the only reader reads slot 6, which the add wrote


def test_a_deferred_instruction_is_not_moved_past_a_call_whose_outputs_are_not_known():
    """Where a backend does not say which arguments a delegate writes, every argument counts as read and none as
    written, so the deferral that needs the second call's output to stay out of memory is refused."""
    from pterun.format.schema import DelegateCall, KernelCall
    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 2, 3)), DelegateCall(1, (4, 5))]]
    values, tags = mean_values()
    values[5] = Tensor(values[1].dtype, values[1].shape, (0, 1, 2), values[1].storage)
    (run,), _ = find_runs_in(chains, later=add_later, values=(values, tags))
    assert run.deferred == (1,)
    assert find_runs_in(chains, later=add_later, values=(values, tags), delegate_outputs=lambda i: None)[0] == []


def test_an_instruction_writing_a_list_is_not_deferred_past_a_call_reading_a_member():
    """A split writes a tensor list; the next delegate call reads one of its members: the split must run before it
    (ExecuTorch 0.6 and 1.0 leave a transformer block's q/k/v split between two delegates this way)."""
    from pterun.format.schema import TENSOR_LIST, DelegateCall, KernelCall
    values, tags = mean_values()
    values.append((3, 4))  # slot 15: a list of slots 3 and 4
    tags.append(TENSOR_LIST)

    def split_later(ins):  # reads its input, writes the list
        return {ins.args[0]}, {ins.args[1]}

    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 15)), DelegateCall(1, (4, 5))]]
    assert find_runs_in(chains, outputs=(5,), later=split_later, values=(values, tags))[0] == []
    chains = [[DelegateCall(0, (0, 1)), KernelCall(1, (1, 15)), DelegateCall(1, (6, 5))]]  # reads no member
    (run,), _ = find_runs_in(chains, outputs=(5, 3, 4), later=split_later, values=(values, tags))
    assert run.deferred == (1,)
