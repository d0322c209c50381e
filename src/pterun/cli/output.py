"""How the commands print: one-line summaries of values, JSON that any parser reads, progress on stderr.

Example::

    >>> import numpy as np
    >>> summary(np.arange(3, dtype=np.int64))
    'int64[3] [0, 1, 2]'
    >>> ranges([0, 1, 2, 5, 7, 8])
    '0-2, 5, 7-8'
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

__all__ = ["SHOW_VALUES", "JSON_VALUES", "PROGRESS_AFTER_S", "PROGRESS_EVERY_S", "summary", "values_text",
           "json_value", "dump", "Progress", "stats", "ranges"]

#: outputs with at most this many elements are printed in full by ``pterun run``
SHOW_VALUES = 64
#: ``pterun run --json`` writes the values of outputs up to this many elements (larger ones: use --output)
JSON_VALUES = 100_000
#: ``pterun bench`` reports progress on stderr once a run has taken this long (seconds)
PROGRESS_AFTER_S = 2.0
#: then a new line this often when stderr is not a terminal (seconds; a terminal's line rewrites itself twice a second)
PROGRESS_EVERY_S = 10.0


def summary(v) -> str:
    """One line for a value: dtype and shape, then min/max/mean (floats), a count (bools) or the first values."""
    if isinstance(v, np.ndarray):
        head = f"{v.dtype.name}{list(v.shape)}"
        if v.size == 0:
            return head + " (empty)"
        if v.dtype.kind in "fV":
            f = v.astype(np.float64)
            return f"{head} min={f.min():.6g} max={f.max():.6g} mean={f.mean():.6g}"
        if v.dtype == np.bool_:
            return f"{head} true={int(v.sum())}/{v.size}"
        flat = v.reshape(-1)
        shown = ", ".join(str(x) for x in flat[:8]) + (", ..." if flat.size > 8 else "")
        return f"{head} [{shown}]"
    return f"{type(v).__name__} {v!r}"


def values_text(v: np.ndarray) -> str:
    """A small array's values, indented under its summary line."""
    text = np.array2string(v, precision=6, max_line_width=100, threshold=SHOW_VALUES + 1)
    return "\n".join("    " + line for line in text.splitlines())


def json_value(v) -> dict:
    """A value as JSON: kind, dtype, shape and values (up to :data:`JSON_VALUES` elements) of a tensor."""
    if isinstance(v, np.ndarray):
        small = v.size <= JSON_VALUES
        values = v.astype(np.float64).tolist() if small and v.dtype.kind == "V" else v.tolist() if small else None
        return {"kind": "Tensor", "dtype": v.dtype.name, "shape": list(v.shape), "values": values}
    kind = {bool: "Bool", int: "Int", float: "Double", str: "String", type(None): "None"}.get(type(v), type(v).__name__)
    return {"kind": kind, "value": v}


def dump(obj) -> str:
    """``obj`` as indented JSON; NaN and infinity are not JSON, so they become null and any JSON parser reads it."""
    def clean(x):
        if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
            return None
        if isinstance(x, list):
            return [clean(e) for e in x]
        if isinstance(x, dict):
            return {k: clean(e) for k, e in x.items()}
        return x
    return json.dumps(clean(obj), indent=2)


class Progress:
    """Progress of ``pterun bench`` on stderr, once a run has taken :data:`PROGRESS_AFTER_S`: a line that rewrites
    itself on a terminal, a line every 10 s otherwise. Timed calls are counted as the result line counts them
    ("6 of 1000 calls"), warm-up calls apart."""

    def __init__(self, warmup: int, repeat: int):
        self.warmup, self.repeat, self.start = warmup, repeat, time.perf_counter()
        self.tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.next_at = self.start + PROGRESS_AFTER_S
        self.shown = False

    def warming(self, done: int) -> None:
        """``done`` warm-up calls have run."""
        self._show(lambda now: f"bench: warm-up call {done} of {self.warmup}, {now - self.start:.0f} s")

    def timed(self, times: list[float]) -> None:
        """``len(times)`` timed calls have run, taking ``times``."""
        def line(now: float) -> str:
            median = sorted(times)[len(times) // 2]
            left = median * (self.repeat - len(times))
            return (f"bench: {len(times)} of {self.repeat} calls, median so far {median * 1e3:.3f} ms, "
                    f"{now - self.start:.0f} s" + (f", about {left:.0f} s left" if left >= 1 else ""))
        self._show(line)

    def profiled(self, done: int, total: int) -> None:
        """``done`` of ``total`` observed runs of ``--profile`` have run."""
        self._show(lambda now: f"bench: profile run {done} of {total}, {now - self.start:.0f} s")

    def _show(self, line) -> None:
        now = time.perf_counter()
        if now < self.next_at:
            return
        self.next_at = now + (0.5 if self.tty else PROGRESS_EVERY_S)
        text = line(now)
        sys.stderr.write(("\r" + text + "\033[K") if self.tty else text + "\n")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def stats(times: list[float]) -> dict[str, float]:
    """Median, p90, min and mean of ``times`` (NaN for each when there are none)."""
    if not times:
        return {"median": float("nan"), "p90": float("nan"), "min": float("nan"), "mean": float("nan")}
    s = sorted(times)
    return {"median": s[len(s) // 2], "p90": s[min(int(len(s) * 0.9), len(s) - 1)], "min": s[0],
            "mean": sum(s) / len(s)}


def ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)
