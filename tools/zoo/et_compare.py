#!/usr/bin/env python
"""Where pterun first parts from ExecuTorch, instruction by instruction, on one call of a program.

Two steps, like the rest of the zoo: record what every instruction of ExecuTorch's run wrote (its ETDump
debug buffer), with the reference toolchain; then run pterun's trace on the same inputs (torch is never
imported by the second step) and compare::

    .ref/bin/python tools/zoo/et_compare.py record ~/.cache/pterun-zoo/swin_t/xnn_8da4w.pte
    python tools/zoo/et_compare.py check ~/.cache/pterun-zoo/swin_t/xnn_8da4w.pte --engine litert

The inputs are the zoo case's (``NAME.npz`` beside the program: ``in0``, ``in1``, ...) or ``--inputs FILE.npz``
with the same keys. ``record`` writes ``NAME.et.npz`` beside the program (or ``--ref``). ``check`` prints one
line per method output and per instruction whose outputs are not ExecuTorch's bit for bit (the share of
elements that differ and the largest difference relative to the largest ExecuTorch value), then the first
such instruction. ``check --substitute OP`` runs the operator ``OP`` as ExecuTorch's recorded outputs (its n-th
call gets what the n-th instruction running it wrote) and compares the method's outputs: whether everything
but that operator is ExecuTorch's bit for bit.

ExecuTorch logs a DelegateCall's arguments, inputs then outputs; pterun's trace holds the outputs, which are
matched to the last ones. A KernelCall's outputs are matched by shape and dtype. Only the first chain is
compared, and an instruction that runs more than once is compared on its first run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np


def _inputs(pte: Path, path: Path | None) -> list[np.ndarray]:
    with np.load(path or pte.with_suffix(".npz")) as z:
        keys = sorted((k for k in z.files if k.startswith("in")), key=lambda k: int(k[2:]))
        return [z[k] for k in keys]


def record(pte: Path, ref: Path, inputs: list[np.ndarray]) -> None:
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  registers llama:: kernels
    import executorch.kernels.quantized  # noqa: F401
    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(pte), enable_etdump=True, debug_buffer_size=1 << 30)
    outs = module.run_method("forward", tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs))
    arrays = {f"out{j}": o.detach().numpy().copy() for j, o in enumerate(outs) if isinstance(o, torch.Tensor)}
    with tempfile.TemporaryDirectory() as tmp:
        dump, buf = os.path.join(tmp, "run.etdp"), os.path.join(tmp, "run.bin")
        module.write_etdump_result_to_file(dump, buf)
        for block in Inspector(etdump_path=dump, debug_buffer_path=buf).event_blocks:
            if block.name != "Execute":
                continue
            for e in block.events:
                data = [d for d in (e.debug_data or ()) if isinstance(d, torch.Tensor)]
                if data and f"i{e._instruction_id}_0" not in arrays:
                    for j, d in enumerate(data):
                        arrays[f"i{e._instruction_id}_{j}"] = d.detach().numpy().copy()
    np.savez(ref, **arrays)
    print(f"recorded what {len({k.split('_')[0] for k in arrays if k[0] == 'i'})} instructions wrote to {ref}")


def _compare(got: np.ndarray, want: np.ndarray) -> str | None:
    """None when bit for bit equal, else what differs."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"):
        return None
    if got.dtype.kind not in "fc":
        return f"{np.count_nonzero(got != want)} of {got.size} elements differ"
    scale = float(np.abs(want).max()) or 1.0
    diff = float(np.nanmax(np.abs(got.astype(np.float64) - want)))
    return f"{np.mean(got != want):.1%} of elements differ, largest {diff / scale:.1e} of scale"


def _substitute(op: str, et: dict) -> list:
    """Have operator ``op`` return ExecuTorch's recorded outputs instead of computing them: its n-th call gets
    what the n-th instruction running it wrote, from the list of those instructions returned here (filled in
    once the method is loaded). A diagnostic, to see whether the rest is ExecuTorch's."""
    import copy

    from pterun.kernels.registry import KERNELS

    kernel = KERNELS.get(op)
    if kernel is None or kernel.raw:
        raise SystemExit(f"--substitute: no plain kernel is registered for {op!r}")
    where: list[int] = []
    calls = [0]

    def recorded(*args, **kwargs):
        i = where[calls[0] % len(where)]
        calls[0] += 1
        if i not in et:
            raise SystemExit(f"--substitute: ExecuTorch's record has nothing for instruction {i}")
        return et[i][0] if len(et[i]) == 1 else tuple(et[i])

    recorded.__doc__ = kernel.fn.__doc__
    patched = copy.copy(kernel)
    patched.fn = recorded
    KERNELS[op] = patched
    return where


def check(pte: Path, ref: Path, inputs: list[np.ndarray], engine: str | None, merge: bool,
          substitute: str | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from pterun import Runtime

    et: dict[int, list[np.ndarray]] = {}
    final = {}
    with np.load(ref) as z:
        for k in z.files:
            if k.startswith("out"):
                final[int(k[3:])] = z[k]
                continue
            i, j = map(int, k[1:].split("_"))
            et.setdefault(i, {})[j] = z[k]
    et = {i: [d[j] for j in sorted(d)] for i, d in et.items()}
    rt = Runtime(merge_delegates=merge, **({"engine": engine} if engine else {}))
    if substitute:
        from pterun.kernels.registry import KERNELS

        kept = KERNELS.get(substitute)
        where = _substitute(substitute, et)
        try:  # the method resolves its kernels at load: the registry is the tool's own again right after
            method = rt.load_program(str(pte)).load_method("forward")
        finally:
            KERNELS[substitute] = kept
        where += [e.index for e in method.steps if e.chain == 0 and e.name == substitute]
        print(f"{substitute}: ExecuTorch's outputs at instructions {where}")
    else:
        method = rt.load_program(str(pte)).load_method("forward")
    outputs = method.execute(inputs)
    for j, want in sorted(final.items()):
        got = np.asarray(outputs[j])
        print(f"output {j}: " + (_compare(got, want) or "ExecuTorch's bit for bit"))
    if substitute:
        return 0
    trace = method.trace(inputs)
    first, seen, equal = None, set(), 0
    for e in trace:
        if e.chain != 0 or e.node is not None or e.index in seen or e.index not in et or not e.outputs:
            continue
        seen.add(e.index)
        want = et[e.index]
        if e.kind == "DelegateCall":
            pairs = list(zip(e.outputs, want[-len(e.outputs):]))
        else:  # each distinct output against the recorded value of its shape and dtype that it is closest to
            pairs = []
            for got in {(o.shape, o.dtype.str, o.tobytes()): o for o in e.outputs}.values():
                same = [w for w in want if w.shape == got.shape and w.dtype == got.dtype]
                if same:
                    pairs.append((got, min(same, key=lambda w: np.count_nonzero(w != got))))
        diffs = [d for d in (_compare(g, w) for g, w in pairs) if d is not None]
        if not pairs:
            continue
        if not diffs:
            equal += 1
            continue
        print(f"instruction {e.index:5d} {e.name:40s} {'; '.join(diffs)}")
        first = first or (e.index, e.name)
    assert "torch" not in sys.modules, "pterun imported torch"
    print(f"{equal} of {len(seen)} compared instructions bit for bit ExecuTorch's; "
          + (f"the first that is not: {first[0]} ({first[1]})" if first else "all are"))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "check"))
    ap.add_argument("pte", type=Path)
    ap.add_argument("--inputs", type=Path, help="inputs (in0, in1, ...; default: the zoo case's NAME.npz)")
    ap.add_argument("--ref", type=Path, help="ExecuTorch's recorded outputs (default: NAME.et.npz beside the program)")
    ap.add_argument("--engine", choices=("numpy", "litert", "auto"), help="pterun's XNNPACK engine for check")
    ap.add_argument("--merge", action="store_true", help="check: merge delegate calls (off by default: a merged "
                    "call has no per-instruction outputs to compare)")
    ap.add_argument("--substitute", metavar="OP", help="check: run OP (e.g. llama::custom_sdpa.out) as ExecuTorch's "
                    "recorded outputs and compare only the method's outputs")
    args = ap.parse_args(argv)
    ref = args.ref or args.pte.with_suffix(".et.npz")
    inputs = _inputs(args.pte, args.inputs)
    if args.mode == "record":
        record(args.pte, ref, inputs)
        return 0
    return check(args.pte, ref, inputs, args.engine, args.merge, args.substitute)


if __name__ == "__main__":
    sys.exit(main())
