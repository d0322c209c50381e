#!/usr/bin/env python
"""Generate the golden kernel cases under ``tests/golden/`` (one ``.npz`` per operator).

Run with the *reference* virtualenv (torch + executorch); pterun itself never imports torch::

    .ref/bin/python tools/gen_golden.py                    # every operator
    .ref/bin/python tools/gen_golden.py aten::add.out ...  # only these operators (others are kept)
    .ref/bin/python tools/gen_golden.py --no-et            # eager PyTorch only (fast, for drafting)

Each case names an operator by its registered name and lists the kernel's arguments in schema order
without the kwarg-only written ("out") arguments. The expected outputs are, in order of preference:

1. **ExecuTorch's own kernel**: the case is exported as a one-operator program (``torch.export`` ->
   ``to_edge`` -> ``to_executorch``) and run with ``executorch.runtime`` when the program really calls the
   operator; this is the reference pterun must match, and wherever it disagrees with eager PyTorch the
   disagreement is printed (``!!``) at the end of the run;
2. eager PyTorch (``torch.ops.<ns>.<op>.<functional overload>``) when the export decomposes the operator, the
   operator mutates an input, or ExecuTorch rejects the case;
3. a value written out in the case itself (``expect=``) where neither applies (prim ops, ops that exist only
   as ExecuTorch kernels); the facts come from ExecuTorch's kernel source and the case says so.

File format (read by ``tests/test_golden.py``): ``__cases__`` is a JSON list of
``{"name", "args", "outs", "check", "tol", "source"}``; ``args`` encode each argument
(``{"t": key, "layout": "T"|"step"|null}`` for a tensor stored under ``key``, ``{"tl": [...]}`` tensor lists,
``{"int"|"float"|"bool"|"str"|"none"|"ints"|"floats"|"bools"|"dtype"|"scalar": ...}``); ``outs`` lists
``{"key", "dtype"}`` per written argument (a list for ``Tensor(a!)[]``) or ``{"scalar": v}`` for ops that return
a scalar. bfloat16 tensors are stored as their uint16 bits with ``"dtype": "bfloat16"``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from golden_cases import build_cases  # tools/ is on sys.path when this script runs
from golden_helpers import CASES, Case, Strided

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests" / "golden"

F32, F64, F16, BF16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
I8, I16, I32, I64, U8, BOOL = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool
C64 = torch.complex64

_NP_NAME = {F32: "float32", F64: "float64", F16: "float16", BF16: "bfloat16", I8: "int8", I16: "int16",
            I32: "int32", I64: "int64", U8: "uint8", BOOL: "bool", C64: "complex64",
            torch.complex128: "complex128", torch.uint16: "uint16"}
_MEMORY_FORMAT = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2}


# ----------------------------------------------------------------------------------------------------------
# Resolving an operator to torch
# ----------------------------------------------------------------------------------------------------------
_IMPORTED = False


def _import_ops():
    global _IMPORTED
    if not _IMPORTED:
        import executorch.exir.passes.dim_order_ops_registry  # noqa: F401
        import executorch.kernels.quantized  # noqa: F401  (the quantized_decomposed out variants' schemas)
        import torch.ao.quantization.fx._decomposed  # noqa: F401
        from executorch.exir.passes._quant_patterns_and_replacements import quantized_decomposed_lib  # noqa
        _IMPORTED = True


def _is_written(a) -> bool:
    return a.alias_info is not None and a.alias_info.is_write


def resolve(op: str):
    """(out-variant schema, functional OpOverload or None, names of kwarg-only written args)."""
    _import_ops()
    ns, rest = op.split("::")
    name, _, ov = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        target = getattr(packet, ov or "default")
    except (AttributeError, RuntimeError):
        return None, None, []  # an ExecuTorch-only operator: the case brings its own reference
    sch = target._schema
    outs = [a.name for a in sch.arguments if a.kwarg_only and _is_written(a)]
    if not outs:
        return sch, target, outs
    key = [(a.name, str(a.type)) for a in sch.arguments if a.name not in outs]
    for o in packet.overloads():
        s = getattr(packet, o)._schema
        if any(_is_written(a) and a.kwarg_only for a in s.arguments):
            continue
        if [(a.name, str(a.type)) for a in s.arguments] == key:
            return sch, getattr(packet, o), outs
    return sch, None, outs


def _list_out(sch, outs) -> bool:
    """Whether the op writes a ``Tensor(a!)[] out`` list."""
    return any(isinstance(a.type, torch.ListType) for a in sch.arguments if a.name in outs)


def _plain(a):
    if isinstance(a, Strided):
        return a.t
    if isinstance(a, (list, tuple)):
        return [_plain(x) for x in a]
    return a


def _clone(a):
    if isinstance(a, torch.Tensor):
        return a.clone()
    if isinstance(a, list):
        return [_clone(x) for x in a]
    return a


def call_functional(fn, sch, outs, args):
    names = [a for a in sch.arguments if a.name not in outs]
    pos, kw = [], {}
    for a, v in zip(names, args):
        if a.kwarg_only:
            kw[a.name] = v
        else:
            pos.append(v)
    return fn(*pos, **kw)


def eager_outputs(c: Case, sch, fn, outs):
    """Expected written-argument values: mutated positional args (after the call), then the results."""
    args = _clone(_plain(c.args))
    if c.eager is not None:
        res = c.eager(*args)
    else:
        if fn is None:
            raise RuntimeError(f"no functional overload for {c.op}")
        res = call_functional(fn, sch, outs, args)
    if sch is None:
        return list(res) if isinstance(res, tuple) else [res]
    mutated = [args[i] for i, a in enumerate(x for x in sch.arguments if x.name not in outs)
               if _is_written(a) and not a.kwarg_only]
    if mutated and res is not None and sch.returns and len(outs) == 0:
        res = ()  # in-place op: the return value is the mutated argument itself
    if res is None:
        res = ()
    if isinstance(res, torch.Tensor):
        res = (res,)
    if _list_out(sch, outs):
        res = (list(res),)  # Tensor(a!)[] out: one written argument holding a list
    return mutated + list(res)


# ----------------------------------------------------------------------------------------------------------
# Running a case with ExecuTorch's kernel
# ----------------------------------------------------------------------------------------------------------
class _OneOp(torch.nn.Module):
    def __init__(self, fn, sch, outs, args):
        super().__init__()
        self.fn, self.sch, self.outs = fn, sch, outs
        self.template = args

    def forward(self, *tensors):
        it = iter(tensors)

        def fill(a):
            if isinstance(a, torch.Tensor):
                return next(it)
            if isinstance(a, list) and any(isinstance(x, torch.Tensor) for x in a):
                return [fill(x) for x in a]
            return a
        args = [fill(a) for a in self.template]
        return call_functional(self.fn, self.sch, self.outs, args)


def _flat_tensors(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, list):
            out.extend(x for x in a if isinstance(x, torch.Tensor))
    return out


def et_outputs(c: Case):
    """ExecuTorch's outputs for the case, or a string saying why there are none."""
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from executorch.runtime import Runtime
    import executorch.kernels.quantized  # noqa: F401

    sch, fn, outs = resolve(c.op)
    if fn is None or c.eager is not None:
        return "no functional overload"
    if any(_is_written(a) for a in sch.arguments if a.name not in outs):
        return "mutates an input"
    args = _clone(_plain(c.args))
    tensors = [t.contiguous() for t in _flat_tensors(args)]
    mod = _OneOp(fn, sch, outs, args)
    ep = torch.export.export(mod, tuple(tensors))
    # keep the operator itself: the default decomposition table would rewrite some (rsub, glu, logit ...)
    config = EdgeCompileConfig(_check_ir_validity=False, preserve_ops=[fn])
    edge = to_edge_transform_and_lower(ep, compile_config=config)
    prog = edge.to_executorch()
    ops = {f"{o.name}.{o.overload}" if o.overload else o.name
           for p in prog.executorch_program.execution_plan for o in p.operators}
    if c.op not in ops:
        return f"exported as {sorted(ops)}"
    method = Runtime.get().load_program(prog.buffer).load_method("forward")
    res = method.execute([t.contiguous() for t in tensors])
    res = list(res)
    if _list_out(sch, outs):
        res = [res]
    return res


def _worker(conn):
    while True:
        idx = conn.recv()
        if idx is None:
            return
        try:
            res = et_outputs(CASES[idx])
            if not isinstance(res, str):
                res = [_to_np_tree(x) for x in res]
        except Exception as e:  # noqa: BLE001  (reported, then eager is used)
            res = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        conn.send(res)


class ETPool:
    """One worker process running ExecuTorch; restarted when a kernel aborts it (ET_CHECK failures)."""

    def __init__(self):
        self.proc = None

    def _start(self):
        ctx = mp.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        self.proc.start()

    def run(self, idx: int):
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(idx)
        if not self.conn.poll(120):
            self.proc.kill()
            self.proc = None
            return "timeout"
        try:
            return self.conn.recv()
        except EOFError:
            self.proc = None
            return "crashed (ExecuTorch aborted)"

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            self.conn.send(None)
            self.proc.join(5)


# ----------------------------------------------------------------------------------------------------------
# Encoding
# ----------------------------------------------------------------------------------------------------------
def _to_np(t: torch.Tensor):
    t = t.detach().contiguous()
    if t.dtype == BF16:
        return t.view(torch.int16).numpy().view(np.uint16).copy(), "bfloat16"
    return t.numpy().copy(), _NP_NAME[t.dtype]


def _to_np_tree(x):
    if isinstance(x, torch.Tensor):
        return _to_np(x)
    if isinstance(x, (list, tuple)):
        return [_to_np_tree(v) for v in x]
    return x


def encode_arg(a, key, arrays):
    if isinstance(a, Strided):
        enc = encode_arg(a.t, key, arrays)
        enc["layout"] = a.layout
        return enc
    if isinstance(a, torch.Tensor):
        arrays[key], dt = _to_np(a)
        return {"t": key, "dtype": dt, "layout": None}
    if a is None:
        return {"none": None}
    if isinstance(a, torch.dtype):
        return {"dtype": _NP_NAME[a]}
    if isinstance(a, torch.memory_format):
        return {"int": _MEMORY_FORMAT[a]}
    if isinstance(a, bool):
        return {"bool": a}
    if isinstance(a, int):
        return {"int": a}
    if isinstance(a, float):
        return {"float": a}
    if isinstance(a, str):
        return {"str": a}
    if isinstance(a, (list, tuple)):
        if any(isinstance(x, (torch.Tensor, Strided)) for x in a):
            return {"tl": [encode_arg(x, f"{key}_{i}", arrays) for i, x in enumerate(a)]}
        if all(isinstance(x, bool) for x in a) and a:
            return {"bools": list(a)}
        if all(isinstance(x, int) and not isinstance(x, bool) for x in a):
            return {"ints": list(a)}
        return {"floats": [float(x) for x in a]}
    raise TypeError(f"cannot encode argument {a!r}")


def encode_out(v, key, arrays):
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], np.ndarray):
        arrays[key], dt = v
        return {"key": key, "dtype": dt}
    if isinstance(v, torch.Tensor):
        arrays[key], dt = _to_np(v)
        return {"key": key, "dtype": dt}
    if isinstance(v, np.ndarray):
        arrays[key] = v
        return {"key": key, "dtype": str(v.dtype)}
    if isinstance(v, list):
        return {"list": [encode_out(x, f"{key}_{i}", arrays) for i, x in enumerate(v)]}
    if v is None:
        return {"none": None}
    return {"scalar": v, "type": type(v).__name__}


# ----------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------
def file_for(op: str) -> Path:
    return GOLDEN / (re.sub(r"[^A-Za-z0-9_.]+", "_", op.replace("::", "__")) + ".npz")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ops", nargs="*", help="operators to regenerate (default: all)")
    p.add_argument("--no-et", action="store_true", help="use eager PyTorch only")
    opts = p.parse_args(argv)
    _import_ops()
    build_cases()
    wanted = set(opts.ops) or {c.op for c in CASES}
    unknown = wanted - {c.op for c in CASES}
    if unknown:
        print(f"no cases for {sorted(unknown)}")
        return 2
    GOLDEN.mkdir(parents=True, exist_ok=True)
    pool = None if opts.no_et else ETPool()
    disagreements, failures, by_op = [], [], {}
    for idx, c in enumerate(CASES):
        if c.op in wanted:
            by_op.setdefault(c.op, []).append(idx)
    try:
        for op, idxs in sorted(by_op.items()):
            records, arrays = [], {}
            for n, idx in enumerate(idxs):
                c = CASES[idx]
                try:
                    rec, src = _record(c, idx, n, arrays, pool, disagreements)
                except Exception as e:  # noqa: BLE001  (reported at the end; the other cases still run)
                    failures.append(f"{op}[{n}] {c.name}: {type(e).__name__}: {e}")
                    continue
                records.append(rec)
            np.savez_compressed(file_for(op), __cases__=np.array(json.dumps(records)), **arrays)
            print(f"{op}: {len(records)} cases ({', '.join(r['source'] for r in records)})")
    finally:
        if pool is not None:
            pool.close()
    if disagreements:
        print("\nExecuTorch vs eager PyTorch (ExecuTorch's values are the expected ones):")
        for line in disagreements:
            print("  !!", line)
    if failures:
        print("\nCases that could not be generated:")
        for line in failures:
            print("  XX", line)
    total = sum(p.stat().st_size for p in GOLDEN.glob("*.npz"))
    print(f"\n{len(list(GOLDEN.glob('*.npz')))} files, {total / 1e6:.2f} MB")
    return 0


def _diff(a, b) -> str | None:
    """Describe how ExecuTorch's output ``a`` (numpy tree) differs from eager ``b`` (numpy tree)."""
    if isinstance(a, list):
        for x, y in zip(a, b):
            d = _diff(x, y)
            if d:
                return d
        return None if len(a) == len(b) else f"{len(a)} vs {len(b)} outputs"
    if isinstance(a, tuple):
        (x, dx), (y, dy) = a, b
        if x.shape != y.shape or dx != dy:
            return f"shape/dtype {x.shape}/{dx} vs {y.shape}/{dy}"
        if dx == "bfloat16":
            x = (x.astype(np.uint32) << 16).view(np.float32)
            y = (y.astype(np.uint32) << 16).view(np.float32)
        xf, yf = x.astype(np.complex128 if x.dtype.kind == "c" else np.float64), y.astype(
            np.complex128 if y.dtype.kind == "c" else np.float64)
        same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
        if same.all():
            return None
        err = np.abs(np.where(same, 0, xf - yf))
        scale = max(float(np.max(np.abs(yf[np.isfinite(yf)]), initial=0)), 1e-30)
        worst = float(np.nanmax(np.where(np.isnan(err), np.inf, err)))
        if dx in ("float32", "complex64", "float64") and worst <= 2e-6 * scale:
            return None
        if dx in ("float16", "bfloat16") and worst <= 1e-2 * scale:
            return None
        i = int(np.argmax(np.where(np.isnan(err), np.inf, err)))
        return f"max |diff| {worst:.3g} (scale {scale:.3g}); first worst at {i}: et {x.reshape(-1)[i]} eager {y.reshape(-1)[i]}"
    if a != b and not (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)):
        return f"{a!r} vs {b!r}"
    return None


def _record(c: Case, idx: int, n: int, arrays: dict, pool, disagreements):
    sch, fn, outs = resolve(c.op) if c.expect is None else (None, None, [])
    prefix = f"c{n}"
    args = [encode_arg(a, f"{prefix}_a{j}", arrays) for j, a in enumerate(c.args)]
    label = f"{c.op}[{n}]{' ' + c.name if c.name else ''}"
    if c.expect is not None:
        expected = c.expect if isinstance(c.expect, list) else [c.expect]
        expected = [_to_np_tree(x) for x in expected]
        source = "manual"
    else:
        try:
            eager = [_to_np_tree(x) for x in eager_outputs(c, sch, fn, outs)]
        except Exception as e:  # noqa: BLE001
            eager = None
            eager_err = f"{type(e).__name__}: {e}".splitlines()[0]
        et = pool.run(idx) if (pool is not None and c.et and c.check == "values") else "skipped"
        if not isinstance(et, str):
            expected, source = et, "executorch"
            if eager is not None:
                d = _diff(et, eager)
                if d:
                    disagreements.append(f"{label}: {d}")
            else:
                disagreements.append(f"{label}: eager failed ({eager_err}); ExecuTorch ran")
        else:
            if eager is None:
                raise RuntimeError(f"{label}: eager failed ({eager_err}) and ExecuTorch: {et}")
            expected, source = eager, "eager" + ("" if et == "skipped" else f" (et: {et})")
    out_enc = [encode_out(v, f"{prefix}_o{k}", arrays) for k, v in enumerate(expected)]
    rec = {"op": c.op, "name": c.name or f"case{n}", "args": args, "outs": out_enc, "check": c.check, "tol": c.tol,
           "source": source.split(" (")[0], "why": source, "note": c.note}
    return rec, source


if __name__ == "__main__":
    sys.exit(main())
