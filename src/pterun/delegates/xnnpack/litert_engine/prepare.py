"""Preparing one LiteRT interpreter for a graph: the shapes its inputs are prepared at, the model LiteRT takes, and
the check that XNNPACK took every operator (LiteRT's builtin kernels round differently, so a graph partly left to
them is refused, except the lowerings :mod:`.lower` allows).

Example::

    >>> interp, tr, shapes = interpreter_for(graph, 2)   # doctest: +SKIP
"""

from __future__ import annotations

from pterun._log import logger
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.litert_engine.adapter import ops_details
from pterun.delegates.xnnpack.litert_engine.compiled import open_prepared
from pterun.delegates.xnnpack.litert_engine.env import Unsupported, capture_native_stderr, modules
from pterun.delegates.xnnpack.litert_engine.memory import release_packed, release_sources
from pterun.delegates.xnnpack.litert_engine.translate import Translation, translate_laid

__all__ = ["declared_at", "interpreter_for", "load_shapes", "not_delegated", "prepared_shapes"]


def not_delegated(ops: list[dict], tr: Translation) -> list[str]:
    """Names of the operators left to LiteRT's builtin kernels (empty when XNNPACK runs the whole graph).

    LiteRT lists the model's operators and then one ``DELEGATE`` node per XNNPACK partition. The graph runs
    wholly on XNNPACK when every graph output comes out of a partition and every partition reads only graph
    inputs, constants, or other partitions' outputs.
    """
    delegates = [o for o in ops if o.get("op_name") == "DELEGATE"]
    produced = {int(t) for o in delegates for t in o["outputs"]} | tr.builtin
    allowed = produced | set(tr.inputs) | set(tr.constants)
    missing = {int(t) for o in delegates for t in o["inputs"] if int(t) >= 0} - allowed
    missing |= set(tr.outputs) - produced
    if not delegates and not tr.builtin:
        return sorted({o.get("op_name", "?") for o in ops}) or ["the graph"]
    return sorted({o.get("op_name", "?") for o in ops if o.get("op_name") != "DELEGATE"
                   and {int(t) for t in o["outputs"]} & missing})


def interpreter_for(graph: G.Graph, num_threads: int, load_dims=None, cache_dir: str = "", keep=lambda obj: None,
                    pending=None) -> tuple:
    """(interpreter, translation, input shapes it is prepared at) for ``graph``, wholly on XNNPACK, its packed
    weights' sources given back. Smaller load dims that LiteRT refuses are dropped for the declared ones. With a
    cache directory, a :class:`.compiled.Compiled` over cached packed weights where XNNPACK takes the graph whole
    (:func:`.compiled.open_compiled`). ``keep(obj)`` is given each interpreter or CompiledModel as soon as it
    exists (the fork registry of :mod:`.plan`). ``pending``: the (part, resize, shapes) :func:`.plan.pending`
    made for the same graph and load dims, laid out instead of translating the graph again (a method's one
    graph was translated twice: 3.6 of MobileNetV2's ~45 ms load)."""
    Interpreter = modules()
    declared, small, shrunk = load_shapes(graph, load_dims)
    attempts = (True, False) if shrunk else (False,)
    if pending is not None:  # its shapes are the small ones unless the translation holds only at the declared
        attempts = attempts[attempts.index(bool(shrunk) and not pending[0].fixed_shape):]
    for attempt in attempts:
        if pending is not None:
            (tr, laid), resize, shapes = pending[0].laid(), pending[1], pending[2]
            pending = None
        else:
            tr, laid = translate_laid(declared_at(graph, shrunk, small) if attempt else graph)
            if attempt and tr.fixed_shape:
                continue
            resize, shapes = prepared_shapes(graph, tr.inputs, declared, small if attempt else {})
        compiled = open_prepared(laid, num_threads, cache_dir, [resize], external=not tr.builtin)
        if compiled is not None:
            keep(compiled.cm)
            release_sources(tr.sources)
            compiled.release_when_prepared()
            return compiled, tr._replace(model=compiled.model), shapes
        tr = tr._replace(model=laid.fill(), packed=laid.packed)
        from_file = release_sources(tr.sources)  # copied into the model's bytes: the file's pages can go now
        try:
            with capture_native_stderr():
                interp = Interpreter(model_content=tr.model, num_threads=max(int(num_threads), 1))
                keep(interp)
                for t, dims in resize.items():
                    interp.resize_tensor_input(t, list(dims))
                interp.allocate_tensors()
                ops = ops_details(interp)
            break
        except Exception as e:  # LiteRT reports a model it cannot prepare as ValueError / RuntimeError
            if attempt:
                continue  # the smaller shapes were the problem: prepare at the declared ones
            raise Unsupported(f"LiteRT rejected the translated model: {str(e).strip()[:300]}") from e
    left = not_delegated(ops, tr)
    if left:
        raise Unsupported(f"LiteRT's XNNPACK delegate did not take {', '.join(left)}; LiteRT's builtin kernels "
                          "round differently from XNNPACK")
    packed = release_packed(tr.model, tr.packed)
    logger().debug("LiteRT engine: %d bytes of the program's mapping and, XNNPACK having packed the weights, %d "
                   "bytes of the model given back", from_file, packed)
    return interp, tr, shapes


def load_shapes(graph: G.Graph, load_dims) -> tuple[dict, dict, set]:
    """(declared dims, smaller dims to prepare at, the sizes those shrank from) of the graph's inputs, by external
    id. XNNPACK sizes its workspace for the dims the model declares, inputs and everything after them: where inputs
    are prepared small, the model declares the run-time dims (the sizes the inputs shrank from) at their load size
    throughout (:func:`declared_at`). A ~500M Llama held ~11 MB per layer for its 511-token bound otherwise."""
    declared = {v.external_id: tuple(int(d) for d in v.dims) for v in graph.inputs}
    small = {}
    if load_dims is not None:
        for v in graph.inputs:
            dims = load_dims(v.external_id, declared[v.external_id])
            if dims is not None and tuple(dims) != declared[v.external_id]:
                small[v.external_id] = tuple(int(d) for d in dims)
    return declared, small, {d for e, dims in small.items() for d, s in zip(declared[e], dims) if d != s}


def prepared_shapes(graph: G.Graph, tensors: list, declared: dict, small: dict) -> tuple[dict, dict]:
    """(the interpreter inputs to resize to their smaller load dims, the shape each input is prepared at), for the
    model's input tensors ``tensors`` in the graph's input order."""
    resize = {t: small[v.external_id] for v, t in zip(graph.inputs, tensors) if v.external_id in small}
    return resize, {**{t: declared[v.external_id] for v, t in zip(graph.inputs, tensors)}, **resize}


def declared_at(graph: G.Graph, sizes: set, inputs: dict) -> G.Graph:
    """``graph`` with its inputs at their load dims (``inputs``: external id -> dims; the others as declared) and
    every dim of another non-constant value that is one of ``sizes`` declared as 1. XNNPACK works out the shapes
    after the inputs itself; the declared ones only size what it prepares at load."""
    def at_load(v: G.Value) -> G.Value:
        if v.data is not None or v.flags & G.VALUE_EXTERNAL_INPUT:
            return v._replace(dims=inputs[v.external_id]) if v.external_id in inputs else v
        return v._replace(dims=tuple(1 if d in sizes else d for d in v.dims)) if sizes.intersection(v.dims) else v
    return G.Graph({k: at_load(v) for k, v in graph.values.items()}, graph.nodes, graph.num_externs)
