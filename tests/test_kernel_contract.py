"""The kernel contract: everything the interpreter knows about an operator is declared in its ``register`` call,
and the whole registry (``pterun.kernels.KERNELS``) is the same whichever kernel module is imported first."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pterun.kernels import KERNELS, fast
from pterun.kernels.registry import Kernel, register

# prints every registered operator's contract as JSON: the module named in argv[1] imported first, then the whole
# registry asked for
_DUMP = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
from pterun.kernels import KERNELS
print(json.dumps({name: [k.fn.__module__, k.fn.__qualname__, k.raw, k.has_fast_path, k.volatile_args, k.foldable,
                         k.returns_view, k.not_supported] for name, k in sorted(KERNELS.items())}))
"""


def _contracts_after_importing(module: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _DUMP, module], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def whole_package() -> dict:
    return _contracts_after_importing("pterun.kernels")


@pytest.mark.parametrize("module", ["pterun.kernels.registry", "pterun.kernels.elementwise", "pterun.kernels.shape",
                                    "pterun.kernels.fast", "pterun.kernels.prim", "pterun.kernels.manifest"])
def test_the_whole_registry_is_the_same_whichever_module_comes_first(module, whole_package):
    assert _contracts_after_importing(module) == whole_package


def test_the_fresh_registry_holds_the_declared_contracts(whole_package):
    assert len(whole_package) == len(KERNELS) > 250
    add = whole_package["aten::add.out"]
    assert add[:2] == ["pterun.kernels.elementwise", "add_out"] and add[3] is True
    assert whole_package["executorch_prim::et_view.default"][2:5] == [True, False, [2]]
    assert whole_package["aten::randn.out"][5] is False
    assert whole_package["aten::permute_copy.out"][6] is True


def test_no_kernel_function_carries_contract_attributes():
    for name, k in KERNELS.items():
        patched = [a for a in ("specialize", "volatile_args", "not_supported", "check") if hasattr(k.fn, a)]
        assert not patched, f"{name}: {patched}"


def test_fast_paths_are_declared_where_the_hot_kernels_are():
    hot = ["aten::add.out", "aten::mul.Scalar_out", "aten::relu.out", "aten::gelu.out", "aten::linear.out",
           "aten::addmm.out", "aten::permute_copy.out", "aten::split_copy.Tensor_out", "aten::sigmoid.out",
           "aten::exp.out", "aten::abs.out", "aten::clone.out"]
    assert all(KERNELS[name].has_fast_path for name in hot)
    assert not KERNELS["aten::cat.out"].has_fast_path and KERNELS["aten::cat.out"].specialize() is None


def test_register_records_the_contract_and_rejects_misuse():
    def spec(general, self, out):
        return lambda: np.copyto(out, general(self, out))

    try:
        @register("demo::twice.out", specialize=spec, returns_view=False, foldable=False)
        def twice(self, out):
            """twice.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)"""
            return self * 2

        k = KERNELS["demo::twice.out"]
        assert isinstance(k, Kernel) and (k.foldable, k.returns_view, k.not_supported) == (False, False, None)
        out = np.zeros(2)
        k.specialize(np.ones(2), out)()
        assert out.tolist() == [2.0, 2.0]
        with pytest.raises(RuntimeError, match="'demo::twice.out' is registered twice"):
            register("demo::twice.out")(twice)
        with pytest.raises(RuntimeError, match="volatile_args applies to raw kernels only"):
            register("demo::thrice.out", volatile_args=(0,))(twice)
    finally:
        KERNELS.pop("demo::twice.out", None)
        KERNELS.pop("demo::thrice.out", None)


def test_fast_paths_store_results_by_the_one_out_convention():
    # a view copy whose out has another dtype is left to the general path (the interpreter casts there); one with
    # out's dtype copies through write_out_step, which casts the same way
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert KERNELS["aten::permute_copy.out"].specialize(x, (1, 0), np.zeros((3, 2), np.float64)) is None
    out = np.zeros((3, 2), np.float32)
    step = KERNELS["aten::permute_copy.out"].specialize(x, (1, 0), out)
    step()
    np.testing.assert_array_equal(out, x.T)
    assert fast.copy_of_view(KERNELS["aten::permute_copy.out"].fn, x, (1, 0), np.zeros((2, 3), np.float32)) is None
