"""Static int8 XNNPACK arithmetic that deep networks depend on: fixed-point add/subtract, float32-product
multiply, integer-sum mean and reference-operator tables. The fixtures (``tools/zoo/export_fixtures.py``) hold
ExecuTorch's outputs; every element must land on the same int8 code, since one code of difference compounds
through a deep network (one residual-add element of 3456 off put the model zoo's mobilenet_v3_small logits
11 steps away before these rules). Before them, qint8_add had 514, 513, 142 and 88 elements off."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import Runtime
from pterun.delegates.xnnpack import quant as Q


def _codes_off(got: np.ndarray, want: np.ndarray) -> tuple[int, float]:
    """(elements on a different code, the step): outputs are dequantized int8, so the step is the grid."""
    u = np.unique(want.astype(np.float64))
    step = float(np.min(np.diff(u)))
    off = np.abs(got.astype(np.float64) - want) > step / 2
    return int(np.count_nonzero(off)), step


@pytest.mark.parametrize("name, stages", [("qint8_add", ["add", "subtract", "multiply", "2x2 mean"]),
                                          ("qint8_se", ["hardswish", "hardsigmoid", "se mul", "residual add",
                                                        "mean"])])
def test_same_int8_codes_as_executorch(name, stages):
    method = Runtime.get().load_program(FIXTURES / "zoo" / f"{name}.pte").load_method("forward")
    for k, call in enumerate(load_calls(f"zoo/{name}")):
        outs = method.execute(call["inputs"])
        assert len(outs) == len(stages) == len(call["outputs"])
        for stage, got, want in zip(stages, outs, call["outputs"]):
            assert got.shape == want.shape and got.dtype == want.dtype == np.float32
            off, step = _codes_off(got, want)
            assert off == 0, f"{name} call {k} {stage}: {off} of {want.size} elements on another int8 code " \
                             f"(step {step:.4g})"


def test_add_rounds_ties_up_in_fixed_point():
    # a_scale / out_scale = 0.5: codes 1, 3, -1, -3 land exactly on half steps; XNNPACK rounds them up
    add = Q.AddParams(0.5, 0, 1.0, 0, 1.0, 0)
    a = np.array([1, 3, -1, -3, 5], np.int8)
    got = add(a, np.zeros(5, np.int8), -128, 127, np.int8)
    assert got.dtype == np.int8
    assert got.tolist() == [1, 2, 0, -1, 3]  # half to even would give [0, 2, 0, -2, 2]


def test_add_multiplier_has_21_bits_and_folds_zero_points():
    add = Q.AddParams(0.1, 3, 0.05, -7, 0.2, 5)
    assert add.shift == 20 + 1  # 0.1 / 0.2 = 0.5 = 2**-1
    assert add.a_mult == 2**20 and add.b_mult == 2**19
    assert add.bias == (1 << 20) - add.a_mult * 3 - add.b_mult * -7
    a, b = np.array([10, -128, 127], np.int8), np.array([0, -128, 127], np.int8)
    want = [int(np.floor(((x - 3) * 0.5 + (y + 7) * 0.25) + 0.5)) + 5 for x, y in zip(a.tolist(), b.tolist())]
    assert add(a, b, -128, 127, np.int8).tolist() == [min(max(w, -128), 127) for w in want]


def test_subtract_negates_the_second_multiplier():
    sub = Q.AddParams(1.0, 0, 1.0, 0, 1.0, 0, sign_b=-1)
    assert sub.b_mult == -sub.a_mult
    assert sub(np.array([5, -5], np.int8), np.array([7, -7], np.int8), -128, 127, np.int8).tolist() == [-2, 2]


def test_add_rejects_scale_ratios_outside_xnnpack_range():
    with pytest.raises(ValueError, match=r"outside XNNPACK's \[2\*\*-10, 2\*\*8\) range"):
        Q.AddParams(1000.0, 0, 1.0, 0, 1.0, 0)


def test_multiply_scales_the_integer_product_and_rounds_half_to_even():
    mul = Q.MulParams(0.5, 1, 0.25, -2, 0.0625, 3)  # product scale 0.125 / 0.0625 = 2
    a, b = np.array([3, 1, -128], np.int8), np.array([0, 5, 127], np.int8)
    want = [(x - 1) * (y + 2) * 2 + 3 for x, y in zip(a.tolist(), b.tolist())]
    assert mul(a, b, -128, 127, np.int8).tolist() == [min(max(w, -128), 127) for w in want]


def test_mean_folds_the_input_zero_point_into_the_offset():
    mult, offset = Q.mean_params(0.2, -5, 0.1, 4, 4)
    assert mult.dtype == offset.dtype == np.float32
    assert mult == np.float32(2) * np.float32(0.25)
    assert offset == np.float32(4) - np.float32(4 * -5) * mult  # 4 + 10
    sums = np.array([[-20.0, 6.0, -21.0]], np.float32)  # raw code sums over 4 elements
    got = Q.requantize_sum(sums.copy(), mult, offset, -128, 127, np.int8)
    assert got.tolist() == [[4, 17, 4]]  # -10+14, 3+14, rint(-10.5)+14 = -10+14 (half to even after the offset)


def test_reference_quantization_adds_the_zero_point_before_rounding():
    # 0.5000001 * 1 rounds to 1, but -128 + 0.5000001 is -127.5 in float32, which rounds to even (-128)
    x = np.array([0.5000001], np.float32)
    assert Q.quantize(x, 1.0, -128, np.int8).tolist() == [-127]
    assert Q.quantize_reference(x, 1.0, -128, np.int8).tolist() == [-128]


def test_int8_to_int8_convert_keeps_the_ratio_to_one_256th_and_rounds_halves_up():
    cvt = Q.RequantizeParams(0.3, 2, 0.7, -1)  # 256 * 0.3 / 0.7 = 109.7 -> 110
    assert cvt.mult == 110 and cvt.bias == (-1 << 8) - 110 * 2 + 128
    x = np.array([-128, -3, 0, 2, 50, 127], np.int8)
    want = [min(max(((int(v) - 2) * 110 + 128) // 256 - 1, -128), 127) for v in x.tolist()]
    assert cvt(x).tolist() == want
    assert cvt(np.array([127], np.int8), -128, 20).tolist() == [20]
    with pytest.raises(ValueError, match=r"outside XNNPACK's \[2\*\*-8, 2\*\*7\] range"):
        Q.RequantizeParams(1.0, 0, 1000.0, 0)
