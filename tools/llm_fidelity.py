#!/usr/bin/env python
"""How far pterun's LLM logits are from ExecuTorch's, and how far one float rounding moves them.

Two steps, the first with the reference virtualenv, the second with pterun's::

    .ref/bin/python tools/llm_fidelity.py record bench/models/llama130m_8da4w.pte /tmp/et.npz
    .venv/bin/python tools/llm_fidelity.py compare bench/models/llama130m_8da4w.pte /tmp/et.npz

``record`` runs a prefill of 8 tokens and 3 decode steps on ExecuTorch and saves the logits. ``compare`` runs the
same on pterun's NumPy and LiteRT engines and prints, per step, max |difference| / max |ExecuTorch logit| for each
engine against ExecuTorch and between the two engines, whether the argmax agrees, and a sensitivity probe: the
same run (LiteRT engine, delegates not merged) with every delegate output moved by one float32 rounding
(x * (1 +- 2**-23), random signs), against the unperturbed run. ExecuTorch's float kernels round differently from
pterun's (its own XNNPACK build, its attention and mean kernels), by about that much. When the probe moves the
logits as far as ExecuTorch is away, the distance is the model's sensitivity to rounding (a per-token int8
activation quantization flipping on the last bit), not a different computation.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PROMPT = np.arange(1, 9, dtype=np.int64)[None]
DECODE = 3


def _inputs():
    yield [PROMPT, np.array([0], dtype=np.int64)]
    for p in range(PROMPT.shape[1], PROMPT.shape[1] + DECODE):
        yield [np.array([[7 + p]], dtype=np.int64), np.array([p], dtype=np.int64)]


def record(model: str, out: str) -> None:
    import torch
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers llama:: kernels)
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(model).load_method("forward")
    logits = [method.execute([torch.from_numpy(a) for a in x])[0].numpy().copy() for x in _inputs()]
    np.savez(out, *logits)
    print(f"wrote {out}: {len(logits)} steps")


def _pterun_logits(model: str, engine: str, probe: bool | None = None) -> list:
    """Logits per step; ``probe`` False/True: delegates not merged, True also rounds each output once more."""
    from pterun import Runtime

    method = Runtime(num_threads=1, merge_delegates=probe is None).load_program(model, engine=engine).load_method("forward")
    if probe:  # a diagnostic: it reaches inside the loaded method to wrap each delegate's executor
        rng = np.random.default_rng(1)
        for ex in method._runner.executors:
            def rounded_once(args, run=ex.execute, ex=ex):
                run(args)
                for ext, _ in ex.outputs:
                    a = args[ext].array
                    a *= 1 + np.float32(2.0 ** -23) * rng.choice(np.array([-1, 1], np.float32), a.shape)
            ex.execute = rounded_once
    return [method.execute(x)[0] for x in _inputs()]


def compare(model: str, ref_path: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    ref = np.load(ref_path)
    ref = [ref[f"arr_{k}"] for k in range(len(ref.files))]
    got = {e: _pterun_logits(model, e) for e in ("numpy", "litert")}
    plain, probe = _pterun_logits(model, "litert", False), _pterun_logits(model, "litert", True)

    def rel(a, b):
        return float(np.abs(a.astype(np.float64) - b).max() / np.abs(b).max())

    def top(a):
        return a.reshape(-1, a.shape[-1]).argmax(-1)

    print("step | numpy vs ET | litert vs ET | numpy vs litert | argmax = ET | one-rounding probe")
    for k, want in enumerate(ref):
        n, l_ = got["numpy"][k], got["litert"][k]
        same = bool((top(n) == top(want)).all() and (top(l_) == top(want)).all())
        print(f"{k:4d} | {rel(n, want):.2e} | {rel(l_, want):.2e} | {rel(n, l_):.2e} | {same} | "
              f"{rel(probe[k], plain[k]):.2e}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("record", "compare"):
        sys.exit(__doc__)
    (record if sys.argv[1] == "record" else compare)(sys.argv[2], sys.argv[3])
