"""The llama:: kernels (``pterun.kernels.llm``) against ExecuTorch's own kernels, and the properties they
promise beyond them: caches written in place and bounds checked, a decode step attending straight into its out
array, a chunk of queries attending causally from its position and under a mask.

The recorded cases in ``tests/fixtures/llm/kernels.npz`` come from ``tools/export_llm_fixtures.py`` (reference
venv).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pterun.kernels import llm as K
from pterun.kernels import KERNELS

LLM = Path(__file__).parent / "fixtures" / "llm"

KCASES = json.loads(str(np.load(LLM / "kernels.npz")["__manifest__"]))


@pytest.mark.parametrize("case", KCASES, ids=[c["name"] for c in KCASES])
def test_kernel_matches_executorch(case):
    data = np.load(LLM / "kernels.npz")
    args = [data[a["array"]].copy() if "array" in a else a["value"] for a in case["args"]]
    fn = KERNELS[case["op"]].fn
    result = fn(*args, np.zeros(1, np.float32))
    results = result if isinstance(result, tuple) else (result,)
    if "out" in case:
        got, want = results[-1], data[case["out"]]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for i, key in case.get("after", {}).items():  # caches written in place, and returned as None
        np.testing.assert_array_equal(args[int(i)], data[key])
        assert results[0] is None


def test_update_cache_writes_in_place_and_checks_bounds():
    cache = np.zeros((1, 8, 2, 4), np.float32)
    before = cache.__array_interface__["data"][0]
    assert K.update_cache_out(np.full((1, 2, 2, 4), 3, np.float32), cache, 6, np.zeros(1)) == (None, None)
    assert cache.__array_interface__["data"][0] == before and cache[0, 6:].min() == 3 and cache[0, :6].max() == 0
    with pytest.raises(ValueError, match="does not fit"):
        K.update_cache_out(np.ones((1, 2, 2, 4), np.float32), cache, 7, None)
    with pytest.raises(ValueError, match="out of range"):
        K.update_cache_with_indices_out(np.ones((1, 1, 2, 4), np.float32), cache, 0, np.array([[8]]), None)
    with pytest.raises(ValueError, match="cannot be set at the same time"):
        K.custom_sdpa_out(np.ones((1, 1, 2, 4), np.float32), cache, cache, 0, np.zeros((1, 8), np.float32), 0.0,
                          True, None, None)


def test_a_decode_step_attends_straight_into_its_out_array():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 1, 6, 8), dtype=np.float32)  # 6 query heads over 2 kv heads
    k, v = (rng.standard_normal((1, 16, 2, 8), dtype=np.float32) for _ in range(2))
    want = K.custom_sdpa_out(q, k, v, 9, None, 0.0, True, None, None)
    out = np.full((1, 1, 6, 8), np.nan, np.float32)
    assert K.custom_sdpa_out(q, k, v, 9, None, 0.0, True, None, out) is out  # nothing for the interpreter to copy
    np.testing.assert_array_equal(out, want)
    kk, vv = np.repeat(k[0, :10], 3, axis=1), np.repeat(v[0, :10], 3, axis=1)  # [positions, query heads, dim]
    scores = np.einsum("hd,lhd->hl", q[0, 0].astype(np.float64), kk) / np.sqrt(8)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(out[0, 0], np.einsum("hl,lhd->hd", p / p.sum(-1, keepdims=True), vv), rtol=1e-5,
                               atol=1e-6)
    for other in (np.zeros((1, 2, 6, 8), np.float32), np.zeros((1, 1, 6, 8), np.float64),
                  np.zeros((1, 1, 8, 6), np.float32).transpose(0, 1, 3, 2)):  # not its shape, dtype or order
        got = K.custom_sdpa_out(q, k, v, 9, None, 0.0, True, None, other)
        assert got is not other and not other.any()
        np.testing.assert_array_equal(got, want)


def _naive_attention(q, k, v, visible) -> np.ndarray:
    """float64 attention of q [1, S, Hq, D] over k/v [1, L, Hkv, D]; ``visible(i, j)``: query i sees key j."""
    s, hq, d = q.shape[1:]
    rep = hq // k.shape[2]
    kk, vv = np.repeat(k[0], rep, axis=1).astype(np.float64), np.repeat(v[0], rep, axis=1).astype(np.float64)
    scores = np.einsum("ihd,jhd->hij", q[0].astype(np.float64), kk) / np.sqrt(d)
    seen = np.array([[visible(i, j) for j in range(k.shape[1])] for i in range(s)])
    scores = np.where(seen[None], scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True), vv)[None]


@pytest.mark.parametrize("start", [0, 5])
def test_a_chunk_of_queries_attends_causally_from_its_position_and_under_a_mask(start):
    rng = np.random.default_rng(7)
    s = 4
    q = rng.standard_normal((1, s, 6, 8), dtype=np.float32)
    k, v = (rng.standard_normal((1, 16, 2, 8), dtype=np.float32) for _ in range(2))
    got = K.custom_sdpa_out(q, k, v, start, None, 0.0, True, None, None)
    assert got.shape == (1, s, 6, 8) and got.dtype == np.float32
    # query i sits at position start + i and sees keys 0..start + i
    want = _naive_attention(q, k[:, :start + s], v[:, :start + s], lambda i, j: j <= start + i)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    mask = np.where(rng.random((s, 16)) < 0.3, np.float32(-np.inf), np.float32(0))
    mask[:, 0] = 0  # every query sees at least one key
    got = K.custom_sdpa_out(q, k, v, start, mask, 0.0, False, None, None)
    np.testing.assert_allclose(got, _naive_attention(q, k, v, lambda i, j: mask[i, j] == 0), rtol=1e-5, atol=1e-6)
    got = K.custom_sdpa_out(q, k, v, start, None, 0.0, False, None, None)  # no mask, not causal: all it has
    np.testing.assert_allclose(got, _naive_attention(q, k[:, :start + s], v[:, :start + s], lambda i, j: True),
                               rtol=1e-5, atol=1e-6)
