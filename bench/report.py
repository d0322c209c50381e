"""The benchmark's report: number formats, the targets each result is held to, results.md, the ratio chart,
the profile sections and the README table. ``bench.py`` measures; this module says what the measurements mean."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

from configs import describe_config, parse_config

HERE = Path(__file__).resolve().parent

README = HERE / "README.md"
README_BEGIN = "<!-- bench:results:begin -->"
README_END = "<!-- bench:results:end -->"

# --- targets ----------------------------------------------------------------------------------------------
# median-latency ratio pterun/reference
# (issue #12: XNNPACK ResNet18 and MobileNetV2 within 1.05x of ExecuTorch at 1 and at 2 threads)
RATIO_TARGETS = {"resnet18_xnnpack": 1.05, "mobilenet_v2_xnnpack": 1.05,
                 "resnet18_portable": 1 / 20, "mobilenet_v2_portable": 1 / 20}
LOAD_TARGETS = {"resnet18_portable": 0.050, "resnet18_xnnpack": 0.050}  # seconds, load_program + load_method
LOAD_RATIO_TARGETS = {"resnet18_xnnpack": 1.5}  # load_program + load_method, pterun / ExecuTorch
RSS_TARGETS = {"mobilenet_v2_portable": 0.2, "mobilenet_v2_xnnpack": 0.2}  # peak RSS ratio pterun/reference
SMALL_PROGRAMS = {"mlp_portable", "few_ops_portable", "many_ops_portable", "fx_mlp"}
SMALL_FIXED_S, SMALL_PER_INSTR_S = 20e-6, 2e-6  # median <= 20 µs + 2 µs x instructions
IMPORT_TARGET_S, IMPORT_RATIO_TARGET = 0.15, 0.1
# issue #24's done-when as far as bench.py measures it (the LLMs': llm_bench.py), pterun's defaults / ExecuTorch on
# all the cores: transformers per call (each, geomean), the MLP per call, the portable ResNet18 / ExecuTorch's
# XNNPACK one, and the loads of LOAD_MODELS the first time (`defaults`) and once cached (`cached`)
TRANSFORMERS = ("fx_xnn_transformer", "bert_tiny_xnnpack", "whisper_encoder_xnnpack")
TRANSFORMER_RATIO, TRANSFORMER_GEOMEAN, MLP_RATIO, PORTABLE_VS_XNNPACK = 1.15, 1.0, 1.0, 1.5
LOAD_MODELS = ("resnet18_xnnpack", "mobilenet_v2_xnnpack")
FIRST_LOAD_RATIO, CACHED_LOAD_RATIO = 1.5, 0.5


# --- formatting -------------------------------------------------------------------------------------------


def med(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _instr_cell(pt: dict | None) -> str:
    """Instructions pterun runs per call, and the program's count when folding at load removed some."""
    if not pt or pt.get("instructions") is None:
        return "—"
    n, plan = pt["instructions"], pt.get("plan_instructions")
    return f"{n} of {plan}" if plan and plan != n else str(n)


def _invokes_cell(pt: dict | None) -> str:
    """Delegate calls pterun makes per ``execute``: LiteRT invokes where the LiteRT engine runs them all (a merged
    call is one), else the count with the engines named."""
    if not pt or pt.get("delegate_calls") is None:
        return "—"
    n, engines = pt["delegate_calls"], set(pt.get("engines") or ())
    n = f"{n:g}" if isinstance(n, float) else str(n)
    return n if engines <= {"litert"} else f"{n} ({', '.join(sorted(engines))})"


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


# --- targets ----------------------------------------------------------------------------------------------


def model_targets(row, cfg: str) -> list[dict]:
    """[{target, measured, met}] of the targets that apply to one model in one pterun configuration."""
    name, pt, rat = row["model"], row["agg"].get(cfg), row["ratios"].get(cfg, {})
    err = row["errors"].get(cfg)
    out = []
    if name in RATIO_TARGETS:
        lim = RATIO_TARGETS[name]
        r = rat.get("median_s")
        txt = f"median ≤ {lim:g}× ref" if lim >= 1 else f"≥ {1 / lim:.0f}× faster than ref"
        out.append({"target": txt, "measured": fmt_ratio(r) if r is not None else (err or "n/a"),
                    "met": None if r is None else r <= lim})
    if name in LOAD_RATIO_TARGETS:
        lim = LOAD_RATIO_TARGETS[name]
        r = rat.get("load_s")
        out.append({"target": f"load ≤ {lim:g}× ref", "measured": fmt_ratio(r) if r is not None else (err or "n/a"),
                    "met": None if r is None else r <= lim})
    if name in LOAD_TARGETS and pt:
        lim = LOAD_TARGETS[name]
        out.append({"target": f"load ≤ {lim * 1e3:.0f} ms", "measured": fmt_t(pt["load_s"]),
                    "met": pt["load_s"] <= lim})
    if name in RSS_TARGETS:
        lim = RSS_TARGETS[name]
        r = rat.get("peak_rss_mb")
        out.append({"target": f"peak RSS ≤ {lim:g}× ref", "measured": fmt_ratio(r) if r is not None else (err or "n/a"),
                    "met": None if r is None else r <= lim})
    if name in SMALL_PROGRAMS and pt and pt.get("instructions") is not None:
        # the program's own instruction count, as ExecuTorch runs it: folding some at load is pterun's gain
        n = pt.get("plan_instructions") or pt["instructions"]
        lim = SMALL_FIXED_S + SMALL_PER_INSTR_S * n
        out.append({"target": f"median ≤ 20 µs + 2 µs × {n} = {fmt_t(lim)}", "measured": fmt_t(pt["median_s"]),
                    "met": pt["median_s"] <= lim})
    return out


def _pt_configs(rows, order=()) -> list[str]:
    """pterun's configurations in the run, in order."""
    seen = [c for c in order if parse_config(c).is_pterun]
    for row in rows:
        for c in row["configs"]:
            if parse_config(c).is_pterun and c not in seen:
                seen.append(c)
    return seen


def global_targets(rows: list[dict]) -> tuple[list[dict], dict]:
    out, extra = [], {}
    pt_imports = [r["import_s"] for row in rows for c, rs in row["raw"].items() if parse_config(c).is_pterun
                  for r in rs if "import_s" in r]
    ref_imports = [r["import_s"] for row in rows for c, rs in row["raw"].items() if parse_config(c).is_ref
                   for r in rs if "import_s" in r]
    pi, ri = med(pt_imports), med(ref_imports)
    if pi is not None:
        out.append({"target": f"`import pterun` ≤ {IMPORT_TARGET_S:g} s", "measured": f"{fmt_t(pi)} (median of "
                    f"{len(pt_imports)} processes)", "met": pi <= IMPORT_TARGET_S})
    if pi is not None and ri is not None:
        r = pi / ri
        out.append({"target": "`import pterun` ≤ 1/10 of `import executorch.runtime`",
                    "measured": f"{fmt_ratio(r)} ({fmt_t(pi)} vs {fmt_t(ri)})", "met": r <= IMPORT_RATIO_TARGET})
    extra["import_pterun_s"], extra["import_reference_s"] = pi, ri
    by = {row["model"]: row for row in rows}
    few, many = by.get("few_ops_portable"), by.get("many_ops_portable")
    if few and many:
        fits = {}
        for c in few["configs"]:
            a, b = few["agg"].get(c), many["agg"].get(c)
            if not a or not b or a.get("median_s") is None or b.get("median_s") is None:
                continue
            n1 = a.get("instructions") or a.get("plan_instructions") or 4
            n2 = b.get("instructions") or b.get("plan_instructions") or 300
            if n2 != n1:
                slope = (b["median_s"] - a["median_s"]) / (n2 - n1)
                fits[c] = (a["median_s"] - slope * n1, slope)
        extra["per_call_fit"] = fits
        for c, (fixed, slope) in fits.items():
            if not parse_config(c).is_pterun:
                continue
            out.append({"target": f"{c}: per-call fixed overhead ≤ 20 µs (fit of few_ops/many_ops)",
                        "measured": fmt_t(fixed) if fixed >= 0 else f"≈ 0 (fit: −{fmt_t(-fixed)}, within noise)",
                        "met": fixed <= SMALL_FIXED_S})
            out.append({"target": f"{c}: per-instruction overhead ≤ 2 µs (fit of few_ops/many_ops)",
                        "measured": fmt_t(slope), "met": slope <= SMALL_PER_INSTR_S})
    return out, extra


def issue24_targets(rows: list[dict]) -> list[dict]:
    """[{target, measured, met}] of issue #24's done-when, as far as the run's models and configurations reach
    (see :data:`TRANSFORMERS`); a target whose model or configuration the run lacks is left out."""
    by = {row["model"]: row for row in rows}

    def r(name, cfg, key):
        row = by.get(name)
        return None if row is None else row["ratios"].get(cfg, {}).get(key)

    out = []
    tr = [(n, r(n, "defaults", "median_s")) for n in TRANSFORMERS if r(n, "defaults", "median_s") is not None]
    for n, x in tr:
        out.append({"target": f"{n}: per call ≤ {TRANSFORMER_RATIO:g}× ExecuTorch (`defaults`)",
                    "measured": fmt_ratio(x), "met": x <= TRANSFORMER_RATIO})
    if tr:
        g = math.exp(statistics.fmean(math.log(x) for _, x in tr))
        out.append({"target": f"geometric mean of those {len(tr)} ≤ {TRANSFORMER_GEOMEAN:g}×",
                    "measured": fmt_ratio(g), "met": g <= TRANSFORMER_GEOMEAN})
    x = r("mlp_xnnpack", "defaults", "median_s")
    if x is not None:
        out.append({"target": f"mlp_xnnpack: per call ≤ {MLP_RATIO:g}× ExecuTorch (`defaults`)",
                    "measured": fmt_ratio(x), "met": x <= MLP_RATIO})
    port, xnn = by.get("resnet18_portable"), by.get("resnet18_xnnpack")
    ref = (xnn or {}).get("pairs", {}).get("defaults")
    a = (port or {}).get("agg", {}).get("defaults") or {}
    b = (xnn or {}).get("agg", {}).get(ref) or {} if ref else {}
    if a.get("median_s") is not None and b.get("median_s") is not None:
        x = a["median_s"] / b["median_s"]  # two programs: medians over rounds, not paired by round
        out.append({"target": f"resnet18_portable (`defaults`) ≤ {PORTABLE_VS_XNNPACK:g}× ExecuTorch's "
                              f"resnet18_xnnpack (`{ref}`)",
                    "measured": f"{fmt_ratio(x)} ({fmt_t(a['median_s'])} vs {fmt_t(b['median_s'])})",
                    "met": x <= PORTABLE_VS_XNNPACK})
    for n in LOAD_MODELS:
        for cfg, lim, what in (("defaults", FIRST_LOAD_RATIO, "the first time"),
                               ("cached", CACHED_LOAD_RATIO, "once cached")):
            x = r(n, cfg, "load_s")
            if x is not None:
                got = (by[n]["agg"].get(cfg) or {}).get("load_s")
                out.append({"target": f"{n}: load ≤ {lim:g}× ExecuTorch's, {what} (`{cfg}`)",
                            "measured": f"{fmt_ratio(x)} ({fmt_t(got)})", "met": x <= lim})
    return out


def met_mark(m) -> str:
    return "n/a" if m is None else ("✅ met" if m else "❌ missed")


# --- report -----------------------------------------------------------------------------------------------


def _peer_configs(rows, order=()) -> list[str]:
    """The peer's configurations (``peer``) in the run, in order."""
    return [c for c in dict.fromkeys([*order, *(c for row in rows for c in row["configs"])]) if parse_config(c).is_peer]


def _peer_columns(rows) -> list[tuple[str, str]]:
    """(pterun configuration, peer configuration) of the pterun / peer columns, in the order of the run."""
    pairs = {}
    for row in rows:
        for c, p in row.get("peer_pairs", {}).items():
            pairs.setdefault(c, p)
    return list(pairs.items())


def _median_cell(row, c: str) -> str:
    """One configuration's cell of the overview: median latency (ratio to its paired ExecuTorch), or why none."""
    if c not in row["configs"]:
        return "(no delegate)" if parse_config(c).engine == "litert" else "—"
    a = row["agg"].get(c)
    if not a:
        return row["errors"].get(c) or "—"
    r = row["ratios"].get(c, {}).get("median_s")
    return fmt_t(a["median_s"]) + (f" (**{fmt_ratio(r)}**)" if r is not None else "")


def _overview(rows, configs, pts) -> list[str]:
    """The first table: one column per configuration, then one per pterun / peer pair."""
    vs_peer = _peer_columns(rows)
    L = ["| model | instr | invokes | " + " | ".join([f"`{c}`" for c in configs]
                                                    + [f"`{c}` / `{p}`" for c, p in vs_peer])
         + " |", "|---|---:|---:|" + "---:|" * (len(configs) + len(vs_peer))]
    for row in rows:
        first = next((row["agg"][c] for c in pts if row["agg"].get(c)), None)
        cells = [f"`{row['model']}`", _instr_cell(first), _invokes_cell(first)]
        cells += [_median_cell(row, c) for c in configs]
        for c, p in vs_peer:
            r = row.get("peer_ratios", {}).get(c, {}).get("median_s")
            cells.append(f"**{fmt_ratio(r)}**" if r is not None else
                         "n/a" if row["agg"].get(c) and row["errors"].get(p) else "—")
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("`instr`: instructions pterun runs per call (of the program's, where some were folded at load); "
             "`invokes`: its delegate calls per call, each one LiteRT invoke (a merged call is one), in the first "
             "pterun configuration of the run. "
             "Cells: median latency of one `execute`; in parentheses pterun / ExecuTorch at the same thread count "
             "(`defaults` against ExecuTorch's own default, all cores), the median over rounds of the ratio within "
             "a round. `(no delegate)`: the program has no XNNPACK delegate, so the engine does not apply."
             + (" `peer`: executorch-numpy-runtime, in parentheses peer / ExecuTorch on all cores; `X` / `peer`: "
                "pterun / peer, at the same (all the cores) thread count, paired by round as well." if vs_peer
                or any(parse_config(c).is_peer for c in configs) else ""))
    return L


def _engine_cell(cfg, a) -> str:
    if cfg.is_ref:
        return "ExecuTorch"
    if cfg.is_peer:
        return "executorch-numpy-runtime"
    if a.get("engines"):
        return ", ".join(sorted(set(a["engines"])))
    return "—" if a.get("engines") == [] else "numpy (only engine)"


def _detail_line(row, c: str, width: int) -> str:
    """One (model, configuration) line of the second table; a lazy load (the peer's) is marked †, and its load
    ratio is (load + first call) / the reference's (load + first call)."""
    a, rat, cfg = row["agg"].get(c), row["ratios"].get(c, {}), parse_config(c)
    if not a:
        return f"| `{row['model']}` | `{c}` | {row['errors'].get(c) or '—'} |" + " |" * (width - 3)
    lazy = "†" if a.get("load_lazy") else ""
    thr = a.get("threads") if a.get("threads") is not None else (cfg.threads or "default")
    load_ratio = rat.get("load_first_s" if lazy else "load_s")
    cells = [f"`{row['model']}`", f"`{c}`", _engine_cell(cfg, a), str(thr), fmt_t(a["median_s"]), fmt_t(a["p90_s"]),
             f"**{fmt_ratio(rat.get('median_s'))}**" if rat else "(ref)", fmt_t(a["first_call_s"]) + lazy,
             fmt_t(a["load_s"]) + lazy, fmt_ratio(load_ratio) + lazy if rat else "—", fmt_t(a["import_s"]),
             fmt_mb(a["peak_rss_mb"]), fmt_ratio(rat.get("peak_rss_mb")) if rat else "—",
             fmt_err(row["max_rel_err"].get(c)) if rat else "—", str(a["rounds"])]
    return "| " + " | ".join(cells) + " |"


LAZY_NOTE = ("† executorch-numpy-runtime's `load_method` is lazy: the method is loaded in the first call. Its "
             "`load` is only the file being opened and is not comparable; its `first call` holds the real load; "
             "its load ratio is (load + first call) / ExecuTorch's (load + first call).")


def _details(rows) -> list[str]:
    """The second table: every number, one line per (model, configuration)."""
    head = ["model", "config", "engine", "threads", "median", "p90", "**ratio**", "first call", "load", "load ratio",
            "import", "peak RSS", "RSS ratio", "max rel err", "rounds"]
    L = ["| " + " | ".join(head) + " |", "|---|---|---|---:|" + "---:|" * (len(head) - 4)]
    L += [_detail_line(row, c, len(head)) for row in rows for c in row["configs"]]
    L.append("")
    if any((row["agg"].get(c) or {}).get("load_lazy") for row in rows for c in row["configs"]):
        L += [LAZY_NOTE, ""]
    return L


def _vs_peer(rows) -> list[str]:
    """The pterun / peer table (executorch-numpy-runtime), where a pterun configuration pairs with the peer."""
    if not _peer_columns(rows):
        return []
    L = ["pterun / executorch-numpy-runtime (`peer`), same thread count (all the cores), paired by round:", "",
         "| model | config | median | p90 | load + first call | import | peak RSS | max rel err |",
         "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        for c, p in row.get("peer_pairs", {}).items():
            rat = row["peer_ratios"].get(c, {})
            if not rat.get("rounds_paired"):
                why = row["errors"].get(p) or row["errors"].get(c) or "—"
                L.append(f"| `{row['model']}` | `{c}` / `{p}` | {why} |" + " |" * 5)
                continue
            cells = [f"**{fmt_ratio(rat.get('median_s'))}**"] + [fmt_ratio(rat.get(k)) for k in
                                                                   ("p90_s", "load_first_s", "import_s", "peak_rss_mb")]
            L.append(f"| `{row['model']}` | `{c}` / `{p}` | " + " | ".join(cells)
                     + f" | {fmt_err(row.get('max_rel_err_peer', {}).get(c))} |")
    L.append("")
    return L


def _target_tables(rows, gtargets, pts) -> list[str]:
    L = []
    trows = {}
    for row in rows:
        for c, ts in row.get("targets", {}).items():
            for t in ts:
                trows.setdefault(f"{row['model']}: {t['target']}", {})[c] = t
    if trows or gtargets:
        L.append("| target | " + " | ".join(f"`{c}`" for c in pts) + " |")
        L.append("|---|" + "---|" * len(pts))
        for label, per in trows.items():
            L.append(f"| {label} | " + " | ".join(f"{per[c]['measured']} {met_mark(per[c]['met'])}" if c in per else ""
                                                  for c in pts) + " |")
        L.append("")
    if gtargets:
        L.append("| target | measured | met? |")
        L.append("|---|---|---|")
        for t in gtargets:
            L.append(f"| {t['target']} | {t['measured']} | {met_mark(t['met'])} |")
        L.append("")
    return L


def results_markdown(rows, gtargets, extra, meta) -> str:
    L = []
    L.append(f"Measured {meta['date']} on {meta['machine']}; CPU: {meta.get('cpu', '?')}; commit {meta['commit']}; "
             f"load average {meta['loadavg_start']} at start, {meta['loadavg_end']} at end. "
             f"Command: `{meta['command']}`")
    L.append("")
    configs = list(meta.get("configs") or [])
    for row in rows:
        configs += [c for c in row["configs"] if c not in configs]
    pts = _pt_configs(rows, configs)
    L.append("Configurations: " + "; ".join(f"`{c}` = {describe_config(parse_config(c))}" for c in configs) + ".")
    L.append("")
    L += _overview(rows, configs, pts)  # 1. median latency per configuration, ratio to the paired reference
    L.append("")
    L += _details(rows)  # 2. every number, one line per (model, configuration)
    L += _vs_peer(rows)  # 3. pterun / the peer
    L += _target_tables(rows, gtargets, pts)  # 4. targets: one column per pterun configuration
    done = issue24_targets(rows)  # 5. issue #24's done-when, where the run reaches it
    if done:
        L += ["Issue #24's done-when, as far as this run measures it (pterun / ExecuTorch on all the cores, paired "
              "by round):", "", "| target | measured | met? |", "|---|---|---|"]
        L += [f"| {t['target']} | {t['measured']} | {met_mark(t['met'])} |" for t in done]
        L.append("")
    fits = extra.get("per_call_fit") or {}
    if fits:
        L.append("Per-call cost fit (median = fixed + per-instruction × instructions, from `few_ops_portable` and "
                 "`many_ops_portable`): " + "; ".join(f"`{c}` {fmt_t(f)} + {fmt_t(s)} per instruction"
                                                      for c, (f, s) in fits.items()) + ".")
        L.append("")
    L.append("Ratios are pterun / ExecuTorch (below 1: pterun is faster or smaller), paired by round"
             + ("; the peer's rows are peer / ExecuTorch" if _peer_configs(rows) else "") + ". Other numbers are "
             "the median over rounds of one fresh process's own measurement. `max rel err` compares the first "
             "round's outputs with the paired reference's (max |pterun − ref| / max |ref|, ✗ above 1e-3). "
             "`engine`: what pterun reported running the XNNPACK delegates on.")
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
    pts = _pt_configs(rows) + _peer_configs(rows)  # the peer's bars: peer / ExecuTorch
    data = [row for row in rows if any(row["ratios"].get(c, {}).get("median_s") for c in pts)]
    if not data:
        log("(no model ran in both runtimes: no ratio chart)")
        return False
    names = [row["model"] for row in data]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(data) * len(pts) + 2), 4.8))
    width = 0.8 / max(len(pts), 1)
    x = np.arange(len(data))
    vals_all = []
    for k, c in enumerate(pts):
        vals = [row["ratios"].get(c, {}).get("median_s") or np.nan for row in data]
        vals_all += [v for v in vals if not np.isnan(v)]
        ax.bar(x + (k - (len(pts) - 1) / 2) * width, vals, width, label=c)
    ax.axhline(1.0, color="black", lw=1)
    for i, n in enumerate(names):
        if n in RATIO_TARGETS:
            ax.plot([i - 0.4, i + 0.4], [RATIO_TARGETS[n]] * 2, color="red", lw=2)
    ax.set_yscale("log")
    span = vals_all + [RATIO_TARGETS[n] for n in names if n in RATIO_TARGETS] + [1.0]
    lo, hi = 10 ** math.floor(math.log10(min(span) / 1.5)), 10 ** math.ceil(math.log10(max(span) * 1.5))
    ax.set_ylim(lo, hi)
    ticks = [10.0 ** k for k in range(int(round(math.log10(lo))), int(round(math.log10(hi))) + 1)]
    ax.set_yticks(ticks)
    ax.set_yticklabels([f"{t:g}×" for t in ticks])
    ax.minorticks_off()
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("median latency / ExecuTorch's")
    ax.set_title("vs ExecuTorch, same .pte and thread count (below 1 = faster); red: target",
                 fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def profile_section(name: str, rep: dict, top: int = 12) -> str:
    sys.path.insert(0, str(HERE))
    from run_one import format_profile  # noqa: PLC0415  (run_one imports numpy only at this point)
    return format_profile(rep, name, top)


def write_reports(rows, meta, args, log) -> str:
    gt, extra = global_targets(rows)
    md = results_markdown(rows, gt, extra, meta)
    print()
    print(md)
    (args.out / "results.md").write_text(md + "\n")
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows, "targets": gt, "extra": extra,
                                                       "issue24": issue24_targets(rows)},
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
