"""The thread count belongs to the Runtime: two Runtimes with different num_threads in one process each compute
on their own count (in the interpreter's kernels, the NumPy engine and LiteRT), also at the same time from two
threads; a Runtime without one follows the process default. A LiteRT delegate of small layers runs on one."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import Runtime, threads
from pterun.delegates import xnnpack
from pterun.delegates.xnnpack import payload as P
from xnn_payloads import F32, Graph

try:
    import ai_edge_litert  # noqa: F401
    HAVE_LITERT = True
except ImportError:
    HAVE_LITERT = False


@pytest.fixture
def default_two():
    """The process default at 2 for one test, restored afterwards."""
    before = threads._width
    threads.set_num_threads(2)
    yield
    threads._width = before


def _seen_counts(method, inputs) -> set:
    """The thread counts the method's instructions run under (read on the calling thread, by a hook)."""
    seen = set()

    def hook(event, run):
        seen.add(threads.num_threads())
        run()

    method.execute(inputs, hook=hook)
    return seen


def test_two_runtimes_in_one_process_each_run_on_their_own_count(default_two):
    x = load_calls("cnn")[0]["inputs"]
    one = Runtime(num_threads=1).load_program(FIXTURES / "cnn.pte").load_method("forward")
    three = Runtime(num_threads=3).load_program(FIXTURES / "cnn.pte").load_method("forward")
    default = Runtime().load_program(FIXTURES / "cnn.pte").load_method("forward")
    assert _seen_counts(one, x) == {1}
    assert _seen_counts(three, x) == {3}
    assert _seen_counts(default, x) == {2}  # no count of its own: the process default, as it is when it runs
    threads.set_num_threads(4)
    assert _seen_counts(default, x) == {4} and _seen_counts(one, x) == {1}
    assert threads.use_threads(None) is None  # every call restored this thread's count afterwards


def test_kernels_split_over_their_methods_count(default_two, monkeypatch):
    monkeypatch.setattr(threads, "SPLIT_TAPS", 0)
    monkeypatch.setattr(threads, "SPLIT_MACS", 0)
    monkeypatch.setattr(threads, "SPLIT_MIN_ROWS", 1)
    parts = []
    real = threads.parallel_for

    def recording(rows, fn, **kw):
        parts.append(threads.num_threads())
        real(rows, fn, **kw)

    monkeypatch.setattr(threads, "parallel_for", recording)
    call = load_calls("cnn")[0]
    outs = {}
    for n in (1, 3):
        method = Runtime(num_threads=n, engine="numpy").load_program(FIXTURES / "cnn.pte").load_method("forward")
        parts.clear()
        outs[n] = method.execute(call["inputs"])[0]
        # one thread: nothing is split; three: every split (each convolution here) on three
        assert (parts == []) if n == 1 else (len(parts) >= 2 and set(parts) == {3}), (n, parts)
    np.testing.assert_allclose(outs[3], outs[1], rtol=1e-5, atol=1e-6)


def test_concurrent_methods_of_two_runtimes_keep_their_counts(default_two):
    x = load_calls("cnn")[0]["inputs"]
    methods = {n: Runtime(num_threads=n).load_program(FIXTURES / "cnn.pte").load_method("forward") for n in (1, 3)}
    barrier = threading.Barrier(2)
    seen: dict = {1: set(), 3: set()}
    errors = []

    def worker(n):
        def hook(event, run):
            seen[n].add(threads.num_threads())
            run()
        try:
            barrier.wait()
            for _ in range(5):
                methods[n].execute(x, hook=hook)
        except Exception as e:  # noqa: BLE001  (re-raised below)
            errors.append(e)

    workers = [threading.Thread(target=worker, args=(n,)) for n in (1, 3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert not errors, errors
    assert seen == {1: {1}, 3: {3}}
    assert threads.num_threads() == 2  # the process default, here, untouched


def test_use_threads_is_per_thread_and_returns_the_previous(default_two):
    assert threads.use_threads(5) is None
    try:
        assert threads.num_threads() == 5 and threads.process_num_threads() == 2
        other = []
        t = threading.Thread(target=lambda: other.append(threads.num_threads()))
        t.start()
        t.join()
        assert other == [2]  # another thread sees the process default
    finally:
        assert threads.use_threads(None) == 5
    assert threads.num_threads() == 2


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
def test_litert_takes_the_loading_runtimes_count(monkeypatch, default_two):
    monkeypatch.setattr(xnnpack, "LITERT_MIN_NODE_WORK", 0)  # the fixture's nodes are small: never fall to 1
    for n in (1, 3):
        method = Runtime(num_threads=n, engine="litert").load_program(FIXTURES / "xnn_mlp_dynamic.pte") \
            .load_method("forward")
        assert [d.engine for d in method.delegates] == ["litert"]
        assert [e.num_threads for e in method._runner.executors] == [n]


# -- how many threads a LiteRT delegate gets: pterun's, or one for a delegate of small layers --------------
def _fc_graph(k: int, n: int) -> Graph:
    g = Graph()
    x = g.input([1, k], P.FP32)
    w = g.value([n, k], P.FP32, data=np.zeros((n, k), F32))
    g.node("FullyConnected", input1_id=x, filter_id=w, bias_id=P.INVALID_ID, output_id=g.output([1, n], P.FP32))
    return g


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
@pytest.mark.parametrize("k,n,want", [(64, 64, 1), (250, 399, 1), (250, 400, 2), (2048, 2048, 2)])
def test_a_delegate_of_small_layers_runs_on_one_thread(default_two, k, n, want):
    # LITERT_MIN_NODE_WORK (pterun.delegates.xnnpack): 100,000 multiply-adds per node on average
    blob, named = _fc_graph(k, n).blob("named")
    plan = xnnpack.load(blob, named, "litert")
    assert (plan.engine, plan.num_threads) == ("litert", want)


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
def test_the_small_transformer_fixture_runs_each_delegate_on_one_thread(default_two):
    from pterun.delegates.xnnpack import Graph as TypedGraph, litert_threads
    method = Runtime(engine="litert").load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    assert len(method.delegates) == 7 and {d.engine for d in method.delegates} == {"litert"}
    graphs = []
    original = TypedGraph.read
    try:
        TypedGraph.read = classmethod(lambda cls, blob, named: graphs.append(original(blob, named)) or graphs[-1])
        Runtime(engine="litert").load_program(FIXTURES / "xnn_transformer.pte").load_method("forward")
    finally:
        TypedGraph.read = original
    assert len(graphs) == 7 and all(0 < g.work_per_node() < 50_000 for g in graphs)
    assert {litert_threads(g) for g in graphs} == {1}


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
def test_the_interpreter_gets_pterun_threads(monkeypatch):
    monkeypatch.setattr(threads, "_width", 2)
    blob, named = _fc_graph(2048, 2048).blob()
    assert xnnpack.load(blob, named, "litert").num_threads == 2
