"""pterun.numerics: the one error function, window geometry and quantization helpers kernels and delegates share."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from pterun.numerics import (
    ERFC_NEGLIGIBLE,
    ERFCX_P,
    ERFCX_Q,
    along_axis,
    erf,
    erfc_abs,
    inverse_scale,
    window_output_size,
)


def test_erfc_abs_matches_math_erfc():
    a = np.concatenate([np.linspace(0, 26, 52001), [1e-300, 0.47, 0.9999999, 1.0, 1.0000001, 2.5, 6.0]])
    want = np.array([math.erfc(v) for v in a])
    got = erfc_abs(-a)  # the sign is ignored
    relative = np.abs(got - want) / want
    assert relative[a <= ERFC_NEGLIGIBLE].max() < 5e-12  # where 1 - erfc is the GELU fast path's factor
    assert relative[a <= 10].max() < 5e-10 and relative.max() < 1e-7
    assert erfc_abs(np.array([np.inf, -np.inf, 30.0])).tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(erfc_abs(np.array(np.nan)))


def test_erfc_abs_in_float32_is_float32_rounding_off_math_erfc():
    a = np.linspace(0, 9, 20001, dtype=np.float32)  # erfc(9.2) leaves float32's normal range
    want = np.array([math.erfc(float(v)) for v in a])
    got = erfc_abs(a)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - want) / want) < 5e-6  # exp(-a*a) rounds a*a to float32 first, as XNNPACK does


def test_erfc_abs_keeps_the_float_type_and_agrees_with_erf():
    z = np.linspace(-3, 3, 601, dtype=np.float32)
    assert erfc_abs(z).dtype == np.float32 and erf(z).dtype == np.float32
    assert erfc_abs(z[:600].reshape(3, -1)).shape == (3, 200)
    assert erfc_abs(np.float32(1.0)).shape == () and erfc_abs(np.arange(2)).dtype == np.float32
    np.testing.assert_allclose(erfc_abs(z.astype(np.float64)), 1 - erf(np.abs(z).astype(np.float64)), rtol=0,
                               atol=1e-11)
    assert erf(np.array([1, 0], np.int32)).dtype == np.float32


def test_the_gelu_fast_path_uses_the_shared_rational():
    from pterun.kernels import fast
    np.testing.assert_array_equal(fast._HALF_ERFCX, [[0.5 * c for c in ERFCX_P], ERFCX_Q])


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
    # NumPy first: ``import pterun`` itself no longer brings it
    code = ("import sys, numpy, pterun; before = set(sys.modules); import pterun.numerics; "
            "new = set(sys.modules) - before - {'pterun.numerics'}; assert not new, sorted(new)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
