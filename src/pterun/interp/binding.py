"""Turn one instruction's EValue indices into ready-to-call arguments, once, at method load.

Each schema argument becomes either a constant (bound at load) or a getter (a zero-argument callable
read at each call) when its value can change while the method runs: dynamic-shape tensors, tensors
that a MoveCall or a view retargets, Ints that scalar ops write (``sym_size``), and lists holding any
of those. Converters follow the argument's schema type, so kernels receive NumPy arrays, Python ints,
tuples, ``np.dtype`` and ``None`` — never EValues.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from pterun.errors import InvalidProgramError
from pterun import dtypes
from pterun.format.schema import (BOOL, BOOL_LIST, DOUBLE, DOUBLE_LIST, INT, INT_LIST, NULL, OPT_TENSOR_LIST, STRING,
                                  TAG_NAMES, TENSOR, TENSOR_LIST)

if TYPE_CHECKING:  # the registry is imported when a method first calls a kernel, not by ``import pterun``
    from pterun.kernels.registry import Arg

_array = attrgetter("array")

# schema kind -> accepted EValue tags
_ACCEPTS = {
    "Tensor": {TENSOR}, "Tensor?": {TENSOR, NULL},
    "Tensor[]": {TENSOR_LIST}, "Tensor?[]": {OPT_TENSOR_LIST, TENSOR_LIST},
    "int": {INT}, "int?": {INT, NULL}, "int[]": {INT_LIST}, "int[]?": {INT_LIST, NULL},
    "float": {DOUBLE, INT}, "float?": {DOUBLE, INT, NULL}, "float[]": {DOUBLE_LIST}, "float[]?": {DOUBLE_LIST, NULL},
    "bool": {BOOL}, "bool?": {BOOL, NULL}, "bool[]": {BOOL_LIST}, "bool[]?": {BOOL_LIST, NULL},
    "Scalar": {INT, DOUBLE, BOOL}, "Scalar?": {INT, DOUBLE, BOOL, NULL},
    "ScalarType": {INT}, "ScalarType?": {INT, NULL},
    "str": {STRING}, "str?": {STRING, NULL},
    "MemoryFormat": {INT}, "MemoryFormat?": {INT, NULL}, "Layout?": {INT, NULL}, "Device?": {INT, NULL},
    "int[]?[]": {INT_LIST},
}


class Binder:
    """Builds getters over one method's live ``values`` list."""

    def __init__(self, values: list, tags: list[int], volatile: set[int], where: str):
        self.values = values  # live slots: Tensor objects, Python scalars, tuples of indices for lists
        self.tags = tags
        self.volatile = volatile  # slots whose content (or tensor view) can change while running
        self.where = where

    def fail(self, what: str) -> InvalidProgramError:
        return InvalidProgramError(f"{self.where}: {what}")

    # -- single values -----------------------------------------------------------------------------------
    def tensor(self, i: int):
        """(is_dynamic, value_or_getter) for the array of Tensor slot ``i``."""
        values = self.values
        if i in self.volatile:
            return True, lambda: values[i].array
        return False, values[i].array

    def tensor_object(self, i: int):
        """(is_dynamic, Tensor or getter of the Tensor) for writing into slot ``i``."""
        values = self.values
        if i in self.volatile:
            return True, lambda: values[i]
        return False, values[i]

    def scalar(self, i: int, convert=None):
        values = self.values
        if i in self.volatile:
            if convert is None:
                return True, lambda: values[i]
            return True, lambda: convert(values[i])
        v = values[i]
        return False, (convert(v) if convert is not None else v)

    # -- by schema argument --------------------------------------------------------------------------------
    def bind(self, arg: Arg, i: int):
        """(is_dynamic, value_or_getter) for schema argument ``arg`` bound to value slot ``i``."""
        kind = arg.kind
        tag = self.tags[i]
        accepted = _ACCEPTS.get(kind)
        if accepted is None:
            raise self.fail(f"argument {arg.name!r} has schema type {kind}, which pterun cannot bind")
        if tag not in accepted:
            raise self.fail(f"argument {arg.name!r} expects {kind} but value {i} is {TAG_NAMES.get(tag, tag)}")
        if tag == NULL:
            return False, None
        if tag == TENSOR:
            return self.tensor(i)
        if tag in (TENSOR_LIST, OPT_TENSOR_LIST):
            return self._tensor_list(self.values[i])
        if tag == INT_LIST:
            return self._int_list(self.values[i])
        if tag in (DOUBLE_LIST, BOOL_LIST):
            return False, self.values[i]
        base = arg.base
        if base == "ScalarType":
            return self.scalar(i, dtypes.to_numpy)
        if base in ("float", "SymFloat"):
            return self.scalar(i, float)
        return self.scalar(i)

    def _int_list(self, items: tuple[int, ...]):
        values = self.values
        if any(j in self.volatile for j in items):
            get = values.__getitem__
            return True, lambda: tuple(map(get, items))
        return False, tuple(values[j] for j in items)

    def _tensor_list(self, items: tuple[int, ...]):
        values = self.values
        real = [j for j in items if j >= 0 and self.tags[j] == TENSOR]
        if any(j in self.volatile for j in real):
            def get():
                return [values[j].array if j >= 0 and values[j] is not None else None for j in items]
            return True, get
        return False, [values[j].array if j >= 0 and values[j] is not None else None for j in items]

    def writer(self, arg: Arg | None, i: int):
        """A function ``write(result)`` storing a kernel's result for a written (``!``) argument, or for the
        return slot when ``arg`` is None."""
        tag = self.tags[i]
        if tag == TENSOR:
            dyn, t = self.tensor_object(i)
            if dyn:
                return lambda r: t().write(r)
            return t.write
        if tag in (TENSOR_LIST,):
            items = self.values[i]
            values = self.values

            def write_list(results):
                if len(results) != len(items):
                    raise ValueError(f"kernel produced {len(results)} outputs for a list of {len(items)} tensors")
                for j, r in zip(items, results):
                    values[j].write(r)
            return write_list
        what = f"written argument {arg.name!r}" if arg is not None else "the return slot"
        raise self.fail(f"{what} is bound to a {TAG_NAMES.get(tag, tag)} value")
