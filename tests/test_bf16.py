"""bfloat16 programs give ExecuTorch's numbers, and torch bf16 tensors go in and come out.

* The ``bf16_*`` fixtures (tools/export_bf16_fixtures.py) hold ExecuTorch 1.5.1's outputs. Where ExecuTorch's
  kernel rounds in bf16 at every step in a fixed order (addmm, convolution, pooling, batch norm, var, prod,
  cumsum), pterun repeats those steps with ml_dtypes' bf16 arithmetic, which is IEEE float32 arithmetic plus
  round to nearest even on any machine: ``bf16_mlp`` and ``bf16_cnn`` use only such operators (and float
  means summed in order), so they must match bit for bit. ``bf16_ops`` also has operators that ExecuTorch and
  pterun compute in float32 and round once (mm, bmm, softmax, exp, ...), where BLAS or SIMD may order a sum
  differently or round an exp differently by a float32 ulp, which can move the bf16 result by one step: each
  of its elements must be within one bf16 ulp (on the machine that recorded them, they are bit for bit).
* Each bf16 kernel path is also checked against a literal transcription of ExecuTorch's C++ loop (one rounding
  per ``c10::BFloat16`` operation) on cases the fixtures do not reach (strides, dilation, groups, ceil mode ...).
* Torch never runs here: a stand-in with torch's behaviour (its DLPack export refuses bf16 as NumPy's import
  does, ``view(torch.int16)`` gives the bits) checks the conversions.
"""

from __future__ import annotations

import math
import sys
import types

import ml_dtypes
import numpy as np
import pytest
from fixtures_util import FIXTURES, load_calls

from pterun import InvalidArgumentError, Runtime
from pterun.kernels import KERNELS
from pterun.kernels._common import sum_in_order

BF16 = np.dtype(ml_dtypes.bfloat16)
F32 = np.float32
EXACT = {"bf16_mlp", "bf16_cnn"}
FIXTURE_NAMES = sorted(p.stem for p in FIXTURES.glob("bf16_*.pte"))


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance between bf16 arrays in representable steps (0 between equal values, the two zeros, two NaNs)."""
    def ordered(x):
        i = x.view(np.int16).astype(np.int32)
        return np.where(i < 0, -(i & 0x7FFF), i)
    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a.astype(F32)) & np.isnan(b.astype(F32)), 0, d)


def test_all_bf16_fixtures_are_present():
    assert FIXTURE_NAMES == ["bf16_cnn", "bf16_mlp", "bf16_ops"]


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_bf16_fixture_matches_executorch(name):
    program = Runtime.get().load_program(FIXTURES / f"{name}.pte")
    calls = load_calls(name)
    assert calls and any(isinstance(v, np.ndarray) and v.dtype == BF16 for v in calls[0]["inputs"])
    for k, call in enumerate(calls):
        outputs = program.load_method(call["method"]).execute(call["inputs"])
        assert len(outputs) == len(call["outputs"])
        for j, (got, want) in enumerate(zip(outputs, call["outputs"])):
            where = f"{name} call {k} output {j}"
            assert got.shape == want.shape and got.dtype == want.dtype, where
            if want.dtype != BF16:
                np.testing.assert_array_equal(got, want, err_msg=where)  # exact float32 arithmetic on bf16 values
                continue
            d = ulps(got, want)
            worst = np.unravel_index(np.argmax(d), d.shape) if d.size else ()
            bound = 0 if name in EXACT else 1
            assert d.max(initial=0) <= bound, (f"{where}: {int((d > 0).sum())} of {d.size} elements differ, up to "
                                               f"{int(d.max())} ulp at {worst}: {got[worst]} vs {want[worst]}")


def test_float32_accumulation_does_not_pass_the_mlp_fixture(monkeypatch):
    # what pterun did before (and eager PyTorch does): addmm in float32, rounded once; the fixture tells the two
    # apart, so the test above can fail
    from pterun.kernels import linalg

    monkeypatch.setattr(linalg, "is_bfloat16", lambda dtype: False)
    call = load_calls("bf16_mlp")[0]
    got = Runtime.get().load_program(FIXTURES / "bf16_mlp.pte").load_method("forward").execute(call["inputs"])[0]
    assert (ulps(got, call["outputs"][0]) > 0).mean() > 0.5


# -- ExecuTorch's loops, transcribed (one rounding per c10::BFloat16 operation) ----------------------------------
def r(v: float) -> float:
    """float -> BFloat16 -> float (round to nearest even, through float32 as C++ converts a double)."""
    return float(np.array(np.float32(v)).astype(BF16).astype(F32))


def div(a: float, b: float) -> float:
    """``BFloat16 / BFloat16``: a float32 division, rounded (a double division could round differently)."""
    return r(np.float32(a) / np.float32(b))


def f32_sum(values) -> float:
    """``std::accumulate(..., 0.f)``: a running float32 sum."""
    total = np.float32(0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return float(total)


def rand_bf16(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F32).astype(BF16)


def run_kernel(name, *args):
    out = KERNELS[name].fn(*args)
    return out


def ref_addmm(bias, a, b, beta, alpha):
    a, b, bias = a.astype(F32), b.astype(F32), np.broadcast_to(bias.astype(F32), (a.shape[0], b.shape[1]))
    out = np.empty((a.shape[0], b.shape[1]), F32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = 0.0
            for k in range(a.shape[1]):
                s = r(s + r(a[i, k] * b[k, j]))
            out[i, j] = r(r(s * r(alpha)) + r(bias[i, j] * r(beta)))
    return out


@pytest.mark.parametrize("bias_shape,beta,alpha", [((3, 5), 1, 1), ((5,), 0.5, 2.0), ((1, 5), 1.0, 0.3)])
def test_addmm_accumulates_in_bf16(bias_shape, beta, alpha):
    rng = np.random.default_rng(0)
    a, b, bias = rand_bf16(rng, 3, 40), rand_bf16(rng, 40, 5), rand_bf16(rng, *bias_shape)
    got = np.asarray(run_kernel("aten::addmm.out", bias, a, b, beta, alpha, np.empty((3, 5), BF16))).astype(BF16)
    np.testing.assert_array_equal(got.astype(F32), ref_addmm(bias, a, b, beta, alpha))


def ref_conv2d(x, w, bias, stride, padding, dilation, groups):
    """portable conv2d_impl, not transposed."""
    x, w = x.astype(F32), w.astype(F32)
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.empty((n, o, oh, ow), F32)
    og = o // groups
    for b in range(n):
        for oc in range(o):
            c0 = (oc // og) * cg
            for y in range(oh):
                for xx in range(ow):
                    acc = 0.0
                    for ic in range(c0, c0 + cg):
                        for ky in range(kh):
                            iy = stride[0] * y + dilation[0] * ky - padding[0]
                            if not 0 <= iy < h:
                                continue
                            for kx in range(kw):
                                ix = stride[1] * xx + dilation[1] * kx - padding[1]
                                if 0 <= ix < wd:
                                    acc = r(acc + r(x[b, ic, iy, ix] * w[oc, ic - c0, ky, kx]))
                    if bias is not None:
                        acc = r(acc + float(bias[oc]))
                    out[b, oc, y, xx] = acc
    return out


def ref_conv_transpose2d(x, w, bias, stride, padding, dilation, output_padding, groups):
    """portable conv2d_impl, transposed: the output starts at the bias, each input position adds its products."""
    x, w = x.astype(F32), w.astype(F32)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + output_padding[0] + 1
    ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + output_padding[1] + 1
    o, cg = og * groups, c // groups
    out = np.zeros((n, o, oh, ow), F32)
    if bias is not None:
        out += bias.astype(F32).reshape(1, -1, 1, 1)
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for iy in range(h):
                for ix in range(wd):
                    for ic in range(g * cg, (g + 1) * cg):
                        for ky in range(kh):
                            y = stride[0] * iy + dilation[0] * ky - padding[0]
                            if not 0 <= y < oh:
                                continue
                            for kx in range(kw):
                                xx = stride[1] * ix + dilation[1] * kx - padding[1]
                                if 0 <= xx < ow:
                                    prod = r(x[b, ic, iy, ix] * w[ic, oc - g * og, ky, kx])
                                    out[b, oc, y, xx] = r(out[b, oc, y, xx] + prod)
    return out


CONVS = [  # (x shape, w shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    ((2, 4, 7, 6), (6, 2, 3, 2), True, (2, 1), (1, 0), (1, 2), False, (0, 0), 2),
    ((1, 3, 6, 6), (4, 3, 3, 3), False, (1, 1), (2, 2), (2, 1), False, (0, 0), 1),
    ((1, 4, 5, 5), (4, 1, 3, 3), True, (1, 1), (1, 1), (1, 1), False, (0, 0), 4),  # depthwise
    ((1, 4, 4, 5), (4, 3, 3, 2), True, (2, 2), (1, 0), (1, 1), True, (1, 0), 2),
    ((2, 2, 3, 3), (2, 3, 2, 3), False, (1, 2), (0, 1), (2, 1), True, (0, 1), 1),
]


@pytest.mark.parametrize("case", CONVS, ids=[f"conv{i}" for i in range(len(CONVS))])
def test_convolution_accumulates_in_bf16_in_executorchs_order(case):
    xs, ws, has_bias, stride, padding, dilation, transposed, out_pad, groups = case
    rng = np.random.default_rng(1)
    x, w = rand_bf16(rng, *xs), rand_bf16(rng, *ws)
    nout = ws[1] * groups if transposed else ws[0]
    bias = rand_bf16(rng, nout) if has_bias else None
    if transposed:
        want = ref_conv_transpose2d(x, w, bias, stride, padding, dilation, out_pad, groups)
    else:
        want = ref_conv2d(x, w, bias, stride, padding, dilation, groups)
    got = run_kernel("aten::convolution.out", x, w, bias, stride, padding, dilation, transposed, out_pad, groups,
                     np.empty(want.shape, BF16))
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.astype(F32), want)


def ref_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor):
    """kernel_reduction_then_map_2d with avg_pool2d's reduce (in_val + accum) and map (accum / count)."""
    x = x.astype(F32)
    n, c, h, w = x.shape

    def size(i, kk, ss, pp):
        out = (i + 2 * pp - kk + ((ss - 1) if ceil_mode else 0)) // ss + 1
        if ceil_mode and (out - 1) * ss >= i + pp:
            out -= 1
        return out
    oh, ow = size(h, k[0], s[0], p[0]), size(w, k[1], s[1], p[1])
    out = np.empty((n, c, oh, ow), F32)
    for b in range(n):
        for ch in range(c):
            for y in range(oh):
                for xx in range(ow):
                    h0, w0 = y * s[0] - p[0], xx * s[1] - p[1]
                    h1, w1 = min(h0 + k[0], h + p[0]), min(w0 + k[1], w + p[1])
                    pool = (h1 - h0) * (w1 - w0)
                    h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
                    count = pool if count_include_pad else (h1 - h0) * (w1 - w0)
                    acc = None
                    for iy in range(h0, h1):
                        for ix in range(w0, w1):
                            acc = float(x[b, ch, iy, ix]) if acc is None else r(x[b, ch, iy, ix] + acc)
                    out[b, ch, y, xx] = div(acc, r(divisor or count))
    return out


@pytest.mark.parametrize("k,s,p,ceil_mode,count_include_pad,divisor", [
    ((3, 3), (2, 2), (1, 1), False, True, None), ((3, 2), (2, 1), (1, 0), True, False, None),
    ((2, 2), (2, 2), (0, 0), True, True, None), ((3, 3), (1, 1), (0, 1), False, True, 7),
])
def test_avg_pool2d_accumulates_in_bf16(k, s, p, ceil_mode, count_include_pad, divisor):
    x = rand_bf16(np.random.default_rng(2), 1, 3, 7, 8, scale=4.0)
    want = ref_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor)
    got = run_kernel("aten::avg_pool2d.out", x, k, s, p, ceil_mode, count_include_pad, divisor,
                     np.empty(want.shape, BF16))
    np.testing.assert_array_equal(np.asarray(got).astype(BF16).astype(F32), want)


def test_max_pool2d_takes_bf16():
    x = rand_bf16(np.random.default_rng(3), 1, 2, 5, 5)
    vals, _ = run_kernel("aten::max_pool2d_with_indices.out", x, (3, 3), (2, 2), (1, 1), (1, 1), False,
                           np.empty((1, 2, 3, 3), BF16), np.empty((1, 2, 3, 3), np.int64))
    want, _ = run_kernel("aten::max_pool2d_with_indices.out", x.astype(F32), (3, 3), (2, 2), (1, 1), (1, 1), False,
                         np.empty((1, 2, 3, 3), F32), np.empty((1, 2, 3, 3), np.int64))
    assert vals.dtype == BF16
    np.testing.assert_array_equal(vals.astype(F32), want)


def test_var_prod_and_batch_statistics_accumulate_in_bf16():
    rng = np.random.default_rng(4)
    x = rand_bf16(rng, 3, 4, 5)
    xf = x.astype(F32)
    # var over dims (0, 2), in memory order: running bf16 sums, mean = sum / bf16(n), division in double
    got = run_kernel("aten::var.correction_out", x, (0, 2), 1, False, np.empty(4, BF16))
    for ch in range(4):
        vals = [float(v) for v in xf[:, ch, :].reshape(-1)]
        total = 0.0
        for v in vals:
            total = r(total + v)
        mean = div(total, r(len(vals)))
        sq = 0.0
        for v in vals:
            d = r(v - mean)
            sq = r(sq + r(d * d))
        assert r(float(np.asarray(got)[ch])) == r(sq / (len(vals) - 1)), ch
    # prod: a running bf16 product
    got = np.asarray(run_kernel("aten::prod.int_out", x, 2, False, None, np.empty((3, 4), BF16))).astype(BF16)
    for i, j in np.ndindex(3, 4):
        p = 1.0
        for v in xf[i, j]:
            p = r(p * v)
        assert float(got[i, j]) == p
    # batch norm on batch statistics: float sums per sample rounded to bf16, added over the batch in bf16
    weight, bias = rand_bf16(rng, 4), rand_bf16(rng, 4)
    y, mean, invstd = run_kernel("aten::_native_batch_norm_legit.no_stats_out", x, weight, bias, True, 0.1, 1e-5,
                                 np.empty(x.shape, BF16), np.empty(4, BF16), np.empty(4, BF16))
    for ch in range(4):
        s = sq = 0.0
        for b in range(3):
            s = r(s + r(f32_sum(xf[b, ch])))  # CTYPE sum = reduce_add(...): the float sum, as bf16
            sq = r(sq + r(f32_sum(xf[b, ch] * xf[b, ch])))
        m = div(s, r(15))
        var = r(div(sq, r(15)) - r(m * m))
        inv = r(1.0 / math.sqrt(var + 1e-5))
        assert float(mean[ch]) == m and float(invstd[ch]) == inv, ch
        for b, t in np.ndindex(3, 5):
            want = r(r(r(r(xf[b, ch, t] - m) * inv) * float(weight[ch])) + float(bias[ch]))
            assert float(np.asarray(y).astype(BF16)[b, ch, t]) == want


def test_var_mean_over_the_innermost_dim_divides_by_a_bf16_denominator():
    # op_var_mean.cpp's loop over one innermost dim of a contiguous input divides by
    # static_cast<CTYPE>(denominator) (299 is 300 in bf16); elsewhere, as var does, by the double
    x = rand_bf16(np.random.default_rng(6), 4, 300, scale=2.0)
    var_mean = KERNELS["aten::var_mean.correction_out"].fn
    inner, _ = var_mean(x, (1,), 1, False, np.empty(4, BF16), np.empty(4, BF16))
    whole, _ = var_mean(x, (0, 1), 1, False, np.empty((), BF16), np.empty((), BF16))
    plain = KERNELS["aten::var.correction_out"].fn(x, (1,), 1, False, np.empty(4, BF16))
    xf = x.astype(F32)
    sq = []
    for vals in [xf[i] for i in range(4)] + [xf.reshape(-1)]:
        total = 0.0
        for v in vals:
            total = r(total + v)
        mean = div(total, r(vals.size))
        acc = 0.0
        for v in vals:
            acc = r(acc + r(r(v - mean) * r(v - mean)))
        sq.append(acc)
    as_bf16 = [r(float(np.asarray(v).astype(F32))) for v in (*np.asarray(inner).ravel(), whole)]
    assert as_bf16[:4] == [div(q, r(299)) for q in sq[:4]]
    assert as_bf16[4] == r(sq[4] / 1199)
    assert [r(float(v)) for v in np.asarray(plain)] == [r(q / 299) for q in sq[:4]]
    assert [div(q, r(299)) for q in sq[:4]] != [r(q / 299) for q in sq[:4]]  # the two rules do differ here


def test_long_1d_bf16_running_sums_stay_in_bf16_and_do_not_crash():
    # a 1-D bf16 accumulate of this length crashes NumPy 1.26 + ml_dtypes 0.4 (the floor CI installs); a running
    # bf16 sum of ones stops at 256, where 256 + 1 rounds back to 256
    ones = np.ones(2000, BF16)
    out = KERNELS["aten::cumsum.out"].fn(ones, 0, None, np.empty(2000, BF16))
    assert out.dtype == BF16 and out.shape == (2000,)
    assert out.astype(F32).tolist() == [float(min(i, 256)) for i in range(1, 2001)]
    total = KERNELS["aten::sum.IntList_out"].fn(ones, None, False, None, np.empty((), BF16))
    assert float(np.asarray(total).astype(F32)) == 2000.0  # sum adds in float32 and rounds once
    running = sum_in_order(ones, None, BF16)  # var, var_mean and batch norm sum this way
    assert running.dtype == BF16 and running.shape == () and float(running) == 256.0


def test_bf16_layer_norm_of_wide_rows_is_the_true_layer_norm():
    # ExecuTorch 1.5.1's optimized layer norm reads a bf16 row of 256+ elements as float32 vectors (its
    # RowwiseMoments has no bf16 conversion) and gets the statistics wrong; pterun does not copy that
    x = rand_bf16(np.random.default_rng(5), 2, 512, scale=3.0)
    y, _, _ = run_kernel("aten::native_layer_norm.out", x, (512,), None, None, 1e-5, np.empty(x.shape, BF16),
                               np.empty((2, 1), F32), np.empty((2, 1), F32))
    xd = x.astype(np.float64)
    want = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
    got = np.asarray(y).astype(BF16).astype(np.float64)
    assert np.max(np.abs(got - want)) <= 2 ** -8 * np.max(np.abs(want))


# -- torch tensors in and out, with a stand-in for torch ---------------------------------------------------------
@pytest.fixture
def fake_torch(monkeypatch):
    """A module 'torch' whose Tensor behaves as torch's does at pterun's boundary: DLPack refuses bfloat16 the
    way NumPy's importer does, ``view(torch.int16)`` gives the bits; ``from_numpy`` and ``Tensor.view(dtype)``
    for outputs."""
    torch = types.ModuleType("torch")

    class Dtype:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"torch.{self.name}"

    torch.bfloat16, torch.int16, torch.float32 = Dtype("bfloat16"), Dtype("int16"), Dtype("float32")

    class Tensor:
        def __init__(self, array, dtype):
            self.array, self.dtype = array, dtype  # array: the data as NumPy holds it (bf16: int16 bits)

        def __dlpack__(self, **kwargs):
            if self.dtype is torch.bfloat16:
                raise RuntimeError("Unsupported dtype in DLTensor.")
            return self.array.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

        def detach(self):
            return self

        def view(self, dtype):
            assert dtype.name in ("int16", "bfloat16")
            return Tensor(self.array, dtype)

    Tensor.__module__ = "torch"
    torch.Tensor = Tensor
    torch.from_numpy = lambda a: Tensor(a, {"int16": torch.int16, "float32": torch.float32}[a.dtype.name])
    monkeypatch.setitem(sys.modules, "torch", torch)
    return torch


def test_a_torch_bf16_tensor_is_taken_through_its_bits(fake_torch):
    call = load_calls("bf16_mlp")[0]
    x = call["inputs"][0]
    tensor = fake_torch.Tensor(x.view(np.int16), fake_torch.bfloat16)
    method = Runtime.get().load_program(FIXTURES / "bf16_mlp.pte").load_method("forward")
    (got,) = method.execute([tensor])
    assert ulps(got, call["outputs"][0]).max() == 0
    from pterun.convert import to_host_array

    host = to_host_array(tensor, 0)
    assert host.dtype == BF16 and np.shares_memory(host, x)  # no copy of host memory


def test_a_torch_bf16_tensor_for_a_float32_input_is_refused_by_dtype(fake_torch):
    tensor = fake_torch.Tensor(np.zeros((4, 16), np.int16), fake_torch.bfloat16)
    method = Runtime.get().load_program(FIXTURES / "mlp.pte").load_method("forward")
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype float32, got bfloat16 "):
        method.execute([tensor])


def test_a_bf16_exporter_without_an_integer_view_is_read_through_array():
    class JaxLike:  # DLPack refuses bf16; __array__ gives ml_dtypes' bfloat16, as JAX's arrays do
        dtype = "bfloat16"

        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            raise BufferError("bfloat16 is not supported by this importer")

        def __array__(self, dtype=None, copy=None):
            return self.a

    call = load_calls("bf16_mlp")[0]
    method = Runtime.get().load_program(FIXTURES / "bf16_mlp.pte").load_method("forward")
    (got,) = method.execute([JaxLike(call["inputs"][0])])
    assert ulps(got, call["outputs"][0]).max() == 0


def test_a_bf16_exporter_offering_no_way_in_is_an_invalid_argument():
    class Opaque:
        dtype = "bfloat16"

        def __dlpack__(self, **kwargs):
            raise RuntimeError("Unsupported dtype in DLTensor.")

        def __dlpack_device__(self):
            return (1, 0)

    method = Runtime.get().load_program(FIXTURES / "bf16_mlp.pte").load_method("forward")
    with pytest.raises(InvalidArgumentError, match=r"^input 0: could not copy the Opaque to host memory via "
                                                   r"DLPack \(RuntimeError: Unsupported dtype in DLTensor.\)$"):
        method.execute([Opaque()])


def test_bf16_outputs_come_back_as_torch_bf16_tensors(fake_torch, monkeypatch):
    monkeypatch.delenv("PTERUN_TENSOR_OUTPUT", raising=False)
    call = load_calls("bf16_mlp")[0]
    program = Runtime.get().load_program(FIXTURES / "bf16_mlp.pte", tensor_output="torch")
    (got,) = program.load_method("forward").execute(call["inputs"])
    assert type(got) is fake_torch.Tensor and got.dtype is fake_torch.bfloat16
    assert got.array.dtype == np.int16  # torch.from_numpy of the output's bits, viewed as torch.bfloat16
    np.testing.assert_array_equal(got.array, call["outputs"][0].view(np.int16))
    (f32,) = Runtime.get().load_program(FIXTURES / "mlp.pte", tensor_output="torch").load_method("forward").execute(
        load_calls("mlp")[0]["inputs"])
    assert f32.dtype is fake_torch.float32
