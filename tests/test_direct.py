"""A method that is one LiteRT invoke is called directly (pterun.interp.direct): the caller's arrays straight into
LiteRT's memory and its outputs straight into new arrays, with every contract of the usual path kept."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls

from pterun import Runtime

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                reason="ai-edge-litert is not installed")


def _method(name: str, **kw):
    return Runtime(**kw).load_program(FIXTURES / f"{name}.pte").load_method("forward")


def _counting(method):
    """Count the calls that took the direct path and those that ran the method's steps."""
    runner = method._runner
    counts = {"direct": 0, "steps": 0}
    direct, run = runner.direct, runner.run

    def counted_direct(arrays):
        got = direct(arrays)
        counts["direct" if got is not None else "steps"] += got is not None
        return got

    def counted_run(hook=None):
        counts["steps"] += 1
        return run(hook)
    runner.direct, runner.run = counted_direct, counted_run
    return counts


def test_a_one_invoke_method_is_called_directly_once_steady_and_gives_fresh_arrays():
    method = _method("xnn_mlp")
    assert method._runner.direct is not None
    counts = _counting(method)
    calls = load_calls("xnn_mlp")
    seen = []
    for _ in range(3):
        for call in calls:
            (got,) = method.execute(call["inputs"])
            assert type(got) is np.ndarray and got.dtype == np.float32 and got.flags.owndata and got.flags.writeable
            np.testing.assert_allclose(got, call["outputs"][0], rtol=1e-5, atol=1e-6)
            assert not any(np.shares_memory(got, s) for s in seen)  # the caller's own: no later call changes it
            seen.append(got)
    assert counts == {"direct": 5, "steps": 1}  # the first call settles the interpreter's steady state
    kept = seen[0].copy()
    method.execute([np.full((4, 16), 7, np.float32)])
    np.testing.assert_array_equal(seen[0], kept)


def test_inputs_the_shortcut_cannot_take_run_the_steps_with_the_same_numbers():
    method = _method("xnn_mlp")
    counts = _counting(method)
    x = load_calls("xnn_mlp")[0]["inputs"][0]
    (want,) = method.execute([x])
    wide = np.zeros((4, 32), np.float32)
    wide[:, ::2] = x  # a strided view of the same values
    (got,) = method.execute([wide[:, ::2]])
    np.testing.assert_array_equal(got, want)
    assert counts == {"direct": 0, "steps": 2}
    (got,) = method.execute([x])
    np.testing.assert_array_equal(got, want)
    assert counts == {"direct": 1, "steps": 2}
    trace = method.trace([x])  # a hook: the steps, which write the method's memory
    assert counts == {"direct": 1, "steps": 3}
    np.testing.assert_array_equal(trace[-1].outputs[0], want)


def test_a_dynamic_input_whose_shape_changes_takes_the_steps_and_then_the_shortcut_again():
    method = _method("xnn_mlp_dynamic")
    assert method._runner.direct is not None
    counts = _counting(method)
    calls = load_calls("xnn_mlp_dynamic")
    for call in calls + calls:
        (got,) = method.execute(call["inputs"])
        np.testing.assert_allclose(got, call["outputs"][0], rtol=1e-5, atol=1e-6)
    shapes = [c["inputs"][0].shape for c in calls + calls]
    changes = 1 + sum(a != b for a, b in zip(shapes, shapes[1:]))
    assert counts["steps"] == changes and counts["direct"] == len(shapes) - changes


@pytest.mark.parametrize("name, kw, one_invoke", [
    ("xnn_transformer", {}, True),  # 26 instructions merged into one call
    ("xnn_transformer", {"merge_delegates": False}, False),
    ("zoo/qd8_layer_norm", {}, False),  # a 320-wide layer norm between two calls
    ("xnn_mlp", {"engine": "numpy"}, False),
    ("xnn_mlp", {"merge_delegates": False, "fold": False}, True),  # one delegate alone is one invoke too
    ("xnn_embed_mlp", {}, True),  # the caller's ids gathered in the merged call, checked before it
    ("xnn_embed_mlp", {"engine": "numpy"}, False),
    # positions and token types folded at load, before the merge: the token embedding then leads into the call
    ("xnn_embed_positions", {}, True),
    ("xnn_embed_positions", {"fold": False}, False),
])
def test_only_methods_that_are_one_litert_invoke_have_the_shortcut(name, kw, one_invoke):
    method = _method(name, **kw)
    assert (method._runner.direct is not None) == one_invoke
    assert (len(method.steps) == 1) >= one_invoke
    for _ in range(2):
        for call in load_calls(name):
            got = method.execute(call["inputs"])
            for g, w in zip(got, call["outputs"]):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))


@pytest.mark.parametrize("name", ["zoo/litert_graphs", "zoo/qint8_se", "xnn_qint8_cnn", "xnn_mobilenet_v2", "mlp"])
def test_every_output_comes_back_in_the_methods_order_on_the_shortcut(name):
    # litert_graphs: two outputs; qint8_se: five, and program constants among the call's arguments
    method = _method(name)
    assert method._runner.direct is not None
    counts = _counting(method)
    calls = load_calls(name)
    for _ in range(3):
        for call in calls:
            got = method.execute(call["inputs"])
            assert len(got) == len(call["outputs"])
            for g, w in zip(got, call["outputs"]):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max()))
    assert counts["direct"] >= 3 * len(calls) - 2


def test_a_method_sharing_memory_with_the_programs_other_methods_has_no_shortcut():
    # memory ids past 1 hold state other methods read (a KV cache): the steps must write it on every call
    from pterun.config import Settings
    from pterun.format.schema import ExecutionPlan
    from pterun.interp.method import MethodRunner

    program = Runtime().load_program(FIXTURES / "xnn_mlp.pte")
    plan = program._pf.plan(0)
    alone = MethodRunner(program._pf, plan, Settings(), shared_arenas={})
    assert alone.direct is not None and not alone.uses_shared_arenas
    more = ExecutionPlan(plan.name, plan.values, plan.inputs, plan.outputs, plan.chains, plan.operators,
                         plan.delegates, tuple(plan.buffer_sizes) + (64,))  # an arena of memory id 2
    shared = MethodRunner(program._pf, more, Settings(), shared_arenas={})
    assert shared.uses_shared_arenas and shared.direct is None
