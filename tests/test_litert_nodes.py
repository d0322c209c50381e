"""The LiteRT engine's translation of XNNPACK nodes TFLite has no direct match for: padding TFLite's SAME cannot
express, transposed convolutions, convolutions without a bias, transposed fully-connected weights and int8
clamps, each checked against the NumPy engine or a float reference on LiteRT itself."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls

from pterun import Runtime
from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from xnn_payloads import F32, Graph, out_tensor, tensor
from xnn_refs import randn

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")


def _padded_max_pool_graph(relu: bool) -> Graph:
    g = Graph()
    a, b = g.input([1, 6, 6, 3]), g.input([1, 6, 6, 3])
    s, o = g.internal([1, 6, 6, 3]), g.output([1, 3, 3, 3])
    g.node("Add", lo=0.0 if relu else None, input1_id=a, input2_id=b, output_id=s)
    g.node("MaxPooling2d", padding_top=1, padding_right=1, padding_bottom=1, padding_left=1, pooling_height=3,
           pooling_width=3, stride_height=2, stride_width=2, dilation_height=1, dilation_width=1, input_id=s,
           output_id=o)
    return g


@needs_litert
def test_max_pool_padding_after_a_relu_is_zero_padding_on_litert():
    # ResNet's stem: symmetric padding 1 that TFLite's SAME cannot express; after a ReLU zeros never win the max
    x, y = randn(1, 6, 6, 3), randn(1, 6, 6, 3)
    outs = {}
    for engine in ("numpy", "litert"):
        blob, named = _padded_max_pool_graph(relu=True).blob()
        ex = load(blob, named, engine)
        assert ex.engine == engine
        outs[engine] = out_tensor((1, 3, 3, 3), F32)
        ex.execute([tensor(x), tensor(y), outs[engine]])
    np.testing.assert_array_equal(outs["litert"].array, outs["numpy"].array)
    s = np.pad(np.maximum(x + y, 0), ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.stack([np.stack([s[:, 2 * r : 2 * r + 3, 2 * c : 2 * c + 3].max(axis=(1, 2)) for c in range(3)], 1)
                     for r in range(3)], 1)
    np.testing.assert_array_equal(outs["litert"].array, want)
    blob, named = _padded_max_pool_graph(relu=False).blob()  # values may be negative: no exact TFLite form
    ex = load(blob, named, "auto")
    assert (ex.engine, ex.engine_reason) == ("numpy", "node 1 (XNNMaxPooling2d): pool padding [1, 1, 1, 1] is "
                                                      "neither VALID nor SAME")


@needs_litert
@pytest.mark.parametrize("pads,adj", [((0, 0, 0, 0), (0, 0)), ((1, 1, 0, 0), (1, 0)), ((1, 1, 1, 1), (1, 1)),
                                      ((1, 0, 0, 1), (1, 1))])
def test_transposed_convolution_is_cropped_from_the_full_valid_output(pads, adj):
    from test_xnnpack import _conv_graph
    from xnn_refs import ref_deconv

    x, w, b = randn(1, 3, 4, 2), randn(6, 3, 3, 2), randn(6)
    ref = np.maximum(ref_deconv(x, w, b, (2, 2), pads, (1, 1), 1, adj), 0)
    outs = {}
    for engine in ("numpy", "litert"):
        ex = load(*_conv_graph("ConvTranspose2d", x, w, b, pads, (2, 2), (1, 1), 1, 2, 6, adj=adj, lo=0.0).blob(),
                  engine)
        assert (ex.engine, ex.engine_reason) == (engine, None)
        outs[engine] = out_tensor(ref.shape, F32, capacity=ref.shape)
        ex.execute([tensor(x), outs[engine]])
        np.testing.assert_allclose(outs[engine].array, ref, rtol=1e-5, atol=1e-5)


@needs_litert
@pytest.mark.parametrize("name", ["Conv2d", "DepthwiseConv2d"])
def test_a_convolution_without_a_bias_runs_on_litert_as_with_a_bias_of_zeros(name):
    # LiteRT's convolutions refuse to prepare without a bias input ("Tensor at index 2 was optional but was
    # expected"), which sent every graph holding one (densenet121's, conv -> no bias) to the NumPy engine
    from xnn_refs import ref_conv

    x = randn(1, 6, 7, 4)
    w = randn(8, 3, 3, 4) if name == "Conv2d" else randn(1, 3, 3, 8)
    groups, gic, goc = (1, 4, 8) if name == "Conv2d" else (4, 1, 2)
    outs = {}
    for bias in (None, np.zeros(8, F32)):
        g = Graph()
        i, o = g.input([1, 6, 7, 4]), g.output([1, 6, 7, 8])
        g.node(name, lo=0.0, padding_top=1, padding_right=1, padding_bottom=1, padding_left=1, kernel_height=3,
               kernel_width=3, subsampling_height=1, subsampling_width=1, dilation_height=1, dilation_width=1,
               group_input_channels=gic, group_output_channels=goc, groups=groups, input1_id=i,
               filter_id=g.value(list(w.shape), data=w),
               bias_id=P.INVALID_ID if bias is None else g.value([8], data=bias), output_id=o)
        ex = load(*g.blob(), "litert")
        assert (ex.engine, ex.engine_reason) == ("litert", None)
        outs[bias is None] = out_tensor((1, 6, 7, 8), F32)
        ex.execute([tensor(x), outs[bias is None]])
    np.testing.assert_array_equal(outs[True].array, outs[False].array)  # what XNNPACK starts its sums from
    wr = w if name == "Conv2d" else w[0].transpose(2, 0, 1)[:, :, :, None]
    ref = np.maximum(ref_conv(x, wr, None, (1, 1), (1, 1, 1, 1), (1, 1), groups), 0)
    np.testing.assert_allclose(outs[True].array, ref, rtol=1e-5, atol=1e-5)


@needs_litert
def test_a_static_int8_convolution_without_a_bias_runs_on_litert():
    from test_xnnpack import per_channel, per_tensor
    from xnn_refs import ref_conv

    sx, zx, so, zo = 0.05, 3, 0.2, -5
    rng = np.random.default_rng(11)
    xq = rng.integers(-128, 128, (1, 5, 6, 4)).astype(np.int8)
    wq = rng.integers(-127, 128, (6, 3, 3, 4)).astype(np.int8)
    ws = (rng.uniform(0.5, 2, 6) * 0.01).astype(F32)
    g = Graph()
    i = g.input([1, 5, 6, 4], P.QINT8, per_tensor(sx, zx))
    wv = g.value([6, 3, 3, 4], P.QCINT8, data=wq, quant=per_channel(ws, 0))
    o = g.output([1, 5, 6, 6], P.QINT8, per_tensor(so, zo))
    g.node("Conv2d", padding_top=1, padding_right=1, padding_bottom=1, padding_left=1, kernel_height=3,
           kernel_width=3, subsampling_height=1, subsampling_width=1, dilation_height=1, dilation_width=1,
           group_input_channels=4, group_output_channels=6, groups=1, input1_id=i, filter_id=wv,
           bias_id=P.INVALID_ID, output_id=o)
    ex = load(*g.blob(), "litert")
    assert (ex.engine, ex.engine_reason) == ("litert", None)
    out = out_tensor((1, 5, 6, 6), np.int8)
    ex.execute([tensor(xq), out])
    acc = ref_conv(xq.astype(np.int64) - zx, wq.astype(np.int64), None, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    want = np.clip(np.rint((acc.astype(F32) * (F32(sx) * ws / F32(so))).astype(F32)) + zo, -128, 127)
    np.testing.assert_array_equal(out.array, want.astype(np.int8))


@needs_litert
def test_transposed_fully_connected_weights_run_on_litert_as_the_untransposed_ones():
    # GPT-2's Conv1D layers store their weights [in, out]; they are transposed as they are copied into the model
    x, w, b = randn(2, 3, 5), randn(4, 5), randn(4)
    outs = {}
    for transpose in (False, True):
        g = Graph()
        i, o = g.input([2, 3, 5]), g.output([2, 3, 4])
        wv = g.value([5, 4] if transpose else [4, 5], data=w.T.copy() if transpose else w)
        g.node("FullyConnected", lo=0.0, input1_id=i, filter_id=wv, bias_id=g.value([4], data=b), output_id=o,
               flags=P.FLAG_TRANSPOSE_WEIGHTS if transpose else 0)
        ex = load(*g.blob(), "litert")
        assert (ex.engine, ex.engine_reason) == ("litert", None)
        outs[transpose] = out_tensor((2, 3, 4), F32)
        ex.execute([tensor(x), outs[transpose]])
    np.testing.assert_array_equal(outs[True].array, outs[False].array)
    np.testing.assert_allclose(outs[True].array, np.maximum(x @ w.T + b, 0), rtol=1e-5, atol=1e-5)


@needs_litert
def test_transposed_quantized_fully_connected_weights_stay_on_numpy_with_the_reason():
    g = Graph()
    i, o = g.input([2, 8]), g.output([2, 4])
    wq = np.arange(32, dtype=np.int8).reshape(8, 4)
    from test_xnnpack import per_channel
    wv = g.value([8, 4], P.QCINT8, data=wq, quant=per_channel(np.full(4, 0.1, F32), 1))
    g.node("FullyConnected", input1_id=i, filter_id=wv, output_id=o, flags=P.FLAG_TRANSPOSE_WEIGHTS)
    ex = load(*g.blob(), "auto")
    assert ex.engine == "numpy"
    assert ex.engine_reason == "node 0 (XNNFullyConnected): transposed fully-connected weights value 2 (qcint8 [8, 4])"


@needs_litert
def test_the_zoo_patterns_litert_once_refused_run_on_litert():
    # tests/fixtures/zoo/litert_graphs (tools/zoo/export_fixtures.py): a DenseNet transition with a bias-free
    # convolution and GPT-2's Conv1D (transposed fully-connected weights), exported by ExecuTorch
    program = Runtime().load_program(FIXTURES / "zoo" / "litert_graphs.pte", engine="litert")
    method = program.load_method("forward")
    assert [(d.engine, d.reason) for d in method.delegates] == [("litert", None)]
    numpy = Runtime(engine="numpy").load_program(FIXTURES / "zoo" / "litert_graphs.pte").load_method("forward")
    for call in load_calls("zoo/litert_graphs"):
        for engine in (method, numpy):
            for got, want in zip(engine.execute(call["inputs"]), call["outputs"]):
                assert got.shape == want.shape and got.dtype == want.dtype
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * float(np.abs(want).max()))


@needs_litert
@pytest.mark.parametrize("bounds,on_litert", [((0.0, 20.0), True), ((-5.0, 3.0), True), ((0.0, 1.0), False),
                                              ((0.5, 20.0), False)])
def test_an_int8_clamp_that_changes_no_code_runs_on_litert(bounds, on_litert):
    # ta_deepspeech's hardtanh(0, 20) after int8 values that reach only (127 + 128) * 0.0094 = 2.4
    from test_xnnpack import per_tensor

    q = per_tensor(0.0094, -128)
    g = Graph()
    i, o = g.input([2, 8], P.QINT8, q), g.output([2, 8], P.QINT8, q)
    g.node("Clamp", lo=bounds[0], hi=bounds[1], input_id=i, output_id=o)
    ex = load(*g.blob(), "auto")
    if not on_litert:
        assert (ex.engine, ex.engine_reason) == ("numpy", f"node 0 (XNNClamp): clamp [{bounds[0]}, {bounds[1]}] on "
                                                          "a non-fp32 value")
        return
    assert (ex.engine, ex.engine_reason) == ("litert", None)
    x = np.arange(-128, 128, 16, dtype=np.int8).reshape(2, 8)
    out = out_tensor((2, 8), np.int8)
    ex.execute([tensor(x), out])
    np.testing.assert_array_equal(out.array, x)


@needs_litert
def test_an_int8_output_clamp_that_changes_no_code_is_left_out():
    from test_xnnpack import per_tensor

    q = per_tensor(0.0094, -128)
    g = Graph()
    a, b, o = g.input([2, 8], P.QINT8, q), g.input([2, 8], P.QINT8, q), g.output([2, 8], P.QINT8, q)
    g.node("Add", lo=0.0, hi=20.0, input1_id=a, input2_id=b, output_id=o)
    lit, num = load(*g.blob(), "litert"), load(*g.blob(), "numpy")
    assert (lit.engine, lit.engine_reason) == ("litert", None)
    x = np.arange(-128, 128, 8, dtype=np.int8).reshape(2, 16)[:, :8].copy()
    y = np.flip(x, axis=1).copy()
    outs = []
    for ex in (lit, num):
        outs.append(out_tensor((2, 8), np.int8))
        ex.execute([tensor(x), tensor(y), outs[-1]])
    np.testing.assert_array_equal(outs[0].array, outs[1].array)

