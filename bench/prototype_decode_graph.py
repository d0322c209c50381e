"""Prototype for issue #24, deliverable 2: a real LLM decode step with its layers as one LiteRT invoke.

``probe_decode_attention.py`` measured attention over a bound cache prefix in isolation. This script builds the
whole thing from a real exported Llama (ExecuTorch's LLM exporter, XNNPACK, ``llama::update_cache`` +
``llama::custom_sdpa``) as pterun loads it. It walks the loaded method's steps, from the first merged delegate
call after the prologue to the last one before the logits. It joins every merged delegate graph of that stretch,
its views, its KV-cache updates and its attentions into one TFLite model, using pterun's own merge
(:class:`..merge._Merger`) and translator, with two node kinds of its own:

* ``KvUpdate``: DYNAMIC_UPDATE_SLICE of the new rows into a cache's first L positions. The positions are bound
  as flat host memory to both the operator's input and its output, so the write happens in place;
* ``Sdpa``: attention of the step's query over those L positions, with a mask input.

A step then runs the prologue (embedding, RoPE rows, the first delegate call) as pterun does, then the one
invoke, then the logits' delegate call. With ``--whole`` the join runs from the first delegate call to the
logits (the first norm's ``mean`` and the logits' row selection included): only the embedding, the position's
scalars and the RoPE rows they slice run before the invoke, and nothing after it. The script checks the logits
against pterun's own steps, then times both, the caches advancing as a decode does.

It is a measurement, not an engine: decode only (one token), and the caches are copies this script owns. L is
either a fixed ``--bucket`` or grows by ``--grow`` positions as the decode needs them: the model's inputs are
resized (the translation's reshapes say -1 for the positions) and the longer prefixes bound. The logits of an
fp32 model agree with pterun's steps within ~2e-6 of scale. In an 8da4w model they may differ by ~2e-2: its
activations are quantized to int8 per token, so a 1e-7 difference in the attention's rounding moves some values
by a whole int8 step.

    .venv/bin/python bench/prototype_decode_graph.py bench/models/llama130m_8da4w.pte --pos 30 --grow 32 --steps 64
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

import pterun
from pterun.delegates.xnnpack import graph as G
from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine.prepare import declared_at, not_delegated
from pterun.delegates.xnnpack.litert_engine.translate import Translation, _Translator
from pterun.delegates.xnnpack.merge import _Merger
from pterun.interp.access import SharedBytes, view_roots
from pterun.interp.forms import absorbed_op
from probe_decode_attention import _aligned  # (bench/): an array at the 64-byte boundary LiteRT's host memory needs

F32V = lambda dims: G.Value(0, G.FP32, tuple(dims), None, 0, None, None)  # noqa: E731
I32V = lambda dims: G.Value(0, G.INT32, tuple(dims), None, 0, None, None)  # noqa: E731


class DecodeTranslator(_Translator):
    """pterun's translator with the two node kinds of this prototype."""

    def node_KvUpdate(self, n) -> None:
        first = len(self.operators)
        f = n.fields
        cache, rows, at, out = (self.tensor_of(f[k]) for k in ("input1_id", "input2_id", "input3_id", "output_id"))
        size = int(np.prod(self.tensors[rows].shape))
        flat = self.add_tensor([size], self.S.TensorType.FLOAT32)
        self.op("RESHAPE", [rows, self.i32([size])], [flat])
        self.op("DYNAMIC_UPDATE_SLICE", [cache, flat, at], [out])
        self.allow_builtin(first)

    def node_Sdpa(self, n) -> None:
        f = n.fields
        T = self.S.TensorType.FLOAT32
        hkv, d, L, hq, scale = f["hkv"], f["d"], f["L"], f["hq"], f["scale"]
        rep = hq // hkv
        q, kc, vc, mask, out = (self.tensor_of(f[k]) for k in ("input1_id", "input2_id", "input3_id", "input4_id",
                                                                "output_id"))
        heads = []
        for c in (kc, vc):
            c4 = self.add_tensor([1, L, hkv, d], T)
            self.op("RESHAPE", [c, self.i32([1, -1, hkv, d])], [c4])  # -1: the prefix may be resized
            h = self.add_tensor([1, hkv, L, d], T)
            self.op("TRANSPOSE", [c4, self.i32([0, 2, 1, 3])], [h])
            heads.append(h)
        qg = self.add_tensor([1, hkv, rep, d], T)
        self.op("RESHAPE", [q, self.i32([1, hkv, rep, d])], [qg])
        scores = self.add_tensor([1, hkv, rep, L], T)
        self.op("BATCH_MATMUL", [qg, heads[0]], [scores], "BatchMatMulOptions", adjY=True)
        scaled = self.add_tensor([1, hkv, rep, L], T)
        self.op("MUL", [scores, self.const(np.array([scale], np.float32), "FLOAT32")], [scaled], "MulOptions")
        m4 = self.add_tensor([1, 1, 1, L], T)
        self.op("RESHAPE", [mask, self.i32([1, 1, 1, -1])], [m4])
        masked = self.add_tensor([1, hkv, rep, L], T)
        self.op("ADD", [scaled, m4], [masked], "AddOptions")
        probs = self.add_tensor([1, hkv, rep, L], T)
        self.op("SOFTMAX", [masked], [probs], "SoftmaxOptions", beta=1.0)
        ctx = self.add_tensor([1, hkv, rep, d], T)
        self.op("BATCH_MATMUL", [probs, heads[1]], [ctx], "BatchMatMulOptions")
        self.op("RESHAPE", [ctx, self.i32(list(self.tensors[out].shape))], [out])


def _at_decode(graph: G.Graph, args, values) -> G.Graph:
    """``graph`` with its inputs at the decode step's shapes, and the run-time dims they shrank from declared as 1
    throughout (pterun declares a merged graph at its upper bound and resizes it at run time)."""
    inputs, sizes = {}, set()
    for v in graph.inputs:
        shape = tuple(values[args[v.external_id]].shape)
        if shape != tuple(v.dims):
            inputs[v.external_id] = shape
            sizes.update(d for d, s in zip(v.dims, shape) if d != s)
    return declared_at(graph, sizes, inputs) if inputs else graph


#: steps a whole-step join leaves before the invoke: the position's scalars and the RoPE rows they slice
_PROLOGUE = frozenset({"aten::sym_size.int", "aten::_local_scalar_dense", "executorch_prim::add.Scalar",
                       "aten::slice_copy.Tensor_out"})


class Prototype:
    """The method's layers as one model; :meth:`step` runs a decode step through it."""

    def __init__(self, method, L: int, grow: int = 0, whole: bool = False):
        r = method._runner
        self.r, self.L, self.grow = r, L, grow
        chain = r.steps.chains[0]
        self.chain = chain
        names = [info[0] for info in chain.info]
        dels = [k for k, n in enumerate(names) if n.startswith("delegate")]
        if whole:  # from the first delegate call to the logits; the position's scalars and RoPE rows run first
            joined = [k for k in range(dels[0], len(names)) if names[k] not in _PROLOGUE]
            self.pre = [k for k in range(len(names)) if k not in joined and k < joined[-1]]
            self.post = list(range(joined[-1] + 1, len(names)))
        else:  # from the second delegate call (after the RoPE rows and the first norm's mean) to the last before
            # the logits' row is selected
            joined = list(range(dels[1], dels[-2] + 1))
            self.pre, self.post = list(range(dels[1])), list(range(dels[-2] + 1, len(names)))
        self.joined = joined
        values = r.values
        m = _Merger(values, SharedBytes(values, view_roots(r.plan)))
        self.caches: dict[int, np.ndarray] = {}  # cache slot -> this script's aligned copy of its first L rows
        at_slot, mask_slot = -1, -2  # the per-step inputs: where the new rows go, and the mask
        m.inputs[at_slot] = m.add(I32V([1]))
        m.inputs[mask_slot] = m.add(F32V([L]))
        merged = {pc: ex for (ci, pc), (_, ex, _) in r.merged.items() if ci == 0}
        for k in joined:
            name, args, pc = chain.info[k]
            if name.startswith("delegate"):
                ex = merged[pc] if pc in merged else r.executors[r.plan.chains[0][pc].delegate_index]
                m.delegate(_at_decode(ex._graph, args, values), tuple(args))
            elif name == "executorch_prim::et_view.default":
                src, _, out = args[:3]
                t = values[out]
                vid = m.read(src, F32V(values[src].shape))
                m.bind(out, m.reshaped(vid, t.shape) if tuple(m.values[vid].dims) != tuple(t.shape) else vid,
                       False)
            elif name == "llama::update_cache.out":
                value, cache = args[0], args[1]
                c = values[cache]
                row = int(np.prod(c.shape[2:]))
                if cache not in self.caches:
                    self.caches[cache] = _aligned(c.shape[1] * row)  # all S positions: prefixes of it are bound
                    self.S = c.shape[1]
                vin = m.read(cache, F32V([L * row]))
                rows = m.read(value, F32V(values[value].shape))
                vout = m.add(F32V([L * row]))
                m.node(-100, "KvUpdate", {"input1_id": vin, "input2_id": rows, "input3_id": m.inputs[at_slot],
                                          "output_id": vout})
                m.write(cache, vout)
                self.row = row
            elif name == "llama::custom_sdpa.out":
                q, kc, vc = args[0], args[1], args[2]
                out = args[8]
                scale = values[args[7]]
                hq, d = values[q].shape[2], values[q].shape[3]
                hkv = values[kc].shape[2]
                fields = {"input1_id": m.read(q, F32V(values[q].shape)),
                          "input2_id": m.read(kc, F32V([L * hkv * d])), "input3_id": m.read(vc, F32V([L * hkv * d])),
                          "input4_id": m.inputs[mask_slot], "hkv": hkv, "d": d, "L": L, "hq": hq,
                          "scale": float(1 / math.sqrt(d) if scale is None else scale)}
                vid = m.add(F32V(values[out].shape))
                m.node(-101, "Sdpa", {**fields, "output_id": vid})
                m.write(out, vid)
            elif name == "aten::mean.out":
                op = absorbed_op("mean", tuple(args), values, r.tags, r.volatile)
                if op is None:
                    raise SystemExit(f"step {k}: a mean this prototype cannot join")
                m.absorbed(op)
            elif name == "aten::select_copy.int_out" and values[args[0]].shape[values[args[1]]] == 1:
                x, out = args[0], args[3]  # one row: a reshape
                m.write(out, m.reshaped(m.read(x, F32V(values[x].shape)), values[out].shape))
            else:
                raise SystemExit(f"step {k}: {name} is not one this prototype joins")
        later = set()
        for k in self.post:
            later.update(chain.info[k][1])
        later.update(r.plan.outputs)
        graph, slots = m.finish(lambda s: s in later or s in self.caches)
        tr = DecodeTranslator(graph)
        ins, outs = tr.build()
        self.translation = Translation(None, ins, outs, False, frozenset(i for i, t in enumerate(tr.tensors)
                                                                          if t.buffer), (), (),
                                       frozenset(tr.kernel_tensors))
        for j, t in enumerate(ins):
            tr.tensors[t].name = f"in{j}"
        for j, t in enumerate(outs):
            tr.tensors[t].name = f"out{j}"
        maps = [[TFL.TensorMap(tr.tensors[t].name, t) for t in ts] for ts in (ins, outs)]
        self.model = bytes(tr._serialize([tr.subgraph(ins, outs)], [TFL.SignatureDef("main", 0, *maps)]))
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.tensor_buffer import TensorBuffer

        self.cm = CompiledModel.from_buffer(self.model)
        n_in = len(ins)
        self.at, self.mask = _aligned(1, np.int32), _aligned(self.S)
        self.n_in, self.resizes = n_in, []
        self.host_in, self.host_out = [], []
        for j, slot in enumerate(slots):
            is_in = j < n_in
            v = graph.values[[vv.id for vv in (graph.inputs if is_in else graph.outputs)
                              if vv.external_id == j][0]]
            if slot == at_slot:
                a = self.at
            elif slot == mask_slot:
                a = self.mask
            elif slot in self.caches:
                a = self.caches[slot]  # input and output: the same memory (its first L positions bound)
            else:
                a = _aligned(int(np.prod(v.dims)), G.STORAGE_DTYPES[v.datatype])
            (self.host_in if is_in else self.host_out).append((slot, a))
        self.TensorBuffer = TensorBuffer
        self._bind()

    def _prefix(self, slot: int, a: np.ndarray) -> np.ndarray:
        """What of ``a`` is bound: a cache's or the mask's first L positions, anything else whole."""
        if slot in self.caches:
            return a[:self.L * self.row]
        return a[:self.L] if a is self.mask else a

    def _bind(self) -> None:
        """The buffers of a run at the present L. Host memory binds only 1-D inputs (LiteRT refuses to
        "auto-resize" others): the caches, the offset and the mask are 1-D; the activations go into LiteRT's own
        buffers, written each step."""
        TB = self.TensorBuffer
        own = self.cm.create_input_buffers(0)
        self.in_bufs, self.writes = [], []
        for j, (slot, a) in enumerate(self.host_in):
            if slot < 0 or slot in self.caches:
                self.in_bufs.append(TB.create_from_host_memory(self._prefix(slot, a)))
            else:
                self.in_bufs.append(own[j])
                self.writes.append((own[j].write, slot))
        self.out_bufs = [TB.create_from_host_memory(self._prefix(slot, a)) for slot, a in self.host_out]

    def resize(self, n: int) -> None:
        """Attend over the first ``n`` positions from now on: the inputs resized (LiteRT prepares XNNPACK for the
        new shapes in the next run) and the longer or shorter prefixes bound."""
        t = time.perf_counter()
        for j, (slot, a) in enumerate(self.host_in):
            if slot in self.caches:
                self.cm.resize_input_tensor(j, [n * self.row], 0, strict=False)
            elif a is self.mask:
                self.cm.resize_input_tensor(j, [n], 0, strict=False)
        self.L = n
        self._bind()
        self.resizes.append((n, time.perf_counter() - t))

    def load_caches(self) -> None:
        """This script's caches from the method's (after the method's own steps filled them)."""
        for slot, a in self.caches.items():
            a[:] = self.r.values[slot].array.reshape(-1)

    def step(self, inputs: list, pos: int):
        r, chain = self.r, self.chain
        if self.grow:
            n = min(self.S, -(-(pos + 1) // self.grow) * self.grow)  # the positions in use, rounded up
            if n != self.L:  # a decode grows it; a timing round that starts over shrinks it
                self.resize(n)
        elif pos >= self.L:
            raise ValueError(f"position {pos} is past the bucket of {self.L}")
        r.set_inputs(inputs)
        steps = chain.steps
        for k in self.pre:
            steps[k]()
        self.at[0] = pos * self.row
        self.mask[:self.L] = np.where(np.arange(self.L) <= pos, np.float32(0), np.float32(-np.inf))
        for write, slot in self.writes:
            write(np.ascontiguousarray(r.values[slot].array))
        self.cm.run_by_index(0, self.in_bufs, self.out_bufs)
        for slot, a in self.host_out:
            if slot >= 0 and slot not in self.caches:
                t = r.values[slot]
                np.copyto(t.array, a.reshape(t.array.shape), casting="unsafe")
        for k in self.post:
            steps[k]()
        return r.collect_outputs()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pte")
    ap.add_argument("--pos", type=int, default=128, help="the position of the first decode step timed")
    ap.add_argument("--bucket", type=int, default=192, help="the cache positions the model reads (L)")
    ap.add_argument("--grow", type=int, default=0, help="grow L by this many positions as the decode needs "
                    "(resizing the model), instead of a fixed --bucket (default 0: fixed)")
    ap.add_argument("--steps", type=int, default=32, help="decode steps a round times (default 32)")
    ap.add_argument("--whole", action="store_true", help="join from the first delegate call to the logits (the "
                    "position's scalars and RoPE rows run before the invoke), not only the layers between")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, pterun and the prototype alternating")
    args = ap.parse_args(argv)
    if not args.grow and args.pos + max(8, args.steps) > args.bucket:
        raise SystemExit(f"positions {args.pos}..{args.pos + max(8, args.steps) - 1} do not fit a bucket of "
                         f"{args.bucket}: this prototype does not grow it")
    method = pterun.Runtime(num_threads=1).load_program(args.pte).load_method("forward")
    rng = np.random.default_rng(0)
    tok, pos = np.zeros((1, 1), np.int64), np.zeros(1, np.int64)
    for i in range(args.pos):  # fill the method's caches through pterun's own steps
        tok[0, 0], pos[0] = rng.integers(0, 256), i
        method.execute([tok, pos])
    t = time.perf_counter()
    proto = Prototype(method, args.grow or args.bucket, args.grow, args.whole)
    print(f"joined steps {proto.joined[0]}..{proto.joined[-1]} ({len(proto.joined)} of them, {len(proto.pre)} "
          f"before, {len(proto.post)} after) into one model: {len(proto.model) / 1e6:.1f} MB, "
          f"built in {time.perf_counter() - t:.2f} s; {len(proto.caches)} caches bound")
    from pterun.delegates.xnnpack.litert_engine.adapter import ops_details
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=proto.model, num_threads=1)  # only to list what XNNPACK took
    it.allocate_tensors()
    ops = ops_details(it)
    left = not_delegated(ops, proto.translation)
    print(f"XNNPACK partitions: {[d['op_name'] for d in ops].count('DELEGATE')}; left to builtin kernels beyond "
          f"the cache updates: {', '.join(left) or 'nothing'}")
    del it
    # the same tokens through both: pterun's steps on its caches, the prototype on its copies of them
    proto.load_caches()
    worst = 0.0
    for i in range(args.pos, args.pos + 8):
        tok[0, 0], pos[0] = rng.integers(0, 256), i
        want = method.execute([tok, pos])[0].copy()
        got = proto.step([tok, pos], i)[0]
        worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    print(f"logits against pterun's steps, 8 steps: max difference {worst:.2e} of scale")
    times = {"pterun": [], "prototype": []}
    for r in range(args.rounds):
        for name in ("pterun", "prototype") if r % 2 == 0 else ("prototype", "pterun"):
            proto.load_caches()  # both start from the caches pterun's own steps left
            t = time.perf_counter()
            for i in range(args.pos, args.pos + args.steps):
                tok[0, 0], pos[0] = 7, i
                if name == "pterun":
                    method.execute([tok, pos])
                else:
                    proto.step([tok, pos], i)
            times[name].append((time.perf_counter() - t) / args.steps)
    if args.grow:
        costs = [t for _, t in proto.resizes]
        print(f"{len(costs)} resizes, {statistics.median(costs) * 1e3:.2f} ms each (median), L {proto.L} at the end")
    print(", ".join(f"{n} {statistics.median(t) * 1e3:.2f} ms a step (best {min(t) * 1e3:.2f})"
                    for n, t in times.items()) +
          f"; positions {args.pos}..{args.pos + args.steps - 1}, {args.rounds} rounds, one thread")


if __name__ == "__main__":
    main()
