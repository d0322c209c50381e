#!/usr/bin/env python
"""pterun vs the reference ExecuTorch runtime, side by side, in one command.

    .venv/bin/python bench/bench.py --ref .ref/bin/python            # everything (exports models if missing)
    .venv/bin/python bench/bench.py --ref none                       # pterun alone
    .venv/bin/python bench/bench.py --models 'resnet18_*' mlp_portable --rounds 5
    .venv/bin/python bench/bench.py --profile                        # + per-operator profile of pterun
    .venv/bin/python bench/bench.py --list                           # the model names

For every model, each round starts one fresh process per runtime (``bench/run_one.py``), pterun first in even
rounds and the reference first in odd ones, so both see the same machine load; per-runtime numbers are the
median over rounds of each process's own numbers (median, p90, first call, load, import, peak RSS). The outputs
of the first round are compared (same seeded random inputs in both processes). It writes ``OUT/results.md``,
``OUT/results.json`` and ``OUT/ratios.png`` (if matplotlib is importable here), and with ``--profile``
``OUT/profile.md``. This script never imports torch (run it with the dev venv); only the reference processes
and ``bench/export_models.py`` do.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fnmatch
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODELS_DIR = HERE / "models"
FIXTURES_DIR = REPO / "tests" / "fixtures"
DEMO = REPO / "src" / "pterun" / "models" / "demo.pte"
RUN_ONE = HERE / "run_one.py"
EXPORT = HERE / "export_models.py"
MARK = "@@BENCH@@ "
README = HERE / "README.md"
README_BEGIN = "<!-- bench:results:begin -->"
README_END = "<!-- bench:results:end -->"

# name -> (path, kind). kind: "full" = exported by export_models.py; "fixture"; "demo"
EXPORTED = ["resnet18_portable", "resnet18_xnnpack", "mobilenet_v2_portable", "mobilenet_v2_xnnpack",
            "mlp_portable", "mlp_xnnpack", "few_ops_portable", "many_ops_portable"]
FIXTURES = ["mlp", "cnn", "transformer", "gru", "mobilenet_v2", "resnet_small"]

# --- targets ----------------------------------------------------------------------------------------------
# median-latency ratio pterun/reference
RATIO_TARGETS = {"resnet18_xnnpack": 1.5, "mobilenet_v2_xnnpack": 2.0,
                 "resnet18_portable": 1 / 20, "mobilenet_v2_portable": 1 / 20}
LOAD_TARGETS = {"resnet18_portable": 0.050, "resnet18_xnnpack": 0.050}  # seconds, load_program + load_method
RSS_TARGETS = {"mobilenet_v2_portable": 0.2, "mobilenet_v2_xnnpack": 0.2}  # peak RSS ratio pterun/reference
SMALL_PROGRAMS = {"mlp_portable", "few_ops_portable", "many_ops_portable", "fx_mlp"}
SMALL_FIXED_S, SMALL_PER_INSTR_S = 20e-6, 2e-6  # median <= 20 µs + 2 µs x instructions
IMPORT_TARGET_S, IMPORT_RATIO_TARGET = 0.25, 0.1


def all_models() -> dict[str, tuple[Path, str]]:
    models = {n: (MODELS_DIR / f"{n}.pte", "full") for n in EXPORTED}
    models.update({f"fx_{n}": (FIXTURES_DIR / f"{n}.pte", "fixture") for n in FIXTURES})
    models["demo"] = (DEMO, "demo")
    return models


# --- formatting -------------------------------------------------------------------------------------------


def fmt_t(s) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "—"
    if s < 0:
        return "−" + fmt_t(-s)
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_ratio(r) -> str:
    if r is None or (isinstance(r, float) and (math.isnan(r) or math.isinf(r))):
        return "—"
    if r >= 100:
        return f"{r:.0f}×"
    if r >= 10:
        return f"{r:.1f}×"
    return f"{r:.3g}×"


def fmt_mb(m) -> str:
    return "—" if m is None else f"{m:.0f} MB"


def fmt_err(e) -> str:
    if e is None:
        return "—"
    if math.isinf(e):
        return "MISMATCH"
    return f"{e:.1e}" + ("" if e <= 1e-3 else " ✗")


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


# --- running ----------------------------------------------------------------------------------------------


def run_process(python: str, runtime: str, pte: Path, args, save: Path | None, env, profile=False) -> dict:
    cmd = [python, str(RUN_ONE), "--runtime", runtime, str(pte), "--budget", str(args.budget),
           "--min-calls", str(args.min_calls), "--max-time", str(args.max_time), "--quiet"]
    if runtime == "pterun" and args.pterun_src:
        cmd += ["--pterun-src", str(args.pterun_src)]
    if runtime == "pterun" and args.threads:
        env = {**env, "PTERUN_NUM_THREADS": str(args.threads)}
    if save is not None:
        cmd += ["--save-outputs", str(save)]
    if profile:
        cmd += ["--profile", "--top", "1000"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env, cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {"runtime": runtime, "error_type": "Timeout", "error": f"no result within {args.timeout} s"}
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["process_wall_s"] = wall
            return res
    tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
    return {"runtime": runtime, "error_type": f"exit {p.returncode}", "error": " | ".join(tail)[-500:],
            "process_wall_s": wall}


def compare_outputs(a_path: Path, b_path: Path):
    """max relative error of pterun's outputs (a) against the reference's (b): for each output
    max|a - b| / max|b| (NaN == NaN, inf == inf), the maximum over outputs; inf if shapes or keys differ."""
    try:
        a, b = np.load(a_path), np.load(b_path)
    except Exception:
        return None
    if sorted(a.files) != sorted(b.files):
        return math.inf
    worst = 0.0
    for k in b.files:
        x, y = a[k], b[k]
        if x.shape != y.shape:
            return math.inf
        if x.dtype == np.bool_ or y.dtype == np.bool_:
            x, y = x.astype(np.int8), y.astype(np.int8)
        x, y = x.astype(np.float64), y.astype(np.float64)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if same.all():
            continue
        if np.isnan(x[~same]).any() or np.isnan(y[~same]).any() or np.isinf(x[~same]).any() \
                or np.isinf(y[~same]).any():
            return math.inf
        diff = np.abs(x - y)[~same].max()
        finite = np.abs(y[np.isfinite(y)])
        scale = max(float(finite.max()) if finite.size else 0.0, 1e-30)
        worst = max(worst, float(diff / scale))
    return worst


def med(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


KEYS = ("median_s", "p90_s", "min_s", "first_call_s", "load_s", "import_s", "peak_rss_mb", "rss_after_import_mb")


def _instr_cell(pt: dict | None) -> str:
    """Instructions pterun runs per call, and the program's count when folding at load removed some."""
    if not pt or pt.get("instructions") is None:
        return "—"
    n, plan = pt["instructions"], pt.get("plan_instructions")
    return f"{n} of {plan}" if plan and plan != n else str(n)


def aggregate(results: list[dict]) -> dict | None:
    ok = [r for r in results if "error_type" not in r]
    if not ok:
        return None
    agg = {k: med(r.get(k) for r in ok) for k in KEYS}
    agg["rounds"] = len(ok)
    agg["calls"] = sum(r.get("calls", 0) for r in ok)
    agg["instructions"] = ok[0].get("instructions")
    agg["plan_instructions"] = ok[0].get("plan_instructions")
    agg["inputs"] = ok[0].get("inputs")
    return agg


def error_label(results: list[dict]) -> str | None:
    errs = [r for r in results if "error_type" in r]
    if not errs or len(errs) < len(results):
        return None
    e = errs[0]
    msg = e.get("error", "")
    if e["error_type"] == "DelegateError" and ("not available" in msg or "XnnpackBackend" in msg):
        return "n/a (XNNPACK delegate not available)"
    return f"error: {e['error_type']}"


def bench_model(name: str, pte: Path, args, env, tmp: Path, log) -> dict:
    runtimes = [("pterun", args.py)] + ([("executorch", args.ref)] if args.ref else [])
    per = {rt: [] for rt, _ in runtimes}
    failed = set()
    err = None
    t_start = time.perf_counter()
    for r in range(args.rounds):
        order = runtimes if r % 2 == 0 else list(reversed(runtimes))
        for rt, py in order:
            if rt in failed:
                continue
            save = tmp / f"{name}.{rt}.npz" if r == 0 else None
            res = run_process(py, rt, pte, args, save, env)
            res["round"] = r
            per[rt].append(res)
            if "error_type" in res:
                failed.add(rt)  # deterministic failures (missing delegate/operator): do not retry
                log(f"  round {r + 1} {rt:10s} {res['error_type']}: {res['error'][:160]}")
            else:
                log(f"  round {r + 1} {rt:10s} median {fmt_t(res['median_s']):>10s}  p90 {fmt_t(res['p90_s']):>10s}"
                    f"  first {fmt_t(res['first_call_s']):>10s}  load {fmt_t(res['load_s']):>10s}  import "
                    f"{fmt_t(res['import_s']):>9s}  rss {fmt_mb(res['peak_rss_mb']):>7s}  ({res['calls']} calls)")
        if r == 0 and len(runtimes) == 2 and not failed:
            err = compare_outputs(tmp / f"{name}.pterun.npz", tmp / f"{name}.executorch.npz")
        if len(failed) == len(runtimes):
            break
        if time.perf_counter() - t_start > args.model_budget and r + 1 < args.rounds:
            log(f"  (stopping after {r + 1} round(s): the model's time budget of {args.model_budget:.0f} s is spent)")
            break
    row = {"model": name, "pte": str(pte.relative_to(REPO)) if pte.is_relative_to(REPO) else str(pte),
           "pterun": aggregate(per["pterun"]), "pterun_error": error_label(per["pterun"]),
           "reference": aggregate(per["executorch"]) if args.ref else None,
           "reference_error": error_label(per["executorch"]) if args.ref else None,
           "max_rel_err": err, "raw": per, "seconds": time.perf_counter() - t_start}
    finish_row(row)
    return row


RATIO_KEYS = ("median_s", "p90_s", "first_call_s", "load_s", "import_s", "peak_rss_mb")


def finish_row(row) -> None:
    """Ratios (paired by round) and targets of a row whose ``raw`` results are in place."""
    row["ratios"] = paired_ratios(row["raw"])
    row["targets"] = model_targets(row)


def paired_ratios(raw: dict) -> dict:
    """pterun/reference ratio of each key: the median over rounds of the ratio within a round (both processes
    ran back to back, so they saw about the same machine load); without such pairs, None."""
    pts = {r["round"]: r for r in raw.get("pterun", []) if "error_type" not in r}
    refs = {r["round"]: r for r in raw.get("executorch", []) if "error_type" not in r}
    out = {}
    for k in RATIO_KEYS:
        rs = [ratio(pts[n].get(k), refs[n].get(k)) for n in sorted(pts) if n in refs]
        out[k] = med(rs)
    out["rounds_paired"] = len([n for n in pts if n in refs])
    return out


# --- targets ----------------------------------------------------------------------------------------------


def model_targets(row) -> list[dict]:
    """[{target, measured, met}] of the targets that apply to one model (met None: not measurable)."""
    name, pt, rat = row["model"], row["pterun"], row["ratios"]
    out = []
    if name in RATIO_TARGETS:
        lim = RATIO_TARGETS[name]
        r = rat["median_s"]
        txt = f"median ≤ {lim:g}× ref" if lim >= 1 else f"≥ {1 / lim:.0f}× faster than ref"
        out.append({"target": txt,
                    "measured": fmt_ratio(r) if r is not None else (row.get("pterun_error") or "n/a"),
                    "met": None if r is None else r <= lim})
    if name in LOAD_TARGETS and pt:
        lim = LOAD_TARGETS[name]
        out.append({"target": f"load ≤ {lim * 1e3:.0f} ms", "measured": fmt_t(pt["load_s"]),
                    "met": pt["load_s"] <= lim})
    if name in RSS_TARGETS:
        lim = RSS_TARGETS[name]
        r = rat["peak_rss_mb"]
        out.append({"target": f"peak RSS ≤ {lim:g}× ref",
                    "measured": fmt_ratio(r) if r is not None else (row.get("pterun_error") or "n/a"),
                    "met": None if r is None else r <= lim})
    if name in SMALL_PROGRAMS and pt and pt.get("instructions") is not None:
        # the program's own instruction count, as ExecuTorch runs it: folding some at load is pterun's gain
        n = pt.get("plan_instructions") or pt["instructions"]
        lim = SMALL_FIXED_S + SMALL_PER_INSTR_S * n
        out.append({"target": f"median ≤ 20 µs + 2 µs × {n} = {fmt_t(lim)}", "measured": fmt_t(pt["median_s"]),
                    "met": pt["median_s"] <= lim})
    if not out and row.get("pterun_error") and (name in RATIO_TARGETS or name in RSS_TARGETS or
                                                  name in LOAD_TARGETS):
        out.append({"target": "targets", "measured": row["pterun_error"], "met": None})
    return out


def global_targets(rows: list[dict], ref_used: bool) -> tuple[list[dict], dict]:
    out, extra = [], {}
    pt_imports = [r["import_s"] for row in rows for r in row["raw"]["pterun"] if "import_s" in r]
    ref_imports = [r["import_s"] for row in rows for r in row["raw"].get("executorch", []) if "import_s" in r]
    pi = med(pt_imports)
    ri = med(ref_imports)
    if pi is not None:
        out.append({"target": "`import pterun` ≤ 0.25 s", "measured": f"{fmt_t(pi)} (median of "
                    f"{len(pt_imports)} processes)", "met": pi <= IMPORT_TARGET_S})
    if pi is not None and ri is not None:
        r = pi / ri
        out.append({"target": "`import pterun` ≤ 1/10 of `import executorch.runtime`",
                    "measured": f"{fmt_ratio(r)} ({fmt_t(pi)} vs {fmt_t(ri)})", "met": r <= IMPORT_RATIO_TARGET})
    extra["import_pterun_s"], extra["import_reference_s"] = pi, ri
    by = {row["model"]: row for row in rows}
    few, many = by.get("few_ops_portable"), by.get("many_ops_portable")
    if few and many and few["pterun"] and many["pterun"]:
        n1, t1 = few["pterun"]["instructions"], few["pterun"]["median_s"]
        n2, t2 = many["pterun"]["instructions"], many["pterun"]["median_s"]
        if n2 != n1:
            slope = (t2 - t1) / (n2 - n1)
            fixed = t1 - slope * n1
            extra.update(per_call_fixed_s=fixed, per_instruction_s=slope)
            out.append({"target": "per-call fixed overhead ≤ 20 µs (fit of few_ops/many_ops)",
                        "measured": fmt_t(fixed) if fixed >= 0 else f"≈ 0 (fit: −{fmt_t(-fixed)}, within noise)",
                        "met": fixed <= SMALL_FIXED_S})
            out.append({"target": "per-instruction overhead ≤ 2 µs (fit of few_ops/many_ops)",
                        "measured": fmt_t(slope), "met": slope <= SMALL_PER_INSTR_S})
            if few["reference"] and many["reference"]:
                rs = (many["reference"]["median_s"] - few["reference"]["median_s"]) / (n2 - n1)
                extra.update(reference_per_call_fixed_s=few["reference"]["median_s"] - rs * n1,
                             reference_per_instruction_s=rs)
    for row in rows:
        for t in row["targets"]:
            out.append({"target": f"{row['model']}: {t['target']}", "measured": t["measured"], "met": t["met"]})
    return out, extra


def met_mark(m) -> str:
    return "n/a" if m is None else ("✅ met" if m else "❌ missed")


# --- report -----------------------------------------------------------------------------------------------


def results_markdown(rows, gtargets, extra, meta) -> str:
    L = []
    L.append(f"Measured {meta['date']} on {meta['machine']}; commit {meta['commit']}; load average "
             f"{meta['loadavg_start']} at start, {meta['loadavg_end']} at end. Command: `{meta['command']}`")
    L.append("")
    ref = meta["reference"]
    head = ["model", "instr", "pterun median", "pterun p90"]
    if ref:
        head += ["ref median", "ref p90", "**ratio** (median)"]
    head += ["pterun first call"] + (["ref first call"] if ref else []) + ["pterun load"] + \
        (["ref load"] if ref else []) + ["pterun import"] + (["ref import"] if ref else []) + \
        ["pterun peak RSS"] + (["ref peak RSS", "RSS ratio", "max rel err"] if ref else []) + \
        ["rounds", "targets"]
    L.append("| " + " | ".join(head) + " |")
    L.append("|" + "|".join("---" if i == 0 or h == "targets" else "---:" for i, h in enumerate(head)) + "|")
    for row in rows:
        pt, rf = row["pterun"], row["reference"]
        na = row["pterun_error"] or "—"
        rna = row["reference_error"] or "—"

        def P(k, f=fmt_t):  # the error label goes in the first pterun column only
            return f(pt[k]) if pt else (na if k == "median_s" else "—")

        def R(k, f=fmt_t):
            return f(rf[k]) if rf else (rna if k == "median_s" else "—")

        cells = [f"`{row['model']}`", _instr_cell(pt), P("median_s"), P("p90_s")]
        if ref:
            cells += [R("median_s"), R("p90_s"), f"**{fmt_ratio(row['ratios']['median_s'])}**"]
        cells += [P("first_call_s")] + ([R("first_call_s")] if ref else []) + [P("load_s")] + \
            ([R("load_s")] if ref else []) + [P("import_s")] + ([R("import_s")] if ref else []) + \
            [P("peak_rss_mb", fmt_mb)]
        if ref:
            cells += [R("peak_rss_mb", fmt_mb), fmt_ratio(row["ratios"]["peak_rss_mb"]), fmt_err(row["max_rel_err"])]
        rounds = "/".join(str(x["rounds"]) for x in (pt, rf) if x) or "0"
        cells += [rounds, "; ".join(f"{t['target']}: {t['measured']} {met_mark(t['met'])}" for t in row["targets"])
                  or ""]
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    if gtargets:
        L.append("| target | measured | met? |")
        L.append("|---|---|---|")
        for t in gtargets:
            L.append(f"| {t['target']} | {t['measured']} | {met_mark(t['met'])} |")
        L.append("")
    if "per_call_fixed_s" in extra:
        s = (f"Per-call cost fit (median = fixed + per-instruction × instructions, from `few_ops_portable` and "
             f"`many_ops_portable`): pterun {fmt_t(extra['per_call_fixed_s'])} + {fmt_t(extra['per_instruction_s'])}"
             f" per instruction")
        if "reference_per_instruction_s" in extra:
            s += (f"; reference {fmt_t(extra['reference_per_call_fixed_s'])} + "
                  f"{fmt_t(extra['reference_per_instruction_s'])} per instruction")
        L.append(s + ".")
        L.append("")
    if ref:
        L.append("Ratios are pterun / reference (below 1: pterun is faster or smaller): the median over rounds of "
                 "the ratio within a round (the two processes of a round run back to back). Other numbers are the "
                 "median over rounds of one fresh process's own measurement. `max rel err` compares the first "
                 "round's outputs (max |pterun − ref| / max |ref|, ✗ above 1e-3).")
    else:
        L.append("pterun alone (no reference venv): each number is the median over rounds of one fresh process's "
                 "own measurement.")
    return "\n".join(L)


def write_chart(rows, path: Path, log) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        log(f"(matplotlib is not importable by {sys.executable}: skipping {path.name}; "
            f"`{sys.executable} -m pip install matplotlib` to get the chart)")
        return False
    data = [(row["model"], row["ratios"]["median_s"]) for row in rows if row["ratios"]["median_s"]]
    if not data:
        log("(no model ran in both runtimes: no ratio chart)")
        return False
    names = [d[0] for d in data]
    vals = [d[1] for d in data]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(data) + 2), 4.8))
    colors = []
    for n, v in data:
        lim = RATIO_TARGETS.get(n, 1.0)
        colors.append("#3a923a" if v <= lim else "#d9822b")
    x = np.arange(len(data))
    ax.bar(x, vals, color=colors)
    ax.axhline(1.0, color="black", lw=1)
    for i, n in enumerate(names):
        if n in RATIO_TARGETS:
            ax.plot([i - 0.4, i + 0.4], [RATIO_TARGETS[n]] * 2, color="red", lw=2)
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:.3g}×", ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    span = vals + [RATIO_TARGETS[n] for n in names if n in RATIO_TARGETS] + [1.0]
    lo, hi = 10 ** math.floor(math.log10(min(span) / 1.5)), 10 ** math.ceil(math.log10(max(span) * 1.5))
    ax.set_ylim(lo, hi)
    ticks = [10.0 ** k for k in range(int(round(math.log10(lo))), int(round(math.log10(hi))) + 1)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("median latency: pterun / reference")
    ax.set_title("pterun vs ExecuTorch runtime, same .pte (below 1 = pterun faster)\n"
                 "green: target met or faster; orange: missed; red line: target", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def profile_section(name: str, rep: dict, top: int = 12) -> str:
    sys.path.insert(0, str(HERE))
    from run_one import format_profile  # noqa: PLC0415  (run_one imports numpy only at this point)
    return format_profile(rep, name, top)


# --- main -------------------------------------------------------------------------------------------------


def git_commit() -> str:
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                           timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return (c or "?") + (" + uncommitted src changes" if dirty else "")
    except Exception:
        return "?"


def resolve_ref(value: str | None) -> str | None:
    if value in (None, "auto"):
        cand = REPO / ".ref" / "bin" / "python"
        return str(cand) if cand.exists() else None
    if value.lower() in ("none", "no", ""):
        return None
    p = Path(value)
    if not p.is_absolute():
        p = (Path.cwd() / p)
    if not p.exists():
        raise SystemExit(f"bench.py: --ref {value}: no such interpreter")
    return str(p)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="auto", help="python of the reference venv (torch + executorch); 'auto' "
                    "(default) uses .ref/bin/python if it exists, 'none' times pterun alone")
    ap.add_argument("--py", default=sys.executable, help="python that runs pterun (default: this one)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per runtime and model (default 3)")
    ap.add_argument("--models", nargs="*", help="model names or globs (default: all available); see --list")
    ap.add_argument("--out", type=Path, default=HERE / "out", help="output folder (default bench/out)")
    ap.add_argument("--budget", type=float, default=2.5, help="seconds of timed calls per process (default 2.5)")
    ap.add_argument("--min-calls", type=int, default=5, help="timed calls per process at least (default 5) ...")
    ap.add_argument("--max-time", type=float, default=15.0,
                    help="... unless they take longer than this many seconds (then at least 2; default 15)")
    ap.add_argument("--model-budget", type=float, default=120.0,
                    help="seconds per model after which no further round starts (default 120)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before a process is abandoned")
    ap.add_argument("--threads", type=int, default=0, help="N threads for both runtimes: sets OMP/OPENBLAS/"
                    "MKL_NUM_THREADS=N in both runtimes' processes and PTERUN_NUM_THREADS=N in pterun's (pterun "
                    "then computes on N threads of its own, holding BLAS at one thread per pterun thread); "
                    "default: leave the environment alone")
    ap.add_argument("--profile", action="store_true", help="also profile pterun per operator (OUT/profile.md)")
    ap.add_argument("--no-export", action="store_true", help="do not export missing models")
    ap.add_argument("--live-src", action="store_true", help="import pterun from src/ as it is when each process "
                    "starts (default: from a copy of src/ taken and byte-compiled when the run begins, so that edits "
                    "made during a long run do not mix into it; the live tree is not byte-compiled, so with "
                    "PYTHONDONTWRITEBYTECODE set each process compiles pterun from source, inflating import and load)")
    ap.add_argument("--update-readme", action="store_true", help="put the table into bench/README.md")
    ap.add_argument("--list", action="store_true", help="list model names and exit")
    ap.add_argument("--report", type=Path, metavar="RESULTS_JSON",
                    help="only re-render OUT/results.md, ratios.png (and the README with --update-readme) from a "
                    "results.json of an earlier run")
    args = ap.parse_args(argv)
    if args.report:
        return rerender(args)
    args.ref = resolve_ref(args.ref)
    models = all_models()
    if args.list:
        for n, (p, kind) in models.items():
            print(f"{n:24s} {kind:8s} {p.relative_to(REPO)}{'' if p.exists() else '  (missing)'}")
        return 0

    def log(msg):
        print(msg, flush=True)

    wanted = list(models)
    if args.models:
        wanted = [n for n in models if any(fnmatch.fnmatchcase(n, pat) for pat in args.models)]
        unknown = [pat for pat in args.models if not any(fnmatch.fnmatchcase(n, pat) for n in models)]
        if unknown:
            ap.error(f"unknown model(s) {unknown}; see --list")
    missing = [n for n in wanted if models[n][1] == "full" and not models[n][0].exists()]
    if missing and not args.no_export:
        if args.ref:
            families = sorted({n.rsplit("_", 1)[0] for n in missing})
            log(f"exporting {', '.join(missing)} with {args.ref} ...")
            subprocess.run([args.ref, str(EXPORT), *families], cwd=REPO, check=False)
        else:
            log(f"no reference venv (--ref): cannot export {', '.join(missing)}; benchmarking what exists")
    wanted = [n for n in wanted if models[n][0].exists()]
    if not wanted:
        log("nothing to benchmark")
        return 1

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if args.threads:
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                       f"Python {platform.python_version()}, NumPy {np.__version__}",
            "commit": git_commit(), "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "command": "python bench/bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                    else sys.argv[1:])),
            "reference": args.ref, "pterun_python": args.py, "rounds": args.rounds, "budget_s": args.budget,
            "threads": args.threads or "default",
            "pterun_src": "live src/" if args.live_src else "byte-compiled copy of src/ taken at start"}
    log(f"pterun: {args.py}; reference: {args.ref or 'none (pterun alone)'}; {len(wanted)} models, "
        f"{args.rounds} rounds")
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pterun-bench-") as td:
        args.pterun_src = None
        if not args.live_src:
            args.pterun_src = Path(td) / "src"
            shutil.copytree(REPO / "src", args.pterun_src,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
            # once, as pip does for an installed package: otherwise with PYTHONDONTWRITEBYTECODE set every pterun
            # process would compile it from source and count that in its import and load times
            done = subprocess.run([args.py, "-m", "compileall", "-q", str(args.pterun_src)], capture_output=True,
                                  text=True, check=False)
            if done.returncode:
                log(f"(could not byte-compile the copy of src/: {(done.stderr or done.stdout).strip()[-300:]})")
        for n in wanted:
            log(f"[{n}] {models[n][0].relative_to(REPO)}")
            rows.append(bench_model(n, models[n][0], args, env, Path(td), log))
        run_rest(rows, models, args, env, meta, t0, log)
    return 0


def rerender(args) -> int:
    data = json.loads(args.report.read_text())
    rows, meta = data["rows"], data["meta"]
    for row in rows:
        pt, raw = row.get("pterun"), (row.get("raw") or {}).get("pterun") or []
        if pt and "plan_instructions" not in pt:  # a run from before the aggregate kept it
            pt["plan_instructions"] = next((r["plan_instructions"] for r in raw if "plan_instructions" in r), None)
        finish_row(row)
    args.out.mkdir(parents=True, exist_ok=True)
    md = write_reports(rows, meta, args, print)
    if args.update_readme:
        update_readme(md, print)
    return 0


def write_reports(rows, meta, args, log) -> str:
    gt, extra = global_targets(rows, bool(meta.get("reference")))
    md = results_markdown(rows, gt, extra, meta)
    print()
    print(md)
    (args.out / "results.md").write_text(md + "\n")
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "targets": gt, "extra": extra},
                                                      indent=1, default=str) + "\n")
    charted = write_chart(rows, args.out / "ratios.png", log)
    log(f"\nwrote {args.out / 'results.md'}, {args.out / 'results.json'}"
        + (f", {args.out / 'ratios.png'}" if charted else ""))
    return md


def update_readme(md: str, log) -> None:
    text = README.read_text() if README.exists() else ""
    if README_BEGIN in text and README_END in text:
        head, rest = text.split(README_BEGIN, 1)
        _, tail = rest.split(README_END, 1)
        README.write_text(f"{head}{README_BEGIN}\n{md}\n{README_END}{tail}")
        log(f"updated {README}")
    else:
        log(f"{README} has no {README_BEGIN} / {README_END} markers: not updated")


def run_rest(rows, models, args, env, meta, t0, log) -> None:
    meta["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta["seconds"] = time.perf_counter() - t0
    md = write_reports(rows, meta, args, log)
    log(f"(benchmark took {meta['seconds']:.0f} s)")

    if args.profile:
        sections = []
        for row in rows:
            if not row["pterun"]:
                continue
            pte = models[row["model"]][0]
            res = run_process(args.py, "pterun", pte, args, None, env, profile=True)
            if "profile" in res:
                sec = profile_section(row["model"], res["profile"])
                sections.append(sec)
                print("\n" + sec, flush=True)
        (args.out / "profile.md").write_text("# pterun per-operator profile\n\n" + "\n\n".join(sections) + "\n")
        log(f"\nwrote {args.out / 'profile.md'}")

    if args.update_readme:
        update_readme(md, log)


if __name__ == "__main__":
    sys.exit(main())
