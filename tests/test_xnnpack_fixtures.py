"""The XNNPACK delegate on recorded fixtures, on both engines: each delegate alone against the reference runtime
(or, for programs that also run portable kernels, against each delegate call's recorded inputs and outputs),
and end to end through the Runtime, where the LiteRT engine must be at least as close to ExecuTorch's outputs
as the NumPy engine, and bit for bit where XNNPACK on both sides computes the same operations. Unit tests of
nodes, kernels and payload validation are in test_xnnpack.py; the LiteRT engine's own tests in test_litert.py.
"""

from __future__ import annotations

import importlib.util
import json
import platform

import numpy as np
import pytest
from fixtures_util import FIXTURES, check_bound, load_calls

from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from pterun.format.program import read_program
from pterun.format.schema import DELEGATE_CALL, TENSOR
from test_xnnpack import BINARY_REFS, UNARY_REFS  # references of the unit tests
from xnn_payloads import out_tensor, tensor

XNN_FIXTURES = ["mlp", "mlp_dynamic", "cnn", "ops", "transformer", "gru", "mobilenet_v2", "qint8_cnn", "qint8_ops",
                "qdint8_mlp", "qdint8_conv", "8da4w", "8da4w_channel", "fp16", "mixed", "dynamic_reshape"]
QUANTIZED_FIXTURES = {"qint8_cnn", "qint8_ops", "qdint8_mlp", "qdint8_conv", "8da4w", "8da4w_channel"}

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
ENGINES = ["numpy", pytest.param("litert", marks=pytest.mark.skipif(not HAVE_LITERT,
                                                                    reason="ai-edge-litert is not installed"))]
# fixtures the LiteRT engine hands to the NumPy engine, with a part of the reason it records
LITERT_FALLBACK = {"cnn": "(XNNAvgPooling2d): pool padding [1, 1, 1, 1] is neither VALID nor SAME",
                   "fp16": "LiteRT rejected the translated model"}
# on LiteRT, ExecuTorch's outputs bit for bit: static int8 everywhere; float graphs on the recording machine's
# instruction set (x86-64 with AVX-512), where both runtimes' XNNPACK pick the same micro-kernels
BITWISE_INT = {"qint8_cnn", "qint8_ops"}
BITWISE_AVX512 = {"mlp", "mlp_dynamic", "mobilenet_v2", "qdint8_mlp", "qdint8_conv", "mixed"}


def _avx512() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f " in f.read().replace("\n", " ") + " "
    except OSError:
        return False


def _expected_engine(name: str, engine: str) -> str:
    return "numpy" if engine == "numpy" or name in LITERT_FALLBACK else "litert"


def _check_engine(executor, name: str, engine: str) -> None:
    assert executor.engine == _expected_engine(name, engine), (name, executor.engine, executor.engine_reason)
    if engine == "litert" and name in LITERT_FALLBACK:
        assert LITERT_FALLBACK[name] in executor.engine_reason
    else:
        assert executor.engine_reason is None


# ==============================================================================================================
# Recorded fixtures: the delegate alone against the reference runtime (or, for programs that also run
# portable kernels, against each delegate call's recorded inputs and outputs)
# ==============================================================================================================
def _program(name: str):
    pf = read_program((FIXTURES / f"xnn_{name}.pte").read_bytes(), f"xnn_{name}.pte")
    return pf, pf.plan(0)


def _graph(pf, desc) -> P.Graph:
    return P.read_graph(pf.delegate_blob(desc), pf.named)


def _tolerance(name: str, graph: P.Graph, ext: int) -> tuple[str, float]:
    """('abs', one quantization step) for outputs dequantized from static int8, else ('rel', tolerance)."""
    if name == "fp16":
        return "rel", 1e-3  # one fp16 ulp: XNNPACK's fp16 kernels round differently from float32 + one rounding
    out = next(v for v in graph.values.values() if v.external_id == ext)
    producer = next((n for n in graph.nodes if n.fields.get("output_id") == out.id), None)
    if producer is not None and producer.name == "Convert":
        src = graph.values[producer.input_id]
        if src.datatype in (P.QINT8, P.QUINT8):
            return "abs", src.quant.scale * 1.001
    return "rel", 1e-3 if name in QUANTIZED_FIXTURES else 1e-4


def _check(got: np.ndarray, want: np.ndarray, tol: tuple[str, float], where: str) -> None:
    check_bound(got, want, tol, where)


def _single_call_args(pf, plan, call) -> tuple[list, list]:
    """DelegateCall args for a program that is one delegate call: inputs, program constants, outputs."""
    (_, _, args), = plan.chains[0]
    tensors, outs = [], []
    for idx in args:
        tag, desc = plan.values[idx]
        assert tag == TENSOR
        if idx in plan.inputs:
            tensors.append(tensor(call["inputs"][plan.inputs.index(idx)]))
        elif desc.data_buffer_idx and desc.memory_id is None:
            tensors.append(tensor(np.frombuffer(pf.constant_data(desc).tobytes(), desc.dtype).reshape(desc.sizes)))
        else:
            t = out_tensor(desc.sizes, desc.dtype, capacity=desc.sizes if desc.dynamism else None)
            outs.append((plan.outputs.index(idx), len(tensors), t))  # (output position, external id, tensor)
            tensors.append(t)
    return tensors, outs


def _is_single_delegate(plan) -> bool:
    return len(plan.chains) == 1 and len(plan.chains[0]) == 1 and plan.chains[0][0][0] == DELEGATE_CALL


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", XNN_FIXTURES)
def test_fixture_delegates_match_reference(name, engine):
    pf, plan = _program(name)
    if _is_single_delegate(plan):
        desc = plan.delegates[plan.chains[0][0][1]]
        graph = _graph(pf, desc)
        plan_exec = load(pf.delegate_blob(desc), pf.named, engine)
        _check_engine(plan_exec, name, engine)
        for k, call in enumerate(load_calls(f"xnn_{name}")):
            args, outs = _single_call_args(pf, plan, call)
            plan_exec.execute(args)
            for pos, ext, t in outs:
                _check(t.array.copy(), call["outputs"][pos], _tolerance(name, graph, ext), f"{name} call {k} out {pos}")
        return
    with np.load(FIXTURES / "xnn_delegate_io" / f"{name}.npz") as z:
        records = json.loads(str(z["__manifest__"]))
        arrays = {k: z[k] for k in z.files}
    calls = [ins for chain in plan.chains for ins in chain if ins[0] == DELEGATE_CALL]
    assert len(calls) == len(records), f"{name}: {len(calls)} delegate calls, {len(records)} recorded"
    for k, ((_, d, _), rec) in enumerate(zip(calls, records)):
        executor = load(pf.delegate_blob(plan.delegates[d]), pf.named, engine)
        _check_engine(executor, name, engine)
        ins = [arrays[v["array"]] for v in rec["inputs"]]
        wants = [arrays[v["array"]] for v in rec["outputs"]]
        outs = [out_tensor(w.shape, w.dtype) for w in wants]
        executor.execute([tensor(a) for a in ins] + outs)
        for j, (t, w) in enumerate(zip(outs, wants)):
            _check(t.array.copy(), w, ("rel", 1e-3 if name == "fp16" else 1e-4), f"{name} delegate call {k} out {j}")


def _run_end_to_end(name: str, engine: str) -> list[tuple[np.ndarray, np.ndarray]]:
    from pterun import Runtime as runtime

    method = runtime.get().load_program(FIXTURES / f"xnn_{name}.pte", engine=engine).load_method("forward")
    assert [d.engine for d in method.delegates] == [_expected_engine(name, engine)] * len(method.delegates)
    pairs = []
    for call in load_calls(f"xnn_{name}"):
        outputs = method.execute(call["inputs"])
        assert len(outputs) == len(call["outputs"])
        pairs += [(np.asarray(got), want) for got, want in zip(outputs, call["outputs"])]
    return pairs


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", XNN_FIXTURES)
def test_fixture_end_to_end_through_runtime(name, engine):
    pf, plan = _program(name)
    graphs = [_graph(pf, d) for d in plan.delegates]
    single = _is_single_delegate(plan)
    pairs = _run_end_to_end(name, engine)
    per_call = len(plan.outputs)
    for i, (got, want) in enumerate(pairs):
        k, j = divmod(i, per_call)
        if single:
            tol = _tolerance(name, graphs[0], plan.chains[0][0][2].index(plan.outputs[j]))
        else:
            tol = ("rel", 1e-3 if name == "fp16" else 1e-4)
        _check(got, want, tol, f"{name} call {k} output {j} ({engine} engine)")


def _max_error(pairs) -> float:
    return max(float(np.abs(g.astype(np.float64) - w.astype(np.float64)).max(initial=0)) for g, w in pairs)


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
@pytest.mark.parametrize("name", sorted(set(XNN_FIXTURES) - set(LITERT_FALLBACK)))
def test_litert_engine_is_at_least_as_close_to_executorch_as_numpy(name):
    on_litert, on_numpy = _run_end_to_end(name, "litert"), _run_end_to_end(name, "numpy")
    if name in BITWISE_INT or (name in BITWISE_AVX512 and _avx512()):
        for i, (got, want) in enumerate(on_litert):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want), f"{name} output {i}: {int((got != want).sum())} elements differ"
        return
    err_litert, err_numpy = _max_error(on_litert), _max_error(on_numpy)
    if _avx512():  # the recording machine's instruction set: compare strictly
        assert err_litert <= err_numpy, f"{name}: LiteRT max error {err_litert:.3g} > NumPy's {err_numpy:.3g}"
    else:  # other micro-kernels round differently: allow one float32 ulp of the outputs' scale
        scale = max(float(np.abs(w).max(initial=0)) for _, w in on_litert)
        assert err_litert <= err_numpy + 2.0**-23 * scale, (name, err_litert, err_numpy)


def test_fixtures_are_small_and_complete():
    files = [FIXTURES / f"xnn_{n}.{ext}" for n in XNN_FIXTURES for ext in ("pte", "npz")]
    files += list((FIXTURES / "xnn_delegate_io").glob("*.npz"))
    total = sum(p.stat().st_size for p in files if p.exists())
    assert total < 5 * 2**20, f"XNNPACK fixtures take {total} bytes"
    for name in XNN_FIXTURES:
        assert (FIXTURES / f"xnn_{name}.pte").exists() and (FIXTURES / f"xnn_{name}.npz").exists(), name


SYNTHETIC_NODES = (set(UNARY_REFS) | set(BINARY_REFS) | {
    "LeakyReLU", "ELU", "Clamp", "PReLU", "StaticTranspose", "StaticReshape", "StaticSlice", "StaticConstantPad",
    "Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5", "Conv2d", "DepthwiseConv2d", "ConvTranspose2d",
    "MaxPooling2d", "AvgPooling2d", "GlobalAvgPooling2d", "ArgMaxPooling2d", "StaticResizeBilinear2D",
    "FullyConnected", "BatchMatrixMultiply", "Convert", "Copy"})


def test_every_node_type_is_exercised():
    in_fixtures = set()
    for name in XNN_FIXTURES:
        pf, plan = _program(name)
        for d in plan.delegates:
            in_fixtures |= {n.name for n in _graph(pf, d).nodes}
    every = {n for n, _ in P.NODE_TYPES.values()} - {"ScaledDotProductAttention"}
    assert every - (in_fixtures | SYNTHETIC_NODES) == set()
    # the exporter really produces the common ones, so those are checked against XNNPACK itself
    assert {"Conv2d", "DepthwiseConv2d", "ConvTranspose2d", "FullyConnected", "Convert", "AvgPooling2d",
            "MaxPooling2d", "StaticResizeBilinear2D", "Softmax", "BatchMatrixMultiply"} <= in_fixtures
