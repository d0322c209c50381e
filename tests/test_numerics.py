"""pterun.numerics: the one error function, window geometry and quantization helpers kernels and delegates share."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from pterun.numerics import (ERFC_NEGLIGIBLE, ERFCX_P, ERFCX_Q, along_axis, erf, erfc_abs, inverse_scale,
                             window_output_size)


def test_erfc_abs_matches_math_erfc_to_double_precision():
    a = np.concatenate([np.linspace(0, 9, 30001), [1e-300, 0.9999999, 1.0, 1.0000001, 2.5, 6.0, 26.0]])
    want = np.array([math.erfc(v) for v in a])
    got = erfc_abs(-a)  # the sign is ignored
    normal = want > 1e-300
    assert np.all(np.abs(got[normal] - want[normal]) <= 1e-13 * want[normal])
    assert np.all(got[a > ERFC_NEGLIGIBLE] < 3e-17) and got[-1] > 0  # erfc(26) ~ 6e-296, still a normal double
    assert erfc_abs(np.array([np.inf, -np.inf])).tolist() == [0.0, 0.0] and np.isnan(erfc_abs(np.array(np.nan)))


def test_erfc_abs_keeps_the_float_type_and_agrees_with_erf():
    z = np.linspace(-3, 3, 601, dtype=np.float32)
    assert erfc_abs(z).dtype == np.float32 and erf(z).dtype == np.float32
    np.testing.assert_allclose(erfc_abs(z.astype(np.float64)), 1 - erf(np.abs(z).astype(np.float64)), atol=2e-16)
    assert erf(np.array([1, 0], np.int32)).dtype == np.float32


def test_the_fast_gelu_rational_stays_close_to_the_series():
    a = np.linspace(0, ERFC_NEGLIGIBLE, 20001)
    rational = np.exp(-a * a) * np.polynomial.polynomial.polyval(a, ERFCX_P) / \
        np.polynomial.polynomial.polyval(a, ERFCX_Q)
    reference = erfc_abs(a)
    assert np.max(np.abs(rational - reference) / reference) < 5e-12


@pytest.mark.parametrize("size, kernel, stride, pads, dilation, ceil_mode, want", [
    (5, 2, 2, (0, 0), 1, False, 2),
    (5, 2, 2, (0, 0), 1, True, 3),
    (4, 3, 2, (1, 1), 1, True, 3),
    (5, 2, 2, (1, 1), 1, True, 3),   # the fourth ceil window would start in the trailing padding: dropped
    (6, 3, 1, (0, 0), 2, False, 2),  # dilated: the kernel spans 5
    (7, 3, 2, (1, 2), 1, False, 4),  # asymmetric padding (XNNPACK's)
])
def test_window_output_size(size, kernel, stride, pads, dilation, ceil_mode, want):
    assert window_output_size(size, kernel, stride, pads[0], pads[1], dilation, ceil_mode) == want


def test_window_output_size_is_the_pooling_kernels_output():
    from pterun.kernels import KERNELS
    x = np.arange(2 * 7 * 9, dtype=np.float32).reshape(1, 2, 7, 9)
    out, _ = KERNELS["aten::max_pool2d_with_indices.out"].fn(x, (3, 2), (2, 2), (1, 1), (1, 1), True, None, None)
    assert out.shape[-2:] == (window_output_size(7, 3, 2, 1, 1, 1, True), window_output_size(9, 2, 2, 1, 1, 1, True))


def test_quantization_helpers():
    assert inverse_scale(0.1) == np.float32(1) / np.float32(0.1) and inverse_scale(0.1).dtype == np.float32
    assert along_axis([1, 2, 3], 1, 4).shape == (1, 3, 1, 1)


def test_importing_numerics_imports_nothing_more():
    code = ("import sys, pterun; before = set(sys.modules); import pterun.numerics; "
            "new = set(sys.modules) - before - {'pterun.numerics'}; assert not new, sorted(new)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
