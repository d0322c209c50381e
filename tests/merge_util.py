"""Helpers the merge tests share: merged graphs over synthetic slots, and runs found on a synthetic plan."""

from __future__ import annotations

import numpy as np

from pterun.delegates.xnnpack.merge import merge_graphs
from pterun.interp.access import SharedBytes
from xnn_payloads import out_tensor, tensor


def merge_over(parts, graphs, outside, tensors):
    """merge_graphs over tensors that share no bytes but where the test says so."""
    return merge_graphs(parts, graphs, outside, tensors, SharedBytes(tensors))


def slots(shapes: dict) -> list:
    tensors = [None] * (max(shapes) + 1)
    for slot, shape in shapes.items():
        tensors[slot] = out_tensor(shape, np.float32)
    return tensors


def run_plan(plan, args_shapes, inputs):
    outs = [out_tensor(s, np.float32) for s in args_shapes[len(inputs):]]
    plan.execute([tensor(a) for a in inputs] + outs)
    return [t.array.copy() for t in outs]


class SyntheticPlan:
    """The parts of an ExecutionPlan the merge reads: ``values`` as (tag, description) pairs, where the synthetic
    tensors here have no description (no memory id: none holds shared state)."""

    def __init__(self, chains, operators, outputs=(), inputs=(), tags=()):
        self.chains, self.operators, self.outputs, self.inputs = chains, operators, outputs, inputs
        self.values = [(tag, None) for tag in tags]


def mean_values():
    """Slots: 0-9 tensors [1, 4, 8]; 10 = dims (-1,) via slot 11 = -1; 12 = keepdim True; 13 = None; 14 a mean out."""
    from pterun.format.schema import BOOL, INT, INT_LIST, NULL, TENSOR
    values = [out_tensor((1, 4, 8), np.float32) for _ in range(10)] + [(11,), -1, True, None,
                                                                       out_tensor((1, 4, 1), np.float32)]
    tags = [TENSOR] * 10 + [INT_LIST, INT, BOOL, NULL, TENSOR]
    return values, tags


def find_runs_in(chains, outputs=(), volatile=(), later=None, values=None, delegate_outputs=lambda i: frozenset({1}),
                 sizes=None, max_bytes=None):
    """Runs of the synthetic plan, and ``outside``. Each test delegate writes its second argument, unless
    ``delegate_outputs`` says otherwise (None: not known)."""
    from pterun.delegates.xnnpack import XnnpackBackend
    from pterun.interp.access import Accesses
    from pterun.interp.merge import absorbed_op, find_runs, slots_read_outside
    values, tags = values or mean_values()
    plan = SyntheticPlan(chains, ["aten::mean.out", "aten::add.out"], outputs, tags=tags)
    acc = Accesses(plan, values, tags, delegate_outputs=delegate_outputs)
    def absorbed(backend, name, args):  # the test backend holds what XNNPACK's merged graphs hold
        return absorbed_op(XnnpackBackend.absorbed_forms.get(name), args, values, tags, set(volatile))

    runs = find_runs(plan, values, tags, set(volatile), lambda i: "B" if i < 5 else None, absorbed, later,
                     acc, bound=None if max_bytes is None else (sizes, lambda backend: max_bytes))
    return runs, slots_read_outside(plan, tags, values, acc)


def add_later(ins):
    """The test plan's add (a, b, out) may run later: it reads a and b, writes out."""
    return set(ins.args[:2]), {ins.args[2]}


def without_attention_join(monkeypatch) -> None:
    """The XNNPACK backend without its KV-cache and attention forms: merged runs stop at ``llama::update_cache``
    and ``llama::custom_sdpa``, as they do where LiteRT cannot take the join (a layer's delegates merge, the cache
    updates and attention run between the calls)."""
    from types import MappingProxyType

    from pterun.delegates.xnnpack import XnnpackBackend

    forms = {k: v for k, v in XnnpackBackend.absorbed_forms.items() if v not in ("update_cache", "sdpa")}
    monkeypatch.setattr(XnnpackBackend, "absorbed_forms", MappingProxyType(forms))
