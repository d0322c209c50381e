"""One XNNPACK graph from a run of delegate calls (see :mod:`pterun.interp.merge`).

The graphs of the run's delegates are renumbered into one :class:`~.graph.Graph`, in program order. A delegate
input that an earlier part of the run wrote becomes an internal value, joined to the value that wrote it; the
``mean`` operators the run absorbed become :data:`.graph.MEAN` nodes (a node type of pterun's, not of the payload
format: XNNPACK's own partitioner leaves RMSNorm's mean to the portable kernels). What the run reads from outside
becomes the merged graph's external inputs, what anything outside reads its external outputs; everything else is
internal and never reaches the method's memory.

Joins are made only where the two sides agree exactly: float32, unquantized, the same dims. Anything else
raises :class:`CannotMerge` and the run's delegates stay separate.

Example::

    >>> g, args = merge_graphs(parts, graphs, outside, tensors)   # doctest: +SKIP
    >>> [n.name for n in g.nodes][:3], args[:2]                   # doctest: +SKIP
    (['Add', 'Multiply', 'Mean'], (81, 394))
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pterun.delegates.xnnpack import graph as G

__all__ = ["CannotMerge", "merge_graphs", "absorbs"]


class CannotMerge(Exception):
    """The run's graphs do not join cleanly; the delegates run one by one."""


def absorbs(op) -> bool:
    """Whether the merged graph can hold the operator (:class:`pterun.interp.merge.Absorbed`)."""
    return op.op == "mean"


def _id_fields(fields: dict) -> list:
    return [k for k in fields if k.endswith("_id")]


def merge_graphs(parts, graphs: dict, outside: Callable[[int], bool], tensors: list) -> tuple[G.Graph, tuple]:
    """(merged graph, the merged call's argument slots: inputs, then outputs).

    ``parts`` are the run's DelegateParts and Absorbed operators in order; ``graphs[delegate_index]`` each
    delegate's graph; ``outside(slot)`` whether anything but the run reads a slot; ``tensors[slot]`` the method's
    tensors (for the dims of what an absorbed operator writes)."""
    values: dict[int, G.Value] = {}
    nodes: list[G.Node] = []
    current: dict[int, int] = {}  # slot -> merged value id holding what the run last wrote there
    inputs: dict[int, int] = {}  # slot read from outside -> its merged value id
    written: list[tuple[int, int]] = []  # (merged value id, slot), in the order the run writes them

    def add(v: G.Value, **changes) -> int:
        vid = len(values)
        values[vid] = v._replace(id=vid, **changes)
        return vid

    def read(slot: int, v: G.Value) -> int:
        """The merged value a part reads for ``slot``, where the part declares it as ``v``."""
        src = current.get(slot)
        if src is None:
            src = inputs.get(slot)
        if src is None:
            inputs[slot] = src = add(v, external_id=None, flags=0)
            return src
        have = values[src]
        for w in (have, v):
            if w.datatype != G.FP32 or w.quant is not None or w.dq_datatype or w.data is not None:
                raise CannotMerge(f"slot {slot}: a {w.describe()} join (only unquantized float32 joins)")
        if tuple(have.dims) != tuple(v.dims):
            raise CannotMerge(f"slot {slot}: dims {list(have.dims)} meet {list(v.dims)}")
        return src

    def write(slot: int, vid: int) -> None:
        current[slot] = vid
        written.append((vid, slot))

    for part in parts:
        if hasattr(part, "delegate_index"):
            g = graphs[part.delegate_index]
            remap = {}
            for v in g.values.values():
                if v.external_id is not None and v.flags & G.VALUE_EXTERNAL_INPUT:
                    if v.flags & G.VALUE_EXTERNAL_OUTPUT:
                        raise CannotMerge(f"{v.describe()} is both an input and an output")
                    remap[v.id] = read(part.args[v.external_id], v)
                else:
                    remap[v.id] = add(v, external_id=None, flags=0)
            for n in g.nodes:
                fields = dict(n.fields)
                for k in _id_fields(fields):
                    if fields[k] != G.INVALID_ID:
                        fields[k] = remap[fields[k]]
                nodes.append(n._replace(index=len(nodes), fields=fields))
            for v in g.outputs:
                write(part.args[v.external_id], remap[v.id])
        else:  # an absorbed mean
            (x,), (out,) = part.inputs, part.outputs
            xt, ot = tensors[x], tensors[out]
            src = read(x, G.Value(0, G.FP32, tuple(xt.shape), None, 0, None, None))
            dims = tuple(values[src].dims)
            axes, keep = part.attrs["axes"], part.attrs["keepdim"]
            want = tuple(1 if a in axes else d for a, d in enumerate(dims)) if keep else \
                tuple(d for a, d in enumerate(dims) if a not in axes)
            if want != tuple(ot.shape) or any(a >= len(dims) for a in axes):
                raise CannotMerge(f"mean over {list(axes)} of {list(dims)} does not give {list(ot.shape)}")
            vid = add(G.Value(0, G.FP32, want, None, 0, None, None))
            nodes.append(G.Node(len(nodes), G.MEAN, "Mean", {"input_id": src, "output_id": vid, "axes": axes,
                                                         "keepdim": keep}, -math.inf, math.inf, None))
            write(out, vid)

    outs, seen = [], set()
    for vid, slot in written:
        if current[slot] == vid and outside(slot):
            if vid in seen:
                raise CannotMerge(f"value {vid} is written to two slots")
            seen.add(vid)
            outs.append((vid, slot))
    args = tuple(inputs) + tuple(slot for _, slot in outs)
    for k, vid in enumerate(inputs.values()):
        values[vid] = values[vid]._replace(external_id=k, flags=G.VALUE_EXTERNAL_INPUT)
    for k, (vid, _) in enumerate(outs, len(inputs)):
        values[vid] = values[vid]._replace(external_id=k, flags=G.VALUE_EXTERNAL_OUTPUT)
    return G.Graph(values, nodes, len(args)), args
