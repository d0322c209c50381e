"""The pterun profiler of ``bench/run_one.py --profile`` and ``llm_bench.py --profile``: time per operator and per
instruction through pterun's public observer (``Method.execute(inputs, hook=...)``), and the delegate boundaries
a decode step crosses (:func:`boundaries`).
"""

import re
import time

import numpy as np


# --- profiler (pterun only) -------------------------------------------------------------------------------


class Profile:
    """Per-operator and per-instruction time of a pterun method, gathered by its public observer: pass
    ``hook=prof.hook`` to ``Method.execute`` (:func:`install_profiler` makes every execute of the method do so).

    ``by_op``: operator name -> [seconds, calls]; ``by_instr``: (chain, instruction index, name, description of
    the outputs as first seen, rec=[seconds, calls]). Nodes of a delegate are run inside their DelegateCall's
    timing and not recorded on their own (as ``pterun bench --profile`` would break them down).
    """

    def __init__(self):
        self.by_op = {}
        self.by_instr = []
        self.runs = 0
        recs = {}  # (chain, index) -> (op rec, instruction rec)
        by_op, by_instr, clock = self.by_op, self.by_instr, time.perf_counter

        def hook(event, run):
            if event.kind == "DelegateNode":
                run()
                return
            t = clock()
            run()
            d = clock() - t
            r = recs.get((event.chain, event.index))
            if r is None:
                rec = [0.0, 0]
                by_instr.append((event.chain, event.index, event.name, _describe_outputs(event), rec))
                r = recs[(event.chain, event.index)] = (by_op.setdefault(event.name, [0.0, 0]), rec)
            op_rec, rec = r
            op_rec[0] += d
            op_rec[1] += 1
            rec[0] += d
            rec[1] += 1

        self.hook = hook

    def reset(self):
        for v in self.by_op.values():
            v[0] = 0.0
            v[1] = 0
        for *_, rec in self.by_instr:
            rec[0] = 0.0
            rec[1] = 0
        self.runs = 0


def install_profiler(method) -> Profile:
    """A :class:`Profile` of every later ``method.execute(inputs)``: the method object's ``execute`` becomes a
    call with ``hook=prof.hook`` (pterun's public observer; the method's own steps are never changed). Code that
    kept the earlier bound ``method.execute`` must take the new one."""
    prof = Profile()
    execute = type(method).execute

    def profiled(inputs=(), *, hook=None):
        return execute(method, inputs, hook=prof.hook if hook is None else hook)

    method.execute = profiled
    return prof


def _describe_outputs(event):
    """What an instruction wrote, as ``float32[1, 8]`` per output (read once, when it is first seen)."""
    try:
        outs = event.outputs()
    except Exception:
        return ["?"]
    return [f"{np.dtype(o.dtype).name}{list(o.shape)}" if hasattr(o, "shape") else repr(o) for o in outs[:6]]


#: operators a TFLite graph can express (views, elementwise, reductions/norms, softmax, concatenation), and the
#: scalar shape plumbing of dynamic-shape programs (a fixed-shape graph has them as constants): an instruction
#: outside these (llama:: KV-cache and SDPA kernels, embedding, index, ...) keeps the delegates around it apart
_MERGEABLE = re.compile(
    r"^(aten::(view|_unsafe_view|view_copy|squeeze_copy|unsqueeze_copy|reshape|permute_copy|transpose_copy|t_copy|"
    r"expand_copy|clone|alias_copy|_to_copy|slice_copy|select_copy|cat|add|sub|mul|div|rsqrt|sqrt|neg|exp|pow|"
    r"mean|sum|amax|native_layer_norm|layer_norm|sigmoid|silu|gelu|tanh|relu|hardtanh|clamp|where|eq|ne|lt|le|gt|"
    r"ge|logical_not|logical_and|any|full|full_like|_softmax|softmax|minimum|maximum|abs|sym_size|"
    r"_local_scalar_dense)\b|executorch_prim::|MoveCall$|FreeCall$)")


def mergeable(op: str) -> bool:
    return bool(_MERGEABLE.match(str(op)))


def boundaries(prof: Profile, runs: int) -> dict:
    """Delegate calls in program order and what runs between them (for merging neighbouring delegate graphs).

    Per run: ``delegate_calls`` and their time; ``gaps`` = places where one delegate call follows another in
    the same chain, ``gaps_with_work`` those with at least one instruction between them, ``gaps_mergeable``
    those whose instructions are all ops a TFLite graph can express (:data:`_MERGEABLE`: each such gap is a
    boundary a merged LiteRT graph would remove) with ``mergeable_s`` their time; the time of all
    instructions in gaps (``between_s``) and before the first / after the last delegate (``edges_s``), and
    the operators found in the gaps ([name, calls, seconds, mergeable] per run)."""
    by_chain = {}
    for ci, pc, name, _args, rec in prof.by_instr:
        by_chain.setdefault(ci, []).append((pc, name, rec))
    out = {"delegate_calls": 0.0, "delegate_s": 0.0, "gaps": 0, "gaps_with_work": 0, "gaps_mergeable": 0,
           "mergeable_s": 0.0, "between_s": 0.0, "between_instructions": 0.0, "edges_s": 0.0, "gap_ops": {}}
    for steps in by_chain.values():
        steps.sort(key=lambda r: r[0])
        dpos = [i for i, (_, name, _) in enumerate(steps) if str(name).startswith("delegate ")]
        for i in dpos:
            out["delegate_calls"] += steps[i][2][1] / runs
            out["delegate_s"] += steps[i][2][0] / runs
        inside = set()
        for a, b in zip(dpos, dpos[1:]):
            out["gaps"] += 1
            gap = steps[a + 1:b]
            work = [g for g in gap if g[1] != "FreeCall"]
            if work:
                out["gaps_with_work"] += 1
            t_gap = sum(rec[0] for _, _, rec in gap) / runs
            if all(mergeable(name) for _, name, _ in gap):
                out["gaps_mergeable"] += 1
                out["mergeable_s"] += t_gap
            for j in range(a + 1, b):
                inside.add(j)
                _, name, rec = steps[j]
                out["between_s"] += rec[0] / runs
                out["between_instructions"] += rec[1] / runs
                op = out["gap_ops"].setdefault(name, [0.0, 0.0])
                op[0] += rec[1] / runs
                op[1] += rec[0] / runs
        for j, (_, name, rec) in enumerate(steps):
            if dpos and j not in inside and not str(name).startswith("delegate "):
                out["edges_s"] += rec[0] / runs
    out["gap_ops"] = sorted(([n, c, t, mergeable(n)] for n, (c, t) in out["gap_ops"].items()), key=lambda r: -r[2])
    return out


def format_boundaries(b: dict, wall_s: float) -> str:
    if not b or not b.get("delegate_calls"):
        return "No delegate calls."
    lines = [f"Delegate boundaries: {b['delegate_calls']:g} delegate calls per run taking "
             f"{b['delegate_s'] * 1e3:.3f} ms; {b['gaps']} gaps between consecutive delegate calls, "
             f"{b['gaps_with_work']} with instructions in them: {b['between_instructions']:g} instructions taking "
             f"{b['between_s'] * 1e3:.3f} ms per run ({b['between_s'] / wall_s * 100 if wall_s else 0:.1f}% of the "
             f"wall); before the first / after the last delegate: {b['edges_s'] * 1e3:.3f} ms. "
             f"{b['gaps_mergeable']} gaps hold only ops a LiteRT graph can express ({b['mergeable_s'] * 1e3:.3f} ms): "
             f"merging across them would leave {b['delegate_calls'] - b['gaps_mergeable']:g} delegate calls.", "",
             "| operator between delegates | calls/run | ms/run | µs/call | expressible |",
             "|---|---:|---:|---:|---|"]
    for n, c, t, ok in b["gap_ops"][:20]:
        lines.append(f"| `{n}` | {c:g} | {t * 1e3:.3f} | {t / c * 1e6 if c else 0:.1f} | {'yes' if ok else 'no'} |")
    return "\n".join(lines)


def profile_report(prof: Profile, wall_per_run: float, top: int = 15) -> dict:
    runs = max(prof.runs, 1)
    ops = sorted(((n, t / runs, c / runs) for n, (t, c) in prof.by_op.items()), key=lambda r: -r[1])
    steps_total = sum(t for _, t, _ in ops)
    instrs = sorted(prof.by_instr, key=lambda r: -r[4][0])[:top]
    return {
        "boundaries": boundaries(prof, runs),
        "runs": prof.runs,
        "wall_per_run_s": wall_per_run,
        "steps_total_per_run_s": steps_total,
        "outside_steps_per_run_s": wall_per_run - steps_total,
        "ops": [{"op": n, "per_run_s": t, "calls_per_run": c, "share": t / wall_per_run if wall_per_run else 0.0}
                for n, t, c in ops],
        "top_instructions": [{"chain": ci, "pc": pc, "op": name, "per_run_s": rec[0] / runs,
                              "args": list(args)}
                             for ci, pc, name, args, rec in instrs],
    }


def format_profile(rep: dict, title: str = "", top: int = 15) -> str:
    us = 1e6
    lines = []
    if title:
        lines.append(f"### pterun profile: {title}")
        lines.append("")
    lines.append(f"{rep['runs']} profiled runs; wall {rep['wall_per_run_s'] * 1e3:.3f} ms per run (with the "
                 f"profiler's own overhead), of which steps {rep['steps_total_per_run_s'] * 1e3:.3f} ms and "
                 f"outside the steps (input/output copies, the interpreter loop, the profiler's wrappers) "
                 f"{rep['outside_steps_per_run_s'] * 1e3:.3f} ms.")
    lines.append("")
    lines.append("| operator | calls/run | ms/run | share | µs/call |")
    lines.append("|---|---:|---:|---:|---:|")
    for r in rep["ops"][:top]:
        per_call = r["per_run_s"] / r["calls_per_run"] * us if r["calls_per_run"] else 0.0
        lines.append(f"| `{r['op']}` | {r['calls_per_run']:g} | {r['per_run_s'] * 1e3:.3f} | "
                     f"{r['share'] * 100:.1f}% | {per_call:.1f} |")
    if len(rep["ops"]) > top:
        rest = sum(r["per_run_s"] for r in rep["ops"][top:])
        lines.append(f"| ({len(rep['ops']) - top} more) | | {rest * 1e3:.3f} | | |")
    lines.append("")
    if rep.get("boundaries", {}).get("delegate_calls"):
        lines.append(format_boundaries(rep["boundaries"], rep["wall_per_run_s"]))
        lines.append("")
    lines.append("Slowest instructions:")
    lines.append("")
    lines.append("| chain:pc | operator | ms/run | outputs |")
    lines.append("|---|---|---:|---|")
    for r in rep["top_instructions"][:10]:
        lines.append(f"| {r['chain']}:{r['pc']} | `{r['op']}` | {r['per_run_s'] * 1e3:.3f} | "
                     f"{', '.join(r['args'])} |")
    return "\n".join(lines)
