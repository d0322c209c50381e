"""Decode steps of an exported LLM from given positions: ms a step, pterun against ExecuTorch, fresh processes.

Each worker loads the program, prefills ``--pos`` random tokens in one call, then times ``--steps`` decode steps
of one token each (``method.execute`` alone: no tokenizer, no sampling) and prints the mean. The driver alternates
the runtimes over ``--rounds`` and reports the median of each, and their ratio. Where ``llm_bench.py`` measures a
whole generation from one prompt length, this shows how a step's cost grows with the position.

    .venv/bin/python bench/decode_steps.py bench/models/llama130m_8da4w.pte --pos 30 130 300 --ref .ref/bin/python
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(runtime: str, model: str, pos: int, steps: int, threads: int) -> float:
    """Mean ms of ``steps`` decode steps from position ``pos`` (after a ``pos``-token prefill)."""
    import numpy as np

    rng = np.random.default_rng(0)
    prompt = rng.integers(0, 256, (1, pos))
    if runtime == "pterun":
        import pterun

        method = pterun.Runtime(num_threads=threads).load_program(model).load_method("forward")

        def step(tokens, at):
            return method.execute([tokens, np.array([at])])
    else:
        import torch
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime

        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (the llama:: kernels)
        import executorch.kernels.quantized  # noqa: F401

        _unsafe_reset_threadpool(threads)
        method = Runtime.get().load_program(model).load_method("forward")

        def step(tokens, at):
            return method.execute([torch.from_numpy(tokens), torch.tensor([at])])
    step(prompt, 0)
    token = np.array([[7]])
    t = time.perf_counter()
    for i in range(pos, pos + steps):
        step(token, i)
    return (time.perf_counter() - t) / steps * 1e3


def _run(python: str, runtime: str, args, pos: int) -> float:
    cmd = [python, __file__, "--worker", runtime, args.model, "--pos", str(pos), "--steps", str(args.steps),
           "--threads", str(args.threads)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")} if runtime == "pterun" else dict(os.environ)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode:
        raise SystemExit(f"{runtime} worker failed: {out.stderr.strip()[-500:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--pos", type=int, nargs="+", default=[30, 130, 300], help="first decode positions")
    ap.add_argument("--steps", type=int, default=64, help="decode steps timed (default 64)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the runtimes alternating (default 3)")
    ap.add_argument("--ref", default=None, help="the reference venv's python (ExecuTorch); none: pterun alone")
    ap.add_argument("--worker", choices=["pterun", "executorch"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(f"{worker(args.worker, args.model, args.pos[0], args.steps, args.threads):.4f}")
        return 0
    runtimes = {"pterun": sys.executable}
    if args.ref:
        runtimes["executorch"] = args.ref
    print(f"{Path(args.model).name}: ms a decode step, mean of {args.steps} steps, {args.threads} thread(s), median "
          f"of {args.rounds} rounds")
    for pos in args.pos:
        got = {name: [] for name in runtimes}
        for r in range(args.rounds):
            for name in (list(runtimes) if r % 2 == 0 else list(runtimes)[::-1]):
                got[name].append(_run(runtimes[name], name, args, pos))
        med = {name: statistics.median(v) for name, v in got.items()}
        line = f"positions {pos}-{pos + args.steps - 1}: " + ", ".join(f"{n} {m:.2f}" for n, m in med.items())
        if "executorch" in med:
            line += f"; pterun / ExecuTorch time {med['pterun'] / med['executorch']:.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
