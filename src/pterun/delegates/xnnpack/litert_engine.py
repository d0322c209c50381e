"""The LiteRT engine: a typed XNNPACK graph translated at load into one TFLite model, run by LiteRT on XNNPACK.

LiteRT (``ai-edge-litert``, the TensorFlow Lite runtime) runs CPU graphs with XNNPACK, the library ExecuTorch's
XNNPACK delegate runs. :func:`translate` turns a :class:`~.graph.Graph` into TFLite model bytes in memory
(the flatbuffer is written with the ``flatbuffers`` package and the object API of the schema module LiteRT
ships, ``ai_edge_litert.schema_py_generated``); :func:`build` creates the interpreter with pterun's thread
count, checks that LiteRT's XNNPACK delegate took *every* operator (LiteRT's builtin kernels round
differently, so a partly delegated graph is refused), and returns a :class:`LiteRTPlan` whose ``execute(args)``
has the NumPy plan's contract.

Anything the translation does not cover raises :class:`Unsupported` with the reason; anything missing from the
installation raises :class:`Unavailable`. The caller then runs the graph on the NumPy engine. How the payload
maps (facts checked against ExecuTorch's outputs):

* layouts: XNNPACK's NHWC values and OHWI / [1, H, W, C*M] / [out, in] filters are TFLite's own;
* explicit convolution padding becomes PAD + VALID (XNNPACK fuses it back); pools need VALID or SAME;
* dynamic int8 (``qdint8``) activations are not a TFLite type: the fp32 -> qdint8 Convert is dropped and the
  fully-connected layer gets the float input with int8 / int4 weights, which XNNPACK then quantizes per row
  exactly as ExecuTorch does;
* 4-bit weights stay packed (unsigned with zero point 8 -> signed INT4: each byte XOR 0x88); blockwise scales
  must be fp16, so bf16 scales are converted only when exactly representable;
* static int8 biases get the scale TFLite requires (input scale x weight scale; XNNPACK reads only the ints).

LiteRT writes one ``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.`` line to the process's stderr when
the first interpreter is made; :func:`_capture_native_stderr` routes such lines into the ``pterun`` logger and
passes anything else written to stderr meanwhile (other threads) back through.

Example::

    >>> plan = build(Graph.read(blob, named_data), num_threads=2)   # doctest: +SKIP
    >>> plan.execute([input_tensor, output_tensor])                  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import re
import threading
from typing import NamedTuple

import numpy as np

from pterun._log import logger
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.binding import input_array, write_output
from pterun.errors import DelegateError

__all__ = ["Unavailable", "Unsupported", "LiteRTPlan", "build", "translate", "available"]

F32 = np.float32


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


def _modules() -> tuple:
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
        _modules()
    except Unavailable as e:
        return str(e)
    return None


# -- translation ------------------------------------------------------------------------------------------------------
_TYPES = {G.FP32: "FLOAT32", G.FP16: "FLOAT16", G.INT32: "INT32", G.QINT8: "INT8", G.QUINT8: "UINT8",
          G.QINT32: "INT32", G.QCINT8: "INT8", G.QCINT32: "INT32", G.QCINT4: "INT4", G.QBINT4: "INT4"}
_UNARY = {"Abs": "ABS", "Negate": "NEG", "Floor": "FLOOR", "Ceiling": "CEIL", "Square": "SQUARE",
          "SquareRoot": "SQRT", "ReciprocalSquareRoot": "RSQRT", "Log": "LOG", "Exp": "EXP", "Sin": "SIN",
          "Cos": "COS", "Tanh": "TANH", "Sigmoid": "LOGISTIC", "Hardswish": "HARD_SWISH"}
_BINARY = {"Add": ("ADD", "AddOptions"), "Subtract": ("SUB", "SubOptions"), "Multiply": ("MUL", "MulOptions"),
           "Div": ("DIV", "DivOptions"), "Maximum": ("MAXIMUM", None), "Minimum": ("MINIMUM", None),
           "PReLU": ("PRELU", None)}
_FUSABLE = {(-math.inf, math.inf): "NONE", (0.0, math.inf): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1"}


class _Translator:
    def __init__(self, schema, graph: G.Graph):
        self.S = schema
        self.g = graph
        self.tensors: list = []
        self.operators: list = []
        self.opcodes: dict[int, int] = {}
        self.codes: list = []
        self.buffers = [schema.BufferT()]  # buffer 0: the empty sentinel TFLite requires
        self.blobs: list[tuple[int, np.ndarray]] = []  # (buffer index, bytes to place after the flatbuffer)
        self.tid: dict[int, int] = {}  # XNNPACK value id -> TFLite tensor index
        self.alias: dict[int, int] = {}  # value id -> the value whose tensor it shares (dropped Converts)
        self.node: G.Node | None = None
        self.pending_clamp: tuple | None = None  # (from, to, lo, hi): a clamp emitted after the node
        self.dynamic_source: dict[int, int] = {}  # qdint8 value -> the fp32 value its dropped Convert read
        self.fixed_shape = False  # True when the translation holds only at the graph's own input sizes
        self.consumers: dict[int, list[G.Node]] = {}
        for n in graph.nodes:
            for k, vid in n.fields.items():
                if k.startswith("input") or k in ("filter_id", "bias_id"):
                    self.consumers.setdefault(vid, []).append(n)

    def no(self, what: str) -> Unsupported:
        where = f"{self.node.describe()}: " if self.node is not None else ""
        return Unsupported(f"{where}{what}")

    # -- tensors ----------------------------------------------------------------------------------------------
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
            data = v.data
            if v.datatype in (G.QCINT4, G.QBINT4):
                if v.dims[-1] % 2:
                    raise self.no(f"{v.describe()}: 4-bit rows of odd length")
                data = np.bitwise_xor(data, np.uint8(0x88))  # unsigned, zero point 8 -> signed int4, still packed
            buf = self.buffer(data)
        return self.add_tensor(list(v.dims), getattr(self.S.TensorType, tname), buf, quant, f"v{v.id}")

    def add_tensor(self, shape, ttype: int, buf: int = 0, quant=None, name: str = "") -> int:
        t = self.S.TensorT()
        t.shape = np.asarray(shape, np.int32)
        t.type = ttype
        t.buffer = buf
        t.quantization = quant
        t.name = name
        self.tensors.append(t)
        return len(self.tensors) - 1

    def buffer(self, data: np.ndarray) -> int:
        b = self.S.BufferT()
        self.buffers.append(b)
        self.blobs.append((len(self.buffers) - 1, np.asarray(data).reshape(-1).view(np.uint8)))
        return len(self.buffers) - 1

    def const(self, arr: np.ndarray, tname: str, quant=None) -> int:
        arr = np.ascontiguousarray(arr)
        return self.add_tensor(list(arr.shape), getattr(self.S.TensorType, tname), self.buffer(arr), quant)

    def i32(self, values) -> int:
        return self.const(np.asarray(values, np.int32), "INT32")

    def temp_like(self, vid: int) -> int:
        """A fresh intermediate tensor with the type, shape and quantization of value ``vid``."""
        src = self.tensors[self.tensor_of(vid)]
        return self.add_tensor(list(src.shape), src.type, 0, src.quantization)

    def quant_of(self, v: G.Value, scale=None):
        q = v.quant
        if q is None:
            return None
        p = self.S.QuantizationParametersT()
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
            b = self.S.BlockwiseQuantizationT()
            b.scales = self.const(s16, "FLOAT16")
            b.blockSize = gs
            p.detailsType = self.S.QuantizationDetails.BlockwiseQuantization
            p.details = b
        else:
            raise self.no(f"{v.describe()}: per-token quantization outside a dynamic int8 input")
        return p

    # -- operators -----------------------------------------------------------------------------------------------
    def op(self, name: str, inputs: list, outputs: list, options: str | None = None, **fields) -> None:
        S = self.S
        code = getattr(S.BuiltinOperator, name, None)
        if code is None:
            raise self.no(f"this LiteRT has no {name} operator")
        if code not in self.opcodes:
            oc = S.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = 1
            self.opcodes[code] = len(self.codes)
            self.codes.append(oc)
        o = S.OperatorT()
        o.opcodeIndex = self.opcodes[code]
        o.inputs = np.asarray(inputs, np.int32)
        o.outputs = np.asarray(outputs, np.int32)
        if options is not None:
            opt = getattr(S, options + "T")()
            for k, val in fields.items():
                setattr(opt, k, val)
            o.builtinOptionsType = getattr(S.BuiltinOptions, options)
            o.builtinOptions = opt
        self.operators.append(o)

    def activation(self, lo: float, hi: float, out_vid: int) -> tuple[int, tuple | None]:
        """(fused activation code, the clamp still to apply or None) for an output clamp [lo, hi]."""
        name = _FUSABLE.get((lo, hi))
        if name is not None:
            return getattr(self.S.ActivationFunctionType, name), None
        if self.value(out_vid).datatype != G.FP32:
            raise self.no(f"output clamp [{lo}, {hi}] on a non-fp32 value")
        return self.S.ActivationFunctionType.NONE, (lo, hi)

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
            raise self.no(f"output clamp [{n.output_min}, {n.output_max}] on a non-fp32 value")
        return n.output_min, n.output_max

    def unary(self, name: str, n: G.Node, options: str | None = None, **fields) -> None:
        out = self.output(n.output_id, self.residual(n))
        self.op(name, [self.tensor_of(n.input_id)], [out], options, **fields)

    # -- the graph -------------------------------------------------------------------------------------------
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

    def run(self) -> Translation:
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
        consts = frozenset(i for i, t in enumerate(self.tensors) if t.buffer)
        return Translation(self.serialize(ins, outs), ins, outs, self.fixed_shape, consts)

    def serialize(self, ins: list[int], outs: list[int]) -> bytes:
        S = self.S
        sg = S.SubGraphT()
        sg.tensors, sg.operators = self.tensors, self.operators
        sg.inputs, sg.outputs = np.asarray(ins, np.int32), np.asarray(outs, np.int32)
        sg.name = "main"
        m = S.ModelT()
        m.version = 3
        m.operatorCodes = self.codes
        m.subgraphs = [sg]
        m.buffers = self.buffers
        m.description = "pterun XNNPACK delegate"
        # constant data follows the flatbuffer (Buffer.offset/size), 64-byte aligned. Offsets are set from a bound
        # on the flatbuffer's size, so it is packed once (twice only if the bound was too small)
        at = _align(self.size_bound())
        while True:
            pos = at
            for b, data in self.blobs:
                self.buffers[b].offset, self.buffers[b].size = pos, data.size
                pos = _align(pos + data.size)
            fb = self._pack(m)
            if len(fb) <= at:
                break
            at = _align(len(fb) + 4096)
        parts, end = [fb, bytes(at - len(fb))], at
        for _, data in self.blobs:  # one copy of the constants, straight into the model's bytes
            parts.append(memoryview(np.ascontiguousarray(data)))
            end += data.size
            parts.append(bytes(_align(end) - end))
            end = _align(end)
        return b"".join(parts)

    def size_bound(self) -> int:
        """An upper bound on the packed flatbuffer's size (vtables, strings and vectors with their padding)."""
        n = 4096 + 64 * len(self.buffers) + 48 * len(self.codes)
        for t in self.tensors:
            n += 160 + 4 * len(t.shape) + len(t.name or "")
            q = t.quantization
            if q is not None:
                n += 96 + 12 * (np.size(q.scale) if q.scale is not None else 0) + 8 * np.size(q.zeroPoint)
        for o in self.operators:
            n += 160 + 4 * (len(o.inputs) + len(o.outputs))
        return n

    def _pack(self, m) -> bytes:
        import flatbuffers

        b = flatbuffers.Builder(1 << 16)
        b.Finish(m.Pack(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    # -- nodes -------------------------------------------------------------------------------------------------
    def conv_pads(self, n: G.Node, x: int) -> tuple[int, str]:
        """(input tensor after any explicit PAD, padding name) for a convolution's padding."""
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            return x, "SAME"
        pt, pr, pb, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
        if not (pt or pr or pb or pl):
            return x, "VALID"
        src = self.tensors[x]
        if len(src.shape) != 4:
            raise self.no("padded convolution of a non-4-D input")
        shape = list(src.shape)
        shape[1] += pt + pb
        shape[2] += pl + pr
        padded = self.add_tensor(shape, src.type, 0, src.quantization)
        self.op("PAD", [x, self.i32([[0, 0], [pt, pb], [pl, pr], [0, 0]])], [padded])
        return padded, "VALID"

    def bias_tensor(self, n: G.Node, x_vid: int, w_vid: int) -> int:
        if n.bias_id == G.INVALID_ID:
            return -1
        bv = self.value(n.bias_id)
        if bv.data is None:
            raise self.no("run-time bias")
        if bv.quant is None:
            return self.tensor_of(n.bias_id)
        xq, wq = self.value(x_vid).quant, self.value(w_vid).quant
        if xq is None or wq is None or xq.kind != G.PER_TENSOR or bv.datatype not in (G.QINT32, G.QCINT32):
            raise self.no(f"quantized bias {bv.describe()} without a static int8 input and weights")
        ws = np.asarray(wq.scale, F32).reshape(-1)
        scale = (F32(xq.scale) * ws).astype(F32)
        quant = self.S.QuantizationParametersT()  # TFLite's rule: bias scale = input scale x weight scale
        quant.scale = scale
        quant.zeroPoint = np.zeros(scale.size, np.int64)
        quant.quantizedDimension = 0
        self.tid[n.bias_id] = self.add_tensor([int(np.prod(bv.dims))], self.S.TensorType.INT32,
                                              self.buffer(bv.data), quant, f"v{bv.id}")
        return self.tid[n.bias_id]

    def conv_weights(self, n: G.Node) -> int:
        w = self.value(n.filter_id)
        if w.data is None:
            raise self.no(f"filter {w.describe()} is not a constant")
        if w.datatype in (G.QCINT4, G.QBINT4):
            raise self.no("4-bit convolution weights")
        return self.tensor_of(n.filter_id)

    def input_for_gemm(self, n: G.Node) -> int:
        """The GEMM's input: a dropped dynamic-int8 Convert gives the float tensor it quantized."""
        x = self.value(n.input1_id)
        if x.datatype == G.QDINT8:
            w = self.value(n.filter_id)
            if w.datatype not in (G.QCINT8, G.QCINT4, G.QBINT4) or n.name != "FullyConnected":
                raise self.no(f"dynamic int8 input with {w.dtype_name} weights")
            src = self.dynamic_source.get(n.input1_id)
            if src is None:
                raise self.no("dynamic int8 input that no fp32 Convert produces")
            return self.tensor_of(src)
        return self.tensor_of(n.input1_id)

    def node_Convert(self, n: G.Node) -> None:
        src, dst = self.value(n.input_id), self.value(n.output_id)
        if dst.datatype == G.QDINT8:
            if src.datatype != G.FP32:
                raise self.no(f"dynamic int8 from {src.dtype_name}")
            if dst.external_id is not None:
                raise self.no("dynamic int8 graph output")
            q = dst.quant
            if q is not None and q.kind == G.PER_TOKEN and q.num_nonbatch_dims > 1:
                raise self.no(f"dynamic int8 over {q.num_nonbatch_dims} dims (TFLite quantizes rows)")
            for c in self.consumers.get(n.output_id, []):
                if c.name != "FullyConnected" or c.fields.get("input1_id") != n.output_id:
                    raise self.no(f"dynamic int8 value read by {c.describe()}")
            self.dynamic_source[n.output_id] = n.input_id
            return
        if (n.output_min, n.output_max) != (-math.inf, math.inf):
            raise self.no("clamped Convert")
        s, d = src.datatype, dst.datatype
        if s == G.FP32 and d in (G.QINT8, G.QUINT8):
            self.op("QUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        elif s in (G.QINT8, G.QUINT8) and d == G.FP32:
            self.op("DEQUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        elif s in (G.QINT8, G.QUINT8) and d in (G.QINT8, G.QUINT8):
            self.op("QUANTIZE", [self.tensor_of(src.id)], [self.tensor_of(dst.id)])
        else:
            raise self.no(f"Convert {src.dtype_name} -> {dst.dtype_name}")

    def node_FullyConnected(self, n: G.Node) -> None:
        if n.flags & G.FLAG_TRANSPOSE_WEIGHTS:
            raise self.no("transposed fully-connected weights")
        x = self.input_for_gemm(n)
        w = self.value(n.filter_id)
        if w.data is None:
            raise self.no(f"run-time filter {w.describe()}")
        wt = self.tensor_of(n.filter_id)
        b = self.bias_tensor(n, n.input1_id, n.filter_id)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        keep = len(self.tensors[x].shape) != 2
        self.op("FULLY_CONNECTED", [x, wt, b], [self.output(n.output_id, residual)], "FullyConnectedOptions",
                fusedActivationFunction=act, keepNumDims=keep)

    def conv_common(self, n: G.Node):
        if n.kernel_height < 1 or n.kernel_width < 1 or n.subsampling_height < 1 or n.subsampling_width < 1:
            raise self.no("empty kernel or stride")
        x, padding = self.conv_pads(n, self.tensor_of(n.input1_id))
        wt = self.conv_weights(n)
        b = self.bias_tensor(n, n.input1_id, n.filter_id)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        out = self.output(n.output_id, residual)
        return [x, wt, b], [out], dict(padding=getattr(self.S.Padding, padding), strideH=n.subsampling_height,
                                       strideW=n.subsampling_width, dilationHFactor=max(n.dilation_height, 1),
                                       dilationWFactor=max(n.dilation_width, 1), fusedActivationFunction=act)

    def node_Conv2d(self, n: G.Node) -> None:
        ins, outs, opts = self.conv_common(n)
        self.op("CONV_2D", ins, outs, "Conv2DOptions", **opts)

    def node_DepthwiseConv2d(self, n: G.Node) -> None:
        mult = n.group_output_channels // max(n.group_input_channels, 1)
        ins, outs, opts = self.conv_common(n)
        self.op("DEPTHWISE_CONV_2D", ins, outs, "DepthwiseConv2DOptions", depthMultiplier=mult, **opts)

    def node_ConvTranspose2d(self, n: G.Node) -> None:
        """TRANSPOSE_CONV with VALID padding at its full size, then a SLICE that crops XNNPACK's padding (an
        adjustment past the bottom/right padding becomes the output shape's extra rows, which LiteRT derives)."""
        if max(n.groups, 1) != 1 or max(n.dilation_height, 1) != 1 or max(n.dilation_width, 1) != 1:
            raise self.no("grouped or dilated transposed convolution")
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            raise self.no("transposed convolution with TensorFlow SAME padding")
        dims = self.value(n.input1_id).dims
        if len(dims) != 4:
            raise self.no("transposed convolution of a non-4-D input")
        (kh, kw), (sh, sw) = (n.kernel_height, n.kernel_width), (n.subsampling_height, n.subsampling_width)
        if min(kh, kw, sh, sw) < 1 or n.adjustment_height >= sh or n.adjustment_width >= sw:
            raise self.no("transposed convolution geometry")
        pt, pr, pb, pl = n.padding_top, n.padding_right, n.padding_bottom, n.padding_left
        full_h, full_w = (dims[1] - 1) * sh + kh, (dims[2] - 1) * sw + kw
        out_h, out_w = full_h + n.adjustment_height - pt - pb, full_w + n.adjustment_width - pl - pr
        shape = [dims[0], full_h + max(n.adjustment_height - pb, 0), full_w + max(n.adjustment_width - pr, 0),
                 n.group_output_channels]
        if out_h < 1 or out_w < 1:
            raise self.no("transposed convolution with an empty output")
        x = self.tensor_of(n.input1_id)
        wt = self.conv_weights(n)
        b = self.bias_tensor(n, n.input1_id, n.filter_id)
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        crop = shape[1:3] != [out_h, out_w]
        dst = self.tensors[self.tensor_of(n.output_id)]
        dst.shape = np.asarray([shape[0], out_h, out_w, shape[3]], np.int32)  # what XNNPACK will produce
        y = self.add_tensor(shape, dst.type, 0, dst.quantization) if crop else self.output(n.output_id, residual)
        self.op("TRANSPOSE_CONV", [self.i32(shape), wt, x, b], [y], "TransposeConvOptions",
                padding=self.S.Padding.VALID, strideH=sh, strideW=sw, fusedActivationFunction=act)
        if crop:
            self.op("SLICE", [y, self.i32([0, pt, pl, 0]), self.i32([shape[0], out_h, out_w, shape[3]])],
                    [self.output(n.output_id, residual)])
        self.fixed_shape = True  # the output shape is a constant of the model

    def pool(self, n: G.Node, name: str) -> None:
        ph, pw = n.pooling_height, n.pooling_width
        sh, sw = n.stride_height or ph, n.stride_width or pw
        if max(n.dilation_height, 1) != 1 or max(n.dilation_width, 1) != 1:
            raise self.no("dilated pooling")
        pads = (n.padding_top, n.padding_right, n.padding_bottom, n.padding_left)
        x = self.tensor_of(n.input_id)
        if n.flags & G.FLAG_TENSORFLOW_SAME_PADDING:
            padding = "SAME"
        elif not any(pads):
            padding = "VALID"
        elif name == "MAX_POOL_2D" and self.nonnegative(n.input_id) and max(pads) < min(ph, pw):
            # zero padding never wins the max of a ReLU's output (every window holds a real pixel): any size
            x, padding = self.pad_zero(x, pads), "VALID"
        else:  # TFLite's SAME pools read only real pixels, as XNNPACK's do: equal only at this input size
            shape = self.value(n.input_id).dims
            if len(shape) != 4 or pads != _same_pads(shape[1], shape[2], (ph, pw), (sh, sw)):
                raise self.no(f"pool padding {list(pads)} is neither VALID nor SAME")
            padding = "SAME"
            self.fixed_shape = True
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op(name, [x], [self.output(n.output_id, residual)], "Pool2DOptions",
                padding=getattr(self.S.Padding, padding), strideH=sh, strideW=sw, filterHeight=ph,
                filterWidth=pw, fusedActivationFunction=act)

    def nonnegative(self, vid: int) -> bool:
        """True when value ``vid`` is produced with a fused clamp at or above 0 (a ReLU's output)."""
        p = self.producers.get(vid)
        lo = self.fused.get(p.index, (p.output_min,))[0] if p is not None else -math.inf
        return lo >= 0

    def pad_zero(self, x: int, pads: tuple) -> int:
        """``x`` (NHWC) padded by (top, right, bottom, left) with (real) zeros."""
        pt, pr, pb, pl = pads
        src = self.tensors[x]
        if len(src.shape) != 4:
            raise self.no("padded pool of a non-4-D input")
        shape = list(src.shape)
        shape[1] += pt + pb
        shape[2] += pl + pr
        padded = self.add_tensor(shape, src.type, 0, src.quantization)
        self.op("PAD", [x, self.i32([[0, 0], [pt, pb], [pl, pr], [0, 0]])], [padded])
        return padded

    def node_MaxPooling2d(self, n: G.Node) -> None:
        self.pool(n, "MAX_POOL_2D")

    def node_AvgPooling2d(self, n: G.Node) -> None:
        self.pool(n, "AVERAGE_POOL_2D")

    def node_GlobalAvgPooling2d(self, n: G.Node) -> None:
        rank = len(self.value(n.input_id).dims)
        if rank < 3:
            raise self.no("global average pool of fewer than 3 dims")
        residual = self.residual(n)
        self.op("MEAN", [self.tensor_of(n.input_id), self.i32(list(range(1, rank - 1)))],
                [self.output(n.output_id, residual)], "ReducerOptions", keepDims=bool(n.flags & G.FLAG_KEEP_DIMS))

    def node_binary(self, n: G.Node) -> None:
        name, options = _BINARY[n.name]
        ins = [self.tensor_of(n.input1_id), self.tensor_of(n.input2_id)]
        if options is None:
            self.op(name, ins, [self.output(n.output_id, self.residual(n))])
            return
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op(name, ins, [self.output(n.output_id, residual)], options, fusedActivationFunction=act)

    def node_unary(self, n: G.Node) -> None:
        self.unary(_UNARY[n.name], n)

    def node_Gelu(self, n: G.Node) -> None:
        self.unary("GELU", n, "GeluOptions", approximate=False)

    def node_Softmax(self, n: G.Node) -> None:
        self.unary("SOFTMAX", n, "SoftmaxOptions", beta=1.0)

    def node_LeakyReLU(self, n: G.Node) -> None:
        self.unary("LEAKY_RELU", n, "LeakyReluOptions", alpha=float(np.float32(n.negative_slope)))

    def node_ELU(self, n: G.Node) -> None:
        if n.alpha != 1.0:
            raise self.no(f"ELU with alpha {n.alpha}")
        self.unary("ELU", n)

    def node_Clamp(self, n: G.Node) -> None:
        lo, hi = n.output_min, n.output_max
        name = _FUSABLE.get((lo, hi))
        if name == "NONE":
            return self.identity(n)
        if name is not None:
            self.op(name, [self.tensor_of(n.input_id)], [self.tensor_of(n.output_id)])
            return
        if self.value(n.output_id).datatype != G.FP32:
            raise self.no(f"clamp [{lo}, {hi}] on a non-fp32 value")
        self.pending_clamp = (self.tensor_of(n.input_id), self.tensor_of(n.output_id), lo, hi)

    def node_Copy(self, n: G.Node) -> None:
        self.identity(n)

    def identity(self, n: G.Node) -> None:
        """out = in: the same tensor when the output is internal, else a RESHAPE that keeps any leading dim."""
        src, dst = self.value(n.input_id), self.value(n.output_id)
        if dst.external_id is None and n.output_id not in self.tid and (n.output_min, n.output_max) == (
                -math.inf, math.inf) and src.datatype == dst.datatype and _same_quant(src.quant, dst.quant):
            self.alias[n.output_id] = self.alias.get(n.input_id, n.input_id)
            return
        self.simple(n, "RESHAPE", [self.i32([-1] + list(dst.dims[1:]) if dst.dims else [])])

    def node_StaticTranspose(self, n: G.Node) -> None:
        perm = list(n.perm)
        if sorted(perm) != list(range(len(perm))):
            raise self.no(f"perm {perm} is not a permutation")
        self.simple(n, "TRANSPOSE", [self.i32(perm)])

    def node_StaticReshape(self, n: G.Node) -> None:
        shape = [-1 if d == 0 else d for d in n.new_shape]
        if shape.count(-1) > 1:
            raise self.no("more than one inferred dim")
        self.simple(n, "RESHAPE", [self.i32(shape)])

    def node_StaticSlice(self, n: G.Node) -> None:
        sizes = [s if s else -1 for s in n.sizes]  # 0: to the end (of the run-time size)
        self.simple(n, "SLICE", [self.i32(list(n.offsets)), self.i32(sizes)])

    def node_StaticConstantPad(self, n: G.Node) -> None:
        pads = [[a, b] for a, b in zip(n.pre_paddings, n.post_paddings)]
        v = self.value(n.output_id)
        zero = n.padding_value == 0.0 and v.datatype == G.FP32
        if v.quant is not None and v.quant.kind == G.PER_TENSOR:
            from pterun.delegates.xnnpack import quant as Q
            q = int(Q.quantize(np.array([n.padding_value], F32), v.quant.scale, v.quant.zero_point,
                               G.STORAGE_DTYPES[v.datatype])[0])
            zero = q == v.quant.zero_point
        if not zero:
            raise self.no(f"constant pad with value {n.padding_value}")
        self.simple(n, "PAD", [self.i32(pads)])

    def simple(self, n: G.Node, name: str, extra: list) -> None:
        self.op(name, [self.tensor_of(n.input_id)] + extra, [self.output(n.output_id, self.residual(n))])

    def concat(self, n: G.Node, k: int) -> None:
        ids = [n.input1_id, n.input2_id, n.input3_id, n.input4_id, n.input5_id][:k]
        act, residual = self.activation(n.output_min, n.output_max, n.output_id)
        self.op("CONCATENATION", [self.tensor_of(i) for i in ids], [self.output(n.output_id, residual)],
                "ConcatenationOptions", axis=n.axis, fusedActivationFunction=act)

    def node_Concatenate2(self, n: G.Node) -> None:
        self.concat(n, 2)

    def node_Concatenate3(self, n: G.Node) -> None:
        self.concat(n, 3)

    def node_Concatenate4(self, n: G.Node) -> None:
        self.concat(n, 4)

    def node_Concatenate5(self, n: G.Node) -> None:
        self.concat(n, 5)

    def node_StaticResizeBilinear2D(self, n: G.Node) -> None:
        align = bool(n.flags & G.FLAG_ALIGN_CORNERS)
        legacy = bool(n.flags & G.FLAG_TENSORFLOW_LEGACY)
        self.op("RESIZE_BILINEAR", [self.tensor_of(n.input_id), self.i32([n.new_height, n.new_width])],
                [self.output(n.output_id, self.residual(n))], "ResizeBilinearOptions", alignCorners=align,
                halfPixelCenters=not (align or legacy))

    def node_BatchMatrixMultiply(self, n: G.Node) -> None:
        self.op("BATCH_MATMUL", [self.tensor_of(n.input1_id), self.tensor_of(n.input2_id)],
                [self.output(n.output_id, self.residual(n))], "BatchMatMulOptions",
                adjY=bool(n.flags & G.FLAG_TRANSPOSE_WEIGHTS))


_FUSES = frozenset({"Conv2d", "DepthwiseConv2d", "FullyConnected", "Add", "Subtract", "Multiply", "Div",
                    "MaxPooling2d", "AvgPooling2d", "Concatenate2", "Concatenate3", "Concatenate4", "Concatenate5"})


def _same_quant(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a.kind == b.kind == G.PER_TENSOR and float(a.scale) == float(b.scale)
            and a.zero_point == b.zero_point)


def _align(n: int, to: int = 64) -> int:
    return -(-n // to) * to


def _same_pads(h: int, w: int, kernel, stride) -> tuple[int, int, int, int]:
    """TensorFlow SAME padding (top, right, bottom, left) of a window over an h x w input."""
    (kh, kw), (sh, sw) = kernel, stride
    th = max((-(-h // sh) - 1) * sh + kh - h, 0)
    tw = max((-(-w // sw) - 1) * sw + kw - w, 0)
    return th // 2, tw - tw // 2, th - th // 2, tw // 2


class Translation(NamedTuple):
    """A graph as a TFLite model: its bytes, the tensor index of each external input and output (in external-id
    order), and whether it holds only at the graph's own input sizes (a pool's padding expressed as SAME)."""

    model: bytes
    inputs: list
    outputs: list
    fixed_shape: bool
    constants: frozenset = frozenset()


def translate(graph: G.Graph) -> Translation:
    """The TFLite model of ``graph``.

    Raises :class:`Unsupported` for a graph this translation does not cover, :class:`Unavailable` when LiteRT or
    its schema module is missing.
    """
    schema, _, _ = _modules()
    try:
        return _Translator(schema, graph).run()
    except (Unsupported, Unavailable):
        raise
    except Exception as e:  # a field out of TFLite's range, or a schema module that changed its object API
        raise Unsupported(f"translation failed ({type(e).__name__}: {e})") from e


# -- native stderr -----------------------------------------------------------------------------------------------
_LITERT_LINE = re.compile(rb"^(INFO|WARNING|ERROR|VERBOSE): ")
_stderr_lock = threading.Lock()


class _capture_native_stderr:
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


# -- running --------------------------------------------------------------------------------------------------------
class LiteRTPlan:
    """An interpreter over the translated model. ``execute(args)`` sets the inputs (resizing the interpreter's
    tensors when a shape changes), invokes, and writes each output into its DelegateCall tensor (one copy out
    of LiteRT's arena). Calls are serialized: an interpreter runs one invocation at a time."""

    engine = "litert"
    engine_reason: str | None = None

    def __init__(self, interp, graph: G.Graph, tr: Translation, num_threads: int, fallback=None):
        in_idx, out_idx = tr.inputs, tr.outputs
        self._fallback = fallback  # () -> a NumPy plan, for input shapes this model cannot take
        self._numpy = None
        self._interp = interp
        self._model = tr.model  # the interpreter reads its constants from these bytes
        self.fixed_shape = tr.fixed_shape
        self.num_threads = num_threads
        self.inputs = [(v.external_id, t, np.dtype(G.STORAGE_DTYPES[v.datatype])) for v, t in zip(graph.inputs, in_idx)]
        self.outputs = [(v.external_id, t) for v, t in zip(graph.outputs, out_idx)]
        self._shapes = {t: tuple(int(d) for d in v.dims) for v, t in zip(graph.inputs, in_idx)}
        self._lock = threading.Lock()
        self._set = interp.set_tensor
        self._invoke = interp.invoke
        self._views = {t: interp.tensor(t) for _, t in self.outputs}

    @property
    def arity(self) -> int:
        return max([e for e, *_ in self.inputs] + [e for e, _ in self.outputs], default=-1) + 1

    def execute(self, args: list) -> None:
        try:
            arrays = [(t, input_array(args, ext, dt)) for ext, t, dt in self.inputs]
        except IndexError:
            raise DelegateError(f"XNNPACK delegate expects {self.arity} arguments, got {len(args)}") from None
        with self._lock:
            if self._numpy is not None:
                return self._numpy.execute(args)
            resized = False
            try:
                for t, a in arrays:
                    if a.shape != self._shapes[t]:
                        if self.fixed_shape:
                            raise Unsupported(f"input shape {list(a.shape)}: the model's SAME pool padding "
                                              f"equals the graph's padding only at {list(self._shapes[t])}")
                        self._resize(t, a.shape)
                        resized = True
                if resized:
                    self._reallocate()
            except Unsupported as e:
                if self._fallback is None:
                    raise DelegateError(f"XNNPACK delegate (LiteRT engine): {e}") from None
                self._switch_to_numpy(str(e))
                return self._numpy.execute(args)
            try:
                for t, a in arrays:
                    if a.flags.c_contiguous:
                        self._set(t, a)
                    else:  # e.g. a channels-last input: one strided copy into LiteRT's buffer
                        self._interp.tensor(t)()[...] = a
                self._invoke()
            except (ValueError, RuntimeError) as e:
                raise DelegateError(f"XNNPACK delegate (LiteRT engine) failed: {e}") from e
            for ext, t in self.outputs:
                write_output(args, ext, self._views[t]())

    def _resize(self, t: int, shape: tuple) -> None:
        try:
            self._interp.resize_tensor_input(t, list(shape))
        except (ValueError, RuntimeError) as e:
            raise Unsupported(f"LiteRT cannot resize an input to {list(shape)}: {str(e).strip()[:200]}") from e
        self._shapes[t] = tuple(shape)

    def _reallocate(self) -> None:
        try:
            with _capture_native_stderr():
                self._interp.allocate_tensors()
        except (ValueError, RuntimeError) as e:
            raise Unsupported(f"LiteRT cannot reshape the graph: {str(e).strip()[:200]}") from e

    def _switch_to_numpy(self, reason: str) -> None:
        """From now on run on the NumPy engine (an input shape the LiteRT model cannot take)."""
        self._numpy = self._fallback()
        self.engine, self.engine_reason = "numpy", reason
        self._interp = self._views = self._set = self._invoke = None  # the interpreter and its memory go
        logger().info("XNNPACK delegate moves to the NumPy engine: %s", reason)


def _not_delegated(ops: list[dict], tr: Translation) -> list[str]:
    """Names of the operators left to LiteRT's builtin kernels (empty when XNNPACK runs the whole graph).

    LiteRT lists the model's operators and then one ``DELEGATE`` node per XNNPACK partition. The graph runs
    wholly on XNNPACK when every graph output comes out of a partition and every partition reads only graph
    inputs, constants, or other partitions' outputs.
    """
    delegates = [o for o in ops if o.get("op_name") == "DELEGATE"]
    produced = {int(t) for o in delegates for t in o["outputs"]}
    allowed = produced | set(tr.inputs) | set(tr.constants)
    missing = {int(t) for o in delegates for t in o["inputs"] if int(t) >= 0} - allowed
    missing |= set(tr.outputs) - produced
    if not delegates:
        return sorted({o.get("op_name", "?") for o in ops}) or ["the graph"]
    return sorted({o.get("op_name", "?") for o in ops if o.get("op_name") != "DELEGATE"
                   and {int(t) for t in o["outputs"]} & missing})


def build(graph: G.Graph, num_threads: int = 1, fallback=None) -> LiteRTPlan:
    """Translate ``graph`` and create its interpreter on LiteRT's XNNPACK path.

    Raises :class:`Unsupported` (the reason) when the translation or XNNPACK does not take the whole graph, and
    :class:`Unavailable` when LiteRT is missing. ``fallback()``, when given, makes the NumPy plan the LiteRT plan
    moves to if a later call brings input shapes the model cannot take.
    """
    _, _, Interpreter = _modules()
    tr = translate(graph)
    try:
        with _capture_native_stderr():
            interp = Interpreter(model_content=tr.model, num_threads=max(int(num_threads), 1))
            interp.allocate_tensors()
            ops = interp._get_ops_details()
    except Exception as e:  # LiteRT reports a model it cannot prepare as ValueError / RuntimeError
        raise Unsupported(f"LiteRT rejected the translated model: {str(e).strip()[:300]}") from e
    left = _not_delegated(ops, tr)
    if left:
        raise Unsupported(f"LiteRT's XNNPACK delegate did not take {', '.join(left)}; LiteRT's builtin kernels "
                          "round differently from XNNPACK")
    return LiteRTPlan(interp, graph, tr, num_threads, fallback)
