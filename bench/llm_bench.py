#!/usr/bin/env python
"""Text generation, pterun vs ExecuTorch's ``TextLLMRunner``, on the same ``.pte`` files in one run.

    .venv/bin/python bench/llm_bench.py                       # everything (exports bench/models/ if missing)
    .venv/bin/python bench/llm_bench.py --models bench_xnn    # some models
    .venv/bin/python bench/llm_bench.py --profile             # + where pterun's decode time goes, per operator

Models: ``bench_xnn`` / ``bench_8da4w`` (stories15M's shape, 15.4M random parameters, XNNPACK fp32 and 8-bit
dynamic activations / 4-bit weights; written to ``bench/models/`` by ``tools/export_llm_fixtures.py --bench``
with the reference venv, git-ignored) and the tiny test fixtures ``tiny_{sdpa,xnn,8da4w}``.

Every (model, runtime) pair runs in a fresh process (pterun with this venv, ExecuTorch with ``--ref``), ``--rounds``
times, alternating. pterun runs twice: as the environment leaves NumPy's BLAS (``pterun``) and with BLAS pinned to
one thread (``pterun-1t``), and a third time on two threads of its own (``pterun-2t``, ``PTERUN_NUM_THREADS=2``: BLAS
held at one thread); ExecuTorch uses its own threadpool as it sets it up. In the process: construct the
runner (``load``), one short warm-up generation, ``reset()``, then one timed greedy generation, timed from its
``Stats`` (the same fields and formulas for both runtimes):

* ``ttft``: ``first_token_ms - inference_start_ms`` (tokenize + prefill + first sample);
* ``prefill tok/s``: prompt tokens / ttft;  ``decode tok/s``: decode steps / (``inference_end_ms -
  prompt_eval_end_ms``), ExecuTorch's own ``decode_token_per_sec`` formula (1 ms clock: the tiny models'
  reference numbers are at the clock's resolution);
* ``peak RSS``: ``ru_maxrss`` of the process at the end (interpreter, imports, model, caches).

The median over the rounds is reported, per metric; ``llm.json`` keeps every round. Results go to
``bench/out/llm.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
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


def model_table() -> dict:
    return {
        "bench_xnn": (MODELS / "bench_xnn.pte", MODELS / "llm_tokenizer.json", 4, 128),
        "bench_8da4w": (MODELS / "bench_8da4w.pte", MODELS / "llm_tokenizer.json", 4, 128),
        "tiny_sdpa": (FIXTURES / "kv_sdpa.pte", FIXTURES / "tokenizer.json", 1, 40),
        "tiny_xnn": (FIXTURES / "kv_xnn.pte", FIXTURES / "tokenizer.json", 1, 40),
        "tiny_8da4w": (FIXTURES / "kv_8da4w.pte", FIXTURES / "tokenizer.json", 1, 40),
    }  # name -> (pte, tokenizer, prompt repeats, max new tokens)


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
    t0 = time.perf_counter()
    runner = TextLLMRunner(str(args.model), str(args.tokenizer))
    load_s = time.perf_counter() - t0
    prompt = PROMPT * args.repeat
    runner.generate(prompt, GenerationConfig(echo=False, temperature=0.0, max_new_tokens=4, num_bos=1))  # warm-up
    runner.reset()
    prof = None
    if args.profile and args.runtime == "pterun":
        sys.path.insert(0, str(ROOT / "bench"))
        from run_one import install_profiler
        prof = install_profiler(runner.program.load_method("forward"))
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
        "stats": st,
    }
    if prof is not None:
        steps = n + 1
        result["profile"] = sorted(((op, t / steps * 1e3, c / steps) for op, (t, c) in prof.by_op.items()),
                                   key=lambda r: -r[1])
        result["profile_wall_ms_per_token"] = wall / steps * 1e3
    Path(args.out).write_text(json.dumps(result))


# -- the driver ------------------------------------------------------------------------------------------------
#: row name -> (worker runtime, environment overrides). ``pterun-1t`` pins NumPy's BLAS to one thread: on small
#: machines OpenBLAS's threads spin against the interpreter's own thread (see the README of bench/)
ROWS = {"pterun": ("pterun", {}),
        "pterun-1t": ("pterun", {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
        # pterun's own threads: large products split over 2 threads, BLAS held at one (pterun.threads)
        "pterun-2t": ("pterun", {"PTERUN_NUM_THREADS": "2"}),
        "executorch": ("executorch", {})}


def run_one(python: str, row: str, model: str, spec, profile: bool) -> dict:
    pte, tok, repeat, max_new = spec
    runtime, env = ROWS[row]
    out = OUT / f".llm_{row}_{model}.json"
    out.unlink(missing_ok=True)
    cmd = [python, __file__, "--worker", runtime, "--model", str(pte), "--tokenizer", str(tok), "--repeat",
           str(repeat), "--max-new", str(max_new), "--out", str(out)] + (["--profile"] if profile else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env={**os.environ, **env})
    if proc.returncode != 0 or not out.exists():
        return {"runtime": row, "error": (proc.stderr or proc.stdout)[-2000:]}
    return dict(json.loads(out.read_text()), runtime=row)


def median(rounds: list[dict]) -> dict:
    """The median of every metric over the rounds (this machine is noisy: one round can be 3x off)."""
    ok = [r for r in rounds if "error" not in r]
    if not ok:
        return rounds[-1]
    m = dict(ok[0], rounds=ok)
    for key in ("ttft_s", "load_s", "peak_rss_mb", "prefill_tps", "decode_tps"):
        m[key] = statistics.median(r[key] for r in ok)
    return m


def render(results: dict) -> str:
    lines = ["| model | runtime | load s | TTFT ms | prefill tok/s | decode tok/s | peak RSS MB |",
             "|---|---|---|---|---|---|---|"]
    ratios = []
    for model, per in results.items():
        for rt in ROWS:
            r = per.get(rt)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {model} | {rt} | error: {r['error'].strip().splitlines()[-1][:80]} | | | | |")
                continue
            lines.append(f"| {model} | {rt} | {r['load_s']:.2f} | {r['ttft_s'] * 1e3:.1f} | {r['prefill_tps']:.0f} | "
                         f"{r['decode_tps']:.1f} | {r['peak_rss_mb']:.0f} |")
        e = per.get("executorch")
        for row in ("pterun", "pterun-1t", "pterun-2t"):
            p = per.get(row)
            if p and e and "error" not in p and "error" not in e:
                ratios.append(f"| {model} | {row} | {p['decode_tps'] / e['decode_tps']:.2f}x | "
                              f"{p['prefill_tps'] / e['prefill_tps']:.2f}x | {p['ttft_s'] / e['ttft_s']:.2f}x | "
                              f"{p['peak_rss_mb'] / e['peak_rss_mb']:.2f}x |")
    text = "\n".join(lines)
    if ratios:
        text += ("\n\npterun / ExecuTorch (targets for bench_xnn and bench_8da4w: decode >= 0.5x, peak RSS <= 0.25x)"
                 "\n\n| model | pterun | decode | prefill | TTFT | peak RSS |\n|---|---|---|---|---|---|\n"
                 + "\n".join(ratios))
    for model, per in results.items():
        prof = per.get("pterun-1t", {}).get("profile")
        if prof:
            wall = per["pterun-1t"]["profile_wall_ms_per_token"]
            text += (f"\n\npterun-1t profile, {model} (ms per generated token, prefill included; wall "
                     f"{wall:.2f} ms):\n\n"
                     "| operator | ms/token | calls/token |\n|---|---|---|\n"
                     + "\n".join(f"| {op} | {ms:.3f} | {c:.1f} |" for op, ms, c in prof[:12]))
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", choices=["pterun", "executorch"], help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--tokenizer", help=argparse.SUPPRESS)
    ap.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--max-new", type=int, default=64, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*", help="model names (default: all)")
    ap.add_argument("--ref", default=str(ROOT / ".ref" / "bin" / "python"), help="the reference venv's python")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="also profile pterun's decode per operator")
    args = ap.parse_args(argv)
    if args.worker:
        args.runtime = args.worker
        worker(args)
        return 0
    table = model_table()
    names = args.models or list(table)
    if any(n.startswith("bench_") and not table[n][0].exists() for n in names):
        print("exporting bench/models/ with the reference venv (a few minutes) ...", flush=True)
        subprocess.run([args.ref, str(ROOT / "tools" / "export_llm_fixtures.py"), "--bench", str(MODELS)], check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in names:
        rounds = {row: [] for row in ROWS}
        for i in range(args.rounds):
            for rt in ROWS:
                py = args.ref if ROWS[rt][0] == "executorch" else sys.executable
                r = run_one(py, rt, name, table[name], args.profile and rt == "pterun-1t" and i == args.rounds - 1)
                rounds[rt].append(r)
                print(f"{name} {rt} round {i}: " + (f"decode {r['decode_tps']:.1f} tok/s, ttft "
                      f"{r['ttft_s'] * 1e3:.1f} ms, rss {r['peak_rss_mb']:.0f} MB" if "error" not in r else
                      "ERROR " + r["error"][-300:]), flush=True)
        results[name] = {rt: median(rs) for rt, rs in rounds.items()}
        prof = [r for r in rounds["pterun-1t"] if "profile" in r]
        if prof:
            results[name]["pterun-1t"]["profile"] = prof[-1]["profile"]
            results[name]["pterun-1t"]["profile_wall_ms_per_token"] = prof[-1]["profile_wall_ms_per_token"]
    text = render(results)
    (OUT / "llm.md").write_text(text + "\n")
    (OUT / "llm.json").write_text(json.dumps(results, indent=1))
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
