"""BLAS thread count: settable with Runtime(num_threads=) or $PTERUN_NUM_THREADS, and readable back."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pterun import Runtime
from pterun.threads import blas_threads, set_blas_threads

SRC = Path(__file__).resolve().parents[1] / "src"


def test_runtime_num_threads_sets_blas_threads():
    before = blas_threads()
    try:
        rt = Runtime(num_threads=1)
        assert rt.num_threads == 1
        assert blas_threads() == 1
    finally:
        if before:
            set_blas_threads(before)


def test_env_var_is_used_by_runtime():
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(SRC)!r})
        from pterun import Runtime
        from pterun.threads import blas_threads
        assert Runtime.get().num_threads == 1
        print(blas_threads())
    """)
    import os
    env = dict(os.environ, PTERUN_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


def test_bad_values():
    with pytest.raises(ValueError, match="num_threads must be at least 1, got 0"):
        set_blas_threads(0)
