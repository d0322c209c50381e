"""The operator manifest: every operator pterun implements, by section, as ExecuTorch names them.

The sections follow ExecuTorch's kernel libraries (see ``spec/executorch-format.md`` §3.2-§3.4):
``PORTABLE_OPS`` (kernels/portable/functions.yaml, 209 entries, plus ``allclose`` from custom_ops.yaml),
``PRIM_OPS`` (kernels/prim_ops), ``QUANTIZED_OPS`` (kernels/quantized/quantized.yaml) and
``OPTIMIZED_OPS`` (operators only the optimized library registers). ``NOT_SUPPORTED`` lists operators
registered only to fail at load with a reason. Example::

    >>> from pterun.kernels.manifest import PORTABLE_OPS, coverage_report
    >>> "aten::add.out" in PORTABLE_OPS
    True
    >>> print(coverage_report(["aten::add.out", "foo::bar.out"]).splitlines()[0])
    2 operators: 1 supported, 1 not
"""

from __future__ import annotations

from pterun.kernels import KERNELS

__all__ = ["PORTABLE_OPS", "PRIM_OPS", "QUANTIZED_OPS", "OPTIMIZED_OPS", "NOT_SUPPORTED", "SECTIONS",
           "coverage_report"]

PORTABLE_OPS = (
    "aten::_adaptive_avg_pool2d.out", "aten::_cdist_forward.out", "aten::_conj_physical.out",
    "aten::_log_softmax.out", "aten::_native_batch_norm_legit.out", "aten::_native_batch_norm_legit.no_stats_out",
    "aten::_native_batch_norm_legit_no_training.out", "aten::_pdist_forward.out", "aten::_softmax.out",
    "aten::_to_copy.out", "aten::abs.out", "aten::acos.out", "aten::acosh.out", "aten::add.out",
    "aten::add.Scalar_out", "aten::addmm.out", "aten::alias_copy.out", "aten::amax.out", "aten::amin.out",
    "aten::any.all_out", "aten::any.dims_out", "aten::any.out", "aten::arange.out", "aten::arange.start_out",
    "aten::argmax.out", "aten::argmin.out", "aten::as_strided_copy.out", "aten::asin.out", "aten::asinh.out",
    "aten::atan.out", "aten::atan2.out", "aten::atanh.out", "aten::avg_pool2d.out", "aten::bitwise_and.Scalar_out",
    "aten::bitwise_and.Tensor_out", "aten::bitwise_not.out", "aten::bitwise_or.Scalar_out",
    "aten::bitwise_or.Tensor_out", "aten::bitwise_xor.Scalar_out", "aten::bitwise_xor.Tensor_out",
    "aten::bitwise_left_shift.Tensor_out", "aten::bitwise_left_shift.Tensor_Scalar_out",
    "aten::bitwise_right_shift.Tensor_out", "aten::bitwise_right_shift.Tensor_Scalar_out", "aten::bmm.out",
    "aten::cat.out", "aten::ceil.out", "aten::clamp.out", "aten::clamp.Tensor_out", "aten::clone.out",
    "aten::constant_pad_nd.out", "aten::convolution.out", "aten::convolution_backward.out", "aten::copy.out",
    "aten::copy_", "aten::cos.out", "aten::cosh.out", "aten::cumsum.out", "aten::detach_copy.out",
    "aten::diagonal_copy.out", "aten::div.out", "aten::div.Scalar_mode_out", "aten::div.Scalar_out",
    "aten::div.out_mode", "aten::embedding.out", "aten::empty.out", "aten::eq.Scalar_out", "aten::eq.Tensor_out",
    "aten::elu.out", "aten::erf.out", "aten::exp.out", "aten::expand_copy.out", "aten::expm1.out",
    "aten::fill.Scalar_out", "aten::fill.Tensor_out", "aten::flip.out", "aten::floor.out", "aten::floor_divide.out",
    "aten::fmod.Tensor_out", "aten::fmod.Scalar_out", "aten::full.out", "aten::full_like.out", "aten::gather.out",
    "aten::ge.Scalar_out", "aten::ge.Tensor_out", "aten::gelu.out", "aten::glu.out", "aten::grid_sampler_2d.out",
    "aten::gt.Scalar_out", "aten::gt.Tensor_out", "aten::hardtanh.out", "aten::index.Tensor_out",
    "aten::index_put.out", "aten::index_put_", "aten::index_select.out", "aten::isinf.out", "aten::isnan.out",
    "aten::le.Scalar_out", "aten::le.Tensor_out", "aten::leaky_relu.out", "aten::lift_fresh_copy.out",
    "aten::log.out", "aten::log10.out", "aten::log1p.out", "aten::log2.out", "aten::logical_and.out",
    "aten::logical_not.out", "aten::logical_or.out", "aten::logical_xor.out", "aten::logit.out",
    "aten::lt.Scalar_out", "aten::lt.Tensor_out", "aten::masked_fill.Scalar_out", "aten::masked_scatter.out",
    "aten::masked_select.out", "aten::max.dim_max", "aten::max.unary_out", "aten::maximum.out",
    "aten::max_pool2d_with_indices.out", "aten::max_pool2d_with_indices_backward.grad_input", "aten::mean.out",
    "aten::mean.dtype_out", "aten::min.dim_min", "aten::min.unary_out", "aten::minimum.out", "aten::mm.out",
    "aten::mul.out", "aten::mul.Scalar_out", "aten::narrow_copy.out", "aten::native_dropout.out",
    "aten::native_group_norm.out", "aten::native_layer_norm.out", "aten::ne.Scalar_out", "aten::ne.Tensor_out",
    "aten::neg.out", "aten::nonzero.out", "aten::ones.out", "aten::permute_copy.out", "aten::pixel_shuffle.out",
    "aten::pixel_unshuffle.out", "aten::pow.Scalar_out", "aten::pow.Tensor_Scalar_out",
    "aten::pow.Tensor_Tensor_out", "aten::prod.int_out", "aten::prod.out", "aten::rand.out", "aten::randn.out",
    "aten::reciprocal.out", "aten::relu.out", "aten::remainder.Tensor_out", "aten::remainder.Scalar_out",
    "aten::repeat.out", "aten::repeat_interleave.Tensor_out", "aten::reflection_pad1d.out",
    "aten::reflection_pad2d.out", "aten::reflection_pad3d.out", "aten::replication_pad1d.out",
    "aten::replication_pad2d.out", "aten::replication_pad3d.out", "aten::roll.out", "aten::round.out",
    "aten::rsqrt.out", "aten::rsub.Scalar_out", "aten::scalar_tensor.out", "aten::scatter.src_out",
    "aten::scatter.value_out", "aten::scatter_add.out", "aten::select_copy.int_out", "aten::select_scatter.out",
    "aten::sigmoid.out", "aten::sign.out", "aten::sin.out", "aten::sinh.out", "aten::slice_copy.Tensor_out",
    "aten::slice_scatter.out", "aten::split_copy.Tensor_out", "aten::split_with_sizes_copy.out", "aten::sqrt.out",
    "aten::squeeze_copy.dim_out", "aten::squeeze_copy.dims_out", "aten::stack.out", "aten::sub.out",
    "aten::sub.Scalar_out", "aten::sum.IntList_out", "aten::t_copy.out", "aten::tan.out", "aten::tanh.out",
    "aten::topk.values", "aten::transpose_copy.int_out", "aten::tril.out", "aten::trunc.out",
    "aten::unbind_copy.int_out", "aten::unfold_copy.out", "aten::unsqueeze_copy.out",
    "aten::upsample_bilinear2d.vec_out", "aten::_upsample_bilinear2d_aa.out", "aten::upsample_nearest2d.vec_out",
    "aten::var.correction_out", "aten::var_mean.correction_out", "aten::var.out", "aten::view_as_real_copy.out",
    "aten::view_copy.out", "aten::where.self_out", "aten::zeros.out", "et_copy::_h2d_copy.out",
    "et_copy::_d2h_copy.out", "dim_order_ops::_empty_dim_order.out", "dim_order_ops::_to_dim_order_copy.out",
    "dim_order_ops::_clone_dim_order.out", "aten::allclose.out", "aten::allclose.Tensor",
)
OPTIMIZED_OPS = (
    "aten::_fft_r2c.out", "aten::_fft_c2r.out", "aten::linear.out",
)
QUANTIZED_OPS = (
    "quantized_decomposed::add.out", "quantized_decomposed::choose_qparams.Tensor_out",
    "quantized_decomposed::dequantize_per_tensor.out", "quantized_decomposed::dequantize_per_tensor.Tensor_out",
    "quantized_decomposed::quantize_per_channel.out", "quantized_decomposed::dequantize_per_channel.out",
    "quantized_decomposed::embedding_byte.out", "quantized_decomposed::embedding_byte.dtype_out",
    "quantized_decomposed::embedding_2bit.out", "quantized_decomposed::embedding_2bit.dtype_out",
    "quantized_decomposed::embedding_4bit.out", "quantized_decomposed::embedding_4bit.dtype_out",
    "quantized_decomposed::mixed_mm.out", "quantized_decomposed::mixed_linear.out",
    "quantized_decomposed::quantize_per_tensor.out", "quantized_decomposed::quantize_per_tensor.Tensor_out",
    "quantized_decomposed::choose_qparams_per_token_asymmetric.out", "quantized_decomposed::quantize_per_token.out",
    "quantized_decomposed::dequantize_per_token.out",
)
PRIM_OPS = (
    "aten::sym_size.int", "aten::sym_numel", "aten::_local_scalar_dense",
    "executorch_prim::add.Scalar", "executorch_prim::sub.Scalar", "executorch_prim::mul.Scalar",
    "executorch_prim::floordiv.Scalar", "executorch_prim::truediv.Scalar", "executorch_prim::sym_float.Scalar",
    "executorch_prim::sym_int.Scalar", "executorch_prim::eq.Scalar", "executorch_prim::gt.Scalar",
    "executorch_prim::lt.Scalar", "executorch_prim::ge.Scalar", "executorch_prim::le.Scalar",
    "executorch_prim::neg.Scalar", "executorch_prim::sym_not.Scalar", "executorch_prim::sym_ite.Scalar",
    "executorch_prim::sym_max.Scalar", "executorch_prim::sym_min.Scalar", "executorch_prim::floordiv.int",
    "executorch_prim::mod.int", "executorch_prim::mod.Scalar", "executorch_prim::ceil.Scalar",
    "executorch_prim::round.Scalar", "executorch_prim::trunc.Scalar", "executorch_prim::et_copy_index.tensor",
    "executorch_prim::et_view.default",
)

#: operator -> why pterun refuses it: the operators registered with ``register(name, not_supported=reason)``,
#: so that loading a program that uses them fails with NotSupportedError naming the operator and the reason.
#: (``pterun.kernels.KERNELS``, imported above, imports every kernel family, so the registry is complete here.)
NOT_SUPPORTED: dict[str, str] = {name: k.not_supported for name, k in KERNELS.items() if k.not_supported}

SECTIONS = {"portable": PORTABLE_OPS, "prim": PRIM_OPS, "quantized": QUANTIZED_OPS, "optimized": OPTIMIZED_OPS}


def _status(op: str) -> str:
    kernel = KERNELS.get(op)
    if kernel is None:
        return "missing"
    return f"not supported: {kernel.not_supported}" if kernel.not_supported else "supported"


def coverage_report(operator_names: list[str] | None = None) -> str:
    """A plain-text operator coverage report for ``pterun ops``.

    Without names: per manifest section, how many operators have a working kernel out of the total.
    With a program's operator names: how many are supported, then one line per operator that is not
    (missing, or registered as not supported with the reason).
    """
    if operator_names is None:
        lines, total_ok, total = [], 0, 0
        for section, ops in SECTIONS.items():
            ok = sum(_status(op) == "supported" for op in ops)
            lines.append(f"{section:<10} {ok:>4} / {len(ops):<4} supported")
            total_ok, total = total_ok + ok, total + len(ops)
        lines.append(f"{'total':<10} {total_ok:>4} / {total:<4} supported")
        extra = sorted(op for op in KERNELS if not any(op in ops for ops in SECTIONS.values()))
        if extra:
            lines.append(f"also registered: {', '.join(extra)}")
        if NOT_SUPPORTED:
            lines.append("not supported:")
            lines.extend(f"  {op}: {why}" for op, why in sorted(NOT_SUPPORTED.items()))
        return "\n".join(lines)
    names = list(dict.fromkeys(operator_names))
    status = {op: _status(op) for op in names}
    bad = [op for op in names if status[op] != "supported"]
    lines = [f"{len(names)} operators: {len(names) - len(bad)} supported, {len(bad)} not"]
    lines.extend(f"  {op}: {status[op]}" for op in bad)
    return "\n".join(lines)
