"""What a method's signature says, readable without loading it: :class:`MethodMeta` and :class:`TensorInfo`, shaped
like ``executorch.runtime``'s (re-exported by :mod:`pterun.runtime` and :mod:`pterun`).

Example::

    >>> from pterun import Runtime
    >>> meta = Runtime.get().load_program("model.pte").metadata("forward")     # doctest: +SKIP
    >>> meta.input_tensor_meta(0).sizes()                                        # doctest: +SKIP
    (1, 3)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pterun import dtypes
from pterun.format.schema import STATIC, TAG_NAMES, TENSOR

__all__ = ["MethodMeta", "TensorInfo"]


class TensorInfo:
    """Serialized facts about one tensor input or output (sizes are upper bounds for dynamic tensors)."""

    def __init__(self, desc: Any):
        self._d = desc

    def sizes(self) -> tuple[int, ...]:
        return tuple(self._d.sizes)

    def dtype(self) -> int:
        """The ExecuTorch ScalarType id (``Float`` = 6); :meth:`numpy_dtype` gives the NumPy dtype."""
        return self._d.scalar_type

    def numpy_dtype(self) -> np.dtype:
        return self._d.dtype

    def nbytes(self) -> int:
        return self._d.nbytes

    def is_memory_planned(self) -> bool:
        return self._d.is_memory_planned

    def is_dynamic(self) -> bool:
        return self._d.dynamism != STATIC

    def dim_order(self) -> tuple[int, ...]:
        return tuple(self._d.dim_order)

    def __repr__(self) -> str:
        return (f"TensorInfo(sizes={list(self._d.sizes)}, dtype={dtypes.scalar_type_name(self._d.scalar_type)}, "
                f"is_memory_planned={self._d.is_memory_planned}, nbytes={self._d.nbytes})")


class _Name(str):
    """A method's name that can also be called: ``meta.name`` and ExecuTorch's ``meta.name()`` both work."""

    def __call__(self) -> str:
        return str(self)


class MethodMeta:
    """Inputs and outputs of one method, readable without loading it."""

    def __init__(self, plan: Any):
        self._plan = plan

    @property
    def name(self) -> str:
        """The method's name; ``meta.name()`` (ExecuTorch's spelling) works too."""
        return _Name(self._plan.name)

    def num_inputs(self) -> int:
        return len(self._plan.inputs)

    def num_outputs(self) -> int:
        return len(self._plan.outputs)

    def _info(self, which: str, idxs, i: int) -> TensorInfo:
        if not 0 <= i < len(idxs):
            raise IndexError(f"{which} index {i} is out of range: method {self.name!r} has {len(idxs)} {which}s")
        tag, p = self._plan.values[idxs[i]]
        if tag != TENSOR:
            raise IndexError(f"{which} {i} of method {self.name!r} is {TAG_NAMES.get(tag)}, not a tensor")
        return TensorInfo(p)

    def input_tensor_meta(self, i: int) -> TensorInfo:
        return self._info("input", self._plan.inputs, i)

    def output_tensor_meta(self, i: int) -> TensorInfo:
        return self._info("output", self._plan.outputs, i)

    def input_tag(self, i: int) -> str:
        """The kind of input ``i``: ``'Tensor'``, ``'Int'``, ``'Double'``, ``'Bool'``, ``'String'`` or ``'None'``."""
        return TAG_NAMES[self._plan.values[self._plan.inputs[i]][0]]

    def output_tag(self, i: int) -> str:
        return TAG_NAMES[self._plan.values[self._plan.outputs[i]][0]]

    def _describe(self, idxs) -> list[str]:
        out = []
        for i in idxs:
            tag, p = self._plan.values[i]
            out.append(repr(TensorInfo(p)) if tag == TENSOR else TAG_NAMES.get(tag, str(tag)))
        return out

    def __repr__(self) -> str:
        return (f"MethodMeta(name={self.name!r}, num_inputs={self.num_inputs()}, "
                f"input_tensor_meta={self._describe(self._plan.inputs)}, num_outputs={self.num_outputs()}, "
                f"output_tensor_meta={self._describe(self._plan.outputs)})")
