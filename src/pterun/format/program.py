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

import struct

import numpy as np

from pterun.errors import InvalidProgramError, NotSupportedError
from pterun import dtypes
from pterun.format import kinds
from pterun.format.flatbuffer import Buffer, Table
from pterun.format.schema import (ALLOCATION, BOOL, BOOL_LIST, BUFFER, BUFFER_DEVICE, CHAIN, COMPILE_SPEC,
                                  CONTAINER_META, CPU, DATA_SEGMENT, DELEGATE, DELEGATE_CALL, DELEGATE_CALL_T,
                                  DELEGATE_REF, DEVICE_NAMES, DOUBLE, DOUBLE_LIST, DYNAMIC_BOUND, DYNAMIC_UNBOUND,
                                  EVALUE, EXTERNAL, EXTRA_TENSOR_INFO, FREE_CALL, FREE_CALL_T, INPUT_TAGS, INSTRUCTION,
                                  INSTRUCTION_NAMES, INT, INT_LIST, JUMP_FALSE_CALL, JUMP_FALSE_CALL_T, KERNEL_CALL,
                                  KERNEL_CALL_T, LIST, MAX_RANK, MOVE_CALL, MOVE_CALL_T, NAMED_DATA, NULL, OPERATOR,
                                  OPT_TENSOR_LIST, PLAN, PROGRAM, SCALAR, SEGMENT, STATIC, STRING, SUBSEGMENTS,
                                  TAG_NAMES, TENSOR, TENSOR_LIST, TENSOR_T, DelegateCall, DelegateDesc, EValue,
                                  ExecutionPlan, FreeCall, Instruction, JumpFalseCall, KernelCall, MoveCall, PlanHeader,
                                  TensorDesc)

_MIN_HEAD_BYTES = 64


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
        if ident != kinds.PROGRAM_ID:
            if ident[:2] == b"ET":
                raise _fail(self.name, f"program identifier {ident.decode('latin-1')!r} is not the supported 'ET12' "
                                       "(the file was written by an incompatible ExecuTorch version)")
            hint = {kinds.DATA_ID: " (this is a .ptd external-data file; pass it as data_path=)",
                    kinds.BUNDLED_ID: " (this is a bundled program; use Runtime.load_bundled_program)"}.get(ident, "")
            raise _fail(self.name, f"not an ExecuTorch program: expected identifier 'ET12' at offset 4, "
                                   f"found {ident!r}{hint}")
        self.program_size = self.size
        self.segment_base_offset = 0
        self.segment_data_size = 0
        # the extended header: none, 24 bytes (before ExecuTorch 1.0) or 32 (segment_data_size added in 1.0)
        self.header_length = 0
        if self.size >= 12 and bytes(buf.data[8:12]) == b"eh00":
            hlen = self.header_length = buf.unpack(struct.Struct("<I"), 12, "extended header length")
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
        self.version = r.u32(PROGRAM.version)
        self._plan_tables = r.tables(PROGRAM.execution_plan, "ExecutionPlan")
        if not self._plan_tables:
            raise _fail(self.name, "the program has no execution plans (methods)")
        self.plan_headers = []
        seen = set()
        for i, t in enumerate(self._plan_tables):
            name = t.string(PLAN.name, strict=True)  # a method name is looked up: it must be exact
            if name is None:
                raise _fail(self.name, f"execution plan {i} has no name")
            if name in seen:
                raise _fail(self.name, f"two execution plans are named {name!r}")
            seen.add(name)
            self.plan_headers.append(PlanHeader(i, name))
        self.constant_buffers = [b.bytes_view(BUFFER.storage) for b in r.tables(PROGRAM.constant_buffer, "Buffer")]
        self.inline_delegate_data = [b.bytes_view(BUFFER.storage)
                                     for b in r.tables(PROGRAM.backend_delegate_data, "BackendDelegateInlineData")]
        self.segments = []
        for i, s in enumerate(r.tables(PROGRAM.segments, "DataSegment")):
            off, size = s.u64(DATA_SEGMENT.offset), s.u64(DATA_SEGMENT.size)
            if not self.segment_base_offset and (off or size):
                raise _fail(self.name, f"segment {i} is declared but the file has no extended header with a "
                                       "segment base offset")
            if off + size > self.segment_data_size and self.segment_data_size:
                raise _fail(self.name, f"segment {i} (offset {off}, size {size}) runs past the segment data "
                                       f"({self.segment_data_size} bytes)")
            self.buf.check(self.segment_base_offset + off, size, f"segment {i}")
            self.segments.append((self.segment_base_offset + off, size))
        cs = r.table(PROGRAM.constant_segment, "SubsegmentOffsets")
        self.constant_segment = None
        if cs is not None:
            idx = cs.u32(SUBSEGMENTS.segment_index)
            offsets = cs.array(SUBSEGMENTS.offsets, np.uint64)
            if len(offsets) > 1:
                if idx >= len(self.segments):
                    raise _fail(self.name, f"constant segment index {idx} is out of range "
                                           f"({len(self.segments)} segments)")
                self.constant_segment = (idx, offsets)
        if self.constant_segment is not None and any(b is not None and len(b) for b in self.constant_buffers[1:]):
            raise _fail(self.name, "the program has both a constant segment and legacy constant buffers")
        self.mutable_segments = []
        for m in r.tables(PROGRAM.mutable_data_segments, "SubsegmentOffsets"):
            idx = m.u32(SUBSEGMENTS.segment_index)
            if idx >= len(self.segments):
                raise _fail(self.name, f"mutable data segment index {idx} is out of range")
            self.mutable_segments.append((idx, m.array(SUBSEGMENTS.offsets, np.uint64)))
        self.named_data = {}
        for nd in r.tables(PROGRAM.named_data, "NamedData"):
            key = nd.string(NAMED_DATA.key)
            idx = nd.u32(NAMED_DATA.segment_index)
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
        self.name = table.string(PLAN.name, strict=True)
        self.where = f"{pf.name}: method {self.name!r}"

    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def read(self) -> ExecutionPlan:
        t = self.t
        meta = t.table(PLAN.container_meta_type, "ContainerMetadata")
        buffer_sizes = t.values(PLAN.non_const_buffer_sizes, "q")
        if any(s < 0 for s in buffer_sizes):
            raise self.fail(f"negative memory plan size in {list(buffer_sizes)}")
        values = [self.read_value(i, v) for i, v in enumerate(t.tables(PLAN.values, "EValue"))]
        n = len(values)
        inputs = t.values(PLAN.inputs, "i")
        outputs = t.values(PLAN.outputs, "i")
        for kind, idxs in (("input", inputs), ("output", outputs)):
            for i in idxs:
                if not 0 <= i < n:
                    raise self.fail(f"{kind} value index {i} is out of range ({n} values)")
        operators, self.garbled_ops = [], {}
        for k, op in enumerate(t.tables(PLAN.operators, "Operator")):
            name, overload = op.string(OPERATOR.name, ""), op.string(OPERATOR.overload, "")
            operators.append(f"{name}.{overload}" if overload else name)
            try:  # a name with bytes that are not UTF-8 is harmless unless a KernelCall needs it
                op.string(OPERATOR.name, strict=True), op.string(OPERATOR.overload, strict=True)
            except InvalidProgramError as e:
                self.garbled_ops[k] = str(e)
        delegates = []
        for d in t.tables(PLAN.delegates, "BackendDelegate"):
            ref = d.table(DELEGATE.processed, "BackendDelegateDataReference")
            if ref is None:
                raise self.fail(f"delegate {d.string(DELEGATE.id)!r} has no processed data reference")
            specs = tuple((c.string(COMPILE_SPEC.key, ""), bytes(c.bytes_view(COMPILE_SPEC.value) or b""))
                          for c in d.tables(DELEGATE.compile_specs, "CompileSpec"))
            delegates.append(DelegateDesc(d.string(DELEGATE.id, ""), ref.i8(DELEGATE_REF.location),
                                          ref.u32(DELEGATE_REF.index), specs))
        chains = []
        for c in t.tables(PLAN.chains, "Chain"):
            chains.append([self.read_instruction(ins, n, len(operators), len(delegates))
                           for ins in c.tables(CHAIN.instructions, "Instruction")])
        if not chains:
            raise self.fail("the method has no instruction chains")
        plan = ExecutionPlan(self.name, values, inputs, outputs, chains, operators, delegates, buffer_sizes,
                    meta.string(CONTAINER_META.encoded_inp_str) if meta else None,
                             meta.string(CONTAINER_META.encoded_out_str) if meta else None, self.buffer_devices())
        self.validate_values(plan)
        self.validate_io(plan)
        plan.arena_extents = self.arena_extents(plan)
        return plan

    def buffer_devices(self) -> tuple:
        """(arena, device type) of the arenas ExecuTorch 1.4's ``non_const_buffer_device`` places off the CPU."""
        out = []
        for entry in self.t.tables(PLAN.non_const_buffer_device, "NonConstBufferDevice"):
            device = entry.i8(BUFFER_DEVICE.device_type)
            if device not in DEVICE_NAMES:
                raise self.fail(f"memory arena {entry.i32(BUFFER_DEVICE.buffer_idx)} has invalid device type {device}")
            if device != CPU:
                out.append((entry.i32(BUFFER_DEVICE.buffer_idx), device))
        return tuple(out)

    def check_size(self, i: int, sizes: tuple) -> None:
        """A tensor's declared sizes must describe an array NumPy can hold, whether or not any memory is planned
        for it: the product of the non-zero dims, times the widest element (16 bytes), below 2**63."""
        n = 1
        for d in sizes:
            n *= d or 1
        if n * 16 >= 1 << 63:
            raise self.fail(f"tensor value {i} has sizes {list(sizes)}: {n} elements, more than any array can hold "
                            "(corrupt file?)")

    def validate_io(self, plan: ExecutionPlan) -> None:
        """A method input is copied into and an output written by the method: neither may be a constant of the
        program (read-only file data), which ExecuTorch rejects too."""
        for k, i in enumerate(plan.inputs):
            tag = plan.values[i][0]
            if tag not in INPUT_TAGS:
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
        tag, u = ev.union(EVALUE.val_type, EVALUE.val, "EValue payload")
        if tag == 0 or tag == NULL:
            return EValue(NULL, None)
        if u is None:
            raise self.fail(f"value {i} has tag {tag} but no payload")
        if tag == INT:
            return EValue(INT, u.i64(SCALAR.value))
        if tag == BOOL:
            return EValue(BOOL, u.bool(SCALAR.value))
        if tag == DOUBLE:
            return EValue(DOUBLE, u.f64(SCALAR.value))
        if tag == STRING:
            return EValue(STRING, u.string(SCALAR.value, ""))
        if tag == TENSOR:
            return EValue(TENSOR, self.read_tensor(i, u))
        if tag == INT_LIST:
            return EValue(INT_LIST, u.values(LIST.items, "q"))
        if tag == DOUBLE_LIST:
            return EValue(DOUBLE_LIST, u.values(LIST.items, "d"))
        if tag == BOOL_LIST:
            return EValue(BOOL_LIST, tuple(bool(x) for x in u.values(LIST.items, "B")))
        if tag in (TENSOR_LIST, OPT_TENSOR_LIST):
            return EValue(tag, u.values(LIST.items, "i"))
        raise self.fail(f"value {i} has unknown type tag {tag}")

    def read_tensor(self, i: int, u: Table) -> TensorDesc:
        st = u.i8(TENSOR_T.scalar_type)
        if not dtypes.is_valid(st):
            raise self.fail(f"tensor value {i} has invalid scalar type {st}")
        if u.i32(TENSOR_T.storage_offset) != 0:
            raise self.fail(f"tensor value {i} has a non-zero storage offset, which ExecuTorch does not allow")
        sizes = u.values(TENSOR_T.sizes, "i")
        dim_order = u.values(TENSOR_T.dim_order, "B")
        if len(sizes) > MAX_RANK:
            raise self.fail(f"tensor value {i} has rank {len(sizes)}, above the limit of {MAX_RANK}")
        if any(s < 0 for s in sizes):
            raise self.fail(f"tensor value {i} has negative sizes {list(sizes)}")
        if not dim_order and sizes:
            dim_order = tuple(range(len(sizes)))
        if sorted(dim_order) != list(range(len(sizes))):
            raise self.fail(f"tensor value {i} has dim_order {list(dim_order)}, not a permutation of its "
                            f"{len(sizes)} dims")
        dyn = u.i8(TENSOR_T.shape_dynamism)
        if dyn not in (STATIC, DYNAMIC_BOUND, DYNAMIC_UNBOUND):
            raise self.fail(f"tensor value {i} has invalid shape dynamism {dyn}")
        alloc = u.table(TENSOR_T.allocation_info, "AllocationDetails")
        mem_id, mem_off = None, 0
        if alloc is not None:
            mem_id = alloc.u32(ALLOCATION.memory_id)
            mem_off = alloc.u32(ALLOCATION.memory_offset_low) | (alloc.u32(ALLOCATION.memory_offset_high) << 32)
        extra = u.table(TENSOR_T.extra_tensor_info, "ExtraTensorInfo")
        fqn, location, device = None, SEGMENT, CPU
        if extra is not None:  # absent before ExecuTorch 0.5; location since 0.5, device_type since 1.3
            fqn = extra.string(EXTRA_TENSOR_INFO.fully_qualified_name)
            location = extra.i8(EXTRA_TENSOR_INFO.location)
            if location not in (SEGMENT, EXTERNAL):
                raise self.fail(f"tensor value {i} has invalid data location {location}")
            device = extra.i8(EXTRA_TENSOR_INFO.device_type)
            if device not in DEVICE_NAMES:
                raise self.fail(f"tensor value {i} has invalid device type {device}")
        self.check_size(i, sizes)
        return TensorDesc(st, sizes, dim_order, u.u32(TENSOR_T.data_buffer_idx), mem_id, mem_off, dyn, fqn, location,
                          device)

    def read_instruction(self, ins: Table, n: int, n_ops: int, n_delegates: int) -> Instruction:
        tag, u = ins.union(INSTRUCTION.instr_args_type, INSTRUCTION.instr_args, "Instruction arguments")
        if u is None:
            raise self.fail(f"instruction with tag {tag} has no arguments")

        def idx(v: int, what: str) -> int:
            if not 0 <= v < n:
                raise self.fail(f"{INSTRUCTION_NAMES.get(tag, tag)} {what} {v} is out of range ({n} values)")
            return v

        if tag == KERNEL_CALL:
            op = u.i32(KERNEL_CALL_T.op_index)
            if not 0 <= op < n_ops:
                raise self.fail(f"KernelCall operator index {op} is out of range ({n_ops} operators)")
            if op in self.garbled_ops:
                raise self.fail(f"KernelCall calls operator {op}, whose name is not valid UTF-8 "
                                f"({self.garbled_ops[op]})")
            return KernelCall(op, tuple(idx(a, "argument") for a in u.values(KERNEL_CALL_T.args, "i")))
        if tag == DELEGATE_CALL:
            d = u.i32(DELEGATE_CALL_T.delegate_index)
            if not 0 <= d < n_delegates:
                raise self.fail(f"DelegateCall delegate index {d} is out of range ({n_delegates} delegates)")
            return DelegateCall(d, tuple(idx(a, "argument") for a in u.values(DELEGATE_CALL_T.args, "i")))
        if tag == MOVE_CALL:
            return MoveCall(idx(u.i32(MOVE_CALL_T.move_from), "source"), idx(u.i32(MOVE_CALL_T.move_to), "destination"))
        if tag == JUMP_FALSE_CALL:
            return JumpFalseCall(idx(u.i32(JUMP_FALSE_CALL_T.cond_value_index), "condition"),
                                 u.i32(JUMP_FALSE_CALL_T.destination_instruction))
        if tag == FREE_CALL:
            return FreeCall(idx(u.i32(FREE_CALL_T.value_index), "value"))
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
