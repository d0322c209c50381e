"""An LLM's layers with their KV caches and attention as one LiteRT call (issue #24, deliverable 2):
``llama::update_cache`` and ``llama::custom_sdpa`` inside a merged graph, run by
:class:`pterun.delegates.xnnpack.litert_engine.kvplan.KvPlan` on the method's own cache memory."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from fixtures_util import FIXTURES, FORK_OF_A_THREADED_PROCESS
from pterun import Runtime
from pterun.errors import DelegateError

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")
pytestmark = needs_litert
LLM = FIXTURES / "llm"


def _load(name: str = "kv_xnn", merge: bool = True, threads: int = 1):
    return Runtime(merge_delegates=merge, num_threads=threads).load_program(LLM / f"{name}.pte").load_method("forward")


def _kv(method):
    """(run, KvPlan, argument slots) of the method's one joined call."""
    from pterun.delegates.xnnpack.litert_engine.kvplan import KvPlan
    (got,) = [(run, ex, args) for run, ex, args in method._runner.merged.values() if isinstance(ex, KvPlan)]
    return got


def _prompt(method, tokens, start=0):
    return method.execute([np.asarray(tokens, np.int64)[None], np.array([start], np.int64)])[0].copy()


def _cache_slots(method) -> list[int]:
    _, ex, args = _kv(method)
    return sorted({args[e] for e in ex._lay.caches})


def test_the_caches_are_the_method_s_own_memory_at_64_bytes_written_in_place():
    joined, separate = _load(), _load(merge=False)
    slots = _cache_slots(joined)
    assert len(slots) == 4  # two layers, a key and a value cache each
    arena = joined._runner.arenas[1]
    lo = arena.__array_interface__["data"][0]
    values = joined._runner.values
    for s in slots:  # at a 64-byte boundary: where the memory plan put them if that is one, else moved out
        where = values[s].array.__array_interface__["data"][0]
        planned = lo + joined._runner.plan.values[s][1].memory_offset
        assert where % 64 == 0 and (where == planned) == (planned % 64 == 0)
    before = {s: values[s].array for s in slots}
    _prompt(joined, [5, 6, 7, 8, 9])
    _prompt(separate, [5, 6, 7, 8, 9])
    for s in slots:
        got, want = values[s].array, separate._runner.values[s].array
        assert got is before[s]  # the same array: the rows went where the method keeps its cache
        assert np.abs(got[0, :5]).max() > 0 and not got[0, 5:].any()  # five rows written, nothing else
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_new_prompt_at_position_0_after_a_long_decode_gives_a_fresh_method_s_numbers():
    """The positions in the graph grew past 32 during the decode; a new prompt shrinks them again."""
    method, fresh = _load(), _load()
    _prompt(method, [1, 2, 3, 4])
    for p in range(4, 40):
        _prompt(method, [p % 50], p)
    assert _kv(method)[1]._state[0] == 64  # positions 0..39 in use: two steps of 32
    a, b = _prompt(method, [9, 8, 7]), _prompt(fresh, [9, 8, 7])
    assert _kv(method)[1]._state[0] == 32
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())


def test_long_prompts_and_a_second_chunk_give_the_separate_layers_numbers():
    """Attention's matrix multiplies over many query rows (45 tokens, two query heads each: several of XNNPACK's
    16-wide tiles on the packed side) and a chunk that starts inside the cache (causal from position 45)."""
    method, separate = _load(), _load(merge=False)
    rng = np.random.default_rng(3)
    first, second = rng.integers(0, 50, 45).tolist(), rng.integers(0, 50, 30).tolist()
    got, want = ([_prompt(m, first, 0), _prompt(m, second, 45)] + [_prompt(m, [p % 50], p) for p in range(75, 80)]
                 for m in (method, separate))
    assert len(got) == len(want) == 7
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())


def test_the_output_shapes_are_asked_of_litert_once_per_query_count():
    """A decode after a prefill changes the query count, so the outputs' shapes change: LiteRT is asked for them
    (1.2 ms for the 130M Llama) the first time each count comes, and a second prompt and decode find them kept,
    while growing positions never ask. The numbers are a fresh method's."""
    method, fresh = _load(), _load()
    _, ex, _ = _kv(method)
    calls = []
    cm = ex._cm
    details = cm.get_output_tensor_details
    cm.get_output_tensor_details = lambda key: calls.append(key) or details(key)
    try:
        for _ in range(2):
            _prompt(method, [1, 2, 3, 4])
            for p in range(4, 40):  # past 32 positions: the graph grows once
                _prompt(method, [p % 50], p)
            assert _kv(method)[1]._state[0] == 64
            assert len(calls) == 2  # four tokens, then one: both asked on the first pass only
        a, b = _prompt(method, [9, 8, 7]), _prompt(fresh, [9, 8, 7])
        assert len(calls) == 3  # three tokens: a count not seen before
    finally:
        cm.get_output_tensor_details = details
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())


def test_decode_steps_take_the_other_inputs_as_the_last_step_did_while_their_arrays_stay(monkeypatch):
    """A decode step's hidden state and RoPE rows are the same tensors with the same arrays every step: the plan
    reads them (dim order, dtype) once and copies from them after; a prompt's arrays of other shapes are read
    again. The numbers are a fresh method's."""
    from pterun.delegates.xnnpack.litert_engine import kvplan
    method, fresh = _load(), _load()
    _, ex, _ = _kv(method)
    read = []
    real = kvplan.input_array
    monkeypatch.setattr(kvplan, "input_array", lambda args, e, dtype: read.append(e) or real(args, e, dtype))
    n = len(ex._other_dtypes)
    assert n >= 1
    _prompt(method, [1, 2, 3, 4])
    assert len(read) == n
    got = [_prompt(method, [p % 50], p) for p in range(4, 10)]
    assert len(read) == 2 * n  # the first decode step only
    (slot,) = method._runner.outputs
    t = method._runner.values[slot]
    t.storage = np.zeros_like(t.storage)  # the logits' tensor moved to other memory between calls: written there
    t.array = t._view(t.shape)
    got += [_prompt(method, [p % 50], p) for p in range(10, 12)]
    assert len(read) == 2 * n
    _prompt(method, [9, 8, 7])
    assert len(read) == 3 * n
    _prompt(fresh, [1, 2, 3, 4])
    want = [_prompt(fresh, [p % 50], p) for p in range(4, 12)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())


def test_a_position_past_the_cache_is_refused_before_anything_is_written():
    method = _load()
    _prompt(method, [1, 2, 3])
    _, ex, args = _kv(method)
    values = method._runner.values
    call = [values[s] for s in args]
    ints = [e for e in ex._lay.offsets] + [e for e in ex._lay.queries]
    slots = _cache_slots(method)
    before = {s: values[s].array.copy() for s in slots}
    for e in ints:
        call[e] = 127  # the prompt above left three tokens' shapes: 127 + 3 > 128 positions
    with pytest.raises(DelegateError, match=r"start_pos 127 \+ seq_len 3 does not fit the cache's 128 positions"):
        ex.execute(call)
    for e in ints:
        call[e] = -1
    with pytest.raises(DelegateError, match=r"start_pos -1 \+ seq_len 3"):
        ex.execute(call)
    call[ints[0]] = 2.0
    with pytest.raises(DelegateError, match="position must be an int, got float"):
        ex.execute(call)
    assert all(np.array_equal(values[s].array, before[s]) for s in slots)


def test_caches_litert_cannot_bind_in_place_leave_the_layers_merged_one_by_one(monkeypatch):
    """LiteRT copies host memory that is not at its boundary, and the copy's writes are lost: the plan refuses
    such a cache, and the run is merged again without the caches and attention."""
    from pterun.delegates.xnnpack.litert_engine import kvplan

    monkeypatch.setattr(kvplan, "ALIGN", 1 << 20)  # no cache is at a megabyte boundary
    method, separate = _load(), _load(merge=False)
    assert not [ex for _, ex, _ in method._runner.merged.values() if isinstance(ex, kvplan.KvPlan)]
    # each layer's delegates merged, the first delegate joining the first layer's, the logits the second's
    assert len([e for e in method.steps if e.kind == "DelegateCall"]) == 3
    a = [_prompt(method, [1, 2, 3])] + [_prompt(method, [p], p) for p in range(3, 8)]
    b = [_prompt(separate, [1, 2, 3])] + [_prompt(separate, [p], p) for p in range(3, 8)]
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-5 * np.abs(y).max())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@FORK_OF_A_THREADED_PROCESS
@pytest.mark.parametrize("threads", [1, 2])
def test_a_forked_child_runs_the_joined_call_on_a_model_of_its_own(threads):
    method, want = _load(threads=threads), _load(threads=threads)
    _prompt(method, [1, 2, 3])
    expected = [_prompt(want, [1, 2, 3])] + [_prompt(want, [p], p) for p in range(3, 6)]
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            got = [_prompt(method, [1, 2, 3])] + [_prompt(method, [p], p) for p in range(3, 6)]
            code = 0 if all(np.allclose(g, w, rtol=0, atol=1e-5 * np.abs(w).max()) for g, w in zip(got, expected)) \
                else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert np.allclose(_prompt(method, [1, 2, 3]), expected[0], rtol=0, atol=1e-5 * np.abs(expected[0]).max())


def test_the_forms_hold_only_what_the_graph_computes():
    """update_cache and custom_sdpa join a merged graph only as it computes them: float32 caches [1, P, H, D],
    no attention mask, no dropout, causal and scale fixed at load."""
    from pterun.format.schema import BOOL, DOUBLE, INT, NULL, TENSOR
    from pterun.interp.forms import absorbed_op
    from pterun.interp.tensor import Tensor

    def t(shape, dtype=np.float32):
        return Tensor(np.dtype(dtype), shape, tuple(range(len(shape))), np.zeros(int(np.prod(shape)) * 4, np.uint8))

    values = [t((1, 1, 4, 8)), t((1, 16, 2, 8)), t((1, 16, 2, 8)), 3, None, 0.0, True, None, t((1, 1, 4, 8)),
              t((1,)), t((1, 16, 2, 8), np.int32), 0.5, t((1, 16)), False, 0.25]
    tags = [TENSOR, TENSOR, TENSOR, INT, NULL, DOUBLE, BOOL, NULL, TENSOR, TENSOR, TENSOR, DOUBLE, TENSOR, BOOL,
            DOUBLE]
    op = absorbed_op("sdpa", (0, 1, 2, 3, 4, 5, 6, 7, 8), values, tags, {3})
    assert (op.op, op.inputs, op.outputs, op.attrs) == ("sdpa", (0, 1, 2, 3), (8,), {"causal": True, "scale": None})
    op = absorbed_op("sdpa", (0, 1, 2, 3, 4, 5, 13, 14, 8), values, tags, {3})
    assert op.attrs == {"causal": False, "scale": 0.25}
    assert absorbed_op("sdpa", (0, 1, 2, 3, 12, 5, 6, 7, 8), values, tags, {3}) is None  # a mask
    assert absorbed_op("sdpa", (0, 1, 2, 3, 4, 11, 6, 7, 8), values, tags, {3}) is None  # dropout 0.5
    assert absorbed_op("sdpa", (0, 1, 2, 3, 4, 5, 6, 7, 8), values, tags, {3, 6}) is None  # causal set at run time
    assert absorbed_op("sdpa", (0, 10, 2, 3, 4, 5, 6, 7, 8), values, tags, {3}) is None  # an int32 cache
    op = absorbed_op("update_cache", (0, 1, 3, 9), values[:0] + [t((1, 1, 2, 8))] + values[1:], tags, {3})
    assert (op.op, op.inputs, op.outputs) == ("update_cache", (0, 1, 3), (1,))
    assert absorbed_op("update_cache", (0, 1, 3, 9), values, tags, {3}) is None  # 4 heads into a 2-head cache
    assert absorbed_op("update_cache", (0, 10, 3, 9), values[:0] + [t((1, 1, 2, 8))] + values[1:], tags,
                       {3}) is None  # an int32 cache


def test_a_cache_moves_to_a_64_byte_boundary_only_where_nothing_else_shares_its_bytes():
    from pterun.interp.access import SharedBytes
    from pterun.interp.delegates import align_caches
    from pterun.interp.tensor import Tensor

    raw = np.zeros(4096 + 64, np.uint8)
    arena = raw[-raw.ctypes.data % 64:][:4096]  # at a 64-byte boundary, as an arena may be
    arena[16:16 + 256] = np.arange(256, dtype=np.uint8)

    def cache(at=16):
        return Tensor(np.dtype(np.float32), (1, 4, 2, 8), (0, 1, 2, 3), arena[at:at + 256])

    values = [cache(), cache(512)]
    assert align_caches([0, 1], values, SharedBytes(values), []) == [0]  # 1 is at a boundary already
    moved = values[0]
    assert moved.array.ctypes.data % 64 == 0 and not np.shares_memory(moved.storage, arena)
    assert np.array_equal(moved.storage, np.arange(256, dtype=np.uint8))  # its contents came along
    assert np.shares_memory(values[1].storage, arena)
    values = [cache(), cache(128)]  # another value over some of the same bytes: the cache stays
    assert align_caches([0], values, SharedBytes(values), []) == []
    values = [cache()]  # state another method shares
    assert align_caches([0], values, SharedBytes(values), [arena]) == []


def test_the_joined_call_loads_through_the_packed_weight_cache_with_the_same_numbers(tmp_path, monkeypatch):
    """The joined call leaves its cache writes to LiteRT's builtin kernels on purpose; the packed-weight cache takes
    it all the same: noted on the first load, written on the second, read on the third (the model file mapped,
    not written in memory), with the uncached call's numbers bit for bit."""
    from pterun.delegates.xnnpack.litert_engine import compiled

    monkeypatch.setattr(compiled, "CACHE_MIN_BYTES", 0)

    def run(cache):
        method = Runtime(num_threads=1, cache=cache).load_program(LLM / "kv_8da4w.pte").load_method("forward")
        outs = [_prompt(method, [1, 2, 3])] + [_prompt(method, [p], p) for p in range(3, 6)]
        return _kv(method)[1], outs

    _, want = run(False)
    for k in range(3):
        plan, got = run(tmp_path)
        assert all(np.array_equal(g, w) for g, w in zip(got, want))
    assert plan._model is None  # the third load mapped the model the cache kept
    files = os.listdir(tmp_path / "xnnpack")  # the joined call's and the method's other merged calls'
    weights = {f[:-len(".weights")] for f in files if f.endswith(".weights")}
    assert weights and weights == {f[:-len(".tflite")] for f in files if f.endswith(".tflite")}


def test_a_cache_gets_a_twin_only_where_nothing_but_the_run_touches_it():
    """The joined call keeps a head-major twin of a cache beside the method's (attention reads it without a
    transpose); only where nothing outside the run reads or writes the cache could the two drift apart unseen."""
    from types import SimpleNamespace

    from pterun.interp.delegates import _with_private_caches
    from pterun.interp.merge import Absorbed, DelegatePart, Run

    def parts(k=1, v=2):
        return (DelegatePart(0, (9, 3)), Absorbed("update_cache", (3, k, 8), (k,), {}),
                Absorbed("update_cache", (3, v, 8), (v,), {}), Absorbed("sdpa", (4, k, v, 8), (5,), {"causal": True}))

    def private(run_parts=None, read_at=None, outputs=(), memory_id=1, overlapping=()):
        desc = SimpleNamespace(memory_id=memory_id)
        plan = SimpleNamespace(values=[(0, desc)] * 10)
        acc = SimpleNamespace(inputs=frozenset(), outputs=frozenset(outputs), read_at=read_at or {1: [(0, 6)],
                              2: [(0, 7)]}, write_at={1: [(0, 5)], 2: [(0, 6)]},
                              shared=SimpleNamespace(overlapping=lambda c: overlapping))
        run = Run(0, 4, 8, "XnnpackBackend", run_parts or parts())
        got = _with_private_caches(run, plan, acc)
        return [p.attrs.get("private") for p in got if hasattr(p, "attrs")]

    assert private() == [{1: "k"}, {2: "v"}, {1: "k", 2: "v"}]
    assert private(read_at={1: [(0, 6), (0, 12)], 2: [(0, 7)]}) == [{}, {2: "v"}, {2: "v"}]  # read after the run
    assert private(read_at={1: [(1, 6)], 2: [(0, 7)]}) == [{}, {2: "v"}, {2: "v"}]  # read by another chain
    assert private(outputs=(2,)) == [{1: "k"}, {}, {1: "k"}]  # a method output
    assert private(memory_id=2) == [{}, {}, {}]  # state the program's methods share
    assert private(overlapping=(7,)) == [{}, {}, {}]  # another value over its bytes
    assert private(parts(1, 1)) == [{}, {}, {}]  # read as keys and as values


def test_the_fixture_s_caches_have_twins_that_follow_the_method_s_caches():
    method = _load()
    _, ex, args = _kv(method)
    assert sorted(v for _, _, v in ex._lay.twins.values()) == [False] * 4 + [True] * 4  # 2 keys, 2 values, in + out
    _prompt(method, [1, 2, 3, 4])
    for p in range(4, 70):  # past two growths: each rebuilds the twins from the method's caches
        _prompt(method, [p % 50], p)
    fresh = _load(merge=False)
    _prompt(fresh, [1, 2, 3, 4])
    for p in range(4, 70):
        want = _prompt(fresh, [p % 50], p)
    np.testing.assert_allclose(_prompt(method, [3], 70), _prompt(fresh, [3], 70), rtol=0,
                               atol=1e-5 * np.abs(want).max())


def test_attention_multiplies_with_the_cache_on_the_left_and_the_step_s_rows_on_the_right():
    """XNNPACK packs the right-hand side of a batch matrix multiply at every call and reads the left as it is: the
    right is the step's queries (scores) and probabilities (context), never the L cached positions (packing those
    took ~8 % of a 130M Llama's decode step at positions 110-410)."""
    from pterun.delegates.xnnpack.litert_engine.translate import translate_part

    _, ex, _ = _kv(_load())
    w = translate_part(ex._graph).writer
    shapes = [[tuple(int(d) for d in w.tensors[t].shape) for t in o.inputs.tolist()]
              for name, o in zip(w.op_names, w.operators) if name == "BATCH_MATMUL"]
    ((rep, _),) = ex._lay.queries.values()
    assert len(shapes) == 4  # the fixture's two layers, keys and values
    for lhs, rhs in shapes:
        assert rhs[1] == 1 * rep and ex._lay.p in lhs[1:], (lhs, rhs)  # one query token, rep heads per kv head


def test_twins_are_kept_while_the_positions_in_use_stay_and_made_again_when_they_grow(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import kvplan

    method, fresh = _load(), _load(merge=False)
    made = []
    twin = kvplan._twin
    monkeypatch.setattr(kvplan, "_twin", lambda first, values, scratch=None: made.append(first.shape[0]) or
                        twin(first, values, scratch))
    for m in (method, fresh):
        _prompt(m, [1, 2, 3, 4, 5])
    assert made == [32] * 4  # the first call: one twin per key and value cache
    for p in range(5, 40):  # a decode (one row, not five) over the same 32 positions, then growing to 64 at 32
        got, want = _prompt(method, [p % 50], p), _prompt(fresh, [p % 50], p)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert made == [32] * 4 + [64] * 4
    twin_values = np.arange(24, dtype=np.float32).reshape(2, 3, 4)  # [L, Hkv, D]
    np.testing.assert_array_equal(twin(twin_values, True), twin_values.transpose(1, 2, 0))
    np.testing.assert_array_equal(twin(twin_values, False), twin_values.transpose(1, 0, 2))
    scratch = np.full(2 * 24, np.nan, np.float32)  # built in given memory: the same numbers
    np.testing.assert_array_equal(twin(twin_values, True, scratch), twin_values.transpose(1, 2, 0))
    np.testing.assert_array_equal(twin(twin_values, False, scratch), twin_values.transpose(1, 0, 2))


def test_growing_the_positions_keeps_the_output_arrays_and_new_queries_get_new_ones(monkeypatch):
    from pterun.delegates.xnnpack.litert_engine import kvplan

    monkeypatch.setattr(kvplan, "_bindable", lambda *a: False)  # outputs in arrays of the plan's own, copied
    method, fresh = _load(), _load(merge=False)
    _, ex, _ = _kv(method)
    asked = []
    details = type(ex._cm).get_output_tensor_details
    monkeypatch.setattr(type(ex._cm), "get_output_tensor_details", lambda cm, key: (cm is ex._cm and asked.append(key))
                        or details(cm, key))  # the plan's model only (the method's other graphs may be CompiledModels)
    for m in (method, fresh):
        _prompt(m, [1, 2, 3, 4, 5])
    assert len(asked) == 1
    arrays = [a for _, a in ex._out_arrays]
    assert len(arrays) == 1 and not ex._in_place  # the logits
    scratch = ex._twin_scratch
    for p in range(5, 40):  # one row now (new arrays), then past 32 positions: only L changes (the same arrays)
        got, want = _prompt(method, [p % 50], p), _prompt(fresh, [p % 50], p)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert len(asked) == 2 and ex._state[0] == 64
    assert all(a is not b for a, (_, b) in zip(arrays, ex._out_arrays))
    assert ex._twin_scratch is not scratch and ex._twin_scratch.size >= 2 * 64 * max(
        h * d for h, d, _ in ex._lay.twins.values())


def test_the_invoke_takes_the_buffers_capsules_once():
    from pterun.delegates.xnnpack.litert_engine.bindings import Model
    from pterun.delegates.xnnpack.litert_engine.compiled import invoker

    method, fresh = _load(), _load(merge=False)
    _, ex, _ = _kv(method)
    for p, tokens in ((0, [1, 2, 3]), (3, [4]), (4, [5])):
        got, want = _prompt(method, tokens, p), _prompt(fresh, tokens, p)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert type(ex._cm) is Model  # LiteRT's binding, under the engine's own wrapper

    class Buf:
        def __init__(self, name):
            self.capsule = name

    calls = []

    class Binding:
        def RunByIndex(self, k, ins, outs):  # noqa: N802  (LiteRT's name)
            calls.append((k, ins, outs))

    ins, outs = [Buf("a"), Buf("b")], [Buf("c")]
    run = invoker(Model(Binding(), None), 2, ins, outs)
    ins[0].capsule = "changed"  # taken when the invoke was made, not at each call
    run(), run()
    assert calls == [(2, ["a", "b"], ["c"])] * 2


def _in_arena(method, a) -> bool:
    return any(r.ctypes.data <= a.ctypes.data < r.ctypes.data + r.nbytes for r in method._runner.arenas if r.nbytes)


def test_litert_writes_the_logits_where_the_method_keeps_them():
    """The logits share their planned bytes with values that live before the joined call, and nothing else sees
    them after it: they move to memory of their own at 64 bytes (pterun.interp.delegates.own_outputs), which
    LiteRT writes, with no copy a call. Memory the method points them at later is bound instead, or copied into
    where LiteRT cannot bind it."""
    method, fresh = _load(), _load(merge=False)
    _, ex, args = _kv(method)
    (slot,) = method._runner.outputs
    t = method._runner.values[slot]
    assert not _in_arena(method, t.array) and t.array.ctypes.data % 64 == 0
    assert _in_arena(fresh, fresh._runner.values[slot].array)  # where the memory plan put it
    want = [_prompt(fresh, [1, 2, 3], 0)] + [_prompt(fresh, [p], p) for p in range(3, 8)]
    got = [_prompt(method, [1, 2, 3], 0)] + [_prompt(method, [p], p) for p in range(3, 6)]
    assert [e for e, _, a in ex._in_place if a is t.array] == [args.index(slot)] and ex._out_copies == ()
    raw = np.zeros(t.storage.nbytes + 128, np.uint8)
    t.rebind(raw[-raw.ctypes.data % 64 + 16:][:t.storage.nbytes], t.shape)  # off the boundary: copied into
    got.append(_prompt(method, [6], 6))
    assert ex._in_place == () and [o[0] for o in ex._out_copies] == [args.index(slot)]
    t.rebind(raw[-raw.ctypes.data % 64:][:t.storage.nbytes], t.shape)  # on it: bound again
    got.append(_prompt(method, [7], 7))
    got.append(_prompt(method, [8], 8))  # the call that copied there noticed it could bind it: the next binds it
    assert [e for e, _, a in ex._in_place if a is t.array] == [args.index(slot)] and ex._out_copies == ()
    want.append(_prompt(fresh, [8], 8))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())


def test_an_output_moves_only_where_nothing_else_sees_its_bytes_from_the_call_on():
    from types import SimpleNamespace as NS

    from pterun.format.schema import JUMP_FALSE_CALL, KERNEL_CALL
    from pterun.interp.delegates import _alone_after

    x, y = 7, 8  # the call's output, and a value over its bytes; the call: instructions 10-19, its arguments 1, 7

    def alone(reads=None, writes=None, run=None, args=(1, x), inputs=(), outputs=(x,), roots=None, jumps=False):
        reads = {y: [(0, 3)], **(reads or {})}
        writes = {x: [(0, 15)], y: [(0, 2)], **(writes or {})}
        acc = NS(inputs=frozenset(inputs), outputs=frozenset(outputs), read_at=reads, write_at=writes,
                 shared=NS(overlapping=lambda k: (y,) if k == x else (x,)))
        kinds = [KERNEL_CALL] * 30 + ([JUMP_FALSE_CALL] if jumps else [])
        m = NS(run=NS(**{"chain": 0, "start": 10, "stop": 20, "ahead": (), "deferred": (), **(run or {})}), args=args)
        return _alone_after(x, m, NS(chains=[[NS(kind=k) for k in kinds]]), acc, roots or {})

    assert alone()  # y lives before the call only
    assert alone(reads={y: [(0, 12)]}, writes={y: [(0, 11)]})  # inside the call: computed in its own memory
    assert alone(reads={y: [(0, 12)]}, args=(y, x))  # read as the call's argument: taken before it writes
    assert alone(reads={x: [(0, 25)]})  # x itself read after the call
    assert alone(reads={y: [(0, 11)]}, writes={y: [(0, 10)]}, run={"ahead": (10, 11)})  # run before the call
    assert not alone(reads={y: [(0, 25)]})  # y read after the call
    assert not alone(writes={y: [(0, 22)]})  # y written after it: x would have read it
    assert not alone(reads={y: [(0, 12)]}, run={"deferred": (12,)})  # read after the call, though inside it
    assert not alone(writes={y: [(0, 12)]}, args=(1, y, x))  # written by the call itself
    assert not alone(reads={x: [(0, 5)]})  # x read before the call
    assert not alone(writes={x: [(0, 11), (0, 15)]}, run={"ahead": (11,)})  # written before it
    assert not alone(reads={y: [(1, 3)]})  # another chain: no order known
    assert not alone(inputs=(x,)) and not alone(outputs=(x, y))  # the caller's
    assert not alone(jumps=True)
    assert not alone(roots={x: 3}) and not alone(roots={9: x})  # a view, or viewed
