"""The TFLite model format as pterun writes it: the facts of TFLite's schema the translation uses, plain records of
the tables it fills, and :func:`serialize`, which writes them into a flatbuffer (:mod:`.fbwrite`).

The facts come from TFLite's ``schema.fbs`` (the schema LiteRT reads): the ``BuiltinOperator`` code of every
operator the translation can emit, the ``TensorType``, ``Padding``, ``ActivationFunctionType`` and
``QuantizationDetails`` codes, and for each options table it fills, its index in the ``BuiltinOptions`` union and
its fields as (slot, scalar type, default). A field's slot is its position in its table, deprecated fields
counted (``schema.fbs``'s ``id``); a field left out of a record holds the schema's default. Field names are
spelled as LiteRT's Python API spells them (``fusedActivationFunction`` for ``fused_activation_function``).

The records hold what pterun sets and nothing else; :func:`serialize` writes each kind of table with one fixed
shape (every field it sets, defaults included), so a model of a few thousand tables is written in milliseconds:
the ``flatbuffers`` package's Builder took ~10 µs a table.

Example::

    >>> m = Model(operatorCodes=[], subgraphs=[SubGraph([Tensor(np.array([2], np.int32), TensorType.FLOAT32)],
    ...           [], [0], [0])], buffers=[Buffer()])
    >>> bytes(serialize(m)[4:8])
    b'TFL3'
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pterun.delegates.xnnpack.litert_engine.fbwrite import Shape, Writer

__all__ = ["ActivationFunctionType", "BlockwiseQuantization", "Buffer", "BuiltinOperator", "BuiltinOptions",
           "ExternalBuffer", "Model",
           "Operator", "OperatorCode", "Options", "Padding", "QuantizationDetails", "QuantizationParameters",
           "SignatureDef", "SubGraph", "Tensor", "TensorMap", "TensorType", "options",
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
    REVERSE_V2=105, QUANTIZE=114, HARD_SWISH=117, SELECT_V2=123, BATCH_MATMUL=126, CUMSUM=128, BROADCAST_TO=130,
    GELU=150, DYNAMIC_UPDATE_SLICE=151)
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
    a SLICE by a run-time size, needs it), None where the shape is fixed; ``external``: the id of the
    :class:`ExternalBuffer` its data is read from (``external_buffer``, read by LiteRT's CompiledModel only), 0 for
    none."""

    __slots__ = ("shape", "type", "buffer", "quantization", "name", "variable", "signature", "external")

    def __init__(self, shape, type: int, buffer: int = 0, quantization=None, name: str = "", variable: bool = False,
                 signature=None, external: int = 0):
        self.shape, self.type, self.buffer, self.quantization, self.name = shape, type, buffer, quantization, name
        self.variable, self.signature, self.external = variable, signature, external


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


class ExternalBuffer(_Record):
    """``length`` bytes at ``offset`` of the file ``groups[group]`` names (``Model.external_buffer_groups``),
    which LiteRT's CompiledModel maps where a tensor names ``id``; the offset must be 64-byte aligned."""

    __slots__ = ("id", "group", "offset", "length")

    def __init__(self, id: int, group: int, offset: int, length: int):
        self.id, self.group, self.offset, self.length = id, group, offset, length


class Model(_Record):
    """``externalGroups``: the paths of the files :class:`ExternalBuffer` ``externalBuffers`` read from."""

    __slots__ = ("operatorCodes", "subgraphs", "buffers", "signatureDefs", "description", "version",
                 "externalGroups", "externalBuffers")

    def __init__(self, operatorCodes: list, subgraphs: list, buffers: list, signatureDefs: list | None = None,
                 description: str = "", version: int = 3, externalGroups=(), externalBuffers=()):
        self.operatorCodes, self.subgraphs, self.buffers = operatorCodes, subgraphs, buffers
        self.signatureDefs, self.description, self.version = signatureDefs, description, version
        self.externalGroups, self.externalBuffers = list(externalGroups), list(externalBuffers)


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
def serialize(model: Model) -> bytearray:
    """The flatbuffer of ``model`` (file identifier ``TFL3``), written front to back (:mod:`.fbwrite`)."""
    w = Writer(b"TFL3")
    sigs, ext = model.signatureDefs is not None, bool(model.externalBuffers)
    shape = _MODEL[sigs, ext]
    pos = w.table(shape, (model.version,) + (0,) * (len(shape.at) - 1))
    w.patch(0, pos)
    at = shape.at
    w.patch(pos + at[1], _tables(w, _opcode, model.operatorCodes))
    w.patch(pos + at[2], _tables(w, _subgraph, model.subgraphs))
    w.patch(pos + at[3], w.string(model.description))
    w.patch(pos + at[4], _tables(w, _buffer, model.buffers))
    if sigs:
        w.patch(pos + at[5], _tables(w, _signature, model.signatureDefs))
    if ext:
        w.patch(pos + at[-2], _tables(w, _group, model.externalGroups))
        w.patch(pos + at[-1], _tables(w, _external, model.externalBuffers))
    return w.buf


# each table's fields as (slot in schema.fbs, type), in the order the functions below give their values
_MODEL = {(sigs, ext): Shape(((0, "u32"), (1, "off"), (2, "off"), (3, "off"), (4, "off"))
                             + (((7, "off"),) if sigs else ()) + (((8, "off"), (9, "off")) if ext else ()))
          for sigs in (False, True) for ext in (False, True)}
_SUBGRAPH = Shape(((0, "off"), (1, "off"), (2, "off"), (3, "off"), (4, "off")))
_TENSOR = {(q, sig, ext): Shape(((0, "off"), (1, "i8"), (2, "u32"), (3, "off"), (5, "bool"))
                                + (((4, "off"),) if q else ()) + (((7, "off"),) if sig else ())
                                + (((10, "u32"),) if ext else ()))
           for q in (False, True) for sig in (False, True) for ext in (False, True)}
_GROUP = Shape(((0, "off"),))
_EXTERNAL = Shape(((0, "u32"), (1, "u32"), (2, "u64"), (3, "u64")))
# scale, zero point, details (each there or not), then details type and quantized dimension
_QUANT = {have: Shape(tuple((slot, "off") for slot, there in zip((2, 3, 5), have) if there) + ((4, "u8"), (6, "i32")))
          for have in ((a, b, c) for a in (False, True) for b in (False, True) for c in (False, True))}
_BLOCKWISE = Shape(((0, "i32"), (1, "i32"), (2, "i32")))
_OPERATOR = {opts: Shape(((0, "u32"), (1, "off"), (2, "off"), (3, "u8")) + (((4, "off"),) if opts else ()))
             for opts in (False, True)}
_OPTIONS = {table: Shape(tuple((slot, kind) for slot, kind, _ in layout.values()))
            for table, (_, layout) in OPTIONS.items()}
_OPCODE = Shape(((0, "i8"), (2, "i32"), (3, "i32")))
_BUFFER = Shape(((1, "u64"), (2, "u64")))
_SIGNATURE = Shape(((0, "off"), (1, "off"), (2, "off"), (4, "u32")))
_TENSOR_MAP = Shape(((0, "off"), (1, "u32")))


def _tables(w: Writer, write, items: list) -> int:
    """A vector of the tables ``write(w, item)`` writes after it."""
    vector = w.slots(len(items))
    w.point(vector, [write(w, item) for item in items])
    return vector


def _ints(values) -> np.ndarray:
    return np.asarray(values, "<i4").reshape(-1)


def _subgraph(w: Writer, sg: SubGraph) -> int:
    pos = w.table(_SUBGRAPH, (0, 0, 0, 0, 0))
    at = _SUBGRAPH.at
    w.patch(pos + at[0], _tables(w, _tensor, sg.tensors))
    w.patch(pos + at[1], w.vector(_ints(sg.inputs)))
    w.patch(pos + at[2], w.vector(_ints(sg.outputs)))
    w.patch(pos + at[3], _tables(w, _operator, sg.operators))
    w.patch(pos + at[4], w.string(sg.name))
    return pos


def _tensor(w: Writer, t: Tensor) -> int:
    q, sig, ext = t.quantization, t.signature, t.external
    shape = _TENSOR[q is not None, sig is not None, bool(ext)]
    values = (0, t.type, t.buffer, 0, t.variable) + (0,) * ((q is not None) + (sig is not None))
    pos = w.table(shape, values + (ext,) if ext else values)
    at = shape.at
    w.patch(pos + at[0], w.vector(_ints(t.shape)))
    w.patch(pos + at[3], w.string(t.name or ""))
    k = 5
    if q is not None:
        w.patch(pos + at[k], _quantization(w, q))
        k += 1
    if sig is not None:
        w.patch(pos + at[k], w.vector(_ints(sig)))
    return pos


def _quantization(w: Writer, q: QuantizationParameters) -> int:
    children = []
    if q.scale is not None:
        children.append(lambda: w.vector(np.asarray(q.scale, "<f4").reshape(-1)))
    if q.zeroPoint is not None:
        children.append(lambda: w.vector(np.asarray(q.zeroPoint, "<i8").reshape(-1)))
    if q.details is not None:
        if q.detailsType != QuantizationDetails.BlockwiseQuantization:
            raise ValueError(f"quantization details of type {q.detailsType}")
        d = q.details
        children.append(lambda: w.table(_BLOCKWISE, (d.scales, d.zeroPoints, d.blockSize)))
    shape = _QUANT[q.scale is not None, q.zeroPoint is not None, q.details is not None]
    pos = w.table(shape, (0,) * len(children) + (q.detailsType, q.quantizedDimension))
    for k, write in enumerate(children):
        w.patch(pos + shape.at[k], write())
    return pos


def _operator(w: Writer, o: Operator) -> int:
    opts = o.builtinOptions
    shape = _OPERATOR[opts is not None]
    values = (o.opcodeIndex, 0, 0, o.builtinOptionsType)
    pos = w.table(shape, values + (0,) if opts is not None else values)
    at = shape.at
    w.patch(pos + at[1], w.vector(_ints(o.inputs)))
    w.patch(pos + at[2], w.vector(_ints(o.outputs)))
    if opts is not None:
        _, layout = OPTIONS[opts.table]
        fields = opts.fields
        w.patch(pos + at[4], w.table(_OPTIONS[opts.table],
                                     [fields.get(name, default) for name, (_, _, default) in layout.items()]))
    return pos


def _opcode(w: Writer, oc: OperatorCode) -> int:
    return w.table(_OPCODE, (oc.deprecatedBuiltinCode, oc.version, oc.builtinCode))


def _buffer(w: Writer, buf: Buffer) -> int:
    return w.table(_BUFFER, (buf.offset, buf.size))


def _group(w: Writer, path: str) -> int:
    pos = w.table(_GROUP, (0,))
    w.patch(pos + _GROUP.at[0], w.string(path))
    return pos


def _external(w: Writer, e: ExternalBuffer) -> int:
    return w.table(_EXTERNAL, (e.id, e.group, e.offset, e.length))


def _signature(w: Writer, sd: SignatureDef) -> int:
    pos = w.table(_SIGNATURE, (0, 0, 0, sd.subgraphIndex))
    at = _SIGNATURE.at
    w.patch(pos + at[0], _tables(w, _tensor_map, sd.inputs))
    w.patch(pos + at[1], _tables(w, _tensor_map, sd.outputs))
    w.patch(pos + at[2], w.string(sd.signatureKey))
    return pos


def _tensor_map(w: Writer, tm: TensorMap) -> int:
    pos = w.table(_TENSOR_MAP, (0, tm.tensorIndex))
    w.patch(pos + _TENSOR_MAP.at[0], w.string(tm.name))
    return pos
