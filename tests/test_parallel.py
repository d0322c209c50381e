"""pterun's own threads: parallel_for's contract, Runtime(num_threads=), and the XNNPACK kernels that split
their work giving the same numbers as one thread."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from pterun import Runtime, threads
from pterun.delegates.xnnpack.numpy_engine import conv, windows
from pterun.threads import blas_threads, num_threads, parallel_for, set_blas_threads, set_num_threads

from fixtures_util import FIXTURES, FORK_OF_A_THREADED_PROCESS, load_calls
from xnn_refs import close, randn, ref_conv


@pytest.fixture
def width():
    """Set pterun's thread count for one test, restoring it (and BLAS) afterwards."""
    before, blas = num_threads(), blas_threads()

    def set_(n):
        set_num_threads(n)

    yield set_
    set_num_threads(before)
    if blas:
        set_blas_threads(blas)


@pytest.fixture
def always_split(monkeypatch):
    """Split every convolution, however small, so the fixtures exercise the split paths."""
    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_TAPS", 0)


def _record(rows, **kw):
    calls = []

    def fn(lo, hi):
        calls.append((lo, hi, threading.get_ident()))

    parallel_for(rows, fn, **kw)
    return sorted(calls)


def test_one_thread_runs_the_whole_range_here(width):
    width(1)
    assert _record(10) == [(0, 10, threading.get_ident())]


def test_parts_cover_the_range_once_on_distinct_threads(width):
    width(3)
    calls = _record(10)
    assert [(lo, hi) for lo, hi, _ in calls] == [(0, 3), (3, 6), (6, 10)]
    assert len({t for _, _, t in calls}) == 3
    assert calls[0][2] == threading.get_ident()  # the caller runs the first part


def test_min_rows_limits_the_parts(width):
    width(4)
    assert [(lo, hi) for lo, hi, _ in _record(5, min_rows=2)] == [(0, 2), (2, 5)]
    assert [(lo, hi) for lo, hi, _ in _record(3, min_rows=2)] == [(0, 3)]
    assert _record(0) == [(0, 0, threading.get_ident())]


def test_an_exception_in_a_pool_thread_reaches_the_caller(width):
    width(2)

    def fn(lo, hi):
        if lo > 0:
            raise ValueError(f"part {lo}:{hi} failed")

    with pytest.raises(ValueError, match=r"^part 5:10 failed$"):
        parallel_for(10, fn)
    assert [(lo, hi) for lo, hi, _ in _record(10)] == [(0, 5), (5, 10)]  # the pool still works


def test_an_exception_on_the_caller_waits_for_the_other_parts(width):
    width(2)
    done = []

    def fn(lo, hi):
        if lo == 0:
            raise KeyError("first")
        threading.Event().wait(0.05)
        done.append(lo)

    with pytest.raises(KeyError):
        parallel_for(10, fn)
    assert done == [5]  # the pool thread finished before the error surfaced


def test_nested_and_concurrent_calls_run_inline_instead_of_waiting(width):
    width(2)
    seen = []

    def inner(lo, hi):
        seen.append(("inner", lo, hi))

    def outer(lo, hi):
        parallel_for(4, inner)  # the pool is busy: this runs whole, here
        seen.append(("outer", lo, hi))

    parallel_for(2, outer)
    assert sorted(seen) == [("inner", 0, 4), ("inner", 0, 4), ("outer", 0, 1), ("outer", 1, 2)]

    totals = []

    def caller():
        acc = np.zeros(1000)
        parallel_for(1000, lambda lo, hi: acc.__setitem__(slice(lo, hi), 1.0))
        totals.append(acc.sum())

    ts = [threading.Thread(target=caller) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert totals == [1000.0] * 6


def test_bad_thread_counts():
    with pytest.raises(ValueError, match="^num_threads must be at least 1, got 0$"):
        set_num_threads(0)
    with pytest.raises(ValueError, match="^num_threads must be at least 1, got -2$"):
        Runtime(num_threads=-2)


def test_runtime_num_threads_splits_and_holds_blas_at_one(width):
    rt = Runtime(num_threads=2)
    assert rt.num_threads == 2
    assert num_threads() == 2
    if blas_threads() is not None:
        assert blas_threads() == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@FORK_OF_A_THREADED_PROCESS
def test_a_forked_child_gets_a_pool_of_its_own(width):
    width(2)
    _record(4)  # the parent's pool thread exists now
    pid = os.fork()
    if pid == 0:  # child: the parent's pool thread is gone; a split must still finish
        try:
            calls = _record(4)
            os._exit(0 if [(lo, hi) for lo, hi, _ in calls] == [(0, 2), (2, 4)] else 3)
        except BaseException:  # noqa: BLE001
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# -- the kernels that split ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,stride,pads,cin", [
    ((3, 3), (1, 1), (1, 1, 1, 1), 3),    # tap-major patches (few channels)
    ((3, 3), (2, 2), (1, 0, 1, 2), 20),   # pixel-major patches, strided
    ((1, 1), (1, 1), (0, 0, 0, 0), 8),    # pointwise: rows of the input itself
    ((1, 1), (2, 2), (0, 0, 0, 0), 8),    # strided pointwise
])
def test_split_conv2d_matches_the_reference(width, always_split, kernel, stride, pads, cin):
    x, w, b = randn(1, 9, 7, cin), randn(5, *kernel, cin), randn(5)
    k = conv.Conv2d(w, b, windows.Geometry(pads, kernel, stride, (1, 1)))
    k.clamp = (np.float32(-0.5), np.float32(0.75))
    width(1)
    one = k(x)
    width(3)
    many = k(x)
    want = np.clip(ref_conv(x, w, b, stride, pads, (1, 1), 1), -0.5, 0.75)
    close(many, want, where="split conv")
    np.testing.assert_allclose(many, one, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("stride,pads", [((1, 1), (1, 1, 1, 1)), ((2, 2), (0, 1, 1, 0))])
def test_split_depthwise_is_identical_to_one_thread(width, always_split, stride, pads):
    c = 4
    x, w, b = randn(2, 11, 6, c), randn(1, 3, 3, c), randn(c)
    dw = conv.DepthwiseConv2d(w, b, windows.Geometry(pads, (3, 3), stride, (1, 1)), 1)
    dw.clamp = (np.float32(0), np.float32(6))
    width(1)
    one = dw(x)
    width(3)
    many = dw(x)
    np.testing.assert_array_equal(many, one)  # the same float32 operations on every element
    w_grouped = w[0].transpose(2, 0, 1)[:, :, :, None]
    close(many, np.clip(ref_conv(x, w_grouped, b, stride, pads, (1, 1), c), 0, 6), where="split depthwise")


def test_mobilenet_fixture_with_threads_matches_the_reference(width, always_split):
    width(2)
    method = Runtime.get().load_program(FIXTURES / "xnn_mobilenet_v2.pte", engine="numpy").load_method("forward")
    for call in load_calls("xnn_mobilenet_v2"):
        (got,), (want,) = method.execute(call["inputs"]), call["outputs"]
        scale = float(np.max(np.abs(want)))
        assert float(np.max(np.abs(got - want))) <= 1e-5 * scale


def test_split_operations_write_no_floating_point_warnings(width, monkeypatch):
    # inf * 0 in the parts pterun's pool threads run: NaNs in the outputs, nothing on stderr (execute ignores
    # NumPy's floating-point errors on the calling thread, and the pool threads must too)
    import warnings

    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_MIN_ROWS", 1)
    width(3)
    method = Runtime.get().load_program(FIXTURES / "xnn_mlp_dynamic.pte", engine="numpy").load_method("forward")
    x = np.full((16, 16), np.inf, np.float32)
    x[:, ::2] = -np.inf
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (out,) = method.execute([x])
    assert np.isnan(out).all()
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize("rows", [1, 16])
def test_split_fully_connected_matches_one_thread(width, monkeypatch, rows):
    # one row splits the weight columns (a decode step), several rows split the rows
    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_GEMV", 0)
    monkeypatch.setattr(threads, "SPLIT_MIN_ROWS", 1)
    method = Runtime.get().load_program(FIXTURES / "xnn_mlp_dynamic.pte", engine="numpy").load_method("forward")
    x = randn(rows, 16)
    width(1)
    one = method.execute([x])[0]
    calls = []
    monkeypatch.setattr(threads, "_width", 3)
    real = threads.parallel_for

    def counting(n, fn, **kw):
        calls.append(n)
        real(n, fn, **kw)

    monkeypatch.setattr(threads, "parallel_for", counting)
    many = method.execute([x])[0]
    assert len(calls) == 3  # every layer split
    np.testing.assert_allclose(many, one, rtol=1e-6, atol=1e-6)


def test_portable_convolutions_split_and_match_the_recorded_outputs(width, monkeypatch):
    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_TAPS", 0)
    monkeypatch.setattr(threads, "SPLIT_MIN_ROWS", 1)
    calls = []
    real = threads.parallel_for
    monkeypatch.setattr(threads, "parallel_for", lambda n, fn, **kw: (calls.append(fn.__name__), real(n, fn, **kw)))
    width(2)
    method = Runtime(engine="numpy").load_program(FIXTURES / "mobilenet_v2.pte").load_method("forward")
    for call in load_calls("mobilenet_v2"):
        (got,), (want,) = method.execute(call["inputs"]), call["outputs"]
        assert float(np.max(np.abs(got - want))) <= 1e-5 * float(np.max(np.abs(want)))
    assert set(calls) == {"<lambda>", "channels"}  # the GEMM rows and the depthwise channels both split


@pytest.mark.parametrize("m", [1, 6])  # one row splits by columns, several by rows
@pytest.mark.parametrize("bias_shape", [None, (1,), (7,), (1, 7), "rows", "rows1"])
def test_portable_products_split_and_match_one_thread(width, monkeypatch, m, bias_shape):
    from pterun.kernels import KERNELS

    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_GEMV", 0)
    monkeypatch.setattr(threads, "SPLIT_MIN_ROWS", 1)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 5)).astype(np.float32)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    shape = {"rows": (m, 7), "rows1": (m, 1)}.get(bias_shape, bias_shape)
    bias = None if shape is None else rng.standard_normal(shape).astype(np.float32)
    cases = [("aten::mm.out", (a, w.T))]
    if bias is None or bias.ndim == 1:  # linear's bias is 1-D
        cases.append(("aten::linear.out", (a, w, bias)))
    if bias is not None:
        cases.append(("aten::addmm.out", (bias, a, w.T, 1, 1)))
    for name, args in cases:
        want = np.zeros((m, 7), np.float32)
        width(1)
        with np.errstate(all="ignore"):  # as under execute (CI once saw "invalid value encountered in dot" here)
            KERNELS[name].specialize(*args, want)()
        got = np.zeros((m, 7), np.float32)
        width(3)
        calls = []
        real = threads.parallel_for
        monkeypatch.setattr(threads, "parallel_for", lambda n, fn, **kw: (calls.append(n), real(n, fn, **kw)))
        with np.errstate(all="ignore"):
            KERNELS[name].specialize(*args, got)()
        monkeypatch.setattr(threads, "parallel_for", real)
        assert calls == [7 if m == 1 else m], name  # split by columns for one row, else by rows
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=name)


def test_scratch_memory_belongs_to_the_plan_and_is_freed_with_it():
    import gc
    import weakref

    from pterun.delegates.xnnpack.numpy_engine import NumpyPlan

    call = load_calls("xnn_cnn")[0]
    program = Runtime(num_threads=1).load_program(FIXTURES / "xnn_cnn.pte", engine="numpy")
    method = program.load_method("forward")
    (plan,) = method._runner.executors
    assert type(plan) is NumpyPlan
    other = Runtime(num_threads=1).load_program(FIXTURES / "xnn_cnn.pte", engine="numpy").load_method("forward")
    assert other._runner.executors[0].scratch is not plan.scratch  # each plan its own work memory
    method.execute(call["inputs"])
    held = plan.scratch.nbytes()
    assert held > 0  # the convolutions gathered their patches there
    method.execute(call["inputs"])
    assert plan.scratch.nbytes() == held  # reused, not grown, on the next call
    ref = weakref.ref(plan.scratch)
    del plan, method, program
    gc.collect()
    assert ref() is None  # gone with the plan: no module-level buffer keeps it


def test_one_scratch_serves_kernels_running_on_several_threads_at_once(width):
    width(1)
    scratch = windows.Scratch()
    k = conv.Conv2d(randn(8, 3, 3, 4), randn(8), windows.Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)),
                      scratch=scratch)
    dw = conv.DepthwiseConv2d(randn(1, 3, 3, 8), None, windows.Geometry((1, 1, 1, 1), (3, 3), (1, 1), (1, 1)), 1,
                             scratch=scratch)
    xs = [randn(1, 12, 12, 4) for _ in range(4)]
    expected = [dw(k(x)) for x in xs]
    barrier = threading.Barrier(4)
    got, errors = [None] * 4, []

    def worker(i):
        try:
            barrier.wait()
            for _ in range(20):
                got[i] = dw(k(xs[i]))
        except Exception as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)  # same thread count, same path: the same numbers
