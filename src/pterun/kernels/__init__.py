"""NumPy kernels, registered by exact ExecuTorch operator name in :data:`KERNELS`.

Importing this package imports every family module, which registers its kernels, each with its whole contract
(fast path, folding, views, ...; see :class:`~pterun.kernels.registry.Kernel`) declared in its ``register``
call; ``manifest`` lists them by ExecuTorch kernel library. Example::

    >>> from pterun.kernels import KERNELS
    >>> "aten::add.out" in KERNELS
    True
"""

from pterun.kernels import (activation, compare, conv_pool, creation, elementwise, grad, image,  # noqa: F401
                            indexing, layout, linalg, llm, norm, pad, prim, quantized, quantized_embedding, random,
                            reduction, shape, sort, spectral, unary)
from pterun.kernels.registry import KERNELS, register

__all__ = ["KERNELS", "register"]
