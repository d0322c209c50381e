"""Dynamically quantized (qdint8) GEMMs sum integers exactly, as XNNPACK's qd8-f32-qc8w / qb4w kernels do."""

from __future__ import annotations

import numpy as np

from pterun.delegates.xnnpack import quant as Q


def test_qd8_values_carry_their_codes_and_derived_arrays_do_not():
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(np.float32)
    v = Q.qd8_fake_quantize(x)
    assert isinstance(v, Q.Qd8Values) and v.dtype == np.float32 and v.shape == (3, 40)
    assert v.codes.shape == (3, 40) and v.zero_point.shape == v.dq.shape == (3,)
    assert np.array_equal(v.codes, np.rint(v.codes))
    np.testing.assert_array_equal(np.asarray(v), (v.codes * v.dq[:, None]).astype(np.float32))
    assert v.reshape(40, 3).codes is None and (v + 1).codes is None and v[1:].codes is None
    assert Q.qd8_rows(v.reshape(40, 3), 3) is None


def test_qd8_rows_split_a_wide_quantization_row_into_gemm_rows():
    v = Q.qd8_fake_quantize(np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10, num_nonbatch_dims=2)
    codes, zp, dq = Q.qd8_rows(v, 4)
    assert codes.shape == (6, 4) and zp.tolist() == np.repeat(v.zero_point, 3).tolist()
    assert Q.qd8_rows(v, 5) is None


def test_channel_gemm_integer_sum_is_exact_beyond_float32_range():
    k = 1536  # 255 * 127 * 1536 is about 5e7 > 2**24: one float32 BLAS sum would round
    codes = np.full((1, k), 255, np.float32)
    codes[0, ::7] = -254
    w = np.full((2, k), 127, np.int8)
    w[1, ::3] = -127
    exact = codes.astype(np.int64) @ w.T.astype(np.int64)
    g = Q.Qd8ChannelGemm(w, np.ones(2, np.float32), None)
    got = g(codes, np.zeros(1, np.float32), np.ones(1, np.float32))
    assert got.dtype == np.float32
    assert got.tolist() == exact.astype(np.float32).tolist()  # one rounding of the exact integer, as (float) int32


def test_channel_gemm_scales_row_then_channel_then_adds_bias():
    w = np.array([[1, -2], [3, 4]], np.int8)
    g = Q.Qd8ChannelGemm(w, np.array([0.5, 0.25], np.float32), np.array([1.0, -1.0], np.float32))
    got = g(np.array([[10, 20]], np.float32), np.zeros(1, np.float32), np.array([0.1], np.float32))
    acc = np.array([10 - 40, 30 + 80], np.float32)
    want = acc * np.float32(0.1) * np.array([0.5, 0.25], np.float32) + np.array([1.0, -1.0], np.float32)
    assert got.tolist() == [want.tolist()]


def test_block_gemm_matches_xnnpack_block_order():
    rng = np.random.default_rng(1)
    n, k, bl = 5, 128, 32
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    s = (rng.random((n, k // bl)) * 0.02 + 0.001).astype(np.float32)
    v = Q.qd8_fake_quantize(rng.standard_normal((3, k)).astype(np.float32) * 4)
    bias = rng.standard_normal(n).astype(np.float32)
    got = Q.Qd8BlockGemm(w, s, bl, bias)(*Q.qd8_rows(v, k))
    # the kernel's arithmetic, element by element: raw codes, int block sums, float32 block after block
    raw = (v.codes + v.zero_point[:, None]).astype(np.int64)
    want = np.zeros((3, n), np.float32)
    for r in range(3):
        for j in range(n):
            ksum = np.float32(0)
            for b in range(k // bl):
                ksum = np.float32(ksum - np.float32(w[j, b * bl:(b + 1) * bl].astype(np.int64).sum()) * s[j, b])
            out = np.float32(ksum * np.float32(v.zero_point[r]))
            for b in range(k // bl):
                blk = int(raw[r, b * bl:(b + 1) * bl] @ w[j, b * bl:(b + 1) * bl].astype(np.int64))
                out = np.float32(out + np.float32(np.float32(blk) * s[j, b]))
            want[r, j] = np.float32(np.float32(out * v.dq[r]) + bias[j])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # and it is the real product of the dequantized operands, up to float32 rounding
    real = np.asarray(v, np.float64) @ (w * np.repeat(s, bl, axis=1)).T.astype(np.float64) + bias
    np.testing.assert_allclose(got, real, rtol=0, atol=1e-5 * np.abs(real).max())


def test_static_int8_gemm_splits_k_only_where_a_float32_sum_could_round():
    from pterun.delegates.xnnpack.numpy_engine import conv

    small = np.full((64, 3), 127, np.float32)  # 255 * 127 * 64 < 2**24: one sum is exact
    assert conv.exact_splits(small, 255) is None
    big = np.full((1200, 2), 127, np.float32)  # 255 * 127 * 1200 > 2**24
    cuts = conv.exact_splits(big, 255)
    assert cuts[0] == 0 and cuts[-1] == 1200 and len(cuts) == 4
    assert all(255 * 127 * (b - a) < 2**24 for a, b in zip(cuts[:-1], cuts[1:]))
    x = np.full((1, 1200), 255, np.float32)
    x[0, ::5] = -255
    got = conv.split_matmul(x, big, cuts)
    exact = x.astype(np.int64) @ big.astype(np.int64)
    assert got.dtype == np.float32 and got.tolist() == exact.astype(np.float32).tolist()
