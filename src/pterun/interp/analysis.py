"""Pass 2, analysis: what a method's plan says before anything runs, as one record.

:func:`check_supported` refuses, before memory is laid out, what pterun cannot run (a missing operator lists
every one; unbounded dynamic shapes; scalar types without a NumPy dtype); :func:`analyse` then works out, once,
what the later passes read: each value's tag, which value slots can change while the method runs
(:func:`find_volatile`), the dims its dynamic inputs vary in, and each delegate's calls.

Example::

    >>> check_supported(plan, "model.pte: method 'forward'")        # doctest: +SKIP
    >>> analyse(plan, values).volatile                                # doctest: +SKIP
    frozenset({12, 40})
"""

from __future__ import annotations

from pterun._record import Fields
from pterun.errors import NotSupportedError, OperatorMissingError
from pterun.format.schema import (BOOL, CPU, DELEGATE_CALL, DEVICE_NAMES, DOUBLE, DYNAMIC_UNBOUND, FREE_CALL, INT,
                                  KERNEL_CALL, MOVE_CALL, STATIC, TENSOR, ExecutionPlan)
from pterun.interp.access import kernels_for
from pterun.interp.tensor import Tensor

__all__ = ["Analysis", "analyse", "check_supported", "find_volatile"]


class Analysis(Fields):
    """What the plan says of a method once its memory is laid out.

    ``tags`` per value slot; ``volatile``: slots whose content or tensor view can change while it runs;
    ``dynamic_sizes``: the upper bounds of the dims its dynamic inputs may vary in (each dynamic input's largest
    dim: a token count's 511; the file does not say which dim varies, and a small one such as 3 channels is rarely
    the one); ``calls``: delegate index -> the argument slots of each of its DelegateCalls, in program order.
    """

    tags: tuple
    volatile: frozenset
    dynamic_sizes: frozenset
    calls: dict

    def is_dynamic(self, values: list, slot: int) -> bool:
        v = values[slot] if 0 <= slot < len(values) else None
        return isinstance(v, Tensor) and v.dynamic


def check_supported(plan: ExecutionPlan, where: str) -> None:
    """Raise what pterun cannot run in ``plan``: :class:`~pterun.errors.OperatorMissingError` naming every
    operator it has no kernel for, :class:`~pterun.errors.NotSupportedError` for memory placed on a device other
    than the CPU, unbounded dynamic shapes, scalar types NumPy cannot hold and operators pterun refuses on
    purpose."""
    KERNELS = kernels_for(plan)
    for arena, device in plan.buffer_devices:
        raise NotSupportedError(f"{where}: memory arena {arena} is placed on {DEVICE_NAMES[device]} (the file's "
                                "non_const_buffer_device, ExecuTorch 1.4); pterun runs on the CPU only")
    for i, (tag, p) in enumerate(plan.values):
        if tag == TENSOR:
            if p.device != CPU:
                raise NotSupportedError(f"{where}: tensor value {i} is placed on {DEVICE_NAMES[p.device]} (the file's "
                                        "device_type, ExecuTorch 1.3); pterun runs on the CPU only")
            if p.dynamism == DYNAMIC_UNBOUND:
                raise NotSupportedError(f"{where}: tensor value {i} has unbounded dynamic shape, which ExecuTorch's "
                                        "runtime does not support either")
            try:
                p.dtype
            except NotSupportedError as e:
                raise NotSupportedError(f"{where}: tensor value {i}: {e}") from None
    called = [plan.operators[ins.op_index] for c in plan.chains for ins in c if ins.kind == KERNEL_CALL]
    missing = [op for op in called if op not in KERNELS]
    if missing:
        raise OperatorMissingError(plan.name, missing)
    unsupported = sorted({op for op in called if KERNELS[op].not_supported})
    if unsupported:
        reasons = "; ".join(f"{op}: {KERNELS[op].not_supported}" for op in unsupported)
        raise NotSupportedError(f"{where}: uses operator(s) pterun deliberately does not support: {reasons}")


def find_volatile(plan: ExecutionPlan, tags) -> frozenset[int]:
    """Slots whose content or tensor view can change during a run: dynamic tensors, the targets of moves, freed
    values, what raw kernels touch, and the scalars functional operators return."""
    KERNELS = kernels_for(plan)
    vol = set()
    for i, (tag, p) in enumerate(plan.values):
        if tag == TENSOR and p.dynamism != STATIC:
            vol.add(i)
    for chain in plan.chains:
        for ins in chain:
            if ins.kind == MOVE_CALL:
                vol.add(ins.move_to)
            elif ins.kind == FREE_CALL:
                vol.add(ins.value_index)
            elif ins.kind == KERNEL_CALL:
                k, b = KERNELS[plan.operators[ins.op_index]], ins.args
                if k.raw:
                    positions = range(len(b)) if k.volatile_args is None else k.volatile_args
                    vol.update(b[p] for p in positions if p < len(b))
                elif not k.schema.mutable and b and tags[b[-1]] in (INT, DOUBLE, BOOL):
                    vol.add(b[-1])
    return frozenset(vol)


def analyse(plan: ExecutionPlan, values: list) -> Analysis:
    """The :class:`Analysis` of a method whose value slots are ``values`` (pterun.interp.memory)."""
    tags = tuple(tag for tag, _ in plan.values)
    calls: dict[int, list] = {}
    for c in plan.chains:
        for ins in c:
            if ins.kind == DELEGATE_CALL:
                calls.setdefault(ins.delegate_index, []).append(tuple(ins.args))
    dynamic = [vi for vi in plan.inputs if isinstance(values[vi], Tensor) and values[vi].dynamic]
    sizes = frozenset(max(values[vi].shape) for vi in dynamic if max(values[vi].shape, default=1) > 1)
    return Analysis(tags, find_volatile(plan, tags), sizes, calls)
