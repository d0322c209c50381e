"""The golden cases for tools/gen_golden.py: at least two per operator, family by family. Declarative data only;
gen_golden.py runs them and records the outputs.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from golden_helpers import (BF16, BOOL, C64, CASES, F16, F32, F64, I8, I16, I32, I64, U8, Strided,  # noqa: F401
                            T, _GEN, case, r, rn, seed, special)

# ----------------------------------------------------------------------------------------------------------
# The cases, family by family
# ----------------------------------------------------------------------------------------------------------
def build_cases():
    for fn in _FAMILIES:
        seed(fn.__name__)
        fn()


_FAMILIES: list[Callable] = []


def family(fn):
    _FAMILIES.append(fn)
    return fn


@family
def binary_arith():
    a, b = r(3, 4), r(4)
    case("aten::add.out", a, b, 1, name="broadcast")
    case("aten::add.out", r(2, 3, dtype=I32, lo=-50, hi=50), r(3, dtype=I8, lo=-5, hi=5), 3, name="int_alpha")
    case("aten::add.out", T(r(3, 4, dtype=F16)), r(3, 4, dtype=BF16), 1.5, name="half_bf16_strided")
    case("aten::add.out", r(2, 2, dtype=BOOL), r(2, 2, dtype=BOOL), 1, name="bool")
    case("aten::add.out", r(3, dtype=U8, lo=200, hi=255), torch.tensor(100, dtype=U8), 1, name="uint8_wrap_0d")
    case("aten::add.out", torch.zeros(0, 3), r(3), 1, name="empty")
    case("aten::add.Scalar_out", r(2, 3), 2.5, 2, name="float")
    case("aten::add.Scalar_out", r(5, dtype=I64, lo=-9, hi=9), 7, -2, name="int64")
    case("aten::add.Scalar_out", r(4, dtype=I32), 0.5, 1, name="int_plus_float_scalar")
    case("aten::sub.out", a, b, 1)
    case("aten::sub.out", r(2, 1, dtype=I16, lo=-100, hi=100), r(1, 3, dtype=I64, lo=-100, hi=100), 2,
         name="int_broadcast_alpha")
    case("aten::sub.out", special(), special().flip(0), 0.5, name="special")
    case("aten::sub.Scalar_out", r(3, 2, dtype=F64), 1.25, 3)
    case("aten::sub.Scalar_out", r(4, dtype=I8, lo=-100, hi=100), 100, 1, name="int8_wrap")
    case("aten::rsub.Scalar_out", r(2, 3), 1.0, 2)
    case("aten::rsub.Scalar_out", r(6, dtype=I32), 10, 3, name="int")
    case("aten::mul.out", r(2, 3, 4), T(r(2, 4, 3)).t.transpose(1, 2), name="transposed_view")
    case("aten::mul.out", r(4, 1, dtype=I32, lo=-3000, hi=3000), r(1, 5, dtype=I32, lo=-3000, hi=3000),
         name="int_overflow")
    case("aten::mul.out", r(3, dtype=BOOL), r(3, dtype=BOOL), name="bool")
    case("aten::mul.out", torch.tensor(2.5, dtype=F64), r(2, 2), name="0d_double")
    case("aten::mul.Scalar_out", r(3, 3, dtype=BF16), 0.1)
    case("aten::mul.Scalar_out", r(4, dtype=I64), -3, name="int")
    case("aten::div.out", r(3, 4), r(4, lo=0.5, hi=2))
    case("aten::div.out", r(6, dtype=I32, lo=-7, hi=7), torch.tensor([1, -2, 0, 3, -4, 0], dtype=I32),
         name="int_by_zero")
    case("aten::div.out", special(), special(), name="special")
    case("aten::div.Scalar_out", r(2, 3), 3.0)
    case("aten::div.Scalar_out", r(5, dtype=I64), 2, name="int")
    case("aten::div.Scalar_out", r(4, dtype=F16), 0.0, name="by_zero")
    ia, ib = r(12, dtype=I32, lo=-20, hi=20), torch.tensor([3, -3, 7, -7, 1, -1, 5, -5, 2, -2, 9, -9], dtype=I32)
    for mode in ("trunc", "floor"):
        case("aten::div.out_mode", ia, ib, mode, name=f"int_{mode}")
        case("aten::div.out_mode", special(), special().flip(0), mode, name=f"special_{mode}")
        case("aten::div.out_mode", r(3, 4), r(4), mode, name=f"float_{mode}")
        case("aten::div.Scalar_mode_out", r(6, dtype=I64, lo=-20, hi=20), -4, mode, name=f"int_{mode}")
        case("aten::div.Scalar_mode_out", r(2, 3), 0.7, mode, name=f"float_{mode}")
    case("aten::div.out_mode", r(3), r(3, lo=1, hi=2), None, name="none")
    case("aten::div.Scalar_mode_out", r(3), 2, None, name="none")
    case("aten::floor_divide.out", ia, ib, name="int")
    case("aten::floor_divide.out", special(), special().flip(0), name="special")
    case("aten::floor_divide.out", r(2, 3, dtype=F16), r(3, lo=0.5, hi=3), name="half_broadcast")
    case("aten::fmod.Tensor_out", r(3, 4, lo=-10, hi=10), r(4, lo=1, hi=3))
    case("aten::fmod.Tensor_out", ia, ib, name="int")
    case("aten::fmod.Tensor_out", special(), special().flip(0), name="special")
    case("aten::fmod.Scalar_out", r(5, lo=-10, hi=10), -3.0)
    case("aten::fmod.Scalar_out", r(6, dtype=I64, lo=-20, hi=20), 4, name="int")
    case("aten::remainder.Tensor_out", r(3, 4, lo=-10, hi=10), r(4, lo=-3, hi=3))
    case("aten::remainder.Tensor_out", ia, ib, name="int")
    case("aten::remainder.Tensor_out", special(), special().flip(0), name="special")
    case("aten::remainder.Scalar_out", r(5, lo=-10, hi=10), 3.0)
    case("aten::remainder.Scalar_out", r(6, dtype=I32, lo=-20, hi=20), -4, name="int")
    case("aten::pow.Tensor_Tensor_out", r(3, 4, lo=0.1, hi=3), r(4, lo=-2, hi=2))
    case("aten::pow.Tensor_Tensor_out", r(5, dtype=I32, lo=-4, hi=5), r(5, dtype=I32, lo=0, hi=4), name="int")
    case("aten::pow.Tensor_Tensor_out", special(), torch.tensor(0.5), name="special_0d")
    case("aten::pow.Tensor_Scalar_out", r(2, 3), 2)
    case("aten::pow.Tensor_Scalar_out", r(2, 3, lo=0, hi=4), 0.5, name="sqrt")
    case("aten::pow.Tensor_Scalar_out", r(4, dtype=I64, lo=-5, hi=5), 3, name="int")
    case("aten::pow.Tensor_Scalar_out", T(r(3, 2, dtype=F16, lo=0.5, hi=2)), -1.5, name="half_strided")
    case("aten::pow.Scalar_out", 2.0, r(3, 4))
    case("aten::pow.Scalar_out", 3, r(5, dtype=I32, lo=0, hi=6), name="int")
    case("aten::atan2.out", r(3, 4), r(4))
    case("aten::atan2.out", special(), special().flip(0), name="special")
    case("aten::atan2.out", r(4, dtype=I32), r(4, dtype=I32), name="int")
    case("aten::maximum.out", r(3, 4), r(4))
    case("aten::maximum.out", special(), special().flip(0), name="nan")
    case("aten::maximum.out", r(4, dtype=I8, lo=-100, hi=100), r(4, dtype=U8, lo=0, hi=255), name="int8_uint8")
    case("aten::minimum.out", r(3, 4), r(4))
    case("aten::minimum.out", special(), special().flip(0), name="nan")
    case("aten::minimum.out", r(3, dtype=BOOL), r(3, dtype=BOOL), name="bool")


@family
def unary_math():
    for op in ("exp", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan", "asin", "acos",
               "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "sigmoid", "reciprocal"):
        lo, hi = {"acosh": (1, 4), "log": (0.01, 4), "log2": (0.01, 4), "log10": (0.01, 4), "sqrt": (0, 4),
                  "rsqrt": (0.1, 4), "asin": (-1, 1), "acos": (-1, 1), "atanh": (-0.99, 0.99),
                  "log1p": (-0.9, 3)}.get(op, (-3, 3))
        case(f"aten::{op}.out", r(3, 4, lo=lo, hi=hi))
        case(f"aten::{op}.out", special(), name="special")
        case(f"aten::{op}.out", T(r(2, 3, dtype=I32, lo=0, hi=3)), name="int_strided")
        if op in ("exp", "sigmoid", "erf", "tanh", "log"):
            case(f"aten::{op}.out", r(2, 3, dtype=F16, lo=lo, hi=hi), name="half")
            case(f"aten::{op}.out", r(2, 3, dtype=F64, lo=lo, hi=hi), name="double")
            case(f"aten::{op}.out", r(7, dtype=BF16, lo=lo, hi=hi), name="bf16")
    case("aten::erf.out", torch.linspace(-7, 7, 281, dtype=F64), name="double_range")
    case("aten::erf.out", torch.linspace(-7, 7, 281), name="float_range")
    for op in ("floor", "ceil", "trunc", "round"):
        case(f"aten::{op}.out", special())
        case(f"aten::{op}.out", r(2, 3, dtype=I32), name="int")
        case(f"aten::{op}.out", r(2, 3, dtype=BF16, lo=-5, hi=5), name="bf16")
    case("aten::round.out", torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 1e8 + 0.5]), name="half_even")
    case("aten::neg.out", r(2, 3))
    case("aten::neg.out", torch.tensor([-128, 127, 0, 5], dtype=I8), name="int8_wrap")
    case("aten::abs.out", special())
    case("aten::abs.out", torch.tensor([-128, -5, 0, 7], dtype=I8), name="int8")
    case("aten::abs.out", T(r(3, 2, dtype=F16)), name="half_strided")
    case("aten::sign.out", special())
    case("aten::sign.out", r(5, dtype=I64), name="int")
    case("aten::sign.out", r(4, dtype=BOOL), name="bool")
    case("aten::isnan.out", special())
    case("aten::isnan.out", r(3, dtype=I32), name="int")
    case("aten::isinf.out", special())
    case("aten::isinf.out", r(3, dtype=BF16), name="bf16")
    case("aten::logical_not.out", special())
    case("aten::logical_not.out", r(2, 3, dtype=I32, lo=-1, hi=2), name="int")
    case("aten::bitwise_not.out", r(5, dtype=I32))
    case("aten::bitwise_not.out", r(5, dtype=BOOL), name="bool")
    case("aten::bitwise_not.out", torch.tensor([0, 1, 255], dtype=U8), name="uint8")


@family
def compare_logic():
    sp = special()
    for op in ("eq", "ne", "gt", "ge", "lt", "le"):
        case(f"aten::{op}.Tensor_out", r(3, 4, dtype=I32, lo=-2, hi=2), r(4, dtype=I32, lo=-2, hi=2))
        case(f"aten::{op}.Tensor_out", sp, sp.flip(0), name="special")
        case(f"aten::{op}.Tensor_out", r(3, dtype=U8, lo=0, hi=255), torch.tensor(-1, dtype=I8), name="uint8_vs_int8")
        case(f"aten::{op}.Tensor_out", torch.tensor([0.1, 1 / 3, 2.0], dtype=F64), torch.tensor([0.1, 1 / 3, 2.0]),
             name="double_vs_float")
        case(f"aten::{op}.Scalar_out", r(2, 3, dtype=I32, lo=-2, hi=3), 1)
        case(f"aten::{op}.Scalar_out", sp, 0.5, name="special")
        case(f"aten::{op}.Scalar_out", torch.tensor([44, -5, 100], dtype=I8), 300, name="int8_wrapped_scalar")
        case(f"aten::{op}.Scalar_out", r(4, dtype=I64), 0.5, name="int_vs_float")
    for op in ("logical_and", "logical_or", "logical_xor"):
        case(f"aten::{op}.out", r(3, 4, dtype=BOOL), r(4, dtype=BOOL))
        case(f"aten::{op}.out", sp, r(16, dtype=I32, lo=-1, hi=2), name="float_int")
    for op in ("and", "or", "xor"):
        case(f"aten::bitwise_{op}.Tensor_out", r(3, 4, dtype=I32, lo=-100, hi=100), r(4, dtype=I16, lo=-100, hi=100))
        case(f"aten::bitwise_{op}.Tensor_out", r(5, dtype=BOOL), r(5, dtype=BOOL), name="bool")
        case(f"aten::bitwise_{op}.Scalar_out", r(5, dtype=U8, lo=0, hi=255), 0x5A)
        case(f"aten::bitwise_{op}.Scalar_out", r(5, dtype=BOOL), True, name="bool")
    for op in ("left_shift", "right_shift"):
        case(f"aten::bitwise_{op}.Tensor_out", r(6, dtype=I32, lo=-1000, hi=1000), r(6, dtype=I32, lo=0, hi=10))
        case(f"aten::bitwise_{op}.Tensor_out", r(6, dtype=I8, lo=-100, hi=100), r(6, dtype=I8, lo=0, hi=7),
             name="int8")
        case(f"aten::bitwise_{op}.Tensor_Scalar_out", r(6, dtype=I64, lo=-1000, hi=1000), 3)
        case(f"aten::bitwise_{op}.Tensor_Scalar_out", r(6, dtype=U8, lo=0, hi=255), 2, name="uint8")
    # allclose is in custom_ops.yaml but not in the 1.5.1 wheel: expected values follow op_allclose.cpp
    # (equal_nan is ignored; a non-finite error, NaN or inf - inf, is never close; non-floats compare bytes)
    a = torch.tensor([1.0, 2.0, 3.0])
    for op, wrap in (("aten::allclose.out", lambda v: torch.tensor(v)), ("aten::allclose.Tensor",
                                                                          lambda v: torch.tensor([v]))):
        case(op, a, a + 1e-6, 1e-5, 1e-8, False, False, expect=wrap(True), name="close")
        case(op, a, a + 1e-3, 1e-5, 1e-8, False, False, expect=wrap(False), name="far")
        case(op, torch.tensor([math.nan]), torch.tensor([math.nan]), 1e-5, 1e-8, True, False, expect=wrap(False),
             name="nan_equal_nan_ignored")
        case(op, torch.tensor([math.inf]), torch.tensor([math.inf]), 1e-5, 1e-8, False, False, expect=wrap(False),
             name="inf")
        case(op, torch.tensor([1, 2], dtype=I32), torch.tensor([1, 2], dtype=I32), 0.1, 0.1, False, False,
             expect=wrap(True), name="int_equal")
        case(op, torch.tensor([1, 2], dtype=I32), torch.tensor([1, 3], dtype=I32), 1.0, 1.0, False, False,
             expect=wrap(False), name="int_bytes_differ")
    case("aten::where.self_out", r(3, 4, dtype=BOOL), r(3, 4), r(4))
    case("aten::where.self_out", r(3, 1, dtype=BOOL), r(1, 4, dtype=I32), r(3, 4, dtype=F64), name="promote")
    case("aten::where.self_out", r(2, 3, dtype=U8, lo=0, hi=2).bool(), T(r(3, 2)).t.t(), r(()), name="0d_other")


@family
def activations():
    sp = special()
    case("aten::relu.out", r(3, 4))
    case("aten::relu.out", sp, name="special")
    case("aten::relu.out", r(5, dtype=I32), name="int")
    for approx in ("none", "tanh"):
        case("aten::gelu.out", r(3, 4, lo=-4, hi=4), approx, name=approx)
        case("aten::gelu.out", sp, approx, name=f"special_{approx}")
        case("aten::gelu.out", r(6, dtype=F16, lo=-4, hi=4), approx, name=f"half_{approx}")
        case("aten::gelu.out", r(6, dtype=F64, lo=-4, hi=4), approx, name=f"double_{approx}")
    case("aten::glu.out", r(3, 4), -1)
    case("aten::glu.out", T(r(4, 3)), 0, name="dim0_strided")
    case("aten::glu.out", r(2, 6, dtype=F16), 1, name="half")
    case("aten::elu.out", r(3, 4), 1, 1, 1)
    case("aten::elu.out", sp, 0.5, 2.0, 1.5, name="special")
    case("aten::elu.out", r(5, dtype=F64), 1.2, 1.0507, 1, name="double_selu")
    case("aten::leaky_relu.out", r(3, 4), 0.01)
    case("aten::leaky_relu.out", sp, 0.2, name="special")
    case("aten::leaky_relu.out", r(4, dtype=BF16), 0.1, name="bf16")
    case("aten::hardtanh.out", r(3, 4), -1, 1)
    case("aten::hardtanh.out", sp, -0.5, 2.0, name="special")
    case("aten::hardtanh.out", r(6, dtype=I32, lo=-10, hi=10), -3, 4, name="int")
    case("aten::logit.out", r(3, 4, lo=0, hi=1), None)
    case("aten::logit.out", torch.tensor([0.0, 1e-8, 0.3, 0.9999, 1.0]), 1e-6, name="eps")
    case("aten::logit.out", r(4, dtype=F64, lo=0, hi=1), 0.25, name="double_eps")
    case("aten::clamp.out", r(3, 4), -0.5, 0.5)
    case("aten::clamp.out", sp, None, 1.0, name="special_max_only")
    case("aten::clamp.out", r(5, dtype=I32, lo=-10, hi=10), -3, None, name="int_min_only")
    case("aten::clamp.out", r(5, dtype=I32, lo=-10, hi=10), -2.5, 3.5, name="int_float_bounds")
    case("aten::clamp.Tensor_out", r(3, 4), r(4, lo=-1, hi=0), r(3, 1, lo=0, hi=1))
    case("aten::clamp.Tensor_out", sp, None, torch.tensor(0.25), name="max_only_0d")
    case("aten::clamp.Tensor_out", r(5, dtype=I32, lo=-10, hi=10), r(5, dtype=F32, lo=-3, hi=0), None,
         name="int_float_min")


@family
def reductions():
    x = r(3, 4, 5)
    sp = special().reshape(4, 4)
    case("aten::sum.IntList_out", x, [1, -1], False, None)
    case("aten::sum.IntList_out", T(r(4, 6)), None, True, None, name="all_keepdim_strided")
    case("aten::sum.IntList_out", r(3, 5, dtype=I8, lo=-100, hi=100), [0], False, None, name="int8_to_int64")
    case("aten::sum.IntList_out", r(3, 5, dtype=I32), [1], True, I32, name="dtype_int32")
    case("aten::sum.IntList_out", r(2, 3, dtype=BOOL), [], False, None, name="bool_empty_dimlist")
    case("aten::sum.IntList_out", torch.zeros(0, 3), [0], False, None, name="empty")
    case("aten::sum.IntList_out", r(4, 8, dtype=F16), [1], False, None, name="half")
    case("aten::mean.out", x, [0, 2], True, None)
    case("aten::mean.out", r(4, 6, dtype=BF16), [-1], False, None, name="bf16")
    case("aten::mean.out", r(3, 4, dtype=I32), [1], False, F32, name="int_dtype_float")
    case("aten::mean.out", torch.zeros(0, 3), [0], False, None, name="empty_nan")
    case("aten::mean.dtype_out", x, None)
    case("aten::mean.dtype_out", r(5, dtype=F16), F32, name="half_to_float")
    case("aten::prod.int_out", r(3, 4, lo=0.5, hi=1.5), 1, False, None)
    case("aten::prod.int_out", r(3, 4, dtype=I32, lo=-5, hi=5), -1, True, None, name="int_keepdim")
    case("aten::prod.int_out", torch.ones(2, 0), 1, False, None, name="empty_dim")
    case("aten::prod.out", r(6, lo=0.5, hi=1.5), None)
    case("aten::prod.out", r(2, 3, dtype=I8, lo=-3, hi=4), None, name="int8_to_int64")
    case("aten::prod.out", r(3, dtype=BOOL), None, name="bool")
    for op in ("amax", "amin"):
        case(f"aten::{op}.out", x, [1], False)
        case(f"aten::{op}.out", sp, [-1], True, name="nan")
        case(f"aten::{op}.out", r(3, 4, dtype=I32), [], False, name="all_int")
        case(f"aten::{op}.out", T(r(4, 3, dtype=F16)), [0, 1], False, name="half_strided")
    for op in ("max", "min"):
        case(f"aten::{op}.unary_out", x)
        case(f"aten::{op}.unary_out", special(), name="nan")
        case(f"aten::{op}.unary_out", r(5, dtype=I16), name="int16")
        case(f"aten::{op}.unary_out", torch.zeros(0), name="empty")
        case(f"aten::{op}.dim_{op}", x, 1, False)
        case(f"aten::{op}.dim_{op}", sp, 0, True, name="nan")
        case(f"aten::{op}.dim_{op}", torch.tensor([[1, 3, 3], [2, 2, 1]], dtype=I32), -1, False, name="ties")
        case(f"aten::{op}.dim_{op}", torch.tensor(3.0), 0, False, name="0d")
    for op in ("argmax", "argmin"):
        case(f"aten::{op}.out", x, 1, False)
        case(f"aten::{op}.out", sp, None, False, name="nan_flat")
        case(f"aten::{op}.out", torch.tensor([[1, 3, 3], [2, 2, 1]], dtype=I32), -1, True, name="ties_keepdim")
        case(f"aten::{op}.out", T(r(3, 4)), None, True, name="flat_keepdim_strided")
    case("aten::any.all_out", r(3, 4, dtype=BOOL))
    case("aten::any.all_out", torch.zeros(3, 2), name="float_false")
    case("aten::any.all_out", torch.zeros(0, dtype=I32), name="empty")
    case("aten::any.dims_out", r(3, 4, 2, dtype=I32, lo=0, hi=2), [0, 2], False)
    case("aten::any.dims_out", r(3, 4, dtype=BOOL), None, True, name="all_keepdim")
    case("aten::any.out", r(3, 4, dtype=I8, lo=0, hi=2), 1, False)
    case("aten::any.out", special().reshape(2, 8), -2, True, name="float_keepdim")
    case("aten::var.correction_out", x, [1], 1, False)
    case("aten::var.correction_out", x, None, 0, True, name="all_population")
    case("aten::var.correction_out", r(1, 3), [0], None, False, name="single_nan")
    case("aten::var.correction_out", r(4, 5, dtype=F64), [0, 1], 2.5, False, name="double_frac")
    case("aten::var.out", x, [2], True, False)
    case("aten::var.out", T(r(5, 4)), [0], False, True, name="biased_strided")
    case("aten::var_mean.correction_out", x, [1], 1, False)
    case("aten::var_mean.correction_out", r(6, dtype=F16), None, 0, True, name="half")
    case("aten::cumsum.out", x, 1, None)
    case("aten::cumsum.out", r(4, 3, dtype=I32), -2, None, name="int")
    case("aten::cumsum.out", r(5, dtype=BOOL), 0, None, name="bool")
    case("aten::cumsum.out", r(6, dtype=I8, lo=-100, hi=100), 0, I16, name="int8_to_int16")
    case("aten::cumsum.out", torch.tensor(2.5), 0, None, name="0d")
    for op in ("_softmax", "_log_softmax"):
        case(f"aten::{op}.out", r(3, 5, lo=-5, hi=5), -1, False)
        case(f"aten::{op}.out", T(r(4, 3, lo=-5, hi=5)), 0, False, name="dim0_strided")
        case(f"aten::{op}.out", r(2, 6, dtype=F16, lo=-5, hi=5), 1, False, name="half")
        case(f"aten::{op}.out", torch.tensor([[0.0, -math.inf, 1.0], [100.0, 100.0, -100.0]]), 1, False,
             name="inf")
    case("aten::topk.values", torch.randperm(20, generator=_GEN).float().reshape(4, 5), 3, -1, True, True)
    case("aten::topk.values", torch.randperm(20, generator=_GEN).float().reshape(4, 5), 2, 0, False, True,
         name="smallest_dim0")
    case("aten::topk.values", torch.tensor([1.0, math.nan, 3.0, -1.0]), 2, 0, True, True, name="nan_largest")
    case("aten::topk.values", torch.randperm(12, generator=_GEN).reshape(3, 4).to(I32), 4, 1, True, True,
         name="int_k_full")


@family
def linalg():
    case("aten::mm.out", r(3, 4), r(4, 5))
    case("aten::mm.out", T(r(3, 4)), T(r(4, 5)), name="strided")
    case("aten::mm.out", r(2, 3, dtype=I32, lo=-5, hi=5), r(3, 2, dtype=I32, lo=-5, hi=5), name="int")
    case("aten::mm.out", r(2, 0), r(0, 3), name="empty_inner")
    case("aten::bmm.out", r(2, 3, 4), r(2, 4, 5))
    case("aten::bmm.out", r(2, 3, 4, dtype=F16), r(2, 4, 2, dtype=F16), name="half")
    case("aten::addmm.out", r(5), r(3, 4), r(4, 5), 1, 1)
    case("aten::addmm.out", r(3, 5), r(3, 4), r(4, 5), 0.5, 2.0, name="beta_alpha")
    case("aten::addmm.out", torch.tensor([math.nan, 1.0]), r(2, 3), r(3, 2), 0, 1, name="beta0_nan")
    case("aten::addmm.out", r(1, 2, dtype=F64), T(r(2, 3, dtype=F64)), r(3, 2, dtype=F64), 1, -1, name="double")
    case("aten::linear.out", r(3, 4), r(5, 4), r(5))
    case("aten::linear.out", r(2, 3, 4), r(6, 4), None, name="3d_no_bias")
    case("aten::_cdist_forward.out", r(3, 4), r(5, 4), 2.0, None)
    case("aten::_cdist_forward.out", r(2, 3, 4), r(1, 5, 4), 1.0, None, name="broadcast_p1")
    case("aten::_cdist_forward.out", r(3, 2), r(4, 2), 0.0, None, name="p0")
    case("aten::_cdist_forward.out", r(3, 2), r(4, 2), math.inf, None, name="pinf")
    case("aten::_cdist_forward.out", r(3, 2, dtype=F64), r(4, 2, dtype=F64), 3.0, None, name="p3_double")
    case("aten::_pdist_forward.out", r(5, 3), 2.0)
    case("aten::_pdist_forward.out", r(4, 3), 1.5, name="p1.5")
    case("aten::_pdist_forward.out", r(4, 2), math.inf, name="pinf")


@family
def shapes():
    x = r(2, 3, 4)
    case("aten::view_copy.out", x, [4, -1])
    case("aten::view_copy.out", T(r(3, 4)), [12], name="strided")
    case("aten::view_copy.out", torch.tensor(5.0), [1, 1], name="0d")
    case("aten::permute_copy.out", x, [2, 0, 1])
    case("aten::permute_copy.out", r(2, 3, dtype=I8), [-1, -2], name="neg")
    case("aten::transpose_copy.int_out", x, 0, -1)
    case("aten::transpose_copy.int_out", r(3, 2, dtype=BOOL), 1, 0, name="bool")
    case("aten::t_copy.out", r(3, 4))
    case("aten::t_copy.out", r(5), name="1d")
    case("aten::expand_copy.out", r(3, 1), [2, 3, 4], False)
    case("aten::expand_copy.out", r(1, 4, dtype=I32), [-1, 4], False, name="minus_one")
    case("aten::squeeze_copy.dim_out", r(3, 1, 2), 1)
    case("aten::squeeze_copy.dim_out", r(3, 2), -1, name="not_one")
    case("aten::squeeze_copy.dims_out", r(1, 3, 1, 2), [0, -2])
    case("aten::squeeze_copy.dims_out", torch.tensor(1.0), [0], name="0d")
    case("aten::unsqueeze_copy.out", r(3, 2), 1)
    case("aten::unsqueeze_copy.out", r(3, 2), -1, name="neg")
    case("aten::cat.out", [r(2, 3), r(1, 3)], 0)
    case("aten::cat.out", [r(2, 3, dtype=I32), r(2, 1, dtype=I64), r(2, 2, dtype=I32)], -1, name="promote_neg")
    case("aten::cat.out", [r(2, 3), torch.zeros(0), r(1, 3)], 0, name="skip_empty_1d")
    case("aten::stack.out", [r(2, 3), r(2, 3)], 0)
    case("aten::stack.out", [r(2, 3, dtype=I8), r(2, 3, dtype=I8)], -1, name="neg_dim")
    case("aten::split_with_sizes_copy.out", r(5, 2), [2, 3], 0)
    case("aten::split_with_sizes_copy.out", r(2, 6, dtype=I32), [1, 0, 5], -1, name="zero_size")
    case("aten::split_copy.Tensor_out", r(5, 2), 2, 0)
    case("aten::split_copy.Tensor_out", r(2, 6), 3, 1, name="even")
    case("aten::unbind_copy.int_out", r(3, 2), 0)
    case("aten::unbind_copy.int_out", r(2, 3, dtype=BOOL), -1, name="neg_dim")
    case("aten::slice_copy.Tensor_out", r(6, 3), 0, 1, 5, 2)
    case("aten::slice_copy.Tensor_out", r(3, 6), -1, -4, None, 1, name="neg_start")
    case("aten::slice_copy.Tensor_out", r(3, 4), 1, None, 100, 3, name="end_clamped")
    case("aten::select_copy.int_out", r(3, 4), 1, -1)
    case("aten::select_copy.int_out", r(3, 4, dtype=I32), 0, 2, name="int")
    case("aten::copy.out", r(2, 3), r(3), False)
    case("aten::copy.out", r(2, 3, dtype=I32), r(2, 3), False, name="float_to_int")
    case("aten::copy_", r(2, 3), r(3), False)
    case("aten::copy_", r(2, 3, dtype=F16), r(2, 1, dtype=F64), False, name="cast_broadcast")
    for op in ("clone.out", "alias_copy.out", "detach_copy.out", "lift_fresh_copy.out"):
        extra = [None] if op == "clone.out" else []
        case(f"aten::{op}", r(2, 3), *extra)
        case(f"aten::{op}", T(r(3, 2, dtype=I16)), *extra, name="strided")
    case("aten::_to_copy.out", r(2, 3), False, None, eager=lambda x, nb, mf: x.clone())
    case("aten::_to_copy.out", T(r(3, 4)), False, torch.contiguous_format, eager=lambda x, nb, mf: x.clone(),
         name="strided")
    case("aten::_to_copy.out", r(3), False, None, eager=lambda x, nb, mf: x.to(torch.int32), et=False,
         name="float_to_int32")
    case("dim_order_ops::_to_dim_order_copy.out", r(2, 3, 4, 5), False, [0, 2, 3, 1],
         eager=lambda x, nb, do: x.clone())
    case("dim_order_ops::_to_dim_order_copy.out", r(4), False, None,
         eager=lambda x, nb, do: x.to(torch.float16), et=False, name="to_half")
    case("dim_order_ops::_clone_dim_order.out", r(2, 3), False, None)
    case("dim_order_ops::_clone_dim_order.out", T(r(2, 3, 4, 5)), False, [0, 2, 3, 1], name="channels_last")
    for op in ("_h2d_copy", "_d2h_copy"):
        case(f"et_copy::{op}.out", r(2, 3), eager=lambda x: x.clone(), name="float")
        case(f"et_copy::{op}.out", r(4, dtype=I64), eager=lambda x: x.clone(), name="int")


@family
def layouts():
    case("aten::flip.out", r(3, 4), [0, 1])
    case("aten::flip.out", r(2, 3, 2, dtype=I32), [-1], name="neg")
    case("aten::roll.out", r(3, 4), [1, -2], [0, 1])
    case("aten::roll.out", r(2, 5), [7], [-1], name="wrap")
    case("aten::roll.out", r(2, 3), [2, 1], [1, 1], name="same_dim_twice")
    case("aten::repeat.out", r(2, 3), [2, 1])
    case("aten::repeat.out", r(3, dtype=I32), [2, 2], name="more_dims")
    case("aten::tril.out", r(4, 5), 0)
    case("aten::tril.out", r(2, 3, 4, dtype=I32), -1, name="batch_neg")
    case("aten::tril.out", r(3, 3), 5, name="big_diag")
    case("aten::diagonal_copy.out", r(4, 5), 0, 0, 1)
    case("aten::diagonal_copy.out", r(2, 3, 4), 1, -1, 0, name="offset_neg_dims")
    case("aten::diagonal_copy.out", r(3, 3), -5, 0, 1, name="empty")
    case("aten::narrow_copy.out", r(5, 3), 0, 1, 3)
    case("aten::narrow_copy.out", r(3, 6), -1, -4, 2, name="neg_start")
    case("aten::unfold_copy.out", r(7), 0, 3, 2)
    case("aten::unfold_copy.out", r(2, 6, 3), 1, 2, 2, name="3d")
    case("aten::as_strided_copy.out", r(4, 4), [2, 2], [1, 2], None)
    case("aten::as_strided_copy.out", r(12), [3, 2], [3, 1], 2, name="offset")
    case("aten::pixel_shuffle.out", r(1, 8, 2, 3), 2)
    case("aten::pixel_shuffle.out", r(2, 9, 2, 2, dtype=I32), 3, name="int")
    case("aten::pixel_unshuffle.out", r(1, 2, 4, 6), 2)
    case("aten::pixel_unshuffle.out", r(3, 6, 3), 3, name="3d")
    case("aten::select_scatter.out", r(3, 4), r(4), 0, 1)
    case("aten::select_scatter.out", r(3, 4, dtype=I32), r(3, dtype=I32), -1, -1, name="neg")
    case("aten::slice_scatter.out", r(6, 3), r(2, 3), 0, 1, 5, 2)
    case("aten::slice_scatter.out", r(3, 4), r(3, 4), 1, None, None, 1, name="full")
    case("aten::constant_pad_nd.out", r(2, 3), [1, 2], 0.5)
    case("aten::constant_pad_nd.out", r(2, 3, 4, dtype=I32), [1, 0, 0, 2, 1, 1], 7, name="3dims_int")
    case("aten::constant_pad_nd.out", r(3, 4), [-1, 1], 0, name="negative_crop", et=False)
    for mode in ("reflection", "replication"):
        case(f"aten::{mode}_pad1d.out", r(2, 5), [2, 1])
        case(f"aten::{mode}_pad1d.out", r(1, 2, 4), [0, 3], name="3d")
        case(f"aten::{mode}_pad2d.out", r(1, 4, 5), [1, 2, 2, 1])
        case(f"aten::{mode}_pad2d.out", r(2, 1, 3, 3, dtype=F64), [2, 0, 1, 1], name="4d_double")
        case(f"aten::{mode}_pad3d.out", r(1, 3, 3, 4), [1, 1, 2, 0, 0, 2])
        case(f"aten::{mode}_pad3d.out", r(1, 1, 2, 3, 3), [0, 1, 1, 0, 1, 1], name="5d")


@family
def indexing_ops():
    w = r(6, 3)
    case("aten::embedding.out", w, torch.tensor([[0, 5], [2, 2]]), -1, False, False)
    case("aten::embedding.out", w, torch.tensor([3, 1], dtype=I32), -1, False, False, name="int32")
    case("aten::embedding.out", r(4, 2, dtype=F16), torch.tensor(2), -1, False, False, name="0d_index")
    case("aten::index_select.out", r(4, 3), 0, torch.tensor([3, 0, 3]))
    case("aten::index_select.out", r(2, 5, dtype=I32), -1, torch.tensor([4, 1], dtype=I32), name="int32_neg_dim")
    case("aten::gather.out", r(3, 4), 1, torch.tensor([[0, 3], [1, 1], [2, 0]]), False)
    case("aten::gather.out", r(3, 4), 0, torch.tensor([[2, 0, 1]]), False, name="smaller_index")
    case("aten::index.Tensor_out", r(4, 5), [torch.tensor([0, 3, 3]), torch.tensor([1, 0, 4])])
    case("aten::index.Tensor_out", r(3, 4, 5), [None, torch.tensor([[0, 2], [1, 3]])], name="none_first")
    case("aten::index.Tensor_out", r(3, 4), [r(3, 4, dtype=BOOL)], name="bool_mask")
    case("aten::index.Tensor_out", r(3, 4, 2), [torch.tensor([1, 0]), None, torch.tensor([1, 1])],
         name="separated")
    case("aten::index_put.out", r(4, 3), [torch.tensor([0, 2])], r(2, 3), False)
    case("aten::index_put.out", torch.zeros(5), [torch.tensor([1, 1, 3])], torch.tensor([1.0, 2.0, 3.0]), True,
         name="accumulate_dup")
    case("aten::index_put.out", r(3, 4), [r(3, 4, dtype=BOOL)], torch.tensor(9.0), False, name="mask_scalar")
    case("aten::index_put_", r(4, 3), [torch.tensor([3, 1])], r(2, 3), False)
    case("aten::index_put_", torch.zeros(2, 3, dtype=I32), [None, torch.tensor([0, 2])],
         torch.tensor([5, 6], dtype=I32), True, name="none_accumulate")
    case("aten::masked_fill.Scalar_out", r(3, 4), r(3, 4, dtype=BOOL), -1.5)
    case("aten::masked_fill.Scalar_out", r(3, 4, dtype=I32), r(4, dtype=BOOL), 7, name="broadcast_int")
    case("aten::masked_select.out", r(3, 4), r(3, 4, dtype=BOOL))
    case("aten::masked_select.out", r(3, 1), r(1, 4, dtype=BOOL), name="broadcast")
    case("aten::masked_scatter.out", r(3, 4), r(3, 4, dtype=BOOL), r(12))
    case("aten::masked_scatter.out", r(2, 3, dtype=I32), r(3, dtype=BOOL), r(2, 4, dtype=I32), name="broadcast")
    case("aten::scatter.src_out", r(3, 4), 1, torch.tensor([[0, 2], [3, 1], [1, 1]]), r(3, 2))
    case("aten::scatter.src_out", r(4, 3), 0, torch.tensor([[3, 0]]), r(2, 3), name="small_index_big_src")
    case("aten::scatter.value_out", r(3, 4), 1, torch.tensor([[0], [3], [2]]), 9.5)
    case("aten::scatter.value_out", r(3, 4, dtype=I32), -2, torch.tensor([[0, 1, 2, 0]]), 7, name="int")
    case("aten::scatter_add.out", r(3, 4), 1, torch.tensor([[0, 0], [3, 1], [1, 1]]), r(3, 2))
    case("aten::scatter_add.out", torch.zeros(5, dtype=I64), 0, torch.tensor([1, 1, 4]),
         torch.tensor([2, 3, 4, 5]), name="dup_int")
    # eager only: the one-op program's planner lets nonzero's dynamic output overlap its input, which
    # corrupts ExecuTorch's result (a memory-planning artefact, not the kernel's semantics)
    case("aten::nonzero.out", r(3, 4, dtype=I32, lo=0, hi=2), et=False)
    case("aten::nonzero.out", special(), name="float_1d", et=False)
    case("aten::nonzero.out", torch.zeros(2, 0, 3), name="empty", et=False)
    case("aten::repeat_interleave.Tensor_out", torch.tensor([2, 0, 3]), None)
    case("aten::repeat_interleave.Tensor_out", torch.tensor([1, 2], dtype=I32), 3, name="int32_output_size")


@family
def creation_ops():
    case("aten::full.out", [2, 3], 1.5, eager=lambda size, v: torch.full(size, v))
    case("aten::full.out", [4], 7, eager=lambda size, v: torch.full(size, v, dtype=torch.int32), name="int32")
    case("aten::full.out", [2, 2], True, eager=lambda size, v: torch.full(size, v), name="bool")
    case("aten::full_like.out", r(2, 3), 2.5, None, eager=lambda x, v, mf: torch.full_like(x, v))
    case("aten::full_like.out", r(2, 3, dtype=I8), -7, None, eager=lambda x, v, mf: torch.full_like(x, v),
         name="int8")
    case("aten::zeros.out", [2, 3], eager=lambda size: torch.zeros(size))
    case("aten::zeros.out", [0, 2], eager=lambda size: torch.zeros(size, dtype=torch.int64), name="empty_int")
    case("aten::ones.out", [3], eager=lambda size: torch.ones(size))
    case("aten::ones.out", [2, 2], eager=lambda size: torch.ones(size, dtype=torch.bool), name="bool")
    case("aten::fill.Scalar_out", r(2, 3), 4.25)
    case("aten::fill.Scalar_out", r(3, dtype=I16), 300, name="int16")
    case("aten::fill.Tensor_out", r(2, 3), torch.tensor(1.5))
    case("aten::fill.Tensor_out", r(4, dtype=I32), torch.tensor(2.9), name="float_into_int")
    case("aten::scalar_tensor.out", 3.5, eager=lambda s: torch.scalar_tensor(s))
    case("aten::scalar_tensor.out", 7, eager=lambda s: torch.scalar_tensor(s, dtype=torch.int64), name="int")
    case("aten::empty.out", [2, 3], None, check="shape", eager=lambda size, mf: torch.empty(size))
    case("aten::empty.out", [0, 4], None, check="shape", eager=lambda size, mf: torch.empty(size, dtype=I32),
         name="empty_int")
    case("dim_order_ops::_empty_dim_order.out", [2, 3], None, check="shape",
         eager=lambda size, do: torch.empty(size))
    case("dim_order_ops::_empty_dim_order.out", [1, 2, 3, 4], [0, 2, 3, 1], check="shape",
         eager=lambda size, do: torch.empty(size), name="channels_last")
    case("aten::arange.out", 5, eager=lambda e: torch.arange(e))
    case("aten::arange.out", 4.5, eager=lambda e: torch.arange(e), name="float_end")
    case("aten::arange.start_out", 1, 10, 3, eager=lambda a, b, c: torch.arange(a, b, c))
    case("aten::arange.start_out", 0.0, 1.0, 0.1, eager=lambda a, b, c: torch.arange(a, b, c), name="float_step")
    case("aten::arange.start_out", 5, -3, -2, eager=lambda a, b, c: torch.arange(a, b, c), name="negative")
    case("aten::rand.out", [3, 4], check="uniform", eager=lambda size: torch.rand(size))
    case("aten::rand.out", [100], check="uniform", eager=lambda size: torch.rand(size, dtype=F16), name="half")
    case("aten::randn.out", [3, 4], check="normal", eager=lambda size: torch.randn(size))
    case("aten::randn.out", [200], check="normal", eager=lambda size: torch.randn(size, dtype=F64), name="double")
    case("aten::native_dropout.out", r(3, 4), 0.5, False)
    case("aten::native_dropout.out", r(100), 0.3, True, check="dropout", name="train")
    case("aten::native_dropout.out", r(5), 1.0, True, name="p1",
         eager=lambda x, p, t: (torch.zeros_like(x), torch.zeros(x.shape, dtype=BOOL)))


@family
def norms():
    x = r(2, 3, 4, 5)
    w, b = r(3), r(3)
    mean, var = r(3), r(3, lo=0.5, hi=2)
    case("aten::native_layer_norm.out", r(2, 3, 8), [8], r(8), r(8), 1e-5)
    case("aten::native_layer_norm.out", x, [4, 5], None, None, 1e-3, name="2dims_no_affine")
    # ExecuTorch keeps double layer norm's statistics in float32 (summed sequentially): float-level agreement
    case("aten::native_layer_norm.out", r(3, 6, dtype=F64), [6], r(6, dtype=F64), None, 1e-5, name="double",
         tol=1e-6)
    case("aten::_native_batch_norm_legit_no_training.out", x, w, b, mean, var, 0.1, 1e-5)
    case("aten::_native_batch_norm_legit_no_training.out", r(4, 3), None, None, mean, var, 0.1, 1e-3,
         name="2d_no_affine")
    case("aten::_native_batch_norm_legit.out", x, w, b, mean, var, False, 0.1, 1e-5)
    case("aten::_native_batch_norm_legit.out", r(2, 3, 6), None, b, mean, var, False, 0.1, 1e-5, name="3d")
    case("aten::_native_batch_norm_legit.no_stats_out", x, w, b, True, 0.1, 1e-5)
    case("aten::_native_batch_norm_legit.no_stats_out", r(4, 3), None, None, True, 0.1, 1e-5, name="2d")
    case("aten::native_group_norm.out", r(2, 6, 4, 4), r(6), r(6), 2, 6, 16, 3, 1e-5)
    case("aten::native_group_norm.out", r(3, 4, 5), None, None, 3, 4, 5, 4, 1e-5, name="3d_no_affine")


@family
def conv_pools():
    case("aten::convolution.out", r(1, 3, 8, 8), r(4, 3, 3, 3), r(4), [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    case("aten::convolution.out", r(2, 4, 7, 6), r(6, 2, 3, 2), None, [2, 1], [1, 0], [1, 2], False, [0, 0], 2,
         name="groups_stride_dilation")
    case("aten::convolution.out", r(1, 4, 6, 6), r(4, 1, 3, 3), r(4), [1, 1], [1, 1], [1, 1], False, [0, 0], 4,
         name="depthwise")
    case("aten::convolution.out", r(2, 3, 10), r(5, 3, 3), r(5), [2], [1], [1], False, [0], 1, name="conv1d")
    case("aten::convolution.out", r(1, 4, 5, 5), r(4, 3, 3, 3), r(3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1,
         name="transposed")
    case("aten::convolution.out", r(1, 4, 4, 4), r(4, 2, 2, 3), None, [2, 1], [0, 1], [1, 1], True, [0, 0], 2,
         name="transposed_groups")
    case("aten::convolution.out", T(r(1, 3, 6, 6)), r(2, 3, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
         name="strided_input")
    case("aten::convolution_backward.out", r(2, 4, 6, 6), r(2, 3, 8, 8), r(4, 3, 3, 3), [4], [1, 1], [0, 0],
         [1, 1], False, [0, 0], 1, [True, True, True])
    case("aten::convolution_backward.out", r(1, 4, 4, 4), r(1, 4, 7, 7), r(4, 2, 3, 2), [4], [2, 2], [1, 1],
         [1, 2], False, [0, 0], 2, [True, True, True], name="groups_stride_dilation")
    case("aten::max_pool2d_with_indices.out", r(1, 2, 6, 6), [2, 2], [2, 2], [0, 0], [1, 1], False)
    case("aten::max_pool2d_with_indices.out", r(2, 7, 7), [3, 3], [2, 2], [1, 1], [1, 1], True, name="3d_ceil_pad")
    case("aten::max_pool2d_with_indices.out", r(1, 1, 7, 8), [2, 3], [], [0, 1], [2, 1], False,
         name="dilation_default_stride")
    case("aten::max_pool2d_with_indices_backward.grad_input", r(1, 2, 3, 3), r(1, 2, 6, 6), [2, 2], [2, 2], [0, 0],
         [1, 1], False, torch.randint(0, 36, (1, 2, 3, 3), generator=_GEN))
    case("aten::max_pool2d_with_indices_backward.grad_input", r(1, 2, 2), r(1, 4, 4), [3, 3], [1, 1], [0, 0],
         [1, 1], False, torch.tensor([[[5, 5], [6, 10]]]), name="overlap_3d")
    case("aten::avg_pool2d.out", r(1, 2, 6, 6), [2, 2], [2, 2], [0, 0], False, True, None)
    case("aten::avg_pool2d.out", r(2, 7, 7), [3, 3], [2, 2], [1, 1], True, False, None, name="3d_ceil_nopad_count")
    case("aten::avg_pool2d.out", r(1, 1, 5, 5), [2, 2], [], [1, 1], False, True, 3, name="divisor")
    case("aten::avg_pool2d.out", r(1, 1, 6, 5, dtype=F64), [2, 2], [2, 2], [0, 0], True, True, None,
         name="double_ceil")
    case("aten::_adaptive_avg_pool2d.out", r(1, 3, 8, 8), [2, 2])
    case("aten::_adaptive_avg_pool2d.out", r(2, 5, 7), [3, 2], name="3d_uneven")


@family
def images():
    case("aten::upsample_nearest2d.vec_out", r(1, 2, 3, 4), [6, 8], None)
    case("aten::upsample_nearest2d.vec_out", r(1, 1, 5, 7), [3, 4], None, name="downscale")
    case("aten::upsample_nearest2d.vec_out", r(2, 1, 3, 3, dtype=I32), None, [1.5, 2.5], name="scales_int")
    for ac in (False, True):
        case("aten::upsample_bilinear2d.vec_out", r(1, 2, 3, 4), [5, 7], ac, None, name=f"up_ac{int(ac)}")
        case("aten::upsample_bilinear2d.vec_out", r(1, 1, 6, 8), [4, 3], ac, None, name=f"down_ac{int(ac)}")
    case("aten::upsample_bilinear2d.vec_out", r(1, 2, 4, 4), None, False, [2.0, 1.5], name="scales")
    case("aten::_upsample_bilinear2d_aa.out", r(1, 2, 8, 8), [4, 3], False, None, None)
    case("aten::_upsample_bilinear2d_aa.out", r(1, 1, 4, 5), [7, 9], False, None, None, name="upscale")
    case("aten::_upsample_bilinear2d_aa.out", r(1, 1, 9, 6), [4, 4], True, None, None, name="align_corners")
    grid = r(2, 3, 4, 2, lo=-1.2, hi=1.2)
    for mode in (0, 1, 2):
        for pad in (0, 1, 2):
            case("aten::grid_sampler_2d.out", r(2, 2, 5, 6), grid, mode, pad, mode == 1,
                 name=f"mode{mode}_pad{pad}")


@family
def spectral_ops():
    case("aten::_fft_r2c.out", r(4, 8), [1], 0, True)
    case("aten::_fft_r2c.out", r(4, 6), [0, 1], 2, False, name="2d_full_byn")
    case("aten::_fft_r2c.out", r(8, dtype=F64), [0], 1, True, name="double_ortho")
    case("aten::_fft_c2r.out", r(4, 5, dtype=C64), [1], 2, 8)
    case("aten::_fft_c2r.out", r(3, 4, dtype=C64), [0, 1], 0, 7, name="2d_unnormalized")
    case("aten::view_as_real_copy.out", r(2, 3, dtype=C64))
    case("aten::view_as_real_copy.out", r(4, dtype=C64), name="1d")
    case("aten::_conj_physical.out", r(2, 3, dtype=C64))
    case("aten::_conj_physical.out", r(2, 3), name="real")


def _qadd(a, sa, za, mina, maxa, b, sb, zb, minb, maxb, so, zo, mino, maxo):
    """ExecuTorch's quantized add (op_add.cpp): dequantize in double with float scales, add in float,
    requantize with round-half-even (the op has no exportable functional form)."""
    f32 = lambda v: float(torch.tensor(v, dtype=F32))  # noqa: E731
    dq = ((a.long() - za).double() * f32(sa)).float() + ((b.long() - zb).double() * f32(sb)).float()
    inv = torch.tensor(1.0, dtype=F32) / torch.tensor(so, dtype=F32)
    return (torch.round(dq * inv) + zo).clamp(mino, maxo).to(a.dtype)


@family
def quantized_ops():
    qd = "quantized_decomposed::"
    ties = torch.tensor([0.25, 0.75, -0.25, -0.75, 1.25, 63.9, -64.1, 0.0, 100.0, -100.0])
    case(qd + "quantize_per_tensor.out", ties, 0.5, 0, -128, 127, I8, name="ties_int8")
    case(qd + "quantize_per_tensor.out", r(3, 4, lo=-1, hi=3), 0.0157, 64, 0, 255, U8, name="uint8_zp")
    case(qd + "quantize_per_tensor.out", special(), 0.1, 3, -128, 127, I8, name="special")
    case(qd + "quantize_per_tensor.out", r(2, 3), 0.02, -5, -100, 100, I16, name="int16")
    case(qd + "quantize_per_tensor.Tensor_out", r(4, 3), torch.tensor([0.03], dtype=F64),
         torch.tensor([2]), -128, 127, I8)
    case(qd + "quantize_per_tensor.Tensor_out", r(5), torch.tensor(0.1, dtype=F64), torch.tensor(128), 0, 255, U8,
         name="0d_params_uint8")
    case(qd + "quantize_per_channel.out", r(4, 3), r(4, dtype=F64, lo=0.01, hi=0.05), r(4, dtype=I64, lo=-3, hi=3),
         0, -128, 127, I8)
    case(qd + "quantize_per_channel.out", r(2, 3, 5), r(5, dtype=F64, lo=0.01, hi=0.05), torch.zeros(5, dtype=I64),
         -1, -127, 127, I8, name="last_axis")
    case(qd + "quantize_per_token.out", r(2, 3, 4), r(2, 3, 1, dtype=F64, lo=0.01, hi=0.05),
         r(2, 3, 1, dtype=I64, lo=-3, hi=3), -128, 127, I8)
    case(qd + "quantize_per_token.out", r(3, 8), r(3, 1, dtype=F64, lo=0.01, hi=0.05),
         torch.zeros(3, 1, dtype=I64), -128, 127, I8, name="2d")
    q8 = r(3, 4, dtype=I8, lo=-128, hi=128)
    case(qd + "dequantize_per_tensor.out", q8, 0.05, 3, -128, 127, I8, None)
    case(qd + "dequantize_per_tensor.out", r(5, dtype=U8, lo=0, hi=256), 0.0157, 128, 0, 255, U8, None,
         name="uint8")
    case(qd + "dequantize_per_tensor.out", q8, 0.1, -2, -128, 127, I8, F16, name="to_half")
    case(qd + "dequantize_per_tensor.Tensor_out", q8, torch.tensor([0.05], dtype=F64), torch.tensor([1]),
         -128, 127, I8, None)
    case(qd + "dequantize_per_tensor.Tensor_out", r(2, 2, dtype=I32, lo=-1000, hi=1000), torch.tensor(0.001, dtype=F64),
         torch.tensor(0), -2 ** 31, 2 ** 31 - 1, I32, None, name="int32")
    case(qd + "dequantize_per_channel.out", q8, r(4, dtype=F64, lo=0.01, hi=0.1), r(4, dtype=I64, lo=-3, hi=3), 1,
         -128, 127, I8, None)
    case(qd + "dequantize_per_channel.out", q8, r(4, lo=0.01, hi=0.1), None, -1, -128, 127, I8, None,
         name="float_scales_no_zp")
    case(qd + "dequantize_per_channel.out", r(2, 3, 2, dtype=U8, lo=0, hi=256), r(2, dtype=F64, lo=0.01, hi=0.1),
         r(2, dtype=I64, lo=100, hi=150), 0, 0, 255, U8, None, name="uint8_axis0")
    case(qd + "dequantize_per_token.out", r(2, 3, 4, dtype=I8, lo=-128, hi=128),
         r(2, 3, 1, dtype=F64, lo=0.01, hi=0.05), r(2, 3, 1, dtype=I64, lo=-3, hi=3), -128, 127, I8, F32)
    case(qd + "dequantize_per_token.out", r(3, 5, dtype=I8, lo=-128, hi=128), r(3, 1, dtype=F64, lo=0.01, hi=0.05),
         torch.zeros(3, 1, dtype=I64), -128, 127, I8, F32, name="2d")
    case(qd + "choose_qparams.Tensor_out", r(4, 5, lo=-2, hi=3), -128, 127, 1e-7, I8)
    case(qd + "choose_qparams.Tensor_out", r(10, lo=0.5, hi=4), 0, 255, 1e-7, U8, name="positive_uint8")
    case(qd + "choose_qparams.Tensor_out", r(6, lo=-1e-4, hi=2e-4), -128, 127, 1e-7, I8, name="tiny_range")
    case(qd + "choose_qparams.Tensor_out", torch.zeros(4), -128, 127, 1e-7, I8, name="zeros")
    case(qd + "choose_qparams.Tensor_out", r(5, lo=-3, hi=-1), -128, 127, 1e-7, I8, name="negative")
    tok = r(3, 4, 8, lo=-2, hi=2)
    tok[0, 0] = 0.0
    tok[1, 1] = tok[1, 1].abs() * 1e-6
    case(qd + "choose_qparams_per_token_asymmetric.out", tok, F32)
    case(qd + "choose_qparams_per_token_asymmetric.out", r(2, 16, lo=0, hi=5), F32, name="positive_2d")
    qa, qb = r(3, 4, dtype=U8, lo=0, hi=256), r(3, 4, dtype=U8, lo=0, hi=256)
    case(qd + "add.out", qa, 0.02, 120, 0, 255, qb, 0.03, 130, 0, 255, 0.05, 128, 0, 255, eager=_qadd)
    case(qd + "add.out", qa, 0.1, 0, 0, 255, qb, 0.1, 0, 0, 255, 0.07, 10, 20, 200, eager=_qadd, name="clamped")
    w8 = r(10, 8, dtype=I8, lo=-128, hi=128)
    idx = torch.tensor([[0, 9, 3], [3, 3, 1]])
    case(qd + "embedding_byte.out", w8, r(10, lo=0.01, hi=0.1), None, -128, 127, idx)
    case(qd + "embedding_byte.out", w8, r(10, 2, lo=0.01, hi=0.1), r(10, 2, lo=-3, hi=3).round(), -128, 127,
         torch.tensor([7, 2]), name="groups_zp")
    case(qd + "embedding_byte.dtype_out", w8, r(10, lo=0.01, hi=0.1), None, -128, 127, idx, F32)
    case(qd + "embedding_byte.dtype_out", w8, r(10, 4, dtype=F16, lo=0.01, hi=0.1), None, -128, 127,
         torch.tensor([5]), F16, name="half")
    w4 = r(10, 4, dtype=U8, lo=0, hi=256)
    case(qd + "embedding_4bit.out", w4, r(10, lo=0.01, hi=0.1), None, -8, 7, idx)
    case(qd + "embedding_4bit.out", w4, r(10, 2, lo=0.01, hi=0.1), r(10, 2, lo=-2, hi=2).round(), -8, 7,
         torch.tensor([9, 0, 4]), name="groups_zp")
    case(qd + "embedding_4bit.dtype_out", w4, r(10, 4, lo=0.01, hi=0.1), None, -8, 7, idx, F32)
    case(qd + "embedding_4bit.dtype_out", w4, r(10, dtype=F16, lo=0.01, hi=0.1), None, -8, 7,
         torch.tensor([1, 8]), F16, name="half")
    w2 = r(10, 2, dtype=U8, lo=0, hi=256)
    case(qd + "embedding_2bit.out", w2, r(10, lo=0.01, hi=0.1), None, -2, 1, idx)
    case(qd + "embedding_2bit.out", w2, r(10, 2, lo=0.01, hi=0.1), r(10, 2, lo=-1, hi=1).round(), -2, 1,
         torch.tensor([6, 6, 2]), name="groups_zp")
    case(qd + "embedding_2bit.dtype_out", w2, r(10, lo=0.01, hi=0.1), None, -2, 1, idx, F32)
    case(qd + "embedding_2bit.dtype_out", w2, r(10, 4, dtype=F16, lo=0.01, hi=0.1), None, -2, 1,
         torch.tensor([3]), F16, name="half")
    # no exportable functional form: the references are torch formulas of ExecuTorch's vec_quantized_matmul_*
    mm = lambda x, w, s, z: (x.float() @ (w.float() * s.float()[:, None])).to(x.dtype)  # noqa: E731
    lin = lambda x, w, s, z, d: x.float() @ (w.float() * s.float().reshape(w.shape[0], -1).repeat_interleave(  # noqa: E731
        -(-w.shape[1] // s.reshape(w.shape[0], -1).shape[1]), dim=1)[:, :w.shape[1]]).T
    case(qd + "mixed_mm.out", r(3, 4), r(4, 5, dtype=I8, lo=-128, hi=128), r(4, lo=0.01, hi=0.1), None, eager=mm)
    case(qd + "mixed_mm.out", r(2, 6, dtype=F16), r(6, 3, dtype=I8, lo=-128, hi=128),
         r(6, dtype=F16, lo=0.01, hi=0.1), None, eager=mm, name="half")
    case(qd + "mixed_linear.out", r(3, 8), r(5, 8, dtype=I8, lo=-128, hi=128), r(5, lo=0.01, hi=0.1), None, None,
         eager=lin)
    case(qd + "mixed_linear.out", r(2, 8), r(4, 8, dtype=I8, lo=-128, hi=128), r(4, 2, lo=0.01, hi=0.1), None,
         None, eager=lin, name="groups")


@family
def prim_ops():
    # Expected values follow kernels/prim_ops/register_prim_ops.cpp (C int64 arithmetic, IEEE doubles).
    p = "executorch_prim::"
    big = 2 ** 63 - 1
    for name, cases in {
        "add.Scalar": [((3, 4), 7), ((2, 0.5), 2.5), ((big, 1), -2 ** 63)],
        "sub.Scalar": [((3, 10), -7), ((1.5, 2), -0.5), ((-2 ** 63, 1), big)],
        "mul.Scalar": [((6, -7), -42), ((2, 0.25), 0.5), ((2 ** 62, 4), 0)],
        "floordiv.Scalar": [((-7, 2), -4), ((7, 2), 3), ((-7.5, 2.0), -4.0), ((0.0, 0.0), math.inf),
                            ((-1.0, 0), -math.inf), ((7, -2.5), -3.0)],
        "truediv.Scalar": [((7, 2), 3.5), ((1, 0), math.inf), ((-3.0, 4), -0.75)],
        "sym_float.Scalar": [((3,), 3.0), ((2.5,), 2.5)],
        "sym_int.Scalar": [((-2.7,), -2), ((5,), 5), ((3.9,), 3)],
        "eq.Scalar": [((3, 3), True), ((3, 3.0), True), ((True, False), False)],
        "gt.Scalar": [((3, 2.5), True), ((1, 2), False)],
        "lt.Scalar": [((3, 2.5), False), ((False, True), True)],
        "ge.Scalar": [((2, 2), True), ((1.5, 2), False)],
        "le.Scalar": [((2, 2), True), ((3, 2), False)],
        "neg.Scalar": [((5,), -5), ((-2.5,), 2.5), ((-2 ** 63,), -2 ** 63)],
        "sym_not.Scalar": [((True,), False), ((False,), True)],
        "sym_ite.Scalar": [((True, 1, 2), 1), ((False, 1.5, 2.5), 2.5)],
        "sym_max.Scalar": [((3, 9), 9), ((-3, -9), -3)],
        "sym_min.Scalar": [((3, 9), 3), ((-3, -9), -9)],
        "floordiv.int": [((-7, 2), -3), ((7, 2), 3), ((7, -2), -3)],
        "mod.int": [((-7, 3), -1), ((7, -3), 1), ((6, 3), 0)],
        "mod.Scalar": [((-7, 3), -1), ((7, 3), 1)],
        "ceil.Scalar": [((2.1,), 3), ((-2.1,), -2)],
        "round.Scalar": [((2.5,), 2), ((3.5,), 4), ((-0.5,), 0), ((1.6,), 2)],
        "trunc.Scalar": [((-2.7,), -2), ((2.7,), 2)],
    }.items():
        for k, (args, want) in enumerate(cases):
            case(p + name, *args, expect=want, name=f"c{k}")
    x = r(2, 3, 4)
    case("aten::sym_size.int", x, 1, expect=3)
    case("aten::sym_size.int", x, -1, expect=4, name="neg")
    case("aten::sym_numel", x, expect=24)
    case("aten::sym_numel", torch.zeros(0, 3), expect=0, name="empty")
    case("aten::_local_scalar_dense", torch.tensor([2.5]), expect=2.5)
    case("aten::_local_scalar_dense", torch.tensor(7, dtype=I32), expect=7, name="int")
    case("aten::_local_scalar_dense", torch.tensor([True]), expect=True, name="bool")
    case(p + "et_view.default", x, [4, -1], torch.zeros(4, 6), expect=x.reshape(4, 6))
    v = r(6, dtype=I32)
    case(p + "et_view.default", v, [2, 3], torch.zeros(2, 3, dtype=I32), expect=v.reshape(2, 3), name="int")
    src = r(2, 3)
    dst = r(4, 2, 3)
    case(p + "et_copy_index.tensor", dst, src, 2, expect=torch.cat([dst[:2], src[None]]))
    case(p + "et_copy_index.tensor", dst, src, 0, expect=src[None], name="first")
