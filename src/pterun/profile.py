"""Where a method's time goes: per-operator (and per-XNNPACK-node) timings.

Example::

    >>> from pterun import Runtime
    >>> from pterun.profile import profile, format_profile
    >>> m = Runtime.get().load_program("model.pte").load_method("forward")   # doctest: +SKIP
    >>> print(format_profile(profile(m, inputs, repeat=10)))               # doctest: +SKIP
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from pterun.runtime import Method

__all__ = ["ProfileRow", "profile", "format_profile"]

_NODE_NAME = re.compile(r"\((XNN\w+)\)")


@dataclass(frozen=True)
class ProfileRow:
    name: str  # operator name, "XnnpackBackend/XNNConv2d" for delegate nodes, or "MoveCall" etc.
    calls: int  # per execute
    seconds: float  # per execute, summed over the calls

    @property
    def mean_us(self) -> float:
        return self.seconds / max(self.calls, 1) * 1e6


def _timed(fn, name, totals, counts):
    perf = time.perf_counter

    def step(*args):
        t = perf()
        try:
            return fn(*args)
        finally:
            totals[name] += perf() - t
            counts[name] += 1
    return step


def profile(method: Method, inputs: Sequence[Any], repeat: int = 10) -> list[ProfileRow]:
    """Run ``method`` on ``inputs`` ``repeat`` times with every step timed; rows sorted by time, per call.

    Time spent inside an XNNPACK delegate is broken down by node type (the delegate's own row then holds
    only its overhead: input/output conversion). Runs under the method's lock; the method is unchanged
    afterwards.
    """
    runner = method._runner
    totals, counts = defaultdict(float), defaultdict(int)
    saved_chains = runner.chains
    saved_plans = []
    with method._lock:
        try:
            runner.chains = [(jumps, [_timed(s, info[i][0], totals, counts) for i, s in enumerate(steps)], info)
                             for jumps, steps, info in saved_chains]
            for ex in runner.executors:
                if hasattr(ex, "schedule") and hasattr(ex, "names"):
                    saved_plans.append((ex, ex.schedule))
                    ex.schedule = [(_timed(step, f"XnnpackBackend/{_node(ex.names[i])}", totals, counts), dead)
                                   for i, (step, dead) in enumerate(ex.schedule)]
        except Exception:
            runner.chains = saved_chains
            raise
    try:
        method.execute(inputs)  # warm-up, not counted
        totals.clear()
        counts.clear()
        for _ in range(repeat):
            method.execute(inputs)
    finally:
        with method._lock:
            runner.chains = saved_chains
            for ex, schedule in saved_plans:
                ex.schedule = schedule
    nested = defaultdict(float)
    for name, t in totals.items():
        if "/" in name:
            nested[name.split("/")[0]] += t
    rows = []
    for name, t in totals.items():
        own = t
        if name.startswith("delegate "):
            own -= nested.get(name[len("delegate "):], 0.0)
            name = f"{name} (overhead)"
        rows.append(ProfileRow(name, counts[name.replace(" (overhead)", "")] // repeat, own / repeat))
    return sorted(rows, key=lambda r: -r.seconds)


def _node(desc: str) -> str:
    m = _NODE_NAME.search(desc)
    return m.group(1) if m else desc


def format_profile(rows: list[ProfileRow], total_s: float | None = None) -> str:
    total = sum(r.seconds for r in rows)
    width = max((len(r.name) for r in rows), default=10)
    lines = [f"{'operator':<{width}}  {'calls':>5}  {'ms/run':>8}  {'share':>6}  {'us/call':>9}"]
    for r in rows:
        lines.append(f"{r.name:<{width}}  {r.calls:>5}  {r.seconds * 1e3:>8.3f}  "
                     f"{r.seconds / total * 100 if total else 0:>5.1f}%  {r.mean_us:>9.1f}")
    lines.append(f"{'total in steps':<{width}}  {'':>5}  {total * 1e3:>8.3f}")
    if total_s is not None:
        lines.append(f"{'total per execute()':<{width}}  {'':>5}  {total_s * 1e3:>8.3f}")
    return "\n".join(lines)
