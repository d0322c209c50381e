"""NumPy kernels, registered by exact ExecuTorch operator name in :data:`KERNELS`.

Importing this package imports every family module, which registers its kernels.

Example::

    >>> from pterun.kernels import KERNELS
    >>> "aten::add.out" in KERNELS
    True
"""

from pterun.kernels import (conv_pool, creation, elementwise, indexing, linalg, norm, prim,  # noqa: F401
                            reduction, shape)
from pterun.kernels.registry import KERNELS, register

__all__ = ["KERNELS", "register"]
