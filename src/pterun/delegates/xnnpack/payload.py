"""Read an XNNPACK delegate payload (XNNHeader + XNNGraph flatbuffer + constants) into plain descriptions.

Nothing here computes: :func:`read_graph` checks the header, the flatbuffer identifier and every offset,
decodes values (dtype, dims, external ids, quantization) and nodes (union type + fields by slot), and
resolves constant data to read-only NumPy views. Any inconsistency raises
:class:`~pterun.errors.DelegateError` naming what is wrong.

Example::

    >>> g = read_graph(blob, named_data=lambda key: program.named(key))   # doctest: +SKIP
    >>> [n.name for n in g.nodes]                                           # doctest: +SKIP
    ['StaticTranspose', 'Conv2d', 'StaticTranspose']
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import numpy as np

from pterun._record import Fields
from pterun.delegates.xnnpack.validate import validate
from pterun.errors import DelegateError, PterunError
from pterun import dtypes
from pterun.format.flatbuffer import Buffer, Table

# XNNDatatype
FP32, FP16, QINT8, QUINT8, QINT32, QCINT8, QCINT32, QCINT4, QDINT8, QBINT4, QPINT8, INT32, PFP32, BF16 = range(1, 15)
DATATYPE_NAMES = {1: "fp32", 2: "fp16", 3: "qint8", 4: "quint8", 5: "qint32", 6: "qcint8", 7: "qcint32",
                  8: "qcint4", 9: "qdint8", 10: "qbint4", 11: "qpint8", 12: "int32", 13: "pfp32", 14: "bf16"}
#: pterun's own datatypes, never read from a payload (the reader refuses what DATATYPE_NAMES does not name): the
#: bool and int64 tensors of operators a merged graph holds as kernels (:mod:`.merge`)
BOOL = 100
INT64 = 101
_OWN_NAMES = {BOOL: "bool", INT64: "int64"}


class _StorageDtypes(dict):
    """datatype -> NumPy dtype; bfloat16 comes from ``ml_dtypes``, imported when a bf16 value is first met."""

    def __missing__(self, key):
        if key != BF16:
            raise KeyError(key)
        self[BF16] = dtypes.to_numpy(15)
        return self[BF16]

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default


#: NumPy dtype a tensor of each datatype is stored in (4-bit types: packed bytes).
STORAGE_DTYPES = _StorageDtypes({FP32: np.float32, FP16: np.float16, QINT8: np.int8, QUINT8: np.uint8,
                                 QINT32: np.int32, QCINT8: np.int8, QCINT32: np.int32, QCINT4: np.uint8,
                                 QDINT8: np.int8, QBINT4: np.uint8, INT32: np.int32, BOOL: np.bool_,
                                 INT64: np.int64})
QUANTIZED = frozenset({QINT8, QUINT8, QINT32, QCINT8, QCINT32, QCINT4, QDINT8, QBINT4})
CONSTANT_ONLY = frozenset({QCINT8, QCINT32, QCINT4, QBINT4})  # per-channel / blockwise: weights and biases

# XNNQuantParams union tags
PER_CHANNEL, PER_TENSOR, PER_TOKEN, PER_CHANNEL_GROUP = 1, 2, 3, 4

# flags
VALUE_EXTERNAL_INPUT, VALUE_EXTERNAL_OUTPUT = 1, 2
FLAG_TRANSPOSE_WEIGHTS = 1  # also TRANSPOSE_B of batch matmul
FLAG_TENSORFLOW_SAME_PADDING = 4
FLAG_TENSORFLOW_LEGACY = 4
FLAG_ALIGN_CORNERS = 8
FLAG_KEEP_DIMS = 0x40
INVALID_ID = 0xFFFFFFFF
MAX_EXTERNS = 4096
MAX_DIMS = 6

# -- node tables: union id -> (name, fields); a field is (name, vtable slot, kind) ---------------------------
_1X1 = (("input_id", 4, "u"), ("output_id", 6, "u"), ("flags", 8, "u"))
_2X1 = (("input1_id", 4, "u"), ("input2_id", 6, "u"), ("output_id", 8, "u"), ("flags", 10, "u"))
_CONV = tuple((n, 4 + 2 * i, "u") for i, n in enumerate((
    "padding_top", "padding_right", "padding_bottom", "padding_left", "kernel_height", "kernel_width",
    "subsampling_height", "subsampling_width", "dilation_height", "dilation_width", "group_input_channels",
    "group_output_channels", "groups", "adjustment_height", "adjustment_width", "input1_id", "filter_id",
    "bias_id", "output_id", "flags")))
_POOL = tuple((n, 4 + 2 * i, "u") for i, n in enumerate((
    "padding_top", "padding_right", "padding_bottom", "padding_left", "pooling_height", "pooling_width",
    "stride_height", "stride_width", "dilation_height", "dilation_width", "input_id", "output_id", "flags")))
_CAT = (("axis", 4, "u"), ("input1_id", 6, "u"), ("input2_id", 8, "u"), ("input3_id", 10, "u"),
        ("input4_id", 12, "u"), ("output_id", 14, "u"), ("flags", 16, "u"), ("input5_id", 18, "u"))
_SHAPED = lambda what: (("num_dims", 4, "u"), (what, 6, "a"), ("input_id", 8, "u"), ("output_id", 10, "u"),
                        ("flags", 12, "u"))

NODE_TYPES: dict[int, tuple[str, tuple]] = {
    1: ("Add", _2X1),
    2: ("FullyConnected", (("input1_id", 4, "u"), ("filter_id", 6, "u"), ("bias_id", 8, "u"),
                           ("output_id", 10, "u"), ("flags", 12, "u"))),
    3: ("Softmax", _1X1), 4: ("Sigmoid", _1X1), 5: ("StaticTranspose", _SHAPED("perm")), 6: ("Clamp", _1X1),
    7: ("Conv2d", _CONV), 8: ("Div", _2X1),
    9: ("StaticResizeBilinear2D", (("new_height", 4, "u"), ("new_width", 6, "u"), ("input_id", 8, "u"),
                                   ("output_id", 10, "u"), ("flags", 12, "u"))),
    10: ("StaticConstantPad", (("pre_paddings", 4, "a"), ("post_paddings", 6, "a"), ("padding_value", 8, "f"),
                               ("input_id", 10, "u"), ("output_id", 12, "u"), ("flags", 14, "u"))),
    11: ("AvgPooling2d", _POOL), 12: ("Minimum", _2X1), 13: ("DepthwiseConv2d", _CONV), 14: ("MaxPooling2d", _POOL),
    15: ("Multiply", _2X1), 16: ("Subtract", _2X1), 17: ("Floor", _1X1), 18: ("Convert", _1X1),
    19: ("GlobalAvgPooling2d", _1X1), 20: ("StaticReshape", _SHAPED("new_shape")),
    21: ("ArgMaxPooling2d", tuple((n, 4 + 2 * i, "u") for i, n in enumerate((
        "padding_top", "padding_right", "padding_bottom", "padding_left", "pooling_height", "pooling_width",
        "input_id", "output_value_id", "output_index_id", "flags")))),
    22: ("SquareRoot", _1X1), 23: ("Ceiling", _1X1), 24: ("Hardswish", _1X1),
    25: ("LeakyReLU", (("negative_slope", 4, "f"), ("input_id", 6, "u"), ("output_id", 8, "u"), ("flags", 10, "u"))),
    26: ("Maximum", _2X1), 27: ("Negate", _1X1), 28: ("Square", _1X1),
    29: ("ELU", (("alpha", 4, "f"), ("input_id", 6, "u"), ("output_id", 8, "u"), ("flags", 10, "u"))),
    30: ("Abs", _1X1), 31: ("PReLU", _2X1), 32: ("Concatenate2", _CAT), 33: ("Concatenate3", _CAT),
    34: ("Concatenate4", _CAT),
    35: ("StaticSlice", (("num_dims", 4, "u"), ("offsets", 6, "a"), ("sizes", 8, "a"), ("input_id", 10, "u"),
                         ("output_id", 12, "u"), ("flags", 14, "u"))),
    36: ("ScaledDotProductAttention", ()),
    37: ("BatchMatrixMultiply", _2X1), 38: ("Concatenate5", _CAT), 39: ("ConvTranspose2d", _CONV),
    40: ("ReciprocalSquareRoot", _1X1), 41: ("Log", _1X1), 42: ("Gelu", _1X1), 43: ("Tanh", _1X1),
    44: ("Exp", _1X1), 45: ("Sin", _1X1), 46: ("Copy", _1X1), 47: ("Cos", _1X1),
}


# Plain immutable records (pterun._record.Fields: named tuples that cost little to define).
class Quant(Fields):
    """Quantization of one value: ``kind`` is PER_TENSOR, PER_CHANNEL, PER_CHANNEL_GROUP or PER_TOKEN; ``scale``
    is a float (per tensor) or a float32 array (per channel/group)."""

    kind: int
    scale: object = 1.0
    zero_point: object = 0
    channel_dim: int = 0
    group_size: int = 0
    num_nonbatch_dims: int = 1


class Value(Fields):
    """One graph value: ``external_id`` is its position in the DelegateCall args (None when internal); ``data``
    the raw constant bytes (read-only uint8, None when not constant); ``dq_datatype`` marks a legacy external
    fp32 input the runtime quantizes dynamically."""

    id: int
    datatype: int
    dims: tuple
    external_id: int | None
    flags: int
    data: object
    quant: Quant | None
    dq_datatype: int = 0

    def __new__(cls, id, datatype, dims, external_id, flags, data, quant, dq_datatype=0):  # one per value
        return tuple.__new__(cls, (id, datatype, dims, external_id, flags, data, quant, dq_datatype))

    @property
    def dtype_name(self) -> str:
        return _OWN_NAMES.get(self.datatype) or DATATYPE_NAMES.get(self.datatype, f"datatype {self.datatype}")

    def describe(self) -> str:
        return f"value {self.id} ({self.dtype_name} {list(self.dims)})"


class Node(Fields):
    """One graph node; its type-specific fields read as attributes (``node.input_id``): ``fields`` is the node's
    instance dict (a ``__getattr__`` fallback cost ~1.5 µs a read, ~2,300 reads a MobileNetV2 load, ~6,900 a 130M
    Llama's). No node field shares a record field's or a method's name; a node is immutable as every record is."""

    _instance_dict = True
    index: int
    kind: int
    name: str
    fields: dict
    output_min: float
    output_max: float
    debug_handle: int

    def __new__(cls, index, kind, name, fields, output_min, output_max, debug_handle):  # one per node
        node = tuple.__new__(cls, (index, kind, name, fields, output_min, output_max, debug_handle))
        object.__setattr__(node, "__dict__", fields)
        return node

    def __setattr__(self, name, value):
        raise AttributeError(f"Node is immutable (its field {name!r} cannot be set)")

    def describe(self) -> str:
        return f"node {self.index} (XNN{self.name})"


class Graph(Fields):
    """``values`` by id (in definition order), ``nodes`` in execution order, ``num_externs``."""

    values: dict
    nodes: list
    num_externs: int


def _fail(what: str) -> DelegateError:
    return DelegateError(f"XNNPACK payload: {what}")


def split_blob(blob: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(flatbuffer bytes, constant region or None for a bare legacy flatbuffer), both read-only views."""
    n = len(blob)
    if n < 8:
        raise _fail(f"blob is {n} bytes, too short to hold an XNNGraph")
    if bytes(blob[4:8]) != b"XH00":
        return blob, None
    if n < 30:
        raise _fail(f"blob is {n} bytes, too short for its XH00 header")
    hdr = bytes(blob[8:30])
    hlen, fb_off, fb_size, c_off, c_size = struct.unpack("<HIIIQ", hdr)
    if hlen < 30:
        raise _fail(f"XH00 header length {hlen} is below the minimum of 30")
    if fb_size < 8:
        raise _fail(f"flatbuffer size {fb_size} is too small")
    if fb_off < hlen or fb_off + fb_size > n:
        raise _fail(f"flatbuffer region (offset {fb_off}, {fb_size} bytes) lies outside the {n}-byte blob")
    if c_off < fb_off + fb_size or c_off + c_size > n:
        raise _fail(f"constant region (offset {c_off}, {c_size} bytes) does not follow the flatbuffer inside "
                    f"the {n}-byte blob")
    return blob[fb_off : fb_off + fb_size], blob[c_off : c_off + c_size]


def payload_format(blob: np.ndarray) -> str:
    """What a payload's first bytes say of the release that wrote it: the XNNGraph identifier (``XN01``; ``XN00``
    before it) and its container: ``"XN01 in an XH00 header"`` (constants in the region after the flatbuffer, or
    in named data) or ``"XN00 bare"`` (a flatbuffer alone, constants inside it in ``constant_buffer``)."""
    b = bytes(np.asarray(blob[:8], dtype=np.uint8))
    if b[4:8] == b"XH00":
        try:
            fb, _ = split_blob(np.asarray(blob, dtype=np.uint8))
        except DelegateError as e:
            return f"XH00 header, unreadable ({e})"
        return f"{bytes(fb[4:8]).decode('latin-1')} in an XH00 header"
    return f"{b[4:8].decode('latin-1')} bare"


def _tensor_values(blob: np.ndarray):
    """The XNNTensorValue tables of a payload's value table, in order (None for one that is not a tensor value),
    read from the value table alone; raises what a malformed payload raises (the callers catch it)."""
    fb, _ = split_blob(np.asarray(blob, dtype=np.uint8))
    if bytes(fb[4:8]) not in (b"XN00", b"XN01"):
        raise ValueError("not an XNNPACK payload")
    root = Table.root(Buffer(fb, "XNNPACK payload", error=DelegateError), "XNNGraph")
    for xv in root.tables(8, "XValue"):
        tag, u = xv.union(4, 6, "XValue payload")
        yield u if tag == 1 else u.table(4, "XNNTensorValue") if tag == 2 and u is not None else None


_UNREADABLE = (PterunError, struct.error, IndexError, OverflowError, ValueError, AttributeError)


def external_outputs(blob: np.ndarray) -> frozenset[int] | None:
    """The external ids of a payload's output values (the DelegateCall arguments the delegate writes), read from
    the value table alone; None when the payload cannot be read that far (:func:`read_graph` then says why)."""
    try:
        out = set()
        for tv in _tensor_values(blob):
            if tv is None:
                return None
            if tv.u32(14) & VALUE_EXTERNAL_OUTPUT:
                out.add(tv.u32(12))
        return frozenset(out)
    except _UNREADABLE:
        return None


def quantizes_dynamically(blob: np.ndarray) -> bool:
    """Whether a payload quantizes activations dynamically (a ``qdint8`` value, or a legacy fp32 input quantized at
    run time), read from the value table alone; False when it cannot be read that far."""
    try:
        return any(tv is not None and (tv.i16(4) == QDINT8 or tv.i16(18)) for tv in _tensor_values(blob))
    except _UNREADABLE:
        return False


def weight_bytes(blob: np.ndarray) -> int:
    """What a payload's constants cost the peak memory of a merged call, in bytes (:attr:`XnnpackBackend.merge_bytes`
    bounds their sum): the payload's own size, plus each constant as its constant table declares it, in full where
    LiteRT's engine copies it into its model (4-bit weights, converted on the way), at half its size elsewhere (the
    engine reads those from the program file in place; see :func:`_copied`); the payload's size alone where the
    table cannot be read."""
    blob = np.asarray(blob, dtype=np.uint8)
    try:
        fb, _ = split_blob(blob)
        root = Table.root(Buffer(fb, "XNNPACK payload", error=DelegateError), "XNNGraph")
        sizes = [int(e.u64(6)) for e in root.tables(20, "ConstantDataOffset")]
        copied = _copied(root)
        return int(blob.nbytes) + sum(n if k in copied else n // 2 for k, n in enumerate(sizes))
    except _UNREADABLE:
        return int(blob.nbytes)


def _copied(root: Table) -> frozenset:
    """The constant buffers that 4-bit values use, of a payload's ``XNNGraph`` table ``root``: LiteRT's engine
    writes those into its model as signed int4 (:mod:`.litert_engine.translate`), so the model holds a copy until
    XNNPACK has packed every weight of the call. Other constants, read in place from the program file, cost the peak about half as much: one call
    over a 130M fp32 Llama's delegates (~440 MB of weights read in place) peaked at 897 MB, calls of 256 MB at 640
    MB and of 128 MB at 612 MB, where the 500M 8da4w Llama's copied weights in calls of 128 MB peaked at 556 MB
    and in one call at 812 MB (2-core Zen 3)."""
    out = set()
    for xv in root.tables(8, "XValue"):
        if xv.u8(4) != 2:  # 4-bit values are quantized ones (the union's second member): the others are passed over
            continue
        q = xv.table(6, "XValue payload")
        tv = q.table(4, "XNNTensorValue") if q is not None else None
        if tv is not None and tv.u32(10) and tv.i16(4) in (QCINT4, QBINT4):
            out.add(tv.u32(10))
    return frozenset(out)


def read_graph(blob: np.ndarray, named_data: Callable[[str], np.ndarray]) -> Graph:
    """Parse and validate a whole payload; constant data comes back as read-only uint8 views."""
    fb, const_region = split_blob(np.asarray(blob, dtype=np.uint8))
    ident = bytes(fb[4:8])
    if ident not in (b"XN00", b"XN01"):
        raise _fail(f"XNNGraph identifier is {ident!r}, expected b'XN00' or b'XN01'")
    buf = Buffer(fb, "XNNPACK payload", error=DelegateError)
    try:
        return validate(_GraphReader(buf, const_region, named_data).read())  # geometry vs dims: validate.py
    except (struct.error, IndexError, OverflowError, ValueError) as e:
        if isinstance(e, PterunError):
            raise
        raise _fail(f"corrupt XNNGraph ({type(e).__name__}: {e})") from e


class _GraphReader:
    def __init__(self, buf: Buffer, const_region, named_data):
        self.buf = buf
        self.const_region = const_region
        self.named_data = named_data
        self.root = Table.root(buf, "XNNGraph")

    def read(self) -> Graph:
        r = self.root
        num_externs = r.u32(10)
        if num_externs > MAX_EXTERNS:
            raise _fail(f"num_externs is {num_externs}, above the limit of {MAX_EXTERNS}")
        self.constant_data = r.tables(20, "ConstantDataOffset")
        self.legacy_buffers = r.tables(16, "Buffer")
        values: dict[int, Value] = {}
        for i, xv in enumerate(r.tables(8, "XValue")):
            v = self.read_value(i, xv, num_externs)
            if v.id in values:
                raise _fail(f"two values share id {v.id}")
            values[v.id] = v
        nodes = [self.read_node(i, xn) for i, xn in enumerate(r.tables(6, "XNode"))]
        return Graph(values, nodes, num_externs)

    # -- values ----------------------------------------------------------------------------------------------
    def read_value(self, i: int, xv: Table, num_externs: int) -> Value:
        tag, u = xv.union(4, 6, "XValue payload")
        if tag == 1:
            tv, quant = u, None
        elif tag == 2:
            tv = u.table(4, "XNNTensorValue")
            if tv is None:
                raise _fail(f"quantized value {i} has no tensor_value")
            quant = self.read_quant(i, u)
        else:
            raise _fail(f"value {i} has unknown XValue type {tag}")
        datatype = tv.i16(4)
        if datatype not in DATATYPE_NAMES:
            raise _fail(f"value {i} has invalid datatype {datatype}")
        dims = tv.values(8, "I")
        if tv.u32(6) != len(dims):
            raise _fail(f"value {i} says num_dims={tv.u32(6)} but has {len(dims)} dims")
        if len(dims) > MAX_DIMS:
            raise _fail(f"value {i} has {len(dims)} dims, above XNNPACK's limit of {MAX_DIMS}")
        flags = tv.u32(14)
        if flags & ~(VALUE_EXTERNAL_INPUT | VALUE_EXTERNAL_OUTPUT):
            raise _fail(f"value {i} has unsupported flags {flags:#x}")
        ext = tv.u32(12)  # absent means 0 (the flatbuffer default), not "internal"
        if ext == INVALID_ID:
            ext = None
            if flags:
                raise _fail(f"value {i} is flagged external ({flags:#x}) but has no external id")
        elif ext >= num_externs:
            raise _fail(f"value {i} has external id {ext}, but the graph declares {num_externs} externals")
        elif not flags:
            raise _fail(f"value {i} has external id {ext} but is flagged neither input nor output")
        if quant is not None and datatype not in QUANTIZED:
            raise _fail(f"value {i} has quantization parameters but datatype {DATATYPE_NAMES[datatype]}")
        cbi = tv.u32(10)
        vid = tv.u32(16)
        value = Value(vid, datatype, dims, ext, flags, None, quant, tv.i16(18))
        if cbi:
            if ext is not None:
                raise _fail(f"{value.describe()} is both constant and external")
            data = self.constant_bytes(cbi, value.describe())
            need = self.nbytes(value)
            if len(data) < need:
                raise _fail(f"{value.describe()} needs {need} bytes of constant data, constant {cbi} has "
                            f"{len(data)}")
            value = Value(vid, datatype, dims, ext, flags, data[:need], quant, value.dq_datatype)
        return value

    @staticmethod
    def nbytes(v: Value) -> int:
        if v.datatype in (QCINT4, QBINT4):  # rows of 4-bit pairs; an odd last dim is padded by one element
            rows = math.prod(v.dims[:-1]) if len(v.dims) > 1 else 1
            return rows * ((v.dims[-1] + 1) // 2 if v.dims else 1)
        dt = STORAGE_DTYPES.get(v.datatype)
        if dt is None:
            raise _fail(f"{v.describe()} has a datatype pterun cannot hold as a constant")
        return math.prod(v.dims) * np.dtype(dt).itemsize

    def read_quant(self, i: int, u: Table) -> Quant:
        kind, q = u.union(6, 8, "XNNQuantParams")
        if kind == PER_TENSOR:
            return Quant(PER_TENSOR, float(np.float32(q.f32(4))), q.i32(6))
        if kind == PER_TOKEN:
            return Quant(PER_TOKEN, num_nonbatch_dims=q.i32(4))
        if kind in (PER_CHANNEL, PER_CHANNEL_GROUP):
            group = kind == PER_CHANNEL_GROUP
            idx_slot, num_slot = (12, 14) if group else (8, 10)
            scale = np.array(q.array(4, np.float32), dtype=np.float32)
            sbi = q.u32(idx_slot)
            if sbi:
                n = q.u32(num_slot)
                raw = self.constant_bytes(sbi, f"scales of value {i}")
                # blockwise scales are bf16: widened by their bits (exact), so a 4-bit program never needs ml_dtypes
                dt = np.dtype("<u2") if group else np.dtype("<f4")
                if len(raw) < n * dt.itemsize:
                    raise _fail(f"value {i} has {n} scales but its scale constant holds {len(raw)} bytes")
                scale = np.frombuffer(raw.tobytes()[: n * dt.itemsize], dtype=dt)
                scale = (scale.astype(np.uint32) << 16).view(np.float32) if group else scale.astype(np.float32)
            elif group:
                bits = q.array(10, np.uint16)  # scale_bf16: what runtimes up to 0.6 read first; deprecated in 0.7
                # for scale_buffer_idx, which newer runtimes read instead (and then fp32 scales, never these)
                if len(bits):
                    scale = (np.asarray(bits, np.uint32) << 16).view(np.float32)
                else:  # fp32 scales are rounded to bf16 as the runtime does
                    scale = round_to_bf16(scale)
            if scale.size == 0:
                raise _fail(f"value {i} is quantized per channel but has no scales")
            return Quant(kind, scale, 8 if group else 0, q.i32(6), q.i32(8) if group else 0)
        raise _fail(f"value {i} has unknown quantization type {kind}")

    def constant_bytes(self, k: int, what: str) -> np.ndarray:
        if self.const_region is None:  # bare legacy flatbuffer: data inside the flatbuffer
            if k >= len(self.legacy_buffers):
                raise _fail(f"{what} uses constant buffer {k}, but there are {len(self.legacy_buffers)}")
            view = self.legacy_buffers[k].bytes_view(4)
            arr = np.frombuffer(view if view is not None else b"", np.uint8)
            arr.flags.writeable = False
            return arr
        if k >= len(self.constant_data):
            raise _fail(f"{what} uses constant {k}, but constant_data has {len(self.constant_data)} entries")
        entry = self.constant_data[k]
        key = entry.string(8)
        size = entry.u64(6)
        if key:
            try:
                data = self.named_data(key)
            except (KeyError, PterunError) as e:
                raise _fail(f"{what} needs named data {key!r}, which the program does not have ({e})") from e
            data = np.asarray(data, dtype=np.uint8)
            if len(data) < size:
                raise _fail(f"named data {key!r} has {len(data)} bytes, {what} needs {size}")
            return data[:size]
        off = entry.u64(4)
        if off + size > len(self.const_region):
            raise _fail(f"{what}: constant {k} ({size} bytes at offset {off}) runs past the "
                        f"{len(self.const_region)}-byte constant region")
        return self.const_region[off : off + size]

    # -- nodes -----------------------------------------------------------------------------------------------
    def read_node(self, i: int, xn: Table) -> Node:
        kind, u = xn.union(4, 6, "XNode payload")
        spec = NODE_TYPES.get(kind)
        if spec is None:
            raise _fail(f"node {i} has unknown XNode type {kind}")
        name, layout = spec
        if u is None:
            raise _fail(f"node {i} (XNN{name}) has no payload")
        fields = {}
        for fname, slot, how in layout:
            if how == "u":
                fields[fname] = u.u32(slot)
            elif how == "f":
                fields[fname] = float(u.f32(slot))
            else:
                fields[fname] = tuple(int(x) for x in u.array(slot, np.uint32))
        lo, hi = -math.inf, math.inf
        mm = xn.table(10, "OutputMinMax")
        if mm is not None:
            lo, hi = float(mm.f32(4)), float(mm.f32(6))
            if lo > hi:
                raise _fail(f"node {i} (XNN{name}) has output_min {lo} > output_max {hi}")
        return Node(i, kind, name, fields, lo, hi, xn.u32(8))


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """fp32 scales -> bf16 as XNNPACK's runtime does it (scale by 1.00389105, then truncate), back as fp32."""
    bits = (np.asarray(x, np.float32) * np.float32(1.00389105)).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)
