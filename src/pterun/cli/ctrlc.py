"""Ctrl-C for the command line: a KeyboardInterrupt as usual, and a flag that outlives it.

CPython drops an exception raised inside a weakref callback or a finalizer (it prints "Exception ignored in ...")
and a signal's handler runs wherever the interpreter next checks, which can be such a callback (a WeakSet's
``_remove`` when a temporary object dies while a program loads). A Ctrl-C landing there was lost, and ``pterun
demo --repeat N`` then ran to the end. While a command runs, SIGINT also sets a flag, and the command's long
loops (:func:`check`, once per call) raise KeyboardInterrupt again if the first one was swallowed; such a
dropped KeyboardInterrupt is not printed (the flag holds it).

Inside the import machinery a KeyboardInterrupt can land between taking a lock and the ``try`` that gives it
back (``_imp.acquire_lock()`` in the callback that forgets a module's lock, ``_get_module_lock``): the lock then
stays taken, and any other thread that imports waits for ever. There the handler only sets the flag and asks
for the signal again, which is raised at the first check outside the import machinery's own code.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading

__all__ = ["check", "installed"]

_hit = False


def _on_sigint(signum, frame):
    global _hit
    _hit = True
    if frame is not None and frame.f_code.co_filename.startswith("<frozen importlib"):
        _thread.interrupt_main()  # SIGINT again at the next check, until the frame is out of importlib's code
        return
    raise KeyboardInterrupt


def check() -> None:
    """Raise KeyboardInterrupt if Ctrl-C was pressed while the command ran (even if that one was swallowed)."""
    if _hit:
        raise KeyboardInterrupt


class installed:
    """While active (in the main thread, over Python's own SIGINT handler only), SIGINT goes through
    :func:`_on_sigint`, and a KeyboardInterrupt CPython drops (raised in a weakref callback) is not printed; the
    previous handler and hook come back afterwards. The flag is the command's: ``pressed`` keeps it once the
    block is left, and the module's flag is down again (a command called outside one sees no stale Ctrl-C)."""

    def __enter__(self):
        global _hit
        _hit = False
        self.pressed = False
        self.previous = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, _on_sigint)
            self.hook = sys.unraisablehook
            sys.unraisablehook = self._unraisable
        return self

    def _unraisable(self, unraisable) -> None:
        if not (_hit and unraisable.exc_type is KeyboardInterrupt):
            self.hook(unraisable)

    def __exit__(self, *exc):
        global _hit
        self.pressed, _hit = _hit, False
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            sys.unraisablehook = self.hook
        return False
