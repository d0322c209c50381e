"""``pterun generate``: stream text from an LLM ``.pte`` to stdout, statistics to stderr.

Example::

    $ pterun generate llama.pte --tokenizer tokenizer.json --prompt "Once upon a time" --max-new-tokens 64
    $ pterun generate llama.pte --tokenizer tokenizer.model --prompt "Hi" --temperature 0.7 --top-p 0.9 --seed 1

Ctrl-C stops generation cleanly; the statistics are printed all the same.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from pterun.cli.options import number, whole

__all__ = ["add_generate_parser", "cmd_generate"]


def add_generate_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``generate`` command to a ``pterun`` subparsers object."""
    g = subparsers.add_parser("generate", help="generate text with an LLM .pte (needs pterun[llm])",
                              description="Stream text from an ExecuTorch-exported LLM; statistics go to stderr.")
    g.add_argument("model", help="the .pte program (exported with ExecuTorch's LLM exporter)")
    g.add_argument("--tokenizer", required=True, metavar="FILE",
                   help="tokenizer.json (HuggingFace), a tiktoken file or a SentencePiece .model")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--max-new-tokens", type=whole(1, also=(-1,), note=" for the rest of the context"), default=256,
                   metavar="N", help="at most N new tokens (default 256; -1: the rest of the context)")
    g.add_argument("--temperature", type=number(0.0), default=0.8, metavar="T", help="0 is greedy (default 0.8)")
    g.add_argument("--top-p", type=number(0.0, 1.0, above=True, note=" (1 = off)"), default=0.9, metavar="P",
                   help="nucleus sampling mass (default 0.9; 1 = off)")
    g.add_argument("--top-k", type=whole(0), default=0, metavar="K",
                   help="sample among the K likeliest (default 0 = off)")
    g.add_argument("--seed", type=whole(0), default=None, metavar="S", help="seed for sampling (default: random)")
    g.add_argument("--data-path", action="append", default=[], metavar="FILE.ptd",
                   help="external data file(s) holding the weights")
    g.add_argument("--num-bos", type=whole(0), default=None, metavar="N",
                   help="BOS tokens before the prompt (default: 1 when the model has a BOS id)")
    g.add_argument("--echo", action="store_true", help="print the prompt before the generated text")
    g.set_defaults(fn=cmd_generate)
    return g


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def _report(runner, interrupted: bool) -> None:
    st = runner.stats
    s = st.seconds
    n_gen = st.num_generated_tokens + (1 if st.first_token_ms else 0)
    lines = [f"prompt tokens: {st.num_prompt_tokens}, generated tokens: {n_gen}"
             + ("  (interrupted)" if interrupted else "")]
    if st.first_token_ms:
        lines.append(f"time to first token: {s['ttft'] * 1000:.1f} ms")
        lines.append(f"prefill: {st.num_prompt_tokens / s['prefill']:.1f} tokens/s" if s["prefill"] > 0 else
                     "prefill: -")
        if st.num_generated_tokens and s["decode"] > 0:
            lines.append(f"decode: {st.num_generated_tokens / s['decode']:.1f} tokens/s "
                         f"({st.num_generated_tokens} tokens in {s['decode']:.2f} s)")
    lines.append(f"peak memory (RSS): {_peak_rss_mib():.1f} MiB")
    print("\n".join(lines), file=sys.stderr, flush=True)


def cmd_generate(args) -> int:
    """Run ``pterun generate``; returns the exit status (130 after Ctrl-C, like the shell)."""
    try:
        from pterun.llm import GenerationConfig, TextLLMRunner
        t0 = time.perf_counter()
        runner = TextLLMRunner(args.model, args.tokenizer, data_path=args.data_path or None,
                               runtime=getattr(args, "runtime", None))
        load_s = time.perf_counter() - t0
    except ImportError as e:
        print(f"pterun: error: {e}", file=sys.stderr)
        return 1
    num_bos = args.num_bos if args.num_bos is not None else (1 if runner.info.bos_id is not None else 0)
    cfg = GenerationConfig(echo=args.echo, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                           num_bos=num_bos, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    interrupted = False
    pieces = runner.stream(args.prompt, cfg)
    try:
        for piece in pieces:
            sys.stdout.write(piece)
            sys.stdout.flush()
    except KeyboardInterrupt:
        interrupted = True
        pieces.close()  # finishes the stats of the partial generation
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(f"model load: {load_s * 1000:.0f} ms", file=sys.stderr)
    _report(runner, interrupted)
    return 130 if interrupted else 0
