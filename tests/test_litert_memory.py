"""The LiteRT engine's memory: the model bytes written in place (and equal to the joined ones where the C API is
out of reach), faulted in ahead, with huge pages only under a kernel policy that cannot stall, and the packed
weights' pages given back once XNNPACK has packed them, with results unchanged
(``pterun.delegates.xnnpack.litert_engine.memory``)."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from pterun.delegates.xnnpack import payload as P
from xnn_payloads import F32, Graph, out_tensor, tensor

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")


@needs_litert
def test_packed_weights_are_given_back_and_results_do_not_change(monkeypatch):
    import mmap

    from pterun.delegates.xnnpack import Graph as TypedGraph
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.litert_engine import prepare as PR

    rng = np.random.default_rng(7)
    w, b = rng.standard_normal((96, 256), dtype=F32), rng.standard_normal(96, dtype=F32)
    g = Graph()
    i, o = g.input([4, 256]), g.output([4, 96])
    g.node("FullyConnected", input1_id=i, filter_id=g.value([96, 256], data=w), bias_id=g.value([96], data=b),
           output_id=o)
    graph = TypedGraph.read(*g.blob())
    plan = L.build(graph)
    monkeypatch.setattr(PR, "release_packed", lambda model, ranges: 0)
    kept = L.build(graph)
    (off, size), *_ = sorted(L.translate(graph).packed, key=lambda r: -r[1])
    assert size == w.nbytes
    model = np.frombuffer(plan._model, np.uint8)[off:off + size]
    if sys.platform.startswith("linux"):  # whole pages of the filter are gone (read as zeros), the rest is kept
        assert (model == 0).sum() >= size - 2 * mmap.PAGESIZE
    np.testing.assert_array_equal(np.frombuffer(kept._model, np.uint8)[off:off + size], w.view(np.uint8).ravel())
    for rows in (4, 7, 16):  # 7 and 16 resize the interpreter after the weights were given back
        x = rng.standard_normal((rows, 256), dtype=F32)
        got, ref = out_tensor((rows, 96), F32, capacity=(16, 96)), out_tensor((rows, 96), F32, capacity=(16, 96))
        plan.execute([tensor(x), got])
        kept.execute([tensor(x), ref])
        np.testing.assert_array_equal(got.array, ref.array)
        np.testing.assert_allclose(got.array, x @ w.T + b, rtol=1e-4, atol=1e-4)


@needs_litert
def test_model_bytes_written_in_place_equal_the_joined_ones(monkeypatch):
    from pterun.delegates.xnnpack import Graph as TypedGraph
    from pterun.delegates.xnnpack.litert_engine import plan as L
    from pterun.delegates.xnnpack.litert_engine import writer as W

    rng = np.random.default_rng(3)
    g = Graph()
    i, h, o = g.input([2, 1100]), g.internal([2, 1024]), g.output([2, 10])
    w1, w2 = rng.standard_normal((1024, 1100), dtype=F32), rng.standard_normal((10, 1024), dtype=F32)  # 4.5 MB
    g.node("FullyConnected", input1_id=i, filter_id=g.value([1024, 1100], data=w1), bias_id=P.INVALID_ID, output_id=h)
    g.node("FullyConnected", input1_id=h, filter_id=g.value([10, 1024], data=w2),
           bias_id=g.value([10], data=rng.standard_normal(10, dtype=F32)), output_id=o)
    graph = TypedGraph.read(*g.blob())
    made = L.translate(graph).model
    monkeypatch.setattr(W, "new_bytes", lambda size: None)  # where the C API is not reachable
    joined = L.translate(graph).model
    assert type(made) is bytes and len(made) == len(joined) and made == joined


@pytest.mark.parametrize("policy, ok", [("always defer defer+madvise [madvise] never", False),
                                        ("[always] defer defer+madvise madvise never", False),
                                        ("always defer [defer+madvise] madvise never", False),
                                        ("always [defer] defer+madvise madvise never", True),
                                        ("always defer defer+madvise madvise [never]", True),
                                        ("", False)])
def test_huge_pages_are_asked_for_only_where_the_first_write_cannot_stall(tmp_path, policy, ok):
    from pterun.delegates.xnnpack.litert_engine import memory as M

    f = tmp_path / "defrag"
    f.write_text(policy + "\n")
    assert M.huge_pages_without_stalls(str(f)) is ok
    assert M.huge_pages_without_stalls(str(tmp_path / "missing")) is False  # not Linux, or no THP


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise ranges are Linux's")
@pytest.mark.parametrize("ok", [False, True])
def test_new_bytes_asks_for_huge_pages_only_under_a_policy_that_cannot_stall(monkeypatch, ok):
    import mmap

    from pterun.delegates.xnnpack.litert_engine import memory as M

    if not hasattr(mmap, "MADV_HUGEPAGE"):
        pytest.skip("this Python has no MADV_HUGEPAGE")
    asked = []
    monkeypatch.setattr(M, "_huge_ok", None)
    monkeypatch.setattr(M, "huge_pages_without_stalls", lambda: ok)
    monkeypatch.setattr(M, "_madvise", lambda a, n, advice: asked.append(advice) or True)
    made = M.new_bytes(8 << 20)
    assert made is not None and len(made[0]) == 8 << 20 and made[1].size == 8 << 20
    # every large one is faulted in with one call; huge pages are asked for first, where that cannot stall
    assert asked == ([mmap.MADV_HUGEPAGE] if ok else []) + [M.MADV_POPULATE_WRITE]
    asked.clear()
    M.new_bytes(1 << 20)  # small ones never ask
    assert asked == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise ranges are Linux's")
def test_new_bytes_faulted_in_ahead_takes_every_byte_written():
    from pterun.delegates.xnnpack.litert_engine import memory as M

    b, view = M.new_bytes(6 << 20)
    data = np.random.default_rng(0).integers(0, 255, view.size, dtype=np.uint8)
    view[...] = data
    assert np.array_equal(np.frombuffer(b, np.uint8), data)
