"""The threads pterun computes on: its own small worker pool, and the BLAS library NumPy uses.

The rule, out of the box:

* pterun splits large operations over as many threads as the process may use (``os.sched_getaffinity``, so
  ``taskset`` and container CPU sets count): convolutions, depthwise convolutions and large matrix products are
  cut into row ranges that run at once, one on the calling thread and the rest on pool threads that sleep (they
  never spin) between operations. Operations too small to gain from a split run whole on the calling thread.
* BLAS (OpenBLAS in NumPy's wheels) is held at one thread when the first program is loaded, because its threads
  spin while they wait and fight the interpreter for the cores: on a busy 2-core machine that made an XNNPACK
  MobileNetV2 about 5x slower. If you set ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
  ``BLIS_NUM_THREADS`` or ``VECLIB_MAXIMUM_THREADS``, pterun leaves BLAS as you said.

The thread count belongs to the :class:`~pterun.Runtime` a method was loaded by: its methods run (and load)
with ``Runtime(num_threads=N)``, so two Runtimes with different counts in one process each get their own. The
running method makes its count the calling thread's own (:func:`use_threads`) while it runs, and
:func:`num_threads` reads it there. Code with no Runtime count (a ``Runtime()`` without ``num_threads``, or no
Runtime at all) uses the process default: :func:`set_num_threads` (``pterun --threads N`` sets it), else
``$PTERUN_NUM_THREADS``, else the cores the process may use. In short: ``Runtime(num_threads)`` >
:func:`set_num_threads` > ``$PTERUN_NUM_THREADS`` > cores.

BLAS is set through OpenBLAS's own setter in the library NumPy loaded when there is one (under a millisecond),
else through ``threadpoolctl`` (MKL, BLIS, Windows, macOS).

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
from typing import TYPE_CHECKING, Callable

from pterun._log import logger
from pterun.config import BLAS_ENV, ENV_THREADS, blas_env_set, check_threads, env_threads

if TYPE_CHECKING:
    import numpy as np

__all__ = ["set_blas_threads", "blas_threads", "hold_blas", "set_num_threads", "num_threads", "default_num_threads",
           "use_threads", "current", "process_num_threads", "resolve_threads", "parallel_for", "split_dot", "splittable",
           "ENV_THREADS", "BLAS_ENV"]

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


def _own_setter_libs() -> list:
    return [lib for lib in _openblas_libs() if any(hasattr(lib, n) for n in _SETTERS)]


def set_blas_threads(n: int) -> bool:
    """Limit NumPy's BLAS to ``n`` threads; returns whether a BLAS library took the setting."""
    check_threads(n)
    libs = _own_setter_libs()  # OpenBLAS's own setter: ~0.5 ms, against ~10 ms for threadpoolctl's import + scan
    for lib in libs:
        _call(_SETTERS, lib, ctypes.c_int(int(n)))
    if libs:
        return True
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        logger().warning("could not set the BLAS thread count: no OpenBLAS found and threadpoolctl is not installed")
        return False
    threadpool_limits(limits=int(n), user_api="blas")
    return True


def blas_threads() -> int | None:
    """The BLAS thread count, when it can be read."""
    for lib in _openblas_libs():
        v = _call(_GETTERS, lib)
        if v is not None:
            return int(v)
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"]
    return counts[0] if counts else None


_blas_held = False


def hold_blas(*, again: bool = False) -> None:
    """Hold BLAS at one thread, once per process (``again=True``: even if done before), unless the user set a
    BLAS library's own thread variable (:data:`BLAS_ENV`). Called when the first program is loaded and by
    ``Runtime(num_threads=N)``, never at ``import pterun``."""
    global _blas_held
    if _blas_held and not again:
        return
    _blas_held = True
    chosen = blas_env_set()
    if chosen:
        logger().debug("BLAS threads left as set by %s", ", ".join(chosen))
        return
    set_blas_threads(1)


# -- pterun's own threads ------------------------------------------------------------------------------------
# Work below which a split is not worth waking another thread (about 0.2-0.3 ms on one core): multiply-adds of
# a matrix product, weights a one-row product reads (memory-bound), and output elements times kernel taps of a
# depthwise convolution; a product's part has at least SPLIT_MIN_ROWS rows (four times as many columns).
SPLIT_MACS = 8_000_000
SPLIT_GEMV = 1_000_000
SPLIT_TAPS = 3_000_000
SPLIT_MIN_ROWS = 64

_width: int | None = None  # the process default: threads a split operation may use, the calling thread included
# (None: not resolved yet)


class _Current(threading.local):
    n: int | None = None  # the count of the method running on this thread (None: the process default)


#: this thread's count while a method runs (``current.n``; None: the process default): :func:`use_threads` sets
#: it, and the interpreter sets and restores ``current.n`` directly around each call (a function call less)
current = _Current()
_pool: _Pool | None = None
_pool_lock = threading.Lock()


def splittable(m: int, k: int, n: int) -> bool:
    """Whether an ``[m, k] x [k, n]`` product is large enough for :func:`split_dot`."""
    return m >= 2 * SPLIT_MIN_ROWS and m * k * n >= SPLIT_MACS or m == 1 and k * n >= SPLIT_GEMV


def split_dot(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` (2-D, ``out`` C-contiguous of the product's dtype) over pterun's threads: by rows, or by
    columns when ``a`` has one row (a decode step: each thread streams its own share of the weights)."""
    import numpy as np  # loaded by then; not at ``import pterun.threads``'s own cost

    m, n = a.shape[0], b.shape[1]
    if m == 1:
        parallel_for(n, lambda lo, hi: np.dot(a, b[:, lo:hi], out[:, lo:hi]), min_rows=4 * SPLIT_MIN_ROWS)
    else:
        parallel_for(m, lambda lo, hi: np.dot(a[lo:hi], b, out[lo:hi]), min_rows=SPLIT_MIN_ROWS)


def default_num_threads() -> int:
    """The cores this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` where that is missing)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def set_num_threads(n: int) -> None:
    """Make ``n`` the process default: the threads (the caller's and ``n - 1`` of pterun's own) a split operation
    uses in code that has no Runtime count (see the module docstring). It beats ``$PTERUN_NUM_THREADS``; a
    ``Runtime(num_threads=)`` beats it. The pool threads start on the first split and sleep between operations.
    This leaves BLAS as it is (see :func:`hold_blas`).
    """
    global _width
    _width = check_threads(n)


def num_threads() -> int:
    """How many threads a split operation uses here and now (1: pterun runs every operation on the calling
    thread): the count of the method running on this thread (:func:`use_threads`), else the process default
    (:func:`set_num_threads`, else ``$PTERUN_NUM_THREADS``, else :func:`default_num_threads`).

    Raises:
        ValueError: ``$PTERUN_NUM_THREADS`` is not a positive integer.
    """
    n = current.n
    if n is not None:
        return n
    w = _width
    return w if w is not None else _resolve()


def process_num_threads() -> int:
    """The process default alone (:func:`set_num_threads`, else ``$PTERUN_NUM_THREADS``, else the cores)."""
    w = _width
    return w if w is not None else _resolve()


def resolve_threads(n: int | None) -> int:
    """``n``, or the process default where it is None (:func:`process_num_threads`): what a Runtime's count means
    at the moment it is asked for."""
    return n if n is not None else process_num_threads()


def use_threads(n: int | None) -> int | None:
    """Make ``n`` this thread's count (None: the process default) and return the previous one, for
    ``use_threads(previous)`` afterwards. A method does this around its load and each call with its Runtime's
    count; other threads, including pterun's pool threads, are not affected."""
    prev = current.n
    current.n = n
    return prev


def _resolve() -> int:
    global _width
    env = env_threads()
    _width = env if env is not None else default_num_threads()
    return _width


def parallel_for(rows: int, fn: Callable[[int, int], object], *, min_rows: int = 1) -> None:
    """Call ``fn(lo, hi)`` over ``[0, rows)`` in up to :func:`num_threads` contiguous parts, at once.

    Each part gets at least ``min_rows`` rows. The calling thread runs the first part. When the pool is
    already busy (another thread's operation, or a part that splits again) the whole range runs here instead,
    so nested or concurrent calls never wait on each other. The first exception a part raises is re-raised
    here once every part has finished. Callers split only work big enough to repay the hand-off (tens of
    microseconds to wake a sleeping thread).
    """
    parts = min(num_threads(), rows // max(min_rows, 1))
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
        from pterun._fpstate import quiet  # NumPy is loaded by the time an operation splits

        quiet()  # for good: this thread only runs parts of pterun's operations, whose floating-point errors are
        # part of a model's numbers, as on the calling thread during ``execute`` (no warning on stderr)
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
