"""tools/zoo/et_compare.py's check: which instructions are a recorded run's bit for bit, the first that is not,
and --substitute. The record is made here from pterun's own trace, in the layout ExecuTorch's ETDump gives
(``i{instruction}_{k}``, a DelegateCall's inputs before its outputs; ``out{k}``), so no reference toolchain is
needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from fixtures_util import FIXTURES

from pterun import Runtime

_spec = importlib.util.spec_from_file_location(
    "et_compare", Path(__file__).resolve().parents[1] / "tools" / "zoo" / "et_compare.py")
et_compare = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(et_compare)

PTE = FIXTURES / "xnn_mixed.pte"  # delegate, aten::cumsum, delegate


@pytest.fixture
def recorded(tmp_path):
    x = np.load(FIXTURES / "xnn_mixed.npz")["c0_in0"]
    method = Runtime(engine="numpy").load_program(PTE).load_method("forward")
    arrays = {f"out{k}": np.asarray(o) for k, o in enumerate(method.execute([x]))}
    for e in method.trace([x]):
        if e.node is None:
            ins = [np.full(3, 7, np.float32)] if e.kind == "DelegateCall" else []  # inputs come first
            for k, a in enumerate(ins + list(e.outputs)):
                arrays[f"i{e.index}_{k}"] = a
    path = tmp_path / "et.npz"
    np.savez(path, **arrays)
    return path, arrays, x


def _check(path, x, capsys, **kw) -> list[str]:
    assert et_compare.check(PTE, path, [x], "numpy", False, **kw) == 0
    return capsys.readouterr().out.splitlines()


def test_a_run_equal_to_the_record_is_reported_bit_for_bit(recorded, capsys):
    path, _, x = recorded
    out = _check(path, x, capsys)
    assert out == ["output 0: ExecuTorch's bit for bit",
                   "3 of 3 compared instructions bit for bit ExecuTorch's; all are"]


def test_the_first_instruction_that_differs_is_named(recorded, capsys, tmp_path):
    path, arrays, x = recorded
    arrays["i1_0"] = arrays["i1_0"].copy()
    arrays["i1_0"].flat[0] += 1
    arrays["i2_1"] = arrays["i2_1"] * np.float32(2)  # the second delegate's output (its input is i2_0)
    np.savez(path, **arrays)
    out = _check(path, x, capsys)
    assert out[0] == "output 0: ExecuTorch's bit for bit"
    assert out[1].startswith("instruction     1 aten::cumsum.out") and "of elements differ" in out[1]
    assert out[2].startswith("instruction     2 delegate XnnpackBackend") and "100.0% of elements differ" in out[2]
    assert out[3] == ("1 of 3 compared instructions bit for bit ExecuTorch's; the first that is not: 1 "
                      "(aten::cumsum.out)")


def test_substitute_runs_the_operator_as_the_record(recorded, capsys):
    path, arrays, x = recorded
    assert _check(path, x, capsys, substitute="aten::cumsum.out")[1] == "output 0: ExecuTorch's bit for bit"
    arrays["i1_0"] = arrays["i1_0"] + np.float32(1)  # a record that differs: pterun's output follows it
    np.savez(path, **arrays)
    out = _check(path, x, capsys, substitute="aten::cumsum.out")
    assert out[0] == "aten::cumsum.out: ExecuTorch's outputs at instructions [1]"
    assert out[1].startswith("output 0: ") and "of elements differ" in out[1]
    with pytest.raises(SystemExit, match="no plain kernel is registered for 'aten::nothing.out'"):
        et_compare.check(PTE, path, [x], "numpy", False, substitute="aten::nothing.out")


def test_substitute_leaves_the_kernel_registry_as_it_was(recorded, capsys):
    from pterun.kernels import KERNELS

    path, _, x = recorded
    before = KERNELS["aten::cumsum.out"]
    _check(path, x, capsys, substitute="aten::cumsum.out")
    assert KERNELS["aten::cumsum.out"] is before
