#!/usr/bin/env python
"""Export the portable (non-delegated) ``.pte`` test fixtures for pterun.

Run with the *reference* virtualenv (torch + executorch + torchvision); pterun
itself never depends on torch:

    .ref/bin/python tools/export_fixtures.py              # all fixtures + demo model
    .ref/bin/python tools/export_fixtures.py mlp cnn      # only some of them
    .ref/bin/python tools/export_fixtures.py demo         # only the packaged demo model

For every fixture NAME the script

1. builds a small model with fixed seeds (eval mode),
2. exports it without any delegate:
   ``torch.export.export`` -> ``executorch.exir.to_edge`` -> ``.to_executorch()``,
3. writes ``tests/fixtures/NAME.pte``,
4. runs the recorded calls, in order, on ONE program loaded by the reference
   runtime (``executorch.runtime.Runtime``) and writes the inputs and the
   reference outputs to ``tests/fixtures/NAME.npz``:

   * ``__manifest__``: ``np.array(json)`` with a list of calls
     ``[{"method": ..., "inputs": [...], "outputs": [...]}, ...]``; each value is
     ``{"array": KEY}`` (a tensor stored under KEY in the same npz) or
     ``{"int": 3}`` / ``{"float": 1.5}`` / ``{"bool": true}`` / ``{"none": null}``;
   * ``c<call>_in<i>`` / ``c<call>_out<j>``: the tensors, in their exact dtype.

It also writes ``tests/fixtures/OPERATORS.txt`` (the union of the operators used
by the fixtures written, with the fixtures that use each; when only some
fixtures are regenerated the entries of the others are kept) and
``tests/fixtures/README.md``, plus the demo model shipped inside the package
(``src/pterun/models/demo.pte``, ``demo_input.npy``, ``demo_expected.npz``).

As a sanity check every reference output is compared with eager PyTorch and the
maximum difference is printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

warnings.filterwarnings("ignore")

from fixture_models import FIXTURES, Fixture, make_demo  # noqa: E402  (tools/ is on sys.path when run)

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"
MODELS_DIR = REPO / "src" / "pterun" / "models"
REGEN_CMD = ".ref/bin/python tools/export_fixtures.py"


# --------------------------------------------------------------------------------------
# Export / run / record machinery
# --------------------------------------------------------------------------------------


def export_program(fx: Fixture):
    """torch.export each method, then to_edge (no delegate) -> to_executorch."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    programs = {}
    for name, spec in fx.methods.items():
        programs[name] = torch.export.export(
            spec.module, spec.example_inputs, dynamic_shapes=spec.dynamic_shapes, strict=False
        )
    edge = to_edge(programs, constant_methods=fx.constant_methods)
    passes = []
    if fx.init_buffers:
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        passes.append(InitializedMutableBufferPass(fx.init_buffers))
    config = {}
    if not (fx.plan_inputs and fx.plan_outputs):
        from executorch.exir.passes import MemoryPlanningPass

        config["memory_planning_pass"] = MemoryPlanningPass(
            alloc_graph_input=fx.plan_inputs, alloc_graph_output=fx.plan_outputs
        )
    return edge.to_executorch(ExecutorchBackendConfig(passes=passes, **config))


def program_operators(et_prog) -> List[str]:
    """Operator names ("ns::name.overload", or "ns::name" for an empty overload) of all plans."""
    ops = set()
    for plan in et_prog.executorch_program.execution_plan:
        for op in plan.operators:
            ops.add(f"{op.name}.{op.overload}" if op.overload else op.name)
    return sorted(ops)


def encode_value(v, key: str, arrays: Dict[str, np.ndarray]) -> Dict[str, Any]:
    """Manifest entry for a value; tensors go to ``arrays[key]`` (bf16 as its uint16 bits, NumPy has no bf16).
    Every exporter in tools/ records through this one function."""
    if isinstance(v, torch.Tensor):
        t = v.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            arrays[key] = t.view(torch.uint16).numpy().copy()
            return {"array": key, "dtype": "bfloat16"}
        arrays[key] = t.numpy().copy()
        return {"array": key}
    if v is None:
        return {"none": None}
    if isinstance(v, bool):  # before int: bool is an int subclass
        return {"bool": bool(v)}
    if isinstance(v, int):
        return {"int": int(v)}
    if isinstance(v, float):
        return {"float": float(v)}
    raise TypeError(f"cannot record value of type {type(v)}")


def eager_outputs(fx: Fixture) -> List[List[Any]]:
    """Run the calls on fresh copies of the eager modules (for sanity checking)."""
    import copy

    mods = {name: copy.deepcopy(spec.module) for name, spec in fx.methods.items()}
    outs = []
    with torch.no_grad():
        for method, inputs in fx.calls:
            if method in mods:
                r = mods[method](*[i.clone() if isinstance(i, torch.Tensor) else i for i in inputs])
                outs.append(list(r) if isinstance(r, (tuple, list)) else [r])
            else:  # constant method
                outs.append([fx.constant_methods[method]])
    return outs


def max_diff(a, b) -> float:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if a.dtype == torch.bool or not a.is_floating_point():
            return float((a != b).sum())
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return float(abs(float(a) - float(b)))
    return 0.0 if a == b else math.inf


def build_and_record(name: str, fx: Fixture, pte_path: Path):
    """Export ``fx`` to ``pte_path``, run it with the reference runtime, return (manifest, arrays, ops)."""
    from executorch.runtime import Runtime

    et_prog = export_program(fx)
    pte_path.parent.mkdir(parents=True, exist_ok=True)
    pte_path.write_bytes(et_prog.buffer)
    ops = program_operators(et_prog)

    program = Runtime.get().load_program(str(pte_path))
    methods = {}
    manifest, arrays = [], {}
    ref_outs = []
    for ci, (method, inputs) in enumerate(fx.calls):
        if method not in methods:
            methods[method] = program.load_method(method)
        outs = list(methods[method].execute(inputs))
        ref_outs.append(outs)
        manifest.append(
            {
                "method": method,
                "inputs": [encode_value(v, f"c{ci}_in{i}", arrays) for i, v in enumerate(inputs)],
                "outputs": [encode_value(v, f"c{ci}_out{j}", arrays) for j, v in enumerate(outs)],
            }
        )

    # Sanity check against eager PyTorch.
    worst = 0.0
    for ci, (ref, eager) in enumerate(zip(ref_outs, eager_outputs(fx))):
        if len(ref) != len(eager):
            print(f"  !! call {ci}: {len(ref)} outputs from the runtime, {len(eager)} from eager")
            worst = math.inf
            continue
        for j, (r, e) in enumerate(zip(ref, eager)):
            d = max_diff(r, e)
            if d > 1e-3:
                print(f"  !! call {ci} output {j}: max |ref - eager| = {d}")
            worst = max(worst, d)
    print(f"  eager vs reference runtime: max abs diff {worst:.3g}")
    return manifest, arrays, ops


def write_npz(path: Path, manifest, arrays) -> None:
    np.savez(path, __manifest__=np.array(json.dumps(manifest)), **arrays)


# --------------------------------------------------------------------------------------
# OPERATORS.txt and README.md
# --------------------------------------------------------------------------------------


def read_operator_table(path: Path) -> Dict[str, set]:
    """Parse an existing OPERATORS.txt into {operator: {fixtures}}."""
    table: Dict[str, set] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            op, _, users = line.partition(" ")
            table[op] = set(u for u in users.strip().split(",") if u)
    return table


def write_operator_table(path: Path, fixture_ops: Dict[str, List[str]]) -> None:
    table = read_operator_table(path)
    # forget previous entries of the fixtures we regenerated
    for users in table.values():
        users.difference_update(fixture_ops)
    for fname, ops in fixture_ops.items():
        for op in ops:
            table.setdefault(op, set()).add(fname)
    lines = [
        "# Operators used by the portable fixtures (tests/fixtures/*.pte and src/pterun/models/demo.pte).",
        "# Format: <operator name[.overload]> <comma-separated fixtures>.",
        f"# Generated by: {REGEN_CMD}",
    ]
    for op in sorted(k for k, v in table.items() if v):
        lines.append(f"{op} {','.join(sorted(table[op]))}")
    path.write_text("\n".join(lines) + "\n")


def write_readme(path: Path) -> None:
    lines = [
        "# Portable (non-delegated) `.pte` fixtures",
        "",
        "Generated by `tools/export_fixtures.py` with the reference runtime virtualenv "
        "(torch 2.14.1, executorch 1.5.1, torchvision). Regenerate all of them (and the packaged demo model) with:",
        "",
        "```",
        REGEN_CMD,
        "```",
        "",
        f"or only some: `{REGEN_CMD} mlp cnn` (`demo` selects the packaged demo model).",
        "",
        "Each fixture `NAME` is `NAME.pte` (the program, exported with `torch.export.export` -> "
        "`executorch.exir.to_edge` -> `.to_executorch()`, no delegate) and `NAME.npz`:",
        "",
        "* `__manifest__`: `np.array(json)`, a list of calls to run **in order on one loaded program** "
        '(`[{"method": "forward", "inputs": [...], "outputs": [...]}, ...]`); each value is `{"array": KEY}` '
        '(a tensor stored under KEY, exact dtype) or `{"int": n}` / `{"float": x}` / `{"bool": b}` / `{"none": null}`.',
        "* `c<call>_in<i>` / `c<call>_out<j>`: input / output tensors. Outputs are those of the reference runtime "
        "(`executorch.runtime.Runtime`, portable kernels), which loads one program and shares planned memory "
        "among its methods.",
        "",
        "`OPERATORS.txt` lists every operator used by the fixtures and which fixtures use it.",
        "",
        "Other fixtures in this folder come from their own scripts, with the same NPZ layout:",
        "",
        "* `q_*` (PT2E static int8, 4-bit embedding): `tools/export_quantized_fixtures.py`",
        "* `xnn_*` (XNNPACK-lowered programs; `xnn_delegate_io/` holds per-delegate-call inputs/outputs): "
        "`tools/export_xnnpack_fixtures.py`, see `XNN_README.md`",
        "* `ext_*`, `xnn_ext_*` (weights in `.ptd` files) and `bundled*.bpte`: `tools/export_data_fixtures.py`, "
        "see `DATA_README.md`",
        "* `llm/` (tiny Llama programs and tokenizer): `tools/export_llm_fixtures.py`",
        "* `bf16_*` (bfloat16 programs; bf16 tensors stored as their uint16 bits): `tools/export_bf16_fixtures.py`, "
        "see `BF16_README.md`",
        "",
        "## Fixtures",
        "",
        "| fixture | .pte bytes | contents |",
        "|---|---|---|",
    ]
    for name, builder in FIXTURES.items():
        pte = FIXTURE_DIR / f"{name}.pte"
        size = pte.stat().st_size if pte.exists() else "-"
        desc = FIXTURE_DESCRIPTIONS.get(name) or ""
        lines.append(f"| `{name}` | {size} | {desc} |")
    lines += [
        "",
        "Packaged demo model: `src/pterun/models/demo.pte` with `demo_input.npy` and `demo_expected.npz` "
        "(key `out0`, reference runtime output). " + (FIXTURE_DESCRIPTIONS.get("demo") or ""),
        "",
        "## Notes / simplifications",
        "",
    ]
    lines += [f"* {n}" for n in NOTES]
    path.write_text("\n".join(lines) + "\n")


# Filled with each builder's description (built lazily so the README can list all).
FIXTURE_DESCRIPTIONS: Dict[str, str] = {}

NOTES = [
    "`resnet_small` is hand-built from torchvision `BasicBlock`s with widths 16/32/64/64 instead of "
    "`torchvision.models.ResNet(BasicBlock, [1,1,1,1])` (64..512 channels, ~19 MB of weights).",
    "`stateful`: `count` and `acc` have no serialized initial value (the exporter treats them as "
    "uninitialised; the reference runtime zero-fills planned memory, which the recorded outputs rely on). "
    "`scale` is tagged with `InitializedMutableBufferPass` so its initial value [1,2,3] is stored in the "
    "program's mutable data segment.",
    "`multi_method`: all methods of one program share planned memory in the reference runtime's Program API; "
    "the recorded calls run forward, encode, then the constant methods on one loaded program.",
    "All models are exported with `torch.export.export(..., strict=False)`; `Conv1d` in `cnn` appears as `aten::convolution.out` on 3-D tensors; `nn.SiLU` is decomposed to sigmoid+mul.",
]


# --------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help=f"fixtures to regenerate (default: all); choices: {', '.join(FIXTURES)}, demo"
    )
    args = parser.parse_args(argv)
    names = args.names or list(FIXTURES) + ["demo"]
    unknown = [n for n in names if n not in FIXTURES and n != "demo"]
    if unknown:
        parser.error(f"unknown fixtures: {unknown}")

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    fixture_ops: Dict[str, List[str]] = {}
    failures = []
    for name in names:
        t0 = time.time()
        print(f"== {name}")
        try:
            if name == "demo":
                fx = make_demo()
                manifest, arrays, ops = build_and_record(name, fx, MODELS_DIR / "demo.pte")
                np.save(MODELS_DIR / "demo_input.npy", arrays["c0_in0"])
                np.savez(MODELS_DIR / "demo_expected.npz", out0=arrays["c0_out0"])
                size = (MODELS_DIR / "demo.pte").stat().st_size
            else:
                fx = FIXTURES[name]()
                manifest, arrays, ops = build_and_record(name, fx, FIXTURE_DIR / f"{name}.pte")
                write_npz(FIXTURE_DIR / f"{name}.npz", manifest, arrays)
                size = (FIXTURE_DIR / f"{name}.pte").stat().st_size
        except Exception as e:  # keep going; report at the end
            import traceback

            traceback.print_exc()
            failures.append((name, repr(e)))
            continue
        fixture_ops[name] = ops
        print(f"  {size} bytes, {len(fx.calls)} call(s), {time.time() - t0:.1f}s")
        print("  operators: " + ", ".join(ops))

    # descriptions for the README (cheap: builders only construct small modules)
    for name, builder in list(FIXTURES.items()) + [("demo", make_demo)]:
        FIXTURE_DESCRIPTIONS[name] = builder().description
    write_operator_table(FIXTURE_DIR / "OPERATORS.txt", fixture_ops)
    write_readme(FIXTURE_DIR / "README.md")

    if failures:
        print("FAILED:")
        for name, err in failures:
            print(f"  {name}: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
