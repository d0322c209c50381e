"""The XNNPACK delegate: reads the payload into a typed graph once, then runs it on an engine per DelegateCall.

``XnnpackBackend.init`` reads the blob (:mod:`.payload`) into a typed graph (:mod:`.graph`) and hands it to an
engine. Two exist: the **LiteRT engine** (:mod:`.litert_engine`: the graph translated into a TFLite model and
run by LiteRT on XNNPACK itself, when ``ai-edge-litert`` is installed) and the **NumPy engine**
(:mod:`.numpy_engine`: a plan of NumPy steps; builders in :mod:`.nodes` and :mod:`.gemm` against
:mod:`.compiler`, kernels in :mod:`.ops`, quantization in :mod:`.quant`). The choice (``"auto"``, ``"numpy"``
or ``"litert"``) comes from the Runtime; under ``"auto"`` and ``"litert"`` a graph the LiteRT engine cannot
take runs on the NumPy engine, with one log line and the reason kept on the executor (``.engine``,
``.engine_reason``). Either executor's ``execute(args)`` takes the DelegateCall's arguments — the delegate's
inputs, then its outputs, as runtime tensors — reads the inputs and writes (and resizes) the outputs.

Example::

    >>> from pterun.delegates import BACKENDS
    >>> BACKENDS["XnnpackBackend"].is_available()
    True
"""

from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from pterun import threads
from pterun.config import ENGINE_CHOICES
from pterun._log import logger
from pterun.delegates import Backend, DelegateContext, register_backend
from pterun.delegates.xnnpack.graph import Graph
from pterun.delegates.xnnpack.kernel_ops import KERNEL_OPS
from pterun.errors import DelegateError, PterunError

__all__ = ["ENGINES", "NumpyPlan", "XnnpackBackend", "engine_for", "load", "load_dims"]

ENGINES = ENGINE_CHOICES  # defined once, in pterun.config


def load(blob: np.ndarray, named_data, engine: str = "auto", call_args: tuple = (), num_threads: int | None = None,
         load_dims=None, batch=None, cache_dir: str = ""):
    """Read one payload and prepare it on ``engine``; ``named_data(key)`` returns a named-data entry's bytes.
    ``call_args`` (:class:`~pterun.delegates.DelegateContext`) bounds the graph's external values;
    ``num_threads`` is the loading Runtime's count (None: :func:`pterun.threads.num_threads`); ``load_dims``
    (:class:`~pterun.delegates.DelegateContext`) the smaller dims to prepare dynamic inputs at; ``batch``, a
    :class:`.litert_engine.Batch` that builds the LiteRT interpreter later, with the method's other graphs
    (None: now); ``cache_dir`` the directory of LiteRT's packed-weight cache (``""``: off).

    Returns the executor: a LiteRT plan, or a NumPy :class:`NumpyPlan` (whose ``engine_reason`` says why LiteRT was
    not used, None when it was not asked for).
    """
    graph = Graph.read(blob, named_data)
    for capacities in call_args:
        _check_external_values(graph, capacities)
    plan, reason = _litert(graph, engine, keep=True, num_threads=num_threads, load_dims=load_dims, batch=batch,
                           cache_dir=cache_dir)
    if plan is not None:
        return plan
    plan = _numpy(graph)
    plan.engine_reason = reason
    return plan


def load_dims(sizes, dynamic):
    """``(external id, declared dims) -> dims`` to prepare a graph input at: a dynamic input's dim whose size is one
    of ``sizes`` (the method's dynamic dims at their upper bound) at 1, so LiteRT sizes its memory for the shapes
    calls bring, not for the bound; None (prepare at the declared dims) when there is nothing to shrink.
    ``dynamic(external id)`` says whether the argument's tensor is dynamic. An input with two such dims keeps its
    declared ones: which of them changes is not known (a ``[1, 128, 128]`` of 128 tokens by 128 features), and a
    feature dim prepared at 1 leaves XNNPACK a graph it cannot reshape for any call."""
    sizes = frozenset(sizes)
    if not sizes:
        return None

    def dims(ext: int, declared: tuple):
        if not dynamic(ext) or sum(d in sizes for d in declared) > 1:
            return None
        return tuple(1 if d in sizes else d for d in declared)
    return dims


def _check_external_values(graph: Graph, capacities: tuple) -> None:
    """Each external value must fit the DelegateCall argument it is bound to: an engine may plan memory for the
    graph's declared dims (LiteRT does), so a corrupt dim would otherwise cost that much memory at load."""
    for v in graph.inputs + graph.outputs:
        k = v.external_id
        if k >= len(capacities):
            raise DelegateError(f"XNNPACK payload: {v.describe()} is external value {k}, but the DelegateCall "
                                f"passes {len(capacities)} argument(s)")
        cap = capacities[k]
        if cap is not None and math.prod(v.dims) > cap:
            raise DelegateError(f"XNNPACK payload: {v.describe()} has {math.prod(v.dims)} elements, but "
                                f"DelegateCall argument {k} holds at most {cap}")


def engine_for(graph: Graph, engine: str = "auto") -> tuple[str, str | None]:
    """(engine name, reason or None): what :func:`load` would run ``graph`` on, for ``pterun inspect``."""
    plan, reason = _litert(graph, engine, keep=False)
    return ("litert", None) if plan is not None else ("numpy", reason)


# An XNNPACK delegate whose nodes average less work than this (multiply-adds of a convolution or matrix product,
# elements of any other node) runs its LiteRT interpreter on one thread: waking a second thread for each small
# node costs more than it saves. Measured on 2 cores (LiteRT 2.3): the 7-delegate transformer fixture (nodes of
# 0.5k-22k) 0.18 ms on 1 thread, 0.25-0.39 on 2; a stack of 8da4w linears at one row (880k) 0.9 -> 0.46 ms on 2;
# the MobileNetV2 fixture (71k) 0.166 -> 0.134 ms on 2 when the machine is idle, but 1.25x slower on 2 than on 1
# when two copies share the 2 cores (tools/thread_defaults.py), so it stays on one.
LITERT_MIN_NODE_WORK = 100_000


def litert_threads(graph: Graph, num_threads: int | None = None) -> int:
    """The Runtime's thread count (``num_threads``; None: :func:`pterun.threads.num_threads`), or 1 for a graph
    of small nodes (:data:`LITERT_MIN_NODE_WORK`)."""
    n = threads.num_threads() if num_threads is None else num_threads
    return 1 if n > 1 and graph.work_per_node() < LITERT_MIN_NODE_WORK else n


def _litert(graph: Graph, engine: str, keep: bool, num_threads: int | None = None, load_dims=None, batch=None,
            cache_dir: str = ""):
    """(LiteRT plan or None, why not). Logs the fallback once when ``keep`` (a real load). With ``batch``, a graph
    on more than one thread gets its interpreter when the batch finishes (shared with the method's others)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(map(repr, ENGINES))}, got {engine!r}")
    if engine == "numpy":
        return None, None
    from pterun.delegates.xnnpack import litert_engine as L

    n = litert_threads(graph, num_threads)
    try:
        if batch is not None and n > 1:
            return L.pending(graph, n, lambda: _numpy(graph), load_dims, batch), None
        return L.build(graph, n, fallback=lambda: _numpy(graph), load_dims=load_dims, cache_dir=cache_dir), None
    except L.Unavailable as e:
        if engine == "litert":
            from pterun.delegates.xnnpack.litert_engine.env import unavailable_error

            raise unavailable_error(e) from None
        reason = f"LiteRT unavailable: {e}"
        if keep:
            logger().debug("XNNPACK delegate on the NumPy engine: %s", reason)
    except L.Unsupported as e:
        reason = str(e)
        if keep:
            logger().info("XNNPACK delegate runs on the NumPy engine (LiteRT cannot take it): %s", reason)
    return None, reason


def _batch(ctx):
    """The LiteRT Batch of the method ``ctx`` belongs to, made on first use; None when the method finishes nothing
    (:attr:`DelegateContext.finish`) or LiteRT is missing."""
    pending = ctx.finish
    if pending is None or ctx.engine == "numpy":
        return None
    from pterun.delegates.xnnpack import litert_engine as L

    for b in pending:
        if isinstance(b, L.Batch):
            return b
    b = L.Batch(ctx.cache_dir)
    pending.append(b)
    return b


def __getattr__(name: str):
    if name == "NumpyPlan":  # the NumPy engine is imported when first needed (a program all on LiteRT never needs it)
        from pterun.delegates.xnnpack.numpy_engine import NumpyPlan

        return NumpyPlan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: A run of portable operators alone is compiled only where its graph's constants (weights) total at most this:
#: the translation copies them into the model's bytes (transposed where TFLite's layout differs) before XNNPACK
#: packs them, so loading holds a few copies at once, where the NumPy kernels read the program's own. A portable
#: LLM of 2 GB of weights stays on the NumPy engine rather than needing 6-8 GB to load.
PORTABLE_COMPILE_BYTES = 256 << 20


def _check_size(graph: Graph) -> None:
    """Raises CannotMerge for a graph of portable operators alone whose constants exceed the bound."""
    from pterun.delegates.xnnpack.merge import CannotMerge

    held = sum(v.data.nbytes for v in graph.values.values() if v.data is not None)
    if held > PORTABLE_COMPILE_BYTES:
        raise CannotMerge(f"{held} bytes of weights: portable operators compile into LiteRT programs of at most "
                          f"{PORTABLE_COMPILE_BYTES} (the NumPy kernels read them where they lie)")


def _check_rounding(graph: Graph, exact: bool) -> None:
    """A merged graph of a method that quantizes activations dynamically (``exact``), or that does so itself, holds
    only kernel nodes that give the portable kernels' numbers bit for bit (:func:`.kernel_ops.bit_for_bit`), each
    marked to take its bit-for-bit lowering (``fields["bitwise"]``); raises CannotMerge otherwise. (A ``mean``
    node over a row is bit for bit on XNNPACK itself: see :mod:`.litert_engine.exact`.)"""
    from pterun.delegates.xnnpack import graph as G
    from pterun.delegates.xnnpack.kernel_ops import bit_for_bit
    from pterun.delegates.xnnpack.merge import CannotMerge

    kernels = [n for n in graph.nodes if n.kind == G.KERNEL]
    if not kernels or not (exact or any(v.datatype == G.QDINT8 or v.dq_datatype for v in graph.values.values())):
        return
    near = [n.op for n in kernels if not bit_for_bit(n.op, n.args)]
    if near:
        raise CannotMerge(f"{near[0]} is not bit for bit the portable kernel's, and the graph quantizes "
                          "activations dynamically")
    for n in kernels:
        n.fields["bitwise"] = True


def _holds_attention(graph: Graph) -> bool:
    from pterun.delegates.xnnpack import graph as G

    return any(n.kind in (G.KV_UPDATE, G.SDPA) for n in graph.nodes)


def _kv_plan(graph: Graph, tensors: list, args: tuple, ctx: DelegateContext):
    """(LiteRT plan, args) for a merged graph with KV caches and attention (:mod:`.litert_engine.kvplan`), or None
    where LiteRT cannot run it (the run is then merged again without them)."""
    from pterun.delegates.xnnpack import litert_engine as L

    try:
        from pterun.delegates.xnnpack.litert_engine.kvplan import KvPlan

        return KvPlan(graph, tensors, args, litert_threads(graph, ctx.num_threads), ctx.dynamic_sizes,
                      ctx.cache_dir), args
    except (L.Unsupported, L.Unavailable) as e:
        logger().debug("XNNPACK delegates with KV caches not merged: %s", e)
        return None


def _checked(got: tuple | None, graph: Graph) -> tuple | None:
    """``got``, (merged executor, args), with the executor checking the indices its embeddings read from outside
    the call before each call (:mod:`.checked`), where it has such embeddings."""
    from pterun.delegates.xnnpack.checked import Checked, index_checks

    checks = index_checks(graph) if got is not None else ()
    return got if not checks else (Checked(got[0], checks), got[1])


def _numpy(graph: Graph):
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    try:
        return compile_graph(graph)
    except PterunError:
        raise
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as e:  # an inconsistent graph
        raise DelegateError(f"XNNPACK payload: cannot compile the graph ({type(e).__name__}: {e})") from e


class XnnpackBackend(Backend):
    """Backend ``"XnnpackBackend"``: compile specs are ignored, as the XNNPACK runtime ignores them."""

    name = "XnnpackBackend"
    merges = True
    #: A merged call holds delegates of at most this many bytes as :meth:`weight_bytes` counts them (their weights,
    #: mostly), or the one that starts it. LiteRT's model holds a copy of the weights it cannot read from the
    #: program file in place (8da4w ones) until XNNPACK has packed them all, so one call over a whole model peaks
    #: at twice its weights; in calls of this size they are packed and given back a piece at a time. Weights read
    #: in place count half (:func:`.payload.weight_bytes`). Fewer calls decode faster: the 500M 8da4w Llama in 2
    #: calls of 128 MiB against 4 of 64 MiB, +1-3.5 % on one thread and +5-11 % on two, for 111 MB more at its
    #: peak (568 MB; ExecuTorch's ~1 GB); in one call +3-4 % more, at 812 MB. The 130M fp32 Llama in 2 calls
    #: (weights read in place counted half) against 3 and its output layer alone: +7-10 % on one thread.
    merge_bytes = 128 << 20
    #: the operators a merged graph can hold between two delegate calls, and the form each takes there
    #: (:func:`.merge.absorbs` says which forms; :mod:`pterun.interp.merge` reads their arguments)
    absorbed_forms = MappingProxyType({
        "aten::mean.out": "mean",
        "executorch_prim::et_view.default": "view",
        "aten::view_copy.out": "reshape",
        "aten::squeeze_copy.dims_out": "squeeze",
        "aten::squeeze_copy.dim_out": "squeeze",
        "aten::slice_copy.Tensor_out": "slice",
        "llama::update_cache.out": "update_cache",
        "llama::custom_sdpa.out": "sdpa",
        **{name: "kernel" for name in sorted(KERNEL_OPS)},
        # on static tensors the operator itself; along a dim the run decides (an LLM's last token), a Pick node
        "aten::select_copy.int_out": ("kernel", "select"),
    })

    def init(self, blob: np.ndarray, compile_specs, ctx: DelegateContext):
        flags = ctx.dynamic_args
        dims = load_dims(ctx.dynamic_sizes, lambda ext: ext < len(flags) and flags[ext])
        return load(blob, ctx.named_data, ctx.engine, ctx.call_args, ctx.num_threads, dims, _batch(ctx),
                    ctx.cache_dir)

    def quantizes(self, blob: np.ndarray) -> bool:
        """Whether the payload quantizes activations dynamically (8da4w, 8da8w; see :meth:`Backend.quantizes`)."""
        from pterun.delegates.xnnpack.payload import quantizes_dynamically

        return quantizes_dynamically(blob)

    def weight_bytes(self, blob: np.ndarray) -> int:
        """The payload's bytes with its constants (in named data, mostly), as its constant table declares them."""
        from pterun.delegates.xnnpack.payload import weight_bytes

        return weight_bytes(blob)

    def outputs(self, blob: np.ndarray) -> frozenset[int] | None:
        """The DelegateCall arguments a payload writes (its graph's external outputs), None when unreadable."""
        from pterun.delegates.xnnpack.payload import external_outputs

        return external_outputs(blob)

    def absorbs(self, op, exact: bool = False) -> bool:
        """Whether a merged graph can hold an operator between two delegate calls (see :meth:`merge`); an operator
        held as a kernel only with arguments every engine computes (:mod:`.kernel_ops`), and with ``exact`` only
        one whose lowering is bit for bit (:func:`.kernel_ops.bit_for_bit`)."""
        from pterun.delegates.xnnpack.kernel_ops import bit_for_bit
        from pterun.delegates.xnnpack.merge import absorbs

        if exact and op.op == "kernel" and not bit_for_bit(op.attrs["name"], op.attrs["args"]):
            return False
        ok = absorbs(op)
        if not ok and op.op == "kernel":
            from pterun.delegates.xnnpack.kernel_ops import supports

            logger().debug("%s stays outside merged XNNPACK graphs: %s", op.attrs["name"],
                           supports(op.attrs["name"], op.attrs["args"]))
        return ok

    def compiles(self, engine: str) -> bool:
        """Runs of portable operators alone become LiteRT programs too, where LiteRT is installed and the engine
        is not ``"numpy"`` (whose NumPy kernels stay the portable kernels' own numbers). LiteRT is looked for,
        not imported: a program with no run worth a call never loads it (:meth:`merge` does, for a run)."""
        if engine == "numpy":
            return False
        import importlib.util

        try:
            return importlib.util.find_spec("ai_edge_litert") is not None
        except Exception:  # noqa: BLE001  (a finder that fails: as not installed; merge reports nothing then)
            return False

    def merge(self, parts, blobs: dict, ctx: DelegateContext, outside, tensors: list, shared):
        """One LiteRT executor for a run of delegate calls (:mod:`pterun.interp.merge`), or None: the run's graphs
        do not join, or LiteRT cannot take the merged graph (the engine is ``"numpy"``, LiteRT is missing, a node
        it lacks). ``shared`` says which slots lie over the same bytes (:func:`.merge.merge_graphs`). Returns
        (executor, the merged call's argument slots)."""
        from pterun.delegates.xnnpack.merge import CannotMerge, merge_graphs

        if ctx.engine == "numpy":
            return None
        graphs = {}
        for i, blob in blobs.items():
            graphs[i] = g = Graph.read(blob, ctx.named_data)
            for p in parts:
                if getattr(p, "delegate_index", None) == i:
                    _check_external_values(g, tuple(getattr(tensors[a], "capacity", None) for a in p.args))
        try:
            graph, args = merge_graphs(parts, graphs, outside, tensors, shared)
            _check_rounding(graph, ctx.exact)
            if not blobs:
                _check_size(graph)
        except CannotMerge as e:
            logger().debug("XNNPACK delegates %s not merged: %s", sorted(blobs), e)
            return None
        if _holds_attention(graph):
            got = _kv_plan(graph, tensors, args, ctx)
        else:
            dims = load_dims(ctx.dynamic_sizes, lambda ext: getattr(tensors[args[ext]], "dynamic", False))
            plan, _ = _litert(graph, "auto", keep=False, num_threads=ctx.num_threads, load_dims=dims,
                              batch=_batch(ctx), cache_dir=ctx.cache_dir)
            got = None if plan is None else (plan, args)
        return _checked(got, graph)

    def describe(self, blob: np.ndarray, named_data, engine: str) -> dict:
        """The payload's format (its flatbuffer identifier, ``XN00`` or ``XN01``, and whether an ``XH00`` header
        wraps it with a constant region), its nodes and value datatypes, and the engine it would run on."""
        from collections import Counter

        from pterun.delegates.xnnpack.payload import payload_format, read_graph

        info = {"payload_format": payload_format(blob)}
        try:
            graph = read_graph(blob, named_data)
        except (PterunError, KeyError) as e:
            info["summary_error"] = str(e)
            return info
        info["nodes"] = dict(sorted(Counter(f"XNN{n.name}" for n in graph.nodes).items()))
        info["value_datatypes"] = dict(sorted(Counter(v.dtype_name for v in graph.values.values()).items()))
        info["engine"], info["engine_reason"] = engine_for(Graph.of(graph), engine)
        return info


register_backend(XnnpackBackend())
