"""Random kernels: rand, randn, native_dropout.

ExecuTorch seeds a fresh generator from ``std::random_device`` on every call, so these ops are never
reproducible there; pterun draws from one :class:`numpy.random.Generator` seeded from OS entropy, which
:func:`seed` can reset for reproducible runs. Example::

    >>> import numpy as np
    >>> from pterun.kernels.random import native_dropout_out
    >>> out, mask = native_dropout_out(np.ones(3, np.float32), 0.5, False, None, None)
    >>> out.tolist(), mask.tolist()
    ([1.0, 1.0, 1.0], [True, True, True])
"""

from __future__ import annotations

import numpy as np

from pterun.kernels.registry import register

# created on first draw: importing numpy.random costs ~15 ms that a program without random ops need not pay
_RNG: np.random.Generator | None = None


def seed(value: int | None) -> None:
    """Reseed the generator behind rand, randn and dropout (None: fresh OS entropy)."""
    global _RNG
    _RNG = np.random.default_rng(value)


def _rng() -> np.random.Generator:
    if _RNG is None:
        seed(None)
    return _RNG


@register("aten::rand.out", foldable=False)
def rand_out(size, out):
    """rand.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _rng().random(tuple(size))
    # rounding to a narrow float type can reach 1.0; keep the [0, 1) contract of the output
    return np.minimum(x.astype(out.dtype), np.nextafter(np.array(1.0, out.dtype), 0)) if out.dtype.kind == "f" else x


@register("aten::randn.out", foldable=False)
def randn_out(size, out):
    """randn.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return _rng().standard_normal(tuple(size))


@register("aten::native_dropout.out", foldable=False)
def native_dropout_out(input, p, train, out0, out1):  # noqa: A002  (schema names)
    """native_dropout.out(Tensor input, float p, bool? train, *, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))"""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, got {p}")
    if (train is None or train) and p != 0:
        mask = _rng().random(input.shape) >= p
        # ExecuTorch zeroes dropped elements but does not rescale the kept ones by 1 / (1 - p)
        return np.where(mask, input, np.zeros((), input.dtype)), mask
    return input, np.ones(input.shape, bool)
