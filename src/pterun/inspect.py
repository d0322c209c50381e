"""Describe a ``.pte`` program as plain data: methods, inputs/outputs, operators, delegates, memory, segments.

``pterun inspect`` prints this; ``describe(path)`` returns it as a dict of JSON-ready values.

Example::

    >>> from pterun.inspect import describe
    >>> info = describe("model.pte")                        # doctest: +SKIP
    >>> info["methods"][0]["name"]                          # doctest: +SKIP
    'forward'
"""

from __future__ import annotations

from collections import Counter

from pterun.format import dtypes
from pterun.format.program import (DELEGATE_CALL, DYNAMISM_NAMES, KERNEL_CALL, TAG_NAMES, TENSOR, Plan)
from pterun.runtime import Program, Runtime

__all__ = ["describe"]


def _value_info(plan: Plan, index: int) -> dict:
    tag, p = plan.values[index]
    if tag != TENSOR:
        return {"kind": TAG_NAMES.get(tag, str(tag))}
    return {
        "kind": "Tensor",
        "dtype": dtypes.scalar_type_name(p.scalar_type),
        "numpy_dtype": dtypes.to_numpy(p.scalar_type).name if dtypes.SCALAR_TYPES[p.scalar_type][1] is not None
        else None,
        "shape": list(p.sizes),
        "dynamic": p.dynamism != 0,
        "dynamism": DYNAMISM_NAMES[p.dynamism],
        "dim_order": list(p.dim_order),
        "nbytes": p.nbytes,
        "memory_planned": p.is_memory_planned,
    }


def _is_constant_method(plan: Plan) -> bool:
    return not plan.inputs and all(not c for c in plan.chains)


def describe(source, *, program: Program | None = None) -> dict:
    """Everything ``pterun inspect`` shows, for a path/bytes (or an already loaded ``program``)."""
    prog = program if program is not None else Runtime.get().load_program(source)
    pf = prog._pf
    methods = []
    for h in pf.plan_headers:
        plan = pf.plan(h.index)
        ops = Counter(plan.operators[a] for c in plan.chains for (k, a, _) in c if k == KERNEL_CALL)
        delegate_calls = Counter(plan.delegates[a].backend_id for c in plan.chains for (k, a, _) in c
                                 if k == DELEGATE_CALL)
        m = {
            "name": plan.name,
            "inputs": [_value_info(plan, i) for i in plan.inputs],
            "outputs": [_value_info(plan, i) for i in plan.outputs],
            "num_values": len(plan.values),
            "num_instructions": sum(len(c) for c in plan.chains),
            "operators": dict(sorted(ops.items())),
            "delegates": [{"backend": d.backend_id, "calls": delegate_calls.get(d.backend_id, 0),
                           "payload_bytes": int(pf.delegate_blob(d).size),
                           "compile_specs": [k for k, _ in d.compile_specs]} for d in plan.delegates],
            "memory_planned_buffers": list(plan.buffer_sizes[1:]),
        }
        if _is_constant_method(plan):
            m["constant_values"] = [v if not hasattr(v, "tolist") else v.tolist()
                                    for v in prog.load_method(plan.name).execute([])]
        methods.append(m)
    return {
        "file": pf.name,
        "file_bytes": pf.size,
        "program_bytes": pf.program_size,
        "version": pf.version,
        "methods": methods,
        "segments": [{"offset": o, "size": s} for o, s in pf.segments],
        "constant_tensors": (len(pf.constant_segment[1]) - 1) if pf.constant_segment is not None
        else max(len(pf.constant_buffers) - 1, 0),
        "named_data_keys": sorted(pf.named_data),
        "supported": {"operators_missing": sorted({op for m in methods for op in m["operators"]}
                                                  - prog_operator_names()),
                      "backends_missing": sorted({d["backend"] for m in methods for d in m["delegates"]}
                                                 - set(Runtime.get().backend_registry.registered_backend_names))},
    }


def prog_operator_names() -> set[str]:
    return Runtime.get().operator_registry.operator_names


def format_text(info: dict) -> str:
    """A human-readable rendering of :func:`describe`'s result."""
    lines = [f"{info['file']}: {info['file_bytes']} bytes, {len(info['methods'])} method(s), "
             f"{len(info['segments'])} segment(s), {info['constant_tensors']} constant tensor(s)"]

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
        if "constant_values" in m:
            lines.append(f"  constant values: {m['constant_values']}")
        if m["operators"]:
            lines.append(f"  operators ({len(m['operators'])}):")
            width = max(len(k) for k in m["operators"])
            for op, n in m["operators"].items():
                lines.append(f"    {op:<{width}}  x{n}")
        for d in m["delegates"]:
            lines.append(f"  delegate {d['backend']}: {d['calls']} call(s), {d['payload_bytes']} payload bytes")
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
