"""The LiteRT engine: the fallbacks (LiteRT missing or failing to import, a graph it cannot take, an input shape it
cannot take), the delegate being XNNPACK's (never LiteRT's builtin kernels), dynamic shapes, threads, 4-bit weights
staying packed. Which engine is chosen, and what the user sees of it, is in test_engine_selection.py; fixture
accuracy on both engines in test_xnnpack_fixtures.py; the engine's memory (model bytes, packed weights given back)
in test_litert_memory.py."""

from __future__ import annotations

import importlib.util
import logging
import sys

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls, run_python

from pterun import Runtime
from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from pterun.errors import DelegateError
from test_xnnpack import BINARY_REFS, RNG, UNARY_REFS
from xnn_payloads import F32, Graph, T, out_tensor, qb4_fc_graph, tensor
from xnn_refs import randn

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
needs_litert = pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")


@pytest.fixture(autouse=True)
def default_engine(monkeypatch):
    """These tests are about the engine choice itself: start from the default, whatever the environment says."""
    monkeypatch.delenv("PTERUN_ENGINE", raising=False)


# ==============================================================================================================
# Fallbacks
# ==============================================================================================================
def test_a_litert_that_fails_to_import_falls_back():
    r = run_python("""
        import importlib.abc, sys

        class Broken(importlib.abc.MetaPathFinder):  # as a native library that does not load on this system
            def find_spec(self, name, path=None, target=None):
                if name == "ai_edge_litert" or name.startswith("ai_edge_litert."):
                    raise OSError("libLiteRt.so: cannot open shared object file")

        sys.meta_path.insert(0, Broken())
        import pterun
        (d,) = pterun.Runtime().load_program("%s").load_method("forward").delegates
        print(d.engine, "|", d.reason)
    """ % (FIXTURES / "xnn_mlp.pte"))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("numpy | LiteRT unavailable: ai-edge-litert does not import (OSError: libLiteRt.so: cannot "
                        "open shared object file)\n")


def test_missing_litert_falls_back_under_auto_and_is_an_error_when_requested():
    r = run_python("""
        sys.modules["ai_edge_litert"] = None  # as if not installed
        import pterun
        from pterun.errors import DelegateError
        m = pterun.Runtime().load_program("%s").load_method("forward")
        (d,) = m.delegates
        print(d.engine, "|", d.reason)
        try:
            pterun.Runtime().load_program("%s", engine="litert")
        except DelegateError as e:
            print("DelegateError |", e)
        assert "ai_edge_litert" not in [k for k, v in sys.modules.items() if v is not None]
    """ % (FIXTURES / "xnn_mlp.pte", FIXTURES / "xnn_mlp.pte"))
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first.startswith("numpy | LiteRT unavailable: ai-edge-litert is not installed")
    assert second.startswith("DelegateError | engine 'litert' was requested, but the LiteRT engine is unavailable: "
                             "ai-edge-litert is not installed")
    assert second.endswith("(pip install ai-edge-litert, or use engine='auto' or 'numpy')")
    assert r.stderr == ""


def _elu_graph(alpha: float) -> Graph:
    g = Graph()
    i, o = g.input([2, 5]), g.output([2, 5])
    g.node("ELU", alpha=alpha, input_id=i, output_id=o)
    return g


@needs_litert
def test_a_graph_litert_cannot_take_runs_on_numpy_with_one_log_line(caplog):
    blob, named = _elu_graph(0.5).blob()
    with caplog.at_level(logging.INFO, logger="pterun"):
        ex = load(blob, named, "auto")
    assert (ex.engine, ex.engine_reason) == ("numpy", "node 0 (XNNELU): ELU with alpha 0.5")
    lines = [r.getMessage() for r in caplog.records if r.name == "pterun"]
    assert lines == ["XNNPACK delegate runs on the NumPy engine (LiteRT cannot take it): node 0 (XNNELU): ELU "
                     "with alpha 0.5"]
    x = randn(2, 5)
    out = out_tensor((2, 5), F32)
    ex.execute([tensor(x), out])
    np.testing.assert_allclose(out.array, np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0))), rtol=1e-6)
    # the same graph with alpha 1 is LiteRT's
    blob, named = _elu_graph(1.0).blob()
    assert load(blob, named, "auto").engine == "litert"


@needs_litert
def test_engine_litert_still_falls_back_for_a_graph_it_cannot_take():
    blob, named = _elu_graph(0.5).blob()
    assert load(blob, named, "litert").engine == "numpy"


@needs_litert
def test_builtin_kernels_are_never_used():
    # XNNPACK's delegate takes no stand-alone int8 RELU6 (LiteRT would run it on its builtin kernels): refused
    q = (P.PER_TENSOR, T({4: ("f", 0.05), 6: ("i", 3)}))
    g = Graph()
    i, o = g.input([1, 8], P.QINT8, q), g.output([1, 8], P.QINT8, q)
    g.node("Clamp", lo=0.0, hi=6.0, input_id=i, output_id=o)
    blob, named = g.blob()
    ex = load(blob, named, "auto")
    assert ex.engine == "numpy"
    assert ex.engine_reason == ("LiteRT's XNNPACK delegate did not take RELU6; LiteRT's builtin kernels round "
                                "differently from XNNPACK")


@needs_litert
def test_the_operator_listing_is_litert_s_own_without_operand_types():
    """What decides that XNNPACK took a graph whole (``ops_details``) lists LiteRT's operators as LiteRT's own
    ``_get_ops_details`` does, for a graph it took and one it left partly to builtin kernels; a wrapper without
    the node methods gets LiteRT's listing itself."""
    from types import SimpleNamespace

    from pterun.delegates.xnnpack import graph as G
    from pterun.delegates.xnnpack.litert_engine.env import modules
    from pterun.delegates.xnnpack.litert_engine.adapter import ops_details
    from pterun.delegates.xnnpack.litert_engine.translate import translate

    q = (P.PER_TENSOR, T({4: ("f", 0.05), 6: ("i", 3)}))
    g = Graph()
    i, o = g.input([1, 8], P.QINT8, q), g.output([1, 8], P.QINT8, q)
    g.node("Clamp", lo=0.0, hi=6.0, input_id=i, output_id=o)
    for graph in (G.Graph.read(*_elu_graph(1.0).blob()), G.Graph.read(*g.blob())):
        interp = modules()(model_content=translate(graph).model)
        interp.allocate_tensors()
        want = [(d["op_name"], list(d["inputs"]), list(d["outputs"])) for d in interp._get_ops_details()]
        got = ops_details(interp)
        assert [(d["op_name"], list(d["inputs"]), list(d["outputs"])) for d in got] == want
        assert all(set(d) == {"op_name", "inputs", "outputs"} for d in got)
    assert {d["op_name"] for d in got} == {"RELU6"}  # the int8 clamp: not delegated
    old = SimpleNamespace(_interpreter=object(), _get_ops_details=lambda: ["LiteRT's listing"])
    assert ops_details(old) == ["LiteRT's listing"]


@needs_litert
def test_invalid_graphs_still_get_the_numpy_engines_errors():
    g = Graph()
    i, o = g.input([2, 3]), g.output([2, 3])
    t = g.internal([2, 3])
    g.node("Negate", input_id=t, output_id=o)  # reads t before anything writes it
    g.node("Abs", input_id=i, output_id=t)
    blob, named = g.blob()
    with pytest.raises(DelegateError, match="reads value 2 before any node produces it"):
        load(blob, named, "auto")


@needs_litert
@pytest.mark.parametrize("name", sorted(UNARY_REFS) + sorted(BINARY_REFS))
def test_elementwise_nodes_are_taken_by_litert(name):
    # their values are checked against float64 references on both engines in test_xnnpack.py
    g = Graph()
    if name in UNARY_REFS:
        i, o = g.input([2, 3, 5]), g.output([2, 3, 5])
        g.node(name, input_id=i, output_id=o)
    else:  # broadcasting, with a clamp that is not a TFLite activation (MAXIMUM/MINIMUM after the op)
        a, b, o = g.input([2, 3, 4]), g.input([1, 3, 1]), g.output([2, 3, 4])
        g.node(name, lo=-1.0, hi=2.0, input1_id=a, input2_id=b, output_id=o)
    ex = load(*g.blob(), "litert")
    assert (ex.engine, ex.engine_reason) == ("litert", None)


# ==============================================================================================================
# Dynamic shapes, threads, 4-bit weights, quantization parameters
# ==============================================================================================================
@needs_litert
def test_inputs_of_a_new_shape_resize_the_interpreter():
    method = Runtime().load_program(FIXTURES / "xnn_mlp_dynamic.pte").load_method("forward")
    for call in load_calls("xnn_mlp_dynamic"):  # 8, 3 then 16 rows
        (got,) = method.execute(call["inputs"])
        assert got.shape == call["outputs"][0].shape
        np.testing.assert_array_equal(got, call["outputs"][0])
    assert method.delegates[0].engine == "litert"


def _dense_graph(w: np.ndarray, b: np.ndarray, rows: int, doubled: bool = False) -> Graph:
    """x @ w.T + b, or twice that through a tensor of the graph's own (which lets graphs share an interpreter)."""
    g = Graph()
    i, o = g.input([rows, w.shape[1]]), g.output([rows, w.shape[0]])
    m = g.internal([rows, w.shape[0]]) if doubled else o
    g.node("FullyConnected", input1_id=i, filter_id=g.value(list(w.shape), data=w),
           bias_id=g.value([w.shape[0]], data=b), output_id=m)
    if doubled:
        g.node("Add", input1_id=m, input2_id=m, output_id=o)
    return g


@needs_litert
def test_a_repeated_call_copies_in_invokes_and_copies_out_and_sees_new_values(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import plan as L

    rng = np.random.default_rng(11)
    w, b = rng.standard_normal((24, 40), dtype=F32), rng.standard_normal(24, dtype=F32)
    plan = load(*_dense_graph(w, b, 3).blob(), "litert")
    x, out = out_tensor((3, 40), F32), out_tensor((3, 24), F32)
    x.array[...] = rng.standard_normal((3, 40), dtype=F32)
    plan.execute([x, out])
    assert plan._steady is not None  # the same tensors and arrays next time: nothing to check again
    fail = lambda *a: pytest.fail("a steady call went through the checked path")  # noqa: E731
    monkeypatch.setattr(L, "input_array", fail)
    monkeypatch.setattr(L, "write_output", fail)
    for _ in range(3):
        x.array[...] = rng.standard_normal((3, 40), dtype=F32)
        plan.execute([x, out])
        np.testing.assert_allclose(out.array, x.array @ w.T + b, rtol=1e-5, atol=1e-5)
    monkeypatch.undo()
    other = out_tensor((3, 24), F32)  # another output tensor: the checked path, then steady on it
    plan.execute([x, other])
    np.testing.assert_array_equal(other.array, out.array)
    assert plan._steady[3] == (other,)


@needs_litert
def test_a_new_shape_leaves_the_steady_state_and_the_old_arrays_are_not_used_again():
    rng = np.random.default_rng(12)
    w, b = rng.standard_normal((16, 32), dtype=F32), rng.standard_normal(16, dtype=F32)
    plan = load(*_dense_graph(w, b, 8).blob(), "litert")
    x, out = out_tensor((8, 32), F32, capacity=(64, 32)), out_tensor((8, 16), F32, capacity=(64, 16))
    last = None
    for rows in (8, 8, 64, 64, 2, 8, 8):  # the interpreter's memory moves when it grows
        x.resize((rows, 32))
        x.array[...] = rng.standard_normal((rows, 32), dtype=F32)
        plan.execute([x, out])
        assert out.array.shape == (rows, 16)
        np.testing.assert_allclose(out.array, x.array @ w.T + b, rtol=1e-5, atol=1e-5)
        if rows == last:  # steady from the second call at a shape (the first one resized the output)
            assert plan._steady is not None and plan._steady[1] == (x.array,)
        last = rows
    # tensors whose arrays never change, around a call that resizes the interpreter and does not settle (its
    # output is resized): they must not be served from arrays over the interpreter's old memory
    p, op = out_tensor((8, 32), F32), out_tensor((8, 16), F32)
    q, oq = out_tensor((64, 32), F32), out_tensor((1, 16), F32, capacity=(64, 16))
    for t in (p, q):
        t.array[...] = rng.standard_normal(t.array.shape, dtype=F32)
    plan.execute([p, op])
    plan.execute([p, op])
    plan.execute([q, oq])
    assert plan._steady is None
    plan.execute([p, op])
    np.testing.assert_allclose(op.array, p.array @ w.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(oq.array, q.array @ w.T + b, rtol=1e-5, atol=1e-5)


@needs_litert
def test_graphs_sharing_an_interpreter_stay_steady_when_another_is_resized():
    # each subgraph of an interpreter has memory of its own: resizing one moves none of another's arrays
    from pterun.delegates.xnnpack import Graph as TypedGraph
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    rng = np.random.default_rng(13)
    ws = [(rng.standard_normal((16, 32), dtype=F32), rng.standard_normal(16, dtype=F32)) for _ in range(2)]
    graphs = [TypedGraph.read(*_dense_graph(w, b, 4, doubled=True).blob()) for w, b in ws]
    batch = L.Batch()
    plans = [L.pending(g, 2, lambda g=g: compile_graph(g), None, batch) for g in graphs]
    batch.finish()
    assert plans[0]._interp is plans[1]._interp and plans[0]._sub.k != plans[1]._sub.k
    ios = [(out_tensor((4, 32), F32, capacity=(256, 32)), out_tensor((4, 16), F32, capacity=(256, 16)))
           for _ in plans]
    for step in range(4):
        for (x, out), p, (w, b) in zip(ios, plans, ws):
            if p is plans[1] and step == 2:
                x.resize((256, 32))  # only the second graph grows
            x.array[...] = rng.standard_normal(x.array.shape, dtype=F32)
            steady = p._steady
            p.execute([x, out])
            if p is plans[0] and step > 0:
                assert p._steady is steady  # the first graph never left its steady state
            np.testing.assert_allclose(out.array, 2 * (x.array @ w.T + b), rtol=1e-5, atol=1e-5)


def _scalar_and_conv_graph(w: np.ndarray, b: np.ndarray) -> Graph:
    """A [1] input copied to a [1] output (swin_t's delegates pass a 0-D constant through like this) beside a
    convolution with a bias, whose sums start from the bias in XNNPACK as ExecuTorch runs it."""
    g = Graph()
    s, x = g.input([1]), g.input([1, 16, 16, 3])
    g.node("Copy", input_id=s, output_id=g.output([1]))
    g.node("Conv2d", padding_top=0, padding_right=0, padding_bottom=0, padding_left=0, kernel_height=4,
           kernel_width=4, subsampling_height=4, subsampling_width=4, dilation_height=1, dilation_width=1,
           group_input_channels=3, group_output_channels=8, groups=1, input1_id=x,
           filter_id=g.value(list(w.shape), data=w), bias_id=g.value([8], data=b), output_id=g.output([1, 4, 4, 8]))
    return g


@needs_litert
def test_a_one_dim_copy_runs_on_xnnpack_at_every_size():
    g = Graph()
    i = g.input([4])
    g.node("Copy", input_id=i, output_id=g.output([4]))
    plan = load(*g.blob(), "litert")
    assert (plan.engine, plan.engine_reason) == ("litert", None)  # a RESHAPE to [-1] is refused; this is not
    for n in (4, 3, 6):
        x = np.arange(n, dtype=F32) - 1.5
        out = out_tensor((n,), F32, capacity=(8,))
        plan.execute([tensor(x), out])
        np.testing.assert_array_equal(out.array, x)


@needs_litert
def test_a_scalar_for_a_one_element_value_is_passed_without_preparing_the_graph_again(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import plan as L

    rng = np.random.default_rng(3)
    w, b, x = randn(8, 4, 4, 3), rng.standard_normal(8, dtype=F32), randn(1, 16, 16, 3)
    blob = _scalar_and_conv_graph(w, b).blob()
    runs = {}
    for shape in ((1,), ()):
        plan = load(*blob, "litert")
        assert plan.engine == "litert"
        monkeypatch.setattr(L.LiteRTPlan, "_resize", lambda *a: pytest.fail("the interpreter was resized"))
        outs = [out_tensor(shape, F32), out_tensor((1, 4, 4, 8), F32)]
        scalar = out_tensor(shape, F32)  # (xnn_payloads.tensor makes every array at least 1-D)
        scalar.array[...] = 2.5
        plan.execute([scalar, tensor(x)] + outs)
        monkeypatch.undo()
        assert outs[0].array.shape == shape and outs[0].array.item() == 2.5
        runs[shape] = outs[1].array.copy()
    # LiteRT prepared again after a resize rounds the convolution differently (the bias added after the sums):
    # the 0-D call must give the bits of the call at the declared shape
    np.testing.assert_array_equal(runs[()], runs[(1,)])


@needs_litert
def test_a_shape_the_model_cannot_take_moves_the_delegate_to_numpy(caplog):
    # explicit pool padding that equals SAME only at 4x4: at 5x5 LiteRT's SAME would pad differently
    g = Graph()
    i, o = g.input([1, 4, 4, 2]), g.output([1, 2, 2, 2])
    g.node("AvgPooling2d", padding_top=0, padding_right=1, padding_bottom=1, padding_left=0, pooling_height=3,
           pooling_width=3, stride_height=2, stride_width=2, dilation_height=1, dilation_width=1, input_id=i,
           output_id=o)
    blob, named = g.blob()
    ex = load(blob, named, "auto")
    assert ex.engine == "litert"
    x = randn(1, 4, 4, 2)
    out = out_tensor((1, 2, 2, 2), F32)
    ex.execute([tensor(x), out])
    np.testing.assert_allclose(out.array, _avg_pool_3x3_s2_pad_bottom_right(x), rtol=1e-6, atol=1e-6)
    x5 = randn(1, 5, 5, 2)
    out5 = out_tensor((1, 2, 2, 2), F32, capacity=(1, 3, 3, 2))
    with caplog.at_level(logging.INFO, logger="pterun"):
        ex.execute([tensor(x5), out5])
    assert ex.engine == "numpy" and "equals the graph's padding only at [1, 4, 4, 2]" in ex.engine_reason
    assert out5.array.shape == (1, 2, 2, 2)
    np.testing.assert_allclose(out5.array, _avg_pool_3x3_s2_pad_bottom_right(x5), rtol=1e-6, atol=1e-6)
    assert any("moves to the NumPy engine" in r.getMessage() for r in caplog.records)


def _avg_pool_3x3_s2_pad_bottom_right(x: np.ndarray) -> np.ndarray:
    """3x3 stride-2 average over real pixels only (the padding row/column at the end is not counted)."""
    h, w = x.shape[1:3]
    oh, ow = (h + 1 - 3) // 2 + 1, (w + 1 - 3) // 2 + 1
    out = np.empty((x.shape[0], oh, ow, x.shape[3]), np.float64)
    for r in range(oh):
        for c in range(ow):
            out[:, r, c] = x[:, 2 * r : min(2 * r + 3, h), 2 * c : min(2 * c + 3, w)].mean(axis=(1, 2))
    return out


@needs_litert
def test_int4_weights_stay_packed_and_bf16_scales_become_exact_fp16():
    from pterun.delegates.xnnpack import Graph as TypedGraph
    from pterun.delegates.xnnpack.litert_engine import plan as L

    pf_blob, pf_named = _qb4_graph(np.float32(0.03125)).blob()
    graph = TypedGraph.read(pf_blob, pf_named)
    tr = L.translate(graph)
    weights = [v for v in graph.values.values() if v.datatype == P.QBINT4]
    n_weights = sum(int(np.prod(v.dims)) for v in weights)
    assert len(tr.model) < 2 * n_weights  # 4 bits a weight plus a small model; float32 would be 32 bits
    ex = load(pf_blob, pf_named, "auto")
    assert ex.engine == "litert"


def _qb4_graph(scale) -> Graph:
    oc, ic, gs = 64, 256, 32
    return qb4_fc_graph(RNG.integers(-8, 8, (oc, ic)), np.full((oc, ic // gs), scale, F32), gs)


@needs_litert
def test_a_bf16_scale_fp16_cannot_hold_keeps_the_graph_on_numpy():
    blob, named = _qb4_graph(np.float32(2.0**-30)).blob()  # below fp16's smallest subnormal
    ex = load(blob, named, "auto")
    assert ex.engine == "numpy"
    assert "is not exactly representable in fp16, which TFLite's blockwise int4 requires" in ex.engine_reason
