"""Compile an XNNGraph once into a NumPy execution plan, and run it.

:func:`compile_graph` gives every value a slot in a flat value table, decodes constants, and asks
:mod:`.nodes` to turn each node into a small step ``step(env)`` with its weights already packed. Each
value has a representation (:class:`Rep`): float32/float16/bfloat16 arrays, static int8 arrays with their
scale and zero point, dynamic int8 (``qdint8``, carried as the dequantized float32 values of its per-row
int8 grid), or int32. A rep knows how to read its array as real float32 values and how to store real
values back (rounding, saturating, applying a fused clamp), so node kernels can be written once.

Example::

    >>> plan = compile_graph(read_graph(blob, named_data))   # doctest: +SKIP
    >>> plan.execute([input_tensor, output_tensor])          # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections import namedtuple
from collections.abc import Callable

import numpy as np

from pterun._fpstate import quiet, restore
from pterun.delegates.xnnpack import payload as P
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.ops import clip
from pterun.errors import DelegateError, PterunError

F32 = np.float32
Step = Callable[[list], None]


class Rep(namedtuple("Rep", "kind dtype scale zero_point nonbatch_dims", defaults=(1.0, 0, 1))):
    """How one value is held at run time: ``kind`` is "float", "static" (per-tensor int8/uint8/int32), "dynamic"
    (qdint8) or "int"; ``dtype`` the storage dtype. Immutable."""

    __slots__ = ()

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


def rep_of(v: P.Value) -> Rep:
    dt = v.datatype
    if dt == P.FP32:
        return Rep("float", np.dtype(F32))
    if dt in (P.FP16, P.BF16):
        return Rep("float", np.dtype(P.STORAGE_DTYPES[dt]))
    if dt == P.INT32:
        return Rep("int", np.dtype(np.int32))
    if dt == P.QDINT8 or (v.dq_datatype == P.QINT8 and dt == P.FP32):
        nnb = v.quant.num_nonbatch_dims if v.quant is not None and v.quant.kind == P.PER_TOKEN else 1
        return Rep("dynamic", np.dtype(F32), nonbatch_dims=max(nnb, 1))
    if dt in (P.QINT8, P.QUINT8, P.QINT32):
        q = v.quant
        if q is None or q.kind != P.PER_TENSOR:
            raise DelegateError(f"XNNPACK payload: {v.describe()} needs per-tensor quantization parameters")
        return Rep("static", np.dtype(P.STORAGE_DTYPES[dt]), q.scale, q.zero_point)
    if dt in P.CONSTANT_ONLY:  # GEMM builders pack these themselves; any other reader gets real values
        if v.data is None:
            raise DelegateError(f"XNNPACK payload: {v.describe()} must be a constant")
        return Rep("float", np.dtype(F32))
    raise DelegateError(f"XNNPACK payload: {v.describe()} has datatype {v.dtype_name}, which pterun does not "
                        "support")


class Compiler:
    """The state node builders work against: values, slots, decoded constants, and the steps emitted."""

    def __init__(self, graph: P.Graph):
        self.graph = graph
        self.slots = {vid: i for i, vid in enumerate(graph.values)}
        self.reps = {vid: rep_of(v) for vid, v in graph.values.items()}
        self.defined = {vid for vid, v in graph.values.items() if v.data is not None or v.flags & 1}
        self._consts: dict[int, np.ndarray] = {}
        self.steps: list[Step] = []
        self.node: P.Node | None = None
        self.reads: set[int] = set()  # values the node being built reads

    # -- lookups -------------------------------------------------------------------------------------------
    def fail(self, what: str) -> DelegateError:
        where = f"{self.node.describe()}: " if self.node is not None else ""
        return DelegateError(f"XNNPACK payload: {where}{what}")

    def value(self, vid: int) -> P.Value:
        v = self.graph.values.get(vid)
        if v is None:
            raise self.fail(f"refers to value {vid}, which the graph does not define")
        return v

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
        return self.value(vid).data is not None

    def const(self, vid: int) -> np.ndarray:
        """A constant as stored (4-bit weights unpacked to int8 minus their zero point), shaped by its dims."""
        arr = self._consts.get(vid)
        if arr is None:
            v = self.value(vid)
            if v.data is None:
                raise self.fail(f"expects {v.describe()} to be a constant")
            if v.datatype in (P.QCINT4, P.QBINT4):
                cols = v.dims[-1] if v.dims else 1
                arr = Q.unpack_int4(v.data, len(v.data) // ((cols + 1) // 2), cols, 8).reshape(v.dims)
            else:
                arr = np.frombuffer(v.data, dtype=P.STORAGE_DTYPES[v.datatype]).reshape(v.dims)  # zero-copy
            self._consts[vid] = arr
        return arr

    def real_const(self, vid: int) -> np.ndarray:
        """A constant as real float32 values (dequantized with its per-tensor/channel/group scales)."""
        v, arr = self.value(vid), self.const(vid)
        q = v.quant
        if q is None:  # float32 data is used where it lies (read-only, in the program's buffer)
            return arr.astype(F32, copy=not arr.flags.aligned)
        if q.kind == P.PER_TENSOR:
            return Q.dequantize(arr, q.scale, q.zero_point)
        if q.kind == P.PER_CHANNEL:
            return arr.astype(F32) * self.channel_scale(vid)
        if q.kind == P.PER_CHANNEL_GROUP:
            oc, ic = arr.shape
            gs = q.group_size
            if gs <= 0 or ic % gs or q.scale.size != oc * (ic // gs):
                raise self.fail(f"{v.describe()} has group size {gs} and {q.scale.size} scales, which do not "
                                f"tile its [{oc}, {ic}] shape")
            scales = np.repeat(q.scale.reshape(oc, ic // gs), gs, axis=1)
            return (arr.astype(F32) * scales).astype(F32)
        raise self.fail(f"{v.describe()} cannot be a constant with dynamic quantization")

    def channel_scale(self, vid: int) -> np.ndarray:
        """Per-channel scales of a constant, shaped to broadcast along its channel dim."""
        v = self.value(vid)
        q = v.quant
        nd = max(len(v.dims), 1)
        if not 0 <= q.channel_dim < nd or v.dims[q.channel_dim] != q.scale.size:
            raise self.fail(f"{v.describe()} has {q.scale.size} scales along dim {q.channel_dim}")
        return Q.channel_scales(q.scale, nd, q.channel_dim)

    def emit(self, step: Step) -> None:
        self.steps.append(step)


class Plan:
    """A compiled graph: a value-table template with the constants preset, input bindings, a schedule of
    (step, slots that die after it), and output bindings. Each call works on its own copy of the table (and
    kernels use per-thread scratch buffers), so one plan can run from several threads at once."""

    def __init__(self, template: list, inputs: list, schedule: list, names: list, outputs: list):
        self.template = template
        self.inputs = inputs  # (ext_id, slot, rep, prepare-or-None)
        self.schedule = schedule  # (step, tuple of slots to release after it)
        self.names = names  # what each step runs, for error messages and the profiler
        self.outputs = outputs  # (ext_id, slot)

    def execute(self, args: list) -> None:
        env = self.template.copy()
        try:
            for ext, slot, rep, prep in self.inputs:
                a = _input_array(args, ext, rep)
                env[slot] = a if prep is None else prep(a)
        except IndexError:
            raise DelegateError(f"XNNPACK delegate expects {self.arity} arguments, got {len(args)}") from None
        i = 0
        token = quiet()
        try:
            for i, (step, dead) in enumerate(self.schedule):
                step(env)
                for s in dead:  # drop intermediates as soon as nothing reads them (peak memory)
                    env[s] = None
        except PterunError:
            raise
        except Exception as e:
            raise DelegateError(f"XNNPACK delegate failed in {self.names[i]}: {type(e).__name__}: {e}") from e
        finally:
            restore(token)
        self._write_outputs(args, env)

    def _write_outputs(self, args: list, env: list) -> None:
        outputs = self.outputs
        several = len(outputs) > 1
        if several:
            results = [env[slot] for _, slot in outputs]
            inputs = [env[slot] for _, slot, _, _ in self.inputs]
        for k, (ext, slot) in enumerate(outputs):
            value = results[k] if several else env[slot]
            t = args[ext] if ext < len(args) else None
            if not hasattr(t, "write"):
                raise DelegateError(f"XNNPACK delegate output {ext} is not a tensor ({type(t).__name__})")
            # an output may view an input whose memory an earlier output write overwrites: copy it first
            if several and any(np.may_share_memory(value, x) for x in inputs):
                value = value.copy()
            order = _dim_order(t)
            if order is not None:
                value = value.transpose(np.argsort(order))
            shape = tuple(t.shape)
            if value.shape != shape and value.ndim != len(shape) and value.size == math.prod(shape):
                value = value.reshape(shape)  # e.g. a rank-0 ExecuTorch tensor the graph holds as [1]
            try:
                t.write(value)
            except ValueError as e:
                raise DelegateError(f"XNNPACK delegate output {ext}: {e}") from e

    @property
    def arity(self) -> int:
        return max([e for e, *_ in self.inputs] + [e for e, _ in self.outputs], default=-1) + 1


_IDENTITY = tuple(tuple(range(n)) for n in range(9))


def _dim_order(t) -> tuple | None:
    """A tensor's dim order when it is not the contiguous one, else None."""
    order = getattr(t, "dim_order", ())
    if type(order) is not tuple:
        order = tuple(order)
    n = len(order)
    return None if order == (_IDENTITY[n] if n < 9 else tuple(range(n))) else order


def _input_array(args: list, ext: int, rep: Rep) -> np.ndarray:
    t = args[ext]
    a = getattr(t, "array", None)
    if a is None:
        raise DelegateError(f"XNNPACK delegate input {ext} must be a tensor, got {type(t).__name__}")
    order = _dim_order(t)
    if order is not None:  # XNNPACK sees dims in memory order
        a = a.transpose(order)
    want = rep.dtype if rep.kind != "dynamic" else _F32_DTYPE
    if a.dtype != want:
        raise DelegateError(f"XNNPACK delegate input {ext} has dtype {a.dtype}, the graph expects {want}")
    return a


_F32_DTYPE = np.dtype(F32)


def compile_graph(graph: P.Graph) -> Plan:
    """Validate the node list against the values and build the plan; raises DelegateError."""
    from pterun.delegates.xnnpack import gemm  # noqa: F401  (registers the GEMM node builders)
    from pterun.delegates.xnnpack.nodes import BUILDERS

    c = Compiler(graph)
    names, last_read = [], {}
    for node in graph.nodes:
        c.node = node
        build = BUILDERS.get(node.kind)
        if build is None:
            raise c.fail(f"XNN{node.name} is not supported by the XNNPACK runtime")
        c.reads = set()
        before = len(c.steps)
        build(c, node)
        names.extend([node.describe()] * (len(c.steps) - before))
        for vid in c.reads:
            last_read[vid] = len(c.steps) - 1
    c.node = None
    template: list = [None] * len(c.slots)
    inputs, outputs, keep = [], [], set()
    for vid, v in graph.values.items():
        if v.data is not None:
            if v.datatype not in P.CONSTANT_ONLY:
                template[c.slots[vid]] = c.const(vid)
            elif vid in last_read:  # per-channel/4-bit data a non-GEMM node reads: dequantized once
                template[c.slots[vid]] = c.real_const(vid)
            keep.add(vid)
        if v.flags & P.VALUE_EXTERNAL_INPUT:
            rep = c.reps[vid]
            prep = None
            if v.dq_datatype == P.QINT8 and v.datatype == P.FP32:  # legacy: quantize the fp32 input here
                prep = rep.store()
            inputs.append((v.external_id, c.slots[vid], rep, prep))
        if v.flags & P.VALUE_EXTERNAL_OUTPUT:
            if vid not in c.defined:
                raise DelegateError(f"XNNPACK payload: output {v.describe()} is never produced")
            outputs.append((v.external_id, c.slots[vid]))
            keep.add(vid)
    ext_ids = [e for e, *_ in inputs] + [e for e, _ in outputs]
    if len(set(ext_ids)) != len(ext_ids):
        raise DelegateError(f"XNNPACK payload: external ids {sorted(ext_ids)} are not distinct")
    dead: list[list[int]] = [[] for _ in c.steps]
    for vid, step in last_read.items():
        if vid not in keep:
            dead[step].append(c.slots[vid])
    inputs.sort(key=lambda t: t[0])
    outputs.sort(key=lambda t: t[0])
    return Plan(template, inputs, list(zip(c.steps, map(tuple, dead))), names, outputs)
