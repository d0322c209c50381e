"""Small immutable records for pterun's load-time descriptions (plain classes: ``dataclasses`` costs ~5 ms to
import, and ``import pterun`` stays light).

Example::

    >>> class Point(Record):
    ...     __slots__ = ("x", "y")
    ...     _defaults = (0,)
    >>> Point(1)
    Point(x=1, y=0)
"""

from __future__ import annotations

__all__ = ["Record"]


class Record:
    """A small immutable record (plain classes keep ``dataclasses`` out of ``import pterun``)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        names = self.__slots__
        values = dict(zip(names, args), **kwargs)
        for name, default in zip(reversed(names), reversed(self._defaults)):
            values.setdefault(name, default)
        for name in names:
            object.__setattr__(self, name, values[name])

    _defaults: tuple = ()

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __hash__(self):
        return hash(tuple(getattr(self, n) for n in self.__slots__))

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self.__slots__)})"
