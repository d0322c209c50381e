#!/usr/bin/env python
"""What a decode token costs pterun besides LiteRT's invoke, in a generation: the interpreter's steps around the
merged call, the KV plan around its invoke, the plan's growths, and the runner between two calls.

    .venv/bin/python bench/token_overhead.py bench/models/llama130m_8da4w.pte --threads 2
    .venv/bin/python bench/token_overhead.py MODEL --tokenizer TOKENIZER.json --max-new 64 --rounds 3

It loads pterun's ``TextLLMRunner``, generates once to warm up, then ``--rounds`` greedy generations of
``--max-new`` tokens from ``llm_bench.py``'s prompt (``--repeat`` times it). Every ``forward`` call after the first
of a generation (the prefill) is a decode step, timed in parts in this process: the LiteRT invoke of the KV plan
(:mod:`pterun.delegates.xnnpack.litert_engine.kvplan`), the rest of the plan's ``execute`` apart from its
prepares (LiteRT's buffers bound anew when the positions in use grow, ``_prepare``), the interpreter (the method's
other steps, its inputs and outputs), and the runner (from the end of one call to the start of the next: sampling,
the stream decoder, stats). Each of the method's steps is timed too. The timers cost ~0.2 us each.

Why: a step alone runs at ExecuTorch's speed (``decode_steps.py``), a whole generation lower; this says where the
difference goes. It reaches into pterun's internals (the KV plan's invoker, the method's steps): a diagnosis, not
a contract. A method without a KV plan (the NumPy engine, another LLM layout) reports no invoke and no prepares.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


class Timers:
    """Seconds per part of the current call, and the decode calls' totals."""

    def __init__(self):
        self.call = dict.fromkeys(("invoke", "kv", "prepare"), 0.0)
        self.prepares = 0
        self.steps: dict[str, float] = {}
        self.step_now: dict[str, float] = {}

    def add(self, key: str, dt: float) -> None:
        self.call[key] += dt


def instrument(timers: Timers) -> None:
    """Time the KV plan's invoke, its execute and its prepares (before any model is loaded: the plan binds its
    invoker when it prepares)."""
    from pterun.delegates.xnnpack.litert_engine import kvplan

    clock, invoker, execute, prepare = time.perf_counter, kvplan.invoker, kvplan.KvPlan.execute, kvplan.KvPlan._prepare

    def timed_invoker(*args):
        run = invoker(*args)

        def timed_run():
            t = clock()
            run()
            timers.add("invoke", clock() - t)
        return timed_run

    def timed_execute(self, args):
        t = clock()
        execute(self, args)
        timers.add("kv", clock() - t)

    def timed_prepare(self, *args):
        t = clock()
        prepare(self, *args)
        timers.add("prepare", clock() - t)
        timers.prepares += 1

    kvplan.invoker, kvplan.KvPlan.execute, kvplan.KvPlan._prepare = timed_invoker, timed_execute, timed_prepare


def time_steps(method, timers: Timers) -> None:
    """Wrap each of the method's steps (not the delegate calls: the KV plan's timers hold those) with a timer."""
    clock = time.perf_counter
    for chain in method._runner.chains:
        steps, info = chain[1], chain[2]
        for i, step in enumerate(list(steps)):
            name = info[i][0]
            if name.startswith("delegate"):
                continue
            key = f"{i:02d} {name}"

            def timed(step=step, key=key):
                t = clock()
                step()
                timers.step_now[key] = timers.step_now.get(key, 0.0) + clock() - t
            steps[i] = timed


def generation(runner, prompt: str, config, timers: Timers) -> dict:
    """One timed generation: per decode call, its parts (seconds), and the gaps between calls."""
    clock, forward, calls = time.perf_counter, runner._forward, []

    def timed_forward(inputs):
        timers.call = dict.fromkeys(timers.call, 0.0)
        timers.step_now = {}
        t = clock()
        out = forward(inputs)
        calls.append((t, clock(), dict(timers.call), dict(timers.step_now)))
        return out

    runner.reset()
    runner._forward = timed_forward
    try:
        runner.generate(prompt, config)
    finally:
        runner._forward = forward
    decode = calls[1:]  # the first call is the prefill
    if not decode:
        raise SystemExit("the generation made no decode step: raise --max-new")
    n = len(decode)
    parts = {key: sum(c[2][key] for c in decode) / n for key in ("invoke", "kv", "prepare")}
    parts["forward"] = sum(end - start for start, end, _, _ in decode) / n
    gaps = [b[0] - a[1] for a, b in zip(calls[1:], calls[2:])]
    parts["runner"] = statistics.mean(gaps) if gaps else 0.0
    steps: dict[str, float] = {}
    for *_, per_step in decode:
        for key, dt in per_step.items():
            steps[key] = steps.get(key, 0.0) + dt / n
    return {"n": n, "parts": parts, "steps": steps}


def report(results: list[dict]) -> list[str]:
    """Medians over the generations, per decode token."""
    def med(get):
        return statistics.median(get(r) for r in results)

    ms = {key: med(lambda r, k=key: r["parts"][k]) * 1e3 for key in results[0]["parts"]}
    own = ms["forward"] - ms["invoke"] + ms["runner"]
    lines = [f"per decode token, median of {len(results)} generations ({results[0]['n']} decode steps each), ms:",
             f"  LiteRT invoke          {ms['invoke']:8.3f}",
             f"  KV plan besides it     {ms['kv'] - ms['invoke'] - ms['prepare']:8.3f}",
             f"  prepares (growths)     {ms['prepare']:8.3f}",
             f"  interpreter            {ms['forward'] - ms['kv']:8.3f}",
             f"  runner between calls   {ms['runner']:8.3f}",
             f"  pterun's own, all      {own:8.3f}  ({own / (own + ms['invoke']) * 100:.1f} % of a token)",
             "the interpreter's steps, us a call:"]
    for key in results[0]["steps"]:
        lines.append(f"  {key:40s} {med(lambda r, k=key: r['steps'].get(k, 0.0)) * 1e6:8.1f}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--tokenizer", default=str(ROOT / "bench" / "models" / "llm32k_tokenizer.json"))
    ap.add_argument("--threads", type=int, default=None, help="pterun's threads (default: its own default)")
    ap.add_argument("--max-new", type=int, default=64, help="tokens a generation makes (default 64)")
    ap.add_argument("--repeat", type=int, default=3, help="the prompt, repeated (default 3, as llm_bench's 130M)")
    ap.add_argument("--rounds", type=int, default=3, help="timed generations (default 3)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from llm_bench import PROMPT
    from pterun import Runtime
    from pterun.llm import GenerationConfig, TextLLMRunner

    timers = Timers()
    instrument(timers)
    runtime = Runtime(num_threads=args.threads) if args.threads else Runtime()
    runner = TextLLMRunner.from_program(runtime.load_program(args.model), args.tokenizer)
    config = GenerationConfig(echo=False, temperature=0.0, max_new_tokens=args.max_new, num_bos=1)
    prompt = PROMPT * args.repeat
    runner.generate(prompt, config)  # warm-up
    time_steps(runner.program.load_method("forward"), timers)
    results = [generation(runner, prompt, config, timers) for _ in range(args.rounds)]
    print(f"{Path(args.model).name}: {runtime.num_threads} thread(s)")
    print("\n".join(report(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
