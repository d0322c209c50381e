"""Observing a run: execute(hook=), Method.trace, pterun.trace files and `pterun trace` finding a divergence."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import Runtime
from pterun.cli import main
from pterun.errors import InvalidArgumentError
from pterun.format.program import read_program
from pterun.format.schema import KERNEL_CALL
from pterun.trace import first_divergence, load, save

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None


def _method(name: str, **kw):
    # nothing merged: every instruction its own step (what ``pterun trace`` loads with)
    return Runtime(merge_delegates=False).load_program(FIXTURES / f"{name}.pte", **kw).load_method("forward")


def test_trace_reports_every_instruction_of_the_program():
    data = (FIXTURES / "mlp.pte").read_bytes()
    plan = read_program(data).plan(0)
    m = _method("mlp")
    call = load_calls("mlp")[0]
    entries = m.trace(call["inputs"])
    # every KernelCall of the program, in program order, whether it ran or was folded at load
    kernel_calls = [(pc, plan.operators[a]) for pc, (kind, a, _) in enumerate(plan.chains[0]) if kind == KERNEL_CALL]
    assert [(e.index, e.name) for e in entries] == kernel_calls
    assert {e.index for e in entries if e.folded} == {ev.index for ev in m.folded} and m.folded
    assert all(e.kind == "KernelCall" and e.node is None and len(e.outputs) == 1 for e in entries)
    # the last instruction's output is the method's output, and the trace holds copies
    assert_matches(entries[-1].outputs[0], call["outputs"][0], "traced output")
    again = m.execute(call["inputs"])[0]
    np.testing.assert_array_equal(entries[-1].outputs[0], again)
    assert entries[-1].outputs[0] is not again


def test_execute_hook_sees_every_step_and_changes_nothing():
    m = _method("cond")  # a program with jumps
    call = load_calls("cond")[0]
    seen = []

    def hook(event, run):
        seen.append((event.chain, event.index, event.kind, event.name))
        run()

    out = m.execute(call["inputs"], hook=hook)
    assert_matches(out[0], call["outputs"][0], "with a hook")
    assert "JumpFalseCall" in {k for _, _, k, _ in seen}
    step_keys = {(ev.chain, ev.index) for ev in m.steps}
    assert {(c, i) for c, i, _, _ in seen} <= step_keys
    # a hook that forgets run() does not skip the instruction
    lazy = m.execute(call["inputs"], hook=lambda event, run: None)
    assert_matches(lazy[0], call["outputs"][0], "hook without run()")


def test_hook_errors_still_name_the_instruction(monkeypatch):
    m = _method("mlp")
    x = load_calls("mlp")[0]["inputs"]

    def hook(event, run):
        if event.name == "aten::relu.out":
            raise RuntimeError("boom")
        run()

    from pterun.errors import KernelError
    with pytest.raises(KernelError, match=r"aten::relu.out failed at instruction 2 .*RuntimeError: boom"):
        m.execute(x, hook=hook)


def test_numpy_engine_delegates_are_traced_per_node():
    m = _method("xnn_mlp", engine="numpy")
    call = load_calls("xnn_mlp")[0]
    entries = m.trace(call["inputs"])
    nodes = [e for e in entries if e.kind == "DelegateNode"]
    assert len(nodes) > 1 and [e.node for e in nodes] == list(range(len(nodes)))
    assert all(e.name.startswith("XnnpackBackend/XNN") for e in nodes)
    calls = [e for e in entries if e.kind == "DelegateCall"]
    assert len(calls) == 1 and calls[0].name == "delegate XnnpackBackend"
    assert_matches(calls[0].outputs[-1], call["outputs"][0], "DelegateCall output", 1e-4)
    np.testing.assert_array_equal(nodes[-1].outputs[0], calls[0].outputs[-1])


@pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")
def test_litert_engine_delegates_are_traced_per_call():
    m = _method("xnn_mlp", engine="litert")
    if m.delegates[0].engine != "litert":
        pytest.skip(f"LiteRT does not run this graph here: {m.delegates[0].reason}")
    entries = m.trace(load_calls("xnn_mlp")[0]["inputs"])
    assert [e.kind for e in entries] == ["DelegateCall"]


def _tampered_mlp(tmp_path):
    """mlp.pte with the second linear layer's bias changed, and the index of the first instruction reading it."""
    data = (FIXTURES / "mlp.pte").read_bytes()
    pf = read_program(data)
    plan = pf.plan(0)
    addmms = [(pc, args) for pc, (kind, a, args) in enumerate(plan.chains[0])
              if kind == KERNEL_CALL and plan.operators[a] == "aten::addmm.out"]
    pc, args = addmms[1]
    bias = bytes(pf.constant_data(plan.values[args[0]][1]))
    assert data.count(bias) == 1
    at = data.index(bias)
    changed = bytearray(data)
    changed[at : at + 4] = np.float32(np.frombuffer(bias[:4], np.float32)[0] + 0.5).tobytes()
    path = tmp_path / "mlp_changed.pte"
    path.write_bytes(bytes(changed))
    return path, pc


def test_cli_trace_finds_the_first_diverging_instruction(tmp_path, capsys):
    changed, pc = _tampered_mlp(tmp_path)
    x = tmp_path / "x.npy"
    np.save(x, load_calls("mlp")[0]["inputs"][0])
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    assert main(["trace", str(FIXTURES / "mlp.pte"), "--input", str(x), "--out", str(a)]) == 0
    assert main(["trace", str(changed), "--input", str(x), "--out", str(b)]) == 0
    capsys.readouterr()
    assert main(["trace", "--compare", str(a), str(a)]) == 0
    assert "no divergence: 8 and 8 entries agree" in capsys.readouterr().out
    assert main(["trace", "--compare", str(a), str(b)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"first divergence at chain 0 instruction {pc} (aten::addmm.out), output 0: ")
    d = first_divergence(load(a), load(b))
    assert (d.entry.index, d.entry.name, d.output) == (pc, "aten::addmm.out", 0)
    assert d.position == [e.index for e in load(a)].index(pc)  # everything before it agreed


def test_saved_traces_round_trip_and_other_files_are_refused(tmp_path):
    m = _method("xnn_mlp", engine="numpy")
    entries = m.trace(load_calls("xnn_mlp")[0]["inputs"])
    save(tmp_path / "t.npz", entries)
    back = load(tmp_path / "t.npz")
    assert [e[:6] for e in back] == [e[:6] for e in entries]
    for x, y in zip(back, entries):
        for p, q in zip(x.outputs, y.outputs):
            np.testing.assert_array_equal(p, q)
    assert first_divergence(back, entries) is None
    np.savez(tmp_path / "plain.npz", out0=np.zeros(3))
    with pytest.raises(InvalidArgumentError, match=r"plain.npz: not a pterun trace \(no '__trace__' entry"):
        load(tmp_path / "plain.npz")


def test_divergence_names_shape_and_operator_changes():
    from pterun.interp.observe import TraceEntry
    a = [TraceEntry(0, 0, "KernelCall", "aten::add.out", None, False, [np.zeros(3, np.float32)])]
    assert "shape [3], the other trace has [4]" in str(first_divergence(
        a, [a[0]._replace(outputs=[np.zeros(4, np.float32)])]))
    assert "the other trace runs aten::mul.out here" in str(first_divergence(a, [a[0]._replace(name="aten::mul.out")]))
    assert first_divergence(a, [a[0]._replace(outputs=[np.full(3, 1e-7, np.float32)])]) is None


def test_programs_with_jumps_trace_each_executed_instruction(capsys):
    m = _method("cond")
    call = load_calls("cond")[0]
    entries = m.trace(call["inputs"])
    kinds = {e.kind for e in entries}
    assert "MoveCall" in kinds and "JumpFalseCall" not in kinds and not any(e.folded for e in entries)
    executed = [e.index for e in entries]
    assert executed == sorted(executed)  # the taken branch, in order
    assert_matches(entries[-1].outputs[0], call["outputs"][0], "last traced instruction of cond")
    assert first_divergence(entries, m.trace(call["inputs"])) is None


def test_cli_trace_needs_a_program_and_an_output(capsys):
    # a usage error (status 2), found by the parser before any file is opened
    assert main(["trace", str(FIXTURES / "mlp.pte")]) == 2
    assert capsys.readouterr().err.endswith("pterun trace: error: one of the arguments --out --compare is required\n")


def test_cli_trace_with_random_inputs_names_the_file_it_wrote(tmp_path, capsys):
    out = tmp_path / "run"  # NumPy adds .npz; the message says so
    assert main(["trace", str(FIXTURES / "mlp.pte"), "--out", str(out), "--seed", "3"]) == 0
    printed = capsys.readouterr().out
    assert "no --input given: using random values (seed 3)" in printed
    assert printed.rstrip().endswith(f"to {out}.npz")
    assert len(load(f"{out}.npz")) == 8
