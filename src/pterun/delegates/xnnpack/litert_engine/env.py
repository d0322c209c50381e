"""The LiteRT installation as the LiteRT engine uses it: the modules it imports once, and LiteRT's native stderr.

:func:`modules` imports ``ai_edge_litert``'s interpreter on first use and checks that it has what the engine
calls; anything missing raises
:class:`Unavailable` with the reason, and the caller runs the graph on the NumPy engine. LiteRT writes ``INFO:
Created TensorFlow Lite XNNPACK delegate for CPU.`` to the process's stderr when the first interpreter is made;
:class:`capture_native_stderr` routes such lines into the ``pterun`` logger and passes anything else written to
stderr meanwhile back through.
"""

from __future__ import annotations

import os
import re
import sys
import threading

from pterun._log import logger
from pterun.errors import DelegateError

__all__ = ["Unavailable", "Unsupported", "available", "capture_native_stderr", "modules", "quiet_native_teardown",
           "unavailable_error"]


class Unsupported(Exception):
    """The graph uses a node, a parameter or a datatype the LiteRT engine does not take; ``str()`` says which."""


class Unavailable(Exception):
    """LiteRT is not installed or not as expected."""


# -- the installed modules, checked once ---------------------------------------------------------------------------
_modules_cache: type | None = None
_modules_error: str | None = None
_modules_lock = threading.Lock()


def modules() -> type:
    """LiteRT's Interpreter class; raises :class:`Unavailable` with the reason."""
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


def _import_modules() -> type:
    try:
        from ai_edge_litert import interpreter as interp
    except ImportError as e:
        raise Unavailable(f"ai-edge-litert is not installed ({e})") from None
    except Exception as e:  # installed but broken: a native library that does not load here, ...
        raise Unavailable(f"ai-edge-litert does not import ({type(e).__name__}: {e})") from None
    if not hasattr(interp, "Interpreter"):
        raise Unavailable("ai_edge_litert has no Interpreter (a LiteRT version this pterun was not tested with)")
    return interp.Interpreter


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
_sink_fd: int | None = None
_sink_file = None  # where memfd_create is missing: an unlinked temporary file, kept open


def _sink() -> int:
    """The in-memory file stderr is pointed at during a capture (one per process, made on first use)."""
    global _sink_fd, _sink_file
    if _sink_fd is None:
        if hasattr(os, "memfd_create"):
            _sink_fd = os.memfd_create("pterun-stderr", os.MFD_CLOEXEC)
        else:
            import tempfile

            _sink_file = tempfile.TemporaryFile()
            _sink_fd = _sink_file.fileno()
    return _sink_fd


class capture_native_stderr:
    """While active, the process's stderr (fd 2) goes into an in-memory file; afterwards TFLite's own log lines
    (``INFO: ...``) go to the ``pterun`` logger and everything else is written back to stderr unchanged.

    A file rather than a pipe: nothing has to drain it while native code writes (no reader thread to start per
    interpreter, ~5 ms each on a busy machine), and a writer can never block on a full pipe."""

    def __enter__(self):
        _stderr_lock.acquire()
        try:
            sink = _sink()
            os.ftruncate(sink, 0)
            os.lseek(sink, 0, os.SEEK_SET)
            self.saved = os.dup(2)
            os.dup2(sink, 2)
        except OSError:
            _stderr_lock.release()
            self.saved = None
        return self

    def __exit__(self, *exc):
        if self.saved is None:
            return False
        chunks = []
        try:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            sink = _sink()
            os.lseek(sink, 0, os.SEEK_SET)
            while b := os.read(sink, 65536):
                chunks.append(b)
        finally:
            _stderr_lock.release()
        passthrough = []
        for line in b"".join(chunks).splitlines(keepends=True):
            if _LITERT_LINE.match(line):
                logger().info("LiteRT: %s", line.decode("utf-8", "replace").rstrip())
            else:
                passthrough.append(line)
        if passthrough:
            data = b"".join(passthrough)
            while data:
                data = data[os.write(2, data):]
        return False


_quiet_at_exit = False


def quiet_native_teardown() -> None:
    """Keep what LiteRT's own environment logs as the process ends (``INFO: [accelerator_registry.cc:43]
    DestroyAccelerator ...``, from a C++ destructor that runs after Python has finished) off stderr: once Python's
    ``atexit`` handlers run, a C ``atexit`` handler is registered that closes fd 2. Registered last, it runs before
    the C++ destructors registered earlier, and after everything Python writes (``Py_FinalizeEx`` flushes
    ``sys.stderr`` before the C exit handlers). Linux and glibc or musl (``__cxa_atexit``) only; elsewhere nothing
    changes."""
    global _quiet_at_exit
    if _quiet_at_exit or not sys.platform.startswith("linux"):
        return
    _quiet_at_exit = True
    import atexit

    atexit.register(_close_stderr_last)


def _close_stderr_last() -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        register = libc.__cxa_atexit
        register.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        # close(2), called as func(arg): an int argument travels in the first integer register on x86-64 and aarch64
        register(ctypes.cast(libc.close, ctypes.c_void_p).value, 2, None)
    except (AttributeError, OSError):  # no such C library: the lines stay
        pass


def unavailable_error(why) -> DelegateError:
    """The error of a program that asked for the LiteRT engine where it cannot run: ``why`` says what is missing."""
    return DelegateError(f"engine 'litert' was requested, but the LiteRT engine is unavailable: {why} "
                         "(pip install ai-edge-litert, or use engine='auto' or 'numpy')")
