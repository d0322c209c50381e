"""The ``pterun`` command: a thin layer over the public API.

Example::

    $ pterun demo
    $ pterun inspect model.pte
    $ pterun run model.pte --input x.npy --output out.npz
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

import pterun
from pterun.errors import PterunError

MODELS = Path(__file__).parent / "models"


def _random_inputs(meta, rng: np.random.Generator) -> list:
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise PterunError(f"input {i} is {tag}; pass it explicitly (random inputs are only made for tensors)")
        info = meta.input_tensor_meta(i)
        dt, shape = info.numpy_dtype(), info.sizes()
        if dt == np.bool_:
            inputs.append(rng.random(shape) > 0.5)
        elif dt.kind in "iu":
            inputs.append(rng.integers(0, 10, size=shape).astype(dt))
        else:
            inputs.append(rng.standard_normal(shape).astype(dt))
    return inputs


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


def _load_inputs(paths: list[str]) -> list:
    out = []
    for p in paths:
        if p.endswith(".npz"):
            with np.load(p) as z:
                out.extend(z[k] for k in z.files)
        elif p.endswith(".npy"):
            out.append(np.load(p))
        else:
            raise PterunError(f"--input {p!r}: expected a .npy or .npz file")
    return out


def cmd_run(args) -> int:
    program = pterun.Runtime.get().load_program(args.file, data_path=args.data_path or None)
    method_name = args.method
    if method_name is None:
        names = sorted(program.method_names)
        method_name = "forward" if "forward" in names else names[0]
    t0 = time.perf_counter()
    method = program.load_method(method_name)
    load_s = time.perf_counter() - t0
    if args.input:
        inputs = _load_inputs(args.input)
    else:
        inputs = _random_inputs(method.metadata, np.random.default_rng(args.seed))
        print(f"no --input given: using random inputs (seed {args.seed})")
    for i, x in enumerate(inputs):
        print(f"input {i}: {_summary(x)}")
    t0 = time.perf_counter()
    outputs = method.execute(inputs)
    run_s = time.perf_counter() - t0
    for i, o in enumerate(outputs):
        print(f"output {i}: {_summary(o)}")
    print(f"method {method_name!r}: load {load_s * 1e3:.1f} ms, run {run_s * 1e3:.2f} ms")
    if args.output:
        arrays = {f"out{i}": np.asarray(o) for i, o in enumerate(outputs)}
        np.savez(args.output, **arrays)
        print(f"wrote {len(arrays)} output(s) to {args.output}")
    return 0


def cmd_inspect(args) -> int:
    from pterun.inspect import describe, format_text
    info = describe(args.file, data_path=args.data_path or None)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 0


def cmd_demo(args) -> int:
    path = MODELS / "demo.pte"
    x = np.load(MODELS / "demo_input.npy")
    with np.load(MODELS / "demo_expected.npz") as z:
        expected = z["out0"]
    t0 = time.perf_counter()
    program = pterun.Runtime.get().load_program(path)
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
          f"{np.median(times) * 1e3:.2f} ms")
    return 0 if err <= 1e-4 else 1


def cmd_bench(args) -> int:
    program = pterun.Runtime.get().load_program(args.file, data_path=args.data_path or None)
    names = sorted(program.method_names)
    method_name = args.method or ("forward" if "forward" in names else names[0])
    t0 = time.perf_counter()
    method = program.load_method(method_name)
    load_s = time.perf_counter() - t0
    inputs = _load_inputs(args.input) if args.input else _random_inputs(method.metadata, np.random.default_rng(0))
    t0 = time.perf_counter()
    method.execute(inputs)
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        method.execute(inputs)
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"{args.file} method {method_name!r}: load {load_s * 1e3:.1f} ms, first call {first_s * 1e3:.2f} ms, "
          f"median {times[len(times) // 2] * 1e3:.3f} ms, p90 {times[int(len(times) * 0.9)] * 1e3:.3f} ms "
          f"over {args.repeat} calls")
    for d in method.delegates:
        print(f"delegate {d.index} ({d.backend}): engine {d.engine or 'its own'}"
              + (f" ({d.reason})" if d.reason else ""))
    if args.profile:
        from pterun.profile import format_profile, profile
        print()
        print(format_profile(profile(method, inputs, repeat=max(1, min(args.repeat, 20))),
                             total_s=times[len(times) // 2]))
    return 0


def cmd_ops(args) -> int:
    from pterun.kernels.registry import KERNELS
    if args.file:
        from pterun.inspect import describe
        info = describe(args.file)
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
    bp = pterun.Runtime.get().load_bundled_program(args.file, data_path=args.data_path or None)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pterun", description="Run ExecuTorch .pte programs with NumPy only.")
    p.add_argument("--version", action="version", version=f"pterun {pterun.__version__}")
    p.add_argument("--debug", action="store_true", help="show full tracebacks and debug logging")
    p.add_argument("--threads", type=int, metavar="N", help="compute on N threads: pterun splits large "
                   "convolutions and matrix products itself and holds BLAS at one thread (default: "
                   "$PTERUN_NUM_THREADS, else one thread of pterun's and BLAS as configured)")
    p.add_argument("--engine", choices=("auto", "numpy", "litert"), help="what runs XNNPACK delegates: LiteRT "
                   "(on XNNPACK itself), pterun's NumPy engine, or auto: LiteRT where installed and able (default: "
                   "$PTERUN_ENGINE, else auto)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a method on inputs from .npy/.npz files (or random inputs)")
    r.add_argument("file", help="the .pte program")
    r.add_argument("--method", help="method to run (default: forward)")
    r.add_argument("--input", action="append", default=[], metavar="FILE",
                   help="a .npy (one input) or .npz (inputs in file order); repeat for several")
    r.add_argument("--output", metavar="OUT.npz", help="save outputs as out0, out1, ...")
    r.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")
    r.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) holding the program's weights")
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("inspect", help="show methods, inputs/outputs, operators, delegates and memory")
    i.add_argument("file", help="the .pte program")
    i.add_argument("--json", action="store_true", help="print JSON instead of text")
    i.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s), to run constant methods that need them")
    i.set_defaults(fn=cmd_inspect)

    d = sub.add_parser("demo", help="run the small model shipped with pterun and check it against ExecuTorch")
    d.add_argument("--repeat", type=int, default=20, help="timed calls after the first (default 20)")
    d.set_defaults(fn=cmd_demo)

    v = sub.add_parser("verify", help="run every test case of a bundled program (.bpte) and check its outputs")
    v.add_argument("file", help="the .bpte bundled program")
    v.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) for the embedded program")
    v.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (default 1e-5, as ExecuTorch)")
    v.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance (default 1e-8, as ExecuTorch)")
    v.set_defaults(fn=cmd_verify)

    b = sub.add_parser("bench", help="time load, first call and repeated calls; --profile shows time per operator")
    b.add_argument("file", help="the .pte program")
    b.add_argument("--method", help="method to run (default: forward)")
    b.add_argument("--input", action="append", default=[], metavar="FILE", help="inputs as for 'run'")
    b.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd", help="external data file(s)")
    b.add_argument("--repeat", type=int, default=20, help="timed calls (default 20)")
    b.add_argument("--profile", action="store_true", help="print the time per operator / XNNPACK node")
    b.set_defaults(fn=cmd_bench)

    from pterun.llm.cli import add_generate_parser
    add_generate_parser(sub)

    o = sub.add_parser("ops", help="list registered operators, or check a program's operators")
    o.add_argument("file", nargs="?", help="a .pte program to check")
    o.set_defaults(fn=cmd_ops)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, format="%(name)s: %(message)s")
    try:
        if args.threads is not None:
            pterun.Runtime(num_threads=args.threads)  # process-wide, like the environment variable
        if args.engine is not None:
            os.environ["PTERUN_ENGINE"] = args.engine  # read by every load_program of this process
        return args.fn(args)
    except (PterunError, OSError, ValueError, TypeError, KeyError) as e:
        if args.debug:
            raise
        msg = str(e) if not isinstance(e, KeyError) or isinstance(e, PterunError) else str(e.args[0])
        print(f"pterun: error: {type(e).__name__}: {msg}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pterun: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
