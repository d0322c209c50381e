"""Two rules the model zoo's 8da4w transformers depend on (fixtures from ``tools/zoo/export_fixtures.py``).

* Layer norm (rows under 256 elements), group norm and mean sum each row left to right in float32, as
  ExecuTorch's kernels do; its layer norm on longer rows takes Welford moments in eight float32 lanes.
  NumPy's pairwise sums differ in the last bit of some statistics; in the zoo's deit 8da4w case one such bit
  moved an activation across an exact rounding tie of the next dynamic int8 quantization and the output by
  2.8e-3 of scale (the policy allows 1e-3).
* That dynamic quantization rounds the float32 product ``x * multiplier`` half to even, not the exact product.

No BLAS is involved in the norms: their outputs are compared for equality, since every step is an IEEE
float32 operation in the same order as ExecuTorch's.
"""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import Runtime
from pterun.delegates.xnnpack import quant as Q
from pterun.kernels import norm
from pterun.kernels._common import sum_in_order


def test_norms_equal_executorchs_to_the_bit():
    # the NumPy engine's kernels; under "auto" the program compiles into a LiteRT program, whose norms sum in
    # another order (float tolerance: test_merge_kernels.py; none joins a dynamically quantized graph)
    method = Runtime(engine="numpy").load_program(FIXTURES / "zoo" / "norm_order.pte").load_method("forward")
    for k, call in enumerate(load_calls("zoo/norm_order")):
        x, y, _ = call["inputs"]
        # the fixture is built so that the order of the sums shows: pairwise and left to right differ
        assert np.any(np.add.accumulate(x, axis=-1)[:, -1] != x.sum(axis=-1))
        outs = method.execute(call["inputs"])
        assert len(outs) == len(call["outputs"]) == 5
        names = ("layer norm", "group norm", "mean of squares", "mean over dims 0, 2", "layer norm of 300")
        for name, got, want in zip(names, outs, call["outputs"]):
            assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
            off = int(np.count_nonzero(got != want))
            assert off == 0, f"call {k} {name}: {off} of {want.size} elements differ from ExecuTorch's " \
                             f"(max {np.abs(got - want).max():.3g})"


def test_sequential_moments_add_left_to_right():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 2, 50)) * 10.0 ** rng.uniform(-3, 3, (3, 2, 50))).astype(np.float32)
    mean, var = norm._moments(x, (1, 2), np.float32, sequential=True)
    assert mean.shape == var.shape == (3, 1, 1) and mean.dtype == var.dtype == np.float32
    for i in range(3):
        s = sq = np.float32(0)
        for v in x[i].ravel():
            s, sq = np.float32(s + v), np.float32(sq + np.float32(v * v))
        m = np.float32(s / np.float32(100))
        assert mean[i, 0, 0] == m
        assert var[i, 0, 0] == np.float32(np.float32(sq / np.float32(100)) - np.float32(m * m))


def test_sum_in_order_adds_in_memory_order_over_any_dims():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 5)) * 10.0 ** rng.uniform(-3, 3, (3, 4, 5))).astype(np.float32)
    got = sum_in_order(x, (0, 2), np.float32, keepdims=True)
    assert got.shape == (1, 4, 1) and got.dtype == np.float32
    for j in range(4):
        s = np.float32(0)
        for i in range(3):
            for k in range(5):
                s = np.float32(s + x[i, j, k])
        assert got[0, j, 0] == s
    assert sum_in_order(x, None, np.float64).shape == ()
    assert sum_in_order(np.zeros((2, 0), np.float32), (1,), np.float32).tolist() == [0.0, 0.0]


def test_layer_norm_rows_switch_to_welford_moments_at_executorchs_threshold(monkeypatch):
    seen = []
    real = norm.row_moments
    monkeypatch.setattr(norm, "row_moments", lambda x: seen.append(x.shape) or real(x))
    for n in (norm.SCALAR_LAYER_NORM - 1, norm.SCALAR_LAYER_NORM):
        norm.native_layer_norm_out(np.ones((2, n), np.float32), (n,), None, None, 1e-5, None, None, None)
    assert seen == [(2, norm.SCALAR_LAYER_NORM)]


@pytest.mark.parametrize("n", [256, 300, 4096 + 5])
def test_row_moments_are_the_mean_and_biased_variance(n):
    # one chunk and a tail; 513 vectors: 33 chunks, a five-level merge stack and a tail
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, n)) * 2 + 1).astype(np.float32)
    mean, var = norm.row_moments(x)
    assert mean.dtype == var.dtype == np.float32 and mean.shape == var.shape == (3,)
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(var, x.astype(np.float64).var(axis=1), rtol=1e-5)
    m64, v64 = norm.row_moments(x.astype(np.float64))  # doubles: four lanes, all in float64
    assert m64.dtype == np.float64
    np.testing.assert_allclose(v64, x.astype(np.float64).var(axis=1), rtol=1e-12)


def test_dynamic_quantization_rounds_the_float32_product_half_to_even():
    method = Runtime.get().load_program(FIXTURES / "zoo" / "qd8_ties.pte", engine="numpy").load_method("forward")
    for k, call in enumerate(load_calls("zoo/qd8_ties")):
        (x,), (want,) = call["inputs"], call["outputs"]
        mult, _, _ = Q.qd8_params(x.min(axis=1), x.max(axis=1))
        q32 = x * mult[:, None]
        exact = x.astype(np.float64) * mult[:, None].astype(np.float64)
        ties = np.count_nonzero(np.rint(q32) != np.rint(exact))
        assert ties >= x.size // 4, f"call {k}: only {ties} elements where the two roundings disagree"
        got = np.asarray(method.execute([x])[0])
        assert got.shape == want.shape and got.dtype == np.float32
        rel = float(np.abs(got - want).max() / np.abs(want).max())
        assert rel <= 1e-6, f"call {k}: {rel:.3g} of scale from ExecuTorch's output"


@pytest.mark.parametrize("engine", ["auto", "numpy"])
def test_layer_norms_between_8da4w_calls_join_them_bit_for_bit_where_executorch_runs_its_scalar_loop(engine):
    # rows of 64: the merged LiteRT graph computes the norms as ExecuTorch's scalar loop (litert_engine/exact.py),
    # so the two calls and the norms between them are one step; the 320-wide norm (vectorised moments) stays a
    # NumPy kernel
    method = Runtime.get().load_program(FIXTURES / "zoo" / "qd8_layer_norm.pte", engine=engine).load_method("forward")
    kinds = [(ev.kind, ev.name) for ev in method.steps]
    merged = [("DelegateCall", "delegate XnnpackBackend"), ("KernelCall", "aten::native_layer_norm.out"),
              ("DelegateCall", "delegate XnnpackBackend")]
    import importlib.util

    if engine == "auto" and importlib.util.find_spec("ai_edge_litert") is not None:
        assert kinds == merged
    else:
        assert kinds.count(("KernelCall", "aten::native_layer_norm.out")) == 3
    for k, call in enumerate(load_calls("zoo/qd8_layer_norm")):
        outs = method.execute(call["inputs"])
        for j, (got, want) in enumerate(zip(outs, call["outputs"])):
            assert got.shape == want.shape and got.dtype == np.float32
            rel = float(np.abs(got - want).max() / np.abs(want).max())
            assert rel <= 1e-6, f"call {k}, output {j}: {rel:.3g} of scale from ExecuTorch's output"
