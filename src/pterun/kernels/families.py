"""Which kernel family registers each operator, so a method's load imports only the families its operators need.

The 22 family modules take ~8-15 ms to import together; a program whose portable operators are an embedding, a
norm and a few views needs a few of them. :func:`pterun.kernels.registry.load` imports the families of the given
operator names and returns the registry; :func:`~pterun.kernels.registry.load_all` imports every family (what
``pterun.kernels.KERNELS`` does, for listings). A name this table does not know is left to the registry as it is:
an operator registered by the caller (:func:`~pterun.kernels.registry.register`), or one pterun has no kernel for,
which the method's load then names.

The table is data, checked against the families themselves by ``tests/test_kernel_families.py`` (each family
imported alone in a fresh registry must register exactly its names here); when a family gains an operator, add it
to that family's list.

Example::

    >>> from pterun.kernels.families import FAMILY_OF
    >>> FAMILY_OF["aten::add.out"]
    'elementwise'
"""

from __future__ import annotations

__all__ = ["FAMILIES", "FAMILY_OF"]

#: family module (in :mod:`pterun.kernels`) -> the operators its import registers, as ExecuTorch names them
FAMILIES = {
    "activation": """
        aten::clamp.Tensor_out aten::clamp.out aten::elu.out aten::gelu.out aten::glu.out aten::hardtanh.out
        aten::leaky_relu.out aten::logit.out aten::relu.out
    """,
    "compare": """
        aten::allclose.Tensor aten::allclose.out aten::bitwise_and.Scalar_out aten::bitwise_and.Tensor_out
        aten::bitwise_left_shift.Tensor_Scalar_out aten::bitwise_left_shift.Tensor_out
        aten::bitwise_or.Scalar_out aten::bitwise_or.Tensor_out aten::bitwise_right_shift.Tensor_Scalar_out
        aten::bitwise_right_shift.Tensor_out aten::bitwise_xor.Scalar_out aten::bitwise_xor.Tensor_out
        aten::eq.Scalar_out aten::eq.Tensor_out aten::ge.Scalar_out aten::ge.Tensor_out aten::gt.Scalar_out
        aten::gt.Tensor_out aten::le.Scalar_out aten::le.Tensor_out aten::logical_and.out
        aten::logical_or.out aten::logical_xor.out aten::lt.Scalar_out aten::lt.Tensor_out
        aten::ne.Scalar_out aten::ne.Tensor_out aten::where.self_out
    """,
    "conv_pool": """
        aten::_adaptive_avg_pool2d.out aten::avg_pool2d.out aten::convolution.out
        aten::max_pool2d_with_indices.out
    """,
    "creation": """
        aten::arange.out aten::arange.start_out aten::empty.out aten::fill.Scalar_out aten::fill.Tensor_out
        aten::full.out aten::full_like.out aten::ones.out aten::scalar_tensor.out aten::zeros.out
        dim_order_ops::_empty_dim_order.out
    """,
    "elementwise": """
        aten::add.Scalar_out aten::add.out aten::atan2.out aten::div.Scalar_mode_out aten::div.Scalar_out
        aten::div.out aten::div.out_mode aten::floor_divide.out aten::fmod.Scalar_out aten::fmod.Tensor_out
        aten::maximum.out aten::minimum.out aten::mul.Scalar_out aten::mul.out aten::pow.Scalar_out
        aten::pow.Tensor_Scalar_out aten::pow.Tensor_Tensor_out aten::remainder.Scalar_out
        aten::remainder.Tensor_out aten::rsub.Scalar_out aten::sub.Scalar_out aten::sub.out
    """,
    "grad": """
        aten::convolution_backward.out aten::max_pool2d_with_indices_backward.grad_input
    """,
    "image": """
        aten::_upsample_bilinear2d_aa.out aten::grid_sampler_2d.out aten::upsample_bilinear2d.vec_out
        aten::upsample_nearest2d.vec_out
    """,
    "indexing": """
        aten::embedding.out aten::gather.out aten::index.Tensor_out aten::index_put.out aten::index_put_
        aten::index_select.out aten::masked_fill.Scalar_out aten::masked_scatter.out aten::masked_select.out
        aten::nonzero.out aten::repeat_interleave.Tensor_out aten::scatter.src_out aten::scatter.value_out
        aten::scatter_add.out
    """,
    "layout": """
        aten::as_strided_copy.out aten::diagonal_copy.out aten::flip.out aten::narrow_copy.out
        aten::pixel_shuffle.out aten::pixel_unshuffle.out aten::repeat.out aten::roll.out
        aten::select_scatter.out aten::slice_scatter.out aten::tril.out aten::unfold_copy.out
    """,
    "linalg": """
        aten::_cdist_forward.out aten::_pdist_forward.out aten::addmm.out aten::bmm.out aten::linear.out
        aten::mm.out
    """,
    "llm": """
        llama::custom_quantized_sdpa.out llama::custom_sdpa.out llama::sdpa_with_kv_cache.out
        llama::update_cache.out llama::update_cache_with_indices.out
    """,
    "norm": """
        aten::_native_batch_norm_legit.no_stats_out aten::_native_batch_norm_legit.out
        aten::_native_batch_norm_legit_no_training.out aten::native_group_norm.out
        aten::native_layer_norm.out
    """,
    "pad": """
        aten::constant_pad_nd.out aten::reflection_pad1d.out aten::reflection_pad2d.out
        aten::reflection_pad3d.out aten::replication_pad1d.out aten::replication_pad2d.out
        aten::replication_pad3d.out
    """,
    "prim": """
        aten::_local_scalar_dense aten::sym_numel aten::sym_size.int executorch_prim::add.Scalar
        executorch_prim::ceil.Scalar executorch_prim::eq.Scalar executorch_prim::et_copy_index.tensor
        executorch_prim::et_view.default executorch_prim::floordiv.Scalar executorch_prim::floordiv.int
        executorch_prim::ge.Scalar executorch_prim::gt.Scalar executorch_prim::le.Scalar
        executorch_prim::lt.Scalar executorch_prim::mod.Scalar executorch_prim::mod.int
        executorch_prim::mul.Scalar executorch_prim::neg.Scalar executorch_prim::round.Scalar
        executorch_prim::sub.Scalar executorch_prim::sym_float.Scalar executorch_prim::sym_int.Scalar
        executorch_prim::sym_ite.Scalar executorch_prim::sym_max.Scalar executorch_prim::sym_min.Scalar
        executorch_prim::sym_not.Scalar executorch_prim::truediv.Scalar executorch_prim::trunc.Scalar
    """,
    "quantized": """
        quantized_decomposed::add.out quantized_decomposed::choose_qparams.Tensor_out
        quantized_decomposed::choose_qparams_per_token_asymmetric.out
        quantized_decomposed::dequantize_per_channel.out
        quantized_decomposed::dequantize_per_tensor.Tensor_out
        quantized_decomposed::dequantize_per_tensor.out quantized_decomposed::dequantize_per_token.out
        quantized_decomposed::quantize_per_channel.out quantized_decomposed::quantize_per_tensor.Tensor_out
        quantized_decomposed::quantize_per_tensor.out quantized_decomposed::quantize_per_token.out
    """,
    "quantized_embedding": """
        quantized_decomposed::embedding_2bit.dtype_out quantized_decomposed::embedding_2bit.out
        quantized_decomposed::embedding_4bit.dtype_out quantized_decomposed::embedding_4bit.out
        quantized_decomposed::embedding_byte.dtype_out quantized_decomposed::embedding_byte.out
        quantized_decomposed::mixed_linear.out quantized_decomposed::mixed_mm.out
    """,
    "random": """
        aten::native_dropout.out aten::rand.out aten::randn.out
    """,
    "reduction": """
        aten::_log_softmax.out aten::_softmax.out aten::amax.out aten::amin.out aten::any.all_out
        aten::any.dims_out aten::any.out aten::argmax.out aten::argmin.out aten::cumsum.out
        aten::max.dim_max aten::max.unary_out aten::mean.dtype_out aten::mean.out aten::min.dim_min
        aten::min.unary_out aten::prod.int_out aten::prod.out aten::sum.IntList_out aten::var.correction_out
        aten::var.out aten::var_mean.correction_out
    """,
    "shape": """
        aten::_to_copy.out aten::alias_copy.out aten::cat.out aten::clone.out aten::copy.out aten::copy_
        aten::detach_copy.out aten::expand_copy.out aten::lift_fresh_copy.out aten::permute_copy.out
        aten::select_copy.int_out aten::slice_copy.Tensor_out aten::split_copy.Tensor_out
        aten::split_with_sizes_copy.out aten::squeeze_copy.dim_out aten::squeeze_copy.dims_out
        aten::stack.out aten::t_copy.out aten::transpose_copy.int_out aten::unbind_copy.int_out
        aten::unsqueeze_copy.out aten::view_copy.out dim_order_ops::_clone_dim_order.out
        dim_order_ops::_to_dim_order_copy.out et_copy::_d2h_copy.out et_copy::_h2d_copy.out
    """,
    "sort": """
        aten::topk.values
    """,
    "spectral": """
        aten::_conj_physical.out aten::_fft_c2r.out aten::_fft_r2c.out aten::view_as_real_copy.out
    """,
    "unary": """
        aten::abs.out aten::acos.out aten::acosh.out aten::asin.out aten::asinh.out aten::atan.out
        aten::atanh.out aten::bitwise_not.out aten::ceil.out aten::cos.out aten::cosh.out aten::erf.out
        aten::exp.out aten::expm1.out aten::floor.out aten::isinf.out aten::isnan.out aten::log.out
        aten::log10.out aten::log1p.out aten::log2.out aten::logical_not.out aten::neg.out
        aten::reciprocal.out aten::round.out aten::rsqrt.out aten::sigmoid.out aten::sign.out aten::sin.out
        aten::sinh.out aten::sqrt.out aten::tan.out aten::tanh.out aten::trunc.out
    """,
}
FAMILIES = {family: tuple(names.split()) for family, names in FAMILIES.items()}
#: operator name -> the family that registers it
FAMILY_OF = {name: family for family, names in FAMILIES.items() for name in names}
