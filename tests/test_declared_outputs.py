"""Outputs sized from the model a cache hit reads, not asked of LiteRT (``compiled.open_compiled``'s ``fixed``).

LiteRT's first answer about a CompiledModel's outputs prepares XNNPACK's runtime (10-15 ms of ResNet18's cached
load); on a hit pterun sizes its output arrays from the shapes the model declares instead, and the first call
prepares, as ExecuTorch's first call does. A buffer smaller than LiteRT's output is written past its end, so the
declared shapes are trusted only where the miss that wrote the cache checked them against LiteRT's."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls_from

from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import bindings as B
from pterun.delegates.xnnpack.litert_engine import cache as K
from pterun.delegates.xnnpack.litert_engine import compiled as C
from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine import writer as W

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                reason="ai-edge-litert not installed")


def _writer(shapes: list, types=None, signature=None) -> W.ModelWriter:
    w = W.ModelWriter()
    for j, shape in enumerate(shapes):
        w.add_tensor(shape, (types or {}).get(j, TFL.TensorType.FLOAT32), name=f"v{j}",
                     signature=signature if j == len(shapes) - 1 else None)
    return w


def test_a_layout_declares_each_signatures_outputs_by_name_index_shape_and_dtype():
    w = _writer([[2, 3], [4], [1, 5]], {1: TFL.TensorType.INT8})
    f32, i8 = np.dtype(np.float32), np.dtype(np.int8)
    # no signature: LiteRT makes one naming the outputs by their tensors' names
    assert w.layout([0], [2, 1]).outputs == ({"v2": (2, (1, 5), f32), "v1": (1, (4,), i8)},)
    assert w.signed([0], [2, 1]).outputs == ({"o0000": (2, (1, 5), f32), "o0001": (1, (4,), i8)},)
    members = [(_writer([[3], [3]]), [0], [1]), (_writer([[2], [7, 2]]), [0], [1])]
    assert W.combine(members).outputs == ({"o0": (1, (3,), f32)}, {"o0": (1, (7, 2), f32)})


@pytest.mark.parametrize("shapes, types, signature", [
    ([[2], [2]], {1: TFL.TensorType.INT64}, None),  # a type LiteRT's buffers are not made of here
    ([[2], [2]], None, np.asarray([-1], np.int32)),  # dims that change from call to call
])
def test_an_output_whose_size_is_not_fixed_by_the_model_declares_nothing(shapes, types, signature):
    assert _writer(shapes, types, signature).layout([0], [1]).outputs == (None,)


def test_an_unnamed_or_twice_named_output_declares_nothing():
    w = _writer([[2], [2], [2]])
    w.tensors[2].name = ""
    assert w.layout([0], [2]).outputs == (None,)
    w.tensors[2].name = "v1"
    assert w.layout([0], [1, 2]).outputs == (None,)


class _Asked:
    """Counts LiteRT's output-details calls and what each check of declared outputs found."""

    def __init__(self, monkeypatch):
        self.details, self.checks = 0, []
        details, check = B.Model.get_output_tensor_details, C._as_declared

        def counted(model, key):
            self.details += 1
            return details(model, key)

        def recorded(cm, outputs, fixed):
            ok = check(cm, outputs, fixed)
            self.checks.append((sum(outputs[k] is not None for k in fixed if k < len(outputs)), ok))
            return ok

        monkeypatch.setattr(B.Model, "get_output_tensor_details", counted)
        monkeypatch.setattr(C, "_as_declared", recorded)


def _plans(method) -> list:
    r = method._runner
    return [ex for ex in list(r.executors) + [v[1] for v in r.merged.values()] if getattr(ex, "engine", None) ==
            "litert"]


@pytest.mark.parametrize("rel", ["xnn_mobilenet_v2.pte", "xnn_qint8_cnn.pte", "xnn_8da4w.pte"])
def test_a_hit_asks_litert_nothing_about_its_outputs_and_gives_the_same_numbers(rel, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(K, "NOTE_LOADS", 0)
    call = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]
    ref = Runtime(engine="litert").load_program(FIXTURES / rel).load_method(call["method"]).execute(call["inputs"])
    asked = _Asked(monkeypatch)
    Runtime(engine="litert", cache=tmp_path).load_program(FIXTURES / rel).load_method(call["method"])  # the miss
    assert asked.checks and all(ok for _, ok in asked.checks) and sum(n for n, _ in asked.checks) >= 1
    assert asked.details >= 1  # the miss asked, to check
    asked.details, asked.checks = 0, []
    m = Runtime(engine="litert", cache=tmp_path).load_program(FIXTURES / rel).load_method(call["method"])
    plans = _plans(m)
    assert plans and all(type(p._interp).__name__ == "Compiled" and p._interp.declared for p in plans)
    assert (asked.details, asked.checks) == (0, [])  # the hit: neither asked nor checked
    for _ in range(2):  # the first call prepares XNNPACK's runtime; the second runs prepared
        got = m.execute(call["inputs"])
        for g, r in zip(got, ref):
            assert type(g) is type(r) and g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_array_equal(g, r)
    assert asked.details == 0


def test_outputs_litert_works_out_otherwise_than_declared_are_refused_and_the_interpreter_runs_them(tmp_path,
                                                                                                   monkeypatch):
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(K, "NOTE_LOADS", 0)
    rel = "xnn_mobilenet_v2.pte"
    call = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]
    ref = Runtime(engine="litert").load_program(FIXTURES / rel).load_method(call["method"]).execute(call["inputs"])
    declared = W._declared

    def one_short(sg, named):  # a translation that declared an output smaller than it is
        out = declared(sg, named)
        return out and {n: (t, (shape[0], shape[-1] - 1) if len(shape) > 1 else shape, dt)
                        for n, (t, shape, dt) in out.items()}

    monkeypatch.setattr(W, "_declared", one_short)
    asked = _Asked(monkeypatch)
    for _ in range(2):  # refused, then remembered
        m = Runtime(engine="litert", cache=tmp_path).load_program(FIXTURES / rel).load_method(call["method"])
        assert [type(p._interp).__name__ for p in _plans(m)] == ["Interpreter"]
        for g, r in zip(m.execute(call["inputs"]), ref):
            np.testing.assert_array_equal(g, r)
    assert [ok for _, ok in asked.checks] == [False]
    files = [f for f in os.listdir(tmp_path / "xnnpack") if not f.endswith(".file")]
    assert files and all(f.endswith(".refused") for f in files)


@pytest.mark.parametrize("merge", [None, False], ids=["merged", "unmerged"])
def test_every_committed_program_declares_the_outputs_litert_works_out(merge, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(K, "NOTE_LOADS", 0)
    asked = _Asked(monkeypatch)
    for path in sorted(FIXTURES.rglob("*.pte")):  # xnn_*, llm/, multimodal/, releases/, portable ones compiled
        try:
            program = Runtime(engine="litert", merge_delegates=merge, cache=tmp_path).load_program(path)
        except Exception:  # noqa: BLE001  (a program that needs its external data file)
            continue
        for name in sorted(program.method_names):
            try:
                program.load_method(name)
            except Exception:  # noqa: BLE001  (a method needing inputs this test does not give)
                pass
    assert asked.checks and [ok for _, ok in asked.checks if not ok] == []
    assert sum(n for n, _ in asked.checks) >= 100, asked.checks  # 149 merged, 213 unmerged signatures checked
