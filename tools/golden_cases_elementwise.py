"""Golden cases, elementwise families: binary arithmetic, unary math, comparisons and logic, activations.
Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import math

import torch

from golden_helpers import BF16, BOOL, F16, F32, F64, I8, I16, I32, I64, U8, T, case, r, special


def binary_arith():
    _add_sub_mul()
    _div_mod()
    _pow_atan2_minmax()


def _add_sub_mul():
    """add, sub, rsub, mul: the first part of binary_arith (its seeded stream continues in order)."""
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


def _div_mod():
    """div (all modes), floor_divide, fmod, remainder: the second part of binary_arith."""
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


def _pow_atan2_minmax():
    """pow, atan2, maximum, minimum: the last part of binary_arith."""
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
