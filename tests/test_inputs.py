"""Inputs: NumPy, DLPack and buffer objects, Python scalars; checked against the method's metadata."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import InvalidArgumentError, PterunError, Runtime


@pytest.fixture(scope="module")
def mlp():
    return Runtime.get().load_program(FIXTURES / "mlp.pte").load_method("forward")


@pytest.fixture(scope="module")
def mlp_call():
    return load_calls("mlp")[0]


class DLPackOnly:
    """An object that only speaks DLPack (as a torch or CuPy tensor would)."""

    def __init__(self, array):
        self._a = array

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_and_buffer_inputs_give_the_same_result(mlp, mlp_call):
    x = mlp_call["inputs"][0]
    expected = mlp_call["outputs"][0]
    assert_matches(mlp.execute([DLPackOnly(x)])[0], expected, "dlpack input")
    assert_matches(mlp.execute([memoryview(x)])[0], expected, "buffer input")


def test_non_contiguous_inputs_work(mlp, mlp_call):
    x = mlp_call["inputs"][0]
    fortran = np.asfortranarray(x)
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    assert not fortran.flags.c_contiguous and not strided.flags.c_contiguous
    for variant in (fortran, strided, x.T.copy().T):
        assert_matches(mlp.execute([variant])[0], mlp_call["outputs"][0], "non-contiguous input")


def test_inputs_are_never_modified(mlp, mlp_call):
    x = mlp_call["inputs"][0].copy()
    before = x.copy()
    mlp.execute([x])
    np.testing.assert_array_equal(x, before)


def test_read_only_inputs_are_accepted(mlp, mlp_call):
    x = mlp_call["inputs"][0].copy()
    x.flags.writeable = False
    assert_matches(mlp.execute([x])[0], mlp_call["outputs"][0], "read-only input")


def test_wrong_count(mlp, mlp_call):
    with pytest.raises(InvalidArgumentError, match=r"^method 'forward' takes 1 input\(s\), got 2$"):
        mlp.execute([mlp_call["inputs"][0]] * 2)


def test_wrong_dtype_is_never_cast(mlp, mlp_call):
    x = mlp_call["inputs"][0].astype(np.float64)
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype float32, got float64 "
                                                   r"\(pterun never casts inputs\)$"):
        mlp.execute([x])


def test_wrong_shape_and_rank(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected shape \[4, 16\], got \[4, 15\]$"):
        mlp.execute([np.zeros((4, 15), np.float32)])
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected rank 2 with shape \[4, 16\], got shape "
                                                   r"\[64\]$"):
        mlp.execute([np.zeros(64, np.float32)])


def test_invalid_argument_error_is_a_value_error(mlp):
    with pytest.raises(ValueError):
        mlp.execute([np.zeros((1,), np.float32)])


def test_python_scalar_for_a_tensor_input_is_rejected(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected a tensor \(a NumPy array or DLPack/buffer "
                                                   r"object\), got float 1.0$"):
        mlp.execute([1.0])


def test_unsupported_object(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected a NumPy array, a DLPack-exporting tensor or "
                                                   r"a buffer, got dict$"):
        mlp.execute([{}])


def test_dynamic_input_within_and_beyond_its_bound():
    m = Runtime.get().load_program(FIXTURES / "dynamic.pte").load_method("forward")
    info = m.metadata.input_tensor_meta(0)
    assert info.is_dynamic() and info.sizes() == (8, 6)  # the serialized upper bound
    out = m.execute([np.ones((1, 6), np.float32)])
    assert out[0].shape == (1, 4) and out[-1] == 1
    with pytest.raises(InvalidArgumentError, match=r"^input 0: shape \[9, 6\] exceeds the upper bound \[8, 6\] of "
                                                   r"this dynamic input$"):
        m.execute([np.zeros((9, 6), np.float32)])
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected rank 2 with shape \[8, 6\], got shape "
                                                   r"\[6\]$"):
        m.execute([np.zeros(6, np.float32)])


def test_errors_share_the_pterun_base(mlp):
    with pytest.raises(PterunError):
        mlp.execute([])
