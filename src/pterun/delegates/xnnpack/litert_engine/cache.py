"""XNNPACK's packed weights kept on disk between processes (LiteRT's weight cache), named by what they come from.

When LiteRT prepares a model, XNNPACK packs every convolution's and fully-connected layer's weights into a layout
of its own: the larger part of a load (ResNet18: ~53 of ~110 ms here; the 14 graphs of a 130M 8da4w Llama:
~135 ms). LiteRT's ``CompiledModel`` can write what it packed into a file and map that file back the next time,
without packing (:mod:`.compiled`). The file's name is a key over everything packing depends on (:func:`key`):
the translated model's bytes, weights included; LiteRT's version; the CPU (XNNPACK picks its microkernels, and
with them the packed layout, by the CPU it runs on); and this module's :data:`FORMAT`. A file of that name holds
what packing would produce again, so a changed weight, a new LiteRT or another machine sharing the directory
never reads it.

Writing costs: LiteRT's CompiledModel packs and writes in about twice the time the interpreter packs (a 130M
8da4w Llama: 0.29 s against 0.14 s), so the first load of a model only leaves a small note that it was seen
(:meth:`Cache.lookup`'s ``"first"``), and the second writes the weights: a program loaded once never pays for
a cache it would not use. A file is written under a name of its own (:meth:`Cache.scratch`) and renamed once
LiteRT has finished it, so no reader sees half a file, and two processes loading one program at once both
succeed. A model LiteRT's XNNPACK
delegate does not take whole leaves a small marker instead of weights (:meth:`Cache.refuse`): later loads go
straight to the interpreter, which says what it left. When the directory holds more than its bound, the files
used longest ago go (:meth:`Cache.trim`; a hit refreshes a file's time). An OSError (a read-only home, a full
disk) leaves that load without the cache; nothing else changes.

Example::

    >>> c = Cache("/tmp/pterun-cache-doc", 1 << 30)                     # doctest: +SKIP
    >>> c.lookup(key(model_bytes))                                      # doctest: +SKIP
    ('first', None)
"""

from __future__ import annotations

import os
import platform
import sys
import time
import zlib

from pterun._log import logger

__all__ = ["Cache", "FORMAT", "cpu_identity", "key"]

#: The layout of this module's files and names; changing what a key covers changes it.
FORMAT = 1
_SUB = "xnnpack"
_WEIGHTS, _REFUSED, _SEEN, _SCRATCH = ".weights", ".refused", ".seen", ".partial"
#: loads of a model that only note it before one writes its packed weights (see the module docstring)
NOTE_LOADS = 1
#: a scratch file older than this (seconds) was left by a process that died while writing it
_STALE = 3600
_cpu = None


def cpu_identity() -> str:
    """What names this CPU for XNNPACK's choice of microkernels: on Linux the first processor's vendor, model and
    feature flags (``/proc/cpuinfo``), elsewhere the platform's processor and machine names."""
    global _cpu
    if _cpu is None:
        parts = [platform.machine(), platform.processor()]
        if sys.platform.startswith("linux"):
            try:
                with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                    text = f.read().split("\n\n", 1)[0]
            except OSError:
                text = ""
            parts += [line for line in text.splitlines()
                      if line.split(":")[0].strip() in ("vendor_id", "model name", "cpu family", "model", "flags",
                                                         "Features", "CPU implementer", "CPU part")]
        _cpu = "\n".join(parts)
    return _cpu


#: the model's first bytes (its flatbuffer: the graph, shapes, quantization) go into the key whole
_HEAD = 1 << 20


def key(model, litert_version: str) -> str:
    """The cache key of a model's bytes (see the module docstring): a SHA-256 hex digest over the versions, the
    CPU, the model's length, its first :data:`_HEAD` bytes, and a CRC-32 of all of it. The CRC stands for the
    weights: it catches any accidental change of them (all but one in 2**32) at ~6 GB/s, where SHA-256 over
    them took 31 ms of ResNet18's load and the packing it saves ~50."""
    import hashlib  # here: only a load that uses the cache pays for its import (~3 ms)

    view = memoryview(model).cast("B")
    h = hashlib.sha256(f"pterun xnnpack weights {FORMAT}\n{litert_version}\n{cpu_identity()}\n{len(view)}\n"
                       f"{zlib.crc32(view):08x}\n".encode())
    h.update(view[:_HEAD])
    return h.hexdigest()


class Cache:
    """The packed-weight files under ``directory`` (in its ``xnnpack`` folder), at most ``max_bytes`` of them."""

    def __init__(self, directory: str, max_bytes: int):
        self.root = os.path.join(directory, _SUB)
        self.max_bytes = max_bytes

    def _path(self, k: str, ext: str) -> str:
        return os.path.join(self.root, k + ext)

    def lookup(self, k: str) -> tuple[str, str | None]:
        """What to do for key ``k``: ``("hit", weights file)``; ``("miss", file to write)`` for a model seen
        before; ``("first", None)`` the first time (a note is left); ``("refused", None)`` for a model the
        interpreter runs; ``("off", None)`` when the directory cannot be written."""
        weights = self._path(k, _WEIGHTS)
        if os.path.exists(self._path(k, _REFUSED)):
            return "refused", None
        if os.path.isfile(weights) and os.path.getsize(weights) > 0:
            try:
                os.utime(weights)  # used now: the last to go when the cache is trimmed
            except OSError:
                pass
            return "hit", weights
        seen = self._path(k, _SEEN)
        try:
            os.makedirs(self.root, exist_ok=True)
            count = _count(seen)
            if count >= NOTE_LOADS:
                return "miss", self.scratch(k)
            with open(seen, "w", encoding="utf-8") as f:
                f.write(f"{count + 1}\n")
        except OSError as e:
            logger().debug("packed-weight cache off for this load: %s", e)
            return "off", None
        return "first", None

    def scratch(self, k: str) -> str:
        """A file name of this process's own to write ``k``'s weights under before :meth:`commit`."""
        return self._path(f"{k}.{os.getpid()}.{time.monotonic_ns()}", _SCRATCH)

    def commit(self, scratch: str, k: str) -> str | None:
        """Give ``scratch`` its key's name (atomically); the file's path, None when there is none to give (LiteRT
        wrote nothing: the cache could not be written)."""
        final = self._path(k, _WEIGHTS)
        try:
            if os.path.getsize(scratch) == 0:
                os.remove(scratch)
                return None
            os.replace(scratch, final)
            _remove(self._path(k, _SEEN), 0)
        except OSError as e:
            logger().debug("packed-weight cache: %s not kept: %s", scratch, e)
            return None
        self.trim(keep=final)
        return final

    def refuse(self, k: str, scratch: str | None = None) -> None:
        """Remember that ``k``'s model is not LiteRT's XNNPACK delegate's whole (and drop what was written)."""
        try:
            if scratch is not None and os.path.exists(scratch):
                os.remove(scratch)
            with open(self._path(k, _REFUSED), "w", encoding="utf-8") as f:
                f.write("LiteRT's XNNPACK delegate did not take this model whole: the interpreter runs it\n")
        except OSError as e:
            logger().debug("packed-weight cache: no marker for %s: %s", k, e)

    def trim(self, keep: str | None = None) -> int:
        """Remove the files used longest ago until the folder holds at most ``max_bytes`` (``keep`` stays), and
        scratch files a dead process left; the bytes removed."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return 0
        now, files, total, removed = time.time(), [], 0, 0
        for name in names:
            path = os.path.join(self.root, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            if name.endswith(_SCRATCH):
                if now - st.st_mtime > _STALE:
                    removed += _remove(path, st.st_size)
                continue
            if name.endswith((_WEIGHTS, _REFUSED, _SEEN)):
                files.append((st.st_mtime, path, st.st_size))
                total += st.st_size
        for _, path, size in sorted(files):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            got = _remove(path, size)
            removed += got
            total -= got
        return removed


def _count(seen: str) -> int:
    """The loads a note counts (0 without one; a note that does not read as a count counts as many as needed)."""
    try:
        with open(seen, encoding="utf-8") as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0
    except (OSError, ValueError):
        return NOTE_LOADS


def _remove(path: str, size: int) -> int:
    try:
        os.remove(path)
    except OSError:
        return 0
    return size
