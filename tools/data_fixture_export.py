"""What tools/export_data_fixtures.py exports: the models (MLP, and the bundled program's Affine and Encode),
the export of a program with its constants in a ``.ptd`` (portable and XNNPACK), recording a call with the
reference runtime, the bundled programs and their verification, and the error-path probes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"

PTD_TAG_XNN = "xnn_ext_mlp"  # delegate_constant_tag used for the XNNPACK fixture (-> xnn_ext_mlp.ptd)


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------


class MLP(nn.Module):
    """Linear(8, hidden) - ReLU - Linear(hidden, 4); parameter names fc1.*, fc2.*."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.fc1 = nn.Linear(8, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, 4)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Affine(nn.Module):
    """forward of the bundled program: relu(x @ W + b)."""

    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.randn(4, 3))
        self.b = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return torch.relu(x @ self.W + self.b)


class Encode(nn.Module):
    """encode of the bundled program: tanh(x) * 2."""

    def forward(self, x):
        return torch.tanh(x) * 2


def seeded_mlp(seed: int, hidden: int = 16) -> MLP:
    torch.manual_seed(seed)
    return MLP(hidden).eval()


def randn(seed: int, *shape) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


# --------------------------------------------------------------------------------------
# Export helpers
# --------------------------------------------------------------------------------------


def _program_and_data(et_prog, tag: str) -> Tuple[bytes, bytes]:
    """Serialize ``et_prog`` with ``write_to_file`` / ``write_tensor_data_to_file``; return
    (pte bytes, bytes of ``<tag>.ptd``). Checks that exactly that one data file is produced."""
    with tempfile.TemporaryDirectory() as d:
        pte = Path(d) / "program.pte"
        with open(pte, "wb") as f:
            et_prog.write_to_file(f)
        et_prog.write_tensor_data_to_file(d)
        produced = sorted(p.name for p in Path(d).glob("*.ptd"))
        if produced != [f"{tag}.ptd"]:
            raise RuntimeError(f"expected exactly {tag}.ptd, the exporter wrote {produced}")
        pte_bytes, ptd_bytes = pte.read_bytes(), (Path(d) / f"{tag}.ptd").read_bytes()
    # Sanity: same bytes as the in-memory routes.
    assert pte_bytes == et_prog.buffer
    assert ptd_bytes == bytes(et_prog._tensor_data[tag])
    return pte_bytes, ptd_bytes


def export_external_mlp(model: MLP, example: torch.Tensor) -> Tuple[bytes, bytes]:
    """Portable (no delegate) export with every constant moved to the default external file."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    ep = torch.export.export(model, (example,), strict=False)
    et_prog = to_edge(ep).to_executorch(ExecutorchBackendConfig(external_constants=True))
    return _program_and_data(et_prog, "_default_external_constant")


def export_xnnpack_external_mlp(model: MLP, example: torch.Tensor) -> Tuple[bytes, bytes]:
    """XNNPACK lowering with the delegate constants tagged for an external ``.ptd``.

    ``delegate_external_constants_pass_unlifted`` must run on an *unlifted* module (``ep.module()``,
    parameters are ``get_attr`` nodes); the tag lands in ``node.meta["custom"]`` and survives the
    re-export. The XNNPACK serializer then puts the constant's named data into the external data
    store under that tag instead of the PTE named-data store.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes.external_constants_pass import (
        delegate_external_constants_pass_unlifted,
    )

    unlifted = torch.export.export(model, (example,), strict=True).module()
    res = delegate_external_constants_pass_unlifted(module=unlifted, gen_tag_fn=lambda node: PTD_TAG_XNN)
    assert res.modified, "no get_attr node tagged"
    ep = torch.export.export(unlifted, (example,), strict=True)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    # external_constants would also move non-delegated constants; there are none here (fully delegated).
    et_prog = edge.to_executorch(ExecutorchBackendConfig())
    return _program_and_data(et_prog, PTD_TAG_XNN)


def record_call(pte: Path, ptd: Path, inputs: List[torch.Tensor], eager: nn.Module, npz: Path) -> float:
    """Run ``forward`` once with the reference runtime (program + data file) and write the NPZ."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte), data_path=str(ptd))
    outs = list(program.load_method("forward").execute(inputs))
    arrays: Dict[str, np.ndarray] = {}
    entry = {"method": "forward", "inputs": [], "outputs": []}
    for i, t in enumerate(inputs):
        arrays[f"c0_in{i}"] = t.detach().contiguous().numpy().copy()
        entry["inputs"].append({"array": f"c0_in{i}"})
    for j, t in enumerate(outs):
        arrays[f"c0_out{j}"] = t.detach().contiguous().numpy().copy()
        entry["outputs"].append({"array": f"c0_out{j}"})
    np.savez(npz, __manifest__=np.array(json.dumps([entry])), **arrays)
    with torch.no_grad():
        ref = eager(*inputs)
    return float((outs[0].double() - ref.double()).abs().max())


# --------------------------------------------------------------------------------------
# Bundled program
# --------------------------------------------------------------------------------------


def export_bundled(perturb: bool) -> bytes:
    """Two-method program + 3 test cases per method; ``perturb`` spoils encode case 1."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer,
    )
    from executorch.exir import to_edge

    torch.manual_seed(3)
    modules = {"forward": Affine().eval(), "encode": Encode().eval()}
    shapes = {"forward": (2, 4), "encode": (3, 5)}
    eps = {
        name: torch.export.export(mod, (torch.randn(*shapes[name]),), strict=False)
        for name, mod in modules.items()
    }
    et_prog = to_edge(eps).to_executorch()

    suites = []
    for mi, name in enumerate(["forward", "encode"]):
        cases = []
        for ci in range(3):
            x = randn(100 + 10 * mi + ci, *shapes[name])
            with torch.no_grad():
                y = modules[name](x).clone()
            if perturb and name == "encode" and ci == 1:
                y[0, 0] += 0.5
            cases.append(MethodTestCase(inputs=[x], expected_outputs=[y]))
        suites.append(MethodTestSuite(method_name=name, test_cases=cases))
    return serialize_from_bundled_program_to_flatbuffer(BundledProgram(et_prog, suites))


def verify_bundled(buf: bytes) -> List[Tuple[str, int, str]]:
    """Run every test case through the reference runtime; return (method, case, result) rows."""
    from executorch.extension.pybindings.portable_lib import _load_bundled_program_from_buffer

    module = _load_bundled_program_from_buffer(buf)
    rows = []
    for name in ["forward", "encode"]:
        for ci in range(3):
            try:
                outs = module.verify_result_with_bundled_expected_output(name, ci)
                rows.append((name, ci, f"OK ({len(outs)} output(s), shape {list(outs[0].shape)})"))
            except Exception as e:  # noqa: BLE001 - report whatever the reference raises
                rows.append((name, ci, f"{type(e).__name__}: {e}"))
    return rows


# --------------------------------------------------------------------------------------
# Error-path probes (subprocess: a missing XNNPACK .ptd segfaults the reference runtime)
# --------------------------------------------------------------------------------------

_PROBE = r"""
import sys, torch
from executorch.runtime import Runtime
pte, ptd = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
try:
    program = Runtime.get().load_program(pte, data_path=ptd)
    method = program.load_method("forward")
    method.execute([torch.zeros(2, 8)])
    print("RESULT: ran fine")
except Exception as e:
    print("RESULT:", type(e).__name__, e)
"""


def probe(pte: Path, ptd: Optional[Path]) -> str:
    args = [sys.executable, "-c", _PROBE, str(pte)] + ([str(ptd)] if ptd else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    log = [
        line.strip()
        for line in (p.stdout + p.stderr).splitlines()
        if line.startswith("[") and "cpuinfo" not in line
    ]
    result = [line[len("RESULT: "):] for line in p.stdout.splitlines() if line.startswith("RESULT: ")]
    if p.returncode != 0:
        sig = ""
        if p.returncode < 0:
            import signal

            sig = f" ({signal.Signals(-p.returncode).name})"
        result.append(f"process died with return code {p.returncode}{sig}")
    return "; ".join(result + [f"log: {' | '.join(log)}"] if log else result)

