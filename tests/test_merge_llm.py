"""Merging on a real exported LLM (``tests/fixtures/llm``): its layers' delegates merge, with their KV caches and
attention joined where LiteRT takes them (and merged layer by layer where it does not), the numbers kept; calls move
past the cache update; merging is turned off by the engine and the variable; an LLM is prepared at one token."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from merge_util import without_attention_join
from pterun import Runtime
from pterun.format.schema import DELEGATE_CALL, FREE_CALL, KERNEL_CALL
from pterun.interp.merge import DelegatePart

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")
LLM = Path(__file__).parent / "fixtures" / "llm"


@pytest.fixture(autouse=True)
def default_settings(monkeypatch):
    monkeypatch.delenv("PTERUN_ENGINE", raising=False)
    monkeypatch.delenv("PTERUN_NO_MERGE", raising=False)


# -- a real exported LLM -------------------------------------------------------------------------------------
def _decode(method, steps=3):
    outs = [method.execute([np.arange(1, 6, dtype=np.int64)[None], np.array([0], dtype=np.int64)])[0]]
    for p in range(5, 5 + steps):
        outs.append(method.execute([np.array([[3 + p]], dtype=np.int64), np.array([p], dtype=np.int64)])[0])
    return outs


@needs_litert
def test_llm_decode_merges_its_delegates_and_keeps_its_numbers(monkeypatch):
    """Where LiteRT cannot take the KV caches and attention (here: the backend told not to hold them), each
    layer's delegates merge, and the cache updates and attention run between the calls."""
    without_attention_join(monkeypatch)
    merged = Runtime(merge_delegates=True).load_program(LLM / "kv_xnn.pte").load_method("forward")
    separate = Runtime(merge_delegates=False).load_program(LLM / "kv_xnn.pte").load_method("forward")
    runs = merged._runner.merged
    assert len(runs) == 3 and not separate._runner.merged
    plan = merged._runner.plan.chains[0]
    for run, ex, args in runs.values():  # a run starts and ends with a delegate call and holds only mergeable ones
        assert plan[run.start].kind == DELEGATE_CALL and plan[run.stop - 1].kind == DELEGATE_CALL
        assert all(plan[pc].kind in (DELEGATE_CALL, KERNEL_CALL, FREE_CALL) for pc in range(run.start, run.stop))
        assert ex.engine == "litert"
    calls = len([e for e in merged.steps if e.kind == "DelegateCall"])
    before = len([e for e in separate.steps if e.kind == "DelegateCall"])
    joined = sum(sum(isinstance(p, DelegatePart) for p in run.parts) - 1 for run, _, _ in runs.values())
    # each layer's rotary-embedding call joined its own; the first delegate joins the first layer's, the position
    # ints and RoPE rows between them computed before the call (Run.ahead), and the logits the last layer's, its
    # last token picked inside the call
    assert (before, calls) == (24, 24 - joined) and calls == 3
    assert [d.engine for d in merged.delegates] == ["litert"] * len(merged.delegates)
    for a, b in zip(_decode(separate), _decode(merged)):
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


@needs_litert
@pytest.mark.parametrize("name", ["kv_xnn", "kv_8da4w"])
def test_an_llm_s_layers_with_their_caches_and_attention_are_one_call(name):
    """ExecuTorch's LLM exporter leaves update_cache and custom_sdpa between every layer's delegates; merged with
    them, with the first delegate (the position ints and RoPE rows it is followed by computed before the call) and
    the logits (the last token picked inside the call), a step of the two-layer fixture is one call, not 24 (or 3
    without them), with the numbers kept."""
    from pterun.delegates.xnnpack.litert_engine.kvplan import KvPlan
    merged = Runtime(merge_delegates=True).load_program(LLM / f"{name}.pte").load_method("forward")
    separate = Runtime(merge_delegates=False).load_program(LLM / f"{name}.pte").load_method("forward")
    runner = merged._runner
    plan, ops = runner.plan.chains[0], runner.plan.operators
    kv = [(run, ex) for run, ex, _ in runner.merged.values() if isinstance(ex, KvPlan)]
    assert len(kv) == 1
    run, ex = kv[0]
    held = [ops[plan[pc].op_index] for pc in range(run.start, run.stop) if plan[pc].kind == KERNEL_CALL]
    everywhere = [ops[ins.op_index] for ins in plan if ins.kind == KERNEL_CALL]
    for op in ("llama::update_cache.out", "llama::custom_sdpa.out"):  # every one of them, in the one call
        assert held.count(op) == everywhere.count(op) == {"llama::update_cache.out": 4}.get(op, 2)
    assert ex.engine == "litert" and run.deferred == ()
    assert plan[run.start].kind == DELEGATE_CALL and run.start == min(
        pc for pc, ins in enumerate(plan) if ins.kind == DELEGATE_CALL)  # the first delegate call
    assert {ops[plan[pc].op_index] for pc in run.ahead} == {"aten::_local_scalar_dense", "executorch_prim::add.Scalar",
                                                            "aten::slice_copy.Tensor_out"}
    assert len([e for e in merged.steps if e.kind == "DelegateCall"]) == 1
    assert "aten::select_copy.int_out" in held and any(getattr(p, "op", None) == "select" for p in run.parts)
    for a, b in zip(_decode(separate, 40), _decode(merged, 40)):  # past 32 positions: the caches grow in the graph
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


@needs_litert
def test_trace_shows_a_merged_call_as_one_instruction():
    method = Runtime().load_program(LLM / "kv_xnn.pte").load_method("forward")
    (run, _, _), *_ = method._runner.merged.values()
    event = next(e for e in method.steps if e.index == run.start)
    before = f"; {', '.join(map(str, run.ahead))} run before it" if run.ahead else ""
    later = f"; {', '.join(map(str, run.deferred))} run after it" if run.deferred else ""
    assert run.ahead and event.kind == "DelegateCall" and \
        event.detail == f"instructions {run.start}-{run.stop - 1} merged into one call{before}{later}"
    indices = {t.index for t in method.trace([np.arange(1, 6, dtype=np.int64)[None], np.array([0], dtype=np.int64)])}
    steps = [e.index for e in method.steps]  # what runs before the call runs there, in program order (a repeated
    at = steps.index(run.start)  # read of the position is no step: the first read's step fills its slot)
    ran_ahead = [i for i in run.ahead if i in steps]
    assert run.start in indices and indices & set(range(run.start + 1, run.stop)) == set(run.deferred) | set(ran_ahead)
    assert ran_ahead and steps[at - len(ran_ahead):at] == ran_ahead


@needs_litert
def test_a_merged_call_moves_past_the_cache_update_and_attention_runs_after_it(monkeypatch):
    """Between a layer's projections and its rotary embedding, ExecuTorch writes the value cache; the merged call
    holds both delegates, and the cache update (with the view it reads) runs right after it, in program order
    (where the backend does not hold the update itself)."""
    without_attention_join(monkeypatch)
    method = Runtime().load_program(LLM / "kv_xnn.pte").load_method("forward")
    plan, ops = method._runner.plan.chains[0], method._runner.plan.operators
    runs = [run for run, _, _ in method._runner.merged.values() if run.deferred]
    assert len(runs) == 2  # one a layer
    for run in runs:
        assert {ops[plan[pc].op_index] for pc in run.deferred} == {"executorch_prim::et_view.default",
                                                                   "llama::update_cache.out"}
        order = [e.index for e in method.steps]
        at = order.index(run.start)
        assert order[at + 1:at + 1 + len(run.deferred)] == list(run.deferred)
        assert not set(order) & (set(range(run.start + 1, run.stop)) - set(run.deferred) - set(run.ahead))
        assert all(order.index(pc) < at for pc in run.ahead if pc in order)


@needs_litert
def test_merging_is_off_by_variable_for_the_numpy_engine_and_overridden_by_the_runtime(monkeypatch):
    path = LLM / "kv_xnn.pte"
    assert not Runtime(engine="numpy").load_program(path).load_method("forward")._runner.merged
    monkeypatch.setenv("PTERUN_NO_MERGE", "1")
    assert not Runtime().load_program(path).load_method("forward")._runner.merged
    assert Runtime(merge_delegates=True).load_program(path).load_method("forward")._runner.merged


@needs_litert
def test_the_cache_update_moves_only_because_its_out_placeholder_is_declared_unwritten(monkeypatch):
    """The memory plan puts a later output of the merged call where update_cache's [1] ``out`` lies; only the
    kernel's declaration that it never writes ``out`` lets the update move past that call."""
    from pterun.kernels import KERNELS
    from pterun.kernels.llm import update_cache_out

    without_attention_join(monkeypatch)

    def deferred():
        method = Runtime().load_program(LLM / "kv_xnn.pte").load_method("forward")
        plan, ops = method._runner.plan.chains[0], method._runner.plan.operators
        return [pc for run, _, _ in method._runner.merged.values() for pc in run.deferred
                if ops[plan[pc].op_index] == "llama::update_cache.out"]

    assert KERNELS["llama::update_cache.out"].unwritten == (3,) and deferred()
    out = np.full(1, 7.0, np.float32)
    assert update_cache_out(np.ones((1, 1, 2, 4), np.float32), np.zeros((1, 4, 2, 4), np.float32), 1, out) == \
        (None, None) and out[0] == 7.0  # what the declaration says: ``out`` is left alone
    monkeypatch.setattr(KERNELS["llama::update_cache.out"], "unwritten", ())
    assert deferred() == []


@needs_litert
def test_an_llm_is_prepared_at_one_token_and_grows_with_the_prompt():
    """LiteRT sizes its memory for the shapes an interpreter is prepared at: at the 127-token bound, a model
    holds activation memory for 127 tokens from load on (for a ~500M Llama, ~430 MB of its 1.39 GB after load)."""
    from pterun.delegates.xnnpack.litert_engine.kvplan import GROW, KvPlan
    method = Runtime().load_program(LLM / "kv_xnn.pte").load_method("forward")
    plans = list({id(e): e for e in method._runner.executors}.values())
    assert method._runner.dynamic_sizes == frozenset({127})
    kv = [p for p in plans if isinstance(p, KvPlan)]
    assert len(kv) == 1  # the layers, with their caches and attention: prepared at one token over GROW positions
    shapes = kv[0]._in_shapes  # the caches' first GROW positions of 2 x 16 elements are the largest inputs, flat or
    assert max(np.prod(s) for s in shapes.values()) == GROW * 32  # as twins; a 127-token activation is 127 x 64
    assert sorted(shapes[e] for e in kv[0]._lay.caches if e < kv[0]._lay.n_in) == [(GROW * 32,)] * 4
    assert sorted(shapes[e] for e in kv[0]._lay.twins if e < kv[0]._lay.n_in) == [(2, 16, GROW)] * 2 + \
        [(2, GROW, 16)] * 2  # value caches' twins [Hkv, D, L], key caches' [Hkv, L, D]
    for p in plans:
        if isinstance(p, KvPlan):
            continue
        for v, t in zip(p._graph.inputs, p.inputs):
            assert p._shapes[t[1]] == tuple(1 if d == 127 else d for d in v.dims)
        # ... and so is everything after the inputs: XNNPACK sizes its workspace for the model's declared dims
        assert [d["name"] for d in p._interp.get_tensor_details() if 127 in d["shape"]] == []
    separate = Runtime(merge_delegates=False).load_program(LLM / "kv_xnn.pte").load_method("forward")
    for a, b in zip(_decode(separate, 2), _decode(method, 2)):  # a 5-token prefill, then decode: resized on the way
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
