"""The ``pterun`` command: a thin layer over the public API.

Example::

    $ pterun demo
    $ pterun inspect model.pte
    $ pterun run model.pte --input x.npy --output out.npz
    $ pterun bench model.pte --threads 1 --json

Global options (``--threads``, ``--engine``, ``--debug``) work before or after the command. Settings come from,
first to last: a command-line flag, then an environment variable (``PTERUN_NUM_THREADS``, ``PTERUN_ENGINE``), then
pterun's default (:mod:`pterun.config`). The flags configure the one :class:`pterun.Runtime` every command loads
its programs with (``args.runtime``); they change nothing else in the process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import pterun
from pterun.errors import PterunError

__all__ = ["main", "build_parser"]

MODELS = Path(__file__).parent / "models"
#: outputs with at most this many elements are printed in full by ``pterun run``
SHOW_VALUES = 64
#: ``pterun run --json`` writes the values of outputs up to this many elements (larger ones: use --output)
JSON_VALUES = 100_000
#: ``pterun bench`` reports progress on stderr once a run has taken this long (seconds)
PROGRESS_AFTER_S = 2.0
_LLM_METADATA = ("get_max_seq_len", "get_max_context_len", "get_vocab_size")


class CliError(Exception):
    """A mistake in how pterun was called: one line on stderr, exit status 2 (argparse's, for usage errors)."""


def _int_at_least(text: str, lowest: int, kind: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
    if n < lowest:
        raise argparse.ArgumentTypeError(f"must be {'at least 1' if lowest == 1 else f'{lowest} or more'}, got {n}")
    return n


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def _count(text: str) -> int:
    return _int_at_least(text, 0, "a whole number")


# -- loading ----------------------------------------------------------------------------------------------------
def _identifier(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(8)[4:8]
    except IsADirectoryError:
        raise CliError(f"{path} is a directory, not a program file") from None
    except FileNotFoundError:
        return b""  # loading it says so, in the runtime's words


def _load(rt, path: str, data_path: list[str]):
    """(Program, BundledProgram or None) for a ``.pte`` or ``.bpte`` loaded by ``rt``; a ``.ptd`` is a usage
    error."""
    ident = _identifier(path)
    if ident == b"FT01":
        raise CliError(f"{path} is an external data file (.ptd), not a program: pass it with --data-path next to "
                       "the .pte that uses it")
    if ident == b"BP08":
        bundle = rt.load_bundled_program(path, data_path=data_path or None, tensor_output="numpy")
        return bundle.program, bundle
    # the command line always works on NumPy arrays, whatever $PTERUN_TENSOR_OUTPUT says for Python code
    return rt.load_program(path, data_path=data_path or None, tensor_output="numpy"), None


def _default_method(program, bundle, requested: str | None) -> str:
    if requested is not None:
        return requested
    names = sorted(bundle.method_names if bundle is not None and bundle.method_names else program.method_names)
    return "forward" if "forward" in names else names[0]


def _load_inputs(paths: list[str]) -> list:
    out: list = []
    for p in paths:
        if p.endswith(".npz"):
            with np.load(p) as z:
                out.extend(z[k] for k in z.files)
        elif p.endswith(".npy"):
            out.append(np.load(p))
        else:
            raise CliError(f"--input {p!r}: expected a .npy or .npz file")
    return out


def _llm_inputs(program, meta, rng: np.random.Generator) -> tuple[list, str] | None:
    """Inputs an exported LLM's ``forward`` accepts: tokens below the vocabulary size, positions from 0 (so the
    tokens fit the context), or None when the program does not look like an LLM."""
    if meta.name != "forward" or not any(n in program.method_names for n in _LLM_METADATA):
        return None
    from pterun.llm.runner import read_model_info
    try:
        info = read_model_info(program)
    except PterunError:
        return None
    n = min(info.tokens_bound, info.max_context_len - 1) if info.use_kv_cache else info.tokens_bound
    vocab = info.vocab_size if info.vocab_size > 0 else 2
    inputs: list = [rng.integers(0, vocab, size=(1, n), dtype=np.int64)]
    note = f"{n} random tokens below the vocabulary size {vocab}"
    if info.use_kv_cache:
        pos_meta = meta.input_tensor_meta(1)
        if info.cache_positions:
            inputs.append(np.arange(n, dtype=pos_meta.numpy_dtype()).reshape(pos_meta.sizes()[:-1] + (n,)))
            note += f", cache positions 0..{n - 1}"
        else:
            inputs.append(np.zeros(pos_meta.sizes(), pos_meta.numpy_dtype()))
            note += ", start position 0"
    return inputs, note


def _random_inputs(program, meta, seed: int) -> tuple[list, str]:
    rng = np.random.default_rng(seed)
    llm = _llm_inputs(program, meta, rng)
    if llm is not None:
        return llm[0], f"an LLM: {llm[1]} (seed {seed})"
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise CliError(f"input {i} of method {meta.name!r} is {tag}; pass the inputs with --input (random inputs "
                           "are only made for tensors)")
        info = meta.input_tensor_meta(i)
        dt, shape = info.numpy_dtype(), info.sizes()
        if dt == np.bool_:
            inputs.append(rng.random(shape) > 0.5)
        elif dt.kind in "iu":
            inputs.append(rng.integers(0, 10, size=shape).astype(dt))
        else:
            inputs.append(rng.standard_normal(shape).astype(dt))
    return inputs, f"random values (seed {seed})"


def _inputs_for(args, program, bundle, method) -> tuple[list, str]:
    if args.input:
        return _load_inputs(args.input), "from " + ", ".join(args.input)
    if bundle is not None and bundle.test_cases(method.name):
        return bundle.load_bundled_input(method.name, 0), "the bundled program's test case 0"
    return _random_inputs(program, method.metadata, args.seed)


# -- printing ---------------------------------------------------------------------------------------------------
def _summary(v) -> str:
    if isinstance(v, np.ndarray):
        head = f"{v.dtype.name}{list(v.shape)}"
        if v.size == 0:
            return head + " (empty)"
        if v.dtype.kind in "fV":
            f = v.astype(np.float64)
            return f"{head} min={f.min():.6g} max={f.max():.6g} mean={f.mean():.6g}"
        if v.dtype == np.bool_:
            return f"{head} true={int(v.sum())}/{v.size}"
        flat = v.reshape(-1)
        shown = ", ".join(str(x) for x in flat[:8]) + (", ..." if flat.size > 8 else "")
        return f"{head} [{shown}]"
    return f"{type(v).__name__} {v!r}"


def _values_text(v: np.ndarray) -> str:
    text = np.array2string(v, precision=6, max_line_width=100, threshold=SHOW_VALUES + 1)
    return "\n".join("    " + line for line in text.splitlines())


def _json_value(v) -> dict:
    if isinstance(v, np.ndarray):
        small = v.size <= JSON_VALUES
        values = v.astype(np.float64).tolist() if small and v.dtype.kind == "V" else v.tolist() if small else None
        return {"kind": "Tensor", "dtype": v.dtype.name, "shape": list(v.shape), "values": values}
    kind = {bool: "Bool", int: "Int", float: "Double", str: "String", type(None): "None"}.get(type(v), type(v).__name__)
    return {"kind": kind, "value": v}


def _dump(obj) -> str:
    # NaN and infinity are not JSON: they become null, so any JSON parser reads the result
    def clean(x):
        if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
            return None
        if isinstance(x, list):
            return [clean(e) for e in x]
        if isinstance(x, dict):
            return {k: clean(e) for k, e in x.items()}
        return x
    return json.dumps(clean(obj), indent=2)


# -- commands ---------------------------------------------------------------------------------------------------
def cmd_run(args) -> int:
    program, bundle = _load(args.runtime, args.file, args.data_path)
    method_name = _default_method(program, bundle, args.method)
    t0 = time.perf_counter()
    method = program.load_method(method_name)
    load_s = time.perf_counter() - t0
    inputs, source = _inputs_for(args, program, bundle, method)
    t0 = time.perf_counter()
    outputs = method.execute(inputs)
    run_s = time.perf_counter() - t0
    saved = None
    if args.output:
        saved = args.output if args.output.endswith(".npz") else args.output + ".npz"  # np.savez adds it anyway
        np.savez(saved, **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    if args.json:
        print(_dump({"file": args.file, "method": method_name, "inputs_from": source,
                     "inputs": [{k: v for k, v in _json_value(x).items() if k != "values"} for x in inputs],
                     "outputs": [_json_value(o) for o in outputs], "load_ms": load_s * 1e3, "run_ms": run_s * 1e3,
                     "saved_to": saved}))
        return 0
    print(f"inputs: {source}")
    for i, x in enumerate(inputs):
        print(f"input {i}: {_summary(x)}")
    for i, o in enumerate(outputs):
        print(f"output {i}: {_summary(o)}")
        if isinstance(o, np.ndarray) and 0 < o.size <= SHOW_VALUES and o.dtype.kind in "fV":
            print(_values_text(o))
    print(f"method {method_name!r}: load {load_s * 1e3:.1f} ms, run {run_s * 1e3:.2f} ms")
    if saved:
        print(f"wrote {len(outputs)} output(s) to {saved} (as out0, out1, ...)")
    return 0


def cmd_inspect(args) -> int:
    from pterun.summary import describe, format_text
    info = describe(args.file, data_path=args.data_path or None, runtime=args.runtime)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0


def cmd_demo(args) -> int:
    path = MODELS / "demo.pte"
    x = np.load(MODELS / "demo_input.npy")
    with np.load(MODELS / "demo_expected.npz") as z:
        expected = z["out0"]
    t0 = time.perf_counter()
    program = args.runtime.load_program(path, tensor_output="numpy")
    method = program.load_method("forward")
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    (out,) = method.execute([x])
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        method.execute([x])
        times.append(time.perf_counter() - t0)
    err = float(np.max(np.abs(out - expected)) / max(float(np.max(np.abs(expected))), 1e-30))
    print(f"demo model: {path.name} ({path.stat().st_size} bytes), a small image classifier")
    print(f"input:  {_summary(x)}")
    print(f"output: {_summary(out)}")
    print(f"class scores: {np.array2string(out[0], precision=4, max_line_width=200)}")
    print(f"predicted class: {int(np.argmax(out[0]))}")
    print(f"matches ExecuTorch's recorded output: {'yes' if err <= 1e-4 else 'NO'} (max error {err:.2e} of scale)")
    print(f"load {load_s * 1e3:.1f} ms, first call {first_s * 1e3:.2f} ms, median of {args.repeat} calls "
          f"{np.median(times) * 1e3:.2f} ms on {args.runtime.num_threads} thread(s)")
    return 0 if err <= 1e-4 else 1


class _Progress:
    """Progress on stderr for long runs: a line that rewrites itself on a terminal, a line every 10 s otherwise."""

    def __init__(self, total: int):
        self.total, self.start = total, time.perf_counter()
        self.tty = hasattr(sys.stderr, "isatty") and sys.stderr.isatty()
        self.next_at = self.start + PROGRESS_AFTER_S
        self.shown = False

    def update(self, done: int, times: list[float]) -> None:
        now = time.perf_counter()
        if now < self.next_at:
            return
        self.next_at = now + (0.5 if self.tty else 10.0)
        line = (f"bench: {done}/{self.total} calls, median so far {sorted(times)[len(times) // 2] * 1e3:.3f} ms, "
                f"{now - self.start:.0f} s")
        sys.stderr.write(("\r" + line + "\033[K") if self.tty else line + "\n")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def cmd_bench(args) -> int:
    program, bundle = _load(args.runtime, args.file, args.data_path)
    method_name = _default_method(program, bundle, args.method)
    t0 = time.perf_counter()
    method = program.load_method(method_name)
    load_s = time.perf_counter() - t0
    inputs, source = _inputs_for(args, program, bundle, method)
    t0 = time.perf_counter()
    method.execute(inputs)
    first_s = time.perf_counter() - t0
    times: list[float] = []
    interrupted = False
    progress = _Progress(args.warmup + args.repeat)
    try:
        for i in range(args.warmup):
            method.execute(inputs)
            progress.update(i + 1, [first_s])
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            method.execute(inputs)
            times.append(time.perf_counter() - t0)
            progress.update(args.warmup + len(times), times)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    from pterun import threads
    stats = _stats(times)
    if args.json:
        print(_dump({"file": args.file, "method": method_name, "inputs_from": source, "load_ms": load_s * 1e3,
                     "first_call_ms": first_s * 1e3, "warmup": args.warmup, "repeat": args.repeat,
                     "calls": len(times), **{k + "_ms": v * 1e3 for k, v in stats.items()},
                     "threads": args.runtime.num_threads, "blas_threads": threads.blas_threads(),
                     "interrupted": interrupted}))
        return 130 if interrupted else 0
    head = f"{args.file} method {method_name!r}: load {load_s * 1e3:.1f} ms, first call {first_s * 1e3:.2f} ms"
    if times:
        print(f"{head}, median {stats['median'] * 1e3:.3f} ms, p90 {stats['p90'] * 1e3:.3f} ms over {len(times)} "
              f"calls ({args.warmup} warm-up) on {args.runtime.num_threads} thread(s)"
              + (f"  (interrupted after {len(times)} of {args.repeat} calls)" if interrupted else ""))
    else:
        print(f"{head}; interrupted before any timed call")
    groups: dict = {}  # one line per (backend, engine, reason): an exported LLM has a hundred delegates
    for d in method.delegates:
        groups.setdefault((d.backend, d.engine, d.reason), []).append(d.index)
    for (backend, engine, reason), indices in groups.items():
        which = f"delegate {indices[0]}" if len(indices) == 1 else f"delegates {_ranges(indices)}"
        print(f"{which} ({backend}): engine {engine or 'its own'}" + (f" ({reason})" if reason else ""))
    merged = [e for e in method.steps if e.kind == "DelegateCall" and e.detail]
    if merged:
        calls = sum(1 for e in method.steps if e.kind == "DelegateCall")
        print(f"{calls} delegate call(s) per run; {len(merged)} of them each run several neighbouring delegate calls "
              "merged into one (PTERUN_NO_MERGE=1 keeps every call apart)")
    if args.profile and not interrupted:
        from pterun.profile import format_profile, profile
        print()
        print(format_profile(profile(method, inputs, repeat=max(1, min(args.repeat, 20))), total_s=stats["median"]))
    return 130 if interrupted else 0


def _stats(times: list[float]) -> dict[str, float]:
    if not times:
        return {"median": float("nan"), "p90": float("nan"), "min": float("nan"), "mean": float("nan")}
    s = sorted(times)
    return {"median": s[len(s) // 2], "p90": s[min(int(len(s) * 0.9), len(s) - 1)], "min": s[0],
            "mean": sum(s) / len(s)}


def cmd_ops(args) -> int:
    from pterun.kernels.registry import KERNELS
    if args.file:
        from pterun.summary import describe
        if _identifier(args.file) == b"FT01":
            raise CliError(f"{args.file} is an external data file (.ptd), not a program: it holds weights, no "
                           "operators; pass the .pte (or .bpte)")
        info = describe(args.file, runtime=args.runtime)
        used = sorted({op for m in info["methods"] for op in m["operators"]})
        missing = [op for op in used if op not in KERNELS]
        for op in used:
            print(f"{'ok     ' if op in KERNELS else 'MISSING'}  {op}")
        print(f"{len(used) - len(missing)}/{len(used)} operators supported")
        return 1 if missing else 0
    for name in sorted(KERNELS):
        print(name)
    print(f"{len(KERNELS)} operators registered")
    return 0


def cmd_verify(args) -> int:
    if _identifier(args.file) != b"BP08":
        raise CliError(f"{args.file} is not a bundled program (.bpte): verify needs one, since a .pte carries no "
                       "expected outputs")
    bp = args.runtime.load_bundled_program(args.file, data_path=args.data_path or None,
                                                   tensor_output="numpy")
    results = bp.check_all(rtol=args.rtol, atol=args.atol)
    if not results:
        print(f"{args.file}: no test cases")
        return 1
    rows = [("method", "case", "result", "worst output", "max abs error", "max rel error")]
    for r in results:
        w = r.worst
        rows.append((r.method, str(r.case), "pass" if r.passed else "FAIL", str(w.index) if w else "-",
                     f"{w.max_abs_error:.3g}" if w else "-", f"{w.max_rel_error:.3g}" if w else "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    failed = sum(not r.passed for r in results)
    print(f"{len(results) - failed}/{len(results)} test cases passed (rtol={args.rtol}, atol={args.atol})")
    for r in results:
        for c in r.checks:
            if c.detail:
                print(f"  {r.method} case {r.case} output {c.index}: {c.detail}")
    return 1 if failed else 0


def _ranges(indices: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def cmd_trace(args) -> int:
    """Record every instruction's outputs (--out), or compare two recorded traces (--compare A B)."""
    from pterun.trace import first_divergence, load, save
    if args.compare:
        a, b = (load(p) for p in args.compare)
        d = first_divergence(a, b, rtol=args.rtol, atol=args.atol)
        if d is None:
            print(f"no divergence: {len(a)} and {len(b)} entries agree where both have them "
                  f"(rtol={args.rtol}, atol={args.atol})")
            return 0
        print(d)
        return 1
    if args.file is None or args.out is None:
        raise PterunError("trace needs MODEL.pte and --out TRACE.npz, or --compare A.npz B.npz")
    program = args.runtime.load_program(args.file, data_path=args.data_path or None)
    names = sorted(program.method_names)
    method = program.load_method(args.method or ("forward" if "forward" in names else names[0]))
    if args.input:
        inputs = _load_inputs(args.input)
    else:
        inputs, how = _random_inputs(program, method.metadata, args.seed)
        print(f"no --input given: using {how}")
    entries = method.trace(inputs)
    written = save(args.out, entries)
    print(f"wrote {len(entries)} traced instructions ({sum(len(e.outputs) for e in entries)} outputs) to {written}")
    return 0


def _add_trace_parser(sub) -> None:
    t = sub.add_parser("trace", help="save every instruction's outputs (--out), or find where two traces first "
                       "diverge (--compare)")
    t.add_argument("file", nargs="?", help="the .pte program")
    t.add_argument("--method", help="method to run (default: forward)")
    t.add_argument("--input", action="append", default=[], metavar="FILE", help="inputs as for 'run'")
    t.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    t.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd", help="external data file(s)")
    t.add_argument("--out", metavar="TRACE.npz", help="where to write the trace")
    t.add_argument("--compare", nargs=2, metavar=("A.npz", "B.npz"),
                   help="report the first instruction whose outputs differ (exit status 1), or none (0)")
    t.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance for --compare (default 1e-5)")
    t.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance for --compare (default 1e-6)")
    t.set_defaults(fn=cmd_trace)


# -- the parser -------------------------------------------------------------------------------------------------
def _add_global_options(p: argparse.ArgumentParser, *, on_command: bool) -> None:
    """The options that work before or after the command. On a command's parser their default is SUPPRESS, so
    leaving one out there keeps what was given before the command."""
    d: dict[str, Any] = {"default": argparse.SUPPRESS} if on_command else {}
    p.add_argument("--debug", action="store_true", help="show full tracebacks and debug logging", **d)
    p.add_argument("--threads", type=_positive_int, metavar="N", help="compute on N threads (default: "
                   "$PTERUN_NUM_THREADS, else the cores this process may use); BLAS stays at one thread", **d)
    p.add_argument("--engine", choices=("auto", "numpy", "litert"), help="what runs XNNPACK delegates: LiteRT "
                   "(on XNNPACK itself), pterun's NumPy engine, or auto: LiteRT where installed and able (default: "
                   "$PTERUN_ENGINE, else auto)", **d)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pterun", description="Run ExecuTorch .pte programs with NumPy only.",
                                epilog="Options such as --threads work before or after the command. A flag beats "
                                       "its environment variable, which beats the default.")
    p.add_argument("--version", action="version", version=f"pterun {pterun.__version__}")
    _add_global_options(p, on_command=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a method on inputs from .npy/.npz files (or random inputs)")
    r.add_argument("file", help="the .pte program (or a .bpte bundled program: its first test case's inputs)")
    r.add_argument("--method", help="method to run (default: forward)")
    r.add_argument("--input", action="append", default=[], metavar="FILE",
                   help="a .npy (one input) or .npz (inputs in file order); repeat for several")
    r.add_argument("--output", metavar="OUT.npz", help="save outputs as out0, out1, ... (.npz is added if missing)")
    r.add_argument("--json", action="store_true", help="print inputs and outputs (with values) as JSON")
    r.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    r.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) holding the program's weights")
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("inspect", help="show methods, inputs/outputs, operators, delegates and memory")
    i.add_argument("file", help="a .pte program, .ptd external data file or .bpte bundled program")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s), to run constant methods that need them")
    i.set_defaults(fn=cmd_inspect)

    d = sub.add_parser("demo", help="run the small model shipped with pterun and check it against ExecuTorch")
    d.add_argument("--repeat", type=_positive_int, default=20, help="timed calls after the first (default 20)")
    d.set_defaults(fn=cmd_demo)

    v = sub.add_parser("verify", help="run every test case of a bundled program (.bpte) and check its outputs")
    v.add_argument("file", help="the .bpte bundled program")
    v.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) for the embedded program")
    v.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (default 1e-5, as ExecuTorch)")
    v.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance (default 1e-8, as ExecuTorch)")
    v.set_defaults(fn=cmd_verify)

    b = sub.add_parser("bench", help="time load, first call and repeated calls; --profile shows time per operator")
    b.add_argument("file", help="the .pte program (or .bpte)")
    b.add_argument("--method", help="method to run (default: forward)")
    b.add_argument("--input", action="append", default=[], metavar="FILE", help="inputs as for 'run'")
    b.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    b.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd", help="external data file(s)")
    b.add_argument("--repeat", type=_positive_int, default=20, help="timed calls (default 20)")
    b.add_argument("--warmup", type=_count, default=2, help="untimed calls after the first (default 2)")
    b.add_argument("--json", action="store_true", help="print the timings as JSON")
    b.add_argument("--profile", action="store_true", help="print the time per operator / XNNPACK node")
    b.set_defaults(fn=cmd_bench)

    from pterun.llm.cli import add_generate_parser
    add_generate_parser(sub)

    o = sub.add_parser("ops", help="list registered operators, or check a program's operators")
    o.add_argument("file", nargs="?", help="a .pte (or .bpte) program to check")
    o.set_defaults(fn=cmd_ops)

    _add_trace_parser(sub)
    for command in sub.choices.values():
        _add_global_options(command, on_command=True)
    return p


# library messages name Python arguments; on the command line the same hint is a flag
_CLI_HINTS = (("pass it as data_path=", "pass it with --data-path"),
              ("no data_path was given to load_program", "no --data-path was given"),
              ("use Runtime.load_bundled_program", "pterun takes the .bpte itself"))


def _error_line(e: BaseException) -> str:
    msg = str(e.args[0]) if isinstance(e, KeyError) and not isinstance(e, PterunError) and e.args else str(e)
    for python, cli in _CLI_HINTS:
        msg = msg.replace(python, cli)
    return msg if isinstance(e, CliError) else f"{type(e).__name__}: {msg}"


def _quiet_stdout() -> None:
    # the reader went away (``pterun inspect x.pte | head``): send what is still buffered nowhere, so the
    # interpreter's own flush at exit does not fail again
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _runtime(args):
    """The Runtime the command loads with: the flags as its settings (a flag beats its environment variable, as
    passing the setting to Runtime does); :meth:`pterun.Runtime.get` when no flag is given."""
    if args.threads is None and args.engine is None:
        return pterun.Runtime.get()
    return pterun.Runtime(num_threads=args.threads, engine=args.engine)


def main(argv: list[str] | None = None) -> int:
    """Run the ``pterun`` command line; returns the exit status (0 ok, 1 failed, 2 usage error, 130 Ctrl-C,
    141 when the reader of stdout went away)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse has already printed
        return e.code if isinstance(e.code, int) else 2
    args.threads = getattr(args, "threads", None)
    args.engine = getattr(args, "engine", None)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(name)s: %(message)s")
    try:
        args.runtime = _runtime(args)
        status = args.fn(args)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        _quiet_stdout()
        return 141
    except CliError as e:
        if args.debug:
            raise
        print(f"pterun: error: {_error_line(e)}", file=sys.stderr)
        return 2
    except (PterunError, OSError, ValueError, TypeError, KeyError, ImportError) as e:
        if args.debug:
            raise
        print(f"pterun: error: {_error_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pterun: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
