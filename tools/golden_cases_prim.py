"""Golden cases: ExecuTorch's prim (scalar) operators and the sym_size / local-scalar / et_view / et_copy_index
ops, with expected values written out. Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import math

import torch

from golden_helpers import I32, case, r


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
