"""The LiteRT engine: an XNNPACK graph translated into a TFLite model and run by LiteRT on XNNPACK itself, the
library ExecuTorch's XNNPACK delegate runs (``ai-edge-litert``, where its wheels exist).

:mod:`.plan` builds and runs the interpreters (``build``, ``pending`` and ``Batch`` for the graphs of a method that
share one, ``LiteRTPlan``); :mod:`.translate` turns a graph into model bytes, node by node with :mod:`.nodes`
(portable operators a merged graph holds with :mod:`.lower`), written by :mod:`.writer` over memory from
:mod:`.memory`; :mod:`.env` holds what touches the installed LiteRT (its modules, its native stderr).

Example::

    >>> from pterun.delegates.xnnpack.litert_engine import available
    >>> available() is None or isinstance(available(), str)
    True
"""

__all__ = ["Batch", "LiteRTPlan", "Unavailable", "Unsupported", "available", "build", "pending", "translate"]


def __getattr__(name: str):
    # :mod:`.plan` and what it imports load on first use: the merge pass reads :mod:`.lower`'s table for every
    # method with XNNPACK delegates, on any engine
    if name in __all__:
        from pterun.delegates.xnnpack.litert_engine import plan

        return getattr(plan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
