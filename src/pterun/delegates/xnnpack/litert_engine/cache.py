"""XNNPACK's packed weights kept on disk between processes (LiteRT's weight cache), named by what they come from.

When LiteRT prepares a model, XNNPACK packs every convolution's and fully-connected layer's weights into a layout
of its own: the larger part of a load (ResNet18: ~53 of ~110 ms here; the 14 graphs of a 130M 8da4w Llama:
~135 ms). LiteRT's ``CompiledModel`` can write what it packed into a file and map that file back the next time,
without packing (:mod:`.compiled`). Beside the packed weights the cache keeps the translated model itself
(``.tflite``), which LiteRT then maps from the file: a cached load neither copies the weights into new model bytes
nor reads them.

The files' name is a key over everything the model and its packing depend on (:func:`model_key`): the model's
flatbuffer (its graph, shapes, quantization, and where each constant lies); each constant's bytes; LiteRT's
version; the CPU (XNNPACK picks its microkernels, and with them the packed layout, by the CPU it runs on); and this
module's :data:`FORMAT`. A constant read from a program file pterun mapped stands in the key as the file's content
digest and its offset there; the digest is computed once per version of the file and remembered in the cache
(:meth:`Cache.file_digest`), so a cached load does not read the weights to name them. Any other constant stands as
a CRC-32 of its bytes. A file of that name holds what translation and packing would produce again, so a changed
weight, a new LiteRT or another machine sharing the directory never reads it.

Writing costs: LiteRT's CompiledModel packs and writes in about twice the time the interpreter packs (a 130M
8da4w Llama: 0.29 s against 0.14 s), so the first load of a model only leaves a small note that it was seen
(:meth:`Cache.lookup`'s ``"first"``), and the second writes the weights and the model: a program loaded once never
pays for a cache it would not use. A file is written under a name of its own (:meth:`Cache.scratch`) and renamed
once complete, so no reader sees half a file, and two processes loading one program at once both succeed. A model
LiteRT's XNNPACK delegate does not take whole leaves a small marker instead of weights (:meth:`Cache.refuse`):
later loads go straight to the interpreter, which says what it left. When the directory holds more than its
bound, the files used longest ago go (:meth:`Cache.trim`; a hit refreshes a file's time). An OSError (a read-only
home, a full disk) leaves that load without the cache; nothing else changes.

Example::

    >>> c = Cache("/tmp/pterun-cache-doc", 1 << 30)                     # doctest: +SKIP
    >>> c.lookup(model_key(laid_out_model, "2.3.0", c))                  # doctest: +SKIP
    ('first', None)
"""

from __future__ import annotations

import os
import platform
import sys
import time
import zlib

import numpy as np

from pterun._log import logger
from pterun.delegates.xnnpack.litert_engine.memory import mapping_of
from pterun.format.mapped import file_of

__all__ = ["Cache", "FORMAT", "cpu_identity", "digest", "model_key"]

#: The layout of this module's files and names; changing what a key covers changes it.
FORMAT = 2
_SUB = "xnnpack"
_WEIGHTS, _MODEL, _REFUSED, _SEEN, _FILE, _SCRATCH = ".weights", ".tflite", ".refused", ".seen", ".file", ".partial"
#: a file changed less than this many seconds before its digest was noted may have changed again within the
#: same timestamp (file systems keep them coarsely): such a note is not trusted, and the digest is computed again
RACY_S = 2.0
#: loads of a model that only note it before one writes its packed weights (see the module docstring)
NOTE_LOADS = 1
#: a scratch file older than this (seconds) was left by a process that died while writing it
_STALE = 3600
_cpu = None
_sha256 = None  # the SHA-256 constructor :func:`sha256` found


def cpu_identity() -> str:
    """What names this CPU for XNNPACK's choice of microkernels: the machine's name and, on Linux, the first
    processor's vendor, model and feature flags (``/proc/cpuinfo``), elsewhere the platform's processor name."""
    global _cpu
    if _cpu is None:
        parts = [platform.machine()]
        if sys.platform.startswith("linux"):  # not platform.processor(): it runs ``uname -p`` there (~15 ms)
            try:
                with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                    text = f.read().split("\n\n", 1)[0]
            except OSError:
                text = ""
            parts += [line for line in text.splitlines()
                      if line.split(":")[0].strip() in ("vendor_id", "model name", "cpu family", "model", "flags",
                                                         "Features", "CPU implementer", "CPU part")]
        else:
            parts.append(platform.processor())
        _cpu = "\n".join(parts)
    return _cpu


def sha256(data: bytes = b""):
    """A SHA-256 hash object: CPython's own module where it has one, which imports in ~0.4 ms where ``hashlib``
    takes ~4 ms (it loads OpenSSL) of every load that looks in the cache; else ``hashlib``'s. The digests are the
    same; only the first sight of a program file hashes more than a few KB (:func:`digest`: 1 MB, ~4 ms)."""
    global _sha256
    if _sha256 is None:
        for name in ("_sha2", "_sha256", "hashlib"):  # Python 3.12+, 3.10-3.11, elsewhere
            try:
                _sha256 = __import__(name).sha256
                break
            except (ImportError, AttributeError):
                continue
    return _sha256(data)

#: a digest covers its data's first bytes whole
_HEAD = 1 << 20


def digest(data) -> str:
    """A SHA-256 hex digest over the length of ``data`` (bytes-like), its first :data:`_HEAD` bytes, and a CRC-32
    of all of it. The CRC stands for the weights: it catches any accidental change of them (all but one in 2**32)
    at 2-6 GB/s, where SHA-256 over them took 31 ms of ResNet18's load."""
    view = memoryview(data).cast("B")
    h = sha256(f"{len(view)}\n{zlib.crc32(view):08x}\n".encode())
    h.update(view[:_HEAD])
    return h.hexdigest()


def model_key(laid, litert_version: str, cache: Cache | None = None) -> str:
    """The cache key of a model laid out (:class:`.writer.Unwritten`), without writing it: a SHA-256 hex digest
    over the format, LiteRT's version, the CPU, the flatbuffer and each constant's place, size, XOR byte and
    source. A constant that is a contiguous run of a program file pterun mapped is named by the file's digest
    (:meth:`Cache.file_digest`, remembered under ``cache``) and its offset; any other by a CRC-32 of its bytes."""
    h = sha256(f"pterun xnnpack model {FORMAT}\n{litert_version}\n{cpu_identity()}\n{laid.size}\n"
               f"{laid.at}\n".encode())
    h.update(laid.fb)
    files: dict[int, str | None] = {}
    for start, data, xor in laid.blobs:
        h.update(f"{start} {data.size} {xor} {_source(data, cache, files)}\n".encode())
    return h.hexdigest()


def _source(data, cache: Cache | None, files: dict) -> str:
    """What names the bytes of ``data`` (a uint8 array) in a key (see :func:`model_key`)."""
    found = mapping_of(data) if data.flags.c_contiguous else None
    if found is not None:
        mm, offset = found
        if id(mm) not in files:
            files[id(mm)] = cache.file_digest(mm) if cache is not None else None
        if files[id(mm)] is not None:
            return f"file {files[id(mm)]} {offset}"
    return f"crc {zlib.crc32(np.ascontiguousarray(data)):08x}"


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
            for used in (weights, self._path(k, _MODEL)):
                try:
                    os.utime(used)  # used now: the last to go when the cache is trimmed
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

    def model_file(self, k: str, size: int) -> str | None:
        """The translated model kept for key ``k``, None when there is none of ``size`` bytes (one cut short is
        dropped: the caller writes it again)."""
        path = self._path(k, _MODEL)
        try:
            if os.path.getsize(path) == size:
                return path
        except OSError:
            return None
        self.drop_model(k)
        return None

    def keep_model(self, k: str, model: bytes) -> str | None:
        """Write ``model`` as key ``k``'s translated model (atomically); its path, None when it cannot be written."""
        final = self._path(k, _MODEL)
        return final if self._write(k, final, model, "model") else None

    def _write(self, k: str, final: str, data: bytes, what: str) -> bool:
        """Write ``data`` as ``final``: under a scratch name of ``k``'s first, renamed once whole (no reader sees
        half a file); False, with nothing left behind, when it cannot be written."""
        scratch = self.scratch(k)
        try:
            os.makedirs(self.root, exist_ok=True)
            with open(scratch, "wb") as f:
                f.write(data)
            os.replace(scratch, final)
        except OSError as e:
            logger().debug("packed-weight cache: %s %s not kept: %s", what, final, e)
            _remove(scratch, 0)
            return False
        return True

    def drop_model(self, k: str) -> None:
        """Forget key ``k``'s translated model (LiteRT could not read it)."""
        _remove(self._path(k, _MODEL), 0)

    def file_digest(self, mm) -> str | None:
        """The :func:`digest` of the program file behind ``mm`` (a mapping :func:`pterun.sources.open_source`
        made; None for any other), computed once per version of the file: the note ``<name>.file`` remembers it
        under a name made of the file's path, device, inode, size and times of change. A note written within
        :data:`RACY_S` of the file's last change is not trusted (the file may have changed again within the same
        timestamp); a note that cannot be read or written only costs the computation."""
        found = file_of(mm)
        if found is None:
            return None
        path, st = found
        ident = "\0".join(map(str, (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                     st.st_ctime_ns)))
        note = self._path(sha256(ident.encode()).hexdigest(), _FILE)
        changed = max(st.st_mtime_ns, st.st_ctime_ns) / 1e9
        try:
            with open(note, encoding="utf-8") as f:
                value, noted = f.read().split()
            if float(noted) - changed >= RACY_S and len(value) == 64:
                return value
        except (OSError, ValueError):
            pass
        value = digest(mm)
        self._write("file", note, f"{value} {time.time():.3f}\n".encode(), f"the digest of {path}")
        return value

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
            self.drop_model(k)
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
            if name.endswith((_WEIGHTS, _MODEL, _REFUSED, _SEEN, _FILE)):
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
