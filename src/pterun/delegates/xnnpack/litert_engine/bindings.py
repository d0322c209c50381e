"""LiteRT's CompiledModel through its three native bindings, without the Python layer LiteRT puts over them.

``ai_edge_litert.compiled_model`` imports ``ml_dtypes``, ``dataclasses``, the Qualcomm and OpenVINO option classes
and more before the first model: ~15 ms of a cached load (measured on a 2-core Zen 3 and an Intel Xeon), where the
three bindings it wraps (``_pywrap_litert_compiled_model_wrapper``, ``_pywrap_litert_tensor_buffer_wrapper``,
``_pywrap_litert_environment_wrapper``) load in ~1 ms. The engine uses a handful of their calls, each with the
arguments LiteRT 2.3's own layer passes; :func:`load` checks that they are all there, and where they are not (a
LiteRT laid out otherwise) returns None, and the engine goes on as it does where LiteRT has no CompiledModel.

:class:`Model` and :class:`Buffer` keep the names of LiteRT's public methods (``run_by_index``,
``create_input_buffers``, ``write``, ``capsule`` ...), so the engine reads as it would over LiteRT's own classes.
A buffer over pterun's memory (:meth:`Bindings.host`) holds that array alive, and takes only memory LiteRT can
write in place: C-contiguous, 64-byte aligned, of a dtype LiteRT names. LiteRT's own layer copies unaligned memory
into a buffer of its own, where writes are lost to the caller; here such memory is a ``ValueError``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ALIGN", "Bindings", "Buffer", "Model", "load"]

#: LiteRT's alignment for host memory it reads and writes in place
ALIGN = 64

#: the dtypes LiteRT's tensor buffers name (by NumPy's name for them) that pterun's graphs use
_DTYPES = frozenset({"float32", "float16", "int32", "int8", "uint8", "bool"})

_MODEL_CALLS = ("GetSignatureByIndex", "GetInputTensorDetails", "GetOutputTensorDetails", "CreateInputBuffers",
                "CreateInputBufferByName", "IsFullyAccelerated", "ResizeInputTensorNonStrict", "RunByIndex")


def load(version: str):
    """The :class:`Bindings` of the installed LiteRT (already imported: its interpreter's module is), or None where
    any call the engine makes is missing."""
    try:
        from ai_edge_litert import _pywrap_litert_compiled_model_wrapper as cm
        from ai_edge_litert import _pywrap_litert_environment_wrapper as env
        from ai_edge_litert import _pywrap_litert_tensor_buffer_wrapper as tb
    except ImportError:
        return None
    wrapper = getattr(cm, "CompiledModelWrapper", None)
    needed = [(cm, "CreateCompiledModelFromFile"), (cm, "CreateCompiledModelFromBuffer"),
              (env, "CreateEnvironment"), (tb, "CreateTensorBufferFromHostMemory"), (tb, "WriteTensorBuffer")]
    if wrapper is None or not all(hasattr(m, name) for m, name in needed) \
            or not all(hasattr(wrapper, name) for name in _MODEL_CALLS):
        return None
    return Bindings(cm, env, tb, version)


class Bindings:
    """The process's LiteRT environment (:meth:`environment`, made once by the caller) and the calls that make
    models and buffers in it."""

    def __init__(self, cm, env, tb, version: str):
        self._cm, self._env, self._tb, self.version = cm, env, tb, version
        self.capsule = None  # the environment's, once made

    def environment(self, where: str) -> None:
        """Make the environment, looking for accelerator, plugin and dispatch libraries in ``where`` only."""
        self.capsule = self._env.CreateEnvironment(runtime_path=where, compiler_plugin_path=where,
                                                   dispatch_library_path=where)

    def from_file(self, path: str, num_threads: int, weight_cache: str = "") -> Model:
        return Model(self._cm.CreateCompiledModelFromFile(self.capsule, path, **_options(num_threads, weight_cache)),
                     self)

    def from_buffer(self, model: bytes, num_threads: int, weight_cache: str = "") -> Model:
        return Model(self._cm.CreateCompiledModelFromBuffer(self.capsule, model,
                                                            **_options(num_threads, weight_cache)), self)

    def host(self, array: np.ndarray) -> Buffer:
        """A buffer LiteRT reads and writes in place over ``array`` (kept alive with it); ``ValueError`` for
        memory it cannot (see the module docstring)."""
        kind = _dtype(array.dtype)
        if not array.flags.c_contiguous:
            raise ValueError("LiteRT binds C-contiguous host memory only")
        if array.ctypes.data % ALIGN:
            raise ValueError(f"LiteRT binds host memory aligned to {ALIGN} bytes only")
        return Buffer(self._tb.CreateTensorBufferFromHostMemory(array, kind, array.size), self, array)


def _options(num_threads: int, weight_cache: str) -> dict:
    # LiteRT's CPU accelerator is bit 0 of its accelerator set; every other option keeps the binding's default
    return {"hardware_accel": 1, "cpu_num_threads": max(int(num_threads), 1),
            "xnnpack_weight_cache_path": weight_cache}


#: dtype -> LiteRT's name for it, for the dtypes already seen: NumPy's ``dtype.name`` costs ~4 µs a call, and
#: every input a CompiledModel plan copies in names its dtype (as do the ~60 buffers a KV plan binds as it grows)
_NAMES: dict = {}


def _dtype(dtype: np.dtype) -> str:
    name = _NAMES.get(dtype)
    if name is None:
        d = np.dtype(dtype)
        if d.name not in _DTYPES:
            raise ValueError(f"LiteRT's tensor buffers do not take {d.name}")
        if not d.isnative:  # LiteRT reads the machine's byte order: '>f4' is float32 by name, not by bytes
            raise ValueError(f"LiteRT's tensor buffers do not take {d.name} in non-native byte order ({d.str})")
        name = _NAMES[dtype] = d.name
    return name


class Buffer:
    """One LiteRT tensor buffer: ``capsule`` for the model's calls, :meth:`write` to copy an array in."""

    __slots__ = ("capsule", "_write", "_memory")

    def __init__(self, capsule, bindings: Bindings, memory=None):
        self.capsule, self._write, self._memory = capsule, bindings._tb.WriteTensorBuffer, memory

    def write(self, a: np.ndarray) -> None:
        """Copy ``a`` (any strides; its dtype the buffer's) into the buffer."""
        self._write(self.capsule, np.ascontiguousarray(a).reshape(-1), _dtype(a.dtype))


class Model:
    """A LiteRT CompiledModel: the binding's object (``native``) under the public method names the engine uses."""

    def __init__(self, native, bindings: Bindings):
        self.native, self._bindings = native, bindings

    def get_signature_by_index(self, k: int) -> dict:
        return self.native.GetSignatureByIndex(k)

    def get_input_tensor_details(self, key: str) -> dict:
        return self.native.GetInputTensorDetails(key)

    def get_output_tensor_details(self, key: str) -> dict:
        return self.native.GetOutputTensorDetails(key)

    def is_fully_accelerated(self) -> bool:
        return bool(self.native.IsFullyAccelerated())

    def create_input_buffers(self, k: int) -> list:
        return [Buffer(c, self._bindings) for c in self.native.CreateInputBuffers(k)]

    def create_input_buffer_by_name(self, key: str, name: str) -> Buffer:
        return Buffer(self.native.CreateInputBufferByName(key, name), self._bindings)

    def resize_input_tensor(self, j: int, dims, k: int) -> None:
        """Resize input ``j`` of signature ``k`` (LiteRT's non-strict resize: any dim of the input may change)."""
        self.native.ResizeInputTensorNonStrict(k, j, [int(d) for d in dims])

    def run_by_index(self, k: int, ins: list, outs: list) -> None:
        self.native.RunByIndex(k, [b.capsule for b in ins], [b.capsule for b in outs])
