#!/usr/bin/env python
"""Design probe for issue #12: one LiteRT interpreter holding every XNNPACK graph of a program as a subgraph (one
XNNPACK thread pool for all of them), called back to back, against pterun's own ``Method.execute``. It was
written when pterun gave each graph an interpreter (and a pool) of its own; pterun now shares interpreters of up
to 64 MiB of model on more than one thread (``litert_engine.Batch``), and this probe shows what remains: the
calls through the interpreter loop and the memory budget's extra pools.

    .venv/bin/python bench/shared_pool_probe.py bench/models/fc48s.pte 2     # 2 threads
    .venv/bin/python bench/shared_pool_probe.py bench/models/fc48s.pte 2 --gaps

``--gaps`` also times the shared interpreter's chain with a busy wait of 10-160 µs after each call (as
pterun's Python steps between delegate calls take): LiteRT's XNNPACK delegate creates every runtime with
XNNPACK's ``XNN_FLAG_YIELD_WORKERS``, so the pool's workers yield after each invoke and the next one waits for
them to wake; the line per gap gives the time with the gaps taken out.

It translates each delegate with pterun's translator, joins the TFLite models into one (a subgraph and a
signature per graph), and times invoking them in order with a small NumPy step between, as a decode step would;
then it times pterun's own ``Method.execute`` on the same file with merging off. It reads pterun internals
(``litert_engine.translate._Translator``): a measurement for the design, not product code, and it may stop working when
those change. Make ``fc48s.pte`` with ``bench/export_fc_stack.py --split``.
"""
import os, sys, time, numpy as np
import pterun
from pterun.delegates.xnnpack import graph as G
import importlib
from pterun.delegates.xnnpack.litert_engine import env as litert_env
LT = importlib.import_module("pterun.delegates.xnnpack.litert_engine.translate")  # the package's `translate` is a function
from pterun.delegates.xnnpack.litert_engine.writer import combine
_, Interp = litert_env.modules()
path, threads = sys.argv[1], int(sys.argv[2])
gaps = "--gaps" in sys.argv[3:]
m = pterun.Runtime(num_threads=threads, engine="numpy").load_program(path).load_method("forward")
pf = m._runner.pf
graphs = [G.Graph.read(pf.delegate_blob(d), m._runner.named_data) for d in m._runner.plan.delegates]
trs = []
for g in graphs:
    t = LT._Translator(g); t.check_order(); fused, gone = t.fuse_clamps(); t.fused = fused
    t.producers = {n.fields["output_id"]: n for n in g.nodes if "output_id" in n.fields}
    for n in g.nodes:
        if n.index in gone: continue
        if n.index in fused: n = n._replace(output_min=fused[n.index][0], output_max=fused[n.index][1])
        t.node = n
        fn = getattr(t, "node_" + n.name, None) or (t.node_unary if n.name in LT._UNARY else t.node_binary)
        fn(n); t.finish_clamp()
    t.node = None
    t.ins = [t.tensor_of(v.id) for v in g.inputs]; t.outs = [t.tensor_of(v.id) for v in g.outputs]
    trs.append(t)
# one model, a subgraph and a signature per graph
model, _ = combine([(t, t.ins, t.outs) for t in trs])
it = Interp(model_content=model, num_threads=threads)
it.allocate_tensors()
for k in range(len(trs)): it._interpreter.AllocateTensors(k)
wr = it._interpreter
print("threads after load:", len(os.listdir("/proc/self/task")), "subgraphs", wr.NumSubgraphs())


def arena_tensors(k: int, t) -> list:
    """Non-constant tensors of subgraph ``k`` besides its inputs and outputs that TFLite gave memory: none when
    XNNPACK took the whole subgraph (what it runs internally never reaches TFLite's arena)."""
    got = []
    for i, tt in enumerate(t.tensors):
        if tt.buffer or i in t.ins or i in t.outs:
            continue
        try:
            wr.tensor(wr, i, k)
            got.append(i)
        except ValueError:  # "Tensor data is null"
            pass
    return got


print("subgraphs with tensors in TFLite's arena (not wholly on XNNPACK):",
      [k for k, t in enumerate(trs) if arena_tensors(k, t)])
# run the chain: graph k's output feeds graph k+1 (fc48s: delegate, cumsum (numpy), delegate...)
inputs = [[np.zeros(tuple(wr.tensor(wr, i, k).shape), np.float32) for i in t.ins] for k, t in enumerate(trs)]
def step(gap=0.0):
    for k, t in enumerate(trs):
        for i, a in zip(t.ins, inputs[k]):
            wr.SetTensor(i, a, k)
        wr.Invoke(k)
        h = wr.tensor(wr, t.outs[0], k).copy()
        np.cumsum(h, axis=-1)
        end = time.perf_counter() + gap
        while gap and time.perf_counter() < end:
            pass


def median_ms(gap=0.0, runs=300):
    for _ in range(10): step(gap)
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter(); step(gap); ts.append(time.perf_counter() - t0)
    return np.median(ts) * 1e3


print(f"one interpreter, {len(trs)} subgraphs, {threads}t: median {median_ms():.3f} ms")
for gap_us in (10, 20, 40, 80, 160) if gaps else ():
    med = median_ms(gap_us * 1e-6, 100)
    print(f"  with {gap_us:3d} us after each call: median {med:.3f} ms, {med - len(trs) * gap_us * 1e-3:.3f} ms "
          "without the gaps")
# pterun's own Method.execute on the same file (delegates not merged, so one call per graph)
mm = pterun.Runtime(num_threads=threads, engine="litert", merge_delegates=False).load_program(path).load_method(
    "forward")
xin = [np.zeros((1, 1, 768), np.float32)]
for _ in range(10): mm.execute(xin)
ts = []
for _ in range(300):
    t0 = time.perf_counter(); mm.execute(xin); ts.append(time.perf_counter() - t0)
print(f"pterun's Method.execute ({len(trs)} graphs), {threads}t: median {np.median(ts)*1e3:.3f} ms; "
      f"threads {len(os.listdir('/proc/self/task'))}")
