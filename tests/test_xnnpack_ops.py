"""The XNNPACK delegate's NumPy kernels (numpy_engine: windows, conv, pool, pointwise) and quantization helpers (quant.py) against independent
NumPy references. Node-level and payload tests are in test_xnnpack.py, recorded fixtures in
test_xnnpack_fixtures.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pterun.delegates.xnnpack.numpy_engine import conv, pointwise, pool, windows
from pterun.delegates.xnnpack import payload as P
from pterun.delegates.xnnpack import quant as Q

from xnn_refs import F32, close, randn, ref_conv, ref_deconv, ref_pool, ref_resize


# ==============================================================================================================
# Kernels against the references
# ==============================================================================================================
CONV_CASES = [  # (groups, icg, ocg, kernel, stride, pads, dilation)
    (1, 3, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    (1, 5, 2, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),
    (1, 4, 3, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),
    (2, 3, 2, (3, 2), (2, 1), (2, 0, 1, 1), (1, 2)),
    (3, 2, 2, (2, 3), (1, 2), (0, 1, 2, 0), (2, 1)),
]


@pytest.mark.parametrize("groups,icg,ocg,kernel,stride,pads,dil", CONV_CASES)
def test_conv2d_kernel(groups, icg, ocg, kernel, stride, pads, dil):
    x = randn(2, 7, 8, groups * icg)
    w = randn(groups * ocg, *kernel, icg)
    b = randn(groups * ocg)
    k = conv.Conv2d(w, b, windows.Geometry(pads, kernel, stride, dil), groups)
    close(k(x), ref_conv(x, w, b, stride, pads, dil, groups), where="conv")


def test_conv2d_tensorflow_same_padding():
    x, w = randn(1, 7, 6, 2), randn(3, 3, 2, 2)
    g = windows.Geometry((0, 0, 0, 0), (3, 2), (2, 2), (1, 1), same_padding=True)
    assert g.pads(7, 6) == (1, 0, 1, 0)  # total pads 2 (h) and 0 (w): split with the extra at the end
    close(conv.Conv2d(w, None, g)(x), ref_conv(x, w, None, (2, 2), (1, 0, 1, 0), (1, 1), 1))


@pytest.mark.parametrize("multiplier,stride,pads,dil", [(1, (1, 1), (1, 1, 1, 1), (1, 1)),
                                                        (2, (2, 1), (0, 2, 1, 0), (1, 2))])
def test_depthwise_kernel(multiplier, stride, pads, dil):
    c = 3
    x = randn(2, 6, 7, c)
    w = randn(1, 3, 3, c * multiplier)
    b = randn(c * multiplier)
    dw = conv.DepthwiseConv2d(w, b, windows.Geometry(pads, (3, 3), stride, dil), multiplier)
    # the same computation as a grouped convolution: output channel o reads input channel o // multiplier
    w_grouped = w[0].transpose(2, 0, 1)[:, :, :, None]  # [oc, kh, kw, 1]
    close(dw(x), ref_conv(x, w_grouped, b, stride, pads, dil, c))


@pytest.mark.parametrize("groups,kernel,stride,pads,dil,adj", [
    (1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1)),
    (2, (2, 3), (2, 3), (0, 1, 0, 2), (1, 1), (0, 2)),
    (1, (3, 2), (1, 2), (1, 0, 0, 1), (2, 1), (0, 0)),
])
def test_deconv_kernel(groups, kernel, stride, pads, dil, adj):
    x = randn(1, 4, 5, groups * 3)
    w = randn(groups * 2, *kernel, 3)
    b = randn(groups * 2)
    k = conv.ConvTranspose2d(w, b, windows.Geometry(pads, kernel, stride, dil), groups, adj)
    close(k(x), ref_deconv(x, w, b, stride, pads, dil, groups, adj))


@pytest.mark.parametrize("kernel,stride,pads,dil", [((2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
                                                    ((3, 3), (2, 1), (1, 1, 1, 1), (1, 1)),
                                                    ((3, 2), (1, 2), (2, 0, 1, 1), (2, 1))])
def test_pool_kernels(kernel, stride, pads, dil):
    x = randn(2, 7, 6, 3)
    g = windows.Geometry(pads, kernel, stride, dil)
    close(pool.max_pool(x, g), ref_pool(x, kernel, stride, pads, dil, "max"), where="max")
    close(pool.AvgPool(g)(x), ref_pool(x, kernel, stride, pads, dil, "avg"), where="avg (padding excluded)")


def test_argmax_pool_kernel():
    x = randn(2, 6, 9, 3)
    g = windows.Geometry((1, 0, 0, 2), (2, 3), (2, 3), (1, 1))
    values, index = pool.argmax_pool(x, g)
    ref_v, ref_i = ref_pool(x, (2, 3), (2, 3), (1, 0, 0, 2), (1, 1), "argmax")
    close(values, ref_v)
    np.testing.assert_array_equal(index, ref_i)


@pytest.mark.parametrize("align,legacy", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("size", [(9, 13), (3, 2), (1, 1), (8, 10)])
def test_resize_bilinear_kernel(align, legacy, size):
    x = randn(2, 4, 5, 3)
    close(pool.ResizeBilinear(*size, align, legacy)(x), ref_resize(x, *size, align, legacy))


def test_elementwise_kernels():
    x = np.linspace(-9, 9, 1001).astype(F32)
    ref_gelu = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    np.testing.assert_allclose(pointwise.gelu(x), ref_gelu, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pointwise.sigmoid(x), 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(pointwise.hardswish(x), x * np.clip(x + 3, 0, 6) / 6, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(pointwise.elu(0.5)(x), np.where(x > 0, x, 0.5 * np.expm1(x)), rtol=1e-6, atol=1e-7)
    s = pointwise.softmax(randn(3, 7))
    np.testing.assert_allclose(s.sum(-1), 1, rtol=1e-6)


def test_constant_pad_and_global_pool_kernels():
    x = randn(1, 2, 3, 4)
    y = pool.constant_pad(x, (0, 1, 0, 2), (1, 0, 2, 0), 0.5)
    assert y.shape == (2, 3, 5, 6)
    np.testing.assert_array_equal(y[0, 1:, :3, 2:], x[0])
    assert (y[1] == 0.5).all() and (y[:, 0] == 0.5).all()
    assert pool.global_avg_pool(x, True).shape == (1, 1, 1, 4)
    np.testing.assert_allclose(pool.global_avg_pool(x, False), x.mean((1, 2)), rtol=1e-6)


# ==============================================================================================================
# Quantization helpers
# ==============================================================================================================
def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.25, 0.35, -0.25, -0.15, 100.0, -100.0], F32)
    np.testing.assert_array_equal(Q.quantize(x, 0.1, 0, np.int8), [2, 4, -2, -2, 127, -128])
    np.testing.assert_array_equal(Q.quantize(x, 0.1, 128, np.uint8), [130, 132, 126, 126, 255, 0])


def test_fused_range_in_quantized_units():
    assert Q.fused_range(0.0, math.inf, 0.5, -10, np.int8) == (-10, 127)  # fused ReLU: zero point
    assert Q.fused_range(-1.0, 1.0, 0.5, 3, np.int8) == (1, 5)
    assert Q.fused_range(-math.inf, 1000.0, 0.5, 0, np.uint8) == (0, 255)


def test_qd8_params_match_xnnpack_formula():
    # row min -1, max 3: multiplier 255/4, zero point from the min side: -128 + 1*63.75 = -64.25 -> -64
    mult, zp, dq = Q.qd8_params(np.array([-1.0], F32), np.array([3.0], F32))
    assert mult[0] == F32(63.75) and zp[0] == -64 and dq[0] == F32(1) / F32(63.75)
    # all-positive row: min is taken as 0, so the zero point is -128 and 0 is exactly representable
    mult, zp, dq = Q.qd8_params(np.array([2.0], F32), np.array([5.1], F32))
    assert zp[0] == -128 and mult[0] == F32(255) / F32(5.1)
    # a constant-zero row keeps scale 1
    mult, zp, dq = Q.qd8_params(np.array([0.0], F32), np.array([0.0], F32))
    assert mult[0] == 1 and dq[0] == 1


def test_qd8_fake_quantize_rows():
    x = randn(3, 5, 40)
    y = Q.qd8_fake_quantize(x, 1)
    for row, qrow in zip(x.reshape(-1, 40), y.reshape(-1, 40)):
        mult, zp, dq = Q.qd8_params(row.min(keepdims=True), row.max(keepdims=True))
        q = np.clip(np.rint(row * mult[0]) + zp[0], -128, 127)
        np.testing.assert_array_equal(qrow, ((q - zp[0]) * dq[0]).astype(F32))
        assert np.abs(qrow - row).max() <= dq[0] * 0.5 + 1e-6
    # whole tensor as one row
    y2 = Q.qd8_fake_quantize(x, 3)
    assert np.unique(np.round((y2 - y2.min()) / (y2.max() - y2.min()) * 255, 3)).size <= 256


def test_unpack_int4_low_nibble_first_and_odd_columns():
    packed = np.array([[0x98, 0x0F], [0x10, 0x08]], np.uint8)  # rows of 3 values (padded to 4 nibbles)
    np.testing.assert_array_equal(Q.unpack_int4(packed, 2, 3), [[0, 1, 7], [-8, -7, 0]])


def test_bf16_scale_rounding():
    s = np.array([0.1, 1.0, 3.3e-3], F32)
    r = P.round_to_bf16(s)
    assert (r.view(np.uint32) & 0xFFFF == 0).all()
    np.testing.assert_allclose(r, s, rtol=1 / 128)
    assert r[1] == 1.0


@pytest.mark.parametrize("n", range(7))
def test_chain_composes_any_number_of_functions_left_to_right(n):
    from functools import partial

    from pterun.delegates.xnnpack.numpy_engine.compiler import chain

    fns = [partial(lambda k, s: s + str(k), k) for k in range(n)]
    with_nones = [f for fn in fns for f in (None, fn)]  # None entries are skipped
    assert chain(*with_nones)("x") == "x" + "".join(str(k) for k in range(n))
