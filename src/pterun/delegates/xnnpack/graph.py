"""The typed XNNPACK graph every engine compiles from: values, nodes and quantization parameters.

:mod:`.payload` reads and validates the bytes; :class:`Graph` is what the engines see: the values by id
(:class:`Value`: datatype, dims, external id, constant bytes, :class:`Quant`), the nodes in execution order
(:class:`Node`: type name, fields, fused output clamp), the external inputs and outputs in argument order,
and constant decoding shared by every engine (stored arrays, 4-bit unpacking, dequantized real values,
per-channel scales). Engines (:mod:`.numpy_engine`, :mod:`.litert_engine`) import this module, never the
reader, and never each other.

Example::

    >>> g = Graph.read(blob, named_data)                                   # doctest: +SKIP
    >>> [v.external_id for v in g.inputs], [n.name for n in g.nodes][:2]   # doctest: +SKIP
    ([0], ['StaticTranspose', 'Conv2d'])
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pterun.delegates.xnnpack import payload as _payload
from pterun.delegates.xnnpack import quant as Q
from pterun.delegates.xnnpack.payload import (  # noqa: F401  (the graph's vocabulary, re-exported for engines)
    BF16, BOOL, CONSTANT_ONLY, DATATYPE_NAMES, FLAG_ALIGN_CORNERS, FLAG_KEEP_DIMS, FLAG_TENSORFLOW_LEGACY,
    FLAG_TENSORFLOW_SAME_PADDING, FLAG_TRANSPOSE_WEIGHTS, FP16, FP32, INT32, INT64, INVALID_ID, NODE_TYPES,
    PER_CHANNEL, PER_CHANNEL_GROUP, PER_TENSOR, PER_TOKEN, QBINT4, QCINT4, QCINT8, QCINT32, QDINT8, QINT8, QINT32,
    QUANTIZED, QUINT8, STORAGE_DTYPES, VALUE_EXTERNAL_INPUT, VALUE_EXTERNAL_OUTPUT, Node, Quant, Value)
from pterun.errors import DelegateError

__all__ = ["Graph", "MEAN", "KERNEL", "KV_SHADOW", "KV_UPDATE", "PICK", "SDPA", "EXTRA_NODE_TYPES",
           "BF16", "BOOL", "CONSTANT_ONLY", "DATATYPE_NAMES", "FLAG_ALIGN_CORNERS", "FLAG_KEEP_DIMS",
           "FLAG_TENSORFLOW_LEGACY", "FLAG_TENSORFLOW_SAME_PADDING", "FLAG_TRANSPOSE_WEIGHTS", "FP16", "FP32", "INT32",
           "INT64", "INVALID_ID", "NODE_TYPES", "PER_CHANNEL", "PER_CHANNEL_GROUP", "PER_TENSOR", "PER_TOKEN", "QBINT4",
           "QCINT4", "QCINT8", "QCINT32", "QDINT8", "QINT8", "QINT32", "QUANTIZED", "QUINT8", "STORAGE_DTYPES",
           "VALUE_EXTERNAL_INPUT", "VALUE_EXTERNAL_OUTPUT", "Node", "Quant", "Value"]

F32 = np.float32
Fail = Callable[[str], Exception]

#: Node kinds of pterun's own, beyond the payload format's, which merged graphs hold for the operators the program
#: ran between two delegates (:mod:`.merge`): a mean over ``axes`` (fields ``input_id``, ``output_id``, ``axes``,
#: ``keepdim``), and a portable operator held as itself (fields ``input1_id``, ``input2_id``, ... in the
#: operator's order, ``output_id`` its first output, ``op`` its name, ``args`` its schema arguments with
#: :class:`pterun.delegates.KernelArg` for the tensors, ``call`` the kernel: the NumPy engine runs that, the
#: LiteRT engine its lowering to TFLite operators). Two more hold an LLM's KV cache and attention, for the LiteRT
#: engine alone (:mod:`.litert_engine.attention`): ``KvUpdate`` writes rows into a cache held flat (fields
#: ``input1_id`` the cache, ``input2_id`` the rows, ``input3_id`` the int32 element offset, ``output_id``: the cache
#: again, in place) and ``Sdpa`` attends over the first positions of two such caches (``input1_id`` the query
#: ``[1, S, Hq, D]``, ``input2_id`` and ``input3_id`` the key and value caches, ``input4_id`` each key's position,
#: ``input5_id`` the last position each query row may see, ``output_id``; ``hkv``, ``hq``, ``d``, ``s``,
#: ``scale``, ``causal``); ``input2_id`` and ``input3_id`` may instead be a cache's twin (``[Hkv, L, D]`` for keys,
#: ``[Hkv, D, L]`` for values), which ``KvShadow`` keeps (``input1_id`` the twin, ``input2_id`` the rows,
#: ``input3_id`` the int32 start, ``output_id``: the twin again, in place; ``values``).
#: ``Pick`` is a ``select_copy``: the item ``element`` (negative: counted from the end) along ``dim`` (fields
#: ``input_id``, ``output_id``, ``dim``, ``element``), a dim the run-time size may decide.
MEAN = -1
KERNEL = -2
KV_UPDATE = -3
SDPA = -4
KV_SHADOW = -5
PICK = -6
EXTRA_NODE_TYPES = {MEAN: "Mean", KERNEL: "Kernel", KV_UPDATE: "KvUpdate", SDPA: "Sdpa", KV_SHADOW: "KvShadow",
                    PICK: "Pick"}


def _fail(what: str) -> DelegateError:
    return DelegateError(f"XNNPACK payload: {what}")


class Graph:
    """One delegate's graph. ``values`` by id (definition order), ``nodes`` in execution order, ``inputs`` and
    ``outputs`` the external values sorted by external id. Constant decodings are cached per value."""

    __slots__ = ("values", "nodes", "num_externs", "inputs", "outputs", "_consts")

    def __init__(self, values: dict[int, Value], nodes: list[Node], num_externs: int):
        self.values = values
        self.nodes = nodes
        self.num_externs = num_externs
        ext = sorted((v for v in values.values() if v.external_id is not None), key=lambda v: v.external_id)
        self.inputs = [v for v in ext if v.flags & VALUE_EXTERNAL_INPUT]
        self.outputs = [v for v in ext if v.flags & VALUE_EXTERNAL_OUTPUT]
        self._consts: dict[int, np.ndarray] = {}

    @classmethod
    def read(cls, blob: np.ndarray, named_data: Callable[[str], np.ndarray]) -> Graph:
        """Read and validate a payload (:func:`.payload.read_graph`) into a typed graph."""
        return cls.of(_payload.read_graph(np.asarray(blob, dtype=np.uint8), named_data))

    @classmethod
    def of(cls, g) -> Graph:
        """The typed graph of a :class:`.payload.Graph` record (a Graph is returned as it is)."""
        return g if isinstance(g, Graph) else cls(g.values, g.nodes, g.num_externs)

    # -- values ------------------------------------------------------------------------------------------------
    def value(self, vid: int, fail: Fail = _fail) -> Value:
        v = self.values.get(vid)
        if v is None:
            raise fail(f"refers to value {vid}, which the graph does not define")
        return v

    def is_const(self, vid: int, fail: Fail = _fail) -> bool:
        return self.value(vid, fail).data is not None

    def producers(self) -> dict[int, Node]:
        """value id -> the node that writes it (nodes without an ``output_id`` field are left out)."""
        out = {}
        for n in self.nodes:
            for f in ("output_id", "output_value_id", "output_index_id"):
                if f in n.fields:
                    out[n.fields[f]] = n
        return out

    def work_per_node(self) -> float:
        """Work of an average node at the values' declared dims (the upper bounds of dynamic ones): multiply-adds
        for a convolution, fully-connected or batch-matmul node, output elements for any other. Engines size
        their thread count by it."""
        total = counted = 0
        for n in self.nodes:
            out = self.values.get(n.fields.get("output_id"))
            if out is None:
                continue
            per_output = 1
            if n.fields.get("filter_id") in self.values:
                channels = out.dims[-1] if out.dims else 1  # NHWC / [rows, out]: the filter holds per_output each
                per_output = math.prod(self.values[n.fields["filter_id"]].dims) // max(channels, 1)
            elif n.name == "BatchMatrixMultiply" and n.fields.get("input1_id") in self.values:
                dims = self.values[n.fields["input1_id"]].dims
                per_output = dims[-1] if dims else 1
            total += math.prod(out.dims) * per_output
            counted += 1
        return total / counted if counted else 0.0

    # -- constants ---------------------------------------------------------------------------------------------
    def const(self, vid: int, fail: Fail = _fail) -> np.ndarray:
        """A constant as stored (4-bit weights unpacked to int8 minus their zero point), shaped by its dims.

        Everything but 4-bit data is a zero-copy read-only view of the program's bytes."""
        arr = self._consts.get(vid)
        if arr is None:
            v = self.value(vid, fail)
            if v.data is None:
                raise fail(f"expects {v.describe()} to be a constant")
            if v.datatype in (QCINT4, QBINT4):
                cols = v.dims[-1] if v.dims else 1
                arr = Q.unpack_int4(v.data, len(v.data) // ((cols + 1) // 2), cols, 8).reshape(v.dims)
            else:
                arr = np.frombuffer(v.data, dtype=STORAGE_DTYPES[v.datatype]).reshape(v.dims)  # zero-copy
            self._consts[vid] = arr
        return arr

    def real_const(self, vid: int, fail: Fail = _fail) -> np.ndarray:
        """A constant as real float32 values (dequantized with its per-tensor/channel/group scales)."""
        v, arr = self.value(vid, fail), self.const(vid, fail)
        q = v.quant
        if q is None:  # float32 data is used where it lies (read-only, in the program's buffer)
            return arr.astype(F32, copy=not arr.flags.aligned)
        if q.kind == PER_TENSOR:
            return Q.dequantize(arr, q.scale, q.zero_point)
        if q.kind == PER_CHANNEL:
            return arr.astype(F32) * self.channel_scale(vid, fail)
        if q.kind == PER_CHANNEL_GROUP:
            oc, ic = arr.shape
            gs = q.group_size
            if gs <= 0 or ic % gs or q.scale.size != oc * (ic // gs):
                raise fail(f"{v.describe()} has group size {gs} and {q.scale.size} scales, which do not "
                           f"tile its [{oc}, {ic}] shape")
            scales = np.repeat(q.scale.reshape(oc, ic // gs), gs, axis=1)
            return (arr.astype(F32) * scales).astype(F32)
        raise fail(f"{v.describe()} cannot be a constant with dynamic quantization")

    def channel_scale(self, vid: int, fail: Fail = _fail) -> np.ndarray:
        """Per-channel scales of a constant, shaped to broadcast along its channel dim."""
        v = self.value(vid, fail)
        q = v.quant
        nd = max(len(v.dims), 1)
        if not 0 <= q.channel_dim < nd or v.dims[q.channel_dim] != q.scale.size:
            raise fail(f"{v.describe()} has {q.scale.size} scales along dim {q.channel_dim}")
        return Q.channel_scales(q.scale, nd, q.channel_dim)
