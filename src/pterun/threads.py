"""The threads pterun computes on: its own small worker pool, and the BLAS library NumPy uses.

NumPy's BLAS (OpenBLAS in the wheels) starts one thread per core, and its threads spin while they wait. On a
small board shared with other work that can make small matrix products many times slower. So when you choose a
thread count, ``Runtime(num_threads=N)`` or ``PTERUN_NUM_THREADS=N`` (read when the first Runtime is made),
pterun holds BLAS at one thread and splits its large operations itself: convolutions, depthwise convolutions and
large matrix products are cut into N row ranges that run at once, one on the calling thread and the rest on
N - 1 pool threads that sleep (they do not spin) between operations. Operations too small to gain from a split
run whole on the calling thread. Without a setting, pterun uses one thread of its own and leaves the BLAS
library's setting alone (``OPENBLAS_NUM_THREADS`` etc.).

``threadpoolctl`` is used to set BLAS when it is installed (``pip install 'pterun[threads]'``); otherwise pterun
calls OpenBLAS's own setter in the library NumPy loaded.

Example::

    >>> from pterun.threads import parallel_for, set_num_threads
    >>> set_num_threads(2)               # doctest: +SKIP
    >>> parts = []
    >>> parallel_for(10, parts.append)   # one call per part, over [0, 10)  # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import os
import threading

from pterun._log import logger

__all__ = ["set_blas_threads", "blas_threads", "set_num_threads", "num_threads", "parallel_for", "split_dot",
           "splittable"]

_SETTERS = ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads")
_GETTERS = ("openblas_get_num_threads", "openblas_get_num_threads64_", "scipy_openblas_get_num_threads64_",
            "scipy_openblas_get_num_threads")


def _openblas_libs() -> list:
    import numpy  # noqa: F401  (loads the BLAS library)

    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if line.strip() else ""
                if "openblas" in path.lower() and ".so" in path and path not in paths:
                    paths.append(path)
    except OSError:
        return []
    libs = []
    for p in paths:
        try:
            libs.append(ctypes.CDLL(p))
        except OSError:
            continue
    return libs


def _call(names, lib, *args):
    for n in names:
        fn = getattr(lib, n, None)
        if fn is not None:
            return fn(*args)
    return None


def set_blas_threads(n: int) -> bool:
    """Limit NumPy's BLAS to ``n`` threads; returns whether a BLAS library took the setting."""
    if int(n) < 1:
        raise ValueError(f"num_threads must be at least 1, got {n}")
    try:
        from threadpoolctl import threadpool_limits  # optional
    except ImportError:
        pass
    else:
        threadpool_limits(limits=int(n), user_api="blas")
        return True
    done = False
    for lib in _openblas_libs():
        if any(hasattr(lib, s) for s in _SETTERS):
            _call(_SETTERS, lib, ctypes.c_int(int(n)))
            done = True
    if not done:
        logger().warning("could not set the BLAS thread count: no OpenBLAS found and threadpoolctl is not installed")
    return done


def blas_threads() -> int | None:
    """The BLAS thread count, when it can be read."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        for lib in _openblas_libs():
            v = _call(_GETTERS, lib)
            if v is not None:
                return int(v)
        return None
    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return counts[0] if counts else None


# -- pterun's own threads ------------------------------------------------------------------------------------
# Work below which a split is not worth waking another thread (about 0.2-0.3 ms on one core): multiply-adds of
# a matrix product, weights a one-row product reads (memory-bound), and output elements times kernel taps of a
# depthwise convolution; a product's part has at least SPLIT_MIN_ROWS rows (four times as many columns).
SPLIT_MACS = 8_000_000
SPLIT_GEMV = 1_000_000
SPLIT_TAPS = 3_000_000
SPLIT_MIN_ROWS = 64

_width = 1  # threads a split operation may use, the calling thread included
_pool: _Pool | None = None
_pool_lock = threading.Lock()


def splittable(m: int, k: int, n: int) -> bool:
    """Whether an ``[m, k] x [k, n]`` product is large enough for :func:`split_dot`."""
    return m >= 2 * SPLIT_MIN_ROWS and m * k * n >= SPLIT_MACS or m == 1 and k * n >= SPLIT_GEMV


def split_dot(a, b, out) -> None:
    """``out = a @ b`` (2-D, ``out`` C-contiguous of the product's dtype) over pterun's threads: by rows, or by
    columns when ``a`` has one row (a decode step: each thread streams its own share of the weights)."""
    import numpy as np  # loaded by then; not at ``import pterun.threads``'s own cost

    m, n = a.shape[0], b.shape[1]
    if m == 1:
        parallel_for(n, lambda lo, hi: np.dot(a, b[:, lo:hi], out[:, lo:hi]), min_rows=4 * SPLIT_MIN_ROWS)
    else:
        parallel_for(m, lambda lo, hi: np.dot(a[lo:hi], b, out[lo:hi]), min_rows=SPLIT_MIN_ROWS)


def set_num_threads(n: int) -> None:
    """Let pterun split large operations over ``n`` threads (the caller's and ``n - 1`` of its own).

    Process-wide. The pool threads start on the first split and sleep between operations. This leaves BLAS as
    it is; ``Runtime(num_threads=n)`` also holds it at one thread, so that split products do not oversubscribe.
    """
    global _width
    n = int(n)
    if n < 1:
        raise ValueError(f"num_threads must be at least 1, got {n}")
    _width = n


def num_threads() -> int:
    """How many threads a split operation uses (1: pterun runs every operation on the calling thread)."""
    return _width


def parallel_for(rows: int, fn, *, min_rows: int = 1) -> None:
    """Call ``fn(lo, hi)`` over ``[0, rows)`` in up to :func:`num_threads` contiguous parts, at once.

    Each part gets at least ``min_rows`` rows. The calling thread runs the first part. When the pool is
    already busy (another thread's operation, or a part that splits again) the whole range runs here instead,
    so nested or concurrent calls never wait on each other. The first exception a part raises is re-raised
    here once every part has finished. Callers split only work big enough to repay the hand-off (tens of
    microseconds to wake a sleeping thread).
    """
    parts = min(_width, rows // max(min_rows, 1))
    if parts <= 1:
        fn(0, rows)
        return
    pool = _get_pool(parts - 1)
    if not pool.busy.acquire(blocking=False):
        fn(0, rows)
        return
    try:
        bounds = [rows * i // parts for i in range(parts + 1)]
        pool.run(fn, bounds)
    finally:
        pool.busy.release()


class _Worker:
    """One sleeping thread: ``start(fn, lo, hi)`` hands it a part, ``join()`` waits for it."""

    def __init__(self):
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._job = None
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, name="pterun-worker", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            fn, lo, hi = self._job
            self._job = None
            try:
                fn(lo, hi)
            except BaseException as e:  # noqa: BLE001  (handed to the caller by join)
                self.error = e
            self._done.release()

    def start(self, fn, lo: int, hi: int) -> None:
        self._job = (fn, lo, hi)
        self._go.release()

    def join(self) -> BaseException | None:
        self._done.acquire()
        err, self.error = self.error, None
        return err


class _Pool:
    def __init__(self):
        self.busy = threading.Lock()
        self.workers: list[_Worker] = []

    def run(self, fn, bounds: list[int]) -> None:
        started = []
        try:
            for w, lo, hi in zip(self.workers, bounds[1:-1], bounds[2:]):
                w.start(fn, lo, hi)
                started.append(w)
            fn(bounds[0], bounds[1])
        finally:
            errors = [w.join() for w in started]
        for e in errors:
            if e is not None:
                raise e


def _get_pool(helpers: int) -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _Pool()
        while len(_pool.workers) < helpers:
            _pool.workers.append(_Worker())
        return _pool


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts a pool of its own when it needs one."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
