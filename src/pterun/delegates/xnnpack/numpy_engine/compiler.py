"""The NumPy engine's builder context and registry: how values are held at run time, and what builders use.

Every value gets a slot in a flat value table and a representation (:class:`Rep`): float32/float16/bfloat16
arrays, static int8 arrays with their scale and zero point, dynamic int8 (``qdint8``, carried as the
dequantized float32 values of its per-row int8 grid), or int32. A rep knows how to read its array as real
float32 values and how to store real values back (rounding, saturating, applying a fused clamp), so node
kernels can be written once. :class:`Compiler` is what a builder works against while the typed
:class:`~.graph.Graph` is compiled; builders register into :data:`BUILDERS` with :func:`builds`
(:mod:`.nodes`, :mod:`.gemm`); :mod:`.numpy_engine` imports them all and assembles the plan.

Example::

    >>> Rep("static", np.dtype(np.int8), 0.5, 1).real()(np.array([3], np.int8))
    array([1.], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pterun._record import Fields
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.numpy_engine.pointwise import clip
from pterun.delegates.xnnpack.numpy_engine.windows import Scratch
from pterun.errors import DelegateError

F32 = np.float32
Step = Callable[[list], None]


class Rep(Fields):
    """How one value is held at run time: ``kind`` is "float", "static" (per-tensor int8/uint8/int32), "dynamic"
    (qdint8), "int" or "bool" (a merged graph's kernel nodes); ``dtype`` the storage dtype. Immutable."""

    kind: str
    dtype: object
    scale: object = 1.0
    zero_point: int = 0
    nonbatch_dims: int = 1

    def real(self) -> Callable | None:
        """array -> real float32 values, or None when the stored array already is that."""
        if self.kind == "float":
            return None if self.dtype == F32 else (lambda a: a.astype(F32))
        if self.kind == "static":
            scale, zp = F32(self.scale), self.zero_point
            return lambda a: Q.dequantize(a, scale, zp)
        if self.kind == "int":
            return lambda a: a.astype(F32)
        return None  # dynamic: already dequantized

    def store(self, lo: float = -math.inf, hi: float = math.inf, fresh: bool = False) -> Callable | None:
        """real float32 values -> stored array, applying the fused [lo, hi] clamp; None when nothing to do.

        ``fresh`` says the producer returns a temporary this function may overwrite.
        """
        clamp = math.isfinite(lo) or math.isfinite(hi)
        if self.kind == "float":
            lo_, hi_ = F32(lo), F32(hi)
            cast = self.dtype != F32
            if not clamp:
                return (lambda a: a.astype(self.dtype)) if cast else None
            if cast:
                return lambda a: clip(a, lo_, hi_).astype(self.dtype)
            if fresh:
                return lambda a: clip(a, lo_, hi_, out=a if a.dtype == F32 else None)
            return lambda a: clip(a, lo_, hi_)
        if self.kind == "static":
            qlo, qhi = Q.fused_range(lo, hi, self.scale, self.zero_point, self.dtype)
            inv, zp, dt = Q.inverse(self.scale), self.zero_point, self.dtype
            return lambda a: Q.requantize(np.asarray(a, F32), inv, zp, qlo, qhi, dt, inplace=fresh)
        if self.kind == "dynamic":
            nnb = self.nonbatch_dims
            if clamp:
                lo_, hi_ = F32(lo), F32(hi)
                return lambda a: Q.qd8_fake_quantize(np.clip(a, lo_, hi_), nnb)
            return lambda a: Q.qd8_fake_quantize(a, nnb)
        return lambda a: np.rint(a).astype(self.dtype)

    def same_grid(self, other: Rep) -> bool:
        """True when arrays of ``self`` can be moved into ``other`` unchanged."""
        return self == other and self.kind != "dynamic" or (self.kind == other.kind == "dynamic")


def rep_of(v: G.Value) -> Rep:
    dt = v.datatype
    if dt == G.FP32:
        return Rep("float", np.dtype(F32))
    if dt in (G.FP16, G.BF16):
        return Rep("float", np.dtype(G.STORAGE_DTYPES[dt]))
    if dt == G.INT32:
        return Rep("int", np.dtype(np.int32))
    if dt == G.BOOL:  # merged graphs' kernel nodes only (they read and write arrays as they are)
        return Rep("bool", np.dtype(np.bool_))
    if dt == G.INT64:  # the same: index arithmetic between delegates
        return Rep("int", np.dtype(np.int64))
    if dt == G.QDINT8 or (v.dq_datatype == G.QINT8 and dt == G.FP32):
        nnb = v.quant.num_nonbatch_dims if v.quant is not None and v.quant.kind == G.PER_TOKEN else 1
        return Rep("dynamic", np.dtype(F32), nonbatch_dims=max(nnb, 1))
    if dt in (G.QINT8, G.QUINT8, G.QINT32):
        q = v.quant
        if q is None or q.kind != G.PER_TENSOR:
            raise DelegateError(f"XNNPACK payload: {v.describe()} needs per-tensor quantization parameters")
        return Rep("static", np.dtype(G.STORAGE_DTYPES[dt]), q.scale, q.zero_point)
    if dt in G.CONSTANT_ONLY:  # GEMM builders pack these themselves; any other reader gets real values
        if v.data is None:
            raise DelegateError(f"XNNPACK payload: {v.describe()} must be a constant")
        return Rep("float", np.dtype(F32))
    raise DelegateError(f"XNNPACK payload: {v.describe()} has datatype {v.dtype_name}, which pterun does not "
                        "support")


class Compiler:
    """The state node builders work against: the typed graph, slots, reps, the steps emitted, and the plan's
    work memory (``scratch``, handed to the kernels that need one; the plan owns it)."""

    def __init__(self, graph: G.Graph):
        self.graph = graph
        self.scratch = Scratch()
        self.slots = {vid: i for i, vid in enumerate(graph.values)}
        self.reps = {vid: rep_of(v) for vid, v in graph.values.items()}
        self.defined = {vid for vid, v in graph.values.items() if v.data is not None or v.flags & 1}
        self.steps: list[Step] = []
        self.node: G.Node | None = None
        self.reads: set[int] = set()  # values the node being built reads

    # -- lookups -------------------------------------------------------------------------------------------
    def fail(self, what: str) -> DelegateError:
        where = f"{self.node.describe()}: " if self.node is not None else ""
        return DelegateError(f"XNNPACK payload: {where}{what}")

    def value(self, vid: int) -> G.Value:
        return self.graph.value(vid, self.fail)

    def slot(self, vid: int) -> int:
        """The slot a step reads ``vid`` from (checked to be produced by then, and noted for liveness)."""
        self.value(vid)
        if vid not in self.defined:
            raise self.fail(f"reads value {vid} before any node produces it")
        self.reads.add(vid)
        return self.slots[vid]

    def out_slot(self, vid: int) -> int:
        v = self.value(vid)
        if v.data is not None or v.flags & 1:
            raise self.fail(f"writes {v.describe()}, which is a constant or a graph input")
        self.defined.add(vid)
        return self.slots[vid]

    def rep(self, vid: int) -> Rep:
        self.value(vid)
        return self.reps[vid]

    def is_const(self, vid: int) -> bool:
        return self.graph.is_const(vid, self.fail)

    def const(self, vid: int) -> np.ndarray:
        """A constant as stored (see :meth:`.graph.Graph.const`)."""
        return self.graph.const(vid, self.fail)

    def real_const(self, vid: int) -> np.ndarray:
        """A constant as real float32 values (see :meth:`.graph.Graph.real_const`)."""
        return self.graph.real_const(vid, self.fail)

    def channel_scale(self, vid: int) -> np.ndarray:
        """Per-channel scales of a constant, shaped to broadcast along its channel dim."""
        return self.graph.channel_scale(vid, self.fail)

    def emit(self, step: Step) -> None:
        self.steps.append(step)


# -- the builder registry: node kind -> builder(compiler, node) ------------------------------------------------
BUILDERS: dict[int, Callable] = {}
NAMES = {name: kind for kind, (name, _) in G.NODE_TYPES.items()}
NAMES.update({name: kind for kind, name in G.EXTRA_NODE_TYPES.items()})


def builds(*names):
    """Register the decorated function as the builder of the named node types."""
    def register(fn):
        for n in names:
            if NAMES[n] in BUILDERS:
                raise RuntimeError(f"XNN{n} has two builders")
            BUILDERS[NAMES[n]] = fn
        return fn

    return register


def chain(*fns):
    """Compose the non-None functions left to right into one callable."""
    fns = [f for f in fns if f is not None]
    if not fns:
        return lambda a: a
    if len(fns) == 1:
        return fns[0]
    if len(fns) == 2:
        f, g = fns
        return lambda a: g(f(a))
    if len(fns) == 3:
        f, g, h = fns
        return lambda a: h(g(f(a)))

    def composed(a):
        for f in fns:
            a = f(a)
        return a

    return composed
