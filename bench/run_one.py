#!/usr/bin/env python
"""Time ONE runtime on ONE ``.pte`` in this (fresh) process and print one JSON line.

    .venv/bin/python bench/run_one.py --runtime pterun     bench/models/resnet18_portable.pte
    .ref/bin/python  bench/run_one.py --runtime executorch bench/models/resnet18_portable.pte
    .venv/bin/python bench/run_one.py --runtime pterun --profile bench/models/resnet18_portable.pte
    .peer/bin/python bench/run_one.py --runtime peer       bench/models/resnet18_portable.pte

``--runtime peer`` is executorch-numpy-runtime (ExecuTorch's C++ runtime with NumPy I/O, no torch): this file
imports neither pterun nor torch in its process.

Measured, in this order, in this process:

* ``import_s``     ``import pterun`` with its ``Runtime`` / ``import executorch.runtime`` /
                   ``import executorch_numpy_runtime``, timed before anything else
                   but ``sys`` and ``time`` is imported (so the runtime's own imports, NumPy/torch
                   included, are all counted);
* ``load_s``       ``Runtime.get().load_program(path)`` + ``program.load_method(method)``;
* ``first_call_s`` the first ``execute``; the peer's ``load_method`` is lazy (``load_lazy``: its method is loaded
                   in the first call), so for it ``load_s`` is only the file being opened and ``first_call_s``
                   holds the real load;
* ``median_s`` / ``p90_s`` / ``min_s`` over ``calls`` further calls; the number of calls adapts: calls
                   continue until ``--budget`` seconds have passed and at least ``--min-calls`` were made, or
                   (for very slow programs) until ``--max-time`` seconds passed and ``--min-calls-slow`` were made;
* ``peak_rss_mb``  ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end (the whole process: interpreter,
                   imports, program, arenas, outputs); ``rss_after_import_mb`` the same right after the import.

Inputs are random arrays built from the method metadata (sizes, ScalarType) with ``--seed``, identically for
both runtimes: floats ~ N(0, 1), integers in [0, 10), bools with p = 0.5. ``--save-outputs F.npz`` writes the
first call's outputs (``out0``, ``out1``, ...) so that a driver can compare the runtimes.

For pterun it also reports ``instructions`` (executed steps: kernel, delegate and move calls; FreeCall is a no-op
in pterun and not counted) and ``plan_instructions`` (the program's instructions, FreeCall again not counted,
including those pterun folded at load).

``--profile`` (pterun only) times every instruction through pterun's public observer (``Method.execute(inputs,
hook=...)``) and reports the time per operator (and the slowest instructions) instead of the plain timing; see
:class:`run_profile.Profile`.

The result is printed as one line ``@@BENCH@@ {json}``. A failure (for example a ``DelegateError`` for a backend
pterun does not have) is reported in that line as ``error_type`` / ``error`` and the exit status is still 0.
"""

import sys
import time

MARK = "@@BENCH@@ "


def _argv_value(flag: str, default: str) -> str:
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return default


def _timed_import():
    """Import the runtime first of all (before argparse, json, numpy ...) and time just that statement."""
    runtime = _argv_value("--runtime", "pterun")
    if runtime == "pterun":
        src = _argv_value("--pterun-src", "")
        if not src:
            import os.path  # already imported by the interpreter's startup (site)
            src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        if src != "none":
            sys.path.insert(0, src)
        t0 = time.perf_counter()
        import pterun  # noqa: F401
        from pterun import Runtime  # ``import pterun`` alone loads only the exceptions: this brings the runtime
        dt = time.perf_counter() - t0
        return runtime, dt, Runtime
    if runtime == "executorch":
        t0 = time.perf_counter()
        import executorch.runtime  # noqa: F401
        dt = time.perf_counter() - t0
        from executorch.runtime import Runtime
        import os
        if os.environ.get("BENCH_REF_THREADS"):
            # ExecuTorch's threadpool (shared by XNNPACK and its optimized kernels) is sized from the cores at
            # start; resize it once, before anything runs (resizing twice in one process has hung)
            from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
            _unsafe_reset_threadpool(int(os.environ["BENCH_REF_THREADS"]))
        if _argv_value("--llm-decode", ""):
            # an exported LLM's llama:: and quantized kernels join ExecuTorch's runtime by these imports
            import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
            import executorch.kernels.quantized  # noqa: F401
        return runtime, dt, Runtime
    if runtime == "peer":
        t0 = time.perf_counter()
        import executorch_numpy_runtime  # noqa: F401
        dt = time.perf_counter() - t0
        from executorch_numpy_runtime import Runtime
        return runtime, dt, Runtime  # no thread setting: XNNPACK's threadpool is the cores
    print(f"run_one.py: --runtime must be 'pterun', 'executorch' or 'peer', got {runtime!r}", file=sys.stderr)
    sys.exit(2)


RUNTIME, IMPORT_S, RuntimeCls = _timed_import()

import resource  # noqa: E402

RSS_AFTER_IMPORT_MB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402

import numpy as np  # noqa: E402  (already imported by either runtime)

# the profiler, re-exported for bench/report.py, llm_bench.py and the tests
from run_profile import (Profile, boundaries, format_boundaries, format_profile, install_profiler,  # noqa: E402,F401
                         mergeable, profile_report)

# ExecuTorch ScalarType id -> NumPy dtype of the random values we generate (bfloat16 is generated as float32
# and cast per runtime)
_SCALAR_NP = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16, 6: np.float32,
              7: np.float64, 11: np.bool_, 15: np.float32}
_SCALAR_NAME = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
                7: "float64", 11: "bool", 15: "bfloat16"}


class PeerMeta:
    """executorch-numpy-runtime's method metadata (a dict: ``num_inputs``, ``inputs`` [{``scalar_type``,
    ``shape``}], ``outputs``) behind the ``num_inputs()`` / ``input_tensor_meta(i).sizes()`` / ``.dtype()`` calls
    :func:`make_inputs` makes on the other runtimes' metadata."""

    class _Tensor:
        def __init__(self, info: dict):
            self._info = info

        def sizes(self):
            return tuple(self._info["shape"])

        def dtype(self) -> int:
            return int(self._info["scalar_type"])

    def __init__(self, meta: dict):
        self.meta = meta

    def num_inputs(self) -> int:
        return int(self.meta["num_inputs"])

    def input_tensor_meta(self, i: int):
        return PeerMeta._Tensor(self.meta["inputs"][i])

    def bf16_outputs(self) -> set[int]:
        """The outputs that come back as bfloat16 bits in uint16."""
        return {k for k, o in enumerate(self.meta.get("outputs", [])) if int(o.get("scalar_type", -1)) == 15}


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 -> the uint16 bits of its bfloat16, rounded to nearest even (as torch's ``.to(bfloat16)``); the
    peer takes and gives bfloat16 as those bits."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def bf16_from_bits(u: np.ndarray) -> np.ndarray:
    """The uint16 bits of bfloat16 values -> float32."""
    return (np.ascontiguousarray(u, np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def make_inputs(meta, seed: int):
    """[(scalar_type_id, ndarray)] for every input of the method, from its metadata only."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(meta.num_inputs()):
        try:
            info = meta.input_tensor_meta(i)
        except Exception as e:  # a non-tensor input: Int/Double/Bool/None
            raise NotImplementedError(f"input {i} is not a tensor ({e}); run_one.py only feeds tensors") from e
        sizes = tuple(int(s) for s in info.sizes())
        st = int(info.dtype())
        if st not in _SCALAR_NP:
            raise NotImplementedError(f"input {i} has ScalarType {st}, which run_one.py cannot generate")
        kind = np.dtype(_SCALAR_NP[st]).kind
        if kind == "f":
            a = rng.standard_normal(sizes).astype(_SCALAR_NP[st])
        elif kind == "b":
            a = rng.random(sizes) < 0.5
        else:
            a = rng.integers(0, 10, sizes).astype(_SCALAR_NP[st])
        out.append((st, np.ascontiguousarray(a)))
    return out


def convert_inputs(raw, runtime: str, meta):
    if runtime == "peer":  # NumPy arrays as they are; bfloat16 as its bits
        return [bf16_bits(a) if st == 15 else a for st, a in raw]
    if runtime == "pterun":
        res = []
        for i, (st, a) in enumerate(raw):
            want = np.dtype(meta.input_tensor_meta(i).numpy_dtype())
            res.append(a if a.dtype == want else a.astype(want))
        return res
    import torch
    res = []
    for st, a in raw:
        t = torch.from_numpy(a)
        if st == 15:
            t = t.to(torch.bfloat16)
        res.append(t)
    return res


def to_numpy_outputs(outs, bf16_bits_at=()) -> dict:
    """{outK: ndarray} of a call's outputs (torch tensors become NumPy; bf16 becomes float32, also the peer's
    uint16 bits of bfloat16 outputs, at the positions ``bf16_bits_at``)."""
    res = {}
    for k, o in enumerate(outs):
        if k in bf16_bits_at and isinstance(o, np.ndarray) and o.dtype == np.uint16:
            res[f"out{k}"] = bf16_from_bits(o)
            continue
        if hasattr(o, "detach"):  # a torch tensor
            t = o.detach()
            if str(t.dtype) == "torch.bfloat16":
                t = t.float()
            res[f"out{k}"] = t.contiguous().numpy().copy()
        elif isinstance(o, np.ndarray):
            a = o
            if a.dtype.name == "bfloat16":
                a = a.astype(np.float32)
            res[f"out{k}"] = np.array(a, copy=True)
        elif isinstance(o, (bool, int, float, np.generic)):
            res[f"out{k}"] = np.asarray(o)
    return res


def ref_threads():
    try:
        from executorch.extension.pybindings.portable_lib import _threadpool_get_thread_count
        return int(_threadpool_get_thread_count())
    except Exception:
        return None


def peer_threads():
    """The size of executorch-numpy-runtime's threadpool (ExecuTorch's ``get_pthreadpool()`` and pthreadpool's
    ``pthreadpool_get_threads_count``, both exported by its extension module), or None. Reading it creates the
    pool if no call has yet, so it is read after the timing."""
    try:
        import ctypes

        import executorch_numpy_runtime as en
        lib = ctypes.CDLL(en._core.__file__)  # the module already loaded: the same pool
        get_pool = getattr(lib, "_ZN10executorch9extension10threadpool15get_pthreadpoolEv")
        get_pool.restype = ctypes.c_void_p
        count = lib.pthreadpool_get_threads_count
        count.restype, count.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
        pool = get_pool()
        return int(count(pool)) if pool else 1
    except Exception:
        return None


def delegate_calls(method):
    """How many delegate calls one execute makes (pterun: its public ``Method.steps``), or None."""
    steps = getattr(method, "steps", None)
    if steps is None:
        return None
    return sum(1 for ev in steps if ev.kind == "DelegateCall")


def pterun_engines(program, method):
    """The engine each XNNPACK delegate call of a loaded pterun method runs on, as pterun reports it
    (``Method.delegates``): [] when the method has no delegate, None when this pterun does not report engines
    (it predates engine selection: NumPy is then its only engine)."""
    if not delegate_calls(method):
        return []
    infos = getattr(method, "delegates", None)
    if infos is None:
        return None
    return [str(d.engine) for d in infos if d.engine is not None]


def count_instructions(program, method):
    """(executed steps, plan instructions) of a loaded pterun method, or (None, None): ``Method.steps`` and the
    program's parsed plan (``Program.file``), both public."""
    steps = getattr(method, "steps", None)
    pf = getattr(program, "file", None)
    if steps is None or pf is None:
        return None, None
    from pterun.format.schema import FREE_CALL  # only pterun methods get here

    plan = pf.plan(pf.plan_index(method.name))
    return len(steps), sum(1 for c in plan.chains for ins in c if ins.kind != FREE_CALL)


def llm_decode_inputs(meta, raw, pos: int, execute, runtime: str):
    """Inputs of one decode step of an exported LLM (``tokens`` int64[1, T<=max], ``input_pos`` int64[1]):
    token ids [1, 1] at position ``pos``; the KV cache is first filled by a prefill of ``pos`` tokens, so the
    step attends to a realistic context."""
    if len(raw) != 2 or raw[0][0] != 4 or raw[1][0] != 4:
        raise NotImplementedError(f"--llm-decode needs (tokens int64, input_pos int64) inputs, got "
                                  f"{[(st, a.shape) for st, a in raw]}")
    rng = np.random.default_rng(0)
    prefill = [(4, rng.integers(1, 200, (1, pos)).astype(np.int64)), (4, np.zeros(1, np.int64))]
    if pos > 0:
        execute(convert_inputs(prefill, runtime, meta))
    return [(4, np.array([[7]], np.int64)), (4, np.array([pos], np.int64))]


# --- main -------------------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pte", help="the .pte program")
    ap.add_argument("--runtime", choices=("pterun", "executorch", "peer"), default="pterun",
                    help="peer: executorch-numpy-runtime")
    ap.add_argument("--pterun-src", default="", help="folder put first on sys.path before importing pterun "
                    "(default: this checkout's src/; 'none' uses whatever pterun is installed)")
    ap.add_argument("--method", default="forward")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=2.5, help="seconds of timed calls (default 2.5)")
    ap.add_argument("--min-calls", type=int, default=5)
    ap.add_argument("--max-calls", type=int, default=200000)
    ap.add_argument("--max-time", type=float, default=15.0,
                    help="stop a slow program after this many seconds of calls ... (default 15)")
    ap.add_argument("--min-calls-slow", type=int, default=2, help="... once it has made this many (default 2)")
    ap.add_argument("--save-outputs", default="", help="write the first call's outputs to this .npz")
    ap.add_argument("--profile", action="store_true", help="pterun only: per-operator time breakdown")
    ap.add_argument("--llm-decode", type=int, metavar="POS", default=None,
                    help="an exported LLM (tokens, input_pos): time decode steps, one token at position POS, "
                    "after a prefill of POS tokens")
    ap.add_argument("--top", type=int, default=15, help="rows of the --profile table")
    ap.add_argument("--quiet", action="store_true", help="print only the JSON line")
    return ap.parse_args(argv)


def timed_calls(call, budget, min_calls, max_calls, max_time, min_calls_slow):
    clock = time.perf_counter
    times = []
    start = clock()
    while True:
        t = clock()
        call()
        times.append(clock() - t)
        n = len(times)
        el = clock() - start
        if n >= max_calls or (n >= min_calls and el >= budget) or (n >= min_calls_slow and el >= max_time):
            return times


def main(argv=None) -> int:
    args = parse_args(argv)
    res = {"runtime": RUNTIME, "pte": args.pte, "method": args.method, "import_s": IMPORT_S,
           "rss_after_import_mb": RSS_AFTER_IMPORT_MB, "python": sys.executable, "pid": os.getpid()}
    stage = "load"
    try:
        t0 = time.perf_counter()
        prog = RuntimeCls.get().load_program(args.pte)
        method = prog.load_method(args.method)
        res["load_s"] = time.perf_counter() - t0
        if RUNTIME == "pterun":
            res["instructions"], res["plan_instructions"] = count_instructions(prog, method)
            res["delegate_calls"] = delegate_calls(method)
            res["engines"] = pterun_engines(prog, method)
            from pterun import threads as _threads
            res["threads"] = _threads.num_threads()
        elif RUNTIME == "executorch":
            res["threads"] = ref_threads()
        stage = "inputs"
        if RUNTIME == "peer":  # its Method is called directly; load_method only names it: the first call loads it
            meta, execute = PeerMeta(method.metadata), method
            res["load_lazy"], bf16_at = True, meta.bf16_outputs()
        else:
            meta, execute, bf16_at = prog.metadata(args.method), method.execute, ()
        raw = make_inputs(meta, args.seed)
        if args.llm_decode is not None:
            raw = llm_decode_inputs(meta, raw, args.llm_decode, execute, RUNTIME)
        res["inputs"] = [f"{_SCALAR_NAME.get(st, st)}{list(a.shape)}" for st, a in raw]
        inputs = convert_inputs(raw, RUNTIME, meta)

        if args.profile:
            if RUNTIME != "pterun":
                raise NotImplementedError("--profile is only available for --runtime pterun")
            stage = "profile"
            prof = Profile()
            method.execute(inputs, hook=prof.hook)  # warm-up, not counted
            prof.reset()
            times = timed_calls(lambda: method.execute(inputs, hook=prof.hook), args.budget, args.min_calls,
                                args.max_calls, args.max_time, args.min_calls_slow)
            prof.runs = len(times)
            rep = profile_report(prof, float(np.median(times)) if times else 0.0, args.top)
            # the per-run numbers above are means over the runs; report the wall the same way
            rep["wall_per_run_s"] = sum(times) / len(times)
            rep["outside_steps_per_run_s"] = rep["wall_per_run_s"] - rep["steps_total_per_run_s"]
            for r in rep["ops"]:
                r["share"] = r["per_run_s"] / rep["wall_per_run_s"] if rep["wall_per_run_s"] else 0.0
            res["profile"] = rep
            if not args.quiet:
                print(format_profile(rep, os.path.basename(args.pte), args.top), flush=True)
        else:
            stage = "load (in the first call)" if RUNTIME == "peer" else "first call"
            t0 = time.perf_counter()
            outs = execute(inputs)
            res["first_call_s"] = time.perf_counter() - t0
            if args.save_outputs:
                np.savez(args.save_outputs, **to_numpy_outputs(outs, bf16_at))
            del outs
            stage = "calls"
            times = timed_calls(lambda: execute(inputs), args.budget, args.min_calls, args.max_calls,
                                args.max_time, args.min_calls_slow)
            ts = np.sort(np.asarray(times))
            res.update(calls=len(times), median_s=float(np.median(ts)), p90_s=float(np.percentile(ts, 90)),
                       min_s=float(ts[0]), mean_s=float(ts.mean()))
    except BaseException as e:  # report, never crash the driver
        if isinstance(e, KeyboardInterrupt):
            raise
        res["error_type"] = type(e).__name__
        res["error"] = f"{stage}: {str(e)[:600]}"
        if not args.quiet:
            traceback.print_exc(file=sys.stderr)
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    if RUNTIME == "peer":  # after the peak RSS: reading the pool creates it if no call did
        res["threads"] = peer_threads()
    sys.stdout.flush()
    print(MARK + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
