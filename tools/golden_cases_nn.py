"""Golden cases: normalization, convolution and pooling, image resampling, spectral (FFT, complex) ops.
Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import torch

from golden_helpers import _GEN, C64, F64, I32, T, case, r


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
