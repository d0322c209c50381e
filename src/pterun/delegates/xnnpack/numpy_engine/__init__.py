"""The NumPy engine: an XNNPACK graph compiled into a plan of NumPy steps (always there, exact, any platform).

:mod:`.plan` compiles and runs (``compile_graph``, ``NumpyPlan``); :mod:`.compiler` is the builder registry the
node builders of :mod:`.nodes` and :mod:`.gemm` (fully connected layers and convolutions) register with; the
kernels they call are :mod:`.windows` (geometry, padding, kernel taps), :mod:`.conv`, :mod:`.pool` and
:mod:`.pointwise`.

Example::

    >>> from pterun.delegates.xnnpack.numpy_engine import compile_graph
    >>> plan = compile_graph(graph)   # doctest: +SKIP
"""

from pterun.delegates.xnnpack.numpy_engine.plan import BUILDERS, NAMES, NumpyPlan, compile_graph

__all__ = ["BUILDERS", "NAMES", "NumpyPlan", "compile_graph"]
