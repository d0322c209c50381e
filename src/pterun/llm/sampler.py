"""Next-token sampling from a row of logits: greedy, temperature, top-k and top-p, with an explicit RNG.

Temperature 0 is argmax (ties go to the lowest id, as ExecuTorch's sampler does). Otherwise the logits are
divided by the temperature, optionally cut to the ``top_k`` largest, turned into probabilities, cut to the
smallest set whose mass reaches ``top_p`` and sampled with the given ``np.random.Generator``. Example::

    >>> import numpy as np
    >>> from pterun.llm.sampler import Sampler
    >>> logits = np.array([0.0, 3.0, 1.0], np.float32)
    >>> Sampler(0.0).sample(logits)
    1
    >>> s = Sampler(1.0, top_k=2, rng=np.random.default_rng(0))
    >>> sorted({s.sample(logits) for _ in range(50)})
    [1, 2]
"""

from __future__ import annotations

import numpy as np

__all__ = ["Sampler"]


class Sampler:
    """Samples token ids. ``top_k=0`` and ``top_p`` outside (0, 1) switch those filters off."""

    def __init__(self, temperature: float = 0.0, *, top_k: int = 0, top_p: float = 1.0,
                 rng: np.random.Generator | None = None, seed: int | None = None):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}")
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.rng = rng if rng is not None else np.random.default_rng(seed)

    def sample(self, logits: np.ndarray) -> int:
        """One token id from a 1-D row of logits."""
        if self.temperature == 0.0:
            return int(np.argmax(logits))
        x = logits.astype(np.float64) / self.temperature
        ids = None
        k = self.top_k
        if 0 < k < x.size:
            ids = np.argpartition(x, x.size - k)[x.size - k:]
            x = x[ids]
        x -= x.max()
        p = np.exp(x)
        p /= p.sum()
        if 0.0 < self.top_p < 1.0:
            # the candidates can only be tokens above (1 - top_p) / (n - 1): sort just those (ExecuTorch's trick)
            cand = np.flatnonzero(p >= (1.0 - self.top_p) / max(p.size - 1, 1))
            order = cand[np.argsort(-p[cand], kind="stable")]
            cum = np.cumsum(p[order])
            keep = order[: int(np.searchsorted(cum, self.top_p)) + 1]
            ids = keep if ids is None else ids[keep]
            p = p[keep] / cum[len(keep) - 1]
        choice = int(np.searchsorted(np.cumsum(p), self.rng.random() * p.sum(), side="right"))
        choice = min(choice, p.size - 1)
        return int(ids[choice]) if ids is not None else choice
