"""Random kernels: rand, randn, native_dropout.

ExecuTorch seeds a fresh generator from ``std::random_device`` on every call, so these ops are never
reproducible there. pterun's kernels draw from the :class:`numpy.random.Generator` passed as ``rng``: the
interpreter passes the method's own (seeded by ``Runtime(seed=)``, else from OS entropy); without one a kernel
draws from a fresh generator, as ExecuTorch does. There is no module-level generator. Example::

    >>> import numpy as np
    >>> from pterun.kernels.random import native_dropout_out
    >>> out, mask = native_dropout_out(np.ones(3, np.float32), 0.5, False, None, None)
    >>> out.tolist(), mask.tolist()
    ([1.0, 1.0, 1.0], [True, True, True])
"""

from __future__ import annotations

import numpy as np

from pterun.kernels._common import is_floating
from pterun.kernels.registry import register


def _generator(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng()


@register("aten::rand.out", random=True)
def rand_out(size, out, *, rng=None):
    """rand.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    x = _generator(rng).random(tuple(size))
    # rounding to a narrow float type can reach 1.0; keep the [0, 1) contract of the output
    if not is_floating(out.dtype):
        return x
    # both arguments of out's type (bfloat16 included): NumPy 1.x makes nextafter(float16 1.0, Python 0) a float64,
    # which rounds back to 1.0 in float16
    t = out.dtype.type
    return np.minimum(x.astype(out.dtype), np.nextafter(t(1), t(0)))


@register("aten::randn.out", random=True)
def randn_out(size, out, *, rng=None):
    """randn.out(SymInt[] size, *, Tensor(a!) out) -> Tensor(a!)"""
    return _generator(rng).standard_normal(tuple(size))


@register("aten::native_dropout.out", random=True)
def native_dropout_out(input, p, train, out0, out1, *, rng=None):  # noqa: A002  (schema names)
    """native_dropout.out(Tensor input, float p, bool? train, *, Tensor(a!) out0, Tensor(b!) out1) -> (Tensor(a!), Tensor(b!))"""
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, got {p}")
    if (train is None or train) and p != 0:
        mask = _generator(rng).random(input.shape) >= p
        # ExecuTorch zeroes dropped elements but does not rescale the kept ones by 1 / (1 - p)
        return np.where(mask, input, np.zeros((), input.dtype)), mask
    return input, np.ones(input.shape, bool)
