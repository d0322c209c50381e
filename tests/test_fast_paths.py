"""Load-time fast paths give exactly the general kernels' results, and are used where they apply."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import Runtime
from pterun.kernels import KERNELS

rng = np.random.default_rng(0)
F = np.float32


def _general(name, args, out_shape, out_dtype):
    out = np.zeros(out_shape, out_dtype)
    np.copyto(out, KERNELS[name].fn(*args[:-1], out), casting="unsafe")
    return out


CASES = [
    ("aten::add.out", lambda o: (rng.standard_normal((3, 4)).astype(F), rng.standard_normal(4).astype(F), 1, o), (3, 4)),
    ("aten::sub.out", lambda o: (rng.standard_normal((3, 4)).astype(F), rng.standard_normal((3, 4)).astype(F), 1, o),
     (3, 4)),
    ("aten::mul.out", lambda o: (rng.standard_normal((2, 3)).astype(F), rng.standard_normal((2, 1)).astype(F), o),
     (2, 3)),
    ("aten::div.out", lambda o: (rng.standard_normal(5).astype(F), rng.standard_normal(5).astype(F) + 3, o), (5,)),
    ("aten::mul.Scalar_out", lambda o: (rng.standard_normal(5).astype(F), 0.3, o), (5,)),
    ("aten::add.Scalar_out", lambda o: (rng.standard_normal(5).astype(F), 2, 1, o), (5,)),
    ("aten::relu.out", lambda o: (rng.standard_normal((2, 5)).astype(F), o), (2, 5)),
    ("aten::hardtanh.out", lambda o: (3 * rng.standard_normal(7).astype(F), 0.0, 6.0, o), (7,)),
    ("aten::permute_copy.out", lambda o: (rng.standard_normal((2, 3, 4)).astype(F), (2, 0, 1), o), (4, 2, 3)),
    ("aten::view_copy.out", lambda o: (rng.standard_normal((2, 6)).astype(F), (3, -1), o), (3, 4)),
    ("aten::mm.out", lambda o: (rng.standard_normal((3, 4)).astype(F), rng.standard_normal((4, 2)).astype(F), o),
     (3, 2)),
    ("aten::bmm.out", lambda o: (rng.standard_normal((2, 3, 4)).astype(F), rng.standard_normal((2, 4, 5)).astype(F), o),
     (2, 3, 5)),
    ("aten::addmm.out", lambda o: (rng.standard_normal(2).astype(F), rng.standard_normal((3, 4)).astype(F),
                                   rng.standard_normal((4, 2)).astype(F), 1, 1, o), (3, 2)),
    ("aten::linear.out", lambda o: (rng.standard_normal((3, 4)).astype(F), rng.standard_normal((2, 4)).astype(F),
                                    rng.standard_normal(2).astype(F), o), (3, 2)),
    ("aten::sigmoid.out", lambda o: (20 * rng.standard_normal((3, 4)).astype(F), o), (3, 4)),
    ("aten::tanh.out", lambda o: (rng.standard_normal(6).astype(F), o), (6,)),
    ("aten::exp.out", lambda o: (rng.standard_normal(6).astype(F), o), (6,)),
    ("aten::slice_copy.Tensor_out", lambda o: (rng.standard_normal((4, 6)).astype(F), 1, 1, 5, 2, o), (4, 2)),
    ("aten::squeeze_copy.dims_out", lambda o: (rng.standard_normal((3, 1, 2)).astype(F), (1,), o), (3, 2)),
    ("aten::expand_copy.out", lambda o: (rng.standard_normal((3, 1)).astype(F), (2, 3, 4), False, o), (2, 3, 4)),
]


@pytest.mark.parametrize("name,make,shape", CASES, ids=[c[0] for c in CASES])
def test_fast_path_equals_general_kernel(name, make, shape):
    if name == "aten::relu.out":
        _skip_relu_without_sign_keeping_clip()
    out = np.zeros(shape, F)
    args = make(out)
    step = KERNELS[name].specialize(*args)
    assert step is not None, f"{name}: the fast path should apply"
    step()  # what it returns is ignored (test_steps_in_chains_with_jumps_return_none)
    expected = _general(name, args, shape, F)
    np.testing.assert_array_equal(out, expected)


def test_split_fast_path_fills_every_output():
    x = rng.standard_normal((2, 7)).astype(F)
    outs = [np.zeros((2, 3), F), np.zeros((2, 4), F)]
    step = KERNELS["aten::split_with_sizes_copy.out"].specialize(x, (3, 4), 1, outs)
    assert step is not None
    step()
    np.testing.assert_array_equal(outs[0], x[:, :3])
    np.testing.assert_array_equal(outs[1], x[:, 3:])


def test_fast_path_declines_what_it_cannot_do_exactly():
    # a reshape of a non-contiguous array is a copy, not a view of self: taken once it would go stale
    transposed = np.zeros((3, 4), F).T
    assert KERNELS["aten::view_copy.out"].specialize(transposed, (12,), np.zeros(12, F)) is None
    o = np.zeros(3, F)
    ints = np.arange(3, dtype=np.int32)
    assert KERNELS["aten::add.out"].specialize(ints, ints, 1, o) is None  # mixed dtypes: promotion needed
    assert KERNELS["aten::add.out"].specialize(o, o, 2, o) is None  # alpha != 1
    assert KERNELS["aten::mm.out"].specialize(np.ones((3, 3), F), np.ones((3, 3), F), np.ones((2, 2), F)) is None


def test_the_mlp_runs_on_fast_paths(monkeypatch):
    monkeypatch.setenv("PTERUN_NO_FOLD", "1")  # keep the weights' permutes as steps (folded, they run at load)
    m = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward")  # not one LiteRT call
    (chain,) = m._runner.chains
    steps, info = chain.steps, chain.info
    fast = [name for s, (name, *_) in zip(steps, info)
            if not getattr(s, "__qualname__", "").startswith(("StepBuilder.", "_stepper."))]  # general steps
    assert "aten::addmm.out" in fast and "aten::permute_copy.out" in fast and "aten::gelu.out" in fast


def _ulp_distance(a, b):
    """Float32 ulps between ``a`` and ``b`` (ordered bit patterns, so -0.0 and 0.0 are 0 apart)."""
    def ordered(x):
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def test_gelu_fast_path_is_within_one_ulp_of_the_general_kernel():
    gelu = KERNELS["aten::gelu.out"]
    special = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e30, -1e30, 20.0, -20.0]
    # a dense grid over where gelu is neither x nor 0, more than one pass of the fast path's chunk
    x = np.concatenate([np.linspace(-10, 10, 400_003, dtype=np.float32), np.array(special, F)]).reshape(-1, 16)
    out = np.full(x.shape, 7.0, F)
    step = gelu.specialize(x, "none", out)
    assert step is not None
    with np.errstate(all="ignore"):  # as the interpreter runs steps: -inf * 0 is NaN, quietly
        step()
        expected = _general("aten::gelu.out", (x, "none", out), x.shape, F)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(out), nan)  # gelu(-inf) and gelu(nan) are NaN in both
    assert _ulp_distance(out[~nan], expected[~nan]).max() <= 1
    np.testing.assert_array_equal(np.signbit(out[~nan]), np.signbit(expected[~nan]))
    tail = x.reshape(-1)[-len(special):]
    np.testing.assert_array_equal(out.reshape(-1)[-len(special):], expected.reshape(-1)[-len(special):],
                                  err_msg=f"special values {tail}")


def test_gelu_fast_path_follows_its_input_and_declines_other_cases():
    gelu = KERNELS["aten::gelu.out"]
    x = rng.standard_normal((4, 32)).astype(F)
    out = np.zeros_like(x)
    step = gelu.specialize(x, "none", out)
    for _ in range(2):  # the step reads x anew on each call
        x[...] = rng.standard_normal(x.shape).astype(F)
        step()
        np.testing.assert_array_equal(out, _general("aten::gelu.out", (x, "none", out), x.shape, F))
    channels_last = np.zeros((1, 3, 4, 4), F).transpose(0, 2, 3, 1)
    step = gelu.specialize(channels_last, "none", np.zeros_like(channels_last))
    assert step is not None  # a transposed but dense layout is still one flat pass
    assert gelu.specialize(x, "tanh", out) is None
    assert gelu.specialize(x.astype(np.float64), "none", out.astype(np.float64)) is None
    assert gelu.specialize(x[:, ::2], "none", np.zeros((4, 16), F)) is None  # strided: not one flat pass


def _skip_relu_without_sign_keeping_clip():
    from pterun.kernels import fast
    if not fast._CLIP_KEEPS_NEGATIVE_ZERO:
        pytest.skip("this NumPy's clip turns -0.0 into +0.0, so relu runs the general kernel (no fast path)")


def test_relu_has_no_fast_path_where_clip_loses_the_sign_of_zero(monkeypatch):
    from pterun.kernels import fast
    x = np.array([-0.0, 1.0], F)
    monkeypatch.setattr(fast, "_CLIP_KEEPS_NEGATIVE_ZERO", False)
    assert KERNELS["aten::relu.out"].specialize(x, np.zeros_like(x)) is None


def test_relu_fast_path_is_bitwise_the_general_kernel_on_special_values():
    _skip_relu_without_sign_keeping_clip()
    # -0.0 stays -0.0 and NaN passes through in the general kernel (where(x < 0, 0, x)); maximum(x, 0) would
    # turn -0.0 into +0.0
    x = np.array([-0.0, 0.0, np.nan, -np.inf, np.inf, 1e-45, -1e-45, 3.5, -2.0], F)
    out = np.zeros_like(x)
    KERNELS["aten::relu.out"].specialize(x, out)()
    np.testing.assert_array_equal(out.view(np.uint32), _general("aten::relu.out", (x, out), x.shape, F).view(np.uint32))
    assert np.signbit(out[0])


def test_fast_steps_run_unwrapped_in_chains_with_jumps():
    # a fast step returns its NumPy call's result; the loop ignores what steps return (a JumpFalseCall is a
    # JumpFalse record, not a step), so chains with jumps hold the same fast steps as chains without
    from pterun.interp.loop import JumpFalse
    method = Runtime.get().load_program(FIXTURES / "cond.pte").load_method("forward")
    runner = method._runner
    jump_chains = [c.steps for c in runner.chains if c.jumps]
    assert jump_chains
    fast = [s for steps in jump_chains for s in steps if isinstance(s, partial)]
    assert fast and any(s() is not None for s in fast)  # they do return something, which must not be a jump
    assert any(type(s) is JumpFalse for steps in jump_chains for s in steps)
    call = load_calls("cond")[0]
    assert_matches(method.execute(call["inputs"])[0], call["outputs"][0], "cond")

@pytest.mark.parametrize("name", ["aten::add.out", "aten::sub.out", "aten::mul.out", "aten::minimum.out",
                                  "aten::maximum.out"])
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, np.float32])
def test_integer_and_extreme_fast_paths_equal_the_general_kernel(name, dtype):
    # T5's relative-position buckets: int64 adds and a minimum between two delegate calls; integers wrap as the
    # general kernel's NumPy arithmetic does, and minimum / maximum propagate NaN as it does
    info = np.iinfo(dtype) if np.dtype(dtype).kind in "iu" else None
    if info is not None:
        a = rng.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
        b = rng.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    else:
        a, b = rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(4).astype(dtype)
        a[0, 0], b[1] = np.nan, np.nan
    args = (a, b, 1) if name in ("aten::add.out", "aten::sub.out") else (a, b)
    out = np.zeros((3, 4), dtype)
    step = KERNELS[name].specialize(*args, out)
    assert step is not None, f"{name} on {np.dtype(dtype)}: the fast path should apply"
    step()
    np.testing.assert_array_equal(out, _general(name, (*args, out), (3, 4), dtype))
    assert KERNELS[name].specialize(a, b.astype(np.float64), *args[2:], out) is None  # mixed dtypes: the general kernel
