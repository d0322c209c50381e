"""Bad files and failing kernels raise the documented errors, with messages that name the problem."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import (DelegateError, InvalidProgramError, KernelError, OperatorMissingError, PterunError, Runtime)
from pterun.delegates import BACKENDS
from pterun.kernels import KERNELS
from pterun.kernels.registry import Kernel

MLP_BYTES = (FIXTURES / "mlp.pte").read_bytes()


def load(data):
    return Runtime.get().load_program(data)


def load_numpy(data):
    """On the NumPy engine: every portable operator a step of its own (not held in a LiteRT program)."""
    return Runtime(engine="numpy").load_program(data)


def test_error_tree():
    import pterun.errors as E
    assert issubclass(E.InvalidProgramError, (E.PterunError, ValueError))
    assert issubclass(E.InvalidArgumentError, (E.PterunError, ValueError))
    assert issubclass(E.MethodNotFoundError, (E.PterunError, KeyError))
    assert issubclass(E.OperatorMissingError, (E.PterunError, NotImplementedError))
    assert issubclass(E.NotSupportedError, (E.PterunError, NotImplementedError))
    assert issubclass(E.DelegateError, E.PterunError)
    assert issubclass(E.KernelError, (E.PterunError, RuntimeError))


def test_empty_and_tiny_inputs():
    with pytest.raises(InvalidProgramError, match="too short to be an ExecuTorch program"):
        load(b"")
    with pytest.raises(InvalidProgramError, match="too short"):
        load(b"ET12")


def test_not_a_pte():
    with pytest.raises(InvalidProgramError, match=r"not an ExecuTorch program: expected identifier 'ET12' at offset 4, "
                                                  r"found b'o wo'"):
        load(b"hello world, this is a text file" + bytes(100))


def test_other_executorch_version():
    data = bytearray(MLP_BYTES)
    data[4:8] = b"ET11"
    with pytest.raises(InvalidProgramError, match="program identifier 'ET11' is not the supported 'ET12'"):
        load(bytes(data))


def test_ptd_file_gets_a_hint():
    with pytest.raises(InvalidProgramError, match=r"this is a \.ptd external-data file; pass it as data_path="):
        load(bytes(4) + b"FT01" + bytes(64))


def test_truncated_file():
    with pytest.raises(InvalidProgramError, match="truncated"):
        load(MLP_BYTES[: len(MLP_BYTES) // 2])


def test_corrupt_root_offset():
    data = bytearray(MLP_BYTES)
    data[0:4] = (len(data) + 100).to_bytes(4, "little")
    with pytest.raises(InvalidProgramError, match="root offset"):
        load(bytes(data))


def test_missing_operators_are_all_listed_at_load_method(monkeypatch):
    monkeypatch.delitem(KERNELS, "aten::addmm.out")
    monkeypatch.delitem(KERNELS, "aten::relu.out")
    program = load(FIXTURES / "mlp.pte")
    with pytest.raises(OperatorMissingError) as e:
        program.load_method("forward")
    assert e.value.missing == ["aten::addmm.out", "aten::relu.out"]
    assert str(e.value) == ("method 'forward' uses 2 operator(s) pterun does not implement: aten::addmm.out, "
                            "aten::relu.out")


def test_unknown_delegate_fails_at_load_naming_it(monkeypatch):
    monkeypatch.delitem(BACKENDS, "XnnpackBackend", raising=False)
    program = load(FIXTURES / "xnn_mlp.pte")
    with pytest.raises(DelegateError, match="needs backend 'XnnpackBackend', which is not available"):
        program.load_method("forward")


def test_failing_kernel_raises_kernel_error_with_context(monkeypatch):
    def broken(*args):
        raise FloatingPointError("boom")

    old = KERNELS["aten::relu.out"]
    monkeypatch.setitem(KERNELS, "aten::relu.out", Kernel(old.name, broken, old.schema))
    m = load_numpy(FIXTURES / "mlp.pte").load_method("forward")
    x = load_calls("mlp")[0]["inputs"][0]
    with pytest.raises(KernelError) as e:
        m.execute([x])
    err = e.value
    assert err.operator == "aten::relu.out"
    assert err.instruction >= 0
    assert f"aten::relu.out failed at instruction {err.instruction} with inputs (float32[4, 32]" in str(err)
    assert "FloatingPointError: boom" in str(err)
    assert isinstance(err.__cause__, FloatingPointError)
    # the method stays usable after a failure
    monkeypatch.setitem(KERNELS, "aten::relu.out", old)
    m2 = load(FIXTURES / "mlp.pte").load_method("forward")
    assert m2.execute([x])[0].shape == (4, 10)


def test_static_output_shape_mismatch_is_a_kernel_error(monkeypatch):
    old = KERNELS["aten::relu.out"]
    monkeypatch.setitem(KERNELS, "aten::relu.out",
                        Kernel(old.name, lambda self, out: np.zeros((1, 1), np.float32), old.schema))
    m = load_numpy(FIXTURES / "mlp.pte").load_method("forward")
    with pytest.raises(KernelError, match=r"output has shape \[1, 1\] but the tensor is static with shape \[4, 32\]"):
        m.execute([np.ones((4, 16), np.float32)])


def test_no_raw_python_errors_escape_for_bad_files():
    for data in (MLP_BYTES[:9], MLP_BYTES[:64], MLP_BYTES[:-1], b"\x00" * 200, b"\xff" * 200):
        with pytest.raises(PterunError):
            load(data).load_method("forward")


def test_an_error_names_a_run_of_equal_inputs_once_with_its_count_and_lists_at_most_sixteen():
    from pterun.interp.method import LISTED_ARGS, _listed
    from pterun.interp.tensor import Tensor

    assert _listed(["a", "b", "b", "c"]) == "a, b, b, c"  # a few: each argument in its place
    assert _listed(["a"] + ["b"] * LISTED_ARGS + ["c"]) == f"a, b x{LISTED_ARGS}, c"
    many = [f"x{i}" for i in range(LISTED_ARGS + 4)]
    assert _listed(many) == ", ".join(many[:LISTED_ARGS]) + ", ... 4 more"
    assert _listed(["f"] * 3 + many).endswith(", x14, ... 5 more")  # what is left is counted in arguments
    runner = Runtime.get().load_program(FIXTURES / "llm" / "kv_xnn.pte").load_method("forward")._runner
    cache = next(i for i, v in enumerate(runner.values) if isinstance(v, Tensor) and list(v.shape) == [1, 128, 2, 16])
    err = runner.kernel_error([("delegate XnnpackBackend", (cache,) * 24, 21)], 0, RuntimeError("boom"))
    assert str(err).endswith("failed at instruction 21 with inputs (float32[1, 128, 2, 16] x24): RuntimeError: boom")
    assert (err.operator, err.instruction) == ("delegate XnnpackBackend", 21)
