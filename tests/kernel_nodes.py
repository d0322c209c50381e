"""Operators held as kernel nodes of merged graphs, for the tests: a one-instruction program of an operator's
arguments, its absorbed form, the merged graph of it alone, and that graph run on either engine."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from merge_util import merge_over
from xnn_payloads import out_tensor, tensor

from pterun.format.schema import BOOL, DOUBLE, INT, INT_LIST, NULL, STRING, TENSOR
from pterun.interp.merge import kernel_op
from pterun.kernels import KERNELS

needs_litert = pytest.mark.skipif(importlib.util.find_spec("ai_edge_litert") is None,
                                  reason="ai-edge-litert is not installed")
F32, B = np.float32, np.bool_
rng = np.random.default_rng(7)


class Out:
    """An out argument of the given shape and dtype."""

    def __init__(self, shape, dtype=F32):
        self.shape, self.dtype = tuple(shape), dtype


class Const:
    """A constant of the program (a weight: read-only)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)


class Given:
    """One of the method's inputs (what the caller passes; other arrays are tensors the program computes)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)


def program(args: list) -> tuple[list, list, list]:
    """(values, tags, the instruction's argument slots) for ``args``: arrays become input tensors, :class:`Out`
    out tensors, :class:`Const` read-only constants, ints, floats, bools, strings and None scalars, tuples of
    ints int lists."""
    values, tags, slots = [], [], []

    def add(v, tag) -> int:
        values.append(v)
        tags.append(tag)
        return len(values) - 1

    for a in args:
        if isinstance(a, (np.ndarray, Given)):
            slots.append(add(tensor(a if isinstance(a, np.ndarray) else a.array), TENSOR))
        elif isinstance(a, Const):
            t = tensor(a.array)
            t.freeze(a.array.copy())
            slots.append(add(t, TENSOR))
        elif isinstance(a, Out):
            slots.append(add(out_tensor(a.shape, a.dtype), TENSOR))
        elif isinstance(a, tuple):
            slots.append(add(tuple(add(int(x), INT) for x in a), INT_LIST))
        elif a is None:
            slots.append(add(None, NULL))
        elif isinstance(a, str):
            slots.append(add(a, STRING))
        else:
            slots.append(add(a, BOOL if isinstance(a, bool) else INT if isinstance(a, int) else DOUBLE))
    return values, tags, slots


def rand(*shape):
    return rng.standard_normal(shape).astype(F32)


def absorbed(name: str, args: list):
    values, tags, slots = program(args)
    given = frozenset(s for s, a in zip(slots, args) if isinstance(a, Given))
    op = kernel_op(KERNELS[name], tuple(slots), values, tags, set(), given)
    return op, values


def graph_of(op, values):
    """The merged graph of ``op`` alone, its first output read outside (a layer norm's statistics are not)."""
    return merge_over([op], {}, lambda slot: slot == op.outputs[0], values)


def run_graph(graph, args, values, engine: str):
    from pterun.delegates.xnnpack import litert_engine as L
    from pterun.delegates.xnnpack.numpy_engine import compile_graph

    plan = compile_graph(graph) if engine == "numpy" else L.build(graph)
    outs = [out_tensor(values[s].shape, values[s].dtype) for s in args[len(graph.inputs):]]
    plan.execute([values[s] for s in args[:len(graph.inputs)]] + outs)
    return plan, outs[0].array


def call_args(args):
    """The arguments the interpreter would pass the kernel: arrays, Python scalars, out arrays."""
    return [np.empty(a.shape, a.dtype) if isinstance(a, Out) else a.array if isinstance(a, (Const, Given)) else a
            for a in args]
