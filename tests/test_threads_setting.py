"""The thread rule: a method computes on its Runtime's num_threads=; without one, on the process default:
set_num_threads(), else $PTERUN_NUM_THREADS, else the cores the process may use (the CLI's --threads configures
the command's Runtime); BLAS is held at one thread when a program is loaded (not at import) unless the user
set a BLAS library's own variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pterun import Runtime, threads
from pterun.cli import main
from pterun.threads import BLAS_ENV, blas_threads, default_num_threads, set_blas_threads, set_num_threads

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _fresh(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter (no thread variables but ``env``); it prints one JSON line."""
    clean = {k: v for k, v in os.environ.items() if k not in (*BLAS_ENV, "PTERUN_NUM_THREADS")}
    script = f"import sys, json\nsys.path.insert(0, {str(SRC)!r})\n" + textwrap.dedent(code)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**clean, **env},
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def restore_threads():
    width, held, blas = threads._width, threads._blas_held, blas_threads()
    yield
    threads._width, threads._blas_held = width, held
    if blas:
        set_blas_threads(blas)


def test_default_is_the_cores_the_process_may_use():
    assert default_num_threads() == len(os.sched_getaffinity(0))
    got = _fresh("""
        import os
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})   # what taskset -c does
        from pterun import Runtime
        from pterun.threads import num_threads
        print(json.dumps([Runtime.get().num_threads, num_threads()]))
    """)
    assert got == [1, 1]
    assert _fresh("from pterun import Runtime; print(json.dumps(Runtime.get().num_threads))") == \
        len(os.sched_getaffinity(0))


def test_the_environment_beats_the_default_and_the_argument_beats_the_environment():
    got = _fresh("""
        from pterun import Runtime
        from pterun.threads import num_threads
        before = Runtime.get().num_threads
        three = Runtime(num_threads=3)
        print(json.dumps([before, three.num_threads, Runtime.get().num_threads, Runtime().num_threads,
                          num_threads()]))
    """, PTERUN_NUM_THREADS="5")
    assert got == [5, 3, 5, 5, 5]  # the argument is that Runtime's own: the others keep the environment's


def test_the_flag_beats_the_environment(monkeypatch, restore_threads, capsys):
    monkeypatch.setenv("PTERUN_NUM_THREADS", "1")
    threads._width = None
    assert main(["--threads", "2", "bench", str(FIXTURES / "cnn.pte"), "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == 2
    assert main(["bench", str(FIXTURES / "cnn.pte"), "--repeat", "1", "--threads", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == 3
    assert main(["bench", str(FIXTURES / "cnn.pte"), "--repeat", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["threads"] == 1  # no flag: the environment
    assert threads.num_threads() == 1  # the flags changed no process setting


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_a_bad_environment_value_is_a_clear_error(monkeypatch, restore_threads, capsys, bad):
    monkeypatch.setenv("PTERUN_NUM_THREADS", bad)
    threads._width = None
    with pytest.raises(ValueError, match=f"PTERUN_NUM_THREADS must be a positive integer, got '{bad}'"):
        Runtime()
    threads._width = None
    assert main(["demo", "--repeat", "1"]) == 1
    assert capsys.readouterr().err == (f"pterun: error: ValueError: PTERUN_NUM_THREADS must be a positive integer, "
                                       f"got '{bad}'\n")


def test_runtime_num_threads_is_the_runtimes_own(restore_threads):
    threads.set_num_threads(2)
    assert Runtime(num_threads=1).num_threads == 1
    assert threads.num_threads() == 2 and Runtime().num_threads == 2  # the process default is untouched
    with pytest.raises(ValueError) as e:
        Runtime(num_threads=0)
    assert str(e.value) == "num_threads must be at least 1, got 0"


def test_blas_is_held_at_one_thread_when_a_program_is_loaded_not_at_import():
    got = _fresh(f"""
        import numpy
        from pterun.threads import blas_threads
        start = blas_threads()
        import pterun
        at_import = blas_threads()
        pterun.Runtime.get().load_program({str(FIXTURES / "mlp.pte")!r})
        print(json.dumps([start, at_import, blas_threads(), "threadpoolctl" in sys.modules]))
    """)
    start, at_import, after_load, _ = got
    if start is None:
        pytest.skip("this NumPy's BLAS thread count cannot be read (no OpenBLAS and no threadpoolctl)")
    assert at_import == start
    assert after_load == 1


def test_a_blas_variable_set_by_the_user_is_left_alone():
    got = _fresh(f"""
        import numpy
        from pterun.threads import blas_threads
        start = blas_threads()
        import pterun
        pterun.Runtime(num_threads=1).load_program({str(FIXTURES / "mlp.pte")!r})
        print(json.dumps([start, blas_threads()]))
    """, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    start, after = got
    if start is None:
        pytest.skip("this NumPy's BLAS thread count cannot be read (no OpenBLAS and no threadpoolctl)")
    assert after == start


def test_import_pterun_does_not_import_threadpoolctl():
    got = _fresh(f"""
        import pterun
        pterun.Runtime.get().load_program({str(FIXTURES / "mlp.pte")!r}).load_method("forward")
        print(json.dumps("threadpoolctl" in sys.modules))
    """)
    # with NumPy's OpenBLAS wheels the library's own setter is enough; threadpoolctl is the fallback
    if threads._own_setter_libs():
        assert got is False


def test_bad_blas_values():
    with pytest.raises(ValueError, match="num_threads must be at least 1, got 0"):
        set_blas_threads(0)


@pytest.mark.parametrize("bad", [2.5, 2.0, "2", True])
def test_a_thread_count_that_is_not_an_integer_is_a_type_error_naming_the_argument(bad, restore_threads):
    # int(2.5) would be 2: a count that is not a whole number is a mistake to report, not to round
    with pytest.raises(TypeError, match=f"^num_threads must be an integer, got {type(bad).__name__} {bad!r}$"):
        Runtime(num_threads=bad)
    with pytest.raises(TypeError, match="^num_threads must be an integer"):
        set_num_threads(bad)
    with pytest.raises(TypeError, match="^num_threads must be an integer"):
        set_num_threads(None)
    assert Runtime(num_threads=np.int64(2)).num_threads == 2  # NumPy's integers are integers
