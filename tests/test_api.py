"""The public API's shape: Runtime / Program / Method / MethodMeta / TensorInfo, as in executorch.runtime."""

from __future__ import annotations

import io
import pydoc
import subprocess
import sys

import numpy as np
import pytest

import pterun
from fixtures_util import FIXTURES
from pterun import (InvalidArgumentError, MethodNotFoundError, PterunError, Runtime, TensorInfo, Verification)

MLP = FIXTURES / "mlp.pte"


def test_public_names_are_exactly_the_curated_ones():
    assert set(pterun.__all__) == {
        "Runtime", "Program", "Method", "MethodMeta", "TensorInfo", "Verification", "BundledProgram",
        "VerificationResult", "PterunError", "InvalidProgramError", "InvalidArgumentError", "MethodNotFoundError",
        "NamedDataNotFoundError", "OperatorMissingError", "NotSupportedError", "DelegateError", "KernelError", "VerificationError",
        "__version__", "Module", "IOInfo",
        # ExecuTorch's pybindings spellings: public, though they start with an underscore
        "_load_for_executorch", "_load_for_executorch_from_buffer", "_load_for_executorch_from_bundled_program",
        "_load_bundled_program_from_buffer", "_get_operator_names", "_get_registered_backend_names", "_is_available"}
    for name in pterun.__all__:
        assert hasattr(pterun, name)


def test_dir_and_help_show_every_public_name_and_no_helper():
    # the lazy names (imported on first use) too, and not the module's own machinery
    assert dir(pterun) == sorted(pterun.__all__)
    text = pydoc.render_doc(pterun, renderer=pydoc.plaintext)
    for name in ("Module", "BundledProgram", "IOInfo", "VerificationResult", "Runtime", "_load_for_executorch",
                 "_is_available", "InvalidProgramError"):
        assert f"{name}(" in text or f"class {name}" in text, name
    for helper in ("TYPE_CHECKING", "_LAZY", "_MODULE_API"):
        assert helper not in text and helper not in dir(pterun)
    assert "config" not in dir(pterun)


def test_import_pterun_is_light_and_submodules_still_come_by_attribute():
    script = ("import sys, pterun; assert 'numpy' not in sys.modules and 'pterun.runtime' not in sys.modules, "
              "sorted(sys.modules); pterun.threads.set_num_threads(1); assert pterun.Runtime.get().num_threads == 1; "
              "assert pterun.Runtime is pterun.runtime.Runtime; "
              "import pytest; pytest.raises(AttributeError, getattr, pterun, 'no_such_name')")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_runtime_get_is_a_singleton():
    assert Runtime.get() is Runtime.get()


@pytest.mark.parametrize("kind", ["str", "path", "bytes", "bytearray", "memoryview", "bytesio"])
def test_load_program_accepts_every_source_kind(kind):
    data = MLP.read_bytes()
    source = {"str": str(MLP), "path": MLP, "bytes": data, "bytearray": bytearray(data),
              "memoryview": memoryview(data), "bytesio": io.BytesIO(data)}[kind]
    program = Runtime.get().load_program(source)
    assert program.method_names == {"forward"}
    out = program.load_method("forward").execute([np.ones((4, 16), np.float32)])
    assert out[0].shape == (4, 10)


def test_load_program_rejects_other_types_with_type_error():
    with pytest.raises(TypeError, match="Expected data to be bytes, bytearray, a path to a .pte file, or a "
                                        "file-like object, but got int"):
        Runtime.get().load_program(42)


def test_missing_file_is_file_not_found():
    with pytest.raises(FileNotFoundError, match="no such program file"):
        Runtime.get().load_program(FIXTURES / "does_not_exist.pte")


def test_load_method_is_cached_and_unknown_names_raise_method_not_found():
    program = Runtime.get().load_program(MLP)
    assert program.load_method("forward") is program.load_method("forward")
    with pytest.raises(MethodNotFoundError) as e:
        program.load_method("backward")
    assert isinstance(e.value, KeyError) and isinstance(e.value, PterunError)
    assert str(e.value) == f"no method named 'backward' in {MLP}; it has ['forward']"
    with pytest.raises(MethodNotFoundError):
        program.metadata("backward")


def test_method_meta_and_tensor_info():
    program = Runtime.get().load_program(MLP, verification=Verification.Minimal)
    meta = program.metadata("forward")
    assert meta.name == "forward"
    assert (meta.num_inputs(), meta.num_outputs()) == (1, 1)
    info = meta.input_tensor_meta(0)
    assert isinstance(info, TensorInfo)
    assert info.sizes() == (4, 16)
    assert info.dtype() == 6 and info.numpy_dtype() == np.float32
    assert info.nbytes() == 4 * 16 * 4
    assert info.is_memory_planned() is True
    assert repr(info) == "TensorInfo(sizes=[4, 16], dtype=Float, is_memory_planned=True, nbytes=256)"
    assert repr(meta) == ("MethodMeta(name='forward', num_inputs=1, input_tensor_meta=['TensorInfo(sizes=[4, 16], "
                          "dtype=Float, is_memory_planned=True, nbytes=256)'], num_outputs=1, output_tensor_meta="
                          "['TensorInfo(sizes=[4, 10], dtype=Float, is_memory_planned=True, nbytes=160)'])")
    assert program.load_method("forward").metadata.output_tensor_meta(0).sizes() == (4, 10)
    with pytest.raises(IndexError, match="input index 1 is out of range"):
        meta.input_tensor_meta(1)


def test_method_meta_reports_scalar_outputs_by_tag():
    program = Runtime.get().load_program(FIXTURES / "multi_method.pte")
    meta = program.metadata("get_max_seq_len")
    assert meta.num_inputs() == 0 and meta.output_tag(0) == "Int"
    with pytest.raises(IndexError, match="output 0 of method 'get_max_seq_len' is Int, not a tensor"):
        meta.output_tensor_meta(0)


def test_constant_methods_return_python_scalars():
    program = Runtime.get().load_program(FIXTURES / "multi_method.pte")
    assert program.method_names == {"forward", "encode", "get_max_seq_len", "get_scale", "use_kv_cache"}
    (seq,) = program.load_method("get_max_seq_len").execute([])
    (scale,) = program.load_method("get_scale").execute([])
    (kv,) = program.load_method("use_kv_cache").execute([])
    assert type(seq) is int and seq == 128
    assert type(scale) is float and scale == 0.5
    assert type(kv) is bool and kv is True


def test_registries():
    rt = Runtime.get()
    assert "aten::add.out" in rt.operator_registry.operator_names
    assert isinstance(rt.operator_registry.operator_names, set)
    assert isinstance(rt.backend_registry.registered_backend_names, list)
    assert rt.backend_registry.is_available("NoSuchBackend") is False


def test_reprs_are_readable():
    program = Runtime.get().load_program(MLP)
    assert repr(program) == f"Program({str(MLP)!r}, methods=['forward'], tensor_output='numpy')"
    assert repr(program.load_method("forward")) == "Method('forward', inputs=1, outputs=1)"


def test_execute_requires_a_sequence_of_inputs():
    m = Runtime.get().load_program(MLP).load_method("forward")
    with pytest.raises(InvalidArgumentError, match="inputs must be a list or tuple of values, got ndarray"):
        m.execute(np.ones((4, 16), np.float32))
