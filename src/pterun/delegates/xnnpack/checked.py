"""Indices checked before a merged call gathers rows by them.

A merged graph may hold an embedding (``aten::embedding.out`` as a :data:`.graph.KERNEL` node) whose indices come
into the call from outside it, the caller's token ids among them. The portable kernel checks every index and
names a bad one; LiteRT's GATHER, which the LiteRT engine lowers it to, fails the whole invoke with its own log
text instead. :class:`Checked` keeps the kernel's contract: before each call it checks those indices with the
kernel's own check (:func:`pterun.kernels.indexing.check_range`: the same IndexError and message), then runs the
plan it wraps. A call whose indices are all in range pays ~1 us for a few token ids.

Example::

    >>> checks = index_checks(graph)          # doctest: +SKIP
    >>> plan = Checked(plan, checks) if checks else plan   # doctest: +SKIP
"""

from __future__ import annotations

from pterun.delegates.xnnpack import graph as G
from pterun.kernels.indexing import check_range

__all__ = ["Checked", "index_checks"]

EMBEDDING = "aten::embedding.out"


def index_checks(graph: G.Graph) -> tuple:
    """(external input id, table rows) of each embedding in ``graph`` whose indices are an input of the graph."""
    out = []
    for n in graph.nodes:
        if n.kind != G.KERNEL or n.fields.get("op") != EMBEDDING:
            continue
        table, index = graph.values[n.fields["input1_id"]], graph.values[n.fields["input2_id"]]
        if index.flags & G.VALUE_EXTERNAL_INPUT:
            out.append((index.external_id, int(table.dims[0])))
    return tuple(out)


class Checked:
    """A merged call's executor (a LiteRT plan) whose embeddings' indices are checked before each call
    (``checks`` from :func:`index_checks`); everything else is the plan's own."""

    def __init__(self, plan, checks: tuple):
        self.wrapped, self.checks = plan, checks
        if getattr(plan, "call_direct", None) is None:
            self.call_direct = None  # as the plan: no direct calls (:mod:`pterun.interp.direct`)
        else:  # the checks by place in call_direct's arrays (external-input order)
            position = {ext: k for k, (ext, *_) in enumerate(plan.inputs)}
            self._direct = tuple((position[ext], rows) for ext, rows in checks)

    def execute(self, args: list) -> None:
        for ext, rows in self.checks:
            check_range(args[ext].array, rows, "embedding")
        return self.wrapped.execute(args)

    def call_direct(self, arrays: list) -> list | None:
        for k, rows in self._direct:
            check_range(arrays[k], rows, "embedding")
        return self.wrapped.call_direct(arrays)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.wrapped, name)
