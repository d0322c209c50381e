#!/usr/bin/env python
"""An exported LLM's logits, ExecuTorch against pterun: a prefill and a few greedy decode steps.

Two steps, like the rest of the zoo: record ExecuTorch's logits with the reference toolchain, then compare
pterun's (torch is never imported by the second step)::

    .ref/bin/python tools/zoo/llm_logits.py record bench/models/llama130m_8da4w.pte
    python tools/zoo/llm_logits.py check bench/models/llama130m_8da4w.pte --engine numpy

The program is an ``export_llama`` one (``forward(tokens [1, n], input_pos [1]) -> logits [1, vocab]`` with a KV
cache, e.g. from ``tools/export_llm_bench.py``). ``record`` feeds a seeded random prompt, then the greedy token
of each step, and writes the prompt, the tokens and the logits to ``--ref`` (default: the zoo cache's
``llm/<program name>.npz``). ``check`` feeds the same tokens to pterun and prints, per step, the largest
difference relative to the largest ExecuTorch logit and whether the greedy tokens agree.

``check --probe`` also measures how far one float32 rounding moves pterun's own logits: the same run (delegates
not merged) with every delegate output multiplied by (1 +- 2**-23), random signs, against the unperturbed run.
ExecuTorch's float kernels (its XNNPACK build, its attention) round differently from pterun's by about that much;
when the probe moves the logits as far as ExecuTorch is away, the distance is the model's sensitivity to rounding
(a dynamic int8 quantization flipping on the last bit), not a different computation.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np


def default_ref(pte: Path) -> Path:
    root = Path(os.environ.get("PTERUN_ZOO_CACHE") or Path.home() / ".cache" / "pterun-zoo").expanduser()
    return root / "llm" / f"{pte.stem}.npz"


def steps(execute, prompt: np.ndarray, tokens) -> list[tuple[str, np.ndarray]]:
    """[(step name, logits)]: the prefill, then one decode step per token of ``tokens`` (None: greedy)."""
    out = [("prefill", execute(prompt, 0))]
    pos = prompt.shape[1]
    for k in range(len(tokens)):
        tok = int(out[-1][1].argmax()) if tokens[k] is None else int(tokens[k])
        out.append((f"decode {k}", execute(np.array([[tok]], np.int64), pos)))
        pos += 1
    return out


def record(pte: Path, ref: Path, prompt_len: int, decode: int, vocab_seed: int) -> None:
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  registers llama:: kernels
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(str(pte)).load_method("forward")

    def execute(tokens, pos):
        return method.execute([torch.from_numpy(tokens), torch.tensor([pos])])[0].numpy()

    vocab = execute(np.zeros((1, 1), np.int64), 0).shape[-1]
    method = Runtime.get().load_program(str(pte)).load_method("forward")  # a fresh KV cache
    prompt = np.random.default_rng(vocab_seed).integers(0, vocab, (1, prompt_len)).astype(np.int64)
    out = steps(execute, prompt, [None] * decode)
    tokens = [int(logits.argmax()) for _, logits in out[:-1]]
    ref.parent.mkdir(parents=True, exist_ok=True)
    np.savez(ref, prompt=prompt, tokens=np.array(tokens, np.int64), **{f"logits{k}": l for k, (_, l) in
                                                                        enumerate(out)})
    print(f"recorded {len(out)} steps of {pte.name} to {ref}")


def _probe_method(pte: Path, engine: str | None, rounded: bool):
    """forward with delegates not merged; ``rounded``: each delegate output rounded once more (a diagnostic: it
    wraps the loaded method's executors)."""
    from pterun import Runtime

    rt = Runtime(merge_delegates=False, **({"engine": engine} if engine else {}))
    method = rt.load_program(str(pte)).load_method("forward")
    if rounded:
        rng = np.random.default_rng(1)
        for ex in {id(e): e for e in method._runner.executors}.values():
            def once_more(args, run=ex.execute, ex=ex):
                run(args)
                for ext, *_ in ex.outputs:
                    a = args[ext].array
                    a *= 1 + np.float32(2.0 ** -23) * rng.choice(np.array([-1, 1], np.float32), a.shape)
            ex.execute = once_more
    return method


def check(pte: Path, ref: Path, engine: str | None, probe: bool = False) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from pterun import Runtime

    with np.load(ref) as z:
        prompt, tokens = z["prompt"], z["tokens"]
        want = [z[f"logits{k}"] for k in range(len(tokens) + 1)]
    program = Runtime.get().load_program(str(pte), engine=engine) if engine else Runtime.get().load_program(str(pte))
    method = program.load_method("forward")

    def execute(tokens_, pos):
        return np.asarray(method.execute([tokens_, np.array([pos], np.int64)])[0])

    got = steps(execute, prompt, list(tokens))
    probes = [None] * len(got)
    if probe:
        runs = []
        for rounded in (False, True):
            m = _probe_method(pte, engine, rounded)
            runs.append(steps(lambda t, p, m=m: np.asarray(m.execute([t, np.array([p], np.int64)])[0]), prompt,
                              list(tokens)))
        probes = [float(np.abs(b.astype(np.float64) - a).max() / np.abs(a).max()) for (_, a), (_, b) in zip(*runs)]
    worst = 0.0
    for (name, g), w, pr in zip(got, want, probes):
        rel = float(np.abs(g.astype(np.float64) - w).max() / np.abs(w).max())
        worst = max(worst, rel)
        extra = "" if pr is None else f"; one rounding more moves pterun's own by {pr:.2e}"
        print(f"{name:10s} {rel:.2e} of scale, greedy token {'agrees' if g.argmax() == w.argmax() else 'differs'}"
              f"{extra}")
    assert "torch" not in sys.modules, "pterun imported torch"
    print(f"worst {worst:.2e} of scale ({engine or 'default'} engine)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("record", "check"))
    ap.add_argument("pte", type=Path)
    ap.add_argument("--ref", type=Path, help="ExecuTorch's recorded logits (default: the zoo cache's llm/NAME.npz)")
    ap.add_argument("--prompt", type=int, default=16, help="prompt length for record (default 16)")
    ap.add_argument("--decode", type=int, default=3, help="greedy decode steps for record (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompt (default 0)")
    ap.add_argument("--engine", choices=("numpy", "litert", "auto"), help="pterun's XNNPACK engine for check")
    ap.add_argument("--probe", action="store_true", help="check: also the one-rounding sensitivity probe")
    args = ap.parse_args(argv)
    ref = args.ref or default_ref(args.pte)
    if args.mode == "record":
        record(args.pte, ref, args.prompt, args.decode, args.seed)
        return 0
    return check(args.pte, ref, args.engine, args.probe)


if __name__ == "__main__":
    sys.exit(main())
