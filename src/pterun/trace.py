"""Intermediate-output traces: save what every instruction wrote, and find where two runs first diverge.

``Method.trace(inputs)`` returns a :class:`~pterun.interp.observe.TraceEntry` per instruction (and per node of
an XNNPACK delegate run by the NumPy engine); :func:`save` writes them to an ``.npz`` any NumPy can read
(arrays ``e{entry}_{output}``, the entries' description as JSON in ``__trace__``); :func:`first_divergence`
compares two traces instruction by instruction.

Example::

    >>> from pterun import Runtime
    >>> from pterun.trace import save, load, first_divergence
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")   # doctest: +SKIP
    >>> save("a.npz", m.trace([x]))                                         # doctest: +SKIP
    >>> print(first_divergence(load("a.npz"), load("b.npz")))                # doctest: +SKIP
"""

from __future__ import annotations

import json
import os

import numpy as np

from pterun._record import Fields
from pterun.errors import InvalidArgumentError
from pterun.interp.observe import TraceEntry

__all__ = ["Divergence", "TraceEntry", "first_divergence", "load", "save"]

_FORMAT = "pterun-trace-1"


def save(path: str | os.PathLike, entries: list[TraceEntry]) -> str:
    """Write ``entries`` to ``path`` (``.npz`` is added when the name lacks it, as NumPy does) and return the name
    written; bfloat16 and other non-NumPy dtypes are stored as float32."""
    arrays, meta = {}, []
    for k, e in enumerate(entries):
        for j, o in enumerate(e.outputs):
            arrays[f"e{k}_{j}"] = o.astype(np.float32) if o.dtype.kind == "V" else o
        meta.append({"chain": e.chain, "index": e.index, "kind": e.kind, "name": e.name, "node": e.node,
                     "folded": e.folded, "outputs": len(e.outputs)})
    arrays["__trace__"] = np.array(json.dumps({"format": _FORMAT, "entries": meta}))
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    np.savez(path, **arrays)
    return path


def load(path: str | os.PathLike) -> list[TraceEntry]:
    """Read a trace :func:`save` wrote; InvalidArgumentError for a file that is not one."""
    with np.load(path, allow_pickle=False) as z:
        if "__trace__" not in z.files:
            raise InvalidArgumentError(f"{path}: not a pterun trace (no '__trace__' entry; written by 'pterun trace'?)")
        head = json.loads(str(z["__trace__"]))
        if head.get("format") != _FORMAT:
            raise InvalidArgumentError(f"{path}: trace format {head.get('format')!r}, expected {_FORMAT!r}")
        return [TraceEntry(m["chain"], m["index"], m["kind"], m["name"], m["node"], m["folded"],
                           [z[f"e{k}_{j}"] for j in range(m["outputs"])])
                for k, m in enumerate(head["entries"])]


class Divergence(Fields):
    """The first entry of trace ``a`` whose outputs differ from trace ``b``'s for the same instruction."""

    position: int  # in trace a
    entry: TraceEntry  # trace a's
    other: TraceEntry  # trace b's
    output: int  # which output differs
    reason: str  # what differs: shapes, dtypes, the operator, or the largest difference

    def __str__(self) -> str:
        e = self.entry
        node = f", node {e.node}" if e.node is not None else ""
        return (f"first divergence at chain {e.chain} instruction {e.index}{node} ({e.name}), output "
                f"{self.output}: {self.reason}")


def _key(e: TraceEntry) -> tuple:
    return (e.chain, e.index, -1 if e.node is None else e.node)


def first_divergence(a: list[TraceEntry], b: list[TraceEntry], rtol: float = 1e-5,
                     atol: float = 1e-6) -> Divergence | None:
    """The first entry of ``a`` (in execution order) whose outputs are not close to ``b``'s for the same
    instruction (same chain, index and delegate node, the n-th time it runs), or None. Instructions only one
    trace has (folded in one run, a delegate on another engine) are skipped; a different operator at the same
    place is a divergence."""
    seen_b: dict[tuple, list[TraceEntry]] = {}
    for e in b:
        seen_b.setdefault(_key(e), []).append(e)
    taken: dict[tuple, int] = {}
    for pos, e in enumerate(a):
        key = _key(e)
        n = taken.get(key, 0)
        taken[key] = n + 1
        others = seen_b.get(key, ())
        if n >= len(others):
            continue
        o = others[n]
        if o.name != e.name:
            return Divergence(pos, e, o, 0, f"the other trace runs {o.name} here")
        if len(o.outputs) != len(e.outputs):
            return Divergence(pos, e, o, 0, f"{len(e.outputs)} outputs, the other trace has {len(o.outputs)}")
        for j, (x, y) in enumerate(zip(e.outputs, o.outputs)):
            reason = _differs(x, y, rtol, atol)
            if reason is not None:
                return Divergence(pos, e, o, j, reason)
    return None


def _differs(x: np.ndarray, y: np.ndarray, rtol: float, atol: float) -> str | None:
    if x.shape != y.shape:
        return f"shape {list(x.shape)}, the other trace has {list(y.shape)}"
    if x.dtype != y.dtype:
        return f"dtype {x.dtype}, the other trace has {y.dtype}"
    if x.dtype.kind in "biuUS" or x.size == 0:
        if np.array_equal(x, y):
            return None
        return f"{int(np.count_nonzero(x != y))} of {x.size} elements differ"
    xf, yf = x.astype(np.float64), y.astype(np.float64)
    close = np.isclose(xf, yf, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return None
    diff = np.abs(xf - yf)
    diff[close] = 0
    worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(diff), np.inf, diff))), x.shape)
    return (f"{int(np.count_nonzero(~close))} of {x.size} elements differ beyond rtol={rtol:g}, atol={atol:g}; "
            f"the largest at {list(map(int, worst))}: {float(xf[worst]):.9g} vs {float(yf[worst]):.9g}")
