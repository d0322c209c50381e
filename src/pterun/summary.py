"""Describe a ``.pte`` program as plain data: methods, inputs/outputs, operators, delegates, memory, segments.

``pterun inspect`` prints this; ``describe(path)`` returns it as a dict of JSON-ready values. (The module was
``pterun.inspect``, a name that shadowed the standard library's ``inspect``.)

Example::

    >>> from pterun.summary import describe
    >>> info = describe("model.pte")                        # doctest: +SKIP
    >>> info["methods"][0]["name"]                          # doctest: +SKIP
    'forward'
"""

from __future__ import annotations

from collections import Counter

from pterun.delegates import BACKENDS
from pterun.errors import PterunError
from pterun.format.program import ProgramFile
from pterun import dtypes
from pterun.format import kinds
from pterun.format.schema import (CPU, DELEGATE_CALL, DYNAMISM_NAMES, EXTERNAL, KERNEL_CALL, TAG_NAMES, TENSOR,
                                  ExecutionPlan)
from pterun.runtime import Program, Runtime
from pterun.sources import DataPath, ProgramSource, read_data_file

__all__ = ["describe", "origin"]


def _value_info(plan: ExecutionPlan, index: int) -> dict:
    tag, p = plan.values[index]
    if tag != TENSOR:
        return {"kind": TAG_NAMES.get(tag, str(tag))}
    return {
        "kind": "Tensor",
        "dtype": dtypes.scalar_type_name(p.scalar_type),
        "numpy_dtype": dtypes.numpy_name(p.scalar_type),
        "shape": list(p.sizes),
        "dynamic": p.dynamism != 0,
        "dynamism": DYNAMISM_NAMES[p.dynamism],
        "dim_order": list(p.dim_order),
        "nbytes": p.nbytes,
        "memory_planned": p.is_memory_planned,
    }


def _delegate_info(prog: Program, d, calls: int) -> dict:
    """One delegate: its backend, calls, payload size and compile spec keys, and what its backend says of the
    payload (:meth:`pterun.delegates.Backend.describe`)."""
    blob = prog.file.delegate_blob(d)
    info = {"backend": d.backend_id, "calls": calls, "payload_bytes": int(blob.size),
            "compile_specs": [k for k, _ in d.compile_specs]}
    backend = BACKENDS.get(d.backend_id) if d.backend_id in BACKENDS else None
    if backend is not None:
        info.update(backend.describe(blob, prog.named_data, prog.engine))
    return info


def origin(pf: ProgramFile) -> dict:
    """What a program's container says of the release that wrote it: the extended header (none; 24 bytes before
    ExecuTorch 1.0, 32 since), where constants are (a segment, or the ``constant_buffer`` of early files), and
    the schema features it uses, with the release that introduced each."""
    features = []
    if pf.named_data:
        features.append("named data (0.6+)")
    if pf.mutable_segments:
        features.append("mutable data segments")
    plans = []
    for h in pf.plan_headers:
        try:
            plans.append(pf.plan(h.index))
        except PterunError:
            continue  # the method reports its own error where it is loaded
    tensors = [d for p in plans for tag, d in p.values if tag == TENSOR]
    if any(d.location == EXTERNAL for d in tensors):
        features.append("external tensors (0.5+)")
    if any(d.device != CPU for d in tensors) or any(p.buffer_devices for p in plans):
        features.append("device placement (1.3+)")
    types = sorted({dtypes.scalar_type_name(d.scalar_type) for d in tensors if d.scalar_type in _NEWER_TYPES})
    if types:
        features.append(f"scalar types {', '.join(types)} ({_NEWER_TYPES_SINCE})")
    constants = "segment" if pf.constant_segment is not None else \
        "constant_buffer" if any(b is not None and len(b) for b in pf.constant_buffers[1:]) else "none"
    return {"extended_header_bytes": pf.header_length, "constants_in": constants, "features": features}


#: scalar types added to the schema after 0.4 (BITS16, the float8 family and UINT16/32/64 in 0.5, BFLOAT16 in 1.2)
_NEWER_TYPES = frozenset({15, 22, 23, 24, 25, 26, 27, 28, 29})
_NEWER_TYPES_SINCE = "0.5+, BFloat16 1.2+"


def _is_constant_method(plan: ExecutionPlan) -> bool:
    return not plan.inputs and all(not c for c in plan.chains)


def describe_ptd(source: ProgramSource) -> dict:
    """Keys of a ``.ptd`` external-data file with dtype, shape and size."""
    ptd = read_data_file(source)
    name = ptd.name
    entries = []
    for key in sorted(ptd.keys()):
        layout = ptd.layout(key)
        e = {"key": key, "dtype": None, "numpy_dtype": None, "shape": None, "dim_order": None,
             "bytes": int(ptd.data(key).size)}
        if layout is not None:
            st = layout.scalar_type
            e.update(dtype=dtypes.scalar_type_name(st), numpy_dtype=dtypes.numpy_name(st), shape=list(layout.sizes),
                     dim_order=list(layout.dim_order))
        entries.append(e)
    return {"file": name, "kind": "external data (.ptd)", "file_bytes": ptd.buf.size, "keys": entries}


def describe(source: ProgramSource | None, *, program: Program | None = None, data_path: DataPath | None = None,
             runtime: Runtime | None = None) -> dict:
    """Everything ``pterun inspect`` shows: for a ``.pte`` path/bytes (or an already loaded ``program``), a
    ``.ptd`` file (its keys), or a ``.bpte`` bundled program (its embedded program and test cases), loaded by
    ``runtime`` (default: :meth:`Runtime.get`)."""
    bundled = None
    rt = runtime if runtime is not None else Runtime.get()
    if program is None:
        kind = kinds.kind_of(kinds.read_head(source))
        if kind == kinds.DATA:
            return describe_ptd(source)
        if kind == kinds.BUNDLED:
            bundled = rt.load_bundled_program(source, data_path=data_path)
            program = bundled.program
    prog = program if program is not None else rt.load_program(source, data_path=data_path)
    pf = prog.file
    methods = []
    for h in pf.plan_headers:
        plan = pf.plan(h.index)
        ops = Counter(plan.operators[ins.op_index] for c in plan.chains for ins in c if ins.kind == KERNEL_CALL)
        delegate_calls = Counter(ins.delegate_index for c in plan.chains for ins in c if ins.kind == DELEGATE_CALL)
        m = {
            "name": plan.name,
            "inputs": [_value_info(plan, i) for i in plan.inputs],
            "outputs": [_value_info(plan, i) for i in plan.outputs],
            "num_values": len(plan.values),
            "num_instructions": sum(len(c) for c in plan.chains),
            "operators": dict(sorted(ops.items())),
            "delegates": [_delegate_info(prog, d, delegate_calls.get(j, 0)) for j, d in enumerate(plan.delegates)],
            "memory_planned_buffers": list(plan.buffer_sizes[1:]),
        }
        # every key on every method: empty when there is nothing to say
        m["external_tensors"] = sorted({p.fqn for tag, p in plan.values
                                        if tag == TENSOR and p.location == EXTERNAL and p.fqn})
        m["constant_values"] = [v if not hasattr(v, "tolist") else v.tolist()
                                for v in prog.load_method(plan.name).execute([])] if _is_constant_method(plan) else []
        methods.append(m)
    info = {
        "file": pf.name,
        "kind": "program (.pte)",
        "file_bytes": pf.size,
        "program_bytes": pf.program_size,
        "version": pf.version,
        "methods": methods,
        "segments": [{"offset": o, "size": s} for o, s in pf.segments],
        "constant_tensors": (len(pf.constant_segment[1]) - 1) if pf.constant_segment is not None
        else max(len(pf.constant_buffers) - 1, 0),
        "named_data_keys": sorted(pf.named_data),
        "origin": origin(pf),
        "supported": {"operators_missing": sorted({op for m in methods for op in m["operators"]}
                                                  - rt.operator_registry.operator_names),
                      "backends_missing": sorted({d["backend"] for m in methods for d in m["delegates"]}
                                                 - set(rt.backend_registry.registered_backend_names))},
    }
    if bundled is not None:
        info["kind"] = "bundled program (.bpte)"
        info["test_cases"] = {m: len(bundled.test_cases(m)) for m in sorted(bundled.method_names)}
    return info


def _origin_line(o: dict, methods: list[dict]) -> str:
    """One line of what the container says of its origin."""
    n = o["extended_header_bytes"]
    head = {0: "no extended header", 24: "extended header of 24 bytes (before ExecuTorch 1.0)",
            32: "extended header of 32 bytes (ExecuTorch 1.0+)"}.get(n, f"extended header of {n} bytes")
    where = {"segment": "constants in a segment", "constant_buffer": "constants in constant_buffer (early files)",
             "none": "no constants"}
    parts = [head, where[o["constants_in"]]]
    payloads = sorted({d["payload_format"] for m in methods for d in m["delegates"] if "payload_format" in d})
    if payloads:
        parts.append("XNNPACK payloads " + ", ".join(payloads))
    return "; ".join(parts + o["features"])


def _delegate_lines(delegates: list[dict]) -> list[str]:
    """One block per backend: its calls, payloads and XNNPACK nodes summed over the method's delegates."""
    lines = []
    for backend in dict.fromkeys(d["backend"] for d in delegates):
        group = [d for d in delegates if d["backend"] == backend]
        calls, size = sum(d["calls"] for d in group), sum(d["payload_bytes"] for d in group)
        lines.append(f"  delegate {backend}: {calls} call(s) of {len(group)} payload(s), {size} payload bytes")
        nodes, types = Counter(), Counter()
        for d in group:
            nodes.update(d.get("nodes", {}))
            types.update(d.get("value_datatypes", {}))
        if nodes:
            lines.append("    nodes: " + ", ".join(f"{k} x{n}" for k, n in sorted(nodes.items())))
            lines.append("    value types: " + ", ".join(f"{k} x{n}" for k, n in sorted(types.items())))
        engines = Counter(d["engine"] + (f" ({d['engine_reason']})" if d.get("engine_reason") else "")
                          for d in group if "engine" in d)
        if engines:
            lines.append("    engine: " + ", ".join(e if n == len(group) else f"{e} x{n}" for e, n in engines.items()))
        for j, d in enumerate(group):
            if "summary_error" in d:
                lines.append(f"    (payload {j} not readable: {d['summary_error']})")
    return lines


def format_text(info: dict) -> str:
    """A human-readable rendering of :func:`describe`'s result."""
    if "keys" in info:  # a .ptd
        lines = [f"{info['file']}: external data, {len(info['keys'])} key(s), {info['file_bytes']} bytes"]
        width = max((len(e["key"]) for e in info["keys"]), default=0)
        for e in info["keys"]:
            shape = f"{e['numpy_dtype'] or e['dtype']}{e['shape']}" if e["dtype"] else "(no tensor layout)"
            lines.append(f"  {e['key']:<{width}}  {shape}  {e['bytes']} bytes")
        return "\n".join(lines)
    lines = [f"{info['file']}: {info['file_bytes']} bytes, {len(info['methods'])} method(s), "
             f"{len(info['segments'])} segment(s), {info['constant_tensors']} constant tensor(s)"]
    lines.append("format: " + _origin_line(info["origin"], info["methods"]))

    def tensor_line(v: dict) -> str:
        if v["kind"] != "Tensor":
            return v["kind"]
        dyn = " dynamic (upper bound)" if v["dynamic"] else ""
        layout = "" if v["dim_order"] == sorted(v["dim_order"]) else f" dim_order={v['dim_order']}"
        return f"{v['numpy_dtype'] or v['dtype']}{v['shape']}{dyn}{layout}"

    for m in info["methods"]:
        lines.append("")
        lines.append(f"method {m['name']!r}: {m['num_instructions']} instructions, {m['num_values']} values, "
                     f"memory plan {m['memory_planned_buffers']} bytes")
        for kind in ("inputs", "outputs"):
            for i, v in enumerate(m[kind]):
                lines.append(f"  {kind[:-1]} {i}: {tensor_line(v)}")
        if m.get("external_tensors"):
            lines.append(f"  external tensors ({len(m['external_tensors'])}): {', '.join(m['external_tensors'])}")
        if m["constant_values"]:
            lines.append(f"  constant values: {m['constant_values']}")
        if m["operators"]:
            lines.append(f"  operators ({len(m['operators'])}):")
            width = max(len(k) for k in m["operators"])
            for op, n in m["operators"].items():
                lines.append(f"    {op:<{width}}  x{n}")
        lines.extend(_delegate_lines(m["delegates"]))
    if info.get("test_cases"):
        lines.append("")
        lines.append("bundled test cases: " + ", ".join(f"{m} x{n}" for m, n in info["test_cases"].items()))
    if info["named_data_keys"]:
        lines.append("")
        lines.append(f"named data: {len(info['named_data_keys'])} key(s)")
    missing = info["supported"]
    if missing["operators_missing"] or missing["backends_missing"]:
        lines.append("")
        if missing["operators_missing"]:
            lines.append(f"NOT SUPPORTED by this pterun: operators {missing['operators_missing']}")
        if missing["backends_missing"]:
            lines.append(f"NOT SUPPORTED by this pterun: backends {missing['backends_missing']}")
    return "\n".join(lines)
