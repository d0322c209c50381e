"""Kernel behaviour the golden cases cannot record: accuracy sweeps, errors, randomness, bit packing."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from fixtures_util import FIXTURES

from pterun import NotSupportedError, Runtime
from pterun.kernels import KERNELS, random
from pterun.kernels.manifest import NOT_SUPPORTED, coverage_report
from pterun.kernels.quantized_embedding import unpack
from pterun.kernels.registry import Kernel
from pterun.numerics import erf


def test_erf_matches_math_erf_to_double_precision():
    x = np.concatenate([np.linspace(-8, 8, 20001), [0.0, -0.0, 1e-300, -1e-12, 0.9999999, 1.0000001, 2.5, 6.0]])
    want = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert np.all(np.abs(got - want) <= 1e-14 * np.abs(want) + 1e-300)
    assert np.isnan(erf(np.array([np.nan]))[0]) and erf(np.array([np.inf, -np.inf])).tolist() == [1.0, -1.0]


def test_erf_keeps_float32():
    assert erf(np.ones(3, np.float32)).dtype == np.float32


def test_unpack_puts_even_elements_in_the_high_nibble():
    packed = np.array([[0x9F, 0x08]], np.uint8)  # (9, 15) (0, 8) -> (1, 7) (-8, 0)
    assert unpack(packed, 4).tolist() == [[1, 7, -8, 0]]
    assert unpack(np.array([[0b11100100]], np.uint8), 2).tolist() == [[-2, -1, 0, 1]]


def _call(op, *args):
    return KERNELS[op].fn(*args)


@pytest.mark.parametrize("op, args", [
    ("aten::div.out_mode", (np.array([1, 2], np.int32), np.array([1, 0], np.int32), "floor", None)),
    ("aten::remainder.Scalar_out", (np.array([1, 2], np.int64), 0, None)),
    ("aten::floor_divide.out", (np.array([3], np.int8), np.array([0], np.int8), None)),
    ("executorch_prim::floordiv.int", (3, 0)),
    ("executorch_prim::mod.Scalar", (3, 0)),
])
def test_integer_division_by_zero_is_an_error(op, args):
    with pytest.raises(ZeroDivisionError):
        _call(op, *args)


def test_prim_ops_reject_mixed_bool_and_number():
    with pytest.raises(TypeError):
        _call("executorch_prim::eq.Scalar", True, 1)
    with pytest.raises(TypeError):
        _call("executorch_prim::add.Scalar", True, 1)
    with pytest.raises(TypeError):
        _call("executorch_prim::ceil.Scalar", 3)


def test_fill_values_that_do_not_fit_are_errors():
    with pytest.raises(ValueError):
        _call("aten::full.out", (2,), 300, np.empty(2, np.int8))
    with pytest.raises(ValueError):
        _call("aten::clamp.out", np.zeros(2, np.int8), -1000, None, np.empty(2, np.int8))


@pytest.mark.parametrize("n", [1, 16, 17, 40])  # up to 16 indices are checked as a list, more by reductions
@pytest.mark.parametrize("bad", [-1, 3, 10**9])
def test_embedding_rejects_indices_out_of_range_naming_the_first(n, bad):
    ids = np.zeros((1, n), np.int64)
    ids[0, -1] = 99  # out of range too, but after the one named
    ids[0, n // 2] = bad
    with pytest.raises(IndexError, match=rf"^embedding index {bad} is out of range for size 3$"):
        _call("aten::embedding.out", np.eye(3, dtype=np.float32), ids, -1, False, False, None)
    ok = np.array([[2, 0, 1][: min(n, 3)]], np.int32)
    got = _call("aten::embedding.out", np.eye(3, dtype=np.float32), ok, -1, False, False, None)
    assert got.dtype == np.float32 and got.shape == (1, ok.shape[1], 3)
    np.testing.assert_array_equal(got[0], np.eye(3, dtype=np.float32)[ok[0]])


def test_batch_norm_training_mode_is_refused_like_executorch():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(NotImplementedError):
        _call("aten::_native_batch_norm_legit.out", x, None, None, np.zeros(3, np.float32), np.ones(3, np.float32),
              True, 0.1, 1e-5, None, None, None)


def test_random_ops_draw_from_the_generator_they_are_given():
    a = KERNELS["aten::rand.out"].fn((4,), np.empty(4, np.float32), rng=np.random.default_rng(3))
    b = KERNELS["aten::rand.out"].fn((4,), np.empty(4, np.float32), rng=np.random.default_rng(3))
    assert np.array_equal(a, b) and np.all((a >= 0) & (a < 1))
    assert all(KERNELS[op].random and not KERNELS[op].foldable
               for op in ("aten::rand.out", "aten::randn.out", "aten::native_dropout.out"))
    assert not hasattr(random, "seed")  # no module generator
    out, mask = _call("aten::native_dropout.out", np.full(1000, 2.0, np.float32), 0.25, None, None, None)
    assert 0.6 < mask.mean() < 0.9 and set(np.unique(out)) <= {0.0, 2.0}  # kept values are not rescaled


class _NearOne:
    """A generator whose draws all round to 1.0 in every float type narrower than float64."""

    def random(self, size):
        return np.full(size, 1 - 2.0 ** -40)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, "bfloat16"])
def test_rand_never_reaches_one_in_a_narrow_float_type(dtype):
    dtype = np.dtype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    got = KERNELS["aten::rand.out"].fn((5,), np.empty(5, dtype), rng=_NearOne())
    assert got.dtype == dtype and got.astype(np.float64).max() < 1
    assert np.array_equal(got, np.full(5, np.nextafter(dtype.type(1), dtype.type(0))))  # the largest below 1


def test_topk_orders_ties_by_index():
    values, indices = _call("aten::topk.values", np.array([1.0, 3.0, 3.0, 2.0, 3.0]), 3, 0, True, True, None, None)
    assert values.tolist() == [3.0, 3.0, 3.0] and indices.tolist() == [1, 2, 4]


def test_coverage_report_lists_what_a_program_lacks():
    text = coverage_report(["aten::add.out", "aten::add.out", "foo::bar.out"])
    assert text.splitlines() == ["2 operators: 1 supported, 1 not", "  foo::bar.out: missing"]
    summary = coverage_report()
    assert "portable    211 / 211" in summary and "quantized    19 / 19" in summary


def test_not_supported_operators_carry_their_reason():
    assert NOT_SUPPORTED == {name: k.not_supported for name, k in KERNELS.items() if k.not_supported}


def test_a_kernel_registered_as_not_supported_fails_the_load_with_its_reason(monkeypatch):
    real = KERNELS["aten::gelu.out"]
    refused = Kernel(real.name, real.fn, real.schema, not_supported="demo: pretend gelu is refused")
    monkeypatch.setitem(KERNELS, real.name, refused)
    program = Runtime.get().load_program(FIXTURES / "mlp.pte")
    with pytest.raises(NotSupportedError, match=r"aten::gelu\.out: demo: pretend gelu is refused"):
        program.load_method("forward")
    report = coverage_report(["aten::gelu.out", "aten::relu.out"])
    assert report.splitlines() == ["2 operators: 1 supported, 1 not",
                                   "  aten::gelu.out: not supported: demo: pretend gelu is refused"]


def test_float32_pow_is_the_c_librarys_powf_but_where_powf_misrounds():
    # ExecuTorch's pow kernels call std::pow on floats, the C library's powf. NumPy's own float32 power differed
    # from glibc's in the last bit of ~16% of these values; the double power rounded to float differs only where
    # powf itself is not correctly rounded (results within an ulp of a rounding midpoint)
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("m")
    if name is None:
        pytest.skip("no C math library to compare with")
    libm = ctypes.CDLL(name)
    libm.powf.restype, libm.powf.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(3000) * 3, 10 ** rng.uniform(-15, 15, 2000)]).astype(np.float32)
    for e in (3.0, 0.5, 1.5, -1.0, 2.5):
        want = np.array([libm.powf(float(v), e) for v in x], np.float32)
        got = KERNELS["aten::pow.Tensor_Scalar_out"].fn(x, e, np.empty_like(x))
        assert got.dtype == np.float32
        both_nan = np.isnan(got) & np.isnan(want)
        differ = (got != want) & ~both_nan
        assert differ.sum() <= x.size // 200, f"exponent {e}: {differ.sum()} of {x.size} differ from powf"
        ulps = np.abs(got[differ].view(np.int32).astype(np.int64) - want[differ].view(np.int32).astype(np.int64))
        assert (ulps <= 1).all()


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
@pytest.mark.parametrize("index", [0, 2, -1, -2])
def test_select_copy_takes_the_slice_along_dim_and_refuses_an_index_out_of_range(dim, index):
    a = np.arange(3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    got = _call("aten::select_copy.int_out", a, dim, index, None)
    want = np.take(a, index, axis=dim)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    with pytest.raises(IndexError, match=rf"^index {a.shape[dim] + 1} is out of range for dim {dim % 3} of size "
                                         rf"{a.shape[dim]}$"):
        _call("aten::select_copy.int_out", a, dim, a.shape[dim] + 1, None)


def test_select_copy_of_a_one_element_input_is_a_0d_array():
    got = _call("aten::select_copy.int_out", np.array([7], np.int64), 0, -1, None)
    assert type(got) is np.ndarray and got.shape == () and got.dtype == np.int64 and int(got) == 7
