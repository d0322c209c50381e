"""A TFLite model written in memory: tensors, constant buffers and operators, packed into one flatbuffer.

The model's tables are :mod:`.tflite`'s records, and :func:`.tflite.serialize` writes the flatbuffer
(:attr:`ModelWriter.S` is that module: the schema's codes for the translation's rules). Constant data is not put
inside the flatbuffer: it follows it, 64-byte aligned, each buffer pointing at its bytes with
``Buffer.offset``/``size``, so the weights are copied once, straight from the payload's arrays into the model's
bytes.
"""

from __future__ import annotations

import numpy as np

from pterun._record import Fields
from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine.env import Unsupported
from pterun.delegates.xnnpack.litert_engine.memory import mapping_of, new_bytes
from pterun.format.mapped import file_of

__all__ = ["Laying", "ModelWriter", "Unwritten", "combine"]


#: operators whose first version LiteRT registers is above 1
_VERSIONS = {"BROADCAST_TO": 2}


class Unwritten(Fields):
    """A model laid out but not yet written: its flatbuffer (``fb``, every buffer's offset and size set), where
    constant data starts (``at``), each constant's (offset, source array, XOR byte), the model's size, and the
    (offset, size) ranges only XNNPACK's weight packing reads. :meth:`fill` writes the bytes; the packed-weight
    cache can name the model without them (:func:`.cache.model_key`) and load a file it wrote before."""

    fb: bytes
    at: int
    blobs: tuple
    size: int
    packed: tuple
    #: the constants read from program files in place (:meth:`Laying.external`): (path, the file's status when
    #: pterun mapped it, offset, size, whether only weight packing reads it)
    files: tuple = ()
    #: per signature, the tensor index of each of its outputs by name (:func:`_named`), or None
    outputs: tuple = ()

    @property
    def sources(self) -> tuple:
        """The arrays the constants come from."""
        return tuple(data for _, data, _ in self.blobs)

    def fill(self) -> bytes:
        """The model's bytes: one copy of the constants, straight from their sources."""
        fb, at = self.fb, self.at
        made = new_bytes(self.size)
        if made is None:  # no C API: the same bytes, assembled by join
            parts, end = [fb, bytes(at - len(fb))], at
            for start, data, xor in self.blobs:
                parts.append(bytes(start - end))
                parts.append(memoryview(np.bitwise_xor(data, np.uint8(xor)) if xor else np.ascontiguousarray(data)))
                end = start + data.size
            parts.append(bytes(self.size - end))
            return b"".join(parts)
        model, out = made  # every byte written
        out[:len(fb)] = np.frombuffer(fb, np.uint8)
        end = len(fb)
        for start, data, xor in self.blobs:
            out[end:start] = 0
            dst = out[start:start + data.size]
            if xor:
                np.bitwise_xor(data, np.uint8(xor), out=dst)
            else:
                dst[...] = data
            end = start + data.size
        out[end:] = 0
        return model


class ModelWriter:
    """The model being written. ``no(what)`` makes the exception a missing operator raises (subclasses say where)."""

    S = TFL  # the schema's codes (``self.S.TensorType.INT8``, ...) and records

    def __init__(self):
        self.tensors: list[TFL.Tensor] = []
        self.operators: list[TFL.Operator] = []
        self.opcodes: dict[int, int] = {}
        self.codes: list[TFL.OperatorCode] = []
        self.buffers = [TFL.Buffer()]  # buffer 0: the empty sentinel TFLite requires
        # (buffer index, bytes to place after the flatbuffer, a byte to XOR them with on the way or 0)
        self.blobs: list[tuple[int, np.ndarray, int]] = []
        self.op_names: list[str] = []
        self.extra_subgraphs = 0  # beyond the first, with their signatures (see :func:`combine`)

    def no(self, what: str) -> Exception:
        return ValueError(what)

    def add_tensor(self, shape, ttype: int, buf: int = 0, quant=None, name: str = "", variable: bool = False,
                   signature=None) -> int:
        self.tensors.append(TFL.Tensor(np.asarray(shape, np.int32), ttype, buf, quant, name, variable, signature))
        return len(self.tensors) - 1

    def buffer(self, data: np.ndarray, xor: int = 0) -> int:
        """A buffer holding ``data``'s bytes, each XORed with ``xor`` as it is copied into the model (4-bit weights
        change sign convention that way without a temporary copy of them)."""
        self.buffers.append(TFL.Buffer())
        self.blobs.append((len(self.buffers) - 1, np.asarray(data).reshape(-1).view(np.uint8), xor))
        return len(self.buffers) - 1

    def const(self, arr: np.ndarray, tname: str, quant=None) -> int:
        arr = np.ascontiguousarray(arr)
        return self.add_tensor(list(arr.shape), getattr(self.S.TensorType, tname), self.buffer(arr), quant)

    def i32(self, values) -> int:
        return self.const(np.asarray(values, np.int32), "INT32")

    def op(self, name: str, inputs: list, outputs: list, options: str | None = None, **fields) -> None:
        """Operator ``name`` reading tensors ``inputs`` (-1: an optional one left out) and writing ``outputs``, with
        options table ``options`` holding ``fields`` (the others at the schema's defaults)."""
        code = vars(TFL.BuiltinOperator).get(name)
        if code is None:
            raise self.no(f"pterun writes no TFLite {name} operator")
        if code not in self.opcodes:
            self.opcodes[code] = len(self.codes)
            # codes past 127 have a placeholder in the old byte-wide field
            self.codes.append(TFL.OperatorCode(code, min(code, 127), _VERSIONS.get(name, 1)))
        o = TFL.Operator(self.opcodes[code], np.asarray(inputs, np.int32), np.asarray(outputs, np.int32))
        if options is not None:
            o.builtinOptionsType, o.builtinOptions = TFL.options(options, fields)
        self.operators.append(o)
        self.op_names.append(name)

    def packed_buffers(self) -> list[int]:
        """The buffers only XNNPACK's weight packing reads: filters and biases of convolutions and fully-connected
        layers that no other operator reads."""
        packed, other = set(), set()
        for name, o in zip(self.op_names, self.operators):
            slots = _PACKED_INPUTS.get(name, ())
            for i, t in enumerate(o.inputs.tolist()):
                (packed if i in slots else other).add(t)
        return sorted({self.tensors[t].buffer for t in packed - other if t >= 0} - {0})

    def subgraph(self, ins: list[int], outs: list[int], name: str = "main") -> TFL.SubGraph:
        return TFL.SubGraph(self.tensors, self.operators, np.asarray(ins, np.int32), np.asarray(outs, np.int32), name)

    def serialize(self, ins: list[int], outs: list[int]) -> bytes:
        return self.layout(ins, outs).fill()

    def layout(self, ins: list[int], outs: list[int]) -> Laying:
        """The model of one subgraph, to be laid out (see :class:`Laying`) and then written."""
        return Laying(self, [self.subgraph(ins, outs)])

    def signed(self, ins: list[int], outs: list[int]) -> Laying:
        """:meth:`layout` with one signature, ``main``, naming input ``j`` ``i{j:04d}`` and output ``j``
        ``o{j:04d}`` (LiteRT's CompiledModel finds tensors by signature)."""
        maps = [[TFL.TensorMap(f"{p}{j:04d}", int(t)) for j, t in enumerate(ts)] for p, ts in (("i", ins), ("o", outs))]
        return Laying(self, [self.subgraph(ins, outs)], [TFL.SignatureDef("main", 0, *maps)])

    def _serialize(self, subgraphs: list, signatures: list | None = None) -> bytes:
        return self._layout(subgraphs, signatures).fill()

    def _layout(self, subgraphs: list, signatures: list | None = None, packed_buffers=None,
                external: Laying | None = None) -> Unwritten:
        """The model laid out (see :class:`Unwritten`); ``packed_buffers``: the buffers only weight packing reads
        (:meth:`packed_buffers` by default); ``external``: the :class:`Laying` whose constants in program files
        (:meth:`Laying.in_files`) are read from there."""
        packed_buffers = set(self.packed_buffers() if packed_buffers is None else packed_buffers)
        files = external.in_files() if external else {}
        groups = list(dict.fromkeys(path for path, _, _ in files.values()))
        ids = {b: k + 1 for k, b in enumerate(files)}  # id 0 means none
        m = TFL.Model(self.codes, subgraphs, self.buffers, signatures, "pterun XNNPACK delegate", externalGroups=groups,
                      externalBuffers=[TFL.ExternalBuffer(ids[b], groups.index(path), offset, data.size)
                                       for b, (path, _, (offset, data)) in files.items()])
        inline = [blob for blob in self.blobs if blob[0] not in files]
        for b in files:
            self.buffers[b].offset = self.buffers[b].size = 0
        for t in self.tensors:  # the records say what the last layout wrote, as the buffers' offsets do
            t.external = ids.get(t.buffer, 0)
        # constant data follows the flatbuffer (Buffer.offset/size), 64-byte aligned. Offsets are set from a bound
        # on the flatbuffer's size, so it is packed once (twice only if the bound was too small)
        at = _align(self.size_bound() + 64 * len(files) + sum(len(p) + 64 for p in groups))
        while True:
            pos = at
            for b, data, _ in inline:
                self.buffers[b].offset, self.buffers[b].size = pos, data.size
                pos = _align(pos + data.size)
            fb = self._pack(m)
            if len(fb) <= at:
                break
            at = _align(len(fb) + 4096)
        blobs = tuple((self.buffers[b].offset, data, xor) for b, data, xor in inline)
        packed = tuple((self.buffers[b].offset, self.buffers[b].size) for b in sorted(packed_buffers - set(files)))
        read = tuple((path, st, offset, data.size, b in packed_buffers)
                     for b, (path, st, (offset, data)) in files.items())
        outputs = tuple(_named([(m.name, m.tensorIndex) for m in s.outputs]) for s in signatures) if signatures \
            else (_named([(subgraphs[0].tensors[t].name, t) for t in subgraphs[0].outputs.tolist()]),)
        return Unwritten(bytes(fb), at, blobs, _align(pos), packed, read, outputs)

    def size_bound(self) -> int:
        """An upper bound on the packed flatbuffer's size (vtables, strings and vectors with their padding)."""
        n = 4096 + 64 * len(self.buffers) + 48 * len(self.codes) + 256 * self.extra_subgraphs
        for t in self.tensors:
            n += 160 + 4 * len(t.shape) + len(t.name or "")
            q = t.quantization
            if q is not None:
                n += 96 + 12 * (np.size(q.scale) if q.scale is not None else 0) + 8 * np.size(q.zeroPoint)
        for o in self.operators:
            n += 160 + 4 * (len(o.inputs) + len(o.outputs))
        return n

    def _pack(self, m: TFL.Model) -> bytearray:
        return TFL.serialize(m)


class Laying:
    """A writer's model about to be laid out: what :meth:`ModelWriter.layout`, :meth:`ModelWriter.signed` and
    :func:`combine` give. Its plain layout (every constant copied into the model's bytes, an :class:`Unwritten`) is
    made the first time something of it is asked for (``fb``, ``packed``, :meth:`fill`, ...), so a model read from
    the program file in place (:meth:`external`, which lays out a model of its own) never packs a flatbuffer it
    does not use: one of MobileNetV2's two (~3 ms), seven of an fp32 Llama's fourteen. Ask before the writer
    changes: the layout reads its tables as they are then (:func:`combine` renumbers its members'). A layout that
    fails (a field out of TFLite's range) raises :class:`.env.Unsupported`, as the translation it ends would."""

    def __init__(self, writer: ModelWriter, subgraphs: list, signatures: list | None = None,
                 packed_buffers: list | None = None):
        packed = set(writer.packed_buffers() if packed_buffers is None else packed_buffers)
        self._args, self._laid, self._files = (writer, subgraphs, signatures, packed), None, None

    def in_files(self) -> dict:
        """:func:`_in_files` of the writer's constants, found once, for :attr:`in_place_bytes` (which decides
        whether to make :meth:`external`: MobileNetV2's 107 constants, ~1 ms) and for that layout."""
        if self._files is None:
            self._files = _in_files(self._args[0].blobs)
        return self._files

    @property
    def in_place_bytes(self) -> int:
        """How many bytes of constants :meth:`external` would read from program files, without laying it out."""
        return sum(int(data.size) for _, _, (_, data) in self.in_files().values())

    def external(self) -> Unwritten | None:
        """The model laid out with every constant that is a run of a program file pterun mapped, 64-byte aligned
        there and not XORed, read from that file in place (``ExternalBuffer``, which only LiteRT's CompiledModel
        reads), not copied into the model's bytes; None where no constant is. The plain layout is not made."""
        writer, subgraphs, signatures, packed_buffers = self._args
        laid = _checked(writer._layout, subgraphs, signatures, packed_buffers, self)
        return laid if laid.files else None

    @property
    def sources(self) -> tuple:
        """The arrays the constants come from (:attr:`Unwritten.sources`), without laying the model out."""
        return tuple(data for _, data, _ in self._args[0].blobs)

    def laid(self) -> Unwritten:
        """The plain layout, made at the first call."""
        if self._laid is None:
            writer, subgraphs, signatures, packed_buffers = self._args
            self._laid = _checked(writer._layout, subgraphs, signatures, packed_buffers)
        return self._laid

    def __getattr__(self, name: str):  # fb, at, blobs, size, packed, outputs, fill: the plain layout's
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.laid(), name)


def _checked(lay, *args):
    """``lay(*args)``, a layout; :class:`.env.Unsupported` for a field TFLite's format cannot hold (``struct.error``,
    ``OverflowError`` ...), which the engine answers by running the graph on NumPy."""
    try:
        return lay(*args)
    except Unsupported:
        raise
    except Exception as e:  # a field out of TFLite's range
        raise Unsupported(f"translation failed ({type(e).__name__}: {e})") from e


# operator -> input slots XNNPACK packs into its own weight buffers at interpreter creation
_PACKED_INPUTS = {"CONV_2D": (1, 2), "DEPTHWISE_CONV_2D": (1, 2), "FULLY_CONNECTED": (1, 2), "TRANSPOSE_CONV": (1, 3)}


def _named(named: list) -> dict | None:
    """name -> tensor index of the outputs ``named`` ((name, tensor index) in a signature's order; a model without
    signatures gets one from LiteRT naming them by their tensors' names); None where a name is missing or
    repeated."""
    out = {}
    for name, t in named:
        if not name or name in out:
            return None
        out[name] = int(t)
    return out


def _align(n: int, to: int = 64) -> int:
    return -(-n // to) * to


def _in_files(blobs) -> dict:
    """buffer -> (path, status, (offset, data)) for each of ``blobs`` that is a run of a program file pterun mapped
    (:func:`pterun.format.mapped.file_of`), 64-byte aligned there, its bytes not XORed."""
    found = {}
    for b, data, xor in blobs:
        where = mapping_of(data) if not xor and data.flags.c_contiguous else None
        if where is None or where[1] % 64:
            continue
        named = file_of(where[0])
        if named is not None and _utf8(named[0]):  # the schema's strings are UTF-8
            found[b] = (named[0], named[1], (where[1], data))
    return found


def combine(members: list) -> Laying:
    """One model holding each member as a subgraph with a signature of its own (``"g<k>"``), so one LiteRT
    interpreter, and one XNNPACK thread pool, runs them all. ``members`` are ``(writer, inputs, outputs)``; each
    writer's tensors, operators and buffers are renumbered into the combined model (the writers are changed).
    Returns the model to be laid out, its :attr:`Unwritten.packed` ranges those of every member."""
    out = ModelWriter()
    subgraphs, signatures, packed = [], [], []
    for k, (w, ins, outs) in enumerate(members):
        bmap = {0: 0}
        for b, data, xor in w.blobs:
            out.buffers.append(TFL.Buffer())
            bmap[b] = len(out.buffers) - 1
            out.blobs.append((bmap[b], data, xor))
        packed += [bmap[b] for b in w.packed_buffers()]
        cmap = {}
        for i, oc in enumerate(w.codes):
            if oc.builtinCode not in out.opcodes:
                out.opcodes[oc.builtinCode] = len(out.codes)
                out.codes.append(oc)
            cmap[i] = out.opcodes[oc.builtinCode]
        for t in w.tensors:
            t.buffer = bmap.get(t.buffer, 0)
        for o in w.operators:
            o.opcodeIndex = cmap[o.opcodeIndex]
        out.tensors += w.tensors  # for size_bound only: each subgraph numbers its own tensors
        out.operators += w.operators
        subgraphs.append(w.subgraph(ins, outs, f"g{k}"))
        signatures.append(TFL.SignatureDef(f"g{k}", k, _tensor_maps("i", ins), _tensor_maps("o", outs)))
    out.extra_subgraphs = len(members)
    return Laying(out, subgraphs, signatures, packed)


def _tensor_maps(prefix: str, tensors: list) -> list[TFL.TensorMap]:
    return [TFL.TensorMap(f"{prefix}{j}", int(t)) for j, t in enumerate(tensors)]


def _utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a name the file system gave in bytes Python could not decode
        return False
    return True
