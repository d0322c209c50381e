"""The output contract on Method.execute, one test per sentence.

* Tensor outputs are NumPy arrays the caller owns; a later call never changes them; they export DLPack.
* Int/Double/Bool outputs are Python scalars.
* The output type is decided once per Program: tensor_output=, else the Runtime's, else
  $PTERUN_TENSOR_OUTPUT, else $EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT ("executorch" = numpy), else numpy.
* "torch" imports torch at load and returns torch.from_numpy of the owned arrays.
* Importing torch later, in any thread, even during a call, changes nothing.
"""

from __future__ import annotations

import sys
import textwrap
import threading

import numpy as np
import pytest

from fixtures_util import FIXTURES, load_calls
from pterun import Runtime

MLP = FIXTURES / "mlp.pte"


@pytest.fixture
def clean_env(monkeypatch):
    monkeypatch.delenv("PTERUN_TENSOR_OUTPUT", raising=False)
    monkeypatch.delenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", raising=False)
    return monkeypatch


@pytest.fixture
def fake_torch(tmp_path, monkeypatch):
    """A stand-in 'torch' package on sys.path whose from_numpy wraps the array."""
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        class Tensor:
            def __init__(self, array):
                self.array = array
        def from_numpy(array):
            return Tensor(array)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    yield
    sys.modules.pop("torch", None)


def _mlp_call():
    return load_calls("mlp")[0]


def test_outputs_are_owned_numpy_arrays_never_changed_by_later_calls(clean_env):
    m = Runtime.get().load_program(MLP).load_method("forward")
    x = _mlp_call()["inputs"][0]
    (first,) = m.execute([x])
    snapshot = first.copy()
    assert type(first) is np.ndarray
    assert first.flags.owndata and first.flags.writeable
    m.execute([x * 3])
    m.execute([-x])
    np.testing.assert_array_equal(first, snapshot)
    first[...] = 0  # the caller may write to it; the next call is unaffected
    (again,) = m.execute([x])
    np.testing.assert_array_equal(again, snapshot)


def test_outputs_export_dlpack(clean_env):
    m = Runtime.get().load_program(MLP).load_method("forward")
    (out,) = m.execute([_mlp_call()["inputs"][0]])
    view = np.from_dlpack(out)
    assert np.shares_memory(view, out)
    assert out.__dlpack_device__() == (1, 0)  # kDLCPU


def test_scalar_outputs_are_python_scalars(clean_env):
    calls = load_calls("dynamic")
    m = Runtime.get().load_program(FIXTURES / "dynamic.pte").load_method("forward")
    out = m.execute(calls[0]["inputs"])
    assert type(out[-1]) is int and out[-1] == calls[0]["outputs"][-1]


def test_default_is_numpy(clean_env):
    assert Runtime.get().load_program(MLP).tensor_output == "numpy"


@pytest.mark.parametrize("env,expected", [("numpy", "numpy"), ("NumPy", "numpy")])
def test_pterun_env_var(clean_env, env, expected):
    clean_env.setenv("PTERUN_TENSOR_OUTPUT", env)
    assert Runtime.get().load_program(MLP).tensor_output == expected


def test_executorch_env_var_executorch_means_numpy(clean_env):
    clean_env.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "executorch")
    assert Runtime.get().load_program(MLP).tensor_output == "numpy"


def test_pterun_env_var_wins_over_executorch_env_var(clean_env, fake_torch):
    clean_env.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "torch")
    clean_env.setenv("PTERUN_TENSOR_OUTPUT", "numpy")
    assert Runtime.get().load_program(MLP).tensor_output == "numpy"


def test_argument_wins_over_runtime_and_env(clean_env, fake_torch):
    clean_env.setenv("PTERUN_TENSOR_OUTPUT", "torch")
    assert Runtime(tensor_output="numpy").load_program(MLP).tensor_output == "numpy"
    assert Runtime(tensor_output="torch").load_program(MLP, tensor_output="numpy").tensor_output == "numpy"


def test_unknown_values_raise_value_error_listing_choices(clean_env):
    with pytest.raises(ValueError, match=r"^tensor_output must be one of 'numpy', 'torch', got 'jax'$"):
        Runtime.get().load_program(MLP, tensor_output="jax")
    with pytest.raises(ValueError, match=r"^tensor_output must be one of 'numpy', 'torch', got 'jax'$"):
        Runtime(tensor_output="jax")
    clean_env.setenv("PTERUN_TENSOR_OUTPUT", "tensorflow")
    with pytest.raises(ValueError, match=r"^PTERUN_TENSOR_OUTPUT must be one of 'numpy', 'torch', got "
                                         r"'tensorflow'$"):
        Runtime.get().load_program(MLP)
    clean_env.delenv("PTERUN_TENSOR_OUTPUT")
    clean_env.setenv("EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT", "numpy")
    with pytest.raises(ValueError, match=r"^EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT must be 'executorch' or 'torch', "
                                         r"got 'numpy'$"):
        Runtime.get().load_program(MLP)


def test_torch_output_returns_from_numpy_of_owned_arrays(clean_env, fake_torch):
    program = Runtime.get().load_program(MLP, tensor_output="torch")
    assert "torch" in sys.modules  # imported at load, not at the first call
    assert program.tensor_output == "torch"
    (out,) = program.load_method("forward").execute([_mlp_call()["inputs"][0]])
    import torch
    assert type(out) is torch.Tensor
    assert type(out.array) is np.ndarray and out.array.flags.owndata


def test_torch_output_without_torch_is_a_clear_import_error(clean_env, tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('No module named torch')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with pytest.raises(ImportError, match="tensor_output='torch' needs PyTorch, which is not installed"):
        Runtime.get().load_program(MLP, tensor_output="torch")


def test_env_is_read_at_load_not_per_call(clean_env, fake_torch):
    program = Runtime.get().load_program(MLP)
    clean_env.setenv("PTERUN_TENSOR_OUTPUT", "torch")
    (out,) = program.load_method("forward").execute([_mlp_call()["inputs"][0]])
    assert type(out) is np.ndarray
    assert program.tensor_output == "numpy"


def test_importing_torch_in_another_thread_during_calls_changes_nothing(clean_env, tmp_path, monkeypatch):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import time
        time.sleep(0.3)  # a slow import, so calls overlap with it
        class Tensor:
            pass
        def from_numpy(array):
            return Tensor()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    m = Runtime.get().load_program(MLP).load_method("forward")
    call = _mlp_call()
    started = threading.Event()

    def importer():
        started.set()
        import torch  # noqa: F401

    t = threading.Thread(target=importer)
    t.start()
    started.wait()
    kinds = set()
    while t.is_alive() or not kinds:
        kinds.add(type(m.execute(call["inputs"])[0]))
    t.join()
    kinds.add(type(m.execute(call["inputs"])[0]))
    assert "torch" in sys.modules
    assert kinds == {np.ndarray}
    sys.modules.pop("torch", None)
