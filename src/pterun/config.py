"""pterun's settings, and the one place that reads them from the environment.

Every setting comes from, first to last: the argument (``load_program(engine=...)``, then the
:class:`~pterun.Runtime`'s own ``Runtime(engine=...)``; on the command line, the flag), then its environment
variable, then the default:

* threads: ``Runtime(num_threads=)``; for methods of a Runtime without one, the process default
  (:func:`pterun.threads.set_num_threads`, which ``pterun --threads`` sets), then ``PTERUN_NUM_THREADS``, then
  the cores the process may use;
* engine: ``load_program(engine=)``, ``Runtime(engine=)``, ``PTERUN_ENGINE``, ``"auto"``;
* tensor output: ``load_program(tensor_output=)``, ``Runtime(tensor_output=)``, ``PTERUN_TENSOR_OUTPUT``,
  ``EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT`` (``"executorch"`` means numpy), ``"numpy"``;
* constant folding: ``Runtime(fold=)``, ``PTERUN_NO_FOLD`` (set to anything: off), on;
* merging neighbouring delegate calls: ``Runtime(merge_delegates=)``, ``PTERUN_NO_MERGE`` (set to anything: off), on;
* random seed: ``Runtime(seed=)``, else OS entropy (no variable);
* the on-disk cache of XNNPACK's packed weights (:mod:`pterun.delegates.xnnpack.litert_engine.cache`), off
  by default: ``Runtime(cache=)`` (a directory; True: the user's cache directory, :func:`default_cache_dir`;
  False: off), ``PTERUN_NO_CACHE`` (set to anything: off), ``PTERUN_CACHE_DIR`` (a directory: on); its size
  bound ``PTERUN_CACHE_MAX_MB``, else :data:`CACHE_MAX_MB`.

The rule is written once, in :func:`resolve`, which ``load_program`` calls: a program's :class:`Settings` are
decided there, once, and travel down as one frozen record (a thread count of None stays None: the process
default as it is when a method runs, :func:`pterun.threads.resolve_threads`).

The environment is read when a program is loaded (threads: when the process default is first needed), so a
variable set before the first load counts. BLAS's own variables (:data:`BLAS_ENV`) are only looked at, to leave
BLAS alone when the user set one. Nothing else in pterun reads ``os.environ``.

Example::

    >>> check_engine("NumPy", "engine")
    'numpy'
    >>> resolve({"engine": "numpy"}, {"engine": "litert", "fold": False}).engine
    'numpy'
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping

from pterun._record import Fields

__all__ = [
    "BLAS_ENV",
    "CACHE_MAX_MB",
    "Settings",
    "ENGINE_CHOICES",
    "ENV_CACHE_DIR",
    "ENV_CACHE_MAX_MB",
    "ENV_ENGINE",
    "ENV_ET_OUTPUT",
    "ENV_NO_CACHE",
    "ENV_NO_FOLD",
    "ENV_NO_MERGE",
    "ENV_OUTPUT",
    "ENV_THREADS",
    "TENSOR_OUTPUT_CHOICES",
    "blas_env_set",
    "cache_max_bytes",
    "check_cache",
    "check_engine",
    "check_tensor_output",
    "check_threads",
    "default_cache_dir",
    "env_cache",
    "env_engine",
    "env_fold",
    "env_merge",
    "env_tensor_output",
    "env_threads",
    "resolve",
]

ENGINE_CHOICES = ("auto", "numpy", "litert")
TENSOR_OUTPUT_CHOICES = ("numpy", "torch")

ENV_THREADS = "PTERUN_NUM_THREADS"
ENV_ENGINE = "PTERUN_ENGINE"
ENV_NO_FOLD = "PTERUN_NO_FOLD"
ENV_NO_MERGE = "PTERUN_NO_MERGE"
ENV_OUTPUT = "PTERUN_TENSOR_OUTPUT"
ENV_ET_OUTPUT = "EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT"
ENV_CACHE_DIR = "PTERUN_CACHE_DIR"
ENV_NO_CACHE = "PTERUN_NO_CACHE"
ENV_CACHE_MAX_MB = "PTERUN_CACHE_MAX_MB"
#: the cache's default size bound: when it holds more, the files used longest ago go first
CACHE_MAX_MB = 4096
#: the BLAS libraries' own thread settings: when the user set one of these, pterun leaves BLAS alone
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "GOTO_NUM_THREADS",
            "VECLIB_MAXIMUM_THREADS")


def _choice(value: object, choices: tuple, source: str) -> str:
    v = str(value).strip().lower()
    if v not in choices:
        raise ValueError(f"{source} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return v


def check_engine(value: object, source: str = "engine") -> str:
    """``value`` as one of :data:`ENGINE_CHOICES` (case and spaces ignored); ValueError naming ``source``."""
    return _choice(value, ENGINE_CHOICES, source)


def check_tensor_output(value: object, source: str = "tensor_output") -> str:
    """``value`` as one of :data:`TENSOR_OUTPUT_CHOICES`; ValueError naming ``source``."""
    return _choice(value, TENSOR_OUTPUT_CHOICES, source)


def check_threads(n: int, source: str = "num_threads") -> int:
    """``n`` as a thread count of at least 1: TypeError naming ``source`` unless ``n`` is an integer (``2.5`` is
    not silently 2, nor ``True`` 1), ValueError when it is below 1."""
    if isinstance(n, bool) or not hasattr(type(n), "__index__"):
        raise TypeError(f"{source} must be an integer, got {type(n).__name__} {n!r}")
    n = operator.index(n)
    if n < 1:
        raise ValueError(f"{source} must be at least 1, got {n}")
    return n


def env_threads() -> int | None:
    """``$PTERUN_NUM_THREADS``, or None when unset or empty; ValueError when it is not a positive integer."""
    raw = os.environ.get(ENV_THREADS, "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV_THREADS} must be a positive integer, got {raw!r}")
    return n


def env_engine() -> str | None:
    """``$PTERUN_ENGINE`` (checked), or None when unset or empty."""
    raw = os.environ.get(ENV_ENGINE)
    return check_engine(raw, ENV_ENGINE) if raw else None


def env_fold() -> bool:
    """Constant folding is on unless ``$PTERUN_NO_FOLD`` is set (to anything non-empty)."""
    return not os.environ.get(ENV_NO_FOLD)


def env_merge() -> bool:
    """Merging neighbouring delegate calls is on unless ``$PTERUN_NO_MERGE`` is set (to anything non-empty)."""
    return not os.environ.get(ENV_NO_MERGE)


def env_tensor_output() -> str | None:
    """``$PTERUN_TENSOR_OUTPUT``, else ``$EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT`` (``"executorch"`` means numpy),
    checked; None when neither is set."""
    raw = os.environ.get(ENV_OUTPUT)
    if raw:
        return check_tensor_output(raw, ENV_OUTPUT)
    raw = os.environ.get(ENV_ET_OUTPUT)
    if raw:
        v = raw.strip().lower()
        if v == "executorch":
            return "numpy"
        if v == "torch":
            return "torch"
        raise ValueError(f"{ENV_ET_OUTPUT} must be 'executorch' or 'torch', got {raw!r}")
    return None


def check_cache(value: object, source: str = "cache") -> str | None:
    """``Runtime(cache=)`` as :attr:`Settings.cache` holds it: None (not chosen), ``""`` for False (off), the
    user's cache directory for True, else the directory as a string; TypeError for anything else."""
    if value is None:
        return None
    if value is False:
        return ""
    if value is True:
        return default_cache_dir()
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return path
    raise TypeError(f"{source} must be a directory (str or os.PathLike), True or False, got {value!r}")


def env_cache() -> str | None:
    """``""`` (off) when ``$PTERUN_NO_CACHE`` is set, else ``$PTERUN_CACHE_DIR``, else None (the default: off)."""
    if os.environ.get(ENV_NO_CACHE):
        return ""
    return os.environ.get(ENV_CACHE_DIR) or None


def default_cache_dir() -> str:
    """pterun's folder in the user's cache directory: ``$XDG_CACHE_HOME/pterun`` (else ``~/.cache/pterun``) on
    Linux, ``~/Library/Caches/pterun`` on macOS, ``%LOCALAPPDATA%\\pterun\\cache`` on Windows."""
    import sys

    if sys.platform == "darwin":
        return os.path.join(os.path.expanduser("~"), "Library", "Caches", "pterun")
    if sys.platform.startswith("win"):
        base = os.environ.get("LOCALAPPDATA") or os.path.join(os.path.expanduser("~"), "AppData", "Local")
        return os.path.join(base, "pterun", "cache")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "pterun")


def cache_max_bytes() -> int:
    """The cache's size bound in bytes: ``$PTERUN_CACHE_MAX_MB`` (a non-negative integer; the file a load has just
    written always stays), else :data:`CACHE_MAX_MB`; ValueError for anything else."""
    raw = os.environ.get(ENV_CACHE_MAX_MB, "").strip()
    if not raw:
        return CACHE_MAX_MB << 20
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb < 0:
        raise ValueError(f"{ENV_CACHE_MAX_MB} must be a non-negative integer (megabytes), got {raw!r}")
    return mb << 20


def blas_env_set() -> list[str]:
    """The BLAS thread variables (:data:`BLAS_ENV`) the user set."""
    return [v for v in BLAS_ENV if os.environ.get(v)]


class Settings(Fields):
    """How one program loads and runs, decided once by :func:`resolve` when it is loaded.

    ``engine``: what runs XNNPACK delegates (:data:`ENGINE_CHOICES`); ``tensor_output``: what tensor outputs are
    (:data:`TENSOR_OUTPUT_CHOICES`); ``fold``: constant folding and repeated-read sharing at load; ``merge``:
    merging neighbouring delegate calls; ``seed``: of each method's random generator (None: OS entropy);
    ``num_threads``: the threads its methods compute on (None: the process default, as it is when a method
    runs); ``cache``: the directory of the packed-weight cache, ``""`` or None when off (the default).
    """

    engine: str = "auto"
    tensor_output: str = "numpy"
    fold: bool = True
    merge: bool = True
    seed: int | None = None
    num_threads: int | None = None
    cache: str | None = None

    @property
    def cache_dir(self) -> str:
        """The cache's directory, ``""`` when the cache is off."""
        return self.cache or ""


def _env_off(name: str):
    return lambda: False if os.environ.get(name) else None


#: each setting's environment variable reader (None: nothing set); settings without one read nothing
_FROM_ENV = {"engine": env_engine, "tensor_output": env_tensor_output, "fold": _env_off(ENV_NO_FOLD),
             "merge": _env_off(ENV_NO_MERGE), "cache": env_cache}


def resolve(*layers: Mapping[str, object]) -> Settings:
    """The settings of a program: for each field, the first of ``layers`` (the argument, then the Runtime's own
    choices) that gives it a value other than None, else its environment variable, else the default. Values in
    ``layers`` are expected checked (:func:`check_engine`, ...); the environment is checked here."""
    values = {}
    for name, default in Settings._field_defaults.items():
        v = next((layer[name] for layer in layers if layer.get(name) is not None), None)
        if v is None and name in _FROM_ENV:
            v = _FROM_ENV[name]()
        values[name] = default if v is None else v
    return Settings(**values)
