"""Ctrl-C for the command line: a KeyboardInterrupt as usual, and a flag that outlives it.

CPython drops an exception raised inside a weakref callback or a finalizer (it prints "Exception ignored in ...")
and a signal's handler runs wherever the interpreter next checks, which can be such a callback (a WeakSet's
``_remove`` when a temporary object dies while a program loads). A Ctrl-C landing there was lost, and ``pterun
demo --repeat N`` then ran to the end. While a command runs, SIGINT also sets a flag, and the command's long
loops (:func:`check`, once per call) raise KeyboardInterrupt again if the first one was swallowed.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["check", "installed"]

_hit = False


def _on_sigint(signum, frame):
    global _hit
    _hit = True
    raise KeyboardInterrupt


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed while the command ran (even if that one was swallowed)."""
    if _hit:
        raise KeyboardInterrupt


class installed:
    """While active (in the main thread, over Python's own SIGINT handler only), SIGINT goes through
    :func:`_on_sigint`; the previous handler comes back afterwards."""

    def __enter__(self):
        global _hit
        _hit = False
        self.previous = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, _on_sigint)
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False
