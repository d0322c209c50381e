#!/usr/bin/env python
"""Text generation, pterun (per engine and thread count) vs ExecuTorch's ``TextLLMRunner``, same ``.pte`` files,
one run.

    .venv/bin/python bench/llm_bench.py                                  # the four realistic Llamas
    .venv/bin/python bench/llm_bench.py --models llama130m_8da4w --rounds 3
    .venv/bin/python bench/llm_bench.py --configs numpy-1t litert-1t ref-1t
    .venv/bin/python bench/llm_bench.py --boundaries                     # + item-5 measurement (see below)
    .venv/bin/python bench/llm_bench.py --profile                        # + pterun's decode time per operator

Models:

* ``llama130m_{fp32,8da4w}``, ``llama500m_{fp32,8da4w}``: random-weight Llamas of ~132M and ~487M parameters
  (32k vocabulary, context 512), XNNPACK fp32 and 8da4w (group 128), exported by ExecuTorch's LLM exporter with
  ``.ref/bin/python tools/export_llm_bench.py`` into ``bench/models/`` (git-ignored; this script runs the
  export when one is missing and ``--ref`` exists). The default set.
* ``bench_{xnn,8da4w}``: stories15M's shape (15.4M parameters), ``tools/export_llm_fixtures.py --bench``.
* ``tiny_{sdpa,xnn,8da4w}``: the test fixtures in ``tests/fixtures/llm/``.

Configurations (``--configs``), as in ``bench/bench.py``: ``defaults`` (pterun with no thread or engine setting),
``numpy-Nt`` / ``litert-Nt`` (``PTERUN_ENGINE``, ``PTERUN_NUM_THREADS=N``), ``ref-Nt`` (ExecuTorch with its
threadpool resized to N right after import); not ``peer`` (bench.py's executorch-numpy-runtime, which has no
LLM operators: refused). Every process starts with the thread/engine variables removed from the environment.
Each (model, configuration) runs in a fresh process, ``--rounds`` times, the order reversed every other round.
In the process: construct the runner (``load``), one short warm-up generation, ``reset()``, then one timed
greedy generation, timed from its ``Stats`` (the same fields and formulas for both runtimes):

* ``ttft``: ``first_token_ms - inference_start_ms`` (tokenize + prefill + first sample);
* ``prefill tok/s``: prompt tokens / ttft;  ``decode tok/s``: decode steps / (``inference_end_ms -
  prompt_eval_end_ms``), ExecuTorch's own ``decode_token_per_sec`` formula (1 ms clock);
* ``peak RSS``: ``ru_maxrss`` of the process at the end (interpreter, imports, model, caches).

Per configuration the median over rounds is reported; ratios are pterun / ExecuTorch at the same thread
count, paired by round (``defaults`` against ExecuTorch on all cores, its own default), and held to issue #24's
decode floors by pterun's thread count (:data:`DONE_WHEN_24`). Results go to ``bench/out/llm.{md,json}``.

``--boundaries`` (the measurement behind merging neighbouring delegate graphs): for every model, pterun
(each engine, 1 thread) runs ``bench/run_one.py --llm-decode POS --profile``: decode steps of one token at
position POS after a prefill of POS tokens, every instruction timed; it reports the delegate calls per step,
the gaps between consecutive delegate calls that hold instructions, and the time those instructions take.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "bench" / "models"
FIXTURES = ROOT / "tests" / "fixtures" / "llm"
OUT = ROOT / "bench" / "out"
PROMPT = ("The little robot walked to the garden and watered every green plant before the sun went down. "
          "Snow fell softly over the mountain village all night long. ")
REALISTIC = ["llama130m_fp32", "llama130m_8da4w", "llama500m_fp32", "llama500m_8da4w"]
# issue #12's targets, pterun / ExecuTorch at the same thread count: decode tok/s at least, peak RSS at most
TARGETS = {"llama130m": (0.8, 0.6), "llama500m": (0.9, 0.6)}
# issue #24's done-when: decode tok/s at least this, by model size and pterun's thread count (any count: None)
DONE_WHEN_24 = {("llama130m", 1): 1.0, ("llama130m", 2): 0.9, ("llama500m", None): 0.95}
RSS_CEILING_24 = 0.6  # and peak RSS at most this


def decode_floor_24(model: str, threads) -> float | None:
    """Issue #24's floor for pterun / ExecuTorch decode tok/s of ``model`` on ``threads`` threads, None where it
    sets none."""
    size = model.split("_")[0]
    return DONE_WHEN_24.get((size, threads), DONE_WHEN_24.get((size, None)))


def model_table() -> dict:
    tok32k = MODELS / "llm32k_tokenizer.json"
    # ~100 prompt tokens; 64 new tokens on ~130M, 32 on ~500M (a 2-core machine decodes it at a few tokens/s)
    table = {n: (MODELS / f"{n}.pte", tok32k, 3, 64 if n.startswith("llama130m") else 32) for n in REALISTIC}
    table.update({
        "bench_xnn": (MODELS / "bench_xnn.pte", MODELS / "llm_tokenizer.json", 4, 128),
        "bench_8da4w": (MODELS / "bench_8da4w.pte", MODELS / "llm_tokenizer.json", 4, 128),
        "tiny_sdpa": (FIXTURES / "kv_sdpa.pte", FIXTURES / "tokenizer.json", 1, 40),
        "tiny_xnn": (FIXTURES / "kv_xnn.pte", FIXTURES / "tokenizer.json", 1, 40),
        "tiny_8da4w": (FIXTURES / "kv_8da4w.pte", FIXTURES / "tokenizer.json", 1, 40),
    })
    return table  # name -> (pte, tokenizer, prompt repeats, max new tokens)


# -- one runtime, one model, in this process -------------------------------------------------------------------
def worker(args) -> None:
    t_import = time.perf_counter()
    if args.runtime == "pterun":
        sys.path.insert(0, str(ROOT / "src"))
        from pterun.llm import GenerationConfig, TextLLMRunner
    else:
        # ExecuTorch's runner printf()s every piece and its report: keep fd 1 for nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
        # the llama:: and quantized kernels are registered into ExecuTorch's runtime by importing these
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
        import executorch.kernels.quantized  # noqa: F401
    import resource
    t_import = time.perf_counter() - t_import
    sys.path.insert(0, str(ROOT / "bench"))
    threads = engines = None
    if args.runtime == "executorch":
        from executorch.extension.pybindings.portable_lib import (_threadpool_get_thread_count,
                                                                  _unsafe_reset_threadpool)
        if os.environ.get("BENCH_REF_THREADS"):  # once, before anything runs (a second resize has hung)
            _unsafe_reset_threadpool(int(os.environ["BENCH_REF_THREADS"]))
        threads = int(_threadpool_get_thread_count())
    t0 = time.perf_counter()
    runner = TextLLMRunner(str(args.model), str(args.tokenizer))
    load_s = time.perf_counter() - t0
    ctor_end_ms = time.time() * 1e3
    if args.runtime == "pterun":
        from pterun import threads as _threads
        from run_one import pterun_engines
        threads = _threads.num_threads()
        engines = pterun_engines(runner.program, runner.program.load_method("forward"))
    prompt = PROMPT * args.repeat
    warm = []
    runner.generate(prompt, GenerationConfig(echo=False, temperature=0.0, max_new_tokens=4, num_bos=1), None,
                    warm.append)  # warm-up
    # ExecuTorch's constructor only opens the file: the program and method load in the first generate, which
    # its Stats time (model_load_*_ms); pterun loads in the constructor. load_s counts both parts.
    w = json.loads(warm[0].to_json_string())
    if w.get("model_load_end_ms", 0) > ctor_end_ms + 1:
        load_s += (w["model_load_end_ms"] - max(w["model_load_start_ms"], ctor_end_ms)) / 1e3
    runner.reset()
    prof = None
    if args.profile and args.runtime == "pterun":
        from run_one import install_profiler
        forward = runner.program.load_method("forward")
        prof = install_profiler(forward)
        runner._forward = forward.execute  # the runner bound execute when it loaded: take the profiled one
    stats = []
    cfg = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=args.max_new, num_bos=1)
    start = time.perf_counter()
    # no token_callback: ExecuTorch's binding raises UnicodeDecodeError on a piece that splits a character
    runner.generate(prompt, cfg, None, stats.append)
    wall = time.perf_counter() - start
    st = json.loads(stats[0].to_json_string())  # the same ms timestamps and formulas for both runtimes
    ttft_ms = st["first_token_ms"] - st["inference_start_ms"]
    decode_ms = st["inference_end_ms"] - st["prompt_eval_end_ms"]
    n = st["generated_tokens"]  # decode steps (the first token comes from prefill)
    result = {
        "runtime": args.runtime, "import_s": t_import, "load_s": load_s, "prompt_tokens": st["prompt_tokens"],
        "tokens": n + 1, "wall_s": wall, "ttft_s": ttft_ms / 1e3,
        "prefill_tps": st["prompt_tokens"] / max(ttft_ms, 1) * 1e3,
        "decode_tps": n / max(decode_ms, 1) * 1e3,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": threads, "engines": engines, "stats": st,
    }
    if prof is not None:
        steps = n + 1
        result["profile"] = sorted(((op, t / steps * 1e3, c / steps) for op, (t, c) in prof.by_op.items()),
                                   key=lambda r: -r[1])
        result["profile_wall_ms_per_token"] = wall / steps * 1e3
    Path(args.out).write_text(json.dumps(result))


# -- the driver ------------------------------------------------------------------------------------------------
if "--worker" not in sys.argv:  # the workers time their own imports: keep bench.py (and NumPy) out of them
    sys.path.insert(0, str(ROOT / "bench"))
    from bench import Config, byte_compile, config_env, cpu_model, describe_config, engine_mismatch, git_commit, \
        pair_of, parse_config  # noqa: E402

DEFAULT_CONFIGS = ["defaults", "numpy-1t", "numpy-2t", "litert-1t", "litert-2t", "ref-1t", "ref-2t"]
METRICS = ("load_s", "ttft_s", "prefill_tps", "decode_tps", "peak_rss_mb")


def warm_page_cache(path: Path) -> None:
    """Read the file once, so that the first configuration does not pay for reading a cold file from disk (a
    2 GB export took ~20 s more to load in the first process of a round than in the others)."""
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_one(python: str, cfg: Config, model: str, spec, profile: bool, cache_dir: str = "",
            max_new: int | None = None) -> dict:
    """One worker process of ``cfg`` generating with ``model``; ``cache_dir``: the ``cached`` configuration's
    packed-weight cache; ``max_new``: tokens to generate instead of the model's own count."""
    pte, tok, repeat, model_max_new = spec
    out = OUT / f".llm_{cfg.name}_{model}.json"
    out.unlink(missing_ok=True)
    cmd = [python, __file__, "--worker", cfg.runtime, "--model", str(pte), "--tokenizer", str(tok), "--repeat",
           str(repeat), "--max-new", str(max_new or model_max_new), "--out", str(out)] + \
        (["--profile"] if profile else [])
    env = config_env({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cfg, cache_dir)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    except subprocess.TimeoutExpired:
        return {"runtime": cfg.name, "error": "no result within 1800 s"}
    if proc.returncode != 0 or not out.exists():
        return {"runtime": cfg.name, "error": (proc.stderr or proc.stdout)[-2000:] or f"exit {proc.returncode}"}
    res = dict(json.loads(out.read_text()), runtime=cfg.name)
    out.unlink(missing_ok=True)
    why = engine_mismatch(cfg, res)
    return {"runtime": cfg.name, "error": why} if why else res


def median(rounds: list[dict]) -> dict:
    """The median of every metric over the rounds (this machine is noisy: one round can be 3x off)."""
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[-1]
    m = dict(ok[0], rounds=ok)
    for key in METRICS:
        m[key] = statistics.median(r[key] for r in ok)
    return m


def paired(rounds_pt: list[dict], rounds_ref: list[dict], key: str):
    """pterun / ExecuTorch of ``key``, the median over the rounds where both ran."""
    rs = [p[key] / r[key] for p, r in zip(rounds_pt, rounds_ref) if "error" not in p and "error" not in r and r[key]]
    return statistics.median(rs) if rs else None


def fmt_x(v) -> str:
    return "—" if v is None else f"{v:.2f}×"


def render(results: dict, configs: list[Config], raw: dict, meta: dict) -> str:
    lines = [f"Measured {meta['date']} on {meta['machine']}; CPU: {meta['cpu']}; commit {meta['commit']}; load "
             f"average {meta['loadavg_start']} at start, {meta['loadavg_end']} at end. Command: `{meta['command']}`",
             "", "Configurations: " + "; ".join(f"`{c.name}` = {describe_config(c)}" for c in configs) + ".", "",
             "| model | config | engine | threads | load s | TTFT ms | prefill tok/s | decode tok/s | peak RSS MB "
             "| rounds |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    ratios, targets, done = [], [], []
    for model, per in results.items():
        for c in configs:
            r = per.get(c.name)
            if r is None:
                continue
            if "error" in r:
                msg = r["error"].strip().splitlines()[-1][:100] if r["error"].strip() else "error"
                lines.append(f"| {model} | `{c.name}` | n/a: {msg} | | | | | | | |")
                continue
            eng = "ExecuTorch" if c.is_ref else (", ".join(sorted(set(r["engines"]))) if r.get("engines") else
                                                  "numpy (only engine)")
            lines.append(f"| {model} | `{c.name}` | {eng} | {r.get('threads', '?')} | {r['load_s']:.2f} | "
                         f"{r['ttft_s'] * 1e3:.0f} | {r['prefill_tps']:.1f} | {r['decode_tps']:.2f} | "
                         f"{r['peak_rss_mb']:.0f} | {len(r['rounds'])} |")
        for c in configs:
            ref = pair_of(c, configs)
            p, e = per.get(c.name), per.get(ref.name) if ref else None
            if not p or not e or "error" in p or "error" in e:
                continue
            rp, re_ = raw[model][c.name], raw[model][ref.name]
            d, rss = paired(rp, re_, "decode_tps"), paired(rp, re_, "peak_rss_mb")
            ratios.append(f"| {model} | `{c.name}` vs `{ref.name}` | {fmt_x(d)} | "
                          f"{fmt_x(paired(rp, re_, 'prefill_tps'))} | {fmt_x(paired(rp, re_, 'ttft_s'))} | "
                          f"{fmt_x(paired(rp, re_, 'load_s'))} | {fmt_x(rss)} |")
            size = model.split("_")[0]
            if size in TARGETS and d is not None and rss is not None:
                dt, rt = TARGETS[size]
                targets.append(f"| {model} | `{c.name}` | decode ≥ {dt}×: {fmt_x(d)} {'✅' if d >= dt else '❌'} | "
                               f"peak RSS ≤ {rt}×: {fmt_x(rss)} {'✅' if rss <= rt else '❌'} |")
            floor = decode_floor_24(model, p.get("threads"))
            if floor is not None and d is not None and rss is not None:
                done.append(f"| {model} | `{c.name}` vs `{ref.name}` | {p.get('threads')} | decode ≥ {floor:g}×: "
                            f"{fmt_x(d)} {'✅' if d >= floor else '❌'} | peak RSS ≤ {RSS_CEILING_24:g}×: "
                            f"{fmt_x(rss)} {'✅' if rss <= RSS_CEILING_24 else '❌'} |")
    text = "\n".join(lines)
    if ratios:
        text += ("\n\npterun / ExecuTorch (paired by round; decode and prefill above 1 = pterun faster, TTFT, load "
                 "and RSS below 1 = pterun better)\n\n| model | pair | decode tok/s | prefill tok/s | TTFT | load | "
                 "peak RSS |\n|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(ratios))
    if targets:
        text += ("\n\nIssue #12 targets (decode ≥ 0.9× on ~500M, ≥ 0.8× on ~130M; peak RSS ≤ 0.6×)\n\n"
                 "| model | config | decode | peak RSS |\n|---|---|---|---|\n" + "\n".join(targets))
    if done:
        text += ("\n\nIssue #24's done-when (decode ≥ 1.0× on ~130M on one thread and ≥ 0.9× on two, ≥ 0.95× on "
                 "~500M; peak RSS ≤ 0.6×)\n\n| model | pair | pterun's threads | decode | peak RSS |\n"
                 "|---|---|---:|---|---|\n" + "\n".join(done))
    for model, per in results.items():
        for c in configs:
            prof = per.get(c.name, {}).get("profile")
            if prof:
                wall = per[c.name]["profile_wall_ms_per_token"]
                text += (f"\n\n`{c.name}` profile, {model} (ms per generated token, prefill included; wall "
                         f"{wall:.2f} ms):\n\n| operator | ms/token | calls/token |\n|---|---|---|\n"
                         + "\n".join(f"| {op} | {ms:.3f} | {cnt:.1f} |" for op, ms, cnt in prof[:12]))
    return text


def boundaries(names: list[str], table: dict, configs: list[Config], pos: int, budget: float) -> str:
    """Item-5 measurement: delegate calls per decode step and the work between them, per model and engine."""
    rows = ["| model | config | step ms (profiled) | delegate calls | delegate ms | gaps with work / gaps | "
            "instructions between | ms between | share of step | mergeable gaps (ms) | delegate calls if merged | "
            "top operators between delegates (ms; ✗ = not expressible) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    extra = [(n, table[n][0], True) for n in names] + [("fx_xnn_transformer", ROOT / "tests" / "fixtures" /
                                                        "xnn_transformer.pte", False)]
    for name, pte, llm in extra:
        if not Path(pte).exists():
            continue
        for c in configs:
            if c.is_ref or c.threads != 1:
                continue
            cmd = [sys.executable, str(ROOT / "bench" / "run_one.py"), "--runtime", "pterun", str(pte), "--profile",
                   "--quiet", "--budget", str(budget), "--min-calls", "5", "--top", "1000"]
            if llm:
                cmd += ["--llm-decode", str(pos)]
            env = config_env({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, c)
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
            line = next((x for x in reversed(p.stdout.splitlines()) if x.startswith("@@BENCH@@ ")), None)
            res = json.loads(line[len("@@BENCH@@ "):]) if line else {"error": (p.stderr or "no result")[-300:]}
            why = engine_mismatch(c, res) if "error" not in res else None
            if "profile" not in res or why:
                err = why or res.get("error", "?")
                rows.append(f"| {name} | `{c.name}` | n/a: {str(err).strip().splitlines()[-1][:100]} |" + " |" * 9)
                continue
            pr = res["profile"]
            b = pr["boundaries"]
            wall = pr["wall_per_run_s"]
            top = ", ".join(f"{op.split('::')[-1]}{'' if ok else ' ✗'} {t * 1e3:.2f}"
                            for op, _cnt, t, ok in b["gap_ops"][:5])
            rows.append(f"| {name} | `{c.name}` | {wall * 1e3:.2f} | {b['delegate_calls']:g} | "
                        f"{b['delegate_s'] * 1e3:.2f} | {b['gaps_with_work']} / {b['gaps']} | "
                        f"{b['between_instructions']:g} | {b['between_s'] * 1e3:.2f} | "
                        f"{b['between_s'] / wall * 100:.1f}% | {b['gaps_mergeable']} ({b['mergeable_s'] * 1e3:.2f}) | "
                        f"{b['delegate_calls'] - b['gaps_mergeable']:g} | {top} |")
            print(rows[-1], flush=True)
    return ("Delegate boundaries per call (LLMs: one decode step, 1 token at position "
            f"{pos}; the transformer fixture: one call), pterun on 1 thread, every instruction timed (the "
            "profiler adds ~0.3 µs per instruction):\n\n" + "\n".join(rows))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["pterun", "executorch"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--max-new", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*", help=f"model names (default: {' '.join(REALISTIC)})")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, metavar="CONFIG",
                    help="configurations, as in bench/bench.py (default: %(default)s)")
    ap.add_argument("--ref", default=str(ROOT / ".ref" / "bin" / "python"), help="the reference venv's python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="also profile pterun's generation per operator "
                    "(the last round of each 1-thread pterun configuration)")
    ap.add_argument("--boundaries", action="store_true", help="also measure delegate boundaries per decode step")
    ap.add_argument("--boundaries-only", action="store_true", help="only the boundary measurement")
    ap.add_argument("--decode-pos", type=int, default=128, help="context position of the --boundaries decode step")
    ap.add_argument("--outfile", default="llm", help="name of the results under bench/out/ (default llm)")
    args = ap.parse_args(argv)
    if args.worker:
        args.runtime = args.worker
        worker(args)
        return 0
    try:
        configs = [parse_config(c) for c in dict.fromkeys(args.configs)]
    except ValueError as e:
        ap.error(str(e))
    if any(c.is_peer for c in configs):
        ap.error("configuration 'peer' (executorch-numpy-runtime) cannot run here: it has no LLM operators (no "
                 "llama:: custom ops such as llama::custom_sdpa and llama::update_cache) and no text runner; it runs "
                 "in bench/bench.py (--peer PY)")
    if not Path(args.ref).exists():
        print(f"no reference python at {args.ref}: pterun alone (--ref PATH)", flush=True)
        configs = [c for c in configs if not c.is_ref]
    table = model_table()
    names = args.models or REALISTIC
    unknown = [n for n in names if n not in table]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {', '.join(table)}")
    missing = [n for n in names if not table[n][0].exists()]
    if missing and Path(args.ref).exists():
        bench_old = [n for n in missing if n.startswith("bench_")]
        real = [n for n in missing if n in REALISTIC]
        if bench_old:
            subprocess.run([args.ref, str(ROOT / "tools" / "export_llm_fixtures.py"), "--bench", str(MODELS)])
        if real:
            print(f"exporting {', '.join(real)} with the reference venv (slow: minutes each) ...", flush=True)
            subprocess.run([args.ref, str(ROOT / "tools" / "export_llm_bench.py"), "--only", *real])
    names = [n for n in names if table[n][0].exists()]
    skipped = [n for n in (args.models or REALISTIC) if n not in names]
    if skipped:
        print(f"not exported, skipped: {', '.join(skipped)}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    # the pterun workers import src/ (as an installed package would be, compiled: see configs.byte_compile)
    why = byte_compile(sys.executable, ROOT / "src" / "pterun")
    if why:
        print(f"(could not byte-compile src/pterun: {why})", flush=True)
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "cpu": cpu_model(), "commit": git_commit(),
            "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "command": "python bench/llm_bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None
                                                                                       else sys.argv[1:]))}
    results, raw = {}, {}
    if not args.boundaries_only:
        for name in names:
            warm_page_cache(table[name][0])
            rounds = {c.name: [] for c in configs}
            failed = set()
            cache_dir = str(OUT / f".llm_cache_{name}")
            shutil.rmtree(cache_dir, ignore_errors=True)
            if any(c.name == "cached" for c in configs):  # the cache's first load notes the model, the second
                # writes its files: both untimed, as bench.py does
                for _ in range(2):
                    run_one(sys.executable, parse_config("cached"), name, table[name], False, cache_dir, max_new=2)
            for i in range(args.rounds):
                for c in (configs if i % 2 == 0 else configs[::-1]):
                    if c.name in failed:
                        rounds[c.name].append({"runtime": c.name, "error": "failed in an earlier round"})
                        continue
                    py = args.ref if c.is_ref else sys.executable
                    prof = args.profile and not c.is_ref and c.threads == 1 and i == args.rounds - 1
                    r = run_one(py, c, name, table[name], prof, cache_dir)
                    rounds[c.name].append(r)
                    if "error" in r:
                        failed.add(c.name)
                    print(f"{name} {c.name} round {i}: " + (
                        f"load {r['load_s']:.2f} s, prefill {r['prefill_tps']:.1f} tok/s, decode "
                        f"{r['decode_tps']:.2f} tok/s, rss {r['peak_rss_mb']:.0f} MB" if "error" not in r else
                        "ERROR " + r["error"][-300:]), flush=True)
            shutil.rmtree(cache_dir, ignore_errors=True)
            raw[name] = rounds
            results[name] = {c: median(rs) for c, rs in rounds.items()}
            for c, rs in rounds.items():
                prof = [r for r in rs if "profile" in r]
                if prof and "error" not in results[name][c]:
                    results[name][c]["profile"] = prof[-1]["profile"]
                    results[name][c]["profile_wall_ms_per_token"] = prof[-1]["profile_wall_ms_per_token"]
    meta["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = render(results, configs, raw, meta) if results else ""
    if args.boundaries or args.boundaries_only:
        text += "\n\n" + boundaries(names, table, configs, args.decode_pos, budget=3.0)
    (OUT / f"{args.outfile}.md").write_text(text + "\n")
    (OUT / f"{args.outfile}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1,
                                                         default=str))
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
