"""pterun.Module: ExecuTorch's pybindings API (_load_for_executorch(path) -> forward / run_method / method_names /
method_meta), against the reference runtime's recorded outputs."""

from __future__ import annotations

import numpy as np
import pytest

import pterun
from fixtures_util import FIXTURES, load_calls
from pterun import (IOInfo, InvalidArgumentError, MethodNotFoundError, Module, NotSupportedError, VerificationError,
                    _get_operator_names, _get_registered_backend_names, _is_available,
                    _load_bundled_program_from_buffer, _load_for_executorch, _load_for_executorch_from_buffer,
                    _load_for_executorch_from_bundled_program)


def _close(got, want):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert type(got) is type(want) and got == want


def test_module_is_public():
    assert "Module" in pterun.__all__ and "IOInfo" in pterun.__all__
    assert pterun.Module is Module


def test_load_for_executorch_forward_matches_executorch():
    module = _load_for_executorch(str(FIXTURES / "mlp.pte"))
    assert type(module) is Module
    for call in load_calls("mlp"):
        outputs = module.forward(call["inputs"])
        assert type(outputs) is list and len(outputs) == len(call["outputs"])
        for got, want in zip(outputs, call["outputs"]):
            _close(got, want)
        _close(module(call["inputs"])[0], call["outputs"][0])
        _close(module(call["inputs"][0])[0], call["outputs"][0])  # one tensor: the only input
        _close(module.forward(call["inputs"], clone_outputs=False)[0], call["outputs"][0])


def test_run_method_and_method_names_of_a_multi_method_program():
    module = Module(FIXTURES / "multi_method.pte")
    # ExecuTorch 1.5.1 returned these in another order (['get_scale', 'get_max_seq_len', 'forward', ...]): its
    # order is not specified, so pterun's is sorted
    assert module.method_names() == ["encode", "forward", "get_max_seq_len", "get_scale", "use_kv_cache"]
    for call in load_calls("multi_method"):
        for got, want in zip(module.run_method(call["method"], call["inputs"]), call["outputs"]):
            _close(got, want)
    assert module.run_method("get_max_seq_len") == [128]


def test_method_meta_has_executorchs_calls():
    meta = Module(FIXTURES / "multi_method.pte").method_meta("forward")
    assert meta.name() == "forward" and meta.name == "forward"  # ExecuTorch's call and pterun's attribute
    assert meta.num_inputs() == 2 and meta.num_outputs() == 2
    t = meta.input_tensor_meta(0)
    assert t.sizes() == (2, 8) and t.dtype() == 6 and t.nbytes() == 64 and t.is_memory_planned() is True
    with pytest.raises(IndexError, match="input index 5 is out of range"):
        meta.input_tensor_meta(5)


def test_get_inputs_and_outputs_in_one_line():
    module = Module(FIXTURES / "dynamic.pte")
    (x,) = module.get_inputs()
    assert x == IOInfo("input_0", "Tensor", "float32", (8, 6), True)
    outputs = module.get_outputs()
    assert outputs[-1] == IOInfo(f"output_{len(outputs) - 1}", "Int", None, None, False)
    assert [o.name for o in outputs] == [f"output_{i}" for i in range(len(outputs))]
    assert repr(x) == "IOInfo(name='input_0', kind='Tensor', dtype='float32', shape=(8, 6), dynamic=True)"
    assert Module(FIXTURES / "multi_method.pte").get_outputs("get_scale") == [
        IOInfo("output_0", "Double", None, None, False)]


def test_external_weights_from_a_path_and_from_buffers():
    call = load_calls("ext_mlp")[0]
    by_path = _load_for_executorch(str(FIXTURES / "ext_mlp.pte"), data_path=str(FIXTURES / "ext_mlp.ptd"))
    _close(by_path.forward(call["inputs"])[0], call["outputs"][0])
    by_bytes = _load_for_executorch_from_buffer((FIXTURES / "ext_mlp.pte").read_bytes(),
                                                (FIXTURES / "ext_mlp.ptd").read_bytes())
    _close(by_bytes.forward(call["inputs"])[0], call["outputs"][0])


def test_errors_come_from_pterun_tree():
    module = Module(FIXTURES / "mlp.pte")
    with pytest.raises(MethodNotFoundError, match="no method named 'nope'"):
        module.run_method("nope", [])
    with pytest.raises(MethodNotFoundError):
        module.method_meta("nope")
    with pytest.raises(InvalidArgumentError, match="takes 1 input"):
        module.forward([])
    with pytest.raises(NotSupportedError, match="ETDump and the debug buffer are not available"):
        _load_for_executorch(str(FIXTURES / "mlp.pte"), enable_etdump=True)
    with pytest.raises(NotSupportedError):
        _load_for_executorch_from_buffer((FIXTURES / "mlp.pte").read_bytes(), debug_buffer_size=1024)
    assert module.has_etdump() is False


def test_bundled_program_flow():
    bundle = _load_bundled_program_from_buffer((FIXTURES / "bundled.bpte").read_bytes())
    module = _load_for_executorch_from_bundled_program(bundle)
    with pytest.raises(InvalidArgumentError, match="no inputs loaded for method 'forward'"):
        module.plan_execute("forward")
    for method in sorted(bundle.method_names):
        for i, case in enumerate(bundle.test_cases(method)):
            module.load_bundled_input(bundle, method, i)
            outputs = module.plan_execute(method)
            for got, want in zip(outputs, case.expected_outputs):
                _close(got, want)
            verified = module.verify_result_with_bundled_expected_output(bundle, method, i)
            for got, want in zip(verified, outputs):
                _close(got, want)


def test_a_failing_bundled_case_raises():
    bundle = _load_bundled_program_from_buffer((FIXTURES / "bundled_bad.bpte").read_bytes())
    module = _load_for_executorch_from_bundled_program(bundle)
    failures = 0
    for method in sorted(bundle.method_names):
        for i in range(len(bundle.test_cases(method))):
            try:
                module.verify_result_with_bundled_expected_output(bundle, method, i)
            except VerificationError:
                failures += 1
    assert failures >= 1


def test_registry_functions():
    names = _get_operator_names()
    assert names == sorted(names) and "aten::add.out" in names
    assert "XnnpackBackend" in _get_registered_backend_names()
    assert _is_available("NoSuchBackend") is False


def test_module_of_a_loaded_program_and_tensor_output(monkeypatch):
    program = pterun.Runtime.get().load_program(FIXTURES / "mlp.pte")
    assert Module(program).program is program
    monkeypatch.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "executorch")  # ExecuTorch's "NumPy" setting
    out = Module(FIXTURES / "mlp.pte").forward(load_calls("mlp")[0]["inputs"])[0]
    assert type(out) is np.ndarray
