"""Golden cases: view/copy shape ops, layout ops (flip, pad, scatter ...), indexing, and tensor creation.
Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import torch

from golden_helpers import BOOL, F16, F64, I8, I16, I32, I64, T, case, r, special


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
