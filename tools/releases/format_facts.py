#!/usr/bin/env python
"""Print, per release of the matrix, the file-format features its programs use, as pterun reads them.

Run with the repository's own environment (it imports pterun, never torch)::

    .venv/bin/python tools/releases/format_facts.py                 # every release in tests/fixtures/releases
    .venv/bin/python tools/releases/format_facts.py 0.4.0 1.0.1

For each ``.pte`` (and the program inside each ``.bpte``): the identifier and extended-header length, where the
constants live (legacy ``constant_buffer`` vs a constant segment vs external), the named-data keys, the scalar
types of the tensors, and for XNNPACK delegates the payload header magic and flatbuffer identifier
(``XN00``: constants inline in the payload's ``constant_buffer``; ``XN01``: constants in ``constant_data``/named
data).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from pterun.format.bundled import read_bundled
from pterun.format.program import TENSOR, read_program

ROOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "releases"


def xnn_payload(blob) -> str:
    """``XH00+XN01``-style: the payload header (absent from bare legacy flatbuffers) and the graph identifier."""
    b = bytes(blob)
    if b[4:8] == b"XH00":  # u16 header length, u32 flatbuffer offset, u32 size, u32 constants offset, u64 size
        fb = int.from_bytes(b[10:14], "little")
        return f"XH00+{b[fb + 4:fb + 8].decode('latin-1')}"
    return f"bare+{b[4:8].decode('latin-1')}"


def facts(data: bytes, name: str) -> dict:
    pf = read_program(data, name)
    hlen = int.from_bytes(data[12:16], "little") if data[8:12] == b"eh00" else None
    dtypes, payloads = Counter(), Counter()
    for h in pf.plan_headers:
        plan = pf.plan(h.index)
        for tag, desc in plan.values:
            if tag == TENSOR:
                dtypes[str(desc.dtype)] += 1
        for d in plan.delegates:
            if d.backend_id == "XnnpackBackend":
                payloads[xnn_payload(pf.delegate_blob(d))] += 1
    legacy = sum(1 for b in pf.constant_buffers[1:] if b is not None and len(b))
    return {"identifier": data[4:8].decode("latin-1"), "extended_header": hlen, "schema_version": pf.version,
            "segments": len(pf.segments), "constant_segment": pf.constant_segment is not None,
            "legacy_constant_buffers": legacy, "named_data": len(pf.named_data),
            "xnnpack_payloads": dict(payloads), "scalar_types": dict(dtypes)}


def main(argv: list[str]) -> int:
    releases = argv or sorted(p.name for p in ROOT.iterdir() if p.is_dir())
    for release in releases:
        print(f"== {release}")
        for f in sorted((ROOT / release).glob("*.pte")) + sorted((ROOT / release).glob("*.bpte")):
            data = f.read_bytes()
            if f.suffix == ".bpte":
                data = bytes(read_bundled(memoryview(data), f.name).program)
            try:
                print(f"  {f.name}: {json.dumps(facts(data, f.name))}")
            except Exception as e:  # noqa: BLE001  (a file pterun cannot read is itself a finding)
                print(f"  {f.name}: pterun cannot read it: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
