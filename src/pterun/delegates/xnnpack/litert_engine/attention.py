"""An LLM's KV cache and attention inside a merged graph (issue #24: a decode step as one invoke).

ExecuTorch's LLM exporter leaves ``llama::update_cache`` and ``llama::custom_sdpa`` between the XNNPACK delegates
of every layer, so a decode step is ~15 LiteRT calls with Python between them. Here they join the merged graph
(:mod:`..merge`) as node kinds of pterun's own (:data:`.graph.KV_UPDATE`, :data:`.graph.SDPA`,
:data:`.graph.KV_SHADOW`), and the LiteRT engine runs them (:class:`.kvplan.KvPlan`):

* a cache ``[1, P, Hkv, D]`` is held flat, and only its first ``L`` positions are in the graph: a prefix of its
  memory. The plan binds that prefix in place, as the memory of both the cache's input and its output, so
  ``KvUpdate`` (TFLite's DYNAMIC_UPDATE_SLICE at an element offset) writes the new rows into the method's own
  cache, and nothing is copied;
* ``Sdpa`` attends over those ``L`` positions with XNNPACK's batch matrix multiplies and softmax, masked by an
  additive bias the graph computes from two position inputs. ``L`` grows with the position (the plan resizes the
  inputs: every reshape here leaves the positions and the sequence length to the run-time shapes);
* XNNPACK's matrix multiplies want each kv head's positions together, and the cache holds them interleaved
  (``[1, P, Hkv, D]``): read from the cache, each step reshapes and transposes all ``L`` positions of it. Where
  nothing but the run touches a cache (the interpreter says so: ``attrs["private"]``), the graph keeps a *twin*
  of it instead, ``[Hkv, L, D]`` for keys and ``[Hkv, D, L]`` for values, in a buffer of LiteRT's that the plan
  binds as both the input and the output of ``KvShadow`` (DYNAMIC_UPDATE_SLICE of the step's rows, in place).
  Attention reads the twin as it is. The plan makes the twin from the method's cache whenever ``L`` changes; the
  method's cache is written as before, so it stays the state the method holds.

The position is an int the method computes while it runs (``start_pos``). It reaches the graph as inputs the plan
fills from it: the update's element offset, each key's position and the last position each query row may see.
Those inputs are keyed ``("offset", int slot, elements per position)``, ``("keys", int slot)``, ``("queries",
int slot, query heads per kv head, causal, declared sequence length)`` and ``("start", int slot, values)`` (a
twin's ``[0, position, 0]`` or ``[0, 0, position]``) among the merger's inputs, and a twin as ``("shadow", cache
slot)`` among its inputs and outputs; the merged call passes the slot for them. Every input but the twins is
one-dimensional, so the plan can bind memory of its own to each (LiteRT binds host memory to 1-D inputs only).

The attention's float32 arithmetic is XNNPACK's, in another order than the NumPy kernel's: outputs agree within
the float tolerance. A method whose linear layers quantize activations per token (8da4w) can see a difference
there turn into one int8 step of an activation (README, "Accuracy").
"""

from __future__ import annotations

import math

import numpy as np

from pterun.delegates.xnnpack import graph as G

__all__ = ["AttentionRules", "join"]


def _fp32(dims) -> G.Value:
    return G.Value(0, G.FP32, tuple(int(d) for d in dims), None, 0, None, None)


def _position_input(m, key: tuple, datatype: int, dims: tuple) -> int:
    """The merged graph's input for ``key`` (one per key: the layers of a step share their offsets and masks)."""
    vid = m.inputs.get(key)
    if vid is None:
        vid = m.inputs[key] = m.add(G.Value(0, datatype, dims, None, 0, None, None))
    return vid


def _flat_cache(m, slot: int) -> int:
    """The merged value a part reads for the cache at ``slot``, held flat (``[P * Hkv * D]``)."""
    c = m.tensors[slot]
    return m.read(slot, _fp32((math.prod(c.shape),)))


def _shadow(m, cache: int, values: bool) -> int:
    """The merged value holding the cache's twin as the run last left it: written by an earlier ``KvShadow`` of the
    run, else the graph's input for it (keyed ``("shadow", cache slot)``). A key cache's twin is ``[Hkv, P, D]``,
    a value cache's ``[Hkv, D, P]``: each as attention's matrix multiplies take it without a copy."""
    key = ("shadow", cache)
    if key in m.state:
        return m.state[key]
    c = m.tensors[cache]
    dims = (c.shape[2], c.shape[3], c.shape[1]) if values else (c.shape[2], c.shape[1], c.shape[3])
    return _position_input(m, key, G.FP32, dims)


def join(m, part) -> None:
    """The node of an absorbed ``update_cache`` or ``sdpa`` (:mod:`pterun.interp.forms`) in the merger ``m``
    (:class:`..merge._Merger`)."""
    T = m.tensors
    if part.op == "update_cache":
        value, cache, pos = part.inputs
        c = T[cache]
        row = c.shape[2] * c.shape[3]
        flat = _flat_cache(m, cache)
        rows = m.read(value, _fp32(T[value].shape))
        offset = _position_input(m, ("offset", pos, row), G.INT32, (1,))
        out = m.add(_fp32((c.shape[1] * row,)))
        m.node(G.KV_UPDATE, "KvUpdate", {"input1_id": flat, "input2_id": rows, "input3_id": offset,
                                         "output_id": out, "row": row, "s": T[value].shape[1]})
        m.write(cache, out)
        m.caches[cache] = row
        role = part.attrs.get("private", {}).get(cache)
        if role is not None:  # its twin gets the rows too
            values = role == "v"
            start = _position_input(m, ("start", pos, values), G.INT32, (3,))
            twin = _shadow(m, cache, values)
            new = m.add(_fp32(m.values[twin].dims))
            m.node(G.KV_SHADOW, "KvShadow", {"input1_id": twin, "input2_id": rows, "input3_id": start,
                                             "output_id": new, "s": T[value].shape[1], "values": values})
            m.state[("shadow", cache)] = new
        return
    q, k, v, pos = part.inputs
    (out,) = part.outputs
    qt, kc = T[q], T[k]
    s, hq, d = qt.shape[1], qt.shape[2], qt.shape[3]
    hkv = kc.shape[2]
    rep, causal = hq // hkv, part.attrs["causal"]
    scale = part.attrs["scale"]
    private = part.attrs.get("private", {})
    k_in = _shadow(m, k, False) if private.get(k) == "k" else _flat_cache(m, k)
    v_in = _shadow(m, v, True) if private.get(v) == "v" else _flat_cache(m, v)
    fields = {"input1_id": m.read(q, _fp32(qt.shape)), "input2_id": k_in, "input3_id": v_in,
              "input4_id": _position_input(m, ("keys", pos), G.FP32, (kc.shape[1],)),
              "input5_id": _position_input(m, ("queries", pos, rep, causal, s), G.FP32, (s * rep,))}
    o = m.add(_fp32(T[out].shape))
    m.node(G.SDPA, "Sdpa", {**fields, "output_id": o, "hkv": hkv, "d": d, "hq": hq, "s": s, "causal": causal,
                            "scale": float(np.float32(1 / math.sqrt(d) if scale is None else scale))})
    m.write(out, o)


class AttentionRules:
    """The translator's rules for the two node kinds (mixed into :class:`.translate._Translator`)."""

    def node_KvUpdate(self, n: G.Node) -> None:
        """The rows, flattened, written at the element offset: DYNAMIC_UPDATE_SLICE, which LiteRT's builtin kernel
        runs (XNNPACK has none); the plan makes it write in place."""
        first = len(self.operators)
        f = n.fields
        cache, rows, at, out = (self.tensor_of(f[k]) for k in ("input1_id", "input2_id", "input3_id", "output_id"))
        flat = self.add_tensor([int(np.prod(self.tensors[rows].shape))], self.S.TensorType.FLOAT32)
        self.op("RESHAPE", [rows, self.i32([-1])], [flat])
        self.op("DYNAMIC_UPDATE_SLICE", [cache, flat, at], [out])
        self.allow_builtin(first)

    def node_KvShadow(self, n: G.Node) -> None:
        """The rows ``[1, S, Hkv, D]`` written into the twin, ``[Hkv, L, D]`` at ``[0, position, 0]`` (keys) or
        ``[Hkv, D, L]`` at ``[0, 0, position]`` (values):
        DYNAMIC_UPDATE_SLICE (LiteRT's builtin kernel), in place where the plan binds the twin's input and output
        to one buffer."""
        first = len(self.operators)
        f = n.fields
        twin, rows, at, out = (self.tensor_of(f[k]) for k in ("input1_id", "input2_id", "input3_id", "output_id"))
        values = f["values"]
        hkv, a, b = (int(x) for x in self.tensors[twin].shape)
        d = a if values else b
        s = int(self.tensors[rows].shape[1])
        F = self.S.TensorType.FLOAT32
        r3 = self.add_tensor([s, hkv, d], F)
        self.op("RESHAPE", [rows, self.i32([-1, hkv, d])], [r3])
        head = self.add_tensor([hkv, d, s] if values else [hkv, s, d], F)
        self.op("TRANSPOSE", [r3, self.i32([1, 2, 0] if values else [1, 0, 2])], [head])
        self.op("DYNAMIC_UPDATE_SLICE", [twin, head, at], [out])
        self.allow_builtin(first)

    def mask_bias(self, f: dict, rows: int, L: int) -> int:
        """``[S * rep, L]``: 0 where a query row may look at a key, at most -1e30 elsewhere, from the positions the
        plan binds (``input4_id``: each key's, ``input5_id``: the last key each query row may see):
        ``min(query - key, 0) * 1e30``, XNNPACK's subtract, minimum and multiply. Where a key is visible the
        score gets +0 (unchanged); elsewhere its softmax weight is exactly 0, as with -inf. One per pair of position
        inputs: the layers of a step share it."""
        key = (f["input4_id"], f["input5_id"])
        if key in self.biases:
            return self.biases[key]
        F = self.S.TensorType.FLOAT32
        keys, queries = self.tensor_of(f["input4_id"]), self.tensor_of(f["input5_id"])
        kr = self.add_tensor([1, L], F)
        self.op("RESHAPE", [keys, self.i32([1, -1])], [kr])
        qc = self.add_tensor([rows, 1], F)
        self.op("RESHAPE", [queries, self.i32([-1, 1])], [qc])
        ahead = self.add_tensor([rows, L], F)
        self.op("SUB", [qc, kr], [ahead], "SubOptions")
        behind = self.add_tensor([rows, L], F)
        self.op("MINIMUM", [ahead, self.const(np.zeros(1, np.float32), "FLOAT32")], [behind])
        bias = self.add_tensor([rows, L], F)
        self.op("MUL", [behind, self.const(np.array([1e30], np.float32), "FLOAT32")], [bias], "MulOptions")
        self.biases[key] = bias
        return bias

    def node_Sdpa(self, n: G.Node) -> None:
        """Attention of ``S`` queries over ``L`` cached positions. The query heads are grouped by their kv head
        (``[Hkv, S * rep, D]``), so each kv head's scores are one batch matrix multiply, and the mask
        (:meth:`mask_bias`) one broadcast add. Every reshape leaves one dim to the run-time shapes (-1), so the
        plan may resize ``S`` and ``L``."""
        f = n.fields
        F = self.S.TensorType.FLOAT32
        hkv, d, hq = f["hkv"], f["d"], f["hq"]
        rep = hq // hkv
        q, kc, vc, out = (self.tensor_of(f[k]) for k in ("input1_id", "input2_id", "input3_id", "output_id"))
        s = int(self.tensors[q].shape[1])
        L = int(self.tensors[kc].shape[1]) if len(self.tensors[kc].shape) == 3 else \
            int(self.tensors[kc].shape[0]) // (hkv * d)
        heads = []
        for c, perm in ((kc, [1, 0, 2]), (vc, [1, 2, 0])):
            if len(self.tensors[c].shape) == 3:  # the cache's twin ([Hkv, L, D] for keys, [Hkv, D, L] for values)
                heads.append(c)
                continue
            c3 = self.add_tensor([L, hkv, d], F)
            self.op("RESHAPE", [c, self.i32([-1, hkv, d])], [c3])
            h = self.add_tensor([hkv, L, d] if perm == [1, 0, 2] else [hkv, d, L], F)
            self.op("TRANSPOSE", [c3, self.i32(perm)], [h])
            heads.append(h)
        q4 = self.add_tensor([s, hkv, rep, d], F)
        self.op("RESHAPE", [q, self.i32([-1, hkv, rep, d])], [q4])
        qh = self.add_tensor([hkv, s, rep, d], F)
        self.op("TRANSPOSE", [q4, self.i32([1, 0, 2, 3])], [qh])
        q3 = self.add_tensor([hkv, s * rep, d], F)
        self.op("RESHAPE", [qh, self.i32([hkv, -1, d])], [q3])
        # the cache as the left-hand side, the queries as the right: XNNPACK packs the right-hand side of a batch
        # matrix multiply at every call (all L positions, where the cache is on the right), the left it reads as it is
        scores_t = self.add_tensor([hkv, L, s * rep], F)
        self.op("BATCH_MATMUL", [heads[0], q3], [scores_t], "BatchMatMulOptions", adjY=True)
        scores = self.add_tensor([hkv, s * rep, L], F)
        self.op("TRANSPOSE", [scores_t, self.i32([0, 2, 1])], [scores])
        scaled = self.add_tensor([hkv, s * rep, L], F)
        self.op("MUL", [scores, self.const(np.array([f["scale"]], np.float32), "FLOAT32")], [scaled], "MulOptions")
        masked = self.add_tensor([hkv, s * rep, L], F)
        self.op("ADD", [scaled, self.mask_bias(f, s * rep, L)], [masked], "AddOptions")
        probs = self.add_tensor([hkv, s * rep, L], F)
        self.op("SOFTMAX", [masked], [probs], "SoftmaxOptions", beta=1.0)
        # the values [Hkv, D, L] (their twin's layout) on the left again, the probabilities on the right
        ctx_t = self.add_tensor([hkv, d, s * rep], F)
        self.op("BATCH_MATMUL", [heads[1], probs], [ctx_t], "BatchMatMulOptions", adjY=True)
        c4 = self.add_tensor([hkv, d, s, rep], F)
        self.op("RESHAPE", [ctx_t, self.i32([hkv, d, -1, rep])], [c4])
        ct = self.add_tensor([s, hkv, rep, d], F)
        self.op("TRANSPOSE", [c4, self.i32([2, 0, 3, 1])], [ct])
        self.op("RESHAPE", [ct, self.i32([1, -1, hq, d])], [out])
