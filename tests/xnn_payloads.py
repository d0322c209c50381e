"""Synthetic XNNPACK payloads for the delegate tests: a tiny flatbuffer writer (front to back: a table's children
are written after it, so every offset points forward as the format requires), an XNNGraph builder that loads and
runs what it built, runtime tensors for its arguments, and quantization parameter tables.

``ENGINE`` is the engine :meth:`Graph.run` loads with; test_xnnpack.py switches it per test.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from pterun.delegates.xnnpack import load
from pterun.delegates.xnnpack import payload as P
from pterun.interp.tensor import Tensor

F32 = np.float32
ENGINE = "auto"


# ==============================================================================================================
# Tensors
# ==============================================================================================================
def tensor(arr: np.ndarray) -> Tensor:
    arr = np.ascontiguousarray(arr)
    return Tensor(arr.dtype, arr.shape, tuple(range(arr.ndim)), np.frombuffer(arr.tobytes(), np.uint8).copy())


def out_tensor(shape, dtype, capacity=None) -> Tensor:
    """An output tensor; with ``capacity`` it is dynamic, bounded by that shape (same rank)."""
    cap = tuple(capacity if capacity is not None else shape)
    nbytes = max(int(np.prod(cap)), 1) * np.dtype(dtype).itemsize
    t = Tensor(np.dtype(dtype), cap, tuple(range(len(cap))), np.zeros(nbytes, np.uint8), dynamic=capacity is not None)
    t.resize(tuple(shape))
    return t


# ==============================================================================================================
# A minimal flatbuffer writer and XNNGraph payload builder
# ==============================================================================================================
class T:
    """A table: ``fields`` maps vtable slot -> (struct code or 'o' for an offset, value)."""

    def __init__(self, fields: dict):
        self.fields = fields


class V:
    """A vector of scalars (struct code) or of objects ('o')."""

    def __init__(self, code: str, items):
        self.code, self.items = code, list(items)


class Writer:
    def __init__(self, ident: bytes):
        self.buf = bytearray(8)
        self.buf[4:8] = ident

    def finish(self, root: T) -> bytes:
        struct.pack_into("<I", self.buf, 0, self.write(root))
        return bytes(self.buf)

    def align(self, n: int, offset: int = 0) -> None:
        while (len(self.buf) + offset) % n:
            self.buf.append(0)

    def write(self, obj) -> int:
        if isinstance(obj, T):
            return self.table(obj)
        if isinstance(obj, V):
            return self.vector(obj)
        data = obj.encode() if isinstance(obj, str) else bytes(obj)
        self.align(4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(data)) + data + b"\0"
        return pos

    def table(self, t: T) -> int:
        slots = sorted(t.fields)
        n = (slots[-1] - 4) // 2 + 1 if slots else 0
        self.align(2)
        vt = len(self.buf)
        self.buf += bytes(4 + 2 * n)
        self.align(8)
        pos = len(self.buf)
        self.buf += struct.pack("<i", pos - vt)
        children = []
        for slot in slots:
            code, value = t.fields[slot]
            size = 4 if code == "o" else struct.calcsize(code)
            while (len(self.buf) - pos) % size:
                self.buf.append(0)
            struct.pack_into("<H", self.buf, vt + slot, len(self.buf) - pos)
            if code == "o":
                children.append((len(self.buf), value))
                self.buf += bytes(4)
            else:
                self.buf += struct.pack("<" + code, value)
        struct.pack_into("<HH", self.buf, vt, 4 + 2 * n, len(self.buf) - pos)
        for at, child in children:
            struct.pack_into("<I", self.buf, at, self.write(child) - at)
        return pos

    def vector(self, v: V) -> int:
        size = 4 if v.code == "o" else struct.calcsize(v.code)
        self.align(max(size, 4), 4)
        pos = len(self.buf)
        self.buf += struct.pack("<I", len(v.items))
        if v.code != "o":
            self.buf += struct.pack(f"<{len(v.items)}{v.code}", *v.items)
            return pos
        slots = []
        for _ in v.items:
            slots.append(len(self.buf))
            self.buf += bytes(4)
        for at, child in zip(slots, v.items):
            struct.pack_into("<I", self.buf, at, self.write(child) - at)
        return pos


FP32, FP16, QINT8, QUINT8, QINT32 = P.FP32, P.FP16, P.QINT8, P.QUINT8, P.QINT32
NONE = P.INVALID_ID


class Graph:
    """Builds an XNNPACK payload: add values and nodes, then :meth:`blob`."""

    def __init__(self):
        self.values: list = []
        self.nodes: list = []
        self.consts: list[bytes] = [b""]  # index 0 is the "no data" placeholder
        self.n_in = self.n_out = 0
        self.outputs: list = []  # (vid, shape, dtype) in external order

    def const_index(self, data: bytes) -> int:
        self.consts.append(bytes(data))
        return len(self.consts) - 1

    def value(self, dims, dtype=FP32, data=None, quant=None, ext=None, flags=0) -> int:
        vid = len(self.values)
        cbi = 0 if data is None else self.const_index(np.ascontiguousarray(data).tobytes())
        tv = {4: ("h", dtype), 6: ("I", len(dims)), 8: ("o", V("I", dims)), 10: ("I", cbi), 14: ("I", flags),
              16: ("I", vid)}
        tv[12] = ("I", NONE if ext is None else ext)
        tv = T(tv)
        if quant is None:
            self.values.append(T({4: ("B", 1), 6: ("o", tv)}))
        else:
            tag, qt = quant
            self.values.append(T({4: ("B", 2), 6: ("o", T({4: ("o", tv), 6: ("B", tag), 8: ("o", qt)}))}))
        return vid

    def input(self, dims, dtype=FP32, quant=None) -> int:
        self.n_in += 1
        return self.value(dims, dtype, quant=quant, ext=self.n_in - 1, flags=P.VALUE_EXTERNAL_INPUT)

    def output(self, dims, dtype=FP32, quant=None) -> int:
        vid = self.value(dims, dtype, quant=quant, ext=None, flags=0)
        self.outputs.append(vid)
        return vid

    def internal(self, dims, dtype=FP32, quant=None) -> int:
        return self.value(dims, dtype, quant=quant)

    def node(self, name: str, lo=None, hi=None, **fields) -> None:
        kind = {n: k for k, (n, _) in P.NODE_TYPES.items()}[name]
        layout = P.NODE_TYPES[kind][1]
        table = {}
        for fname, slot, how in layout:
            val = fields.get(fname, NONE if fname.endswith("_id") else 0)
            table[slot] = ("o", V("I", val)) if how == "a" else (("f" if how == "f" else "I"), val)
        node = {4: ("B", kind), 6: ("o", T(table)), 8: ("I", 7)}
        if lo is not None or hi is not None:
            node[10] = ("o", T({4: ("f", -math.inf if lo is None else lo), 6: ("f", math.inf if hi is None else hi)}))
        self.nodes.append(T(node))

    def finalize_outputs(self) -> None:
        """Give the outputs external ids after the inputs (as the exporter does) by patching their tables."""
        for k, vid in enumerate(self.outputs):
            tv = self.values[vid].fields[6][1]
            tv = tv.fields[4][1] if 4 in tv.fields and tv.fields[4][0] == "o" else tv
            tv.fields[12] = ("I", self.n_in + k)
            tv.fields[14] = ("I", P.VALUE_EXTERNAL_OUTPUT)

    def blob(self, mode: str = "named", ident: bytes = b"XN01"):
        """(blob, named_data lookup). mode: 'named' (constants in named data), 'region' (in the blob after the
        flatbuffer) or 'legacy' (bare flatbuffer with constant_buffer)."""
        self.finalize_outputs()
        root = {4: ("o", "0"), 6: ("o", V("o", self.nodes)), 8: ("o", V("o", self.values)),
                10: ("I", self.n_in + len(self.outputs))}
        named, region = {}, bytearray()
        if mode == "legacy":
            root[16] = ("o", V("o", [T({4: ("o", V("B", list(c)))}) for c in self.consts]))
        else:
            entries = [T({4: ("Q", 0), 6: ("Q", 0)})]
            for k, c in enumerate(self.consts[1:], 1):
                if mode == "named":
                    named[f"key{k}"] = np.frombuffer(c, np.uint8)
                    entries.append(T({4: ("Q", 2**64 - 1), 6: ("Q", len(c)), 8: ("o", f"key{k}")}))
                else:
                    while len(region) % 16:
                        region.append(0)
                    entries.append(T({4: ("Q", len(region)), 6: ("Q", len(c))}))
                    region += c
            root[20] = ("o", V("o", entries))
        fb = Writer(ident).finish(T(root))
        if mode == "legacy":
            blob = fb
        else:
            fb_pad = fb + bytes(-len(fb) % 16)
            header = bytes(4) + b"XH00" + struct.pack("<HIIIQ", 30, 32, len(fb), 32 + len(fb_pad), len(region))
            blob = header + bytes(32 - len(header)) + fb_pad + bytes(region)
        arr = np.frombuffer(blob, np.uint8)
        return arr, (lambda key: named[key])

    def run(self, inputs, out_shapes=None, mode="named", out_dtypes=None):
        blob, named = self.blob(mode)
        plan = load(blob, named, ENGINE)
        outs = []
        for k, vid in enumerate(self.outputs):
            tv = self.values[vid].fields[6][1]
            tv = tv.fields[4][1] if tv.fields[4][0] == "o" else tv
            dims = tv.fields[8][1].items if out_shapes is None else out_shapes[k]
            dt = out_dtypes[k] if out_dtypes else {FP32: F32, FP16: np.float16, QINT8: np.int8, QUINT8: np.uint8,
                                                   P.INT32: np.int32}.get(tv.fields[4][1], F32)
            outs.append(out_tensor(dims, dt, capacity=[max(d, 1) * 4 for d in dims]))
        plan.execute([tensor(a) for a in inputs] + outs)
        return [t.array.copy() for t in outs]


def per_tensor(scale, zp):
    return P.PER_TENSOR, T({4: ("f", scale), 6: ("i", zp)})


def per_channel(scales, dim):
    return P.PER_CHANNEL, T({4: ("o", V("f", list(scales))), 6: ("i", dim)})


def per_token(nnb=1):
    return P.PER_TOKEN, T({4: ("i", nnb)})


def fc_graph() -> Graph:
    """x [2, 3] -> FullyConnected with constant weights [4, 3] (0..11) and bias [1, 2, 3, 4] -> [2, 4]."""
    g = Graph()
    i = g.input([2, 3])
    w = g.value([4, 3], data=np.arange(12, dtype=F32).reshape(4, 3))
    b = g.value([4], data=np.array([1, 2, 3, 4], F32))
    o = g.output([2, 4])
    g.node("FullyConnected", input1_id=i, filter_id=w, bias_id=b, output_id=o)
    return g


def qb4_fc_graph(wq: np.ndarray, scales: np.ndarray, gs: int, rows: int = 2, bf16_bits: bool = False) -> Graph:
    """x [rows, ic] -> dynamic int8 (per row) -> FullyConnected with 4-bit weights ``wq`` [oc, ic] (-8..7) in groups
    of ``gs`` along ic, scaled by ``scales`` [oc, ic // gs] (fp32 ``scale``; with ``bf16_bits``, their top 16 bits
    in the deprecated ``scale_bf16`` field instead)."""
    oc, ic = wq.shape
    packed = ((wq[:, 0::2] + 8) | ((wq[:, 1::2] + 8) << 4)).astype(np.uint8)
    g = Graph()
    i = g.input([rows, ic])
    qd = g.internal([rows, ic], P.QDINT8, per_token(1))
    fields = {4: ("o", V("f", list(scales.reshape(-1)))), 6: ("i", 0), 8: ("i", gs)}
    if bf16_bits:
        bits = (np.asarray(scales, np.float32).reshape(-1).view(np.uint32) >> 16).astype(np.uint16)
        fields = {4: ("o", V("f", [])), 6: ("i", 0), 8: ("i", gs), 10: ("o", V("H", bits.tolist()))}
    quant = (P.PER_CHANNEL_GROUP, T(fields))
    wv = g.value([oc, ic], P.QBINT4, data=packed, quant=quant)
    o = g.output([rows, oc])
    g.node("Convert", input_id=i, output_id=qd)
    g.node("FullyConnected", input1_id=qd, filter_id=wv, output_id=o)
    return g

