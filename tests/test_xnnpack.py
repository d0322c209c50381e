"""The XNNPACK delegate: recorded fixtures against the reference runtime, every node type on small synthetic
graphs against NumPy references, the kernels and quantization helpers, and payload validation.

Synthetic payloads are built with xnn_payloads.py.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

from pterun.delegates import BACKENDS, DelegateContext
from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from pterun.delegates.xnnpack import quant as Q
from pterun.errors import DelegateError
from pterun.interp.tensor import Tensor
import xnn_payloads
from xnn_payloads import (FP16, FP32, NONE, QINT8, QUINT8, Graph, T, fc_graph, out_tensor, per_channel, per_tensor,
                          per_token, qb4_fc_graph, tensor)
from xnn_refs import close, randn, ref_conv, ref_deconv, ref_pool, ref_resize

F32 = np.float32
RNG = np.random.default_rng(1234)
XNN_FIXTURES = ["mlp", "mlp_dynamic", "cnn", "ops", "transformer", "gru", "mobilenet_v2", "qint8_cnn", "qint8_ops",
                "qdint8_mlp", "qdint8_conv", "8da4w", "8da4w_channel", "fp16", "mixed", "dynamic_reshape"]
QUANTIZED_FIXTURES = {"qint8_cnn", "qint8_ops", "qdint8_mlp", "qdint8_conv", "8da4w", "8da4w_channel"}
HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None


@pytest.fixture(autouse=True, params=["numpy", pytest.param("litert", marks=pytest.mark.skipif(
    not HAVE_LITERT, reason="ai-edge-litert is not installed"))])
def engine(request, monkeypatch):
    """Every synthetic graph runs on the NumPy engine and on LiteRT (which falls back to NumPy for what it
    cannot take: test_litert.py checks which)."""
    monkeypatch.setattr(xnn_payloads, "ENGINE", request.param)  # what Graph.run loads with
    return request.param


# ==============================================================================================================
# Every node type on a synthetic graph
# ==============================================================================================================
def _erf(v):
    return np.vectorize(math.erf)(v)


UNARY_REFS = {
    "Abs": np.abs, "Negate": np.negative, "Floor": np.floor, "Ceiling": np.ceil, "Square": np.square,
    "SquareRoot": np.sqrt, "ReciprocalSquareRoot": lambda x: 1 / np.sqrt(x), "Log": np.log, "Exp": np.exp, "Sin": np.sin, "Cos": np.cos, "Tanh": np.tanh,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "Hardswish": lambda x: x * np.clip(x + 3, 0, 6) / 6, "Copy": lambda x: x,
    "Softmax": lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True),
}
# nodes that need positive inputs
UNARY_INPUTS = {"SquareRoot": np.abs, "ReciprocalSquareRoot": lambda x: np.abs(x) + F32(0.1),
                "Log": lambda x: np.abs(x) + F32(0.1)}


@pytest.mark.parametrize("name", sorted(UNARY_REFS))
def test_unary_node(name):
    x = UNARY_INPUTS.get(name, lambda v: v)(randn(2, 3, 5) * 2).astype(F32)
    g = Graph()
    i, o = g.input([2, 3, 5]), g.output([2, 3, 5])
    g.node(name, input_id=i, output_id=o)
    ref = UNARY_REFS[name](x.astype(np.float64))
    close(g.run([x])[0], ref, 2e-6, name)


@pytest.mark.parametrize("name,fields,ref", [
    ("LeakyReLU", {"negative_slope": 0.125}, lambda x: np.where(x >= 0, x, 0.125 * x)),
    ("ELU", {"alpha": 0.5}, lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
])
def test_parametrized_unary_node(name, fields, ref):
    x = randn(4, 6) * 2
    g = Graph()
    i, o = g.input([4, 6]), g.output([4, 6])
    g.node(name, input_id=i, output_id=o, **fields)
    close(g.run([x])[0], ref(x.astype(np.float64)), 2e-6, name)


def test_clamp_node_uses_output_min_max():
    x = randn(3, 4) * 3
    g = Graph()
    i, o = g.input([3, 4]), g.output([3, 4])
    g.node("Clamp", lo=-0.5, hi=1.25, input_id=i, output_id=o)
    close(g.run([x])[0], np.clip(x, -0.5, 1.25), 0)


BINARY_REFS = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply, "Div": np.divide,
               "Maximum": np.maximum, "Minimum": np.minimum}


@pytest.mark.parametrize("name", sorted(BINARY_REFS))
def test_binary_node_broadcasts_and_clamps(name):
    a, b = randn(2, 3, 4), randn(1, 3, 1) + (3 if name == "Div" else 0)
    g = Graph()
    ia, ib, o = g.input([2, 3, 4]), g.input([1, 3, 1]), g.output([2, 3, 4])
    g.node(name, lo=-1.0, hi=2.0, input1_id=ia, input2_id=ib, output_id=o)
    close(g.run([a, b])[0], np.clip(BINARY_REFS[name](a.astype(np.float64), b), -1, 2), 1e-6, name)


def test_prelu_node_with_constant_slope():
    x, slope = randn(1, 3, 4, 5), randn(5)
    g = Graph()
    i, s, o = g.input([1, 3, 4, 5]), g.value([5], data=slope), g.output([1, 3, 4, 5])
    g.node("PReLU", input1_id=i, input2_id=s, output_id=o)
    close(g.run([x])[0], np.where(x >= 0, x, x * slope), 0)


def test_shape_nodes():
    x = randn(2, 3, 4)
    g = Graph()
    i = g.input([2, 3, 4])
    t, r, s, p = g.output([4, 2, 3]), g.output([6, 4]), g.output([1, 2, 3]), g.output([3, 3, 7])
    g.node("StaticTranspose", num_dims=3, perm=[2, 0, 1], input_id=i, output_id=t)
    g.node("StaticReshape", num_dims=2, new_shape=[0, 4], input_id=i, output_id=r)  # 0 = inferred
    g.node("StaticSlice", num_dims=3, offsets=[1, 0, 1], sizes=[1, 2, 3], input_id=i, output_id=s)
    g.node("StaticConstantPad", pre_paddings=[1, 0, 2], post_paddings=[0, 0, 1], padding_value=-2.5,
           input_id=i, output_id=p)
    got = g.run([x])
    close(got[0], x.transpose(2, 0, 1), 0)
    close(got[1], x.reshape(6, 4), 0)
    close(got[2], x[1:2, 0:2, 1:4], 0)
    close(got[3], np.pad(x, ((1, 0), (0, 0), (2, 1)), constant_values=-2.5), 0)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_concatenate_nodes(n):
    xs = [randn(2, k + 1, 3) for k in range(n)]
    g = Graph()
    ids = [g.input([2, k + 1, 3]) for k in range(n)]
    o = g.output([2, sum(k + 1 for k in range(n)), 3])
    g.node(f"Concatenate{n}", axis=1, output_id=o, **{f"input{k + 1}_id": v for k, v in enumerate(ids)})
    close(g.run(xs)[0], np.concatenate(xs, axis=1), 0)


def _conv_graph(name, x, w, b, pads, stride, dil, groups, gic, goc, adj=(0, 0), lo=None, hi=None, flags=0):
    g = Graph()
    i = g.input(list(x.shape))
    wv = g.value(list(w.shape), data=w)
    bv = NONE if b is None else g.value([len(b)], data=b)
    o = g.output([1])  # shape comes from the run (the output tensor is dynamic)
    g.node(name, lo=lo, hi=hi, padding_top=pads[0], padding_right=pads[1], padding_bottom=pads[2],
           padding_left=pads[3], kernel_height=w.shape[1], kernel_width=w.shape[2], subsampling_height=stride[0],
           subsampling_width=stride[1], dilation_height=dil[0], dilation_width=dil[1], group_input_channels=gic,
           group_output_channels=goc, groups=groups, adjustment_height=adj[0], adjustment_width=adj[1],
           input1_id=i, filter_id=wv, bias_id=bv, output_id=o, flags=flags)
    return g


def test_conv2d_node():
    x, w, b = randn(1, 6, 7, 4), randn(6, 3, 2, 2), randn(6)
    g = _conv_graph("Conv2d", x, w, b, (1, 0, 2, 1), (2, 1), (1, 2), 2, 2, 3, lo=-0.5, hi=0.5)
    ref = np.clip(ref_conv(x, w, b, (2, 1), (1, 0, 2, 1), (1, 2), 2), -0.5, 0.5)
    close(g.run([x], [ref.shape])[0], ref)


def test_depthwise_conv2d_node():
    x, w = randn(1, 5, 5, 3), randn(1, 3, 3, 6)
    g = _conv_graph("DepthwiseConv2d", x, w, None, (1, 1, 1, 1), (1, 1), (1, 1), 3, 1, 2)
    ref = ref_conv(x, w[0].transpose(2, 0, 1)[:, :, :, None], None, (1, 1), (1, 1, 1, 1), (1, 1), 3)
    close(g.run([x], [ref.shape])[0], ref)


def test_conv_transpose2d_node():
    x, w, b = randn(1, 3, 4, 4), randn(6, 3, 3, 2), randn(6)
    g = _conv_graph("ConvTranspose2d", x, w, b, (1, 1, 0, 0), (2, 2), (1, 1), 2, 2, 3, adj=(1, 0), lo=0.0)
    ref = np.maximum(ref_deconv(x, w, b, (2, 2), (1, 1, 0, 0), (1, 1), 2, (1, 0)), 0)
    close(g.run([x], [ref.shape])[0], ref)


def _pool_fields(kernel, stride, pads, dil):
    return {"padding_top": pads[0], "padding_right": pads[1], "padding_bottom": pads[2], "padding_left": pads[3],
            "pooling_height": kernel[0], "pooling_width": kernel[1], "stride_height": stride[0],
            "stride_width": stride[1], "dilation_height": dil[0], "dilation_width": dil[1]}


def test_pooling_nodes():
    x = randn(2, 7, 6, 3)
    g = Graph()
    i = g.input([2, 7, 6, 3])
    mx, av, ga, gk = g.output([1]), g.output([1]), g.output([2, 3]), g.output([2, 1, 1, 3])
    g.node("MaxPooling2d", hi=0.5, input_id=i, output_id=mx, flags=P.FLAG_KEEP_DIMS,
           **_pool_fields((3, 2), (2, 1), (1, 0, 1, 1), (2, 1)))
    g.node("AvgPooling2d", input_id=i, output_id=av, flags=P.FLAG_KEEP_DIMS,
           **_pool_fields((3, 3), (2, 2), (1, 1, 1, 1), (0, 0)))  # dilation 0 as the exporter writes it
    g.node("GlobalAvgPooling2d", input_id=i, output_id=ga)
    g.node("GlobalAvgPooling2d", input_id=i, output_id=gk, flags=P.FLAG_KEEP_DIMS)
    ref_max = np.minimum(ref_pool(x, (3, 2), (2, 1), (1, 0, 1, 1), (2, 1), "max"), 0.5)
    ref_avg = ref_pool(x, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), "avg")
    got = g.run([x], [ref_max.shape, ref_avg.shape, (2, 3), (2, 1, 1, 3)])
    close(got[0], ref_max, 0)
    close(got[1], ref_avg)
    close(got[2], x.mean((1, 2)))
    close(got[3], x.mean((1, 2), keepdims=True))


def test_argmax_pooling_node_widens_indices_to_int64():
    x = randn(1, 4, 6, 3)
    g = Graph()
    i = g.input([1, 4, 6, 3])
    v, ix = g.output([1, 2, 2, 3]), g.output([1, 2, 2, 3], P.INT32)
    g.node("ArgMaxPooling2d", padding_top=0, padding_right=0, padding_bottom=0, padding_left=0,
           pooling_height=2, pooling_width=3, input_id=i, output_value_id=v, output_index_id=ix)
    ref_v, ref_i = ref_pool(x, (2, 3), (2, 3), (0, 0, 0, 0), (1, 1), "argmax")
    got = g.run([x], out_dtypes=[F32, np.int64])
    close(got[0], ref_v, 0)
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], ref_i)


@pytest.mark.parametrize("flags", [0, P.FLAG_ALIGN_CORNERS, P.FLAG_TENSORFLOW_LEGACY])
def test_resize_bilinear_node(flags):
    x = randn(1, 4, 5, 2)
    g = Graph()
    i, o = g.input([1, 4, 5, 2]), g.output([1, 7, 9, 2])
    g.node("StaticResizeBilinear2D", new_height=7, new_width=9, input_id=i, output_id=o, flags=flags)
    close(g.run([x])[0], ref_resize(x, 7, 9, flags == P.FLAG_ALIGN_CORNERS, flags == P.FLAG_TENSORFLOW_LEGACY))


@pytest.mark.parametrize("transpose", [False, True])
def test_fully_connected_node(transpose):
    x, w, b = randn(2, 3, 5), randn(4, 5), randn(4)
    g = Graph()
    i = g.input([2, 3, 5])
    wv = g.value([5, 4] if transpose else [4, 5], data=w.T.copy() if transpose else w)
    bv = g.value([4], data=b)
    o = g.output([2, 3, 4])
    g.node("FullyConnected", lo=0.0, input1_id=i, filter_id=wv, bias_id=bv, output_id=o,
           flags=P.FLAG_TRANSPOSE_WEIGHTS if transpose else 0)
    close(g.run([x])[0], np.maximum(x @ w.T + b, 0))


def test_fully_connected_node_with_runtime_weights():
    x, w = randn(3, 5), randn(4, 5)
    g = Graph()
    i, wv, o = g.input([3, 5]), g.input([4, 5]), g.output([3, 4])
    g.node("FullyConnected", input1_id=i, filter_id=wv, output_id=o)
    close(g.run([x, w])[0], x @ w.T)


def test_batch_matrix_multiply_node():
    a, b, c = randn(2, 3, 4), randn(2, 5, 4), randn(4, 6)
    g = Graph()
    ia, ib = g.input([2, 3, 4]), g.input([2, 5, 4])
    cv = g.value([4, 6], data=c)
    o1, o2 = g.output([2, 3, 5]), g.output([2, 3, 6])
    g.node("BatchMatrixMultiply", input1_id=ia, input2_id=ib, output_id=o1, flags=P.FLAG_TRANSPOSE_WEIGHTS)
    g.node("BatchMatrixMultiply", input1_id=ia, input2_id=cv, output_id=o2)
    got = g.run([a, b])
    close(got[0], a @ b.transpose(0, 2, 1))
    close(got[1], a @ c)


def test_scaled_dot_product_attention_fails_at_init():
    g = Graph()
    q, k, v = g.input([1, 2, 4]), g.input([1, 2, 4]), g.input([1, 2, 4])
    o = g.output([1, 2, 4])
    kind = {n: k for k, (n, _) in P.NODE_TYPES.items()}["ScaledDotProductAttention"]
    g.nodes.append(T({4: ("B", kind), 6: ("o", T({4: ("I", q), 6: ("I", k), 8: ("I", v), 14: ("I", o)}))}))
    blob, named = g.blob()
    with pytest.raises(DelegateError, match="ScaledDotProductAttention"):
        load(blob, named)


# ==============================================================================================================
# Quantized and mixed-precision graphs
# ==============================================================================================================
def test_convert_nodes_quantize_dequantize_and_fp16():
    x = np.array([[0.25, 0.35, -0.25, -0.15, 100.0, -100.0, 1.0, 2.0]], F32)
    g = Graph()
    i = g.input([1, 8])
    q8, u8 = g.internal([1, 8], QINT8, per_tensor(0.1, 0)), g.internal([1, 8], QUINT8, per_tensor(0.1, 128))
    back, h, hb = g.output([1, 8]), g.internal([1, 8], FP16), g.output([1, 8])
    qout = g.output([1, 8], QUINT8, per_tensor(0.1, 128))
    g.node("Convert", input_id=i, output_id=q8)
    g.node("Convert", input_id=q8, output_id=back)
    g.node("Convert", input_id=i, output_id=u8)
    g.node("Copy", input_id=u8, output_id=qout)
    g.node("Convert", input_id=i, output_id=h)
    g.node("Convert", input_id=h, output_id=hb)
    got = g.run([x])
    np.testing.assert_array_equal(got[0], (np.array([2, 4, -2, -2, 127, -128, 10, 20]) * F32(0.1)).astype(F32)[None])
    np.testing.assert_array_equal(got[1], x.astype(np.float16).astype(F32))
    np.testing.assert_array_equal(got[2], [[130, 132, 126, 126, 255, 0, 138, 148]])


def test_static_int8_conv_matches_integer_arithmetic():
    sx, zx, so, zo = 0.05, 3, 0.2, -5
    xq = RNG.integers(-128, 128, (1, 5, 6, 4)).astype(np.int8)
    wq = RNG.integers(-127, 128, (6, 3, 3, 2)).astype(np.int8)
    ws = (RNG.uniform(0.5, 2, 6) * 0.01).astype(F32)
    bq = RNG.integers(-500, 500, 6).astype(np.int32)
    g = Graph()
    i = g.input([1, 5, 6, 4], QINT8, per_tensor(sx, zx))
    wv = g.value([6, 3, 3, 2], P.QCINT8, data=wq, quant=per_channel(ws, 0))
    bv = g.value([6], P.QCINT32, data=bq, quant=per_channel(ws * F32(sx), 0))
    o = g.output([1, 5, 6, 6], QINT8, per_tensor(so, zo))
    g.node("Conv2d", lo=0.0, padding_top=1, padding_right=1, padding_bottom=1, padding_left=1, kernel_height=3,
           kernel_width=3, subsampling_height=1, subsampling_width=1, dilation_height=1, dilation_width=1,
           group_input_channels=2, group_output_channels=3, groups=2, input1_id=i, filter_id=wv, bias_id=bv,
           output_id=o)
    got = g.run([xq])[0]
    # padding is the input zero point, i.e. 0 after subtracting it
    acc = ref_conv(xq.astype(np.int64) - zx, wq.astype(np.int64), bq, (1, 1), (1, 1, 1, 1), (1, 1), 2)
    mult = F32(sx) * ws / F32(so)
    want = np.clip(np.rint((acc.astype(F32) * mult).astype(F32)) + zo, zo, 127)  # fused ReLU: min is zo
    np.testing.assert_array_equal(got, want.astype(np.int8))


def test_quantized_elementwise_nodes():
    a = RNG.integers(0, 256, (2, 8)).astype(np.uint8)
    b = RNG.integers(0, 256, (1, 8)).astype(np.uint8)
    qa, qb, qo = per_tensor(0.02, 120), per_tensor(0.03, 130), per_tensor(0.05, 128)
    g = Graph()
    ia, ib = g.input([2, 8], QUINT8, qa), g.input([1, 8], QUINT8, qb)
    add, mul, sig = g.output([2, 8], QUINT8, qo), g.output([2, 8], QUINT8, qo), g.output([2, 8], QUINT8, qo)
    g.node("Add", input1_id=ia, input2_id=ib, output_id=add)
    g.node("Multiply", input1_id=ia, input2_id=ib, output_id=mul)
    g.node("Sigmoid", input_id=ia, output_id=sig)
    got = g.run([a, b])
    ra, rb = (a.astype(F32) - 120) * F32(0.02), (b.astype(F32) - 130) * F32(0.03)
    for k, real in enumerate([ra + rb, ra * rb, 1 / (1 + np.exp(-ra))]):
        want = np.clip(np.rint(real / F32(0.05)) + 128, 0, 255)
        assert np.abs(got[k].astype(int) - want).max() <= 1, ["add", "mul", "sigmoid"][k]


@pytest.mark.parametrize("node,scales,message", [
    ("Add", (2e6, 1e-3, 1e-22), r"input1-to-output scale ratio 2e\+28 is outside XNNPACK's \[2\*\*-10, 2\*\*8\) "
                                r"range for int8 add"),
    ("Subtract", (0.5, 1.0, 2**-8), r"input2-to-output scale ratio 256 is outside XNNPACK's \[2\*\*-10, 2\*\*8\)"),
    ("Add", (1.0, 2**-11, 1.0), r"input2-to-output scale ratio 0.0004882812 is outside"),
    ("Multiply", (1.0, 1.0, 2**-8), r"product-to-output scale ratio 256 is outside XNNPACK's \[2\*\*-16, 2\*\*8\)"),
    ("Multiply", (2**-9, 2**-8, 1.0), r"product-to-output scale ratio 7.629395e-06 is outside"),
])
def test_int8_binary_scales_xnnpack_refuses_fail_at_load_on_every_engine(node, scales, message):
    # LiteRT's own kernels abort the process on such ratios (a fuzzer finding): both engines must refuse them
    g = Graph()
    a, b = g.input([1, 4], QINT8, per_tensor(scales[0], 0)), g.input([1, 4], QINT8, per_tensor(scales[1], 0))
    g.node(node, input1_id=a, input2_id=b, output_id=g.output([1, 4], QINT8, per_tensor(scales[2], 0)))
    with pytest.raises(DelegateError, match=rf"XNNPACK payload: node 0 \(XNN{node}\): {message}"):
        g.run([np.zeros((1, 4), np.int8)] * 2)


def test_quantized_data_movement_keeps_codes():
    x = RNG.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8)
    y = RNG.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8)
    qp = per_tensor(0.1, -3)
    g = Graph()
    ix, iy = g.input([1, 4, 4, 2], QINT8, qp), g.input([1, 4, 4, 2], QINT8, per_tensor(0.2, 0))
    mx, pad, cat = g.output([1, 2, 2, 2], QINT8, qp), g.output([1, 5, 4, 2], QINT8, qp), g.output([1, 4, 4, 4], QINT8, qp)
    g.node("MaxPooling2d", lo=-0.5, hi=0.5, input_id=ix, output_id=mx, **_pool_fields((2, 2), (2, 2), (0,) * 4, (1, 1)))
    g.node("StaticConstantPad", pre_paddings=[0, 1, 0, 0], post_paddings=[0, 0, 0, 0], padding_value=1.0,
           input_id=ix, output_id=pad)
    g.node("Concatenate2", axis=3, input1_id=ix, input2_id=iy, output_id=cat)
    got = g.run([x, y])
    np.testing.assert_array_equal(got[0], np.clip(ref_pool(x, (2, 2), (2, 2), (0,) * 4, (1, 1), "max"), -8, 2))
    np.testing.assert_array_equal(got[1][:, 0], np.full((1, 4, 2), 7))  # 1.0 / 0.1 + (-3)
    np.testing.assert_array_equal(got[1][:, 1:], x)
    np.testing.assert_array_equal(got[2][..., :2], x)  # same parameters: codes unchanged
    want = np.clip(np.rint(y.astype(F32) * F32(0.2) / F32(0.1)) - 3, -128, 127)  # requantized to the output
    np.testing.assert_array_equal(got[2][..., 2:], want)


@pytest.mark.parametrize("src,dst,message", [
    ((FP32, None), (QINT8, per_tensor(0.1, 3)),
     r"value 0 \(fp32 \[1, 4\]\) and output value 1 \(qint8 \[1, 4\]\) differ in datatype"),
    ((QINT8, per_tensor(0.1, 3)), (QINT8, per_tensor(0.1, 2)),
     r"value 0 \(qint8 \[1, 4\]\) \(scale 0.1, zero point 3\) and output value 1 \(qint8 \[1, 4\]\) "
     r"\(scale 0.1, zero point 2\) are quantized differently; XNNPACK pads within one quantization"),
])
def test_a_pad_that_changes_datatype_or_quantization_is_refused_like_xnnpack(src, dst, message):
    # ExecuTorch's partitioner wrote an fp32 -> qint8 pad for a PT2E int8 Swin (model zoo); XNNPACK refuses to
    # define it and ExecuTorch cannot load the method, while running it wrote int8 codes into a float tensor
    g = Graph()
    i = g.input([1, 4], *src)
    g.node("StaticConstantPad", pre_paddings=[0, 0], post_paddings=[0, 0], padding_value=0.0, input_id=i,
           output_id=g.output([1, 4], *dst))
    with pytest.raises(DelegateError, match=rf"XNNPACK payload: node 0 \(XNNStaticConstantPad\): input {message}"):
        g.run([np.zeros((1, 4), np.float32 if src[0] == FP32 else np.int8)])


@pytest.mark.parametrize("ic", [7, 64])
def test_dynamic_int8_with_qcint4_weights(ic):
    oc = 5
    wq = RNG.integers(-8, 8, (oc, ic))
    scales = RNG.uniform(0.01, 0.05, oc).astype(F32)
    padded = np.pad(wq + 8, ((0, 0), (0, ic % 2))).astype(np.uint8)
    packed = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
    x = randn(3, ic)
    g = Graph()
    i = g.input([3, ic])
    qd = g.internal([3, ic], P.QDINT8, per_token(1))
    wv = g.value([oc, ic], P.QCINT4, data=packed, quant=per_channel(scales, 0))
    o = g.output([3, oc])
    g.node("Convert", input_id=i, output_id=qd)
    g.node("FullyConnected", input1_id=qd, filter_id=wv, output_id=o)
    want = Q.qd8_fake_quantize(x).astype(np.float64) @ (wq * scales[:, None]).T
    close(g.run([x])[0], want, 1e-6)
    close(g.run([x])[0], x @ (wq * scales[:, None]).T, 2e-2)  # and close to the unquantized product


def test_dynamic_int8_with_qbint4_groupwise_weights():
    oc, ic, gs = 4, 64, 32
    wq = RNG.integers(-8, 8, (oc, ic))
    scales = RNG.uniform(0.01, 0.05, (oc, ic // gs)).astype(F32)
    x = randn(2, ic)
    g = qb4_fc_graph(wq, scales, gs)
    bf16 = P.round_to_bf16(scales)  # inline fp32 scales are rounded to bf16 first
    w_real = wq * np.repeat(bf16, gs, axis=1)
    close(g.run([x])[0], Q.qd8_fake_quantize(x).astype(np.float64) @ w_real.T, 1e-6)


@pytest.mark.parametrize("mode", ["named", "region", "legacy"])
def test_constant_sources(mode):
    x = randn(2, 3)
    want = x @ np.arange(12, dtype=F32).reshape(4, 3).T + [1, 2, 3, 4]
    close(fc_graph().run([x], mode=mode)[0], want)


def test_dynamic_batch_resizes_the_output():
    x = randn(5, 3)  # the graph was serialized for batch 2
    got = fc_graph().run([x], out_shapes=[(2, 4)])[0]
    assert got.shape == (5, 4)
    close(got, x @ np.arange(12, dtype=F32).reshape(4, 3).T + [1, 2, 3, 4])


def test_channels_last_input_is_read_in_memory_order():
    g = Graph()
    i, o = g.input([1, 3, 4, 2]), g.output([1, 3, 4, 2])  # NHWC dims, as XNNPACK sees memory
    g.node("Copy", input_id=i, output_id=o)
    blob, named = g.blob()
    x = randn(1, 2, 3, 4)  # logical NCHW, stored channels last
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    t_in = Tensor(np.dtype(F32), x.shape, (0, 2, 3, 1), np.frombuffer(nhwc.tobytes(), np.uint8).copy())
    t_out = out_tensor((1, 3, 4, 2), F32)
    load(blob, named).execute([t_in, t_out])
    np.testing.assert_array_equal(t_out.array, nhwc)


def test_backend_registration_and_init():
    backend = BACKENDS["XnnpackBackend"]
    assert backend.name == "XnnpackBackend" and backend.is_available()
    blob, named = fc_graph().blob()
    ctx = DelegateContext("p.pte", "forward", 0, named)
    executor = backend.init(blob, (), ctx)
    x = randn(2, 3)
    out = out_tensor((2, 4), F32)
    executor.execute([tensor(x), out])
    executor.execute([tensor(x), out])  # runs again with the same plan
    close(out.array, x @ np.arange(12, dtype=F32).reshape(4, 3).T + [1, 2, 3, 4])
