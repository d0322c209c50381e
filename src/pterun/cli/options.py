"""Argument types for the ``pterun`` commands: each checks its value's type and range while the command line is
parsed, so a wrong value is argparse's usage error (exit status 2) with a message that names the option.

Example::

    >>> import argparse
    >>> p = argparse.ArgumentParser(prog="pterun")
    >>> _ = p.add_argument("--repeat", type=whole(1))
    >>> _ = p.add_argument("--top-p", type=number(0.0, 1.0, above=True, note=" (1 = off)"))
    >>> p.parse_args(["--repeat", "3", "--top-p", "0.9"])
    Namespace(repeat=3, top_p=0.9)

``pterun --top-p 2`` then says ``pterun: error: argument --top-p: must be above 0 and at most 1 (1 = off), got 2``.
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

__all__ = ["whole", "number", "threads", "array_file", "directory", "THREADS_PER_CORE"]

#: ``--threads`` above this many per core the process may use is refused: such a count is a mistake, since the
#: threads beyond the cores only take turns on them (a few over can still be worth measuring)
THREADS_PER_CORE = 4


def _fmt(x: float) -> str:
    return f"{x:g}"


def whole(lowest: int = 0, *, also: tuple[int, ...] = (), note: str = "") -> Callable[[str], int]:
    """A type for integers of at least ``lowest``, or one of ``also`` (such as -1 for "no limit")."""
    kind = "a positive integer" if lowest == 1 and not also else "a whole number"
    bound = "at least 1" if lowest == 1 else f"{lowest} or more"
    bound += "".join(f", or {a}" for a in also) + note

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if n < lowest and n not in also:
            raise argparse.ArgumentTypeError(f"must be {bound}, got {n}")
        return n

    parse.__name__ = "integer"
    return parse


def number(lowest: float = 0.0, highest: float | None = None, *, above: bool = False,
           note: str = "") -> Callable[[str], float]:
    """A type for finite floats from ``lowest`` (excluded when ``above``) up to ``highest`` (included)."""
    low = f"above {_fmt(lowest)}" if above else f"{_fmt(lowest)} or more"
    bound = (f"{low} and at most {_fmt(highest)}" if highest is not None else low) + note

    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(x):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        if x < lowest or (above and x == lowest) or (highest is not None and x > highest):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {_fmt(x)}")
        return x

    parse.__name__ = "number"
    return parse


def threads(text: str) -> int:
    """``--threads``: at least 1, and at most :data:`THREADS_PER_CORE` per core this process may use."""
    n = whole(1)(text)
    from pterun.threads import default_num_threads  # no NumPy: only the standard library and pterun.config
    cores = default_num_threads()
    if n > THREADS_PER_CORE * cores:
        raise argparse.ArgumentTypeError(f"must be at most {THREADS_PER_CORE * cores} ({THREADS_PER_CORE} per core; "
                                         f"this process may use {cores}), got {n}")
    return n


def array_file(text: str) -> str:
    """``--input``: the name of a ``.npy`` or ``.npz`` file (whether it exists is for loading to say)."""
    if not text.endswith((".npy", ".npz")):
        raise argparse.ArgumentTypeError(f"expected a .npy or .npz file, got {text!r}")
    return text


def directory(text: str) -> str:
    """A directory to keep files in (made when needed): any path but an existing file or nothing."""
    import os

    if not text:
        raise argparse.ArgumentTypeError("expected a directory, got ''")
    if os.path.exists(text) and not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is a file, not a directory")
    return text
