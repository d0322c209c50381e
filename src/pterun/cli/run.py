"""``pterun run`` and ``pterun demo``: one method on saved or made-up inputs, and the packaged demo model.

Example::

    $ pterun run model.pte --input x.npy --output out.npz
    $ pterun demo --repeat 20
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from pterun.cli import ctrlc
from pterun.cli.inputs import prepare
from pterun.cli.output import SHOW_VALUES, dump, json_value, summary, values_text

__all__ = ["cmd_run", "cmd_demo", "MODELS"]

MODELS = Path(__file__).parent.parent / "models"


def cmd_run(args) -> int:
    method, method_name, load_s, inputs, source = prepare(args)
    t0 = time.perf_counter()
    outputs = method.execute(inputs)
    run_s = time.perf_counter() - t0
    saved = None
    if args.output:
        saved = args.output if args.output.endswith(".npz") else args.output + ".npz"  # np.savez adds it anyway
        np.savez(saved, **{f"out{i}": np.asarray(o) for i, o in enumerate(outputs)})
    if args.json:
        print(dump({"file": args.file, "method": method_name, "inputs_from": source,
                    "inputs": [{k: v for k, v in json_value(x).items() if k != "values"} for x in inputs],
                    "outputs": [json_value(o) for o in outputs], "load_ms": load_s * 1e3, "run_ms": run_s * 1e3,
                    "saved_to": saved}))
        return 0
    print(f"inputs: {source}")
    for i, x in enumerate(inputs):
        print(f"input {i}: {summary(x)}")
    for i, o in enumerate(outputs):
        print(f"output {i}: {summary(o)}")
        if isinstance(o, np.ndarray) and 0 < o.size <= SHOW_VALUES and o.dtype.kind in "fV":
            print(values_text(o))
    print(f"method {method_name!r}: load {load_s * 1e3:.1f} ms, run {run_s * 1e3:.2f} ms")
    if saved:
        print(_wrote(len(outputs), saved))
    return 0


def _wrote(n: int, path: str) -> str:
    """'wrote 1 output to out.npz (as out0)', 'wrote 3 outputs to out.npz (as out0, out1, out2)', 'as out0 ... out9'."""
    names = [f"out{i}" for i in range(n)]
    shown = ", ".join(names) if n <= 3 else f"{names[0]} ... {names[-1]}"
    return f"wrote {n} output{'' if n == 1 else 's'} to {path}" + (f" (as {shown})" if n else "")


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
        ctrlc.check()
        t0 = time.perf_counter()
        method.execute([x])
        times.append(time.perf_counter() - t0)
    err = float(np.max(np.abs(out - expected)) / max(float(np.max(np.abs(expected))), 1e-30))
    print(f"demo model: {path.name} ({path.stat().st_size} bytes), a small image classifier")
    print(f"input:  {summary(x)}")
    print(f"output: {summary(out)}")
    print(f"class scores: {np.array2string(out[0], precision=4, max_line_width=200)}")
    print(f"predicted class: {int(np.argmax(out[0]))}")
    print(f"matches ExecuTorch's recorded output: {'yes' if err <= 1e-4 else 'NO'} (max error {err:.2e} of scale)")
    print(f"load {load_s * 1e3:.1f} ms, first call {first_s * 1e3:.2f} ms, median of {args.repeat} calls "
          f"{np.median(times) * 1e3:.2f} ms on {args.runtime.num_threads} thread(s)")
    return 0 if err <= 1e-4 else 1
