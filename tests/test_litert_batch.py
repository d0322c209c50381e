"""LiteRT interpreters built per method (litert_engine.Batch): the graphs of a method on more than one thread share
one interpreter, each a subgraph of it, so their calls share one XNNPACK thread pool; a graph XNNPACK does not
take wholly still runs on the NumPy engine; a forked child builds its own."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from fixtures_util import FORK_OF_A_THREADED_PROCESS
from merge_util import without_attention_join
from pterun import Runtime
from pterun.delegates.xnnpack import graph as G
from xnn_payloads import Graph, out_tensor, tensor

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                reason="ai-edge-litert is not installed")
LLM = Path(__file__).parent / "fixtures" / "llm"


def _add_graph():
    """(a + b) + b: two operators meeting at a tensor of the graph's own."""
    g = Graph()
    a, b, m, o = g.input([2, 6]), g.input([2, 6]), g.internal([2, 6]), g.output([2, 6])
    g.node("Add", input1_id=a, input2_id=b, output_id=m)
    g.node("Add", input1_id=m, input2_id=b, output_id=o)
    return G.Graph.read(*g.blob())


def _one_add_graph():
    g = Graph()
    a, b, o = g.input([2, 6]), g.input([2, 6]), g.output([2, 6])
    g.node("Add", input1_id=a, input2_id=b, output_id=o)
    return G.Graph.read(*g.blob())


def _slice_add_graph():
    """x[:, 1:4] + itself: a slice to the end of dim 0 that is no piece of an even split, which LiteRT's XNNPACK
    delegate leaves to LiteRT's builtin SLICE."""
    g = Graph()
    x, m, o = g.input([2, 6]), g.internal([2, 3]), g.output([2, 3])
    g.node("StaticSlice", num_dims=2, offsets=[0, 1], sizes=[0, 3], input_id=x, output_id=m)
    g.node("Add", input1_id=m, input2_id=m, output_id=o)
    return G.Graph.read(*g.blob())


def test_a_batch_builds_one_interpreter_and_a_graph_xnnpack_does_not_take_runs_on_numpy():
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    batch = L.Batch()
    graphs = [_add_graph(), _slice_add_graph(), _add_graph()]
    plans = [L.pending(g, 2, lambda g=g: compile_graph(g), None, batch) for g in graphs]
    assert all(p._invoke is None for p in plans)  # nothing built before the method has all its graphs
    batch.finish()
    a, b, c = plans
    assert (a.engine, a._sub.k, c.engine, c._sub.k) == ("litert", 0, "litert", 2) and a._interp is c._interp
    assert (b.engine, b.engine_reason) == ("numpy", "LiteRT's XNNPACK delegate did not take SLICE; LiteRT's "
                                                    "builtin kernels round differently from XNNPACK")
    assert a._lock is c._lock  # one interpreter runs one subgraph at a time
    x, y = np.arange(12, dtype=np.float32).reshape(2, 6), np.full((2, 6), 0.5, np.float32)
    for p in (a, c):
        out = out_tensor((2, 6), np.float32)
        p.execute([tensor(x), tensor(y), out])
        assert np.array_equal(out.array, x + y + y)
    out = out_tensor((2, 3), np.float32)
    b.execute([tensor(x), out])
    assert np.array_equal(out.array, x[:, 1:4] * 2)


def _slice_only_graph():
    """x[:, 1:4] and nothing else: its one operator reads the graph's input and writes its output."""
    g = Graph()
    x, o = g.input([2, 6]), g.output([2, 3])
    g.node("StaticSlice", num_dims=2, offsets=[0, 1], sizes=[0, 3], input_id=x, output_id=o)
    return G.Graph.read(*g.blob())


def test_a_graph_whose_operator_touches_only_its_inputs_and_outputs_gets_an_interpreter_of_its_own():
    """A builtin kernel between the graph's own inputs and outputs puts nothing in LiteRT's arena that the
    batch could see: such a graph is checked alone, where LiteRT lists its nodes (swin_t's reshapes were taken
    for XNNPACK's in a shared interpreter before this)."""
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    batch = L.Batch()
    graphs = [_one_add_graph(), _slice_only_graph(), _one_add_graph()]
    a, b, c = [L.pending(g, 2, lambda g=g: compile_graph(g), None, batch) for g in graphs]
    assert [p._pending[0].checkable() for p in (a, b, c)] == [False, False, False]  # one op, all at the ends
    batch.finish()
    assert (b.engine, "did not take SLICE" in b.engine_reason) == ("numpy", True)
    assert (a.engine, c.engine) == ("litert", "litert") and a._interp is not c._interp
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = out_tensor((2, 3), np.float32)
    b.execute([tensor(x), out])
    assert np.array_equal(out.array, x[:, 1:4])


def test_a_graph_built_alone_that_litert_refuses_runs_on_numpy():
    """One graph of its thread count is built on its own when the batch finishes; a refusal then moves it to
    NumPy before it ever ran on LiteRT."""
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    batch = L.Batch()
    g = _slice_add_graph()
    plan = L.pending(g, 2, lambda: compile_graph(g), None, batch)
    batch.finish()
    assert plan.engine == "numpy" and "did not take SLICE" in plan.engine_reason
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    out = out_tensor((2, 3), np.float32)
    plan.execute([tensor(x), out])
    assert np.array_equal(out.array, x[:, 1:4] * 2)


def _counting(monkeypatch, module, name):
    """Count the calls of ``module.name`` (patched where it is looked up)."""
    calls, real = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


@pytest.mark.parametrize("load_dims", [None, lambda ext, dims: (1, 6)], ids=["declared", "prepared-small"])
def test_a_graph_built_alone_is_translated_once(monkeypatch, load_dims):
    """The batch's own translation of a lone graph is the one its interpreter gets: a method's single graph was
    translated a second time when it was built alone. Prepared at smaller load dims, it still takes the declared
    ones at run time."""
    from pterun.delegates.xnnpack.litert_engine import plan as L, prepare as P
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    again = _counting(monkeypatch, P, "translate_laid")
    batch = L.Batch()
    g = _add_graph()
    plan = L.pending(g, 1, lambda: compile_graph(g), load_dims, batch)
    batch.finish()
    assert (plan.engine, again) == ("litert", [])
    a, b = np.arange(12, dtype=np.float32).reshape(2, 6), np.full((2, 6), 0.5, np.float32)
    out = out_tensor((2, 6), np.float32)
    plan.execute([tensor(a), tensor(b), out])
    assert np.array_equal(out.array, a + b + b)


def test_graphs_a_joined_model_failed_for_are_translated_again(monkeypatch):
    """Joining renumbers each graph's tables; when LiteRT then refuses the joined model, each graph built alone
    is translated afresh rather than laid out from those tables, and runs as its own translation would."""
    from pterun.delegates.xnnpack.litert_engine import plan as L, prepare as P
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    def combine_then_refuse(parts):
        L_combine(parts)
        raise ValueError("refused")

    L_combine = L.combine
    monkeypatch.setattr(L, "combine", combine_then_refuse)
    again = _counting(monkeypatch, P, "translate_laid")
    batch = L.Batch()
    graphs = [_add_graph(), _add_graph()]
    plans = [L.pending(g, 2, lambda g=g: compile_graph(g), None, batch) for g in graphs]
    batch.finish()
    assert [p.engine for p in plans] == ["litert", "litert"] and len(again) == 2
    assert plans[0]._interp is not plans[1]._interp
    a, b = np.arange(12, dtype=np.float32).reshape(2, 6), np.full((2, 6), 0.5, np.float32)
    for p in plans:
        out = out_tensor((2, 6), np.float32)
        p.execute([tensor(a), tensor(b), out])
        assert np.array_equal(out.array, a + b + b)


def _decode(method, steps=3):
    outs = [method.execute([np.arange(1, 6, dtype=np.int64)[None], np.array([0], dtype=np.int64)])[0]]
    for p in range(5, 5 + steps):  # a 5-token prefill, then one token at a time: inputs resized on the way
        outs.append(method.execute([np.array([[3 + p]], dtype=np.int64), np.array([p], dtype=np.int64)])[0])
    return outs


def _litert_plans(method):
    return [e for e in {id(e): e for e in method._runner.executors}.values() if getattr(e, "_sub", None) is not None]


def test_a_method_on_two_threads_shares_one_interpreter_and_keeps_its_numbers(monkeypatch):
    without_attention_join(monkeypatch)  # the layers merged one by one: several graphs to share an interpreter
    two = Runtime(num_threads=2, engine="litert").load_program(LLM / "kv_xnn.pte").load_method("forward")
    one = Runtime(num_threads=1, engine="litert").load_program(LLM / "kv_xnn.pte").load_method("forward")
    grouped = [p for p in _litert_plans(two) if p.num_threads == 2]
    assert len(grouped) == 2 and grouped[0]._interp is grouped[1]._interp
    assert sorted(p._sub.k for p in grouped) == [0, 1]
    assert all(p._interp is not grouped[0]._interp for p in _litert_plans(one))  # one thread: no pool to share
    for a, b in zip(_decode(one), _decode(two)):
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_an_interpreter_holds_at_most_group_bytes_of_model(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import plan as L

    monkeypatch.setattr(L, "GROUP_BYTES", 1)  # every graph is over it: each gets an interpreter of its own
    without_attention_join(monkeypatch)
    method = Runtime(num_threads=2, engine="litert").load_program(LLM / "kv_xnn.pte").load_method("forward")
    plans = [p for p in _litert_plans(method) if p.num_threads == 2]
    assert len(plans) == 2 and plans[0]._interp is not plans[1]._interp
    assert [d.engine for d in method.delegates] == ["litert"] * len(method.delegates)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@FORK_OF_A_THREADED_PROCESS
def test_a_forked_child_runs_what_a_shared_interpreter_ran():
    method = Runtime(num_threads=2, engine="litert").load_program(LLM / "kv_xnn.pte").load_method("forward")
    want = _decode(method)
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if all(np.allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(a).max()))
                            for a, b in zip(want, _decode(method))) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
