#!/usr/bin/env python
"""Text generation, pterun against ExecuTorch's ``TextLLMRunner`` in ONE process, alternating round by round: a
decode ratio the shared host's drift cannot bias.

    # once: pterun's dependencies (its LiteRT engine, its tokenizer library) in the reference venv
    .ref/bin/pip install 'ai-edge-litert>=2.3,<2.4' 'ml_dtypes>=0.4,<0.7' 'threadpoolctl>=3' tokenizers
    PYTHONPATH=src .ref/bin/python bench/llm_paired.py --models llama130m_8da4w --threads 1 --rounds 16

Why: ``llm_bench.py`` runs each runtime in fresh processes, which is what a user sees (load, peak memory), but on a
2-core shared host a process's speed can move by 20-40 % from one minute to the next (session 31's AMD EPYC),
so a one-thread ratio read from a few rounds is worth about that much. Here both runners are loaded once, side
by side, and each round generates with both (the order reversed every other round): both see the same minutes
of the host, and each round gives its own ratio. The report is the median of those ratios and their spread.

What it does per model: load both runners (pterun's on a ``Runtime(num_threads=N)``; ExecuTorch's threadpool
resized to N before anything runs), one short warm-up generation each, then ``--rounds`` rounds of
``reset()`` + one greedy generation of ``--max-new`` tokens from the prompt ``llm_bench.py`` uses, timed from
each runner's ``Stats`` with ExecuTorch's own formulas (decode tok/s = decode steps / (inference end - prompt
eval end)). Between two generations the process sleeps 0.2 s, so ExecuTorch's threadpool workers are asleep
before pterun runs.

Caveats: torch is imported in this process (ExecuTorch needs it); pterun does not use it: its outputs stay
NumPy arrays, decided when it loads. Memory is not measured (both runtimes share the process: see
``llm_bench.py``). pterun must run on LiteRT here (the script refuses otherwise): the reference venv needs
``ai-edge-litert``, as above.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
_pool = None  # the thread count ExecuTorch's threadpool was resized to
_out = sys.stdout  # where the table goes (fd 1 is closed to ExecuTorch's prints once its runner loads)


def _decode(stats) -> tuple[float, float]:
    """(decode tok/s, prefill tok/s) from a runner's Stats, ExecuTorch's formulas."""
    st = json.loads(stats.to_json_string())
    decode_ms = st["inference_end_ms"] - st["prompt_eval_end_ms"]
    ttft_ms = st["first_token_ms"] - st["inference_start_ms"]
    return st["generated_tokens"] / max(decode_ms, 1) * 1e3, st["prompt_tokens"] / max(ttft_ms, 1) * 1e3


def _runners(pte: Path, tok: Path, threads: int):
    """(pterun's runner and config class, ExecuTorch's runner and config class)."""
    # ExecuTorch's runner printf()s every piece and its report: fd 1 goes to nothing, the table to a dup of it
    global _out, _pool
    if _out is sys.stdout:  # once per process
        sys.stdout.flush()
        _out = os.fdopen(os.dup(1), "w")
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    except ImportError as e:
        raise SystemExit(f"ExecuTorch is not importable here ({e}): run this with the reference venv's python, "
                         "PYTHONPATH=src") from e
    if _pool is None:  # once, before anything runs (a second resize has hung)
        _unsafe_reset_threadpool(threads)
        _pool = threads
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig as EtConfig
    from executorch.extension.llm.runner import TextLLMRunner as EtRunner

    import pterun
    from pterun.llm import GenerationConfig, TextLLMRunner
    from run_one import pterun_engines

    pt = TextLLMRunner(pte, tok, runtime=pterun.Runtime(num_threads=threads))
    engines = pterun_engines(pt.program, pt.program.load_method("forward"))
    if engines is None or any(e != "litert" for e in engines):
        raise SystemExit(f"pterun runs {pte.name} on {sorted(set(engines or ['numpy']))}, not LiteRT: install "
                         "'ai-edge-litert>=2.3,<2.4' in this venv")
    return (pt, GenerationConfig), (EtRunner(str(pte), str(tok)), EtConfig)


def _generate(runner, config_cls, prompt: str, max_new: int):
    stats = []
    runner.reset()
    # no token callback: ExecuTorch's binding raises UnicodeDecodeError on a piece that splits a character
    runner.generate(prompt, config_cls(echo=False, temperature=0.0, max_new_tokens=max_new, num_bos=1), None,
                    stats.append)
    return _decode(stats[0])


def run(name: str, spec, threads: int, rounds: int, max_new: int | None) -> dict:
    from llm_bench import PROMPT

    pte, tok, repeat, model_max_new = spec
    prompt, max_new = PROMPT * repeat, max_new or model_max_new
    (pt, pt_cfg), (et, et_cfg) = _runners(pte, tok, threads)
    for runner, cfg in ((pt, pt_cfg), (et, et_cfg)):
        _generate(runner, cfg, prompt, 4)  # warm-up (ExecuTorch loads its method in its first generate)
    got = {"pterun": [], "executorch": []}
    for r in range(rounds):
        order = (("pterun", pt, pt_cfg), ("executorch", et, et_cfg))
        for who, runner, cfg in (order if r % 2 == 0 else order[::-1]):
            time.sleep(0.2)
            got[who].append(_generate(runner, cfg, prompt, max_new))
    ratios = [p[0] / e[0] for p, e in zip(got["pterun"], got["executorch"])]
    prefill = [p[1] / e[1] for p, e in zip(got["pterun"], got["executorch"])]
    return {"model": name, "threads": threads, "rounds": rounds, "max_new": max_new,
            "pterun_decode_tps": statistics.median(p[0] for p in got["pterun"]),
            "executorch_decode_tps": statistics.median(e[0] for e in got["executorch"]),
            "decode_ratio": statistics.median(ratios), "decode_ratio_range": (min(ratios), max(ratios)),
            "prefill_ratio": statistics.median(prefill), "raw": got}


def main(argv=None) -> int:
    from llm_bench import REALISTIC, model_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["llama130m_8da4w"], help=f"names (from {' '.join(REALISTIC)}, "
                    "and llm_bench.py's others)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--max-new", type=int, default=None, help="tokens to generate (default: llm_bench.py's count)")
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)
    table = model_table()
    unknown = [m for m in args.models if m not in table]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; known: {sorted(table)}")
    missing = [str(table[m][0]) for m in args.models if not table[m][0].exists()]
    if missing:
        ap.error(f"missing {missing}: export them with .ref/bin/python tools/export_llm_bench.py (see llm_bench.py)")
    if args.threads < 1 or args.rounds < 1:
        ap.error("--threads and --rounds must be at least 1")
    results = []
    print("| model | threads | rounds | tokens | pterun decode tok/s | ExecuTorch decode tok/s | pterun / ExecuTorch "
          "(median of rounds) | range | prefill ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for name in args.models:
        res = run(name, table[name], args.threads, args.rounds, args.max_new)
        results.append(res)
        lo, hi = res["decode_ratio_range"]
        print(f"| {name} | {args.threads} | {args.rounds} | {res['max_new']} | {res['pterun_decode_tps']:.1f} | "
              f"{res['executorch_decode_tps']:.1f} | {res['decode_ratio']:.2f}× | {lo:.2f}-{hi:.2f}× | "
              f"{res['prefill_ratio']:.2f}× |", file=_out, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
