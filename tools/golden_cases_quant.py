"""Golden cases: the quantized_decomposed operators (quantize/dequantize, qparams, quantized add, packed
embeddings, mixed-precision matmuls). Registered in order by tools/golden_cases.py.
"""

from __future__ import annotations

import torch

from golden_helpers import F16, F32, F64, I8, I16, I32, I64, U8, case, r, special


def _qadd(a, sa, za, mina, maxa, b, sb, zb, minb, maxb, so, zo, mino, maxo):
    """ExecuTorch's quantized add (op_add.cpp): dequantize in double with float scales, add in float,
    requantize with round-half-even (the op has no exportable functional form)."""
    f32 = lambda v: float(torch.tensor(v, dtype=F32))  # noqa: E731
    dq = ((a.long() - za).double() * f32(sa)).float() + ((b.long() - zb).double() * f32(sb)).float()
    inv = torch.tensor(1.0, dtype=F32) / torch.tensor(so, dtype=F32)
    return (torch.round(dq * inv) + zo).clamp(mino, maxo).to(a.dtype)


def quantized_ops():
    qd = "quantized_decomposed::"
    _quantize_dequantize(qd)
    _qparams_add_embeddings(qd)
    _mixed_matmuls(qd)


def _quantize_dequantize(qd):
    """quantize_* and dequantize_*: the first part of quantized_ops."""
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


def _qparams_add_embeddings(qd):
    """choose_qparams*, quantized add, embedding_{byte,4bit,2bit}: the second part of quantized_ops."""
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


def _mixed_matmuls(qd):
    """mixed_mm, mixed_linear: the last part of quantized_ops."""
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
