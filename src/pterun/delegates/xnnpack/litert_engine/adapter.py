"""The one place pterun reaches past LiteRT's public ``Interpreter`` API, and why.

LiteRT's Python ``Interpreter`` addresses only subgraph 0, and its public ``invoke`` refuses to run while NumPy
arrays over the interpreter's memory exist. pterun joins a method's graphs into one interpreter, one subgraph
each (their calls then share one XNNPACK thread pool), and keeps arrays over input and output memory between
calls (the steady state of :class:`.plan.LiteRTPlan`): both need the wrapper object LiteRT's ``Interpreter``
itself calls, ``Interpreter._interpreter``, whose methods take a subgraph index. Which nodes LiteRT's XNNPACK
delegate took is only listed by ``Interpreter._get_ops_details``, which LiteRT's own tests read. Nothing else
of LiteRT's is touched outside its public API.

Example::

    >>> sub = Subgraph(interpreter, 1)            # doctest: +SKIP
    >>> sub.set(0, x); sub.invoke(); sub.tensor(5)  # doctest: +SKIP
"""

from __future__ import annotations

from functools import partial

import numpy as np

__all__ = ["Subgraph", "ops_details"]


class Subgraph:
    """Subgraph ``k`` of a LiteRT interpreter: its tensors, its resizes, its invocation."""

    __slots__ = ("k", "_wr")
    #: an interpreter's subgraph is prepared when its tensors are allocated, at load
    prepared = True

    def __init__(self, interp, k: int = 0):
        self.k = k
        self._wr = interp._interpreter

    def setter(self):
        """``set(tensor index, array)``: copy a C-contiguous array into an input."""
        wr, k = self._wr, self.k
        return lambda t, a: wr.SetTensor(t, a, k)

    def invoker(self):
        """``invoke()``: run the subgraph."""
        wr, k = self._wr, self.k
        return lambda: wr.Invoke(k)

    def viewer(self, t: int):
        """``view()``: a NumPy array over tensor ``t``'s memory (valid until the subgraph is resized)."""
        wr, k = self._wr, self.k
        return lambda: wr.tensor(wr, t, k)

    def tensor(self, t: int) -> np.ndarray:
        """A NumPy array over tensor ``t``'s memory; ValueError where it has none (a tensor XNNPACK holds)."""
        return self._wr.tensor(self._wr, t, self.k)

    def put(self, t: int, a: np.ndarray) -> None:
        """Copy ``a`` (any strides: a channels-last input) into input ``t``'s memory."""
        self.tensor(t)[...] = a

    def input_copier(self, t: int):
        """``copy(src)``: ``src`` (of the input's shape) into input ``t``'s memory; None where LiteRT gives no
        array over it (a rank-0 tensor comes back as a NumPy scalar, a copy)."""
        view = self.tensor(t)
        return partial(np.copyto, view) if isinstance(view, np.ndarray) else None

    def resize(self, t: int, shape) -> None:
        self._wr.ResizeInputTensor(t, np.array(shape, np.int32), False, self.k)

    def allocate(self) -> None:
        self._wr.AllocateTensors(self.k)


def ops_details(interp) -> list[dict]:
    """The operators of an interpreter's subgraph 0 as LiteRT lists them (one ``DELEGATE`` per XNNPACK
    partition): each one's ``op_name``, ``inputs`` and ``outputs``. Read from the wrapper: LiteRT's
    ``_get_ops_details`` also looks up the dtype of every operand, 2 of MobileNetV2's ~48 ms load."""
    w = interp._interpreter
    try:
        return [{"op_name": w.NodeName(i), "inputs": w.NodeInputs(i), "outputs": w.NodeOutputs(i)}
                for i in range(w.NumNodes())]
    except AttributeError:  # a wrapper without these methods: LiteRT's own listing
        return interp._get_ops_details()
