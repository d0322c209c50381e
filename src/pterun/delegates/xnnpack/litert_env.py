"""The LiteRT installation as the LiteRT engine uses it: the modules it imports once, and LiteRT's native stderr.

:func:`modules` imports ``ai_edge_litert`` (its interpreter and the schema module the model writer uses) on first
use and checks that they have what the translation needs; anything missing raises :class:`Unavailable` with the
reason, and the caller runs the graph on the NumPy engine. LiteRT writes ``INFO: Created TensorFlow Lite XNNPACK
delegate for CPU.`` to the process's stderr when the first interpreter is made; :class:`capture_native_stderr`
routes such lines into the ``pterun`` logger and passes anything else written to stderr meanwhile back through.
"""

from __future__ import annotations

import os
import re
import threading

from pterun._log import logger

__all__ = ["Unavailable", "Unsupported", "available", "capture_native_stderr", "modules"]


class Unsupported(Exception):
    """The graph uses a node, a parameter or a datatype the LiteRT engine does not take; ``str()`` says which."""


class Unavailable(Exception):
    """LiteRT (or the schema module the translation writes with) is not installed or not as expected."""


# -- the installed modules, checked once ---------------------------------------------------------------------------
_SCHEMA_NAMES = ("ModelT", "SubGraphT", "TensorT", "BufferT", "OperatorT", "OperatorCodeT",
                 "QuantizationParametersT", "BlockwiseQuantizationT", "QuantizationDetails", "BuiltinOperator",
                 "BuiltinOptions", "TensorType", "Padding", "ActivationFunctionType", "Conv2DOptionsT",
                 "DepthwiseConv2DOptionsT", "FullyConnectedOptionsT", "Pool2DOptionsT", "ReshapeOptionsT",
                 "ConcatenationOptionsT", "AddOptionsT", "SubOptionsT", "MulOptionsT", "DivOptionsT",
                 "SoftmaxOptionsT", "LeakyReluOptionsT", "ResizeBilinearOptionsT", "ReducerOptionsT",
                 "BatchMatMulOptionsT", "TransposeConvOptionsT")
_modules_cache: tuple | None = None
_modules_error: str | None = None
_modules_lock = threading.Lock()


def modules() -> tuple:
    """(schema module, flatbuffers, Interpreter class); raises :class:`Unavailable` with the reason."""
    global _modules_cache, _modules_error
    with _modules_lock:
        if _modules_cache is None and _modules_error is None:
            try:
                _modules_cache = _import_modules()
            except Unavailable as e:
                _modules_error = str(e)
        if _modules_error is not None:
            raise Unavailable(_modules_error)
        return _modules_cache


def _import_modules() -> tuple:
    try:
        import flatbuffers
        from ai_edge_litert import interpreter as interp
        from ai_edge_litert import schema_py_generated as schema
    except ImportError as e:
        raise Unavailable(f"ai-edge-litert is not installed ({e})") from None
    except Exception as e:  # installed but broken: a native library that does not load here, ...
        raise Unavailable(f"ai-edge-litert does not import ({type(e).__name__}: {e})") from None
    missing = [n for n in _SCHEMA_NAMES if not hasattr(schema, n)]
    need_ops = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "PAD", "TRANSPOSE", "RESHAPE")
    missing += [f"BuiltinOperator.{n}" for n in need_ops if not hasattr(getattr(schema, "BuiltinOperator", None), n)]
    missing += [f"TensorType.{n}" for n in ("FLOAT32", "INT8", "INT4", "FLOAT16")
                if not hasattr(getattr(schema, "TensorType", None), n)]
    if missing:
        raise Unavailable(f"ai_edge_litert.schema_py_generated lacks {', '.join(missing[:5])}"
                          f"{' ...' if len(missing) > 5 else ''} (a LiteRT version this pterun was not tested with)")
    if not hasattr(interp, "Interpreter") or not hasattr(schema.ModelT, "Pack"):
        raise Unavailable("ai_edge_litert has no Interpreter or its schema module no object API")
    return schema, flatbuffers, interp.Interpreter


def available() -> str | None:
    """None when the LiteRT engine can be used, else the reason it cannot."""
    try:
        modules()
    except Unavailable as e:
        return str(e)
    return None


# -- native stderr -----------------------------------------------------------------------------------------------
_LITERT_LINE = re.compile(rb"^(INFO|WARNING|ERROR|VERBOSE): ")
_stderr_lock = threading.Lock()


class capture_native_stderr:
    """While active, the process's stderr (fd 2) goes into a pipe; afterwards TFLite's own log lines
    (``INFO: ...``) go to the ``pterun`` logger and everything else is written back to stderr unchanged."""

    def __enter__(self):
        _stderr_lock.acquire()
        try:
            self.saved = os.dup(2)
            r, w = os.pipe()
            os.dup2(w, 2)
            os.close(w)
        except OSError:
            _stderr_lock.release()
            self.saved = None
            return self
        self.chunks: list[bytes] = []
        self.reader = threading.Thread(target=self._drain, args=(r,), daemon=True, name="pterun-stderr")
        self.reader.start()
        return self

    def _drain(self, r: int) -> None:
        try:
            while True:
                b = os.read(r, 65536)
                if not b:
                    break
                self.chunks.append(b)
        finally:
            os.close(r)

    def __exit__(self, *exc):
        if self.saved is None:
            return False
        try:
            os.dup2(self.saved, 2)  # closes the pipe's last write end: the reader sees EOF
            os.close(self.saved)
            self.reader.join()
        finally:
            _stderr_lock.release()
        passthrough = []
        for line in b"".join(self.chunks).splitlines(keepends=True):
            if _LITERT_LINE.match(line):
                logger().info("LiteRT: %s", line.decode("utf-8", "replace").rstrip())
            else:
                passthrough.append(line)
        if passthrough:
            data = b"".join(passthrough)
            while data:
                data = data[os.write(2, data):]
        return False

