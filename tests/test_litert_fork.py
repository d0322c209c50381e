"""A process that forks after loading programs on the LiteRT engine: the child may drop them, run them, and load
new ones. LiteRT's interpreters own XNNPACK thread pools whose threads exist only in the parent; destroying or
running such an interpreter in a child crashed (signal 11) before pterun kept them out of the child's hands.
Each scenario runs in a forked child and reports through its exit status, so a crash is a failure, not a hang
of the test run."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from fixtures_util import FIXTURES, FORK_OF_A_THREADED_PROCESS, load_calls

from pterun import Runtime

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed"),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    FORK_OF_A_THREADED_PROCESS,
]

SRC = Path(__file__).resolve().parents[1] / "src"
FIXTURES_RUN = ("xnn_mobilenet_v2", "xnn_transformer", "xnn_mlp")  # one delegate, several, a small one


def _load(threads: int, name: str):
    program = Runtime(num_threads=threads, engine="litert").load_program(FIXTURES / f"{name}.pte")
    method = program.load_method("forward")
    assert method.delegates and all(d.engine == "litert" for d in method.delegates)
    return program, method


def _loaded(threads: int) -> list:
    """(program, method, inputs, expected outputs) per fixture, each method run once in this process."""
    out = []
    for name in FIXTURES_RUN:
        program, method = _load(threads, name)
        call, *_ = load_calls(name)
        assert _close(method.execute(call["inputs"]), call["outputs"])
        out.append((program, method, call["inputs"], call["outputs"]))
    return out


def _in_child(body) -> int:
    """Run ``body()`` in a forked child; its exit code: 0 when it returned True, 1 when False, 2 when it raised,
    or minus the signal number that killed it."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            code = 0 if body() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _close(got, want) -> bool:
    return all(np.allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.abs(w).max())) for g, w in zip(got, want))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_child_can_drop_what_the_parent_loaded(threads):
    holder = _loaded(threads)

    def drop():
        holder.clear()
        gc.collect()
        return True

    assert _in_child(drop) == 0
    assert len(holder) == len(FIXTURES_RUN)  # the parent's copy is untouched


@pytest.mark.parametrize("threads", [1, 2])
def test_a_child_can_run_what_the_parent_loaded(threads):
    loaded = _loaded(threads)

    def run():
        return all(_close(m.execute(x), want) and _close(m.execute(x), want) for _, m, x, want in loaded)

    assert _in_child(run) == 0
    assert all(_close(m.execute(x), want) for _, m, x, want in loaded)  # the parent still runs after the child


def test_a_child_can_load_and_drop_programs_of_its_own():
    keep = _loaded(2)

    def own():
        for _ in range(2):
            fresh = _loaded(2)
            del fresh
            gc.collect()
        return True

    assert _in_child(own) == 0
    assert keep


def test_a_child_that_exits_normally_does_not_crash_at_shutdown():
    # the parent's interpreters must outlive the child's interpreter shutdown too (os._exit above skips it)
    script = textwrap.dedent(f"""
        import os, sys
        sys.path[:0] = [{str(SRC)!r}, {str(Path(__file__).parent)!r}]
        from test_litert_fork import _loaded
        loaded = _loaded(2)
        pid = os.fork()
        if pid == 0:
            for _, m, x, _want in loaded:
                m.execute(x)
            sys.exit(0)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, "0"), r.stderr[-2000:]
