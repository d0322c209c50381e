"""Golden cases: reductions (sums, extrema, statistics, scans, softmax, topk) and linear algebra.
Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import math

import torch

from golden_helpers import _GEN, BF16, BOOL, F16, F32, F64, I8, I16, I32, T, case, r, special


def reductions():
    x = r(3, 4, 5)
    sp = special().reshape(4, 4)
    _sums_and_extrema(x, sp)
    _any_stats_scans(x)


def _sums_and_extrema(x, sp):
    """sum, mean, prod, amax/amin, max/min, argmax/argmin: the first part of reductions."""
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


def _any_stats_scans(x):
    """any, var, var_mean, cumsum, softmax, topk: the second part of reductions."""
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
