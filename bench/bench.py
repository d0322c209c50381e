#!/usr/bin/env python
"""pterun vs the reference ExecuTorch runtime, side by side, in one command.

    .venv/bin/python bench/bench.py --ref .ref/bin/python            # everything (exports models if missing)
    .venv/bin/python bench/bench.py --ref none                       # pterun alone
    .venv/bin/python bench/bench.py --peer .peer/bin/python          # + executorch-numpy-runtime (configuration peer)
    .venv/bin/python bench/bench.py --models 'resnet18_*' mlp_portable --rounds 5
    .venv/bin/python bench/bench.py --profile                        # + per-operator profile of pterun
    .venv/bin/python bench/bench.py --list                           # the model names

For every model, each round starts one fresh process per runtime (``bench/run_one.py``), pterun first in even
rounds and the reference first in odd ones, so both see the same machine load; per-runtime numbers are the
median over rounds of each process's own numbers (median, p90, first call, load, import, peak RSS). The outputs
of the first round are compared (same seeded random inputs in both processes). It writes ``OUT/results.md``,
``OUT/results.json`` and ``OUT/ratios.png`` (if matplotlib is importable here), and with ``--profile``
``OUT/profile.md``. This script never imports torch (run it with the dev venv); only the reference processes
and ``bench/export_models.py`` do. With ``--peer PY``, the configuration ``peer`` runs executorch-numpy-runtime
(ExecuTorch's C++ runtime with NumPy I/O) with that interpreter, paired with ExecuTorch on all cores and with
pterun's configurations on all cores. The report's overview gives pterun's instructions and delegate calls
(LiteRT invokes) per call, and a last table holds the run to issue #24's done-when where the run reaches it
(:func:`report.issue24_targets`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from catalog import EXPORT, all_models, build_parser, chosen, pte_models, shown
from configs import (DEFAULT_CONFIGS, Config, byte_compile, chosen_configs, config_env, describe_config,  # noqa: F401
                     pair_of, parse_config, peer_pair_of)
from report import (fmt_mb, fmt_t, med, model_targets, profile_section, ratio, update_readme,
                    write_reports)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RUN_ONE = HERE / "run_one.py"
MARK = "@@BENCH@@ "

def has_xnnpack(pte: Path) -> bool:
    """Whether the file holds an XNNPACK delegate (the backend id is stored as a plain string)."""
    try:
        with open(pte, "rb") as f:
            return b"XnnpackBackend" in f.read()
    except OSError:
        return False


def cpu_model() -> str:
    """``lscpu``'s "Model name" (flags that matter for XNNPACK appended), else /proc/cpuinfo's, else platform's."""
    name = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                name = line.split(":", 1)[1].strip()
                break
    except Exception:
        pass
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not name and line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    feats = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    return (name or platform.processor() or platform.machine()) + (f" ({', '.join(feats)})" if feats else "")


# --- running ----------------------------------------------------------------------------------------------


def run_process(python: str, cfg: Config, pte: Path, args, save: Path | None, env, profile=False,
                extra=(), cache_dir: str = "") -> dict:
    cmd = [python, str(RUN_ONE), "--runtime", cfg.runtime, str(pte), "--budget", str(args.budget),
           "--min-calls", str(args.min_calls), "--max-time", str(args.max_time), "--quiet", *extra]
    if cfg.runtime == "pterun" and args.pterun_src:
        cmd += ["--pterun-src", str(args.pterun_src)]
    if save is not None:
        cmd += ["--save-outputs", str(save)]
    if profile:
        cmd += ["--profile", "--top", "1000"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                           env=config_env(env, cfg, cache_dir), cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {"runtime": cfg.runtime, "error_type": "Timeout", "error": f"no result within {args.timeout} s"}
    wall = time.perf_counter() - t0
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["process_wall_s"] = wall
            if cfg.is_peer and "error" in res and peer_log_reason(p.stderr or ""):
                res["error_reason"] = peer_log_reason(p.stderr)  # its exception says "failed"; its log says why
            return res
    tail = (p.stderr or p.stdout or "").strip().splitlines()[-3:]
    res = {"runtime": cfg.runtime, "error_type": f"exit {p.returncode}", "error": " | ".join(tail)[-500:],
           "process_wall_s": wall}
    if cfg.is_peer and peer_log_reason(p.stderr or ""):  # a crash: ExecuTorch's log says why
        res["error_reason"] = peer_log_reason(p.stderr)
    return res


def peer_log_reason(stderr: str) -> str:
    """Why executorch-numpy-runtime failed, from ExecuTorch's error log on its stderr (``E 00:00:00.07 file:line]
    message`` lines; its exceptions say only ``execute('forward') failed``): the missing operators, else the
    last error message; '' when it logged none."""
    msgs = [ln.split("] ", 1)[1].strip() for ln in stderr.splitlines() if ln.startswith("E ") and "] " in ln]
    missing = [m.rsplit(" ", 1)[-1] for m in msgs if m.startswith("Missing operator:")]
    if missing:
        return "missing operators: " + ", ".join(dict.fromkeys(missing))
    return msgs[-1] if msgs else ""


def engine_mismatch(cfg: Config, res: dict) -> str | None:
    """A reason when a pterun process asked for an engine did not run it (an older pterun, LiteRT missing)."""
    if cfg.is_ref or cfg.engine in (None, "auto") or "error_type" in res:
        return None
    got = res.get("engines")
    if got is None:  # a pterun from before engine selection: NumPy is its only engine
        return None if cfg.engine == "numpy" else f"this pterun has no {cfg.engine} engine"
    if not got:  # no delegate in the program: the engine is irrelevant
        return None
    if any(e != cfg.engine for e in got):
        return f"asked for {cfg.engine}, ran {', '.join(sorted(set(got)))}"
    return None


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


KEYS = ("median_s", "p90_s", "min_s", "first_call_s", "load_s", "load_first_s", "import_s", "peak_rss_mb",
        "rss_after_import_mb")


def value(res: dict, key: str):
    """One number of a process's result; ``load_first_s`` is load + first call, the figure that compares with a
    runtime whose load is lazy (the peer's method is loaded in its first call)."""
    if key == "load_first_s":
        a, b = res.get("load_s"), res.get("first_call_s")
        return None if a is None or b is None else a + b
    return res.get(key)


def aggregate(results: list[dict]) -> dict | None:
    ok = [r for r in results if "error_type" not in r]
    if not ok:
        return None
    agg = {k: med(value(r, k) for r in ok) for k in KEYS}
    agg["rounds"] = len(ok)
    agg["calls"] = sum(r.get("calls", 0) for r in ok)
    for k in ("instructions", "plan_instructions", "inputs", "engines", "threads", "delegate_calls", "load_lazy"):
        agg[k] = ok[0].get(k)
    return agg


def error_label(results: list[dict]) -> str | None:
    errs = [r for r in results if "error_type" in r]
    if not errs or len(errs) < len(results):
        return None
    e = errs[0]
    msg = e.get("error", "")
    if e.get("runtime") == "peer":  # what the peer could not load or run: its reason, never numbers
        why = " ".join((e.get("error_reason") or f"{e['error_type']}: {msg}").split()).replace("|", "/")
        return f"n/a ({why[:157] + '...' if len(why) > 160 else why})"
    if e["error_type"] == "DelegateError" and ("not available" in msg or "XnnpackBackend" in msg):
        return "n/a (XNNPACK delegate not available)"
    if e["error_type"] == "EngineUnavailable":
        return f"n/a ({msg})"
    return f"error: {e['error_type']}"


#: what one benchmark process costs beyond its timed calls (interpreter start, imports, load, first call), in
#: seconds: a rough figure from this project's 2-core machine, for the estimate printed at the start
PROCESS_OVERHEAD_S = 2.0


def fmt_duration(s: float) -> str:
    """'40 s', '12 min', '1.5 h'."""
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 5400 else f"{s / 3600:.1f} h"


def estimate_s(models: dict, wanted: list[str], configs: list[Config], args) -> tuple[int, float]:
    """(processes, seconds) a run should take: every configuration that applies to each model, every round, each
    process its --budget of timed calls plus :data:`PROCESS_OVERHEAD_S`; a model starts no round after its
    --model-budget. A guess, to say up front whether a run takes minutes or an hour."""
    processes, seconds = 0, 0.0
    per_process = args.budget + PROCESS_OVERHEAD_S
    for n in wanted:
        xnn = has_xnnpack(models[n][0])
        n_cfg = sum(1 for c in configs if c.engine not in ("litert",) or xnn)
        rounds = args.rounds
        while rounds > 1 and (rounds - 1) * n_cfg * per_process > args.model_budget:
            rounds -= 1  # the budget check after each round stops the rest
        processes += rounds * n_cfg
        seconds += rounds * n_cfg * per_process
    return processes, seconds


def bench_model(name: str, pte: Path, configs: list[Config], args, env, tmp: Path, log) -> dict:
    """Every configuration of one model, ``args.rounds`` rounds, alternating the order each round."""
    xnn = has_xnnpack(pte)  # (reads the file: the page cache is warm for every configuration's first process)
    # an engine only matters to XNNPACK delegates: on a program without one, litert-* equals numpy-*
    run = [c for c in configs if c.engine not in ("litert",) or xnn]
    per = {c.name: [] for c in run}
    failed: set[str] = set()
    cache_dir = str(tmp / f"{name}.weight-cache")
    for cfg in run:  # the cache's first load notes a model, the second writes its weights: both untimed
        if cfg.name == "cached":
            for _ in range(2):
                run_process(args.py, cfg, pte, args, None, env, extra=("--max-calls", "1"), cache_dir=cache_dir)
    t_start = time.perf_counter()
    for r in range(args.rounds):
        order = run if r % 2 == 0 else list(reversed(run))
        for cfg in order:
            if cfg.name in failed:
                continue
            py = {"executorch": args.ref, "peer": getattr(args, "peer", None)}.get(cfg.runtime, args.py)
            save = tmp / f"{name}.{cfg.name}.npz" if r == 0 else None
            res = run_process(py, cfg, pte, args, save, env, cache_dir=cache_dir)
            why = engine_mismatch(cfg, res)
            if why:
                res = {"runtime": cfg.runtime, "error_type": "EngineUnavailable", "error": why,
                       "engines": res.get("engines")}
            res["round"] = r
            per[cfg.name].append(res)
            if "error_type" in res:
                failed.add(cfg.name)  # deterministic failures (missing delegate/operator/engine): do not retry
                log(f"  round {r + 1} {cfg.name:10s} {res['error_type']}: {res['error'][:160]}"
                    + (f" ({res['error_reason'][:160]})" if res.get("error_reason") else ""))
            else:
                log(f"  round {r + 1} {cfg.name:10s} median {fmt_t(res['median_s']):>10s}  p90 "
                    f"{fmt_t(res['p90_s']):>10s}  first {fmt_t(res['first_call_s']):>10s}  load "
                    f"{fmt_t(res['load_s']):>10s}  import {fmt_t(res['import_s']):>9s}  rss "
                    f"{fmt_mb(res['peak_rss_mb']):>7s}  ({res['calls']} calls)")
        if len(failed) == len(run):
            break
        if time.perf_counter() - t_start > args.model_budget and r + 1 < args.rounds:
            log(f"  (stopping after {r + 1} round(s): the model's time budget of {args.model_budget:.0f} s is spent)")
            break
    errs = {}
    for cfg in run:
        ref = pair_of(cfg, run)
        if ref is None:
            continue
        a, b = tmp / f"{name}.{cfg.name}.npz", tmp / f"{name}.{ref.name}.npz"
        if a.exists() and b.exists():
            errs[cfg.name] = compare_outputs(a, b)
    errs_peer = {}  # pterun against the peer, where they pair
    for cfg in run:
        peer = peer_pair_of(cfg, run)
        a, b = tmp / f"{name}.{cfg.name}.npz", tmp / f"{name}.{peer.name if peer else ''}.npz"
        if peer and a.exists() and b.exists():
            errs_peer[cfg.name] = compare_outputs(a, b)
    row = {"model": name, "pte": shown(pte),
           "xnnpack": xnn, "configs": [c.name for c in run],
           "agg": {c.name: aggregate(per[c.name]) for c in run},
           "errors": {c.name: error_label(per[c.name]) for c in run},
           "max_rel_err": errs, "max_rel_err_peer": errs_peer, "raw": per, "seconds": time.perf_counter() - t_start}
    finish_row(row)
    return row


RATIO_KEYS = ("median_s", "p90_s", "first_call_s", "load_s", "load_first_s", "import_s", "peak_rss_mb")


def finish_row(row) -> None:
    """Ratios (paired by round, against each configuration's reference) and targets of a row."""
    configs = [parse_config(n) for n in row["configs"]]
    row["pairs"] = {c.name: (pair_of(c, configs).name if pair_of(c, configs) else None) for c in configs}
    row["ratios"] = {c: paired_ratios(row["raw"].get(c, []), row["raw"].get(p, [])) for c, p in row["pairs"].items()
                     if p}
    # the third set: pterun against the peer (executorch-numpy-runtime), at the same (all the cores) thread count
    row["peer_pairs"] = {c.name: peer_pair_of(c, configs).name for c in configs if peer_pair_of(c, configs)}
    row["peer_ratios"] = {c: paired_ratios(row["raw"].get(c, []), row["raw"].get(p, []))
                          for c, p in row["peer_pairs"].items()}
    row["targets"] = {c: model_targets(row, c) for c in row["pairs"] if parse_config(c).is_pterun}


def paired_ratios(pt_raw: list[dict], ref_raw: list[dict]) -> dict:
    """pterun/reference (or any a/b) ratio of each key: the median over rounds of the ratio within a round (both
    processes ran in the same round, so they saw about the same machine load); without such pairs, None."""
    pts = {r["round"]: r for r in pt_raw if "error_type" not in r}
    refs = {r["round"]: r for r in ref_raw if "error_type" not in r}
    out = {}
    for k in RATIO_KEYS:
        rs = [ratio(value(pts[n], k), value(refs[n], k)) for n in sorted(pts) if n in refs]
        out[k] = med(rs)
    out["rounds_paired"] = len([n for n in pts if n in refs])
    return out


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


def resolve_ref(value: str | None, flag: str = "--ref", venv: str = ".ref") -> str | None:
    """The interpreter ``--ref`` (or ``--peer``) names: ``auto``, ``REPO/<venv>/bin/python`` if it exists; None
    for none (also for no ``--peer``: the peer runs only when asked for)."""
    if value is None and flag != "--ref":
        return None
    if value in (None, "auto"):
        cand = REPO / venv / "bin" / "python"
        return str(cand) if cand.exists() else None
    if value.lower() in ("none", "no", ""):
        return None
    p = Path(value)
    if not p.is_absolute():
        p = (Path.cwd() / p)
    if not p.exists():
        raise SystemExit(f"bench.py: {flag} {value}: no such interpreter")
    return str(p)


def main(argv=None) -> int:
    ap = build_parser(__doc__)
    args = ap.parse_args(argv)
    if args.report:
        return rerender(args)
    args.ref = resolve_ref(args.ref)
    args.peer = resolve_ref(args.peer, "--peer", ".peer")
    try:
        configs = chosen_configs(args, print)
    except ValueError as e:
        ap.error(str(e))
    models, extra = all_models(), pte_models(args.pte, ap.error)
    models.update(extra)
    if args.list:
        for n, (p, kind) in models.items():
            print(f"{n:24s} {kind:8s} {shown(p)}{'' if p.exists() else '  (missing)'}")
        return 0

    def log(msg):
        print(msg, flush=True)

    wanted = chosen(models, extra, args.models, ap.error)
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
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
                       f"Python {platform.python_version()}, NumPy {np.__version__}",
            "commit": git_commit(), "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "command": "python bench/bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                    else sys.argv[1:])),
            "reference": args.ref, "peer": args.peer, "pterun_python": args.py, "rounds": args.rounds,
            "budget_s": args.budget,
            "configs": [c.name for c in configs], "cpu": cpu_model(),
            "pterun_src": "live src/" if args.live_src else "byte-compiled copy of src/ taken at start"}
    log(f"pterun: {args.py}; reference: {args.ref or 'none (pterun alone)'}"
        + (f"; peer: {args.peer}" if args.peer else "") + f"; {len(wanted)} models, "
        f"{args.rounds} rounds; configurations {', '.join(c.name for c in configs)}; CPU {meta['cpu']}")
    processes, guess = estimate_s(models, wanted, configs, args)
    log(f"estimate: {processes} processes of about {args.budget + PROCESS_OVERHEAD_S:.0f} s each, about "
        f"{fmt_duration(guess)}{' (plus the --profile runs)' if args.profile else ''}; the time left is printed "
        "after each model")
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pterun-bench-") as td:
        args.pterun_src = None
        if not args.live_src:
            args.pterun_src = Path(td) / "src"
            shutil.copytree(REPO / "src", args.pterun_src,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc"))
            # once, as pip does for an installed package (why: configs.byte_compile)
            why = byte_compile(args.py, args.pterun_src)
            if why:
                log(f"(could not byte-compile the copy of src/: {why})")
        for i, n in enumerate(wanted):
            log(f"[{n}] {shown(models[n][0])} (model {i + 1} of {len(wanted)})")
            rows.append(bench_model(n, models[n][0], configs, args, env, Path(td), log))
            spent = time.perf_counter() - t0
            left = spent / (i + 1) * (len(wanted) - i - 1)
            log(f"  ({fmt_duration(spent)} so far" + (f", about {fmt_duration(left)} left)" if i + 1 < len(wanted)
                                                       else ")"))
        run_rest(rows, models, args, env, meta, t0, log)
    return 0


def rerender(args) -> int:
    data = json.loads(args.report.read_text())
    rows, meta = data["rows"], data["meta"]
    if rows and "configs" not in rows[0]:
        raise SystemExit(f"{args.report}: written by the bench before configurations (pterun vs reference "
                         f"only); re-run the bench")
    for row in rows:
        finish_row(row)
    args.out.mkdir(parents=True, exist_ok=True)
    md = write_reports(rows, meta, args, print)
    if args.update_readme:
        update_readme(md, print)
    return 0


def run_rest(rows, models, args, env, meta, t0, log) -> None:
    meta["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    meta["seconds"] = time.perf_counter() - t0
    md = write_reports(rows, meta, args, log)
    log(f"(benchmark took {meta['seconds']:.0f} s)")

    if args.profile:
        sections = []
        for row in rows:
            for c in row["configs"]:
                cfg = parse_config(c)
                # one profile per engine on one thread: where the time goes, delegates and the steps between
                if cfg.is_ref or cfg.threads != 1 or not row["agg"].get(c):
                    continue
                pte = models[row["model"]][0]
                res = run_process(args.py, cfg, pte, args, None, env, profile=True)
                if "profile" in res:
                    sec = profile_section(f"{row['model']} ({c})", res["profile"])
                    sections.append(sec)
                    print("\n" + sec, flush=True)
        (args.out / "profile.md").write_text("# pterun per-operator profile\n\n" + "\n\n".join(sections) + "\n")
        log(f"\nwrote {args.out / 'profile.md'}")

    if args.update_readme:
        update_readme(md, log)


if __name__ == "__main__":
    sys.exit(main())
