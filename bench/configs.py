"""Benchmark configurations: one way of running a model, a runtime plus the environment its process gets.

Shared by ``bench.py`` and ``llm_bench.py`` (both re-export these names from ``bench``; ``llm_bench.py`` refuses
``peer``, which has no LLM operators)::

    >>> parse_config("litert-2t").env
    (('PTERUN_ENGINE', 'litert'), ('PTERUN_NUM_THREADS', '2'))
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

# --- configurations ---------------------------------------------------------------------------------------
#
# A configuration is one way of running a model: a runtime plus the environment its process gets. Every
# process starts from the caller's environment with all the variables below removed, so a configuration sets
# exactly what its name says and nothing leaks in from the shell.
THREAD_VARS = ("PTERUN_NUM_THREADS", "PTERUN_ENGINE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "BENCH_REF_THREADS", "PTERUN_CACHE_DIR", "PTERUN_NO_CACHE", "PTERUN_CACHE_MAX_MB")
#: the value of ``PTERUN_CACHE_DIR`` in the ``cached`` configuration: the bench run's own directory, filled by
#: untimed loads before the timed ones (bench.py)
CACHE_DIR_MARK = "@bench-cache"
DEFAULT_CONFIGS = ["defaults", "numpy-1t", "numpy-2t", "litert-1t", "litert-2t", "ref-1t", "ref-2t"]
ENGINES = ("numpy", "litert", "auto")


@dataclass(frozen=True)
class Config:
    name: str  # "defaults", "numpy-2t", "litert-1t", "ref-2t", "peer", ...
    runtime: str  # "pterun", "executorch" or "peer" (executorch-numpy-runtime, bench.py --peer)
    env: tuple  # ((variable, value), ...) set on top of the cleaned environment
    threads: int | None  # None: the runtime's own default
    engine: str | None  # the engine asked for (pterun), None: not set

    @property
    def is_ref(self) -> bool:
        return self.runtime == "executorch"

    @property
    def is_peer(self) -> bool:
        return self.runtime == "peer"

    @property
    def is_pterun(self) -> bool:
        return self.runtime == "pterun"


def parse_config(name: str) -> Config:
    """``defaults`` | ``cached`` | ``ENGINE-Nt`` (ENGINE in numpy, litert, auto) | ``ref-Nt`` | ``ref`` | ``peer``:
    a :class:`Config`."""
    if name == "peer":  # executorch-numpy-runtime as it comes: it has no thread setting (its pool is the cores)
        return Config(name, "peer", (), None, None)
    if name == "defaults":
        return Config(name, "pterun", (), None, None)
    if name == "cached":  # the defaults with the packed-weight cache on, warm
        return Config(name, "pterun", (("PTERUN_CACHE_DIR", CACHE_DIR_MARK),), None, None)
    if name == "ref":
        return Config(name, "executorch", (), None, None)
    head, _, tail = name.rpartition("-")
    if not (tail.endswith("t") and tail[:-1].isdigit() and int(tail[:-1]) >= 1):
        raise ValueError(f"configuration {name!r}: expected 'defaults', 'cached', 'peer', 'ref', 'ref-<N>t' or "
                         f"'<engine>-<N>t' with engine in {', '.join(ENGINES)}")
    n = int(tail[:-1])
    if head == "peer":
        raise ValueError(f"configuration {name!r}: executorch-numpy-runtime has no thread setting (its XNNPACK "
                         f"threadpool is the cores); use 'peer'")
    if head == "ref":
        # ExecuTorch's threadpool is resized by run_one.py right after the import (BENCH_REF_THREADS); its
        # portable/optimized kernels may use OpenMP: held at the same count
        return Config(name, "executorch", (("BENCH_REF_THREADS", str(n)), ("OMP_NUM_THREADS", str(n))), n, None)
    if head in ENGINES:
        return Config(name, "pterun", (("PTERUN_ENGINE", head), ("PTERUN_NUM_THREADS", str(n))), n, head)
    raise ValueError(f"configuration {name!r}: unknown engine {head!r} (expected one of {', '.join(ENGINES)} "
                     f"or 'ref')")


def pair_of(cfg: Config, configs: list[Config]) -> Config | None:
    """The reference configuration a pterun (or the peer's) configuration is compared with: the same thread
    count; for ``defaults`` and ``peer``, the reference as it comes (``ref``), else the reference on all the cores
    (ExecuTorch's own default threadpool size is the number of cores)."""
    refs = {c.name: c for c in configs if c.is_ref}
    if cfg.is_ref or not refs:
        return None
    if cfg.threads is None:
        for cand in ("ref", f"ref-{os.cpu_count()}t"):
            if cand in refs:
                return refs[cand]
        return None
    return refs.get(f"ref-{cfg.threads}t")


def peer_pair_of(cfg: Config, configs: list[Config]) -> Config | None:
    """The ``peer`` configuration a pterun configuration is compared with: the peer runs on all the cores, so
    only pterun's own default (no thread setting) and ``ENGINE-<cores>t`` pair with it."""
    peer = next((c for c in configs if c.is_peer), None)
    if peer is None or not cfg.is_pterun:
        return None
    return peer if cfg.threads in (None, os.cpu_count()) else None


def chosen_configs(args, log) -> list[Config]:
    """The configurations to run: ``--configs`` (default: :data:`DEFAULT_CONFIGS`, plus ``peer`` when ``--peer``
    names an interpreter), less the reference's without ``--ref`` and ``peer`` without ``--peer``."""
    names = args.configs or DEFAULT_CONFIGS + (["peer"] if args.peer else [])
    configs = [parse_config(c) for c in dict.fromkeys(names)]  # ValueError for a bad name
    if not args.ref:
        configs = [c for c in configs if not c.is_ref]
    if not args.peer and any(c.is_peer for c in configs):
        log("(no --peer interpreter: configuration 'peer' skipped; --peer PY runs it, see bench/README.md)")
        configs = [c for c in configs if not c.is_peer]
    elif args.peer and not any(c.is_peer for c in configs):
        log("(--peer given, but 'peer' is not among --configs: the peer does not run)")
    return configs


def config_env(base: dict, cfg: Config, cache_dir: str = "") -> dict:
    """The environment of a configuration's process; ``cache_dir`` stands for :data:`CACHE_DIR_MARK`."""
    env = {k: v for k, v in base.items() if k not in THREAD_VARS}
    env.update({k: cache_dir if v == CACHE_DIR_MARK else v for k, v in cfg.env})
    return env


def byte_compile(python: str, tree) -> str | None:
    """Byte-compile the Python files under ``tree`` with ``python``, as pip does for an installed package; None, or
    what went wrong. A benchmark process started with ``PYTHONDONTWRITEBYTECODE`` set otherwise compiles every
    module it imports whose ``.pyc`` is missing or older than its source, and counts that in its import and load
    (the 130M Llama's load: ~75 ms of its ~1 s)."""
    done = subprocess.run([python, "-m", "compileall", "-q", str(tree)], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return None
    return (done.stderr or done.stdout).strip()[-300:] or f"compileall exited with {done.returncode}"


def describe_config(cfg: Config) -> str:
    if cfg.name == "defaults":
        return "pterun with no thread or engine setting (what a user gets out of the box)"
    if cfg.name == "cached":
        return ("pterun's defaults with the packed-weight cache on (`PTERUN_CACHE_DIR`), filled by two untimed "
                "loads first")
    if cfg.is_peer:
        return ("executorch-numpy-runtime (ExecuTorch 1.3.1's C++ runtime, NumPy I/O) as it comes: no thread "
                "setting, its XNNPACK threadpool is the cores; its `load_method` is lazy (see `load`)")
    if cfg.is_ref:
        return ("ExecuTorch 1.5.1 as it comes" if cfg.threads is None else
                f"ExecuTorch, threadpool of {cfg.threads}")
    return f"pterun, `PTERUN_ENGINE={cfg.engine} PTERUN_NUM_THREADS={cfg.threads}`"
