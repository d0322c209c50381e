#!/usr/bin/env python
"""Export the external-data (``.ptd``) and bundled-program (``.bpte``) test fixtures for pterun.

Run with the *reference* virtualenv (torch + executorch); pterun itself never depends on torch::

    .ref/bin/python tools/export_data_fixtures.py            # export everything, verify, dump structure
    .ref/bin/python tools/export_data_fixtures.py --dump     # only dump the structure of the files on disk

Files written to ``tests/fixtures/``:

* ``ext_mlp.pte`` + ``ext_mlp.ptd``: MLP Linear(8,16)-ReLU-Linear(16,4), portable kernels, no delegate,
  exported with ``ExecutorchBackendConfig(external_constants=True)``: the four parameters are EXTERNAL
  tensors of the program, their bytes live in the ``.ptd`` keyed by fully-qualified name
  (``fc1.weight`` ...). ``ext_mlp.npz`` records one ``forward`` call run by the reference runtime
  (``Runtime.get().load_program(pte, data_path=ptd)``).
* ``ext_mlp_wrong.ptd``: the same keys, from a variant MLP Linear(8,17)-ReLU-Linear(17,4) (same module
  names): ``fc1.weight``, ``fc1.bias`` and ``fc2.weight`` have other shapes, so loading ``ext_mlp.pte``
  with it must fail the TensorLayout check.
* ``xnn_ext_mlp.pte`` + ``xnn_ext_mlp.ptd``: the same kind of MLP lowered to XNNPACK, with the
  delegate's constants tagged by ``delegate_external_constants_pass_unlifted`` (node meta
  ``custom["delegate_constant_tag"]``) so that the XNNPACK named data (keys = sha256 hex of the bytes)
  goes to the ``.ptd`` instead of the ``.pte``. ``xnn_ext_mlp.npz`` records one ``forward`` call.
* ``bundled.bpte``: a two-method program (``forward``: relu(x @ W + b), x [2,4];
  ``encode``: tanh(x) * 2, x [3,5]) bundled with 3 test cases per method (expected outputs from
  eager PyTorch). Verified with the reference ``_load_bundled_program_from_buffer(...)
  .verify_result_with_bundled_expected_output``.
* ``bundled_bad.bpte``: the same, but the expected output of ``encode`` test case 1 has element
  [0, 0] perturbed by +0.5, so verification fails for exactly that case.
* ``DATA_README.md``: what these files are, plus an automatically generated structure dump.

NPZ format (same as ``tools/export_fixtures.py``): ``__manifest__`` = ``np.array(json)`` with a list
of calls ``[{"method": "forward", "inputs": [{"array": "c0_in0"}], "outputs": [{"array": "c0_out0"}]}]``;
the tensors are stored under ``c<call>_in<i>`` / ``c<call>_out<j>``.

The reference runtime's behaviour on the error paths (program without its .ptd, wrong .ptd) is
probed in subprocesses (the XNNPACK case crashes the reference runtime) and printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")

REPO = Path(__file__).resolve().parent.parent
FIXTURE_DIR = REPO / "tests" / "fixtures"
REGEN_CMD = ".ref/bin/python tools/export_data_fixtures.py"

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


# --------------------------------------------------------------------------------------
# Structure dump
# --------------------------------------------------------------------------------------

SCALAR_NAMES = {0: "Byte", 1: "Char", 2: "Short", 3: "Int", 4: "Long", 5: "Half", 6: "Float", 7: "Double", 11: "Bool"}


def _enum(v) -> str:
    return getattr(v, "name", str(v))


def dump_ptd(path: Path) -> List[str]:
    from executorch.extension.flat_tensor.serialize.serialize import _deserialize_to_flat_tensor

    data = path.read_bytes()
    root = struct.unpack_from("<I", data, 0)[0]
    ident, magic = data[4:8], data[8:12]
    hlen, fb_off, fb_size, seg_base, seg_size = struct.unpack_from("<IQQQQ", data, 12)
    ft = _deserialize_to_flat_tensor(data[: fb_off + fb_size])
    lines = [
        f"{path.name}: {len(data)} bytes; root offset {root}, {ident.decode()} / {magic.decode()}, header length {hlen}, "
        f"flatbuffer_offset {fb_off}, flatbuffer_size {fb_size}, segment_base_offset {seg_base}, "
        f"segment_data_size {seg_size}; version {ft.version}",
        "  segments: " + ", ".join(f"[{i}] offset {s.offset} size {s.size}" for i, s in enumerate(ft.segments)),
    ]
    for nd in ft.named_data:
        seg = ft.segments[nd.segment_index]
        blob = data[seg_base + seg.offset : seg_base + seg.offset + seg.size]
        lay = nd.tensor_layout
        lay_s = (
            f"scalar_type {SCALAR_NAMES.get(int(lay.scalar_type), lay.scalar_type)}({int(lay.scalar_type)}) "
            f"sizes {list(lay.sizes)} dim_order {list(lay.dim_order)}"
            if lay is not None
            else "no tensor_layout"
        )
        sha = hashlib.sha256(blob).hexdigest()
        lines.append(
            f"  key {nd.key!r}: segment {nd.segment_index} ({seg.size} B, sha256 {sha[:16]}...), {lay_s}"
        )
    return lines


def _xnn_named_keys(blob: bytes) -> List[Tuple[int, int, int, str]]:
    """(index, offset, size, named_key) of XNNGraph.constant_data, via flatc on the packaged schema."""
    import executorch.backends.xnnpack.serialization.xnnpack_graph_serialize as xser
    from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    header = XNNHeader.from_bytes(blob[: XNNHeader.EXPECTED_LENGTH])
    fb = blob[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    with tempfile.TemporaryDirectory() as d:
        schema = Path(d) / "schema.fbs"
        schema.write_bytes((Path(xser.__file__).parent / "schema.fbs").read_bytes())
        binp = Path(d) / "graph.bin"
        binp.write_bytes(fb)
        _flatc_decompile(d, str(schema), str(binp), ["--raw-binary"])
        text = (Path(d) / "graph.json").read_text()
    # flatc writes non-JSON float literals (clamp bounds of +-inf); make them parseable.
    text = re.sub(r"(?<=[:\[,\s])(-?)inf\b", r"\1Infinity", text)
    text = re.sub(r"(?<=[:\[,\s])-?nan\b", "NaN", text)
    graph = json.loads(text)
    out = []
    for i, cd in enumerate(graph.get("constant_data", [])):
        out.append((i, int(cd.get("offset", 0)), int(cd.get("size", 0)), cd.get("named_key", "")))
    return out, header, graph


def dump_pte(path: Path, ptd: Optional[Path] = None) -> List[str]:
    """Raw (segments not restored) view of a .pte: EXTERNAL tensors, segments, named data, delegates."""
    from executorch.exir._serialize import _program as ser
    from executorch.exir.schema import Tensor

    data = path.read_bytes()
    eh = ser._get_extended_header(data)
    has_eh = eh is not None and eh.is_valid()
    prog = ser._flatbuffer_to_program(data[: eh.program_size] if has_eh else data)
    seg_base = eh.segment_base_offset if has_eh else 0

    def segment(i: int) -> bytes:
        s = prog.segments[i]
        return data[seg_base + s.offset : seg_base + s.offset + s.size]

    lines = [
        f"{path.name}: {len(data)} bytes; extended header: "
        + (f"program_size {eh.program_size} segment_base_offset {eh.segment_base_offset}" if has_eh else "none")
    ]
    cs = prog.constant_segment
    lines.append(
        f"  constant_segment: segment_index {cs.segment_index} offsets {list(cs.offsets)}; "
        f"constant_buffer entries {len(prog.constant_buffer)}; "
        f"segments (offset, size) {[(s.offset, s.size) for s in prog.segments]}; "
        f"named_data (key, segment_index) {[(n.key, n.segment_index) for n in (prog.named_data or [])]}; "
        f"backend_delegate_data {len(prog.backend_delegate_data)} inline blob(s)"
    )
    for plan in prog.execution_plan:
        lines.append(
            f"  plan {plan.name!r}: {len(plan.values)} values, inputs {list(plan.inputs)}, outputs {list(plan.outputs)}, "
            f"non_const_buffer_sizes {list(plan.non_const_buffer_sizes)}, "
            f"delegates {[d.id for d in plan.delegates]}"
        )
        for vi, v in enumerate(plan.values):
            t = v.val
            if not isinstance(t, Tensor):
                continue
            eti = t.extra_tensor_info
            if eti is None and t.data_buffer_idx == 0:
                continue
            loc = _enum(eti.location) if eti is not None else "-"
            fqn = eti.fully_qualified_name if eti is not None else None
            lines.append(
                f"    value {vi}: {_enum(t.scalar_type)} sizes {list(t.sizes)} dim_order {list(t.dim_order)} "
                f"data_buffer_idx {t.data_buffer_idx} allocation_info {'present' if t.allocation_info else 'None'} "
                f"extra_tensor_info.location {loc} fully_qualified_name {fqn!r}"
            )
        for di, d in enumerate(plan.delegates):
            proc = d.processed
            if _enum(proc.location) == "INLINE":
                blob = bytes(prog.backend_delegate_data[proc.index].data)
            else:
                blob = segment(proc.index)
            lines.append(
                f"    delegate {di}: id {d.id!r} processed location {_enum(proc.location)} index {proc.index} "
                f"({len(blob) if blob is not None else '?'} B) compile_specs {[c.key for c in d.compile_specs]}"
            )
            if d.id != "XnnpackBackend":
                continue
            consts, header, graph = _xnn_named_keys(blob)
            lines.append(
                f"      XNNHeader: flatbuffer_offset {header.flatbuffer_offset} size {header.flatbuffer_size}, "
                f"constant_data_offset {header.constant_data_offset} size {header.constant_data_size}; "
                f"{len(graph.get('xvalues', []))} xvalues, {len(graph.get('xnodes', []))} xnodes"
            )
            ptd_keys = set()
            if ptd is not None:
                from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

                payload = FlatTensorSerializer().deserialize(ptd.read_bytes())  # Cord-compatible bytes
                ptd_keys = set(payload.named_data)
            pte_keys = {n.key for n in (prog.named_data or [])}
            for i, off, size, key in consts:
                where = []
                if key in pte_keys:
                    where.append("PTE named_data")
                if key in ptd_keys:
                    where.append(ptd.name)
                lines.append(
                    f"      constant_data[{i}]: offset {off} size {size} named_key {key!r}"
                    + (f" -> {', '.join(where) or 'NOT FOUND'}" if key else "")
                )
            for xi, xv in enumerate(graph.get("xvalues", [])):
                tv = xv.get("xvalue_union", {})
                tv = tv.get("tensor_value", tv)
                if tv.get("constant_buffer_idx", 0):
                    lines.append(
                        f"      xvalue {xi}: {xv.get('xvalue_union_type')} datatype {tv.get('datatype')} "
                        f"dims {tv.get('dims')} constant_buffer_idx {tv.get('constant_buffer_idx')} "
                        f"id_out {tv.get('id_out')}"
                    )
    return lines


def dump_bpte(path: Path) -> List[str]:
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program,
    )

    data = path.read_bytes()
    bp = deserialize_from_flatbuffer_to_bundled_program(data)
    prog_off = data.find(bytes(bp.program[:64]))
    lines = [
        f"{path.name}: {len(data)} bytes; identifier {data[4:8].decode()}, version {bp.version}, "
        f"embedded program {len(bp.program)} B at file offset {prog_off}"
    ]
    for s in bp.method_test_suites:
        for ci, tc in enumerate(s.test_cases):
            def desc(vals):
                out = []
                for v in vals:
                    t = v.val
                    out.append(f"{type(t).__name__}({_enum(t.scalar_type)} {list(t.sizes)} dim_order {list(t.dim_order)})")
                return out

            lines.append(f"  suite {s.method_name!r} case {ci}: inputs {desc(tc.inputs)} expected {desc(tc.expected_outputs)}")
    return lines


def dump_all() -> List[str]:
    out = []
    for pte, ptd in [("ext_mlp.pte", "ext_mlp.ptd"), ("xnn_ext_mlp.pte", "xnn_ext_mlp.ptd")]:
        if (FIXTURE_DIR / pte).exists():
            out += dump_pte(FIXTURE_DIR / pte, FIXTURE_DIR / ptd)
    for ptd in ["ext_mlp.ptd", "ext_mlp_wrong.ptd", "xnn_ext_mlp.ptd"]:
        if (FIXTURE_DIR / ptd).exists():
            out += dump_ptd(FIXTURE_DIR / ptd)
    for bpte in ["bundled.bpte", "bundled_bad.bpte"]:
        if (FIXTURE_DIR / bpte).exists():
            out += dump_bpte(FIXTURE_DIR / bpte)
    return out


# --------------------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------------------


def write_readme(probes: List[Tuple[str, str]], bundled_rows: Dict[str, List[Tuple[str, int, str]]], dump: List[str]) -> None:
    sizes = {p.name: p.stat().st_size for p in sorted(FIXTURE_DIR.iterdir()) if p.name.startswith(("ext_", "xnn_ext_", "bundled"))}
    md = [
        "# External-data and bundled-program fixtures",
        "",
        f"Generated by `tools/export_data_fixtures.py`; regenerate with `{REGEN_CMD}` (run from the repository",
        "root with the reference venv: torch + executorch 1.5.1). The companion `README.md` in this directory is",
        "written by `tools/export_fixtures.py` and does not cover these files.",
        "",
        "| file | bytes | what |",
        "|---|---:|---|",
    ]
    what = {
        "ext_mlp.pte": "MLP Linear(8,16)-ReLU-Linear(16,4), portable kernels, `external_constants=True`: the 4 parameters are EXTERNAL tensors",
        "ext_mlp.ptd": "FlatTensor data for `ext_mlp.pte`: keys `fc1.weight`, `fc1.bias`, `fc2.weight`, `fc2.bias` with TensorLayout",
        "ext_mlp.npz": "one `forward` call [2,8] -> [2,4], outputs from the reference runtime given `ext_mlp.ptd`",
        "ext_mlp_wrong.ptd": "same keys from an MLP with hidden size 17 (fc1.weight [17,8], fc1.bias [17], fc2.weight [4,17]); loading `ext_mlp.pte` with it must fail the layout check",
        "xnn_ext_mlp.pte": "MLP Linear(8,16)-ReLU-Linear(16,4) fully delegated to XNNPACK; the delegate's constants are named data stored in the .ptd, not in the .pte",
        "xnn_ext_mlp.ptd": "FlatTensor data for `xnn_ext_mlp.pte`: keys = sha256 hex of each constant's bytes, no TensorLayout",
        "xnn_ext_mlp.npz": "one `forward` call [2,8] -> [2,4], outputs from the reference runtime given `xnn_ext_mlp.ptd`",
        "bundled.bpte": "bundled program, methods `forward` (relu(x @ W + b), x [2,4] -> [2,3]) and `encode` (tanh(x) * 2, x [3,5] -> [3,5]), 3 test cases each, expected outputs from eager PyTorch",
        "bundled_bad.bpte": "same as `bundled.bpte` but `encode` test case 1's expected output has element [0,0] + 0.5: verification must fail for exactly that case",
    }
    for name, size in sizes.items():
        md.append(f"| `{name}` | {size} | {what.get(name, '')} |")
    md += [
        "",
        "NPZ format (same as the other fixtures): `__manifest__` = `np.array(json)`, a list of calls",
        '`[{"method": "forward", "inputs": [{"array": "c0_in0"}], "outputs": [{"array": "c0_out0"}]}]`;',
        "tensors under `c<call>_in<i>` / `c<call>_out<j>`. Run with the program loaded together with its `.ptd`.",
        "",
        "## Reference runtime behaviour (executorch 1.5.1 pybindings)",
        "",
        "Error paths (`Runtime.get().load_program(pte, data_path=ptd).load_method('forward')`):",
        "",
    ]
    for label, res in probes:
        md.append(f"* {label}: {res}")
    md += ["", "Bundled verification (`_load_bundled_program_from_buffer(buf).verify_result_with_bundled_expected_output(method, i)`, rtol 1e-5, atol 1e-8):", ""]
    for fname, rows in bundled_rows.items():
        md.append(f"* `{fname}`: " + "; ".join(f"{m}[{i}] {r}" for m, i, r in rows))
    md += ["", "## Structure dump", "", "```", *dump, "```", ""]
    (FIXTURE_DIR / "DATA_README.md").write_text("\n".join(md))


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", action="store_true", help="only print the structure of the files on disk")
    args = ap.parse_args(argv)
    if args.dump:
        print("\n".join(dump_all()))
        return 0

    FIXTURE_DIR.mkdir(parents=True, exist_ok=True)
    fx = lambda n: FIXTURE_DIR / n  # noqa: E731

    # 1. portable program + external constants
    print("== ext_mlp")
    model = seeded_mlp(0)
    x_ex = randn(1, 2, 8)
    pte, ptd = export_external_mlp(model, x_ex)
    fx("ext_mlp.pte").write_bytes(pte)
    fx("ext_mlp.ptd").write_bytes(ptd)
    d = record_call(fx("ext_mlp.pte"), fx("ext_mlp.ptd"), [randn(2, 2, 8)], model, fx("ext_mlp.npz"))
    print(f"  pte {len(pte)} B, ptd {len(ptd)} B; eager vs reference max abs diff {d:.3g}")

    # 5. .ptd with the same keys but other shapes
    print("== ext_mlp_wrong")
    _, wrong_ptd = export_external_mlp(seeded_mlp(0, hidden=17), x_ex)
    fx("ext_mlp_wrong.ptd").write_bytes(wrong_ptd)
    print(f"  ptd {len(wrong_ptd)} B")

    # 2. XNNPACK program + external delegate constants
    print("== xnn_ext_mlp")
    xmodel = seeded_mlp(4)
    pte, ptd = export_xnnpack_external_mlp(xmodel, x_ex)
    fx("xnn_ext_mlp.pte").write_bytes(pte)
    fx("xnn_ext_mlp.ptd").write_bytes(ptd)
    d = record_call(fx("xnn_ext_mlp.pte"), fx("xnn_ext_mlp.ptd"), [randn(5, 2, 8)], xmodel, fx("xnn_ext_mlp.npz"))
    print(f"  pte {len(pte)} B, ptd {len(ptd)} B; eager vs reference max abs diff {d:.3g}")

    # 3. bundled programs
    bundled_rows = {}
    for fname, perturb in [("bundled.bpte", False), ("bundled_bad.bpte", True)]:
        print(f"== {fname}")
        buf = export_bundled(perturb)
        fx(fname).write_bytes(buf)
        rows = verify_bundled(buf)
        bundled_rows[fname] = rows
        for m, i, r in rows:
            print(f"  verify {m}[{i}]: {r}")
        failed = [(m, i) for m, i, r in rows if not r.startswith("OK")]
        expected = [("encode", 1)] if perturb else []
        if failed != expected:
            print(f"  !! expected failures {expected}, got {failed}")

    # error-path probes
    print("== reference runtime error paths")
    probes = [
        ("`ext_mlp.pte` without a .ptd", probe(fx("ext_mlp.pte"), None)),
        ("`ext_mlp.pte` + `ext_mlp_wrong.ptd`", probe(fx("ext_mlp.pte"), fx("ext_mlp_wrong.ptd"))),
        ("`ext_mlp.pte` + `xnn_ext_mlp.ptd` (keys missing)", probe(fx("ext_mlp.pte"), fx("xnn_ext_mlp.ptd"))),
        ("`xnn_ext_mlp.pte` + `ext_mlp.ptd` (named keys missing)", probe(fx("xnn_ext_mlp.pte"), fx("ext_mlp.ptd"))),
        ("`xnn_ext_mlp.pte` without a .ptd", probe(fx("xnn_ext_mlp.pte"), None)),
    ]
    for label, res in probes:
        print(f"  {label}: {res}")

    dump = dump_all()
    print("== structure")
    print("\n".join(dump))
    write_readme(probes, bundled_rows, dump)

    total = sum(p.stat().st_size for p in FIXTURE_DIR.iterdir() if p.name.startswith(("ext_", "xnn_ext_", "bundled")))
    print(f"total size of these fixtures: {total} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
