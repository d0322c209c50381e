"""Kernel nodes in a method that quantizes activations dynamically: only bit-for-bit lowerings join its merged
graphs (:func:`pterun.delegates.xnnpack.kernel_ops.bit_for_bit`), a layer norm on rows under 256 elements among
them with ExecuTorch's scalar loop (``litert_engine/exact.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls
from kernel_nodes import F32, Out, absorbed, call_args, graph_of, needs_litert, run_graph

from pterun import Runtime
from pterun.delegates import KernelArg
from pterun.delegates.xnnpack import XnnpackBackend
from pterun.delegates.xnnpack.kernel_ops import BITWISE, bit_for_bit
from pterun.delegates.xnnpack.merge import CannotMerge
from pterun.kernels import KERNELS

rng = np.random.default_rng(11)


def _x(*shape):
    return rng.standard_normal(shape).astype(F32)


@needs_litert
@pytest.mark.parametrize("shape, normalized, affine", [
    ((16, 64), (64,), (True, True)), ((2, 3, 255), (255,), (True, False)), ((3, 4, 8), (4, 8), (False, False)),
    ((5, 1), (1,), (False, True)), ((1, 200), (200,), (True, True)),
], ids=["bert-rows", "255-wide-weight-only", "two-dims", "one-element", "one-row"])
def test_a_layer_norm_that_must_be_bit_for_bit_gives_executorchs_scalar_loop_on_litert(shape, normalized, affine):
    import pterun.delegates.xnnpack as X

    # sums left to right, var = E[x^2] - mean^2, a correctly rounded sqrt: on rows with large offsets the plain
    # lowering (MEAN of centred squares, XNNPACK's square root) misses by ulps in most rows
    n = int(np.prod(normalized))
    weight, bias = (_x(*normalized) if on else None for on in affine)
    stats = shape[:len(shape) - len(normalized)] + (1,) * len(normalized)
    mismatched = 0
    for trial in range(12):
        scale = 10.0 ** (trial / 2 - 2)
        x = ((_x(*shape) + rng.uniform(-4, 4)) * scale).astype(F32)
        args = [x, normalized, weight, bias, 1e-5, Out(shape), Out(stats), Out(stats)]
        op, values = absorbed("aten::native_layer_norm.out", args)
        assert bit_for_bit("aten::native_layer_norm.out", op.attrs["args"]) == (n < 256)
        graph, slots = graph_of(op, values)
        X._check_rounding(graph, exact=True)
        plan, got = run_graph(graph, slots, values, "litert")
        assert plan.engine == "litert"
        want = KERNELS["aten::native_layer_norm.out"].fn(*call_args(args))[0]
        np.testing.assert_array_equal(got, want)
        plain, _ = graph_of(op, values)  # unmarked: the plain lowering
        mismatched += not np.array_equal(run_graph(plain, slots, values, "litert")[1], want)
    if n >= 8:
        assert mismatched  # the test can tell the two lowerings apart


def _ln_args(n: int, rows: int = 2):
    x = KernelArg(False, 0, (rows, n), np.dtype(F32))
    return (x, (n,), None, None, 1e-5, x._replace(out=True), x._replace(out=True, index=1, shape=(rows, 1)),
            x._replace(out=True, index=2, shape=(rows, 1)))


def test_a_dynamically_quantized_graph_holds_only_the_kernels_that_are_bit_for_bit():
    import pterun.delegates.xnnpack as X
    from pterun.delegates.xnnpack import graph as G

    def graph(op: str, args: tuple, quantized: bool) -> G.Graph:
        x = G.Value(0, G.QDINT8 if quantized else G.FP32, (2, 8), None, 0, None, None)
        y = G.Value(1, G.FP32, (2, 8), None, 0, None, None)
        node = G.Node(0, G.KERNEL, "Kernel", {"input1_id": 0, "output_id": 1, "op": op, "args": args}, -np.inf,
                      np.inf, None)
        return G.Graph({0: x, 1: y}, [node], 0)

    ln = "aten::native_layer_norm.out"
    plain = graph(ln, _ln_args(256), quantized=False)
    X._check_rounding(plain, exact=False)
    assert "bitwise" not in plain.nodes[0].fields  # the plain lowering, within the float tolerance
    for exact, quantized in ((False, True), (True, False), (True, True)):
        g = graph(ln, _ln_args(255), quantized)  # ExecuTorch's scalar loop: a bit-for-bit lowering exists
        X._check_rounding(g, exact)
        assert g.nodes[0].fields["bitwise"] is True
        g = graph("aten::mul.Scalar_out", (None, 0.5, None), quantized)
        X._check_rounding(g, exact)
        assert g.nodes[0].fields["bitwise"] is True
        with pytest.raises(CannotMerge, match="aten::native_layer_norm.out is not bit for bit the portable "
                                              "kernel's, and the graph quantizes activations dynamically"):
            X._check_rounding(graph(ln, _ln_args(256), quantized), exact)  # vectorised moments from 256 on


def test_a_method_that_quantizes_dynamically_holds_only_bit_for_bit_kernels_in_any_run():
    # one ulp anywhere upstream of an 8da4w delegate can move a rounding tie of its quantization: swin_t 8da4w's
    # output moved 1.3e-2 of scale when a layer norm ran in a run of its own, outside any quantized graph
    wide = _x(2, 256)
    ln, _ = absorbed("aten::native_layer_norm.out", [wide, (256,), None, None, 1e-5, Out((2, 256)), Out((2, 1)),
                                                      Out((2, 1))])
    narrow, _ = absorbed("aten::native_layer_norm.out", [wide[:, :255].copy(), (255,), None, None, 1e-5,
                                                          Out((2, 255)), Out((2, 1)), Out((2, 1))])
    softmax, _ = absorbed("aten::_softmax.out", [_x(2, 4, 8), -1, False, Out((2, 4, 8))])
    mul, _ = absorbed("aten::mul.Scalar_out", [_x(2, 4, 8), 0.5, Out((2, 4, 8))])
    backend = XnnpackBackend()
    assert all(backend.absorbs(op) for op in (ln, narrow, softmax, mul))
    assert not backend.absorbs(ln, exact=True) and not backend.absorbs(softmax, exact=True)
    assert backend.absorbs(narrow, exact=True) and backend.absorbs(mul, exact=True)
    assert backend.quantizes((FIXTURES / "xnn_8da4w.pte").read_bytes()) is False  # a whole file is no payload
    from pterun.format.program import read_program

    pf = read_program((FIXTURES / "xnn_8da4w.pte").read_bytes())
    plan = pf.plan(0)
    assert backend.quantizes(pf.delegate_blob(plan.delegates[0]))
    pf = read_program((FIXTURES / "xnn_transformer.pte").read_bytes())
    assert not any(backend.quantizes(pf.delegate_blob(d)) for d in pf.plan(0).delegates)


@needs_litert
def test_the_transformer_as_if_it_quantized_dynamically_merges_only_bit_for_bit_kernels(monkeypatch):
    monkeypatch.setattr(XnnpackBackend, "quantizes", lambda self, blob: True)
    method = Runtime().load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    kernels = [p for m in method._runner.merged.values() for p in m.run.parts if getattr(p, "op", None) == "kernel"]
    held = {p.attrs["name"] for p in kernels}
    assert all(bit_for_bit(p.attrs["name"], p.attrs["args"]) for p in kernels)
    assert "aten::native_layer_norm.out" in held and held - {"aten::native_layer_norm.out"} <= BITWISE
    for call in load_calls("xnn_transformer"):
        (got,) = method.execute(call["inputs"])
        np.testing.assert_allclose(got, call["outputs"][0], rtol=1e-5, atol=1e-5)
