"""The ``.pte`` container: headers, segments and the Program flatbuffer, read into immutable descriptions.

Nothing here does math. :func:`read_program` checks the identifier and the extended header, then
:class:`ProgramFile` hands out execution plans (parsed and validated on first use, or all at once when the
caller asks for full verification) and zero-copy views of constants, segments and named data.

Example::

    >>> pf = read_program(open("model.pte", "rb").read(), "model.pte")   # doctest: +SKIP
    >>> [p.name for p in pf.plan_headers]                               # doctest: +SKIP
    ['forward']
"""

from __future__ import annotations

import math
import struct
from collections import namedtuple
from typing import NamedTuple

import numpy as np

from pterun.errors import InvalidProgramError, NotSupportedError
from pterun.format import dtypes
from pterun.format.flatbuffer import Buffer, Table

# EValue union tags (KernelTypes)
NULL, INT, BOOL, DOUBLE, TENSOR, STRING, INT_LIST, DOUBLE_LIST, BOOL_LIST, TENSOR_LIST, OPT_TENSOR_LIST = range(1, 12)
TAG_NAMES = {
    0: "None", NULL: "None", INT: "Int", BOOL: "Bool", DOUBLE: "Double", TENSOR: "Tensor", STRING: "String",
    INT_LIST: "IntList", DOUBLE_LIST: "DoubleList", BOOL_LIST: "BoolList", TENSOR_LIST: "TensorList",
    OPT_TENSOR_LIST: "OptionalTensorList",
}
# Instruction union tags (InstructionArguments)
KERNEL_CALL, DELEGATE_CALL, MOVE_CALL, JUMP_FALSE_CALL, FREE_CALL = range(1, 6)
INSTRUCTION_NAMES = {1: "KernelCall", 2: "DelegateCall", 3: "MoveCall", 4: "JumpFalseCall", 5: "FreeCall"}
# TensorShapeDynamism
STATIC, DYNAMIC_BOUND, DYNAMIC_UNBOUND = 0, 1, 2
DYNAMISM_NAMES = {STATIC: "static", DYNAMIC_BOUND: "dynamic (bounded)", DYNAMIC_UNBOUND: "dynamic (unbounded)"}
# Data locations
SEGMENT, EXTERNAL = 0, 1

MAX_RANK = 16
_INPUT_TAGS = frozenset({TENSOR, INT, DOUBLE, BOOL, STRING, NULL})  # what a caller can pass (Method::set_input)
_MIN_HEAD_BYTES = 64


class Record:
    """A small immutable record (plain classes keep ``dataclasses`` out of ``import pterun``)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        names = self.__slots__
        values = dict(zip(names, args), **kwargs)
        for name, default in zip(reversed(names), reversed(self._defaults)):
            values.setdefault(name, default)
        for name in names:
            object.__setattr__(self, name, values[name])

    _defaults: tuple = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"


class TensorDesc(Record):
    """A Tensor EValue as serialized. ``memory_id`` is None for tensors that are not memory planned."""

    __slots__ = ("scalar_type", "sizes", "dim_order", "data_buffer_idx", "memory_id", "memory_offset", "dynamism",
                 "fqn", "location")
    _defaults = (None, SEGMENT)  # fqn, location

    @property
    def dtype(self) -> np.dtype:
        return dtypes.to_numpy(self.scalar_type)

    @property
    def numel(self) -> int:
        return math.prod(self.sizes)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def is_memory_planned(self) -> bool:
        return self.memory_id is not None or self.data_buffer_idx != 0


class EValue(NamedTuple):
    """One value of a method's value table: its union ``tag`` (INT, TENSOR, ...: :data:`TAG_NAMES`) and ``val``:
    a :class:`TensorDesc`, a Python scalar or string, a tuple of raw values (DoubleList, BoolList) or a tuple of
    value indices (IntList, TensorList, OptionalTensorList; -1 is an absent optional tensor), or None."""

    tag: int
    val: object


def _instruction(name: str, kind: int, fields: str, doc: str):
    base = namedtuple(name, "kind " + fields)

    def __new__(cls, *args, **kwargs):
        return base.__new__(cls, kind, *args, **kwargs)

    return type(name, (base,), {"__slots__": (), "__new__": __new__, "__doc__": doc, "KIND": kind,
                                "_make": classmethod(lambda cls, it: tuple.__new__(cls, it))})


# The instructions of a chain, named and fielded as ExecuTorch's schema (program.fbs: InstructionArguments).
# ``kind`` is the union tag (KERNEL_CALL, ...); records are built from the other fields: KernelCall(op, args).
KernelCall = _instruction("KernelCall", KERNEL_CALL, "op_index args",
                          "Call operator ``op_index`` (into ``ExecutionPlan.operators``) on the values ``args``"
                          " (indices).")
DelegateCall = _instruction("DelegateCall", DELEGATE_CALL, "delegate_index args",
                            "Run delegate ``delegate_index`` (into ``ExecutionPlan.delegates``) on the values"
                            " ``args``.")
MoveCall = _instruction("MoveCall", MOVE_CALL, "move_from move_to", "Value ``move_to`` becomes value ``move_from``.")
JumpFalseCall = _instruction("JumpFalseCall", JUMP_FALSE_CALL, "cond_value_index destination_instruction",
                             "Jump to ``destination_instruction`` when value ``cond_value_index`` is false.")
FreeCall = _instruction("FreeCall", FREE_CALL, "value_index", "Tensor ``value_index`` is no longer needed.")
Instruction = KernelCall | DelegateCall | MoveCall | JumpFalseCall | FreeCall


class DelegateDesc(Record):
    """A BackendDelegate: backend name, where its processed blob is (0 inline, 1 segment), compile specs."""

    __slots__ = ("backend_id", "location", "index", "compile_specs")


class PlanHeader(Record):
    """What is known about a method without parsing its values and instructions."""

    __slots__ = ("index", "name")


class ExecutionPlan:
    """A fully parsed and validated execution plan (one method).

    ``values`` are :class:`EValue` records; ``chains`` lists of instructions (:class:`KernelCall`,
    :class:`DelegateCall`, :class:`MoveCall`, :class:`JumpFalseCall`, :class:`FreeCall`);
    ``buffer_sizes`` is ``non_const_buffer_sizes`` (entry 0 reserved); ``arena_extents`` what each arena really
    needs (the largest offset + size placed in it), which is what gets allocated.
    """

    __slots__ = ("name", "values", "inputs", "outputs", "chains", "operators", "delegates", "buffer_sizes",
                 "input_spec", "output_spec", "arena_extents")

    def __init__(self, name, values, inputs, outputs, chains, operators, delegates, buffer_sizes,
                 input_spec=None, output_spec=None):
        self.name, self.values, self.inputs, self.outputs = name, values, inputs, outputs
        self.chains, self.operators, self.delegates, self.buffer_sizes = chains, operators, delegates, buffer_sizes
        self.input_spec, self.output_spec = input_spec, output_spec
        self.arena_extents = tuple(buffer_sizes)  # what the arenas really need; set by the reader


def _fail(name: str, what: str) -> InvalidProgramError:
    return InvalidProgramError(f"{name}: {what}")


class ProgramFile:
    """A validated view of one ``.pte`` buffer. Create it with :func:`read_program`."""

    def __init__(self, data, name: str):
        self.name = name
        self.buf = Buffer(data, name)
        self.size = self.buf.size
        self._read_headers()
        self.root = Table.root(self.buf, "Program")
        self._read_program_tables()
        self._plans: dict[int, ExecutionPlan] = {}

    # -- headers -------------------------------------------------------------------------------------------
    def _read_headers(self) -> None:
        buf = self.buf
        if self.size < 8:
            raise _fail(self.name, f"file is {self.size} bytes, too short to be an ExecuTorch program")
        ident = bytes(buf.data[4:8])
        if ident != b"ET12":
            if ident[:2] == b"ET":
                raise _fail(self.name, f"program identifier {ident.decode('latin-1')!r} is not the supported 'ET12' "
                                       "(the file was written by an incompatible ExecuTorch version)")
            hint = {b"FT01": " (this is a .ptd external-data file; pass it as data_path=)",
                    b"BP08": " (this is a bundled program; use Runtime.load_bundled_program)"}.get(ident, "")
            raise _fail(self.name, f"not an ExecuTorch program: expected identifier 'ET12' at offset 4, "
                                   f"found {ident!r}{hint}")
        self.program_size = self.size
        self.segment_base_offset = 0
        self.segment_data_size = 0
        if self.size >= 12 and bytes(buf.data[8:12]) == b"eh00":
            hlen = buf.unpack(struct.Struct("<I"), 12, "extended header length")
            if hlen < 24:
                raise _fail(self.name, f"extended header length {hlen} is below the minimum of 24")
            buf.check(8, hlen, "extended header")
            self.program_size = buf.unpack(struct.Struct("<Q"), 16)
            self.segment_base_offset = buf.unpack(struct.Struct("<Q"), 24)
            self.segment_data_size = buf.unpack(struct.Struct("<Q"), 32) if hlen >= 32 else 0
            if self.program_size > self.size:
                raise _fail(self.name, f"header says the program is {self.program_size} bytes but the file has "
                                       f"{self.size} (truncated?)")
            if self.segment_base_offset:
                end = self.segment_base_offset + self.segment_data_size
                if self.segment_base_offset < self.program_size or end > self.size:
                    raise _fail(self.name, f"segments span bytes {self.segment_base_offset}..{end} but the file has "
                                           f"{self.size} bytes (truncated?)")
        root = buf.unpack(struct.Struct("<I"), 0, "root offset")
        if root < 8 or root > self.program_size - 4:
            raise _fail(self.name, f"flatbuffer root offset {root} is outside the program data "
                                   f"(0..{self.program_size})")

    def _read_program_tables(self) -> None:
        r = self.root
        self.version = r.u32(4)
        self._plan_tables = r.tables(6, "ExecutionPlan")
        if not self._plan_tables:
            raise _fail(self.name, "the program has no execution plans (methods)")
        self.plan_headers = []
        seen = set()
        for i, t in enumerate(self._plan_tables):
            name = t.string(4, strict=True)  # a method name is looked up: it must be exact
            if name is None:
                raise _fail(self.name, f"execution plan {i} has no name")
            if name in seen:
                raise _fail(self.name, f"two execution plans are named {name!r}")
            seen.add(name)
            self.plan_headers.append(PlanHeader(i, name))
        self.constant_buffers = [b.bytes_view(4) for b in r.tables(8, "Buffer")]
        self.inline_delegate_data = [b.bytes_view(4) for b in r.tables(10, "BackendDelegateInlineData")]
        self.segments = []
        for i, s in enumerate(r.tables(12, "DataSegment")):
            off, size = s.u64(4), s.u64(6)
            if not self.segment_base_offset and (off or size):
                raise _fail(self.name, f"segment {i} is declared but the file has no extended header with a "
                                       "segment base offset")
            if off + size > self.segment_data_size and self.segment_data_size:
                raise _fail(self.name, f"segment {i} (offset {off}, size {size}) runs past the segment data "
                                       f"({self.segment_data_size} bytes)")
            self.buf.check(self.segment_base_offset + off, size, f"segment {i}")
            self.segments.append((self.segment_base_offset + off, size))
        cs = r.table(14, "SubsegmentOffsets")
        self.constant_segment = None
        if cs is not None:
            idx = cs.u32(4)
            offsets = cs.array(6, np.uint64)
            if len(offsets) > 1:
                if idx >= len(self.segments):
                    raise _fail(self.name, f"constant segment index {idx} is out of range "
                                           f"({len(self.segments)} segments)")
                self.constant_segment = (idx, offsets)
        if self.constant_segment is not None and any(b is not None and len(b) for b in self.constant_buffers[1:]):
            raise _fail(self.name, "the program has both a constant segment and legacy constant buffers")
        self.mutable_segments = []
        for m in r.tables(16, "SubsegmentOffsets"):
            idx = m.u32(4)
            if idx >= len(self.segments):
                raise _fail(self.name, f"mutable data segment index {idx} is out of range")
            self.mutable_segments.append((idx, m.array(6, np.uint64)))
        self.named_data = {}
        for nd in r.tables(18, "NamedData"):
            key = nd.string(4)
            idx = nd.u32(6)
            if key is None or idx >= len(self.segments):
                raise _fail(self.name, f"named data entry {key!r} points at segment {idx}, out of range")
            self.named_data[key] = idx

    # -- data access ----------------------------------------------------------------------------------------
    def segment(self, index: int) -> np.ndarray:
        """Segment bytes as a read-only uint8 view."""
        if not 0 <= index < len(self.segments):
            raise _fail(self.name, f"segment index {index} is out of range ({len(self.segments)} segments)")
        start, size = self.segments[index]
        return self.buf.array()[start : start + size]

    def named(self, key: str) -> np.ndarray:
        return self.segment(self.named_data[key])

    def delegate_blob(self, d: DelegateDesc) -> np.ndarray:
        if d.location == 0:
            if not 0 <= d.index < len(self.inline_delegate_data) or self.inline_delegate_data[d.index] is None:
                raise _fail(self.name, f"delegate {d.backend_id!r} refers to inline data {d.index}, out of range")
            arr = np.frombuffer(self.inline_delegate_data[d.index], np.uint8)
            arr.flags.writeable = False
            return arr
        if d.location == 1:
            return self.segment(d.index)
        raise _fail(self.name, f"delegate {d.backend_id!r} has unknown data location {d.location}")

    def constant_data(self, t: TensorDesc) -> np.ndarray:
        """The bytes of a constant tensor stored in this file (read-only view)."""
        nbytes = t.nbytes
        idx = t.data_buffer_idx
        if self.constant_segment is not None:
            seg, offsets = self.constant_segment
            if idx >= len(offsets):
                raise _fail(self.name, f"constant index {idx} is out of range ({len(offsets)} constants)")
            data = self.segment(seg)
            off = int(offsets[idx])
            if off + nbytes > len(data):
                raise _fail(self.name, f"constant {idx} ({nbytes} bytes at {off}) runs past the constant segment "
                                       f"({len(data)} bytes)")
            return data[off : off + nbytes]
        if idx >= len(self.constant_buffers) or self.constant_buffers[idx] is None:
            raise _fail(self.name, f"constant buffer {idx} is out of range ({len(self.constant_buffers)} buffers)")
        arr = np.frombuffer(self.constant_buffers[idx], np.uint8)
        if len(arr) < nbytes:
            raise _fail(self.name, f"constant buffer {idx} has {len(arr)} bytes, the tensor needs {nbytes}")
        arr = arr[:nbytes]
        arr.flags.writeable = False
        return arr

    def mutable_initial_data(self, t: TensorDesc) -> np.ndarray:
        """Initial state of a planned tensor with data (mutable_data_segments[0], as ExecuTorch reads it)."""
        if not self.mutable_segments:
            raise _fail(self.name, f"tensor with initial state (index {t.data_buffer_idx}) but the program has no "
                                   "mutable data segment")
        seg, offsets = self.mutable_segments[0]
        if t.data_buffer_idx >= len(offsets):
            raise _fail(self.name, f"mutable data index {t.data_buffer_idx} is out of range")
        data = self.segment(seg)
        off = int(offsets[t.data_buffer_idx])
        if off + t.nbytes > len(data):
            raise _fail(self.name, f"mutable data {t.data_buffer_idx} runs past its segment")
        return data[off : off + t.nbytes]

    # -- plans ----------------------------------------------------------------------------------------------
    def plan_index(self, name: str) -> int | None:
        for h in self.plan_headers:
            if h.name == name:
                return h.index
        return None

    def plan(self, index: int) -> ExecutionPlan:
        p = self._plans.get(index)
        if p is None:
            p = _PlanReader(self, self._plan_tables[index]).read()
            self._plans[index] = p
        return p

    def shared_arena_size(self, memory_id: int) -> int:
        """Bytes arena ``memory_id`` (>= 2: state the methods share) needs over every method that can be read."""
        need = 0
        for h in self.plan_headers:
            try:
                ext = self.plan(h.index).arena_extents
            except (InvalidProgramError, NotSupportedError):
                continue  # that method fails on its own when loaded
            if memory_id < len(ext):
                need = max(need, ext[memory_id])
        return need

    def verify_all(self) -> None:
        for h in self.plan_headers:
            self.plan(h.index)


class _PlanReader:
    def __init__(self, pf: ProgramFile, table: Table):
        self.pf = pf
        self.t = table
        self.name = table.string(4, strict=True)
        self.where = f"{pf.name}: method {self.name!r}"

    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def read(self) -> ExecutionPlan:
        t = self.t
        meta = t.table(6, "ContainerMetadata")
        buffer_sizes = t.values(20, "q")
        if any(s < 0 for s in buffer_sizes):
            raise self.fail(f"negative memory plan size in {list(buffer_sizes)}")
        values = [self.read_value(i, v) for i, v in enumerate(t.tables(8, "EValue"))]
        n = len(values)
        inputs = t.values(10, "i")
        outputs = t.values(12, "i")
        for kind, idxs in (("input", inputs), ("output", outputs)):
            for i in idxs:
                if not 0 <= i < n:
                    raise self.fail(f"{kind} value index {i} is out of range ({n} values)")
        operators, self.garbled_ops = [], {}
        for k, op in enumerate(t.tables(16, "Operator")):
            name, overload = op.string(4, ""), op.string(6, "")
            operators.append(f"{name}.{overload}" if overload else name)
            try:  # a name with bytes that are not UTF-8 is harmless unless a KernelCall needs it
                op.string(4, strict=True), op.string(6, strict=True)
            except InvalidProgramError as e:
                self.garbled_ops[k] = str(e)
        delegates = []
        for d in t.tables(18, "BackendDelegate"):
            ref = d.table(6, "BackendDelegateDataReference")
            if ref is None:
                raise self.fail(f"delegate {d.string(4)!r} has no processed data reference")
            specs = tuple((c.string(4, ""), bytes(c.bytes_view(6) or b"")) for c in d.tables(8, "CompileSpec"))
            delegates.append(DelegateDesc(d.string(4, ""), ref.i8(4), ref.u32(6), specs))
        chains = []
        for c in t.tables(14, "Chain"):
            chains.append([self.read_instruction(ins, n, len(operators), len(delegates))
                           for ins in c.tables(8, "Instruction")])
        if not chains:
            raise self.fail("the method has no instruction chains")
        plan = ExecutionPlan(self.name, values, inputs, outputs, chains, operators, delegates, buffer_sizes,
                    meta.string(4) if meta else None, meta.string(6) if meta else None)
        self.validate_values(plan)
        self.validate_io(plan)
        plan.arena_extents = self.arena_extents(plan)
        return plan

    def validate_io(self, plan: ExecutionPlan) -> None:
        """A method input is copied into and an output written by the method: neither may be a constant of the
        program (read-only file data), which ExecuTorch rejects too."""
        for k, i in enumerate(plan.inputs):
            tag = plan.values[i][0]
            if tag not in _INPUT_TAGS:
                raise self.fail(f"input {k} (value {i}) is of type {TAG_NAMES.get(tag, tag)}; a method input must be a "
                                "Tensor, Int, Double, Bool, String or None")
        for kind, idxs in (("input", plan.inputs), ("output", plan.outputs)):
            for k, i in enumerate(idxs):
                tag, d = plan.values[i]
                if tag == TENSOR and d.memory_id is None and (
                        d.data_buffer_idx > 0 or (d.location == EXTERNAL and d.fqn is not None)):
                    src = f"external tensor {d.fqn!r}" if d.location == EXTERNAL and d.fqn is not None else \
                        f"constant buffer {d.data_buffer_idx}"
                    raise self.fail(f"{kind} {k} (value {i}) is a constant tensor ({src}); a method {kind} must be "
                                    "a tensor the method can write")

    @staticmethod
    def arena_extents(plan: ExecutionPlan) -> tuple:
        """Bytes each arena really needs: the largest offset + size of the tensors placed in it (entry 0 and
        arenas no tensor uses: 0). Never more than ``buffer_sizes``, which ``validate_values`` checked."""
        ext = [0] * len(plan.buffer_sizes)
        for tag, d in plan.values:
            if tag == TENSOR and d.memory_id is not None and d.dynamism != DYNAMIC_UNBOUND:
                try:
                    end = d.memory_offset + d.nbytes
                except NotSupportedError:  # a dtype pterun lacks: reported when the method loads
                    continue
                if end > ext[d.memory_id]:
                    ext[d.memory_id] = end
        return tuple(ext)

    def read_value(self, i: int, ev: Table) -> EValue:
        tag, u = ev.union(4, 6, "EValue payload")
        if tag == 0 or tag == NULL:
            return EValue(NULL, None)
        if u is None:
            raise self.fail(f"value {i} has tag {tag} but no payload")
        if tag == INT:
            return EValue(INT, u.i64(4))
        if tag == BOOL:
            return EValue(BOOL, u.bool(4))
        if tag == DOUBLE:
            return EValue(DOUBLE, u.f64(4))
        if tag == STRING:
            return EValue(STRING, u.string(4, ""))
        if tag == TENSOR:
            return EValue(TENSOR, self.read_tensor(i, u))
        if tag == INT_LIST:
            return EValue(INT_LIST, u.values(4, "q"))
        if tag == DOUBLE_LIST:
            return EValue(DOUBLE_LIST, u.values(4, "d"))
        if tag == BOOL_LIST:
            return EValue(BOOL_LIST, tuple(bool(x) for x in u.values(4, "B")))
        if tag in (TENSOR_LIST, OPT_TENSOR_LIST):
            return EValue(tag, u.values(4, "i"))
        raise self.fail(f"value {i} has unknown type tag {tag}")

    def read_tensor(self, i: int, u: Table) -> TensorDesc:
        st = u.i8(4)
        if not dtypes.is_valid(st):
            raise self.fail(f"tensor value {i} has invalid scalar type {st}")
        if u.i32(6) != 0:
            raise self.fail(f"tensor value {i} has a non-zero storage offset, which ExecuTorch does not allow")
        sizes = u.values(8, "i")
        dim_order = u.values(10, "B")
        if len(sizes) > MAX_RANK:
            raise self.fail(f"tensor value {i} has rank {len(sizes)}, above the limit of {MAX_RANK}")
        if any(s < 0 for s in sizes):
            raise self.fail(f"tensor value {i} has negative sizes {list(sizes)}")
        if not dim_order and sizes:
            dim_order = tuple(range(len(sizes)))
        if sorted(dim_order) != list(range(len(sizes))):
            raise self.fail(f"tensor value {i} has dim_order {list(dim_order)}, not a permutation of its "
                            f"{len(sizes)} dims")
        dyn = u.i8(20)
        if dyn not in (STATIC, DYNAMIC_BOUND, DYNAMIC_UNBOUND):
            raise self.fail(f"tensor value {i} has invalid shape dynamism {dyn}")
        alloc = u.table(16, "AllocationDetails")
        mem_id, mem_off = None, 0
        if alloc is not None:
            mem_id = alloc.u32(4)
            mem_off = alloc.u32(6) | (alloc.u32(8) << 32)
        extra = u.table(22, "ExtraTensorInfo")
        fqn, location = None, SEGMENT
        if extra is not None:
            fqn = extra.string(6)
            location = extra.i8(8)
            if location not in (SEGMENT, EXTERNAL):
                raise self.fail(f"tensor value {i} has invalid data location {location}")
        return TensorDesc(st, sizes, dim_order, u.u32(14), mem_id, mem_off, dyn, fqn, location)

    def read_instruction(self, ins: Table, n: int, n_ops: int, n_delegates: int) -> Instruction:
        tag, u = ins.union(4, 6, "Instruction arguments")
        if u is None:
            raise self.fail(f"instruction with tag {tag} has no arguments")

        def idx(v: int, what: str) -> int:
            if not 0 <= v < n:
                raise self.fail(f"{INSTRUCTION_NAMES.get(tag, tag)} {what} {v} is out of range ({n} values)")
            return v

        if tag == KERNEL_CALL:
            op = u.i32(4)
            if not 0 <= op < n_ops:
                raise self.fail(f"KernelCall operator index {op} is out of range ({n_ops} operators)")
            if op in self.garbled_ops:
                raise self.fail(f"KernelCall calls operator {op}, whose name is not valid UTF-8 "
                                f"({self.garbled_ops[op]})")
            return KernelCall(op, tuple(idx(a, "argument") for a in u.values(6, "i")))
        if tag == DELEGATE_CALL:
            d = u.i32(4)
            if not 0 <= d < n_delegates:
                raise self.fail(f"DelegateCall delegate index {d} is out of range ({n_delegates} delegates)")
            return DelegateCall(d, tuple(idx(a, "argument") for a in u.values(6, "i")))
        if tag == MOVE_CALL:
            return MoveCall(idx(u.i32(4), "source"), idx(u.i32(6), "destination"))
        if tag == JUMP_FALSE_CALL:
            return JumpFalseCall(idx(u.i32(4), "condition"), u.i32(6))
        if tag == FREE_CALL:
            return FreeCall(idx(u.i32(4), "value"))
        raise self.fail(f"unknown instruction type {tag}")

    def validate_values(self, plan: ExecutionPlan) -> None:
        values = plan.values
        n = len(values)
        n_arenas = len(plan.buffer_sizes)
        for i, (tag, p) in enumerate(values):
            if tag == INT_LIST:
                for j in p:
                    if not 0 <= j < n or values[j][0] != INT:
                        raise self.fail(f"IntList value {i} refers to value {j}, which is not an Int")
            elif tag in (TENSOR_LIST, OPT_TENSOR_LIST):
                for j in p:
                    if tag == OPT_TENSOR_LIST and (j == -1 or (0 <= j < n and values[j][0] == NULL)):
                        continue
                    if not 0 <= j < n or values[j][0] != TENSOR:
                        raise self.fail(f"{TAG_NAMES[tag]} value {i} refers to value {j}, which is not a Tensor")
            elif tag == TENSOR:
                if p.dynamism == DYNAMIC_UNBOUND:
                    continue  # reported as NotSupported at method load, where it matters
                if p.memory_id is not None:
                    if not 1 <= p.memory_id < n_arenas:
                        raise self.fail(f"tensor value {i} is planned in memory id {p.memory_id}, but the plan "
                                        f"has {max(n_arenas - 1, 0)} arenas")
                    try:
                        nbytes = p.nbytes
                    except NotSupportedError:
                        nbytes = 0
                    if p.memory_offset + nbytes > plan.buffer_sizes[p.memory_id]:
                        raise self.fail(f"tensor value {i} ({nbytes} bytes at offset {p.memory_offset}) does not "
                                        f"fit in arena {p.memory_id} ({plan.buffer_sizes[p.memory_id]} bytes)")


def read_program(data, name: str = "<buffer>") -> ProgramFile:
    """Parse the headers and top-level tables of a ``.pte`` buffer (bytes, bytearray, memoryview or mmap)."""
    try:
        return ProgramFile(data, name)
    except (struct.error, IndexError, OverflowError, UnicodeDecodeError) as e:  # defensive: never leak these
        raise InvalidProgramError(f"{name}: corrupt program ({type(e).__name__}: {e})") from e
