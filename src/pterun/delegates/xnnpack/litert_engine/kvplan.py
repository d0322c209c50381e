"""The LiteRT plan of a merged graph that holds KV caches and attention (:mod:`.attention`): a decode step of an
exported LLM as one invoke.

:class:`KvPlan` runs the graph on LiteRT's ``CompiledModel``, which takes arrays of pterun's own as the memory of
its inputs and outputs (host-memory tensor buffers, :meth:`.bindings.Bindings.host`). Each KV cache is the method's
own array: the first ``L`` positions of its memory are bound as the cache's input and as its output, so the graph's
DYNAMIC_UPDATE_SLICE writes the new rows where the method keeps them. LiteRT works on such memory in place only at
a 64-byte boundary (:meth:`.bindings.Bindings.host` refuses any other): the plan refuses a cache that is not aligned,
and the interpreter gives caches aligned memory of their own before merging
(:func:`pterun.interp.delegates.align_caches`).

On each call the plan reads the position (the ints the graph's position inputs stand for) and the sequence
length ``S`` (from the run-time shape of an input that carries it), and works out ``L``: the positions in use,
``max(start_pos) + S``, rounded up to :data:`GROW`. When ``L`` or a shape changes, LiteRT's inputs are resized,
which has XNNPACK prepare the graph again, and the caches' twins (:mod:`.attention`) are made again from the
method's caches: 2.5-5 ms for the 130M Llama's 12 layers, every :data:`GROW` tokens of a decode and once between
a prefill and its decode. Then it writes the element offsets, the key and query positions and the other inputs
into memory of its own (every input but the twins is 1-D host memory of pterun's: LiteRT binds no other), invokes
once; LiteRT writes the other outputs into the method's own arrays where it can bind them, else they are copied.

A position past the cache raises :class:`pterun.errors.DelegateError` before anything is written, as
``update_cache`` refuses it.
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import weakref

import numpy as np

from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.binding import input_array, write_output
from pterun.delegates.xnnpack.litert_engine.compiled import (invoker, litert_api, open_compiled, open_external,
                                                             release_waiting)
from pterun.delegates.xnnpack.litert_engine.env import Unsupported, capture_native_stderr
from pterun.delegates.xnnpack.litert_engine.memory import release_packed, release_sources
from pterun.delegates.xnnpack.litert_engine.prepare import declared_at
from pterun.delegates.xnnpack.litert_engine.translate import translate_signed
from pterun.errors import DelegateError

__all__ = ["ALIGN", "GROW", "KvPlan"]

#: The cache positions in the graph grow by this many at a time (each growth prepares XNNPACK again). Session 27's
#: prototype of this join, 130M 8da4w Llama, one thread, positions 30-93: 3.82 ms a step growing by 32, 4.22 by
#: 64 (bench/README.md).
GROW = 32
#: LiteRT works in place only on host memory at this boundary
ALIGN = 64


class _Layout:
    """What the plan reads from the graph at load: which external inputs are caches (with their output twins),
    element offsets, key and query positions, and the rest; the declared sequence length and where a call's is
    read from."""

    def __init__(self, graph: G.Graph, tensors: list, args: tuple, dynamic_sizes: frozenset):
        self.n_in = len(graph.inputs)
        self.offsets: dict[int, int] = {}  # input -> elements per position
        self.keys: set[int] = set()  # inputs holding each key's position
        self.queries: dict[int, tuple] = {}  # input -> (query heads per kv head, causal)
        self.caches: dict[int, int] = {}  # input or output -> elements per position (a cache's first L bound)
        self.starts: dict[int, int] = {}  # input holding [0, position, 0] or [0, 0, position] -> where the position is
        # input or output -> (heads, head dim, whether a value cache's): a cache's twin (.attention)
        self.twins: dict[int, tuple] = {}
        self._read_nodes(graph)
        lengths = {tensors[args[e]].shape[1] for e in list(self.caches) + list(self.twins)}
        if len(lengths) != 1:
            raise Unsupported("KV caches of different lengths in one graph")
        self.p = lengths.pop()
        for e in self.caches:
            if tensors[args[e]].array.ctypes.data % ALIGN:
                raise Unsupported(f"KV cache (value {args[e]}) is not at a {ALIGN}-byte boundary")
        self.others: dict[int, tuple] = {}  # input -> its dims, 0 for the one the call's shape decides
        for v in graph.inputs:
            e = v.external_id
            if any(e in kind for kind in (self.caches, self.offsets, self.keys, self.queries, self.starts,
                                          self.twins)):
                continue
            dynamic = getattr(tensors[args[e]], "dynamic", False)
            dims = tuple(0 if dynamic and d in dynamic_sizes else d for d in v.dims)
            if dims.count(0) > 1:
                raise Unsupported(f"input {e} {list(v.dims)} has more than one dim that changes at run time")
            self.others[e] = dims
        self.positions = (*self.offsets, *self.queries, *self.starts)  # inputs filled from the call's int
        # each twin's output is its input's buffer again: paired by the cache slot the call passes for both
        self.twin_of = {e: next(i for i in self.twins if i < self.n_in and args[i] == args[e])
                        for e in self.twins if e >= self.n_in}
        # the sequence length of a call: (which of ``others``, dim) of a dynamic input declared at the attention's
        # bound
        self.seq_at = None
        if self.s in dynamic_sizes:
            self.seq_at = next(((k, dims.index(0)) for k, (e, dims) in enumerate(self.others.items())
                                if 0 in dims and graph.values[_input_id(graph, e)].dims[dims.index(0)] == self.s),
                               None)
            if self.seq_at is None:
                raise Unsupported("no input of the graph carries the attention's sequence length")

    def _read_nodes(self, graph: G.Graph) -> None:
        """The external values the cache, twin and attention nodes read and write, by kind, and the declared
        sequence length ``s``."""
        ext = {v.id: v.external_id for v in list(graph.inputs) + list(graph.outputs)}
        declared = set()
        twins = {}  # value id -> whether it is a value cache's twin ([Hkv, D, L]) or a key cache's ([Hkv, L, D])
        for n in graph.nodes:
            f = n.fields
            if n.kind == G.KV_SHADOW:
                self.starts[ext[f["input3_id"]]] = 2 if f["values"] else 1
                twins.update({f["input1_id"]: f["values"], f["output_id"]: f["values"]})
            elif n.kind == G.KV_UPDATE:
                self.offsets[ext[f["input3_id"]]] = f["row"]
                self.caches.update({ext[f[k]]: f["row"] for k in ("input1_id", "output_id") if f[k] in ext})
                declared.add(f["s"])
            elif n.kind == G.SDPA:
                self.keys.add(ext[f["input4_id"]])
                self.queries[ext[f["input5_id"]]] = (f["hq"] // f["hkv"], f["causal"])
                for k in ("input2_id", "input3_id"):
                    if len(graph.values[f[k]].dims) == 3:
                        twins[f[k]] = k == "input3_id"
                    elif f[k] in ext:
                        self.caches[ext[f[k]]] = f["hkv"] * f["d"]
                declared.add(f["s"])
        self.twins.update({ext[v]: (graph.values[v].dims[0], graph.values[v].dims[1 if values else 2], values)
                           for v, values in twins.items() if v in ext})
        if len(declared) != 1:
            raise Unsupported(f"attention over sequence lengths {sorted(declared)} in one graph")
        self.s = declared.pop()


def _input_id(graph: G.Graph, e: int) -> int:
    return next(v.id for v in graph.inputs if v.external_id == e)


def _flattened(graph: G.Graph, others: dict) -> G.Graph:
    """``graph`` with each of ``others`` (external input -> dims, 0: the one the call decides) taken as a 1-D
    input and reshaped to its dims inside the graph: LiteRT binds host memory to 1-D inputs only."""
    values, nodes = dict(graph.values), []
    nid = max(values) + 1
    for v in graph.inputs:
        dims = others.get(v.external_id)
        if dims is None:
            continue
        values[nid] = v._replace(id=nid, dims=(math.prod(v.dims),))
        values[v.id] = v._replace(external_id=None, flags=0)
        nodes.append(G.Node(len(nodes), _RESHAPE, "StaticReshape", {"num_dims": len(dims), "new_shape": list(dims),
                                                                    "flags": 0, "input_id": nid, "output_id": v.id},
                            -math.inf, math.inf, None))
        nid += 1
    nodes += [n._replace(index=len(nodes) + k) for k, n in enumerate(graph.nodes)]
    return G.Graph(values, nodes, graph.num_externs)


_RESHAPE = next(kind for kind, (name, _) in G.NODE_TYPES.items() if name == "StaticReshape")


class KvPlan:
    """The executor of a merged graph with KV caches and attention (see the module docstring)."""

    engine = "litert"
    engine_reason: str | None = None

    def __init__(self, graph: G.Graph, tensors: list, args: tuple, num_threads: int, dynamic_sizes: frozenset,
                 cache_dir: str = ""):
        self._lay = lay = _Layout(graph, tensors, args, frozenset(dynamic_sizes))
        self._dtypes = {v.external_id: np.dtype(G.STORAGE_DTYPES[v.datatype]) for v in graph.inputs}
        self.num_threads = num_threads
        self._cache_dir = cache_dir  # the packed-weight cache's directory ("": off), see .compiled
        self._lock = threading.Lock()
        # memory of the plan's own for what is not a cache: each input at its upper bound, bound by its prefix
        self._own = {e: _aligned((1,), np.int32) for e in lay.offsets}
        self._own.update({e: _aligned((3,), np.int32) for e in lay.starts})
        self._own.update({e: _aligned_copy(np.arange(lay.p, dtype=np.float32)) for e in lay.keys})
        self._own.update({e: _aligned((lay.s * rep,), np.float32) for e, (rep, _) in lay.queries.items()})
        self._own.update({e: _aligned((math.prod(d if d else lay.s for d in dims),), self._dtypes[e])
                          for e, dims in lay.others.items()})
        # what a call fills, as flat tuples (a call touches as little as it can: it runs right after an invoke that
        # has streamed the weights through the caches): (memory, slot, elements per position) for the element
        # offsets, (memory, slot, where) for the twins' starts, (memory, slot, query heads per kv head, causal)
        # for the query positions, and the other inputs' dtypes and memory, in ``others``' order
        self._offsets = tuple((self._own[e], e, row) for e, row in lay.offsets.items())
        self._starts = tuple((self._own[e], e, at) for e, at in lay.starts.items())
        self._queries = tuple((self._own[e], e, rep, causal) for e, (rep, causal) in lay.queries.items())
        self._other_dtypes = tuple((e, self._dtypes[e]) for e in lay.others)
        self._other_mem = tuple(self._own[e] for e in lay.others)
        self._run = None  # the bound invoke (:func:`.compiled.invoker`), made by _prepare
        # prepared at one token and the first GROW positions: LiteRT sizes its memory for what it is prepared at
        s0 = 1 if lay.seq_at is not None else lay.s
        L0 = min(lay.p, GROW)
        shapes = self._lengths(L0, s0, {e: tuple(d if d else 1 for d in dims) for e, dims in lay.others.items()})
        # the graph as translated (a forked child translates it again: the model's weights are given back)
        at_load = {e: (n,) for e, n in shapes.items()}
        at_load.update({e: _twin_shape(h, d, v, L0) for e, (h, d, v) in lay.twins.items() if e < lay.n_in})
        self._graph = declared_at(_flattened(graph, lay.others), set(dynamic_sizes), at_load)
        self._state = None  # (L, S, other inputs' arrays, their shapes) the buffers are bound for
        self._twin_scratch = None  # see _scratch
        self._details: dict = {}  # (S, other inputs' shapes) -> {output name: (shape, dtype)}, as LiteRT said
        self._seen = None  # see _others
        self._out_copies: tuple = ()  # [output, plan's array, method's tensor, its array], see _copy_out
        self._in_place: tuple = ()  # (output, method's tensor, its array LiteRT writes), see _bind_outputs
        self._cm = None
        self._open()
        _PLANS.add(self)

    def _scratch(self, L: int) -> np.ndarray:
        """Float32 memory the twins of ``L`` positions are built in, one after another (:func:`_twin`): kept from
        one resize to the next, so it is warm rather than new pages each time."""
        need = 2 * L * max(h * d for h, d, _ in self._lay.twins.values())
        if self._twin_scratch is None or self._twin_scratch.size < need:
            self._twin_scratch = np.empty(need, np.float32)
        return self._twin_scratch

    def _lengths(self, L: int, s: int, shapes: dict) -> dict:
        """The length of each 1-D input for ``L`` positions, ``s`` queries and the other inputs at ``shapes``."""
        lay = self._lay
        got = {e: L * row for e, row in lay.caches.items() if e < lay.n_in}
        got.update({e: 1 for e in lay.offsets})
        got.update({e: 3 for e in lay.starts})
        got.update({e: L for e in lay.keys})
        got.update({e: s * rep for e, (rep, _) in lay.queries.items()})
        got.update({e: math.prod(shape) for e, shape in shapes.items()})
        return got

    def _open(self) -> None:
        """Translate the graph and create LiteRT's model, through the packed-weight cache where it is on
        (:func:`.compiled.open_compiled`), else with its constants read from the program file in place where they
        can be (:func:`.compiled.open_external`). Once XNNPACK has packed the weights, the model's copy of them and the
        program file's pages they were read from are given back (:mod:`.memory`): the model bytes stay alive with
        the model (LiteRT reads the other constants there)."""
        api = litert_api()
        if api is None:
            raise Unsupported("LiteRT's CompiledModel API is not usable here")
        release_waiting()  # before this model's memory (.compiled.Compiled.release_when_prepared)
        laid = translate_signed(self._graph)
        compiled = open_compiled(laid, self.num_threads, self._cache_dir, builtin_ok=True) \
            or open_external(laid, self.num_threads, builtin_ok=True)
        if compiled is not None:  # packed weights from the cache, or constants read from the program in place
            cm, self._model = compiled.cm, compiled.model
            release_sources(laid.sources)
            compiled.release()
        else:
            self._model = laid.fill()
            try:
                with capture_native_stderr():
                    cm = api.from_buffer(self._model, self.num_threads)
            except Exception as e:  # noqa: BLE001  (LiteRT refused the model)
                raise Unsupported(f"LiteRT's CompiledModel refused the model: {str(e).strip()[:200]}") from e
            release_sources(laid.sources)
            release_packed(self._model, laid.packed)
        sig = cm.get_signature_by_index(0)
        ins = cm.get_input_tensor_details(sig["key"])
        # the position of each external input and output among the signature's (LiteRT lists them its own way)
        names = list(sig["inputs"])
        self._in_pos = [names.index(f"i{e:04d}") for e in range(self._lay.n_in)]
        self._out_names = list(sig["outputs"])
        self._in_shapes = {e: tuple(ins[f"i{e:04d}"]["shape"]) for e in range(self._lay.n_in)}
        self._cm, self._api, self._key = cm, api, sig["key"]
        self._state, self._details = None, {}

    def in_place_outputs(self) -> tuple:
        """The call's outputs LiteRT writes where the method keeps them, given memory it can bind
        (:meth:`_bind_outputs`): those that are neither caches nor twins, as positions among its arguments."""
        lay = self._lay
        return tuple(e for e in (lay.n_in + int(n[1:]) for n in self._out_names) if e not in lay.caches and
                     e not in lay.twins)

    def _forked(self) -> None:
        """In a forked child the model's thread pool has no threads: it is kept (never destroyed) and replaced on
        the first call."""
        if self._cm is not None:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._cm))
        self._cm, self._state = None, None

    def execute(self, args: list) -> None:
        lay = self._lay
        with self._lock:
            if self._cm is None:
                self._open()
            others, copies = self._others(args)
            s = lay.s if lay.seq_at is None else others[lay.seq_at[0]].shape[lay.seq_at[1]]
            need = 0
            for e in lay.positions:
                p = args[e]
                if not isinstance(p, (int, np.integer)):
                    raise DelegateError(f"KV cache position must be an int, got {type(p).__name__}")
                if not 0 <= p or p + s > lay.p:
                    raise DelegateError(f"start_pos {int(p)} + seq_len {s} does not fit the cache's {lay.p} "
                                        "positions")
                need = max(need, p)
            need += s
            L = min(lay.p, -(-need // GROW) * GROW)
            st = self._state
            if st is None or st[0] != L or st[1] != s or (st[2] is not others and
                                                          st[3] != tuple(a.shape for a in others)) or \
                    any(args[e] is not t or t.array is not a for e, t, a in self._in_place):
                self._prepare(L, s, others, args)
            elif st[2] is not others:  # other arrays of the same shapes: the buffers bound still fit
                self._state = (L, s, others, st[3])
            for mem, e, row in self._offsets:
                mem[0] = args[e] * row
            for mem, e, at in self._starts:
                mem[at] = args[e]
            for mem, e, rep, causal in self._queries:
                p = args[e]
                if s == 1 or not causal:
                    mem[:s * rep] = p + s - 1
                else:
                    mem[:s * rep].reshape(s, rep)[...] = np.arange(p, p + s, dtype=np.float32)[:, None]
            for dst, a in copies:
                np.copyto(dst, a)
            try:
                self._run()
            except (ValueError, RuntimeError) as e:
                self._state = None  # the twins are made again from the caches
                raise DelegateError(f"XNNPACK delegate (LiteRT engine) failed: {e}") from e
            for out in self._out_copies:
                e, got, t, a = out
                if t is args[e] and t.array is a:  # the method's array the last call wrote, as it was
                    np.copyto(a, got, casting="unsafe")
                elif _copy_out(args, out):  # other memory LiteRT could write: bound at the next call, twins kept
                    self._state = self._state[:2] + (None, None)

    def _others(self, args: list) -> tuple:
        """(the other inputs' arrays in memory order, (memory of the plan's own, array) to copy each into), kept
        from the last call while each argument is the same tensor with the same array (a decode step's): a call
        then checks identities instead of dim orders and dtypes, and slices no memory."""
        seen = self._seen
        if seen is not None:
            for e, t, a in seen[0]:
                if args[e] is not t or getattr(t, "array", None) is not a:
                    break
            else:
                return seen[1], seen[2]
        others = tuple(input_array(args, e, dtype) for e, dtype in self._other_dtypes)
        copies = tuple((mem[:a.size].reshape(a.shape), a) for mem, a in zip(self._other_mem, others))
        self._seen = (tuple((e, args[e], args[e].array) for e, _ in self._other_dtypes), others, copies)
        return others, copies

    def _prepare(self, L: int, s: int, others: list, args: list) -> None:
        """Resize LiteRT's inputs for ``L`` positions, ``s`` queries and the other inputs' shapes, and bind the
        memory of a call at them: every input and output is memory of pterun's (the caches the method's own)."""
        lay, cm = self._lay, self._cm
        lengths = self._lengths(L, s, {e: a.shape for e, a in zip(lay.others, others)})
        shapes = {e: (n,) for e, n in lengths.items()}
        shapes.update({e: _twin_shape(h, d, v, L) for e, (h, d, v) in lay.twins.items() if e < lay.n_in})
        try:
            with capture_native_stderr():
                for e, shape in shapes.items():
                    if self._in_shapes[e] != shape:
                        cm.resize_input_tensor(self._in_pos[e], shape, 0)
                        self._in_shapes[e] = shape
                ins = self._bind_inputs(L, lengths, args)
                outs, arrays, self._in_place = self._bind_outputs(L, s, others, args, ins)
        except (ValueError, RuntimeError) as e:
            self._state = None
            raise DelegateError(f"XNNPACK delegate (LiteRT engine) cannot take {s} tokens over {L} cached "
                                f"positions: {str(e).strip()[:200]}") from e
        self._ins, self._outs, self._out_arrays = ins, outs, arrays
        self._out_copies = tuple([e, got, None, None] for e, got in arrays)  # see _copy_out
        self._run = invoker(cm, 0, ins, outs)
        self._state = (L, s, others, tuple(a.shape for a in others))

    def _bind_inputs(self, L: int, lengths: dict, args: list) -> list:
        """The buffers of the inputs, in the signature's order: host memory for all but the twins; the twins of the
        caches' first L positions made from the method's caches, in buffers of LiteRT's (host memory binds 1-D
        inputs only), or as the last call left them where ``L`` has not changed."""
        lay, cm, api = self._lay, self._cm, self._api
        ins = [None] * lay.n_in
        for e, n in lengths.items():
            ins[self._in_pos[e]] = api.host(_prefix(args[e], n) if e in lay.caches else self._own[e][:n])
        kept = self._state is not None and self._state[0] == L
        scratch = None if kept or not lay.twins else self._scratch(L)
        for e, (_, _, values) in lay.twins.items():
            if e < lay.n_in:
                k = self._in_pos[e]
                if kept:
                    ins[k] = self._ins[k]
                    continue
                buf = ins[k] = cm.create_input_buffer_by_name(self._key, f"i{e:04d}")
                buf.write(_twin(args[e].array[0, :L], values, scratch))
        return ins

    def _bind_outputs(self, L: int, s: int, others: list, args: list, ins: list) -> tuple:
        """(buffers of the outputs in the signature's order, [(output, array of the plan's own the call copies
        from)], ((output, tensor, array) bound in place)). A cache's output is its input's memory again, a twin's
        its input's buffer; any other output is a value of the method, whose shape follows the queries and the other
        inputs, never ``L``. LiteRT writes it into the method's own array where that array takes it as it is (shape,
        dtype, C order, a 64-byte boundary: :func:`pterun.interp.delegates.own_outputs` gives an LLM's logits such
        memory), else into an array of the plan's that each call copies from (where only ``L`` changed, the last
        arrays still fit). Its shapes are asked of LiteRT once per query count and input shapes (1.2 ms a time for
        the 130M Llama)."""
        lay, api = self._lay, self._api
        key = (s, tuple(a.shape for a in others))
        details = self._details.get(key)
        if details is None:
            got = self._cm.get_output_tensor_details(self._key)
            details = self._details[key] = {n: (tuple(d["shape"]), np.dtype(d["dtype"])) for n, d in got.items()}
        made = dict(self._out_arrays) if self._state is not None and (self._state[1], self._state[3]) == key else {}
        outs, arrays, own = [], [], []
        for name in self._out_names:  # in the signature's order
            e = lay.n_in + int(name[1:])
            if e in lay.caches:
                outs.append(api.host(_prefix(args[e], L * lay.caches[e])))
            elif e in lay.twins:
                outs.append(ins[self._in_pos[lay.twin_of[e]]])
            else:
                shape, dtype = details[name]
                t = args[e]
                a = getattr(t, "array", None)
                if _bindable(a, shape, dtype):
                    own.append((e, t, a))  # LiteRT writes the method's array: nothing to copy
                else:
                    a = made.get(e)
                    a = a if a is not None and a.shape == shape else _aligned(shape, dtype)
                    arrays.append((e, a))
                outs.append(api.host(a.reshape(-1)))
        return outs, arrays, tuple(own)


def _copy_out(args: list, out: list) -> bool:
    """Copy an output of the plan's own memory into the method's tensor, resizing it where it is dynamic.
    ``out`` is ``[output, plan's array, tensor, array]``: the tensor and its array are noted where that array
    takes the output as it is, so the next call copies straight into it while the tensor keeps that array.
    Whether LiteRT could write that array in place (:func:`_bindable`)."""
    e, got = out[0], out[1]
    t = args[e]
    a = getattr(t, "array", None)
    if _takes(a, got):
        np.copyto(a, got, casting="unsafe")
    else:
        write_output(args, e, got)
        a = getattr(t, "array", None)
    out[2], out[3] = (t, a) if _takes(a, got) else (None, None)
    return _bindable(a, got.shape, got.dtype)


def _bindable(a, shape: tuple, dtype) -> bool:
    """Whether LiteRT can write an output of ``shape`` and ``dtype`` into the method's array ``a`` in place."""
    return a is not None and a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and \
        a.flags.writeable and not a.ctypes.data % ALIGN


def _takes(a, got: np.ndarray) -> bool:
    """Whether the method's array ``a`` takes the output ``got`` by a plain copy."""
    return a is not None and a.shape == got.shape and a.flags.c_contiguous


def _twin(first: np.ndarray, values: bool, scratch: np.ndarray | None = None) -> np.ndarray:
    """The twin of a cache's first L positions ``[L, Hkv, D]``: ``[Hkv, L, D]`` (keys) or ``[Hkv, D, L]`` (values;
    through the keys' layout, each head's ``[L, D]`` then transposed: 2.2x faster than one strided copy). Built in
    ``scratch`` (float32, at least twice the twin's size) when given: memory that stays warm from one twin to the
    next instead of new pages each time."""
    L, h, d = first.shape
    if scratch is None:
        heads = np.ascontiguousarray(first.transpose(1, 0, 2))
        return np.ascontiguousarray(heads.transpose(0, 2, 1)) if values else heads
    n = L * h * d
    heads = scratch[:n].reshape(h, L, d)
    np.copyto(heads, first.transpose(1, 0, 2))
    if not values:
        return heads
    out = scratch[n:2 * n].reshape(h, d, L)
    np.copyto(out, heads.transpose(0, 2, 1))
    return out


def _twin_shape(heads: int, d: int, values: bool, L: int) -> tuple:
    return (heads, d, L) if values else (heads, L, d)


def _prefix(t, n: int) -> np.ndarray:
    """The first ``n`` elements of the cache tensor ``t``'s memory (a flat view of the method's array)."""
    return t.array.reshape(-1)[:n]


def _aligned_copy(a: np.ndarray) -> np.ndarray:
    out = _aligned(a.shape, a.dtype)
    out[...] = a
    return out


def _aligned(shape: tuple, dtype: np.dtype) -> np.ndarray:
    n = math.prod(shape) * np.dtype(dtype).itemsize
    raw = np.zeros(n + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + n].view(dtype).reshape(shape)


_PLANS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for plan in list(_PLANS):
        plan._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
