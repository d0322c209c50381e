"""The LiteRT engine's CompiledModel calls go to LiteRT's bindings directly (:mod:`.litert_engine.bindings`)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

HAVE_LITERT = importlib.util.find_spec("ai_edge_litert") is not None
pytestmark = pytest.mark.skipif(not HAVE_LITERT, reason="ai-edge-litert is not installed")


@pytest.fixture()
def api():
    from pterun.delegates.xnnpack.litert_engine.compiled import litert_api

    got = litert_api()
    assert got is not None  # LiteRT 2.3, which pterun depends on, has every call the engine makes
    return got


def _aligned(n: int, dtype, offset: int = 0) -> np.ndarray:
    from pterun.delegates.xnnpack.litert_engine.bindings import ALIGN

    raw = np.zeros(n * np.dtype(dtype).itemsize + 2 * ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN + offset
    return raw[start:start + n * np.dtype(dtype).itemsize].view(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8, np.float16, np.bool_])
def test_a_host_buffer_is_the_array_s_own_memory(api, dtype):
    a = _aligned(8, dtype)
    buf = api.host(a)
    src = (np.arange(8) % 2).astype(dtype)[::-1]  # any strides: written as a contiguous copy
    buf.write(src)
    np.testing.assert_array_equal(a, src)
    assert buf._memory is a  # kept alive with the buffer


def test_memory_litert_would_copy_is_refused_not_copied(api):
    with pytest.raises(ValueError, match="^LiteRT binds host memory aligned to 64 bytes only$"):
        api.host(_aligned(8, np.float32, offset=4))
    with pytest.raises(ValueError, match="^LiteRT binds C-contiguous host memory only$"):
        api.host(_aligned(16, np.float32)[::2])
    with pytest.raises(ValueError, match="^LiteRT's tensor buffers do not take int64$"):
        api.host(_aligned(8, np.int64))
    swapped = ">f4" if np.little_endian else "<f4"  # float32 by name, in bytes LiteRT would misread
    with pytest.raises(ValueError, match=f"^LiteRT's tensor buffers do not take float32 in non-native byte order "
                                         f"\\({swapped}\\)$"):
        api.host(_aligned(8, swapped))
    buf = api.host(_aligned(8, np.float32))
    with pytest.raises(ValueError, match="non-native byte order"):  # a write names the dtype of what it copies
        buf.write(np.zeros(8, swapped))


def test_a_dtype_s_name_is_looked_up_once(api):
    from pterun.delegates.xnnpack.litert_engine import bindings

    a = _aligned(8, np.float32)
    api.host(a)
    assert bindings._NAMES[np.dtype(np.float32)] == "float32"
    assert bindings._dtype(a.dtype) == "float32" and bindings._dtype(np.dtype("int8")) == "int8"
    swapped = np.dtype(">f4" if np.little_endian else "<f4")
    with pytest.raises(ValueError, match="non-native byte order"):
        bindings._dtype(swapped)
    assert swapped not in bindings._NAMES  # refused again next time, not remembered as float32
    with pytest.raises(ValueError, match="non-native byte order"):
        bindings._dtype(swapped)


def test_a_litert_without_a_call_the_engine_makes_has_no_bindings(monkeypatch):
    from ai_edge_litert import _pywrap_litert_tensor_buffer_wrapper as tb

    from pterun.delegates.xnnpack.litert_engine.bindings import Bindings, load

    assert type(load("2.3.0")) is Bindings
    monkeypatch.delattr(tb, "WriteTensorBuffer")
    assert load("2.3.0") is None
