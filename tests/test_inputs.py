"""Inputs: NumPy, DLPack and buffer objects, Python scalars; checked against the method's metadata."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from fixtures_util import FIXTURES, assert_matches, load_calls
from pterun import InvalidArgumentError, KernelError, PterunError, Runtime

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")


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


# -- hostile and unusual inputs: every one ends in InvalidArgumentError naming the input, or runs ----------------
class BrokenDLPack:
    """A tensor-like object whose DLPack export raises ``exc``; ``where`` says which method raises it. Objects
    that fail in ``cpu``/``detach`` have those methods (as torch tensors do); the others do not."""

    def __new__(cls, exc: BaseException, where: str = "__dlpack__"):
        kind = {"cpu": _WithCpu, "detach": _WithDetach}.get(where, cls)
        obj = object.__new__(kind)
        obj.exc, obj.where = exc, where
        return obj

    def __dlpack__(self, **kwargs):
        if self.where == "__dlpack__":
            raise self.exc
        raise BufferError("no DLPack here")

    def __dlpack_device__(self):
        if self.where == "__dlpack_device__":
            raise self.exc
        return (1, 0)


class _WithCpu(BrokenDLPack):
    def cpu(self):
        raise self.exc


class _WithDetach(BrokenDLPack):
    def detach(self):
        raise self.exc


# what torch, CuPy and hand-written wrappers were seen to raise, and what an exporter might
HOSTILE = [ZeroDivisionError("division by zero"), KeyError("device"), AttributeError("no attribute 'data_ptr'"),
           IndexError("list index out of range"), OverflowError("too big"), LookupError("lookup"),
           OSError("driver"), AssertionError("internal check"), MemoryError("pinned memory"), Exception("plain")]
# what a DLPack exporter raises to say "not this way": pterun tries the next route, then reports the first refusal
REFUSALS = [BufferError("read-only"), TypeError("unexpected keyword"), ValueError("bad stream"),
            RuntimeError("device"), NotImplementedError("not on this device"), RecursionError("deep"),
            UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad")]


@pytest.mark.parametrize("where", ["__dlpack__", "cpu", "detach"])
@pytest.mark.parametrize("exc", HOSTILE, ids=lambda e: type(e).__name__)
def test_a_dlpack_export_that_raises_anything_is_an_invalid_argument(mlp, exc, where):
    obj = BrokenDLPack(exc, where)
    with pytest.raises(InvalidArgumentError, match=rf"^input 0: converting the {type(obj).__name__} through DLPack "
                                                   rf"failed: {type(exc).__name__}: ") as info:
        mlp.execute([obj])
    assert info.value.__cause__ is exc


@pytest.mark.parametrize("exc", REFUSALS, ids=lambda e: type(e).__name__)
def test_a_dlpack_export_that_refuses_leaves_no_way_to_the_host(mlp, exc):
    class Refuses:
        def __dlpack__(self, **kwargs):
            raise exc

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(InvalidArgumentError, match=rf"^input 0: could not copy the Refuses to host memory via "
                                                   rf"DLPack \({type(exc).__name__}: ") as info:
        mlp.execute([Refuses()])
    assert info.value.__cause__ is exc


def test_a_dlpack_export_that_returns_garbage(mlp):
    class Garbage:
        def __dlpack__(self, **kwargs):
            return "not a capsule"

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(InvalidArgumentError, match=r"^input 0: could not copy the Garbage to host memory via DLPack "
                                                   r"\((TypeError|ValueError|BufferError|RuntimeError): "):
        mlp.execute([Garbage()])


def test_array_likes_through_dunder_array(mlp, mlp_call):
    class ArrayLike:
        def __init__(self, a, exc=None):
            self.a, self.exc = a, exc

        def __array__(self, dtype=None, copy=None):
            if self.exc is not None:
                raise self.exc
            return self.a

    x = mlp_call["inputs"][0]
    assert_matches(mlp.execute([ArrayLike(x)])[0], mlp_call["outputs"][0], "__array__ input")
    boom = KeyError("column")
    with pytest.raises(InvalidArgumentError, match=r"^input 0: converting the ArrayLike through __array__ failed: "
                                                   r"KeyError: 'column'$") as info:
        mlp.execute([ArrayLike(x, boom)])
    assert info.value.__cause__ is boom
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype float32, got int64"):
        mlp.execute([ArrayLike(np.zeros((4, 16), np.int64))])


def test_a_buffer_is_taken_with_its_own_format(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype float32, got uint8 \(pterun never "
                                                   r"casts inputs\)$"):
        mlp.execute([bytearray(256)])


def test_unaligned_inputs_work(mlp, mlp_call):
    x = mlp_call["inputs"][0]
    raw = bytearray(x.nbytes + 1)
    unaligned = np.frombuffer(raw, np.float32, count=x.size, offset=1).reshape(x.shape)
    unaligned = unaligned.copy() if unaligned.flags.aligned else unaligned  # noqa: normally unaligned
    raw[1:] = x.tobytes()
    assert not unaligned.flags.aligned
    assert_matches(mlp.execute([unaligned])[0], mlp_call["outputs"][0], "unaligned input")


def test_byte_swapped_inputs_are_read_in_their_own_byte_order(mlp, mlp_call):
    x = mlp_call["inputs"][0]
    swapped = x.astype(x.dtype.newbyteorder(">"))
    assert not swapped.dtype.isnative and swapped.tobytes() != x.tobytes()
    assert_matches(mlp.execute([swapped])[0], mlp_call["outputs"][0], "big-endian input")
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected dtype float32, got float64 \(>f8\) "
                                                   r"\(pterun never casts inputs\)$"):
        mlp.execute([x.astype(">f8")])


def test_zero_d_and_empty_inputs(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected rank 2 with shape \[4, 16\], got shape "
                                                   r"\[\]$"):
        mlp.execute([np.array(1.0, np.float32)])
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected shape \[4, 16\], got \[0, 16\]$"):
        mlp.execute([np.zeros((0, 16), np.float32)])
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected rank 2 with shape \[4, 16\], got shape "
                                                   r"\[0\]$"):
        mlp.execute([np.zeros(0, np.float32)])


@pytest.mark.parametrize("value,shown", [(1, "int 1"), (True, "bool True"), (None, "NoneType None"),
                                         (1 + 2j, r"complex \(1\+2j\)"),
                                         (np.float32(2.0), r"float32 (np\.float32\()?2\.0"),
                                         (np.int64(3), r"int64 (np\.int64\()?3")])
def test_python_and_numpy_scalars_for_a_tensor_input(mlp, value, shown):
    with pytest.raises(InvalidArgumentError, match=rf"^input 0: expected a tensor \(a NumPy array or DLPack/buffer "
                                                   rf"object\), got {shown}"):
        mlp.execute([value])


def test_lists_and_strings_are_not_tensors(mlp):
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected a NumPy array, a DLPack-exporting tensor or "
                                                   r"a buffer, got list$"):
        mlp.execute([[1.0] * 16])
    with pytest.raises(InvalidArgumentError, match=r"^method 'forward': inputs must be a list or tuple of values, "
                                                   r"got ndarray$"):
        mlp.execute(np.zeros((4, 16), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"^input 0: expected a NumPy array, a DLPack-exporting tensor or "
                                                   r"a buffer, got str$"):
        mlp.execute(["x"])


_EMBEDDING_STEP = (r"aten::embedding.out failed at instruction 0 with inputs \(float32\[100, 32\], int64\[2, 12\] = "
                   r"input 0, ")
# with LiteRT, the embedding is a node of the method's one merged call, which checks the caller's ids before it runs
_MERGED_CALL = r"delegate XnnpackBackend failed at instruction 0 with inputs \(int64\[2, 12\] = input 0, "


@pytest.mark.parametrize("engine, where", [("numpy", _EMBEDDING_STEP),
                                           pytest.param("litert", _MERGED_CALL, marks=needs_litert)])
@pytest.mark.parametrize("index", [100, 10**6, -101, -(10**6)])
def test_out_of_range_embedding_indices_name_the_input(index, engine, where):
    m = Runtime(engine=engine).load_program(FIXTURES / "transformer.pte").load_method("forward")
    call = load_calls("transformer")[0]
    ids = call["inputs"][0].copy()
    ids[1, 3] = index
    # run plainly, then observed (a hook takes the observed path)
    for hook in (None, lambda *event: None):
        with pytest.raises(KernelError, match=rf"{where}.*IndexError: embedding index {index} is out of range for "
                                              r"size 100$") as info:
            m.execute([ids, call["inputs"][1]], hook=hook)
        assert isinstance(info.value.__cause__, IndexError)
        assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "the next call is unaffected")


@pytest.mark.parametrize("engine, where", [
    ("numpy", r"aten::embedding.out failed at instruction 0 with inputs \(float32\[64, 16\], int64\[10\] = input 0, "),
    pytest.param("litert", r"delegate XnnpackBackend failed at instruction 0 with inputs \(int64\[10\] = input 0, ",
                 marks=needs_litert)])
@pytest.mark.parametrize("index", [64, -1, 2**62])
def test_ids_a_merged_call_gathers_are_checked_before_it_runs(index, engine, where):
    """An embedding of the caller's ids followed by a delegate: with LiteRT the method is one direct call whose
    graph gathers the rows (xnn_embed_mlp); a bad id fails it as the embedding step would, naming the input."""
    m = Runtime(engine=engine).load_program(FIXTURES / "xnn_embed_mlp.pte").load_method("forward")
    steps = [info[0] for info in m._runner.chains[0].info]
    assert steps == (["delegate XnnpackBackend"] if engine == "litert" else
                     ["aten::embedding.out", "delegate XnnpackBackend"])
    assert (m._runner.direct is not None) == (engine == "litert")
    call = load_calls("xnn_embed_mlp")[0]
    ids = call["inputs"][0].copy()
    ids[4] = index
    for hook in (None, lambda *event: None):  # the direct call, then the interpreter's steps
        with pytest.raises(KernelError, match=rf"{where}.*\): IndexError: embedding index {index} is out of range "
                                              r"for size 64$") as info:
            m.execute([ids], hook=hook)
        assert isinstance(info.value.__cause__, IndexError)
        assert_matches(m.execute(call["inputs"])[0], call["outputs"][0], "the next call is unaffected")


def test_quantized_embedding_indices_out_of_range_name_the_input():
    m = Runtime.get().load_program(FIXTURES / "q_embedding_4bit.pte").load_method("forward")
    ids = load_calls("q_embedding_4bit")[0]["inputs"][0].copy()
    ids[0, 0] = 32
    with pytest.raises(KernelError, match=r"embedding_4bit.dtype_out failed at instruction 0 with inputs \(.*int64"
                                          r"\[2, 5\] = input 0, .*embedding index out of range for 32 rows$"):
        m.execute([ids])


def test_nan_and_inf_inputs_are_numbers_not_errors(mlp):
    x = np.full((4, 16), np.nan, np.float32)
    x[0] = np.inf
    out = mlp.execute([x])[0]
    assert out.shape == (4, 10) and out.dtype == np.float32


def test_an_object_whose_attribute_lookup_raises(mlp):
    class Weird:
        def __getattr__(self, name):
            raise KeyError(name)

    with pytest.raises(InvalidArgumentError, match=r"^input 0: converting the Weird through its attributes failed: "
                                                   r"KeyError: '__dlpack__'$") as info:
        mlp.execute([Weird()])
    assert isinstance(info.value.__cause__, KeyError)
