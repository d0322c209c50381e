"""Reading the recorded fixtures: ``NAME.pte`` plus ``NAME.npz`` (inputs and the reference runtime's outputs)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).parent / "fixtures"

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
    return sorted(p.stem for p in FIXTURES.glob("*.pte") if not p.stem.startswith("xnn_"))


def load_calls(name: str) -> list[dict]:
    """The recorded calls, in order: ``{"method", "inputs": [...], "outputs": [...]}`` with values decoded."""
    with np.load(FIXTURES / f"{name}.npz", allow_pickle=False) as z:
        manifest = json.loads(str(z["__manifest__"]))
        arrays = {k: z[k] for k in z.files if k != "__manifest__"}

    def decode(v):
        if "array" in v:
            return arrays[v["array"]]
        (kind, value), = v.items()
        return {"int": int, "float": float, "bool": bool, "none": lambda _: None}[kind](value)

    return [{"method": c["method"], "inputs": [decode(v) for v in c["inputs"]],
             "outputs": [decode(v) for v in c["outputs"]]} for c in manifest]


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


def mlp_with_randn(program):
    """mlp.pte's forward plan (``program`` loaded from it) with its first instruction, a weight's permute, replaced by
    a randn of the same shape: every argument of the randn is a constant. Returns the new ExecutionPlan."""
    from pterun.format.program import INT, INT_LIST, ExecutionPlan, KernelCall

    plan = program.file.plan(program.file.plan_index("forward"))
    _, _, (_, _, out, ret) = plan.chains[0][0]
    sizes = plan.values[out][1].sizes
    values = list(plan.values) + [(INT, s) for s in sizes]
    values.append((INT_LIST, tuple(range(len(plan.values), len(values)))))
    chain = [KernelCall(len(plan.operators), (len(values) - 1, out, ret))] + plan.chains[0][1:]
    return ExecutionPlan(plan.name, values, plan.inputs, plan.outputs, [chain], plan.operators + ["aten::randn.out"],
                         plan.delegates, plan.buffer_sizes)

