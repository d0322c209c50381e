"""The NumPy engine: compiles a typed XNNPACK :class:`~.graph.Graph` once into a plan of NumPy steps, and runs it.

:func:`compile_graph` asks the registered builders (:mod:`.nodes`, :mod:`.gemm`, registry in :mod:`.compiler`)
to turn each node into a small step ``step(env)`` with its weights already packed, then computes liveness
(which slots die after which step), binds the external inputs and outputs, and returns a :class:`NumpyPlan`.
``NumpyPlan.execute(args)`` converts the DelegateCall's input tensors, runs the steps and writes the outputs.

Example::

    >>> plan = compile_graph(Graph.read(blob, named_data))   # doctest: +SKIP
    >>> plan.execute([input_tensor, output_tensor])          # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from pterun._fpstate import quiet, restore
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.binding import F32_DTYPE, input_array, write_output
from pterun.delegates.xnnpack.numpy_engine import gemm as _gemm  # noqa: F401  (registers the GEMM node builders)
from pterun.delegates.xnnpack.numpy_engine import nodes as _nodes  # noqa: F401  (registers the other node builders)
from pterun.delegates.xnnpack.numpy_engine.compiler import BUILDERS, NAMES, Compiler
from pterun.delegates.xnnpack.numpy_engine.windows import Scratch
from pterun.errors import DelegateError, PterunError

__all__ = ["BUILDERS", "NAMES", "NumpyPlan", "compile_graph"]


class NumpyPlan:
    """A compiled graph: a value-table template with the constants preset, input bindings, a schedule of
    (step, slots that die after it), and output bindings. Each call works on its own copy of the table, and
    kernels use the plan's work memory (``scratch``: per-thread buffers, freed with the plan), so one plan can
    run from several threads at once."""

    engine = "numpy"
    engine_reason: str | None = None  # why the LiteRT engine does not run this graph (None: not asked for)

    def __init__(self, template: list, inputs: list, schedule: list, names: list, outputs: list,
                 scratch: Scratch | None = None):
        self.template = template
        self.scratch = scratch if scratch is not None else Scratch()  # the kernels' work memory
        self.inputs = inputs  # (ext_id, slot, rep, prepare-or-None)
        self.schedule = schedule  # (step, tuple of slots to release after it)
        self.names = names  # what each step runs, for error messages and the profiler
        self.outputs = outputs  # (ext_id, slot)
        self.nodes: list = []  # (first step, end step, node name, output slots): what execute_observed reports

    def execute(self, args: list) -> None:
        env = self._bind(args)
        i = 0
        token = quiet()
        try:
            for i, (step, dead) in enumerate(self.schedule):
                step(env)
                for s in dead:  # drop intermediates as soon as nothing reads them (peak memory)
                    env[s] = None
        except PterunError:
            raise
        except Exception as e:
            raise DelegateError(f"XNNPACK delegate failed in {self.names[i]}: {type(e).__name__}: {e}") from e
        finally:
            restore(token)
        self._write_outputs(args, env)

    def _bind(self, args: list) -> list:
        """A fresh value table with the graph's inputs read from the DelegateCall's arguments."""
        env = self.template.copy()
        try:
            for ext, slot, rep, prep in self.inputs:
                a = input_array(args, ext, rep.dtype if rep.kind != "dynamic" else F32_DTYPE)
                env[slot] = a if prep is None else prep(a)
        except IndexError:
            raise DelegateError(f"XNNPACK delegate expects {self.arity} arguments, got {len(args)}") from None
        return env

    def _write_outputs(self, args: list, env: list) -> None:
        outputs = self.outputs
        several = len(outputs) > 1
        if several:
            results = [env[slot] for _, slot in outputs]
            inputs = [env[slot] for _, slot, _, _ in self.inputs]
        for k, (ext, slot) in enumerate(outputs):
            value = results[k] if several else env[slot]
            # an output may view an input whose memory an earlier output write overwrites: copy it first
            if several and any(np.may_share_memory(value, x) for x in inputs):
                value = value.copy()
            write_output(args, ext, value)

    @property
    def arity(self) -> int:
        return max([e for e, *_ in self.inputs] + [e for e, _ in self.outputs], default=-1) + 1

    def execute_observed(self, args: list, observe) -> None:
        """:meth:`execute` with ``observe(node, name, run, outputs)`` called around each graph node: it must call
        ``run()`` (the node's steps); ``outputs()`` then returns the node's output values. Slower than
        :meth:`execute` (the interpreter's ``Method.execute(hook=)`` and ``Method.trace`` use it)."""
        env = self._bind(args)
        schedule = self.schedule
        token = quiet()
        try:
            for k, (first, end, name, slots) in enumerate(self.nodes):
                def run(first=first, end=end, name=name):
                    try:
                        for step, _ in schedule[first:end]:
                            step(env)
                    except PterunError:
                        raise
                    except Exception as e:
                        raise DelegateError(f"XNNPACK delegate failed in {name}: {type(e).__name__}: {e}") from e
                observe(k, name, run, lambda slots=slots: [env[s] for s in slots])
                for _, dead in schedule[first:end]:
                    for s in dead:
                        env[s] = None
        finally:
            restore(token)
        self._write_outputs(args, env)


def compile_graph(graph) -> NumpyPlan:
    """Validate the node list against the values and build the plan (``graph``: a typed :class:`~.graph.Graph`
    or a :class:`.payload.Graph` record); raises DelegateError."""
    graph = G.Graph.of(graph)
    c = Compiler(graph)
    names, last_read, spans = [], {}, []
    for node in graph.nodes:
        c.node = node
        build = BUILDERS.get(node.kind)
        if build is None:
            raise c.fail(f"XNN{node.name} is not supported by the XNNPACK runtime")
        c.reads = set()
        before = len(c.steps)
        build(c, node)
        names.extend([node.describe()] * (len(c.steps) - before))
        spans.append((before, len(c.steps), node.describe(),
                      [c.slots[v] for f, v in node.fields.items() if f.startswith("output") and f.endswith("_id")
                       and v in c.slots]))
        for vid in c.reads:
            last_read[vid] = len(c.steps) - 1
    c.node = None
    template: list = [None] * len(c.slots)
    inputs, outputs, keep = [], [], set()
    for vid, v in graph.values.items():
        if v.data is not None:
            if v.datatype not in G.CONSTANT_ONLY:
                template[c.slots[vid]] = c.const(vid)
            elif vid in last_read:  # per-channel/4-bit data a non-GEMM node reads: dequantized once
                template[c.slots[vid]] = c.real_const(vid)
            keep.add(vid)
        if v.flags & G.VALUE_EXTERNAL_INPUT:
            rep = c.reps[vid]
            prep = None
            if v.dq_datatype == G.QINT8 and v.datatype == G.FP32:  # legacy: quantize the fp32 input here
                prep = rep.store()
            inputs.append((v.external_id, c.slots[vid], rep, prep))
        if v.flags & G.VALUE_EXTERNAL_OUTPUT:
            if vid not in c.defined:
                raise DelegateError(f"XNNPACK payload: output {v.describe()} is never produced")
            outputs.append((v.external_id, c.slots[vid]))
            keep.add(vid)
    ext_ids = [e for e, *_ in inputs] + [e for e, _ in outputs]
    if len(set(ext_ids)) != len(ext_ids):
        raise DelegateError(f"XNNPACK payload: external ids {sorted(ext_ids)} are not distinct")
    dead: list[list[int]] = [[] for _ in c.steps]
    for vid, step in last_read.items():
        if vid not in keep:
            dead[step].append(c.slots[vid])
    inputs.sort(key=lambda t: t[0])
    outputs.sort(key=lambda t: t[0])
    plan = NumpyPlan(template, inputs, list(zip(c.steps, map(tuple, dead))), names, outputs, c.scratch)
    plan.nodes = spans
    return plan
