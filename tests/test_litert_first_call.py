"""A CompiledModel's signature is prepared by its first call, not at load (``compiled.CompiledSubgraph``).

LiteRT's first answer about a CompiledModel's outputs prepares XNNPACK's runtime (10-15 ms of ResNet18's load).
A signature that runs at the shapes its model declares is made without asking: its outputs are numbered from the
model pterun wrote (``writer.Unwritten.outputs``), and the first call asks LiteRT for their shapes (never the
declared ones: LiteRT writes a whole output into a smaller buffer, past its end), then runs, as ExecuTorch's first
call prepares XNNPACK's runtime. What it cannot prepare then moves to the NumPy engine, saying why."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fixtures_util import FIXTURES, litert_plans, load_calls_from

from pterun import Runtime
from pterun.delegates.xnnpack.litert_engine import bindings as B
from pterun.delegates.xnnpack.litert_engine import cache as K
from pterun.delegates.xnnpack.litert_engine import compiled as C
from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine import writer as W

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                reason="ai-edge-litert not installed")


def _writer(n: int) -> W.ModelWriter:
    w = W.ModelWriter()
    for j in range(n):
        w.add_tensor([2, j + 1], TFL.TensorType.FLOAT32, name=f"v{j}")
    return w


def test_a_layout_numbers_each_signatures_outputs_by_name():
    w = _writer(3)
    # no signature: LiteRT makes one naming the outputs by their tensors' names
    assert w.layout([0], [2, 1]).outputs == ({"v2": 2, "v1": 1},)
    assert w.signed([0], [2, 1]).outputs == ({"o0000": 2, "o0001": 1},)
    assert W.combine([(_writer(2), [0], [1]), (_writer(3), [0], [2, 1])]).outputs == \
        ({"o0": 1}, {"o0": 2, "o1": 1})


def test_an_unnamed_or_twice_named_output_numbers_nothing():
    w = _writer(3)
    w.tensors[2].name = ""
    assert w.layout([0], [2]).outputs == (None,)
    w.tensors[2].name = "v1"
    assert w.layout([0], [1, 2]).outputs == (None,)


class _Asked:
    """Counts LiteRT's output-details calls."""

    def __init__(self, monkeypatch, answer=None):
        self.n = 0
        details = B.Model.get_output_tensor_details

        def counted(model, key):
            self.n += 1
            return (answer or details)(model, key)

        monkeypatch.setattr(B.Model, "get_output_tensor_details", counted)


def _load(rel: str, **kwargs):
    call = load_calls_from((FIXTURES / rel).with_suffix(".npz"))[0]
    return Runtime(engine="litert", **kwargs).load_program(FIXTURES / rel).load_method(call["method"]), call


@pytest.mark.parametrize("rel", ["xnn_mobilenet_v2.pte", "xnn_qint8_cnn.pte", "xnn_8da4w.pte"])
@pytest.mark.parametrize("how", ["in place", "cache miss", "cache hit"])
def test_a_compiled_model_is_prepared_by_its_first_call_with_the_interpreters_numbers(rel, how, tmp_path,
                                                                                      monkeypatch):
    monkeypatch.setattr(C, "EXTERNAL_MIN_BYTES", 1 << 62)
    monkeypatch.setattr(C, "CACHE_MIN_BYTES", 0)
    monkeypatch.setattr(K, "NOTE_LOADS", 0)
    plain, call = _load(rel)
    ref = plain.execute(call["inputs"])
    assert {type(p._interp).__name__ for p in litert_plans(plain)} == {"Interpreter"}
    cache = tmp_path if how != "in place" else False
    if how == "cache hit":
        _load(rel, cache=cache)
    asked = _Asked(monkeypatch)
    monkeypatch.setattr(C, "EXTERNAL_MIN_BYTES", 0 if how == "in place" else 1 << 62)
    m, _ = _load(rel, cache=cache)
    plans = litert_plans(m)
    assert plans and all(type(p._interp).__name__ == "Compiled" for p in plans)
    assert asked.n == 0 and not any(p._sub.prepared for p in plans)
    for _ in range(3):  # the first call prepares each signature, once
        got = m.execute(call["inputs"])
        for g, r in zip(got, ref):
            assert type(g) is type(r) and g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_array_equal(g, r)
        assert asked.n == len(plans) and all(p._sub.prepared for p in plans)


@pytest.mark.parametrize("fault", ["raises", "renumbers"])
def test_a_first_call_litert_cannot_prepare_moves_to_the_numpy_engine_saying_why(fault, monkeypatch, caplog):
    monkeypatch.setattr(C, "EXTERNAL_MIN_BYTES", 0)
    m, call = _load("xnn_mobilenet_v2.pte")
    details = B.Model.get_output_tensor_details

    def faulty(model, key):
        if fault == "raises":
            raise RuntimeError("CompiledModel error: cannot prepare")
        return {n: {**d, "index": int(d["index"]) + 1} for n, d in details(model, key).items()}

    plan, = litert_plans(m)
    assert type(plan._interp).__name__ == "Compiled" and not plan._sub.prepared
    _Asked(monkeypatch, faulty)
    with caplog.at_level("INFO", logger="pterun"):
        got = m.execute(call["inputs"])
    assert plan.engine == "numpy" and plan.engine_reason.startswith("LiteRT cannot reshape the graph: ")
    assert ("cannot prepare" if fault == "raises" else "LiteRT numbers the outputs") in plan.engine_reason
    assert "moves to the NumPy engine" in caplog.text
    for g, r in zip(got, call["outputs"]):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4 * float(np.abs(r).max()))


def test_every_committed_program_numbers_its_outputs_as_litert_does(monkeypatch):
    monkeypatch.setattr(C, "EXTERNAL_MIN_BYTES", 0)  # every model whose constants the program file holds
    checked = 0
    for path in sorted(FIXTURES.rglob("*.pte")):  # xnn_*, llm/, multimodal/, releases/, portable ones compiled
        for merge in (None, False):
            try:
                program = Runtime(engine="litert", merge_delegates=merge).load_program(path)
            except Exception:  # noqa: BLE001  (a program that needs its external data file)
                continue
            for name in sorted(program.method_names):
                try:
                    method = program.load_method(name)
                except Exception:  # noqa: BLE001  (a method needing inputs this test does not give)
                    continue
                for compiled in {id(c): c for c in (getattr(p, "_interp", None) for p in litert_plans(method))
                                 if type(c).__name__ == "Compiled"}.values():
                    for sub in compiled._subs.values():
                        if sub._named is not None:
                            outs = compiled.cm.get_output_tensor_details(sub._key)
                            assert {n: int(d["index"]) for n, d in outs.items()} == sub._named, path
                            checked += 1
    assert checked >= 100, checked
