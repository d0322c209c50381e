"""The XNNPACK delegate, run with NumPy: reads the payload, compiles it once, executes per DelegateCall.

``XnnpackBackend.init`` reads the blob (:mod:`.payload`) into a typed graph (:mod:`.graph`), then the NumPy
engine compiles it into a plan of steps (:mod:`.numpy_engine`; builders in :mod:`.nodes` and :mod:`.gemm`
against :mod:`.compiler`; kernels in :mod:`.ops`, quantization in :mod:`.quant`).
The plan's ``execute(args)`` takes the DelegateCall's arguments — the delegate's inputs, then its outputs,
as runtime tensors — reads the inputs and writes (and resizes) the outputs.

Example::

    >>> from pterun.delegates import BACKENDS
    >>> BACKENDS["XnnpackBackend"].is_available()
    True
"""

from __future__ import annotations

import numpy as np

from pterun.delegates import DelegateContext, register_backend
from pterun.delegates.xnnpack.graph import Graph
from pterun.delegates.xnnpack.numpy_engine import Plan, compile_graph
from pterun.errors import DelegateError, PterunError

__all__ = ["Plan", "XnnpackBackend", "load"]


def load(blob: np.ndarray, named_data) -> Plan:
    """Parse and compile one payload; ``named_data(key)`` returns the bytes of a named-data entry."""
    graph = Graph.read(blob, named_data)
    try:
        return compile_graph(graph)
    except PterunError:
        raise
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as e:  # an inconsistent graph
        raise DelegateError(f"XNNPACK payload: cannot compile the graph ({type(e).__name__}: {e})") from e


class XnnpackBackend:
    """Backend ``"XnnpackBackend"``: compile specs are ignored, as the XNNPACK runtime ignores them."""

    name = "XnnpackBackend"

    def is_available(self) -> bool:
        return True

    def init(self, blob: np.ndarray, compile_specs, ctx: DelegateContext) -> Plan:
        return load(blob, ctx.named_data)


register_backend(XnnpackBackend())
