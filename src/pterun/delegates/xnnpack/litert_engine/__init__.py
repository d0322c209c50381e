"""The LiteRT engine: an XNNPACK graph translated into a TFLite model and run by LiteRT on XNNPACK itself, the
library ExecuTorch's XNNPACK delegate runs (``ai-edge-litert``, where its wheels exist).

:mod:`.plan` builds and runs the interpreters (``build``, ``pending`` and ``Batch`` for the graphs of a method that
share one, ``LiteRTPlan``); :mod:`.translate` turns a graph into model bytes, node by node with :mod:`.nodes`
(portable operators a merged graph holds with :mod:`.lower`), written by :mod:`.writer` in TFLite's format
(:mod:`.tflite`) over memory from :mod:`.memory`; :mod:`.env` holds what touches the installed LiteRT (its modules,
its native stderr).

Example::

    >>> from pterun.delegates.xnnpack.litert_engine import available
    >>> available() is None or isinstance(available(), str)
    True
"""

from pterun.delegates.xnnpack.litert_engine.plan import (Batch, LiteRTPlan, Unavailable, Unsupported, available, build,
                                                         pending, translate)

__all__ = ["Batch", "LiteRTPlan", "Unavailable", "Unsupported", "available", "build", "pending", "translate"]
