"""NumPy kernels, registered by exact ExecuTorch operator name in :data:`KERNELS`.

Each family module (``elementwise``, ``conv_pool``, ...) registers its kernels when imported, each with its whole
contract (fast path, folding, views, ...; see :class:`~pterun.kernels.registry.Kernel`) declared in its
``register`` call; ``manifest`` lists them by ExecuTorch kernel library. A method's load imports only the
families of the operators it calls (:mod:`pterun.kernels.families`); asking this package for ``KERNELS`` imports
all of them. Example::

    >>> from pterun.kernels import KERNELS
    >>> "aten::add.out" in KERNELS
    True
"""

from pterun.kernels.registry import register

__all__ = ["KERNELS", "register"]


def __getattr__(name: str):
    if name == "KERNELS":  # every family imported, then the registry itself is the attribute
        from pterun.kernels.registry import load_all
        globals()["KERNELS"] = table = load_all()
        return table
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
