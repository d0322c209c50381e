"""Probe for issue #24, deliverable 2 (a decode step as one LiteRT invoke): can the KV cache and the attention of
a decode step live inside a LiteRT program, and what does each way cost against pterun's NumPy kernels?

A stack of ``--layers`` decode attentions with the 130M Llama's shapes (12 query heads, 4 KV heads, head dim 64,
``--max-seq`` positions), each layer's output the next one's query, optionally followed by a ``--linear`` (the
768x768 output projection, an XNNPACK node). Per step every layer writes one new key and value row at ``pos`` and
attends over positions 0..pos, as ``llama::update_cache`` + ``llama::custom_sdpa`` do. Four ways:

* ``numpy``: pterun's kernels (``update_cache_out``, ``custom_sdpa_out``) over NumPy caches: the reference.
* ``variable``: LiteRT's ``Interpreter``; each cache is a TFLite variable tensor that DYNAMIC_UPDATE_SLICE writes in
  place (the operator names the cache as input and output), attention reads SLICEs of pos + 1 rows (a run-time
  size: the outputs carry a shape signature) on LiteRT's builtin kernels.
* ``bound``: LiteRT's ``CompiledModel``; each cache is a caller's array bound as host memory to both the input and
  the output of DYNAMIC_UPDATE_SLICE (in place, no copy), and attention reads a fixed ``--bucket`` of positions
  with a mask (static shapes: XNNPACK may take it).
* ``prefix``: as ``bound``, but what is bound is the first L positions of each cache (a prefix of its memory: the
  layout is ``[1, S, Hkv, D]``), and the graph attends over all L of them with a mask. L starts at ``--grow`` and
  grows by it when a position reaches it: the inputs are resized (LiteRT prepares XNNPACK again for the new
  shapes) and the longer prefixes bound. Attention then reads about as many rows as are in use, in one model,
  where ``bound`` needs a model per bucket.

For each it prints the largest difference from ``numpy`` (relative to the output's scale), whether the caches
equal NumPy's, how many XNNPACK partitions LiteRT's interpreter makes of the graph (for ``prefix``, at its
longest prefix too), what each of ``prefix``'s resizes cost, and microseconds per layer at some positions (best
of 5 x 200 steps, one thread).

    .venv/bin/python bench/probe_decode_attention.py --layers 12 --bucket 128 --linear
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from pterun.delegates.xnnpack.litert_engine import tflite as TFL
from pterun.delegates.xnnpack.litert_engine.adapter import ops_details
from pterun.delegates.xnnpack.litert_engine.writer import ModelWriter
from pterun.kernels.llm import custom_sdpa_out, update_cache_out

HQ, HKV, D = 12, 4, 64
R, E = HQ // HKV, HQ * D


def attention_graph(w: ModelWriter, layers: int, S: int, bucket: int | None, weights, prefix: bool = False):
    """The graph; returns (inputs, outputs, cache tensors). ``bucket`` None: variable caches and run-time slices.
    ``prefix``: the caches given are the first ``bucket`` positions, resizable (every reshape says -1 for them)."""
    T = w.S.TensorType
    n_row = HKV * D
    q = w.add_tensor([E], T.FLOAT32, name="q")
    k = w.add_tensor([n_row], T.FLOAT32, name="k")
    v = w.add_tensor([n_row], T.FLOAT32, name="v")
    # where the new row goes: [0, pos, 0, 0] in a variable cache [1, S, Hkv, D]; pos * n_row in a flat bound one
    at = w.add_tensor([4] if bucket is None else [1], T.INT32, name="at")
    ins, outs, caches = [q, k, v, at], [], []
    if bucket is None:
        rows4 = {}
        for kind, new in (("k", k), ("v", v)):
            rows4[kind] = w.add_tensor([1, 1, HKV, D], T.FLOAT32)
            w.op("RESHAPE", [new, w.i32([1, 1, HKV, D])], [rows4[kind]])
        n = w.add_tensor([1], T.INT32, name="n")  # pos + 1 rows in use
        ins.append(n)
        size = w.add_tensor([4], T.INT32)
        w.op("CONCATENATION", [w.i32([1]), n, w.i32([HKV, D])], [size], "ConcatenationOptions", axis=0)
        span, sig = S, [1, HKV, R, -1]
    else:
        mask1 = w.add_tensor([bucket], T.FLOAT32, name="mask")
        ins.append(mask1)
        mask = w.add_tensor([1, 1, 1, bucket], T.FLOAT32)
        w.op("RESHAPE", [mask1, w.i32([1, 1, 1, -1 if prefix else bucket])], [mask])
        size, span, sig = w.i32([1, bucket, HKV, D]), bucket, None
        if prefix:
            S = bucket
    scale = w.const(np.array([1 / math.sqrt(D)], np.float32), "FLOAT32")
    x = q
    for layer in range(layers):
        rows = []
        for kind, new in (("k", k), ("v", v)):
            if bucket is None:
                c = w.add_tensor([1, S, HKV, D], T.FLOAT32, name=f"{kind}{layer}", variable=True)
                w.op("DYNAMIC_UPDATE_SLICE", [c, rows4[kind], at], [c])  # in place: its output is its operand
                caches.append(c)
                c4 = c
            else:
                c = w.add_tensor([S * n_row], T.FLOAT32, name=f"{kind}{layer}")
                after = w.add_tensor([S * n_row], T.FLOAT32, name=f"{kind}{layer}_out")
                w.op("DYNAMIC_UPDATE_SLICE", [c, new, at], [after])
                ins.append(c)
                outs.append(after)
                caches.append(c)
                c4 = w.add_tensor([1, S, HKV, D], T.FLOAT32)
                w.op("RESHAPE", [after, w.i32([1, -1 if prefix else S, HKV, D])], [c4])
            if prefix:  # the whole prefix is read
                part = c4
            else:
                part = w.add_tensor([1, span, HKV, D], T.FLOAT32, signature=sig and [1, -1, HKV, D])
                w.op("SLICE", [c4, w.i32([0, 0, 0, 0]), size], [part])
            heads = w.add_tensor([1, HKV, span, D], T.FLOAT32, signature=sig and [1, HKV, -1, D])
            w.op("TRANSPOSE", [part, w.i32([0, 2, 1, 3])], [heads])
            rows.append(heads)
        qg = w.add_tensor([1, HKV, R, D], T.FLOAT32)
        w.op("RESHAPE", [x, w.i32([1, HKV, R, D])], [qg])
        scores = w.add_tensor([1, HKV, R, span], T.FLOAT32, signature=sig)
        w.op("BATCH_MATMUL", [qg, rows[0]], [scores], "BatchMatMulOptions", adjY=True)
        scaled = w.add_tensor([1, HKV, R, span], T.FLOAT32, signature=sig)
        w.op("MUL", [scores, scale], [scaled], "MulOptions")
        if bucket is not None:
            masked = w.add_tensor([1, HKV, R, span], T.FLOAT32)
            w.op("ADD", [scaled, mask], [masked], "AddOptions")
            scaled = masked
        probs = w.add_tensor([1, HKV, R, span], T.FLOAT32, signature=sig)
        w.op("SOFTMAX", [scaled], [probs], "SoftmaxOptions", beta=1.0)
        ctx = w.add_tensor([1, HKV, R, D], T.FLOAT32)
        w.op("BATCH_MATMUL", [probs, rows[1]], [ctx], "BatchMatMulOptions")
        flat = w.add_tensor([1, E], T.FLOAT32)
        w.op("RESHAPE", [ctx, w.i32([1, E])], [flat])
        if weights is not None:
            y = w.add_tensor([1, E], T.FLOAT32)
            w.op("FULLY_CONNECTED", [flat, w.const(weights[layer], "FLOAT32"), -1], [y], "FullyConnectedOptions")
            flat = y
        x = w.add_tensor([E], T.FLOAT32, name="x" if layer == layers - 1 else "")
        w.op("RESHAPE", [flat, w.i32([E])], [x])
    return ins, [x] + outs, caches


def _aligned(n: int, dtype=np.float32) -> np.ndarray:
    """A zeroed array of n elements at a 64-byte boundary (what LiteRT's host-memory buffers require)."""
    size = n * np.dtype(dtype).itemsize
    raw = np.zeros(size + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + size].view(dtype)


def xnnpack_partitions(data: bytes, resize: dict | None = None) -> int:
    """How many XNNPACK partitions LiteRT's interpreter, with its default delegate, makes of the model (its inputs
    first resized as ``resize`` says: input position -> dims)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=1)
    for j, dims in (resize or {}).items():
        it.resize_tensor_input(it.get_input_details()[j]["index"], dims)
    it.allocate_tensors()
    return [d["op_name"] for d in ops_details(it)].count("DELEGATE")


def numpy_way(layers, S, weights):
    ks = [np.zeros((1, S, HKV, D), np.float32) for _ in range(layers)]
    vs = [np.zeros((1, S, HKV, D), np.float32) for _ in range(layers)]

    def step(q, k, v, pos):
        x = q.reshape(1, 1, HQ, D)
        for layer in range(layers):
            update_cache_out(k.reshape(1, 1, HKV, D), ks[layer], pos, None)
            update_cache_out(v.reshape(1, 1, HKV, D), vs[layer], pos, None)
            out = np.empty((1, 1, HQ, D), np.float32)
            custom_sdpa_out(x, ks[layer], vs[layer], pos, None, 0.0, True, None, out)
            x = out if weights is None else (out.reshape(1, E) @ weights[layer].T).reshape(1, 1, HQ, D)
        return x.reshape(E)
    return step, lambda layer: ks[layer]


def variable_way(layers, S, weights):
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    w = ModelWriter()
    ins, outs, caches = attention_graph(w, layers, S, None, weights)
    data = w.serialize(ins, outs[:1])
    partitions = xnnpack_partitions(data)
    # run on the builtin kernels: an XNNPACK delegate that gave up on the graph leaves it unable to run
    it = Interpreter(model_content=data, num_threads=1,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    wr = it._interpreter
    q, k, v, at, n = ins

    def step(qa, ka, va, pos, _model=data):  # LiteRT reads the model's constants from these bytes: keep them
        for t, a in ((q, qa), (k, ka), (v, va), (at, np.array([0, pos, 0, 0], np.int32)),
                     (n, np.array([pos + 1], np.int32))):
            wr.SetTensor(t, a, 0)
        wr.Invoke(0)
        return wr.GetTensor(outs[0], 0)
    return step, lambda layer: wr.GetTensor(caches[2 * layer], 0), partitions


def bound_way(layers, S, bucket, weights):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.tensor_buffer import TensorBuffer

    w = ModelWriter()
    ins, outs, caches = attention_graph(w, layers, S, bucket, weights)
    maps = [[TFL.TensorMap(w.tensors[t].name, t) for t in ts] for ts in (ins, outs)]
    data = bytes(w._serialize([w.subgraph(ins, outs)], [TFL.SignatureDef("main", 0, *maps)]))
    partitions = xnnpack_partitions(data)
    cm = CompiledModel.from_buffer(data)
    q, k, v, x = _aligned(E), _aligned(HKV * D), _aligned(HKV * D), _aligned(E)
    at, mask = _aligned(1, np.int32), _aligned(bucket)
    mem = [_aligned(S * HKV * D) for _ in range(2 * layers)]
    buf = TensorBuffer.create_from_host_memory
    in_bufs = [buf(a) for a in (q, k, v, at, mask, *mem)]
    out_bufs = [buf(x)] + [buf(a) for a in mem]  # each cache's output is its input's memory: written in place
    where = np.arange(bucket)

    def step(qa, ka, va, pos, _model=data):
        q[...], k[...], v[...], at[0] = qa, ka, va, pos * HKV * D
        np.copyto(mask, np.where(where <= pos, np.float32(0), np.float32(-np.inf)))
        cm.run_by_index(0, in_bufs, out_bufs)
        return x
    return step, lambda layer: mem[2 * layer].reshape(1, S, HKV, D), partitions


def prefix_way(layers, S, grow, weights):
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.tensor_buffer import TensorBuffer

    w = ModelWriter()
    ins, outs, caches = attention_graph(w, layers, S, grow, weights, prefix=True)
    maps = [[TFL.TensorMap(w.tensors[t].name, t) for t in ts] for ts in (ins, outs)]
    data = bytes(w._serialize([w.subgraph(ins, outs)], [TFL.SignatureDef("main", 0, *maps)]))
    cm = CompiledModel.from_buffer(data)
    q, k, v, x = _aligned(E), _aligned(HKV * D), _aligned(HKV * D), _aligned(E)
    at, mask = _aligned(1, np.int32), _aligned(S)
    mem = [_aligned(S * HKV * D) for _ in range(2 * layers)]
    buf = TensorBuffer.create_from_host_memory
    where = np.arange(S)
    state = {"L": 0, "resizes": [], "partitions": None}

    def bind(n: int) -> None:
        """Resize the mask and the caches to ``n`` positions and bind the prefixes of their memory."""
        t = time.perf_counter()
        row = HKV * D
        if state["L"]:
            cm.resize_input_tensor(4, [n], 0, strict=False)
            for j in range(2 * layers):
                cm.resize_input_tensor(5 + j, [n * row], 0, strict=False)
        prefixes = [a[:n * row] for a in mem]  # the first n positions: a prefix of the cache's memory
        state["in"] = [buf(a) for a in (q, k, v, at, mask[:n], *prefixes)]
        state["out"] = [buf(x)] + [buf(a) for a in prefixes]  # in place, as in ``bound``
        state["L"] = n
        cm.run_by_index(0, state["in"], state["out"])  # LiteRT prepares the new shapes in its first run
        state["resizes"].append((n, time.perf_counter() - t))
        if n > grow:  # does XNNPACK still take the graph at the new shapes? (an interpreter over the same model)
            state["partitions"] = xnnpack_partitions(data, {4: [n], **{5 + j: [n * row] for j in range(2 * layers)}})

    def step(qa, ka, va, pos, _model=data):
        n = min(S, -(-(pos + 1) // grow) * grow)  # the positions in use, rounded up to the step
        if n != state["L"]:  # a decode grows it; the probe's timing also goes back to shorter ones
            bind(n)
        q[...], k[...], v[...], at[0] = qa, ka, va, pos * HKV * D
        np.copyto(mask[:n], np.where(where[:n] <= pos, np.float32(0), np.float32(-np.inf)))
        cm.run_by_index(0, state["in"], state["out"])
        return x
    return step, lambda layer: mem[2 * layer].reshape(1, S, HKV, D), xnnpack_partitions(data), state


def _time(step, args, reps=200, rounds=5) -> float:
    best = math.inf
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            step(*args)
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--max-seq", type=int, default=512)
    ap.add_argument("--bucket", type=int, default=128, help="positions the bound way reads (default 128)")
    ap.add_argument("--grow", type=int, default=64, help="the prefix way's step of positions (default 64)")
    ap.add_argument("--linear", action="store_true", help="a 768x768 linear after each attention")
    ap.add_argument("--positions", type=int, nargs="+", default=None, help="positions timed (default: two)")
    args = ap.parse_args(argv)
    L, S, B = args.layers, args.max_seq, args.bucket
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((E, E)).astype(np.float32) * 0.03 for _ in range(L)] if args.linear else None
    ref_step, ref_cache = numpy_way(L, S, weights)
    *prefix, grown = prefix_way(L, S, args.grow, weights)
    ways = {"variable": variable_way(L, S, weights), "bound": bound_way(L, S, B, weights), "prefix": tuple(prefix)}
    worst = dict.fromkeys(ways, 0.0)
    last = max([B] + (args.positions or [])) if args.positions else B
    for pos in range(min(S, max(B, last + 1))):  # the same steps through every way: the caches fill identically
        q, k, v = (rng.standard_normal(n).astype(np.float32) for n in (E, HKV * D, HKV * D))
        want = ref_step(q, k, v, pos)
        for name, (step, _, _) in ways.items():
            if name == "bound" and pos >= B:
                continue  # past its bucket
            got = step(q, k, v, pos)
            worst[name] = max(worst[name], float(np.abs(got - want).max() / np.abs(want).max()))
    for name, (_, cache, partitions) in ways.items():
        same = all(np.array_equal(cache(i)[:, :B], ref_cache(i)[:, :B]) for i in range(L))
        print(f"{name}: max difference {worst[name]:.2e} of scale, caches equal NumPy's: {same}, "
              f"XNNPACK partitions: {partitions}")
    print("prefix resizes: " + ", ".join(f"{n} positions {t * 1e3:.2f} ms" for n, t in grown["resizes"]) +
          f"; XNNPACK partitions at {grown['L']} positions: {grown['partitions']}")
    grown["resizes"].clear()
    q, k, v = (rng.standard_normal(n).astype(np.float32) for n in (E, HKV * D, HKV * D))
    for pos in args.positions or (B // 2, B - 2):
        row = {"numpy": _time(ref_step, (q, k, v, pos))}
        for name, (step, _, _) in ways.items():
            if name == "bound" and pos >= B:
                continue
            row[name] = _time(step, (q, k, v, pos))
        print(f"pos {pos}: " + ", ".join(f"{n} {t * 1e6 / L:.1f} us/layer" for n, t in row.items()))


if __name__ == "__main__":
    main()
