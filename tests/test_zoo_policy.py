"""The tolerance policy the model-zoo harness enforces (tools/zoo/policy.py): float within 1e-4 of scale,
static int8 within one output step, dynamically quantized within 1e-3 of scale."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location(
    "zoo_policy", Path(__file__).resolve().parents[1] / "tools" / "zoo" / "policy.py")
policy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(policy)


def test_float_bound_is_1e4_of_the_output_scale():
    e = np.array([10.0, -2.0, 0.5], np.float32)
    assert policy.check("float", e + np.float32(9e-4), e)[0]  # 9e-5 of scale 10
    ok, measure = policy.check("float", e + np.array([0, 0, 1.1e-3], np.float32), e)
    assert not ok and measure == "1.1e-04 of scale"


def test_static_int8_allows_one_output_step_and_no_more():
    scale = 0.05
    e = np.arange(-5, 5, dtype=np.float32) * np.float32(scale)
    one = e.copy()
    one[3] += np.float32(scale)
    ok, measure = policy.check("static", one, e, scale)
    assert ok and measure == "1.00 steps (10.0% off)"
    two = e.copy()
    two[3] += np.float32(2 * scale)
    assert policy.check("static", two, e, scale) == (False, "2.00 steps (10.0% off)")


def test_static_int8_without_a_recorded_scale_uses_the_output_grid():
    e = np.arange(-4, 4, dtype=np.float32) * np.float32(0.25)
    a = e.copy()
    a[0] += np.float32(0.5)
    assert policy.check("static", a, e) == (False, "2.00 steps (12.5% off)")


def test_static_program_with_a_float_output_is_held_to_the_float_bound():
    # a log-softmax after the int8 part: 1000 distinct values, no int8 grid; the smallest gap between values is
    # a float32 ulp, which must not be taken for a quantization step
    e = np.log(np.linspace(0.001, 1.0, 1000, dtype=np.float32))
    a = e.copy()
    a[5] = np.nextafter(np.nextafter(e[5], np.float32(0)), np.float32(0))  # two float32 ulps
    assert policy.check("static", a, e) == (True, "1.4e-07 of scale (float output of an int8 program)")
    b = e + np.float32(1e-3)
    assert policy.check("static", b, e) == (False, "1.4e-04 of scale (float output of an int8 program)")
    grid = np.arange(-100, 100, dtype=np.float32) * np.float32(0.05)  # 200 codes: still counted in steps
    assert policy.check("static", grid + np.float32(0.06), grid)[1].startswith("1.20 steps")


def test_dynamic_quantization_bound_is_1e3_of_scale():
    e = np.array([4.0, -1.0], np.float32)
    assert policy.check("dynamic", e + np.float32(3.9e-3), e)[0]
    assert not policy.check("dynamic", e + np.float32(4.1e-3), e)[0]


@pytest.mark.parametrize("kind", ["float", "static", "dynamic"])
def test_shape_nan_and_integer_outputs_are_exact(kind):
    e = np.ones((2, 3), np.float32)
    assert policy.check(kind, np.ones((3, 2), np.float32), e) == (False, "shape (3, 2) != (2, 3)")
    n = e.copy()
    n[0, 0] = np.nan
    assert policy.check(kind, n, e) == (False, "NaN positions differ")
    i = np.array([1, 2, 3], np.int64)
    assert policy.check(kind, np.array([1, 2, 4], np.int64), i) == (False, "1 of 3 differ")


def test_float_bound_widens_to_twice_the_references_own_disagreement_only_above_1e4():
    e = np.array([10.0, -2.0], np.float32)
    a = e + np.array([1.3e-3, 0], np.float32)  # 1.3e-4 of scale
    assert policy.check("float", a, e, floor=4e-5) == (False, "1.3e-04 of scale")
    ok, measure = policy.check("float", a, e, floor=1.2e-4)
    assert ok and measure == "1.3e-04 of scale (ExecuTorch's portable vs XNNPACK: 1.2e-04)"
    assert not policy.check("float", e + np.float32(2.5e-3), e, floor=1.2e-4)[0]
