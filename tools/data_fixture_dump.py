"""The structure dump of tools/export_data_fixtures.py: a readable view of the ``.pte``, ``.ptd`` and
``.bpte`` fixtures on disk (EXTERNAL tensors, segments, named data, XNNPACK constants, bundled test cases),
printed by ``--dump`` and written into ``tests/fixtures/DATA_README.md``.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
import tempfile
from pathlib import Path
from typing import List, Optional, Tuple

from data_fixture_export import FIXTURE_DIR

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


def _pte_summary_lines(path: Path, data: bytes, prog, eh, has_eh: bool) -> List[str]:
    """The file line and the constant / segment / named-data / delegate-data summary of a .pte."""
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
    return lines


def _plan_lines(plan) -> List[str]:
    """The plan line, then one line per tensor value that has constant data or extra tensor info."""
    from executorch.exir.schema import Tensor

    lines = [
        f"  plan {plan.name!r}: {len(plan.values)} values, inputs {list(plan.inputs)}, outputs {list(plan.outputs)}, "
        f"non_const_buffer_sizes {list(plan.non_const_buffer_sizes)}, "
        f"delegates {[d.id for d in plan.delegates]}"
    ]
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
    return lines


def _xnn_delegate_lines(prog, blob: bytes, ptd: Optional[Path]) -> List[str]:
    """An XNNPACK payload: its header, where each constant's named data is found, its constant xvalues."""
    consts, header, graph = _xnn_named_keys(blob)
    lines = [
        f"      XNNHeader: flatbuffer_offset {header.flatbuffer_offset} size {header.flatbuffer_size}, "
        f"constant_data_offset {header.constant_data_offset} size {header.constant_data_size}; "
        f"{len(graph.get('xvalues', []))} xvalues, {len(graph.get('xnodes', []))} xnodes"
    ]
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


def _delegate_lines(prog, plan, segment, ptd: Optional[Path]) -> List[str]:
    """One line per delegate of the plan, followed by the details of an XNNPACK payload."""
    lines = []
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
        lines += _xnn_delegate_lines(prog, blob, ptd)
    return lines


def dump_pte(path: Path, ptd: Optional[Path] = None) -> List[str]:
    """Raw (segments not restored) view of a .pte: EXTERNAL tensors, segments, named data, delegates."""
    from executorch.exir._serialize import _program as ser

    data = path.read_bytes()
    eh = ser._get_extended_header(data)
    has_eh = eh is not None and eh.is_valid()
    prog = ser._flatbuffer_to_program(data[: eh.program_size] if has_eh else data)
    seg_base = eh.segment_base_offset if has_eh else 0

    def segment(i: int) -> bytes:
        s = prog.segments[i]
        return data[seg_base + s.offset : seg_base + s.offset + s.size]

    lines = _pte_summary_lines(path, data, prog, eh, has_eh)
    for plan in prog.execution_plan:
        lines += _plan_lines(plan)
        lines += _delegate_lines(prog, plan, segment, ptd)
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
