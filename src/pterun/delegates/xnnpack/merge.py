"""One XNNPACK graph from a run of delegate calls (see :mod:`pterun.interp.merge`).

The graphs of the run's delegates are renumbered into one :class:`~.graph.Graph`, in program order. A delegate
input that an earlier part of the run wrote becomes an internal value, joined to the value that wrote it; a small
program constant it reads becomes a constant of the graph. The operators the run absorbed become nodes: ``mean``
a :data:`.graph.MEAN` node (a node type of pterun's, not of the payload format: XNNPACK's own partitioner leaves
RMSNorm's mean to the portable kernels), views, reshapes and squeezes StaticReshape, slices StaticSlice, each
following the one dim a view says changes at run time. A view (``et_view``) aliases its input: its result never
reaches memory from the merged call, and the view is replayed after it where something outside reads it. What
the run reads from outside becomes the merged graph's external inputs, what anything outside reads its external
outputs; everything else is internal and never reaches the method's memory.

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

import numpy as np

from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.kernel_ops import supports

__all__ = ["CannotMerge", "FORMS", "merge_graphs", "absorbs"]


_KIND = {name: kind for kind, (name, _) in G.NODE_TYPES.items()}


class CannotMerge(Exception):
    """The run's graphs do not join cleanly; the delegates run one by one."""


#: the forms of :class:`pterun.interp.merge.Absorbed` a merged graph holds as nodes (see ``_absorbed_node``;
#: ``kernel``: a :data:`.graph.KERNEL` node)
FORMS = ("mean", "view", "reshape", "squeeze", "slice", "select", "kernel", "update_cache", "sdpa")


def absorbs(op) -> bool:
    """Whether the merged graph can hold the operator (:class:`pterun.interp.merge.Absorbed`)."""
    return op.op in FORMS and (op.op != "kernel" or supports(op.attrs["name"], op.attrs["args"]) is None)


def _id_fields(fields: dict) -> list:
    return [k for k in fields if k.endswith("_id")]


def merge_graphs(parts, graphs: dict, outside: Callable[[int], bool], tensors: list, shared) \
        -> tuple[G.Graph, tuple]:
    """(merged graph, the merged call's argument slots: inputs, then outputs).

    ``parts`` are the run's DelegateParts and Absorbed operators in order; ``graphs[delegate_index]`` each
    delegate's graph; ``outside(slot)`` whether anything but the run reads a slot (by name or through a value over
    the same bytes); ``tensors[slot]`` the method's tensors (for the dims of what an absorbed operator writes);
    ``shared`` says which slots lie over the same bytes (``overlapping(slot)``, ``same(a, b)``:
    :class:`pterun.interp.access.SharedBytes`).

    Two values may be one buffer: a part that reads a slot whose bytes an earlier part of the run wrote through
    another slot reads what that part wrote. Where the two slots are exactly the same bytes holding the same
    float32 elements (a flatten that exists only in the memory plan), the read joins the written value through a
    reshape; any other overlap raises :class:`CannotMerge`."""
    m = _Merger(tensors, shared)
    for part in parts:
        if hasattr(part, "delegate_index"):
            m.delegate(graphs[part.delegate_index], part.args)
        else:
            m.absorbed(part)
    return m.finish(outside)


class _Merger:
    """The merged graph as it is built, part by part: values and nodes renumbered into one graph, and what the
    run last wrote to each slot."""

    def __init__(self, tensors: list, shared):
        self.tensors, self.shared = tensors, shared
        self.values: dict[int, G.Value] = {}
        self.nodes: list[G.Node] = []
        self.current: dict[int, int] = {}  # slot -> merged value id holding what the run last wrote there
        self.seq = 0  # counts the run's writes, in order
        self.set_at: dict[int, int] = {}  # slot -> the count when ``current[slot]`` was set
        self.wrote_at: dict[int, int] = {}  # slot -> the count when the run last wrote its bytes (views write none)
        # merged value id -> which of its dims the run-time size decides (known where an absorbed view made it)
        self.runtime_dims: dict[int, tuple] = {}
        self.inputs: dict[int, int] = {}  # slot read from outside -> its merged value id
        self.constants: dict[int, int] = {}  # slot of a small program constant -> the graph's constant value
        self.written: list[tuple[int, int]] = []  # (merged value id, slot), in the order the run writes them
        self.dropped: set[int] = set()  # slots a kernel node writes in the program but not in the graph
        self.caches: dict[int, int] = {}  # KV cache slot -> elements a position holds (see .attention)
        self.state: dict[tuple, int] = {}  # (kind, slot) -> the value last written to state no slot names

    def add(self, v: G.Value, **changes) -> int:
        vid = len(self.values)
        self.values[vid] = v._replace(id=vid, **changes)
        return vid

    def bind(self, slot: int, vid: int | None, wrote: bool) -> None:
        if vid is not None:
            self.dropped.discard(slot)
        self.seq += 1
        self.current[slot], self.set_at[slot] = vid, self.seq
        if wrote:
            self.wrote_at[slot] = self.seq

    def write(self, slot: int, vid: int) -> None:
        self.bind(slot, vid, True)
        self.written.append((vid, slot))

    def read(self, slot: int, v: G.Value) -> int:
        """The merged value a part reads for ``slot``, where the part declares it as ``v``."""
        src = self.current.get(slot)
        # a constant (of the program, or computed at load and frozen out of the memory plan) shares no bytes
        array = getattr(self.tensors[slot], "array", None)
        frozen = array is not None and not array.flags.writeable
        last = None if frozen else \
            max(((self.wrote_at[k], k) for k in self.shared.overlapping(slot) if k in self.wrote_at), default=None)
        newer = last is not None and (src is None or last[0] > self.set_at[slot])  # another slot wrote them last
        if newer and last[1] in self.dropped or not newer and src is None and slot in self.dropped:
            raise CannotMerge(f"slot {slot} reads what a kernel wrote to slot {last[1] if newer else slot}, which "
                              "the merged graph does not produce")
        if newer:
            src = self.alias(slot, last[1], v)  # an earlier part wrote these bytes through another slot
        if src is None and slot in self.constants:
            src = self.constants[slot]
            have = self.values[src]
            if tuple(have.dims) != tuple(v.dims) or have.datatype != v.datatype:
                raise CannotMerge(f"slot {slot}: constant {have.describe()} read as {v.describe()}")
            return src
        if src is None:
            src = self.inputs.get(slot)
        if src is None:
            data = _small_constant(self.tensors[slot], v)
            if data is not None:  # part of the graph: nothing to pass in on every call
                self.constants[slot] = src = self.add(v, external_id=None, flags=0, data=data)
                return src
            self.inputs[slot] = src = self.add(v, external_id=None, flags=0)
            return src
        have = self.values[src]  # what the run wrote there (a constant where it computed it from constants)
        for w in (have, v):
            if w.datatype not in (G.FP32, G.BOOL, G.INT64) or w.quant is not None or w.dq_datatype or \
                    w is v and w.data is not None or w.datatype != have.datatype:
                raise CannotMerge(f"slot {slot}: a {w.describe()} join (only unquantized float32, bool or int64 "
                                  "joins)")
        if tuple(have.dims) != tuple(v.dims):
            if have.datatype == G.FP32 and all(d == 1 for d in tuple(have.dims) + tuple(v.dims)):
                return self.reshaped(src, v.dims)  # one element: a rank-0 tensor read as a delegate's [1]
            raise CannotMerge(f"slot {slot}: dims {list(have.dims)} meet {list(v.dims)}")
        return src

    def reshaped(self, src: int, dims) -> int:
        """A new value holding ``src``'s float32 elements at ``dims`` (a StaticReshape node)."""
        vid = self.add(G.Value(0, G.FP32, tuple(dims), None, 0, None, None))
        self.node(_KIND["StaticReshape"], "StaticReshape",
                  {"num_dims": len(dims), "new_shape": list(dims), "flags": 0, "input_id": src, "output_id": vid})
        return vid

    def alias(self, slot: int, other: int, v: G.Value) -> int:
        """The value a read of ``slot`` sees where the run last wrote its bytes through ``other``."""
        src = self.current[other]
        have, t, u = self.values[src], self.tensors[slot], self.tensors[other]
        if not self.shared.same(slot, other):
            raise CannotMerge(f"slot {slot} reads memory that slot {other} wrote in part ({u!r} over {t!r})")
        if not (_plain_fp32(have) and _plain_fp32(v) and _plain(t) and _plain(u)) or \
                math.prod(have.dims) != math.prod(v.dims):
            raise CannotMerge(f"slot {slot} reads the bytes slot {other} wrote, as another value "
                              f"({have.describe()} read as {v.describe()})")
        if tuple(have.dims) == tuple(v.dims):
            return src
        vid = self.reshaped(src, v.dims)
        self.bind(slot, vid, False)
        return vid

    def node(self, kind: int, name: str, fields: dict) -> None:
        self.nodes.append(G.Node(len(self.nodes), kind, name, fields, -math.inf, math.inf, None))

    def delegate(self, g: G.Graph, args: tuple) -> None:
        """One delegate call's graph, its external values joined to what the run holds for its arguments."""
        remap = {}
        for v in g.values.values():
            if v.external_id is not None and v.flags & G.VALUE_EXTERNAL_INPUT:
                if v.flags & G.VALUE_EXTERNAL_OUTPUT:
                    raise CannotMerge(f"{v.describe()} is both an input and an output")
                remap[v.id] = self.read(args[v.external_id], v)
            else:
                remap[v.id] = self.add(v, external_id=None, flags=0)
        for n in g.nodes:
            fields = dict(n.fields)
            for k in _id_fields(fields):
                if fields[k] != G.INVALID_ID:
                    fields[k] = remap[fields[k]]
            self.nodes.append(n._replace(index=len(self.nodes), fields=fields))
        for v in g.outputs:
            self.write(args[v.external_id], remap[v.id])

    def kernel(self, part) -> None:
        """An operator held as itself: a :data:`.graph.KERNEL` node reading its input tensors and writing its first
        output. Its other outputs (a layer norm's mean and rstd) are not produced: anything that reads them,
        inside the run or outside, keeps the run apart (:meth:`read`, :meth:`finish`)."""
        fields = {}
        for k, slot in enumerate(part.inputs):
            t = self.tensors[slot]
            v = G.Value(0, _DATATYPES[t.dtype], tuple(t.shape), None, 0, None, None)
            if slot not in self.current and slot not in self.inputs and slot not in self.constants and \
                    not any(o in self.wrote_at for o in self.shared.overlapping(slot)):
                data = _constant(t, v)  # a weight: part of the graph, whatever its size (LiteRT packs it)
                if data is not None:
                    self.constants[slot] = self.add(v, external_id=None, flags=0, data=data)
            fields[f"input{k + 1}_id"] = self.read(slot, v)
        out, *rest = part.outputs
        t = self.tensors[out]
        v = G.Value(0, _DATATYPES[t.dtype], tuple(t.shape), None, 0, None, None)
        ins = [self.values[fields[f"input{k + 1}_id"]] for k in range(len(part.inputs))]
        if ins and all(i.data is not None for i in ins):  # constants only (a weight's transpose): computed now
            arrays = [np.frombuffer(i.data, G.STORAGE_DTYPES[i.datatype]).reshape(i.dims) for i in ins]
            r = np.empty(v.dims, G.STORAGE_DTYPES[v.datatype])
            np.copyto(r, part.attrs["call"](*arrays)[0], casting="unsafe")
            data = r.reshape(-1).view(np.uint8)
            data.flags.writeable = False
            vid = self.add(v, data=data)
            if part.attrs.get("replayed"):  # what outside reads, the interpreter replays after the call
                self.bind(out, vid, False)
                return
        else:
            vid = self.add(v)
            self.node(G.KERNEL, "Kernel", {**fields, "output_id": vid, "op": part.attrs["name"],
                                           "args": part.attrs["args"], "call": part.attrs["call"]})
        self.write(out, vid)
        for slot in rest:
            self.bind(slot, None, True)
            self.dropped.add(slot)

    def absorbed(self, part) -> None:
        """An absorbed operator: one node of the merged graph."""
        if part.op == "kernel":
            return self.kernel(part)
        if part.op in ("update_cache", "sdpa"):
            from pterun.delegates.xnnpack.litert_engine.attention import join

            return join(self, part)
        (x,), (out,) = part.inputs, part.outputs
        tensors = self.tensors
        src = self.read(x, G.Value(0, G.FP32, tuple(tensors[x].shape), None, 0, None, None))
        dyn = self.runtime_dims.get(src)
        if dyn is None and part.op == "select" and not tensors[out].dynamic:  # only the selected dim may change
            dyn = tuple(a == part.attrs["dim"] for a in range(len(tensors[x].shape)))
        node, want, dyn = _absorbed_node(part, self.values[src], dyn, tensors[x].dynamic, tuple(tensors[out].shape))
        if want != tuple(tensors[out].shape):
            raise CannotMerge(f"{part.op} of {list(self.values[src].dims)} gives {list(want)}, the program's tensor "
                              f"has {list(tensors[out].shape)}")
        vid = self.add(G.Value(0, G.FP32, want, None, 0, None, None))
        self.node(node[0], node[1], {"input_id": src, "output_id": vid, **node[2]})
        if dyn is not None:
            self.runtime_dims[vid] = dyn
        if part.op == "view":
            self.bind(out, vid, False)  # never written to memory: the view, where read outside, is replayed
        else:
            self.write(out, vid)

    def finish(self, outside: Callable[[int], bool]) -> tuple[G.Graph, tuple]:
        """The graph, with what the run reads from outside as its inputs and what outside reads as its outputs."""
        outs, seen = [], set()
        for slot in self.dropped:
            if outside(slot):
                raise CannotMerge(f"slot {slot} is read outside the run, but the kernel node writing it in the "
                                  "program does not produce it in the graph")
        for vid, slot in self.written:
            if self.current[slot] == vid and (outside(slot) or slot in self.caches):  # a cache is method state
                if vid in seen:
                    raise CannotMerge(f"value {vid} is written to two slots")
                seen.add(vid)
                outs.append((vid, slot))
        outs += [(vid, key) for key, vid in self.state.items()]  # state of the graph's own (.attention): in place
        values = self.values
        folded = [slot for vid, slot in outs if values[vid].data is not None]
        if folded:
            raise CannotMerge(f"slots {folded}: operators on constants that something outside the run reads")
        # an input or output of the graph's own (see .attention) is keyed (kind, slot, ...): the call passes that slot
        args = tuple(k[1] if isinstance(k, tuple) else k for k in self.inputs) + \
            tuple(k[1] if isinstance(k, tuple) else k for _, k in outs)
        for k, vid in enumerate(self.inputs.values()):
            values[vid] = values[vid]._replace(external_id=k, flags=G.VALUE_EXTERNAL_INPUT)
        for k, (vid, _) in enumerate(outs, len(self.inputs)):
            values[vid] = values[vid]._replace(external_id=k, flags=G.VALUE_EXTERNAL_OUTPUT)
        return G.Graph(values, self.nodes, len(args)), args


_DATATYPES = {np.dtype(np.float32): G.FP32, np.dtype(np.bool_): G.BOOL, np.dtype(np.int64): G.INT64}


def _plain_fp32(v: G.Value) -> bool:
    return v.datatype == G.FP32 and v.quant is None and not v.dq_datatype


#: Program constants up to this size that a merged graph reads (RMSNorm weights, an epsilon) become constants of
#: the graph, copied in, instead of inputs set on every call.
SMALL_CONSTANT = 64 << 10


def _plain(t) -> bool:
    """Whether a tensor is static float32 with its elements in plain row-major order (so the same bytes, read with
    other dims, are a reshape)."""
    order = tuple(getattr(t, "dim_order", (None,)))
    return order == tuple(range(len(order))) and getattr(t, "dtype", None) == np.float32 and \
        not getattr(t, "dynamic", True)


def _small_constant(t, v: G.Value):
    """The bytes of ``t`` when it is a small read-only float32 constant of the program matching ``v``, else None."""
    a = getattr(t, "array", None)
    if a is None or a.flags.writeable or getattr(t, "dynamic", True) or a.dtype != np.float32:
        return None
    if v.datatype != G.FP32 or v.quant is not None or v.dq_datatype or a.nbytes > SMALL_CONSTANT or \
            a.size != math.prod(v.dims) or tuple(getattr(t, "dim_order", ())) != tuple(range(a.ndim)):
        return None
    data = np.ascontiguousarray(a).reshape(-1).view(np.uint8).copy()  # not a view of the program's mapping
    data.flags.writeable = False
    return data


def _constant(t, v: G.Value):
    """The bytes of ``t`` when it is a read-only float32 or bool constant of the program matching ``v`` (a view of
    the program's memory above :data:`SMALL_CONSTANT`, a copy below it, as :func:`_small_constant`), else None."""
    if v.datatype == G.FP32:
        small = _small_constant(t, v)
        if small is not None:
            return small
    a = getattr(t, "array", None)
    if a is None or a.flags.writeable or getattr(t, "dynamic", True) or a.dtype != G.STORAGE_DTYPES[v.datatype] or \
            a.size != math.prod(v.dims) or not a.flags.c_contiguous:
        return None
    data = a.reshape(-1).view(np.uint8)
    if a.nbytes <= SMALL_CONSTANT:
        data = data.copy()
        data.flags.writeable = False
    return data


def _absorbed_node(part, src: G.Value, dyn, dynamic: bool, out_shape: tuple) -> tuple:
    """((node kind, name, fields), output dims, which output dims the run-time size decides or None) for an
    absorbed operator reading ``src``; ``dyn`` says the same of ``src`` (None: not known), ``dynamic`` whether its
    tensor may change shape at all. Raises :class:`CannotMerge` where the node would not follow every shape
    the operator can see."""
    dims, op = tuple(src.dims), part.op
    if dyn is None and not dynamic:
        dyn = (False,) * len(dims)
    if op == "mean":
        return _mean_node(part.attrs, dims, out_shape)
    if op in ("view", "reshape"):
        return _view_node(part.attrs["size"], dims, dyn)
    if dyn is None:
        raise CannotMerge(f"{op} of {list(dims)}: which dims change at run time is not known")
    if op == "squeeze":
        return _squeeze_node(part.attrs["dims"], dims, dyn)
    if op == "select":
        return _pick_node(part.attrs, dims, dyn)
    return _slice_node(part.attrs, dims, dyn)


def _mean_node(attrs: dict, dims: tuple, out_shape: tuple) -> tuple:
    axes, keep = attrs["axes"], attrs["keepdim"]
    if any(a >= len(dims) for a in axes):
        raise CannotMerge(f"mean over {list(axes)} of {list(dims)}")
    want = tuple(1 if a in axes else d for a, d in enumerate(dims)) if keep else \
        tuple(d for a, d in enumerate(dims) if a not in axes)
    if want != out_shape:
        raise CannotMerge(f"mean over {list(axes)} of {list(dims)} does not give {list(out_shape)}")
    return (G.MEAN, "Mean", {"axes": axes, "keepdim": keep}), want, None


def _reshape(new_shape: list) -> tuple:
    return _KIND["StaticReshape"], "StaticReshape", {"num_dims": len(new_shape), "new_shape": new_shape, "flags": 0}


def _view_node(size: tuple, dims: tuple, dyn) -> tuple:
    """A view or reshape to ``size`` (None: the one dim the run-time size decides)."""
    known = math.prod(d for d in size if d is not None)
    if None in size:
        if known == 0 or math.prod(dims) % known:
            raise CannotMerge(f"view {list(size)} of {list(dims)}")
        want = tuple(math.prod(dims) // known if d is None else d for d in size)
    else:
        want = tuple(size)
    if math.prod(want) != math.prod(dims) or (dyn is None or any(dyn)) and None not in size:
        raise CannotMerge(f"view {list(size)} of {list(dims)}" + ("" if math.prod(want) == math.prod(dims)
                                                                 else ": the sizes differ"))
    if dyn is not None and not any(dyn):  # a static source: every size is known
        return _reshape(list(want)), want, (False,) * len(want)
    return _reshape([0 if d is None else d for d in size]), want, tuple(d is None for d in size)


def _squeeze_node(squeezed: tuple, dims: tuple, dyn: tuple) -> tuple:
    gone = [d for d in squeezed if d < len(dims) and dims[d] == 1 and not dyn[d]]
    if any(d < len(dims) and (dyn[d] or dims[d] == 1) and d not in gone for d in squeezed):
        raise CannotMerge(f"squeeze {list(squeezed)} of {list(dims)}: a dim that changes at run time")
    want = tuple(d for a, d in enumerate(dims) if a not in gone)
    left = tuple(f for a, f in enumerate(dyn) if a not in gone)
    if sum(left) > 1:
        raise CannotMerge(f"squeeze of {list(dims)}: more than one dim changes at run time")
    return _reshape([0 if f else d for d, f in zip(want, left)]), want, left


def _pick_node(attrs: dict, dims: tuple, dyn: tuple) -> tuple:
    """A select of one element along a fixed dim (a negative index counts from the end of its run-time size)."""
    d, index = attrs["dim"], attrs["index"]
    if d >= len(dims) or not dyn[d] and not -dims[d] <= index < dims[d]:
        raise CannotMerge(f"select {index} along dim {d} of {list(dims)}")
    left = tuple(f for a, f in enumerate(dyn) if a != d)
    if any(left):
        raise CannotMerge(f"select along dim {d} of {list(dims)}: another dim changes at run time")
    want = tuple(x for a, x in enumerate(dims) if a != d)
    return (G.PICK, "Pick", {"dim": d, "element": index}), want, left


def _slice_node(attrs: dict, dims: tuple, dyn: tuple) -> tuple:
    """A slice along a fixed dim, step 1."""
    d = attrs["dim"]
    if d >= len(dims) or dyn[d]:
        raise CannotMerge(f"slice along dim {d} of {list(dims)}")
    n = dims[d]
    start, end = attrs["start"], attrs["end"]
    start = 0 if start is None else start + n if start < 0 else start
    end = n if end is None else end + n if end < 0 else end
    start, end = min(max(start, 0), n), min(max(end, start), n)
    if end <= start:
        raise CannotMerge(f"an empty slice of {list(dims)}")
    offsets = [start if a == d else 0 for a in range(len(dims))]
    sizes = [end - start if a == d else 0 for a in range(len(dims))]  # 0: to the end (of the run-time size)
    want = tuple(end - start if a == d else x for a, x in enumerate(dims))
    return (_KIND["StaticSlice"], "StaticSlice",
            {"num_dims": len(dims), "offsets": offsets, "sizes": sizes, "flags": 0}), want, dyn
