"""Every XNNPACK fixture (``xnn_*.pte`` with its ``.npz``) through the Runtime on one engine, against the outputs
ExecuTorch recorded, with the test suite's tolerances; one line per fixture, then a ``SUMMARY`` line.

Example (what ``tools/aarch64_check.sh`` runs inside its arm64 chroot, from a copy of the checkout's tests)::

    $ python tools/aarch64_fixtures.py --engine litert tests/fixtures
    xnn_8da4w              litert  pass  max err 0 x scale  (allowed rel 0.001)  bitwise
    xnn_cnn                numpy   pass  max err 1.7e-07 x scale  (allowed rel 0.0001)  not bitwise
    ...
    SUMMARY 17/17 pass, fp32 max err 4.8e-07 x scale (xnn_mobilenet_v2), worst 0.67 of allowed (xnn_fp16), bitwise 8/17

The second column is the engine that ran the fixture's delegates (LiteRT hands xnn_cnn and xnn_fp16 to NumPy, as
the suite expects); "fp32 max err" is over the float32 graphs, "of allowed" over every fixture.

Tolerances and expected engines come from ``tests/test_xnnpack_fixtures.py`` (imported from the fixtures'
folder's parent), so this check and the test suite cannot drift apart: relative to each output's scale, 1e-4 for
float graphs, 1e-3 for quantized and fp16 ones, one quantization step for outputs dequantized from static int8.
Exit status 1 when a fixture fails, or runs on another engine than the suite expects.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import numpy as np


def _errors(got: np.ndarray, want: np.ndarray, tol: tuple[str, float]) -> tuple[float, bool, float]:
    """(max error relative to the output's scale, bitwise equal, max error / what ``tol`` allows) of one output
    (float, same shape); exact dtypes count mismatches instead."""
    same = got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    if want.dtype.kind not in "fV" or got.shape != want.shape:
        n = float(np.count_nonzero(got != want)) if got.shape == want.shape else float("inf")
        return n, same, n
    g, w = got.astype(np.float64), want.astype(np.float64)
    scale = max(float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0)), 1e-30)
    err = float(np.max(np.where((np.isnan(g) & np.isnan(w)) | (g == w), 0.0, np.abs(g - w)), initial=0.0))
    return err / scale, same, err / (tol[1] if tol[0] == "abs" else tol[1] * scale)


def load_calls(npz: Path) -> list[dict]:
    """The calls recorded in ``npz`` (the format of tests/fixtures_util.py's ``load_calls``, read from any folder)."""
    with np.load(npz, allow_pickle=False) as z:
        manifest = json.loads(str(z["__manifest__"]))
        arrays = {k: z[k] for k in z.files if k != "__manifest__"}

    def decode(v):
        if "array" in v:
            return arrays[v["array"]]
        (kind, value), = v.items()
        return {"int": int, "float": float, "bool": bool, "none": lambda _: None}[kind](value)

    return [{"inputs": [decode(v) for v in c["inputs"]], "outputs": [decode(v) for v in c["outputs"]]}
            for c in manifest if c["method"] == "forward"]


def check(path: Path, engine: str, T) -> tuple[bool, float, float, bool, str]:
    """(passed, max error relative to the outputs' scale, max error over what is allowed, every output bitwise
    equal, the line to print) for one fixture."""
    from pterun import Runtime
    from pterun.format.program import read_program

    name = path.stem.removeprefix("xnn_")
    ptd = path.with_suffix(".ptd")
    method = Runtime.get().load_program(path, data_path=ptd if ptd.exists() else None,
                                        engine=engine).load_method("forward")
    used = sorted({d.engine for d in method.delegates})
    want_engine = T._expected_engine(name, engine)
    notes = []
    if used != [want_engine]:
        notes.append(f"ran on {used}, the suite expects {want_engine!r}: "
                     f"{[d.reason for d in method.delegates if d.reason]}")
    pf = read_program(path.read_bytes(), path.name)
    plan = pf.plan(pf.plan_index("forward"))
    # the end-to-end test's tolerance, output by output; a fixture it does not list (xnn_ext_mlp, whose weights
    # are in its .ptd) is a float graph: 1e-4 of scale, as in test_external_data
    graph = T._graph(pf, plan.delegates[0]) if T._is_single_delegate(plan) and name in T.XNN_FIXTURES else None
    worst, worst_vs_allowed, bitwise, tols = 0.0, 0.0, True, set()
    calls = load_calls(path.with_suffix(".npz"))
    if not calls:
        notes.append("no recorded call of forward")
    for k, call in enumerate(calls):
        outputs = method.execute(call["inputs"])
        for j, (got, want) in enumerate(zip(outputs, call["outputs"], strict=True)):
            got = np.asarray(got)
            if graph is not None:
                tol = T._tolerance(name, graph, plan.chains[0][0][2].index(plan.outputs[j]))
            else:
                tol = ("rel", 1e-3 if name == "fp16" else 1e-4)
            tols.add(f"{tol[0]} {tol[1]:.3g}")
            err, same, vs_allowed = _errors(got, want, tol)
            worst, worst_vs_allowed, bitwise = max(worst, err), max(worst_vs_allowed, vs_allowed), bitwise and same
            try:
                T._check(got, want, tol, f"call {k} output {j}")
            except AssertionError as e:
                notes.append(str(e)[:300])
    ok = not notes
    line = (f"{path.stem:22s} {','.join(used):7s} {'pass' if ok else 'FAIL'}  max err {worst:.2g} x scale  "
            f"(allowed {', '.join(sorted(tols))})  {'bitwise' if bitwise else 'not bitwise'}")
    return ok, worst, worst_vs_allowed, bitwise, line + "".join(f"\n    {n}" for n in notes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("fixtures", type=Path, help="the tests/fixtures folder (its parent holds the tests)")
    p.add_argument("--engine", choices=["numpy", "litert"], required=True)
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.fixtures.resolve().parent))
    import test_xnnpack_fixtures as T  # the suite's tolerances, from the tests folder

    paths = sorted(args.fixtures.glob("xnn_*.pte"))
    if not paths:
        print(f"no xnn_*.pte in {args.fixtures}")
        return 1
    passed, bitwise = 0, 0
    fp32, fp32_name, ratio, ratio_name = 0.0, "-", 0.0, "-"
    for path in paths:
        try:
            ok, err, vs_allowed, same, line = check(path, args.engine, T)
        except Exception:  # noqa: BLE001 - a crash fails this fixture, not the whole check
            ok, err, vs_allowed, same, line = False, 0.0, 0.0, False, f"{path.stem:22s} FAIL\n{traceback.format_exc()}"
        print(line, flush=True)
        passed += ok
        bitwise += same
        name = path.stem.removeprefix("xnn_")
        if name not in T.QUANTIZED_FIXTURES and name != "fp16" and err > fp32:
            fp32, fp32_name = err, path.stem
        if vs_allowed > ratio:
            ratio, ratio_name = vs_allowed, path.stem
    # float32 graphs: how far from the recorded outputs (x86's); every fixture: how near its tolerance
    print(f"SUMMARY {passed}/{len(paths)} pass, fp32 max err {fp32:.2g} x scale ({fp32_name}), "
          f"worst {ratio:.2g} of allowed ({ratio_name}), bitwise {bitwise}/{len(paths)}")
    return 0 if passed == len(paths) else 1


if __name__ == "__main__":
    sys.exit(main())
