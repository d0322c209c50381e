"""Pass 1, memory layout: a method's arenas and its value slots.

The memory plan places every planned tensor at an offset in an arena (memory id 1: this method's; ids >= 2:
state the program's methods share). Each arena is allocated once, at the size its tensors really span; each
Tensor value becomes a view into its arena, into the program's constant data (zero-copy, read-only) or into
external data (.ptd); scalars and lists stay as read from the program.
"""

from __future__ import annotations

import os

import numpy as np

from pterun.errors import InvalidProgramError, NamedDataNotFoundError
from pterun import dtypes
from pterun.format.program import ProgramFile
from pterun.format.schema import EXTERNAL, NULL, STATIC, TENSOR, ExecutionPlan, TensorDesc
from pterun.interp.tensor import Tensor

def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


_EMPTY = np.zeros(0, np.uint8)


class Memory:
    """The arenas and value slots of one method, and the named data its delegates read."""

    def __init__(self, pf: ProgramFile, plan: ExecutionPlan, where: str, shared_arenas: dict, external: tuple = ()):
        self.pf, self.plan, self.where = pf, plan, where
        self.external = external  # PtdFile objects from data_path, searched before the program's named data
        self.arenas = self._make_arenas(shared_arenas)
        self.values = [self._make_value(i, tag, p) for i, (tag, p) in enumerate(plan.values)]
        if plan.delegates and external:
            self._check_named_data_unique()

    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    def _make_arenas(self, shared: dict) -> list:
        # an arena never needs more than the largest offset + size of the tensors placed in it: that is what is
        # allocated, whatever (larger) size the plan declares, so a corrupt size costs nothing
        sizes = self.plan.arena_extents
        total = sum(sizes[1:])
        limit = _physical_memory()
        if total > limit:
            raise self.fail(f"the memory plan needs {total} bytes, more than this machine's {limit} bytes of RAM "
                            "(corrupt file?)")
        arenas = [_EMPTY]
        for j in range(1, len(sizes)):
            if j == 1:
                arenas.append(self._allocate(sizes[j], f"memory arena {j}"))
            else:  # memory ids >= 2 hold state shared across a program's methods (share_mutable_buffers)
                a = shared.get(j)
                if a is None or len(a) < sizes[j]:
                    need = max(sizes[j], self.pf.shared_arena_size(j))
                    a = shared[j] = self._allocate(need, f"shared memory arena {j}")
                arenas.append(a)
        return arenas

    def _allocate(self, nbytes: int, what: str) -> np.ndarray:
        if not nbytes:
            return _EMPTY
        try:
            return np.zeros(nbytes, np.uint8)
        except MemoryError:  # ulimit -v, overcommit off, a small board: the file asks for more than there is
            raise InvalidProgramError(f"{self.where}: {what} needs {nbytes} bytes, more memory than is available "
                                      "(corrupt file?)") from None

    def _make_value(self, i: int, tag: int, p):
        if tag == TENSOR:
            return self._make_tensor(i, p)
        if tag == NULL:
            return None
        return p  # Int/Bool/Double/String scalars; lists keep their tuples (of indices, or raw values)

    def _make_tensor(self, i: int, d: TensorDesc) -> Tensor:
        dtype = d.dtype
        nbytes = d.nbytes
        if d.location == EXTERNAL and d.fqn is not None:
            data = self._external_tensor(i, d)
            if d.memory_id is None:
                storage = data
            else:  # external initial state of a planned (mutable) tensor: copied in once
                storage = self.arenas[d.memory_id][d.memory_offset : d.memory_offset + nbytes]
                storage[:] = data
        elif d.data_buffer_idx > 0 and d.memory_id is None:
            storage = self.pf.constant_data(d)
        elif d.memory_id is not None:
            off = d.memory_offset
            storage = self.arenas[d.memory_id][off : off + nbytes]
            if d.data_buffer_idx > 0:
                storage[:] = self.pf.mutable_initial_data(d)
        else:
            if nbytes > _physical_memory():
                raise self.fail(f"tensor value {i} needs {nbytes} bytes, more than this machine has (corrupt file?)")
            storage = self._allocate(nbytes, f"unplanned tensor value {i} ({list(d.sizes)})")
        return Tensor(dtype, d.sizes, d.dim_order, storage, dynamic=d.dynamism != STATIC)

    def _external_tensor(self, i: int, d: TensorDesc) -> np.ndarray:
        if not self.external:
            raise NamedDataNotFoundError(f"{self.where}: tensor {d.fqn!r} is stored in external data (.ptd), "
                                         "but no data_path was given to load_program")
        for ptd in self.external:
            if d.fqn in ptd:
                layout = ptd.layout(d.fqn)
                if layout is not None:
                    want = (d.scalar_type, tuple(d.sizes), tuple(d.dim_order))
                    got = (layout.scalar_type, layout.sizes, layout.dim_order or tuple(range(len(layout.sizes))))
                    if want != got:
                        raise InvalidProgramError(
                            f"{self.where}: external tensor {d.fqn!r} in {ptd.name} has dtype "
                            f"{dtypes.scalar_type_name(got[0])}, sizes {list(got[1])}, dim order {list(got[2])}; "
                            f"the program expects {dtypes.scalar_type_name(want[0])}, sizes {list(want[1])}, "
                            f"dim order {list(want[2])}")
                data = ptd.data(d.fqn)
                if len(data) < d.nbytes:
                    raise InvalidProgramError(f"{self.where}: external tensor {d.fqn!r} in {ptd.name} has "
                                              f"{len(data)} bytes, the program needs {d.nbytes}")
                return data[: d.nbytes]
        raise NamedDataNotFoundError(f"{self.where}: external tensor {d.fqn!r} is not in "
                                     f"{', '.join(p.name for p in self.external)}")

    def _check_named_data_unique(self) -> None:
        for ptd in self.external:
            dup = sorted(set(ptd.keys()) & set(self.pf.named_data))
            if dup:
                raise InvalidProgramError(f"{self.where}: named data key {dup[0]!r} is in both {ptd.name} and the "
                                          "program; ExecuTorch rejects duplicate keys")

    def named_data(self, key: str) -> np.ndarray:
        for ptd in self.external:
            if key in ptd:
                return ptd.data(key)
        if key in self.pf.named_data:
            return self.pf.named(key)
        where = ", ".join([p.name for p in self.external] + [self.pf.name])
        hint = "" if self.external else " (if the weights were exported to a .ptd file, pass it as data_path=)"
        raise NamedDataNotFoundError(f"{self.where}: no named data with key {key!r} in {where}{hint}")
