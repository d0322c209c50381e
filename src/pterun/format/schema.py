"""The vocabulary of the ``.pte`` Program schema: union tags, enums, each table's field slots, and the immutable
records a method's plan is read into (values, instructions, delegates). :mod:`pterun.format.program` reads a file
into these; everything after it works on them.

Example::

    >>> KernelCall(3, (0, 1, 2))
    KernelCall(kind=1, op_index=3, args=(0, 1, 2))
    >>> TENSOR_T.sizes, EXTRA_TENSOR_INFO.device_type
    (8, 10)
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from pterun._record import Fields, Record, fields_type
from pterun import dtypes

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
# Data locations (TensorDataLocation, ExtraTensorInfo.location since 0.5)
SEGMENT, EXTERNAL = 0, 1
# DeviceType (ExtraTensorInfo.device_type since 1.3, NonConstBufferDevice since 1.4)
CPU, CUDA = 0, 1
DEVICE_NAMES = {CPU: "CPU", CUDA: "CUDA"}

MAX_RANK = 16
INPUT_TAGS = frozenset({TENSOR, INT, DOUBLE, BOOL, STRING, NULL})  # what a caller can pass (Method::set_input)


def _table(name: str, fields: str) -> SimpleNamespace:
    """The vtable slot of each field of flatbuffer table ``name``, in schema order (a union field is two: its
    ``_type`` and its value): field ``k`` is slot ``4 + 2 * k``. A namespace, not a class: a load reads its
    attributes, and defining twenty-five classes would cost ``import pterun`` ~0.7 ms."""
    return SimpleNamespace(**{field: 4 + 2 * k for k, field in enumerate(fields.split())})


# The tables pterun reads, field by field as schema/program.fbs declares them (fields are only ever appended, so
# an older file simply lacks the later ones: their readers take the default).
PROGRAM = _table("Program", "version execution_plan constant_buffer backend_delegate_data segments "
                            "constant_segment mutable_data_segments named_data")
PLAN = _table("ExecutionPlan", "name container_meta_type values inputs outputs chains operators delegates "
                               "non_const_buffer_sizes non_const_buffer_device")
BUFFER_DEVICE = _table("NonConstBufferDevice", "buffer_idx device_type device_index")
CONTAINER_META = _table("ContainerMetadata", "encoded_inp_str encoded_out_str")
TENSOR_T = _table("Tensor", "scalar_type storage_offset sizes dim_order requires_grad data_buffer_idx "
                            "allocation_info layout shape_dynamism extra_tensor_info")
EXTRA_TENSOR_INFO = _table("ExtraTensorInfo", "mutable_data_segments_idx fully_qualified_name location device_type "
                                              "device_index")
ALLOCATION = _table("AllocationDetails", "memory_id memory_offset_low memory_offset_high")
EVALUE = _table("EValue", "val_type val")
SCALAR = _table("Scalar", "value")  # Int.int_val, Bool.bool_val, Double.double_val, String.string_val
LIST = _table("List", "items")  # IntList, DoubleList, BoolList, TensorList, OptionalTensorList
OPERATOR = _table("Operator", "name overload")
INSTRUCTION = _table("Instruction", "instr_args_type instr_args")
KERNEL_CALL_T = _table("KernelCall", "op_index args")
DELEGATE_CALL_T = _table("DelegateCall", "delegate_index args")
MOVE_CALL_T = _table("MoveCall", "move_from move_to")
JUMP_FALSE_CALL_T = _table("JumpFalseCall", "cond_value_index destination_instruction")
FREE_CALL_T = _table("FreeCall", "value_index")
CHAIN = _table("Chain", "inputs outputs instructions stacktrace")
DELEGATE = _table("BackendDelegate", "id processed compile_specs")
DELEGATE_REF = _table("BackendDelegateDataReference", "location index")
COMPILE_SPEC = _table("CompileSpec", "key value")
BUFFER = _table("Buffer", "storage")  # and BackendDelegateInlineData.data
DATA_SEGMENT = _table("DataSegment", "offset size")
SUBSEGMENTS = _table("SubsegmentOffsets", "segment_index offsets")
NAMED_DATA = _table("NamedData", "key segment_index")


class TensorDesc(Record):
    """A Tensor EValue as serialized. ``memory_id`` is None for tensors that are not memory planned; ``device`` is
    :data:`CPU` unless the file places the tensor elsewhere (ExecuTorch 1.3's ``device_type``)."""

    __slots__ = ("scalar_type", "sizes", "dim_order", "data_buffer_idx", "memory_id", "memory_offset", "dynamism",
                 "fqn", "location", "device")
    _defaults = (None, SEGMENT, CPU)  # fqn, location, device (ExtraTensorInfo: 0.5, 1.3)

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


class EValue(Fields):
    """One value of a method's value table: its union ``tag`` (INT, TENSOR, ...: :data:`TAG_NAMES`) and ``val``:
    a :class:`TensorDesc`, a Python scalar or string, a tuple of raw values (DoubleList, BoolList) or a tuple of
    value indices (IntList, TensorList, OptionalTensorList; -1 is an absent optional tensor), or None."""

    tag: int
    val: object

    def __new__(cls, tag: int, val: object):  # one per value of a method: the plain tuple's construction
        return tuple.__new__(cls, (tag, val))


def _instruction(name: str, kind: int, fields: str, doc: str):
    """A record ``(kind, *fields)`` built from ``fields`` alone (``kind`` is the class's)."""
    n, own = len(fields.split()), fields_type(name, fields, __name__)  # ``own`` takes keyword arguments

    def __new__(cls, *args, **kwargs):
        if kwargs or len(args) != n:
            args = own(*args, **kwargs)
        return tuple.__new__(cls, (kind, *args))

    return fields_type(name, "kind " + fields, __name__, {"__new__": __new__, "__doc__": doc, "KIND": kind,
                                                          "__getnewargs__": lambda self: tuple(self[1:]),
                                                          "_new_fields": tuple(fields.split())})


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
    needs (the largest offset + size placed in it), which is what gets allocated; ``buffer_devices`` the
    (arena, device type) pairs ExecuTorch 1.4's ``non_const_buffer_device`` places on a device other than the CPU.
    """

    __slots__ = ("name", "values", "inputs", "outputs", "chains", "operators", "delegates", "buffer_sizes",
                 "input_spec", "output_spec", "arena_extents", "buffer_devices")

    def __init__(self, name, values, inputs, outputs, chains, operators, delegates, buffer_sizes,
                 input_spec=None, output_spec=None, buffer_devices=()):
        self.name, self.values, self.inputs, self.outputs = name, values, inputs, outputs
        self.chains, self.operators, self.delegates, self.buffer_sizes = chains, operators, delegates, buffer_sizes
        self.input_spec, self.output_spec = input_spec, output_spec
        self.buffer_devices = tuple(buffer_devices)
        self.arena_extents = tuple(buffer_sizes)  # what the arenas really need; set by the reader
