"""The translation of a typed XNNPACK graph into a TFLite model: values become tensors, nodes become operators.

:func:`translate` returns the model's bytes and the tensor indices of the graph's inputs and outputs; the model is
written by :class:`~.writer.ModelWriter` and each node by its rule in :mod:`.nodes`. Before any
node is translated, clamps XNNPACK would fuse into their producer become TFLite fused activations (LiteRT's XNNPACK
delegate takes no stand-alone int8 clamp), and the node order is checked. Anything not covered raises
:class:`~.env.Unsupported` with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from pterun._record import Fields
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.litert_engine.attention import AttentionRules
from pterun.delegates.xnnpack.litert_engine.env import Unavailable, Unsupported, modules
from pterun.delegates.xnnpack.litert_engine.lower import KernelRules
from pterun.delegates.xnnpack.litert_engine.nodes import _BINARY, _FUSABLE, _UNARY, NodeRules, _same_quant
from pterun.delegates.xnnpack.litert_engine.writer import Laying, ModelWriter
from pterun.delegates.xnnpack.litert_engine.writer import combine as _combine

__all__ = ["Part", "Translation", "combine", "translate", "translate_laid", "translate_part", "translate_signed"]

F32 = np.float32
_TYPES = {G.BOOL: "BOOL", G.INT64: "INT64", G.FP32: "FLOAT32", G.FP16: "FLOAT16", G.INT32: "INT32", G.QINT8: "INT8",
          G.QUINT8: "UINT8", G.QINT32: "INT32", G.QCINT8: "INT8", G.QCINT32: "INT32", G.QCINT4: "INT4",
          G.QBINT4: "INT4"}
_FUSES = frozenset({"Conv2d", "DepthwiseConv2d", "FullyConnected", "Add", "Subtract", "Multiply", "Div",
                    "MaxPooling2d", "AvgPooling2d", "Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5"})


class _Translator(NodeRules, KernelRules, AttentionRules, ModelWriter):
    def __init__(self, graph: G.Graph):
        super().__init__()
        self.g = graph
        self.tid: dict[int, int] = {}  # XNNPACK value id -> TFLite tensor index
        self.alias: dict[int, int] = {}  # value id -> the value whose tensor it shares (dropped Converts)
        self.node: G.Node | None = None
        self.pending_clamp: tuple | None = None  # (from, to, lo, hi): a clamp emitted after the node
        self.dynamic_source: dict[int, int] = {}  # qdint8 value -> the fp32 value its dropped Convert read
        self.fixed_shape = False  # True when the translation holds only at the graph's own input sizes
        self.kernel_tensors: set[int] = set()  # tensors the operators of kernel nodes read or write
        self.nhwc: dict[int, int] = {}  # NCHW tensor of a kernel node -> the same values as NHWC (lower.py)
        self.pending_nchw: set[int] = set()  # NCHW tensors not written yet: made from their NHWC twin when read
        self.convs: dict[int, tuple] = {}  # NHWC output of a kernel's convolution -> (filter, bias, dense)
        self.biases: dict[tuple, int] = {}  # (key positions, query positions) -> an attention mask (.attention)
        self.consumers: dict[int, list[G.Node]] = {}
        for n in graph.nodes:
            for k, vid in n.fields.items():
                if k.startswith("input") or k in ("filter_id", "bias_id"):
                    self.consumers.setdefault(vid, []).append(n)

    def allow_builtin(self, first: int) -> None:
        """The operators from index ``first`` on compute a portable operator (:mod:`.lower`, :mod:`.exact`): LiteRT's
        builtin kernels may run them (:attr:`Translation.builtin`)."""
        for o in self.operators[first:]:
            self.kernel_tensors.update(t for t in o.inputs.tolist() + o.outputs.tolist() if t >= 0)

    def no(self, what: str) -> Unsupported:
        where = f"{self.node.describe()}: " if self.node is not None else ""
        return Unsupported(f"{where}{what}")

    def value(self, vid: int) -> G.Value:
        v = self.g.values.get(vid)
        if v is None:
            raise self.no(f"refers to undefined value {vid}")
        return v

    def tensor_of(self, vid: int) -> int:
        vid = self.alias.get(vid, vid)
        t = self.tid.get(vid)
        if t is None:
            t = self.tid[vid] = self.new_value_tensor(self.value(vid))
        if t in self.pending_nchw:  # held as NHWC so far (see lower.py): its first NCHW reader needs it now
            self.pending_nchw.discard(t)
            self.op("TRANSPOSE", [self.nhwc[t], self.i32([0, 3, 1, 2])], [t])
        return t

    def new_value_tensor(self, v: G.Value) -> int:
        if v.datatype == G.QDINT8:
            raise self.no(f"{v.describe()}: dynamic int8 only as the input of a fully-connected layer")
        if v.dq_datatype:
            raise self.no(f"{v.describe()}: legacy dynamically quantized external input")
        tname = _TYPES.get(v.datatype)
        if tname is None:
            raise self.no(f"{v.describe()}: datatype {v.dtype_name} has no TFLite counterpart here")
        quant = self.quant_of(v)
        buf = 0
        if v.data is not None:
            xor = 0
            if v.datatype in (G.QCINT4, G.QBINT4):
                if v.dims[-1] % 2:
                    raise self.no(f"{v.describe()}: 4-bit rows of odd length")
                xor = 0x88  # unsigned, zero point 8 -> signed int4, still packed (applied while copied in)
            buf = self.buffer(v.data, xor)
        return self.add_tensor(list(v.dims), getattr(self.S.TensorType, tname), buf, quant, f"v{v.id}")

    def temp_like(self, vid: int) -> int:
        """A fresh intermediate tensor with the type, shape and quantization of value ``vid``."""
        src = self.tensors[self.tensor_of(vid)]
        return self.add_tensor(list(src.shape), src.type, 0, src.quantization)

    def quant_of(self, v: G.Value, scale=None):
        q = v.quant
        if q is None:
            return None
        p = self.S.QuantizationParameters()
        if q.kind == G.PER_TENSOR:
            p.scale = np.asarray([q.scale], F32)
            p.zeroPoint = np.asarray([q.zero_point], np.int64)
        elif q.kind == G.PER_CHANNEL:
            s = np.asarray(q.scale if scale is None else scale, F32).reshape(-1)
            if not 0 <= q.channel_dim < len(v.dims) or v.dims[q.channel_dim] != s.size:
                raise self.no(f"{v.describe()} has {s.size} scales along dim {q.channel_dim}")
            p.scale = s
            p.zeroPoint = np.zeros(s.size, np.int64)
            p.quantizedDimension = q.channel_dim
        elif q.kind == G.PER_CHANNEL_GROUP:
            if len(v.dims) != 2:
                raise self.no(f"{v.describe()}: blockwise weights must be 2-D")
            n, k = v.dims
            gs = q.group_size
            if gs <= 0 or k % gs or q.scale.size != n * (k // gs):
                raise self.no(f"{v.describe()} has group size {gs} and {q.scale.size} scales")
            s32 = np.asarray(q.scale, F32).reshape(n, k // gs)
            with np.errstate(over="ignore"):
                s16 = s32.astype(np.float16)
            bad = (s16.astype(F32) != s32) | (s16 == 0)
            if bad.any():
                raise self.no(f"{v.describe()}: block scale {float(s32[bad][0])!r} is not exactly representable "
                              "in fp16, which TFLite's blockwise int4 requires")
            b = self.S.BlockwiseQuantization()
            b.scales = self.const(s16, "FLOAT16")
            b.blockSize = gs
            p.detailsType = self.S.QuantizationDetails.BlockwiseQuantization
            p.details = b
        else:
            raise self.no(f"{v.describe()}: per-token quantization outside a dynamic int8 input")
        return p

    def activation(self, lo: float, hi: float, out_vid: int) -> tuple[int, tuple | None]:
        """(fused activation code, the clamp still to apply or None) for an output clamp [lo, hi]."""
        name = _FUSABLE.get((lo, hi))
        if name is not None:
            return getattr(self.S.ActivationFunctionType, name), None
        if self.value(out_vid).datatype != G.FP32:
            if self.keeps_every_code(lo, hi, out_vid):
                return self.S.ActivationFunctionType.NONE, None
            raise self.no(f"output clamp [{lo}, {hi}] on a non-fp32 value")
        return self.S.ActivationFunctionType.NONE, (lo, hi)

    def keeps_every_code(self, lo: float, hi: float, vid: int) -> bool:
        """Whether clamping 8-bit value ``vid`` to [lo, hi] leaves every code as it is: per-tensor quantization
        whose range of codes lies within the bounds (a hardtanh(0, 20) of int8 values that reach only 2.4, in
        ta_deepspeech, where XNNPACK's clamp is then no clamp at all)."""
        v = self.value(vid)
        codes = {G.QINT8: (-128, 127), G.QUINT8: (0, 255)}.get(v.datatype)
        q = v.quant
        if codes is None or q is None or q.kind != G.PER_TENSOR or not float(q.scale) > 0:
            return False
        return lo / float(q.scale) + q.zero_point <= codes[0] and hi / float(q.scale) + q.zero_point >= codes[1]

    def output(self, out_vid: int, residual: tuple | None) -> int:
        """The tensor an op writes: the value's own, or a temporary followed by the residual clamp."""
        final = self.tensor_of(out_vid)
        if residual is None:
            return final
        lo, hi = residual
        tmp = self.temp_like(out_vid)
        self.pending_clamp = (tmp, final, lo, hi)
        return tmp

    def finish_clamp(self) -> None:
        pc, self.pending_clamp = self.pending_clamp, None
        if pc is None:
            return
        tmp, final, lo, hi = pc
        if math.isfinite(lo) and math.isfinite(hi):
            mid = self.add_tensor(list(self.tensors[final].shape), self.tensors[final].type)
            self.op("MAXIMUM", [tmp, self.const(np.array([lo], F32), "FLOAT32")], [mid])
            self.op("MINIMUM", [mid, self.const(np.array([hi], F32), "FLOAT32")], [final])
        elif math.isfinite(lo):
            self.op("MAXIMUM", [tmp, self.const(np.array([lo], F32), "FLOAT32")], [final])
        else:
            self.op("MINIMUM", [tmp, self.const(np.array([hi], F32), "FLOAT32")], [final])

    def residual(self, n: G.Node) -> tuple | None:
        """The output clamp of an op without a fused activation, applied after it (fp32 only), or None."""
        if (n.output_min, n.output_max) == (-math.inf, math.inf):
            return None
        if self.value(n.output_id).datatype != G.FP32:
            if self.keeps_every_code(n.output_min, n.output_max, n.output_id):
                return None
            raise self.no(f"output clamp [{n.output_min}, {n.output_max}] on a non-fp32 value")
        return n.output_min, n.output_max

    def unary(self, name: str, n: G.Node, options: str | None = None, **fields) -> None:
        out = self.output(n.output_id, self.residual(n))
        self.op(name, [self.tensor_of(n.input_id)], [out], options, **fields)

    def fuse_clamps(self) -> tuple[dict, set]:
        """Clamps XNNPACK would fuse into their producer, as TFLite fused activations: ({producer index: (lo, hi)},
        indices of the Clamp nodes that disappear). LiteRT's XNNPACK delegate takes no stand-alone int8 clamp."""
        producers = {n.fields["output_id"]: n for n in self.g.nodes if "output_id" in n.fields}
        fused, gone = {}, set()
        for n in self.g.nodes:
            if n.name != "Clamp" or (n.output_min, n.output_max) not in _FUSABLE:
                continue
            p = producers.get(n.input_id)
            src, dst = self.g.values.get(n.input_id), self.g.values.get(n.output_id)
            if (p is None or p.name not in _FUSES or (p.output_min, p.output_max) != (-math.inf, math.inf)
                    or src is None or dst is None or src.external_id is not None
                    or self.consumers.get(n.input_id) != [n] or src.datatype != dst.datatype
                    or not _same_quant(src.quant, dst.quant)):
                continue
            fused[p.index] = (n.output_min, n.output_max)
            gone.add(n.index)
            self.alias[n.input_id] = n.output_id
        return fused, gone

    def check_order(self) -> None:
        """Every node reads values that exist by then and writes fresh ones (else the NumPy engine reports it)."""
        defined = {vid for vid, v in self.g.values.items() if v.data is not None or v.flags & G.VALUE_EXTERNAL_INPUT}
        for n in self.g.nodes:
            self.node = n
            for k, vid in n.fields.items():
                if (k.startswith("input") or k in ("filter_id", "bias_id")) and vid != G.INVALID_ID:
                    if vid not in defined:
                        raise self.no(f"reads value {vid} before it is produced")
            for k in ("output_id", "output_value_id", "output_index_id"):
                vid = n.fields.get(k)
                if vid is not None:
                    if vid in defined or vid not in self.g.values:
                        raise self.no(f"writes value {vid}, which is undefined, constant, an input or written twice")
                    defined.add(vid)
        self.node = None
        missing = [v.id for v in self.g.outputs if v.id not in defined]
        if missing:
            raise Unsupported(f"outputs {missing} are never produced")

    def run(self) -> tuple[Translation, Laying]:
        """The translation, its model to be laid out and written (``model`` None: :meth:`.writer.Unwritten.fill`)."""
        return self.laid(*self.build())

    def laid(self, ins: list, outs: list) -> tuple[Translation, Laying]:
        """:meth:`run` after :meth:`build` gave ``ins`` and ``outs``."""
        consts = frozenset(i for i, t in enumerate(self.tensors) if t.buffer)
        laid = self.layout(ins, outs)
        return Translation(None, ins, outs, self.fixed_shape, consts, (), laid.sources,
                           frozenset(self.kernel_tensors)), laid

    def build(self) -> tuple[list, list]:
        """Translate every node; (input tensors, output tensors) of the graph. Nothing is serialized yet."""
        self.check_order()
        fused, gone = self.fuse_clamps()
        self.fused = fused
        self.producers = {n.fields["output_id"]: n for n in self.g.nodes if "output_id" in n.fields}
        for vid, out in self.alias.items():  # a fused clamp's output is written by the producer it was fused into
            if vid in self.producers:
                self.producers[out] = self.producers[vid]
        for n in self.g.nodes:
            if n.index in gone:
                continue
            if n.index in fused:
                n = n._replace(output_min=fused[n.index][0], output_max=fused[n.index][1])
            self.node = n
            fn = getattr(self, "node_" + n.name, None)
            if fn is None:
                fn = self.node_unary if n.name in _UNARY else self.node_binary if n.name in _BINARY else None
            if fn is None:
                raise self.no("no LiteRT translation")
            fn(n)
            self.finish_clamp()
        self.node = None
        ins = [self.tensor_of(v.id) for v in self.g.inputs]
        outs = [self.tensor_of(v.id) for v in self.g.outputs]
        if len(set(outs)) != len(outs) or set(outs) & set(ins):
            raise Unsupported("an output is another output or an input of the graph")
        return ins, outs


class Translation(Fields):
    """A graph as a TFLite model: its bytes (None where a cached file of them is what LiteRT read, or before they
    are written: :func:`translate_laid`), the tensor index of each external input and output (in external-id
    order), whether it holds only at the graph's own input sizes (a pool's padding expressed as SAME), the tensors
    with constant data, the byte ranges of the model only XNNPACK's weight packing reads (set with the bytes), the
    arrays the constants were copied from, and the tensors of operators LiteRT's builtin kernels may run
    (``builtin``: the lowerings of portable operators, :mod:`.lower`, on float32 and bool values, where builtin and
    XNNPACK kernels agree within the float tolerance; every other operator must run on XNNPACK)."""

    model: bytes | None
    inputs: list
    outputs: list
    fixed_shape: bool
    constants: frozenset = frozenset()
    packed: tuple = ()
    sources: tuple = ()
    builtin: frozenset = frozenset()


class Part(Fields):
    """A graph translated but not yet written (see :func:`translate_part`): the translator holding its tensors,
    operators and constants, and the tensor index of each external input and output."""

    writer: _Translator
    inputs: list
    outputs: list
    fixed_shape: bool

    @property
    def nbytes(self) -> int:
        return sum(int(data.size) for _, data, _ in self.writer.blobs)

    def laid(self) -> tuple[Translation, Laying]:
        """What :func:`translate_laid` gives for the graph, without translating it again. Only for a part that
        :func:`combine` has not taken (combining renumbers the writer's tables)."""
        return self.writer.laid(self.inputs, self.outputs)

    @property
    def sources(self) -> tuple:
        return tuple(data for _, data, _ in self.writer.blobs)

    @property
    def builtin(self) -> frozenset:
        """The tensors of operators LiteRT's builtin kernels may run (:attr:`Translation.builtin`)."""
        return frozenset(self.writer.kernel_tensors)

    def checkable(self) -> bool:
        """Whether LiteRT's arena can show that XNNPACK took this graph whole once it shares an interpreter: every
        operator touches a tensor that is neither constant nor an input or output of the graph (a builtin kernel
        left between such tensors would put one in LiteRT's arena; one between the graph's own inputs and outputs
        would not)."""
        ends = set(self.inputs) | set(self.outputs)
        tensors = self.writer.tensors
        for o in self.writer.operators:
            own = [t for t in o.inputs.tolist() + o.outputs.tolist() if t >= 0 and not tensors[t].buffer]
            if all(t in ends for t in own):
                return False
        return True

    def producers(self, tensors) -> list[str]:
        """The operators that write any of ``tensors``."""
        return sorted({name for name, o in zip(self.writer.op_names, self.writer.operators)
                       if set(o.outputs.tolist()) & set(tensors)})


def translate_part(graph: G.Graph) -> Part:
    """:func:`translate` without writing the model: several parts become one model with :func:`combine`."""
    modules()
    try:
        w = _Translator(graph)
        ins, outs = w.build()
        return Part(w, ins, outs, w.fixed_shape)
    except (Unsupported, Unavailable):
        raise
    except Exception as e:
        raise Unsupported(f"translation failed ({type(e).__name__}: {e})") from e


def combine(parts: list) -> Laying:
    """One TFLite model holding ``parts`` as subgraphs 0, 1, ..., to be laid out (:class:`.writer.Laying`)."""
    modules()
    try:
        return _combine([(p.writer, p.inputs, p.outputs) for p in parts])
    except Exception as e:
        raise Unsupported(f"combining {len(parts)} graphs failed ({type(e).__name__}: {e})") from e


def translate(graph: G.Graph) -> Translation:
    """The TFLite model of ``graph``.

    Raises :class:`Unsupported` for a graph this translation does not cover, :class:`Unavailable` when LiteRT is
    missing.
    """
    tr, laid = translate_laid(graph)
    return tr._replace(model=laid.fill(), packed=laid.packed)


def translate_signed(graph: G.Graph) -> Laying:
    """The TFLite model of ``graph`` with a signature (:meth:`.writer.ModelWriter.signed`), for LiteRT's
    CompiledModel, to be laid out (:class:`.writer.Laying`); raises as :func:`translate` does."""
    modules()
    try:
        tr = _Translator(graph)
        ins, outs = tr.build()
        return tr.signed(ins, outs)
    except (Unsupported, Unavailable):
        raise
    except Exception as e:  # a field out of TFLite's range
        raise Unsupported(f"translation failed ({type(e).__name__}: {e})") from e


def translate_laid(graph: G.Graph) -> tuple[Translation, Laying]:
    """:func:`translate` with the model not yet laid out nor written (:class:`.writer.Laying`): ``model`` and
    ``packed`` are unset until the caller fills it (the packed-weight cache may load a file it wrote instead, or
    LiteRT read the constants from the program in place: :func:`.compiled.open_prepared`)."""
    modules()
    try:
        return _Translator(graph).run()
    except (Unsupported, Unavailable):
        raise
    except Exception as e:  # a field out of TFLite's range
        raise Unsupported(f"translation failed ({type(e).__name__}: {e})") from e

