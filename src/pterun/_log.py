"""pterun's logger, named ``"pterun"``, made on first use: importing ``logging`` costs ~3-5 ms that neither
``import pterun`` nor a load need pay, since pterun logs little besides DEBUG and INFO records of its load passes.

While ``logging`` has not been imported by anyone, nothing can have set up a handler or a level, and a record
below WARNING would reach none (the root logger's default level is WARNING, and logging's last-resort handler
shows WARNING and above). :func:`logger` then hands out a stand-in that drops DEBUG and INFO records without
importing ``logging``, and passes anything higher to the real logger. Once ``logging`` is imported (a user or a
library set it up), :func:`logger` is the real ``logging.getLogger("pterun")``.

Example::

    >>> import logging
    >>> logger() is logging.getLogger("pterun")
    True
"""

from __future__ import annotations

import sys


class _Unconfigured:
    """The ``pterun`` logger while ``logging`` is not imported: DEBUG and INFO records are dropped (no handler
    exists to take them), WARNING and above go to the real logger."""

    __slots__ = ()

    def debug(self, *args, **kwargs) -> None:
        pass

    info = debug

    def warning(self, *args, **kwargs) -> None:
        _real().warning(*args, **kwargs)

    def error(self, *args, **kwargs) -> None:
        _real().error(*args, **kwargs)


_UNCONFIGURED = _Unconfigured()


def _real():
    import logging

    return logging.getLogger("pterun")


def logger():
    """The ``pterun`` logger (see the module docstring for the stand-in used before ``logging`` is imported)."""
    if "logging" not in sys.modules:
        return _UNCONFIGURED
    return _real()
