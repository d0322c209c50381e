"""The tolerance policy pterun is held to against ExecuTorch's outputs (stated once, in the README too).

* float programs (portable, XNNPACK fp32): ``max|pterun - reference| <= 1e-4 * max|reference|``; where
  ExecuTorch's own portable and XNNPACK programs of the same weights differ by more than half that (a deep
  random network can amplify float32 rounding to 1e-4), the bound is twice their difference: a third float32
  evaluation order is expected to land about as far from either as they are from each other. The line says so;
* static int8 programs (PT2E): every element within one output quantization step, ``max|diff| <= scale``
  (the output's dequantize scale; a hair of float slack for the dequantization itself). An output that is
  not on an int8 grid (no recorded scale and more than 256 distinct values: a log-softmax or an upsampling
  computed in float after the int8 part) has no step: it is held to the float bound;
* dynamically quantized programs (8da4w / 8da8w: float outputs of int8 x intN GEMMs): within ``1e-3`` of
  scale, the bound the issue sets for an 8da4w Llama's logits;
* LLM greedy decoding on a trained model: the same tokens (checked by the LLM tests, not by the zoo).

No torch here: ``tools/zoo/run.py`` imports this with torch poisoned.
"""

from __future__ import annotations

import numpy as np

FLOAT_REL = 1e-4
DYNAMIC_REL = 1e-3
STEP_SLACK = 1e-3  # fraction of a step: the dequantized values themselves are rounded float32
INT8_CODES = 256  # a per-tensor int8 output has at most this many distinct values


def estimate_step(values: np.ndarray) -> float | None:
    """The smallest gap between distinct values: the quantization step of a dequantized int8 output."""
    u = np.unique(values.astype(np.float64))
    if u.size < 2:
        return None
    return float(np.min(np.diff(u)))


def check(kind: str, actual: np.ndarray, expected: np.ndarray, scale: float | None = None,
          floor: float | None = None) -> tuple[bool, str]:
    """(passes, measurement) for one output under the policy of ``kind`` (float, static, dynamic); ``floor``
    is the reference's own float disagreement (portable vs XNNPACK) relative to scale, when known."""
    if actual.shape != expected.shape:
        return False, f"shape {actual.shape} != {expected.shape}"
    if expected.dtype.kind != "f":
        bad = int(np.count_nonzero(actual != expected))
        return bad == 0, f"{bad} of {expected.size} differ"
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(e)):
        return False, "NaN positions differ"
    finite = np.isfinite(e)
    err = np.abs(a - e)[finite]
    worst = float(err.max(initial=0.0))
    if kind == "static" and not scale and np.unique(e[finite]).size > INT8_CODES:
        kind, tail = "float", " (float output of an int8 program)"  # no int8 grid, so no step to count in
    else:
        tail = ""
    if kind == "static":
        step = scale if scale else estimate_step(e)
        if step is None:
            return worst == 0.0, f"constant output, max diff {worst:.3g}"
        steps = worst / step
        off = float(np.mean(err > step * 0.5)) if err.size else 0.0
        return steps <= 1 + STEP_SLACK, f"{steps:.2f} steps ({off:.1%} off)"
    ref_scale = max(float(np.abs(e[finite]).max(initial=0.0)), 1e-30)
    rel = worst / ref_scale
    limit = FLOAT_REL if kind == "float" else DYNAMIC_REL
    if kind == "float" and floor is not None and 2 * floor > limit:
        return rel <= 2 * floor, f"{rel:.1e} of scale (ExecuTorch's portable vs XNNPACK: {floor:.1e})"
    return rel <= limit, f"{rel:.1e} of scale{tail}"
