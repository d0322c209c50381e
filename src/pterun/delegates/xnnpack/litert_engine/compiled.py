"""The LiteRT engine on LiteRT's ``CompiledModel``: how a model whose packed weights are cached on disk runs.

LiteRT's ``Interpreter`` cannot be given a weight cache; its ``CompiledModel`` can (``CpuOptions(
xnnpack_weight_cache_path=...)``), and runs the same XNNPACK delegate: its outputs are the interpreter's, bit for
bit. :func:`open_compiled` creates one over a model laid out with the cache's files for it (:mod:`.cache`): on a
hit, XNNPACK maps the packed weights back instead of packing (ResNet18: ~3 ms against ~53 ms). It only takes a
model XNNPACK runs whole (``is_fully_accelerated``, the one check the API offers); for any other the interpreter
decides, as without a cache, and lists what was left to builtin kernels.

:class:`CompiledSubgraph` gives one signature of it the interface of :class:`.adapter.Subgraph`, which
:class:`.plan.LiteRTPlan` runs on. Outputs are arrays of pterun's own that LiteRT writes in place (host-memory
tensor buffers): a view of an output is that array. Inputs are LiteRT's own buffers, written by copy. The calls go
to LiteRT's bindings directly (:mod:`.bindings`), not through its Python layer. One LiteRT environment serves the
process, made without the GPU, NPU and compiler-plugin libraries a default one looks for, and kept for the
process's life. What LiteRT logs while preparing, and when the process's first write into a tensor buffer makes an
environment of LiteRT's own, is captured (:func:`.env.capture_native_stderr`); what that environment logs when the
process exits is kept off stderr on Linux (:func:`.env.quiet_native_teardown`).

Without a cache, :func:`open_external` makes a CompiledModel that reads the constants it can from the program file
in place (:meth:`.writer.Laying.external`) rather than from a copy in the model's bytes.

Example::

    >>> compiled = open_compiled(laid_out_model, 2, "/home/me/.cache/pterun")   # doctest: +SKIP
    >>> sub = compiled.subgraph(0); sub.set(t, x); sub.invoke()              # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref

import numpy as np

from pterun._log import logger
from pterun.config import cache_max_bytes
from pterun.delegates.xnnpack.litert_engine.bindings import ALIGN, load
from pterun.delegates.xnnpack.litert_engine.cache import Cache, model_key
from pterun.delegates.xnnpack.litert_engine.env import capture_native_stderr, quiet_native_teardown
from pterun.delegates.xnnpack.litert_engine.memory import release_mapped, release_packed

__all__ = ["CACHE_MIN_BYTES", "Compiled", "CompiledSubgraph", "invoker", "litert_api", "open_compiled", "open_external",
           "open_prepared", "release_waiting", "used"]

_lock = threading.Lock()
_api = None  # the process's Bindings once made, False where this LiteRT has none usable
_waiting_lock = threading.Lock()
_waiting: weakref.WeakSet = weakref.WeakSet()  # Compiled models whose release waits for a first call


def release_waiting() -> None:
    """Give back now what :meth:`Compiled.release_when_prepared` left for a first call that has not come yet.
    The engine calls it before it makes another LiteRT model, so a load holds the program pages of one model's
    packed weights at most, as when each model gave them back at once: a program of 41 delegates read in place
    peaked at 1008 MB without it, against 589 MB."""
    with _waiting_lock:
        waiting = list(_waiting)
        _waiting.clear()
    for compiled in waiting:
        if compiled._release_pending:
            compiled.release()


def litert_api():
    """LiteRT's CompiledModel calls (:class:`.bindings.Bindings`) in the process's environment, or None where this
    LiteRT has none usable."""
    global _api
    with _lock:
        if _api is None:
            try:
                api = load(_litert_version())
                if api is None:
                    raise RuntimeError("its bindings lack a call the engine makes")
                # a folder with no accelerator or plugin library to load: this package's own (Python files only;
                # an empty temporary one cost 4 ms of imports)
                nowhere = os.path.dirname(os.path.abspath(__file__))
                with capture_native_stderr():
                    api.environment(nowhere)
                    # the first write into any tensor buffer makes LiteRT's own environment, which logs: now
                    probe = _aligned((16,), np.dtype(np.float32))
                    api.host(probe).write(probe)
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(api.capsule))  # never torn down (the module docstring)
                quiet_native_teardown()
                _api = api
            except Exception as e:  # noqa: BLE001  (an older or changed LiteRT: the interpreter, uncached)
                logger().debug("LiteRT's CompiledModel is not usable, no packed-weight cache: %s", e)
                _api = False
        return _api or None


def used() -> bool:
    """Whether this process has made LiteRT's CompiledModel API ready (its environment then lives to the end)."""
    return bool(_api)


def _litert_version() -> str:
    import ai_edge_litert  # imported already: the interpreter's module is in it

    return getattr(ai_edge_litert, "__version__", "?")


#: A model whose packed weights (the bytes of ``packed`` ranges) are fewer than this does not use the cache: its
#: packing is cheaper than what a cached load adds (its key computed, its files looked up, LiteRT's CompiledModel
#: made). Measured on a 2-core Zen 3, alternating fresh processes (``load_program`` + ``load_method``), once
#: LiteRT's bindings replaced its Python layer and the CPU's name no longer started a process: MobileNetV2's 14
#: MB in 41-64 ms cached against 59-85 ms uncached (medians 52 and 76); the MLP's 0.1 MB in 14-21 against 11-17 ms.
#: (It was 24 MiB while a cached load cost ~30 ms more: MobileNetV2 then loaded slower cached.)
CACHE_MIN_BYTES = 4 << 20


def _packed_bytes(packed) -> int:
    return sum(int(size) for _, size in packed)


def invoker(cm, k: int, ins: list, outs: list):
    """``run()``: invoke signature ``k`` of the model ``cm`` (:class:`.bindings.Model`) on the buffers ``ins`` and
    ``outs``, which the caller keeps alive. The buffers' capsules are taken once, not at each call (a decode step
    binds ~100 buffers)."""
    native = cm.native.RunByIndex
    caps_in, caps_out = [b.capsule for b in ins], [b.capsule for b in outs]
    return lambda: native(k, caps_in, caps_out)


def open_compiled(laid, num_threads: int, cache_dir: str, builtin_ok: bool = False):
    """A :class:`Compiled` over the model ``laid`` out (:class:`.writer.Unwritten`) with its packed weights in the
    cache under ``cache_dir``, or None: the cache is off (``""``), the model's packed ranges (what only weight
    packing reads) hold fewer than :data:`CACHE_MIN_BYTES`, this LiteRT has no CompiledModel, the model is loaded
    for the first time (:meth:`.cache.Cache.lookup`), the directory cannot be written, or XNNPACK does not take
    the model whole (the interpreter then runs it, and the cache remembers not to try again; ``builtin_ok``: a
    model that leaves operators to LiteRT's builtin kernels on purpose is taken, :mod:`.kvplan`'s). On a hit LiteRT
    reads the model from the file the cache kept (the model is not written in memory: ``Compiled.model`` is
    None); otherwise the model is written, and kept in the cache beside its packed weights."""
    if not cache_dir or _packed_bytes(laid.packed) < CACHE_MIN_BYTES:
        return None
    cache = Cache(cache_dir, cache_max_bytes())
    k = model_key(laid, _litert_version(), cache)
    state, path = cache.lookup(k)
    if state not in ("hit", "miss"):
        return None  # before the CompiledModel API is imported: a first load pays nothing for it
    api = litert_api()
    if api is None:
        return None
    model, model_file = None, cache.model_file(k, laid.size) if state == "hit" else None
    try:
        with capture_native_stderr():
            cm = None
            if model_file is not None:
                try:
                    cm = api.from_file(model_file, num_threads, path)
                except Exception as e:  # noqa: BLE001  (a damaged file: the model is written again)
                    logger().debug("LiteRT could not read the cached model %s (%s); written again", model_file, e)
                    cache.drop_model(k)
                    model_file = None
            if cm is None:
                model = laid.fill()
                cm = api.from_buffer(model, num_threads, path)
            whole = cm.is_fully_accelerated()
    except Exception as e:  # noqa: BLE001  (LiteRT refused it: the interpreter says why)
        logger().debug("LiteRT's CompiledModel refused the model (%s: %s); the interpreter runs it",
                       type(e).__name__, str(e)[:200])
        if state == "miss":
            cache.refuse(k, path)
        return None
    if not whole and not builtin_ok:
        if state == "miss":
            cache.refuse(k, path)
        return None
    if state == "miss":
        path = cache.commit(path, k)
    if model is not None and path is not None:
        cache.keep_model(k, model)
    logger().debug("LiteRT engine: packed weights %s %s; the model %s", "read from" if state == "hit" else
                   "written to", path or "nowhere (the cache could not be written)",
                   "read from the cache" if model is None else "written in memory")
    return Compiled(cm, api, model, laid.packed, outputs=laid.outputs)


def _details(outs: dict) -> dict:
    """LiteRT's output details by name: (tensor index, shape, dtype)."""
    return {n: (int(d["index"]), tuple(int(x) for x in d["shape"]), np.dtype(d["dtype"])) for n, d in outs.items()}


#: A model reads its constants from the program file in place (:func:`open_external`) only where they hold at
#: least this many bytes. Measured on a 2-core Zen 3 (alternating fresh processes): ResNet18's 45 MB loaded in
#: 104-128 ms against 130-149 ms copied. MobileNetV2's 14 MB gained nothing while dropping LiteRT's pages of the
#: file went through every mapping for every constant (it was 24 MB then); since :func:`.memory.release_mapped`
#: no longer does, a median 82.8 ms against 91.8 copied (16 pairs; 12 faster). Below a few MB, LiteRT's
#: CompiledModel environment (~5 ms, once a process) costs more than the copy it saves (~1 ms a MB).
EXTERNAL_MIN_BYTES = 8 << 20


def _same_file(path: str, st) -> bool:
    """Whether ``path`` is still the file whose status was ``st`` when pterun mapped it."""
    try:
        now = os.stat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_dev, st.st_ino, st.st_size,
                                                                     st.st_mtime_ns)


def open_external(laid, num_threads: int, builtin_ok: bool = False):
    """A :class:`Compiled` over the model ``laid`` (:class:`.writer.Laying`) with the constants that are
    runs of the program file read from that file in place (:meth:`.writer.Laying.external`) rather than copied
    into the model's bytes, or None: they hold fewer than :data:`EXTERNAL_MIN_BYTES`, this LiteRT has no
    CompiledModel, the file at the path is no longer the one pterun mapped (checked before and after LiteRT opens
    it), LiteRT refuses the model, or XNNPACK does not take it whole (``builtin_ok`` as :func:`open_compiled`)."""
    floor = max(EXTERNAL_MIN_BYTES, 1)
    if sum(int(data.size) for data in laid.sources) < floor or laid.in_place_bytes < floor:
        return None  # decided before a layout is made; the first test costs nothing (MobileNetV2: 2 ms)
    ext = laid.external()
    if ext is None:
        return None
    api = litert_api()
    files = {path: st for path, st, _, _, _ in ext.files}
    if api is None or not all(_same_file(path, st) for path, st in files.items()):
        return None
    model = ext.fill()
    try:
        with capture_native_stderr():
            cm = api.from_buffer(model, num_threads)
            whole = cm.is_fully_accelerated()
    except Exception as e:  # noqa: BLE001  (LiteRT refused it: the interpreter says why)
        logger().debug("LiteRT's CompiledModel refused the model reading the program in place (%s: %s)",
                       type(e).__name__, str(e)[:200])
        return None
    if not all(_same_file(path, st) for path, st in files.items()) or not (whole or builtin_ok):
        return None  # replaced while LiteRT opened it: its numbers could be another file's
    logger().debug("LiteRT engine: %d constants (%d bytes) read from %s in place", len(ext.files),
                   sum(size for _, _, _, size, _ in ext.files), ", ".join(files))
    return Compiled(cm, api, model, ext.packed, ext.files, ext.outputs)


def open_prepared(laid, num_threads: int, cache_dir: str, resizes: list, external: bool = True):
    """A :class:`Compiled` over the model ``laid`` out (:class:`.writer.Unwritten`) whose subgraph ``k`` is
    resized as ``resizes[k]`` says: through the packed-weight cache (``cache_dir``, :func:`open_compiled`), else
    with the constants read from the program file in place (``external``, :func:`open_external`); or None (LiteRT's
    CompiledModel does not take it, or neither applies: the interpreter decides). Called before the model's
    memory is made, an interpreter's too, it first gives back what waits for a first call (:func:`release_waiting`)."""
    release_waiting()
    compiled = open_compiled(laid, num_threads, cache_dir) if cache_dir else None
    if compiled is None and external:
        compiled = open_external(laid, num_threads)
    if compiled is None:
        return None
    try:
        with capture_native_stderr():
            for k, resize in enumerate(resizes):
                sub = compiled.subgraph(k)
                if resize:  # otherwise prepared by its first call (CompiledSubgraph)
                    for t, dims in resize.items():
                        sub.resize(t, dims)
                    sub.allocate()
    except Exception as e:  # noqa: BLE001  (a shape LiteRT's CompiledModel refuses: the interpreter decides)
        logger().debug("LiteRT's CompiledModel cannot prepare the model (%s: %s); the interpreter runs it",
                       type(e).__name__, str(e)[:200])
        return None
    return compiled


class Compiled:
    """A CompiledModel and the model bytes it reads its other constants from (kept alive with it; None where
    LiteRT maps the model from the cache's file)."""

    def __init__(self, cm, api, model, packed=(), files=(), outputs=()):
        self.cm, self.api, self.model, self.packed, self.files = cm, api, model, packed, files
        #: per signature, the tensor index of each output by name as the model was written, or None (see
        #: :attr:`.writer.Unwritten.outputs`)
        self.outputs = outputs
        self._subs: dict[int, CompiledSubgraph] = {}
        self._release_pending = False

    def release(self) -> int:
        """Give back, XNNPACK having packed the weights, the model's bytes of them and the pages of the program
        file LiteRT mapped for them (:mod:`.memory`); the bytes given back."""
        self._release_pending = False
        given = release_packed(self.model, self.packed) if self.model is not None else 0
        return given + release_mapped(self.files)

    def release_when_prepared(self) -> None:
        """:meth:`release` now where every signature made so far is prepared, else when the first of them is
        (:meth:`CompiledSubgraph.allocate`, in its first call). XNNPACK packed every weight when the model was
        made, so any moment after is as safe; in the first call the release does not hold the load up. Giving
        back the pages of the program file LiteRT mapped (one mapping per constant) took 3-5 ms of ResNet18's and
        of MobileNetV2's loads on a 2-core Zen 3; a load is 3-8 ms shorter and the first call as much longer.
        Before the engine makes another model it gives back what waits (:func:`release_waiting`), so the
        memory's peak is the same either way."""
        if all(sub.prepared for sub in self._subs.values()):
            self.release()
        else:
            self._release_pending = True
            with _waiting_lock:
                _waiting.add(self)

    def subgraph(self, k: int) -> CompiledSubgraph:
        """Signature ``k`` (one object per signature: its buffers are the ones LiteRT was prepared with)."""
        sub = self._subs.get(k)
        if sub is None:
            sub = self._subs[k] = CompiledSubgraph(self, k)
        return sub


class CompiledSubgraph:
    """Signature ``k`` of a :class:`Compiled`, with the :class:`.adapter.Subgraph` methods a plan runs on
    (tensors by index; LiteRT's input buffers have no view, so no ``tensor``).

    It is made unprepared where the model names its outputs (:attr:`Compiled.outputs`): LiteRT's first answer
    about a CompiledModel's outputs prepares XNNPACK's runtime (10-15 ms of ResNet18's load), which the plan then
    has done by its first call (:meth:`allocate`, when :attr:`prepared` is False), as ExecuTorch's first call
    does. The output arrays are sized by LiteRT's answer: never by the shapes the model declares, since LiteRT
    writes a whole output into a buffer smaller than it, past its end."""

    def __init__(self, compiled: Compiled, k: int):
        self.compiled, self.k = compiled, k
        cm = compiled.cm
        sig = cm.get_signature_by_index(k)
        self._key, self._in_names, self._out_names = sig["key"], list(sig["inputs"]), list(sig["outputs"])
        ins = cm.get_input_tensor_details(self._key)
        self._in_pos = {int(ins[n]["index"]): j for j, n in enumerate(self._in_names)}
        named = compiled.outputs[k] if k < len(compiled.outputs) else None
        self._arrays = self._outs = None
        if named is None or set(named) != set(self._out_names):
            self._named = None
            self.allocate()  # asks LiteRT, which numbers the outputs
        else:
            self._named = named
            self._out_pos = {named[n]: j for j, n in enumerate(self._out_names)}
            self._ins = cm.create_input_buffers(k)

    @property
    def prepared(self) -> bool:
        """Whether LiteRT has prepared the signature and its output arrays are made (see the class docstring)."""
        return self._arrays is not None

    def allocate(self) -> None:
        """LiteRT's input buffers and pterun's output arrays at the signature's current shapes, as LiteRT works
        them out (the caller captures LiteRT's stderr, as it does around the interpreter's). RuntimeError where
        LiteRT numbers the outputs otherwise than the model it was given does."""
        cm, api = self.compiled.cm, self.compiled.api
        outs = _details(cm.get_output_tensor_details(self._key))
        if self._named is None:
            self._out_pos = {outs[n][0]: j for j, n in enumerate(self._out_names)}
        elif any(outs[n][0] != t for n, t in self._named.items()):
            raise RuntimeError(f"LiteRT numbers the outputs {outs} where the model gave {self._named}")
        self._ins = cm.create_input_buffers(self.k)
        self._arrays = [_aligned(outs[n][1], outs[n][2]) for n in self._out_names]
        self._outs = [api.host(a.reshape(-1)) for a in self._arrays]
        if self.compiled._release_pending:  # (Compiled.release_when_prepared)
            self.compiled.release()

    def setter(self):
        pos = self._in_pos
        return lambda t, a: self._ins[pos[t]].write(a)

    def invoker(self):
        cm, k = self.compiled.cm, self.k
        return lambda: cm.run_by_index(k, self._ins, self._outs)

    def viewer(self, t: int):
        j = self._out_pos[t]
        return lambda: self._arrays[j]

    def put(self, t: int, a: np.ndarray) -> None:
        """Copy ``a`` (any strides) into input ``t``."""
        self._ins[self._in_pos[t]].write(np.ascontiguousarray(a))

    def input_copier(self, t: int):
        """``copy(src)``: a C-contiguous ``src`` into input ``t`` (the steady state's copy in)."""
        return self._ins[self._in_pos[t]].write

    def resize(self, t: int, shape) -> None:
        self.compiled.cm.resize_input_tensor(self._in_pos[t], shape, self.k)


def _aligned(shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A zeroed array of ``shape`` whose data starts on a :data:`ALIGN`-byte boundary."""
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.zeros(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)
