"""The BLAS thread count NumPy uses for pterun's matrix products.

NumPy's BLAS (OpenBLAS in the wheels) starts one thread per core. On a small board shared with other work,
spinning BLAS threads can make small matrix products many times slower, so pterun lets you choose:
``Runtime(num_threads=1)``, or ``PTERUN_NUM_THREADS=1`` in the environment (read when the first Runtime is
made). Without either, pterun leaves the BLAS library's own setting alone (``OPENBLAS_NUM_THREADS`` etc.).

``threadpoolctl`` is used when it is installed (``pip install 'pterun[threads]'``); otherwise pterun calls
OpenBLAS's own setter in the library NumPy loaded.

Example::

    >>> from pterun.threads import blas_threads, set_blas_threads
    >>> set_blas_threads(1)      # doctest: +SKIP
    >>> blas_threads()           # doctest: +SKIP
    1
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("pterun")

__all__ = ["set_blas_threads", "blas_threads"]

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
        log.warning("could not set the BLAS thread count: no OpenBLAS found and threadpoolctl is not installed")
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
