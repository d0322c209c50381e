"""Golden kernel cases: every operator's kernel against ExecuTorch's (or eager PyTorch's) recorded outputs.

The cases live in ``tests/golden/*.npz`` and are generated offline by ``tools/gen_golden.py``. Each case
calls the registered kernel function with the recorded arguments (tensors as the interpreter passes them,
including non-contiguous views), then writes the result the way the interpreter does — ``np.copyto(out,
result, casting="unsafe")`` into a fresh array of the expected shape and dtype — and compares: shape, then
dtype, then values (floats within a tolerance for their dtype, times the output's scale; everything else
exact).
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from pterun.interp.tensor import Tensor
from pterun.kernels import KERNELS
from pterun.kernels.manifest import NOT_SUPPORTED, OPTIMIZED_OPS, PORTABLE_OPS, PRIM_OPS, QUANTIZED_OPS

GOLDEN = Path(__file__).parent / "golden"
BF16 = np.dtype(ml_dtypes.bfloat16)
# relative tolerance per float dtype, applied as |actual - expected| <= rtol * (|expected| + scale / 4), where
# scale is the output's largest finite magnitude (so values near zero after cancellation get some slack)
RTOL = {"float64": 1e-9, "float32": 1e-5, "complex64": 1e-5, "complex128": 1e-9, "float16": 2e-3,
        "bfloat16": 1.6e-2}


@lru_cache(maxsize=None)
def _load(path: Path):
    with np.load(path, allow_pickle=False) as z:
        records = json.loads(str(z["__cases__"]))
        arrays = {k: z[k] for k in z.files if k != "__cases__"}
    return records, arrays


def _all_cases():
    out = []
    for path in sorted(GOLDEN.glob("*.npz")):
        records, _ = _load(path)
        for i, rec in enumerate(records):
            out.append(pytest.param(path, i, id=f"{rec['op']}-{rec['name']}"))
    return out


def _array(arrays, key, dtype):
    a = arrays[key]
    return a.view(BF16) if dtype == "bfloat16" else a


def _layout(a: np.ndarray, layout):
    """The same values as a non-contiguous view, as the interpreter hands out for permuted dim orders."""
    if layout is None or a.ndim == 0 or a.size == 0:
        return a
    if layout == "T" and a.ndim >= 2:
        return np.ascontiguousarray(np.swapaxes(a, -1, -2)).swapaxes(-1, -2)
    big = np.zeros(a.shape + (2,), a.dtype)
    big[..., 0] = a
    view = big[..., 0]
    assert not view.flags.c_contiguous
    return view


def _decode(enc, arrays):
    (kind, value), *rest = enc.items()
    if kind == "t":
        return _layout(_array(arrays, value, enc["dtype"]).copy(), enc.get("layout"))
    if kind == "tl":
        return [_decode(e, arrays) for e in value]
    if kind in ("ints",):
        return tuple(int(v) for v in value)
    if kind == "floats":
        return tuple(float(v) for v in value)
    if kind == "bools":
        return tuple(bool(v) for v in value)
    if kind == "dtype":
        return BF16 if value == "bfloat16" else np.dtype(value)
    if kind == "float":
        return float(value)
    return value  # int, bool, str, none


def _expected(enc, arrays):
    if "list" in enc:
        return [_expected(e, arrays) for e in enc["list"]]
    if "key" in enc:
        return _array(arrays, enc["key"], enc["dtype"])
    if "none" in enc:
        return None
    v = enc["scalar"]
    return {"int": int, "float": float, "bool": bool}.get(enc.get("type"), lambda x: x)(v)


def _fresh(e):
    if isinstance(e, list):
        return [_fresh(x) for x in e]
    if isinstance(e, np.ndarray):
        return np.zeros(e.shape, e.dtype)
    return e


def _write(out, result):
    """The interpreter's write-back: cast into the planned output (dynamic outputs take the result's shape)."""
    if isinstance(out, list):
        assert isinstance(result, (list, tuple)) and len(result) == len(out), (
            f"expected a list of {len(out)} outputs, got {type(result).__name__}")
        return [_write(o, r) for o, r in zip(out, result)]
    if result is None:
        return out
    result = np.asarray(result)
    assert result.shape == out.shape, f"shape {result.shape} != expected {out.shape}"
    np.copyto(out, result, casting="unsafe")
    return out


def _run_raw(kernel, args):
    """Raw kernels (et_view, et_copy_index) take the method's value slots: build them from the case."""
    values, idx = [], []
    for a in args:
        if isinstance(a, np.ndarray):
            storage = np.zeros(max(a.nbytes, 1), np.uint8)
            t = Tensor(a.dtype, a.shape, tuple(range(a.ndim)), storage, dynamic=True)
            np.copyto(t.array, a)
            values.append(t)
        elif isinstance(a, tuple):
            slots = []
            for v in a:
                values.append(v)
                slots.append(len(values) - 1)
            values.append(tuple(slots))
        else:
            values.append(a)
        idx.append(len(values) - 1)
    kernel.fn(values, idx)
    return values[idx[kernel.volatile_args[0]]].array


def _compare(actual, expected, rec, where):
    if isinstance(expected, list):
        assert len(actual) == len(expected), f"{where}: {len(actual)} outputs != {len(expected)}"
        for k, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, rec, f"{where}[{k}]")
        return
    if not isinstance(expected, np.ndarray):
        assert type(actual) is type(expected), f"{where}: {type(actual).__name__} != {type(expected).__name__}"
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(actual), f"{where}: {actual} != nan"
        else:
            assert actual == expected, f"{where}: {actual!r} != {expected!r}"
        return
    assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != expected {expected.shape}"
    assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != expected {expected.dtype}"
    check = rec["check"]
    if check == "shape":
        return
    if check == "uniform":
        assert np.all((actual >= 0) & (actual < 1)) and (actual.size < 2 or np.ptp(actual) > 0), where
        return
    if check == "normal":
        assert np.all(np.isfinite(actual)) and (actual.size < 2 or np.std(actual.astype(np.float64)) > 0.1), where
        return
    name = "bfloat16" if expected.dtype == BF16 else str(expected.dtype)
    if name in RTOL:
        kind = np.complex128 if expected.dtype.kind == "c" else np.float64
        a, e = actual.astype(kind), expected.astype(kind)
        finite = np.isfinite(e)
        scale = float(np.max(np.abs(e[finite]), initial=0.0))
        rtol = rec["tol"] or RTOL[name]
        with np.errstate(invalid="ignore", over="ignore"):
            same = (a == e) | (np.isnan(a) & np.isnan(e))
            err = np.where(same, 0.0, np.abs(a - e))
            bad = ~same & ~(err <= rtol * (np.abs(e) + scale / 4))
        if bad.any():
            pos = np.argwhere(bad)[:5]
            raise AssertionError(f"{where}: {int(bad.sum())} values differ (rtol {rtol}, scale {scale:.3g}); first "
                                 f"(index, expected, actual): "
                                 f"{[(tuple(p), e[tuple(p)], a[tuple(p)]) for p in pos]}; max |diff| "
                                 f"{float(np.nanmax(np.where(np.isnan(err), np.inf, err))):.3g}")
    else:
        mism = np.argwhere(actual != expected)
        assert mism.size == 0, (f"{where}: {len(mism)} mismatches, first at {mism[:5].tolist()}: expected "
                                f"{[expected[tuple(i)] for i in mism[:5]]}, got {[actual[tuple(i)] for i in mism[:5]]}")


def run_case(rec, arrays):
    """(actual, expected) for one recorded case."""
    kernel = KERNELS[rec["op"]]
    args = [_decode(a, arrays) for a in rec["args"]]
    expected = [_expected(o, arrays) for o in rec["outs"]]
    if kernel.raw:
        return [_run_raw(kernel, args)], expected
    snapshot = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    schema = kernel.schema
    outs = [i for i, a in enumerate(schema.args) if a.mutable and a.kwarg_only]
    assert len(args) == len(schema.args) - len(outs), f"case has {len(args)} arguments for {schema}"
    first_out = len(expected) - len(outs)
    call, it = [], iter(args)
    for i in range(len(schema.args)):
        call.append(_fresh(expected[first_out + outs.index(i)]) if i in outs else next(it))
    result = kernel.fn(*call)
    written = [i for i in schema.mutable if i not in outs]  # in-place ops may update these directly
    for k, (a, s) in enumerate(zip(args, snapshot)):  # everything else is never modified
        if isinstance(a, np.ndarray) and k not in written:
            assert a.tobytes() == s.tobytes(), "kernel modified an input"
    if not schema.mutable:  # scalar-returning op (prim, sym) or a functional tensor op
        return [result], expected
    if len(schema.mutable) == 1:
        result = (result,)
    assert isinstance(result, tuple) and len(result) == len(schema.mutable), (
        f"kernel returned {type(result).__name__}, expected {len(schema.mutable)} written values")
    actual = []
    for j, (i, r) in enumerate(zip(schema.mutable, result)):
        target = _fresh(expected[j])
        if r is None:  # left untouched: the argument keeps its current value
            r = call[i]
        actual.append(_write(target, r))
    return actual, expected


@pytest.mark.parametrize("path,index", _all_cases())
def test_golden_case(path, index):
    records, arrays = _load(path)
    rec = records[index]
    if rec["op"] in NOT_SUPPORTED:
        pytest.skip(f"{rec['op']} is not supported: {NOT_SUPPORTED[rec['op']]}")
    actual, expected = run_case(rec, arrays)
    where = f"{rec['op']} {rec['name']} ({rec['source']})"
    if rec["check"] == "dropout":  # random: the kept elements pass through unscaled (ExecuTorch), the rest are 0
        x = _decode(rec["args"][0], arrays)
        out, mask = actual
        assert mask.dtype == np.bool_ and out.shape == x.shape == mask.shape, where
        assert np.array_equal(out, np.where(mask, x, 0)), where
        assert 0 < mask.mean() < 1, where
        return
    _compare(actual, expected, rec, where)


def _manifest():
    return {**{k: "portable" for k in PORTABLE_OPS}, **{k: "prim" for k in PRIM_OPS},
            **{k: "quantized" for k in QUANTIZED_OPS}, **{k: "optimized" for k in OPTIMIZED_OPS}}


def test_every_manifest_operator_is_registered_with_two_golden_cases():
    counts: dict[str, int] = {}
    for path in GOLDEN.glob("*.npz"):
        for rec in _load(path)[0]:
            counts[rec["op"]] = counts.get(rec["op"], 0) + 1
    unregistered = sorted(op for op in _manifest() if op not in KERNELS)
    assert not unregistered, f"manifest operators without a kernel: {unregistered}"
    thin = sorted(f"{op} ({counts.get(op, 0)})" for op in _manifest() if counts.get(op, 0) < 2)
    assert not thin, f"operators with fewer than two golden cases: {thin}"


def test_registry_has_nothing_outside_the_manifest():
    allowed = _manifest()
    stray = sorted(k for k in KERNELS if k not in allowed and not k.startswith(("llama::", "preprocess::")))
    assert not stray, f"registered operators missing from the manifest: {stray}"


def test_manifest_sections_match_the_spec_counts():
    # functions.yaml has 209 portable entries, custom_ops.yaml adds allclose.out / allclose.Tensor
    assert len(PORTABLE_OPS) == 211
    assert len(QUANTIZED_OPS) == 19
    assert set(OPTIMIZED_OPS) == {"aten::_fft_r2c.out", "aten::_fft_c2r.out", "aten::linear.out"}
    assert {"aten::sym_size.int", "aten::sym_numel", "aten::_local_scalar_dense",
            "executorch_prim::et_view.default", "executorch_prim::et_copy_index.tensor"} <= set(PRIM_OPS)


def test_the_comparison_catches_wrong_values():
    rec = {"check": "values", "tol": None}
    expected = np.array([1.0, -2.0, 0.5], np.float32)
    _compare(expected + np.float32(1e-7), expected, rec, "close")  # within float32 tolerance
    with pytest.raises(AssertionError):
        _compare(expected + np.float32(1e-3), expected, rec, "off")
    with pytest.raises(AssertionError):
        _compare(np.array([1, 2], np.int32), np.array([1, 3], np.int32), rec, "int")
    with pytest.raises(AssertionError):
        _compare(expected.astype(np.float64), expected, rec, "dtype")
