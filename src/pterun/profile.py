"""Where a method's time goes: per-operator (and per-XNNPACK-node) timings.

Example::

    >>> from pterun import Runtime
    >>> from pterun.profile import profile, format_profile
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")   # doctest: +SKIP
    >>> print(format_profile(profile(m, inputs, repeat=10)))               # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

if TYPE_CHECKING:
    from pterun.runtime import Method

__all__ = ["Profile", "ProfileRow", "profile", "format_profile"]

#: what a profile says of XNNPACK delegates that run on LiteRT
LITERT_NOTE = ("XNNPACK delegates on the LiteRT engine, and runs of operators compiled into one LiteRT program, are "
               "one row each: LiteRT's Python API reports no per-node times. Per-operator and per-node rows: "
               "--engine numpy (Runtime(engine='numpy')), whose times are the NumPy engine's, not XNNPACK's.")


@dataclass(frozen=True)
class ProfileRow:
    name: str  # operator name, "XnnpackBackend/XNNConv2d" for delegate nodes, or "MoveCall" etc.
    calls: int  # per execute
    seconds: float  # per execute, summed over the calls

    @property
    def mean_us(self) -> float:
        return self.seconds / max(self.calls, 1) * 1e6


class Profile(list):
    """The rows of a profile (a list of :class:`ProfileRow`, slowest first), with ``observed_s``: one observed
    ``execute()`` as a whole, of which the rows are the steps and the rest the loop and the observer's own cost;
    and ``notes``: what the rows cannot show."""

    def __init__(self, rows: Iterable[ProfileRow], observed_s: float, notes: tuple = ()) -> None:
        super().__init__(rows)
        self.observed_s = observed_s
        self.notes = tuple(notes)


def profile(method: Method, inputs: Sequence[Any], repeat: int = 10,
            progress: Callable[[int, int], None] | None = None) -> Profile:
    """Run ``method`` on ``inputs`` ``repeat`` times with every step timed; rows sorted by time, per call.

    Time spent inside an XNNPACK delegate whose engine reports its nodes (the NumPy engine) is broken down by
    node type (the delegate's own row then holds only its overhead: input/output conversion); a delegate on the
    LiteRT engine is one row, and the profile's ``notes`` say so. Uses the public observer,
    ``Method.execute(hook=)``: the method itself is never changed. ``progress(done, repeat)`` is called after each
    run.
    """
    totals, counts = defaultdict(float), defaultdict(int)
    perf = time.perf_counter

    def timed(event, run) -> None:
        t = perf()
        try:
            run()
        finally:
            totals[event.name] += perf() - t
            counts[event.name] += 1

    method.execute(inputs, hook=timed)  # warm-up, not counted
    totals.clear()
    counts.clear()
    observed = 0.0
    for k in range(repeat):
        t0 = perf()
        method.execute(inputs, hook=timed)
        observed += perf() - t0
        if progress is not None:
            progress(k + 1, repeat)
    litert = any(d.engine == "litert" for d in method.delegates) or \
        any(e.kind == "DelegateCall" and e.detail for e in method.steps)  # a compiled run (merged calls)
    return Profile(_rows(totals, counts, repeat, litert), observed / repeat, (LITERT_NOTE,) if litert else ())


def _rows(totals: dict, counts: dict, repeat: int, litert: bool) -> list[ProfileRow]:
    nested = defaultdict(float)
    for name, t in totals.items():
        if "/" in name:
            nested[name.split("/")[0]] += t
    rows = []
    for name, t in totals.items():
        calls = counts[name] // repeat
        if name.startswith("delegate ") and name[len("delegate "):] in nested:
            t -= nested[name[len("delegate "):]]
            name = f"{name} (overhead)"
        elif name.startswith("delegate ") and litert:
            name = f"{name} (whole calls)"
        rows.append(ProfileRow(name, calls, t / repeat))
    return sorted(rows, key=lambda r: -r.seconds)


def format_profile(rows: list[ProfileRow], total_s: float | None = None) -> str:
    """The rows as a table; then the total in steps, and for a :class:`Profile` what one observed ``execute()``
    took besides them (the loop between steps, the observer's own cost), so the lines add up to the observed
    call; ``total_s``, when given, is one ``execute()`` without the observer."""
    total = sum(r.seconds for r in rows)
    width = max([len(r.name) for r in rows] + [len("total per execute(), observed")])
    lines = [f"{'operator':<{width}}  {'calls':>5}  {'ms/run':>8}  {'share':>6}  {'us/call':>9}"]
    for r in rows:
        lines.append(f"{r.name:<{width}}  {r.calls:>5}  {r.seconds * 1e3:>8.3f}  "
                     f"{r.seconds / total * 100 if total else 0:>5.1f}%  {r.mean_us:>9.1f}")
    lines.append(f"{'total in steps':<{width}}  {'':>5}  {total * 1e3:>8.3f}")
    observed = getattr(rows, "observed_s", None)
    if observed is not None:
        lines.append(f"{'between steps (loop, observer)':<{width}}  {'':>5}  {max(observed - total, 0) * 1e3:>8.3f}")
        lines.append(f"{'total per execute(), observed':<{width}}  {'':>5}  {observed * 1e3:>8.3f}")
    if total_s is not None:
        lines.append(f"{'total per execute(), plain':<{width}}  {'':>5}  {total_s * 1e3:>8.3f}")
    for note in getattr(rows, "notes", ()):
        lines.append(f"note: {note}")
    return "\n".join(lines)
