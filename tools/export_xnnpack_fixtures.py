#!/usr/bin/env python
"""Export the XNNPACK-delegated ``.pte`` test fixtures for pterun.

Run with the *reference* virtualenv (torch + executorch + torchvision + torchao); pterun itself never
depends on torch::

    .ref/bin/python tools/export_xnnpack_fixtures.py              # every fixture
    .ref/bin/python tools/export_xnnpack_fixtures.py mlp qint8_cnn  # only some of them

For every fixture NAME the script

1. builds a small model with fixed seeds (eval mode), quantizing it first where the fixture asks,
2. lowers it with ``XnnpackPartitioner``:
   ``torch.export.export`` -> ``to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])``
   -> ``.to_executorch()``,
3. writes ``tests/fixtures/xnn_NAME.pte``,
4. runs the recorded calls, in order, on ONE program loaded by the reference runtime
   (``executorch.runtime.Runtime``) and writes the inputs and the reference outputs to
   ``tests/fixtures/xnn_NAME.npz`` (``__manifest__`` = ``np.array(json)`` listing the calls
   ``[{"method", "inputs": [{"array": KEY}...], "outputs": [...]}]``, tensors under ``c<call>_in<i>`` /
   ``c<call>_out<j>``, the same format as the portable fixtures),
5. for programs that are more than one delegate call, also writes
   ``tests/fixtures/xnn_delegate_io/NAME.npz``: the inputs each ``executorch_call_delegate`` receives
   (captured by running the lowered edge program eagerly) and the outputs of the delegated subgraph in
   eager PyTorch, keyed ``d<k>_in<i>`` / ``d<k>_out<j>`` for the k-th delegate call of the first
   recorded call. These let the XNNPACK delegate be tested on its own, without the interpreter.

As a sanity check every reference output is compared with eager PyTorch and the max difference printed.

The fixtures (their models and builders, registered in ``FIXTURES``) live in ``tools/xnnpack_fixture_models.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from export_fixtures import encode_value  # tools/ is on sys.path when run
from xnnpack_fixture_models import (  # noqa: F401  (re-exported: the fixtures, their models and helpers)
    CNN,
    FIXTURES,
    GRU,
    MLP,
    ConvNet,
    DynReshape,
    Fixture,
    HalfNet,
    Linear4,
    Mixed,
    Ops,
    QOps,
    SmallCNN,
    _pt2e,
    fixture,
    make_8da4w,
    make_8da4w_channel,
    make_cnn,
    make_dynamic_reshape,
    make_fp16,
    make_gru,
    make_mixed,
    make_mlp,
    make_mlp_dynamic,
    make_mobilenet_v2,
    make_ops,
    make_qdint8_conv,
    make_qdint8_mlp,
    make_qint8_cnn,
    make_qint8_ops,
    make_transformer,
    randn,
    randomize_batchnorm,
    rng,
)

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"
DELEGATE_IO_DIR = FIXTURE_DIR / "xnn_delegate_io"
REGEN_CMD = ".ref/bin/python tools/export_xnnpack_fixtures.py"


# --------------------------------------------------------------------------------------------------------
# Export, record, save
# --------------------------------------------------------------------------------------------------------


def lower(fx: Fixture):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = fx.exported
    if ep is None:
        ep = torch.export.export(fx.module, fx.example_inputs, dynamic_shapes=fx.dynamic_shapes)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return ep, edge, edge.to_executorch()


def run_reference(pte_path: Path, calls: list) -> list:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte_path))
    method = program.load_method("forward")
    results = []
    for inputs in calls:
        outs = method.execute(list(inputs))
        results.append([o.clone() if isinstance(o, torch.Tensor) else o for o in outs])
    return results


def capture_delegate_io(edge, inputs: tuple) -> list:
    """Run the lowered edge program eagerly, recording each executorch_call_delegate's inputs and outputs."""
    records = []
    gm = edge.exported_program().module()

    class Recorder(torch.fx.Interpreter):
        def call_function(self, target, args, kwargs):
            out = super().call_function(target, args, kwargs)
            if "executorch_call_delegate" in str(target):
                outs = out if isinstance(out, (tuple, list)) else (out,)
                records.append(([a.clone() for a in args[1:] if isinstance(a, torch.Tensor)],
                                [o.clone() for o in outs]))
            return out

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return records


def count_delegate_calls(et) -> tuple[int, int]:
    """(delegate calls, kernel calls) in the first plan of the emitted program."""
    kinds = [type(ins.instr_args).__name__ for chain in et.executorch_program.execution_plan[0].chains
             for ins in chain.instructions]
    return kinds.count("DelegateCall"), kinds.count("KernelCall")


def export_one(name: str) -> None:
    fx = FIXTURES[name]()
    fx.module.eval()
    ep, edge, et = lower(fx)
    pte = FIXTURE_DIR / f"xnn_{name}.pte"
    pte.write_bytes(et.buffer)
    results = run_reference(pte, fx.calls)

    arrays: dict = {}
    manifest = []
    worst = 0.0
    for c, (inputs, outs) in enumerate(zip(fx.calls, results)):
        manifest.append({
            "method": "forward",
            "inputs": [encode_value(v, f"c{c}_in{i}", arrays) for i, v in enumerate(inputs)],
            "outputs": [encode_value(v, f"c{c}_out{j}", arrays) for j, v in enumerate(outs)],
        })
        with torch.no_grad():
            eager = ep.module()(*inputs)
        eager = eager if isinstance(eager, (tuple, list)) else (eager,)
        for e, o in zip(eager, outs):
            if isinstance(e, torch.Tensor) and e.is_floating_point():
                diff = (e.float() - o.float()).abs().max().item()
                worst = max(worst, diff / max(e.float().abs().max().item(), 1e-6))
    arrays["__manifest__"] = np.array(json.dumps(manifest))
    np.savez_compressed(FIXTURE_DIR / f"xnn_{name}.npz", **arrays)

    n_delegate, n_kernel = count_delegate_calls(et)
    line = f"{name}: {len(et.buffer)} bytes, {n_delegate} delegate call(s), {n_kernel} kernel call(s), " \
           f"max rel diff ref vs eager {worst:.2e}"
    if n_delegate > 1 or n_kernel > 0:
        records = capture_delegate_io(edge, fx.calls[0])
        io: dict = {}
        dmanifest = []
        for k, (ins, outs) in enumerate(records):
            dmanifest.append({"inputs": [encode_value(v, f"d{k}_in{i}", io) for i, v in enumerate(ins)],
                              "outputs": [encode_value(v, f"d{k}_out{j}", io) for j, v in enumerate(outs)]})
        io["__manifest__"] = np.array(json.dumps(dmanifest))
        DELEGATE_IO_DIR.mkdir(exist_ok=True)
        np.savez_compressed(DELEGATE_IO_DIR / f"{name}.npz", **io)
        line += f", recorded I/O of {len(records)} delegate call(s)"
    print(line, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"fixtures to export (default: all of {sorted(FIXTURES)})")
    args = ap.parse_args(argv)
    names = args.names or list(FIXTURES)
    unknown = [n for n in names if n not in FIXTURES]
    if unknown:
        ap.error(f"unknown fixtures {unknown}; choose from {sorted(FIXTURES)}")
    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    failed = []
    for name in names:
        try:
            export_one(name)
        except Exception as e:  # noqa: BLE001  (keep going: one model the toolchain rejects must not block the rest)
            failed.append(name)
            print(f"{name}: FAILED: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
