"""Per-operator profiles: every executed step is counted once per run, and the method is unchanged after."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls, needs
from pterun import Runtime
from pterun.cli import main
from pterun.profile import format_profile, profile


def test_profile_counts_every_operator_call():
    m = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward")  # each operator a step
    call = load_calls("mlp")[0]
    rows = profile(m, call["inputs"], repeat=3)
    by_name = {r.name: r for r in rows}
    ops = [ev.name for ev in m.steps]
    for op in set(ops):
        assert by_name[op].calls == ops.count(op)
        assert by_name[op].seconds > 0
    assert [r.seconds for r in rows] == sorted((r.seconds for r in rows), reverse=True)
    # the method is restored: results unchanged and no timing wrappers left behind
    assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "after profiling")
    assert "aten::addmm.out" in format_profile(rows)


def test_profile_breaks_xnnpack_delegates_down_by_node():
    m = Runtime.get().load_program(FIXTURES / "xnn_cnn.pte").load_method("forward")
    call = load_calls("xnn_cnn")[0]
    names = {r.name for r in profile(m, call["inputs"], repeat=2)}
    assert "XnnpackBackend/XNNConv2d" in names
    assert "delegate XnnpackBackend (overhead)" in names
    assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "after profiling", 1e-4)


def test_cli_bench_profile(capsys):
    assert main(["bench", str(FIXTURES / "cond.pte"), "--repeat", "3", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "JumpFalseCall" in out and "total per execute()" in out


@pytest.mark.parametrize("name", ["cond", "mlp"])  # jumps; instructions folded at load
def test_bench_worker_profiles_pterun(name):
    # bench/run_one.py wraps the interpreter's steps itself; it must keep up with how chains are laid out
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "bench" / "run_one.py"), "--runtime", "pterun",
                           str(FIXTURES / f"{name}.pte"), "--profile", "--budget", "0.1", "--pterun-src",
                           str(root / "src")],
                          capture_output=True, text=True, timeout=120, check=False)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("@@BENCH@@"))
    result = json.loads(line.split(" ", 1)[1])
    assert "error_type" not in result, result.get("error")
    assert "| chain:pc | operator |" in done.stdout


def test_the_lines_add_up_to_one_observed_call_and_progress_is_reported():
    m = Runtime(engine="numpy").load_program(FIXTURES / "mlp.pte").load_method("forward")  # no LiteRT note
    done = []
    rows = profile(m, load_calls("mlp")[0]["inputs"], repeat=4, progress=lambda k, n: done.append((k, n)))
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]
    in_steps = sum(r.seconds for r in rows)
    assert 0 < in_steps <= rows.observed_s and rows.notes == ()
    lines = format_profile(rows, total_s=0.001).splitlines()
    values = {line.rsplit("  ", 1)[0].strip(): float(line.split()[-1]) for line in lines[-4:]}
    assert list(values) == ["total in steps", "between steps (loop, observer)", "total per execute(), observed",
                            "total per execute(), plain"]
    assert abs(values["total in steps"] + values["between steps (loop, observer)"] -
               values["total per execute(), observed"]) <= 0.002  # printed to the microsecond
    assert values["total per execute(), plain"] == 1.0


@pytest.mark.parametrize("engine", ["litert", "numpy"])
def test_a_delegate_on_litert_is_one_row_and_the_profile_says_how_to_get_node_rows(engine):
    if engine == "litert":
        needs("ai_edge_litert")
    m = Runtime(engine=engine).load_program(FIXTURES / "xnn_mlp.pte").load_method("forward")
    assert {d.engine for d in m.delegates} == {engine}
    rows = profile(m, load_calls("xnn_mlp")[0]["inputs"], repeat=2)
    names = {r.name for r in rows}
    if engine == "litert":
        assert names == {"delegate XnnpackBackend (whole calls)"}
        assert rows.notes and format_profile(rows).splitlines()[-1] == f"note: {rows.notes[0]}"
        assert "--engine numpy" in rows.notes[0]
    else:
        assert "XnnpackBackend/XNNFullyConnected" in names and rows.notes == ()


@pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None, reason="ai-edge-litert is not installed")
def test_a_portable_program_compiled_into_one_litert_program_is_one_row_with_the_note():
    from pterun.profile import LITERT_NOTE

    m = Runtime().load_program(FIXTURES / "mlp.pte").load_method("forward")
    rows = profile(m, load_calls("mlp")[0]["inputs"], repeat=2)
    assert [(r.name, r.calls) for r in rows] == [("delegate XnnpackBackend (whole calls)", 1)]
    assert rows.notes == (LITERT_NOTE,)
