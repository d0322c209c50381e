"""Reading the recorded fixtures: ``NAME.pte`` plus ``NAME.npz`` (inputs and the reference runtime's outputs)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SRC = Path(__file__).resolve().parents[1] / "src"

#: for the tests that fork on purpose after threads have started (pterun's pool, LiteRT's): Python 3.12+ warns
#: at every such fork ("This process ... is multi-threaded, use of fork() may lead to deadlocks"), and forking a
#: process that has loaded and run models, as a preloading server does, is what those tests check works. Only
#: that warning is silenced, only there.
FORK_OF_A_THREADED_PROCESS = pytest.mark.filterwarnings(
    r"ignore:This process \(pid=\d+\) is multi-threaded, use of fork\(\) may lead to deadlocks:DeprecationWarning")


def needs(module: str) -> None:
    """Skip the calling test, saying why, when the optional library ``module`` is not installed.

    CI installs every optional library and sets ``PTERUN_TEST_ALL=1``: there a missing library fails the test
    instead of skipping it, so no test goes unrun unnoticed."""
    if importlib.util.find_spec(module) is None and not os.environ.get("PTERUN_TEST_ALL"):
        pytest.skip(f"needs the optional {module!r} library (pip install 'pterun[llm]' or pip install {module})")


def portable_fixture_names() -> list[str]:
    """The float and quantized portable fixtures (``xnn_*`` are XNNPACK's; ``bf16_*`` have their own test and
    tolerance, in test_bf16.py)."""
    return sorted(p.stem for p in FIXTURES.glob("*.pte") if not p.stem.startswith(("xnn_", "bf16_")))


def load_calls(name: str) -> list[dict]:
    """The recorded calls of ``FIXTURES/NAME.npz``, in order (:func:`load_calls_from`)."""
    return load_calls_from(FIXTURES / f"{name}.npz")


def load_calls_from(path) -> list[dict]:
    """The recorded calls, in order: ``{"method", "inputs": [...], "outputs": [...]}`` with values decoded."""
    with np.load(path, allow_pickle=False) as z:
        manifest = json.loads(str(z["__manifest__"]))
        arrays = {k: z[k] for k in z.files if k != "__manifest__"}

    def decode(v):
        if "array" in v:  # bfloat16 is stored as its uint16 bits (NumPy has no bfloat16 of its own)
            return arrays[v["array"]].view(_bfloat16()) if v.get("dtype") == "bfloat16" else arrays[v["array"]]
        (kind, value), = v.items()
        return {"int": int, "float": float, "bool": bool, "none": lambda _: None}[kind](value)

    return [{"method": c["method"], "inputs": [decode(v) for v in c["inputs"]],
             "outputs": [decode(v) for v in c["outputs"]]} for c in manifest]


def litert_plans(method) -> list:
    """The plans of a loaded method that run on the LiteRT engine: its delegate calls' and its merged calls'."""
    r = method._runner
    return [ex for ex in list(r.executors) + [v[1] for v in r.merged.values()]
            if getattr(ex, "engine", None) == "litert"]


def _bfloat16() -> np.dtype:
    import ml_dtypes  # only when a fixture holds bf16 tensors: a float fixture must not import it

    return np.dtype(ml_dtypes.bfloat16)


def assert_matches(actual, expected, where: str, rtol_scale: float = 1e-4) -> None:
    """Shape, then dtype, then values: float outputs within ``rtol_scale`` of the output's scale,
    everything else exact. Failures show the worst mismatches."""
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: expected an ndarray, got {type(actual).__name__}"
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != expected {expected.shape}"
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != expected {expected.dtype}"
        if expected.dtype.kind == "f" or expected.dtype.kind == "V":
            a = actual.astype(np.float64)
            e = expected.astype(np.float64)
            scale = max(float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0)), 1e-30)
            both_nan = np.isnan(a) & np.isnan(e)
            same_inf = np.isinf(e) & (a == e)
            err = np.where(both_nan | same_inf, 0.0, np.abs(a - e))
            worst = float(np.max(err, initial=0.0)) / scale
            if not worst <= rtol_scale:
                order = np.argsort(err.reshape(-1))[::-1][:5]
                rows = [(np.unravel_index(i, e.shape), e.reshape(-1)[i], a.reshape(-1)[i]) for i in order]
                raise AssertionError(f"{where}: max error {worst:.3g} x scale {scale:.3g} > {rtol_scale}; "
                                     f"worst (index, expected, actual): {rows}")
        else:
            mism = np.argwhere(actual != expected)
            first = [tuple(i) for i in mism[:5]]
            assert mism.size == 0, (f"{where}: {len(mism)} mismatches, first at {first}: expected "
                                    f"{[expected[i] for i in first]}, got {[actual[i] for i in first]}")
    else:
        assert type(actual) is type(expected), f"{where}: type {type(actual).__name__} != {type(expected).__name__}"
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


def output_bounds(program, method: str) -> list[tuple[str, float]]:
    """The README's accuracy bound for each output of ``method`` of a loaded ``program``: ``("abs", one
    quantization step)`` for an output an XNNPACK delegate dequantizes from static int8; ``("rel", 1e-3)`` of the
    output's scale where the method's delegates quantize activations dynamically or hold fp16 values; ``("rel",
    1e-4)`` otherwise."""
    from pterun.delegates.xnnpack import payload as P
    from pterun.format.schema import DELEGATE_CALL

    pf = program.file
    plan = pf.plan(pf.plan_index(method))
    graphs, quantized, steps = {}, False, {}
    for chain in plan.chains:
        for ins in chain:
            if ins.kind != DELEGATE_CALL:
                continue
            g = graphs.get(ins.delegate_index)
            if g is None:
                blob = pf.delegate_blob(plan.delegates[ins.delegate_index])
                g = graphs[ins.delegate_index] = P.read_graph(blob, program.named_data)
            quantized |= any(v.datatype in (P.QDINT8, P.FP16) or v.dq_datatype for v in g.values.values())
            for ext, slot in enumerate(ins.args):
                val = next((v for v in g.values.values() if v.external_id == ext and v.flags & P.VALUE_EXTERNAL_OUTPUT),
                           None)
                producer = val and next((n for n in g.nodes if n.fields.get("output_id") == val.id), None)
                if producer is not None and producer.name == "Convert":
                    src = g.values[producer.input_id]
                    if src.datatype in (P.QINT8, P.QUINT8):
                        steps[slot] = src.quant.scale * 1.001
    rel = 1e-3 if quantized else 1e-4
    return [("abs", steps[o]) if o in steps else ("rel", rel) for o in plan.outputs]


def check_bound(got, want, bound: tuple[str, float], where: str) -> None:
    """``got`` against ``want`` within ``bound`` (:func:`output_bounds`): shape, dtype, then values."""
    kind, value = bound
    if kind == "abs" and isinstance(want, np.ndarray) and want.dtype.kind == "f":
        assert isinstance(got, np.ndarray), f"{where}: expected an ndarray, got {type(got).__name__}"
        assert got.shape == want.shape and got.dtype == want.dtype, f"{where}: {got.dtype}{list(got.shape)} " \
                                                                    f"!= expected {want.dtype}{list(want.shape)}"
        err = float(np.abs(got.astype(np.float64) - want).max(initial=0))
        assert err <= value, f"{where}: max error {err:.3g} is more than one quantization step {value:.3g}"
    else:
        assert_matches(got, want, where, rtol_scale=value)


def mlp_with_randn(program):
    """mlp.pte's forward plan (``program`` loaded from it) with its first instruction, a weight's permute, replaced by
    a randn of the same shape: every argument of the randn is a constant. Returns the new ExecutionPlan."""
    from pterun.format.schema import INT, INT_LIST, ExecutionPlan, KernelCall

    plan = program.file.plan(program.file.plan_index("forward"))
    _, _, (_, _, out, ret) = plan.chains[0][0]
    sizes = plan.values[out][1].sizes
    values = list(plan.values) + [(INT, s) for s in sizes]
    values.append((INT_LIST, tuple(range(len(plan.values), len(values)))))
    chain = [KernelCall(len(plan.operators), (len(values) - 1, out, ret))] + plan.chains[0][1:]
    return ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, [chain], plan.operators + ["aten::randn.out"],
                         plan.delegates, plan.buffer_sizes)



def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``code`` (dedented) in a fresh Python that imports this checkout's pterun, with the environment minus
    PTERUN_ENGINE plus ``env``; output captured as text, two minutes at most."""
    script = f"import sys; sys.path.insert(0, {str(SRC)!r})\n" + textwrap.dedent(code)
    e = {k: v for k, v in os.environ.items() if k != "PTERUN_ENGINE"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=e, timeout=120)
