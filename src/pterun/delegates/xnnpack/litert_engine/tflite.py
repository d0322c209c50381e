"""The TFLite model format as pterun writes it: the facts of TFLite's schema the translation uses, plain records of
the tables it fills, and :func:`serialize`, which writes them with the ``flatbuffers`` package's ``Builder``.

The facts come from TFLite's ``schema.fbs`` (the schema LiteRT reads): the ``BuiltinOperator`` code of every
operator the translation can emit, the ``TensorType``, ``Padding``, ``ActivationFunctionType`` and
``QuantizationDetails`` codes, and for each options table it fills, its index in the ``BuiltinOptions`` union and
its fields as (slot, scalar type, default). A field's slot is its position in its table, deprecated fields
counted (``schema.fbs``'s ``id``); a table that leaves a field out holds its default, so a value equal to the
default is not written (as flatbuffers' own builders do). Field names are spelled as LiteRT's Python API spells
them (``fusedActivationFunction`` for ``fused_activation_function``).

The records hold what pterun sets and nothing else; :func:`serialize` writes each table with the Builder's
low-level calls. A table or vector that several others point at is written once and shared (a flatbuffer may point
at one object from many places): the quantization of a tensor and its copies, equal shapes, equal options.

Example::

    >>> m = Model(operatorCodes=[], subgraphs=[SubGraph([Tensor(np.array([2], np.int32), TensorType.FLOAT32)],
    ...           [], [0], [0])], buffers=[Buffer()])
    >>> bytes(serialize(m)[4:8])
    b'TFL3'
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

__all__ = ["ActivationFunctionType", "BlockwiseQuantization", "Buffer", "BuiltinOperator", "BuiltinOptions", "Model",
           "Operator", "OperatorCode", "Options", "Padding", "QuantizationDetails", "QuantizationParameters",
           "SignatureDef", "SubGraph", "Tensor", "TensorMap", "TensorType", "builder_problem", "options",
           "serialize"]

# -- the schema's enums, as far as pterun uses them ----------------------------------------------------------------
#: the operators the translation emits (nodes.py, lower.py, exact.py, translate.py), and GATHER and CAST
BuiltinOperator = SimpleNamespace(
    ADD=0, AVERAGE_POOL_2D=1, CONCATENATION=2, CONV_2D=3, DEPTHWISE_CONV_2D=4, DEQUANTIZE=6, FLOOR=8,
    FULLY_CONNECTED=9, LOGISTIC=14, MAX_POOL_2D=17, MUL=18, RELU=19, RELU_N1_TO_1=20, RELU6=21, RESHAPE=22,
    RESIZE_BILINEAR=23, SOFTMAX=25, TANH=28, PAD=34, GATHER=36, TRANSPOSE=39, MEAN=40, SUB=41, DIV=42, EXP=47,
    SPLIT=49, CAST=53, PRELU=54, MAXIMUM=55, MINIMUM=57, LESS=58, NEG=59, PADV2=60, GREATER=61, GREATER_EQUAL=62,
    LESS_EQUAL=63, SLICE=65, SIN=66, TRANSPOSE_CONV=67, EQUAL=71, NOT_EQUAL=72, LOG=73, SQRT=75, RSQRT=76,
    LOGICAL_NOT=87, REDUCE_ANY=91, SQUARE=92, FILL=94, LEAKY_RELU=98, ABS=101, CEIL=104, COS=108, ELU=111,
    QUANTIZE=114, HARD_SWISH=117, SELECT_V2=123, BATCH_MATMUL=126, CUMSUM=128, BROADCAST_TO=130, GELU=150,
    DYNAMIC_UPDATE_SLICE=151)
TensorType = SimpleNamespace(
    FLOAT32=0, FLOAT16=1, INT32=2, UINT8=3, INT64=4, STRING=5, BOOL=6, INT16=7, COMPLEX64=8, INT8=9, FLOAT64=10,
    COMPLEX128=11, UINT64=12, RESOURCE=13, VARIANT=14, UINT32=15, UINT16=16, INT4=17, BFLOAT16=18)
Padding = SimpleNamespace(SAME=0, VALID=1)
ActivationFunctionType = SimpleNamespace(NONE=0, RELU=1, RELU_N1_TO_1=2, RELU6=3, TANH=4, SIGN_BIT=5)
QuantizationDetails = SimpleNamespace(NONE=0, CustomQuantization=1, BlockwiseQuantization=2)

_ACT = ("i8", 0)  # an ActivationFunctionType field (a byte), NONE by default
#: options table -> (its index in the BuiltinOptions union, {field: (slot, scalar type, default)})
OPTIONS = {
    "Conv2DOptions": (1, {"padding": (0, "i8", 0), "strideW": (1, "i32", 0), "strideH": (2, "i32", 0),
                          "fusedActivationFunction": (3, *_ACT), "dilationWFactor": (4, "i32", 1),
                          "dilationHFactor": (5, "i32", 1), "quantizedBiasType": (6, "i8", 0)}),
    "DepthwiseConv2DOptions": (2, {"padding": (0, "i8", 0), "strideW": (1, "i32", 0), "strideH": (2, "i32", 0),
                                   "depthMultiplier": (3, "i32", 0), "fusedActivationFunction": (4, *_ACT),
                                   "dilationWFactor": (5, "i32", 1), "dilationHFactor": (6, "i32", 1)}),
    "Pool2DOptions": (5, {"padding": (0, "i8", 0), "strideW": (1, "i32", 0), "strideH": (2, "i32", 0),
                          "filterWidth": (3, "i32", 0), "filterHeight": (4, "i32", 0),
                          "fusedActivationFunction": (5, *_ACT)}),
    "FullyConnectedOptions": (8, {"fusedActivationFunction": (0, *_ACT), "weightsFormat": (1, "i8", 0),
                                  "keepNumDims": (2, "bool", False), "asymmetricQuantizeInputs": (3, "bool", False),
                                  "quantizedBiasType": (4, "i8", 0)}),
    "SoftmaxOptions": (9, {"beta": (0, "f32", 0.0)}),
    "ConcatenationOptions": (10, {"axis": (0, "i32", 0), "fusedActivationFunction": (1, *_ACT)}),
    "AddOptions": (11, {"fusedActivationFunction": (0, *_ACT), "potScaleInt16": (1, "bool", True)}),
    "ResizeBilinearOptions": (15, {"alignCorners": (2, "bool", False), "halfPixelCenters": (3, "bool", False)}),
    "MulOptions": (21, {"fusedActivationFunction": (0, *_ACT)}),
    "ReducerOptions": (27, {"keepDims": (0, "bool", False)}),
    "SubOptions": (28, {"fusedActivationFunction": (0, *_ACT), "potScaleInt16": (1, "bool", True)}),
    "DivOptions": (29, {"fusedActivationFunction": (0, *_ACT)}),
    "GatherOptions": (23, {"axis": (0, "i32", 0), "batchDims": (1, "i32", 0)}),
    "SplitOptions": (35, {"numSplits": (0, "i32", 0)}),
    "CastOptions": (37, {"inDataType": (0, "i8", 0), "outDataType": (1, "i8", 0)}),
    "TransposeConvOptions": (49, {"padding": (0, "i8", 0), "strideW": (1, "i32", 0), "strideH": (2, "i32", 0),
                                  "fusedActivationFunction": (3, *_ACT), "quantizedBiasType": (4, "i8", 0)}),
    "LeakyReluOptions": (75, {"alpha": (0, "f32", 0.0)}),
    "BatchMatMulOptions": (101, {"adjX": (0, "bool", False), "adjY": (1, "bool", False),
                                 "asymmetricQuantizeInputs": (2, "bool", False)}),
    "CumsumOptions": (102, {"exclusive": (0, "bool", False), "reverse": (1, "bool", False)}),
    "GeluOptions": (116, {"approximate": (0, "bool", False)}),
}
BuiltinOptions = SimpleNamespace(NONE=0, **{name: index for name, (index, _) in OPTIONS.items()})
#: scalar type -> the Builder call that writes a field of it
_PREPEND = {"bool": "PrependBoolSlot", "i8": "PrependInt8Slot", "u8": "PrependUint8Slot", "i32": "PrependInt32Slot",
            "u32": "PrependUint32Slot", "u64": "PrependUint64Slot", "f32": "PrependFloat32Slot"}


# -- records of the tables -----------------------------------------------------------------------------------------
class _Record:
    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self.__slots__)})"


class Tensor(_Record):
    """``shape``: an int32 array; ``buffer``: 0 for none (a value computed at run time); ``variable``: state the
    interpreter keeps across invocations (``is_variable``: zeroed when its tensors are allocated, written in place
    by an operator that names it as both input and output); ``signature``: the shape with -1 for the dims that
    change from call to call (``shape_signature``: an operator whose output size is computed at run time, such as
    a SLICE by a run-time size, needs it), None where the shape is fixed."""

    __slots__ = ("shape", "type", "buffer", "quantization", "name", "variable", "signature")

    def __init__(self, shape, type: int, buffer: int = 0, quantization=None, name: str = "", variable: bool = False,
                 signature=None):
        self.shape, self.type, self.buffer, self.quantization, self.name = shape, type, buffer, quantization, name
        self.variable, self.signature = variable, signature


class QuantizationParameters(_Record):
    """``scale`` float32, ``zeroPoint`` int64 (per tensor, or per channel along ``quantizedDimension``); or the
    blockwise ``details`` (``detailsType`` :attr:`QuantizationDetails.BlockwiseQuantization`)."""

    __slots__ = ("scale", "zeroPoint", "quantizedDimension", "detailsType", "details")

    def __init__(self, scale=None, zeroPoint=None, quantizedDimension: int = 0, detailsType: int = 0, details=None):
        self.scale, self.zeroPoint, self.quantizedDimension = scale, zeroPoint, quantizedDimension
        self.detailsType, self.details = detailsType, details


class BlockwiseQuantization(_Record):
    """``scales``: the tensor index of the fp16 block scales; ``zeroPoints``: of their zero points (0: none)."""

    __slots__ = ("scales", "zeroPoints", "blockSize")

    def __init__(self, scales: int = 0, zeroPoints: int = 0, blockSize: int = 0):
        self.scales, self.zeroPoints, self.blockSize = scales, zeroPoints, blockSize


class Options(_Record):
    """An options table: its name in :data:`OPTIONS` and the fields set (name -> value)."""

    __slots__ = ("table", "fields")

    def __init__(self, table: str, fields: dict):
        self.table, self.fields = table, fields


class Operator(_Record):
    """``inputs``/``outputs``: int32 arrays of tensor indices (-1: an optional input left out)."""

    __slots__ = ("opcodeIndex", "inputs", "outputs", "builtinOptionsType", "builtinOptions")

    def __init__(self, opcodeIndex: int, inputs, outputs, builtinOptionsType: int = 0, builtinOptions=None):
        self.opcodeIndex, self.inputs, self.outputs = opcodeIndex, inputs, outputs
        self.builtinOptionsType, self.builtinOptions = builtinOptionsType, builtinOptions


class OperatorCode(_Record):
    __slots__ = ("builtinCode", "deprecatedBuiltinCode", "version")

    def __init__(self, builtinCode: int, deprecatedBuiltinCode: int, version: int = 1):
        self.builtinCode, self.deprecatedBuiltinCode, self.version = builtinCode, deprecatedBuiltinCode, version


class Buffer(_Record):
    """Where a buffer's bytes lie in the model's bytes (after the flatbuffer); offset 0, size 0: none."""

    __slots__ = ("offset", "size")

    def __init__(self, offset: int = 0, size: int = 0):
        self.offset, self.size = offset, size


class SubGraph(_Record):
    __slots__ = ("tensors", "operators", "inputs", "outputs", "name")

    def __init__(self, tensors: list, operators: list, inputs, outputs, name: str = "main"):
        self.tensors, self.operators, self.inputs, self.outputs, self.name = tensors, operators, inputs, outputs, name


class TensorMap(_Record):
    __slots__ = ("name", "tensorIndex")

    def __init__(self, name: str, tensorIndex: int):
        self.name, self.tensorIndex = name, tensorIndex


class SignatureDef(_Record):
    """``inputs``/``outputs``: lists of :class:`TensorMap`."""

    __slots__ = ("signatureKey", "subgraphIndex", "inputs", "outputs")

    def __init__(self, signatureKey: str, subgraphIndex: int, inputs: list, outputs: list):
        self.signatureKey, self.subgraphIndex, self.inputs, self.outputs = signatureKey, subgraphIndex, inputs, outputs


class Model(_Record):
    __slots__ = ("operatorCodes", "subgraphs", "buffers", "signatureDefs", "description", "version")

    def __init__(self, operatorCodes: list, subgraphs: list, buffers: list, signatureDefs: list | None = None,
                 description: str = "", version: int = 3):
        self.operatorCodes, self.subgraphs, self.buffers = operatorCodes, subgraphs, buffers
        self.signatureDefs, self.description, self.version = signatureDefs, description, version


def options(table: str, fields: dict) -> tuple[int, Options]:
    """(the union index, the record) of options table ``table`` with ``fields``; ValueError for a table or a field
    this module does not know."""
    known = OPTIONS.get(table)
    if known is None:
        raise ValueError(f"no options table {table} in pterun's TFLite schema")
    unknown = [k for k in fields if k not in known[1]]
    if unknown:
        raise ValueError(f"{table} has no field {unknown[0]}")
    return known[0], Options(table, fields)


# -- writing -------------------------------------------------------------------------------------------------------
def serialize(model: Model, size_hint: int = 1 << 16) -> bytearray:
    """The flatbuffer of ``model`` (file identifier ``TFL3``). ``size_hint``: the Builder's first buffer size (it
    grows as needed)."""
    import flatbuffers

    b = flatbuffers.Builder(min(max(int(size_hint), 1024), flatbuffers.Builder.MAX_BUFFER_SIZE))
    b.Finish(_Writer(b).model(model), file_identifier=b"TFL3")
    return b.Output()


#: what :func:`serialize` calls on a Builder
_BUILDER_CALLS = ("StartObject", "EndObject", "StartVector", "EndVector", "CreateString", "CreateNumpyVector",
                  "PrependUOffsetTRelative", "PrependUOffsetTRelativeSlot", "Finish", "Output",
                  *sorted(set(_PREPEND.values())))


def builder_problem(flatbuffers) -> str | None:
    """None when ``flatbuffers``'s Builder has what :func:`serialize` calls (flatbuffers 2 or later: its
    ``EndVector`` takes no length), else what is wrong."""
    builder = getattr(flatbuffers, "Builder", None)
    if builder is None:
        return "has no Builder"
    missing = [n for n in _BUILDER_CALLS if not hasattr(builder, n)]
    if missing:
        return f"has a Builder without {', '.join(missing)}"
    try:
        b = builder(64)
        b.StartVector(4, 0, 4)
        b.EndVector()
    except Exception as e:  # flatbuffers 1.x: EndVector(vectorNumElems)
        return f"has a Builder that does not end a vector as flatbuffers 2 does ({type(e).__name__}: {e})"
    return None


class _Writer:
    """One model's tables written into Builder ``b``, children before their parents (a flatbuffer is built from its
    end), with the tables and vectors written so far that others may share."""

    def __init__(self, b):
        self.b = b
        self.strings: dict[str, int] = {}
        self.shapes: dict[bytes, int] = {}
        self.shared: dict = {}  # quantization by id (with the record, kept alive), options by value -> offset

    def string(self, s: str) -> int:
        off = self.strings.get(s)
        if off is None:
            off = self.strings[s] = self.b.CreateString(s)
        return off

    def ints(self, values) -> int:
        return self.b.CreateNumpyVector(np.asarray(values, np.int32).reshape(-1))

    def offsets(self, items: list) -> int:
        """A vector of the tables (or strings) at offsets ``items``, in order."""
        b = self.b
        b.StartVector(4, len(items), 4)
        for off in reversed(items):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def table(self, size: int, offsets: tuple = (), scalars: tuple = ()) -> int:
        """A table of ``size`` slots: ``offsets`` ((slot, offset) of what it points at, 0: left out), then
        ``scalars`` ((slot, scalar type of :data:`_PREPEND`, value, the schema's default: not written when equal))."""
        b = self.b
        b.StartObject(size)
        for slot, off in offsets:
            b.PrependUOffsetTRelativeSlot(slot, off, 0)
        for slot, kind, value, default in scalars:
            getattr(b, _PREPEND[kind])(slot, value, default)
        return b.EndObject()

    def model(self, m: Model) -> int:
        subgraphs = self.offsets([self.subgraph(sg) for sg in m.subgraphs])
        codes = self.offsets([self.opcode(oc) for oc in m.operatorCodes])
        buffers = self.offsets([self.buffer(buf) for buf in m.buffers])
        sigs = self.offsets([self.signature(sd) for sd in m.signatureDefs]) if m.signatureDefs is not None else 0
        return self.table(8, ((1, codes), (2, subgraphs), (3, self.string(m.description)), (4, buffers), (7, sigs)),
                          ((0, "u32", m.version, 0),))

    def subgraph(self, sg: SubGraph) -> int:
        tensors = self.offsets([self.tensor(t) for t in sg.tensors])
        operators = self.offsets([self.operator(o) for o in sg.operators])
        ins, outs, name = self.ints(sg.inputs), self.ints(sg.outputs), self.string(sg.name)
        return self.table(5, ((0, tensors), (1, ins), (2, outs), (3, operators), (4, name)))

    def tensor(self, t: Tensor) -> int:
        shape = np.asarray(t.shape, np.int32).reshape(-1)
        key = shape.tobytes()
        dims = self.shapes.get(key)
        if dims is None:
            dims = self.shapes[key] = self.b.CreateNumpyVector(shape)
        name = self.string(t.name) if t.name is not None else 0
        quant = self.quantization(t.quantization) if t.quantization is not None else 0
        sig = self.b.CreateNumpyVector(np.asarray(t.signature, np.int32).reshape(-1)) if t.signature is not None else 0
        return self.table(8, ((0, dims), (3, name), (4, quant), (7, sig)),
                          ((2, "u32", t.buffer, 0), (1, "i8", t.type, 0), (5, "bool", t.variable, False)))

    def quantization(self, q: QuantizationParameters) -> int:
        got = self.shared.get(id(q))
        if got is not None:
            return got[0]
        b = self.b
        scale = b.CreateNumpyVector(np.asarray(q.scale, np.float32).reshape(-1)) if q.scale is not None else 0
        zero = b.CreateNumpyVector(np.asarray(q.zeroPoint, np.int64).reshape(-1)) if q.zeroPoint is not None else 0
        details = 0
        if q.details is not None:
            if q.detailsType != QuantizationDetails.BlockwiseQuantization:
                raise ValueError(f"quantization details of type {q.detailsType}")
            d = q.details
            details = self.table(3, (), ((0, "i32", d.scales, 0), (1, "i32", d.zeroPoints, 0),
                                         (2, "i32", d.blockSize, 0)))
        off = self.table(7, ((2, scale), (3, zero), (5, details)),
                         ((6, "i32", q.quantizedDimension, 0), (4, "u8", q.detailsType, 0)))
        self.shared[id(q)] = (off, q)
        return off

    def operator(self, o: Operator) -> int:
        ins, outs = self.ints(o.inputs), self.ints(o.outputs)
        opts = self.options(o.builtinOptions) if o.builtinOptions is not None else 0
        return self.table(5, ((1, ins), (2, outs), (4, opts)),
                          ((0, "u32", o.opcodeIndex, 0), (3, "u8", o.builtinOptionsType, 0)))

    def options(self, opt: Options) -> int:
        key = (opt.table, tuple(opt.fields.items()))
        off = self.shared.get(key)
        if off is None:
            b = self.b
            _, layout = OPTIONS[opt.table]
            b.StartObject(1 + max(slot for slot, _, _ in layout.values()))
            for name, value in opt.fields.items():
                slot, kind, default = layout[name]
                getattr(b, _PREPEND[kind])(slot, value, default)
            off = self.shared[key] = b.EndObject()
        return off

    def opcode(self, oc: OperatorCode) -> int:
        return self.table(4, (), ((3, "i32", oc.builtinCode, 0), (2, "i32", oc.version, 1),
                                  (0, "i8", oc.deprecatedBuiltinCode, 0)))

    def buffer(self, buf: Buffer) -> int:
        return self.table(3, (), ((1, "u64", buf.offset, 0), (2, "u64", buf.size, 0)))

    def signature(self, sd: SignatureDef) -> int:
        ins = self.offsets([self.tensor_map(tm) for tm in sd.inputs])
        outs = self.offsets([self.tensor_map(tm) for tm in sd.outputs])
        return self.table(5, ((0, ins), (1, outs), (2, self.string(sd.signatureKey))),
                          ((4, "u32", sd.subgraphIndex, 0),))

    def tensor_map(self, tm: TensorMap) -> int:
        return self.table(2, ((0, self.string(tm.name)),), ((1, "u32", tm.tensorIndex, 0),))
