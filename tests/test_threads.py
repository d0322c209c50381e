"""Threads: one Method called from 8 threads at once gives every caller its own correct result, and
separately loaded programs run side by side."""

from __future__ import annotations

import threading

import numpy as np

from fixtures_util import FIXTURES
from pterun import Runtime


def _run_threads(fn, n):
    results, errors = [None] * n, []
    barrier = threading.Barrier(n)

    def worker(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as e:  # collected and re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_one_method_from_eight_threads():
    m = Runtime.get().load_program(FIXTURES / "resnet_small.pte").load_method("forward")
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 3, 64, 64)).astype(np.float32) for _ in range(8)]
    expected = [m.execute([x])[0] for x in inputs]

    def call(i):
        return [m.execute([inputs[i]])[0] for _ in range(3)]

    results = _run_threads(call, 8)
    for i, outs in enumerate(results):
        for out in outs:
            # a call that finds pterun's pool busy runs its operations whole instead of split, and BLAS may
            # then add in another order: the last bits may differ, a mixed-up result would differ entirely
            np.testing.assert_allclose(out, expected[i], rtol=1e-5, atol=1e-6)
    assert not np.array_equal(expected[0], expected[1])


def test_separately_loaded_programs_in_parallel():
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    reference = Runtime.get().load_program(FIXTURES / "mobilenet_v2.pte").load_method("forward").execute([x])[0]

    def call(i):
        m = Runtime.get().load_program(FIXTURES / "mobilenet_v2.pte").load_method("forward")
        return m.execute([x])[0]

    for out in _run_threads(call, 4):
        np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-6)  # split or whole, as above
